"""The docs site: its API reference documents every name of `gepetto.__all__` and every event; its options tables
come from EngineConfig itself. (`mkdocs build --strict` itself runs in .ci/run.)"""

import re
from pathlib import Path

import gepetto
from gepetto.engine import events as ev

DOCS = Path(__file__).resolve().parent.parent / "docs"


def documented() -> set[str]:
    """The objects the reference pages render: `::: path`, or each name of its `members: [...]` option."""
    out: set[str] = set()
    for page in (DOCS / "reference").glob("*.md"):
        for path, options in re.findall(r"^::: (\S+)\n((?:    .*\n)*)", page.read_text(), re.M):
            members = re.search(r"members: \[([^\]]*)\]", options)
            if members and "show_root_heading: false" in options:  # a module shown by some of its members
                out.update(f"{path}.{m.strip()}" for m in members.group(1).split(","))
            else:
                out.add(path)
    return out


def path_of(obj: object) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"  # type: ignore[attr-defined]


def test_every_public_name_is_in_the_api_reference():
    pages = documented()
    missing = []
    for name in gepetto.__all__:
        path = path_of(getattr(gepetto, name))
        if path not in pages and path.rsplit(".", 1)[0] not in pages:  # a whole module is rendered with its members
            missing.append(f"{name} ({path})")
    assert not missing, f"add to docs/reference/*.md: {missing}"


def test_every_event_is_in_the_api_reference():
    pages = documented()
    events = [cls for cls in vars(ev).values() if isinstance(cls, type) and issubclass(cls, ev.Event)]
    assert len(events) > 10
    assert all(path_of(cls) in pages or cls.__module__ in pages for cls in events)


def test_the_options_tables_list_every_engine_option_with_its_description():
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    page = hooks.on_page_markdown(f"# Options\n\n{hooks.MARKER}\n")
    assert hooks.MARKER not in page
    for name, field in gepetto.EngineConfig.model_fields.items():
        row = next((line for line in page.splitlines() if line.startswith(f"| `{name}` |")), None)
        assert row is not None, name
        assert (field.description or "").split("|")[0].strip()[:40] in row.replace("\\|", "|")
    assert "### Budget and stopping" in page and "| `budget` | int | 200 |" in page
