"""What the reflection LM's answers became in the user track's default runs: answers, prompt and answer tokens per
vetting outcome, by step (the labels route's first draft, a later proposal tested on its minibatch, or one never
tested). Results: benchmarks/results/reflection_outcomes.md.

    python benchmarks/reflection_outcomes.py --storage /work/scratch/ut.sqlite
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from usertrack import LOG, read_log

from gepetto.lm.base import Completion
from gepetto.store.sqlite import RunStore


def family(task: str) -> str:
    return "clinc (labels route)" if task.startswith("clinc") else f"{task} (rewrite route)"


def step(proposal: dict[str, Any] | None) -> str:
    if proposal is None:
        return "never tested (refused, or stopped before its minibatch)"
    return "first draft" if "first draft" in str(proposal.get("pattern")) else "a later proposal, tested"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--storage", type=Path, required=True, help="the store the user track's runs were kept in")
    args = ap.parse_args()
    runs = {r["run"]: family(r["task"]) for r in read_log(LOG) if r["kind"] == "run" and not r.get("label")}
    store = RunStore(args.storage, readonly=True)
    answers: dict[str, Counter[str]] = defaultdict(Counter)
    tokens_in: dict[str, Counter[str]] = defaultdict(Counter)
    tokens_out: dict[str, Counter[str]] = defaultdict(Counter)
    by_step: dict[str, Counter[tuple[str, str]]] = defaultdict(Counter)
    for run, fam in runs.items():
        made = {(e["data"].get("session"), e["data"].get("proposal")): e["data"] for e in store.events(run, "proposal")}
        for event in store.events(run, "reflection"):
            d = event["data"]
            outcome = d.get("rejected") or "usable"
            answer = store.lm_answer(run, d["key"])
            if isinstance(answer, Completion):
                tokens_in[fam][outcome] += answer.usage.input_tokens
                tokens_out[fam][outcome] += answer.usage.output_tokens
            answers[fam][outcome] += 1
            by_step[fam][(step(made.get((d.get("session"), d.get("proposal")))), outcome)] += 1
    print(f"{len(runs)} default runs of the user track's log; tokens as the local backend counted them.\n")
    for fam in sorted(answers):
        n, t_in, t_out = sum(answers[fam].values()), sum(tokens_in[fam].values()), sum(tokens_out[fam].values())
        print(f"### {fam}\n\n| outcome | answers | share | prompt tokens | share | answer tokens | share |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        outcomes = [o for o, _ in answers[fam].most_common()]
        for outcome, count in answers[fam].most_common():
            i, o = tokens_in[fam][outcome], tokens_out[fam][outcome]
            print(f"| {outcome} | {count} | {count / n:.0%} | {i:,} | {i / max(t_in, 1):.0%} | {o:,} | "
                  f"{o / max(t_out, 1):.0%} |")
        print(f"| all | {n} | | {t_in:,} | | {t_out:,} | |\n")
        print("| step | answers | " + " | ".join(outcomes) + " |")
        print("|---|---:|" + "---:|" * len(outcomes))
        for k in sorted({k for k, _ in by_step[fam]}):
            counts = [by_step[fam][(k, o)] for o in outcomes]
            print(f"| {k} | {sum(counts)} | " + " | ".join(str(c) for c in counts) + " |")
        print()


if __name__ == "__main__":
    main()
