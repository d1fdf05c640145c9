"""Typed events, callbacks, stop reasons, proposal outcomes and the one rule for the best candidate."""

import dataclasses
import json
import math
import random
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

import gepetto
from gepetto.engine import events as ev
from gepetto.engine.events import Outcome, StopReason
from gepetto.engine.pareto import ParetoArchive, best_index, evidence
from gepetto.lm.base import LMUnavailable
from gepetto.report import render_report
from gepetto.store.snapshot import run_snapshot
from gepetto.store.sqlite import RunStore
from gepetto.testing import ScriptedLM, sim

SRC = Path(gepetto.__file__).parent


def _run(**kw):
    task = sim.task()
    kw.setdefault("reflection_lm", sim.SimReflectionLM())
    return gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset, program=task.program,
                            task_lm=sim.SimTaskLM(), **kw)


# ---- events and callbacks -----------------------------------------------------------------------------------


def test_every_callback_sees_every_event_in_order():
    first, second = [], []
    result = _run(budget=150, callbacks=[first.append, second.append])
    assert first == second and first
    assert isinstance(first[0], ev.PlanMade) and isinstance(first[-1], ev.RunEnded)
    assert first[-1].result is result
    kinds = {type(e) for e in first}
    assert {ev.PhaseStarted, ev.RolloutFinished, ev.ReflectionAnswered, ev.ProposalTested, ev.CandidateAdded,
            ev.IterationEnded} <= kinds
    rollouts = [e for e in first if isinstance(e, ev.RolloutFinished)]
    assert [e.used for e in rollouts] == list(range(1, result.rollouts_used + 1))
    added = [e.record for e in first if isinstance(e, ev.CandidateAdded)]
    assert [r.index for r in added] == [c.index for c in result.candidates]


def test_one_callable_is_enough_and_events_are_frozen():
    seen = []
    _run(budget=60, callbacks=seen.append)
    assert seen
    with pytest.raises(dataclasses.FrozenInstanceError):
        seen[0].plan = None  # type: ignore[misc]


def test_events_can_be_matched():
    best = []

    def on(event: ev.Event) -> None:
        match event:
            case ev.CandidateAdded(record=rec, best=b):
                best.append((rec.index, b))

    result = _run(budget=150, callbacks=on)
    assert best[-1][1] == result.best_score


def test_callbacks_is_a_keyword_only_argument_beside_the_config_and_on_event_is_gone():
    import inspect

    from gepetto.api import RunOptions

    for fn in (gepetto.optimize, gepetto.optimize_async, gepetto.build_engine):
        params = inspect.signature(fn).parameters  # (the options are keywords only: **options)
        assert list(params)[:3] == ["seed_candidate", "trainset", "metric"] and "on_event" not in params
    assert "callbacks" in RunOptions.__annotations__ and "on_event" not in RunOptions.__annotations__
    assert "callbacks" not in gepetto.EngineConfig.model_fields  # a runtime object, not a stored option
    with pytest.raises(gepetto.ConfigError, match=r"unknown option 'on_event'; accepted: .*callbacks"):
        _run(budget=60, on_event=print)


def test_each_event_kind_keeps_its_short_name():
    kinds = {cls.kind for cls in vars(ev).values()
             if isinstance(cls, type) and issubclass(cls, ev.Event) and cls is not ev.Event}
    assert kinds == {"plan", "phase", "rollout", "reflection", "reflection_error", "proposal", "merge", "candidate",
                     "lm_unavailable", "iteration", "done", "cut", "route", "confirmed"}


def test_secrets_are_redacted_before_a_callback_sees_them(monkeypatch):
    key = "sk-" + "t3st" * 8
    monkeypatch.setenv("OPENAI_API_KEY", key)
    answer = f"<new_instruction>Answer the question. Use {key}.</new_instruction>"
    seen = []
    _run(budget=60, reflection_lm=ScriptedLM(lambda m, p: answer), callbacks=seen.append)
    answers = [e for e in seen if isinstance(e, ev.ReflectionAnswered)]
    assert answers and all(key not in e.raw and key not in e.text for e in answers)


def test_an_lm_outage_is_an_event_with_what_happens_next():
    class Flaky(sim.SimTaskLM):
        async def complete(self, messages, **params):
            if self.calls in (2, 3):
                self.calls += 1
                raise LMUnavailable("sim-task: HTTP 503")
            return await super().complete(messages, **params)

    seen = []
    task = sim.task()
    gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset, program=task.program,
                     task_lm=Flaky(), reflection_lm=sim.SimReflectionLM(), budget=60, lm_retry_pause=0,
                     max_concurrency=1, callbacks=seen.append)
    failed = [e for e in seen if isinstance(e, ev.LMFailed)]
    assert [(e.in_a_row, e.retry_in) for e in failed] == [(1, 0), (2, 0)]


def test_the_store_logs_proposals_as_before(tmp_path):
    from gepetto.config import load_config
    from gepetto.runner import start_or_resume

    cfg = load_config(task="sim", task_lm="sim:task", reflection_lm="sim:reflection", budget=120, seed=1)
    start_or_resume(cfg, storage=tmp_path / "s.sqlite", run="r")
    store = RunStore(tmp_path / "s.sqlite")
    proposal = store.events("r", "proposal")[0]["data"]
    assert set(proposal) == {"session", "parent", "component", "text", "minibatch_before", "minibatch_after",
                             "accepted", "proposal"}  # (proposal: which transcript it ends, tests/test_transcripts.py)
    assert "budget" in store.events("r", "plan")[0]["data"]["text"]
    done = store.events("r", "done")[0]["data"]
    assert done["stop_reason"] in {r.value for r in StopReason} and done["stop_message"]


# ---- stop reasons ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("reason", list(StopReason))
def test_a_stored_stop_reason_is_read_by_its_value(reason):
    assert StopReason.parse(reason.value) is reason


def test_unknown_or_missing_stop_reasons_are_none():
    assert StopReason.parse("(unfinished)") is None and StopReason.parse(None) is None
    assert StopReason.parse("something else") is None
    assert StopReason.parse("no improvement for 20 iterations") is None  # a message for people is no reason


def test_status_and_failure_come_from_the_enum():
    assert {r for r in StopReason if r.resumable} == {StopReason.INTERRUPTED, StopReason.SIGTERM,
                                                      StopReason.LM_UNAVAILABLE}
    assert {r for r in StopReason if r.failed} == {StopReason.LM_UNAVAILABLE}


def test_a_result_stores_the_reason_as_its_value_and_the_message_beside_it():
    d = _run(budget=60).to_dict()
    assert d["stop_reason"] == "budget_exhausted" and d["stop_message"].startswith("budget")
    assert json.loads(json.dumps(d))["stop_reason"] == "budget_exhausted"


def _prose_result(result: gepetto.Result, prose: str) -> dict:
    """`result.to_dict()` with a message for people where the StopReason value belongs, and no message."""
    d = result.to_dict()
    d.pop("stop_message")
    d["stop_reason"] = prose
    return d


def test_a_run_stored_with_a_stop_message_for_a_reason_still_opens(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    store.create_run("old", {"task": "sim", "task_lm": "sim:task", "reflection_lm": "sim:reflection",
                             "budget": 60}, seed=0)
    result = _run(budget=60)
    for rec in result.candidates:
        store.put_candidate("old", rec)
    store.finish_run("old", "interrupted", _prose_result(result, "interrupted (SIGTERM)"))
    snap = run_snapshot(store, "old")
    assert snap["result"]["stop_reason"] is None and snap["result"]["stop_message"] == "interrupted (SIGTERM)"
    assert snap["run"]["status"] == "interrupted"
    page = render_report(snap)
    assert "interrupted (SIGTERM)" in page and "(sigterm)" not in page
    store.close()
    from gepetto.cli import app

    shown = CliRunner().invoke(app, ["show", "old", "--storage", str(tmp_path / "runs.sqlite")])
    assert shown.exit_code == 0 and "stopped: interrupted (SIGTERM)" in shown.output


# ---- proposal outcomes ----------------------------------------------------------------------------------


def test_outcome_labels_are_the_labels_shown_before():
    assert {o.value for o in Outcome} == {
        "accepted", "rejected: not better on minibatch", "rejected: already tried", "rejected: truncated",
        "rejected: empty", "rejected: unchanged", "rejected: chat reply", "rejected: copies our prompt markers",
        "rejected: echoes the examples", "rejected: misses the right answer",
        "rejected: over the length budget",
        "rejected: raced out in validation", "reflection error",
        "skipped: parent perfect on minibatch",
        "skipped: no open mistake in the known training rollouts", "merge accepted", "merge rejected"}
    assert str(Outcome.TRUNCATED) == "rejected: truncated" and Outcome.TRUNCATED.reason == "truncated"
    assert Outcome.MERGE_ACCEPTED.group == "merge" and Outcome.NO_OPEN_MISTAKE.group == "skipped"


def test_every_rejection_the_vetters_can_give_is_an_outcome():
    # the vetters name their reasons as Outcome members (never a string made into one): scan their returns
    reflect = (SRC / "engine" / "reflect.py").read_text()
    edits = (SRC / "engine" / "edits.py").read_text()
    reasons = set(re.findall(r'ReflectionProposal\([^,]+, Outcome\.([A-Z_]+)', reflect))
    reasons |= set(re.findall(r'return (?:rule|""), Outcome\.([A-Z_]+)', edits))
    assert {"TRUNCATED", "EMPTY", "UNCHANGED", "CHAT_REPLY", "MISSES_ANSWER", "ECHO"} <= reasons
    assert not re.search(r'ReflectionProposal\([^,]+, "|return (?:rule|""), "', reflect + edits)
    for name in reasons:
        assert Outcome[name].group == "rejected"


def test_proposals_are_counted_by_outcome_and_still_looked_up_by_label():
    result = _run(budget=60, reflection_lm=ScriptedLM(lambda m, p: ""), max_idle_iterations=2)  # empty answers
    assert all(isinstance(k, Outcome) for k in result.proposals)
    assert result.proposals[Outcome.EMPTY] == result.proposals["rejected: empty"] > 0
    assert json.loads(json.dumps(result.to_dict()))["proposals"]["rejected: empty"] > 0


# ---- the best candidate ---------------------------------------------------------------------------------


def test_best_index_rule():
    assert best_index([]) is None and best_index([None, math.nan]) is None
    assert best_index([0.2, 0.5, 0.5, 0.1]) == 1  # the earliest of a tie
    assert best_index([None, 0.0]) == 1 and best_index([math.nan, 0.3, 0.4]) == 2


@given(st.lists(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0, None]), max_size=12))
def test_best_index_is_the_best_mean_earliest_on_ties(means):
    got = best_index(means)
    valid = [(m, -i) for i, m in enumerate(means) if m is not None]
    assert got == (None if not valid else -max(valid)[1])
    vector = np.array([math.nan if m is None else m for m in means], dtype=float)
    assert best_index(vector) == got  # the archive's vectorised path: the same rule


def test_the_archive_uses_the_same_rule():
    rng = random.Random(3)
    archive = ParetoArchive(4)
    rows = [[rng.choice([0.0, 0.5, 1.0]) for _ in range(4)] for _ in range(30)]
    for row in rows:
        archive.add(row)
        seen = rows[: archive._n]
        as_stored = [{f"e{i}": x for i, x in enumerate(r)} for r in seen]
        assert archive.best() == best_index([sum(r) / 4 for r in seen], evidence(as_stored))


def test_engine_result_snapshot_and_report_agree_on_the_best(tmp_path):
    from gepetto.config import load_config
    from gepetto.runner import start_or_resume

    cfg = load_config(task="sim", task_lm="sim:task", reflection_lm="sim:reflection?noise=0.4", budget=200, seed=4)
    _, result = start_or_resume(cfg, storage=tmp_path / "s.sqlite", run="r")
    best = result.candidates[result.best_index]
    assert best.candidate == result.best_candidate and best.mean == result.best_score
    snap = run_snapshot(RunStore(tmp_path / "s.sqlite"), "r")
    assert snap["result"]["best_candidate"] == result.best_candidate.to_dict()
    page = render_report(snap)
    found = re.search(r'<script type="application/json" id="gepetto-data">(.*?)</script>', page, re.S)
    data = json.loads(found.group(1))
    assert data["best_index"] == result.best_index
