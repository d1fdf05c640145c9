"""mkdocs hook: the options tables of the API reference, generated from EngineConfig's fields, and the built-in
strategies' parameters, from the strategy classes (their one source)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# this checkout's gepetto, not another install (mkdocs restores sys.path after loading a hook: import it now)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from gepetto.config import SPECS, EngineConfig  # noqa: E402
from gepetto.specs import REGISTRY, described, knob_fields, signature  # noqa: E402

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
    """One table per option that names a strategy: each built-in's spec with its parameters' defaults, what it is
    and what each parameter does (its class's docstring)."""
    out = []
    for option, names in SPECS.items():
        rows = []
        for name in names:
            cls = REGISTRY[option][name]
            summary, helps = described(cls)
            knobs = " ".join(f"`{f.name}`: {helps[f.name]}" for f in knob_fields(cls))
            rows.append(f"| `{signature(cls)}` | {_cell(summary + (' ' + knobs if knobs else ''))} |")
        out.append(f"### `{option}`\n\n| spec | what |\n|---|---|\n" + "\n".join(rows))
    return "\n\n".join(out)


def on_page_markdown(markdown: str, **_: Any) -> str:
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, options_tables())
    return markdown.replace(SPECS_MARKER, specs_tables()) if SPECS_MARKER in markdown else markdown
