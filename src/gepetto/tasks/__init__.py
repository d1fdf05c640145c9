"""Built-in tasks. Each module has `load(data_dir=None, *, seed=0, **options) -> Task`; loaded lazily."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

from gepetto.program import Task

TASKS: dict[str, str] = {
    "demo": "gepetto.tasks.demo",
    "hotpotqa": "gepetto.tasks.hotpotqa",
    "ifeval": "gepetto.tasks.ifeval",
    "ifbench": "gepetto.tasks.ifbench",
    "pupa": "gepetto.tasks.pupa",
    "gsm8k": "gepetto.tasks.math",
    "aime": "gepetto.tasks.math",
    "sim": "gepetto.sim",  # simulated, known optimum: for tests, benchmarks and trying the CLI without models
}


def default_data_dir() -> Path:
    """Where benchmark data lives: $GEPETTO_DATA_DIR, else ../shared/data from the working directory."""
    return Path(os.environ.get("GEPETTO_DATA_DIR", "../shared/data"))


def load_task(name: str, **options: Any) -> Task:
    """Load a built-in task by name; options go to the task's loader (data_dir, seed, split sizes, LMs)."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; built-in tasks: {', '.join(sorted(TASKS))}")
    module = importlib.import_module(TASKS[name])
    if name in ("gsm8k", "aime"):
        options.setdefault("dataset", name)
    return module.load(**options)
