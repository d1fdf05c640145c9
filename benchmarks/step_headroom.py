"""Where a program's headroom is: the seed's and the hand-written expert's text of each step, crossed, scored on
validation and the dev test, with each failure put on the router when the metric's feedback says it erred, else on
the later step (issue 61).

    python benchmarks/step_headroom.py hwu-routed
    python benchmarks/step_headroom.py snips-routed

Prints one line per (texts, split): the mean and how many failures the feedback puts on each step.
"""

from __future__ import annotations

import argparse
import itertools
from collections import Counter

import gepetto
from gepetto.tasks import load_task
from gepetto.types import Candidate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task", choices=["hwu-routed", "snips-routed"])
    args = ap.parse_args()
    task = load_task(args.task)
    seed, expert = task.seed_candidate, task.expert_candidate
    assert expert is not None
    steps = list(seed)
    for picks in itertools.product(("seed", "expert"), repeat=len(steps)):
        texts = Candidate({s: (seed if p == "seed" else expert)[s] for s, p in zip(steps, picks, strict=True)})
        for split, examples in (("validation", task.valset), ("dev test", task.testset)):
            ev = gepetto.evaluate(texts, examples, task.metric, program=task.program)
            # both programs' feedback says "The router answered ..." when the router erred, else names the later step
            blamed = Counter("router" if "router answered" in r.score.feedback else "later step"
                             for r in ev.rollouts if r.score.value < 1)
            said = ", ".join(f"{s}={p}" for s, p in zip(steps, picks, strict=True))
            print(f"{said:32s} {split:10s} {ev.mean:.3f}  failures: {dict(blamed)}", flush=True)


if __name__ == "__main__":
    main()
