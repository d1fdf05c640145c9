"""The real track: tasks with cheap rollouts and measured headroom, on the embedded models (issue 10).

Usage:
  python benchmarks/realtrack.py headroom [--tasks ...]                    # baseline / seed / expert on val+test
  python benchmarks/realtrack.py optimize --proposer edit --seeds 0 1 2 [--tasks ...] [--budget 300] [--fewshot 4]
  python benchmarks/realtrack.py optimize ... --set validation='"racing"' --run-suffix NAME  # an engine option, JSON

Every task keeps one fixed split (data seed 0: CLINC150's / SNIPS' own train, val and test files); the
optimisation seed varies. Runs are stored and resumable in --storage (run name `rt-TASK-PROPOSER-sSEED`,
`rt-TASK-PROPOSER-fsN-sSEED` with `--fewshot N`, `rt-TASK-PROPOSER-sSEED-SUFFIX` with `--run-suffix`);
task-LM answers are cached there too, so scoring the same candidate twice costs nothing. Each line of
results is appended as JSON to --log; `table` turns the log into the markdown tables of
benchmarks/results/realtrack.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from gepetto.api import evaluate_async
from gepetto.engine import events as ev
from gepetto.lm.cache import CachedLM
from gepetto.lm.names import make_lm
from gepetto.runner import load_config, start_or_resume
from gepetto.tasks import load_task
from gepetto.types import Candidate

TASKS = ["clinc-banking", "clinc-credit-oos", "snips-restaurant"]
TASK_LM, REFLECTION_LM = "local:qwen2.5-coder-0.5b", "local:qwen2.5-coder-1.5b"
SPLIT_SEED = 0


def _task(name: str) -> Any:
    return load_task(name, seed=SPLIT_SEED)


async def _score(task: Any, candidate: Candidate, examples: list, lm: Any) -> float:
    ev = await evaluate_async(candidate, examples, task.metric, program=task.program, task_lm=lm)
    return ev.mean


def _constant(task: Any, examples: list) -> float:
    out = task.baseline
    return sum(task.metric(e, out, []).value for e in examples) / len(examples)


def headroom(name: str, storage: Path) -> dict[str, Any]:
    task = _task(name)
    lm = CachedLM(make_lm(TASK_LM), storage)
    t0 = time.perf_counter()
    row: dict[str, Any] = {"kind": "headroom", "task": name,
                           "splits": [len(task.trainset), len(task.valset), len(task.testset)],
                           "baseline": task.baseline, "expert_form": "rules"}
    for split, data in (("val", task.valset), ("test", task.testset)):
        row[f"baseline_{split}"] = _constant(task, data)
        row[f"seed_{split}"] = asyncio.run(_score(task, task.seed_candidate, data, lm))
        row[f"expert_{split}"] = asyncio.run(_score(task, task.expert_candidate, data, lm))
    row["seconds"] = round(time.perf_counter() - t0)
    return row


def run_name(task: str, proposer: str, seed: int, fewshot: int = 0, suffix: str = "") -> str:
    """The stored run's name. A run with demonstrations is another run than one without (never a resume of it):
    `-fsN` in its name, unless a --run-suffix names it (as runs with --fewshot started before this tag did:
    they resume under that name)."""
    return (f"rt-{task}-{proposer}" + (f"-fs{fewshot}" if fewshot and not suffix else "") + f"-s{seed}"
            + (f"-{suffix}" if suffix else ""))


def optimize(name: str, proposer: str, seed: int, budget: int, storage: Path,
             extra: dict[str, Any], fewshot: int = 0, options: dict[str, Any] | None = None,
             events: Path | None = None) -> dict[str, Any]:
    task = _task(name)
    cfg = load_config(task=name, task_lm=TASK_LM, reflection_lm=REFLECTION_LM, seed=seed, budget=budget,
                      proposer=proposer, task_options={"seed": SPLIT_SEED}, fewshot=fewshot, **(options or {}))
    run = run_name(name, proposer, seed, fewshot, extra.get("run_suffix") or "")
    counts: dict[str, int] = {"reflections": 0, "usable": 0, "demos_tested": 0, "demos_accepted": 0}

    def note(kind: str, **data: Any) -> None:  # the proposals' story, for diagnosis (--events)
        if events is not None:
            with open(events, "a") as f:
                f.write(json.dumps({"run": run, "kind": kind, **data}) + "\n")

    def on_event(event: ev.Event) -> None:
        if isinstance(event, ev.ProposalTested):
            note("test", parent=event.parent, rule=event.rule, pattern=event.pattern, origin=event.origin,
                 before=event.minibatch_before, after=event.minibatch_after, accepted=event.accepted)
        elif isinstance(event, ev.CandidateAdded):
            rec = event.record
            note("candidate", index=rec.index, parents=list(rec.parents), origin=rec.origin, mean=rec.mean,
                 scores=rec.val_scores, rollouts=rec.rollouts_at_creation)
        if isinstance(event, ev.ReflectionAnswered):
            note("reflection", rejected=event.rejected.value if event.rejected else None, text=event.text)
            counts["reflections"] += 1
            counts["usable"] += event.rejected is None
        elif isinstance(event, ev.ProposalTested) and event.origin == "demo":
            counts["demos_tested"] += 1
            counts["demos_accepted"] += event.accepted
        elif isinstance(event, ev.CandidateAdded):
            rec = event.record
            print(f"[{name} {proposer} s{seed}] candidate {rec.index} ({rec.origin}) val {rec.mean:.3f} "
                  f"at {rec.rollouts_at_creation} rollouts", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    _, result = start_or_resume(cfg, storage=storage, run=run, callbacks=on_event)
    seconds = time.perf_counter() - t0
    lm = CachedLM(make_lm(TASK_LM), storage)
    best_test = asyncio.run(_score(task, result.best_candidate, task.testset, lm))
    return {"kind": "run", "task": name, "proposer": proposer, "fewshot": fewshot, "options": options or {},
            "seed": seed, "budget": budget, "rollouts": result.rollouts_used, "seed_val": result.seed_score,
            "best_val": result.best_score,
            "best_test": best_test, "candidates": len(result.candidates),
            "proposals": {str(k): v for k, v in result.proposals.items()},
            "reflections": counts["reflections"], "usable": counts["usable"],
            "demos_tested": counts["demos_tested"], "demos_accepted": counts["demos_accepted"],
            "demo_candidates": sum(c.origin == "demo" for c in result.candidates), "seconds": round(seconds),
            "stop_reason": result.stop_reason.value, "stop_message": result.stop_message,
            "best": dict(result.best_candidate)}


def _variant(row: dict[str, Any]) -> str:
    """How a run is named in the tables: its proposer, `+fewshot N` with demonstrations, and any --set option."""
    return (row["proposer"] + (f" +fewshot {row['fewshot']}" if row.get("fewshot") else "")
            + "".join(f" +{k}={v}" for k, v in sorted(row.get("options", {}).items())))


def read_log(log: Path) -> list[dict[str, Any]]:
    """The rows of a log (JSON lines, gzipped when its name ends in .gz); none if there is no log yet."""
    if not log.is_file():
        return []
    text = gzip.decompress(log.read_bytes()).decode() if log.suffix == ".gz" else log.read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def table(log: Path) -> str:
    rows = read_log(log)
    experts: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["kind"] == "headroom":
            experts.setdefault(r["task"], []).append(r)
    head = {name: hs[-1] for name, hs in experts.items()}  # the latest expert sets the headroom
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}  # a resumed run's row replaces its earlier rows
    for r in rows:
        if r["kind"] == "run":
            latest[(r["task"], _variant(r), r.get("label"), r["seed"], r["budget"])] = r
    runs = list(latest.values())
    out = []
    for name, h in head.items():
        out.append(f"\n### {name} (train/val/test {'/'.join(map(str, h['splits']))})\n")
        out.append("| candidate | val | test |\n|---|---:|---:|")
        out.append(f"| trivial baseline (always `{h['baseline']}`) | {h['baseline_val']:.3f} | "
                   f"{h['baseline_test']:.3f} |")
        out.append(f"| plain seed | {h['seed_val']:.3f} | {h['seed_test']:.3f} |")
        forms = {e.get("expert_form", "definitions"): e for e in experts[name]}  # the latest row of each form
        for form, e in forms.items():
            out.append(f"| expert prompt (hand-written, {form} form) | {e['expert_val']:.3f} | "
                       f"{e['expert_test']:.3f} |")
        gap = h["expert_test"] - h["seed_test"]
        by: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for r in runs:
            if r["task"] == name:
                by.setdefault((f"{_variant(r)}{' ' + r['label'] if r.get('label') else ''}", r["budget"]),
                              []).append(r)
        for (proposer, budget), rs in sorted(by.items()):
            tests = [r["best_test"] for r in rs]
            vals = [r["best_val"] for r in rs]
            spread = f" ± {statistics.stdev(tests):.3f}" if len(tests) > 1 else ""
            closed = (statistics.mean(tests) - h["seed_test"]) / gap if gap > 0 else float("nan")
            out.append(f"| gepetto `{proposer}`, budget {budget}, seeds {','.join(str(r['seed']) for r in rs)} | "
                       f"{statistics.mean(vals):.3f} | {statistics.mean(tests):.3f}{spread} "
                       f"(gap closed {closed:+.0%}) |")
        out.append("")
        for r in runs:
            if r["task"] == name:
                props = ", ".join(f"{k} {v}" for k, v in sorted(r["proposals"].items()))
                label = f"`{_variant(r)}`" + (f" {r['label']}" if r.get("label") else "")
                if r.get("fewshot"):
                    props += (f"; demonstrations {r['demos_accepted']}/{r['demos_tested']} accepted, "
                              f"{r['demo_candidates']} in the pool")
                out.append(f"- {label} seed {r['seed']}: test {r['best_test']:.3f}, val "
                           f"{r['seed_val']:.3f} -> {r['best_val']:.3f}, {r['rollouts']}/{r['budget']} rollouts, "
                           f"{r['candidates']} candidates, {r['usable']}/{r['reflections']} reflection answers "
                           f"usable, {r['seconds']} s; {props}")
    return "\n".join(out)


def _option(item: str) -> tuple[str, Any]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise SystemExit(f"--set wants KEY=VALUE, got {item!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value  # a bare string, e.g. accept=paired


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["headroom", "optimize", "table"])
    ap.add_argument("--tasks", nargs="+", default=TASKS)
    ap.add_argument("--proposer", default="edit", choices=["edit", "rewrite"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--budget", type=int, default=300)
    ap.add_argument("--storage", default="realtrack.sqlite")
    ap.add_argument("--log", default="benchmarks/results/realtrack.jsonl.gz")
    ap.add_argument("--run-suffix", default="", help="appended to stored run names (a new run, not a resume)")
    ap.add_argument("--label", default="", help="names this variant in the tables (e.g. the commit)")
    ap.add_argument("--fewshot", type=int, default=0, help="few-shot demonstrations per component (0: none)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an engine option for `optimize`, VALUE read as JSON (e.g. racing=true); repeatable")
    ap.add_argument("--events", default=None, help="append each proposal's test, reflection answer and validated "
                    "candidate of `optimize` to this JSON-lines file (diagnosis)")
    ap.add_argument("--threads", type=int, default=None,
                    help="llama.cpp threads per model (default 2; 1 when two runs share 2 cores)")
    args = ap.parse_args()
    if args.threads is not None:
        global TASK_LM, REFLECTION_LM
        TASK_LM, REFLECTION_LM = (f"{lm}?n_threads={args.threads}" for lm in (TASK_LM, REFLECTION_LM))
    log, storage = Path(args.log), Path(args.storage)
    options = dict(_option(item) for item in args.set)
    if args.what == "table":
        print(table(log))
        return
    for name in args.tasks:
        for seed in args.seeds if args.what == "optimize" else [None]:
            row = headroom(name, storage) if seed is None else optimize(
                name, args.proposer, seed, args.budget, storage, {"run_suffix": args.run_suffix}, args.fewshot,
                options, Path(args.events) if args.events else None)
            row["label"] = args.label
            row["command"] = "python benchmarks/realtrack.py " + " ".join(sys.argv[1:])
            row["date"] = time.strftime("%Y-%m-%d %H:%M")
            print(json.dumps(row), flush=True)
            with gzip.open(log, "at") if log.suffix == ".gz" else open(log, "a") as f:  # a gzip file takes appends
                f.write(json.dumps(row) + "\n")
            if row.get("stop_reason") in ("sigterm", "interrupted"):  # stopped from outside: stop here too
                print("stopped; the runs after this one are not made", file=sys.stderr)
                return


if __name__ == "__main__":
    main()
