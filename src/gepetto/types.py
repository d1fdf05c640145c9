"""Core value types: what a candidate, an example and a score are."""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


def _stable_hash(obj: Any, length: int = 12) -> str:
    """Short sha256 of a JSON rendering with sorted keys (stable across runs and machines)."""
    blob = json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(valid_text(blob).encode("utf-8")).hexdigest()[:length]


def valid_text(text: str) -> str:
    """`text` as valid Unicode, encodable as UTF-8: a lone surrogate (half of an emoji cut by a token limit, as a
    JSON body's "\\ud83d" decodes) becomes U+FFFD, a pair split in two code points is joined."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def valid_data(value: Any) -> Any:
    """`value` itself when every string in it (through mappings, lists, tuples) is valid Unicode; else a copy with
    them made valid (`valid_text`): data that enters gepetto can then be sent, hashed and stored as UTF-8."""
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, Mapping):
        items = [(valid_data(k), valid_data(v)) for k, v in value.items()]
        same = all(a is k and b is v for (a, b), (k, v) in zip(items, value.items(), strict=True))
        return value if same else dict(items)
    if isinstance(value, (list, tuple)):
        parts = [valid_data(v) for v in value]
        return value if all(a is b for a, b in zip(parts, value, strict=True)) else type(value)(parts)
    return value


# C0 and C1 control characters but tab, newline and carriage return: nothing a prompt needs, and NUL ends C strings
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def component_text(text: str) -> str:
    """A candidate component's text: valid Unicode without control characters (tab and newlines kept)."""
    return _CONTROL.sub("", valid_text(text))


class NoCanonicalForm(TypeError):
    """Example data with no text form that is the same in every process (an example id is a hash of it)."""


def canonical(value: Any, where: str = "inputs") -> Any:
    """`value` as JSON data whose rendering is the same in every process: sets sorted, tuples as lists, objects
    by their own `str`. An example's id is the hash of its inputs and gold in this form, so a resumed run finds
    its examples again. Raises NoCanonicalForm for mixed-type mapping keys and objects shown by address."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return valid_text(value) if isinstance(value, str) else value
    if isinstance(value, Mapping):
        kinds = {type(k) for k in value}
        if len(kinds) > 1 or not kinds <= {str, int, float, bool, type(None)}:
            shown = ", ".join(sorted(t.__name__ for t in kinds))
            raise NoCanonicalForm(f"the example's {where} hold mapping keys of types {shown}, which have no order "
                                  "that is the same everywhere: use string keys, or give the example an id "
                                  "(Example(inputs, gold, id='...'))")
        return {k: canonical(v, where) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(v, where) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [canonical(v, where) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True, ensure_ascii=False))
    kind = type(value)
    if kind.__str__ is object.__str__ and kind.__repr__ is object.__repr__:
        raise NoCanonicalForm(f"the example's {where} hold a {kind.__name__} object, whose text shows its memory "
                              "address (different in every process): give it a __repr__, use JSON data, or give the "
                              "example an id (Example(inputs, gold, id='...'))")
    return valid_text(str(value))


def portable(value: Any) -> Any:
    """`canonical(value)` (sets sorted: the same text in every process), or `value` as it is when it has no canonical
    form (an example given an id of its own may hold anything): how a run store keeps an example's inputs and gold."""
    try:
        return canonical(value)
    except NoCanonicalForm:
        return value


class Candidate(Mapping[str, str]):
    """An immutable mapping component name -> text; two candidates with the same texts are equal.

    The texts are kept as valid Unicode without control characters (tab and newlines kept), in name order.

    Args:
        texts: The components, name -> text.
        **kwargs: More components by name (`Candidate(instruction="...")`); one also in `texts` takes this text.

    Raises:
        ValueError: No component at all.
        TypeError: A name or a text that is not a str.

    Example:
        ```python
        from gepetto import Candidate

        seed = Candidate(instruction="Answer in one word.")
        child = seed.replace("instruction", "Answer in one word, lower case.")
        print(child["instruction"])  # Answer in one word, lower case.
        print(child.id != seed.id, seed == {"instruction": "Answer in one word."})  # True True
        ```
    """

    __slots__ = ("_id", "_texts")

    def __init__(self, texts: Mapping[str, str] | None = None, /, **kwargs: str) -> None:
        merged = dict(texts or {}, **kwargs)
        if not merged:
            raise ValueError("a Candidate needs at least one component (name -> text)")
        for name, text in merged.items():
            if not isinstance(name, str) or not isinstance(text, str):
                raise TypeError(f"Candidate components must be str -> str, got {name!r}: {type(text).__name__}")
        # text that comes from an LM (or a user) enters as valid Unicode without control characters (NUL, ...)
        self._texts = {name: component_text(text) for name, text in sorted(merged.items())}
        self._id = _stable_hash(self._texts)

    @property
    def id(self) -> str:
        """Content hash (12 hex digits): equal texts give equal ids."""
        return self._id

    def replace(self, component: str, text: str) -> Candidate:
        """A new candidate with one component's text replaced.

        Args:
            component: The name of the component to change.
            text: Its new text.

        Returns:
            The new Candidate (this one is unchanged).

        Raises:
            KeyError: `component` is not one of this candidate's.
        """
        if component not in self._texts:
            raise KeyError(f"unknown component {component!r}; components: {list(self._texts)}")
        return Candidate({**self._texts, component: text})

    def to_dict(self) -> dict[str, str]:
        """The components as a plain dict, name -> text.

        Returns:
            A new dict (changing it does not change the candidate).
        """
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
    """One task instance: the program's inputs, the gold answer and free metadata, with a stable id.

    Attributes:
        inputs: What the program is given, by name (`example["question"]` reads one); a value that is not a mapping
            is kept as `{"input": value}`.
        gold: The expected answer, for the metric to compare with (any value).
        metadata: Anything else about the example, for the program or the metric; not part of the id.
        id: A stable name for the example; default: a hash of its inputs and gold, the same in every process, so a
            resumed run finds its examples again.

    Raises:
        TypeError: Without an `id`, inputs or a gold that have no text form that is the same in every process
            (mapping keys of mixed types, an object shown by its memory address): give the example an id.

    Example:
        ```python
        from gepetto import Example

        ex = Example({"question": "What is 2 + 2?"}, gold="4")
        print(ex["question"], ex.gold, ex.id)  # What is 2 + 2? 4 2575921e2793
        print(Example("What is 2 + 2?", gold="4").inputs)  # {'input': 'What is 2 + 2?'}
        ```
    """

    inputs: Mapping[str, Any]
    gold: Any = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    id: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.inputs, Mapping):
            object.__setattr__(self, "inputs", {"input": self.inputs})
        # text entering gepetto is valid Unicode (a lone surrogate becomes U+FFFD); valid data is kept as given
        object.__setattr__(self, "inputs", valid_data(self.inputs))
        object.__setattr__(self, "gold", valid_data(self.gold))
        if not self.id:
            data = {"inputs": canonical(dict(self.inputs)), "gold": canonical(self.gold, "gold")}
            object.__setattr__(self, "id", _stable_hash(data))

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
    """A score outside [0, 1]: the metric is misconfigured (a scale of 0-10, say), whatever the candidate."""


class ScoreIsNaN(ScoreRangeError):
    """A NaN score: a metric that fails on one example (a division by zero there), a failed rollout."""


@dataclass(frozen=True)
class Score:
    """A metric's verdict on one rollout: value in [0, 1], feedback in words, optional named objectives.

    `pattern` optionally names the kind of failure in a few words (e.g. "answered balance, expected
    bill_balance", "missed the city slot"); reflection groups failures by it to see which mistakes are
    frequent. Without it, failures are grouped by their feedback's first sentence. A confusion written as
    "answered X, expected Y" also lets the edit proposer refuse a rule that never names the right answer Y.

    Attributes:
        value: The score, in [0, 1] (any real number type: int, bool, a numpy scalar; kept as a float).
        feedback: What went right or wrong, in words: what the reflection LM reads to write a better text.
        objectives: Named scores of their own (e.g. {"accuracy": 1.0, "brevity": 0.4}), kept with the rollout.
        pattern: The kind of failure in a few words, as above ("" when there is none).

    Raises:
        TypeError: A value that is not a real number, or a feedback or pattern that is not a str.
        ValueError: A value outside [0, 1], or NaN.

    Example:
        ```python
        from gepetto import Example, Score

        def metric(example, output, trace):
            if output.strip() == example.gold:
                return Score(1.0, "Correct.")
            return Score(0.0, f"Answered {output.strip()!r}, expected {example.gold!r}.",
                         pattern=f"answered {output.strip()}, expected {example.gold}")

        print(metric(Example({"question": "2 + 2?"}, gold="4"), "5", []).pattern)  # answered 5, expected 4
        ```
    """

    value: float
    feedback: str = ""
    objectives: Mapping[str, float] = field(default_factory=dict)
    pattern: str = ""

    def __post_init__(self) -> None:
        v = as_real(self.value)
        if v is None:
            raise TypeError(f"Score.value must be a number in [0, 1], got {_shown(self.value)}")
        if math.isnan(v):
            raise ScoreIsNaN(f"Score.value must be a number in [0, 1], got {_shown(self.value)}")
        if not 0.0 <= v <= 1.0:
            raise ScoreRangeError(f"Score.value must be in [0, 1], got {_shown(self.value)}")
        for name in ("feedback", "pattern"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"Score.{name} must be a str, got {_shown(getattr(self, name))}")
        object.__setattr__(self, "value", v)
        if self.objectives:  # numpy scalars become floats (they are stored as JSON)
            objectives = {k: x if (x := as_real(o)) is not None else o for k, o in self.objectives.items()}
            object.__setattr__(self, "objectives", objectives)

    @classmethod
    def coerce(cls, result: Any) -> Score:
        """Accept a bare number from a metric (int, float, bool, numpy scalar) and give it a feedback line.

        Args:
            result: What a metric returned: a Score (returned as is) or a number in [0, 1].

        Returns:
            The Score; for a number, with a feedback line that says whether the output is correct, wrong or partly
            right.

        Raises:
            TypeError: `result` is neither a Score nor a real number.
            ValueError: A number outside [0, 1], or NaN.

        Example:
            ```python
            from gepetto import Score

            print(Score.coerce(0.5).feedback)  # The output is partly right (score 0.50).
            print(Score.coerce(True).value)  # 1.0
            ```
        """
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
