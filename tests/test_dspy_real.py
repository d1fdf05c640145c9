"""A real DSPy program on a real LM: the example's two predictors (extract the city, name its country) on
SmolLM2-135M served by llama-cpp-python's OpenAI-compatible server on loopback, optimised with the example's
scripted reflection LM. DSPy calls the model itself, through LiteLLM, as it would any hosted model."""

import importlib.util
from pathlib import Path

import pytest

dspy = pytest.importorskip("dspy")
pytest.importorskip("llama_cpp.server", reason="llama-cpp-python[server] is not installed")

from gepetto.integrations import dspy as gdspy  # noqa: E402
from gepetto.lm.base import LMError  # noqa: E402

pytestmark = pytest.mark.real_model

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "dspy_program.py"
_spec = importlib.util.spec_from_file_location("dspy_program", EXAMPLE)
ex = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ex)


@pytest.fixture(scope="module")
def smollm2_url(tmp_path_factory):
    from gepetto.lm.local import model_path

    try:
        model_path("smollm2-135m")
    except LMError as exc:
        pytest.skip(str(exc))
    with ex.serve_smollm2(tmp_path_factory.mktemp("llama") / "server.log") as url:
        yield url


def _instructions(module):
    return {name: pred.signature.instructions for name, pred in module.named_predictors()}


def test_a_real_two_predictor_program_gets_new_instructions(smollm2_url):
    data = ex.dataset()
    examples = [data[1], data[6]]  # Tokyo and Rome: SmolLM2 answers them better when asked for the name only
    program = ex.CityCountry()
    seed = _instructions(program)
    reflection = ex.scripted_reflection_lm()
    lm = ex.smollm2_lm(smollm2_url)
    with dspy.context(lm=lm, adapter=ex.PlainAdapter()):
        optimized, result = gdspy.optimize(program, examples, ex.metric, reflection_lm=reflection, budget=6,
                                           minibatch_size=2, max_concurrency=2, merge="off")
        print(result.summary())
        assert result.best_score > result.seed_score, result.summary()
        assert _instructions(program) == seed  # the module given is untouched
        new = _instructions(optimized)
        assert new["extract"] == f"{seed['extract']}\n{ex.EXTRACT_RULE}" and new != seed
        # reflection was shown SmolLM2's own answers to the extract predictor, with the metric's feedback
        prompt = reflection.calls[0][0][1]["content"]
        assert "[Input]\nmessage: " in prompt and "[Assistant's answer]\n" in prompt
        assert "[Assistant's answer]\ncity: " not in prompt  # one output field: its value as the answer
        assert "name only" in prompt
        task = result.ledger.roles["task"]
        assert task.calls == 2 * result.rollouts_used and task.input_tokens > 0 and not task.estimated_tokens
        # the optimised module sends its new instructions to the model
        optimized.extract(message=data[1].message)
    assert lm.history[-1]["messages"][0] == {"role": "system", "content": new["extract"]}


def test_the_dspy_gepa_shaped_optimizer_on_a_real_model(smollm2_url):
    """`GEPA(...).compile(...)` as a DSPy user calls dspy.GEPA: SmolLM2 through DSPy as the task LM, and a
    `dspy.LM` (scripted engine) as the reflection LM."""
    data = ex.dataset()
    examples = [data[1], data[6]]
    program = ex.CityCountry()
    seed = _instructions(program)
    reflection = ex.scripted_dspy_reflection_lm()
    optimizer = gdspy.GEPA(metric=ex.metric, max_metric_calls=6, reflection_lm=reflection, track_stats=True,
                           reflection_minibatch_size=2, num_threads=2, use_merge=False)
    with dspy.context(lm=ex.smollm2_lm(smollm2_url), adapter=ex.PlainAdapter()):
        optimized = optimizer.compile(program, trainset=examples)
    result = optimized.detailed_results.result
    print(result.summary())
    assert result.best_score > result.seed_score, result.summary()
    assert _instructions(program) == seed
    assert _instructions(optimized)["extract"] == f"{seed['extract']}\n{ex.EXTRACT_RULE}"
    # reflection (through DSPy) was shown SmolLM2's own answers with the metric's feedback
    prompt = reflection.history[0]["messages"][-1]["content"]
    assert "[Input]\nmessage: " in prompt and "[Assistant's answer]\n" in prompt
    assert "[Assistant's answer]\ncity: " not in prompt  # one output field: its value as the answer
    d = optimized.detailed_results
    assert d.val_aggregate_scores[d.best_idx] == result.best_score and d.total_metric_calls <= 6
