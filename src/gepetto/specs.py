"""Strategies named with their parameters: `Edit(rules=3)` in Python, `edit(rules=3)` in a config file or on the
command line (or the YAML table `{edit: {rules: 3}}`), and kept with a stored run in that written form, its
*spec*.

A built-in strategy with parameters ("knobs") is a dataclass deriving from `Knobs`, each knob a field made with
`knob(default, **bounds)` and documented in the class docstring's `Args:` section; the module that defines it
registers it under its option and name with `@builtin(option, name)` (engine/strategies.py, engine/proposers.py,
...). The class is the one source of what the CLI's help, the config errors and the docs say of it: its spec with
the knobs' defaults (`signature`), its docstring's first paragraph and each knob's `Args:` entry (`described`).
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import json
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import Field, TypeAdapter, ValidationError

# prefix of a task, an LM or a strategy that is a Python object given to gepetto.optimize() (not loadable from a
# name): `python:MODULE:QUALNAME`
PYTHON = "python:"

K = TypeVar("K", bound="Knobs")
_LITERAL_NAMES = {"true": True, "false": False, "null": None, "none": None}  # as YAML and JSON write them


class ConfigError(ValueError):
    """A configuration a user wrote is wrong; the message names the field and what is accepted."""


def knob(default: Any, **bounds: Any) -> Any:
    """A knob of a strategy: its default and its bounds (`ge`, `gt`, `le`, `lt`, as pydantic's); what it does is its
    entry in the `Args:` section of the class docstring."""
    return dataclasses.field(default=default, metadata={"bounds": bounds})


def knob_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The knobs of a strategy class, in the order they are declared (fields made with `knob`)."""
    return [f for f in dataclasses.fields(cls) if "bounds" in f.metadata]


def described(cls: type) -> tuple[str, dict[str, str]]:
    """What a strategy class's own docstring says of it (Google style): its first paragraph, on one line, and the
    entries of its `Args:` section, by name, each on one line."""
    doc = inspect.cleandoc(vars(cls).get("__doc__") or "")
    summary = " ".join(doc.split("\n\n", 1)[0].split())
    args: dict[str, list[str]] = {}
    section = None
    for line in doc.splitlines():
        if line.strip() and not line.startswith(" "):
            section = line.strip()
        elif section == "Args:" and line.strip():
            entry = re.fullmatch(r" {4}(\w+): (.*)", line)
            if entry:
                args[entry.group(1)] = [entry.group(2)]
            elif args:
                args[list(args)[-1]].append(line.strip())
    return summary, {name: " ".join(words) for name, words in args.items()}


def written(value: Any) -> str:
    """A knob's value as a config file writes it (`null`, `true`, `0.5`, `"text"`)."""
    return json.dumps(value)


def signature(cls: type[Knobs]) -> str:
    """A built-in's spec with each knob at its default, as a config file writes it: `paired(tolerance=0.0,
    retests=1)`; its bare name without knobs."""
    knobs = knob_fields(cls)
    return f"{cls.name}({', '.join(f'{f.name}={written(f.default)}' for f in knobs)})" if knobs else cls.name


def knobs_help(cls: type[Knobs]) -> str:
    """Each knob of a built-in with its default and what it does (its `Args:` entry), for a message."""
    helps = described(cls)[1]
    return "; ".join(f"{f.name} (default {written(f.default)}): {helps.get(f.name, '')}" for f in knob_fields(cls))


def strategies_help(option: str, intro: str, names: Sequence[str]) -> str:
    """The help of an option naming a strategy: `intro`, then each built-in of `names` (registered for `option`)
    with its signature and what it does (its docstring's first paragraph)."""
    entries = []
    for name in names:
        cls = strategy_class(option, name)
        summary = described(cls)[0]
        entries.append(f"{signature(cls)}: {summary[:1].lower()}{summary[1:]}")
    return " ".join([intro, *entries])


@functools.cache
def _checkers(cls: Any) -> list[tuple[str, TypeAdapter[Any]]]:
    hints = typing.get_type_hints(cls)
    form: Any = Annotated  # a runtime-built form: pydantic versions type TypeAdapter's argument differently
    return [(f.name, TypeAdapter(form[hints[f.name], Field(**f.metadata["bounds"])]))
            for f in knob_fields(cls)]


class Knobs:
    """Base of a built-in strategy with parameters: a dataclass whose `knob` fields are checked when it is made (a
    ConfigError names the knob) and written as `spec`. `bind(config)` gives the object a run uses (by default
    itself): a strategy that needs the loop's own options (the minibatch size, the seed) gets them there."""

    name: ClassVar[str] = ""  # its built-in name (set by `builtin`)

    def __post_init__(self) -> None:
        cls: Any = type(self)
        for field, checker in _checkers(cls):
            value = getattr(self, field)
            try:
                checked = checker.validate_python(value)
            except ValidationError as exc:
                why = "; ".join(e["msg"] for e in exc.errors())
                what = described(cls)[1].get(field)
                raise ConfigError(f"{self.name or type(self).__name__}: {field}={value!r}: {why}"
                                  + (f" ({field}: {what})" if what else "")) from None
            if checked is not value:  # e.g. 1 -> 1.0 for a float knob (set also on a frozen dataclass)
                object.__setattr__(self, field, checked)

    @property
    def spec(self) -> str:
        """How a file names this strategy: its name, with the knobs that differ from their defaults."""
        return format_spec(self.name, {f.name: getattr(self, f.name) for f in knob_fields(type(self))
                                       if getattr(self, f.name) != f.default})

    def knobs(self) -> dict[str, Any]:
        """Every knob and its value, in the order they are declared."""
        return {f.name: getattr(self, f.name) for f in knob_fields(type(self))}

    def bind(self, config: Any) -> Any:
        """The strategy a run with the engine options `config` (an EngineConfig) uses: this one."""
        return self

    @classmethod
    def from_params(cls: type[K], params: Mapping[str, Any]) -> K:
        """The strategy with these knobs; an unknown one is a ConfigError naming the closest and all of them."""
        names = [f.name for f in knob_fields(cls)]
        for key in params:
            if key not in names:
                close = difflib.get_close_matches(key, names, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                accepted = f"accepted: {knobs_help(cls)}" if names else "it takes none"
                raise ConfigError(f"{cls.name}: unknown parameter {key!r}{hint}; {accepted}")
        return cls(**params)


# option -> built-in name -> its class; filled by `builtin` as the modules defining them are imported
REGISTRY: dict[str, dict[str, type[Knobs]]] = {}


def builtin(option: str, name: str) -> Callable[[type[K]], type[K]]:
    """Registers a strategy class as the built-in `name` of `option` (a class may serve several options)."""

    def register(cls: type[K]) -> type[K]:
        if "name" not in cls.__dict__:
            cls.name = name
        REGISTRY.setdefault(option, {})[name] = cls
        return cls

    return register


@builtin("merge", "off")
@builtin("fewshot", "off")
@dataclasses.dataclass(frozen=True)
class Off(Knobs):
    """None: no merges (`merge: off`), or no few-shot demonstrations (`fewshot: off`)."""


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Name) and node.id.lower() in _LITERAL_NAMES:
        return _LITERAL_NAMES[node.id.lower()]
    return ast.literal_eval(node)


def parse_spec(value: Any) -> tuple[str, dict[str, Any]]:
    """(name, knobs) of a spec: "name", "name(knob=value, ...)" with values as Python literals (true, false, null
    too), or a table of one key, {name: {knob: value}} ({name: null}: no knob set). ValueError if it is none."""
    if isinstance(value, Mapping):
        if len(value) != 1:
            raise ValueError(f"a strategy given as a table has one key, its name, e.g. {{edit: {{rules: 3}}}}; got "
                             f"{dict(value)!r}")
        ((name, params),) = value.items()
        if not isinstance(name, str) or not (params is None or isinstance(params, Mapping)):
            raise ValueError(f"a strategy table maps its name to its parameters, e.g. {{edit: {{rules: 3}}}}; got "
                             f"{dict(value)!r}")
        return name, dict(params or {})
    if not isinstance(value, str):
        raise ValueError(f"a strategy is a name or name(parameter=value, ...), got {type(value).__name__}")
    m = re.fullmatch(r"\s*([A-Za-z_][\w-]*)\s*(?:\((.*)\))?\s*", value, re.S)
    try:
        if m is None:
            raise SyntaxError
        call = ast.parse(f"_({m.group(2) or ''})", mode="eval").body
        if not isinstance(call, ast.Call) or call.args or any(k.arg is None for k in call.keywords):
            raise SyntaxError
        return m.group(1), {str(k.arg): _literal(k.value) for k in call.keywords}
    except (SyntaxError, ValueError):
        raise ValueError(f"{value!r} is not a strategy: write NAME or NAME(parameter=value, ...), values as "
                         "numbers, true/false, null or 'quoted text'") from None


def format_spec(name: str, params: Mapping[str, Any]) -> str:
    """The written form of a spec: `name`, or `name(knob=value, ...)`."""
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in params.items())})" if params else name


def strategy_class(option: str, name: str) -> type[Knobs]:
    """The class registered as built-in `name` of `option`; a ConfigError names the closest and all of them."""
    known = REGISTRY.get(option, {})
    if name not in known:
        close = difflib.get_close_matches(name, list(known), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"unknown {option} {name!r}{hint}; accepted: {', '.join(sorted(known))}")
    return known[name]


def build(option: str, spec: Any) -> Knobs:
    """The strategy a spec (text, table or a Knobs object of `option`) stands for, checked."""
    if isinstance(spec, Knobs):
        if not is_builtin(option, spec):
            raise ConfigError(f"{option}: {type(spec).__name__} is no built-in {option.replace('_', ' ')}")
        return spec
    name, params = parse_spec(spec)
    return strategy_class(option, name).from_params(params)


def is_builtin(option: str, obj: Any) -> bool:
    """Whether `obj` is a built-in strategy of `option` (of the registered class itself, not a subclass)."""
    return isinstance(obj, Knobs) and type(obj) is REGISTRY.get(option, {}).get(obj.name)


def canonical(option: str, spec: Any) -> str:
    """A spec in its one written form (the knobs at their defaults left out), as a stored run keeps it."""
    return build(option, spec).spec


__all__ = ["REGISTRY", "ConfigError", "Knobs", "Off", "build", "builtin", "canonical", "described", "format_spec",
           "is_builtin", "knob", "knob_fields", "knobs_help", "parse_spec", "signature", "strategies_help",
           "strategy_class", "written"]
