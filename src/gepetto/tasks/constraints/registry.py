"""The constraint registry: one `Constraint` per supported instruction id, and the functions that use it.

A family module registers each checker with the `constraint` decorator, which sets the id, the kwargs the checker
needs and the human description directly above the checker:

    @constraint("length_constraints:number_words", required=("num_words", "relation"),
                describe=lambda k: f"Answer with {_d_rel(k, 'relation', 'num_words', 'word')}")
    def check_number_words(response: str, *, num_words: int, relation: str) -> CheckResult: ...

`describe` is a function of the cleaned kwargs, or a fixed sentence for a constraint that has no parameters.
An id can be registered once; registering it again raises ValueError.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

CheckResult = tuple[bool, str]
Checker = Callable[..., CheckResult]
Describer = Callable[[Mapping[str, Any]], str]
_F = TypeVar("_F", bound=Checker)


@dataclass(frozen=True)
class Constraint:
    """One verifiable constraint type: its checker, the kwargs the checker needs, and its description."""

    id: str
    check: Checker
    required: tuple[str, ...] = ()
    describe: Describer | None = None


REGISTRY: dict[str, Constraint] = {}
DESCRIBERS: dict[str, Describer] = {}

# IFBench ids with no checker, and why
UNSUPPORTED_REASONS: dict[str, str] = {
    "words:start_verb": "needs a part-of-speech tagger to tell whether the first word is a verb",
    "custom:european_capitals_sort": (
        "needs geographic knowledge (which capitals lie north of 45 degrees, and their order)"),
}
UNSUPPORTED: list[str] = sorted(UNSUPPORTED_REASONS)


def register(c: Constraint) -> Constraint:
    """Add a constraint to the registry; raises ValueError when its id is already registered."""
    if c.id in REGISTRY:
        old = REGISTRY[c.id].check
        raise ValueError(f"constraint {c.id!r} is already registered (checker {old.__module__}.{old.__name__})")
    REGISTRY[c.id] = c
    if c.describe is not None:
        DESCRIBERS[c.id] = c.describe
    return c


def _fixed(text: str) -> Describer:
    def describer(kwargs: Mapping[str, Any]) -> str:
        return text

    return describer


def constraint(instruction_id: str, *, describe: str | Describer, required: Sequence[str] = ()) -> Callable[[_F], _F]:
    """Decorator: register the checker below it for `instruction_id`, with its description and required kwargs.

    The checker is returned unchanged. `describe` takes the cleaned kwargs (a plain string for a fixed sentence);
    `required` names the kwargs that must be present for the constraint to be checked.
    """
    describer = describe if callable(describe) else _fixed(describe)

    def decorate(fn: _F) -> _F:
        register(Constraint(instruction_id, fn, tuple(required), describer))
        return fn

    return decorate


def clean_kwargs(kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """Drop None values; turn integral floats (IFBench's `5.0`) into ints."""
    out: dict[str, Any] = {}
    for k, v in (kwargs or {}).items():
        if v is None:
            continue
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        out[k] = v
    return out


def is_supported(instruction_id: str, kwargs: Mapping[str, Any] | None = None) -> bool:
    """True when there is a checker for the id and (if kwargs are given) they hold its required parameters."""
    c = REGISTRY.get(instruction_id)
    if c is None:
        return False
    if kwargs is None:
        return True
    kw = clean_kwargs(kwargs)
    return all(k in kw for k in c.required)


def describe(instruction_id: str, kwargs: Mapping[str, Any] | None = None) -> str:
    """A human sentence for the constraint, e.g. 'Answer with at least 300 words'."""
    fn = DESCRIBERS.get(instruction_id)
    kw = clean_kwargs(kwargs)
    if fn is None:
        return f"Follow the instruction {instruction_id!r}"
    try:
        return fn(kw)
    except (KeyError, TypeError, ValueError):
        return f"Follow the instruction {instruction_id!r}"


def check(instruction_id: str, response: Any, kwargs: Mapping[str, Any] | None = None) -> CheckResult:
    """Run one checker; raises KeyError for an unsupported id and ValueError when a required kwarg is missing."""
    c = REGISTRY[instruction_id]
    kw = clean_kwargs(kwargs)
    missing = [k for k in c.required if k not in kw]
    if missing:
        raise ValueError(f"{instruction_id} needs the parameter(s) {', '.join(missing)}")
    text = response if isinstance(response, str) else ("" if response is None else str(response))
    return c.check(text, **kw)


def check_all(
    response: Any, ids: Sequence[str], kwargs_list: Sequence[Mapping[str, Any] | None] | None = None
) -> list[tuple[str, str, bool | None, str]]:
    """Check every constraint: (id, description, ok, why); ok is None for one that could not be checked."""
    kwargs_list = list(kwargs_list or [])
    out: list[tuple[str, str, bool | None, str]] = []
    for i, cid in enumerate(ids):
        kw = kwargs_list[i] if i < len(kwargs_list) else {}
        desc = describe(cid, kw)
        if cid not in REGISTRY:
            reason = UNSUPPORTED_REASONS.get(cid, "no checker for this constraint type")
            out.append((cid, desc, None, f"not checked: {reason}"))
            continue
        try:
            ok, why = check(cid, response, kw)
        except ValueError as exc:
            out.append((cid, desc, None, f"not checked: {exc}"))
            continue
        except Exception as exc:  # a checker bug must not break a run: count it as not checked
            out.append((cid, desc, None, f"not checked: checker error {type(exc).__name__}: {exc}"))
            continue
        out.append((cid, desc, bool(ok), why))
    return out
