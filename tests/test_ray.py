"""Rollouts as Ray tasks on a local Ray (2 CPUs): the same run as the local executor, the same budget and ledger,
exact resume across executors, and clear errors for what cannot travel to a worker."""

import asyncio
import sys
import threading

import pytest

import gepetto
from gepetto.config import load_config
from gepetto.engine.events import RolloutFinished
from gepetto.runner import start_or_resume
from gepetto.testing import FakeOpenAIServer, sim, sim_responder

ray = pytest.importorskip("ray")
from gepetto.integrations.ray import ExecutorError, RayExecutor  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def server():
    """The simulated task LM behind an OpenAI-compatible URL on loopback: the workers call it over HTTP."""
    with FakeOpenAIServer(sim_responder()) as srv:
        yield srv


def optimize(task, **options):
    return gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                            program=task.program, **{"reflection_lm": "sim:reflection", **options})


def fingerprint(result):
    d = result.to_dict()
    d.pop("wall_seconds")
    ledger = d.pop("ledger")
    # calls, tokens, errors and retries per role; the seconds differ from run to run
    return d, {role: {k: v for k, v in u.items() if k != "seconds"} for role, u in ledger.items()}


def test_ray_executor_gives_the_same_run_as_the_local_one(local_ray, server):
    task = sim.task(n_train=8, n_val=8, components=2)
    lm = f"openai:sim-task@{server.url}?max_retries=0"  # rebuilt from its name in each worker
    local = optimize(task, task_lm=lm, budget=90, seed=1, lm_retry_pause=0)
    on_ray = optimize(task, task_lm=lm, budget=90, seed=1, lm_retry_pause=0, executor="ray")
    assert local.best_score > local.seed_score and len(local.candidates) > 2
    assert fingerprint(on_ray) == fingerprint(local)  # best candidate, every score, lineage, rollouts, LM calls
    assert on_ray.ledger.roles["task"].calls == local.rollouts_used  # one task-LM call per rollout, all counted

    # an LM outage in a worker (HTTP 500, no retries left) is no score: the engine retries, the run is unchanged
    server.faults["sim-task"] = ["500"]
    failed_once = optimize(task, task_lm=lm, budget=90, seed=1, lm_retry_pause=0, executor="ray")
    assert server.faults["sim-task"] == []
    run, ledger = fingerprint(failed_once)
    assert run == fingerprint(local)[0]
    assert ledger["task"]["errors"] == 1 and ledger["task"]["calls"] == local.rollouts_used + 1


def sync_program(candidate, example, ctx):
    """A sync program with a non-LM step recorded by hand (runs in a worker thread inside the Ray worker)."""
    question = example.inputs["q"]
    ctx.record("a", inputs=question, output=len(question))
    return ctx.lm("a", question)


def test_sync_program_from_a_module_and_an_lm_object(local_ray):
    """The program lives in a module the workers cannot import (this test file): registered with cloudpickle it
    travels by value. The LM is an object (pickled; each worker has its own copy)."""
    task = sim.task(n_train=8, n_val=8)
    task.program, task.seed_candidate = sync_program, gepetto.Candidate(a="Answer the question.")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        local = optimize(task, task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(), budget=60, seed=2)
        on_ray = optimize(task, task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(), budget=60, seed=2,
                          executor=RayExecutor(remote_options={"num_cpus": 0.5}))
    finally:
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert local.best_score > local.seed_score
    assert fingerprint(on_ray) == fingerprint(local)


def test_a_program_the_workers_cannot_import_stops_the_run_with_a_clear_error(local_ray):
    task = sim.task()
    task.program, task.seed_candidate = sync_program, gepetto.Candidate(a="Answer the question.")
    with pytest.raises(ExecutorError, match=r"could not be loaded in a Ray worker.*ModuleNotFoundError.*runtime_env"):
        optimize(task, task_lm=sim.SimTaskLM(), budget=40, executor="ray")


async def hangs_on_one(candidate, example, ctx):
    """The simulated program, except that it never ends on one example (a tool that never answers)."""
    if example.id.endswith("-1"):
        await asyncio.Event().wait()
    return await ctx.lm("instruction", example.inputs["q"])


def test_the_rollout_timeout_is_applied_in_the_worker(local_ray):
    task = sim.task(n_train=4, n_val=4)
    task.program = hangs_on_one
    errors = {}

    def failed(event):
        if isinstance(event, RolloutFinished) and event.error:
            errors[event.example] = event.error

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:  # the budget pays for the seed's validation only
        result = optimize(task, task_lm=sim.SimTaskLM(), budget=4, rollout_timeout=10, executor="ray",
                          callbacks=failed)
    finally:
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert result.rollouts_used == 4
    assert errors == {"val-1": "TimeoutError: no result within 10 s (rollout_timeout)"}


class LockedLM(sim.SimTaskLM):
    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()  # like an open client: cannot be pickled


def test_an_lm_object_that_cannot_travel_is_refused_before_anything_is_paid(local_ray):
    task = sim.task()
    with pytest.raises(ExecutorError, match=r"task LM 'sim-task' cannot be sent to Ray workers.*by name"):
        optimize(task, task_lm=LockedLM(), budget=40, executor="ray")


def test_a_stored_run_on_ray_resumes_exactly_on_the_local_executor(local_ray, tmp_path):
    """Rollouts are stored by the driver: a run begun on Ray and finished locally equals one local run."""
    storage = tmp_path / "runs.sqlite"

    def run(name, budget, executor):
        cfg = load_config(task="sim", task_lm="sim:task", reflection_lm="sim:reflection", budget=budget, seed=4,
                          n_train=24, n_val=12, executor=executor)
        return start_or_resume(cfg, storage=storage, run=name, explicit={"budget", "executor"})[1]

    whole = run("whole", 150, "local")
    first = run("split", 70, "ray")
    assert first.rollouts_used <= 70 < whole.rollouts_used
    finished = run("split", 150, "local")
    assert fingerprint(finished)[0] == fingerprint(whole)[0]


def test_cli_executor_option(local_ray, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from gepetto.cli import app
    from gepetto.store.sqlite import RunStore

    monkeypatch.chdir(tmp_path)
    args = ["optimize", "--task", "sim", "--task-lm", "sim:task", "--reflection-lm", "sim:reflection", "--run", "r",
            "-q", "--budget"]
    res = CliRunner().invoke(app, [*args, "40", "--executor", "ray"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert RunStore("gepetto.sqlite").get_run("r").config["executor"] == "ray"
    res = CliRunner().invoke(app, [*args, "60", "--executor", "local"], catch_exceptions=False)  # resumed locally
    assert res.exit_code == 0, res.output
    assert RunStore("gepetto.sqlite").get_run("r").config["executor"] == "local"
