"""Run store costs: time to commit one rollout, and time to resume a run with many stored evaluations.

Usage: python benchmarks/store_overhead.py [--rollouts 10000]
1. Commit N rollouts one by one (each in its own transaction, as the engine does), with a realistic trace
   (two LM calls of ~600 characters); report the time per rollout.
2. Resume: a simulated run (task `sim`, simulated LMs) is driven to about N stored evaluations through the
   runner, then resumed by name: the engine replays every stored rollout and cached reflection answer and
   stops where the first session stopped. Reported: wall time of the resume (open store, load evaluations,
   replay) and how many LM calls it made (should be 0).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from gepetto.program import Rollout, TraceEntry
from gepetto.runner import load_config, start_or_resume
from gepetto.store.sqlite import RunStore
from gepetto.types import Candidate, Score


def commit_cost(n: int, path: Path) -> dict:
    store = RunStore(path)
    store.create_run("bench", {}, seed=0)
    trace = [TraceEntry("query", "q" * 600, "a" * 300), TraceEntry("answer", "p" * 600, "b" * 200)]
    times = []
    for i in range(n):
        cand = Candidate(instruction=f"instruction {i // 100}")
        r = Rollout(f"ex-{i % 100}", Score(0.5, "feedback " * 20), {"answer": "x" * 50}, trace)
        t0 = time.perf_counter()
        store.put_rollout("bench", cand, r.example_id, r)
        times.append(time.perf_counter() - t0)
    ms = sorted(t * 1000 for t in times)
    return {"n": n, "median_ms": statistics.median(ms), "p95_ms": ms[int(0.95 * n)], "mean_ms": statistics.mean(ms)}


def resume_cost(n: int, path: Path) -> dict:
    n_val = 100
    cfg = load_config(task="sim", task_lm="sim:task", reflection_lm="sim:reflection?max_rules=1&forget=1",
                      budget=n, seed=0, n_val=n_val, n_train=200, use_merge=True,
                      task_options={"kinds": 400})
    t0 = time.perf_counter()
    _, first = start_or_resume(cfg, storage=path, run="big")
    first_s = time.perf_counter() - t0
    stored = RunStore(path).count_rollouts("big")
    t0 = time.perf_counter()
    _, again = start_or_resume(cfg, storage=path, run="big")
    resume_s = time.perf_counter() - t0
    assert [c.to_dict() for c in again.candidates] == [c.to_dict() for c in first.candidates]
    return {"stored": stored, "first_run_s": first_s, "resume_s": resume_s,
            "lm_calls_on_resume": again.ledger.total().calls - first.ledger.total().calls
            - (again.ledger.total().cached_calls - first.ledger.total().cached_calls),
            "candidates": len(again.candidates), "iterations": again.iterations}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rollouts", type=int, default=10_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        c = commit_cost(args.rollouts, Path(tmp) / "commit.sqlite")
        print(f"commit one rollout ({c['n']} rollouts): median {c['median_ms']:.3f} ms, "
              f"p95 {c['p95_ms']:.3f} ms, mean {c['mean_ms']:.3f} ms")
        r = resume_cost(args.rollouts, Path(tmp) / "resume.sqlite")
        print(f"resume a run with {r['stored']} stored evaluations ({r['candidates']} candidates, "
              f"{r['iterations']} iterations): {r['resume_s']:.2f} s (first run {r['first_run_s']:.1f} s); "
              f"LM calls paid on resume: {r['lm_calls_on_resume']}")


if __name__ == "__main__":
    main()
