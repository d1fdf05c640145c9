"""Stop conditions: when a run ends before its budget is spent, as composable objects.

The engine asks its conditions, in order, between iterations (after the seed's validation and after each round
or merge); the first that answers stops the run, which then returns the best so far. A condition gets a
`RunStatus` and returns a `Stop` (a reason and a message), a message (str: StopReason.CONDITION), True (the
same, with a message naming the condition) or None/False to go on.

A condition that must act while a step runs (a timer, a signal) also has `arm(stop)`: called when the run
starts with `stop(reason, message)` (which cancels the step in flight, keeping everything paid), it returns a
function that undoes it when the run ends.

The config's options are conditions (`gepetto.parts.stop_conditions`): target_score, perfect_score, stop_file, patience,
max_idle_iterations, the budget, time_limit and max_cost_usd; `stop=[...]` (gepetto.optimize) adds conditions
of your own, or "sigterm"/"sigint" (stop gracefully on that signal; a run whose event loop gepetto owns has both).
`any_of` and `all_of` combine conditions. Stopping never changes the path a run takes, only where it ends, so
resuming a stopped run goes on exactly as if it had not stopped.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from gepetto.engine.events import Outcome, Stop, StopReason
from gepetto.engine.proposers import LATE_TRIES
from gepetto.engine.state import RunState
from gepetto.specs import ConfigError

StopFn = Callable[..., None]  # stop(reason, message=None): end the run now


@dataclass(frozen=True)
class RunStatus:
    """Where a run stands, for stop conditions."""

    iteration: int
    rollouts_used: int
    budget: int
    best_score: float  # best mean validation score so far
    candidates: int
    since_improvement: int  # iterations since the best score last rose
    idle_iterations: int  # iterations in a row that paid for no rollout
    seconds: float  # since this session started
    cost_usd: float  # what the LM calls cost, by the ledger's prices (0 without prices), all sessions
    state: RunState  # everything else: read only
    idle_outcomes: Mapping[str, int] = field(default_factory=dict)  # what the idle iterations' proposals said

    @property
    def remaining(self) -> int:
        return self.budget - self.rollouts_used


class StopCondition(Protocol):
    """Decides, between iterations, whether the run stops (see the module's docstring)."""

    def __call__(self, status: RunStatus) -> Stop | str | bool | None: ...


StopSpec = StopCondition | str
NAMED = {"sigterm": lambda: OnSignal(signal.SIGTERM, StopReason.SIGTERM),
         "sigint": lambda: OnSignal(signal.SIGINT, StopReason.INTERRUPTED)}


def decide(condition: StopCondition, status: RunStatus) -> Stop | None:
    """A condition's answer as a Stop (or None)."""
    answer = condition(status)
    if answer is None or answer is False:
        return None
    if isinstance(answer, Stop):
        return answer
    if isinstance(answer, str):
        return Stop(StopReason.CONDITION, answer)
    return Stop(StopReason.CONDITION, f"stop condition {getattr(condition, '__name__', type(condition).__name__)}")


def arm(condition: StopCondition, stop: StopFn) -> Callable[[], None] | None:
    hook = getattr(condition, "arm", None)
    return hook(stop) if callable(hook) else None


def as_conditions(stop: StopSpec | Sequence[StopSpec] | None) -> list[StopCondition]:
    """`stop=` as a list of conditions: one or several, objects or names ("sigterm", "sigint")."""
    if stop is None:
        return []
    items = [stop] if isinstance(stop, str) or callable(stop) else list(stop)
    out: list[StopCondition] = []
    for item in items:
        if isinstance(item, str):
            if item not in NAMED:
                raise ConfigError(f"stop: unknown condition {item!r}; accepted: {', '.join(NAMED)}, or a callable "
                                  "(status) -> Stop | str | bool | None (gepetto.engine.stopping)")
            out.append(NAMED[item]())
        elif callable(item):
            out.append(item)
        else:
            raise ConfigError(f"stop: {type(item).__name__} is no stop condition (a callable of the run status)")
    return out


# ---- the built-in conditions -------------------------------------------------------------------------------
@dataclass(frozen=True)
class TargetScore:
    target: float

    def __call__(self, status: RunStatus) -> Stop | None:
        return Stop(StopReason.TARGET_REACHED, f"target score {self.target} reached") \
            if status.best_score >= self.target else None


@dataclass(frozen=True)
class PerfectScore:
    perfect: float

    def __call__(self, status: RunStatus) -> Stop | None:
        return Stop(StopReason.PERFECT_SCORE) if status.best_score >= self.perfect else None


@dataclass(frozen=True)
class StopFile:
    path: str

    def __call__(self, status: RunStatus) -> Stop | None:
        return Stop(StopReason.STOP_FILE, f"stop file {self.path} found") if Path(self.path).exists() else None


@dataclass(frozen=True)
class NoImprovement:
    patience: int

    def __call__(self, status: RunStatus) -> Stop | None:
        return Stop(StopReason.NO_IMPROVEMENT, f"no improvement for {self.patience} iterations") \
            if status.since_improvement >= self.patience else None


# why an idle proposal found nothing, in the words a user can act on
_NOTHING_LEFT = {
    Outcome.NO_OPEN_MISTAKE.value: "every mistake the best makes on the training examples it ran has had its rules "
                                   f"tried (up to {LATE_TRIES} times each): more training examples would give it "
                                   "more to learn from, more budget would not",
    Outcome.PARENT_PERFECT.value: "the parents solve their training minibatches",
}


@dataclass(frozen=True)
class Stalled:
    """Stops after `max_idle` iterations in a row that paid for no rollout, saying why nothing was left to try
    (the outcomes of those iterations' proposals) and how much of the budget is left."""

    max_idle: int

    def __call__(self, status: RunStatus) -> Stop | None:
        if status.idle_iterations < self.max_idle:
            return None
        said = sorted(status.idle_outcomes.items(), key=lambda kv: (-kv[1], kv[0]))
        why = "; ".join(f"{k} {v}" for k, v in said)
        top = _NOTHING_LEFT.get(said[0][0]) if said else None
        return Stop(StopReason.STALLED, f"stalled: {status.idle_iterations} iterations in a row found nothing "
                    f"worth a rollout" + (f" ({why})" if why else "") + (f": {top}" if top else "")
                    + f"; {status.remaining} of {status.budget} rollouts left unspent")


@dataclass(frozen=True)
class BudgetSpent:
    """What is left cannot pay for the smallest step (a minibatch); a step that needs more than is left ends
    the run from inside the engine (its cost is known only once it is planned)."""

    min_step: int

    def __call__(self, status: RunStatus) -> Stop | None:
        return Stop(StopReason.BUDGET_EXHAUSTED) if status.remaining < self.min_step else None


@dataclass(frozen=True)
class TimeLimit:
    """Stops `seconds` after the session started, cancelling the step in flight (its paid rollouts are kept)."""

    seconds: float

    def __call__(self, status: RunStatus) -> Stop | None:
        return Stop(StopReason.TIME_LIMIT) if status.seconds >= self.seconds else None

    def arm(self, stop: StopFn) -> Callable[[], None]:
        return asyncio.get_running_loop().call_later(self.seconds, stop, StopReason.TIME_LIMIT).cancel


@dataclass(frozen=True)
class CostLimit:
    """Stops once the LM calls have cost `usd` dollars, as the ledger prices them. Checked between iterations, so
    a run may spend up to one more iteration's calls (a proposal and its validation) past the limit. Calls of an
    LM without a price count $0: without prices the limit could never trigger (the engine refuses it)."""

    usd: float

    def __call__(self, status: RunStatus) -> Stop | None:
        if status.cost_usd >= self.usd:
            return Stop(StopReason.COST_LIMIT, f"cost limit ${self.usd:g} reached (${status.cost_usd:.4f} spent)")
        return None


@dataclass(frozen=True)
class OnSignal:
    """Stops gracefully when the process gets `signum` (the main thread's event loop only; elsewhere a no-op)."""

    signum: int
    reason: StopReason

    def __call__(self, status: RunStatus) -> None:
        return None  # it acts through arm()

    def arm(self, stop: StopFn) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(self.signum, stop, self.reason)
        except (NotImplementedError, RuntimeError):  # no signal handlers on this platform or loop
            return lambda: None

        def disarm() -> None:
            loop.remove_signal_handler(self.signum)

        return disarm


@dataclass(frozen=True)
class AnyOf:
    conditions: tuple[StopCondition, ...]

    def __call__(self, status: RunStatus) -> Stop | None:
        return next((s for c in self.conditions if (s := decide(c, status)) is not None), None)

    def arm(self, stop: StopFn) -> Callable[[], None]:
        undo = [u for c in self.conditions if (u := arm(c, stop)) is not None]

        def disarm() -> None:
            for u in undo:
                u()

        return disarm


@dataclass(frozen=True)
class AllOf:
    """Stops when every one of its conditions would (polled only: a timer or signal inside it is not armed)."""

    conditions: tuple[StopCondition, ...]

    def __call__(self, status: RunStatus) -> Stop | None:
        stops = [decide(c, status) for c in self.conditions]
        if not stops or any(s is None for s in stops):
            return None
        return Stop(StopReason.CONDITION, "; ".join(s.message for s in stops if s is not None))


def any_of(*conditions: StopSpec) -> AnyOf:
    """Stop when one of `conditions` does (what a list of conditions means)."""
    return AnyOf(tuple(as_conditions(list(conditions))))


def all_of(*conditions: StopSpec) -> AllOf:
    """Stop when all of `conditions` do at once, e.g. all_of(NoImprovement(10), lambda s: s.best_score > 0.8)."""
    return AllOf(tuple(as_conditions(list(conditions))))
