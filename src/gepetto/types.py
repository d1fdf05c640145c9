"""Core value types: what a candidate, an example and a score are."""

from __future__ import annotations

import hashlib
import json
import math
import numbers
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


def _stable_hash(obj: Any, length: int = 12) -> str:
    """Short sha256 of a JSON rendering with sorted keys (stable across runs and machines)."""
    blob = json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:length]


class Candidate(Mapping[str, str]):
    """An immutable mapping component name -> text; two candidates with the same texts are equal."""

    __slots__ = ("_id", "_texts")

    def __init__(self, texts: Mapping[str, str] | None = None, /, **kwargs: str) -> None:
        merged = dict(texts or {}, **kwargs)
        if not merged:
            raise ValueError("a Candidate needs at least one component (name -> text)")
        for name, text in merged.items():
            if not isinstance(name, str) or not isinstance(text, str):
                raise TypeError(f"Candidate components must be str -> str, got {name!r}: {type(text).__name__}")
        self._texts = dict(sorted(merged.items()))
        self._id = _stable_hash(self._texts)

    @property
    def id(self) -> str:
        """Content hash (12 hex digits): equal texts give equal ids."""
        return self._id

    def replace(self, component: str, text: str) -> Candidate:
        """A new candidate with one component's text replaced."""
        if component not in self._texts:
            raise KeyError(f"unknown component {component!r}; components: {list(self._texts)}")
        return Candidate({**self._texts, component: text})

    def to_dict(self) -> dict[str, str]:
        return dict(self._texts)

    def __getitem__(self, key: str) -> str:
        return self._texts[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._texts)

    def __len__(self) -> int:
        return len(self._texts)

    def __hash__(self) -> int:
        return hash(self._id)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Candidate):
            return self._id == other._id
        if isinstance(other, Mapping):
            return self._texts == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"Candidate({self._texts!r})"


@dataclass(frozen=True)
class Example:
    """One task instance: the program's inputs, the gold answer and free metadata, with a stable id."""

    inputs: Mapping[str, Any]
    gold: Any = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    id: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.inputs, Mapping):
            object.__setattr__(self, "inputs", {"input": self.inputs})
        if not self.id:
            object.__setattr__(self, "id", _stable_hash({"inputs": dict(self.inputs), "gold": self.gold}))

    def __getitem__(self, key: str) -> Any:
        return self.inputs[key]


def as_real(value: Any) -> float | None:
    """`value` as a float if it is a real number (int, float, bool, numpy scalar, anything with `__float__`)."""
    if isinstance(value, (str, bytes)) or (isinstance(value, numbers.Complex) and not isinstance(value, numbers.Real)):
        return None
    if isinstance(value, numbers.Real) or hasattr(type(value), "__float__"):
        try:
            return float(value)
        except (TypeError, ValueError, OverflowError):
            return None
    return None


def _shown(value: Any) -> str:
    return f"{type(value).__name__}: {value!r}"[:200]


class ScoreRangeError(ValueError):
    """A score outside [0, 1] (or NaN): the metric is misconfigured, whatever the candidate."""


@dataclass(frozen=True)
class Score:
    """A metric's verdict on one rollout: value in [0, 1], feedback in words, optional named objectives.

    `pattern` optionally names the kind of failure in a few words (e.g. "answered balance, expected
    bill_balance", "missed the city slot"); reflection groups failures by it to see which mistakes are
    frequent. Without it, failures are grouped by their feedback's first sentence. A confusion written as
    "answered X, expected Y" also lets the edit proposer refuse a rule that never names the right answer Y.
    """

    value: float
    feedback: str = ""
    objectives: Mapping[str, float] = field(default_factory=dict)
    pattern: str = ""

    def __post_init__(self) -> None:
        v = as_real(self.value)
        if v is None:
            raise TypeError(f"Score.value must be a number in [0, 1], got {_shown(self.value)}")
        if math.isnan(v) or not 0.0 <= v <= 1.0:
            raise ScoreRangeError(f"Score.value must be in [0, 1], got {_shown(self.value)}")
        object.__setattr__(self, "value", v)
        if self.objectives:  # numpy scalars become floats (they are stored as JSON)
            objectives = {k: x if (x := as_real(o)) is not None else o for k, o in self.objectives.items()}
            object.__setattr__(self, "objectives", objectives)

    @classmethod
    def coerce(cls, result: Any) -> Score:
        """Accept a bare number from a metric (int, float, bool, numpy scalar) and give it a feedback line."""
        if isinstance(result, Score):
            return result
        v = as_real(result)
        if v is None:
            raise TypeError(f"a metric must return a Score or a number in [0, 1], got {_shown(result)}")
        if v >= 1.0:
            note = "The output is correct."
        elif v <= 0.0:
            note = "The output is wrong (score 0)."
        else:
            note = f"The output is partly right (score {v:.2f})."
        return cls(v, note)
