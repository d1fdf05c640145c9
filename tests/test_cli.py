"""The gepetto command on a small simulated run: every command, config errors, exit codes."""

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from gepetto.cli import app

SIM = ["--task", "sim", "--task-lm", "sim:task", "--reflection-lm", "sim:reflection"]


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)

    return invoke


@pytest.fixture
def done_run(cli):
    res = cli("optimize", *SIM, "--budget", 80, "--run", "r1", "--storage", "runs.sqlite", "-q")
    assert res.exit_code == 0, res.output
    return res


def test_optimize_prints_the_result_and_stores_the_run(done_run):
    out = done_run.output
    assert "validation: seed 0.000 -> best" in out
    assert "Apply rule-" in out  # the evolved instruction is shown
    assert "gepetto show r1" in out


def test_runs_show_export_report(cli, done_run, tmp_path):
    runs = cli("runs", "--storage", "runs.sqlite")
    assert runs.exit_code == 0 and "r1" in runs.output and "finished" in runs.output
    show = cli("show", "r1", "--storage", "runs.sqlite")
    assert show.exit_code == 0
    assert "Pareto front" in show.output and "ledger" in show.output and "reflection" in show.output
    exported = cli("export", "r1", "--storage", "runs.sqlite")
    assert exported.exit_code == 0
    best = json.loads(exported.output)
    assert set(best) == {"instruction"} and "rule-" in best["instruction"]
    rep = cli("report", "r1", "-o", tmp_path / "r1.html", "--storage", "runs.sqlite")
    assert rep.exit_code == 0, rep.output
    html = (tmp_path / "r1.html").read_text()
    assert html.lstrip().lower().startswith("<!doctype html") and "rule-" in html


def test_resume_of_a_finished_run_replays_without_paying(cli, done_run):
    before = cli("export", "r1", "--storage", "runs.sqlite").output
    again = cli("optimize", "--run", "r1", "--storage", "runs.sqlite", "-q")
    assert again.exit_code == 0, again.output

    def line(out):
        return next(x for x in out.splitlines() if x.startswith("validation:")).split("; wall time")[0]

    assert line(again.output) == line(done_run.output)
    assert cli("export", "r1", "--storage", "runs.sqlite").output == before


def test_resume_with_other_settings_is_a_usage_error(cli, done_run):
    res = cli("optimize", "--run", "r1", "--storage", "runs.sqlite", "--seed", 7, "-q")
    assert res.exit_code == 2
    assert "exists with other settings for ['seed']" in res.output


def test_more_budget_on_resume_continues_the_run(cli, done_run):
    res = cli("optimize", "--run", "r1", "--storage", "runs.sqlite", "--budget", 200, "-q")
    assert res.exit_code == 0, res.output
    assert "/200 rollouts" in res.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--budget", "0"], "budget: Input should be greater than or equal to 1"),
        (["--task", "nope"], "unknown task 'nope'; accepted:"),
        (["--task-lm", "gpt4"], "task_lm:"),
        (["--target", "2"], "target_score: Input should be less than or equal to 1"),
    ],
)
def test_config_errors_name_the_field_and_exit_2(cli, args, message):
    res = cli("optimize", *SIM, *args, "--storage", "runs.sqlite", "-q")
    assert res.exit_code == 2
    assert message in res.output


def test_config_files_yaml_and_toml(cli, tmp_path):
    (tmp_path / "run.yaml").write_text("task: sim\ntask_lm: sim:task\nreflection_lm: sim:reflection\nbudget: 40\n")
    res = cli("optimize", "-c", tmp_path / "run.yaml", "--storage", "runs.sqlite", "--run", "y", "-q")
    assert res.exit_code == 0, res.output
    (tmp_path / "run.toml").write_text('task = "sim"\ntask_lm = "sim:task"\nreflection_lm = "sim:reflection"\n'
                                       "budget = 40\nbudgett = 3\n")
    res = cli("optimize", "-c", tmp_path / "run.toml", "--storage", "runs.sqlite", "-q")
    assert res.exit_code == 2
    assert "budgett: unknown option; accepted:" in res.output
    res = cli("optimize", "-c", tmp_path / "missing.yaml", "--storage", "runs.sqlite", "-q")
    assert res.exit_code == 2 and "does not exist" in res.output


def test_unknown_run_and_missing_store(cli, done_run):
    res = cli("show", "nope", "--storage", "runs.sqlite")
    assert res.exit_code == 2 and "no run named 'nope'" in res.output and "r1" in res.output
    res = cli("runs", "--storage", "elsewhere.sqlite")
    assert res.exit_code == 2 and "no run store" in res.output


def test_usage_error_exit_code(cli):
    assert cli("optimize", "--budget", "many").exit_code == 2
    assert cli("frobnicate").exit_code == 2


def test_task_options_from_the_command_line(cli):
    res = cli("optimize", *SIM, "--budget", 40, "--task-option", "kinds=2", "--run", "k2", "--storage", "s.sqlite",
              "-q")
    assert res.exit_code == 0, res.output
    from gepetto.store.sqlite import RunStore

    assert RunStore("s.sqlite").get_run("k2").config["task_options"] == {"kinds": 2}
    res = cli("optimize", *SIM, "--task-option", "nokeyvalue", "--storage", "s.sqlite", "-q")
    assert res.exit_code == 2 and "KEY=VALUE" in res.output


def _dying_task_lm(monkeypatch, answers):
    """Make `sim:task` answer `answers` calls, then fail like a dead endpoint (LMUnavailable)."""
    from gepetto.lm import names
    from gepetto.lm.base import LMUnavailable
    from gepetto.testing import sim

    class Dying(sim.SimTaskLM):
        async def complete(self, messages, **params):
            if self.calls >= answers:
                self.calls += 1
                raise LMUnavailable("sim-task: gave up after 7 attempts; last error: HTTP 503")
            return await super().complete(messages, **params)

    real = names.BACKENDS["sim"]
    dying = dataclasses.replace(real, build=lambda spec: Dying() if spec.model == "task" else real.builder()(spec))
    monkeypatch.setitem(names.BACKENDS, "sim", dying)  # the backend table: `sim:task` now builds Dying


def test_a_run_stopped_by_a_failing_lm_exits_non_zero_with_a_clear_message(cli, monkeypatch, tmp_path):
    # issue 11: the CLI printed the best so far and exited 0, as if the run had finished
    _dying_task_lm(monkeypatch, answers=20)
    (tmp_path / "run.yaml").write_text("max_lm_failures: 2\nlm_retry_pause: 0\n")
    res = cli("optimize", *SIM, "-c", "run.yaml", "--budget", 80, "--run", "r", "--storage", "runs.sqlite", "-q")
    assert res.exit_code == 3, res.output
    assert "the run stopped early: LM unavailable: 2 LM calls in a row failed" in res.output
    assert "to resume: gepetto optimize --run r" in res.output
    assert "validation: seed" in res.output  # the best so far is still shown
    runs = cli("runs", "--storage", "runs.sqlite")
    assert "interrupted" in runs.output  # resumable
    show = cli("show", "r", "--storage", "runs.sqlite")
    assert "stopped: LM unavailable: 2 LM calls in a row failed" in show.output


def test_normal_and_user_stops_keep_exit_code_0(cli, tmp_path):
    stop = tmp_path / "STOP"
    stop.write_text("")
    for extra in (["--budget", 80], ["--budget", 400, "--target-score", 0.5], ["--budget", 400, "--stop-file", stop]):
        res = cli("optimize", *SIM, *extra, "--storage", "runs.sqlite", "-q")
        assert res.exit_code == 0, res.output


def test_a_broken_metric_exits_non_zero_with_a_clear_message(cli, tmp_path):
    (tmp_path / "broken.py").write_text(
        "from gepetto import Task\nfrom gepetto.testing import sim\n\n"
        "def make_task():\n"
        "    t = sim.task()\n"
        "    return Task('broken', t.program, lambda ex, out, trace: None, t.seed_candidate, t.trainset, t.valset)\n")
    res = cli("optimize", "--task", "broken.py:make_task", "--task-lm", "sim:task", "--reflection-lm",
              "sim:reflection", "--budget", 80, "--run", "b", "--storage", "runs.sqlite", "-q")
    assert res.exit_code != 0 and "MetricError" in res.output and "metric" in res.output
    assert "failed" in cli("runs", "--storage", "runs.sqlite").output


def test_warnings_are_told_in_the_command_lines_words(monkeypatch, capsys):
    import warnings

    import gepetto.cli as cli

    def app():
        warnings.warn("run 'r' did not retrace its stored path on resume: [1 of 2]", RuntimeWarning, stacklevel=1)

    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # put back after the test
    monkeypatch.setattr(cli, "app", app)
    cli.main()
    err = capsys.readouterr().err
    assert err.startswith("warning: run 'r' did not retrace its stored path on resume: [1 of 2]")  # as written
    assert "RuntimeWarning" not in err and "test_cli.py" not in err  # no Python location
