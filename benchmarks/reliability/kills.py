"""Kills: a stored run SIGKILLed over and over, in every phase, resumes to exactly the result of a run never
interrupted, and pays again for at most the rollouts that were in flight.

Usage: python benchmarks/reliability/kills.py [--proposals-per-round 1 3] [--json out.json]

The run is `tests/helpers/kill_run.py` (the simulated task on two components, with merges; the run store in a
temporary directory; response cache off, so every rollout is paid with one task-LM call). For each group of
kill points (a phase, or the inside of a run-store transaction), a fresh run is started and SIGKILLed at each
point in turn (each session resumes the last one), then resumed to the end; its result is compared with an
uninterrupted run: best candidate, every candidate with scores and lineage, the front, the history, proposal
outcomes, rollouts and iterations. Rollouts paid twice = task-LM calls over all sessions minus those of the
uninterrupted run; "in flight at the kills" = per killed session, task-LM calls made minus rollouts it stored.
A last group stops the run with SIGTERM (a graceful stop, like Ctrl-C) instead.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HELPER = ROOT / "tests" / "helpers" / "kill_run.py"
sys.path.insert(0, str(HELPER.parent))

import kill_run  # noqa: E402

from gepetto.lm.names import make_lm  # noqa: E402
from gepetto.runner import open_run  # noqa: E402
from gepetto.store.snapshot import run_snapshot  # noqa: E402
from gepetto.store.sqlite import RunStore  # noqa: E402

SAME = ("best_candidate", "best_score", "seed_score", "candidates", "pareto_front", "rollouts_used", "stop_reason",
        "iterations", "history", "proposals")
MAX_IN_FLIGHT = 4  # the kill run's max_concurrency: rollouts that can be under way at once


def outcome(storage: Path) -> dict[str, Any]:
    res = run_snapshot(RunStore(storage), "r")["result"]
    return {k: res[k] for k in SAME}


def paid(path: Path) -> Counter[str]:
    return Counter(path.read_text().split()) if path.exists() else Counter()


def uninterrupted(per_round: int, work: Path) -> tuple[dict[str, Any], Counter[str], list[str]]:
    """The reference run, in this process: its outcome, the LM calls it paid and its timeline of events."""
    os.environ["KILL_RUN_PAID"] = str(work / "paid-whole")
    cfg = kill_run.make_config(True, per_round, "off")
    timeline: list[str] = []
    stored = open_run(cfg, storage=work / "whole.sqlite", run="r",
                      callbacks=lambda event: timeline.append(kill_run.event_name(event)),
                      task_lm=kill_run.PaidLM(make_lm(cfg.task_lm), "task"),
                      reflection_lm=kill_run.PaidLM(make_lm(cfg.reflection_lm), "reflection"))
    stored.run()
    del os.environ["KILL_RUN_PAID"]
    return outcome(work / "whole.sqlite"), paid(work / "paid-whole"), timeline


def position(timeline: list[str], spec: str) -> float:
    """Where an EVENT:K:R kill lands in the uninterrupted run's timeline (other kinds: in no fixed place)."""
    event, k, r = spec.split(":")
    hits = [i for i, name in enumerate(timeline) if name == event]
    if int(k) > len(hits):
        return float("inf")
    i, left = hits[int(k) - 1], int(r)
    while left and i + 1 < len(timeline):
        i += 1
        left -= timeline[i] == "rollout"
    return i


def spread(timeline: list[str], event: str, extras: list[int]) -> list[str]:
    """One kill per extra, at occurrences of `event` spread over the run (first, middle, last quarter...)."""
    n = timeline.count(event)
    ks = sorted({max(1, round(n * (i + 1) / (len(extras) + 1))) for i in range(len(extras))})
    return [f"{event}:{k}:{r}" for k, r in zip(ks, extras, strict=False)]


def groups(timeline: list[str], rollouts: int) -> dict[str, list[str]]:
    def ordered(specs: list[str]) -> list[str]:
        return sorted(specs, key=lambda s: position(timeline, s))

    merges = [f"merge:{k}:0" for k in range(1, timeline.count("merge") + 1)][:2]
    merges += [f"validation/merge:{k}:3" for k in range(1, timeline.count("validation/merge") + 1)][:2]
    return {
        "seed validation": ["validation/seed:1:2", "validation/seed:1:6", "validation/seed:1:10"],
        "parent minibatch": ordered(spread(timeline, "minibatch", [0, 1, 2])),
        # the first after a child's minibatch test (the answer is kept), then twice inside the call (it is not)
        "reflection": [*spread(timeline, "proposal", [0]), "call:reflection:2", "call:reflection:2"],
        "validation of a child": ordered(spread(timeline, "validation/reflection", [0, 3, 8])),
        "merge (after the subsample test; during validation)": ordered(merges),
        "inside a store transaction": ["tx:put_candidate:3", "tx:put_rollout:40", "tx:put_lm_answer:2",
                                       f"tx:save_ledger:{rollouts // 2}", "tx:add_event:12"],
        "inside a task-LM call (rollout in flight)": ["call:task:30", "call:task:30"],
        "SIGTERM (graceful stop)": [f"sigterm:{rollouts // 3}", f"sigterm:{2 * rollouts // 3}"],
    }


def session(storage: Path, when: str, per_round: int, paid_file: Path) -> tuple[int, str, float]:
    env = {**os.environ, "KILL_RUN_CACHE": "off", "KILL_RUN_PAID": str(paid_file),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(HELPER), str(storage), "r", when, str(per_round)], env=env,
                          capture_output=True, text=True, timeout=600)
    return proc.returncode, (proc.stdout + proc.stderr).strip()[-400:], time.perf_counter() - t0


def run_group(name: str, specs: list[str], per_round: int, work: Path, expected: dict[str, Any],
              whole_paid: Counter[str]) -> dict[str, Any]:
    storage, paid_file = work / "killed.sqlite", work / "paid"
    kills = landed = resumed_ok = 0
    lost: list[int] = []  # per killed session: task-LM calls made minus rollouts stored
    problems: list[str] = []
    graceful = name.startswith("SIGTERM")
    for i, when in enumerate([*specs, "never"]):
        before_calls = paid(paid_file)["task"]
        before_rollouts = RunStore(storage).count_rollouts("r") if storage.exists() else 0
        rc, tail, _ = session(storage, when, per_round, paid_file)
        if i > 0:  # this session resumed a killed (or stopped) one
            resumed_ok += rc in (0, -9)
        if when == "never":
            if rc != 0:
                problems.append(f"final resume failed (rc {rc}): {tail}")
            continue
        kills += 1
        if (rc == 0 and "interrupted (SIGTERM)" in tail) if graceful else rc == -9:
            landed += 1
        else:
            problems.append(f"{when}: rc {rc} ({tail[-200:]})")
        stored = RunStore(storage).count_rollouts("r")
        lost.append((paid(paid_file)["task"] - before_calls) - (stored - before_rollouts))
    got = outcome(storage) if storage.exists() else {}
    total = paid(paid_file)
    identical = got == expected
    if not identical:
        problems.append("final result differs from the uninterrupted run: "
                        + ", ".join(k for k in SAME if got.get(k) != expected.get(k)))
    stored = RunStore(storage).count_rollouts("r")
    return {"group": name, "proposals_per_round": per_round, "specs": specs, "kills": kills, "landed": landed,
            "resumes_completed": resumed_ok, "resumes": len(specs), "identical": identical,
            "paid_twice": total["task"] - whole_paid["task"], "in_flight_at_kills": sum(lost),
            "most_in_flight_at_one_kill": max(lost, default=0),
            "reflection_paid_twice": total["reflection"] - whole_paid["reflection"],
            "stored_equals_used": stored == got.get("rollouts_used"), "problems": problems}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--proposals-per-round", type=int, nargs="+", default=[1, 3])
    ap.add_argument("--only", help="run only the groups whose name contains this")
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args()
    rows = []
    for per_round in args.proposals_per_round:
        with tempfile.TemporaryDirectory() as tmp:
            expected, whole_paid, timeline = uninterrupted(per_round, Path(tmp))
            for name, specs in groups(timeline, expected["rollouts_used"]).items():
                if args.only and args.only not in name:
                    continue
                work = Path(tmp) / f"g{len(rows)}"
                work.mkdir()
                row = run_group(name, specs, per_round, work, expected, whole_paid)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print("| phase | proposals/round | kill points | kills (landed) | resumes completed | final result identical? "
          "| rollouts paid twice | in flight at the kills (most at one) | reflection calls paid twice |")
    print("|---|---:|---|---:|---:|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['group']} | {r['proposals_per_round']} | {', '.join(f'`{s}`' for s in r['specs'])} | "
              f"{r['kills']} ({r['landed']}) | {r['resumes_completed']}/{r['resumes']} | "
              f"{'yes' if r['identical'] else 'NO'} | {r['paid_twice']} | {r['in_flight_at_kills']} "
              f"({r['most_in_flight_at_one_kill']}) | "
              f"{r['reflection_paid_twice']} |")
    sig = [r for r in rows if not r["group"].startswith("SIGTERM")]
    print(f"\nSIGKILLs: {sum(r['kills'] for r in sig)} ({sum(r['landed'] for r in sig)} landed where aimed); "
          f"resumes completed: {sum(r['resumes_completed'] for r in sig)}/{sum(r['resumes'] for r in sig)}; "
          f"identical final results: {sum(r['identical'] for r in sig)}/{len(sig)}; rollouts paid twice: "
          f"{sum(r['paid_twice'] for r in sig)} (in flight at the kills: {sum(r['in_flight_at_kills'] for r in sig)}; "
          f"most at one kill: {max((r['most_in_flight_at_one_kill'] for r in sig), default=0)}, at most "
          f"{MAX_IN_FLIGHT} can be)")
    for r in rows:
        for p in r["problems"]:
            print(f"- {r['group']} ({r['proposals_per_round']}/round): {p}")


if __name__ == "__main__":
    main()
