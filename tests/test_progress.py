"""The live progress display prints LM text as data: `[/INST]` or `[bold]` in a proposal is text, not markup."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from gepetto.engine import events as ev
from gepetto.lm.base import LMUnavailable
from gepetto.progress import ProgressDisplay

HOSTILE = "[/INST] [bold]x"


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=200, force_terminal=False, color_system=None), out


def test_lm_text_in_events_is_printed_literally() -> None:
    console, out = _console()
    record = SimpleNamespace(index=1, origin="reflection", component=HOSTILE, parents=(0,), mean=0.5)
    with ProgressDisplay(console, verbose=True) as display:
        display(ev.PlanMade(SimpleNamespace(budget=10, describe=lambda: f"plan {HOSTILE}")))
        display(ev.ReflectionAnswered(0, ev.Outcome.ECHO, HOSTILE, HOSTILE))
        display(ev.ReflectionFailed(f"boom {HOSTILE}"))
        display(ev.CandidateAdded(record, 0.5, (1,)))
        display(ev.PhaseStarted("validation"))
        display(ev.LMFailed(f"LMUnavailable: {HOSTILE}", 1, 5.0))
        display(ev.RunEnded(SimpleNamespace()))
    text = out.getvalue()
    assert f"plan {HOSTILE}" in text
    assert f"proposal rejected (echoes the examples): '{HOSTILE}'" in text
    assert f"reflection failed: boom {HOSTILE}" in text
    assert f"reflection of '{HOSTILE}'" in text
    assert f"LMUnavailable: {HOSTILE}" in text


def test_lm_outages_are_shown_even_without_verbose() -> None:
    # issue 11: the display ignored `lm_unavailable` events, so a failing endpoint looked like a stalled run
    console, out = _console()
    with ProgressDisplay(console) as display:
        display(ev.LMFailed("LMUnavailable: sim-task: HTTP 503", 1, 5.0))
        display(ev.LMFailed("LMUnavailable: sim-task: HTTP 503", 2, 5.0))
        display(ev.LMFailed("AuthenticationError: HTTP 401", 3, None))
    text = out.getvalue()
    assert "LM unavailable (1 in a row): LMUnavailable: sim-task: HTTP 503; retrying in 5s" in text
    assert "LM unavailable (2 in a row)" in text
    assert "LM unavailable (3 in a row): AuthenticationError: HTTP 401; stopping the run (resumable)" in text


def test_a_run_with_a_failing_endpoint_shows_each_retry() -> None:
    # end to end: the engine's events reach the display while the task LM fails, then answers again
    import gepetto
    from gepetto.testing import sim

    class Flaky(sim.SimTaskLM):
        n = 0

        async def complete(self, messages, **params):
            Flaky.n += 1
            if Flaky.n in (3, 4):
                raise LMUnavailable("sim-task: gave up after 7 attempts; last error: HTTP 503")
            return await super().complete(messages, **params)

    console, out = _console()
    task = sim.task()
    with ProgressDisplay(console) as display:
        result = gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                                  program=task.program, task_lm=Flaky(), reflection_lm=sim.SimReflectionLM(),
                                  budget=40, lm_retry_pause=0, max_concurrency=1, callbacks=[display])
    text = out.getvalue()
    assert text.count("LM unavailable") == 2 and "retrying in 0s" in text
    assert "(2 in a row)" in text and result.rollouts_used > 0


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


def _library_run(**kw):
    import gepetto
    from gepetto.testing import sim

    task = sim.task()
    return gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                            program=task.program, task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(),
                            budget=40, **kw)


def test_a_library_run_shows_the_cli_display_in_a_terminal(monkeypatch, capsys) -> None:
    # issue 40: `python my_script.py` printed nothing until the run returned
    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    result = _library_run()
    err = capsys.readouterr().err
    assert "budget 40 rollouts: seed validation 12" in err  # the plan, as the CLI prints it
    assert "candidate 1 (reflection of 'instruction', parents [0]): validation" in err
    assert result.rollouts_used > 12


def test_no_display_without_a_terminal_or_with_progress_false(monkeypatch, capsys) -> None:
    _library_run()  # stderr is not a terminal here (captured): scripts and logs stay clean
    assert capsys.readouterr().err == ""
    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    _library_run(progress=False)
    assert capsys.readouterr().err == ""
    _library_run(progress=True, callbacks=[ProgressDisplay(quiet=True)])  # asked for: shown beside one's own
    assert "candidate 1 (reflection" in capsys.readouterr().err


def test_a_display_among_the_callbacks_is_not_doubled(monkeypatch, capsys) -> None:
    import gepetto

    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    console, out = _console()
    with gepetto.ProgressDisplay(console) as mine:  # exported from the package
        _library_run(callbacks=[mine])
    assert "candidate 1 (reflection" in out.getvalue()
    assert capsys.readouterr().err == ""  # the default display stood aside for the user's own


def test_nothing_is_shown_before_the_run_has_a_plan() -> None:
    # a run refused while it loads (a config or task error) leaves no empty progress bar above its error
    console, out = _console()
    with ProgressDisplay(console):
        pass
    assert out.getvalue() == ""
