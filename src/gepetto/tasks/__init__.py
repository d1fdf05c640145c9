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
    "gsm8k-plain": "gepetto.tasks.math",  # a seed with the answer format only: reasoning is the headroom
    "aime": "gepetto.tasks.math",
    "clinc-banking": "gepetto.tasks.intents",  # real track: cheap rollouts, measured headroom
    "clinc-credit-oos": "gepetto.tasks.intents",
    "clinc-banking8": "gepetto.tasks.intents",
    "clinc-kitchen": "gepetto.tasks.intents",
    "clinc-work-oos": "gepetto.tasks.intents",
    "clinc-home": "gepetto.tasks.intents",  # locked-only: scored once, on the locked test split
    "clinc-auto": "gepetto.tasks.intents",
    "clinc-meta": "gepetto.tasks.intents",  # locked-only, named before any run (issue 59's unseen-domain check)
    "clinc-travel": "gepetto.tasks.intents",  # locked-only, likewise
    "clinc-utility": "gepetto.tasks.intents",  # locked-only, likewise
    "clinc-smalltalk8": "gepetto.tasks.intents",  # locked-only, likewise, at a user's size (24 / 40 / 80)
    "hwu-iot": "gepetto.tasks.hwu64",  # HWU64 scenarios: fine-grained intents whose names share words
    "hwu-general": "gepetto.tasks.hwu64",
    "hwu-play": "gepetto.tasks.hwu64",
    "hwu-email": "gepetto.tasks.hwu64",
    "hwu-routed": "gepetto.tasks.routed",  # two steps: a router (area), then the intent among the area's
    "hwu-qa": "gepetto.tasks.hwu64",  # locked-only: scored once, on the locked test split
    "hwu-transport": "gepetto.tasks.hwu64",
    "hwu-leisure": "gepetto.tasks.hwu64",  # locked-only, named before any run: three scenarios never run here
    "hwu-daily": "gepetto.tasks.hwu64",  # locked-only, named before any run: five small scenarios never run here
    "snips-restaurant": "gepetto.tasks.slots",
    "snips-weather": "gepetto.tasks.slots",
    "snips-routed": "gepetto.tasks.snips_routed",  # two steps: a router (intent), then the intent's slots
    "sim": "gepetto.testing.sim",  # simulated, known optimum: for tests, benchmarks and trying the CLI without models
}


# options that make one module's task into a named variant
_VARIANTS: dict[str, dict[str, Any]] = {
    "gsm8k": {"dataset": "gsm8k"},
    "gsm8k-plain": {"dataset": "gsm8k", "seed_form": "plain", "n_train": 30, "n_val": 30, "n_test": 100,
                    "n_locked": 150},
    "aime": {"dataset": "aime"},
    "clinc-banking": {"domain": "banking", "oos": False},
    "clinc-credit-oos": {"domain": "credit_cards", "oos": True},
    "clinc-banking8": {"domain": "banking", "oos": False, "subset": "banking8"},
    "clinc-kitchen": {"domain": "kitchen_and_dining", "oos": False},
    "clinc-work-oos": {"domain": "work", "oos": True},
    "clinc-home": {"domain": "home", "oos": False},
    "clinc-auto": {"domain": "auto_and_commute", "oos": False},
    "clinc-meta": {"domain": "meta", "oos": False},
    "clinc-travel": {"domain": "travel", "oos": False},
    "clinc-utility": {"domain": "utility", "oos": False},
    "clinc-smalltalk8": {"domain": "small_talk", "oos": False, "subset": "smalltalk8", "n_train": 24, "n_val": 40,
                         "n_test": 80},
    **{f"hwu-{s}": {"scenario": s} for s in ("iot", "general", "play", "email", "qa", "transport")},
    "hwu-leisure": {"scenario": "leisure", "n_test": 80},  # music, recommendation, takeaway: 8 intents, a user's size
    "hwu-daily": {"scenario": "daily", "n_test": 80},  # cooking, datetime, news, social, weather: 7 intents
    "snips-restaurant": {"intent": "BookRestaurant"},
    "snips-weather": {"intent": "GetWeather"},
}


def default_data_dir() -> Path:
    """Where benchmark data lives: $GEPETTO_DATA_DIR, else ../shared/data from the working directory."""
    return Path(os.environ.get("GEPETTO_DATA_DIR", "../shared/data"))


# where a user learns which files a benchmark task reads, where they come from and under which licence
DATA_DOC = "docs/data.md in the gepetto repository"


def load_task(name: str, **options: Any) -> Task:
    """Load a built-in task by name; options go to the task's loader (data_dir, seed, split sizes, LMs)."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; built-in tasks: {', '.join(sorted(TASKS))}")
    module = importlib.import_module(TASKS[name])
    for key, value in _VARIANTS.get(name, {}).items():
        options.setdefault(key, value)
    try:
        return module.load(**options)
    except FileNotFoundError as exc:  # a benchmark's data files are not shipped: say where they come from
        if DATA_DOC in str(exc):
            raise
        raise FileNotFoundError(f"{exc}. gepetto does not ship the data of task {name!r}: {DATA_DOC} says where to "
                                "get its files, under which licence, and where to put them") from exc
