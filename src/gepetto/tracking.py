"""Experiment tracking: `optimize(..., tracking="mlflow")` and `gepetto optimize --tracking mlflow`.

A tracker is a `Callback` (gepetto.engine.events) with a start and an end: `start(...)` before the run (its
configuration, its cost ledger, where it is stored), `tracker(event)` for every event, `close(error)` after it
(artifacts, final status). Trackers live in `gepetto.integrations` and import their libraries lazily; the engine
knows nothing of them.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol, get_args, runtime_checkable

from gepetto.config import TrackingName
from gepetto.engine.events import Callback, Callbacks, Event, as_callbacks
from gepetto.ledger import Ledger

TRACKERS: tuple[str, ...] = get_args(TrackingName)


@runtime_checkable
class Tracker(Protocol):
    """A callback that is started before a run and closed after it."""

    def start(self, *, name: str | None, params: Mapping[str, Any], ledger: Ledger | None,
              store_path: str | Path | None = None) -> None: ...

    def __call__(self, event: Event) -> None: ...

    def close(self, error: BaseException | None = None) -> None: ...


def make_tracker(tracking: str | Tracker | None) -> Tracker | None:
    """The tracker `tracking` names ("mlflow"), a tracker object as is, or None."""
    if tracking is None:
        return None
    if isinstance(tracking, str):
        if tracking == "mlflow":
            if importlib.util.find_spec("mlflow") is None:
                from gepetto._install import install_hint

                raise ImportError(f"tracking='mlflow' needs mlflow: {install_hint('mlflow')}")
            from gepetto.integrations.mlflow import MlflowTracker

            return MlflowTracker()
        raise ValueError(f"unknown tracking {tracking!r}; accepted: {', '.join(TRACKERS)}, or a tracker object "
                         "(e.g. gepetto.integrations.mlflow.MlflowTracker(experiment=...))")
    if not isinstance(tracking, Tracker):
        raise TypeError(f"tracking must be {' or '.join(repr(t) for t in TRACKERS)} or an object with start(), "
                        f"__call__(event) and close(), got {type(tracking).__name__}")
    return tracking


def with_tracker(callbacks: Callbacks, tracker: Tracker | None) -> list[Callback]:
    """The user's callbacks, then the tracker (it sees every event after them)."""
    return [*as_callbacks(callbacks), *([tracker] if tracker is not None else [])]


@contextlib.contextmanager
def tracked(tracker: Tracker | None, *, name: str | None, params: Mapping[str, Any], ledger: Ledger | None,
            store_path: str | Path | None = None) -> Iterator[None]:
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
