"""The user's track: the default configuration, with metrics as users write them, on dev and locked test splits.

Every run here is what a user gets from `gepetto.optimize(seed, trainset, metric, valset=..., program=...,
budget=300, seed=S)` with the embedded models and no other option (unless `--set` says so, and then the row says
it). The metric is one of:

- `plain`: a Score with one free-text sentence, as the README teaches ("Correct: the answer is 'X'." /
  "Incorrect: answered '...', the correct answer is 'Y'."), no `pattern`;
- `float`: a bare number (gepetto writes its own feedback line);
- `builtin`: the task's own metric (its feedback may carry `Score.pattern`).

The score of each is the task's own (exact label after light normalisation, slot F1, exact number).

Splits. Every task has a train and a validation split (the run sees only those), a **dev test** split on which every
decision is made, and a **locked test** split scored only by `locked`, when an issue is closed; a locked row says
whether it was the first look. `clinc-home`, `clinc-auto`, `clinc-meta`, `clinc-travel`, `clinc-utility`,
`clinc-smalltalk8`, `hwu-qa`, `hwu-transport`, `hwu-leisure` and `hwu-daily` are locked-only tasks: nothing was ever
decided on them, so `run` does not score their dev test either.

Usage:
  python benchmarks/usertrack.py baselines --tasks clinc-banking ...  # trivial / seed / expert / empty, dev test
  python benchmarks/usertrack.py run --tasks clinc-banking --metric plain --seeds 0 1 2 [--budget 300]
  python benchmarks/usertrack.py reselect --tasks ...   # stored runs of another best rule: today's best
  python benchmarks/usertrack.py locked --tasks ... [--label L]  # first look at the locked split (L: a variant)
  python benchmarks/usertrack.py table
  python benchmarks/usertrack.py family --tasks hwu-iot ... --labels b59 a2   # a family's compact tables

Runs are stored (and resumable) in --storage, named `ut-TASK-METRIC-sSEED[-LABEL]`; task-LM answers are cached
there. Rows are appended as JSON to --log.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from realtrack import _option, read_log  # (--set KEY=VALUE, as realtrack.py reads it; its log reader)
from user_metrics import user_metric

import gepetto
from gepetto.api import evaluate_async
from gepetto.engine import events as ev
from gepetto.engine.pareto import EVIDENCE_LEVEL, stored_best
from gepetto.lm.cache import CachedLM
from gepetto.lm.names import make_lm
from gepetto.tasks import hwu64, load_task
from gepetto.types import Candidate, Example

TASK_LM, REFLECTION_LM = "local:qwen2.5-coder-0.5b", "local:qwen2.5-coder-1.5b"
TASKS = ["clinc-banking", "clinc-kitchen", "clinc-credit-oos", "clinc-work-oos", "snips-weather", "gsm8k-plain"]
# HWU64, the development family of issue 59 (scenarios with at least 4 intents); qa and transport are locked-only,
# named before any run (src/gepetto/tasks/hwu64.py)
HWU_DEV = ["hwu-iot", "hwu-general", "hwu-play", "hwu-email"]
LOCKED_ONLY = {"clinc-home", "clinc-auto", "clinc-meta", "clinc-travel", "clinc-utility", "clinc-smalltalk8",
               *(f"hwu-{s}" for s in hwu64.LOCKED_ONLY)}
# task loader options: each task's fixed splits (data seed 0) and, for the new task types, their expert form
TASK_OPTIONS: dict[str, dict[str, Any]] = {"snips-weather": {"expert_form": "examples"}}
LOCKED_SEEDS = (0, 1, 2)  # every task's locked figure is of these seeds' runs
LOG = Path("benchmarks/results/usertrack.jsonl.gz")  # gzip members appended, one per write
# the rule that chose a run's best (rows before it have none: "seed", the best had to beat the seed only)
BEST_RULE = "lineage"  # engine/pareto.py: beats the seed, and the best before it unless its child (flip test)
OLD_RULES = {"seed": "beats the seed only", "chain-flip": "beats the seed and every best before it"}
# what the labels of variant rows stand for (dev split only; the table lists those it shows)
LABELS = {
    "b200": "the default as it stands at budget 200, the size of the issue's families A-C (d420379; dev test only)",
    "trim2": "trim proposals inside the search: the seed's units first, then a 0.25 share on later parents (2586a8d)",
    "trim3": "trim proposals inside the search, the seed's units only, up to 4 (d6b128b)",
    "open4": "trims as openings before the search, up to 4 (`--set proposer=auto(trim=4)`, 787a175)",
    "val4": "trims as openings raced on the validation examples against the seed, up to 4 (`--set "
            "proposer=auto(trim=4)`, f4590fd)",
    "ctl": "the default re-run at open4's commit (787a175; the default's path is the same at val4's): the control of "
           "both, seed by seed",
    "golds": "the default since af31064: demonstrations from golds on the rewrite route (`fewshot(gold=null)`); each "
             "row is the replay at af31064 of a run made first from a worktree with the change uncommitted (the same "
             "best, scores and proposals; its seconds are that run's, with LM answers cached where paths met)",
    "m": "the default before af31064 (ec00125's path), more dev seeds: with `val4` s0-s2, s6 and s7 the control of "
         "`golds`, seed by seed",
    "nu": "the default since 766aa6f: no retry after a rule the instruction already has (the labels route); the dev "
          "tasks' rows are runs made from a worktree of 2613157 with that change uncommitted, read back from the "
          "store at 766aa6f (seconds 0; replayed there under another name from the LM cache, all 24 gave the same "
          "best, scores and proposals); home and auto ran at 766aa6f, with LM answers cached where paths met the "
          "default's",
    "b59": "the default before issue 59's changes (6b82e4e), on the HWU64 tasks (its development family and, for "
           "hwu-qa and hwu-transport, its locked-only tasks)",
    "a1": "issue 59's first changes (015b72d: no rule refused for the words of answer names, pasted messages refused, "
          "a consequent given its answer, patterns asked again before a stall, a stall that says why, a constant "
          "answer no gain)",
    "a2": "the default at issue 59's close (ca35e28: `a1`, evidence bought on fresh training examples for a leader "
          "held back from the best, a pattern asked again further along the temperature schedule)",
    "r61": "the default of 2026-11-23 on a program of two steps (5ee56f7): rules for the step that answers, the "
           "router rewritten whole",
    "r61c": "the default before issue 61's change, run again (2c70469)",
    "s61": "issue 61's change (f901d5b): an inner step whose own answers are a closed set (a router) gets rules, its "
           "right answer read from the feedback; the other steps rewritten whole",
    "b61": "the default before issue 61's change on snips-routed (2c70469: every step rewritten whole)",
    "i38": "the default at issue 38's partial stop (aff965e: batched decoding with flash attention, the reflection "
           "LM's job first in its requests, answers kept for retries); locked split scored at that stop",
}


def task_of(name: str, split: str) -> Any:
    return load_task(name, seed=0, test_split=split, **TASK_OPTIONS.get(name, {}))


def _lm() -> Any:
    return make_lm(TASK_LM)


async def _score(task: Any, candidate: Candidate, examples: list[Example], storage: Path) -> float:
    lm = CachedLM(_lm(), storage)
    ev_ = await evaluate_async(candidate, examples, task.metric, program=task.program, task_lm=lm, max_concurrency=8)
    return ev_.mean


def _constant(task: Any, examples: list[Example]) -> float:
    return sum(task.metric(e, task.baseline, []).value for e in examples) / len(examples)


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()


def baselines(name: str, storage: Path, split: str) -> dict[str, Any]:
    task = task_of(name, split)
    row: dict[str, Any] = {"kind": "baselines", "task": name, "split": split, "n_test": len(task.testset),
                           "baseline": task.baseline}
    row["trivial"] = _constant(task, task.testset)
    row["seed"] = asyncio.run(_score(task, task.seed_candidate, task.testset, storage))
    row["expert"] = asyncio.run(_score(task, task.expert_candidate, task.testset, storage))
    # no instruction at all: what the task model does on its own habits (on GSM8K more than the expert's prompt)
    row["empty"] = asyncio.run(_score(task, Candidate({k: "" for k in task.seed_candidate}), task.testset, storage))
    return row


def run_name(name: str, metric: str, seed: int, label: str) -> str:
    return f"ut-{name}-{metric}-s{seed}" + (f"-{label}" if label else "")


def run(name: str, metric: str, seed: int, budget: int, storage: Path, options: dict[str, Any],
        label: str) -> dict[str, Any]:
    task = task_of(name, "dev")
    counts: dict[str, Any] = {"reflections": 0, "usable": 0, "route": None}
    # per component: its proposals tested, accepted on their test, and added to the pool (validated)
    modules: dict[str, dict[str, int]] = {}
    merges = {"tested": 0, "accepted": 0}

    def on_event(event: ev.Event) -> None:
        if isinstance(event, ev.ProposalTested):
            mod = modules.setdefault(event.component, {"tested": 0, "accepted": 0, "added": 0})
            mod["tested"] += 1
            mod["accepted"] += event.accepted
        elif isinstance(event, ev.MergeTested):
            merges["tested"] += 1
            merges["accepted"] += event.accepted
        if isinstance(event, ev.CandidateAdded) and event.record.component:
            modules.setdefault(event.record.component, {"tested": 0, "accepted": 0, "added": 0})["added"] += 1
        if type(event).__name__ == "RouteChosen":  # (a gepetto before routes has none)
            counts["route"] = event.describe()  # type: ignore[attr-defined]
        elif isinstance(event, ev.ReflectionAnswered):
            counts["reflections"] += 1
            counts["usable"] += event.rejected is None
        elif isinstance(event, ev.CandidateAdded):
            rec = event.record
            print(f"[{name} {metric} s{seed}] candidate {rec.index} ({rec.origin}) val {rec.mean:.3f} at "
                  f"{rec.rollouts_at_creation} rollouts", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    result = gepetto.optimize(task.seed_candidate, task.trainset, user_metric(task, metric), valset=task.valset,
                              program=task.program, task_lm=TASK_LM, reflection_lm=REFLECTION_LM, budget=budget,
                              seed=seed, storage=storage, run=run_name(name, metric, seed, label),
                              callbacks=on_event, **options)
    seconds = time.perf_counter() - t0
    row: dict[str, Any] = {
        "kind": "run", "task": name, "metric": metric, "seed": seed, "budget": budget, "options": options,
        "rollouts": result.rollouts_used, "seed_val": result.seed_score, "best_val": result.best_score,
        "candidates": len(result.candidates), "proposals": {str(k): v for k, v in result.proposals.items()},
        "reflections": counts["reflections"], "usable": counts["usable"], "route": counts["route"],
        "seconds": round(seconds), "stop_message": result.stop_message, "best": dict(result.best_candidate),
        "run": run_name(name, metric, seed, label), "evidence_level": EVIDENCE_LEVEL, "best_rule": BEST_RULE,
        "modules": modules, "merges": merges,
    }
    if name not in LOCKED_ONLY:
        row["dev_test"] = asyncio.run(_score(task, result.best_candidate, task.testset, storage))
    return row


def reselect(name: str, storage: Path, log: Path) -> list[dict[str, Any]]:
    """Each stored run of this task logged under another best rule (or evidence level), with the best the current
    rule returns. The rule decides only which candidate is returned (no default stop condition reads the best), so
    a run that ended on its budget searched exactly as it would now: its candidates are the same, its best is
    re-chosen."""
    from gepetto.store.sqlite import RunStore

    store, out = RunStore(storage), []
    latest = {r["run"]: r for r in read_log(log) if r["kind"] == "run" and r["task"] == name}
    for r in latest.values():
        rule = (r.get("evidence_level", 0.2), r.get("best_rule", "seed"))
        if rule == (EVIDENCE_LEVEL, BEST_RULE) or not str(r.get("stop_message")).startswith("budget"):
            continue
        cands = store.candidates(r["run"])
        if not any(c["texts"] == r["best"] for c in cands):  # gone, or another run of the same name since
            print(f"{r['run']}: not in {storage} as logged, not re-chosen", file=sys.stderr)
            continue
        i = stored_best(cands)  # the rule's choice (no result given)
        assert i is not None
        row = {k: v for k, v in r.items() if k not in ("command", "date", "commit", "machine")}
        row.update(best=cands[i]["texts"], best_val=cands[i]["mean"], evidence_level=EVIDENCE_LEVEL,
                   best_rule=BEST_RULE, reselected={
                       "commit": r.get("commit"), "evidence_level": rule[0], "best_rule": rule[1],
                       "best_val": r["best_val"], "dev_test": r.get("dev_test"),
                       "same": cands[i]["texts"] == r["best"]})
        if name not in LOCKED_ONLY and cands[i]["texts"] != r["best"]:
            task = task_of(name, "dev")
            row["dev_test"] = asyncio.run(_score(task, Candidate(cands[i]["texts"]), task.testset, storage))
        out.append(row)
    return out


def gepa(name: str, metric: str, seed: int, budget: int, storage: Path) -> dict[str, Any]:
    """The reference `gepa` (0.1.4) on the same task, LMs, splits, budget and user metric (benchmarks/compare)."""
    import dataclasses

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository: benchmarks.compare imports so
    from benchmarks.compare.gepa_side import run_gepa

    task = task_of(name, "dev")
    as_user = dataclasses.replace(task, metric=user_metric(task, metric))
    t0 = time.perf_counter()
    rec = run_gepa(as_user, CachedLM(_lm(), storage), make_lm(REFLECTION_LM), budget=budget, seed=seed)
    row: dict[str, Any] = {"kind": "gepa", "task": name, "metric": metric, "seed": seed, "budget": budget,
                           "seed_val": rec.seed_val, "best_val": rec.best_val, "rollouts": rec.rollouts_counted,
                           "seconds": round(time.perf_counter() - t0), "best": dict(rec.best_candidate),
                           "run": f"gepa-{name}-{metric}-s{seed}"}
    if name not in LOCKED_ONLY:
        row["dev_test"] = asyncio.run(_score(task, Candidate(rec.best_candidate), task.testset, storage))
    return row


STORED_NAMES = {"clinc-kitchen_and_dining": "clinc-kitchen", "clinc-credit_cards-oos": "clinc-credit-oos"}


def stored_prompts() -> list[dict[str, Any]]:
    """The best prompts stored by earlier real-track runs, as `candidate` rows to score on the locked split: the
    recipe (v19: edit, fewshot 4, 3 rules, current-best, definitions 60; CLINC's own metric with its pattern) and
    the default of before this issue (rewrite with adaptive demonstrations), both as measured then (their dev test
    scores are those of their own logs, another llama.cpp build on the same splits)."""
    results = Path(__file__).parent / "results"
    rows = []
    with gzip.open(results / "realtrack.jsonl.gz", "rt") as f:
        for line in f:
            r = json.loads(line) if line.strip() else {}
            if r.get("kind") == "run" and r.get("label") == "fewshot4-rules3-best-def60@76d9d08":
                rows.append({"kind": "candidate", "task": r["task"], "label": "recipe v19 (builtin metric)",
                             "seed": r["seed"], "best": r["best"], "run": f"realtrack v19 s{r['seed']}",
                             "dev_test": r["best_test"]})
    for r in json.loads((results / "efficiency_clinc.json").read_text())["runs"]:
        if r["system"] == "gepetto-fewshot-default":
            best = r["best_candidate"]
            rows.append({"kind": "candidate", "task": STORED_NAMES.get(r["task"], r["task"]),
                         "label": "default before issue 36 (builtin metric)", "seed": int(r["seed"]),
                         "best": json.loads(best) if isinstance(best, str) else best,
                         "run": f"efficiency_clinc gepetto-fewshot-default s{r['seed']}",
                         "dev_test": float(r["test_score"])})
    return rows


def locked(name: str, storage: Path, log: Path, label: str = "") -> list[dict[str, Any]]:
    """The first look at the locked split: the baselines, the gepa runs and `stored` candidates of this task in the
    log, and the best candidate of the latest run of each metric and seed of one variant (`label`; empty: the
    default), as the table shows them, of the seeds in LOCKED_SEEDS (more seeds run on dev are not scored there).
    Other variants are not scored. A candidate already scored there is not
    scored again, so every locked row written is a first look."""
    task = task_of(name, "locked")
    rows = read_log(log)
    looked = {r.get("key") for r in rows if r["kind"] == "locked" and r["task"] == name}
    looked.add(_key(dict(task.seed_candidate)))  # the seed prompt returned: its baseline is its score (`family`)
    out = []
    if not any(r["kind"] == "locked-baselines" and r["task"] == name for r in rows):
        out.append({**baselines(name, storage, "locked"), "kind": "locked-baselines", "first_look": True})
    latest = {(r.get("metric"), r.get("seed")): r for r in rows
              if r["kind"] == "run" and r["task"] == name and r.get("label", "") == label and r["seed"] in LOCKED_SEEDS}
    chosen = [r for r in rows if r["kind"] in ("gepa", "candidate") and r["task"] == name] + list(latest.values())
    for r in chosen:
        key = _key(r.get("best"))
        if key not in looked:
            looked.add(key)
            score = asyncio.run(_score(task, Candidate(r["best"]), task.testset, storage))
            out.append({"kind": "locked", "task": name, "of": r.get("run") or r.get("label"), "metric": r.get("metric"),
                        "system": r["kind"], "label": r.get("label"), "seed": r.get("seed"), "locked_test": score,
                        "key": key, "first_look": True})
    return out


def _key(best: Any) -> str:
    """A candidate's identity in the log: the same prompt scored once on the locked split, whoever found it."""
    return hashlib.sha256(json.dumps(best, sort_keys=True).encode()).hexdigest()[:16]


def _mean(xs: list[float]) -> str:
    if not xs:
        return "-"
    spread = f" ± {statistics.stdev(xs):.3f}" if len(xs) > 1 else ""
    return f"{statistics.mean(xs):.3f}{spread} ({len(xs)})"


def _closed(xs: list[float], seed: float | None, expert: float | None) -> str:
    if not xs or seed is None or expert is None or expert - seed <= 0:
        return "-"
    return f"{(statistics.mean(xs) - seed) / (expert - seed):+.0%}"


def _locked_scores(rows: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """Each (task, candidate key) scored on the locked split; a run that returned the seed prompt has the seed's
    baseline there (`locked` does not score it again)."""
    scores = {(r["task"], r["key"]): r["locked_test"] for r in rows if r["kind"] == "locked"}
    seeds = {r["task"]: r["seed"] for r in rows if r["kind"] == "locked-baselines" and r.get("seed") is not None}
    for task, seed in seeds.items():  # one task load each, however many baseline rows it has
        scores.setdefault((task, _key(dict(task_of(task, "dev").seed_candidate))), seed)
    return scores


def table(log: Path) -> str:
    """One table per task: trivial, seed and expert, then each system's best candidates, on the dev test split and
    on the locked split (where it was scored: first look or not), with the proposals' outcomes."""
    rows = read_log(log)
    dev = {r["task"]: r for r in rows if r["kind"] == "baselines"}
    lock = {r["task"]: r for r in rows if r["kind"] == "locked-baselines"}
    locked_of = _locked_scores(rows)
    systems: dict[str, dict[str, list[dict[str, Any]]]] = {}
    # a run re-chosen by `reselect` is shown once, as re-chosen (the same stored run: name, rollouts and seconds)
    rechosen = {(r["run"], r["rollouts"], r["seconds"]): i for i, r in enumerate(rows) if r.get("reselected")}
    for i, r in enumerate(rows):
        if r["kind"] == "run":
            if rechosen.get((r["run"], r["rollouts"], r["seconds"]), i) > i:
                continue
            what = f"gepetto default, {r['metric']} metric" + (f" ({r['label']})" if r.get("label") else "") + (
                f" (evidence level {r.get('evidence_level', 0.2)})" if r.get("evidence_level") != EVIDENCE_LEVEL
                else "") + (f" (best: {OLD_RULES.get(rule, rule)})" if (rule := r.get("best_rule", "seed")) != BEST_RULE
                            else "")
        elif r["kind"] == "gepa":
            what = f"gepa 0.1.4, {r['metric']} metric"
        elif r["kind"] == "candidate":
            what = r["label"]
        else:
            continue
        latest = systems.setdefault(r["task"], {}).setdefault(what, [])
        latest[:] = [x for x in latest if x.get("seed") != r.get("seed")] + [r]  # a resumed run replaces its row
    out = ["# The user's track: the default configuration, metrics as users write them\n",
           "Generated by `python benchmarks/usertrack.py table` from `benchmarks/results/usertrack.jsonl.gz` (each row "
           "there holds its exact command, commit, machine and date). Task LM Qwen2.5-Coder 0.5B, reflection LM 1.5B, "
           "embedded (llama.cpp, 2 CPU cores), budget 300, the default configuration (nothing set but the budget and "
           "the seed). Metrics: `plain` (a Score with one free-text sentence, no pattern), `float` (a bare number), "
           "`builtin` (the task's own). Mean ± sd (number of seeds). The dev test split decided things; the locked "
           "split is scored once, when the issue closes: its column says whether that was the first look. Gap closed "
           "= (mean - seed) / (expert - seed) on the same split."]
    out.append("\nThe default's rewrite route (SNIPS, GSM8K) opens with trims since 3f59537 (`rewrite(trim=4)`): its "
               "unlabelled rows made before ran without them, and `val4` is the default's configuration there "
               "(benchmarks/results/openings.md). Since af31064 it also shows unsolved training examples with their "
               "golds (`golds`, SNIPS); GSM8K's golds are never written as its prose answers, so its runs are the "
               "same (its six `val4` runs replayed at af31064: the same best, rollouts and proposals), and the labels "
               "route (CLINC) keeps the task LM's own solved answers. Since 766aa6f the labels route gives a pattern "
               "up at once when the rule written for it is one the instruction already has (`nu`); the rewrite "
               "route does not take that path, so its runs are the same.")
    shown = sorted({r["label"] for r in rows if r.get("label") in LABELS})
    if shown:
        out.append("\nVariants (named in brackets): " + "; ".join(f"`{k}`, {LABELS[k]}" for k in shown) + ".")
    for task in sorted(set(dev) | set(lock) | set(systems)):
        d, lk = dev.get(task, {}), lock.get(task, {})
        first = "first look" if lk.get("first_look") else "looked at before"
        out.append(f"\n### {task}\n")
        out.append(f"| | dev test ({d.get('n_test', '-')}) | gap closed | locked test ({lk.get('n_test', '-')}, "
                   f"{first if lk else 'not scored yet'}) | gap closed |")
        out.append("|---|---:|---:|---:|---:|")
        for key, name in (("trivial", f"trivial (`{d.get('baseline') or lk.get('baseline')}`)"), ("seed", "seed"),
                          ("expert", "expert (hand-written)"), ("empty", "empty instruction")):
            dv, lv = d.get(key), lk.get(key)
            out.append(f"| {name} | {'-' if dv is None else f'{dv:.3f}'} | | {'-' if lv is None else f'{lv:.3f}'} | |")
        for what, rs in sorted(systems.get(task, {}).items()):
            devs = [r["dev_test"] for r in rs if "dev_test" in r]
            locks = [locked_of[(task, _key(r["best"]))] for r in rs if (task, _key(r["best"])) in locked_of]
            out.append(f"| {what} | {_mean(devs)} | {_closed(devs, d.get('seed'), d.get('expert'))} | "
                       f"{_mean(locks)} | {_closed(locks, lk.get('seed'), lk.get('expert'))} |")
        for what, rs in sorted(systems.get(task, {}).items()):
            if rs[0]["kind"] in ("run", "gepa"):
                per = "; ".join(
                    f"s{r['seed']}: val {r['seed_val']:.3f} -> {r['best_val']:.3f}"
                    + (f", dev test {r['dev_test']:.3f}" if "dev_test" in r else "")
                    + (f", locked {locked_of[(task, _key(r['best']))]:.3f}" if (task, _key(r["best"])) in locked_of
                       else "")
                    + _rechosen(r)
                    + f", {r['rollouts']} rollouts, {r['seconds']} s, commit "
                    + (f"{r['reselected']['commit']} (re-chosen at {r['commit']})" if r.get("reselected")
                       else str(r["commit"]))
                    + (f", {_outcomes(r['proposals'])}" if r.get("proposals") else "")
                    for r in sorted(rs, key=lambda r: r["seed"]))
                out.append(f"\n- {what}: {per}" + (f"; {rs[0]['route']}" if rs[0].get("route") else ""))
    return "\n".join(out)


def family(log: Path, tasks: list[str], labels: list[str], metric: str = "plain") -> str:
    """One compact table per task for a family: constant, seed, expert, each variant (`labels`, "" the default of
    before) run with `metric`, gepa; dev and locked test (locked: first look when the variant's candidates were
    scored there), the share of the seed-to-expert gap closed, and the proposal outcomes summed over the seeds
    (with, for a program of several components, each component's proposals tested and accepted, and merges)."""
    rows = read_log(log)
    scores = _locked_scores(rows)
    out = []
    for task in tasks:
        dev = next((r for r in rows if r["kind"] == "baselines" and r["task"] == task), {})
        lock = next((r for r in rows if r["kind"] == "locked-baselines" and r["task"] == task), {})
        locked_of = {key: score for (t, key), score in scores.items() if t == task}
        out.append(f"\n### {task}\n")
        out.append("| | dev test | gap closed | locked test | gap closed | runs: val seed -> best, rollouts |")
        out.append("|---|---:|---:|---:|---:|---|")
        for key, name in (("trivial", "constant answer"), ("seed", "seed"), ("expert", "expert (hand-written)")):
            dv, lv = (f"{x:.3f}" if x is not None else "-" for x in (dev.get(key), lock.get(key)))
            out.append(f"| {name} | {dv} | | {lv} | | |")
        systems = [(label, [r for r in rows if r["kind"] == "run" and r["task"] == task and r.get("label", "") == label
                            and r["metric"] == metric]) for label in labels]
        systems.append(("gepa", [r for r in rows if r["kind"] == "gepa" and r["task"] == task]))
        for label, rs in systems:
            latest = {r["seed"]: r for r in rs}  # a resumed or repeated run replaces its row
            rs = [latest[k] for k in sorted(latest)]
            if not rs:
                continue
            devs = [r["dev_test"] for r in rs if "dev_test" in r]
            locks = [locked_of[_key(r["best"])] for r in rs if _key(r["best"]) in locked_of]
            per = "; ".join(f"s{r['seed']}: {r['seed_val']:.3f} -> {r['best_val']:.3f}, {r['rollouts']}" for r in rs)
            name = "gepa 0.1.4" if label == "gepa" else f"gepetto default ({label or 'before'})"
            out.append(f"| {name} | {_mean(devs)} | {_closed(devs, dev.get('seed'), dev.get('expert'))} | "
                       f"{_mean(locks)} | {_closed(locks, lock.get('seed'), lock.get('expert'))} | {per} |")
        for label, rs in systems:
            counts: dict[str, int] = {}
            for r in rs:
                for k, v in (r.get("proposals") or {}).items():
                    counts[k] = counts.get(k, 0) + v
            if counts:
                out.append(f"\n- {label or 'before'}: {_outcomes(counts)}")
            modules: dict[str, list[int]] = {}
            for r in rs:
                for name, m in {**(r.get("modules") or {}), "merges": r.get("merges") or {}}.items():
                    got = modules.setdefault(name, [0, 0])
                    got[0] += m.get("tested", 0)
                    got[1] += m.get("accepted", 0)
            if len(modules) > 2:  # several components (and merges): what each got
                out.append("  per component, tested/accepted on their test: "
                           + ", ".join(f"{k} {t}/{a}" for k, (t, a) in sorted(modules.items())))
    return "\n".join(out)


def _rechosen(row: dict[str, Any]) -> str:
    """For a run whose best today's rule changed (`reselect`): the run's own best, by its dev test (or, on a
    locked-only task, its validation score)."""
    was = row.get("reselected")
    if not was or was["same"]:
        return ""
    own = f"dev test {was['dev_test']:.3f}" if was.get("dev_test") is not None else f"val {was['best_val']:.3f}"
    return f" (re-chosen by today's rule; the run's own best: {own})"


def _outcomes(proposals: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(proposals.items(), key=lambda kv: -kv[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["baselines", "run", "reselect", "gepa", "stored", "locked", "table", "family"])
    ap.add_argument("--tasks", nargs="+", default=TASKS)
    ap.add_argument("--metric", default="plain", choices=["plain", "float", "builtin"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--budget", type=int, default=300)
    ap.add_argument("--storage", default="usertrack.sqlite")
    ap.add_argument("--log", default=str(LOG))
    ap.add_argument("--label", default="", help="names a variant (a stored run of its own); empty: the default")
    ap.add_argument("--labels", nargs="+", default=["-"], help="`family`: the variants to show ('-': unlabelled)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an option of gepetto.optimize, VALUE read as JSON; the row says it")
    args = ap.parse_args()
    log, storage = Path(args.log), Path(args.storage)
    if args.what == "table":
        print(table(log))
        return
    if args.what == "family":
        print(family(log, args.tasks, [lab if lab != "-" else "" for lab in args.labels], args.metric))
        return
    options = dict(_option(item) for item in args.set)
    stamp = {"command": "python benchmarks/usertrack.py " + " ".join(sys.argv[1:]),
             "date": time.strftime("%Y-%m-%d %H:%M"), "commit": _commit(), "machine": f"{os.cpu_count()} cores"}
    def write(row: dict[str, Any]) -> None:
        row.update({"label": row.get("label") or args.label, **stamp})
        print(json.dumps(row), flush=True)
        with (gzip.open(log, "at") if log.suffix == ".gz" else open(log, "a")) as f:
            f.write(json.dumps(row) + "\n")

    if args.what == "stored":
        for row in stored_prompts():
            write(row)
        return
    for name in args.tasks:
        if args.what in ("locked", "reselect"):
            found = locked(name, storage, log, args.label) if args.what == "locked" else \
                reselect(name, storage, log)
            for row in found:
                write(row)
        elif args.what == "baselines":
            if name in LOCKED_ONLY:
                raise SystemExit(f"{name} is locked-only: its baselines are scored by `locked`")
            write(baselines(name, storage, "dev"))
        elif args.what == "gepa":
            for seed in args.seeds:
                write(gepa(name, args.metric, seed, args.budget, storage))
        else:
            for seed in args.seeds:
                write(run(name, args.metric, seed, args.budget, storage, options, args.label))


if __name__ == "__main__":
    main()
