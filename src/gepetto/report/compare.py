"""Several stored runs side by side (`gepetto compare RUN...`): one row of figures per run, the options in which
they differ, and the best validation score of each against the rollouts it used, as a terminal chart (Rich) or a
self-contained HTML page (inline CSS and SVG, no script, nothing fetched)."""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.text import Text

from gepetto.report.assets import CSS
from gepetto.report.html import _num
from gepetto.secrets import redact_data

# one colour per run, in the terminal (Rich names) and in the page; a glyph too, for terminals without colour
PALETTE = [("#2563eb", "blue"), ("#d9480f", "dark_orange3"), ("#2f9e44", "green"), ("#ae3ec9", "magenta"),
           ("#0c8599", "cyan"), ("#e67700", "yellow"), ("#c2255c", "red"), ("#5c7cfa", "bright_blue")]
GLYPHS = "●■▲◆○□△◇"
_IGNORED_OPTIONS = {"stop_file", "tracking"}  # one session's, never a difference between runs


def _test(snapshot: Mapping[str, Any]) -> tuple[float | None, float | None, int | None]:
    """Seed and best test scores of a run (`gepetto evaluate`), and on how many examples; None when not measured."""
    test = (snapshot.get("evaluations") or {}).get("test") or {}
    cands = [c for c in test.get("candidates") or [] if isinstance(c, Mapping)]
    seed = next((c.get("mean") for c in cands if c.get("index") == 0), None)
    best = next((c.get("mean") for c in cands if c.get("label") == "best"), None)
    return _num(seed), _num(best), test.get("examples")


def run_row(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """The figures of one run that a comparison shows."""
    run, res = snapshot.get("run") or {}, snapshot.get("result") or {}
    ledger = {k: v for k, v in (res.get("ledger") or {}).items() if isinstance(v, Mapping)}
    proposals = {str(k): int(_num(v) or 0) for k, v in (res.get("proposals") or {}).items()}
    tested = proposals.get("accepted", 0) + proposals.get("rejected: not better on minibatch", 0)
    seed_test, best_test, n_test = _test(snapshot)
    history = [(x, y) for p in res.get("history") or [] if isinstance(p, Sequence) and len(p) >= 2
               for x, y in [(_num(p[0]), _num(p[1]))] if x is not None and y is not None]
    return {
        "name": run.get("name"), "status": run.get("status"), "task": run.get("task"),
        "task_lm": run.get("task_lm"), "reflection_lm": run.get("reflection_lm"),
        "seed_val": _num(res.get("seed_score")), "best_val": _num(res.get("best_score")),
        "seed_test": seed_test, "best_test": best_test, "n_test": n_test,
        "rollouts": _num(res.get("rollouts_used")), "budget": _num(res.get("budget")),
        "candidates": len(res.get("candidates") or []), "accepted": proposals.get("accepted", 0), "tested": tested,
        "reflection_calls": int(_num((ledger.get("reflection") or {}).get("calls")) or 0),
        "cost": sum(_num(u.get("cost")) or 0.0 for u in ledger.values()),
        "tokens": sum((_num(u.get("input_tokens")) or 0) + (_num(u.get("output_tokens")) or 0)
                      for u in ledger.values()),
        "wall": _num(res.get("wall_seconds")), "history": history,
        "best_candidate": res.get("best_candidate") or {},
    }


def differing_options(snapshots: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """The options (run config fields) whose values are not the same in every run, with each run's value."""
    configs = [dict((s.get("run") or {}).get("config") or {}) for s in snapshots]
    keys = sorted({k for c in configs for k in c} - _IGNORED_OPTIONS)
    out = {}
    for k in keys:
        values = [c.get(k) for c in configs]
        if any(json.dumps(v, sort_keys=True, default=str) != json.dumps(values[0], sort_keys=True, default=str)
               for v in values):
            out[k] = values
    return out


def _f(value: Any, digits: int = 3) -> str:
    v = _num(value)
    return "\u2013" if v is None else f"{v:.{digits}f}"


# ---- the terminal chart ---------------------------------------------------------------------------


def _value_at(history: list[tuple[float, float]], x: float) -> float | None:
    """The best score so far at `x` rollouts (None before the seed was scored)."""
    value = None
    for hx, hy in history:
        if hx > x:
            break
        value = hy
    return value


_SHARED = "✱"  # a cell where the lines of several runs meet


def _mark(cell: tuple[str, str, int], glyph: str, colour: str, series: int) -> tuple[str, str, int]:
    """A chart cell after run `series` passes through it: its glyph, or the shared mark if another run did."""
    if cell[0] != " " and cell[2] != series:
        return (_SHARED, "bold", -1)
    return (glyph, colour, series)


def text_chart(rows: Sequence[Mapping[str, Any]], width: int = 64, height: int = 11) -> Text:
    """Best validation score against rollouts used, one step line per run (its colour and glyph), as text."""
    series = [(r, r["history"], _num(r.get("rollouts")) or (r["history"][-1][0] if r["history"] else 0.0))
              for r in rows]
    xmax = max([1.0, *(end for _, _, end in series)])
    ys = [y for _, h, _ in series for _, y in h]
    if not ys:
        return Text("no scores yet", style="dim")
    ylo, yhi = min([*ys, 0.0 if min(ys) >= 0 else min(ys)]), max([*ys, 1.0])
    grid: list[list[tuple[str, str, int]]] = [[(" ", "", -1)] * width for _ in range(height)]

    def row_of(y: float) -> int:
        return round((1 - (y - ylo) / ((yhi - ylo) or 1)) * (height - 1))

    for k, (_, history, end) in enumerate(series):
        colour, glyph = PALETTE[k % len(PALETTE)][1], GLYPHS[k % len(GLYPHS)]
        previous: int | None = None
        for col in range(width):
            x = xmax * col / (width - 1)
            y = _value_at(history, x)
            if y is None or x > end + xmax / (width - 1):
                previous = None
                continue
            r = row_of(y)
            if previous is not None and previous != r:  # a step up: the column between the two levels
                for between in range(min(r, previous) + 1, max(r, previous)):
                    grid[between][col] = _mark(grid[between][col], "│", colour, k)
            grid[r][col] = _mark(grid[r][col], glyph, colour, k)
            previous = r
    out = Text()
    for i, line in enumerate(grid):
        at = yhi - (yhi - ylo) * i / (height - 1)  # the score this row stands for
        label = f"{at:5.2f} " if i in (0, (height - 1) // 2, height - 1) else "      "
        out.append(label + "┤", style="dim")
        for ch, style, _ in line:
            out.append(ch, style=style)
        out.append("\n")
    out.append("      └" + "─" * width + "\n", style="dim")
    ticks = f"0{' ' * (width - len(str(int(xmax))) - 1)}{int(xmax)}"
    out.append("       " + ticks + "  rollouts used\n", style="dim")
    for k, (run, _, _) in enumerate(series):
        colour, glyph = PALETTE[k % len(PALETTE)][1], GLYPHS[k % len(GLYPHS)]
        out.append(f"       {glyph} ", style=colour)
        out.append(f"{run['name']}  (best {_f(run['best_val'])})\n")
    if any(ch == _SHARED for line in grid for ch, _, _ in line):
        out.append(f"       {_SHARED} ", style="bold")
        out.append("several runs\n")
    return out


# ---- the HTML page --------------------------------------------------------------------------------


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


_DASHES = ("", "9 5", "3 4", "12 4 3 4")


def _stroke(k: int) -> str:
    """Run k's line: the first solid and widest, the others dashed and thinner, so coinciding lines all show."""
    dash = _DASHES[k % len(_DASHES)]
    width = 4.2 if k == 0 else 2.6
    return f'stroke-width="{width}"' + (f' stroke-dasharray="{dash}"' if dash else "")


def _chart_svg(rows: Sequence[Mapping[str, Any]]) -> str:
    w, h, ml, mr, mt, mb = 820, 330, 52, 20, 16, 44
    pw, ph = w - ml - mr, h - mt - mb
    ends = [(_num(r.get("rollouts")) or (r["history"][-1][0] if r["history"] else 0.0)) for r in rows]
    xmax = max([1.0, *ends, *(x for r in rows for x, _ in r["history"])])
    ys = [y for r in rows for _, y in r["history"]]
    if not ys:
        return '<div class="empty">no scores yet</div>'
    ylo, yhi = min([0.0, *ys]), max([1.0, *ys])

    def sx(x: float) -> float:
        return ml + pw * x / xmax

    def sy(y: float) -> float:
        return mt + ph * (1 - (y - ylo) / ((yhi - ylo) or 1))

    parts = []
    for i in range(5):
        y = ylo + (yhi - ylo) * i / 4
        parts.append(f'<line class="grid" x1="{ml}" x2="{ml + pw}" y1="{sy(y):.1f}" y2="{sy(y):.1f}"/>'
                     f'<text class="tick" x="{ml - 6}" y="{sy(y) + 3.5:.1f}" text-anchor="end">{y:.2f}</text>')
    step = 10 ** math.floor(math.log10(xmax / 5)) if xmax >= 5 else 1
    step *= next((m for m in (1, 2, 5, 10) if xmax / (step * m) <= 7), 10)
    t = 0.0
    while t <= xmax + 1e-9:
        parts.append(f'<text class="tick" x="{sx(t):.1f}" y="{mt + ph + 16}" text-anchor="middle">{t:g}</text>')
        t += step
    parts.append(f'<line class="axis" x1="{ml}" x2="{ml + pw}" y1="{mt + ph}" y2="{mt + ph}"/>'
                 f'<line class="axis" x1="{ml}" x2="{ml}" y1="{mt}" y2="{mt + ph}"/>'
                 f'<text class="alabel" x="{ml + pw / 2:.1f}" y="{h - 8}" text-anchor="middle">rollouts used</text>'
                 f'<text class="alabel" transform="translate(14,{mt + ph / 2:.1f}) rotate(-90)" '
                 f'text-anchor="middle">best validation score</text>')
    for k, (r, end) in enumerate(zip(rows, ends, strict=True)):
        hist = sorted(r["history"])
        if not hist:
            continue
        colour = PALETTE[k % len(PALETTE)][0]
        d = f"M{sx(hist[0][0]):.1f},{sy(hist[0][1]):.1f}"
        for x, y in hist[1:]:
            d += f" H{sx(x):.1f} V{sy(y):.1f}"
        if end > hist[-1][0]:
            d += f" H{sx(end):.1f}"
        parts.append(f'<path class="run-line" d="{d}" stroke="{colour}" {_stroke(k)}>'
                     f'<title>{_e(r["name"])}</title></path>')
        last_x = max(end, hist[-1][0])
        parts.append(f'<circle cx="{sx(last_x):.1f}" cy="{sy(hist[-1][1]):.1f}" r="4" fill="{colour}">'
                     f'<title>{_e(r["name"])}: best {_f(hist[-1][1])} at {last_x:g} rollouts</title></circle>')
    legend = "".join(f'<span><svg width="34" height="10"><line x1="1" y1="5" x2="33" y2="5" stroke="'
                     f'{PALETTE[k % len(PALETTE)][0]}" {_stroke(k)}/></svg> {_e(r["name"])}</span>'
                     for k, r in enumerate(rows))
    return (f'<svg class="chart" viewBox="0 0 {w} {h}" width="100%" style="max-width:{w}px" role="img" '
            f'aria-label="best validation score over rollouts used, one line per run">{"".join(parts)}</svg>'
            f'<div class="legend">{legend}</div>')


def _table(rows: Sequence[Mapping[str, Any]]) -> str:
    head = ("<tr><th>run</th><th>status</th><th>task</th><th>validation</th><th>test</th><th>rollouts</th>"
            "<th>candidates</th><th>accepted / tested</th><th>reflection calls</th><th>tokens</th><th>cost</th>"
            "<th>wall time</th></tr>")
    body = []
    for k, r in enumerate(rows):
        colour = PALETTE[k % len(PALETTE)][0]
        wall = "\u2013" if r["wall"] is None else f"{r['wall']:.0f} s"
        cost = "$" + format(r["cost"], ".4f") if r["cost"] else "\u2013"
        test = (f'{_f(r["seed_test"])} \u2192 {_f(r["best_test"])} <span class="muted small">({r["n_test"]})</span>'
                if r["best_test"] is not None or r["seed_test"] is not None else '<span class="muted">not run</span>')
        body.append(
            f'<tr><td><span class="swatch" style="background:{colour}"></span> <b>{_e(r["name"])}</b></td>'
            f'<td>{_e(r["status"])}</td><td class="mono small">{_e(r["task"])}</td>'
            f'<td>{_f(r["seed_val"])} \u2192 <b>{_f(r["best_val"])}</b></td><td>{test}</td>'
            f'<td>{_e(int(r["rollouts"] or 0))} / {_e(int(r["budget"] or 0))}</td><td>{r["candidates"]}</td>'
            f'<td>{r["accepted"]} / {r["tested"]}</td><td>{r["reflection_calls"]}</td><td>{int(r["tokens"]):,}</td>'
            f'<td>{cost}</td><td>{wall}</td></tr>')
    return (f'<div class="table-wrap"><table class="data"><thead>{head}</thead><tbody>{"".join(body)}</tbody>'
            '</table></div><p class="muted small">validation: the seed\'s and the best candidate\'s mean on the '
            'validation set; test: the same two on held-out examples (<span class="mono">gepetto evaluate RUN</span>'
            '), with their number; accepted / tested: proposals that passed their minibatch test, of those tested.'
            '</p>')


def _options(rows: Sequence[Mapping[str, Any]], differing: Mapping[str, list[Any]]) -> str:
    if not differing:
        return '<div class="empty">the runs have the same options</div>'
    head = "<tr><th>option</th>" + "".join(f"<th>{_e(r['name'])}</th>" for r in rows) + "</tr>"
    body = "".join(f'<tr><td class="mono">{_e(k)}</td>'
                   + "".join(f'<td class="mono small">{_e(json.dumps(v, ensure_ascii=False, default=str))}</td>'
                             for v in values) + "</tr>" for k, values in differing.items())
    return f'<div class="table-wrap"><table class="data opts"><thead>{head}</thead><tbody>{body}</tbody></table></div>'


def _best_texts(rows: Sequence[Mapping[str, Any]]) -> str:
    cols = []
    for k, r in enumerate(rows):
        colour = PALETTE[k % len(PALETTE)][0]
        texts = "".join(f'<div class="comp-label">{_e(c)}</div><pre class="textbox">{_e(t)}</pre>'
                        for c, t in (r["best_candidate"] or {}).items()) or '<div class="empty">none yet</div>'
        cols.append(f'<div><h3><span class="swatch" style="background:{colour}"></span> {_e(r["name"])}</h3>{texts}'
                    f'</div>')
    return f'<div class="best-grid">{"".join(cols)}</div>'


_EXTRA_CSS = """
.swatch { display: inline-block; width: 11px; height: 11px; border-radius: 3px; vertical-align: -1px; }
.chart .run-line { fill: none; stroke-linejoin: round; }
.legend { margin-top: 6px; }
table.opts th, table.opts td { text-align: left; white-space: normal; }
"""


def render_compare(snapshots: Sequence[Mapping[str, Any]]) -> str:
    """The comparison of several run snapshots (gepetto.store.snapshot) as one self-contained HTML page."""
    clean = [redact_data(dict(s)) for s in snapshots]
    rows = [run_row(s) for s in clean]
    differing = differing_options(clean)
    try:
        from gepetto import __version__ as version
    except ImportError:  # pragma: no cover - the package is always importable here
        version = ""
    names = ", ".join(str(r["name"]) for r in rows)
    body = (
        f'<header class="card"><h1>Comparing {len(rows)} runs</h1><div class="meta"><span>{_e(names)}</span></div>'
        f'</header>'
        f'<section class="card" id="runs"><h2>Runs</h2>{_table(rows)}</section>'
        f'<section class="card" id="chart"><h2>Best validation score over rollouts</h2><div class="sub">Each line: '
        f'the best mean validation score a run had found after so many rollouts.</div>{_chart_svg(rows)}</section>'
        f'<section class="card" id="options"><h2>Options that differ</h2>{_options(rows, differing)}</section>'
        f'<section class="card" id="best"><h2>Best candidates</h2>{_best_texts(rows)}</section>'
        f'<footer>gepetto {_e(version)} comparison \u00b7 self-contained: no network needed</footer>')
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>gepetto: comparing {_e(names)}</title><style>{CSS}{_EXTRA_CSS}</style></head>"
            f"<body><main>{body}</main></body></html>\n")


def write_compare(snapshots: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Render the comparison and write it to `path` (UTF-8); returns the path."""
    out = Path(path)
    if out.parent and not out.parent.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_compare(snapshots), encoding="utf-8")
    return out


__all__ = ["differing_options", "render_compare", "run_row", "text_chart", "write_compare"]
