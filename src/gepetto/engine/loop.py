"""The GEPA loop: select a parent on the Pareto front, reflect on one component, test the child on a
minibatch, validate it if it is better, merge lineages now and then; all within a budget of rollouts.

The decisions are strategies (engine/strategies.py: parent, components, minibatch, acceptance; the proposer,
engine/proposers.py; when to stop, engine/stopping.py); the engine pays for rollouts, keeps the budget contract
and the books. Every decision derives from the seed and what was paid for (rollouts, reflection answers), so a
run that is replayed over its stored rollouts and LM answers takes exactly the same path (that is how resume
works).
"""

from __future__ import annotations

import asyncio
import copy
import functools
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

import numpy as np

from gepetto.engine import answers, racing, route, stopping
from gepetto.engine import events as ev
from gepetto.engine.events import Outcome, Result, Stop, StopReason
from gepetto.engine.executors import Executor
from gepetto.engine.merge import Merge, find_merge, merge_chance
from gepetto.engine.options import Options
from gepetto.engine.proposers import ProposalRequest, as_proposal, over_length
from gepetto.engine.racing import Racing
from gepetto.engine.state import BudgetPlan, CandidateRecord, RunState, plan_budget
from gepetto.engine.strategies import Strategies, retest_examples
from gepetto.ledger import Ledger
from gepetto.lm.base import LM, Completion, LMSetupError, LMUnavailable, Message, MeteredLM
from gepetto.program import Metric, Program, Rollout, TraceEntry, check_metric, verdict
from gepetto.specs import ConfigError
from gepetto.types import Candidate, Example, Score

T = TypeVar("T")
# the seed string of each proposal's random generator: part of every run's path, so a change to it is a new run
# format (config.RUN_FORMAT), whose stored runs the older gepetto refuses to resume and the other way round
PROPOSAL_RNG = "{seed}:{iteration}:proposal"
OPENING_CHUNK = 5  # validation examples an opening runs between two looks at whether it is behind the seed


# the options and strategies of the route chosen after the seed's validation, and the route as settled
Settle = Callable[[route.Route], tuple[Options, Strategies, route.Route]]


@dataclass(frozen=True)
class Parts:
    """The built parts of one engine.

    Args:
        strategies: the decisions of the loop (parent, components, minibatch, proposer, acceptance).
        executor: where rollouts run.
        stop_conditions: when the run ends, besides its budget.
        merge: the merge of lineages, None when off.
        racing: validation by racing, None for full validation.
        settle: for a run whose strategies follow the route (`engine/route.py`), what a chosen route makes of
            the options and strategies; None when they are settled already.
    """

    strategies: Strategies
    executor: Executor
    stop_conditions: Sequence[stopping.StopCondition]
    merge: Merge | None = None
    racing: Racing | None = None
    settle: Settle | None = None


class RolloutStore(Protocol):
    """Where finished rollouts are kept beyond the process (the run store); looked up before paying again."""

    def get(self, candidate_id: str, example_id: str) -> Rollout | None: ...

    def put(self, candidate: Candidate, example_id: str, rollout: Rollout) -> Rollout | None:
        """Keep `rollout`; returns it as a later `get` will (the run goes on with that), or None: as given."""


class _OutOfBudget(Exception):
    pass


@dataclass(frozen=True)
class _Plan:
    """A proposal decided but not yet tried: which parent, which components, which minibatch, worst cost (the
    parent's new rollouts, the reserve's included, the child's test, its validation)."""

    iteration: int
    parent_idx: int
    components: tuple[str, ...]
    batch: list[Example]
    test: int
    cost: int
    reserve: tuple[Example, ...] = ()  # more examples the parent may run in place of solved ones (seek_failures)

    @property
    def component(self) -> str:
        return "+".join(self.components)


@dataclass
class _Turn:
    """Proposals of a round claim their texts in plan order: each waits until the ones before it have claimed a
    text or given up, so which proposal owns a text never depends on which reflection answer arrived first. A
    proposal that gives up early passes its turn on only once the one before it has (`pass_on`): else a later
    proposal could claim a text an earlier one is still to claim."""

    before: asyncio.Future | None
    done: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    def pass_on(self) -> None:
        if self.done.done():
            return
        if self.before is None or self.before.done():
            self.done.set_result(None)
        else:
            self.before.add_done_callback(lambda _: self.pass_on())


@dataclass(frozen=True)
class _Services:
    """What the engine does for the proposal of plan iteration `iteration` (proposers.ProposalServices): the
    children it may not propose again are those tried before the round began, and what it puts off is told at the
    round's end."""

    engine: Engine
    iteration: int

    async def reflect(self, messages: list[Message], params: dict[str, Any]) -> Completion | None:
        return await self.engine._reflect(messages, params)

    def tried(self, candidate: Candidate) -> bool:
        return candidate.id in self.engine._settled_tried

    async def score(self, example: Example, output: Any, trace: list[TraceEntry]) -> Score | None:
        self.engine.state.metric_checks += 1
        try:
            return Score.coerce(await verdict(self.engine.metric, example, output, trace))
        except Exception:  # a metric that cannot score a made-up output: no demonstration from it
            return None

    def count(self, outcome: Outcome) -> None:
        self.engine.state.proposals[outcome] += 1

    def emit(self, event: ev.Event) -> None:
        self.engine._emit(event)

    def later(self, fn: Callable[[], None]) -> None:
        self.engine._later.setdefault(self.iteration, []).append(fn)


class Engine:
    """Runs one optimisation: the GEPA loop over a program's candidate texts, within a budget of rollouts.

    Starting from the seed, each iteration selects a parent among the validated candidates, has the reflection
    LM propose new text for some of its components from the parent's rollouts on a training minibatch, tests the
    child on that minibatch and validates it when it passes; now and then it merges two lineages instead. It
    ends when the budget is spent or a stop condition holds. Construct it, then `await engine.run()` (or
    `gepetto.api.run_engine(engine)`); `request_stop()` ends it gracefully. `gepetto.api.build_engine` builds it,
    its options and parts made from an `EngineConfig` (`gepetto.parts`).

    Args:
        program: The program that runs a candidate on one example: `(candidate, example, context) -> output`,
            sync or async, calling the task LM through its context.
        metric: `(example, output, trace) -> Score | float`, a score in [0, 1]; a Score's feedback is what the
            reflection LM reads.
        seed_candidate: The Candidate the run starts from: its texts by component name.
        trainset: The examples minibatches are drawn from for reflection and minibatch tests.
        valset: The examples every accepted child is validated on (the Pareto front's scores).
        task_lm: The LM the program calls; metered into the ledger as the "task" role.
        reflection_lm: The LM that proposes new texts; metered into the ledger as the "reflection" role.
        options: What the loop reads of the run's configuration (an `EngineConfig` has it all): budget, seed,
            concurrency, minibatch size, components, prices, ...
        parts: The built strategies, executor, stop conditions, merge and racing (a `Parts`).
        callbacks: A callable, or a sequence of them, each called with every event of the run (gepetto.engine.events).
        rollout_store: Where finished rollouts are kept beyond the process (a run store); a rollout found there
            is not run again. None keeps them in the engine's state only.
        ledger: The ledger of LM calls and costs to add to; None starts a new one.

    Raises:
        TypeError: `seed_candidate` is not a Candidate.
        ValueError: An empty trainset or valset, duplicate or conflicting example ids, components or component
            descriptions not in the seed, `minibatch_size`, `max_concurrency`, `reflection_attempts` or
            `max_lm_failures` below 1, or a budget smaller than one validation pass.
        ConfigError: `max_cost_usd` is set without prices for the task or reflection LM.
        MetricError: From `run`: the metric fails the same way on every validation rollout of the seed, or
            returns a score outside [0, 1] on any of them.

    Example:
        ```python
        from gepetto.api import build_engine, run_engine
        from gepetto.testing import sim

        task = sim.task(n_train=6, n_val=6)
        engine = build_engine(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                              program=task.program, task_lm="sim:task", reflection_lm="sim:reflection", budget=40)
        result = run_engine(engine)
        print(result.best_score, result.stop_reason)
        ```
    """

    def __init__(
        self,
        program: Program,
        metric: Metric,
        seed_candidate: Candidate,
        trainset: Sequence[Example],
        valset: Sequence[Example],
        task_lm: LM,
        reflection_lm: LM,
        options: Options,
        parts: Parts,
        *,
        callbacks: ev.Callbacks = None,
        rollout_store: RolloutStore | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        check_inputs(seed_candidate, trainset, valset, options)
        self.config = options
        self.merge, self.racing = parts.merge, parts.racing
        self._settle: Settle | None = parts.settle  # (None: the strategies are settled already)
        self.program, self.metric, self.seed = program, metric, seed_candidate
        self.trainset, self.valset = list(trainset), list(valset)
        self.components = list(options.components or seed_candidate.keys())
        self.state = RunState([e.id for e in valset], options.budget, ledger=ledger or Ledger())
        self.state.ledger.prices = self.state.ledger.prices or dict(options.prices)
        self.task_lm = MeteredLM(task_lm, self.state.ledger, "task")
        self.reflection_lm = MeteredLM(reflection_lm, self.state.ledger, "reflection")
        _check_prices(options, self.state.ledger, (task_lm.name, reflection_lm.name))
        self.callbacks = ev.as_callbacks(callbacks)  # each is called with every event (gepetto.engine.events)
        self.rollout_store = rollout_store
        self.executor: Executor = parts.executor
        self.strategies = parts.strategies
        self.stop_conditions = list(parts.stop_conditions)
        self.plan: BudgetPlan = self._budget_plan()
        self.route: route.Route | None = None  # settled after the seed's validation
        self._stop: Stop | None = None
        self._current: asyncio.Future | None = None
        self._sem: asyncio.Semaphore | None = None
        self._tried: set[str] = set()  # ids of every child ever proposed (never pay twice for one text)
        self._validating: dict[str, CandidateRecord] = {}  # validations begun and not yet committed
        # a round's proposals decide from the rollouts paid and the children tried before it began (and their own
        # minibatch), and the verdicts of their tests (and what they put off: ProposalRequest.later) are told at its
        # end in plan order: what a round of concurrent proposals does does not hang on their timing (claims of a
        # text go in plan order too: _claim)
        self._settled: frozenset[tuple[str, str]] = frozenset()
        self._settled_tried: frozenset[str] = frozenset()
        self._later: dict[int, list[Callable[[], None]]] = {}  # plan iteration -> what to tell at the round's end
        self._raced_out: list[CandidateRecord] = []  # children whose validation racing cut (Result.raced_out)
        # the training examples that shaped each candidate's lineage (candidate id -> ids): shown to reflection or
        # in a test that decided; the others are fresh evidence for it (`_confirm`)
        self._shaped: dict[str, frozenset[str]] = {}
        self._confirmed: set[int] = set()  # leaders whose evidence was sought
        self._inflight: dict[tuple[str, str], asyncio.Future] = {}
        self._idle = 0
        self._idle_outcomes: Counter[str] = Counter()  # what the proposals of the idle iterations in a row said
        self._since_improvement = 0
        self._lm_failures = 0  # LM infrastructure failures in a row
        self._lm_answered = 0  # LM calls (rollouts, reflection) answered in this session
        self._answered_at_give_up = 0  # ... when the last rollout was given up on (`_retrying`)
        self._t0 = time.monotonic()

    # ---- public control -------------------------------------------------------------------------
    def request_stop(self, reason: StopReason = StopReason.STOP_REQUESTED, message: str | None = None) -> None:
        """End the run after cancelling the step in flight; finished rollouts stay paid and recorded."""
        if self._stop is None:
            self._stop = Stop(reason, message or "")
        if self._current is not None and not self._current.done():
            self._current.cancel()

    async def run(self, *, session_stops: Sequence[stopping.StopCondition] = ()) -> Result:
        """Run to the end. `session_stops`: stop conditions of this session only (e.g. on SIGTERM)."""
        cfg, st = self.config, self.state
        self._t0 = time.monotonic()
        self._sem = asyncio.Semaphore(cfg.max_concurrency)
        conditions = [*self.stop_conditions, *session_stops]
        disarm = [undo for c in conditions if (undo := stopping.arm(c, self.request_stop)) is not None]
        self._emit(ev.PlanMade(self.plan))
        try:
            await self._guarded(self._add_candidate(self.seed, (), "seed", None))
            if self._stop is None:
                self._settle_route()
                await self._guarded(self._open())
            while self._stop is None:
                self._stop = self._check_stop(conditions)
                if self._stop:
                    break
                before, said = st.rollouts_used, Counter(st.proposals)
                best_before = st.best().mean
                merging = self.merge is not None and st.merges_due > 0 and st.merges_done < self.merge.max
                await self._guarded(self._merge_step() if merging else self._reflective_round())
                if self._stop is None:
                    await self._guarded(self._confirm())
                self._idle = 0 if st.rollouts_used > before else self._idle + 1
                self._idle_outcomes = Counter() if not self._idle else self._idle_outcomes + (
                    Counter(st.proposals) - said)
                self._since_improvement = 0 if st.best().mean > best_before else self._since_improvement + 1
                self._emit(ev.IterationEnded(st.iteration, st.rollouts_used, st.budget, st.best().mean,
                                             len(st.archive.front), len(st.records)))
        finally:
            for undo in disarm:
                undo()
        result = self._result(self._stop or Stop(StopReason.STOP_REQUESTED), time.monotonic() - self._t0)
        self._emit(ev.RunEnded(result))
        return result

    def _budget_plan(self) -> BudgetPlan:
        cfg = self.config
        child_test = self.strategies.proposer.test_size or cfg.minibatch_size
        retests = 2 * child_test * self.strategies.accept.retests
        return plan_budget(cfg.budget, len(self.valset), cfg.minibatch_size + cfg.seek_failures, child_test, retests)

    def _settle_route(self) -> None:
        """What the seed's validation shows of the answers (`state.answers`, `state.answering`, `state.steps`), the
        route of an "auto" run and the strategies it names, then the budget plan."""
        st, cfg = self.state, self.config
        runs = [r for e in self.valset if (r := st.known(self.seed, e.id)) is not None]
        st.answers = answers.from_golds(self.trainset, self.valset) or answers.from_outputs(runs, cfg.perfect_score)
        st.answering = route.answering(self.components, runs) if st.answers is not None else ()
        st.steps = route.inner_steps({c: self.seed[c] for c in self.components}, runs)
        if self._settle is not None:
            chosen = route.choose(st.answers, st.answering, runs, steps=st.steps,
                                  one_component=cfg.component_selector != "all")
            self.config, self.strategies, self.route = self._settle(chosen)
            st.ruled = self.route.ruled
            self._emit(ev.RouteChosen(self.route.name, self.route.reason, dict(self.route.settings)))
            plan, self.plan = self.plan, self._budget_plan()
            if self.plan != plan:  # the route's proposer tests its children on more examples
                self._emit(ev.PlanMade(self.plan))

    def _emit(self, event: ev.Event) -> None:
        for callback in self.callbacks:
            callback(event)

    # ---- steps --------------------------------------------------------------------------------
    async def _guarded(self, coro: Any) -> None:
        """Run one step as a cancellable task; a stop request cancels it and ends the run."""
        self._current = asyncio.ensure_future(coro)
        try:
            await self._current
        except asyncio.CancelledError:
            if self._stop is None:
                raise
            self._commit_validated()
        except _OutOfBudget as exc:
            self._stop = Stop(StopReason.BUDGET_EXHAUSTED, str(exc))
        finally:
            self._current = None

    def _rng(self) -> random.Random:
        """A fresh iteration: its own RNG, derived from the seed and the iteration number only."""
        self.state.iteration += 1
        return random.Random(f"{self.config.seed}:{self.state.iteration}")

    def _plan_proposal(self) -> _Plan:
        """Choose parent, components and minibatch (sequential decisions, so rounds stay deterministic)."""
        st, s = self.state, self.strategies
        rng = self._rng()
        parent_idx = s.parent_selector(st, rng)
        if not 0 <= parent_idx < len(st.records):
            raise ValueError(f"the parent selector chose {parent_idx!r}, not in 0-{len(st.records) - 1} (the pool)")
        parent = st.records[parent_idx].candidate
        components = tuple(s.component_selector(st, parent_idx, self.components, rng))
        if not components or any(c not in self.components for c in components):
            raise ValueError(f"the component selector chose {components}; it may choose among {self.components}")
        batch = s.proposer.minibatch(st, parent, components, self.trainset)  # (edit picks its own examples)
        test = self.plan.child_test if batch is not None else 0
        reserve: list[Example] = []
        if batch is None:
            batch = s.minibatch_sampler(st, parent, self.trainset, rng)
            # a proposer that may pick its own test examples (few-shot's) says how many at most
            test = max(len(batch), s.proposer.test_size or 0)
            reserve = self._reserve(parent, batch, rng)
        unknown = sum(st.known(parent, e.id) is None for e in batch) + len(reserve)
        retests = 2 * test * s.accept.retests  # an acceptance that may test again (parent and child)
        return _Plan(st.iteration, parent_idx, components, batch, test, unknown + test + retests + len(self.valset),
                     tuple(reserve))

    def _reserve(self, parent: Candidate, batch: list[Example], rng: random.Random) -> list[Example]:
        """Up to `seek_failures` more training examples for the parent, in the sampler's order (asked again; its
        examples the parent is known to solve left out): run in place of solved minibatch examples."""
        st, want = self.state, self.config.seek_failures
        seen = {e.id for e in batch}
        reserve: list[Example] = []
        while len(reserve) < want:
            fresh = [e for e in self.strategies.minibatch_sampler(st, parent, self.trainset, rng) if e.id not in seen]
            if not fresh:
                break
            seen |= {e.id for e in fresh}
            reserve += [e for e in fresh if (k := st.known(parent, e.id)) is None
                        or k.score.value < self.config.perfect_score]
        return reserve[:want]

    async def _seek_failures(self, plan: _Plan, parent: Candidate, runs: list[Rollout]
                             ) -> tuple[_Plan, list[Rollout], list[Example]]:
        """Run the parent on the plan's reserve, a few at a time, until its minibatch could hold only mistakes
        involving the components it changes (a rollout with no LM call counts as one): the minibatch is then those
        mistakes first, solved examples after, at its size. Also returns every example the parent ran."""
        perfect, mine = self.config.perfect_score, set(plan.components)

        def mistake(run: Rollout) -> bool:
            return run.score.value < perfect and (not run.trace or any(t.component in mine for t in run.trace))

        size, reserve, ran = len(plan.batch), list(plan.reserve), list(zip(plan.batch, runs, strict=True))
        while reserve and (need := size - sum(mistake(r) for _, r in ran)) > 0:
            chunk, reserve = reserve[:need], reserve[need:]
            ran += zip(chunk, await self._evaluate(parent, chunk), strict=True)
        chosen = ([p for p in ran if mistake(p[1])] + [p for p in ran if not mistake(p[1])])[:size]
        return replace(plan, batch=[e for e, _ in chosen]), [r for _, r in chosen], [e for e, _ in ran]

    async def _open(self) -> None:
        """The proposer's openings (`Proposer.openings`: rewrite's trims), before the search. Each runs the validation
        examples in chunks, in one order drawn for them all, and is cut as soon as it scores less than the seed on
        those it ran; it joins the pool when it scores more on all of them (the seed's are known: a child that is
        not cut pays only its validation): a few training examples seldom show a gain where the seed solves few.
        They draw on a random generator of their own and take no iteration, so the search after them goes as it
        would have without them, less their rollouts (and from a better pool, when one passed)."""
        cfg, st = self.config, self.state
        rng = random.Random(f"{cfg.seed}:openings")
        openings = self.strategies.proposer.openings(self.seed, self.components, cfg, rng)
        order = rng.sample(self.valset, len(self.valset)) if openings else []
        seed_scores = st.records[0].val_scores
        for proposal in openings:
            child = self.seed
            for component, text in proposal.texts.items():
                child = child.replace(component, text)
            if len(self.valset) > st.remaining:
                break
            if child.id in self._tried:
                continue
            self._tried.add(child.id)
            component = "+".join(proposal.texts)
            self._emit(ev.PhaseStarted("minibatch", candidate=0, component=component))  # (a proposal begins)
            scores: dict[str, float] = {}
            for start in range(0, len(order), OPENING_CHUNK):
                scores.update((r.example_id, r.score.value)
                              for r in await self._evaluate(child, order[start:start + OPENING_CHUNK]))
                if sum(scores.values()) < sum(seed_scores[e] for e in scores):
                    break
            before, after = sum(seed_scores[e] for e in scores), sum(scores.values())
            accepted = len(scores) == len(order) and after > before
            self._emit(ev.ProposalTested(0, component, "\n\n".join(child[c] for c in proposal.texts), before, after,
                                         accepted, proposal.rule, proposal.pattern, proposal.origin))
            st.proposals[Outcome.ACCEPTED if accepted else Outcome.NOT_BETTER] += 1
            if proposal.verdict is not None:
                proposal.verdict(child, accepted)
            if accepted:
                self._commit(child, (0,), proposal.origin or "reflection", component, scores, st.iteration)

    async def _reflective_round(self) -> None:
        """Plan up to `proposals_per_round` proposals, try them concurrently, add the accepted ones in order.

        The budget for every planned proposal's worst case is set aside before any of them starts, so a
        round never overspends. Texts are claimed and children committed in plan order, so timing never changes
        the outcome. A stop still commits the children already validated (in plan order); proposals in flight
        are given up, their paid rollouts kept (an interrupted validation shows in `Result.partial_candidates`).
        """
        cfg, st = self.config, self.state
        plans: list[_Plan] = []
        reserved = 0
        for _ in range(cfg.proposals_per_round):
            plan = self._plan_proposal()
            if not plans and plan.cost > st.remaining and not self._tail_fits(plan):
                plan = self._narrowed(plan)
            if reserved + plan.cost > st.remaining:
                if not plans and not self._tail_fits(plan):
                    self._afford(plan.cost, "next proposal")
                if not plans:  # racing's tail: a last proposal whose validation may end partial
                    plans.append(plan)
                break
            reserved += plan.cost
            plans.append(plan)

        async def in_turn(plan: _Plan, turn: _Turn) -> tuple[Candidate, dict[str, float] | None, str] | None:
            try:
                return await self._try_proposal(plan, turn)
            finally:
                turn.pass_on()  # gave up before claiming a text (or failed): the next may decide after the earlier

        self._settled, self._settled_tried = frozenset(st.rollouts), frozenset(self._tried)
        turns: list[_Turn] = []
        for _ in plans:
            turns.append(_Turn(turns[-1].done if turns else None))
        tries = [asyncio.ensure_future(in_turn(p, t)) for p, t in zip(plans, turns, strict=True)]
        try:
            await asyncio.gather(*tries)
        finally:  # also when the round is cancelled by a stop: what was validated is kept
            for plan, task in zip(plans, tries, strict=True):
                task.cancel()  # no-op when done
                for tell in self._later.pop(plan.iteration, ()):
                    tell()
                outcome = self._outcome(task, plan.iteration)
                if outcome is not None:
                    child, scores, origin = outcome
                    if scores is not None:  # (None: raced out; it still asks for a merge, as it would have)
                        self._commit(child, (plan.parent_idx,), origin, plan.component, scores, plan.iteration)
                    if self.merge is not None:
                        st.merges_due += 1

    def _as_of_round(self, parent: Candidate, batch: list[Example]) -> RunState:
        """The state a proposal of this round sees: the same, but with only the rollouts paid before the round
        began and the parent's on its minibatch (its `memory` is the run's)."""
        st, keys = self.state, self._settled | {(parent.id, e.id) for e in batch}
        view = copy.copy(st)
        view.rollouts = {k: r for k, r in st.rollouts.items() if k in keys}
        return view

    def _narrowed(self, plan: _Plan) -> _Plan:
        """At the budget's tail, where a test of the proposer's own choosing (`test_size`, few-shot's) no longer
        fits, a proposer that reads `ProposalRequest.test_room` (`fits_test_room`) still gets a last proposal, one
        tested on its minibatch."""
        proposer, n = self.strategies.proposer, len(plan.batch)
        if not proposer.fits_test_room or plan.test <= n:
            return plan
        saved = (plan.test - n) * (1 + 2 * self.strategies.accept.retests)
        return replace(plan, test=n, cost=plan.cost - saved)

    def _tail_fits(self, plan: _Plan) -> bool:
        """With racing, the tail of the budget is spent: a proposal whose whole validation no longer fits still
        starts if its minibatch, its test and one racing chunk do. Its child races while the budget lasts; one
        neither cut nor fully validated when the budget runs out is left a partial candidate (never the best;
        a resume with a larger budget finishes its validation)."""
        n = len(self.valset)
        return self.racing is not None and plan.cost - n + min(self.racing.chunk, n) <= self.state.remaining

    def _outcome(self, task: asyncio.Future, iteration: int
                 ) -> tuple[Candidate, dict[str, float] | None, str] | None:
        """What a try gave: its result, or, when a stop cut it short after its last validation rollout, the
        child and its scores from the state."""
        if task.done() and not task.cancelled() and task.exception() is None:
            return task.result()
        rec = next((r for r in self._validating.values() if r.origin not in ("seed", "merge")
                    and r.iteration == iteration), None)
        scores = self._paid_scores(rec.candidate) if rec is not None else {}
        return (rec.candidate, scores, rec.origin) if rec is not None and len(scores) == len(self.valset) else None

    async def _try_proposal(self, plan: _Plan, turn: _Turn | None = None
                            ) -> tuple[Candidate, dict[str, float] | None, str] | None:
        """Minibatch, proposal, the child's test and, if it passes, validation: the child, its scores (None when
        racing cut its validation) and its origin, or None."""
        st = self.state
        parent = st.records[plan.parent_idx].candidate
        self._emit(ev.PhaseStarted("minibatch", candidate=plan.parent_idx, component=plan.component))
        parent_runs, ran = await self._evaluate(parent, plan.batch), plan.batch
        if plan.reserve:
            plan, parent_runs, ran = await self._seek_failures(plan, parent, parent_runs)
        rng = random.Random(PROPOSAL_RNG.format(seed=self.config.seed, iteration=plan.iteration))
        request = ProposalRequest(parent, plan.parent_idx, plan.components, plan.batch, parent_runs, plan.iteration,
                                  rng, self.config,
                                  self._as_of_round(parent, ran), self.trainset, _Services(self, plan.iteration),
                                  plan.test)
        proposal = as_proposal(await self.strategies.proposer.propose(request), request)
        if proposal is None:
            return None
        child = parent
        for component, text in proposal.texts.items():
            child = child.replace(component, text)
        if not await self._claim(child, turn):
            st.proposals[Outcome.ALREADY_TRIED] += 1
            return None
        test = plan.batch if proposal.test_on is None else list(proposal.test_on)
        cost = sum(st.known(parent, e.id) is None for e in test) + len(test)
        if test is not plan.batch and cost > plan.test:
            raise ValueError(f"the proposer's test needs {cost} rollouts, more than the {plan.test} set aside")
        shown = {e.id for e in plan.batch} if proposal.shown is None else set(proposal.shown)
        self._shaped[child.id] = self._shaped.get(parent.id, frozenset()) | shown | {e.id for e in test}
        before = [r.score.value for r in (parent_runs if test is plan.batch else await self._evaluate(parent, test))]
        after = [r.score.value for r in await self._evaluate(child, test)]
        # an empty test (the proposer asked for none): straight to validation
        accepted, retested = await self._accept(plan, parent, child, test, before, after) if test else (True, 0)
        text = "\n\n".join(child[c] for c in proposal.texts)
        self._emit(ev.ProposalTested(plan.parent_idx, plan.component, text, sum(before), sum(after), accepted,
                                     proposal.rule, proposal.pattern, proposal.origin, retested or None))
        if proposal.verdict is not None:
            verdict = proposal.verdict
            self._later.setdefault(plan.iteration, []).append(lambda: verdict(child, accepted))
        if not accepted:
            st.proposals[Outcome.NOT_BETTER] += 1
            return None
        st.proposals[Outcome.ACCEPTED] += 1
        origin = proposal.origin or "reflection"
        return child, await self._validate_child(child, (plan.parent_idx,), origin, plan.component,
                                                 plan.iteration), origin

    async def _accept(self, plan: _Plan, parent: Candidate, child: Candidate, test: list[Example],
                      before: list[float], after: list[float]) -> tuple[bool, int]:
        """The acceptance strategy's verdict, and how many fresh examples its re-tests added to `before` and
        `after` (in place). None asks for a re-test (strategies.Acceptance), within the rollouts set aside."""
        accept, used = self.strategies.accept, {e.id for e in test}
        verdict = accept(before, after)
        for k in range(accept.retests):
            if verdict is not None:
                break
            fresh = retest_examples(self.trainset, used, len(test),
                                    random.Random(f"{self.config.seed}:{plan.iteration}:retest:{k}"))
            if not fresh:
                break
            used |= {e.id for e in fresh}
            parent_runs, child_runs = await asyncio.gather(self._evaluate(parent, fresh), self._evaluate(child, fresh))
            before += [r.score.value for r in parent_runs]
            after += [r.score.value for r in child_runs]
            verdict = accept(before, after)
        return bool(verdict), len(used) - len(test)

    async def _claim(self, child: Candidate, turn: _Turn | None) -> bool:
        """Mark `child` as tried; False if it already was. Within a round, in plan order (see `_Turn`)."""
        if turn is not None and turn.before is not None:
            await asyncio.shield(turn.before)  # (shielded: a stop that cancels this proposal leaves the chain whole)
        fresh = child.id not in self._tried
        self._tried.add(child.id)
        if turn is not None:
            turn.pass_on()
        return fresh

    async def _merge_step(self) -> None:
        """A due merge; with adaptive_merge, a reflective round in the same iteration when no merge was tested
        (skipped by the draw, or no pair to merge), so no iteration passes without work."""
        if not await self._try_merge() and self.merge is not None and self.merge.adaptive:
            await self._reflective_round()

    async def _try_merge(self) -> bool:
        """Find, test and (if it passes) validate a merge; False when no merge was tested."""
        cfg, st = self.config, self.state
        rng = self._rng()
        st.merges_due -= 1
        if self.merge is not None and self.merge.adaptive:  # tried with a probability learnt from its merges
            tried = st.proposals[Outcome.MERGE_ACCEPTED] + st.proposals[Outcome.MERGE_REJECTED]
            if rng.random() >= merge_chance(st.proposals[Outcome.MERGE_ACCEPTED], tried):
                return False
        means = st.means
        found = find_merge(st.archive.front, [r.candidate for r in st.records],
                           [r.parents for r in st.records], means, st.merge_tried, rng,
                           also_known=[r.candidate.id for r in self._raced_out])
        if found is None:
            return False
        i, j, child = found
        if child.id in self._tried:
            return False
        self._tried.add(child.id)
        if over_length(cfg, child):  # two branches' rules together may not fit the length budget
            st.proposals[Outcome.OVER_LENGTH] += 1
            return False
        self._afford(len(self.valset), "next merge")
        st.merges_done += 1
        self._shaped[child.id] = self._shaped.get(st.records[i].candidate.id, frozenset()) | self._shaped.get(
            st.records[j].candidate.id, frozenset())
        si, sj = st.records[i].val_scores, st.records[j].val_scores
        # test on the validation examples where the two parents differ most (their scores are known)
        order = sorted(self.valset, key=lambda e: (-abs(si[e.id] - sj[e.id]), rng.random()))
        sub = order[: cfg.minibatch_size]
        runs = await self._evaluate(child, sub)
        got = sum(r.score.value for r in runs)
        bar = max(sum(si[e.id] for e in sub), sum(sj[e.id] for e in sub))
        accepted = got >= bar
        self._emit(ev.MergeTested((i, j), got, bar, accepted))
        st.proposals[Outcome.MERGE_ACCEPTED if accepted else Outcome.MERGE_REJECTED] += 1
        if accepted:
            scores = await self._validate_child(child, (i, j), "merge", None, st.iteration)
            if scores is not None:
                self._commit(child, (i, j), "merge", None, scores, st.iteration)
        return True

    async def _confirm(self) -> None:
        """Evidence bought for a leader held back from the best (a higher validation mean, short of evidence): it,
        the seed and the best run on the training examples that shaped none of their lineages (never shown to
        reflection nor in a test that decided), as many as the budget pays; with those scores beside the validation
        scores it becomes the best if it beats them on evidence (ParetoArchive.confirm). Once per leader."""
        st = self.state
        leader, best = st.archive.leader(), st.archive.best()
        rec = st.records[leader]
        if leader == best or leader in self._confirmed or rec.constant is not None or \
                st.means[leader] <= st.means[best]:
            return
        self._confirmed.add(leader)
        rows = sorted({leader, 0, best})
        shaped = frozenset().union(*(self._shaped.get(st.records[k].candidate.id, frozenset()) for k in rows))
        fresh = [e for e in self.trainset if e.id not in shaped and e.id not in set(st.val_ids)]
        def cost(examples: list[Example]) -> int:
            return sum(st.known(st.records[k].candidate, e.id) is None for k in rows for e in examples)

        while fresh and cost(fresh) > st.remaining:
            fresh.pop()
        if not fresh:
            return
        extra = {k: [r.score.value for r in await self._evaluate(st.records[k].candidate, fresh)] for k in rows}
        if st.archive.confirm(leader, extra, rec.parents):
            rec.evident = True
            st.history.append((st.rollouts_used, rec.mean))
            self._emit(ev.BestConfirmed(leader, len(fresh), st.rollouts_used))

    async def _reflect(self, messages: list[Message], params: dict[str, Any]) -> Completion | None:
        """One reflection call; a flaky reflection LM costs an attempt (None), not the run."""
        try:
            return await self._retrying(self.reflection_lm.complete, messages, **params)
        except Exception as exc:
            self.state.proposals[Outcome.REFLECTION_ERROR] += 1
            self._emit(ev.ReflectionFailed(f"{type(exc).__name__}: {exc}"))
            return None

    # ---- evaluation and bookkeeping ------------------------------------------------------------
    async def _evaluate(self, candidate: Candidate, examples: Sequence[Example]) -> list[Rollout]:
        """Run `candidate` on `examples` concurrently; known rollouts are reused, each new one is paid once."""
        st, store, sem = self.state, self.rollout_store, self._sem
        assert sem is not None

        async def one(ex: Example) -> Rollout:
            key = (candidate.id, ex.id)
            if key in st.rollouts:
                return st.rollouts[key]
            if key in self._inflight:  # the same pair is being run by a concurrent step: share its result
                return await asyncio.shield(self._inflight[key])
            future = asyncio.get_running_loop().create_future()
            self._inflight[key] = future
            try:
                run = store.get(*key) if store is not None else None
                if run is None:
                    run = await self._retrying(self._run_rollout, sem, candidate, ex,
                                               give_up=functools.partial(_unanswered, ex))
                    if store is not None:  # the run goes on with what a resume will read back
                        run = store.put(candidate, ex.id, run) or run
                st.rollouts[key] = run
                st.rollouts_used += 1
                future.set_result(run)
            except BaseException as exc:
                if isinstance(exc, asyncio.CancelledError):
                    future.cancel()
                else:
                    future.set_exception(exc)
                    future.exception()  # mark it retrieved: nobody may be waiting
                raise
            finally:
                del self._inflight[key]
            self._emit(ev.RolloutFinished(candidate.id, ex.id, run.score.value, run.error, st.rollouts_used, st.budget))
            return run

        return list(await asyncio.gather(*(one(e) for e in examples)))

    async def _run_rollout(self, sem: asyncio.Semaphore, candidate: Candidate, ex: Example) -> Rollout:
        async with sem:
            try:
                return await self.executor.run(self.program, self.metric, candidate, ex, self.task_lm,
                                               self.config.task_lm_params, timeout=self.config.rollout_timeout)
            except KeyboardInterrupt:  # raised in the program or metric (Ctrl-C outside our loop): a stop, no verdict
                self.request_stop(StopReason.INTERRUPTED, "interrupted: KeyboardInterrupt in the program or metric "
                                  f"on {ex.id!r} (everything paid so far is kept; resume to go on)")
                raise asyncio.CancelledError from None

    async def _retrying(self, call: Callable[..., Awaitable[T]], *args: Any,
                        give_up: Callable[[LMUnavailable], T] | None = None, **kwargs: Any) -> T:
        """`call(...)`, made again while the LM infrastructure fails (LMUnavailable: no answer, so no result to
        keep, count or store). Stops the run when that cannot heal (LMSetupError) or keeps happening: on
        `max_lm_failures` failures in a row, or of this one call. With `give_up` (a rollout), a call that fails
        `max_lm_failures` times while the LM answers others is this input's failure, not an outage: `give_up(error)`
        is its result. "Answers others": a call answered since this one first failed, or, calls made one at a time,
        every failure in the row is this call's and a call was answered since the last input given up on (so an
        outage met by calls made one at a time fails one rollout at most, then stops the run)."""
        cfg, tries, answered = self.config, 0, 0
        while True:
            try:
                out = await call(*args, **kwargs)
            except LMUnavailable as exc:
                self._lm_failures += 1
                tries += 1
                answered = self._lm_answered if tries == 1 else answered
                error = f"{type(exc).__name__}: {exc}"
                alone = self._lm_answered > answered or (self._lm_failures == tries
                                                          and self._lm_answered > self._answered_at_give_up)
                if isinstance(exc, LMSetupError):
                    what = ""
                elif give_up is not None and tries >= cfg.max_lm_failures and alone:
                    self._lm_failures = max(0, self._lm_failures - tries)  # this input's failures, not the LM's
                    self._answered_at_give_up = self._lm_answered
                    return give_up(exc)
                elif self._lm_failures >= cfg.max_lm_failures:
                    what = f"{self._lm_failures} LM calls in a row failed; "
                elif tries >= cfg.max_lm_failures:
                    what = f"one LM call failed {tries} times; "
                else:
                    self._emit(ev.LMFailed(error, self._lm_failures, cfg.lm_retry_pause))
                    await asyncio.sleep(cfg.lm_retry_pause)
                    continue
                self._emit(ev.LMFailed(error, self._lm_failures, None))
                self.request_stop(StopReason.LM_UNAVAILABLE, f"LM unavailable: {what}{error} (everything paid so far "
                                  f"is kept; fix the LM and resume)")
                raise asyncio.CancelledError from exc
            self._lm_failures = 0
            self._lm_answered += 1
            return out

    async def _add_candidate(
        self, candidate: Candidate, parents: tuple[int, ...], origin: str, component: str | None
    ) -> None:
        iteration = self.state.iteration
        self._commit(candidate, parents, origin, component,
                     await self._validate(candidate, parents, origin, component, iteration), iteration)

    async def _validate(self, candidate: Candidate, parents: tuple[int, ...], origin: str, component: str | None,
                        iteration: int) -> dict[str, float]:
        """Scores on the whole validation set (its cost was set aside when the step was planned)."""
        self._begin_validation(candidate, parents, origin, component, iteration)
        runs = await self._evaluate(candidate, self.valset)
        if origin == "seed":
            check_metric(runs)  # a metric that cannot score anything stops the run before it burns the budget
        return {r.example_id: r.score.value for r in runs}

    def _begin_validation(self, candidate: Candidate, parents: tuple[int, ...], origin: str, component: str | None,
                          iteration: int) -> None:
        self._emit(ev.PhaseStarted("validation", origin=origin))
        # until committed, a stop leaves it a partial candidate (see `_partial_candidates`)
        self._validating[candidate.id] = CandidateRecord(-1, candidate, parents, origin, iteration, component, {}, 0)

    async def _validate_child(self, child: Candidate, parents: tuple[int, ...], origin: str, component: str | None,
                              iteration: int) -> dict[str, float] | None:
        """A child's validation scores: the whole set, or with racing, None when it was raced out."""
        if self.racing is None:
            return await self._validate(child, parents, origin, component, iteration)
        self._begin_validation(child, parents, origin, component, iteration)
        st, chunk = self.state, self.racing.chunk
        ids, by_id = st.val_ids, {e.id: e for e in self.valset}
        front = st.archive.front_scores.copy()  # the front cannot change before the child is committed
        parent_row = np.mean([st.archive.scores[p] for p in parents], axis=0)
        free = {e for e in ids if (child.id, e) in st.rollouts}  # known in this run's path (a resume replays it)
        rng = random.Random(f"{self.config.seed}:{iteration}:race:{child.id}")
        pos = {e: j for j, e in enumerate(ids)}
        confidence = self.racing.confidence  # the sign test wants examples in no informed order
        todo = [pos[e] for e in racing.validation_order(ids, front, parent_row.tolist(), free, rng,
                                                         informed=confidence is None)]
        got: dict[str, float] = {}
        batch = todo[: len(free)]
        while True:
            paid = [j for j in batch if (child.id, ids[j]) not in st.rollouts]
            if len(paid) > st.remaining:  # a tail proposal (`_tail_fits`): run what the budget still pays for
                batch = [j for j in batch if j not in set(paid[st.remaining:])]
            got.update((r.example_id, r.score.value)
                       for r in await self._evaluate(child, [by_id[ids[j]] for j in batch]))
            done = set(batch)
            todo = [j for j in todo if j not in done]
            if not todo:
                return {e: got[e] for e in ids}
            run = np.array([e in got for e in ids])
            scores = np.array([got.get(e, 0.0) for e in ids])
            verdict = racing.verdict(front, run, scores, confidence)
            if verdict.decision == "cut" and verdict.by is not None:
                self._raced(self._validating.pop(child.id), got, st.archive.front[verdict.by], verdict.losses)
                return None
            if not st.remaining:  # the tail ran out undecided: the child stays a partial candidate
                raise _OutOfBudget(f"budget: spent; the last child's validation is partial ({len(got)} of "
                                   f"{len(ids)} examples, neither cut nor complete)")
            batch = (todo if verdict.decision == "sure" else todo[:chunk] if confidence is not None
                     else racing.next_chunk(todo, front, run, scores, chunk))

    def _raced(self, rec: CandidateRecord, scores: dict[str, float], dominator: int, losses: int) -> None:
        """Books a child racing cut: kept with its paid scores, counted as raced out instead of accepted."""
        st = self.state
        rec = CandidateRecord(-1, rec.candidate, rec.parents, rec.origin, rec.iteration, rec.component,
                              {e: scores[e] for e in st.val_ids if e in scores}, st.rollouts_used)
        self._raced_out.append(rec)
        was = Outcome.MERGE_ACCEPTED if rec.origin == "merge" else Outcome.ACCEPTED
        st.proposals[was] -= 1
        if not st.proposals[was]:
            del st.proposals[was]
        st.proposals[Outcome.RACED_OUT] += 1
        n, k = len(st.val_ids), len(rec.val_scores)
        why = (f"candidate {dominator} is at least as good on the {k} examples run (better on one) and scores 1.0 "
               f"on the {n - k} left" if not losses else
               f"candidate {dominator} is at least as good on the {k} examples run and better on {losses} (sign "
               f"test, confidence {self.racing.confidence if self.racing else None}); {n - k} examples not run")
        self._emit(ev.ValidationCut(rec, k, n, dominator, why))

    def _commit(self, candidate: Candidate, parents: tuple[int, ...], origin: str, component: str | None,
                scores: dict[str, float], iteration: int) -> None:
        st = self.state
        record = CandidateRecord(len(st.records), candidate, parents, origin, iteration, component, scores,
                                 st.rollouts_used, constant=self._constant(candidate))
        st.add_record(record)
        self._tried.add(candidate.id)
        self._validating.pop(candidate.id, None)
        self._emit(ev.CandidateAdded(record, st.best().mean, tuple(st.archive.front)))

    def _constant(self, candidate: Candidate) -> answers.ConstantAnswer | None:
        """The constant answer the candidate's validation outputs nearly always give (answers.constant_answer)."""
        st = self.state
        runs = [st.known(candidate, e.id) for e in self.valset]
        if st.answers is None or any(r is None for r in runs):
            return None
        return answers.constant_answer(st.answers, [r.output for r in runs if r is not None],
                                       [e.gold for e in self.valset], self.config.perfect_score)

    def _afford(self, cost: int, what: str) -> None:
        if cost > self.state.remaining:
            raise _OutOfBudget(f"budget: the {what} could cost {cost} rollouts (its validation {len(self.valset)}), "
                               f"{self.state.remaining} of {self.state.budget} left unspent")

    def _check_stop(self, conditions: Sequence[stopping.StopCondition]) -> Stop | None:
        st = self.state
        status = stopping.RunStatus(st.iteration, st.rollouts_used, st.budget, st.best().mean, len(st.records),
                                    self._since_improvement, self._idle, time.monotonic() - self._t0,
                                    st.ledger.total().cost, st, {str(k): v for k, v in self._idle_outcomes.items()})
        return next((stop for c in conditions if (stop := stopping.decide(c, status)) is not None), None)

    def _paid_scores(self, candidate: Candidate) -> dict[str, float]:
        """The validation scores of `candidate` paid for so far."""
        runs = [self.state.rollouts.get((candidate.id, e.id)) for e in self.valset]
        return {r.example_id: r.score.value for r in runs if r is not None}

    def _commit_validated(self) -> None:
        """After a stop: commit a seed or merge child whose validation finished just before the step was cut
        (children of a round are handled by the round, in plan order)."""
        for rec in list(self._validating.values()):
            scores = self._paid_scores(rec.candidate)
            if len(scores) == len(self.valset):
                self._commit(rec.candidate, rec.parents, rec.origin, rec.component, scores, rec.iteration)

    def _partial_candidates(self) -> list[CandidateRecord]:
        """Candidates whose validation was interrupted, with the validation scores already paid for."""
        out = []
        for rec in self._validating.values():
            scores = self._paid_scores(rec.candidate)
            if scores:
                out.append(CandidateRecord(-1, rec.candidate, rec.parents, rec.origin, rec.iteration, rec.component,
                                           scores, self.state.rollouts_used))
        return out

    def _result(self, stop: Stop, seconds: float) -> Result:
        st = self.state
        partial = self._partial_candidates()
        if not st.records:  # stopped before the seed was validated
            return Result(self.seed, float("nan"), float("nan"), [], [], st.rollouts_used, st.budget, st.ledger,
                          stop.reason, stop.message, st.iteration, dict(st.proposals), [], seconds, partial,
                          list(self._raced_out), st.metric_checks)
        best = st.best()
        return Result(best.candidate, best.mean, st.records[0].mean, list(st.records), st.archive.front,
                      st.rollouts_used, st.budget, st.ledger, stop.reason, stop.message, st.iteration,
                      dict(st.proposals), list(st.history), seconds, partial, list(self._raced_out),
                      st.metric_checks)


def _unanswered(example: Example, exc: LMUnavailable) -> Rollout:
    """The failed rollout of an input the LM never answers (past its retries) while it answers the others."""
    msg = f"{type(exc).__name__}: {exc}"
    return Rollout(example.id, Score(0.0, "The LM gave no answer on this example, past its retries, while it answered "
                                     f"the others, so it scored 0. Error: {msg}"), error=msg, stage="program")


def _check_prices(cfg: Options, ledger: Ledger, names: Sequence[str]) -> None:
    """A spend limit needs prices of the LMs it spends on: without them the ledger counts $0 and it never stops."""
    if cfg.max_cost_usd is not None and not any(n in ledger.prices for n in names):
        raise ConfigError(f"max_cost_usd={cfg.max_cost_usd:g} needs prices (dollars per million input and output "
                          f"tokens) for the LMs {', '.join(map(repr, names))}, e.g. prices={{{names[0]!r}: [0.4, "
                          f"1.6]}}; without them their calls cost $0 and the limit could never stop the run "
                          f"(prices given: {sorted(ledger.prices) or 'none'})")


def check_inputs(seed: Candidate, train: Sequence[Example], val: Sequence[Example], cfg: Options) -> None:
    """Errors a user can cause, said once and clearly, before anything is paid for."""
    if not isinstance(seed, Candidate):
        raise TypeError("seed_candidate must be a gepetto.Candidate (or a dict passed to optimize())")
    if not train:
        raise ValueError("trainset is empty: give at least one example")
    if not val:
        raise ValueError("valset is empty: give at least one example (or omit it to validate on the trainset)")
    for name, data in (("trainset", train), ("valset", val)):
        ids = [e.id for e in data]
        if len(set(ids)) != len(ids):
            dup = [i for i, n in Counter(ids).items() if n > 1]
            shown = ", ".join(repr(i) for i in dup[:3]) + (f" and {len(dup) - 3} more" if len(dup) > 3 else "")
            raise ValueError(f"{name} has duplicate example ids ({shown}); every example needs a distinct id "
                             "(an example given without one gets it from its inputs and gold, so two identical "
                             "examples share one: drop the copies or give ids)")
    # rollouts are keyed by (candidate, example id) across splits: one id must name one example everywhere
    in_train = {e.id: e for e in train}
    for e in val:
        other = in_train.get(e.id)
        if other is not None and (dict(other.inputs), other.gold) != (dict(e.inputs), e.gold):
            raise ValueError(f"example id {e.id!r} names different examples in trainset and valset; an id must name "
                             f"one example in every split (e.g. prefix ids with the split name: 'train-0', 'val-0')")
    if cfg.components:
        missing = [c for c in cfg.components if c not in seed]
        if missing:
            raise ValueError(f"components {missing} are not in the seed candidate ({list(seed)})")
    unknown = [c for c in cfg.component_descriptions or {} if c not in seed]
    if unknown:
        raise ValueError(f"component_descriptions names {unknown}, not in the seed candidate ({list(seed)})")
    if cfg.minibatch_size < 1 or cfg.max_concurrency < 1 or cfg.reflection_attempts < 1 or cfg.max_lm_failures < 1:
        raise ValueError("minibatch_size, max_concurrency, reflection_attempts and max_lm_failures must be at least 1")
    if cfg.budget < len(val):
        raise ValueError(
            f"budget {cfg.budget} is smaller than one validation pass ({len(val)} rollouts for the seed); "
            f"raise the budget or use fewer validation examples"
        )
