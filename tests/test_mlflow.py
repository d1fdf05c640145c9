"""MLflow tracking (issue 14): a run logged to a local MLflow store, read back with MlflowClient. The store is
SQLite (`sqlite:///mlflow.db`), the local store MLflow 3 supports; its plain-directory store is in maintenance."""

import json
import os
import warnings
from pathlib import Path

import pytest

import gepetto
from gepetto.config import load_config
from gepetto.engine import events as ev
from gepetto.integrations.mlflow import MlflowTracker, flat_params, read_event
from gepetto.runner import start_or_resume
from gepetto.store.sqlite import RunStore
from gepetto.testing import sim
from gepetto.tracking import make_tracker

mlflow = pytest.importorskip("mlflow")
from mlflow import MlflowClient  # noqa: E402


@pytest.fixture(scope="module")
def tracking_uri(tmp_path_factory):
    """One SQLite tracking store for the module: MLflow creates its tables once (seconds), not once per test."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    MlflowClient(tracking_uri=uri).search_experiments()
    return uri


@pytest.fixture
def store(tracking_uri, tmp_path, monkeypatch, request):
    """The store selected the way users do it, MLflow's own environment variables, with an experiment of this
    test's own (its artifacts in the test's directory)."""
    experiment = f"gepetto-tests-{request.node.name}"
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", experiment)
    client = MlflowClient(tracking_uri=tracking_uri)
    client.create_experiment(experiment, artifact_location=(tmp_path / "artifacts").as_uri())
    return client


def optimize_sim(**options):
    task = sim.task()
    return gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                            program=task.program, task_lm=sim.SimTaskLM(),
                            reflection_lm=sim.SimReflectionLM(), budget=120, seed=0, **options)


def only_run(client):
    exp = client.get_experiment_by_name(os.environ["MLFLOW_EXPERIMENT_NAME"])
    [run] = client.search_runs([exp.experiment_id])
    return run


def artifact(client, run, path, tmp_path):
    local = client.download_artifacts(run.info.run_id, path, str(tmp_path))
    with open(local, encoding="utf-8") as f:
        return f.read()


def test_a_run_is_logged_with_params_metrics_best_candidate_and_report(store, tmp_path):
    result = optimize_sim(tracking="mlflow")
    run = only_run(store)
    assert run.info.status == "FINISHED"
    p = run.data.params
    assert p["budget"] == "120" and p["seed"] == "0" and p["minibatch_size"] == "3"
    assert p["task_lm"] == "python:sim-task" and p["reflection_lm"] == "python:sim-reflection"
    assert "single_instruction" in p["task"] and p["n_val"] == "12"
    # the curve: the seed at step 0, then one point per iteration; the last point is the result
    best = store.get_metric_history(run.info.run_id, "best_score")
    assert best[0].step == 0 and best[0].value == result.seed_score
    values = [m.value for m in sorted(best, key=lambda m: (m.step, m.timestamp))]
    assert values == sorted(values) and values[-1] == result.best_score
    used = store.get_metric_history(run.info.run_id, "rollouts_used")
    assert max(m.value for m in used) == result.rollouts_used <= 120
    assert len({m.step for m in used}) >= result.iterations
    m = run.data.metrics
    assert m["seed_score"] == result.seed_score and m["iterations"] == result.iterations
    total = result.ledger.total()
    assert m["lm_calls"] == total.calls and m["reflection_lm_calls"] > 0
    assert m["task_input_tokens"] == result.ledger.roles["task"].input_tokens
    assert run.data.tags["gepetto.stop_reason"] == result.stop_reason.value
    assert run.data.tags["gepetto.stop_message"] == result.stop_message
    assert json.loads(artifact(store, run, "best_candidate.json", tmp_path)) == result.best_candidate.to_dict()
    [(component, text)] = result.best_candidate.items()
    assert artifact(store, run, f"best_candidate/{component}.txt", tmp_path) == text
    assert json.loads(artifact(store, run, "result.json", tmp_path))["best_score"] == result.best_score
    report = artifact(store, run, "report.html", tmp_path)
    assert report.startswith("<!DOCTYPE html>") and "rule-" in report


def test_costs_are_logged_per_iteration_when_the_run_has_prices(store, tmp_path):
    """Prices of a stored run (`prices` in its config, `--prices` on the CLI) give cost metrics at every step."""
    prices = {"sim:task": (1.0, 2.0), "sim:reflection": (3.0, 4.0)}  # LM name: dollars per million tokens in, out
    cfg = load_config(task="sim", task_lm="sim:task", reflection_lm="sim:reflection", budget=120, prices=prices,
                      tracking="mlflow")
    _, result = start_or_resume(cfg, storage=tmp_path / "runs.sqlite", run="priced")
    run = only_run(store)
    total = result.ledger.total()
    assert run.data.metrics["cost_usd"] == pytest.approx(total.cost) and total.cost > 0
    costs = store.get_metric_history(run.info.run_id, "cost_usd")
    assert len(costs) > 2 and [c.value for c in costs] == sorted(c.value for c in costs)
    assert run.data.params["tracking"] == "mlflow"  # logged with the config, never stored with the run
    assert "tracking" not in RunStore(tmp_path / "runs.sqlite").get_run("priced").config


def test_a_stored_run_logs_its_config_and_a_report_with_samples(store, tmp_path):
    result = optimize_sim(tracking="mlflow", storage=tmp_path / "runs.sqlite", run="tracked",
                          component_descriptions=None)
    run = only_run(store)
    assert run.info.run_name == "tracked" and run.data.tags["gepetto.run"] == "tracked"
    p = run.data.params
    assert p["run"] == "tracked" and p["cache"] == "off" and p["task_lm"] == "python:sim-task"
    assert p["budget"] == "120" and p["component_descriptions"] == "null"  # a flat config
    m = run.data.metrics
    assert m["best_score"] == result.best_score and m["task_input_tokens"] > 0
    assert "cost_usd" not in m  # no prices: no cost to speak of
    report = artifact(store, run, "report.html", tmp_path)
    assert "Sample outputs: seed vs best" in report and "no sample outputs" not in report
    assert "status-finished" in report


def test_a_failed_run_ends_its_mlflow_run_as_failed(store):
    task = sim.task()
    with pytest.raises(gepetto.MetricError):
        gepetto.optimize(task.seed_candidate, task.trainset, lambda e, o, t: "bad", valset=task.valset,
                         program=task.program, task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(),
                         budget=40, tracking="mlflow")
    run = only_run(store)
    assert run.info.status == "FAILED" and "MetricError" in run.data.tags["gepetto.error"]


def test_the_tracker_as_a_plain_callback(store):
    tracker = MlflowTracker(run_name="plain")
    result = optimize_sim(callbacks=[tracker])
    run = only_run(store)
    assert run.info.run_name == "plain" and run.info.status == "FINISHED"
    assert run.data.metrics["best_score"] == result.best_score


def test_a_run_inside_an_active_mlflow_run_is_its_child(store):
    with mlflow.start_run(run_name="sweep") as parent:
        optimize_sim(tracking="mlflow")
    runs = store.search_runs([parent.info.experiment_id])
    child = next(r for r in runs if r.info.run_id != parent.info.run_id)
    assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id


def test_event_reading_and_params():
    assert read_event(ev.RolloutFinished("c", "e", 1.0, None, 1, 100)) is None
    reading = read_event(ev.IterationEnded(iteration=3, used=40, budget=100, best=0.5, front=2, candidates=4))
    assert reading.step == 3 and reading.metrics == {"rollouts_used": 40, "candidates": 4, "pareto_front_size": 2,
                                                     "best_score": 0.5}
    assert "best_score" not in read_event(ev.IterationEnded(1, 10, 100, None, 0, 0)).metrics
    params = flat_params({"engine": {"component_descriptions": {"my regex!": "x" * 7000}}, "budget": 5,
                          "temps": (0.0, 0.7), "key": "sk-abcdefghijklmnopqrstuvwxyz123456"})
    assert params["budget"] == "5" and params["temps"] == "[0.0, 0.7]"
    assert len(params["engine.component_descriptions.my regex_"]) == 6000
    assert "abcdefghijklmnop" not in params["key"]  # secrets never reach the tracking server


def test_unknown_tracking_and_unreadable_events_do_not_break_a_run(store):
    with pytest.raises(ValueError, match="unknown tracking 'wandb'"):
        make_tracker("wandb")
    with pytest.raises(gepetto.ConfigError, match="tracking: unknown tracking 'wandb'; accepted: mlflow"):
        load_config(tracking="wandb")
    tracker = MlflowTracker()
    broken = ev.IterationEnded(3, 40, 100, 0.5, 2, 4)
    object.__delattr__(broken, "used")  # an event this version cannot read: warned once, no crash
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tracker(broken)
    assert any("cannot read the 'iteration' event" in str(w.message) for w in caught)


def test_the_command_line_tracks_with_one_option(store, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from gepetto.cli import app

    monkeypatch.chdir(tmp_path)
    args = ["optimize", "--task", "sim", "--task-lm", "sim:task", "--reflection-lm", "sim:reflection", "--budget",
            "60", "--run", "cli-run", "--storage", "runs.sqlite", "-q", "--tracking", "mlflow"]
    res = CliRunner().invoke(app, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    run = only_run(store)
    assert run.info.run_name == "cli-run" and run.data.params["task"] == "sim" and run.info.status == "FINISHED"
    assert run.data.params["task_lm"] == "sim:task" and "best_score" in run.data.metrics
    bad = CliRunner().invoke(app, [*args[:-2], "--track", "wandb"], catch_exceptions=False)  # --track: the same
    assert bad.exit_code == 2 and "unknown tracking 'wandb'" in bad.output
    # a resumed session is tracked only when asked again: the option is never stored with the run
    res = CliRunner().invoke(app, [*args[:-2], "--budget", "80"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert len(store.search_runs([run.info.experiment_id])) == 1
    res = CliRunner().invoke(app, [*args[:-2], "--budget", "90", "--track", "mlflow"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert len(store.search_runs([run.info.experiment_id])) == 2


def test_one_tracker_object_for_two_runs_logs_two_mlflow_runs(store):
    tracker = MlflowTracker(experiment=os.environ["MLFLOW_EXPERIMENT_NAME"])
    optimize_sim(tracking=tracker)
    task = sim.task()
    gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset, program=task.program,
                     task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(), budget=60, seed=1,
                     tracking=tracker)
    exp = store.get_experiment_by_name(os.environ["MLFLOW_EXPERIMENT_NAME"])
    runs = store.search_runs([exp.experiment_id])
    assert len(runs) == 2 and all("best_score" in r.data.metrics for r in runs)
    assert {r.data.params["budget"] for r in runs} == {"120", "60"}


def test_an_interrupted_run_ends_its_mlflow_run_as_killed(store, tmp_path):
    stop = tmp_path / "stop"
    stop.touch()  # stops the run at the first check, after the seed's validation
    result = optimize_sim(tracking="mlflow", stop_file=str(stop))
    assert result.stop_reason is gepetto.StopReason.STOP_FILE
    run = only_run(store)
    assert run.info.status == "FINISHED"  # a stop the user asked for through the run's options: finished

    def interrupt(event):
        if isinstance(event, ev.IterationEnded):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        optimize_sim(tracking="mlflow", callbacks=interrupt)
    runs = store.search_runs([run.info.experiment_id])
    assert {r.info.status for r in runs} == {"FINISHED", "KILLED"}


@pytest.mark.parametrize(("stop", "status"), [(gepetto.StopReason.SIGTERM, "KILLED"),
                                              (gepetto.StopReason.INTERRUPTED, "KILLED"),
                                              (gepetto.StopReason.LM_UNAVAILABLE, "FAILED"),
                                              (gepetto.StopReason.BUDGET_EXHAUSTED, "FINISHED"),
                                              (gepetto.StopReason.STOP_FILE, "FINISHED")])
def test_the_stop_reason_decides_the_mlflow_status(store, stop, status):
    import dataclasses

    result = dataclasses.replace(optimize_sim(), stop_reason=stop, stop_message=stop.default_message)
    tracker = MlflowTracker()
    tracker.start(name="r", params={"budget": 120}, ledger=result.ledger)
    tracker(ev.RunEnded(result))
    tracker.close()
    run = only_run(store)
    assert run.info.status == status and run.data.tags["gepetto.stop_reason"] == stop.value


def test_the_documented_store_sqlite_mlflow_db_in_the_working_directory(tmp_path, monkeypatch):
    """What docs/integrations.md tells users to type: MLFLOW_TRACKING_URI=sqlite:///mlflow.db, no experiment made
    beforehand; the store and the artifacts land in the working directory, and `file:` is not needed."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "prompts")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a tracking problem is a warning: none here
        result = optimize_sim(tracking="mlflow")
    assert (tmp_path / "mlflow.db").is_file()
    client = MlflowClient(tracking_uri="sqlite:///mlflow.db")
    [run] = client.search_runs([client.get_experiment_by_name("prompts").experiment_id])
    assert run.info.status == "FINISHED" and run.data.metrics["best_score"] == result.best_score
    report = client.download_artifacts(run.info.run_id, "report.html", str(tmp_path))
    assert Path(report).read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert list((tmp_path / "mlruns").rglob("report.html"))  # MLflow's default artifact root, beside the store


def test_mlflow_3s_refused_file_store_is_a_config_error_before_any_rollout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "file:./mlruns")
    seen = []
    with pytest.raises(gepetto.ConfigError, match=r"refuses its plain-directory store.*sqlite:///mlflow\.db"):
        optimize_sim(tracking="mlflow", callbacks=seen.append)
    assert not any(isinstance(e, ev.RolloutFinished) for e in seen)
