"""The executor seam: the default runs rollouts in process; an Executor object sees every paid rollout."""

import pytest

import gepetto
from gepetto import sim
from gepetto.engine.executors import LocalExecutor, make_executor
from gepetto.runner import ConfigError, load_config


def optimize(**options):
    task = sim.task(components=2)
    return gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                            program=task.program, task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(),
                            budget=100, seed=3, **options)


class CountingExecutor(LocalExecutor):
    def __init__(self):
        self.pairs, self.closed = [], 0

    async def run(self, program, metric, candidate, example, task_lm, lm_params=None):
        self.pairs.append((candidate.id, example.id))
        return await super().run(program, metric, candidate, example, task_lm, lm_params)

    async def aclose(self):
        self.closed += 1


def test_an_executor_object_runs_every_paid_rollout_once_and_changes_nothing():
    executor = CountingExecutor()
    plain, counted = optimize(), optimize(executor=executor)
    strip = lambda r: {k: v for k, v in r.to_dict().items() if k not in ("wall_seconds", "ledger")}  # noqa: E731
    assert strip(counted) == strip(plain)
    assert len(executor.pairs) == len(set(executor.pairs)) == counted.rollouts_used
    assert executor.closed == 1


def test_executor_names_are_checked():
    assert isinstance(make_executor("local"), LocalExecutor)
    with pytest.raises(ValueError, match="unknown executor 'dask'; accepted: local, ray"):
        optimize(executor="dask")
    with pytest.raises(TypeError, match="executor must be one of"):
        make_executor(object())
    with pytest.raises(ConfigError, match="executor"):
        load_config(task="sim", executor="dask")
    assert load_config(task="sim", executor="ray", ray_address="auto").executor == "ray"
