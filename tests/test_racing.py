"""Racing validation (`validation="racing(...)"`): a child whose validation proves it out is cut, and the cut is exact:
the run keeps the same Pareto front and best candidate as with full validation, for fewer rollouts."""

import itertools
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst
from typer.testing import CliRunner

import gepetto
from gepetto.cli import app
from gepetto.config import ConfigError, EngineConfig
from gepetto.engine import events as ev
from gepetto.engine import racing
from gepetto.engine.events import Outcome
from gepetto.engine.pareto import ParetoArchive
from gepetto.engine.racing import Racing
from gepetto.progress import ProgressDisplay
from gepetto.report.html import render_report
from gepetto.store.snapshot import run_snapshot
from gepetto.store.sqlite import RunStore
from gepetto.testing import sim

# ---- the bound ----------------------------------------------------------------------------------------------


def test_a_member_perfect_on_the_rest_and_better_on_one_example_run_cuts_the_child():
    front = np.array([[1.0, 1.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0]])
    run = np.array([True, True, False, False])
    v = racing.verdict(front, run, np.array([0.0, 1.0, 0.0, 0.0]))
    assert v.decision == "open"  # member 0 is 0.0 on example 2: the child may still score 1.0 there
    run[2] = True
    v = racing.verdict(front, run, np.array([0.0, 1.0, 0.0, 0.0]))
    assert (v.decision, v.by) == ("cut", 0)  # member 0 >= (0, 1, 0, 1.0) and better on example 0


def test_an_equal_member_does_not_cut_a_child_that_may_tie_it():
    # an equal score vector joins the front (engine/pareto.py): a child that can still tie a member is not cut
    front = np.array([[1.0, 0.0, 1.0]])
    v = racing.verdict(front, np.array([True, True, False]), np.array([1.0, 0.0, 0.0]))
    assert v.decision == "open"


def test_a_child_above_every_member_somewhere_is_sure_and_runs_the_rest_at_once():
    front = np.array([[1.0, 0.0, 1.0], [0.0, 0.5, 1.0]])
    v = racing.verdict(front, np.array([True, True, False]), np.array([0.5, 1.0, 0.0]))
    assert v.decision == "sure"


vectors = hst.lists(hst.sampled_from([0.0, 0.5, 1.0]), min_size=4, max_size=4)


@settings(max_examples=300, deadline=None)
@given(rows=hst.lists(vectors, min_size=1, max_size=4), child=vectors,
       run=hst.lists(hst.booleans(), min_size=4, max_size=4))
def test_the_cut_is_exact(rows, child, run):
    """Cut iff every completion of the child's scores (any value in [0, 1] on the examples not run) would be kept
    off the front and not be the best; here completions range over {0, 0.5, 1}, which include the bound 1.0."""
    archive = ParetoArchive(4)
    for row in rows:
        archive.add(row)
    front = archive.front_scores.copy()
    mask = np.array(run)
    verdict = racing.verdict(front, mask, np.array(child))
    left = [j for j in range(4) if not run[j]]
    outcomes = []
    for values in itertools.product([0.0, 0.5, 1.0], repeat=len(left)):
        full = list(child)
        for j, x in zip(left, values, strict=True):
            full[j] = x
        trial = ParetoArchive(4)
        for row in rows:
            trial.add(row)
        idx = trial.add(full)
        outcomes.append(idx in trial.front or trial.best() == idx)
    if verdict.decision == "cut":
        assert not any(outcomes)
    else:
        assert outcomes[-1]  # 1.0 on every example left: on the front (so racing must go on)
    if verdict.decision == "sure":
        assert all(outcomes) or not mask.any()


def test_the_order_runs_free_examples_first_then_thin_ones_then_the_parents_failures():
    ids = ["a", "b", "c", "d", "e"]
    front = np.array([[1.0, 1.0, 0.0, 1.0, 1.0], [1.0, 0.0, 0.0, 1.0, 1.0]])
    parent = [1.0, 0.0, 0.0, 0.0, 1.0]
    order = racing.validation_order(ids, front, parent, {"e"}, random.Random(0))
    assert order[0] == "e"  # free
    assert order[1] == "c"  # no front member perfect there
    assert order[2] == "b"  # one member perfect
    assert order[3:] == ["d", "a"]  # two each: the parent's failure first
    assert order == racing.validation_order(ids, front, parent, {"e"}, random.Random(0))


def test_the_next_chunk_goes_after_the_likeliest_dominators_imperfect_examples():
    front = np.array([[1.0, 0.0, 1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]])
    run = np.array([True, False, False, False, False, False])
    # both members are still >= the child; member 0 has 2 imperfect examples left (1, 3), member 1 has 2 (4, 5)
    chunk = racing.next_chunk([5, 4, 3, 2, 1], front, run, np.array([1.0, 0, 0, 0, 0, 0]), 2)
    assert chunk == [3, 1]
    # once the child beats member 0 on example 1, member 1 is the one to go after
    run[1] = True
    chunk = racing.next_chunk([5, 4, 3, 2], front, run, np.array([1.0, 1.0, 0, 0, 0, 0]), 3)
    assert chunk == [5, 4, 3]


def test_the_sign_test_cuts_after_enough_losses_without_a_win():
    assert [racing.losses_needed(c) for c in (0.75, 0.9, 0.95, 0.99)] == [2, 4, 5, 7]
    # the member is not perfect on the examples left, so no proof; it beats the child on the first k run
    front = np.array([[1.0] * 5 + [0.5] * 5 + [0.0] * 10])
    child = np.zeros(20)
    run = np.zeros(20, bool)
    run[:4] = True
    assert racing.verdict(front, run, child).decision == "open"
    assert racing.verdict(front, run, child, 0.95).decision == "open"  # 4 losses: 0.5**4 > 0.05
    v = racing.verdict(front, run, child, 0.9)
    assert (v.decision, v.by, v.losses) == ("cut", 0, 4)
    run[4] = True
    assert racing.verdict(front, run, child, 0.95).losses == 5
    assert racing.verdict(front, run, child).decision == "open"  # without a confidence: proof only
    # ties are no evidence: five examples where both score 0 count for nothing
    run = np.zeros(20, bool)
    run[10:15] = True
    assert racing.verdict(front, run, child, 0.9).decision == "open"


def test_the_sign_test_never_cuts_a_child_that_beat_the_member_once():
    front = np.array([[1.0] * 9 + [0.0] + [0.5] * 10])
    child = np.array([0.0] * 9 + [1.0] + [0.0] * 10)
    run = np.zeros(20, bool)
    run[:10] = True  # nine losses, one win: the member can never dominate it
    assert racing.verdict(front, run, child, 0.99).decision == "sure"


def test_with_a_confidence_the_order_is_free_examples_then_random():
    ids = [f"v{j}" for j in range(12)]
    front = np.array([[1.0] * 6 + [0.0] * 6])
    parent = [1.0] * 6 + [0.0] * 6
    order = racing.validation_order(ids, front, parent, {"v3"}, random.Random(1), informed=False)
    assert order[0] == "v3" and sorted(order) == sorted(ids)
    assert order[1:] != sorted(order[1:], key=lambda e: (int(e[1:]) < 6, e))  # not thin ones first
    assert order == racing.validation_order(ids, front, parent, {"v3"}, random.Random(1), informed=False)


# ---- the engine ---------------------------------------------------------------------------------------------

TASK = sim.task(n_train=24, n_val=30, kinds=6, components=2)


# (fewshot=0 and trim=0 here: the counts and cuts below are of paths without demonstrations or trims; racing with
# the default few-shot resumes exactly: tests/test_strategies.py)
PATH = {"fewshot": 0, "proposer": "auto(trim=0)"}
def _run(validation, seed=2, iterations=40, **options):
    events = []
    result = gepetto.optimize(
        TASK.seed_candidate, TASK.trainset, TASK.metric, valset=TASK.valset, program=TASK.program,
        task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(noise=0.3, seed=seed, forget=True, max_rules=2),
        budget=100_000, seed=seed, validation=validation, max_idle_iterations=1000, callbacks=events.append,
        stop=lambda s: s.iteration >= iterations, **{**PATH, **options})
    return result, events


def _front(result):
    return [result.candidates[i].candidate.id for i in result.pareto_front]


@pytest.mark.parametrize("seed", [0, 2, 5])
def test_racing_keeps_the_front_and_the_best_of_full_validation_for_fewer_rollouts(seed):
    full, _ = _run("full", seed)
    raced, events = _run("racing", seed)
    assert _front(raced) == _front(full)
    assert raced.best_candidate == full.best_candidate and raced.best_score == full.best_score
    assert raced.iterations == full.iterations and raced.history[-1][1] == full.history[-1][1]
    assert raced.raced_out and raced.rollouts_used < full.rollouts_used
    n = len(TASK.valset)
    saved = sum(n - len(c.val_scores) for c in raced.raced_out)
    assert raced.rollouts_used == full.rollouts_used - saved  # the only rollouts not paid: the cut ones
    # each raced-out child is one the full run added to its pool, dominated
    by_id = {c.candidate.id: c for c in full.candidates}
    for rec in raced.raced_out:
        whole = by_id[rec.candidate.id]
        assert whole.index not in full.pareto_front
        assert all(whole.val_scores[e] == s for e, s in rec.val_scores.items())
        assert rec.candidate.id not in {c.candidate.id for c in raced.candidates}
    # what became of each proposal: raced out instead of accepted
    accepted = (Outcome.ACCEPTED, Outcome.MERGE_ACCEPTED)
    assert sum(full.proposals.get(o, 0) for o in accepted) == \
        sum(raced.proposals.get(o, 0) for o in accepted) + raced.proposals[Outcome.RACED_OUT]
    cuts = [e for e in events if isinstance(e, ev.ValidationCut)]
    assert [c.record.candidate for c in cuts] == [r.candidate for r in raced.raced_out]
    assert all(c.evaluated == len(c.record.val_scores) < c.total == n for c in cuts)


def test_racing_with_several_proposals_per_round_is_exact_too():
    full, _ = _run("full", 1, 30, proposals_per_round=3)
    raced, _ = _run("racing", 1, 30, proposals_per_round=3)
    assert raced.raced_out and _front(raced) == _front(full) and raced.best_candidate == full.best_candidate


def test_a_cut_is_only_proved_by_a_member_of_the_front():
    _, events = _run("racing", 2)
    cuts = [e for e in events if isinstance(e, ev.ValidationCut)]
    assert cuts
    for cut in cuts:
        before = [e for e in events[: events.index(cut)] if isinstance(e, ev.CandidateAdded)]
        assert cut.dominated_by in before[-1].front  # the front when the child's validation began
        assert "1.0 on the" in cut.reason


def test_a_confidence_cuts_more_children_for_fewer_rollouts_and_never_adds_an_unvalidated_one():
    exact, _ = _run("racing", 5)
    bold, events = _run(Racing(confidence=0.9), 5)
    cuts = [e for e in events if isinstance(e, ev.ValidationCut)]
    by_test = [c for c in cuts if "sign test" in c.reason]
    assert by_test and all(c.evaluated < c.total for c in by_test)
    n = len(TASK.valset)
    assert len(bold.raced_out) > len(exact.raced_out) and bold.rollouts_used < exact.rollouts_used
    assert bold.iterations == exact.iterations
    # every candidate in the pool (so every best and every front member) was validated on the whole set
    assert all(len(c.val_scores) == n for c in bold.candidates)
    assert bold.best_score >= exact.candidates[0].mean  # never below the seed
    # each sign-test cut names a member that was at least as good on every example run
    for cut in by_test:
        added = [e for e in events[: events.index(cut)] if isinstance(e, ev.CandidateAdded)][-1]
        assert cut.dominated_by in added.front
        member = next(c for c in bold.candidates if c.index == cut.dominated_by)
        assert all(member.val_scores[e] >= s for e, s in cut.record.val_scores.items())
        assert sum(member.val_scores[e] > s for e, s in cut.record.val_scores.items()) >= 4


def test_a_race_with_a_confidence_resumes_exactly(tmp_path):
    def run(storage, stop=None):
        return gepetto.optimize(
            TASK.seed_candidate, TASK.trainset, TASK.metric, valset=TASK.valset, program=TASK.program,
            task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(noise=0.3, seed=2, forget=True, max_rules=2),
            budget=400, seed=2, validation="racing(chunk=2, confidence=0.9)", storage=storage, run="r", fewshot=0,
            stop=stop)

    whole = run(tmp_path / "whole.sqlite")
    assert whole.raced_out
    storage = tmp_path / "s.sqlite"
    k = whole.raced_out[0].iteration
    run(storage, stop=lambda s: "stop" if s.iteration >= k else None)
    assert _fingerprint(run(storage)) == _fingerprint(whole)


def test_racing_never_spends_more_than_the_budget():
    for budget in (120, 200, 333):
        result = gepetto.optimize(
            TASK.seed_candidate, TASK.trainset, TASK.metric, valset=TASK.valset, program=TASK.program,
            task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(noise=0.3, seed=2, forget=True, max_rules=2),
            budget=budget, seed=2, validation=Racing(chunk=1), proposals_per_round=2)
        assert result.rollouts_used <= budget


def _budgeted(budget, validation, **options):
    return gepetto.optimize(
        TASK.seed_candidate, TASK.trainset, TASK.metric, valset=TASK.valset, program=TASK.program,
        task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(noise=0.3, seed=2, forget=True, max_rules=2),
        budget=budget, seed=2, validation=validation, **{**PATH, **options})


@pytest.mark.parametrize("budget", [120, 200, 333])
def test_racing_spends_the_tail_of_the_budget_and_leaves_the_last_child_partial(budget):
    plain, raced = _budgeted(budget, "full"), _budgeted(budget, "racing")
    n = len(TASK.valset)
    assert budget - plain.rollouts_used >= 5  # without racing, a whole validation must fit: the tail is left
    assert "could cost" in plain.stop_message
    assert raced.rollouts_used == budget and raced.stop_reason is gepetto.StopReason.BUDGET_EXHAUSTED
    [tail] = raced.partial_candidates  # the last child: neither cut nor validated in full
    assert 0 < len(tail.val_scores) < n and "partial" in raced.stop_message
    assert tail.candidate.id not in {c.candidate.id for c in raced.candidates}  # never in the pool or the best
    assert all(len(c.val_scores) == n for c in raced.candidates)


def test_a_tail_child_left_partial_is_finished_by_a_resume_with_a_larger_budget(tmp_path):
    def run(storage, budget):
        return _budgeted(budget, "racing(chunk=2)", storage=storage, run="r")

    whole = run(tmp_path / "whole.sqlite", 500)
    storage = tmp_path / "s.sqlite"
    part = run(storage, 200)
    assert part.partial_candidates and part.rollouts_used == 200
    final = run(storage, 500)
    assert _fingerprint(final) == _fingerprint(whole)
    assert RunStore(storage).count_rollouts("r") == final.rollouts_used == 500  # nothing paid twice


def test_the_default_is_off_and_the_chunk_is_checked():
    assert EngineConfig().validation == "full" and Racing() == Racing(chunk=5, confidence=None)
    assert EngineConfig(validation=Racing(chunk=5)).validation == "racing"
    with pytest.raises(ConfigError, match="racing: chunk=0"):
        EngineConfig(validation="racing(chunk=0)")
    for bad in (0.5, 1.0, 2):
        with pytest.raises(ConfigError, match="racing: confidence="):
            Racing(confidence=bad)
    with pytest.raises(ConfigError, match="full: unknown parameter 'confidence'; it takes none"):
        EngineConfig(validation="full(confidence=0.9)")
    result, events = _run("full", 2, 10)
    assert result.raced_out == [] and not any(isinstance(e, ev.ValidationCut) for e in events)
    assert result.to_dict()["raced_out"] == []


def test_the_cli_takes_racing_as_a_validation_spec():
    out = CliRunner().invoke(app, ["optimize", "--help"], env={"COLUMNS": "200"})
    assert "--validation" in out.output and "racing(chunk=5, confidence=null)" in out.output


# ---- stored runs: resume, snapshot, report, progress -----------------------------------------------------------


def _stored(storage, stop=None, callbacks=None):
    # (a run whose path has two children raced out, at iterations 29 and 39, when no trim is proposed)
    return gepetto.optimize(
        TASK.seed_candidate, TASK.trainset, TASK.metric, valset=TASK.valset, program=TASK.program,
        task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(noise=0.3, seed=2, forget=True, max_rules=2),
        budget=500, seed=0, validation="racing(chunk=2)", storage=storage, run="r", stop=stop, callbacks=callbacks,
        proposer="auto(trim=0)")


def _fingerprint(result):
    d = result.to_dict()
    d.pop("wall_seconds")
    d.pop("ledger")
    return d


def test_a_raced_run_stopped_between_iterations_resumes_to_the_uninterrupted_result(tmp_path):
    whole = _stored(tmp_path / "whole.sqlite")
    assert len(whole.raced_out) >= 2
    cut_at = [c.iteration for c in whole.raced_out]
    storage = tmp_path / "s.sqlite"
    for k in (cut_at[0] - 1, cut_at[0], cut_at[-1]):
        part = _stored(storage, stop=lambda s, k=k: f"iteration {k}" if s.iteration >= k else None)
        assert part.stop_reason is gepetto.StopReason.CONDITION
    final = _stored(storage)
    assert _fingerprint(final) == _fingerprint(whole)
    assert RunStore(storage).count_rollouts("r") == final.rollouts_used  # nothing paid twice
    snap = run_snapshot(RunStore(storage), "r")
    assert [c["id"] for c in snap["result"]["raced_out"]] == [c.candidate.id for c in whole.raced_out]


class StopMidRace:
    """A stop condition that stops the run `after` rollouts into the validation of candidate `target`."""

    def __init__(self, target, after):
        self.target, self.after, self.seen, self.stop = target, after, 0, None

    def __call__(self, status):
        return None

    def arm(self, stop):
        self.stop = stop
        return lambda: None

    def on_event(self, event):
        if isinstance(event, ev.RolloutFinished) and event.candidate == self.target and event.example.startswith("val"):
            self.seen += 1
            if self.seen == self.after:
                self.stop(gepetto.StopReason.STOP_REQUESTED, "in the middle of a race")


def test_a_run_stopped_in_the_middle_of_a_race_keeps_the_child_partial_and_resumes_exactly(tmp_path):
    whole = _stored(tmp_path / "whole.sqlite")
    first = whole.raced_out[0]
    assert len(first.val_scores) > 3
    storage = tmp_path / "s.sqlite"
    cond = StopMidRace(first.candidate.id, 3)
    part = _stored(storage, stop=cond, callbacks=cond.on_event)
    assert part.stop_reason is gepetto.StopReason.STOP_REQUESTED
    assert [p.candidate for p in part.partial_candidates] == [first.candidate] and not part.raced_out
    assert len(part.partial_candidates[0].val_scores) == 3
    final = _stored(storage)
    assert _fingerprint(final) == _fingerprint(whole)
    assert RunStore(storage).count_rollouts("r") == final.rollouts_used


def test_the_snapshot_report_and_progress_show_raced_out_children(tmp_path):
    lines = []
    display = ProgressDisplay(quiet=False)
    display._print = lambda *parts: lines.append("".join(p if isinstance(p, str) else p[0] for p in parts))
    result = _stored(tmp_path / "s.sqlite", callbacks=display)
    assert result.raced_out
    assert any("raced out after" in line for line in lines)
    store = RunStore(tmp_path / "s.sqlite")
    cuts = store.events("r", "cut")
    assert [e["data"]["id"] for e in cuts] == [c.candidate.id for c in result.raced_out]
    assert all(e["data"]["evaluated"] < e["data"]["total"] for e in cuts)
    snap = run_snapshot(store, "r")
    shown = CliRunner().invoke(app, ["show", "r", "--storage", str(tmp_path / "s.sqlite")])
    assert shown.exit_code == 0 and f"racing: {len(result.raced_out)} validations cut short" in shown.output
    html = render_report(snap)
    assert "Racing cut" in html and f"{len(result.raced_out)} validations short" in html
    assert "raced out in validation" in html
