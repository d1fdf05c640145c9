"""gepa adapters on gepetto's engine (issue 14): an adapter written here against gepa's protocol (no gepa import),
and gepa's own DefaultAdapter when gepa is installed."""

import re
import warnings
from dataclasses import dataclass
from typing import Any

import pytest

import gepetto
from gepetto.engine.reflect import reflective_examples
from gepetto.integrations import gepa_adapter
from gepetto.program import MetricError, Rollout, TraceEntry
from gepetto.testing import ScriptedLM
from gepetto.types import Score


@dataclass
class EvalBatch:
    """Shaped like gepa.core.adapter.EvaluationBatch."""

    outputs: list[Any]
    scores: list[float]
    trajectories: list[Any] | None = None
    objective_scores: list[dict[str, float]] | None = None
    num_metric_calls: int | None = None


class TriageAdapter:
    """Labels a support message urgent when it holds one of the `keywords` and drafts a reply that starts with
    the `greeting`; half a point for each. Its reflective records give each component its own feedback."""

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale
        self.calls: list[tuple[int, list[str], bool]] = []

    def evaluate(self, batch, candidate, capture_traces=False):
        self.calls.append((len(batch), list(candidate), capture_traces))
        words = [w.strip().lower() for w in candidate["keywords"].split(",") if w.strip()]
        outputs, scores, trajectories = [], [], []
        for data in batch:
            urgent = any(w in data["message"].lower() for w in words)
            reply = f"{candidate['greeting']} We got your message."
            outputs.append({"label": "urgent" if urgent else "normal", "reply": reply})
            scores.append(self.scale * ((urgent == data["urgent"]) + reply.startswith("Dear customer")) / 2)
            trajectories.append({"data": data, "urgent": urgent, "reply": reply})
        return EvalBatch(outputs, scores, trajectories if capture_traces else None,
                         [{"label": float(t["urgent"] == t["data"]["urgent"])} for t in trajectories])

    def make_reflective_dataset(self, candidate, eval_batch, components_to_update):
        out = {}
        for comp in components_to_update:
            records = []
            for t in eval_batch.trajectories:
                data = t["data"]
                if comp == "keywords":
                    if t["urgent"] == data["urgent"]:
                        feedback = "Correct label."
                    elif data["urgent"]:
                        feedback = f"Labelled normal, but the message is urgent: the cue word is '{data['cue']}'."
                    else:
                        feedback = "Labelled urgent, but the message is not urgent."
                    records.append({"Inputs": {"message": data["message"]},
                                    "Generated Outputs": "urgent" if t["urgent"] else "normal", "Feedback": feedback})
                else:
                    ok = t["reply"].startswith("Dear customer")
                    records.append({"Inputs": data["message"], "Generated Outputs": t["reply"],
                                    "Feedback": "Good reply." if ok else "The reply must start with 'Dear customer'.",
                                    "note": "replies are sent as is"})
            out[comp] = records
        return out


MESSAGES = [
    ("The server is down, fix it asap", True, "asap"),
    ("Please answer immediately, payroll is blocked", True, "immediately"),
    ("Our site is down right now", True, "down"),
    ("Thanks for the invoice", False, ""),
    ("Can you send me the brochure?", False, ""),
    ("Need this asap: login fails", True, "asap"),
    ("Checkout broken, respond immediately", True, "immediately"),
    ("Just saying hi", False, ""),
]
DATA = [{"message": m, "urgent": u, "cue": c} for m, u, c in MESSAGES]
SEED = {"keywords": "urgent", "greeting": "Hi."}  # not sorted: the adapter must see this order


def _current(messages) -> str:
    prompt = messages[1]["content"]
    return prompt.split("<current_instruction>\n", 1)[1].split("\n</current_instruction>", 1)[0]


def triage_reflection(messages, params) -> str:
    """Scripted reflection: adds the cue words the feedback names; fixes the greeting when told to."""
    prompt, current = messages[1]["content"], _current(messages)
    if "cue word" in prompt:
        words = [w.strip() for w in current.split(",")]
        words += [w for w in re.findall(r"the cue word is '(\w+)'", prompt) if w not in words]
        new = ", ".join(words)
    elif "must start with 'Dear customer'" in prompt:
        new = "Dear customer, thanks for writing to us."
    else:
        new = current + " "
    return f"Lessons:\n- follow the feedback\n<new_instruction>{new}</new_instruction>"


def run_triage(adapter=None, reflection=None, **options):
    adapter = adapter or TriageAdapter()
    reflection = reflection or ScriptedLM(triage_reflection)
    options.setdefault("component_descriptions", {"keywords": "a comma-separated list of words that mark a "
                                                              "support message as urgent"})
    result = gepa_adapter.optimize(adapter, SEED, DATA[:5], DATA[3:], reflection_lm=reflection,
                                   budget=options.pop("budget", 80), seed=0, merge="off", **options)
    return result, adapter, reflection


def test_an_adapter_is_optimised_on_gepettos_engine():
    result, adapter, reflection = run_triage()
    assert result.seed_score < 0.5 and result.best_score == 1.0, result.summary()
    best = result.best_candidate.to_dict()
    assert best["greeting"].startswith("Dear customer")
    assert {"asap", "immediately"} <= {w.strip() for w in best["keywords"].split(",")}
    assert result.rollouts_used <= 80
    # one example per evaluate call, always with traces, the candidate in the seed's component order
    assert {c[0] for c in adapter.calls} == {1} and all(c[2] for c in adapter.calls)
    assert {tuple(c[1]) for c in adapter.calls} == {("keywords", "greeting")}
    # every rollout was one evaluate call: the budget counts instances evaluated, as gepa's metric calls do
    assert len(adapter.calls) == result.rollouts_used
    # reflection on each component saw that component's records and feedback, not the other's
    prompts = [call[0][1]["content"] for call in reflection.calls]
    on_greeting = [p for p in prompts if "Hi." in p.split("</current_instruction>")[0]]
    on_keywords = [p for p in prompts if "<current_instruction>\nurgent\n" in p]
    assert on_greeting and on_keywords
    assert "must start with 'Dear customer'" in on_greeting[0] and "cue word" not in on_greeting[0]
    assert "note: replies are sent as is" in on_greeting[0]  # extra record keys follow the outputs
    assert "cue word is 'asap'" in on_keywords[0] and "must start with" not in on_keywords[0]
    assert "[Input]\nmessage: " in on_keywords[0]  # a mapping of inputs as key: value lines
    assert "The text you are editing is: a comma-separated list" in on_keywords[0]


def test_scores_outside_zero_one_need_a_score_range():
    with pytest.raises(MetricError, match="score_range"):
        run_triage(TriageAdapter(scale=10.0))
    result, _, _ = run_triage(TriageAdapter(scale=10.0), score_range=(0, 10))
    assert result.best_score == 1.0


def test_a_stored_adapter_run_resumes_from_the_store(tmp_path):
    storage = tmp_path / "runs.sqlite"
    first, adapter, _ = run_triage(storage=storage, run="triage")
    assert adapter.calls
    again, adapter2, _ = run_triage(storage=storage, run="triage")
    assert again.best_candidate == first.best_candidate and again.best_score == first.best_score
    assert adapter2.calls == []  # every rollout came back from the store: nothing re-evaluated

    from gepetto.report import render_report
    from gepetto.store.snapshot import run_snapshot
    from gepetto.store.sqlite import RunStore

    snap = run_snapshot(RunStore(storage, readonly=True), "triage")
    assert snap["run"]["task"] == "python:test_gepa_adapter:TriageAdapter"
    assert snap["run"]["task_lm"] == "python:gepa-adapter:TriageAdapter"
    assert "Dear customer, thanks" in render_report(snap)


def test_not_an_adapter_and_unused_propose_new_texts():
    with pytest.raises(gepa_adapter.AdapterError, match="lacks evaluate, make_reflective_dataset"):
        gepa_adapter.optimize(object(), SEED, DATA, reflection_lm=ScriptedLM([]))

    class Proposing(TriageAdapter):
        def propose_new_texts(self, candidate, reflective_dataset, components_to_update):
            return {}

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_triage(Proposing(), budget=20)
    assert any("propose_new_texts is not used" in str(w.message) for w in caught)


def test_a_broken_batch_fails_the_rollout_with_a_clear_error():
    class Short(TriageAdapter):
        def evaluate(self, batch, candidate, capture_traces=False):
            out = super().evaluate(batch, candidate, capture_traces)
            return EvalBatch([], out.scores, out.trajectories)

    program, metric = gepa_adapter.adapter_program(Short(), SEED)
    ev = gepetto.evaluate(SEED, gepa_adapter.as_examples(DATA[:2], "val"), metric, program=program,
                          task_lm=gepa_adapter.AdapterTaskLM(Short()))
    assert ev.mean == 0.0 and "returned 0 outputs" in ev.rollouts[0].error


def test_data_instances_become_examples_with_stable_distinct_ids():
    class Thing:  # no JSON form: ids by position
        pass

    a, b = Thing(), Thing()
    ex = gepa_adapter.as_examples([{"q": 1}, {"q": 1}, {"q": 2}], "train")
    assert ex[0].id != ex[1].id and ex[1].id == f"{ex[0].id}#2"
    assert ex[0].id == gepa_adapter.as_examples([{"q": 1}], "val")[0].id  # same content, same id in any split
    objs = gepa_adapter.as_examples([a, b], "val")
    assert [e.id for e in objs] == ["val-0", "val-1"] and objs[0].metadata[gepa_adapter.DATA_KEY] is a


def test_recorded_feedback_is_what_reflection_shows_for_that_component():
    run = Rollout("e", Score(0.5, "whole-run feedback"), "out", [
        TraceEntry("a", "in", "out-a", feedback="feedback for a"),
        TraceEntry("a", "in2", "out-a2", feedback="feedback for a"),
        TraceEntry("b", "in", "out-b"),
    ])
    [on_a] = reflective_examples([run], "a")
    [on_b] = reflective_examples([run], "b")
    assert on_a.feedback == "feedback for a" and on_b.feedback == "whole-run feedback"


COUNTRIES = [("France", "Paris"), ("Japan", "Tokyo"), ("Kenya", "Nairobi"), ("Peru", "Lima"), ("Italy", "Rome"),
             ("Egypt", "Cairo")]
CAPITALS = dict(COUNTRIES)


def capital_model(messages) -> str:
    """A scripted task model for DefaultAdapter (a callable model: no network): it names the capital only when
    its system prompt asks for a capital city."""
    system, user = messages[0]["content"], messages[-1]["content"]
    if "capital" in system.lower():
        return f"The capital is {CAPITALS.get(user, 'unknown')}."
    return f"{user} is a country."


def capital_reflection(messages, params) -> str:
    return ("Lessons:\n- the answer must be the capital city\n"
            "<new_instruction>You are given the name of a country. Answer with the name of its capital city."
            "</new_instruction>")


def test_gepas_default_adapter_runs_on_gepettos_engine():
    default_adapter = pytest.importorskip("gepa.adapters.default_adapter.default_adapter")
    adapter = default_adapter.DefaultAdapter(model=capital_model)
    data = [{"input": country, "additional_context": {}, "answer": capital} for country, capital in COUNTRIES]
    reflection = ScriptedLM(capital_reflection)
    result = gepa_adapter.optimize(adapter, {"system_prompt": "You are a helpful assistant."}, data[:3], data[3:],
                                   reflection_lm=reflection, budget=30, merge="off")
    assert result.seed_score == 0.0 and result.best_score == 1.0, result.summary()
    assert "capital city" in result.best_candidate["system_prompt"]
    prompt = reflection.calls[0][0][1]["content"]
    # DefaultAdapter's records: the country as input, the model's answer, and its evaluator's feedback
    assert "The correct answer is '" in prompt and "is a country." in prompt


def test_an_adapter_that_takes_one_component_per_call_and_one_that_fails():
    class OneAtATime(TriageAdapter):
        def __init__(self):
            super().__init__()
            self.asked = []

        def make_reflective_dataset(self, candidate, eval_batch, components_to_update):
            self.asked.append(list(components_to_update))
            assert len(components_to_update) == 1  # like gepa's DefaultAdapter
            if components_to_update == ["greeting"]:
                raise RuntimeError("no records for greetings")
            return super().make_reflective_dataset(candidate, eval_batch, components_to_update)

    adapter = OneAtATime()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result, _, reflection = run_triage(adapter, budget=60)
    # one failed call with both components, then one component per call on every rollout
    assert adapter.asked[0] == ["keywords", "greeting"] and ["keywords", "greeting"] not in adapter.asked[1:]
    assert sum("make_reflective_dataset failed for component 'greeting'" in str(w.message) for w in caught) == 1
    # the greeting has no records: reflection on it saw whole rollouts, with the adapter's outputs
    prompts = [call[0][1]["content"] for call in reflection.calls]
    on_greeting = [p for p in prompts if "<current_instruction>\nHi.\n" in p]
    assert on_greeting and "[Program output]" in on_greeting[0] and '"reply": "Hi. We got' in on_greeting[0]
    assert result.best_score > result.seed_score
