"""Where rollouts run: the `Executor` seam between the engine's decisions and the program's execution.

The engine decides which (candidate, example) pairs to pay for, bounds how many are in flight
(`max_concurrency`), counts each finished rollout once against the budget and stores it; an executor only
runs them. The default runs them in this process, on the engine's event loop (`LocalExecutor`);
`executor="ray"` runs them as Ray tasks on a cluster (`gepetto.integrations.ray`, imported only then).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from gepetto.lm.base import LM
from gepetto.program import Metric, Program, Rollout, run_rollout
from gepetto.types import Candidate, Example

# executor names -> "module:factory"; a factory takes the EngineConfig. Imported on use only (extras stay optional)
EXECUTORS = {
    "local": "gepetto.engine.executors:LocalExecutor.from_config",
    "ray": "gepetto.integrations.ray:RayExecutor.from_config",
}


@runtime_checkable
class Executor(Protocol):
    """Runs rollouts: the program on one example for one candidate, judged by the metric.

    Contract (what the engine relies on, so that every executor gives the same run):
    - `run(...)` returns what `gepetto.program.run_rollout(...)` returns for the same arguments: a `Rollout`, in
      which an error of the program or the metric is a score-0 rollout with the error as feedback, as is a rollout
      that took longer than `timeout` seconds (the engine's `rollout_timeout`; None: no limit); and it raises
      `LMUnavailable` (or a subclass) when the LM infrastructure gave no answer, so the engine retries later and
      nothing is counted.
    - Every LM call is accounted as if made through `task_lm`: when `task_lm` is a `MeteredLM`, its calls end in
      that ledger under that role. An executor that calls a copy of the LM elsewhere replays its calls there.
    - It keeps no result of its own: the engine counts each returned rollout once against the budget and stores
      it (the run store lives with the engine), so the budget contract and exact resume do not depend on it.
    - Cancelling the awaiting task gives the rollout up (remote work may be cancelled); it is neither counted
      nor stored. Calls arrive concurrently, at most `max_concurrency` at a time.
    - `aclose()` releases what the executor itself started (not what it was given); it may be called twice.
    """

    async def run(self, program: Program, metric: Metric, candidate: Candidate, example: Example, task_lm: LM,
                  lm_params: Mapping[str, Any] | None = None, *, timeout: float | None = None) -> Rollout: ...

    async def aclose(self) -> None: ...


class LocalExecutor:
    """Rollouts in this process, on the running event loop (sync programs in worker threads)."""

    @classmethod
    def from_config(cls, config: Any) -> LocalExecutor:
        return cls()

    async def run(self, program: Program, metric: Metric, candidate: Candidate, example: Example, task_lm: LM,
                  lm_params: Mapping[str, Any] | None = None, *, timeout: float | None = None) -> Rollout:
        return await run_rollout(program, metric, candidate, example, task_lm, lm_params, timeout)

    async def aclose(self) -> None:
        pass


def make_executor(spec: str | Executor, config: Any = None) -> Executor:
    """The executor an option names ("local", "ray"), built from the engine config; an Executor object as is."""
    if not isinstance(spec, str):
        if not isinstance(spec, Executor):
            raise TypeError(f"executor must be one of {sorted(EXECUTORS)} or an Executor object "
                            f"(async run(...) and aclose()), got {type(spec).__name__}")
        return spec
    target = EXECUTORS.get(spec)
    if target is None:
        raise ValueError(f"unknown executor {spec!r}; accepted: {', '.join(EXECUTORS)}")
    module, _, attr = target.partition(":")
    factory: Any = importlib.import_module(module)
    for part in attr.split("."):
        factory = getattr(factory, part)
    return factory(config)


async def aclose_executor(executor: Any) -> None:
    """Let an executor release what it started (e.g. a Ray instance it launched)."""
    close = getattr(executor, "aclose", None)
    if close is not None:
        await close()
