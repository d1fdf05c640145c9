"""Writes gepetto/_engine_options.py, the typed dictionary of the engine's keyword arguments (`EngineOptions`), from
`EngineConfig`'s fields, their one source: run `python -m gepetto._gen_options` after changing a field.

Each keyword takes its field's type as a caller may pass it (a `dict` as any Mapping, a `tuple[X, ...]` as any
Sequence), what the field's `python_types` add (a strategy object, ...), and None (the config's value).
"""

from __future__ import annotations

import ast
import builtins
import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from gepetto.config import EngineConfig

COMMAND = "python -m gepetto._gen_options"
TARGET = Path(__file__).with_name("_engine_options.py")
# where the names the keywords' types use are imported from (the generated module imports those it uses)
IMPORTS = {
    "collections.abc": ("Callable", "Mapping", "Sequence"),
    "typing": ("Any", "TypedDict"),
    "gepetto.engine.proposers": ("Proposer",),
    "gepetto.engine.strategies": ("Acceptance", "ComponentSelector", "MinibatchSampler", "ParentSelector"),
    "gepetto.program": ("Executor",),
    "gepetto.specs": ("Knobs",),
}
DOC = """The loop's options as keyword arguments, one per `EngineConfig` field (which documents each); None, or a
    keyword left out, is the config's value. A strategy takes its spec or, in Python, an object: a built-in one
    (`gepetto.strategies.Edit(rules=3)`) or one of your own (docs/strategies.md)."""


def _members(node: ast.expr) -> list[ast.expr]:
    """The members of a union written with `|`."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _members(node.left) + _members(node.right)
    return [node]


def _widened(node: ast.expr) -> ast.expr:
    """What a caller may pass for a value of this type: a dict[K, V] as a Mapping[K, V], a tuple[X, ...] as a
    Sequence[X] (the config stores it as the field's type)."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if node.value.id == "dict":
            return ast.Subscript(ast.Name("Mapping"), node.slice)
        if node.value.id == "tuple" and len(args) == 2 and ast.unparse(args[1]) == "...":
            return ast.Subscript(ast.Name("Sequence"), args[0])
    return node


def keyword_type(annotation: str, python_types: Sequence[str] = ()) -> str:
    """The type of a keyword for a field of type `annotation` (as written in config.py): the field's type widened,
    then `python_types`, each once, then None."""
    members = [ast.unparse(_widened(m)) for m in _members(ast.parse(annotation, mode="eval").body)]
    return " | ".join([*dict.fromkeys(m for m in [*members, *python_types] if m != "None"), "None"])


def render() -> str:
    """The text of gepetto/_engine_options.py for the EngineConfig of this checkout."""
    annotations = inspect.get_annotations(EngineConfig)  # as written (config.py's annotations are postponed)
    types = {}
    for name, field in EngineConfig.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        types[name] = keyword_type(annotations[name], cast("list[str]", extra.get("python_types", [])))
    used = {"TypedDict"} | {node.id for t in types.values() for node in ast.walk(ast.parse(t))
                            if isinstance(node, ast.Name)}
    unknown = used - {n for names in IMPORTS.values() for n in names} - set(dir(builtins))
    if unknown:
        raise ValueError(f"add the module of {', '.join(sorted(unknown))} to IMPORTS in {__file__}")
    imports = [f"from {module} import {', '.join(n for n in names if n in used)}"
               for module, names in IMPORTS.items() if used & set(names)]
    stdlib = [line for line in imports if not line.startswith("from gepetto")]
    return "\n".join([
        f"# Generated from gepetto.config.EngineConfig by `{COMMAND}`: do not edit.",
        "from __future__ import annotations", "", *stdlib, "", *imports[len(stdlib):], "", "",
        "class EngineOptions(TypedDict, total=False):", f'    """{DOC}"""', "",
        *(f"    {name}: {t}" for name, t in types.items()), ""])


def main() -> None:
    TARGET.write_text(render())  # (next to this module: in an editable install, the checkout's src/gepetto)
    print(f"wrote {TARGET}")


if __name__ == "__main__":
    main()
