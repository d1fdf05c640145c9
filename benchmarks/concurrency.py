"""Wall time of one optimisation against a slow, parallel HTTP API: max_concurrency 1 vs 16.

Usage: python benchmarks/concurrency.py [--budget 300] [--delay 0.3] [--proposals-per-round 4]

The API is simulated: `gepetto.testing.FakeOpenAIServer` on loopback answers every chat request after a
fixed delay (default 300 ms), many at once, with the simulated task and reflection LMs of `gepetto.testing.sim`
behind it (a task with a known optimum). Both runs use the OpenAI-compatible backend over real HTTP with
the same seed and settings; only `max_concurrency` (engine and HTTP client) differs, so they take the same
path and spend the same rollouts.
"""

from __future__ import annotations

import argparse
import json
import time

import gepetto
from gepetto.lm.openai import OpenAILM
from gepetto.testing import FakeOpenAIServer, sim, sim_responder


def one_run(url: str, concurrency: int, budget: int, proposals: int, seed: int) -> dict:
    task = sim.task(n_train=40, n_val=16, kinds=8)
    task_lm = OpenAILM("sim-task", base_url=url, max_concurrency=concurrency)
    reflection_lm = OpenAILM("sim-reflection", base_url=url, max_concurrency=concurrency)
    t0 = time.perf_counter()
    result = gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                              program=task.program, task_lm=task_lm, reflection_lm=reflection_lm, budget=budget,
                              seed=seed, max_concurrency=concurrency, proposals_per_round=proposals)
    wall = time.perf_counter() - t0
    led = result.ledger
    return {"max_concurrency": concurrency, "wall_s": round(wall, 2), "rollouts": result.rollouts_used,
            "seed_score": result.seed_score, "best_score": result.best_score,
            "task_calls": led.roles["task"].calls, "reflection_calls": led.roles["reflection"].calls,
            "candidates": len(result.candidates), "stop_reason": result.stop_reason.value,
            "stop_message": result.stop_message}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=300)
    ap.add_argument("--delay", type=float, default=0.3)
    ap.add_argument("--proposals-per-round", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    args = ap.parse_args()
    rows = []
    with FakeOpenAIServer(sim_responder("sim:task", "sim:reflection?max_rules=2"), delay=args.delay) as srv:
        for c in args.concurrency:
            row = one_run(srv.url, c, args.budget, args.proposals_per_round, args.seed)
            row["server_max_in_flight"] = srv.max_in_flight
            srv.max_in_flight = 0
            rows.append(row)
            print(json.dumps(row), flush=True)
    base = rows[0]["wall_s"]
    print("\n| max_concurrency | wall time (s) | speed-up | rollouts | LM calls (task + reflection) | best val |"
          " most requests in flight |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['max_concurrency']} | {r['wall_s']:.1f} | {base / r['wall_s']:.1f}x | {r['rollouts']} | "
              f"{r['task_calls']} + {r['reflection_calls']} | {r['best_score']:.3f} | {r['server_max_in_flight']} |")


if __name__ == "__main__":
    main()
