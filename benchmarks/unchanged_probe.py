"""Why do edits after a first draft come back "unchanged"? Asked another way, does the 1.5B write another line?

Reads the edit requests a run's reflection LM was sent (the store's `lm_answers`) whose mistake is a confusion
"answered X, expected Y" and whose instruction already has a rule line for Y ("Your rule replaces the
instruction's rule line for Y"), and asks the reflection LM again, greedy, in one of these ways:

- `stored`: the request as the run sent it;
- `hide`: Y's line taken out of the instruction shown, and the request says the rule for Y did not cover these
  inputs;
- `leave-out`: the rule for X's line instead (when X is a listed answer with a line), so that the failures,
  whose right answer is Y, are left out.

Each answer is vetted as the engine vets a rule (`edits.vet_rule`, for Y, or for X in `leave-out`); the table counts
the answers refused as the line the instruction already has.

    python benchmarks/unchanged_probe.py --storage S --runs ut-hwu-general-plain-s0-b200 ... --way hide [--limit 12]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sqlite3

from gepetto.engine import edits
from gepetto.engine.events import Outcome
from gepetto.lm.names import make_lm

REPLACES = "Your rule replaces the instruction's rule line for {y}: make it cover those cases too."


def requests(storage: str, runs: list[str]) -> list[tuple[list[dict[str, str]], str, str, str]]:
    """(messages, current instruction, X, Y) of each distinct edit request for a confusion whose Y has a line."""
    db, seen, out = sqlite3.connect(storage), set(), []
    for run in runs:
        for (raw,) in db.execute("select messages from lm_answers where run = ? order by rowid", (run,)):
            messages = json.loads(raw) if raw else None
            user = messages[-1]["content"] if messages else ""
            m = re.search(r"makes this mistake: answered (\S+), expected (\S+) \(", user)
            if not m or "replaces the instruction's rule line" not in user or user in seen:
                continue
            seen.add(user)
            current = re.search(r"<current_instruction>\n(.*?)\n</current_instruction>", user, re.S)
            out.append((messages, current[1] if current else "", m[1], m[2]))
    return out


def asked(way: str, user: str, current: str, x: str, y: str) -> tuple[str, str] | None:
    """The request asked `way`, and the answer its rule must give (None: this way does not apply)."""
    if way == "stored":
        return user, y
    lines = current.split("\n")
    if way == "hide":
        at = edits.rule_line(current, y)
        if at is None:
            return None
        shown = "\n".join(line for i, line in enumerate(lines) if i != at)
        return (user.replace(current, shown).replace(REPLACES.format(y=y), f"The instruction's rule for {y} did not "
                                                                          "cover these inputs: write a new one that "
                                                                          "does."), y)
    if edits.rule_line(current, x) is None:  # leave-out: X must be a listed answer with a line
        return None
    head = user[:user.index("Write ONE short rule")]
    head = re.sub(r"These inputs also have the right answer .*?(?=It already answers|Rules already tried|$)", "",
                  head, flags=re.S)
    return (head + f"Write ONE short rule (one sentence, at most 40 words) that says when to answer {x}, so that "
            f"inputs like those above, whose right answer is {y}, are left out. Use the form \"If <what such an input "
            f"says or asks>, answer {x}.\" Describe in general words what the inputs whose right answer is {x} have "
            f"in common; do not copy the inputs. Write only the rule, between {edits.RULE_OPEN} and "
            f"{edits.RULE_CLOSE}.\nYour rule replaces the instruction's rule line for {x}: make it leave those inputs "
            "out.", x)


async def probe(storage: str, runs: list[str], way: str, limit: int) -> dict:
    lm = make_lm("local:qwen2.5-coder-1.5b")
    rows, unchanged = [], 0
    for messages, current, x, y in requests(storage, runs):
        ask = asked(way, messages[-1]["content"], current, x, y)
        if ask is None:
            continue
        user, answer = ask
        out = await lm.complete([messages[0], {"role": "user", "content": user}], temperature=0.0, max_tokens=80,
                                stop=[edits.RULE_CLOSE])
        rule, why = edits.vet_rule(out.text, out.finish_reason, current, [], answer=answer)
        unchanged += why is Outcome.UNCHANGED
        rows.append({"x": x, "y": y, "rule": rule, "refused": why.value if why else None})
        if len(rows) == limit:
            break
    return {"way": way, "runs": runs, "asked": len(rows), "unchanged": unchanged, "answers": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--storage", required=True, help="the run store whose reflection requests are read")
    ap.add_argument("--runs", nargs="+", required=True)
    ap.add_argument("--way", choices=["stored", "hide", "leave-out"], default="stored")
    ap.add_argument("--limit", type=int, default=12, help="requests asked at most")
    ap.add_argument("--log", default=None, help="append the row as JSON to this file")
    args = ap.parse_args()
    row = asyncio.run(probe(args.storage, args.runs, args.way, args.limit))
    for a in row["answers"]:
        print(f"[{a['y']} / answered {a['x']}] {a['refused'] or 'usable'}: {a['rule']}")
    print(f"{args.way}: {row['unchanged']} of {row['asked']} unchanged")
    if args.log:
        with open(args.log, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
