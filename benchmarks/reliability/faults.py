"""LM faults: a run against a flaky API ends exactly like a run against a reliable one, and the ledger says
what the faults cost.

Usage: python benchmarks/reliability/faults.py [--rates 0.1 0.3] [--budget 400] [--proposals-per-round 1 4]
       [--fault-seed 0] [--json out.json]

The API is `gepetto.testing.FakeOpenAIServer` on loopback, serving the simulated task and reflection LMs of
`gepetto.testing.sim` (deterministic answers: temperature 0, seeded reflection). Both the task model and the reflection
model fail at random on a share of their requests (`random_faults`, seeded): 429 with Retry-After: 1, HTTP 500,
an answer later than the client's timeout, a connection reset, a 200 with an empty body, a 200 whose body is not
JSON. gepetto talks to it with its OpenAI-compatible backend over real HTTP. Each faulty run is compared with
a run of the same settings without faults: best candidate, every candidate with its scores and lineage, the
Pareto front, the history, the proposal outcomes, rollouts and iterations must all be equal.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections import Counter
from typing import Any

import gepetto
from gepetto.engine import events as ev
from gepetto.lm.openai import OpenAILM
from gepetto.testing import FAULT_KINDS, FakeOpenAIServer, sim, sim_responder

MODELS = ("sim-task", "sim-reflection")
# what must not change with faults: the whole path of the run (the ledger and the wall time may)
SAME = ("best_candidate", "best_score", "seed_score", "candidates", "pareto_front", "rollouts_used", "stop_reason",
        "stop_message", "iterations", "history", "proposals")


def event_name(event: ev.Event) -> str:
    """The name of an engine event (the one place that knows how events look; kept small to adapt)."""
    return event.kind


def fault_run(rate: float, *, budget: int, per_round: int, fault_seed: int, timeout: float = 2.0, max_retries: int = 6,
              n_train: int = 30, n_val: int = 20, kinds: int = 10, seed: int = 0) -> dict[str, Any]:
    # two components and a reflection LM that rewrites from scratch: candidates trade off, so merges happen
    task = sim.task(n_train=n_train, n_val=n_val, kinds=kinds, components=2)
    events: Counter[str] = Counter()
    reflection = "sim:reflection?noise=0.3&seed=5&forget=true&max_rules=2"
    with FakeOpenAIServer(sim_responder("sim:task", reflection)) as srv:
        for model in MODELS:
            srv.random_faults(model, rate, seed=fault_seed, kinds=FAULT_KINDS, retry_after="1",
                              timeout_delay=3 * timeout)
        lms = [OpenAILM(m, base_url=srv.url, timeout=timeout, backoff=0.05, max_backoff=2.0, max_retries=max_retries)
               for m in MODELS]
        t0 = time.perf_counter()
        result = gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                                  program=task.program, task_lm=lms[0], reflection_lm=lms[1], budget=budget, seed=seed,
                                  max_concurrency=8, proposals_per_round=per_round, lm_retry_pause=0.2,
                                  callbacks=lambda event: events.update([event_name(event)]))
        wall = time.perf_counter() - t0
        requests = len(srv.requests)
        injected = {f"{m}/{k}": n for (m, k), n in sorted(srv.injected.items())}
    led = result.ledger
    d = result.to_dict()
    return {
        "rate": rate, "proposals_per_round": per_round, "max_retries": max_retries, "fault_seed": fault_seed,
        "budget": budget,
        "requests": requests, "injected": injected,
        "injected_by_kind": dict(Counter({k: n for (m, k), n in
                                          ((tuple(key.split("/")), n) for key, n in injected.items())})),
        "faults": sum(injected.values()),
        "retries": {r: u.retries for r, u in led.roles.items()},
        "failed_calls": {r: u.errors for r, u in led.roles.items()},  # gave up after the backend's retries
        "calls": {r: u.calls for r, u in led.roles.items()},
        "lm_unavailable_events": events["lm_unavailable"],
        "completed": not result.stop_reason.resumable,  # not cut short by an LM outage or a signal
        "stop_reason": result.stop_reason.value, "stop_message": result.stop_message,
        "rollouts_used": result.rollouts_used, "best_score": result.best_score,
        "candidates": len(result.candidates), "wall_s": round(wall, 1),
        "outcome": {k: d[k] for k in SAME},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", type=float, nargs="+", default=[0.1, 0.3])
    ap.add_argument("--budget", type=int, default=400)
    ap.add_argument("--proposals-per-round", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--fault-seed", type=int, default=0)
    ap.add_argument("--few-retries", type=int, nargs="*", default=[1],
                    help="also run the highest rate with the backend allowed this many retries only, so some calls "
                         "fail past them and the engine asks again later (lm_unavailable)")
    ap.add_argument("--json", help="write every row (with the full outcomes) to this file")
    args = ap.parse_args()
    rows = []
    for per_round in args.proposals_per_round:
        base = fault_run(0.0, budget=args.budget, per_round=per_round, fault_seed=args.fault_seed)
        base["identical"] = True
        rows.append(base)
        for rate in args.rates:
            row = fault_run(rate, budget=args.budget, per_round=per_round, fault_seed=args.fault_seed)
            row["identical"] = row["outcome"] == base["outcome"]
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "outcome"}), file=sys.stderr, flush=True)
        for retries in args.few_retries:
            row = fault_run(max(args.rates), budget=args.budget, per_round=per_round, fault_seed=args.fault_seed,
                            max_retries=retries)
            row["identical"] = row["outcome"] == base["outcome"]
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "outcome"}), file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": f"{platform.machine()}, {platform.python_version()}", "rows": rows}, f, indent=1)
    print("| fault rate | proposals/round | backend retries | requests | faults injected (429 / 500 / timeout / "
          "reset / empty / malformed) | retries (task + reflection) | calls failed past the retries (asked again "
          "later) | run completed? | result identical? | rollouts used | wall s |")
    print("|---:|---:|---:|---:|---|---:|---:|---|---|---:|---:|")
    for r in rows:
        kinds = " / ".join(str(r["injected_by_kind"].get(k, 0)) for k in FAULT_KINDS)
        failed = sum(r["failed_calls"].values())
        print(f"| {r['rate']:.0%} | {r['proposals_per_round']} | {r['max_retries']} | {r['requests']} | "
              f"{r['faults']} ({kinds}) | {r['retries'].get('task', 0)} + {r['retries'].get('reflection', 0)} | "
              f"{failed} ({r['lm_unavailable_events']}) | "
              f"{'yes' if r['completed'] else 'no: ' + r['stop_reason']} | {'yes' if r['identical'] else 'NO'} | "
              f"{r['rollouts_used']} | {r['wall_s']} |")


if __name__ == "__main__":
    main()
