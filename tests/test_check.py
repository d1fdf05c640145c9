"""Before anything is paid: `gepetto check` (and `optimize --dry-run`) loads the task, checks the LMs, runs the seed
on one example and prints the budget plan; errors in the user's code show their file and line (the whole traceback
with --debug) and exit 1, configuration errors 2, an LM that cannot serve 3; the simulated LMs refuse a task that is
not theirs."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gepetto.cli import app
from gepetto.testing import FakeOpenAIServer, sim

SIM_LMS = ["--task-lm", "sim:task", "--reflection-lm", "sim:reflection"]
ROUTER = Path(__file__).resolve().parents[1] / "examples" / "support_router.py"


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)

    return invoke


def test_check_prints_the_task_the_lms_the_seed_run_and_the_plan_and_stores_nothing(cli, tmp_path):
    res = cli("check", "--task", "sim", *SIM_LMS, "--budget", 90)
    assert res.exit_code == 0, res.output
    out = res.output
    assert "12 train, 12 validation, 12 test examples; components: instruction" in out
    assert "sim:task: simulated" in out
    assert "example val-0 (val): score 0.000" in out and "feedback: Wrong: expected answer-0" in out
    assert "budget 90 rollouts: seed validation 12; each proposal costs up to 3" in out
    assert "ready" in out and not list(tmp_path.iterdir())  # no run store, no cache: nothing written
    dry = cli("optimize", "--task", "sim", *SIM_LMS, "--budget", 90, "--dry-run")
    assert dry.exit_code == 0 and "budget 90 rollouts" in dry.output and not list(tmp_path.iterdir())
    other = cli("check", "--task", "sim", *SIM_LMS, "--example", "train-3", "--preset", "light")
    assert "example train-3 (train)" in other.output and "preset light" in other.output
    assert "budget 96 rollouts" in other.output  # 12 + 8 proposals x 6 + 3 validations x 12
    assert cli("check", "--task", "sim", *SIM_LMS, "--example", "nope").exit_code == 2


def test_check_of_a_stored_run_says_it_would_resume_it(cli):
    assert cli("optimize", "--task", "sim", *SIM_LMS, "--budget", 40, "--run", "r", "-q").exit_code == 0
    res = cli("check", "--run", "r")
    assert res.exit_code == 0, res.output
    assert "'r' exists in gepetto.sqlite (finished): `gepetto optimize --run r` resumes it" in res.output
    assert "budget 40 rollouts" in res.output  # its stored options


def test_the_simulated_lms_refuse_a_task_that_is_not_theirs(cli):
    res = cli("check", "--task", f"{ROUTER}:make_task", *SIM_LMS)
    assert res.exit_code == 3
    assert "sim:task is a simulated LM: it answers only for the simulated task" in " ".join(res.output.split())
    assert "warning: sim:reflection is simulated and this is not the simulated task" in res.output
    run = cli("optimize", "--task", f"{ROUTER}:make_task", *SIM_LMS, "--budget", 40, "-q")
    assert run.exit_code == 3  # it used to score 0 everywhere and report a stalled run
    assert "LM unavailable: LMSetupError: sim:task is a simulated LM" in " ".join(run.output.split())


def test_the_simulated_reflection_lm_refuses_too_and_strict_false_answers_as_before():
    import asyncio

    from gepetto.lm.base import LMSetupError

    prompt = [{"role": "user", "content": "<current_instruction>\nRoute it.\n</current_instruction>\n[Input]\nHi"}]
    with pytest.raises(LMSetupError, match="sim:reflection is a simulated LM: it writes instructions only"):
        asyncio.run(sim.SimReflectionLM(name="sim:reflection").complete(prompt))
    loose = asyncio.run(sim.SimReflectionLM(strict=False).complete(prompt))
    assert "Route it." in loose.text
    other = [{"role": "system", "content": "Route it."}, {"role": "user", "content": "My card was charged twice."}]
    with pytest.raises(LMSetupError, match=r"and this task sent 'My card was charged twice\.'"):
        asyncio.run(sim.SimTaskLM().complete(other))
    from gepetto.lm.names import make_lm

    assert asyncio.run(make_lm("sim:task?strict=false").complete(other)).text == "?"


BROKEN = '''from gepetto import Task
from gepetto.testing import sim


def load_rows(path):
    return None


def make_task():
    t = sim.task()
    rows = load_rows("rows.csv")
    first = rows[0]
    return Task("broken", t.program, t.metric, t.seed_candidate, t.trainset, t.valset)
'''


def test_an_error_in_make_task_shows_the_users_file_line_and_exits_1(cli, tmp_path):
    (tmp_path / "broken.py").write_text(BROKEN)
    for command in ("optimize", "check"):
        res = cli(command, "--task", "broken.py:make_task", *SIM_LMS)
        assert res.exit_code == 1, res.output
        out = res.output
        assert out.startswith("error:")  # nothing above the error (no empty progress bar)
        assert "make_task raised TypeError: 'NoneType' object is not subscriptable" in out
        assert f'File "{tmp_path / "broken.py"}", line 12, in make_task' in out and "first = rows[0]" in out
        assert "Traceback" not in out and "--debug shows the whole traceback" in out
    for args in (["optimize", "--debug"], ["--debug", "check"]):  # after the command, or before it for any command
        res = cli(*args, "--task", "broken.py:make_task", *SIM_LMS)
        assert res.exit_code == 1 and "Traceback (most recent call last)" in res.output
        assert 'line 12, in make_task' in res.output and "usertask.py" in res.output  # the whole of it


def test_errors_in_a_task_file_and_their_exit_codes(cli, tmp_path):
    (tmp_path / "syntax.py").write_text("def make_task(:\n    pass\n")
    res = cli("optimize", "--task", "syntax.py:make_task", *SIM_LMS)
    assert res.exit_code == 1 and "failed to import: SyntaxError" in res.output
    assert f'File "{tmp_path / "syntax.py"}", line 1' in res.output and "def make_task(:" in res.output
    # make_task's own way to say its options are wrong is a configuration error (2), like gepetto's
    (tmp_path / "picky.py").write_text("import gepetto\n\ndef make_task(n_val=5):\n"
                                       "    raise gepetto.ConfigError(f'n_val={n_val}: at most 4 here')\n")
    res = cli("optimize", "--task", "picky.py:make_task", *SIM_LMS, "--task-option", "n_val=9")
    assert res.exit_code == 2 and "n_val=9: at most 4 here" in res.output
    res = cli("optimize", "--task", "picky.py:make_task", *SIM_LMS, "--task-option", "n_vall=3")
    assert res.exit_code == 2 and "'n_vall' (did you mean 'n_val'?)" in res.output


METRIC_BUG = '''from gepetto import Task
from gepetto.testing import sim


def metric(example, output, trace):
    expected = example.gold.upper
    return float(output.startswith(expected))


def make_task():
    t = sim.task()
    return Task("bug", t.program, metric, t.seed_candidate, t.trainset, t.valset)
'''


def test_a_metric_that_always_fails_exits_1_and_check_shows_where(cli, tmp_path):
    (tmp_path / "bug.py").write_text(METRIC_BUG)
    res = cli("optimize", "--task", "bug.py:make_task", *SIM_LMS, "--budget", 40, "-q")
    assert res.exit_code == 1 and "MetricError" in res.output and "`gepetto check`" in res.output
    res = cli("check", "--task", "bug.py:make_task", *SIM_LMS)
    assert res.exit_code == 1 and "the metric raised TypeError" in res.output
    assert f'File "{tmp_path / "bug.py"}", line 7, in metric' in res.output


def test_an_lm_that_cannot_serve_exits_3_and_ping_reaches_an_endpoint(cli, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    res = cli("check", "--task", "sim", "--task-lm", "openai:gpt-4.1-mini", "--reflection-lm", "sim:reflection")
    assert res.exit_code == 3 and "set the API key in the environment variable OPENAI_API_KEY" in res.output
    with FakeOpenAIServer() as server:
        res = cli("check", "--task", "sim", "--task-lm", f"openai:fake@{server.url}", "--reflection-lm",
                  "sim:reflection", "--ping", "--cache", "off")
        assert res.exit_code == 0, res.output
        assert "answered the model list" in res.output and "1 models" in res.output
        assert len(server.requests) == 1  # the seed's run; the ping asked for the model list, which costs nothing
    dead = f"openai:fake@{server.url}"  # stopped: nothing listens there now
    res = cli("check", "--task", "sim", "--task-lm", dead, "--reflection-lm", "sim:reflection", "--ping")
    assert res.exit_code == 3 and "connection failed" in res.output
