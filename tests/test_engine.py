"""The GEPA loop on scripted LMs: acceptance, rejection, merge, budget, determinism, failures, stops."""

import asyncio
import collections
import dataclasses
import itertools
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gepetto
from gepetto.engine.events import IterationEnded, Outcome, PlanMade, RolloutFinished, StopReason
from gepetto.engine.merge import Merge, find_merge, merge_chance, merge_texts
from gepetto.lm.base import Completion, LMUnavailable, Usage
from gepetto.program import MetricError
from gepetto.store.sqlite import RunStore, StoredRollouts
from gepetto.testing import ScriptedLM, sim
from gepetto.types import Candidate, Example, Score


def run(task=None, reflection=None, task_lm=None, **config):
    task = task or sim.task()
    return gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                            program=task.program, task_lm=task_lm or sim.SimTaskLM(),
                            reflection_lm=reflection or sim.SimReflectionLM(), **config)


def fingerprint(result):
    d = result.to_dict()
    d.pop("wall_seconds")
    d.pop("ledger")
    return d


def test_improving_proposals_are_accepted_and_reach_the_optimum():
    result = run(budget=200, seed=0)
    assert result.seed_score == 0.0
    assert result.best_score == 1.0
    assert all(f"rule-{k}" in result.best_candidate["instruction"] for k in range(4))
    assert result.proposals[Outcome.ACCEPTED] >= 4
    assert result.stop_reason is StopReason.PERFECT_SCORE and result.stop_message == "validation score is perfect"
    # lineage: every accepted child descends from the seed
    assert result.candidates[0].origin == "seed"
    assert all(c.parents for c in result.candidates[1:])


def test_worse_proposals_are_rejected_on_the_minibatch():
    worse = ScriptedLM(lambda m, p: "<new_instruction>Answer in French, always.</new_instruction>")
    result = run(reflection=worse, budget=60, seed=0)
    assert len(result.candidates) == 1
    assert result.best_score == result.seed_score == 0.0
    assert result.proposals[Outcome.NOT_BETTER] >= 1
    assert result.proposals.get(Outcome.ACCEPTED, 0) == 0


@pytest.mark.parametrize(
    "bad",
    ["", "Certainly! Please provide the inputs.", "<new_instruction>Answer the question.</new_instruction>"],
)
def test_malformed_proposals_cost_no_rollouts(bad):
    lm = ScriptedLM(lambda m, p: bad)
    task = sim.task(n_train=6, n_val=5)
    result = run(task=task, reflection=lm, budget=100, seed=0, max_idle_iterations=3)
    # only the seed validation and the parents' minibatches were paid: no child was ever run
    child_runs = [k for k in result.candidates if k.origin != "seed"]
    assert not child_runs
    assert result.rollouts_used <= len(task.valset) + len(task.trainset)
    assert result.stop_reason is StopReason.STALLED and result.stop_message.startswith("stalled")
    assert len(lm.calls) == 3 * result.iterations  # every iteration retried the reflection LM 3 times
    # the stop says what the idle iterations' proposals said and what is left of the budget
    assert f"; {result.budget - result.rollouts_used} of {result.budget} rollouts left unspent" in result.stop_message
    assert "rejected:" in result.stop_message


def test_a_stall_says_when_nothing_was_left_to_learn_from():
    from gepetto.engine.stopping import RunStatus, Stalled

    status = RunStatus(30, 140, 300, 0.8, 2, 12, 10, 60.0, 0.0, None,  # type: ignore[arg-type]
                       {str(Outcome.NO_OPEN_MISTAKE): 9, str(Outcome.UNCHANGED): 1})
    stop = Stalled(10)(status)
    assert stop is not None and stop.reason is StopReason.STALLED
    assert stop.message == ("stalled: 10 iterations in a row found nothing worth a rollout (skipped: no open mistake "
                            "in the known training rollouts 9; rejected: unchanged 1): every mistake the best makes "
                            "on the training examples it ran has had its rules tried (up to 4 times each): more "
                            "training examples would give it more to learn from, more budget would not; 160 of 300 "
                            "rollouts left unspent")
    assert Stalled(11)(status) is None


def test_truncated_proposal_is_retried_with_more_tokens():
    answers = [Completion("<new_instruction>Apply rule-0. Apply rule-1 and", Usage(10, 10), "length"),
               Completion("<new_instruction>Answer the question. Apply rule-0.</new_instruction>")]
    lm = ScriptedLM(lambda m, p: answers.pop(0) if answers else "")
    result = run(reflection=lm, budget=40, seed=0, max_idle_iterations=2)
    assert lm.calls[1][1]["max_tokens"] == 2 * lm.calls[0][1]["max_tokens"]
    assert result.proposals[Outcome.TRUNCATED] == 1


def test_rewrites_are_sampled_by_default_and_the_schedule_can_be_set():
    lm = ScriptedLM(lambda m, p: "<new_instruction>Answer the question.</new_instruction>")  # always unchanged
    run(reflection=lm, budget=40, seed=0, max_idle_iterations=2)
    assert [p["temperature"] for _, p in lm.calls[:3]] == [1.0, 1.0, 1.0]  # a greedy rewrite copies the text back
    assert len({p["seed"] for _, p in lm.calls}) == len(lm.calls)  # each attempt its own (reproducible) sample
    lm = ScriptedLM(lambda m, p: "<new_instruction>Answer the question.</new_instruction>")
    run(reflection=lm, budget=40, seed=0, max_idle_iterations=2, reflection_temperatures=[0, 0.5])
    assert [p["temperature"] for _, p in lm.calls[:3]] == [0, 0.5, 0.5]  # the last one repeats
    # the edit proposer's short rule answers start greedy
    from gepetto.config import EngineConfig
    from gepetto.engine.proposers import RULE_TEMPERATURES, temperature

    assert [temperature(EngineConfig(), a, RULE_TEMPERATURES) for a in range(4)] == [0.0, 0.7, 1.0, 1.0]


def test_a_rewrite_that_repeats_an_earlier_child_is_asked_again():
    # every first answer is the same new text: tested once, then refused as already tried and asked again
    def answer(messages, params):
        if params["seed"] % 10 == 0:
            return "<new_instruction>Answer the question. Apply rule-9.</new_instruction>"
        return f"<new_instruction>Answer the question. Apply rule-9. Draft {params['seed']}.</new_instruction>"

    lm = ScriptedLM(answer)
    result = run(reflection=lm, budget=60, seed=0, max_idle_iterations=3,
                 fewshot="fewshot(gold=false)")  # (no demonstration from a gold: only rewrites are tested)
    retried = [(m, p) for m, p in lm.calls if p["seed"] % 10 == 1]
    assert retried and all("proposed before" in m[-1]["content"] for m, _ in retried)
    assert result.proposals[Outcome.ALREADY_TRIED] == len(retried)  # each refused before its child was built
    assert result.proposals[Outcome.NOT_BETTER] == len(retried) + 1  # and each retry's text was tested


@given(budget=st.integers(12, 120), minibatch=st.integers(1, 4), n_val=st.integers(2, 12),
       noise=st.sampled_from([0.0, 0.5]), seed=st.integers(0, 3), per_round=st.sampled_from([1, 3]))
@settings(max_examples=40, deadline=None)
def test_budget_is_never_exceeded(budget, minibatch, n_val, noise, seed, per_round):
    task = sim.task(n_train=8, n_val=n_val, kinds=5)
    result = run(task=task, reflection=sim.SimReflectionLM(noise=noise, seed=seed), budget=max(budget, n_val),
                 minibatch_size=minibatch, seed=seed, proposals_per_round=per_round)
    assert result.rollouts_used <= max(budget, n_val)
    # every paid rollout is kept: the count equals the distinct (candidate, example) pairs evaluated
    assert result.ledger.roles["task"].calls == result.rollouts_used


def test_same_seed_same_result_and_other_seed_other_path():
    a = run(reflection=sim.SimReflectionLM(noise=0.4, seed=7), budget=150, seed=5)
    b = run(reflection=sim.SimReflectionLM(noise=0.4, seed=7), budget=150, seed=5)
    assert fingerprint(a) == fingerprint(b)
    c = run(reflection=sim.SimReflectionLM(noise=0.4, seed=7), budget=150, seed=6)
    assert fingerprint(a) != fingerprint(c)


def test_concurrency_does_not_change_the_result():
    lat = sim.SimTaskLM(latency=0.001)
    a = run(task_lm=lat, budget=100, seed=2, max_concurrency=1)
    b = run(task_lm=sim.SimTaskLM(latency=0.001), budget=100, seed=2, max_concurrency=16)
    assert fingerprint(a) == fingerprint(b)


# (with few-shot, the default, a proposal reads the rollouts and children tried so far and its test's verdict
# counts: all as of the round's start, whatever the timing; fixed share too)
@pytest.mark.parametrize("options", [{}, {"fewshot": "fewshot(adaptive=false)"}, {"fewshot": 0}])
def test_concurrent_proposal_rounds_are_deterministic_and_reach_the_optimum(options):
    runs = [run(task_lm=sim.SimTaskLM(latency=lat), reflection=sim.SimReflectionLM(noise=0.3, latency=lat),
                budget=300, seed=9, proposals_per_round=4, max_concurrency=c, **options)
            for lat, c in ((0.0, 1), (0.002, 16), (0.001, 4))]
    assert fingerprint(runs[0]) == fingerprint(runs[1]) == fingerprint(runs[2])
    assert runs[0].best_score == 1.0


def test_a_raising_program_or_metric_is_a_failed_rollout():
    task = sim.task(n_train=6, n_val=6)

    def flaky_metric(example, output, trace):
        if example.id == "val-1":
            raise RuntimeError("metric exploded")
        return task.metric(example, output, trace)

    async def flaky_program(candidate, example, ctx):
        if example.id == "val-2":
            raise ValueError("program exploded")
        return await ctx.lm("instruction", example.inputs["q"])

    engine = gepetto.build_engine(task.seed_candidate, task.trainset, flaky_metric, valset=task.valset,
                                  program=flaky_program, task_lm=sim.SimTaskLM(),
                                  reflection_lm=sim.SimReflectionLM(), budget=80)
    result = gepetto.run_engine(engine)
    runs = engine.state.rollouts
    seed_id = task.seed_candidate.id
    assert runs[(seed_id, "val-1")].score.value == 0.0
    assert "metric raised" in runs[(seed_id, "val-1")].score.feedback
    assert "RuntimeError: metric exploded" in runs[(seed_id, "val-1")].score.feedback
    assert "program raised" in runs[(seed_id, "val-2")].score.feedback
    assert result.best_score > result.seed_score  # the run went on and still improved


def test_sync_program_with_ctx_lm():
    task = sim.task()

    def program(candidate, example, ctx):
        return ctx.lm("instruction", example.inputs["q"]).strip()

    result = run(task=gepetto.Task("sync", program, task.metric, task.seed_candidate, task.trainset,
                                   task.valset), budget=120)
    assert result.best_score == 1.0


def test_merge_combines_two_lineages():
    seen = []
    for seed in range(8):
        # a forgetful reflection LM makes lineages trade off, so the front holds branches worth merging
        result = run(task=sim.task(components=2, kinds=6), reflection=sim.SimReflectionLM(forget=True, max_rules=2),
                     budget=300, seed=seed, merge="merge")
        for m in (c for c in result.candidates if c.origin == "merge"):
            assert len(m.parents) == 2
            seen.append(m.mean >= max(result.candidates[p].mean for p in m.parents))
    assert seen, "no merge was accepted in 8 seeds"
    assert any(seen), "no merge beat both of its parents"


def test_merge_chance_starts_at_one_and_learns_from_the_runs_merges():
    assert merge_chance(0, 0) == 1.0  # before any merge: every due merge is tried, as when not adaptive
    assert [merge_chance(0, n) for n in (1, 2, 4)] == [2 / 3, 1 / 2, 1 / 3]  # falls as merges are rejected
    assert merge_chance(1, 1) == merge_chance(3, 3) == 1.0 and merge_chance(2, 4) == 2 / 3
    with pytest.raises(ValueError):
        merge_chance(2, 1)


async def _clashing(candidate, example, ctx):
    """Two components that cannot both carry rules: a merge of a lineage that fixed `a` with one that fixed `b`
    always fails (as does a child changing the other component), so every merge tried is rejected."""
    if all("rule-" in candidate[c] for c in ("a", "b")):
        return "clash"
    return await sim.two_component_program(candidate, example, ctx)


def test_an_adaptive_merge_tries_fewer_merges_when_they_are_rejected():
    task = dataclasses.replace(sim.task(components=2, kinds=6), program=_clashing)
    tried = {}
    for adaptive in (False, True):
        # two proposals in the first round: the seed's `a` and `b` both improve, two lineages that trade off
        results = [run(task=task, budget=400, seed=seed, proposals_per_round=2,
                       merge=Merge(max=50, adaptive=adaptive)) for seed in range(6)]
        assert not any(r.proposals.get(Outcome.MERGE_ACCEPTED) for r in results)
        tried[adaptive] = sum(r.proposals.get(Outcome.MERGE_REJECTED, 0) for r in results)
    assert tried[False] >= 15  # without it, a merge after nearly every accepted child (23 here)
    assert tried[True] <= 0.7 * tried[False]  # 13 here: the chance fell to 2/3, 1/2, ... as they failed


def test_an_adaptive_merge_never_spends_an_iteration_without_work():
    # one component: a merge can never give anything new (find_merge finds no pair), yet merges fall due
    used = {}
    for adaptive in (False, True):
        events = []
        result = run(reflection=sim.SimReflectionLM(noise=0.3, seed=5), task=sim.task(kinds=6), budget=200, seed=1,
                     merge=f"merge(adaptive={adaptive})", callbacks=events.append)
        used[adaptive] = [e.used for e in events if isinstance(e, IterationEnded)]
        assert result.best_score == 1.0 and not result.proposals.get(Outcome.MERGE_REJECTED)
    idle = {k: sum(b == a for a, b in itertools.pairwise(v)) for k, v in used.items()}
    assert idle[False] >= 3  # today: a due merge with no pair is an iteration that pays nothing
    assert idle[True] == 0 and len(used[True]) == len(used[False]) - idle[False]  # the same work, no idle turn


def test_merge_texts_takes_what_changed_per_component():
    anc = Candidate(a="A0", b="B0", c="C0")
    left, right = Candidate(a="A1", b="B0", c="C0"), Candidate(a="A0", b="B2", c="C0")
    assert merge_texts(left, right, anc, 0.5, 0.5, random.Random(0)) == Candidate(a="A1", b="B2", c="C0")
    both = Candidate(a="A3", b="B2", c="C0")
    assert merge_texts(left, both, anc, 0.4, 0.6, random.Random(0))["a"] == "A3"  # both changed: better parent


def test_find_merge_needs_a_common_ancestor_and_a_new_child():
    cands = [Candidate(a="A0", b="B0"), Candidate(a="A1", b="B0"), Candidate(a="A0", b="B1")]
    parents = [(), (0,), (0,)]
    found = find_merge([1, 2], cands, parents, [0.0, 0.5, 0.5], set(), random.Random(0))
    assert found is not None and found[2] == Candidate(a="A1", b="B1")
    assert find_merge([1, 2], cands, parents, [0.0, 0.5, 0.5], {(1, 2)}, random.Random(0)) is None
    assert find_merge([0, 1], cands, parents, [0.0, 0.5, 0.5], set(), random.Random(0)) is None  # ancestor


def _find_merge_reference(front, candidates, parents, means, tried, rng):
    """find_merge as first written (ancestors walked anew for every pair): what the faster one must equal."""
    from gepetto.engine.merge import ancestors

    known = {c.id for c in candidates}
    pairs = [(i, j) for k, i in enumerate(front) for j in front[k + 1:] if (min(i, j), max(i, j)) not in tried]
    rng.shuffle(pairs)
    for i, j in pairs:
        tried.add((min(i, j), max(i, j)))
        common = ancestors(i, parents) & ancestors(j, parents)
        if not common or i in ancestors(j, parents) or j in ancestors(i, parents):
            continue
        anc = max(common, key=lambda k: (means[k], -k))
        child = merge_texts(candidates[i], candidates[j], candidates[anc], means[i], means[j], rng)
        if child.id not in known:
            return i, j, child
    return None


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 40), st.integers(0, 10**6), st.sampled_from(["tree", "chain", "forest"]))
def test_find_merge_equals_the_reference_on_random_lineages(n, seed, shape):
    rng = random.Random(seed)
    parents, cands = [()], [Candidate(a="A0", b="B0")]
    for i in range(1, n):
        if shape == "forest" and rng.random() < 0.2:
            par = ()  # a second root: some pairs share no ancestor
        elif shape == "chain":
            par = (i - 1,)
        elif rng.random() < 0.15 and i > 2:
            par = tuple(sorted(rng.sample(range(i), 2)))
        else:
            par = (rng.randrange(i),)
        parents.append(par)
        base = cands[par[0]] if par else cands[0]
        comp = rng.choice("ab")
        cands.append(base.replace(comp, base[comp] + f"\nline {i}" if rng.random() < 0.5 else f"{comp}{i}"))
    means = [rng.choice([0.0, 0.25, 0.5, 0.75, 1.0]) for _ in range(n)]
    front = sorted(rng.sample(range(n), rng.randint(1, n)))
    tried = {(min(p), max(p)) for p in (rng.sample(range(n), 2) for _ in range(rng.randint(0, 3)))}
    got_tried, want_tried = set(tried), set(tried)
    r1, r2 = random.Random(seed), random.Random(seed)
    for _ in range(3):  # successive merge steps share `tried` and the RNG
        got = find_merge(front, cands, parents, means, got_tried, r1)
        want = _find_merge_reference(front, cands, parents, means, want_tried, r2)
        assert got == want and got_tried == want_tried and r1.getstate() == r2.getstate()


def test_state_keeps_each_candidates_mean_once():
    from gepetto.engine.state import CandidateRecord, RunState

    state = RunState(["x", "y", "z"], budget=100)
    for i, scores in enumerate([(0.1, 0.2, 0.7), (1.0, 0.3, 0.8), (0.3, 0.3, 0.3)]):
        state.add_record(CandidateRecord(i, Candidate(a=str(i)), (), "seed", 0, None,
                                         dict(zip("xyz", scores, strict=True)), 0))
    assert state.means == [r.mean for r in state.records] and state.best() is state.records[1]


def test_target_score_and_stop_file(tmp_path):
    result = run(budget=200, target_score=0.5)
    assert result.stop_reason is StopReason.TARGET_REACHED and 0.5 <= result.best_score < 1.0
    assert result.stop_message == "target score 0.5 reached"
    stop = tmp_path / "STOP"
    stop.write_text("")
    result = run(budget=200, stop_file=str(stop))
    assert result.stop_reason is StopReason.STOP_FILE and len(result.candidates) == 1
    assert result.stop_message == f"stop file {stop} found"


def test_patience_stops_a_stuck_run():
    worse = ScriptedLM(lambda m, p: f"<new_instruction>Variant {len(worse.calls)}: be brief.</new_instruction>")
    result = run(reflection=worse, budget=500, patience=3)
    assert result.stop_reason is StopReason.NO_IMPROVEMENT
    assert result.stop_message == "no improvement for 3 iterations"


def test_request_stop_returns_best_so_far():
    release = asyncio.Event()

    class BlockingReflection:
        name = "blocking"

        async def complete(self, messages, **params):
            engine.request_stop(StopReason.INTERRUPTED)
            await release.wait()  # never set: the stop must cancel this call
            return Completion("")

    task = sim.task()
    engine = gepetto.build_engine(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                                  program=task.program, task_lm=sim.SimTaskLM(), reflection_lm=BlockingReflection(),
                                  budget=100)
    result = gepetto.run_engine(engine)
    assert result.stop_reason is StopReason.INTERRUPTED and result.stop_message == "interrupted (Ctrl-C)"
    assert result.best_candidate == task.seed_candidate
    assert result.rollouts_used >= len(task.valset)  # the seed validation that was paid is kept


def test_time_limit_cancels_a_hanging_step():
    class Hanging:
        name = "hanging"

        async def complete(self, messages, **params):
            await asyncio.Event().wait()

    result = run(reflection=Hanging(), budget=100, time_limit=0.2)
    assert result.stop_reason is StopReason.TIME_LIMIT and result.stop_message == "time limit"


def test_budget_plan_is_announced():
    events = []
    run(budget=100, callbacks=events.append)
    plan = next(e for e in events if isinstance(e, PlanMade))
    assert "seed validation 12" in plan.text and "proposals" in plan.text
    assert plan.plan.proposals_min == (100 - 12) // (6 + 12)


def test_clear_errors_for_bad_inputs():
    task = sim.task()
    with pytest.raises(ValueError, match="smaller than one validation pass"):
        run(budget=5)
    with pytest.raises(ValueError, match="trainset is empty"):
        gepetto.optimize("x", [], task.metric, task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM())
    dup = [Example({"q": "a"}, id="same"), Example({"q": "b"}, id="same")]
    with pytest.raises(ValueError, match="duplicate example ids"):
        gepetto.optimize("x", dup, task.metric, task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM())
    with pytest.raises(TypeError, match="unknown option"):
        run(budgett=5)


def test_parent_known_perfect_examples_are_not_paid_again():
    # train == val: after the seed validation every example has a known score
    task = sim.task(n_train=8, n_val=8)
    result = gepetto.optimize(task.seed_candidate, task.trainset, task.metric, program=task.program,
                              task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(), budget=100)
    assert result.best_score == 1.0
    assert result.proposals.get(Outcome.PARENT_PERFECT, 0) == 0


def test_score_coercion_and_validation():
    assert Score.coerce(1).feedback == "The output is correct."
    assert Score.coerce(0.25).value == 0.25
    with pytest.raises(ValueError):
        Score(1.5)
    with pytest.raises(TypeError):
        Score.coerce("good")


def test_rejected_answer_is_shown_back_with_the_reason():
    answers = ["Certainly! Please provide the inputs.",
               "<new_instruction>Answer the question. Apply rule-0.</new_instruction>"]
    lm = ScriptedLM(lambda m, p: answers.pop(0) if answers else "")
    run(reflection=lm, budget=40, seed=0, max_idle_iterations=1)
    retry = lm.calls[1][0]
    assert retry[-2] == {"role": "assistant", "content": "Certainly! Please provide the inputs."}
    assert "Do not talk to me" in retry[-1]["content"]


def test_evaluate_scores_a_candidate_on_held_out_examples():
    task = sim.task(n_train=4, n_val=8, kinds=4)
    good = gepetto.Candidate(instruction="Apply rule-0. Apply rule-1.")
    ev = gepetto.evaluate(good, task.testset, task.metric, program=task.program, task_lm=sim.SimTaskLM())
    assert ev.mean == 0.5 and len(ev.rollouts) == 8
    assert ev.scores == {f"test-{i}": 1.0 if i % 4 in (0, 1) else 0.0 for i in range(8)}


@pytest.mark.parametrize("value", [np.float32(0.5), np.float64(0.5), np.bool_(True), np.int64(1), np.int8(0),
                                   np.float16(1.0)])
def test_numpy_scalars_are_scores(value):
    expected = float(value)
    assert Score.coerce(value).value == expected and type(Score.coerce(value).value) is float
    assert Score(value, "fine").value == expected and type(Score(value).value) is float
    assert Score(0.5, "x", {"f1": np.float32(0.25)}).objectives == {"f1": 0.25}


def test_a_metric_returning_numpy_scalars_optimises():
    task = sim.task()

    def np_score(example, output, trace):  # a Score whose value is a numpy scalar
        s = task.metric(example, output, trace)
        return Score(np.float32(s.value), s.feedback)

    result = run(task=gepetto.Task("np", task.program, np_score, task.seed_candidate, task.trainset, task.valset),
                 budget=200)
    assert result.best_score == 1.0
    bare = [np.bool_, np.int64, np.float32]  # bare numpy numbers: the seed's true score, not 0 with a TypeError

    def np_number(example, output, trace):
        return bare[int(example.id.split("-")[1]) % 3](task.metric(example, output, trace).value)

    seed = Candidate(instruction="Apply rule-0.")
    result = run(task=gepetto.Task("np", task.program, np_number, seed, task.trainset, task.valset), budget=12)
    assert result.seed_score == 0.25


@pytest.mark.parametrize(("bad", "named"), [("good", "str: 'good'"), (None, "NoneType"), (float("nan"), "nan"),
                                            (1.5, "1.5"), (np.float32(-2.0), "-2.0")])
def test_a_metric_returning_unusable_values_stops_at_once(bad, named):
    task = sim.task()
    reflection = sim.SimReflectionLM()
    with pytest.raises(MetricError, match="metric") as info:
        run(task=gepetto.Task("bad", task.program, lambda e, o, t: bad, task.seed_candidate, task.trainset,
                              task.valset), reflection=reflection, budget=200)
    assert named in str(info.value)
    assert reflection.calls == 0  # nothing was spent beyond the seed validation
    assert isinstance(info.value, ValueError)


def test_a_metric_that_raises_everywhere_stops_with_its_error():
    task = sim.task()

    def broken(example, output, trace):
        return example.gold["answer"] == output  # gold is a str: TypeError on every example

    with pytest.raises(MetricError, match=r"all 12 validation examples.*TypeError"):
        run(task=gepetto.Task("bad", task.program, broken, task.seed_candidate, task.trainset, task.valset),
            budget=200)


def test_one_id_for_different_examples_across_splits_is_refused():
    task = sim.task()
    train = [Example({"q": f"question {i} kind {i % 4}"}, gold=f"answer-{i}", id=str(i)) for i in range(6)]
    val = [Example({"q": f"question {i} kind {i % 4}"}, gold=f"answer-{i}", id=str(i)) for i in range(6, 12)]
    val[2] = Example(val[2].inputs, val[2].gold, id="0")  # "0" is train's first example, a different one
    with pytest.raises(ValueError, match=r"example id '0' names different examples in trainset and valset"):
        run(task=gepetto.Task("ids", task.program, task.metric, task.seed_candidate, train, val), budget=50)
    # the same example in both splits (the "valset defaults to trainset" case) is fine
    result = run(task=gepetto.Task("ids", task.program, task.metric, task.seed_candidate, train, train[:4]),
                 budget=30)
    assert result.rollouts_used <= 30


PERFECT = ("<new_instruction>Answer the question. Apply rule-0. Apply rule-1. Apply rule-2. Apply rule-3."
           "</new_instruction>")


def _iteration(params):
    return params["seed"] // 10  # the reflection seed is seed * 100_003 + iteration * 10 + attempt (run seed 0)


def _texts(answer):
    return answer.split(">", 1)[1].split("<", 1)[0]


def test_a_stop_during_a_round_keeps_the_children_already_validated():
    # two proposals per round: child 1 is perfect and fully validated while proposal 2 still waits for its
    # reflection answer; then Ctrl-C. The validated child must not be thrown away.
    task = sim.task()
    perfect = task.seed_candidate.replace("instruction", _texts(PERFECT))

    async def reflect(messages, params):
        if _iteration(params) == 1:
            return PERFECT
        while sum(c == perfect.id and e.startswith("val") for c, e in engine.state.rollouts) < len(task.valset):
            await asyncio.sleep(0.001)
        engine.request_stop(StopReason.INTERRUPTED)
        await asyncio.Event().wait()  # never answers: the stop cancels it

    engine = gepetto.build_engine(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                                  program=task.program, task_lm=sim.SimTaskLM(latency=0.001),
                                  reflection_lm=ScriptedLM(reflect), budget=200, proposals_per_round=2,
                                  merge="off")
    result = gepetto.run_engine(engine)
    assert result.stop_reason is StopReason.INTERRUPTED and result.stop_message == "interrupted (Ctrl-C)"
    assert result.best_candidate == perfect and result.best_score == 1.0
    assert [c.iteration for c in result.candidates] == [0, 1]
    assert result.partial_candidates == []


def test_a_stop_commits_a_later_validated_child_and_keeps_an_earlier_one_as_partial():
    # child 1 claims its text first, then its validation stalls; child 2 is validated; then Ctrl-C
    task = sim.task()
    careful = PERFECT.replace("</new", " Be careful.</new")
    second = task.seed_candidate.replace("instruction", _texts(PERFECT))
    calls = []

    class StallingTaskLM(sim.SimTaskLM):
        async def complete(self, messages, **params):
            if "Be careful" in messages[0]["content"]:
                calls.append(1)
                if len(calls) > 3 + 5:  # its minibatch and 5 validation examples, then it stalls
                    mine = task.seed_candidate.replace("instruction", messages[0]["content"]).id
                    while (sum(c == second.id and e.startswith("val") for c, e in engine.state.rollouts) < 12
                           or sum(c == mine and e.startswith("val") for c, e in engine.state.rollouts) < 5):
                        await asyncio.sleep(0.001)
                    engine.request_stop(StopReason.INTERRUPTED)
                    await asyncio.Event().wait()
            return await super().complete(messages, **params)

    engine = gepetto.build_engine(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                                  program=task.program, task_lm=StallingTaskLM(latency=0.001),
                                  reflection_lm=ScriptedLM(lambda m, p: careful if _iteration(p) == 1 else PERFECT),
                                  budget=200, proposals_per_round=2, merge="off", max_concurrency=32)
    result = gepetto.run_engine(engine)
    assert [c.iteration for c in result.candidates] == [0, 2] and result.best_candidate == second
    [partial] = result.partial_candidates
    assert partial.iteration == 1 and "Be careful" in partial.candidate["instruction"]
    assert 5 <= len(partial.val_scores) < 12


def test_an_interrupted_validation_keeps_its_paid_rollouts_as_a_partial_candidate():
    task = sim.task()

    def stop_midway(event):
        if isinstance(event, RolloutFinished) and event.candidate != task.seed_candidate.id:
            child_val = [e for c, e in engine.state.rollouts if c == event.candidate and e.startswith("val")]
            if len(child_val) == 5:
                engine.request_stop(StopReason.INTERRUPTED)

    engine = gepetto.build_engine(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                                  program=task.program, task_lm=sim.SimTaskLM(latency=0.001),
                                  reflection_lm=ScriptedLM(lambda m, p: PERFECT), budget=200, callbacks=stop_midway)
    result = gepetto.run_engine(engine)
    assert result.stop_reason is StopReason.INTERRUPTED and result.stop_message == "interrupted (Ctrl-C)"
    assert len(result.candidates) == 1 and result.best_candidate == task.seed_candidate  # never best on 5 scores
    [partial] = result.partial_candidates
    assert partial.candidate["instruction"].endswith("Apply rule-3.") and partial.parents == (0,)
    assert len(partial.val_scores) >= 5 and set(partial.val_scores.values()) == {1.0}
    assert len(partial.val_scores) < len(task.valset)
    assert partial.origin == "reflection" and partial.component == "instruction"
    paid = {k for k in engine.state.rollouts}
    assert result.rollouts_used == len(paid)  # the interrupted validation's rollouts are counted and kept
    assert result.to_dict()["partial_candidates"][0]["val_scores"] == partial.val_scores


def test_a_stop_during_seed_validation_keeps_the_seed_as_partial():
    task = sim.task()

    def stop_midway(event):
        if isinstance(event, RolloutFinished) and event.used == 4:
            engine.request_stop(StopReason.INTERRUPTED)

    engine = gepetto.build_engine(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                                  program=task.program, task_lm=sim.SimTaskLM(latency=0.001),
                                  reflection_lm=sim.SimReflectionLM(), budget=200, callbacks=stop_midway)
    result = gepetto.run_engine(engine)
    assert result.candidates == [] and result.rollouts_used >= 4
    assert [p.origin for p in result.partial_candidates] == ["seed"]
    assert len(result.partial_candidates[0].val_scores) == result.rollouts_used


def test_proposals_of_a_round_claim_their_texts_in_plan_order():
    # both proposals of the round write the same text; the second one's answer arrives first
    async def reflect(messages, params):
        if _iteration(params) == 1:
            await asyncio.sleep(0.05)
        return PERFECT

    result = run(reflection=ScriptedLM(reflect), budget=200, proposals_per_round=2, merge="off")
    assert [c.iteration for c in result.candidates] == [0, 1]  # the first planned proposal owns the text
    assert result.proposals[Outcome.ALREADY_TRIED] == 1


def test_a_proposal_that_gives_up_early_does_not_let_a_later_one_claim_first():
    # the first and third proposals of the round write the same text, the third's answer first; the second gives
    # up at once (an empty answer, asked once): the third must still wait for the first
    async def reflect(messages, params):
        if _iteration(params) == 1:
            await asyncio.sleep(0.05)
            return PERFECT
        return "" if _iteration(params) == 2 else PERFECT

    result = run(reflection=ScriptedLM(reflect), budget=200, proposals_per_round=3, merge="off",
                 reflection_attempts=1, fewshot=0)
    assert [c.iteration for c in result.candidates][:2] == [0, 1]  # the first planned proposal owns the text
    assert result.proposals[Outcome.ALREADY_TRIED] == 1


class FlakyTaskLM(sim.SimTaskLM):
    """The simulated task LM behind an endpoint that fails (no answer at all) when `down(n, tries)` says so:
    n counts all calls, tries the calls of this very request."""

    def __init__(self, down, error=LMUnavailable):
        super().__init__()
        self.down, self.error, self.n, self.tries = down, error, 0, collections.Counter()

    async def complete(self, messages, **params):
        self.n += 1
        key = str(messages)
        self.tries[key] += 1
        if self.down(self.n, self.tries[key]):
            raise self.error(f"sim-task: gave up after 7 attempts; last error: HTTP 503 (call {self.n})")
        return await super().complete(messages, **params)


def test_lm_outages_are_retried_not_scored_and_change_nothing(tmp_path):
    expected = run(reflection=sim.SimReflectionLM(noise=0.3, seed=2), budget=150, seed=1, max_lm_failures=3,
                   lm_retry_pause=0)
    store = RunStore(tmp_path / "s.sqlite")
    store.create_run("r", {}, seed=1)
    flaky = FlakyTaskLM(lambda n, tries: n % 5 == 0 and tries <= 2)  # one call in 5 fails, at most twice
    task = sim.task()
    engine = gepetto.build_engine(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                                  program=task.program, task_lm=flaky,
                                  reflection_lm=sim.SimReflectionLM(noise=0.3, seed=2), budget=150, seed=1,
                                  max_lm_failures=3, lm_retry_pause=0, rollout_store=StoredRollouts(store, "r"))
    got = gepetto.run_engine(engine)
    assert fingerprint(got) == fingerprint(expected)  # same path, same scores: no failure became a 0
    assert got.rollouts_used == store.count_rollouts("r") <= 150
    assert not [r for r in store.rollouts("r").values() if r.error]  # no outage was stored as a score
    assert got.ledger.roles["task"].errors > 0 and got.ledger.roles["task"].calls > got.rollouts_used


def test_a_dead_endpoint_stops_the_run_and_keeps_what_was_paid():
    task_lm = FlakyTaskLM(lambda n, tries: n > 20)  # dies after 20 answers (the seed validation and a bit more)
    result = run(task_lm=task_lm, budget=150, max_lm_failures=4, lm_retry_pause=0)
    assert result.stop_reason is StopReason.LM_UNAVAILABLE
    assert result.stop_message.startswith("LM unavailable: 4 LM calls in a row failed; LMUnavailable: sim-task")
    assert result.rollouts_used == 20 and len(result.candidates) >= 1  # only answered rollouts are counted
    assert result.seed_score == 0.0


@pytest.mark.parametrize("role", ["task", "reflection"])
def test_an_authentication_error_stops_the_run_at_once(role):
    from gepetto.lm.base import AuthenticationError

    class Refusing:
        name = "refusing"

        def __init__(self):
            self.calls = 0

        async def complete(self, messages, **params):
            self.calls += 1
            raise AuthenticationError("openai:m: HTTP 401: invalid api key (check the API key)")

    lm = Refusing()
    kw = {"task_lm": lm} if role == "task" else {"reflection": lm}
    result = run(budget=150, lm_retry_pause=10, **kw)
    assert result.stop_reason is StopReason.LM_UNAVAILABLE
    assert result.stop_message.startswith("LM unavailable: AuthenticationError: openai:m: HTTP 401")
    assert lm.calls <= (8 if role == "task" else 1)  # no retries: it cannot heal (8 = rollouts started at once)
    if role == "reflection":
        assert result.candidates[0].origin == "seed" and result.rollouts_used >= 12  # the seed validation is kept


def test_one_call_that_always_fails_while_others_answer_is_a_failed_rollout_not_a_stop():
    # issue 37 (F3): it stopped the run, and every resume stopped at the same rollout; tests/test_reliability_f.py
    poison = "question 5 kind 1"
    result = run(task_lm=_Poisoned(poison), budget=150,
                 max_lm_failures=3, lm_retry_pause=0)
    assert result.stop_reason is not StopReason.LM_UNAVAILABLE
    assert result.rollouts_used > 12 and result.candidates[0].origin == "seed"
    assert result.candidates[0].val_scores["val-5"] == 0.0  # the poisoned example scored 0, with its reason


class _Poisoned(sim.SimTaskLM):
    def __init__(self, poison):
        super().__init__()
        self.poison = poison

    async def complete(self, messages, **params):
        if self.poison in messages[-1]["content"]:
            raise LMUnavailable("sim-task: gave up after 7 attempts; last error: HTTP 500")
        return await super().complete(messages, **params)


@given(budget=st.integers(12, 120), seed=st.integers(0, 3), per_round=st.sampled_from([1, 3]),
       every=st.integers(2, 6))
@settings(max_examples=20, deadline=None)
def test_budget_accounting_stays_exact_through_lm_outages(budget, seed, per_round, every):
    task = sim.task(n_train=8, n_val=6, kinds=5)
    flaky = FlakyTaskLM(lambda n, tries: n % every == 0 and tries <= 2)
    result = run(task=task, task_lm=flaky, budget=budget, seed=seed, proposals_per_round=per_round,
                 max_lm_failures=3, lm_retry_pause=0)
    assert result.rollouts_used <= budget
    u = result.ledger.roles["task"]
    assert u.calls - u.errors == result.rollouts_used  # an outage is paid nothing and scored nothing
    assert result.stop_reason is not StopReason.LM_UNAVAILABLE  # each call answers by its third try


@pytest.mark.parametrize("fresh_kind", [1, 2])
def test_a_leader_held_back_for_want_of_evidence_is_confirmed_on_fresh_training_examples(fresh_kind, tmp_path):
    """A child one validation example above the seed is held back (the evidence rule); the training examples that
    shaped neither it nor the seed (not in its minibatch or test) are evidence bought for it: where it wins there
    too (`fresh_kind` 1: they are of the kind its rule solves) it becomes the best, else (2: they are not) it stays
    held back. The choice survives in the store (`gepetto show` of an unfinished run reads it)."""
    from gepetto.engine.pareto import stored_best

    def ex(i, kind, split):
        return Example({"q": f"question {i} kind {kind}"}, gold=f"answer-{i}", id=f"{split}-{i}")

    val = [ex(i, 1 if i == 0 else 2, "val") for i in range(20)]  # one example its rule solves, of 20
    train = [ex(100 + i, fresh_kind, "train") for i in range(12)]  # the minibatch's 3 shape it; 9 are fresh
    rewrite = ScriptedLM(lambda m, p: "<new_instruction>Answer the question. Use rule-1.</new_instruction>")
    task = sim.task()
    events = []
    res = gepetto.optimize("Answer the question.", train, task.metric, valset=val, program=task.program,
                           task_lm=sim.SimTaskLM(), reflection_lm=rewrite, budget=120, proposer="rewrite(trim=0)",
                           accept="non-decreasing", merge="off", fewshot="off", max_idle_iterations=2,
                           callbacks=events.append,
                           storage=str(tmp_path / "s.sqlite"), run="r", progress=False)
    child = next(c for c in res.candidates if c.origin == "reflection")
    assert child.mean == 0.05 > res.seed_score == 0.0
    confirmed = [e for e in events if isinstance(e, gepetto.engine.events.BestConfirmed)]
    if fresh_kind == 1:
        assert res.best_index == child.index and child.evident
        assert confirmed and confirmed[0].index == child.index and confirmed[0].examples == 9
    else:
        assert res.best_index == 0 and not child.evident and not confirmed
    cands = RunStore(str(tmp_path / "s.sqlite")).candidates("r")
    assert stored_best(cands) == res.best_index  # the stored run's own rule, without its result
