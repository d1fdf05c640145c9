"""Shared pieces of the instruction-following tasks (ifeval, ifbench): the two-stage program and the metric.

Program: `answer` (system prompt = the component; user message = the full prompt with its constraints) writes a
draft; `rewrite` (system prompt = the component; user message = the prompt and the draft) returns the final
answer, which the metric checks. Metric: the fraction of checkable constraints the final answer meets, with
feedback naming every constraint, PASS / FAIL and why.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from gepetto.program import Context, Task, TraceEntry
from gepetto.tasks import constraints as C
from gepetto.types import Candidate, Example, Score

ANSWER_SEED = "Respond to the user's request."
REWRITE_SEED = (
    "Rewrite the draft response so that it fully follows every instruction in the request. "
    "Output only the final response."
)
MAX_TOKENS = 400  # per call: small local models, keep generations bounded

# constraint types whose correct answer is (part of) the request itself: no echo penalty for these
_REPEAT_IDS = {"repeat:repeat_simple", "repeat:repeat_span", "repeat:repeat_change"}


def seed_candidate() -> Candidate:
    return Candidate(answer=ANSWER_SEED, rewrite=REWRITE_SEED)


def rewrite_message(prompt: str, draft: str) -> str:
    """The user message of the `rewrite` call."""
    return (
        f"Request:\n{prompt}\n\n"
        f"Draft response:\n{draft}\n\n"
        "Give the final response to the request, satisfying every constraint in it."
    )


async def program(candidate: Candidate, example: Example, ctx: Context) -> str:
    """Two stages: answer the prompt, then rewrite the draft so that it meets every constraint."""
    prompt = str(example.inputs["prompt"])
    draft = await ctx.lm("answer", prompt, max_tokens=MAX_TOKENS)
    return await ctx.lm("rewrite", rewrite_message(prompt, draft), max_tokens=MAX_TOKENS)


def make_example(
    example_id: str, prompt: str, ids: Sequence[str], kwargs_list: Sequence[Mapping[str, Any] | None],
    **metadata: Any,
) -> Example | None:
    """An Example whose gold holds the constraints; None when none of them can be checked.

    Kwargs are cleaned (None values dropped), repeated identical constraints are kept once, and constraints that
    cannot be checked stay in the gold so the feedback can mention them, but they do not count in the score.
    """
    kept_ids: list[str] = []
    kept_kwargs: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, cid in enumerate(ids):
        kw = C.clean_kwargs(kwargs_list[i] if i < len(kwargs_list) else None)
        sig = f"{cid}|{sorted(kw.items(), key=lambda kv: kv[0])!r}"
        if sig in seen:
            continue
        seen.add(sig)
        kept_ids.append(cid)
        kept_kwargs.append(kw)
    checkable = [cid for cid, kw in zip(kept_ids, kept_kwargs, strict=True) if C.is_supported(cid, kw)]
    if not checkable:
        return None
    meta = dict(metadata)
    meta["unchecked"] = [cid for cid, kw in zip(kept_ids, kept_kwargs, strict=True) if not C.is_supported(cid, kw)]
    return Example(
        {"prompt": prompt},
        gold={"instruction_id_list": kept_ids, "kwargs": kept_kwargs},
        metadata=meta,
        id=example_id,
    )


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[^\w\s]", " ", text.lower())).strip()


def is_echo(prompt: str, response: str, ids: Sequence[str] = ()) -> bool:
    """True when the response only parrots the request: all of it, a large piece of it, or it plus a few words."""
    p, r = _norm(prompt), _norm(response)
    if not r:
        return False
    if r == p:
        return True
    if any(cid in _REPEAT_IDS for cid in ids):
        return False
    if len(r) >= 40 and len(r) >= 0.5 * len(p) and r in p:
        return True
    return bool(p) and p in r and len(r.replace(p, " ").split()) < 5


def metric(example: Example, output: Any, trace: list[TraceEntry] | None = None) -> Score:
    """Fraction of checkable constraints met; the feedback lists each constraint with PASS / FAIL and why."""
    gold = example.gold or {}
    ids: list[str] = list(gold.get("instruction_id_list", []))
    kwargs_list: list[Mapping[str, Any]] = list(gold.get("kwargs", []))
    prompt = str(example.inputs.get("prompt", ""))
    text = output if isinstance(output, str) else ("" if output is None else str(output))
    results = C.check_all(text, ids, kwargs_list)
    checked = [r for r in results if r[2] is not None]
    unchecked = [r for r in results if r[2] is None]
    lines: list[str] = []
    if not checked:
        return Score(0.0, "No constraint of this request can be checked automatically.")
    if not text.strip():
        head = "The final answer is empty, so it scores 0. The request has these constraints:"
        lines = [f"- FAIL {desc}: the answer is empty" for _, desc, _, _ in checked]
        return Score(0.0, "\n".join([head, *lines, *_unchecked_lines(unchecked)]))
    if is_echo(prompt, text, ids):
        head = ("The final answer only repeats the request instead of answering it, so it scores 0. "
                "Answer the request while following its constraints:")
        lines = [f"- {desc}" for _, desc, _, _ in checked]
        return Score(0.0, "\n".join([head, *lines, *_unchecked_lines(unchecked)]))
    passed = sum(1 for r in checked if r[2])
    value = passed / len(checked)
    head = f"Constraints met: {passed} of {len(checked)}."
    if passed == len(checked):
        head += " All checked constraints are satisfied."
    lines = [f"- {'PASS' if ok else 'FAIL'} {desc}: {why}" for _, desc, ok, why in checked]
    return Score(value, "\n".join([head, *lines, *_unchecked_lines(unchecked)]))


def _unchecked_lines(unchecked: list[tuple[str, str, bool | None, str]]) -> list[str]:
    return [f"- (not scored) {desc}: {why}" for _, desc, _, why in unchecked]


def make_task(name: str, train: list[Example], val: list[Example], test: list[Example], description: str) -> Task:
    """The two-stage instruction-following task (shared by ifeval and ifbench) over the given splits."""
    return Task(name=name, program=program, metric=metric, seed_candidate=seed_candidate(), trainset=train,
                valset=val, testset=test, description=description)
