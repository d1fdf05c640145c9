"""The public entry point: `optimize()` (and its async twin) over a program, a metric and examples."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gepetto.engine.loop import Engine, EngineConfig, EventHandler, Result, RolloutStore
from gepetto.ledger import Ledger
from gepetto.lm.base import LM, RedactingLM, aclose_lm
from gepetto.program import Metric, Program, Rollout, run_rollout, single_instruction
from gepetto.secrets import redact_data
from gepetto.types import Candidate, Example

if TYPE_CHECKING:
    from gepetto.runner import StoredRun


def resolve_lm(lm: LM | str) -> LM:
    """An LM object as is, or one built from a name such as `local:qwen2.5-coder-0.5b`."""
    if isinstance(lm, str):
        from gepetto.lm.names import make_lm

        return make_lm(lm)
    return lm


def as_examples(data: Sequence[Example | Mapping[str, Any]] | None) -> list[Example]:
    out = []
    for item in data or []:
        if isinstance(item, Example):
            out.append(item)
        elif isinstance(item, Mapping):
            item = dict(item)
            gold = item.pop("gold", item.pop("answer", None))
            out.append(Example(inputs=item, gold=gold))
        else:
            raise TypeError(f"examples must be gepetto.Example or dicts, got {type(item).__name__}")
    return out


def candidate_and_program(
    candidate: Candidate | Mapping[str, str] | str, program: Program | None
) -> tuple[Candidate, Program]:
    """A Candidate (a bare string is the one component "instruction") and its program (default: one call)."""
    if isinstance(candidate, str):
        candidate = {"instruction": candidate}
    cand = candidate if isinstance(candidate, Candidate) else Candidate(candidate)
    if program is None:
        if len(cand) != 1:
            raise ValueError("a candidate with several components needs a program that uses them")
        program = single_instruction(next(iter(cand)))
    return cand, program


def build_engine(
    seed_candidate: Candidate | Mapping[str, str] | str,
    trainset: Sequence[Example | Mapping[str, Any]],
    metric: Metric,
    *,
    valset: Sequence[Example | Mapping[str, Any]] | None = None,
    program: Program | None = None,
    task_lm: LM | str = "local:qwen2.5-coder-0.5b",
    reflection_lm: LM | str = "local:qwen2.5-coder-1.5b",
    on_event: EventHandler | None = None,
    rollout_store: RolloutStore | None = None,
    ledger: Ledger | None = None,
    **config: Any,
) -> Engine:
    """The engine `optimize` would run, for callers that want to drive or observe it themselves."""
    seed, program = candidate_and_program(seed_candidate, program)
    train = as_examples(trainset)
    val = as_examples(valset) if valset is not None else train
    unknown = set(config) - set(EngineConfig.__dataclass_fields__)
    if unknown:
        raise TypeError(f"unknown option(s) {sorted(unknown)}; options: {sorted(EngineConfig.__dataclass_fields__)}")
    # no secret reaches feedback, events or the reflection prompt: LM errors and answers are redacted
    task = RedactingLM(resolve_lm(task_lm))
    reflection = RedactingLM(resolve_lm(reflection_lm), inputs=True)
    handler = None
    if on_event is not None:
        user_handler = on_event

        def handler(kind: str, data: dict[str, Any]) -> None:
            user_handler(kind, redact_data(data))

    return Engine(program, metric, seed, train, val, task, reflection, EngineConfig(**config), on_event=handler,
                  rollout_store=rollout_store, ledger=ledger)


CacheMode = Literal["auto", "always", "off"]
SeedCandidate = Candidate | Mapping[str, str] | str  # a bare string is the one component "instruction"
Examples = Sequence[Example | Mapping[str, Any]]


def _open_stored(seed_candidate: SeedCandidate, trainset: Examples, metric: Metric, storage: str | Path | None,
                 run: str | None, cache: CacheMode | None, kwargs: dict[str, Any]) -> StoredRun | None:
    """The stored run `optimize(..., storage=)` opens (created or resumed), or None without a store."""
    if storage is None:
        if run is not None or cache is not None:
            raise TypeError("run= and cache= name a stored run: give storage= too (e.g. storage='gepetto.sqlite')")
        return None
    from gepetto.runner import open_program_run

    return open_program_run(seed_candidate, trainset, metric, storage=storage, run=run, cache=cache, **kwargs)


async def optimize_async(seed_candidate: SeedCandidate, trainset: Examples, metric: Metric, *,
                         storage: str | Path | None = None, run: str | None = None, cache: CacheMode | None = None,
                         **kwargs: Any) -> Result:
    """Async `optimize`: same arguments, for callers already inside an event loop."""
    stored = _open_stored(seed_candidate, trainset, metric, storage, run, cache, kwargs)
    if stored is not None:
        return await stored.run_async()
    return await build_engine(seed_candidate, trainset, metric, **kwargs).run()


def optimize(seed_candidate: SeedCandidate, trainset: Examples, metric: Metric, *,
             storage: str | Path | None = None, run: str | None = None, cache: CacheMode | None = None,
             **kwargs: Any) -> Result:
    """Evolve the seed candidate's texts to score better under `metric`, within `budget` rollouts.

    `program(candidate, example, ctx)` runs the user's system (default: the seed's one instruction as the
    system prompt, the example's input as the user message). Other keywords: valset, task_lm,
    reflection_lm, on_event, and the EngineConfig options (budget, seed, minibatch_size, max_concurrency,
    use_merge, time_limit, patience, target_score, stop_file, max_lm_failures, component_descriptions,
    ...). Ctrl-C or SIGTERM returns the best so far.

    `storage` (a SQLite file, e.g. "gepetto.sqlite") keeps every rollout, reflection answer and candidate in
    the run store under the name `run` (default: generated), where `gepetto runs/show/report/export` see it;
    calling again with the same `run` resumes it exactly, and a changed seed, examples or path-changing option
    is refused with a ConfigError (the budget may grow). `cache`: the LM response cache (docs/runs.md).
    """
    stored = _open_stored(seed_candidate, trainset, metric, storage, run, cache, kwargs)
    if stored is not None:
        return stored.run()
    return run_engine(build_engine(seed_candidate, trainset, metric, **kwargs))


@dataclass
class Evaluation:
    """Scores of one candidate on a set of examples (e.g. a held-out test set)."""

    mean: float
    rollouts: list[Rollout]

    @property
    def scores(self) -> dict[str, float]:
        return {r.example_id: r.score.value for r in self.rollouts}


async def evaluate_async(
    candidate: Candidate | Mapping[str, str] | str,
    examples: Sequence[Example | Mapping[str, Any]],
    metric: Metric,
    *,
    program: Program | None = None,
    task_lm: LM | str = "local:qwen2.5-coder-0.5b",
    max_concurrency: int = 8,
    lm_params: Mapping[str, Any] | None = None,
    rollout_timeout: float | None = None,
) -> Evaluation:
    """Run a candidate on examples outside any optimisation (no budget): mean score and every rollout.

    A program or metric error scores 0, as does a rollout longer than `rollout_timeout` seconds; an LM that gives
    no answer at all raises `LMUnavailable` instead.
    """
    cand, program = candidate_and_program(candidate, program)
    lm, data = RedactingLM(resolve_lm(task_lm)), as_examples(examples)
    sem = asyncio.Semaphore(max_concurrency)
    params = dict(lm_params if lm_params is not None else {"temperature": 0.0})

    async def one(ex: Example) -> Rollout:
        async with sem:
            return await run_rollout(program, metric, cand, ex, lm, params, rollout_timeout)

    runs = list(await asyncio.gather(*(one(ex) for ex in data)))
    return Evaluation(sum(r.score.value for r in runs) / len(runs) if runs else float("nan"), runs)


def evaluate(*args: Any, **kwargs: Any) -> Evaluation:
    """`evaluate_async` in a fresh event loop; the task LM's HTTP client is closed before the loop ends."""

    async def main() -> Evaluation:
        try:
            return await evaluate_async(*args, **kwargs)
        finally:
            lm = kwargs.get("task_lm")
            if lm is not None and not isinstance(lm, str):
                await aclose_lm(lm)

    return asyncio.run(main())


STOP_SIGNALS = {signal.SIGINT: "interrupted (Ctrl-C)", signal.SIGTERM: "interrupted (SIGTERM)"}


def run_engine(engine: Engine) -> Result:
    """Run an engine to the end in a fresh event loop; Ctrl-C (SIGINT) or SIGTERM stops it gracefully, keeping
    everything paid for (a stored run is then resumable)."""
    return asyncio.run(drive_engine(engine, own_loop=True))


async def drive_engine(engine: Engine, *, own_loop: bool) -> Result:
    """Run an engine in the running event loop. `own_loop`: the loop is ours (from `asyncio.run`), so Ctrl-C and
    SIGTERM stop the run gracefully and the LMs' HTTP clients are closed before it ends."""
    loop = asyncio.get_running_loop()
    handled = own_loop and threading.current_thread() is threading.main_thread()
    if handled:
        for sig, reason in STOP_SIGNALS.items():
            loop.add_signal_handler(sig, engine.request_stop, reason)
    try:
        return await engine.run()
    finally:
        if handled:
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)
        if own_loop:
            # HTTP clients belong to this loop: close them here, not at exit from a loop that is gone
            await aclose_lm(engine.task_lm)
            await aclose_lm(engine.reflection_lm)
