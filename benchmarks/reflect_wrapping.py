"""Dev-test score of the user track's SNIPS best prompts that carry the reflection model's wrapping, as stored and
with the wrapping cut off (from its first sentence to the end). Results: benchmarks/results/reflect_wrapping.md.

    python benchmarks/reflect_wrapping.py --storage /work/scratch/ut.sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import re
from pathlib import Path

from usertrack import LOG, _score, read_log, task_of

from gepetto.types import Candidate

RUNS = ("ut-snips-weather-plain-s2", "ut-snips-weather-float-s0", "ut-snips-weather-float-s1")
# the model's comment on its instruction, or our example block copied without its brackets
WRAPPING = re.compile(r"(?:^|(?<=[.!?:])[ \t]+)(?:the new instruction|this instruction now)\b|^\s*feedback\s*:",
                      re.I | re.M)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--storage", type=Path, required=True, help="a store whose answer cache the scoring may reuse")
    args = ap.parse_args()
    task = task_of("snips-weather", "dev")
    for row in read_log(LOG):
        if row["kind"] == "run" and row.get("run") in RUNS and not row.get("label"):
            text = row["best"]["instruction"]
            found = WRAPPING.search(text)
            cut = text[: found.start()].strip() if found and found.start() > 0 else text
            score = asyncio.run(_score(task, Candidate({"instruction": cut}), task.testset, args.storage))
            print(f"| {row['run']} | {len(text)} | {row['dev_test']:.3f} | {score:.3f} | {len(cut)} |", flush=True)


if __name__ == "__main__":
    main()
