"""The run store on PostgreSQL against SQLite: the cost of a commit, of a resume, and of several processes at once.

Usage: python benchmarks/shared_store.py [--rollouts 2000] [--budget 150] [--processes 3]

The PostgreSQL server is a throwaway one on 127.0.0.1 (gepetto.testing.postgres) with PostgreSQL's durable defaults
(fsync and synchronous commits on), as a team's server runs; over a network each statement also pays its round trip.
1. Commit N rollouts one by one (each in its own transaction, as the engine does; the trace of store_overhead.py):
   time per rollout.
2. Resume: a simulated run driven to about N stored evaluations, then resumed by name (open the store, load the
   evaluations, replay): wall time, and the LM calls it paid (0).
3. P processes at once, each a `gepetto optimize` of the simulated task (sim:task with 3 ms latency, budget B) on a
   run of its own in one store: the wall time of all of them, against one process alone; and that each result
   equals the one the same run gives alone.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from store_overhead import commit_cost, resume_cost

from gepetto.store.snapshot import run_snapshot
from gepetto.store.sqlite import RunStore
from gepetto.testing.postgres import PostgresServer

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
REFLECTIONS = ["sim:reflection", "sim:reflection?max_rules=2", "sim:reflection?noise=0.3&seed=2"]


def _optimize(storage: str, run: str, budget: int, reflection: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "from gepetto.cli import main; main()", "optimize", "--task", "sim",
                             "--task-lm", "sim:task?latency=0.003", "--reflection-lm", reflection, "--budget",
                             str(budget), "--run", run, "--storage", storage, "-q"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)


def _result(storage: str, run: str) -> dict:
    res = run_snapshot(RunStore(storage, readonly=True), run, transcripts=False)["result"]
    return {k: res[k] for k in ("best_candidate", "best_score", "candidates", "rollouts_used")}


def together(storage: str, n: int, budget: int, prefix: str) -> tuple[float, list[str]]:
    t0 = time.perf_counter()
    procs = [_optimize(storage, f"{prefix}{i}", budget, REFLECTIONS[i % len(REFLECTIONS)]) for i in range(n)]
    for p in procs:
        _, err = p.communicate(timeout=1800)
        assert p.returncode == 0, err
    return time.perf_counter() - t0, [f"{prefix}{i}" for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rollouts", type=int, default=2000)
    ap.add_argument("--budget", type=int, default=150)
    ap.add_argument("--processes", type=int, default=3)
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    with tempfile.TemporaryDirectory() as tmp, PostgresServer(durable=True) as pg:
        stores = {"SQLite": lambda name: str(Path(tmp) / f"{name}.sqlite"), "PostgreSQL": pg.create_database}
        for label, make in stores.items():
            c = commit_cost(args.rollouts, make("commit"))
            print(f"{label}: commit one rollout ({c['n']} rollouts): median {c['median_ms']:.3f} ms, "
                  f"p95 {c['p95_ms']:.3f} ms, mean {c['mean_ms']:.3f} ms")
            r = resume_cost(args.rollouts, make("resume"))
            print(f"{label}: resume a run with {r['stored']} stored evaluations ({r['candidates']} candidates): "
                  f"{r['resume_s']:.2f} s (first run {r['first_run_s']:.1f} s); LM calls paid on resume: "
                  f"{r['lm_calls_on_resume']}")
        for label, make in stores.items():
            storage = make("runs")
            alone, _ = together(storage, 1, args.budget, "alone")
            wall, names = together(storage, args.processes, args.budget, "run")
            used = sum(RunStore(storage).count_rollouts(n) for n in names)
            ref = make("reference")
            same = 0
            for i, name in enumerate(names):  # each run again on its own, in a store of its own
                p = _optimize(ref, name, args.budget, REFLECTIONS[i % len(REFLECTIONS)])
                assert p.wait(timeout=1800) == 0
                same += _result(storage, name) == _result(ref, name)
            print(f"{label}: {args.processes} processes at once, one run each (budget {args.budget}): {wall:.1f} s "
                  f"wall for {used} rollouts; one process alone {alone:.1f} s; results equal to each run alone: "
                  f"{same} of {len(names)}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
