"""Scale: engine time per iteration and peak memory with 10,000 validation examples and 1,000 candidates.

Usage: python benchmarks/reliability/scale.py [--candidates 1000] [--val 10000] [--iterations 12]
       [--merges 4] [--lineage tree|chain] [--json out.json]

A run that validates 1,000 candidates on 10,000 examples pays 10 million rollouts; the LMs are not what this
measures, so the pool is built directly in the engine's state: 1,000 candidates of the simulated task
(`gepetto.testing.sim`: an instruction holding a set of `rule-k`; an example of kind k is solved when its rule is
there), each with the validation scores the simulated LMs would give it, and a lineage (children add one rule
and sometimes drop one; 5% are merges). Then real iterations run through the engine with the simulated task
and reflection LMs: parent selection on the Pareto front, minibatch, reflection, the child's minibatch test,
and for an accepted child its validation on all 10,000 examples; and merge steps (the merge search over the
front, the subsample test and validation). Engine time = step time minus the time inside rollouts' program,
metric and LM calls is not separable here, so two figures: decisions (everything except evaluating rollouts)
and evaluation bookkeeping per rollout (the engine's share of a rollout, with LMs that answer at once).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import random
import re
import resource
import statistics
import time
from pathlib import Path
from typing import Any

from gepetto.api import build_engine
from gepetto.engine import events as ev
from gepetto.engine.merge import find_merge
from gepetto.engine.state import CandidateRecord
from gepetto.testing import sim
from gepetto.types import Candidate


def rss_mb() -> float:
    """Resident memory now (VmRSS), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def text_of(rules: frozenset[int] | set[int]) -> str:
    return "Answer the question." + "".join(f" Apply rule-{r}." for r in sorted(rules))


def candidate_of(rules: frozenset[int], components: int) -> Candidate:
    """The simulated task's candidate holding `rules`: one instruction, or `a` (even kinds) and `b` (odd)."""
    if components == 1:
        return Candidate(instruction=text_of(rules))
    return Candidate(a=text_of({r for r in rules if r % 2 == 0}), b=text_of({r for r in rules if r % 2}))


def build_pool(engine: Any, n: int, kinds: int, lineage: str, rng: random.Random, components: int = 1) -> None:
    """Fill the engine's state with `n` validated candidates of the simulated task (seed first)."""
    st = engine.state
    kind_of = [int(re.search(r"kind (\d+)", e.inputs["q"]).group(1)) for e in engine.valset]
    ids = [e.id for e in engine.valset]
    rules: list[frozenset[int]] = [frozenset()]
    parents: list[tuple[int, ...]] = [()]
    changed: list[str | None] = [None]
    seen = {frozenset()}
    while len(rules) < n:
        i = len(rules)
        if lineage == "chain":
            p = i - 1
        else:  # mostly recent parents, some old ones: a bushy tree
            p = rng.randrange(max(0, i - 20), i) if rng.random() < 0.8 else rng.randrange(i)
        rule = rng.randrange(kinds)
        component = "instruction" if components == 1 else "ab"[rule % 2]
        if lineage == "tree" and i > 10 and rng.random() < 0.05:
            q = rng.randrange(i)
            new, par, comp = rules[p] | rules[q], (p, q), None
        else:
            grown = set(rules[p]) | {rule}
            same = sorted(r for r in grown if components == 1 or r % 2 == rule % 2)
            if rng.random() < 0.5 and len(same) > 1:  # reflection that rewrote and forgot one
                grown.discard(rng.choice([r for r in same if r != rule]))
            new, par, comp = frozenset(grown), (p,), component
        if new in seen:
            continue
        seen.add(new)
        rules.append(new)
        parents.append(par)
        changed.append(comp)
    for i, (rs, par, comp) in enumerate(zip(rules, parents, changed, strict=True)):
        cand = candidate_of(rs, components)
        # float() per entry, as rollouts give them: the memory of a real pool
        scores = {eid: float(k in rs) for eid, k in zip(ids, kind_of, strict=True)}
        origin = "seed" if i == 0 else ("merge" if len(par) == 2 else "reflection")
        st.rollouts_used += len(ids)
        st.add_record(CandidateRecord(i, cand, par, origin, i, comp, scores, st.rollouts_used))
        engine._tried.add(cand.id)
    st.iteration = n


async def iterate(engine: Any, iterations: int, merges: int) -> list[dict[str, Any]]:
    """Real engine steps on the pool: reflective rounds, then merge steps; each timed, its evaluation apart."""
    st = engine.state
    engine._sem = asyncio.Semaphore(engine.config.max_concurrency)
    evaluate = engine._evaluate
    spent = {"s": 0.0, "n": 0}

    async def timed_evaluate(candidate: Any, examples: Any) -> Any:
        t0 = time.perf_counter()
        before = st.rollouts_used
        try:
            return await evaluate(candidate, examples)
        finally:
            spent["s"] += time.perf_counter() - t0
            spent["n"] += st.rollouts_used - before

    engine._evaluate = timed_evaluate
    rows = []
    for step in ["reflection"] * iterations + ["merge"] * merges:
        spent.update(s=0.0, n=0)
        n_before, rss_before = len(st.records), rss_mb()
        if step == "merge":
            st.merges_due = 1
        t0 = time.perf_counter()
        await (engine._merge_step() if step == "merge" else engine._reflective_round())
        total = time.perf_counter() - t0
        rows.append({"step": step, "total_s": total, "evaluate_s": spent["s"], "rollouts": spent["n"],
                     "decisions_s": total - spent["s"], "added": len(st.records) - n_before,
                     "front": len(st.archive.front), "rss_delta_mb": rss_mb() - rss_before})
    return rows


def micro(engine: Any, repeat: int = 5) -> dict[str, float]:
    """The engine's per-iteration decisions at this pool size, each timed alone (median of `repeat`), in ms."""
    st = engine.state
    out: dict[str, list[float]] = {"select a parent (votes + weighted draw)": [],
                                   "add a candidate to the Pareto front": [],
                                   "merge search over the whole front (find_merge, no pair tried yet)": [],
                                   "candidate means recomputed (before: every merge step; now kept)": []}
    rng = random.Random(0)
    for r in range(repeat):
        st.archive._weights = None  # as after a commit
        t0 = time.perf_counter()
        st.archive.sample(rng)
        out["select a parent (votes + weighted draw)"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        [rec.mean for rec in st.records]
        out["candidate means recomputed (before: every merge step; now kept)"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        find_merge(st.archive.front, [rec.candidate for rec in st.records], [rec.parents for rec in st.records],
                   st.means, set(), random.Random(r))
        out["merge search over the whole front (find_merge, no pair tried yet)"].append(time.perf_counter() - t0)
        row = st.archive.scores[rng.randrange(len(st.archive))].copy()
        t0 = time.perf_counter()
        copy = _archive_copy(st.archive)
        copy.add(row)
        out["add a candidate to the Pareto front"].append(time.perf_counter() - t0 - copy._copy_s)
    return {k: statistics.median(v) * 1000 for k, v in out.items()}


def _archive_copy(archive: Any) -> Any:
    """A copy of the archive, so timing an add leaves the pool as it was (the copy's own time is subtracted)."""
    import copy

    t0 = time.perf_counter()
    dup = copy.deepcopy(archive)
    dup._copy_s = time.perf_counter() - t0
    return dup


def real_run(n_val: int, budget: int, kinds: int, components: int) -> dict[str, Any]:
    """A whole run through `gepetto.optimize` (simulated LMs, no run store): time per iteration and memory."""
    import gepetto

    task = sim.task(n_train=200, n_val=n_val, kinds=kinds, components=components)
    marks: list[tuple[str, float, int]] = []

    def on_event(event: ev.Event) -> None:
        match event:  # the one place that reads events
            case ev.IterationEnded(used=used):
                marks.append((event.kind, time.perf_counter(), used))
            case ev.CandidateAdded(record=rec):
                marks.append((event.kind, time.perf_counter(), rec.rollouts_at_creation))

    rss0 = rss_mb()
    t0 = time.perf_counter()
    result = gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                              program=task.program, task_lm=sim.SimTaskLM(),
                              reflection_lm=sim.SimReflectionLM(max_rules=1, forget=components > 1, noise=0.2,
                                                                seed=1),
                              budget=budget, seed=0, max_concurrency=8, merge="merge(max=10)", callbacks=on_event)
    wall = time.perf_counter() - t0
    iters = [t for k, t, _ in marks if k == "iteration"]
    gaps = [b - a for a, b in zip([t0, *iters], iters, strict=False)]
    return {"val": n_val, "budget": budget, "wall_s": round(wall, 1), "rollouts": result.rollouts_used,
            "candidates": len(result.candidates), "merges": sum(c.origin == "merge" for c in result.candidates),
            "iterations": result.iterations, "front": len(result.pareto_front), "best": result.best_score,
            "us_per_rollout": round(wall / max(1, result.rollouts_used) * 1e6),
            "median_iteration_s": round(statistics.median(gaps), 3) if gaps else None,
            "rss_start_mb": round(rss0), "peak_mb": round(peak_mb()),
            "bytes_per_rollout": round((peak_mb() - rss0) * 2**20 / max(1, result.rollouts_used)),
            "stop_reason": result.stop_reason.value}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", type=int, default=1000)
    ap.add_argument("--val", type=int, default=10_000)
    ap.add_argument("--train", type=int, default=200)
    ap.add_argument("--kinds", type=int, default=40)
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--merges", type=int, default=4)
    ap.add_argument("--lineage", choices=["tree", "chain"], default="tree")
    ap.add_argument("--components", type=int, choices=[1, 2], default=2,
                    help="2: merges find new children; 1: every merge gives a parent back (the search's worst case)")
    ap.add_argument("--real-budget", type=int,
                    help="instead: one whole run through gepetto.optimize with this budget (no pool built)")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.real_budget:
        row = real_run(args.val, args.real_budget, args.kinds, args.components)
        if args.json:
            Path(args.json).write_text(json.dumps(row, indent=1))
        print(json.dumps(row))
        return
    rss0 = rss_mb()
    task = sim.task(n_train=args.train, n_val=args.val, kinds=args.kinds, components=args.components)
    engine = build_engine(task.seed_candidate, task.trainset, task.metric, valset=task.valset, program=task.program,
                          task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(max_rules=2, forget=True,
                                                                                     noise=0.2, seed=1),
                          budget=10**9, seed=0, max_concurrency=8, merge=f"merge(max={10**6})")
    t0 = time.perf_counter()
    build_pool(engine, args.candidates, args.kinds, args.lineage, random.Random(0), args.components)
    gc.collect()
    built_s, rss_pool = time.perf_counter() - t0, rss_mb()
    ms = micro(engine)
    rows = asyncio.run(iterate(engine, args.iterations, args.merges))
    evals = [r for r in rows if r["rollouts"] >= args.val]
    per_rollout_us = (sum(r["evaluate_s"] for r in evals) / max(1, sum(r["rollouts"] for r in evals))) * 1e6
    mem_per_rollout = (sum(r["rss_delta_mb"] for r in evals) * 2**20 / max(1, sum(r["rollouts"] for r in evals)))
    summary = {
        "machine": f"{platform.machine()}, Python {platform.python_version()}", "args": vars(args),
        "pool_build_s": round(built_s, 1), "rss_start_mb": round(rss0), "rss_pool_mb": round(rss_pool),
        "peak_mb": round(peak_mb()), "front": len(engine.state.archive.front),
        "candidates": len(engine.state.records), "micro_ms": {k: round(v, 2) for k, v in ms.items()},
        "evaluation_us_per_rollout": round(per_rollout_us), "memory_bytes_per_rollout_kept": round(mem_per_rollout),
        "steps": rows,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    print(f"pool: {summary['candidates']} candidates x {args.val} validation examples ({args.lineage} lineage, "
          f"{args.components} component(s)), "
          f"front {summary['front']}; built in {built_s:.0f} s; memory {rss0:.0f} MB at start, {rss_pool:.0f} MB "
          f"with the pool; peak {summary['peak_mb']} MB\n")
    print("| decision (one iteration's share) | ms |\n|---|---:|")
    for k, v in ms.items():
        print(f"| {k} | {v:.2f} |")
    print("\n| step | total s | decisions s | rollouts | evaluation s | candidates added | front | memory delta MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['step']} | {r['total_s']:.2f} | {r['decisions_s']:.3f} | {r['rollouts']} | {r['evaluate_s']:.2f} |"
              f" {r['added']} | {r['front']} | {r['rss_delta_mb']:.1f} |")
    print(f"\nevaluation bookkeeping: {per_rollout_us:.0f} us per rollout (LMs answer at once); memory kept per "
          f"rollout: {mem_per_rollout:.0f} bytes")


if __name__ == "__main__":
    main()
