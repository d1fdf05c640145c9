"""The tables of benchmarks/results/efficiency_demo.md from its JSON (or from `run.py real` JSON files given):
per system, mean ± sd over seeds, and every run; with --plot, the mean best validation score over seeds against
rollouts and against wall time, one line per system named in --systems.

    python benchmarks/compare/demo_summary.py [FILE.json ...] [--plot PNG --systems gepa gepetto ...] [--pool A=B]
"""

from __future__ import annotations

import argparse
import json
import statistics as st
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.compare.measure import load_json, mean_reaches, mean_std, plot_mean_curves, read_text  # noqa: E402
from benchmarks.compare.real_summary import rollouts_to_reach  # noqa: E402

DEFAULT = ROOT / "benchmarks" / "results" / "efficiency_demo.json"


def main(files: list[str], pool: dict[str, str]) -> None:
    by: dict[str, dict[int, dict[str, Any]]] = {}
    for f in files:
        for run in json.loads(read_text(Path(f)))["runs"]:
            system = pool.get(run["system"], run["system"])
            assert run["seed"] not in by.get(system, {}), f"{system} seed {run['seed']} twice"
            by.setdefault(system, {})[run["seed"]] = run
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
    reach_table(by)
    print()
    print("| system | seed | test | best val | rollouts | wall s | reflection calls | unchanged | stop |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for system, runs in by.items():
        for s in sorted(runs):
            r = runs[s]
            stop = r["note"].split(";")[0].replace("stopped: ", "")
            print(f"| {system} | {s} | {r['test_score']:.3f} | {r['best_val']:.3f} | {r['rollouts_counted']} | "
                  f"{r['wall_s']:.0f} | {r['reflection_calls']} | {r['proposals']['unchanged']} | {stop} |")


def reach_table(by: dict[str, dict[int, dict[str, Any]]]) -> None:
    """Each gepa run's final validation score as a target for every run of every system (not only the run of the
    same seed: one gepa run's final score is a noisy target): how many runs reach it, and the median rollouts of
    those that do; and when the mean over a system's runs first reaches the mean of gepa's final scores."""
    finals = [r["curve"][-1][1] for r in by.get("gepa", {}).values()]
    if not finals:
        return
    targets, mean_final = sorted({round(x, 4) for x in finals}), st.mean(finals)
    print("| system | runs | " + " | ".join(f"reach {t:.3f}: runs, median rollouts" for t in targets) +
          f" | mean over runs reaches gepa's mean final {mean_final:.3f} at |")
    print("|---|---:|" + "---:|" * (len(targets) + 1))
    for system, runs in by.items():
        cells = []
        for t in targets:
            got = [x for x in (rollouts_to_reach(r["curve"], t) for r in runs.values()) if x is not None]
            cells.append(f"{len(got)}/{len(runs)}, {st.median(got):.0f}" if got else f"0/{len(runs)}, -")
        mean_at = mean_reaches([r["curve"] for r in runs.values()], mean_final)
        print(f"| {system} | {len(runs)} | " + " | ".join(cells) + f" | {'never' if mean_at is None else mean_at} |")


def plot(files: list[str], systems: list[str], path: Path, pool: dict[str, str]) -> None:
    records = [replace(r, system=pool.get(r.system, r.system)) for f in files for r in load_json(Path(f))]
    records = [r for r in records if r.system in systems]
    records.sort(key=lambda r: systems.index(r.system))
    refs = {f"{k} (on test)": v for k, v in json.loads(read_text(Path(files[0]))).get("references", {}).items()}
    panels = [("demo: best validation against rollouts", records, refs),
              ("demo: best validation against wall time", records, refs)]
    plot_mean_curves(panels, path, seconds=[False, True])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", default=[str(DEFAULT)])
    parser.add_argument("--plot", type=Path, help="also write this PNG")
    parser.add_argument("--systems", nargs="+", default=["gepa", "gepetto"], help="the systems plotted")
    parser.add_argument("--pool", nargs="*", default=[], metavar="A=B",
                        help="count system A's runs as system B's (the same settings under two names)")
    args = parser.parse_args()
    pool = dict(x.split("=", 1) for x in args.pool)
    main(args.files, pool)
    if args.plot:
        plot(args.files, args.systems, args.plot, pool)
