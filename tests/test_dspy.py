"""DSPy programs (gepetto.integrations.dspy): every predictor's instructions evolved, on the example's two-predictor
program with a scripted DSPy LM (a DSPy engine) and a scripted reflection LM."""

import importlib.util
import re
import threading
import time
from pathlib import Path

import pytest

dspy = pytest.importorskip("dspy")

import gepetto  # noqa: E402
from gepetto.config import EngineConfig  # noqa: E402
from gepetto.engine import events as ev  # noqa: E402
from gepetto.integrations import dspy as gdspy  # noqa: E402
from gepetto.integrations.dspy import _as_score, _metric_arity  # noqa: E402
from gepetto.store.sqlite import RunStore  # noqa: E402
from gepetto.testing import ScriptedLM  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "dspy_program.py"
_spec = importlib.util.spec_from_file_location("dspy_program", EXAMPLE)
ex = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ex)

SEED = {"extract": "Given the fields `message`, produce the fields `city`.",
        "locate": "Given the fields `city`, produce the fields `country`."}


def _instructions(module):
    return {name: pred.signature.instructions for name, pred in module.named_predictors()}


def _optimize(program=None, metric=ex.metric, lm=None, reflection=None, **kw):
    train, val, _ = ex.splits()
    options = {"valset": val, "reflection_lm": reflection or ex.scripted_reflection_lm(), "budget": 120, **kw}
    with dspy.context(lm=lm or ex.scripted_lm()):
        return gdspy.optimize(program or ex.CityCountry(), train, metric, **options)


def test_every_predictor_is_evolved_and_the_module_given_is_untouched():
    program = ex.CityCountry()
    reflection = ex.scripted_reflection_lm()
    optimized, result = _optimize(program, reflection=reflection)
    assert result.seed_score == 0.25 and result.best_score == 1.0, result.summary()
    assert _instructions(program) == SEED  # the input module is unchanged
    new = _instructions(optimized)
    assert ex.EXTRACT_RULE in new["extract"] and ex.LOCATE_RULE in new["locate"]
    assert optimized is not program and optimized.extract is not program.extract
    assert result.best_candidate.to_dict() == new
    # reflection on a predictor saw that predictor's own calls: its input fields and its output fields
    prompts = [call[0][1]["content"] for call in reflection.calls]
    extract = next(p for p in prompts if "`message`" in p.split("</current_instruction>")[0])
    assert "[Input]\nmessage: " in extract and "]\nThe city mentioned is" in extract  # one output field: its value
    locate = next(p for p in prompts if "`message`" not in p.split("</current_instruction>")[0])
    assert "[Input]\ncity: " in locate and ("]\nEurope" in locate or "]\nAsia" in locate)
    # the five-argument metric was asked about each predictor: its notes are in the feedback
    assert "Feedback on predictor `locate`: The country is wrong" in locate
    # DSPy's LM calls are counted in the ledger as the task role
    task = result.ledger.roles["task"]
    assert task.calls == 2 * result.rollouts_used and task.input_tokens > 0


@pytest.mark.parametrize("form", ["float2", "score3", "prediction5", "bool2"])
def test_metric_forms(form):
    def float2(gold, pred):
        return ex.metric(gold, pred).score

    def score3(gold, pred, trace=None):
        out = ex.metric(gold, pred)
        return gepetto.Score(out.score, out.feedback)

    def prediction5(gold, pred, trace, pred_name, pred_trace):
        return ex.metric(gold, pred, trace, pred_name, pred_trace)

    def bool2(gold, pred):
        return ex.metric(gold, pred).score == 1.0

    metric = {"float2": float2, "score3": score3, "prediction5": prediction5, "bool2": bool2}[form]
    _, result = _optimize(metric=metric, budget=80)
    assert result.best_score == 1.0 or form == "bool2", result.summary()  # a bare 0/1 score finds less
    assert result.best_score >= result.seed_score


def test_metric_arity_and_score_coercion():
    assert _metric_arity(lambda g, p: 1) == 2
    assert _metric_arity(lambda g, p, trace=None: 1) == 3
    assert _metric_arity(lambda g, p, trace=None, pred_name=None, pred_trace=None: 1) == 5
    assert _metric_arity(lambda *args: 1) == 5
    with pytest.raises(TypeError, match="must accept"):
        _metric_arity(lambda g: 1)
    s = _as_score(dspy.Prediction(score=0.5, feedback="half"))
    assert (s.value, s.feedback) == (0.5, "half")
    assert _as_score(dspy.Prediction(score=1)).feedback == "The output is correct."
    assert _as_score({"score": 0.0, "feedback": "no"}).feedback == "no"
    assert _as_score(True).value == 1.0 and _as_score(gepetto.Score(0.3, "x")).feedback == "x"
    s = _as_score(dspy.Prediction(score=0.5, feedback="f", objective_scores={"a": 1.0}))
    assert s.objectives == {"a": 1.0}
    with pytest.raises(TypeError):
        _as_score(dspy.Prediction(feedback="no score"))


def test_concurrent_rollouts_use_private_copies_and_match_a_serial_run():
    """Many rollouts at once, each slowed down inside the LM: every call must see its own candidate's
    instructions, so the run equals one made a rollout at a time."""
    seen = threading.Event()
    inner = ex._ScriptedEngine()
    active = {"now": 0, "max": 0}
    lock = threading.Lock()

    class Slow:
        def complete(self, request):
            with lock:
                active["now"] += 1
                active["max"] = max(active["max"], active["now"])
            time.sleep(0.01)
            seen.set()
            with lock:
                active["now"] -= 1
            return inner.complete(request)

        def stream(self, request):
            raise NotImplementedError

        def close(self):
            pass

    lm = dspy.LM("scripted/slow", engine=Slow(), cache=False)
    _, parallel = _optimize(lm=lm, max_concurrency=6)
    assert active["max"] > 1  # rollouts did overlap
    _, serial = _optimize(lm=ex.scripted_lm(), max_concurrency=1)
    assert [c.to_dict() for c in parallel.candidates] == [c.to_dict() for c in serial.candidates]
    assert parallel.best_candidate == serial.best_candidate and parallel.rollouts_used == serial.rollouts_used


def test_stored_run_resumes_exactly_and_is_seen_by_show_and_report(tmp_path):
    from typer.testing import CliRunner

    from gepetto.cli import app

    storage = tmp_path / "s.sqlite"
    calls = {"n": 0}
    inner = ex._ScriptedEngine()

    class Counting:
        def complete(self, request):
            calls["n"] += 1
            return inner.complete(request)

        def stream(self, request):
            raise NotImplementedError

        def close(self):
            pass

    lm = dspy.LM("scripted/counting", engine=Counting(), cache=False)
    _, first = _optimize(lm=lm, budget=25, storage=storage, run="cc")
    assert first.rollouts_used <= 25 and calls["n"] > 0
    info = RunStore(storage).get_run("cc")
    assert info.config["task"] == "python:dspy_program:CityCountry"
    assert info.config["task_lm"] == "python:dspy:scripted/counting"
    # the same call again: everything is replayed from the store, DSPy's LM is not called
    before = calls["n"]
    _, again = _optimize(lm=lm, budget=25, storage=storage, run="cc")
    assert calls["n"] == before and again.best_candidate == first.best_candidate
    # more budget: the run goes on from where it was, to the same end as an uninterrupted run
    _, more = _optimize(lm=lm, budget=120, storage=storage, run="cc")
    _, whole = _optimize(budget=120)
    assert [c.to_dict() for c in more.candidates] == [c.to_dict() for c in whole.candidates]
    runner = CliRunner()
    show = runner.invoke(app, ["show", "cc", "--storage", str(storage)], catch_exceptions=False)
    assert show.exit_code == 0 and "python:dspy_program:CityCountry" in show.output
    rep = runner.invoke(app, ["report", "cc", "-o", str(tmp_path / "r.html"), "--storage", str(storage)],
                        catch_exceptions=False)
    assert rep.exit_code == 0 and ex.LOCATE_RULE in (tmp_path / "r.html").read_text()
    # another module (other instructions) under the same run name is refused
    other = ex.CityCountry()
    other.extract.signature = other.extract.signature.with_instructions("Find the city.")
    with pytest.raises(gepetto.ConfigError, match="seed candidate"):
        _optimize(other, lm=lm, budget=120, storage=storage, run="cc")
    with pytest.raises(gepetto.ConfigError, match="task_lm"):  # so is another DSPy LM
        _optimize(budget=120, storage=storage, run="cc")


def test_an_unparseable_answer_is_a_failed_rollout_whose_raw_answer_reflection_sees():
    inner = ex._ScriptedEngine()

    class Garbled:  # `locate` answers without DSPy's field markers
        def complete(self, request):
            response = inner.complete(request)
            if "`country`" in (request.system if isinstance(request.system, str) else ""):
                from dspy.lm15 import Message, Response, TextPart

                return Response(id=None, model="garbled", message=Message.assistant([TextPart("Europe, I think")]),
                                finish_reason="stop", usage=response.usage)
            return response

        def stream(self, request):
            raise NotImplementedError

        def close(self):
            pass

    reflection = ScriptedLM(lambda messages, params: "<new_instruction>\nAnswer in the required format with the "
                                                     "field markers.\n</new_instruction>")
    lm = dspy.LM("scripted/garbled", engine=Garbled(), cache=False)
    with dspy.context(adapter=dspy.ChatAdapter(use_json_adapter_fallback=False)):
        _, result = _optimize(lm=lm, reflection=reflection, budget=20, components=["locate"])
    assert result.seed_score == 0.0
    prompt = reflection.calls[0][0][1]["content"]
    assert "DSPy could not parse this answer" in prompt and "Europe, I think" in prompt
    assert "AdapterParseError" in prompt  # the rollout's error is its feedback


@pytest.mark.parametrize("error", ["LMTransportError", "LMAuthError"])
def test_an_lm_outage_or_bad_key_stops_the_run_instead_of_scoring_zero(error):
    class Down:
        def complete(self, request):
            raise getattr(dspy, error)("connection refused" if error == "LMTransportError" else "invalid api key")

        def stream(self, request):
            raise NotImplementedError

        def close(self):
            pass

    lm = dspy.LM("scripted/down", engine=Down(), cache=False, num_retries=0)
    t0 = time.perf_counter()
    _, result = _optimize(lm=lm, budget=20, max_lm_failures=2, lm_retry_pause=0.0)
    assert result.stop_reason is gepetto.StopReason.LM_UNAVAILABLE, result.stop_message
    assert result.stop_message.startswith("LM unavailable"), result.stop_message
    assert result.rollouts_used == 0 and time.perf_counter() - t0 < 30
    if error == "LMAuthError":  # no retrying a bad key: the run stops at the first failure
        assert "LMSetupError" in result.stop_message and "in a row" not in result.stop_message


def test_clear_errors_for_bad_inputs():
    train, _, _ = ex.splits()
    with dspy.context(lm=None), pytest.raises(ValueError, match=r"dspy\.configure"):
        gdspy.optimize(ex.CityCountry(), train, ex.metric, reflection_lm=ScriptedLM([]))
    with dspy.context(lm=ex.scripted_lm()):
        with pytest.raises(TypeError, match="with_inputs"):
            gdspy.optimize(ex.CityCountry(), [dspy.Example(message="x", city="y")], ex.metric,
                           reflection_lm=ScriptedLM([]))
        with pytest.raises(TypeError, match=r"dspy\.Example"):
            gdspy.optimize(ex.CityCountry(), [{"message": "x"}], ex.metric, reflection_lm=ScriptedLM([]))
        with pytest.raises(TypeError, match=r"dspy\.Module"):
            gdspy.optimize(lambda x: x, train, ex.metric, reflection_lm=ScriptedLM([]))
        with pytest.raises(TypeError, match="must accept"):
            gdspy.optimize(ex.CityCountry(), train, lambda gold: 1.0, reflection_lm=ScriptedLM([]))
        with pytest.raises(TypeError, match="sets these itself"):
            gdspy.optimize(ex.CityCountry(), train, ex.metric, reflection_lm=ScriptedLM([]), task_lm="sim:task")
        with pytest.raises(gepetto.ConfigError, match="sets these itself"):  # DSPy's LM has its own parameters
            gdspy.optimize(ex.CityCountry(), train, ex.metric, reflection_lm=ScriptedLM([]),
                           task_lm_params={"temperature": 0.5})
        # the keywords of gepetto.optimize are checked as there: a misspelt one names the closest
        with pytest.raises(gepetto.ConfigError, match="did you mean 'callbacks'"):
            gdspy.optimize(ex.CityCountry(), train, ex.metric, reflection_lm=ScriptedLM([]),
                           callback=lambda event: None)
        with pytest.raises(gepetto.ConfigError, match="minibatch_size"):
            gdspy.optimize(ex.CityCountry(), train, ex.metric, reflection_lm=ScriptedLM([]), minibatch=3)


def test_callbacks_get_typed_events_and_config_sets_the_options():
    """callbacks= and config= as in gepetto.optimize: typed events in order; an EngineConfig's options, with a
    keyword given winning over it."""
    seen: list[ev.Event] = []
    config = EngineConfig(budget=30, seed=3, merge="off", max_concurrency=2)
    _, result = _optimize(callbacks=seen.append, config=config, budget=None)
    assert result.budget == 30 and result.rollouts_used <= 30
    assert not any(isinstance(e, ev.MergeTested) for e in seen)  # merge="off", from the config
    assert isinstance(seen[0], ev.PlanMade) and isinstance(seen[-1], ev.RunEnded)
    assert seen[-1].result.stop_reason is result.stop_reason
    rollouts = [e for e in seen if isinstance(e, ev.RolloutFinished)]
    assert len(rollouts) == result.rollouts_used
    added = [e for e in seen if isinstance(e, ev.CandidateAdded)]
    assert len(added) == len(result.candidates)
    # a keyword wins over the config; the same seed and options give the same run
    _, smaller = _optimize(config=config, budget=15)
    assert smaller.budget == 15 and smaller.rollouts_used <= 15
    _, again = _optimize(config=config, budget=None)
    assert [c.to_dict() for c in again.candidates] == [c.to_dict() for c in result.candidates]


def test_with_instructions_and_duplicate_examples():
    program = ex.CityCountry()
    copy = gdspy.with_instructions(program, {"locate": "Name the country."})
    assert copy.locate.signature.instructions == "Name the country." and _instructions(program) == SEED
    with pytest.raises(KeyError):
        gdspy.with_instructions(program, {"nope": "x"})
    _, val, _ = ex.splits()
    _, result = _optimize(budget=20, valset=val + val[:1])  # a repeated example gets an id of its own
    assert len(result.candidates[0].val_scores) == len(val) + 1


class _Engine:
    """A DSPy engine whose answer text is `answer(system, user)` of the request's system prompt and last message."""

    def __init__(self, answer):
        self.answer = answer

    def complete(self, request):
        from dspy.lm15 import Message, Response, TextPart, Usage

        system = request.system if isinstance(request.system, str) else "".join(p.text for p in request.system or [])
        text = self.answer(system, request.messages[-1].text or "")
        return Response(id=None, model="scripted", message=Message.assistant([TextPart(text)]), finish_reason="stop",
                        usage=Usage(input_tokens=10, output_tokens=10, total_tokens=20))

    def stream(self, request):
        raise NotImplementedError

    def close(self):
        pass


def test_a_chain_of_thought_predictor_is_named_by_its_path_and_its_reasoning_is_traced():
    def answer(system, user):
        answer = "4" if "Add the numbers" in system else "5"
        return f"[[ ## reasoning ## ]]\ntwo and two\n\n[[ ## answer ## ]]\n{answer}\n\n[[ ## completed ## ]]"

    class QA(dspy.Module):
        def __init__(self):
            super().__init__()
            self.solve = dspy.ChainOfThought("question -> answer")

        def forward(self, question):
            return self.solve(question=question)

    data = [dspy.Example(question=f"What is 2 + 2? ({i})", answer="4").with_inputs("question") for i in range(3)]
    reflection = ScriptedLM(lambda messages, params: "<new_instruction>\nAdd the numbers in the question and give "
                                                     "the sum.\n</new_instruction>")
    with dspy.context(lm=dspy.LM("scripted/cot", engine=_Engine(answer), cache=False)):
        optimized, result = gdspy.optimize(QA(), data, lambda gold, pred: pred.answer == gold.answer,
                                           reflection_lm=reflection, budget=12)
    assert list(result.best_candidate) == ["solve.predict"] and result.best_score == 1.0
    assert optimized.solve.predict.signature.instructions.startswith("Add the numbers")
    prompt = reflection.calls[0][0][1]["content"]
    assert "[Input]\nquestion: What is 2 + 2?" in prompt and "reasoning: two and two\nanswer: 5" in prompt


def test_a_one_field_router_is_traced_by_its_answer_and_gets_the_rules_a_router_gets():
    """A predictor with one output field is traced by that field's value ("audio", not "area: audio"), so a router's
    answers form a closed set the feedback names, and the route gives it rules (as in gepetto's own programs)."""
    words = {"wake": ("alarm", "alarm_set"), "delete": ("alarm", "alarm_remove"), "louder": ("audio", "volume_up"),
             "silence": ("audio", "volume_mute")}

    def answer(system, user):
        word = next(w for w in words if w in user)
        if "1. `area`" in system.split("Your output fields are:", 1)[-1][:40]:  # the router
            rule = re.search(rf"{word}\b[^\n]*answer (\w+)", system.split("your objective is:", 1)[-1])
            field, value = "area", rule.group(1) if rule else "audio" if word == "louder" else "alarm"
        else:  # the intent step: right when the router was
            area, intent = words[word]
            field, value = "intent", intent if f"\n{area}\n" in user else "alarm_set"
        return f"[[ ## {field} ## ]]\n{value}\n\n[[ ## completed ## ]]"

    class Routed(dspy.Module):
        def __init__(self):
            super().__init__()
            self.router = dspy.Predict(dspy.Signature("message -> area", "Say which area the message is about: "
                                                                         "alarm or audio."))
            self.intent = dspy.Predict(dspy.Signature("message, area -> intent", "Pick the intent."))

        def forward(self, message):
            area = self.router(message=message).area
            return dspy.Prediction(area=area, intent=self.intent(message=message, area=area).intent)

    def metric(gold, pred):
        if pred.intent == gold.intent:
            return gepetto.Score(1.0, "Correct.")
        return gepetto.Score(0.0, f"The router answered '{pred.area}', but the message is about {gold.area}.")

    def rules(messages, params):
        user = messages[-1]["content"]
        asked = re.search(r"says when to answer (\w+)", user) or re.search(r'answer (\w+)\."', user)
        if asked is None:  # a whole rewrite (the intent step): the text as it was
            current = re.search(r"<current_instruction>\n(.*?)\n</current_instruction>", user, re.S)
            return f"<new_instruction>{current.group(1) if current else ''}\nBe brief.</new_instruction>"
        cases = user.split("It already answers these correctly")[0]
        named = sorted(w for w in words if re.search(rf"\b{w}\b", cases))
        return f"<rule>If the message asks to {' or '.join(named) or 'do it'}, answer {asked.group(1)}.</rule>"

    def data(n, prefix):
        return [dspy.Example(message=f"please {w} thing {prefix}{i}", area=words[w][0], intent=words[w][1])
                .with_inputs("message") for i in range(n) for w in [list(words)[i % 4]]]

    events = []
    with dspy.context(lm=dspy.LM("scripted/router", engine=_Engine(answer), cache=False)):
        optimized, result = gdspy.optimize(Routed(), data(24, "t"), metric, valset=data(12, "v"),
                                           reflection_lm=ScriptedLM(rules), budget=200, callbacks=events.append)
    (chosen,) = [e for e in events if isinstance(e, ev.RouteChosen)]
    assert "rules for router (2 answers from the outputs (alarm, audio)" in chosen.reason, chosen.reason
    assert result.seed_score == 0.75  # the router sends 'silence' to alarm
    router = optimized.router.signature.instructions
    assert re.search(r"^- If the message asks to [a-z ]*silence[a-z ]*, answer audio\.$", router, re.M), router
    assert result.best_score == 1.0
