"""One table over every real-track head-to-head run: `benchmarks/results/compare_real_*.json`.

    python benchmarks/compare/real_summary.py [--results benchmarks/results] > benchmarks/results/compare_real.md.part

Per task: the references (seed, constant answer, expert prompt on test), then per system the mean test score,
best validation score, rollouts and wall time; and, per seed run by both, how many rollouts gepetto needed to
reach the reference's final best validation score (the efficiency issue's measure: goal at most 0.6x).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REFERENCE = "gepa"
REFS = ("constant answer", "seed", "expert prompt")


def _mean_sd(xs: list[float], fmt: str = "{:.3f}") -> str:
    if not xs:
        return "-"
    if len(xs) == 1:
        return fmt.format(xs[0])
    return f"{fmt.format(statistics.mean(xs))} ± {fmt.format(statistics.stdev(xs))}"


def rollouts_to_reach(curve: Sequence[Sequence[float]], target: float) -> int | None:
    """The first rollout count at which a curve's score (the best validation score, or held out: the test
    score of what the run would return) reached `target` (None: never)."""
    for used, best in curve:
        if best >= target - 1e-9:
            return int(used)
    return None


def load(results: Path) -> tuple[dict[str, list[dict[str, Any]]], dict[str, dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    meta: dict[str, dict[str, Any]] = {}
    for path in sorted(results.glob("compare_real_*.json")):
        data = json.loads(path.read_text())
        for run in data["runs"]:
            run["file"] = path.name
            runs[run["task"]].append(run)
            meta.setdefault(run["task"], {"references": data["meta"].get("references", {}), "files": set()})
            meta[run["task"]]["files"].add(path.name)
    return runs, meta


def table(results: Path) -> str:
    runs, meta = load(results)
    out = ["| task (budget) | system | seeds | test | best val | rollouts | wall s "
           "| gepa's final val reached at (rollouts) |",
           "|---|---|---|---:|---:|---:|---:|---|"]
    refs_out = ["| task | " + " | ".join(REFS) + " |", "|---|" + "---:|" * len(REFS)]
    for task, rs in runs.items():
        refs = meta[task]["references"]
        by: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in rs:
            by[r["system"]].append(r)
        ref_runs = {r["seed"]: r for r in by.get(REFERENCE, [])}
        refs_out.append(f"| {task} | " + " | ".join(f"{refs[k]:.3f}" if k in refs else "-" for k in REFS) + " |")
        for system, srs in sorted(by.items()):
            reach = []
            if system != REFERENCE:
                for r in srs:
                    ref = ref_runs.get(r["seed"])
                    if ref is None:
                        continue
                    if ref["best_val"] <= ref["seed_val"] + 1e-9:
                        reach.append(f"seed {r['seed']}: gepa found no gain over the seed")
                        continue
                    at = rollouts_to_reach(r["curve"], ref["best_val"])
                    ref_used = rollouts_to_reach(ref["curve"], ref["best_val"]) or ref["rollouts_counted"]
                    reach.append(f"seed {r['seed']}: " + (f"{at} vs {ref_used} ({at / ref_used:.2f}x)" if at
                                                          else "never"))
            out.append(
                f"| {task} ({srs[0]['budget']}) | {system} | {','.join(str(r['seed']) for r in srs)} | "
                f"{_mean_sd([r['test_score'] for r in srs])} | {_mean_sd([r['best_val'] for r in srs])} | "
                f"{_mean_sd([r['rollouts_counted'] for r in srs], '{:.0f}')} | "
                f"{_mean_sd([r['wall_s'] for r in srs], '{:.0f}')} | {'; '.join(reach) or '-'} |")
    return "\n".join([*refs_out, "", *out])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=str(Path(__file__).resolve().parents[1] / "results"))
    print(table(Path(ap.parse_args().results)))


if __name__ == "__main__":
    main()
