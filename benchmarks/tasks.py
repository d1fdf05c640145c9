"""The built-in benchmark tasks on the embedded models: seed vs optimised, on validation and test.

Usage: python benchmarks/tasks.py [--tasks gsm8k ifbench ...] [--storage PATH] [--out benchmarks/results/tasks.md]

Each task runs as a stored, resumable run (`bench-TASK` in --storage; run again to resume a killed one)
with Qwen2.5-Coder 0.5B as task LM and 1.5B as reflection LM (the PUPA judge is the 1.5B model too), at a
small budget that fits a session on 2 CPU cores. Then the seed and the best candidate are scored on the
task's test split (outside the budget). Budgets and splits are tiny because a rollout of these programs
on the 0.5B model takes 15-45 s on 2 CPU cores: small models and small budgets give small or noisy gains.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from gepetto.api import evaluate_async
from gepetto.engine.events import CandidateAdded, Event
from gepetto.ledger import Ledger
from gepetto.lm.cache import CachedLM
from gepetto.lm.names import make_lm
from gepetto.program import Task
from gepetto.runner import RunConfig, _task_kwargs, load_config, start_or_resume
from gepetto.store.sqlite import RunStore
from gepetto.tasks import load_task

# small settings per task: split sizes, budget, time limit (seconds) and task options
SETTINGS: dict[str, dict[str, Any]] = {
    "gsm8k": {"n_train": 20, "n_val": 6, "n_test": 12, "budget": 30, "time_limit": 900},
    "ifbench": {"n_train": 20, "n_val": 5, "n_test": 10, "budget": 25, "time_limit": 1200},
    "hotpotqa": {"n_train": 20, "n_val": 5, "n_test": 10, "budget": 25, "time_limit": 900},
    "pupa": {"n_train": 20, "n_val": 4, "n_test": 8, "budget": 16, "time_limit": 1200,
             "task_options": {"judge_lm": "local:qwen2.5-coder-1.5b"}},
    "aime": {"n_train": 15, "n_val": 5, "n_test": 8, "budget": 20, "time_limit": 600},
}
TASK_LM, REFLECTION_LM = "local:qwen2.5-coder-0.5b", "local:qwen2.5-coder-1.5b"


async def test_scores(task: Any, best: Any, lm: Any) -> tuple[float, float]:
    seed = await evaluate_async(task.seed_candidate, task.testset, task.metric, program=task.program, task_lm=lm)
    opt = seed if best == task.seed_candidate else await evaluate_async(
        best, task.testset, task.metric, program=task.program, task_lm=lm)
    return seed.mean, opt.mean


def stored_task(storage: Path, run: str) -> tuple[RunConfig, Task]:
    """The task exactly as the stored run `run` was built (its stored configuration, not today's options).

    A resumed run keeps the configuration it was started with, so splitting the data with the caller's
    options could put validation (or training) examples in the test split. Checked: no test id is a
    training or validation id of the run.
    """
    store = RunStore(storage)
    try:
        info = store.get_run(run)
        if info is None:
            raise KeyError(f"no run named {run!r} in {storage}")
        cfg = RunConfig(**info.config)
        seen = set(store.examples(run, "train")) | set(store.examples(run, "val"))
    finally:
        store.close()
    task = load_task(cfg.task, **_task_kwargs(cfg, Ledger()))
    seen |= {e.id for e in task.trainset} | {e.id for e in task.valset}
    leaked = sorted({e.id for e in task.testset} & seen)
    assert not leaked, f"run {run!r}: test examples also in train/val: {leaked[:10]}"
    return cfg, task


def run_task(name: str, storage: Path, data_dir: str | None, overrides: dict[str, Any], suffix: str = "", *,
             task_lm: str = TASK_LM, reflection_lm: str = REFLECTION_LM,
             settings: dict[str, Any] | None = None) -> dict[str, Any]:
    import asyncio

    s = {**(SETTINGS[name] if settings is None else settings), **{k: v for k, v in overrides.items() if v is not None}}
    cfg = load_config(task=name, task_lm=task_lm, reflection_lm=reflection_lm, seed=0, data_dir=data_dir,
                      max_concurrency=4, **s)
    t0 = time.perf_counter()
    run, result = start_or_resume(cfg, storage=storage, run=f"bench-{name}{suffix}", callbacks=_log(name))
    opt_s = time.perf_counter() - t0
    cfg, task = stored_task(storage, run)  # a resumed run was built from its stored config: test on its split
    lm = CachedLM(make_lm(cfg.task_lm), storage)  # test answers cached too: a rerun of this script is cheap
    t1 = time.perf_counter()
    seed_test, best_test = asyncio.run(test_scores(task, result.best_candidate, lm))
    row = {
        "task": name, "splits": f"{len(task.trainset)}/{len(task.valset)}/{len(task.testset)}",
        "budget": cfg.budget, "rollouts": result.rollouts_used, "seed_val": result.seed_score,
        "best_val": result.best_score, "seed_test": seed_test, "best_test": best_test,
        "candidates": len(result.candidates), "optimise_s": round(opt_s), "test_s": round(time.perf_counter() - t1),
        "stop_reason": result.stop_reason.value, "stop_message": result.stop_message,
        "best": dict(result.best_candidate),
    }
    print(json.dumps(row), flush=True)
    return row


def _log(name: str):
    def on_event(event: Event) -> None:
        if isinstance(event, CandidateAdded):
            rec = event.record
            print(f"[{name}] candidate {rec.index} ({rec.origin}): val {rec.mean:.3f}", file=sys.stderr, flush=True)
    return on_event


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    ap.add_argument("--storage", default="bench-tasks.sqlite")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", default=None, help="append the results table (markdown) to this file")
    ap.add_argument("--budget", type=int, default=None, help="override the budget of every task")
    ap.add_argument("--n-val", type=int, default=None, help="override the validation size of every task")
    ap.add_argument("--n-test", type=int, default=None, help="override the test size of every task")
    ap.add_argument("--time-limit", type=float, default=None, help="override the time limit (s) of every task")
    ap.add_argument("--run-suffix", default="", help="stored run names are bench-TASK plus this")
    args = ap.parse_args()
    overrides = {"budget": args.budget, "n_val": args.n_val, "n_test": args.n_test, "time_limit": args.time_limit}
    rows = []
    for name in args.tasks:
        rows.append(run_task(name, Path(args.storage), args.data_dir, overrides, args.run_suffix))
    lines = ["| task | train/val/test | budget | rollouts | val seed -> best | test seed -> best | optimise s | "
             "test s |", "|---|---|---:|---:|---|---|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['task']} | {r['splits']} | {r['budget']} | {r['rollouts']} | {r['seed_val']:.3f} -> "
                     f"{r['best_val']:.3f} | {r['seed_test']:.3f} -> {r['best_test']:.3f} | {r['optimise_s']} | "
                     f"{r['test_s']} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "a") as f:
            f.write(f"\n`python benchmarks/tasks.py {' '.join(sys.argv[1:])}`\n\n{table}\n")


if __name__ == "__main__":
    main()
