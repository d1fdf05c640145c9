"""benchmarks/tasks.py: a resumed run is tested on the split of its stored configuration, never on val data."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_tasks", ROOT / "benchmarks" / "tasks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_resumed_run_is_tested_on_its_own_test_split(bench, tmp_path) -> None:
    from gepetto.store.sqlite import RunStore

    settings = {"n_train": 10, "n_val": 14, "n_test": 10, "budget": 20, "cache": "off"}
    # the simulated LMs answer another task than theirs only when told to (strict=false): a plumbing test
    lms = {"task_lm": "sim:task?strict=false", "reflection_lm": "sim:reflection?strict=false", "settings": settings}
    storage = tmp_path / "bench.sqlite"
    first = bench.run_task("demo", storage, None, {}, **lms)
    assert first["splits"] == "10/14/10"
    # run again with other split sizes: the stored run resumes with its own config, and so must the test split
    again = bench.run_task("demo", storage, None, {"n_val": 4, "n_test": 20}, **lms)
    assert again["splits"] == "10/14/10"
    store = RunStore(storage)
    used = set(store.examples("bench-demo", "train")) | set(store.examples("bench-demo", "val"))
    store.close()
    _, task = bench.stored_task(storage, "bench-demo")
    assert len(used) == 24 and not {e.id for e in task.testset} & used
    assert again["seed_test"] == first["seed_test"] and again["best_test"] == first["best_test"]
