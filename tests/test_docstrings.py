"""The public API's docstrings, as the docs site renders them (mkdocstrings, Google style): each name below has one,
with an `Args:` (or `Attributes:`) entry for every parameter its constructor or function takes, a `Returns:`
section when it returns something, and no entry naming what is not there."""

import dataclasses
import enum
import inspect
import re
from typing import Any

import pytest

import gepetto

# the objects whose docstrings are checked, as `import gepetto` gives them (kept explicit: a name added to the
# public API is added here with its docstring)
NAMES = [
    "Candidate", "Example", "Score",
    "Context", "MetricError", "Rollout", "Task", "TraceEntry", "single_instruction",
    "LM", "Completion", "Usage", "LMError",
    "Result", "Event", "Callback", "StopReason", "Outcome",
    "Ledger",
    "ScriptedLM",
    "ProgressDisplay",
]
# their methods a user calls, checked the same way
METHODS = [
    "Candidate.replace", "Candidate.to_dict", "Score.coerce",
    "Context.lm", "Context.record",
    "LM.complete",
    "StopReason.parse", "Outcome.parse", "Result.summary", "Result.to_dict",
    "Ledger.record", "Ledger.total", "Ledger.to_dict", "Ledger.from_dict",
    "ScriptedLM.complete",
]
TITLES = {"Args", "Attributes", "Returns", "Raises", "Example", "Examples", "Note", "Yields"}
ENTRIES = {"Args", "Attributes", "Raises"}  # the sections made of `name: description` entries


def resolve(dotted: str) -> Any:
    obj: Any = gepetto
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def docstring(obj: object) -> str:
    """The object's own docstring ("" without one): a class's is not inherited, and a dataclass's generated
    signature ("Usage(input_tokens: int = 0, ...)") is none."""
    doc = vars(obj).get("__doc__") if isinstance(obj, type) else getattr(obj, "__doc__", None)
    name = getattr(obj, "__name__", "")
    if not doc or (isinstance(obj, type) and doc.startswith(f"{name}(")):
        return ""
    return inspect.cleandoc(doc)


def sections(doc: str) -> dict[str, list[str]]:
    """The Google-style sections of a docstring: title -> the names its entries document (`name:`,
    `name (type):`, `**name:`, stars dropped; none for a section of prose or code)."""
    out: dict[str, list[str]] = {}
    title = None
    for line in doc.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):  # a section title, or prose that ends the section
            found = re.fullmatch(r"(\w[\w ]*):\s*", line)
            title = found.group(1) if found and found.group(1) in TITLES else None
            if title is not None:
                out[title] = []
            continue
        entry = re.match(r" {4}(\*{0,2}\w+)(?: \([^)]*\))?:", line)
        if title in ENTRIES and entry:
            out[title].append(entry.group(1).lstrip("*"))
    return out


def signature(obj: Any) -> inspect.Signature | None:
    """The call signature (a class's: its constructor's), or None where the class has none of its own: an enum
    (looked up by value, not built) or an exception without an `__init__` of its own (a builtin's)."""
    if isinstance(obj, type) and issubclass(obj, enum.Enum):
        return None
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):
        return None


def parameters(obj: object) -> list[str]:
    """The parameters a docstring must document: not `self`, `*args`/`**kwargs`, nor private ones (`_loop`)."""
    sig = signature(obj)
    if sig is None:
        return []
    return [p.name for p in sig.parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in ("self", "cls")
            and not p.name.startswith("_")]


def attributes(cls: type) -> set[str]:
    """What an `Attributes:` entry of a class may name: its fields, class attributes and annotations, and the
    attributes its constructor sets (`self.calls = ...`)."""
    names = set(dir(cls)) | set(getattr(cls, "__annotations__", {}))
    if dataclasses.is_dataclass(cls):
        names |= {f.name for f in dataclasses.fields(cls)}
    init = vars(cls).get("__init__")
    if inspect.isfunction(init) and not dataclasses.is_dataclass(cls):  # (a dataclass's generated one has no source)
        names |= set(re.findall(r"self\.(\w+)", inspect.getsource(init)))
    return names


ALL = NAMES + METHODS


def test_the_names_are_public():
    assert set(NAMES) <= set(gepetto.__all__)
    assert all(callable(resolve(m)) for m in METHODS)


@pytest.mark.parametrize("name", ALL)
def test_it_has_a_docstring(name):
    assert docstring(resolve(name)), f"{name} has no docstring"


@pytest.mark.parametrize("name", ALL)
def test_every_parameter_is_documented(name):
    obj = resolve(name)
    params = parameters(obj)
    if not params:
        return
    found = sections(docstring(obj))
    documented = found.get("Args", []) + found.get("Attributes", [])
    missing = [p for p in params if p not in documented]
    assert not missing, f"{name}: no Args:/Attributes: entry for {missing}"


@pytest.mark.parametrize("name", ALL)
def test_what_it_returns_is_documented(name):
    obj = resolve(name)
    if isinstance(obj, type):
        return
    sig = signature(obj)
    assert sig is not None
    if sig.return_annotation not in (inspect.Signature.empty, None, "None"):
        assert "Returns" in sections(docstring(obj)), f"{name} returns {sig.return_annotation}: no Returns: section"


@pytest.mark.parametrize("name", ALL)
def test_no_entry_names_what_is_not_there(name):
    obj = resolve(name)
    found = sections(docstring(obj))
    sig = signature(obj)
    if found.get("Args"):
        assert sig is not None, f"{name} documents Args: but takes none"
        stale = [a for a in found["Args"] if a not in sig.parameters]
        assert not stale, f"{name}: Args: entries for parameters it does not take: {stale}"
    if found.get("Attributes"):
        assert isinstance(obj, type), f"{name}: Attributes: on a function"
        stale = [a for a in found["Attributes"] if a not in attributes(obj)]
        assert not stale, f"{name}: Attributes: entries for attributes it does not have: {stale}"


@pytest.mark.parametrize("name", [n for n in NAMES if isinstance(resolve(n), enum.EnumMeta)])
def test_every_enum_member_is_documented(name):
    cls = resolve(name)
    assert isinstance(cls, enum.EnumMeta)
    documented = sections(docstring(cls)).get("Attributes", [])
    missing = [m for m in cls.__members__ if m not in documented]
    assert not missing, f"{name}: no Attributes: entry for {missing}"


def test_the_sections_are_read_as_mkdocstrings_reads_them():
    def f(a: int, *rest: int, b: str = "", **options: int) -> int:
        """Sum.

        Args:
            a: One.
            *rest: More.
            b (str): Two;
                on two lines.
            **options: Others.

        Returns:
            The sum.

        Example:
            ```python
            x: int = f(1)
            ```
        """
        return a

    assert parameters(f) == ["a", "b"]
    assert sections(docstring(f)) == {"Args": ["a", "rest", "b", "options"], "Returns": [], "Example": []}
    assert docstring(gepetto.Usage) and not docstring(dataclasses.make_dataclass("Bare", [("x", int)]))
