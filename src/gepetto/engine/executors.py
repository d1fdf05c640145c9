"""Where rollouts run: the built-in `Executor`s (the protocol is in gepetto.program), between the engine's
decisions and the program's execution.

The engine decides which (candidate, example) pairs to pay for, bounds how many are in flight
(`max_concurrency`), counts each finished rollout once against the budget and stores it; an executor only
runs them. The default runs them in this process, on the engine's event loop (`LocalExecutor`);
`executor="ray"` (`ray(address=...)`) runs them as Ray tasks on a cluster (`gepetto.integrations.ray`, imported
only then).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gepetto.lm.base import LM
from gepetto.program import Executor, Metric, Program, Rollout, run_rollout
from gepetto.specs import Knobs, build, builtin, knob
from gepetto.types import Candidate, Example


class LocalExecutor:
    """Rollouts in this process, on the running event loop (sync programs in worker threads)."""

    async def run(self, program: Program, metric: Metric, candidate: Candidate, example: Example, task_lm: LM,
                  lm_params: Mapping[str, Any] | None = None, *, timeout: float | None = None) -> Rollout:
        return await run_rollout(program, metric, candidate, example, task_lm, lm_params, timeout)

    async def aclose(self) -> None:
        pass


@builtin("executor", "local")
@dataclass(frozen=True)
class Local(Knobs):
    """Rollouts in this process (`LocalExecutor`)."""

    def bind(self, config: Any) -> Executor:
        return LocalExecutor()


@builtin("executor", "ray")
@dataclass(frozen=True)
class Ray(Knobs):
    """Rollouts as Ray tasks on a cluster (extra gepetto[ray]; docs/integrations.md); the run is the same.

    `gepetto.integrations.ray.RayExecutor`, imported only when a run uses it.

    Args:
        address: The Ray cluster to join (default: $RAY_ADDRESS, else a local Ray started for the run).
    """

    address: str | None = knob(None)

    def bind(self, config: Any) -> Executor:
        executor: Executor = importlib.import_module("gepetto.integrations.ray").RayExecutor(self.address)
        return executor


def make_executor(spec: str | Executor, config: Any = None) -> Executor:
    """The executor a spec names ("local", "ray(address=...)"), made for a run of the engine options `config`; an
    Executor object as is."""
    if not isinstance(spec, str):
        if not isinstance(spec, Executor):
            raise TypeError(f"executor must be local, ray or an Executor object (async run(...) and aclose()), got "
                            f"{type(spec).__name__}")
        return spec
    executor: Executor = build("executor", spec).bind(config)
    return executor


async def aclose_executor(executor: Any) -> None:
    """Let an executor release what it started (e.g. a Ray instance it launched)."""
    close = getattr(executor, "aclose", None)
    if close is not None:
        await close()
