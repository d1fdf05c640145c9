"""One default run of a task with whichever gepetto is first on the path, timed: `local_batch.py product`'s child.

    PYTHONPATH=TREE/src python benchmarks/product_run.py --task demo --seed 0 --budget 120 \
        --metric builtin

It uses only `gepetto.optimize`, `gepetto.tasks.load_task` and `gepetto.types` (for `user_metrics.user_metric`,
copied beside it), which every version since e7ff4ae has, so a worktree of an older commit runs the product as it
stood then: the embedded default models, a fresh store, the task's user metric. It prints one JSON line: wall and
CPU seconds, rollouts, proposals, reflection calls, validation of the seed and of the best, and the best candidate's
texts.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from user_metrics import user_metric

import gepetto
from gepetto.tasks import load_task


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--budget", type=int, required=True)
    ap.add_argument("--metric", default="plain", choices=["plain", "float", "builtin"])
    args = ap.parse_args()
    task = load_task(args.task, seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        t0, c0 = time.perf_counter(), time.process_time()
        result = gepetto.optimize(task.seed_candidate, task.trainset, user_metric(task, args.metric),
                                  valset=task.valset, program=task.program, task_lm="local:qwen2.5-coder-0.5b",
                                  reflection_lm="local:qwen2.5-coder-1.5b", budget=args.budget, seed=args.seed,
                                  storage=Path(tmp) / "run.sqlite", run=f"s{args.seed}")
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    refl = result.ledger.roles.get("reflection")
    print(json.dumps({"wall": wall, "cpu": cpu, "rollouts": result.rollouts_used,
                      "proposals": sum(result.proposals.values()), "reflection_calls": refl.calls if refl else 0,
                      "seed_val": result.seed_score, "best_val": result.best_score,
                      "best": dict(result.best_candidate), "ledger": result.ledger.to_dict(),
                      "stop": result.stop_message}))


if __name__ == "__main__":
    main()
