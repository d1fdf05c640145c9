"""How good is a first draft of the rules alone? (issue 10, the edit proposer's `definitions`)

For each right answer of a real-track task, the reflection LM is shown up to 4 training inputs whose right answer
it is and asked for one rule (`edits.build_definition_prompt`, vetted by `edits.vet_rule` as in a run's first
draft, greedy, one attempt where a run has three); the seed plus those rules is scored on validation and test
next to the seed and the expert prompt. No search, no rollout before the draft: it tells how much of a run's
gain the first draft alone brings.

    python benchmarks/draft_probe.py --tasks clinc-kitchen clinc-credit-oos --storage S [--threads 1]

`--variant` asks another way (issue 59: can the 1.5B write lines that tell intents whose names share words apart?):
`more` shows up to 6 inputs instead of 4; `contrast` adds one input each of up to 3 other answers, those whose names
share a word with the answer's first, which the rule must not cover.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from pathlib import Path

from gepetto.api import evaluate_async
from gepetto.engine import edits
from gepetto.lm.cache import CachedLM
from gepetto.lm.names import make_lm
from gepetto.tasks import load_task
from gepetto.types import Candidate


def request(seed: str, answer: str, inputs: dict[str, list[str]], variant: str) -> list:
    """The reflection request for one answer's rule line, asked the `variant` way."""
    messages = edits.build_definition_prompt(seed, answer, inputs[answer][:6 if variant == "more" else 4])
    if variant != "contrast":
        return messages

    def words(label: str) -> set[str]:
        return set(re.split(r"[_\W]+", label.lower())) - {""}

    others = sorted(inputs, key=lambda a: (not words(a) & words(answer), a))
    shown = "".join([f"Input: {inputs[a][0]} (right answer: {a})\n" for a in others if a != answer][:3])
    user = messages[1]["content"].replace(
        "\nWrite ONE short rule", f"\nThese inputs have other right answers; the rule must not cover them:\n{shown}"
        "\nWrite ONE short rule", 1)
    return [messages[0], {"role": "user", "content": user}]


async def probe(name: str, storage: Path, threads: int, variant: str = "base", data_seed: int = 0) -> dict:
    task = load_task(name, seed=data_seed)
    refl = CachedLM(make_lm(f"local:qwen2.5-coder-1.5b?n_threads={threads}"), storage)
    task_lm = CachedLM(make_lm(f"local:qwen2.5-coder-0.5b?n_threads={threads}"), storage)
    seed = task.seed_candidate["instruction"]
    inputs: dict[str, list[str]] = {}
    for ex in task.trainset:
        inputs.setdefault(ex.gold, []).append(ex.inputs["message"])
    answers, text, refused = sorted(inputs), seed, {}
    for answer in answers:
        out = await refl.complete(request(seed, answer, inputs, variant), temperature=0.0, max_tokens=90,
                                  stop=[edits.RULE_CLOSE])
        rule, why = edits.vet_rule(out.text, out.finish_reason, seed, [], answer=answer)  # as the engine's draft
        if why:
            refused[answer] = why
        else:
            text = edits.apply_rule(text, rule, answer)
    assert task.expert_candidate is not None, f"{name} has no expert prompt"
    row = {"kind": "draft", "task": name, "variant": variant, "seed": data_seed, "rules": len(answers) - len(refused),
           "refused": refused, "draft": text}
    for label, cand in (("seed", task.seed_candidate), ("draft", Candidate(instruction=text)),
                        ("expert", task.expert_candidate)):
        for split, data in (("val", task.valset), ("test", task.testset)):
            ev = await evaluate_async(cand, data, task.metric, program=task.program, task_lm=task_lm,
                                      max_concurrency=4)
            row[f"{label}_{split}"] = ev.mean
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=["clinc-kitchen", "clinc-credit-oos", "clinc-work-oos",
                                                   "clinc-banking"])
    ap.add_argument("--storage", default="realtrack.sqlite")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--log", default=None, help="append each row as JSON to this file")
    ap.add_argument("--variant", choices=["base", "more", "contrast"], default="base", help="how each line is asked")
    ap.add_argument("--seed", type=int, default=0, help="the task's data seed (which training inputs are shown)")
    args = ap.parse_args()
    for name in args.tasks:
        t0 = time.perf_counter()
        row = asyncio.run(probe(name, Path(args.storage), args.threads, args.variant, args.seed))
        row["seconds"] = round(time.perf_counter() - t0)
        print(json.dumps(row), flush=True)
        if args.log:
            with open(args.log, "a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
