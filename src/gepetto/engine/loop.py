"""The GEPA loop: select a parent on the Pareto front, reflect on one component, test the child on a
minibatch, validate it if it is better, merge lineages now and then; all within a budget of rollouts.

Every decision derives from the seed and what was paid for (rollouts, reflection answers), so a run that is
replayed over its stored rollouts and LM answers takes exactly the same path (that is how resume works).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from gepetto.engine import edits
from gepetto.engine.merge import find_merge
from gepetto.engine.reflect import CLOSE_TAG, ReflectionExample, build_prompt, reflective_examples, retry_messages, vet
from gepetto.engine.state import BudgetPlan, CandidateRecord, RunState, plan_budget
from gepetto.ledger import Ledger
from gepetto.lm.base import LM, Completion, LMSetupError, LMUnavailable, Message, MeteredLM
from gepetto.program import Metric, Program, Rollout, check_metric, run_rollout
from gepetto.types import Candidate, Example

EventHandler = Callable[[str, dict[str, Any]], None]
T = TypeVar("T")


class RolloutStore(Protocol):
    """Where finished rollouts are kept beyond the process (the run store); looked up before paying again."""

    def get(self, candidate_id: str, example_id: str) -> Rollout | None: ...

    def put(self, candidate: Candidate, example_id: str, rollout: Rollout) -> None: ...


@dataclass
class EngineConfig:
    """Knobs of the loop. Defaults follow the paper where it says, and what works with small LMs otherwise."""

    budget: int = 200
    minibatch_size: int = 3
    seed: int = 0
    max_concurrency: int = 8
    accept: Literal["strict", "non_decreasing"] = "strict"
    use_merge: bool = True
    max_merges: int = 5
    perfect_score: float = 1.0
    components: Sequence[str] | None = None  # which components to evolve; None = all
    # component -> what kind of text it is ("a Python regular expression that ..."). A described component is an
    # artifact, not an instruction: reflection is told the description and keeps that kind of text, vetting
    # takes it verbatim, and the edit proposer rewrites it whole instead of appending a rule line
    component_descriptions: dict[str, str] | None = None
    reflection_attempts: int = 3
    reflection_temperatures: Sequence[float] = (0.0, 0.7, 1.0)
    reflection_max_tokens: int = 700
    reflection_chars: int = 6000
    task_lm_params: dict[str, Any] = field(default_factory=lambda: {"temperature": 0.0})
    time_limit: float | None = None  # seconds
    patience: int | None = None  # stop after this many iterations without a better best
    target_score: float | None = None
    stop_file: str | None = None
    max_idle_iterations: int = 10  # stop when this many iterations in a row spend no rollout
    proposals_per_round: int = 1  # >1 tries several proposals at once (faster against parallel LM APIs)
    # "edit": one rule per proposal for one frequent mistake, gated on failures and solved cases (engine/edits.py);
    # "rewrite": the paper's full rewrite of the component from a minibatch (engine/reflect.py)
    proposer: Literal["edit", "rewrite"] = "rewrite"
    evidence_size: int = 8  # edit: paid training rollouts a parent needs before its mistakes are grouped
    gate_solved: int = 3  # edit: solved examples added to the child's test, so rules that break them fail
    rule_max_tokens: int = 90
    # an LM call that fails for infrastructure reasons (LMUnavailable, after the backend's own retries) is no
    # result: it is made again after `lm_retry_pause` seconds; this many failures in a row stop the run (an
    # LMSetupError such as HTTP 401 stops it at once), keeping everything paid so far
    max_lm_failures: int = 5
    lm_retry_pause: float = 5.0


@dataclass
class Result:
    """What a run produced: the best candidate, the whole pool with lineage and scores, and the costs."""

    best_candidate: Candidate
    best_score: float
    seed_score: float
    candidates: list[CandidateRecord]
    pareto_front: list[int]
    rollouts_used: int
    budget: int
    ledger: Ledger
    stop_reason: str
    iterations: int
    proposals: dict[str, int]
    history: list[tuple[int, float]]
    wall_seconds: float
    # candidates whose validation a stop interrupted: scores on the examples paid so far (index -1). They are
    # not in the pool and never chosen as best on partial scores; a resumed run replays their rollouts for free
    partial_candidates: list[CandidateRecord] = field(default_factory=list)

    @property
    def best_index(self) -> int:
        return max(range(len(self.candidates)), key=lambda i: (self.candidates[i].mean, -i), default=0)

    def summary(self) -> str:
        t = self.ledger.total()
        return (
            f"validation score {self.seed_score:.3f} (seed) -> {self.best_score:.3f} (best, candidate "
            f"{self.best_index}); {len(self.candidates)} candidates, front {len(self.pareto_front)}; "
            f"{self.rollouts_used}/{self.budget} rollouts; {self.iterations} iterations; "
            f"{t.calls} LM calls, {t.input_tokens}+{t.output_tokens} tokens; {self.wall_seconds:.1f}s; "
            f"stopped: {self.stop_reason}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "best_candidate": self.best_candidate.to_dict(), "best_score": self.best_score,
            "seed_score": self.seed_score, "candidates": [c.to_dict() for c in self.candidates],
            "pareto_front": self.pareto_front, "rollouts_used": self.rollouts_used, "budget": self.budget,
            "ledger": self.ledger.to_dict(), "stop_reason": self.stop_reason, "iterations": self.iterations,
            "proposals": self.proposals, "history": self.history, "wall_seconds": self.wall_seconds,
            "partial_candidates": [c.to_dict() for c in self.partial_candidates],
        }


class _OutOfBudget(Exception):
    pass


@dataclass(frozen=True)
class _Plan:
    """A proposal decided but not yet tried: which parent, which component, which minibatch, worst cost."""

    iteration: int
    parent_idx: int
    component: str
    batch: list[Example]
    cost: int


@dataclass
class _Turn:
    """Proposals of a round claim their texts in plan order: each waits until the one before has claimed a text
    or given up, so which proposal owns a text never depends on which reflection answer arrived first."""

    before: asyncio.Event | None
    done: asyncio.Event = field(default_factory=asyncio.Event)


class Engine:
    """Runs one optimisation. Construct, then `await engine.run()`; `request_stop()` ends it gracefully."""

    def __init__(
        self,
        program: Program,
        metric: Metric,
        seed_candidate: Candidate,
        trainset: Sequence[Example],
        valset: Sequence[Example],
        task_lm: LM,
        reflection_lm: LM,
        config: EngineConfig | None = None,
        *,
        on_event: EventHandler | None = None,
        rollout_store: RolloutStore | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        self.config = cfg = config or EngineConfig()
        _check_inputs(seed_candidate, trainset, valset, cfg)
        self.program, self.metric, self.seed = program, metric, seed_candidate
        self.trainset, self.valset = list(trainset), list(valset)
        self._train_by_id = {e.id: e for e in self.trainset}
        self._epoch_order: tuple[int, list[int]] = (-1, [])  # (epoch, shuffled training indices), derived
        self.components = list(cfg.components or seed_candidate.keys())
        self.state = RunState([e.id for e in valset], cfg.budget, ledger=ledger or Ledger())
        self.task_lm = MeteredLM(task_lm, self.state.ledger, "task")
        self.reflection_lm = MeteredLM(reflection_lm, self.state.ledger, "reflection")
        self.on_event = on_event or (lambda kind, data: None)
        self.rollout_store = rollout_store
        child_test = cfg.minibatch_size + cfg.gate_solved if cfg.proposer == "edit" else cfg.minibatch_size
        self.plan: BudgetPlan = plan_budget(cfg.budget, len(self.valset), cfg.minibatch_size, child_test)
        self._stop_reason: str | None = None
        self._current: asyncio.Future | None = None
        self._sem: asyncio.Semaphore | None = None
        self._tried: set[str] = set()  # ids of every child ever proposed (never pay twice for one text)
        # edit reflection's memory: (parent id, component) -> failure pattern -> rules that did not help
        self._rules_tried: dict[tuple[str, str], dict[str, list[str]]] = {}
        self._validating: dict[str, CandidateRecord] = {}  # validations begun and not yet committed
        self._inflight: dict[tuple[str, str], asyncio.Future] = {}
        self._idle = 0
        self._since_improvement = 0
        self._lm_failures = 0  # LM infrastructure failures in a row

    # ---- public control -------------------------------------------------------------------------
    def request_stop(self, reason: str = "stop requested") -> None:
        """End the run after cancelling the step in flight; finished rollouts stay paid and recorded."""
        if self._stop_reason is None:
            self._stop_reason = reason
        if self._current is not None and not self._current.done():
            self._current.cancel()

    async def run(self) -> Result:
        cfg, st = self.config, self.state
        t0 = time.monotonic()
        self._sem = asyncio.Semaphore(cfg.max_concurrency)
        loop = asyncio.get_running_loop()
        timer = loop.call_later(cfg.time_limit, self.request_stop, "time limit") if cfg.time_limit else None
        self.on_event("plan", {"plan": self.plan, "text": self.plan.describe()})
        try:
            await self._guarded(self._add_candidate(self.seed, (), "seed", None))
            while self._stop_reason is None:
                reason = self._check_stop()
                if reason:
                    self._stop_reason = reason
                    break
                before = st.rollouts_used
                best_before = st.best().mean
                merging = cfg.use_merge and st.merges_due > 0 and st.merges_done < cfg.max_merges
                await self._guarded(self._merge_step() if merging else self._reflective_round())
                self._idle = 0 if st.rollouts_used > before else self._idle + 1
                self._since_improvement = 0 if st.best().mean > best_before else self._since_improvement + 1
                self.on_event("iteration", self._progress())
        finally:
            if timer:
                timer.cancel()
        result = self._result(self._stop_reason or "done", time.monotonic() - t0)
        self.on_event("done", {"result": result})
        return result

    # ---- steps --------------------------------------------------------------------------------
    async def _guarded(self, coro: Any) -> None:
        """Run one step as a cancellable task; a stop request cancels it and ends the run."""
        self._current = asyncio.ensure_future(coro)
        try:
            await self._current
        except asyncio.CancelledError:
            if self._stop_reason is None:
                raise
            self._commit_validated()
        except _OutOfBudget as exc:
            self._stop_reason = str(exc)
        finally:
            self._current = None

    def _rng(self) -> random.Random:
        """A fresh iteration: its own RNG, derived from the seed and the iteration number only."""
        self.state.iteration += 1
        return random.Random(f"{self.config.seed}:{self.state.iteration}")

    def _plan_proposal(self) -> _Plan:
        """Choose parent, component and minibatch (sequential decisions, so rounds stay deterministic)."""
        st = self.state
        rng = self._rng()
        parent_idx = st.archive.sample(rng)
        parent = st.records[parent_idx].candidate
        turn = st.next_component.get(parent_idx, 0)
        st.next_component[parent_idx] = turn + 1
        component = self.components[turn % len(self.components)]
        if self._edits(component):
            batch = self._evidence_batch(parent)
            gate = self.config.minibatch_size + self.config.gate_solved
        else:
            batch = self._next_minibatch(parent)
            gate = len(batch)
        unknown = sum(st.known(parent, e.id) is None for e in batch)
        return _Plan(st.iteration, parent_idx, component, batch, unknown + gate + len(self.valset))

    def _description(self, component: str) -> str | None:
        return (self.config.component_descriptions or {}).get(component) or None

    def _edits(self, component: str) -> bool:
        """Whether `component` gets an edit (a rule line appended): only an instruction, never an artifact."""
        return self.config.proposer == "edit" and self._description(component) is None

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
            if reserved + plan.cost > st.remaining:
                if not plans:
                    self._afford(plan.cost, "next proposal")
                break
            reserved += plan.cost
            plans.append(plan)

        async def in_turn(plan: _Plan, turn: _Turn) -> tuple[Candidate, dict[str, float]] | None:
            try:
                return await self._try_proposal(plan, turn)
            finally:
                turn.done.set()  # gave up before claiming a text (or failed): the next proposal may decide

        turns: list[_Turn] = []
        for _ in plans:
            turns.append(_Turn(turns[-1].done if turns else None))
        tries = [asyncio.ensure_future(in_turn(p, t)) for p, t in zip(plans, turns, strict=True)]
        try:
            await asyncio.gather(*tries)
        finally:  # also when the round is cancelled by a stop: what was validated is kept
            for plan, task in zip(plans, tries, strict=True):
                task.cancel()  # no-op when done
                outcome = self._outcome(task, plan.iteration)
                if outcome is not None:
                    child, scores = outcome
                    self._commit(child, (plan.parent_idx,), "reflection", plan.component, scores, plan.iteration)
                    if cfg.use_merge:
                        st.merges_due += 1

    def _outcome(self, task: asyncio.Future, iteration: int) -> tuple[Candidate, dict[str, float]] | None:
        """What a try gave: its result, or, when a stop cut it short after its last validation rollout, the
        child and its scores from the state."""
        if task.done() and not task.cancelled() and task.exception() is None:
            return task.result()
        rec = next((r for r in self._validating.values() if r.origin == "reflection" and r.iteration == iteration),
                   None)
        scores = self._paid_scores(rec.candidate) if rec is not None else {}
        return (rec.candidate, scores) if rec is not None and len(scores) == len(self.valset) else None

    async def _try_proposal(self, plan: _Plan, turn: _Turn | None = None) -> tuple[Candidate, dict[str, float]] | None:
        """Minibatch, reflection, child minibatch and, if better, validation: the child's scores or None."""
        cfg, st = self.config, self.state
        parent = st.records[plan.parent_idx].candidate
        self.on_event("phase", {"phase": "minibatch", "candidate": plan.parent_idx, "component": plan.component})
        parent_runs = await self._evaluate(parent, plan.batch)
        if self._edits(plan.component):
            return await self._try_edit(plan, parent, turn)
        if all(r.score.value >= cfg.perfect_score for r in parent_runs):
            st.proposals["skipped: parent perfect on minibatch"] += 1
            return None
        examples = reflective_examples(parent_runs, plan.component, plan.batch)
        text = await self._propose(parent[plan.component], examples, plan.iteration, self._description(plan.component))
        if text is None:
            return None
        child = parent.replace(plan.component, text)
        if not await self._claim(child, turn):
            st.proposals["rejected: already tried"] += 1
            return None
        child_runs = await self._evaluate(child, plan.batch)
        before, after = sum(r.score.value for r in parent_runs), sum(r.score.value for r in child_runs)
        accepted = after > before if cfg.accept == "strict" else after >= before
        self.on_event("proposal", {"parent": plan.parent_idx, "component": plan.component, "text": text,
                                   "minibatch_before": before, "minibatch_after": after, "accepted": accepted})
        if not accepted:
            st.proposals["rejected: not better on minibatch"] += 1
            return None
        st.proposals["accepted"] += 1
        return child, await self._validate(child, (plan.parent_idx,), "reflection", plan.component, plan.iteration)

    async def _claim(self, child: Candidate, turn: _Turn | None) -> bool:
        """Mark `child` as tried; False if it already was. Within a round, in plan order (see `_Turn`)."""
        if turn is not None and turn.before is not None:
            await turn.before.wait()
        fresh = child.id not in self._tried
        self._tried.add(child.id)
        if turn is not None:
            turn.done.set()
        return fresh

    async def _try_edit(self, plan: _Plan, parent: Candidate, turn: _Turn | None = None
                        ) -> tuple[Candidate, dict[str, float]] | None:
        """One rule for one frequent mistake of the parent, tested on its failures and on solved cases."""
        cfg, st = self.config, self.state
        evidence = [r for e in self.trainset if (r := st.known(parent, e.id)) is not None]
        rng = random.Random(f"{cfg.seed}:{plan.iteration}:edit")
        tried = self._rules_tried.setdefault((parent.id, plan.component), {})
        focus = edits.choose_focus(evidence, cfg.perfect_score, tried, rng, max_failures=max(cfg.minibatch_size, 4),
                                   max_contrast=cfg.gate_solved)
        if focus is None:
            st.proposals["skipped: no open mistake in the known training rollouts"] += 1
            return None
        current = parent[plan.component]
        rule = await self._ask_rule(parent, focus, plan, tried.get(focus.pattern, []))
        if rule is None:
            return None
        child = parent.replace(plan.component, edits.apply_rule(current, rule))
        if not await self._claim(child, turn):
            st.proposals["rejected: already tried"] += 1
            return None
        gate = [self._train_by_id[i] for i in edits.gate_batch(focus, evidence, cfg.perfect_score, cfg.minibatch_size,
                                                    cfg.gate_solved, rng)]
        parent_runs = await self._evaluate(parent, gate)  # known: free
        child_runs = await self._evaluate(child, gate)
        before, after = sum(r.score.value for r in parent_runs), sum(r.score.value for r in child_runs)
        accepted = after > before if cfg.accept == "strict" else after >= before
        self.on_event("proposal", {"parent": plan.parent_idx, "component": plan.component,
                                   "text": child[plan.component], "rule": rule, "pattern": focus.pattern,
                                   "minibatch_before": before, "minibatch_after": after, "accepted": accepted})
        if not accepted:
            tried.setdefault(focus.pattern, []).append(rule)
            st.proposals["rejected: not better on minibatch"] += 1
            return None
        st.proposals["accepted"] += 1
        # rules that failed on the parent would fail on the child too: it inherits the memory
        self._rules_tried[(child.id, plan.component)] = {p: list(r) for p, r in tried.items()}
        return child, await self._validate(child, (plan.parent_idx,), "reflection", plan.component, plan.iteration)

    async def _ask_rule(self, parent: Candidate, focus: edits.Focus, plan: _Plan, tried_rules: list[str]
                        ) -> str | None:
        """Ask the reflection LM for one rule; vet each answer and retry a bounded number of times. A rule whose
        child was already tried is refused here too, so a repeated answer costs a retry, not the proposal."""
        cfg, st = self.config, self.state
        current = parent[plan.component]
        self.on_event("phase", {"phase": "reflection"})
        by_id = self._train_by_id
        messages = edits.build_edit_prompt(current, focus, plan.component, tried_rules, by_id)
        shown = [edits.shown(r, plan.component, example=by_id.get(r.example_id))
                 for r in focus.failures + focus.contrast]
        temps = list(cfg.reflection_temperatures) or [0.0]
        for attempt in range(cfg.reflection_attempts):
            params = {"temperature": temps[min(attempt, len(temps) - 1)], "max_tokens": cfg.rule_max_tokens,
                      "seed": cfg.seed * 100_003 + plan.iteration * 10 + attempt, "stop": [edits.RULE_CLOSE]}
            out = await self._reflect(messages, params)
            if out is None:
                continue
            rule, why = edits.vet_rule(out.text, out.finish_reason, current, shown, focus.pattern)
            if not why and parent.replace(plan.component, edits.apply_rule(current, rule)).id in self._tried:
                why = "already tried"
            self.on_event("reflection", {"attempt": attempt, "rejected": why, "text": rule, "raw": out.text})
            if not why:
                return rule
            st.proposals[f"rejected: {why}"] += 1
            messages = [*messages, {"role": "assistant", "content": out.text[:600] or "(empty)"},
                        {"role": "user", "content": edits.retry_hint(why, focus.pattern)}]
        return None

    async def _merge_step(self) -> None:
        cfg, st = self.config, self.state
        rng = self._rng()
        st.merges_due -= 1
        means = [r.mean for r in st.records]
        found = find_merge(st.archive.front, [r.candidate for r in st.records],
                           [r.parents for r in st.records], means, st.merge_tried, rng)
        if found is None:
            return
        i, j, child = found
        if child.id in self._tried:
            return
        self._tried.add(child.id)
        self._afford(len(self.valset), "next merge")
        st.merges_done += 1
        si, sj = st.records[i].val_scores, st.records[j].val_scores
        # test on the validation examples where the two parents differ most (their scores are known)
        order = sorted(self.valset, key=lambda e: (-abs(si[e.id] - sj[e.id]), rng.random()))
        sub = order[: cfg.minibatch_size]
        runs = await self._evaluate(child, sub)
        got = sum(r.score.value for r in runs)
        bar = max(sum(si[e.id] for e in sub), sum(sj[e.id] for e in sub))
        accepted = got >= bar
        self.on_event("merge", {"parents": (i, j), "subsample_score": got, "bar": bar, "accepted": accepted})
        st.proposals["merge accepted" if accepted else "merge rejected"] += 1
        if accepted:
            self._commit(child, (i, j), "merge", None, await self._validate(child, (i, j), "merge", None, st.iteration),
                         st.iteration)

    async def _reflect(self, messages: list[Message], params: dict[str, Any]) -> Completion | None:
        """One reflection call; a flaky reflection LM costs an attempt (None), not the run."""
        try:
            return await self._retrying(self.reflection_lm.complete, messages, **params)
        except Exception as exc:
            self.state.proposals["reflection error"] += 1
            self.on_event("reflection_error", {"error": f"{type(exc).__name__}: {exc}"})
            return None

    async def _propose(self, current: str, examples: list[ReflectionExample], iteration: int,
                       description: str | None = None) -> str | None:
        """Ask the reflection LM for a new text; vet each answer and retry a bounded number of times. With a
        `description` the text is an artifact (a regex, code, ...), said so in the prompt and vetted verbatim."""
        cfg, st = self.config, self.state
        artifact = description is not None
        self.on_event("phase", {"phase": "reflection"})
        messages = build_prompt(current, examples, max_chars=cfg.reflection_chars, description=description)
        max_tokens = cfg.reflection_max_tokens
        temps = list(cfg.reflection_temperatures) or [0.0]
        for attempt in range(cfg.reflection_attempts):
            params = {"temperature": temps[min(attempt, len(temps) - 1)], "max_tokens": max_tokens,
                      "seed": cfg.seed * 100_003 + iteration * 10 + attempt, "stop": [CLOSE_TAG]}
            out = await self._reflect(messages, params)
            if out is None:
                continue
            proposal = vet(out.text, out.finish_reason, current, examples, artifact=artifact)
            self.on_event("reflection", {"attempt": attempt, "rejected": proposal.rejected,
                                         "text": proposal.text, "raw": out.text})
            if not proposal.rejected:
                return proposal.text
            st.proposals[f"rejected: {proposal.rejected}"] += 1
            if proposal.rejected == "truncated":
                max_tokens *= 2
            messages = retry_messages(messages, out.text, proposal.rejected, artifact=artifact)
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
                    run = await self._retrying(self._run_rollout, sem, candidate, ex)
                    if store is not None:
                        store.put(candidate, ex.id, run)
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
            self.on_event("rollout", {"candidate": candidate.id, "example": ex.id, "score": run.score.value,
                                      "error": run.error, "used": st.rollouts_used, "budget": st.budget})
            return run

        return list(await asyncio.gather(*(one(e) for e in examples)))

    async def _run_rollout(self, sem: asyncio.Semaphore, candidate: Candidate, ex: Example) -> Rollout:
        async with sem:
            return await run_rollout(self.program, self.metric, candidate, ex, self.task_lm, self.config.task_lm_params)

    async def _retrying(self, call: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """`call(...)`, made again while the LM infrastructure fails (LMUnavailable: no answer, so no result to
        keep, count or store). Stops the run when that cannot heal (LMSetupError) or keeps happening: on
        `max_lm_failures` failures in a row, or of this one call (one that always fails while others answer)."""
        cfg = self.config
        tries = 0
        while True:
            try:
                out = await call(*args, **kwargs)
            except LMUnavailable as exc:
                self._lm_failures += 1
                tries += 1
                error = f"{type(exc).__name__}: {exc}"
                self.on_event("lm_unavailable", {"error": error, "in_a_row": self._lm_failures})
                if isinstance(exc, LMSetupError):
                    what = ""
                elif self._lm_failures >= cfg.max_lm_failures:
                    what = f"{self._lm_failures} LM calls in a row failed; "
                elif tries >= cfg.max_lm_failures:
                    what = f"one LM call failed {tries} times; "
                else:
                    await asyncio.sleep(cfg.lm_retry_pause)
                    continue
                self.request_stop(f"LM unavailable: {what}{error} (everything paid so far is kept; fix the LM and "
                                  f"resume)")
                raise asyncio.CancelledError from exc
            self._lm_failures = 0
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
        self.on_event("phase", {"phase": "validation", "origin": origin})
        # until committed, a stop leaves it a partial candidate (see `_partial_candidates`)
        self._validating[candidate.id] = CandidateRecord(-1, candidate, parents, origin, iteration, component, {}, 0)
        runs = await self._evaluate(candidate, self.valset)
        if origin == "seed":
            check_metric(runs)  # a metric that cannot score anything stops the run before it burns the budget
        return {r.example_id: r.score.value for r in runs}

    def _commit(self, candidate: Candidate, parents: tuple[int, ...], origin: str, component: str | None,
                scores: dict[str, float], iteration: int) -> None:
        st = self.state
        record = CandidateRecord(len(st.records), candidate, parents, origin, iteration, component, scores,
                                 st.rollouts_used)
        st.add_record(record)
        self._tried.add(candidate.id)
        self._validating.pop(candidate.id, None)
        self.on_event("candidate", {"record": record, "best": st.best().mean, "front": st.archive.front})

    def _afford(self, cost: int, what: str) -> None:
        if cost > self.state.remaining:
            raise _OutOfBudget(f"budget: the {what} could cost {cost} rollouts, {self.state.remaining} left")

    def _next_train_example(self) -> Example:
        """The example at the training cursor, in an order shuffled anew each epoch (seeded), and advance."""
        n = len(self.trainset)
        epoch, pos = divmod(self.state.train_cursor, n)
        if self._epoch_order[0] != epoch:
            order = list(range(n))
            random.Random(f"{self.config.seed}:epoch:{epoch}").shuffle(order)
            self._epoch_order = (epoch, order)
        self.state.train_cursor += 1
        return self.trainset[self._epoch_order[1][pos]]

    def _next_minibatch(self, parent: Candidate) -> list[Example]:
        """The next examples of the epoch-shuffled training order, skipping ones the parent already solves."""
        cfg, st = self.config, self.state
        n, b = len(self.trainset), min(cfg.minibatch_size, len(self.trainset))
        chosen: list[Example] = []
        solved: list[Example] = []
        for _ in range(n):
            ex = self._next_train_example()
            if any(ex.id == c.id for c in chosen):
                continue
            known = st.known(parent, ex.id)
            if known is not None and known.score.value >= cfg.perfect_score:
                solved.append(ex)
                continue
            chosen.append(ex)
            if len(chosen) == b:
                break
        return (chosen + solved)[:b]

    def _evidence_batch(self, parent: Candidate) -> list[Example]:
        """Training examples the parent has not run yet, in epoch order: `minibatch_size` of them, more while
        the parent has fewer than `evidence_size` known training rollouts."""
        cfg, st = self.config, self.state
        n = len(self.trainset)
        known = sum(st.known(parent, e.id) is not None for e in self.trainset)
        want = min(max(cfg.minibatch_size, cfg.evidence_size - known), n - known)
        chosen: list[Example] = []
        for _ in range(n):
            if len(chosen) >= want:
                break
            ex = self._next_train_example()
            if st.known(parent, ex.id) is None and all(ex.id != c.id for c in chosen):
                chosen.append(ex)
        return chosen

    def _check_stop(self) -> str | None:
        cfg, st = self.config, self.state
        best = st.best().mean
        if cfg.target_score is not None and best >= cfg.target_score:
            return f"target score {cfg.target_score} reached"
        if best >= cfg.perfect_score:
            return "validation score is perfect"
        if cfg.stop_file and Path(cfg.stop_file).exists():
            return f"stop file {cfg.stop_file} found"
        if cfg.patience is not None and self._since_improvement >= cfg.patience:
            return f"no improvement for {cfg.patience} iterations"
        if self._idle >= cfg.max_idle_iterations:
            return f"stalled: {self._idle} iterations in a row found nothing worth a rollout"
        if st.remaining < min(cfg.minibatch_size, len(self.trainset)):
            return "budget spent"
        return None

    def _progress(self) -> dict[str, Any]:
        st = self.state
        return {"iteration": st.iteration, "used": st.rollouts_used, "budget": st.budget,
                "best": st.best().mean if st.records else None, "front": len(st.archive.front),
                "candidates": len(st.records)}

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

    def _result(self, reason: str, seconds: float) -> Result:
        st = self.state
        partial = self._partial_candidates()
        if not st.records:  # stopped before the seed was validated
            return Result(self.seed, float("nan"), float("nan"), [], [], st.rollouts_used, st.budget,
                          st.ledger, reason, st.iteration, dict(st.proposals), [], seconds, partial)
        best = st.best()
        return Result(best.candidate, best.mean, st.records[0].mean, list(st.records), st.archive.front,
                      st.rollouts_used, st.budget, st.ledger, reason, st.iteration, dict(st.proposals),
                      list(st.history), seconds, partial)


def _check_inputs(seed: Candidate, train: Sequence[Example], val: Sequence[Example], cfg: EngineConfig) -> None:
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
            raise ValueError(f"{name} has duplicate example ids; every example needs a distinct id")
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
