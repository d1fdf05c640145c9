"""Draw the plots of benchmarks/results again from the committed raw numbers (no run needed).

    python benchmarks/compare/plots.py [NAME ...]      # default: every plotted result; NAME e.g. compare_sim_search

Each `compare_*` result is drawn as `run.py` (sim, real) or `walltime.py` drew it when it ran; `efficiency_demo`
as `demo_summary.py --plot` with the systems its page names. The PNGs are written light (measure.save_small).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.compare import sim_rules  # noqa: E402
from benchmarks.compare.demo_summary import plot as demo_plot  # noqa: E402
from benchmarks.compare.measure import RESULTS, load_json, load_meta, plot_curves, plot_mean_curves  # noqa: E402
from benchmarks.compare.walltime import walltime_plots  # noqa: E402

# efficiency_demo.png: the systems and the pooling of its command in benchmarks/results/efficiency_demo.md
DEMO_SYSTEMS = ["gepa", "gepetto-old-default", "gepetto", "gepetto-fewshot", "gepetto-fewshot-adaptive",
                "gepetto-fewshot-default", "gepetto-seek", "gepetto-len250", "gepetto-len250-shorten"]


def raw(name: str) -> Path:
    """The raw numbers of a result: NAME.json, or NAME.json.gz when committed compressed."""
    plain = RESULTS / f"{name}.json"
    return plain if plain.exists() else RESULTS / f"{name}.json.gz"


def sim(name: str) -> list[Path]:
    records, meta = load_json(raw(name)), load_meta(raw(name))
    panels = []
    for setting, refs in meta["references"].items():
        s = sim_rules.SETTINGS[setting]
        runs = [r for r in records if r.task == f"rules-{setting}"]
        panels.append((f"{setting}: {s.topics} topics, {s.components} component(s), budget {runs[0].budget}",
                       runs, refs))
    png, mean_png = RESULTS / f"{name}.png", RESULTS / f"{name}_mean.png"
    plot_curves(panels, png)
    plot_mean_curves(panels, mean_png)
    return [png, mean_png]


def real(name: str) -> list[Path]:
    records, meta = load_json(raw(name)), load_meta(raw(name))
    argv = meta["argv"]
    task = argv[argv.index("--task") + 1]
    png = RESULTS / f"{name}.png"
    plot_curves([(f"{task}: best validation score", records, meta["references"])], png)
    return [png]


def walltime(name: str) -> list[Path]:
    return list(walltime_plots(load_json(raw(name)), RESULTS, name))


def efficiency_demo(name: str) -> list[Path]:
    png = RESULTS / f"{name}.png"
    demo_plot([str(raw(name))], DEMO_SYSTEMS, png, {"gepetto-t1": "gepetto"})
    return [png]


def drawers() -> dict[str, Callable[[str], list[Path]]]:
    """Every plotted result by name, with what draws it."""
    out: dict[str, Callable[[str], list[Path]]] = {"efficiency_demo": efficiency_demo}
    for path in sorted(RESULTS.glob("compare_*.json*")):
        name = path.name.split(".json")[0]
        track = load_meta(path).get("track")
        out[name] = {"sim": sim, "real": real, "walltime": walltime}[track]
    return out


def main(names: list[str]) -> None:
    table = drawers()
    unknown = sorted(set(names) - set(table))
    if unknown:
        raise SystemExit(f"no plotted result named {unknown}; known: {', '.join(table)}")
    for name in names or list(table):
        for png in table[name](name):
            print(f"wrote {png.relative_to(ROOT)} ({png.stat().st_size // 1000} kB)", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="results to draw (default: all)")
    main(parser.parse_args().names)
