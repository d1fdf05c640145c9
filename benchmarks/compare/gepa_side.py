"""The reference `gepa` (0.1.4) driven through its public API on the same task, LMs, data and budget.

`gepa` is imported lazily (it lives in the harness's own environment, see `requirements.txt`).

- Task LM: a `GEPAAdapter` (gepa's documented integration point) that runs the task's program on a batch
  with the shared task LM and judges it with the shared (counted) metric; its reflective dataset holds, per
  component, the records gepa's default adapter would make ("Inputs", "Generated Outputs", "Feedback") from
  that component's calls only, as gepa's DSPy adapter does.
- Reflection LM: gepa's `LanguageModel` protocol, a callable `(str | messages) -> str`, over the shared LM.
- Everything else is gepa's default (`optimize`: Pareto selection, round-robin components, minibatch 3,
  strict improvement, full validation of every accepted child), with `use_merge` as a variant.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from gepetto.lm.base import LM, Message
from gepetto.program import Metric, Program, Rollout, Task, run_rollout
from gepetto.types import Candidate, Example

from .measure import (
    CountingLM,
    CountingMetric,
    RunRecord,
    proposal_accounting,
    reflection_kinds,
    scored_on_test,
    test_score,
)

T = TypeVar("T")


class LoopThread:
    """One event loop in a background thread, so gepa's synchronous calls can await gepetto's async LMs."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="compare-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        self.loop.close()


class ReflectionCallable:
    """gepa's reflection `LanguageModel`: prompt (str or chat messages) -> text, over a gepetto LM."""

    def __init__(self, lm: LM, loop: LoopThread, params: Mapping[str, Any] | None = None) -> None:
        self.lm, self.loop, self.params = lm, loop, dict(params or {})
        # scripted LMs answer synchronously: no trip through the event loop
        self._sync = callable(getattr(getattr(lm, "lm", lm), "respond", None))

    def __call__(self, prompt: str | list[dict[str, Any]]) -> str:
        messages: list[Message] = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        if self._sync:
            return self.lm.respond(messages, **self.params).text  # type: ignore[attr-defined]
        return self.loop.run(self.lm.complete(messages, **self.params)).text


class ProgramAdapter:
    """A `GEPAAdapter` that runs a gepetto-style program (candidate, example, ctx) with one task LM."""

    propose_new_texts = None

    def __init__(self, program: Program, metric: Metric, task_lm: LM, loop: LoopThread,
                 lm_params: Mapping[str, Any] | None = None, max_workers: int = 1) -> None:
        self.program, self.metric, self.task_lm, self.loop = program, metric, task_lm, loop
        self.lm_params = dict(lm_params if lm_params is not None else {"temperature": 0.0})
        self.max_workers = max_workers

    async def _run(self, batch: Sequence[Example], candidate: Candidate) -> list[Rollout]:
        sem = asyncio.Semaphore(self.max_workers)

        async def one(ex: Example) -> Rollout:
            async with sem:
                return await run_rollout(self.program, self.metric, candidate, ex, self.task_lm, self.lm_params)

        return list(await asyncio.gather(*(one(e) for e in batch)))

    def evaluate(self, batch: list[Example], candidate: dict[str, str], capture_traces: bool = False) -> Any:
        from gepa import EvaluationBatch

        runs = self.loop.run(self._run(batch, Candidate(candidate)))
        return EvaluationBatch(outputs=[r.output for r in runs], scores=[r.score.value for r in runs],
                               trajectories=runs if capture_traces else None)

    def make_reflective_dataset(self, candidate: dict[str, str], eval_batch: Any,
                                components_to_update: list[str]) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for comp in components_to_update:
            records = []
            for r in eval_batch.trajectories or []:
                calls = [t for t in r.trace if t.component == comp]
                if calls:
                    records.append({"Inputs": "\n---\n".join(t.inputs for t in calls),
                                    "Generated Outputs": "\n---\n".join(t.output for t in calls),
                                    "Feedback": r.score.feedback})
                elif r.error:
                    records.append({"Inputs": "(the program failed before this component answered)",
                                    "Generated Outputs": "", "Feedback": r.score.feedback})
            if records:
                out[comp] = records
        return out


class Recorder:
    """gepa callbacks: the curve (harness metric count, best validation score) and the proposal verdicts."""

    def __init__(self, metric: CountingMetric) -> None:
        self.metric = metric
        self.curve: list[tuple[int, float]] = []
        self.curve_s: list[float] = []
        self.t0 = time.perf_counter()  # reset just before the run starts
        self.best = float("-inf")
        self.bests: list[tuple[int, dict[str, str]]] = []  # (rollouts, candidate) each time the best rose
        self.kinds: list[str] = []  # each proposal classified by gepetto's vetting rules (for real LMs)
        self._pending: Mapping[str, Any] = {}
        self.child_evals = 0
        self.accepted = self.rejected = self.merges_accepted = 0

    def on_valset_evaluated(self, event: Mapping[str, Any]) -> None:
        if float(event["average_score"]) > self.best:  # (gepa returns the earliest of ties: this one)
            self.bests.append((self.metric.calls, dict(event["candidate"])))
        self.best = max(self.best, float(event["average_score"]))
        self.curve.append((self.metric.calls, self.best))
        self.curve_s.append(time.perf_counter() - self.t0)

    def on_proposal_start(self, event: Mapping[str, Any]) -> None:
        self._pending = event

    def on_proposal_end(self, event: Mapping[str, Any]) -> None:
        parent = self._pending.get("parent_candidate", {})
        dataset = self._pending.get("reflective_dataset", {})
        for comp, text in event["new_instructions"].items():
            self.kinds.append(classify(text, parent.get(comp, ""), dataset.get(comp, [])))

    def on_evaluation_end(self, event: Mapping[str, Any]) -> None:
        if event.get("candidate_idx") is None:  # a child on its minibatch
            self.child_evals += 1

    def on_candidate_accepted(self, event: Mapping[str, Any]) -> None:
        self.accepted += 1

    def on_candidate_rejected(self, event: Mapping[str, Any]) -> None:
        self.rejected += 1

    def on_merge_accepted(self, event: Mapping[str, Any]) -> None:
        self.merges_accepted += 1


def classify(text: str, current: str, records: Sequence[Mapping[str, Any]]) -> str:
    """What gepetto's vetting would call a proposal (edit, empty, unchanged, chat, echo), for real LMs."""
    from gepetto.engine.reflect import ReflectionExample, vet

    from .measure import GEPETTO_KIND

    shown = [ReflectionExample(str(r.get("Inputs", "")), str(r.get("Generated Outputs", "")),
                               str(r.get("Feedback", "")), 0.0) for r in records]
    rejected = vet(f"<new_instruction>{text}</new_instruction>", "stop", current, shown).rejected
    verdict = rejected.reason if rejected is not None else ""
    return GEPETTO_KIND.get(verdict, verdict)


class QuietLogger:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, message: str) -> None:
        self.lines.append(message)


def run_gepa(task: Task, task_lm: LM, reflection_lm: LM, *, budget: int, seed: int, system: str = "gepa",
             use_merge: bool = False, test_lm: LM | None = None, minibatch_size: int = 3,
             lm_params: Mapping[str, Any] | None = None, reflection_params: Mapping[str, Any] | None = None,
             max_workers: int = 1, held_out_curve: bool = False) -> RunRecord:
    """One `gepa.optimize` run with `max_metric_calls=budget`, counted by the harness (`held_out_curve`: as
    `run_gepetto`'s)."""
    import gepa

    metric, tlm, rlm = CountingMetric(task.metric), CountingLM(task_lm), CountingLM(reflection_lm)
    loop = LoopThread()
    recorder = Recorder(metric)
    try:
        adapter = ProgramAdapter(task.program, metric, tlm, loop, lm_params, max_workers=max_workers)
        t0 = recorder.t0 = time.perf_counter()
        result = gepa.optimize(
            seed_candidate=dict(task.seed_candidate), trainset=list(task.trainset), valset=list(task.valset),
            adapter=adapter, reflection_lm=ReflectionCallable(rlm, loop, reflection_params),
            reflection_minibatch_size=minibatch_size, max_metric_calls=budget, use_merge=use_merge, seed=seed,
            callbacks=[recorder], logger=QuietLogger(), display_progress_bar=False,
        )
        wall = time.perf_counter() - t0
    finally:
        loop.close()
    counted, t_snap, r_snap = metric.calls, tlm.snapshot(), rlm.snapshot()
    kinds = reflection_kinds(reflection_lm) or recorder.kinds
    # gepa tries every proposal on the minibatch (no vetting): each answer that produced a child was paid for
    paid = [i < recorder.child_evals for i in range(len(kinds))]
    proposals = proposal_accounting(kinds, paid, rejected_minibatch=recorder.rejected,
                                    accepted=recorder.accepted - recorder.merges_accepted,
                                    merges_accepted=recorder.merges_accepted)
    proposals["rejected_before_rollouts"] = 0
    best = dict(result.best_candidate)  # type: ignore[arg-type]
    scores = list(result.val_aggregate_scores)
    test = test_score(task, best, test_lm or task_lm)
    return RunRecord(system, task.name, seed, budget, test, scores[result.best_idx], scores[0],
                     int(result.total_metric_calls or 0), counted, wall, t_snap[0], t_snap[1:], r_snap[0],
                     r_snap[1:], recorder.curve, len(result.candidates), proposals, best,
                     note=f"LM errors: task {tlm.errors}, reflection {rlm.errors}", curve_s=recorder.curve_s,
                     test_curve=scored_on_test(task, recorder.bests, test_lm or task_lm) if held_out_curve else [])
