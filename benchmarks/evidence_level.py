"""How large a validation gain over the seed must be before the returned best can be trusted: the level of
`gepetto.engine.pareto.EVIDENCE_LEVEL`, read off the real track's development runs.

Every real-track run in `results/realtrack.jsonl.gz` returned its highest-mean candidate (no evidence rule yet),
so each gives one pair: the best's validation gain over the seed (in examples: won minus lost, scores are 0/1)
and its gain on the dev test split. This prints, per validation gain, how many runs ended below the seed on the
dev test by more than one example, and which (won, lost) splits of that gain a sign-test level admits.

  python benchmarks/evidence_level.py > benchmarks/results/evidence_level.md
"""

from __future__ import annotations

import gzip
import json
import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np

from gepetto.engine.pareto import EVIDENCE_LEVEL as LEVEL
from gepetto.engine.pareto import flip_test

LOG = Path(__file__).parent / "results" / "realtrack.jsonl.gz"


def sign_test(wins: int, losses: int) -> float:
    """The engine's paired test on right/wrong scores: `wins` examples won and `losses` lost."""
    return flip_test(np.array([1.0] * wins + [-1.0] * losses))


def main() -> None:
    rows = [json.loads(line) for line in gzip.decompress(LOG.read_bytes()).decode().splitlines() if line.strip()]
    head = {r["task"]: r for r in rows if r.get("kind") == "headroom"}
    gains: dict[int, list[int]] = defaultdict(list)
    for r in rows:
        h = head.get(r.get("task", ""))
        if r.get("kind") != "run" or h is None or r.get("best_test") is None:
            continue
        n_val, n_test = h["splits"][1], h["splits"][2]
        gains[round((r["best_val"] - r["seed_val"]) * n_val)].append(round((r["best_test"] - h["seed_test"]) * n_test))
    print("# The evidence level for the returned best, from the real track's development runs\n")
    print(f"Source: `{LOG.relative_to(LOG.parents[2])}` ({sum(map(len, gains.values()))} runs of the real track, "
          "embedded 0.5B task / 1.5B reflection, validation 30, dev test 150, every run returning its highest "
          "validation mean). Command: `python benchmarks/evidence_level.py`.\n")
    print("| validation gain (examples won - lost) | runs | dev test gain, median (examples of 150) | "
          "below the seed by more than 1 example |")
    print("|---:|---:|---:|---:|")
    for k in sorted(gains):
        g = gains[k]
        print(f"| {k:+d} | {len(g)} | {statistics.median(g):+.0f} | {sum(x < -1 for x in g)} ({min(g):+d} worst) |")
    print("\nThe one-sided sign test for a gain of 2 or 3 examples, by how many examples differ:\n")
    print("| won - lost | " + " | ".join(f"{w}-{w - k}" for k in (2,) for w in range(2, 10)) + " |")
    print("|---|" + "---:|" * 8)
    print("| p (gain 2) | " + " | ".join(f"{sign_test(w, w - 2):.3f}" for w in range(2, 10)) + " |")
    print("| won - lost | " + " | ".join(f"{w}-{w - 3}" for w in range(3, 11)) + " |")
    print("| p (gain 3) | " + " | ".join(f"{sign_test(w, w - 3):.3f}" for w in range(3, 11)) + " |")
    safe = [x for k, g in gains.items() if k >= 2 for x in g]
    most = {k: max(w + w - k for w in range(k, 60) if sign_test(w, w - k) <= LEVEL) for k in (2, 3)}
    print(f"\nA gain of one example (p = 0.5 whatever the split) is luck: {sum(x < -1 for x in gains[1])} of "
          f"{len(gains[1])} such runs ended below the seed, by up to {-min(gains[1])} examples. From two examples up, "
          f"{sum(x < -1 for x in safe)} of {len(safe)} runs did (worst {min(safe):+d} of 150). A level of {LEVEL} "
          f"admits a gain of two examples while at most {most[2]} examples differ, and a gain of three while at "
          f"most {most[3]} do; never a gain of one.")

if __name__ == "__main__":
    main()
