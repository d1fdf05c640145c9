"""Experiment tracking: `optimize(..., tracking="mlflow")` and `gepetto optimize --track mlflow`.

A tracker is an event handler with a start and an end: `start(...)` before the run (its configuration, its cost
ledger, where it is stored), `tracker(kind, data)` for every engine event, `close(error)` after it (artifacts,
final status). Trackers live in `gepetto.integrations` and import their libraries lazily; the engine knows
nothing of them.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from gepetto.engine.loop import EventHandler
from gepetto.ledger import Ledger

TRACKERS = ("mlflow",)


@runtime_checkable
class Tracker(Protocol):
    def start(self, *, name: str | None, params: Mapping[str, Any], ledger: Ledger | None,
              store_path: Path | None = None) -> None: ...

    def __call__(self, kind: str, data: Any) -> None: ...

    def close(self, error: BaseException | None = None) -> None: ...


def make_tracker(tracking: str | Tracker | None) -> Tracker | None:
    """The tracker `tracking` names ("mlflow"), a tracker object as is, or None."""
    if tracking is None:
        return None
    if isinstance(tracking, str):
        if tracking == "mlflow":
            if importlib.util.find_spec("mlflow") is None:
                raise ImportError("tracking='mlflow' needs mlflow: pip install 'gepetto[mlflow]'")
            from gepetto.integrations.mlflow import MlflowTracker

            return MlflowTracker()
        raise ValueError(f"unknown tracking {tracking!r}; accepted: {', '.join(TRACKERS)}, or a tracker object "
                         "(e.g. gepetto.integrations.mlflow.MlflowTracker(experiment=...))")
    if not isinstance(tracking, Tracker):
        raise TypeError(f"tracking must be {' or '.join(repr(t) for t in TRACKERS)} or an object with start(), "
                        f"__call__(kind, data) and close(), got {type(tracking).__name__}")
    return tracking


def chain(first: EventHandler | None, tracker: Tracker | None) -> EventHandler | None:
    """One event handler that calls the user's handler, then the tracker."""
    if tracker is None:
        return first
    if first is None:
        return tracker

    def both(kind: str, data: Any) -> None:
        first(kind, data)
        tracker(kind, data)

    return both


@contextlib.contextmanager
def tracked(tracker: Tracker | None, *, name: str | None, params: Mapping[str, Any], ledger: Ledger | None,
            store_path: Path | None = None) -> Iterator[None]:
    """Start the tracker, run the body, close it with the body's error (if any)."""
    if tracker is None:
        yield
        return
    tracker.start(name=name, params=params, ledger=ledger, store_path=store_path)
    try:
        yield
    except BaseException as exc:
        tracker.close(exc)
        raise
    tracker.close(None)
