"""Engine bookkeeping time per iteration with a large pool: front update + parent selection.

Usage: python benchmarks/engine_overhead.py [--candidates 1000] [--examples 1000] [--iterations 200]
Builds a pool of N candidates x E validation examples, then times, per iteration, adding one more candidate
to the Pareto archive (incremental non-dominated set) and drawing a parent (votes + weighted sample).
Two score shapes: continuous scores (nearly every candidate is non-dominated: the worst case for the front)
and binary 0/1 scores (many ties).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import numpy as np

from gepetto.engine.pareto import ParetoArchive


def bench(kind: str, n: int, e: int, iters: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)

    def row() -> np.ndarray:
        if kind == "binary":
            return (rng.random(e) < rng.uniform(0.2, 0.8)).astype(float)
        return rng.beta(2, 2, e)

    archive = ParetoArchive(e, capacity=n + iters)
    for _ in range(n):
        archive.add(row())
    pick = random.Random(seed)
    times = []
    for _ in range(iters):
        r = row()
        t0 = time.perf_counter()
        archive.add(r)
        archive.sample(pick)
        times.append(time.perf_counter() - t0)
    ms = [t * 1000 for t in times]
    return {"kind": kind, "candidates": n, "examples": e, "front": len(archive.front),
            "median_ms": statistics.median(ms), "p95_ms": sorted(ms)[int(0.95 * len(ms))], "max_ms": max(ms)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", type=int, default=1000)
    ap.add_argument("--examples", type=int, default=1000)
    ap.add_argument("--iterations", type=int, default=200)
    args = ap.parse_args()
    print("| scores | candidates | examples | front size | median ms/iter | p95 ms | max ms |")
    print("|---|---|---|---|---|---|---|")
    for kind in ("continuous", "binary"):
        r = bench(kind, args.candidates, args.examples, args.iterations)
        print(f"| {r['kind']} | {r['candidates']} | {r['examples']} | {r['front']} | {r['median_ms']:.2f} | "
              f"{r['p95_ms']:.2f} | {r['max_ms']:.2f} |")


if __name__ == "__main__":
    main()
