"""The live progress display prints LM text as data: `[/INST]` or `[bold]` in a proposal is text, not markup."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from gepetto.progress import ProgressDisplay

HOSTILE = "[/INST] [bold]x"


def test_lm_text_in_events_is_printed_literally() -> None:
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False, color_system=None)
    record = SimpleNamespace(index=1, origin="reflection", component=HOSTILE, parents=(0,), mean=0.5)
    with ProgressDisplay(console, verbose=True) as display:
        display("plan", {"text": f"plan {HOSTILE}", "plan": SimpleNamespace(budget=10)})
        display("reflection", {"attempt": 0, "rejected": f"echo {HOSTILE}", "text": HOSTILE, "raw": HOSTILE})
        display("candidate", {"record": record, "best": 0.5, "front": [1]})
        display("phase", {"phase": "validation"})
        display("done", {})
    text = out.getvalue()
    assert f"plan {HOSTILE}" in text
    assert f"proposal rejected (echo {HOSTILE}): '{HOSTILE}'" in text
    assert f"reflection of '{HOSTILE}'" in text


def test_cli_show_prints_stored_text_literally(tmp_path) -> None:
    from typer.testing import CliRunner

    from gepetto.cli import app
    from gepetto.engine.state import CandidateRecord
    from gepetto.store.sqlite import RunStore
    from gepetto.types import Candidate

    store = RunStore(tmp_path / "runs.sqlite")
    store.create_run("r[bold]", {"task": "sim", "task_lm": "sim:task", "reflection_lm": HOSTILE, "budget": 10}, 0)
    store.put_candidate("r[bold]", CandidateRecord(0, Candidate(instruction=HOSTILE), (), "seed", 0, None,
                                                   {"v1": 0.5}, 1))
    store.close()
    for args in (["show", "r[bold]"], ["runs"]):
        res = CliRunner().invoke(app, [*args, "--storage", str(tmp_path / "runs.sqlite")])
        assert res.exit_code == 0, res.output
        assert "r[bold]" in res.output
    shown = CliRunner().invoke(app, ["show", "r[bold]", "--storage", str(tmp_path / "runs.sqlite")]).output
    assert HOSTILE in shown and f"reflection LM {HOSTILE}" in shown
