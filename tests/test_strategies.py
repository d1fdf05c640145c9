"""Swappable strategies: each built-in exercised on scripted/simulated LMs, strategies and stop conditions of one's
own plugged in through gepetto.optimize, and exact resume for every built-in parent selector."""

import asyncio
import hashlib
import os
import random
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import gepetto
from gepetto.cli import app
from gepetto.config import ConfigError, EngineConfig, load_config
from gepetto.engine import stopping
from gepetto.engine.events import (
    CandidateAdded,
    PhaseStarted,
    PlanMade,
    ProposalTested,
    RolloutFinished,
    Stop,
    StopReason,
)
from gepetto.engine.pareto import best_index
from gepetto.engine.proposers import Proposal, ProposalRequest
from gepetto.engine.state import CandidateRecord, RunState
from gepetto.engine.strategies import Acceptance, CurrentBest, EpsilonGreedy, Paired, Pareto, Strict, retest_examples
from gepetto.lm.base import Completion, Usage
from gepetto.store.snapshot import run_snapshot
from gepetto.store.sqlite import RunStore
from gepetto.testing import ScriptedLM, sim
from gepetto.types import Candidate, Example, Score

KILL = Path(__file__).parent / "helpers" / "kill_run.py"
PARENT_SELECTORS = ["pareto", "current-best", "epsilon-greedy(epsilon=0.3)"]


def run(task=None, reflection=None, **options):
    task = task or sim.task(kinds=6)
    return gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                            program=task.program, task_lm=sim.SimTaskLM(),
                            reflection_lm=reflection or sim.SimReflectionLM(noise=0.3, seed=5), **options)


def fingerprint(result):
    d = result.to_dict()
    d.pop("wall_seconds")
    d.pop("ledger")
    return d


class Watch:
    """A callback that follows the pool and notes which parent each proposal took, and what was best then."""

    def __init__(self):
        self.means, self.choices, self.tested = [], [], []

    def __call__(self, event):
        if isinstance(event, CandidateAdded):
            self.means.append(event.record.mean)
        elif isinstance(event, PhaseStarted) and event.phase == "minibatch":
            self.choices.append((event.candidate, best_index(self.means), len(self.means)))
        elif isinstance(event, ProposalTested):
            self.tested.append(event)


# ---- parent selection ------------------------------------------------------------------------------------------
def _state(rows):
    st = RunState([f"v{i}" for i in range(len(rows[0]))], 100)
    for i, row in enumerate(rows):
        cand = Candidate(instruction=f"text {i}")
        st.add_record(CandidateRecord(i, cand, (), "seed", 0, None, {f"v{j}": x for j, x in enumerate(row)}, 0))
    return st


def test_built_in_parent_selectors_follow_their_rules():
    # 0 is dominated by 1; 1 and 2 trade off; 2 has the best mean
    st = _state([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])
    picks = [Pareto()(st, random.Random(s)) for s in range(300)]
    assert set(picks) == {1, 2} and picks.count(2) > picks.count(1)  # front only, in proportion to examples won
    assert all(CurrentBest()(st, random.Random(s)) == 2 for s in range(20))
    assert all(EpsilonGreedy(0.0)(st, random.Random(s)) == 2 for s in range(20))
    wild = [EpsilonGreedy(1.0)(st, random.Random(s)) for s in range(300)]
    assert set(wild) == {0, 1, 2}  # any candidate, dominated ones too


def test_current_best_always_takes_the_best_so_far():
    watch = Watch()
    result = run(parent_selector="current-best", budget=200, seed=1, callbacks=watch, merge="off")
    assert watch.choices and all(chosen == best for chosen, best, _ in watch.choices)
    assert result.best_score > result.seed_score


def test_epsilon_greedy_explores_with_probability_epsilon():
    greedy = Watch()
    a = run(parent_selector="current-best", budget=200, seed=1, merge="off", callbacks=greedy)
    b = run(parent_selector="epsilon-greedy(epsilon=0.0)", budget=200, seed=1, merge="off")
    assert fingerprint(a) == fingerprint(b)  # epsilon 0 is current-best (its one draw changes nothing else)
    watch = Watch()
    run(parent_selector=EpsilonGreedy(1.0), budget=200, seed=1, merge="off", callbacks=watch)
    assert any(chosen != best for chosen, best, _ in watch.choices)  # it left the best behind at times


def test_the_default_is_pareto_and_the_string_and_the_object_are_the_same():
    a = run(budget=150, seed=3)
    b = run(budget=150, seed=3, parent_selector="pareto", component_selector="round-robin",
            minibatch_sampler="epoch-shuffled", accept="strict", proposer="rewrite")
    c = run(budget=150, seed=3, parent_selector=Pareto(), accept=Strict())
    d = run(budget=150, seed=3, parent_selector={"pareto": None}, merge={"merge": {"max": 30}})  # (YAML tables)
    assert fingerprint(a) == fingerprint(b) == fingerprint(c) == fingerprint(d)


# ---- component selection, minibatch sampling, acceptance -----------------------------------------------------
def test_all_components_at_once():
    watch = Watch()
    task = sim.task(kinds=6, components=2)
    result = run(task, sim.SimReflectionLM(max_rules=2), component_selector="all", budget=200, seed=2,
                 callbacks=watch)
    assert watch.tested and all(t.component == "a+b" for t in watch.tested)
    children = [c for c in result.candidates if c.origin == "reflection"]
    assert children and all(c.component == "a+b" for c in children)
    parent = {c.index: c.candidate for c in result.candidates}
    assert any(all(c.candidate[k] != parent[c.parents[0]][k] for k in "ab") for c in children)  # both changed
    with pytest.raises(ConfigError, match="component_selector 'all' needs proposer 'rewrite'"):
        EngineConfig(component_selector="all", proposer="edit")


def test_a_minibatch_sampler_of_ones_own():
    task = sim.task(kinds=4)
    fixed = task.trainset[:3]
    calls = []

    def first_three(state, parent, trainset, rng):
        calls.append(parent.id)
        return list(fixed)

    seen = set()
    result = run(task, minibatch_sampler=first_three, budget=100, seed=0, merge="off",
                 callbacks=lambda e: seen.add(e.example) if isinstance(e, RolloutFinished) else None)
    assert calls
    assert {e for e in seen if e.startswith("train")} <= {e.id for e in fixed}  # only its examples were run
    assert result.best_score > result.seed_score


def test_acceptance_rules():
    calls = []

    def never(before, after):
        calls.append((list(before), list(after)))
        return False

    result = run(accept=never, budget=100, seed=0)
    assert calls and all(len(b) == len(a) for b, a in calls)
    assert len(result.candidates) == 1 and result.proposals["rejected: not better on minibatch"] == len(calls)
    lenient = run(accept="non-decreasing", budget=150, seed=3, merge="off")
    assert lenient.best_score >= lenient.seed_score


def test_paired_acceptance_decides_on_the_mean_paired_difference_and_asks_again_on_a_tie():
    exact, tolerant = Paired(), Paired(0.34)
    assert exact([0, 1, 0], [1, 1, 0]) is True and exact([1, 1, 0], [0, 1, 0]) is False
    assert exact([0, 1, 0], [1, 0, 0]) is None  # a tie: test again
    assert tolerant([0, 0, 0], [1, 0, 0]) is None  # one example in three is within the tolerance
    assert tolerant([0, 0, 0], [1, 1, 0]) is True and tolerant([1, 1, 0], [0, 0, 0]) is False
    assert tolerant([0, 0, 0, 0, 1, 0], [1, 0, 0, 1, 1, 1]) is True  # pooled: 3 of 6 better, 0.5 > 0.34
    assert exact.retests == 1 and Strict().retests == 0 and isinstance(exact, Acceptance)
    trainset = sim.examples(10, 2, "train")
    fresh = retest_examples(trainset, {"train-0", "train-1"}, 3, random.Random(4))
    assert len(fresh) == 3 and not {e.id for e in fresh} & {"train-0", "train-1"}
    assert fresh == retest_examples(trainset, {"train-0", "train-1"}, 3, random.Random(4))  # seeded: replayable
    assert retest_examples(trainset, {e.id for e in trainset[1:]}, 3, random.Random(4)) == [trainset[0]]


class NoisyTaskLM:
    """A sampled task LM: answers "yes" (right) with probability N/10 when the instruction says "skill N".
    Each (instruction, question) pair draws from its own seeded RNG, as one sampled call would: the engine
    never runs a pair twice, and a resumed run meets the same draws."""

    name = "noisy-task"

    def __init__(self, seed=0):
        self.seed, self.calls = seed, 0

    async def complete(self, messages, **params):
        self.calls += 1
        system, user = messages[0]["content"], messages[-1]["content"]
        skill = int(re.search(r"skill (\d+)", system).group(1))
        ok = random.Random(f"{self.seed}:{system}:{user}").random() < skill / 10
        return Completion("yes" if ok else "no", Usage(10, 1))


def _yes(example, output, trace):
    return Score(1.0, "Correct.") if output == "yes" else Score(0.0, "Wrong: the answer is yes.")


NOISY_TRAIN = [Example({"q": f"question {i}"}, gold="yes", id=f"train-{i}") for i in range(60)]
NOISY_VAL = [Example({"q": f"question {i}"}, gold="yes", id=f"val-{i}") for i in range(10)]


def noisy_run(seed, skill, child_skill, trainset=NOISY_TRAIN, **options):
    """Reflection always proposes a new text of skill `child_skill` (its variant named after the prompt, so a
    resumed run, whose reflection answers are replayed, asks for the same); the seed has `skill`."""
    def reflect(messages, params):
        variant = hashlib.sha256(repr((messages, sorted(params.items()))).encode()).hexdigest()[:8]
        return f"<new_instruction>Say yes. skill {child_skill} (variant {variant})</new_instruction>"

    reflection = ScriptedLM(reflect)
    events = []
    result = gepetto.optimize({"instruction": f"Say yes. skill {skill}"}, trainset, _yes, valset=NOISY_VAL,
                              task_lm=NoisyTaskLM(seed), reflection_lm=reflection, seed=seed,
                              merge="off", callbacks=events.append,
                              **{"fewshot": 0, "proposer": "auto(trim=0)", **options})  # (children of reflection)
    return result, [e for e in events if isinstance(e, ProposalTested)], events


def test_paired_acceptance_with_a_noisy_task_lm_accepts_better_children_and_fewer_equal_ones():
    rates = {}
    for name, options in {"strict": {"accept": "strict"}, "paired": {"accept": "paired(tolerance=0.34)"}
                          }.items():
        verdicts = [e.accepted for seed in range(10) for e in noisy_run(seed, 5, 5, budget=400, **options)[1]]
        rates[name] = sum(verdicts) / len(verdicts)
        # a truly better child (skill 2 -> 9): its first test passes in nearly every seed
        better = [noisy_run(seed, 2, 9, budget=60, **options)[1][0].accepted for seed in range(10)]
        assert sum(better) >= 9
    # an equal child passes a noisy test often, more than by chance: the minibatch holds the parent's failures
    assert rates["strict"] > 0.35  # 150 of 376 here (with tolerance 0: 141 of 289)
    assert rates["paired"] < 0.6 * rates["strict"]  # 65 of 326 here


def test_a_tie_is_tested_again_on_fresh_examples_and_every_rollout_is_paid_within_the_budget():
    result, tested, events = noisy_run(3, 5, 5, budget=300, accept="paired(tolerance=0.34)")
    retested = [t for t in tested if t.retested]
    assert retested and all(t.retested == 3 for t in retested)  # as many fresh examples as the test had
    rollouts = [e for e in events if isinstance(e, RolloutFinished)]
    assert len(rollouts) == result.rollouts_used == result.ledger.roles["task"].calls <= 300
    assert len({(r.candidate, r.example) for r in rollouts}) == len(rollouts)  # fresh pairs: none paid twice
    plan = next(e for e in events if isinstance(e, PlanMade)).plan
    assert plan.retest == 6 and "re-test" in plan.describe()
    # no fresh example left (the trainset is the minibatch): a tie is a rejection, with no rollout more
    _, tested, _ = noisy_run(3, 5, 5, trainset=NOISY_TRAIN[:3], budget=100, accept="paired(tolerance=0.34)")
    assert tested and not any(t.retested for t in tested)


@given(budget=st.integers(12, 150), minibatch=st.integers(1, 4), seed=st.integers(0, 3),
       per_round=st.sampled_from([1, 3]), tolerance=st.sampled_from([0.0, 0.34, 0.5]),
       proposer=st.sampled_from(["rewrite", "edit"]))
@settings(max_examples=30, deadline=None)
def test_paired_acceptance_never_exceeds_the_budget(budget, minibatch, seed, per_round, tolerance, proposer):
    result, _, _ = noisy_run(seed, 5, 5, trainset=NOISY_TRAIN[:12], budget=budget, minibatch_size=minibatch,
                             proposals_per_round=per_round, accept=Paired(tolerance),
                             proposer=proposer)
    assert result.rollouts_used <= budget
    assert result.ledger.roles["task"].calls == result.rollouts_used


def test_an_acceptance_of_ones_own_may_ask_for_more_evidence():
    class AlwaysUnsure(Acceptance):
        retests = 2

        def __init__(self):
            self.seen = []

        def __call__(self, before, after):
            self.seen.append(len(after))
            return None

    unsure = AlwaysUnsure()
    _, tested, _ = noisy_run(1, 5, 5, budget=60, minibatch_size=2, accept=unsure)
    assert unsure.seen[:3] == [2, 4, 6]  # asked again with the scores pooled, twice; then undecided: rejected
    assert tested and not any(t.accepted for t in tested) and tested[0].retested == 4
    _, tested, _ = noisy_run(1, 5, 5, budget=60, accept=lambda before, after: None)  # no `retests`: rejected
    assert tested and not any(t.accepted or t.retested for t in tested)

    class Undeclared:  # `retests` on an object that does not derive from Acceptance: said, not ignored
        retests = 2

        def __call__(self, before, after):
            return None

    with pytest.raises(ConfigError, match=r"derive it from gepetto\.strategies\.Acceptance"):
        noisy_run(1, 5, 5, budget=60, accept=Undeclared())


def test_a_stopped_paired_run_with_a_noisy_task_lm_resumes_exactly(tmp_path):
    def stored(storage, stop=None):
        return noisy_run(2, 5, 5, budget=250, accept="paired(tolerance=0.34)", proposals_per_round=2,
                         storage=storage, run="r", stop=stop)

    whole, tested, _ = stored(tmp_path / "whole.sqlite")
    assert any(t.retested for t in tested)
    storage = tmp_path / "s.sqlite"
    for k in (4, 9):
        part, _, _ = stored(storage, stop=lambda s, k=k: f"iteration {k}" if s.iteration >= k else None)
        assert part.stop_reason is StopReason.CONDITION
    final, _, _ = stored(storage)
    assert fingerprint(final) == fingerprint(whole)
    assert RunStore(storage).count_rollouts("r") == final.rollouts_used  # nothing paid twice
    assert not RunStore(storage).events("r", "diverged")  # each session retraced the stored path


# ---- proposers ------------------------------------------------------------------------------------------------
class RulesFromFeedback:
    """A proposer of one's own: appends the rule each failure's feedback names (no LM at all)."""

    def __init__(self):
        self.requests = []

    async def propose(self, request: ProposalRequest):
        self.requests.append(request)
        (component,) = request.components
        wanted = [r.score.feedback.split("need ")[1].rstrip(".") for r in request.runs if r.score.value < 1]
        new = [w for w in dict.fromkeys(wanted) if w not in request.parent[component]]
        return {component: request.parent[component] + "".join(f" Apply {w}." for w in new)} if new else None


def test_a_proposer_of_ones_own_reaches_the_optimum():
    proposer = RulesFromFeedback()
    result = run(proposer=proposer, budget=200, seed=0)
    assert proposer.requests and result.best_score == 1.0
    first = proposer.requests[0]
    assert first.parent_index == 0 and first.components == ("instruction",)
    assert [r.example_id for r in first.runs] == [e.id for e in first.examples]



def test_seek_failures_puts_mistakes_in_the_minibatch_in_place_of_solved_examples():
    """seek_failures=k: a parent whose minibatch has solved examples runs up to k more training examples, and the
    proposer gets its mistakes in their place (mistakes first, then solved, at the minibatch's size)."""
    shown, used = {}, {}
    for seek in (0, 3):
        shown[seek], used[seek] = 0, 0
        for seed in (0, 1, 2):
            proposer = RulesFromFeedback()
            result = run(sim.task(kinds=6), proposer=proposer, budget=120, seed=seed, merge="off",
                         seek_failures=seek)
            assert result.best_score == 1.0 and result.rollouts_used <= 120
            for q in proposer.requests:
                solved = [r.score.value >= 1 for r in q.runs]
                assert len(q.examples) == len(q.runs) == 3 and (not seek or solved == sorted(solved))  # mistakes first
                assert [r.example_id for r in q.runs] == [e.id for e in q.examples]
                shown[seek] += sum(solved)
            used[seek] += result.rollouts_used
    assert shown[3] < shown[0]
    assert used[3] < used[0]  # (here: the optimum in 166 rollouts over the three seeds, against 198)

def test_what_a_proposer_puts_off_is_told_after_its_round_in_plan_order():
    """request.services.later(fn): in a round of concurrent proposals, fn runs once the round is decided, in plan
    order and before the proposal's verdict, so no proposal of the round sees what another put off."""
    told = []

    class Remembering(RulesFromFeedback):
        async def propose(self, request):
            memory, i = request.state.memory, request.iteration
            seen = len(memory.get("told", []))
            request.services.later(lambda: (memory.setdefault("told", []).append(i), told.append(("later", i, seen))))
            answer = await super().propose(request)
            return None if answer is None else Proposal(answer, verdict=lambda c, ok: told.append(("verdict", i, ok)))

    task = sim.task(kinds=6)
    result = gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                              program=task.program, task_lm=sim.SimTaskLM(latency=0.002),
                              reflection_lm=sim.SimReflectionLM(), proposer=Remembering(), proposals_per_round=3,
                              max_concurrency=8, budget=200, seed=0)
    later = [(i, seen) for kind, i, seen in told if kind == "later"]
    assert [i for i, _ in later] == sorted(i for i, _ in later) and len(later) >= 6
    assert [seen for _, seen in later[:6]] == [0, 0, 0, 3, 3, 3]  # rounds of 3: each sees the rounds before it
    verdicts = [i for kind, i, _ in told if kind == "verdict"]
    assert verdicts and all(told.index(("later", i, dict(later)[i])) < told.index(next(
        t for t in told if t[:2] == ("verdict", i))) for i in verdicts)
    assert result.best_score > result.seed_score


def test_a_proposer_that_asks_too_much_is_refused():
    class Greedy:
        async def propose(self, request):
            return Proposal({"instruction": "Apply rule-0."}, test_on=request.trainset)  # 12 rollouts, 3 set aside

    with pytest.raises(ValueError, match="the proposer's test needs"):
        run(proposer=Greedy(), budget=100)

    class Stranger:
        async def propose(self, request):
            return {"nope": "text"}

    with pytest.raises(ValueError, match="components of the candidate"):
        run(proposer=Stranger(), budget=100)
    with pytest.raises(ConfigError, match="no proposer"):
        run(proposer=object(), budget=100)


# ---- a parent selector and a stop condition of one's own -----------------------------------------------------
def test_a_parent_selector_and_a_stop_condition_of_ones_own_decide_the_run():
    chosen, statuses = [], []

    def newest(state, rng):  # a chain: always the latest candidate
        chosen.append(len(state.records) - 1)
        return len(state.records) - 1

    def three_candidates(status):
        statuses.append(status)
        return "three candidates are enough" if status.candidates >= 3 else None

    result = run(parent_selector=newest, stop=three_candidates, budget=300, seed=0, merge="off")
    assert chosen and statuses
    assert result.stop_reason is StopReason.CONDITION and result.stop_message == "three candidates are enough"
    assert len(result.candidates) == 3 and result.rollouts_used < 300
    assert [c.parents for c in result.candidates[1:]] == [(0,), (1,)]  # each child of the newest
    s = statuses[-1]
    assert (s.candidates, s.rollouts_used, s.budget) == (3, result.rollouts_used, 300)
    assert s.remaining == 300 - s.rollouts_used and s.seconds >= 0 and s.cost_usd == 0


def test_stop_conditions_compose():
    st = _state([[0.5, 0.5]])
    status = stopping.RunStatus(4, 50, 100, 0.5, 1, 3, 0, 1.0, 0.0, st)
    late, poor = (lambda s: s.iteration >= 4), (lambda s: "poor" if s.best_score < 0.6 else None)
    assert stopping.decide(stopping.all_of(late, poor), status).reason is StopReason.CONDITION
    assert stopping.decide(stopping.all_of(late, lambda s: None), status) is None
    assert stopping.decide(stopping.any_of(lambda s: None, poor), status).message == "poor"
    assert stopping.decide(stopping.NoImprovement(3), status) == Stop(StopReason.NO_IMPROVEMENT,
                                                                      "no improvement for 3 iterations")
    assert stopping.decide(late, status).message.startswith("stop condition")
    with pytest.raises(ConfigError, match="unknown condition 'sigkill'"):
        stopping.as_conditions(["sigkill"])


def test_sigterm_is_a_stop_condition():
    task = sim.task(kinds=6)
    sent = []

    def hook(event):
        if isinstance(event, RolloutFinished) and event.used == 30 and not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGTERM)

    async def main():  # our own event loop: gepetto installs no handler unless asked with stop="sigterm"
        return await gepetto.optimize_async(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                                            program=task.program, task_lm=sim.SimTaskLM(),
                                            reflection_lm=sim.SimReflectionLM(), budget=200, callbacks=hook,
                                            stop="sigterm")

    result = asyncio.run(main())
    assert sent and result.stop_reason is StopReason.SIGTERM and result.rollouts_used < 60
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is gone with the run


# ---- a spend limit ------------------------------------------------------------------------------------------
PRICES = {"sim-task": (100.0, 200.0), "sim-reflection": (300.0, 600.0)}  # dollars per million tokens


def test_max_cost_usd_stops_the_run_when_prices_are_known():
    free = run(budget=300, seed=3, prices=PRICES)
    spent = free.ledger.total().cost
    assert spent > 0.05
    capped = run(budget=300, seed=3, prices=PRICES, max_cost_usd=0.05)
    assert capped.stop_reason is StopReason.COST_LIMIT and capped.stop_message.startswith("cost limit $0.05")
    assert 0.05 <= capped.ledger.total().cost < spent
    assert capped.rollouts_used < free.rollouts_used


def test_max_cost_usd_without_prices_is_refused():
    with pytest.raises(ConfigError, match=r"max_cost_usd=1 needs prices .* could never stop the run"):
        run(budget=100, max_cost_usd=1.0)
    with pytest.raises(ConfigError, match=r"prices given: \['gpt-4.1'\]"):
        run(budget=100, max_cost_usd=1.0, prices={"gpt-4.1": (2.0, 8.0)})
    res = CliRunner().invoke(app, ["optimize", "--task", "sim", "--task-lm", "sim:task", "--reflection-lm",
                                   "sim:reflection", "--max-cost-usd", "1", "--storage", "/nonexistent/s.sqlite",
                                   "-q"])
    assert res.exit_code == 2 and "max_cost_usd=1 needs prices" in res.output


# ---- the strategies by name: config files, CLI, stored runs --------------------------------------------------
def test_strategy_names_are_checked_and_objects_need_python():
    with pytest.raises(ConfigError, match="parent_selector: unknown parent_selector 'best'; accepted: auto, "
                                          "current-best, epsilon-greedy, pareto"):
        EngineConfig(parent_selector="best")
    with pytest.raises(ConfigError, match=r"epsilon-greedy: unknown parameter 'epsylon' \(did you mean "
                                          r"'epsilon'\?\); accepted: epsilon"):
        EngineConfig(parent_selector="epsilon-greedy(epsylon=0.2)")
    with pytest.raises(ConfigError, match=r"epsilon-greedy: epsilon=1\.5: Input should be less than or equal to 1"):
        EpsilonGreedy(1.5)  # in Python too
    with pytest.raises(ConfigError, match="current-best: unknown parameter 'k'; it takes none"):
        EngineConfig(parent_selector="current-best(k=1)")
    with pytest.raises(ConfigError, match="is not a strategy: write NAME or NAME"):
        EngineConfig(accept="paired(0.2)")
    with pytest.raises(ConfigError, match=r"stands for a strategy object given to gepetto\.optimize"):
        load_config(task="sim", parent_selector="python:mine:Selector")
    cfg = EngineConfig(parent_selector="python:mine:Selector")
    with pytest.raises(ConfigError, match="pass that object again"):
        run(config=cfg, budget=50)


def test_the_cli_takes_the_strategies_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["optimize", "--task", "sim", "--task-lm", "sim:task", "--reflection-lm",
                                   "sim:reflection", "--budget", "80", "--parent-selector",
                                   "epsilon-greedy(epsilon=0.3)", "--component-selector", "all", "--run", "e", "-q"])
    assert res.exit_code == 0, res.output
    config = RunStore("gepetto.sqlite").get_run("e").config
    assert (config["parent_selector"], config["component_selector"]) == ("epsilon-greedy(epsilon=0.3)", "all")
    shown = CliRunner().invoke(app, ["optimize", "--help"], env={"COLUMNS": "200"}).output
    assert "How the parent of a proposal is chosen. auto: the run's route chooses" in shown
    assert "epsilon-greedy(epsilon=0.1): the leader" in shown  # (written from the strategy classes: test_specs.py)


def test_a_stored_python_run_names_its_strategy_objects_and_refuses_others(tmp_path):
    task = sim.task(kinds=6)
    kw = {"valset": task.valset, "program": task.program, "task_lm": sim.SimTaskLM(),
          "reflection_lm": sim.SimReflectionLM(), "budget": 100, "storage": tmp_path / "s.sqlite", "run": "r"}
    class Latest:  # a parent selector of one's own
        def __call__(self, state, rng):
            return len(state.records) - 1

    gepetto.optimize(task.seed_candidate, task.trainset, task.metric, parent_selector=Latest(), **kw)
    config = RunStore(tmp_path / "s.sqlite").get_run("r").config
    assert config["parent_selector"].startswith("python:test_strategies:") and config["parent_selector"].endswith(
        "Latest")
    with pytest.raises(ConfigError, match="parent_selector"):
        gepetto.optimize(task.seed_candidate, task.trainset, task.metric, parent_selector=Pareto(), **kw)
    # a built-in object is stored by its spec, and resumes as that spec
    kw["run"] = "b"
    gepetto.optimize(task.seed_candidate, task.trainset, task.metric, parent_selector=EpsilonGreedy(0.2), **kw)
    assert RunStore(tmp_path / "s.sqlite").get_run("b").config["parent_selector"] == "epsilon-greedy(epsilon=0.2)"
    gepetto.optimize(task.seed_candidate, task.trainset, task.metric, parent_selector="epsilon-greedy(epsilon=0.2)",
                     **{**kw, "budget": 120})
    with pytest.raises(ConfigError, match=r"parent_selector: stored 'epsilon-greedy\(epsilon=0\.2\)'"):
        gepetto.optimize(task.seed_candidate, task.trainset, task.metric, parent_selector=EpsilonGreedy(0.3), **kw)


# ---- exact resume for every built-in strategy ----------------------------------------------------------------
def _rules(messages, params):
    """A scripted reflection LM for the edit proposer: a rule the feedback of the shown failures asks for."""
    user = messages[1]["content"]
    current = user.split("<current_instruction>\n", 1)[1].split("\n</current_instruction>", 1)[0]
    missing = [r for r in dict.fromkeys(re.findall(r"need (rule-\d+)", user)) if r not in current]
    return f"<rule>Apply {missing[0]} to such questions.</rule>" if missing else "<rule></rule>"


def _stored(storage, stop=None, seed=2, **options):
    task = sim.task(kinds=6, components=2)
    reflection = ScriptedLM(_rules) if str(options.get("proposer")).startswith("edit") else \
        sim.SimReflectionLM(noise=0.3, seed=5, forget=True, max_rules=2)
    return gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                            program=task.program, task_lm=sim.SimTaskLM(), reflection_lm=reflection,
                            budget=200, seed=seed, max_concurrency=4, storage=storage, run="r", stop=stop, **options)


# (each on a seed whose path has merges, and demonstrations when they are on)
@pytest.mark.parametrize("options", [{"parent_selector": "pareto", "seed": 1}]
                         + [{"parent_selector": name} for name in PARENT_SELECTORS[1:]]
                         + [{"parent_selector": "epsilon-greedy(epsilon=0.5)", "component_selector": "all"},
                            {"proposer": "edit", "accept": "non-decreasing"},
                            {"proposer": "edit(rules=3)", "accept": "non-decreasing"},
                            # (demonstrations do not help the simulated task LM: accepted only when not worse)
                            {"proposer": "edit", "fewshot": 3, "accept": "non-decreasing"},
                            {"fewshot": "fewshot(k=2, share=0.7)", "accept": "non-decreasing"},
                            {"fewshot": "fewshot(k=2, adaptive=false)", "accept": "non-decreasing"},
                            {"validation": "racing(chunk=1)", "proposals_per_round": 3},
                            {"merge": "merge(adaptive=true)", "seed": 5},
                            {"accept": "paired(tolerance=0.34)", "fewshot": 0, "seed": 4},
                            {"seek_failures": 2, "seed": 0}, {"seek_failures": 4, "proposals_per_round": 3},
                            {"accept": "paired(tolerance=0.34)", "proposals_per_round": 3}])
def test_a_stopped_run_resumes_to_the_uninterrupted_result(tmp_path, options):
    whole = _stored(tmp_path / "whole.sqlite", **options)
    assert len(whole.candidates) > 2
    # merges too (three rules per proposal reach the optimum before a merge is tried)
    assert "rules=" in str(options.get("proposer")) or any(len(c.parents) == 2 for c in whole.candidates)
    assert not options.get("fewshot") or any(c.origin == "demo" for c in whole.candidates)  # demonstrations too
    storage = tmp_path / "s.sqlite"
    for k in (3, 7):  # two sessions stopped by a condition of their own, then one to the end
        part = _stored(storage, stop=lambda s, k=k: f"iteration {k}" if s.iteration >= k else None, **options)
        assert part.stop_reason is StopReason.CONDITION
    final = _stored(storage, **options)
    assert fingerprint(final) == fingerprint(whole)
    assert RunStore(storage).count_rollouts("r") == final.rollouts_used  # nothing paid twice


def _kill_run(storage, when, options):
    import json

    return subprocess.run([sys.executable, str(KILL), str(storage), "r", str(when), "1", json.dumps(options)],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("selector", PARENT_SELECTORS)
def test_a_killed_run_resumes_to_the_uninterrupted_result(tmp_path, selector):
    options = {"parent_selector": selector}
    whole = _kill_run(tmp_path / "whole.sqlite", -1, options)
    assert whole.returncode == 0, whole.stderr
    expected = run_snapshot(RunStore(tmp_path / "whole.sqlite"), "r")["result"]
    storage = tmp_path / "killed.sqlite"
    for n in (17, 58):
        killed = _kill_run(storage, n, options)
        assert killed.returncode == -9, killed.stderr
    final = _kill_run(storage, -1, options)
    assert final.returncode == 0, final.stderr
    got = run_snapshot(RunStore(storage), "r")["result"]
    keep = ("best_candidate", "best_score", "candidates", "pareto_front", "rollouts_used", "stop_reason",
            "iterations", "history", "proposals")
    assert {k: got[k] for k in keep} == {k: expected[k] for k in keep}
    assert RunStore(storage).get_run("r").config["parent_selector"] == selector
