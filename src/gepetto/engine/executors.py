"""Where rollouts run: the built-in `Executor`s (the protocol is in gepetto.program), between the engine's
decisions and the program's execution.

The engine decides which (candidate, example) pairs to pay for, bounds how many are in flight
(`max_concurrency`), counts each finished rollout once against the budget and stores it; an executor only
runs them. The default runs them in this process, on the engine's event loop (`LocalExecutor`);
`executor="ray"` runs them as Ray tasks on a cluster (`gepetto.integrations.ray`, imported only then).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, get_args

from gepetto.config import ExecutorName
from gepetto.lm.base import LM
from gepetto.program import Executor, Metric, Program, Rollout, run_rollout
from gepetto.types import Candidate, Example

# executor names -> "module:factory"; a factory takes the EngineConfig. Imported on use only (extras stay optional)
EXECUTORS = {
    "local": "gepetto.engine.executors:LocalExecutor.from_config",
    "ray": "gepetto.integrations.ray:RayExecutor.from_config",
}
assert tuple(EXECUTORS) == get_args(ExecutorName)  # config.py names them, for the CLI and files


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
