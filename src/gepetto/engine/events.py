"""What a run tells its observers: one frozen dataclass per event, why a run stopped, what became of a proposal,
and what the run returns (`Result`).

The engine calls every callback of `callbacks=[...]` with each event, in order, on the event loop's thread:

    def show(event: gepetto.Event) -> None:
        match event:
            case CandidateAdded(record=rec, best=best):
                print(f"candidate {rec.index}: {rec.mean:.3f} (best {best:.3f})")
            case LMFailed(error=error, retry_in=pause) if pause is not None:
                print(f"LM failed ({error}); retrying in {pause:g}s")

A callback must be quick and must not raise (an exception in a callback ends the run like any other error).
Text in events that came from an LM or the user is redacted (gepetto.secrets) before it reaches a callback.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeVar

from gepetto.engine.pareto import best_index
from gepetto.secrets import redact_data

if TYPE_CHECKING:
    from gepetto.engine.state import BudgetPlan, CandidateRecord
    from gepetto.ledger import Ledger
    from gepetto.types import Candidate

E = TypeVar("E", bound="Event")


class StopReason(str, Enum):
    """Why a run stopped (stored in the run store as its value; a human message goes beside it).

    `Result.stop_reason` is one; as a `str` it compares equal to its value (`result.stop_reason == "time_limit"`).

    Attributes:
        BUDGET_EXHAUSTED: What is left of the budget cannot pay for the next step.
        TARGET_REACHED: The best validation score reached `target_score`.
        PERFECT_SCORE: The best validation score reached `perfect_score`.
        TIME_LIMIT: `time_limit` seconds passed.
        NO_IMPROVEMENT: `patience` iterations in a row without a better best.
        STALLED: `max_idle_iterations` iterations in a row spent no rollout.
        STOP_FILE: The stop file (`stop_file`) appeared.
        COST_LIMIT: `max_cost_usd` spent, as the ledger prices the LM calls.
        CONDITION: A stop condition given to the run (`stop=[...]`) decided it.
        INTERRUPTED: Ctrl-C (SIGINT); the run is resumable.
        SIGTERM: SIGTERM; the run is resumable.
        STOP_REQUESTED: `Engine.request_stop()` from the caller's code.
        LM_UNAVAILABLE: The LM endpoint kept failing (or refused the setup, e.g. HTTP 401); the run is resumable.
    """

    BUDGET_EXHAUSTED = "budget_exhausted"
    TARGET_REACHED = "target_reached"
    PERFECT_SCORE = "perfect_score"
    TIME_LIMIT = "time_limit"
    NO_IMPROVEMENT = "no_improvement"
    STALLED = "stalled"
    STOP_FILE = "stop_file"
    COST_LIMIT = "cost_limit"
    CONDITION = "stop_condition"
    INTERRUPTED = "interrupted"
    SIGTERM = "sigterm"
    STOP_REQUESTED = "stop_requested"
    LM_UNAVAILABLE = "lm_unavailable"

    def __str__(self) -> str:
        return self.value

    @property
    def default_message(self) -> str:
        """The message for people when the run gave none ("budget spent", "interrupted (Ctrl-C)", ...)."""
        return _DEFAULT_MESSAGES.get(self, self.value.replace("_", " "))

    @property
    def resumable(self) -> bool:
        """The run has more to do: the user or the LM cut it short (its stored status is "interrupted")."""
        return self in (StopReason.INTERRUPTED, StopReason.SIGTERM, StopReason.LM_UNAVAILABLE)

    @property
    def failed(self) -> bool:
        """The run could not go on by itself: a caller should report a failure (the CLI exits non-zero)."""
        return self is StopReason.LM_UNAVAILABLE

    @classmethod
    def parse(cls, stored: str | None) -> StopReason | None:
        """A stored stop reason by its value (None when there is none or it is no value of ours).

        Args:
            stored: The value kept in the run store ("budget_exhausted", ...), or None.

        Returns:
            The StopReason, or None.
        """
        try:
            return cls(stored) if stored else None
        except ValueError:
            return None


_DEFAULT_MESSAGES = {
    StopReason.BUDGET_EXHAUSTED: "budget spent",
    StopReason.PERFECT_SCORE: "validation score is perfect",
    StopReason.INTERRUPTED: "interrupted (Ctrl-C)",
    StopReason.SIGTERM: "interrupted (SIGTERM)",
    StopReason.STOP_REQUESTED: "stop requested",
    StopReason.COST_LIMIT: "cost limit reached",
}


@dataclass(frozen=True)
class Stop:
    """A decision to stop: the reason, and a message for people ("no improvement for 20 iterations")."""

    reason: StopReason
    message: str = ""  # default: the reason's default message

    def __post_init__(self) -> None:
        if not self.message:
            object.__setattr__(self, "message", self.reason.default_message)


class Outcome(str, Enum):
    """What became of a proposal (or a merge). The value is the label shown in reports and counted in
    `Result.proposals`; as a `str` it also looks up by label (`result.proposals["accepted"]`). TRUNCATED to ECHO
    are reflection answers refused before any rollout.

    Attributes:
        ACCEPTED: Better on the minibatch: validated and added to the pool.
        NOT_BETTER: Not better than its parent on the minibatch.
        ALREADY_TRIED: The same text was proposed before (never paid twice).
        TRUNCATED: Cut off by the LM's token limit.
        EMPTY: No text (or too little to be one).
        UNCHANGED: The parent's text again, or nearly.
        CHAT_REPLY: A chat reply ("Sure, here is ..."), not a text to use.
        SCAFFOLDING: It copies the markers of the reflection prompt.
        ECHO: It echoes the examples it was shown.
        MISSES_ANSWER: An edit rule that does not name the expected answer.
        OVER_LENGTH: Longer than `EngineConfig.max_component_chars`.
        RACED_OUT: A child (of a reflection or a merge) that passed its test, whose validation racing cut short: it
            could neither enter the Pareto front nor become the best (`EngineConfig.racing`); counted instead of
            accepted.
        REFLECTION_ERROR: The reflection LM raised.
        PARENT_PERFECT: Skipped: the parent is perfect on the minibatch.
        NO_OPEN_MISTAKE: Skipped by the edit proposer: no open mistake in the known training rollouts.
        MERGE_ACCEPTED: A merge child scored at least as well as its parents where they differ most: validated.
        MERGE_REJECTED: A merge child scored lower than a parent where they differ most.

    Example:
        ```python
        from gepetto import Outcome

        print(Outcome.TRUNCATED.reason, Outcome.TRUNCATED.group)  # truncated rejected
        print(Outcome.parse("accepted") is Outcome.ACCEPTED)  # True
        ```
    """

    ACCEPTED = "accepted"
    NOT_BETTER = "rejected: not better on minibatch"
    ALREADY_TRIED = "rejected: already tried"
    # reflection answers refused before any rollout (engine/reflect.py `vet`, engine/edits.py `vet_rule`)
    TRUNCATED = "rejected: truncated"
    EMPTY = "rejected: empty"
    UNCHANGED = "rejected: unchanged"
    CHAT_REPLY = "rejected: chat reply"
    SCAFFOLDING = "rejected: copies our prompt markers"
    ECHO = "rejected: echoes the examples"
    MISSES_ANSWER = "rejected: misses the right answer"
    OVER_LENGTH = "rejected: over the length budget"
    RACED_OUT = "rejected: raced out in validation"
    REFLECTION_ERROR = "reflection error"
    PARENT_PERFECT = "skipped: parent perfect on minibatch"
    NO_OPEN_MISTAKE = "skipped: no open mistake in the known training rollouts"
    MERGE_ACCEPTED = "merge accepted"
    MERGE_REJECTED = "merge rejected"

    def __str__(self) -> str:
        return self.value

    @property
    def reason(self) -> str:
        """The label without its "rejected: " or "skipped: " prefix ("truncated")."""
        return self.value.partition(": ")[2] or self.value

    @property
    def group(self) -> Literal["accepted", "rejected", "skipped", "merge", "error"]:
        """The kind of outcome: "accepted", "rejected", "skipped", "merge" (either merge outcome) or "error"."""
        if self in (Outcome.MERGE_ACCEPTED, Outcome.MERGE_REJECTED):
            return "merge"
        if self is Outcome.REFLECTION_ERROR:
            return "error"
        return "accepted" if self is Outcome.ACCEPTED else "skipped" if self.value.startswith("skipped") else "rejected"

    @classmethod
    def parse(cls, label: str) -> Outcome | None:
        """An outcome by its label (None when it is no label of ours).

        Args:
            label: The label as shown and stored ("accepted", "rejected: truncated", ...).

        Returns:
            The Outcome, or None.
        """
        try:
            return cls(label)
        except ValueError:
            return None


class Event:
    """Base of every event. `kind` is its short name (as stored in the run store's event log).

    Every event is a frozen dataclass subclass of this one: a callback matches on those it wants (`match event:
    case CandidateAdded(...)`, or `isinstance`) and ignores the others.

    Attributes:
        kind: The event's short name ("candidate", "rollout", "done", ...), one per class.
    """

    __slots__ = ()
    kind: ClassVar[str] = "event"

    def to_dict(self) -> dict[str, Any]:
        """The fields as a shallow dict (records and results stay objects)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    def redacted(self: E) -> E:
        """This event, or a copy whose plain-data fields (strings, lists, dicts) have every secret redacted."""
        plain = {k: v for k, v in self.to_dict().items()
                 if isinstance(v, (str, list, tuple, dict)) and not isinstance(v, Enum)}
        clean = redact_data(plain) if plain else plain
        changed = {k: v for k, v in clean.items() if v != plain[k]}
        return dataclasses.replace(self, **changed) if changed else self  # type: ignore[type-var]


@dataclass(frozen=True)
class PlanMade(Event):
    """Before anything is paid: what the budget buys."""

    kind: ClassVar[str] = "plan"
    plan: BudgetPlan

    @property
    def text(self) -> str:
        return self.plan.describe()


@dataclass(frozen=True)
class RouteChosen(Event):
    """After the seed's validation, an "auto" run chose its route (engine/route.py): its name, why, and the
    options it set (those the run left to it)."""

    kind: ClassVar[str] = "route"
    name: str
    reason: str
    settings: dict[str, Any]

    def describe(self) -> str:
        set_ = ", ".join(f"{k}={v}" for k, v in self.settings.items())
        return f"route {self.name}: {self.reason}" + (f" ({set_})" if set_ else "")


@dataclass(frozen=True)
class PhaseStarted(Event):
    """A step of a proposal begins: the parent's minibatch, a reflection, or a validation."""

    kind: ClassVar[str] = "phase"
    phase: Literal["minibatch", "reflection", "validation"]
    origin: str | None = None  # validation: "seed", "reflection", "demo", "trim" or "merge"
    candidate: int | None = None  # minibatch: the parent's index
    component: str | None = None  # minibatch: the component to improve


@dataclass(frozen=True)
class RolloutFinished(Event):
    """A rollout was paid for (or replayed from the run store); `used` counts it."""

    kind: ClassVar[str] = "rollout"
    candidate: str  # candidate id
    example: str  # example id
    score: float
    error: str | None
    used: int
    budget: int


@dataclass(frozen=True)
class ReflectionAnswered(Event):
    """The reflection LM answered; `rejected` is the outcome when vetting refused the answer, else None."""

    kind: ClassVar[str] = "reflection"
    attempt: int
    rejected: Outcome | None
    text: str  # the proposed text (the rule, for the edit proposer)
    raw: str  # the whole answer


@dataclass(frozen=True)
class ReflectionFailed(Event):
    """A reflection call raised (it costs an attempt, not the run)."""

    kind: ClassVar[str] = "reflection_error"
    error: str


@dataclass(frozen=True)
class ProposalTested(Event):
    """A child was tested against its parent on the same examples; `accepted`: it goes on to validation."""

    kind: ClassVar[str] = "proposal"
    parent: int
    component: str
    text: str
    minibatch_before: float
    minibatch_after: float
    accepted: bool
    rule: str | None = None  # edit proposer: the rule appended, and the failure pattern it targets
    pattern: str | None = None
    origin: str | None = None  # how the child was made when not by reflection: "demo" or "trim"
    retested: int | None = None  # fresh examples a re-test added (accept "paired"; None: none), in the sums above


@dataclass(frozen=True)
class MergeTested(Event):
    """A merge child was tested on the examples where its parents differ most."""

    kind: ClassVar[str] = "merge"
    parents: tuple[int, int]
    subsample_score: float
    bar: float
    accepted: bool


@dataclass(frozen=True)
class CandidateAdded(Event):
    """A fully validated candidate joined the pool."""

    kind: ClassVar[str] = "candidate"
    record: CandidateRecord
    best: float  # best mean validation score now
    front: tuple[int, ...]  # Pareto front (candidate indices)


@dataclass(frozen=True)
class BestConfirmed(Event):
    """A leader held back from the best for want of evidence became the best once it, the seed and the best had run
    on `examples` more training examples that shaped none of them (engine/loop.py `_confirm`)."""

    kind: ClassVar[str] = "confirmed"
    index: int  # the candidate, now the best
    examples: int
    rollouts: int  # rollouts used by then


@dataclass(frozen=True)
class ValidationCut(Event):
    """Racing (EngineConfig.racing) stopped a child's validation early: whatever it scores on the examples left,
    front member `dominated_by` (a candidate index) dominates it, so it can neither enter the Pareto front nor
    become the best; or, with `racing_confidence`, a sign test says that member is better (`reason` says which).
    It is not added to the pool (`Result.raced_out` keeps it with the scores paid for)."""

    kind: ClassVar[str] = "cut"
    record: CandidateRecord  # index -1; val_scores: the validation examples run so far
    evaluated: int
    total: int  # validation examples in all
    dominated_by: int
    reason: str


@dataclass(frozen=True)
class LMFailed(Event):
    """An LM call gave no answer (after the backend's own retries): it is made again after `retry_in` seconds,
    or, when `retry_in` is None, the run stops (StopReason.LM_UNAVAILABLE), keeping everything paid."""

    kind: ClassVar[str] = "lm_unavailable"
    error: str
    in_a_row: int  # failures in a row, over all calls
    retry_in: float | None


@dataclass(frozen=True)
class IterationEnded(Event):
    """An iteration (a round of proposals, or a merge attempt) ended."""

    kind: ClassVar[str] = "iteration"
    iteration: int
    used: int
    budget: int
    best: float | None
    front: int  # size of the Pareto front
    candidates: int


@dataclass
class Result:
    """What a run produced: the best candidate, the whole pool with lineage and scores, and the costs.

    What `optimize` returns (and `Engine.run`, and a `RunEnded` event holds).

    Attributes:
        best_candidate: The best candidate's texts (`best_index`; the seed when nothing beat it).
        best_score: Its mean validation score (NaN when the run stopped before the seed was validated).
        seed_score: The seed's mean validation score (NaN likewise).
        candidates: The pool, by index (0 is the seed): each record with its texts, parents, how it was made
            (`origin`), the component changed and its validation scores by example id.
        pareto_front: The indices of the candidates on the Pareto front: those no other candidate dominates on
            the validation examples' scores.
        rollouts_used: The rollouts paid for, of `budget`.
        budget: The run's budget, in rollouts.
        ledger: The LM calls, tokens, seconds and costs per role (task, reflection, judge).
        stop_reason: Why the run stopped.
        stop_message: The reason for people ("no improvement for 20 iterations").
        iterations: The iterations run (rounds of proposals, and merge attempts).
        proposals: What became of each proposal and merge: a count per Outcome.
        history: (rollouts used, best mean validation score) each time the best changed.
        wall_seconds: How long the run took.
        partial_candidates: Candidates whose validation a stop interrupted: scores on the examples paid so far
            (index -1). They are not in the pool and never chosen as best on partial scores; a resumed run replays
            their rollouts for free.
        raced_out: Children whose validation racing cut short (`EngineConfig.racing`), with the validation scores
            paid for (index -1): provably never on the front nor the best, so not in the pool.
        metric_checks: Metric calls outside rollouts: on golds written as answers, for demonstrations (no program
            run, no budget).

    Example:
        ```python
        import gepetto
        from gepetto.testing import sim

        task = sim.task(n_train=6, n_val=6)
        result = gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                                  program=task.program, task_lm="sim:task", reflection_lm="sim:reflection",
                                  budget=60, progress=False)
        print(f"{result.seed_score:.2f} -> {result.best_score:.2f}: {result.stop_reason}")
        print(result.best_candidate["instruction"])
        print(f"{result.ledger.total().calls} LM calls")
        ```
    """

    best_candidate: Candidate
    best_score: float
    seed_score: float
    candidates: list[CandidateRecord]
    pareto_front: list[int]
    rollouts_used: int
    budget: int
    ledger: Ledger
    stop_reason: StopReason
    stop_message: str
    iterations: int
    proposals: dict[Outcome, int]
    history: list[tuple[int, float]]
    wall_seconds: float
    partial_candidates: list[CandidateRecord] = field(default_factory=list)
    raced_out: list[CandidateRecord] = field(default_factory=list)
    metric_checks: int = 0

    @property
    def best_index(self) -> int:
        """The best candidate's index in `candidates`: the highest mean validation score among the candidates that
        became the best when they joined (the earliest on a tie); 0, the seed, when none qualifies."""
        return best_index([c.mean for c in self.candidates], [c.evident for c in self.candidates]) or 0

    def summary(self) -> str:
        """The run in one line: scores, candidates, rollouts, LM calls and tokens, time and why it stopped.

        Returns:
            The line (notes on constant-answer candidates, raced-out validations and metric checks appended).
        """
        t = self.ledger.total()
        scores = (f"validation score {self.seed_score:.3f} (seed) -> {self.best_score:.3f} (best, candidate "
                  f"{self.best_index})" if self.candidates else "no candidate validated (not even the seed)")
        return (
            f"{scores}; {len(self.candidates)} candidates, front {len(self.pareto_front)}; "
            f"{self.rollouts_used}/{self.budget} rollouts; {self.iterations} iterations; "
            f"{t.calls} LM calls, {t.input_tokens}+{t.output_tokens} tokens; {self.wall_seconds:.1f}s; "
            f"stopped: {self.stop_message}"
            + (f"; {len(self.raced_out)} validations raced out" if self.raced_out else "")
            + (f"; {self.metric_checks} metric calls on golds (demonstrations)" if self.metric_checks else "")
            + "".join(f"; {note}" for note in self.constant_notes())
        )

    def constant_notes(self) -> list[str]:
        """What the run says of candidates whose outputs are nearly one constant answer (`constant_notes`)."""
        return constant_notes([c.to_dict() for c in self.candidates], self.best_index)

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON data (candidates as their records' dicts, the stop reason and outcomes as values).

        Returns:
            A dict with one entry per field.
        """
        return {
            "best_candidate": self.best_candidate.to_dict(), "best_score": self.best_score,
            "seed_score": self.seed_score, "candidates": [c.to_dict() for c in self.candidates],
            "pareto_front": self.pareto_front, "rollouts_used": self.rollouts_used, "budget": self.budget,
            "ledger": self.ledger.to_dict(), "stop_reason": self.stop_reason.value, "stop_message": self.stop_message,
            "iterations": self.iterations, "proposals": {str(k): v for k, v in self.proposals.items()},
            "history": self.history, "wall_seconds": self.wall_seconds,
            "partial_candidates": [c.to_dict() for c in self.partial_candidates],
            "raced_out": [c.to_dict() for c in self.raced_out], "metric_checks": self.metric_checks,
        }


def constant_notes(candidates: Sequence[Mapping[str, Any]], best: int | None) -> list[str]:
    """Of stored candidates (`CandidateRecord.to_dict()`, some with a "constant" entry: their outputs are nearly one
    answer, answers.ConstantAnswer) and the best's index: the best when it is such a candidate, and those held back
    from the best, though their validation mean is higher, for not beating always giving that answer."""
    rows = {c.get("index"): c for c in candidates}
    top = rows[best].get("mean") or 0.0 if best in rows else 0.0
    notes = []
    for c in candidates:
        k, found = c.get("index"), c.get("constant")
        if not isinstance(found, Mapping) or k == 0:
            continue
        said = (f"answers {found.get('answer')!r} on {found.get('given')} of {found.get('of')} validation examples; "
                f"always answering it scores {float(found.get('score') or 0.0):.3f} there")
        if k == best:
            notes.append(f"the best {said}")
        elif (c.get("mean") or 0.0) > top:
            notes.append(f"candidate {k} (validation {float(c.get('mean') or 0.0):.3f}) {said}: not counted as a gain")
    return notes


@dataclass(frozen=True)
class RunEnded(Event):
    """The run is over; `result.stop_reason` says why."""

    kind: ClassVar[str] = "done"
    result: Result


class Callback(Protocol):
    """Anything called with each event: a function, a bound method, an object with `__call__`.

    Pass one, or a list, as `callbacks=` to `optimize` (or `build_engine`). It is called with every event in
    order, on the event loop's thread: it must be quick and must not raise.

    Example:
        ```python
        import gepetto
        from gepetto.engine.events import CandidateAdded
        from gepetto.testing import sim

        def show(event: gepetto.Event) -> None:
            if isinstance(event, CandidateAdded):
                print(f"candidate {event.record.index}: {event.record.mean:.3f} (best {event.best:.3f})")

        task = sim.task(n_train=6, n_val=6)
        gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset, program=task.program,
                         task_lm="sim:task", reflection_lm="sim:reflection", budget=60, callbacks=show,
                         progress=False)
        ```
    """

    def __call__(self, event: Event) -> None: ...


Callbacks = Callback | Sequence[Callback] | None


def as_callbacks(callbacks: Callbacks) -> list[Callback]:
    """`callbacks=` as a list: one callback, several, or none."""
    if callbacks is None:
        return []
    return [callbacks] if callable(callbacks) else list(callbacks)


__all__ = [
    "BestConfirmed", "Callback", "CandidateAdded", "Event", "IterationEnded", "LMFailed", "MergeTested", "Outcome",
    "PhaseStarted", "PlanMade", "ProposalTested", "ReflectionAnswered", "ReflectionFailed", "Result", "RolloutFinished",
    "RouteChosen", "RunEnded", "Stop", "StopReason", "ValidationCut", "as_callbacks",
]
