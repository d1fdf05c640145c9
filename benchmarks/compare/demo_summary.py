"""The tables of benchmarks/results/efficiency_demo.md from its JSON (or from `run.py real` JSON files given):
per system, mean ± sd over seeds, and every run; with --plot, the mean best validation score over seeds against
rollouts and against wall time, one line per system named in --systems.

    python benchmarks/compare/demo_summary.py [FILE.json ...] [--plot PNG --systems gepa gepetto ...]
"""

from __future__ import annotations

import argparse
import json
import statistics as st
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.compare.measure import load_json, mean_std, plot_mean_curves  # noqa: E402
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


def plot(files: list[str], systems: list[str], path: Path) -> None:
    records = [r for f in files for r in load_json(Path(f)) if r.system in systems]
    records.sort(key=lambda r: systems.index(r.system))
    refs = {f"{k} (on test)": v for k, v in json.loads(Path(files[0]).read_text()).get("references", {}).items()}
    panels = [("demo: best validation against rollouts", records, refs),
              ("demo: best validation against wall time", records, refs)]
    plot_mean_curves(panels, path, seconds=[False, True])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", default=[str(DEFAULT)])
    parser.add_argument("--plot", type=Path, help="also write this PNG")
    parser.add_argument("--systems", nargs="+", default=["gepa", "gepetto"], help="the systems plotted")
    args = parser.parse_args()
    main(args.files)
    if args.plot:
        plot(args.files, args.systems, args.plot)
