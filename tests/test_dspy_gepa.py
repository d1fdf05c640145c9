"""gepetto.integrations.dspy.GEPA: dspy.GEPA's interface (a Teleprompter, `compile`, `auto`, `reflection_lm` as a
dspy.LM, `detailed_results`, `log_dir` to resume) on the example's two-predictor program, with scripted DSPy LMs."""

import importlib.util
import math
from pathlib import Path

import pytest

dspy = pytest.importorskip("dspy")

import gepetto  # noqa: E402
from gepetto.integrations.dspy import GEPA, DetailedResults, auto_budget  # noqa: E402
from gepetto.store.sqlite import RunStore  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "dspy_program.py"
_spec = importlib.util.spec_from_file_location("dspy_program", EXAMPLE)
ex = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ex)


def _instructions(module):
    return {name: pred.signature.instructions for name, pred in module.named_predictors()}


class Counting:
    """A DSPy engine around another that counts its calls."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def complete(self, request):
        self.calls += 1
        return self.inner.complete(request)

    def stream(self, request):
        raise NotImplementedError

    def close(self):
        pass


def test_compile_returns_an_optimised_copy_with_dspy_gepas_detailed_results():
    train, val, test = ex.splits()
    student = ex.CityCountry()
    seed = _instructions(student)
    reflection = ex.scripted_dspy_reflection_lm()
    optimizer = GEPA(metric=ex.metric, auto="light", reflection_lm=reflection, track_stats=True)
    assert isinstance(optimizer, dspy.teleprompt.Teleprompter)
    with dspy.context(lm=ex.scripted_lm()):
        optimized = optimizer.compile(student, trainset=train, valset=val)
        assert _instructions(student) == seed and optimized is not student  # the student is untouched
        new = _instructions(optimized)
        assert new["extract"] == f"{seed['extract']}\n{ex.EXTRACT_RULE}"
        assert new["locate"] == f"{seed['locate']}\n{ex.LOCATE_RULE}"
        assert all(ex.metric(e, optimized(**e.inputs())).score == 1.0 for e in test)
    # the reflection LM is DSPy's: gepetto's reflection prompts went through it, and its calls are in the ledger
    prompts = [entry["messages"][-1]["content"] for entry in reflection.history]
    assert prompts and all("<current_instruction>" in p for p in prompts)
    result = optimizer.result
    assert result.ledger.roles["reflection"].calls == len(reflection.history)
    assert result.budget == optimizer.budget(student, train, val) == auto_budget(2, 6, len(val))
    # detailed_results as dspy.GEPA gives them: candidates as modules, lineage, scores by valset index
    d = optimized.detailed_results
    assert isinstance(d, DetailedResults) and isinstance(d, dspy.teleprompt.gepa.gepa.DspyGEPAResult)
    assert d.result is result and len(d.candidates) == len(result.candidates) >= 3
    assert d.parents[0] == [None] and all(p != [None] for p in d.parents[1:])
    assert d.val_aggregate_scores == [c.mean for c in result.candidates]
    assert d.val_aggregate_scores[0] == 0.25 and d.val_aggregate_scores[d.best_idx] == 1.0
    assert _instructions(d.best_candidate) == new
    assert [sorted(s) for s in d.val_subscores] == [list(range(len(val)))] * len(d.candidates)
    assert d.per_val_instance_best_candidates == {i: {d.best_idx} for i in range(len(val))}
    assert d.discovery_eval_counts[0] == len(val) and d.discovery_eval_counts == sorted(d.discovery_eval_counts)
    assert d.total_metric_calls == result.rollouts_used and d.num_full_val_evals == len(d.candidates)
    assert d.seed == 0 and d.run is None and d.log_dir is None
    assert d.to_dict()["candidates"][d.best_idx] == new  # DSPy's own serialisation works on it
    # without track_stats, as in dspy.GEPA, no detailed_results; the Result is on the optimiser either way
    with dspy.context(lm=ex.scripted_lm()):
        plain = GEPA(metric=ex.metric, max_metric_calls=40, reflection_lm=reflection).compile(
            ex.CityCountry(), trainset=train, valset=val)
    assert not hasattr(plain, "detailed_results")


@pytest.mark.parametrize("n_predictors", [1, 2, 5])
@pytest.mark.parametrize("auto", ["light", "medium", "heavy"])
@pytest.mark.parametrize("n_val", [1, 5, 40, 300])
def test_auto_budgets_are_dspy_gepas(auto, n_predictors, n_val):
    dspy_gepa = dspy.GEPA(metric=ex.metric, auto=auto, reflection_lm=dspy.LM("openai/unused"))
    n = {"light": 6, "medium": 12, "heavy": 18}[auto]
    expected = dspy_gepa.auto_budget(num_preds=n_predictors, num_candidates=n, valset_size=n_val)
    assert auto_budget(n_predictors, n, n_val) == expected


def test_max_full_evals_and_max_metric_calls_set_the_rollout_budget():
    train, val, _ = ex.splits()
    student = ex.CityCountry()
    assert GEPA(metric=ex.metric, max_full_evals=3).budget(student, train, val) == 3 * (len(train) + len(val))
    assert GEPA(metric=ex.metric, max_full_evals=3).budget(student, train, None) == 3 * len(train)
    assert GEPA(metric=ex.metric, max_metric_calls=77).budget(student, train, val) == 77
    # no valset: the trainset is the validation set, and auto sizes the budget by it
    assert GEPA(metric=ex.metric, auto="medium").budget(student, train, None) == auto_budget(2, 12, len(train))
    assert math.isclose(auto_budget(1, 6, 10), dspy.GEPA(metric=ex.metric, auto="light", reflection_lm=dspy.LM(
        "openai/unused")).auto_budget(1, 6, 10))


def test_dspy_gepa_arguments_reach_the_run(tmp_path):
    """Each of dspy.GEPA's arguments is recorded in the stored run's configuration under gepetto's name."""
    train, val, _ = ex.splits()
    optimizer = GEPA(metric=ex.metric, max_metric_calls=30, reflection_lm=ex.scripted_dspy_reflection_lm(),
                     reflection_minibatch_size=2, candidate_selection_strategy="current_best",
                     component_selector="all", use_merge=True, max_merge_invocations=2, num_threads=3,
                     perfect_score=0.9, seed=7, storage=tmp_path / "g.sqlite", run="args", time_limit=600.0,
                     add_format_failure_as_feedback=True, warn_on_score_mismatch=False)
    with dspy.context(lm=ex.scripted_lm()):
        optimizer.compile(ex.CityCountry(), trainset=train, valset=val)
    assert optimizer.run == "args"
    config = RunStore(tmp_path / "g.sqlite").get_run("args").config
    engine = {**config, **config.get("engine", {})}
    assert (engine["budget"], engine["minibatch_size"], engine["parent_selector"], engine["component_selector"]) == (
        30, 2, "current-best", "all")
    assert (engine["merge"], engine["max_concurrency"], engine["perfect_score"], engine["seed"],
            engine["time_limit"]) == ("merge(max=2)", 3, 0.9, 7, 600.0)
    assert config["reflection_lm"] == "python:dspy:scripted/reflection"  # a dspy.LM, named by its model


def test_log_dir_keeps_the_run_and_compiling_again_resumes_it(tmp_path):
    train, val, _ = ex.splits()
    engine = Counting(ex._ScriptedEngine())
    lm = dspy.LM("scripted/counting", engine=engine, cache=False)

    def compile_once(budget):
        optimizer = GEPA(metric=ex.metric, max_metric_calls=budget, reflection_lm=ex.scripted_dspy_reflection_lm(),
                         log_dir=str(tmp_path / "logs"), track_stats=True)
        with dspy.context(lm=lm):
            return optimizer, optimizer.compile(ex.CityCountry(), trainset=train, valset=val)

    first, program = compile_once(20)
    assert (tmp_path / "logs" / "gepetto.sqlite").exists() and first.run == "gepa"
    assert program.detailed_results.log_dir == str(tmp_path / "logs") and program.detailed_results.run == "gepa"
    calls = engine.calls
    again, _ = compile_once(20)  # the same call: replayed from the store, DSPy's LM is not called
    assert engine.calls == calls
    assert [c.to_dict() for c in again.result.candidates] == [c.to_dict() for c in first.result.candidates]
    more, _ = compile_once(120)  # a larger budget goes on from there
    assert engine.calls > calls and more.result.rollouts_used > first.result.rollouts_used
    assert RunStore(tmp_path / "logs" / "gepetto.sqlite").get_run("gepa") is not None


def test_the_optimised_program_saves_and_loads_like_any_dspy_program(tmp_path):
    train, val, _ = ex.splits()
    with dspy.context(lm=ex.scripted_lm()):
        optimized = GEPA(metric=ex.metric, max_metric_calls=60, reflection_lm=ex.scripted_dspy_reflection_lm(),
                         ).compile(ex.CityCountry(), trainset=train, valset=val)
    optimized.save(str(tmp_path / "city.json"))
    loaded = ex.CityCountry()
    loaded.load(str(tmp_path / "city.json"))
    assert _instructions(loaded) == _instructions(optimized) != _instructions(ex.CityCountry())


def test_a_two_argument_metric_and_a_gepetto_lm_name_work_too():
    train, val, _ = ex.splits()

    def exact(gold, pred):
        return pred.country == gold.country and pred.city == gold.city

    optimizer = GEPA(metric=exact, max_metric_calls=80, reflection_lm=ex.scripted_reflection_lm())
    with dspy.context(lm=ex.scripted_lm()):
        optimizer.compile(ex.CityCountry(), trainset=train, valset=val)
    assert optimizer.result.seed_score == 0.0 and optimizer.result.rollouts_used <= 80


def test_a_reflection_lm_that_refuses_the_key_stops_the_run():
    class Refusing:
        def complete(self, request):
            raise dspy.LMAuthError("invalid api key")

        def stream(self, request):
            raise NotImplementedError

        def close(self):
            pass

    train, val, _ = ex.splits()
    reflection = dspy.LM("scripted/refusing", engine=Refusing(), cache=False, num_retries=0)
    optimizer = GEPA(metric=ex.metric, max_metric_calls=40, reflection_lm=reflection)
    with dspy.context(lm=ex.scripted_lm()):
        optimized = optimizer.compile(ex.CityCountry(), trainset=train, valset=val)
    result = optimizer.result
    assert result.stop_reason is gepetto.StopReason.LM_UNAVAILABLE, result.stop_message
    assert "LMAuthError" in result.stop_message and len(result.candidates) == 1  # the seed, validated
    assert _instructions(optimized) == _instructions(ex.CityCountry())


def test_what_gepetto_cannot_honour_is_refused_with_a_reason():
    ok = {"metric": ex.metric, "auto": "light"}
    with pytest.raises(ValueError, match=r"exactly one of auto, max_metric_calls, max_full_evals.*got none"):
        GEPA(metric=ex.metric)
    with pytest.raises(ValueError, match="got auto, max_metric_calls"):
        GEPA(metric=ex.metric, auto="light", max_metric_calls=10)
    with pytest.raises(ValueError, match="auto='huge'"):
        GEPA(metric=ex.metric, auto="huge")
    with pytest.raises(ValueError, match="candidate_selection_strategy='best'"):
        GEPA(**ok, candidate_selection_strategy="best")
    for bad, fragment in [({"instruction_proposer": object()}, "proposer='rewrite' or 'edit'"),
                          ({"gepa_kwargs": {"use_cloudpickle": True}}, "gepa's options do not apply"),
                          ({"use_wandb": True}, "W&B"), ({"track_best_outputs": True}, "track_best_outputs"),
                          ({"failure_score": -1.0}, "scores 0"), ({"skip_perfect_score": False}, "perfectly"),
                          ({"log_dir": "x", "storage": "y"}, "not both")]:
        with pytest.raises(ValueError, match=fragment):
            GEPA(**ok, **bad)
    with pytest.raises(gepetto.ConfigError, match="did you mean 'time_limit'"):
        GEPA(**ok, time_limt=10)
    with pytest.raises(gepetto.ConfigError, match=r"max_concurrency is set by dspy\.GEPA's num_threads"):
        GEPA(**ok, max_concurrency=4)
    with pytest.raises(gepetto.ConfigError, match=r"budget is set by dspy\.GEPA's auto"):
        GEPA(**ok, budget=10)
    with pytest.raises(TypeError, match="must accept"):
        GEPA(metric=lambda gold: 1.0, auto="light")
    train, _, _ = ex.splits()
    with pytest.raises(ValueError, match="teacher"):
        GEPA(**ok).compile(ex.CityCountry(), trainset=train, teacher=ex.CityCountry())
    with pytest.raises(ValueError, match="non-empty"):
        GEPA(**ok).compile(ex.CityCountry(), trainset=[])
