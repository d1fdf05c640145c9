"""gepetto: reflective prompt evolution (GEPA) for LLM programs."""

from typing import TYPE_CHECKING, Any

from gepetto.api import (
    Evaluation,
    build_engine,
    evaluate,
    evaluate_async,
    evaluate_run,
    optimize,
    optimize_async,
    run_engine,
)
from gepetto.config import ConfigError, EngineConfig
from gepetto.engine import events as events  # the typed events a callback receives: `from gepetto import events as ev`
from gepetto.engine.events import Callback, Event, Outcome, Result, StopReason
from gepetto.engine.loop import Engine
from gepetto.ledger import Ledger
from gepetto.lm.base import LM, Completion, LMError, Usage
from gepetto.program import Context, MetricError, Rollout, Task, TraceEntry, single_instruction
from gepetto.types import Candidate, Example, Score

if TYPE_CHECKING:
    from gepetto.progress import ProgressDisplay
    from gepetto.testing.scripted import ScriptedLM

__all__ = [
    "LM", "Callback", "Candidate", "Completion", "ConfigError", "Context", "Engine", "EngineConfig", "Evaluation",
    "Event", "Example", "LMError", "Ledger", "MetricError", "Outcome", "ProgressDisplay", "Result", "Rollout", "Score",
    "ScriptedLM",
    "StopReason", "Task", "TraceEntry", "Usage", "build_engine", "evaluate", "evaluate_async", "evaluate_run",
    "optimize", "optimize_async", "run_engine", "single_instruction",
]
__version__ = "0.1.0"  # the one place the version is written (pyproject.toml reads it)


def __getattr__(name: str) -> Any:
    # ScriptedLM is public but lives with the test doubles (gepetto.testing): loaded when first asked for
    if name == "ScriptedLM":
        from gepetto.testing.scripted import ScriptedLM

        return ScriptedLM

    # the live progress display (Rich) is imported on first use: `import gepetto` stays light
    if name == "ProgressDisplay":
        from gepetto.progress import ProgressDisplay

        return ProgressDisplay
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
