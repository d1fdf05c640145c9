"""The executor seam: the default runs rollouts in process; an Executor object sees every paid rollout."""

import pytest

import gepetto
from gepetto.config import ConfigError, EngineConfig, RunConfig, load_config
from gepetto.engine.executors import LocalExecutor, make_executor
from gepetto.testing import sim


def optimize(**options):
    task = sim.task(components=2)
    return gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                            program=task.program, task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(),
                            budget=100, seed=3, **options)


class CountingExecutor(LocalExecutor):
    def __init__(self):
        self.pairs, self.closed, self.timeouts = [], 0, set()

    async def run(self, program, metric, candidate, example, task_lm, lm_params=None, *, timeout=None):
        self.pairs.append((candidate.id, example.id))
        self.timeouts.add(timeout)
        return await super().run(program, metric, candidate, example, task_lm, lm_params, timeout=timeout)

    async def aclose(self):
        self.closed += 1


def test_an_executor_object_runs_every_paid_rollout_once_and_changes_nothing():
    executor = CountingExecutor()
    plain, counted = optimize(), optimize(executor=executor)
    strip = lambda r: {k: v for k, v in r.to_dict().items() if k not in ("wall_seconds", "ledger")}  # noqa: E731
    assert strip(counted) == strip(plain)
    assert len(executor.pairs) == len(set(executor.pairs)) == counted.rollouts_used
    assert executor.closed == 1


def test_an_executor_object_in_a_config_is_the_same_object():
    executor = CountingExecutor()
    result = optimize(config=EngineConfig(executor=executor, budget=100, rollout_timeout=30))
    assert len(executor.pairs) == result.rollouts_used and executor.closed == 1
    assert executor.timeouts == {30}  # the engine's rollout_timeout reaches the executor


def test_executor_names_are_checked():
    assert isinstance(make_executor("local"), LocalExecutor)
    with pytest.raises(ConfigError, match="executor: unknown executor 'dask'; accepted: local, ray"):
        optimize(executor="dask")
    with pytest.raises(ConfigError, match="executor: one of local, ray or an Executor object"):
        EngineConfig(executor=object())
    with pytest.raises(TypeError, match="executor must be local, ray or an Executor object"):
        make_executor(object())
    with pytest.raises(ConfigError, match="executor"):
        load_config(task="sim", executor="dask")
    cfg = load_config(task="sim", executor="ray(address='auto')")
    assert cfg.executor == cfg.engine_config().executor == "ray(address='auto')"
    assert load_config(task="sim", executor={"ray": {"address": "auto"}}).executor == "ray(address='auto')"
    with pytest.raises(ConfigError, match="ray: unknown parameter 'adress'"):
        load_config(task="sim", executor="ray(adress='auto')")
    # a stored run names its executor: an object is an option of one process
    with pytest.raises(ConfigError, match="a stored run takes an executor by name"):
        RunConfig(executor=CountingExecutor())


def test_the_executor_is_a_config_field_and_a_cli_option():
    from typer.testing import CliRunner

    from gepetto.cli import app

    assert "executor" in EngineConfig.model_fields and set(EngineConfig.model_fields) <= set(RunConfig.model_fields)
    shown = CliRunner().invoke(app, ["optimize", "--help"], env={"COLUMNS": "200"}).output
    assert "--executor" in shown and "ray(address=null)" in shown
