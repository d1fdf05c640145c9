"""The tables of benchmarks/results/efficiency_demo.md from its JSON (or from `run.py real` JSON files given):
per system, mean ± sd over seeds, and every run.

    python benchmarks/compare/demo_summary.py [FILE.json ...]
"""

from __future__ import annotations

import json
import statistics as st
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.compare.measure import mean_std  # noqa: E402
from benchmarks.compare.real_summary import rollouts_to_reach  # noqa: E402

DEFAULT = ROOT / "benchmarks" / "results" / "efficiency_demo.json"


def main(files: list[str]) -> None:
    by: dict[str, dict[int, dict[str, Any]]] = {}
    for f in files:
        for run in json.loads(Path(f).read_text())["runs"]:
            by.setdefault(run["system"], {})[run["seed"]] = run
    gepa = by.get("gepa", {})
    print("| system | seeds | test | best val | wall s | reflection calls | reflection tokens in+out | unchanged "
          "answers | rollouts to gepa's final val (same seed) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for system, runs in by.items():
        rs = [runs[s] for s in sorted(runs)]
        reach = []
        for s in sorted(runs):
            if system != "gepa" and s in gepa:
                target = gepa[s]["curve"][-1][1]
                a, b = rollouts_to_reach(runs[s]["curve"], target), rollouts_to_reach(gepa[s]["curve"], target)
                reach.append(f"s{s}: {a if a else 'never'} vs {b}" + (f" ({a / b:.2f}x)" if a and b else ""))
        print(f"| {system} | {','.join(map(str, sorted(runs)))} | {mean_std([r['test_score'] for r in rs])} | "
              f"{mean_std([r['best_val'] for r in rs])} | {mean_std([r['wall_s'] for r in rs], 0)} | "
              f"{mean_std([r['reflection_calls'] for r in rs], 1)} | "
              f"{st.mean(sum(r['reflection_tokens']) for r in rs):.0f} | "
              f"{mean_std([r['proposals']['unchanged'] for r in rs], 1)} | {'; '.join(reach) or '-'} |")
    print()
    print("| system | seed | test | best val | rollouts | wall s | reflection calls | unchanged | stop |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for system, runs in by.items():
        for s in sorted(runs):
            r = runs[s]
            stop = r["note"].split(";")[0].replace("stopped: ", "")
            print(f"| {system} | {s} | {r['test_score']:.3f} | {r['best_val']:.3f} | {r['rollouts_counted']} | "
                  f"{r['wall_s']:.0f} | {r['reflection_calls']} | {r['proposals']['unchanged']} | {stop} |")


if __name__ == "__main__":
    main(sys.argv[1:] or [str(DEFAULT)])
