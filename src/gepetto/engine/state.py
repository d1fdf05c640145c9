"""The optimisation state as plain data: candidates, lineage, validation scores, paid rollouts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from gepetto.engine.answers import AnswerSet, ConstantAnswer
from gepetto.engine.pareto import ParetoArchive
from gepetto.ledger import Ledger
from gepetto.program import Rollout
from gepetto.types import Candidate

T = TypeVar("T")


@dataclass(frozen=True)
class MemoryKey(Generic[T]):
    """A typed entry of `RunState.memory`: its name (by convention "owner.what", e.g. "edit.rules_tried") and
    how its empty value is made."""

    name: str
    empty: Callable[[], T]


class Memory(dict[str, Any]):
    """What strategies remember between iterations, by name: a plain dict for a strategy of one's own, and typed
    entries (`MemoryKey`) for the built-ins."""

    def of(self, key: MemoryKey[T]) -> T:
        """The entry `key`, made empty first if it is not there yet."""
        if key.name not in self:
            self[key.name] = key.empty()
        value: T = self[key.name]
        return value

    def peek(self, key: MemoryKey[T]) -> T | None:
        """The entry `key`, or None when it was never made (nothing is added)."""
        value: T | None = self.get(key.name)
        return value


@dataclass
class CandidateRecord:
    """A candidate in the pool: texts, lineage, how it was made and its validation scores."""

    index: int
    candidate: Candidate
    parents: tuple[int, ...]
    origin: str  # "seed", "reflection", "demo" (a demonstration added), "trim" (a seed sentence dropped), "merge"
    iteration: int
    component: str | None  # the component reflection rewrote (None for seed and merge)
    val_scores: dict[str, float]
    rollouts_at_creation: int
    evident: bool = True  # it became the best when it joined (ParetoArchive: see there what that takes)
    # its outputs are nearly all one answer while the golds are not (answers.constant_answer): then it becomes the
    # best only if it also beats always giving that answer
    constant: ConstantAnswer | None = None


    @property
    def mean(self) -> float:
        return sum(self.val_scores.values()) / len(self.val_scores) if self.val_scores else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index, "id": self.candidate.id, "texts": self.candidate.to_dict(),
            "parents": list(self.parents), "origin": self.origin, "iteration": self.iteration,
            "component": self.component, "val_scores": self.val_scores, "mean": self.mean,
            "rollouts_at_creation": self.rollouts_at_creation, "evident": self.evident,
            **({"constant": self.constant.to_dict()} if self.constant is not None else {}),
        }


@dataclass(frozen=True)
class BudgetPlan:
    """What a rollout budget buys, said before the run starts."""

    budget: int
    seed_validation: int
    minibatch: int  # new parent rollouts per proposal (free when already known)
    validation: int
    proposals_min: int  # if every proposal were accepted and validated
    proposals_max: int  # if every proposal were rejected on the minibatch and parent scores were known
    child_test: int = 0  # rollouts of the child before validation (default: the minibatch)
    retest: int = 0  # rollouts of parent and child on fresh examples when the test is a tie (accept "paired")

    def describe(self) -> str:
        child = self.child_test or self.minibatch
        retest = f" + up to {self.retest} (re-test of a tie)" if self.retest else ""
        return (
            f"budget {self.budget} rollouts: seed validation {self.seed_validation}; each proposal costs "
            f"up to {self.minibatch} (parent minibatch, free when scores are known) + {child} (child "
            f"test){retest} + {self.validation} (validation, only if accepted); this buys about "
            f"{self.proposals_min}-{self.proposals_max} proposals"
        )


def plan_budget(budget: int, n_val: int, minibatch: int, child_test: int | None = None, retest: int = 0
                ) -> BudgetPlan:
    child = child_test or minibatch
    left = max(budget - n_val, 0)
    return BudgetPlan(
        budget, n_val, minibatch, n_val, left // (minibatch + child + retest + n_val), left // max(child, 1), child,
        retest,
    )


@dataclass
class RunState:
    """Everything the loop decided and paid for so far."""

    val_ids: list[str]
    budget: int
    records: list[CandidateRecord] = field(default_factory=list)
    rollouts: dict[tuple[str, str], Rollout] = field(default_factory=dict)  # (candidate id, example id)
    rollouts_used: int = 0
    iteration: int = 0
    next_component: dict[int, int] = field(default_factory=dict)
    merges_due: int = 0
    merges_done: int = 0
    merge_tried: set[tuple[int, int]] = field(default_factory=set)
    train_cursor: int = 0
    history: list[tuple[int, float]] = field(default_factory=list)  # (rollouts used, best mean) on change
    proposals: Counter = field(default_factory=Counter)  # outcome -> count
    metric_checks: int = 0  # metric calls on outputs a proposer wrote (golds as answers), not rollouts
    # what strategies remember between iterations (e.g. the edit proposer's rules that did not help), by key
    memory: Memory = field(default_factory=Memory)
    ledger: Ledger = field(default_factory=Ledger)
    means: list[float] = field(default_factory=list)  # records[i].mean, computed once per record
    # what the seed's validation showed of the task's answers (engine/answers.py, engine/route.py): the closed
    # answer set, if any, the components whose answers are the program's, the inner steps that answer from a
    # closed set of their own (a router), and the components the route gives rules (None: no route chosen)
    answers: AnswerSet | None = None
    answering: tuple[str, ...] = ()
    steps: dict[str, AnswerSet] = field(default_factory=dict)
    ruled: tuple[str, ...] | None = None
    archive: ParetoArchive = field(init=False)

    def __post_init__(self) -> None:
        self.archive = ParetoArchive(len(self.val_ids))

    @property
    def remaining(self) -> int:
        return self.budget - self.rollouts_used

    def best(self) -> CandidateRecord:
        return self.records[self.archive.best()]

    def known(self, candidate: Candidate, example_id: str) -> Rollout | None:
        return self.rollouts.get((candidate.id, example_id))

    def add_record(self, record: CandidateRecord) -> None:
        row = [record.val_scores[i] for i in self.val_ids]
        record.index = self.archive.add(row, record.parents,
                                        None if record.constant is None else record.constant.scores)
        record.evident = self.archive.evident[record.index]
        self.records.append(record)
        self.means.append(record.mean)
        best = self.means[self.archive.best()]
        if not self.history or best != self.history[-1][1]:
            self.history.append((self.rollouts_used, best))
