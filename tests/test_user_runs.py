"""A program of the user's own as a stored run: `gepetto.optimize(..., storage=, run=)` and
`gepetto optimize --task file.py:make_task`, on the support-router example with scripted LMs."""

import asyncio
import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import gepetto
from gepetto.cli import app
from gepetto.engine.events import RolloutFinished
from gepetto.store.sqlite import RunStore

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "support_router.py"
KILL = Path(__file__).parent / "helpers" / "kill_user_run.py"
_spec = importlib.util.spec_from_file_location("support_router", EXAMPLE)
router = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(router)


def optimize(storage, run="r", task=None, **kw):
    """The example through the Python API, stored, with scripted LMs."""
    task = task or router.make_task()
    options = {"valset": task.valset, "program": task.program, "task_lm": router.scripted_task_lm(),
               "reflection_lm": router.scripted_reflection_lm(), "budget": 150, "max_concurrency": 4, **kw}
    return gepetto.optimize(task.seed_candidate, task.trainset, task.metric, storage=storage, run=run, **options)


def same(a, b):
    assert a.best_candidate == b.best_candidate and a.best_score == b.best_score
    assert [c.to_dict() for c in a.candidates] == [c.to_dict() for c in b.candidates]
    assert a.rollouts_used == b.rollouts_used and a.pareto_front == b.pareto_front


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """An uninterrupted stored run: what every interrupted and resumed run must end as."""
    storage = tmp_path_factory.mktemp("whole") / "s.sqlite"
    result = optimize(storage)
    assert result.best_score > result.seed_score  # the example does improve with the scripted LMs
    assert len(result.candidates) > 3
    return storage, result


def test_a_stored_run_holds_every_rollout_candidate_and_reflection_answer(whole):
    storage, result = whole
    store = RunStore(storage)
    info = store.get_run("r")
    assert info.status == "finished"
    assert info.config["task"] == "python:support_router:program"  # a user program, not a built-in task
    assert info.config["task_lm"] == "python:scripted-router-task" and info.config["cache"] == "off"
    assert store.count_rollouts("r") == result.rollouts_used
    assert len(store.candidates("r")) == len(result.candidates)
    assert store._db.execute("SELECT COUNT(*) FROM lm_answers WHERE run='r'").fetchone()[0] > 0
    assert list(store.examples("r", "val")) == [e.id for e in router.make_task().valset]


def test_stopped_by_a_stop_file_and_resumed_equals_an_uninterrupted_run(whole, tmp_path):
    stop = tmp_path / "stop"
    seen = []

    def hook(event):
        if isinstance(event, RolloutFinished):
            seen.append(1)
            if len(seen) == 40:
                stop.touch()

    stopped = optimize(tmp_path / "s.sqlite", stop_file=str(stop), callbacks=hook)
    assert stopped.rollouts_used < whole[1].rollouts_used
    stop.unlink()
    same(optimize(tmp_path / "s.sqlite", stop_file=str(stop)), whole[1])


def test_killed_at_random_points_and_resumed_equals_an_uninterrupted_run(whole, tmp_path):
    storage = tmp_path / "killed.sqlite"
    for n in sorted(random.Random(12).sample(range(1, whole[1].rollouts_used - 20), 3)):
        killed = subprocess.run([sys.executable, str(KILL), str(storage), "r", str(n)], capture_output=True,
                                text=True, timeout=120)
        assert killed.returncode == -9, killed.stderr
    final = subprocess.run([sys.executable, str(KILL), str(storage), "r", "-1"], capture_output=True, text=True,
                           timeout=120)
    assert final.returncode == 0, final.stderr
    same(optimize(storage), whole[1])  # a finished run: replayed from the store, nothing paid again
    assert RunStore(storage).count_rollouts("r") == whole[1].rollouts_used


def test_async_api_stores_and_resumes_the_same_way(whole, tmp_path):
    task = router.make_task()

    async def main():
        return await gepetto.optimize_async(
            task.seed_candidate, task.trainset, task.metric, valset=task.valset, program=task.program,
            task_lm=router.scripted_task_lm(), reflection_lm=router.scripted_reflection_lm(), budget=150,
            max_concurrency=4, storage=tmp_path / "a.sqlite", run="r")

    same(asyncio.run(main()), whole[1])
    assert RunStore(tmp_path / "a.sqlite").get_run("r").status == "finished"


def test_resume_refuses_another_seed_other_examples_or_a_path_changing_option(whole, tmp_path):
    storage = tmp_path / "s.sqlite"
    optimize(storage, budget=60)
    task = router.make_task()
    other_seed = gepetto.Task(task.name, task.program, task.metric, task.seed_candidate.replace("route", "Route it."),
                              task.trainset, task.valset)
    with pytest.raises(gepetto.ConfigError, match=r"another seed candidate \(components that differ: \['route'\]\)"):
        optimize(storage, task=other_seed, budget=60)
    relabelled = [gepetto.Example(e.inputs, gold="account", id=e.id) if i == 0 else e
                  for i, e in enumerate(task.trainset)]
    fewer = gepetto.Task(task.name, task.program, task.metric, task.seed_candidate, relabelled, task.valset[:-1])
    with pytest.raises(gepetto.ConfigError, match=r"other examples \(train: 1 changed \('sr-\d\d'\); val: 1 gone"):
        optimize(storage, task=fewer, budget=60)
    with pytest.raises(gepetto.ConfigError, match=r"other settings for \['minibatch_size'\]"):
        optimize(storage, budget=60, minibatch_size=2)
    # the refusals changed nothing: the run resumes, and more budget takes it further
    more = optimize(storage, budget=150)
    assert more.budget == 150 and more.rollouts_used > 60
    assert RunStore(storage).get_run("r").config["budget"] == 150


def test_without_storage_nothing_is_stored_and_run_needs_storage(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    task = router.make_task()
    result = gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                              program=task.program, task_lm=router.scripted_task_lm(),
                              reflection_lm=router.scripted_reflection_lm(), budget=60)
    assert result.rollouts_used <= 60 and not list(tmp_path.iterdir())
    with pytest.raises(TypeError, match="give storage= too"):
        gepetto.optimize(task.seed_candidate, task.trainset, task.metric, program=task.program, run="r")


# ---- the command line ------------------------------------------------------------------------------------

@pytest.fixture
def cli(tmp_path, monkeypatch):
    """CliRunner in tmp_path; the LM names sim:task and sim:reflection stand for the example's scripted LMs."""
    from gepetto.lm import names

    monkeypatch.chdir(tmp_path)
    scripted = {"sim:task": router.scripted_task_lm, "sim:reflection": router.scripted_reflection_lm}
    monkeypatch.setattr(names, "make_lm", lambda name: scripted[name]())
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)

    return invoke


LMS = ["--task-lm", "sim:task", "--reflection-lm", "sim:reflection"]


def _validation_line(output):
    return next(x for x in output.splitlines() if x.startswith("validation:")).split("; wall time")[0]


def test_a_python_run_is_seen_by_runs_show_report_export(cli, whole, tmp_path):
    storage = whole[0]
    runs = cli("runs", "--storage", storage)
    assert runs.exit_code == 0 and "python:support_router:program" in runs.output and "finished" in runs.output
    show = cli("show", "r", "--storage", storage)
    assert show.exit_code == 0, show.output
    assert "task python:support_router:program" in show.output and "Pareto front" in show.output
    assert json.loads(cli("export", "r", "--storage", storage).output) == whole[1].best_candidate.to_dict()
    rep = cli("report", "r", "-o", tmp_path / "r.html", "--storage", storage)
    assert rep.exit_code == 0, rep.output
    assert "goes to" in (tmp_path / "r.html").read_text()  # the evolved route rules are in the report
    again = cli("optimize", "--run", "r", "--storage", storage, "-q")
    assert again.exit_code == 2 and "resume the run by calling gepetto.optimize() again" in again.output


def test_cli_optimizes_a_task_target_and_resumes_it_by_name(cli, tmp_path):
    res = cli("optimize", "--task", f"{EXAMPLE}:make_task", *LMS, "--budget", 120, "--task-option", "n_val=6",
              "--run", "router", "--storage", "s.sqlite", "-q")
    assert res.exit_code == 0, res.output
    assert "A problem about" in res.output
    config = RunStore("s.sqlite").get_run("router").config
    assert config["task"] == f"{EXAMPLE}:make_task" and config["task_options"] == {"n_val": 6}
    assert len(RunStore("s.sqlite").examples("router", "val")) == 6
    again = cli("optimize", "--run", "router", "--storage", "s.sqlite", "-q")  # re-loads the same target
    assert again.exit_code == 0, again.output
    assert _validation_line(again.output) == _validation_line(res.output)
    changed = cli("optimize", "--run", "router", "--task-option", "n_val=7", "--storage", "s.sqlite", "-q")
    assert changed.exit_code == 2 and "other settings for ['task_options']" in changed.output


def test_cli_task_target_as_a_relative_path_and_as_a_module(cli, tmp_path, monkeypatch):
    (tmp_path / "mytasks.py").write_text(EXAMPLE.read_text())
    res = cli("optimize", "--task", "mytasks.py:make_task", *LMS, "--budget", 40, "--run", "f", "--storage",
              "s.sqlite", "-q")
    assert res.exit_code == 0, res.output
    assert RunStore("s.sqlite").get_run("f").config["task"] == f"{tmp_path / 'mytasks.py'}:make_task"  # absolute
    monkeypatch.syspath_prepend(str(tmp_path))
    res = cli("optimize", "--task", "mytasks:make_task", *LMS, "--budget", 40, "--run", "m", "--storage",
              "s.sqlite", "-q")
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("missing.py:make_task", "missing.py does not exist"),
        ("{example}:make_tsak", "has no attribute 'make_tsak' (it has: "),
        ("{example}:TEAMS", "is a tuple; it must be a gepetto.Task or a function returning one"),
        ("{example}:examples", "returned a list; it must return a gepetto.Task"),
        ("no_such_module_xyz:make_task", "cannot import module 'no_such_module_xyz'"),
        ("nope", "unknown task 'nope'; accepted:"),
    ],
)
def test_cli_task_target_errors_are_clear_and_exit_2(cli, target, message):
    res = cli("optimize", "--task", target.format(example=EXAMPLE), *LMS, "--storage", "s.sqlite", "-q")
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split())
    assert not RunStore("s.sqlite").list_runs()  # a refused start leaves no run behind


def test_cli_task_options_must_fit_the_function(cli):
    res = cli("optimize", "--task", f"{EXAMPLE}:make_task", *LMS, "--task-option", "colour=red", "--storage",
              "s.sqlite", "-q")
    assert res.exit_code == 2 and "cannot be called with the task options ['colour']" in " ".join(res.output.split())
    res = cli("optimize", "--task", f"{EXAMPLE}:make_task", *LMS, "--n-train", 5, "--storage", "s.sqlite", "-q")
    assert res.exit_code == 2 and "options of the built-in tasks" in res.output


def test_lm_names_work_too_and_engine_options_are_stored_and_compared(tmp_path):
    from gepetto.testing import sim

    task = sim.task(kinds=4)
    kw = {"program": task.program, "valset": task.valset, "task_lm": "sim:task", "reflection_lm": "sim:reflection",
          "budget": 60, "reflection_attempts": 2, "storage": tmp_path / "s.sqlite", "run": "named"}
    first = gepetto.optimize(task.seed_candidate, task.trainset, task.metric, **kw)
    config = RunStore(tmp_path / "s.sqlite").get_run("named").config
    assert config["task_lm"] == "sim:task" and config["cache"] == "auto"  # names: the response cache is on
    assert config["reflection_attempts"] == 2 and "engine" not in config  # every option a field, by its name
    same(gepetto.optimize(task.seed_candidate, task.trainset, task.metric, **kw), first)
    with pytest.raises(gepetto.ConfigError, match=r"other settings for \['reflection_attempts'\]"):
        gepetto.optimize(task.seed_candidate, task.trainset, task.metric, **{**kw, "reflection_attempts": 3})
    with pytest.raises(gepetto.ConfigError, match="unknown option 'budgett' \\(did you mean 'budget'\\?\\)"):
        gepetto.optimize(task.seed_candidate, task.trainset, task.metric, **{**kw, "budgett": 3})
    # the same options given as a config: the same run
    config_kw = {k: v for k, v in kw.items() if k not in ("budget", "reflection_attempts")}
    cfg = gepetto.EngineConfig(budget=60, reflection_attempts=2)
    same(gepetto.optimize(task.seed_candidate, task.trainset, task.metric, config=cfg, **config_kw), first)


def test_engine_options_in_a_config_are_checked():
    from gepetto.runner import load_config

    assert load_config(reflection_attempts=5).reflection_attempts == 5
    with pytest.raises(gepetto.ConfigError, match="engine: unknown option"):
        load_config(engine={"reflection_attempts": 5})  # options are fields, never nested
    with pytest.raises(gepetto.ConfigError, match="reflection_attempts: Input should be greater than or equal to 1"):
        load_config(reflection_attempts=0)
    with pytest.raises(gepetto.ConfigError, match="stands for an LM object"):
        load_config(task="demo", task_lm="python:scripted")
