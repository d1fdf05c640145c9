"""How often does the reflection LM copy the instruction back? (issue 15: reflection calls are the wall time)

The seed candidate of a task runs once on the training set; then, for each of N minibatches (3 training rollouts
with at least one failure, as a run's first proposals see them), the rewrite proposer's reflection prompt
(`reflect.build_prompt`) is sent to the reflection LM once (greedy, or at `--temperature`), and the answer is vetted
as in a run. A usable answer is scored on the whole training set. The table says, per prompt wording (`--wording`):
how many answers were usable, unchanged or refused otherwise, the mean training score of the usable ones, output
tokens and seconds.

    python benchmarks/reflection_probe.py --task demo --wording current lessons-as-rules --minibatches 10

With `--limit N` (a length budget, EngineConfig.max_component_chars) the prompt states the limit and an answer
over it is refused and asked again once, as in a run: with `--over-length engine` as the engine does (a new
request to shorten that answer, `reflect.shorten_messages`), with `--over-length before` as it did before
2026-11-27 (the same conversation, told the answer was too long). The table counts the answers within the limit
at the first attempt and at the second.

    python benchmarks/reflection_probe.py --task demo --temperature 1 --limit 250 --over-length before
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections import Counter

from gepetto.api import evaluate_async
from gepetto.engine import reflect
from gepetto.engine.events import Outcome
from gepetto.lm.names import make_lm
from gepetto.tasks import load_task
from gepetto.types import Candidate

KEEP = "- Keep what already works in the current instruction.\n"
SYSTEM, ANSWER = reflect.SYSTEM_PROMPT, reflect.ANSWER_PROMPT
LESSONS = ANSWER[ANSWER.index('First write "Lessons:"'):]
# the wordings tried, as (system message, the request's last paragraph): the engine's own (current), and variants
WORDINGS = {
    "current": (SYSTEM, ANSWER),
    # the job at the end of the request, after the examples (the engine's layout until 2026-11-29)
    "task-last": (reflect.ROLE, SYSTEM[len(reflect.ROLE):].strip().replace("like those of the\nexamples.",
                                                                            "like these.") + "\n\n" + ANSWER),
    "lessons-as-rules": (SYSTEM.replace(
        KEEP, "- Keep the current instruction's requirements and add a rule for each lesson: the new instruction "
        "must differ from the current one wherever the assistant failed.\n"), ANSWER),
    "no-keep": (SYSTEM.replace(KEEP, ""), ANSWER),
    # no "Lessons:" block first: the answer is the instruction alone (fewer tokens written per rewrite)
    "no-lessons": (SYSTEM, ANSWER.replace(LESSONS, "Write the new instruction between {open} and {close}, and "
                                          "nothing after {close}.")),
    # shorter lessons: fewer tokens written before the instruction
    "short-lessons": (SYSTEM, ANSWER.replace("in a few short bullet points", "in at most three bullet points of one "
                                             "short line each")),
    # the first request asks what the retry after a copied instruction asks: the lessons made rules of the text
    "lessons-into-rules": (SYSTEM, ANSWER.replace(
        "Then write the new instruction between",
        "Then write the new instruction, with each of your lessons turned into an explicit rule in it (in general "
        "terms), between")),
    "append-rules": (SYSTEM.replace(
        KEEP, "- Start from the current instruction and add one line for each lesson, stating its rule or fact in "
        "general terms.\n"), ANSWER.replace("Then write the new instruction between",
                                             "Then write the new instruction (the current one with your new lines) "
                                             "between")),
}


# what the reflection LM was told of an over-long answer before 2026-11-27, in the same conversation
BEFORE = ("That is too long. Write a shorter instruction (at most {limit} characters) that keeps what matters most, "
          "between {open} and {close}.")


def over_length_retry(messages: list, raw: str, text: str, limit: int, how: str) -> list:
    if how == "engine":
        return reflect.shorten_messages(text, limit)
    hint = BEFORE.format(limit=limit, open=reflect.OPEN_TAG, close=reflect.CLOSE_TAG)
    return [*messages, {"role": "assistant", "content": reflect.clip(raw, 1500)}, {"role": "user", "content": hint}]


async def probe(task_name: str, wording: str, minibatches: int, threads: int, temperature: float,
                limit: int | None = None, over_length: str = "engine") -> dict:
    task = load_task(task_name, seed=0)
    task_lm = make_lm(f"local:qwen2.5-coder-0.5b?n_threads={threads}")
    refl = make_lm(f"local:qwen2.5-coder-1.5b?n_threads={threads}")
    seed = task.seed_candidate
    (component,) = seed.keys()
    runs = (await evaluate_async(seed, task.trainset, task.metric, program=task.program, task_lm=task_lm,
                                 max_concurrency=4)).rollouts
    rng, outcomes, scores, tokens, answers, raws = random.Random(0), Counter(), [], [], [], []
    reflect.SYSTEM_PROMPT, reflect.ANSWER_PROMPT = WORDINGS[wording]  # build_prompt reads these
    answering: list[float] = []  # seconds of each first answer, from its request
    within = [0, 0]  # answers within the length limit at the first attempt, and at the second of one over it
    t0 = time.perf_counter()
    done = 0
    while done < minibatches:
        batch = rng.sample(runs, 3)
        if all(r.score.value >= 1.0 for r in batch):
            continue  # a run reflects only on a minibatch with a failure
        done += 1
        examples = reflect.reflective_examples(batch, component, task.trainset)
        messages = reflect.build_prompt(seed[component], examples, limit=limit)
        asked = time.perf_counter()
        out = await refl.complete(messages, temperature=temperature, max_tokens=700, stop=[reflect.CLOSE_TAG],
                                  seed=done)
        answering.append(time.perf_counter() - asked)
        tokens.append(out.usage.output_tokens)
        raws.append(out.text)
        verdict = reflect.vet(out.text, out.finish_reason, seed[component], examples)
        if limit and not verdict.rejected:
            if len(verdict.text) <= limit:
                within[0] += 1
            else:  # asked once more, as a run does
                out = await refl.complete(over_length_retry(messages, out.text, verdict.text, limit, over_length),
                                          temperature=temperature, max_tokens=700, stop=[reflect.CLOSE_TAG],
                                          seed=done + 1000)
                tokens.append(out.usage.output_tokens)
                raws.append(out.text)
                verdict = reflect.vet(out.text, out.finish_reason, seed[component], examples)
                if not verdict.rejected and len(verdict.text) > limit:
                    verdict = reflect.ReflectionProposal(verdict.text, Outcome.OVER_LENGTH, out.text)
                within[1] += not verdict.rejected
        outcomes[verdict.rejected.reason if verdict.rejected else "usable"] += 1
        if not verdict.rejected:
            child = Candidate({component: verdict.text})
            ev = await evaluate_async(child, task.trainset, task.metric, program=task.program, task_lm=task_lm,
                                      max_concurrency=4)
            scores.append(ev.mean)
            answers.append(verdict.text)
    seconds = time.perf_counter() - t0
    seed_train = sum(r.score.value for r in runs) / len(runs)
    return {"task": task_name, "wording": wording, "temperature": temperature, "minibatches": minibatches,
            "limit": limit, "over_length": over_length, "within_first": within[0], "within_second": within[1],
            "outcomes": dict(outcomes), "lengths": [len(a) for a in answers],
            "seed_train": seed_train, "usable_train_mean": sum(scores) / len(scores) if scores else None,
            "usable_better": sum(s > seed_train for s in scores), "output_tokens": sum(tokens),
            "seconds": round(seconds),
            "first_answer_seconds": round(sum(answering) / len(answering), 1), "answers": answers, "raw": raws}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="demo")
    ap.add_argument("--wording", nargs="+", default=list(WORDINGS), choices=list(WORDINGS))
    ap.add_argument("--minibatches", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--temperature", type=float, default=0.0, help="of the reflection call (a run's first attempt: 0)")
    ap.add_argument("--limit", type=int, default=None, help="a length budget in characters (max_component_chars)")
    ap.add_argument("--over-length", default="engine", choices=("engine", "before"),
                    help="how an answer over the limit is asked again: the engine's way, or the one before 2026-11-27")
    ap.add_argument("--log", default=None, help="append each wording's row here (JSON lines)")
    args = ap.parse_args()
    for wording in args.wording:
        row = asyncio.run(probe(args.task, wording, args.minibatches, args.threads, args.temperature, args.limit,
                                args.over_length))
        print(json.dumps({k: v for k, v in row.items() if k not in ("answers", "raw")}), flush=True)
        if args.log:
            with open(args.log, "a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
