"""mkdocs hook: the options tables of the API reference, generated from EngineConfig's fields, and the built-in
strategies' parameters, from the strategy classes (their one source)."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

# this checkout's gepetto, not another install (mkdocs restores sys.path after loading a hook: import it now)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from gepetto.config import SPECS, EngineConfig  # noqa: E402
from gepetto.specs import REGISTRY, knob_fields  # noqa: E402

MARKER = "<!-- engine-options -->"
SPECS_MARKER = "<!-- strategy-specs -->"


def _type(annotation: Any) -> str:
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    text = text.replace("typing.", "").replace("gepetto.program.", "")
    return text.replace("str | Executor", "str or an Executor")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def options_tables() -> str:
    """One table per CLI group: option, type, default, what it does."""
    groups: dict[str, list[str]] = {}
    for name, field in EngineConfig.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        default = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
        groups.setdefault(str(extra.get("group", "Other")), []).append(
            f"| `{name}` | {_cell(_type(field.annotation))} | {_cell(repr(default))} | "
            f"{_cell(field.description or '')} |")
    return "\n\n".join(f"### {group}\n\n| option | type | default | what |\n|---|---|---|---|\n" + "\n".join(rows)
                       for group, rows in groups.items())


def specs_tables() -> str:
    """One table per option that names a strategy: each built-in, its parameters with their defaults, what it is."""
    out = []
    for option, names in SPECS.items():
        rows = []
        for name in names:
            cls = REGISTRY[option][name]
            params = ", ".join(f"{f.name}={f.default!r}" for f in knob_fields(cls))
            knobs = " ".join(f"`{f.name}`: {f.metadata['description']}" for f in knob_fields(cls))
            what = " ".join(inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0].split())
            spec = f"{name}({params})" if params else name
            rows.append(f"| `{spec}` | {_cell(what + (' ' + knobs if knobs else ''))} |")
        out.append(f"### `{option}`\n\n| spec | what |\n|---|---|\n" + "\n".join(rows))
    return "\n\n".join(out)


def on_page_markdown(markdown: str, **_: Any) -> str:
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, options_tables())
    return markdown.replace(SPECS_MARKER, specs_tables()) if SPECS_MARKER in markdown else markdown
