"""Render a run snapshot (see gepetto.store.snapshot) as one self-contained HTML page.

Everything static is rendered here with every user string redacted and escaped; the small inline script only adds the
interactive parts (candidate panel, diffs, selection) from a JSON block and writes user text with textContent.
No resource is fetched from anywhere: CSS, script, charts (SVG) and data are all inline.
"""

from __future__ import annotations

import difflib
import html
import json
import math
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gepetto.engine.events import Outcome, StopReason, constant_notes
from gepetto.engine.pareto import stored_best
from gepetto.report.assets import CSS, JS
from gepetto.secrets import redact_data, write_private_text

_DASH, _STAR = "\u2013", " \u2605"

# ---- small helpers --------------------------------------------------------------------------------


def _e(value: Any) -> str:
    """Escape anything for HTML text or a quoted attribute."""
    return html.escape("" if value is None else str(value), quote=True)


def _num(value: Any) -> float | None:
    """A finite float, or None for missing, NaN, infinite or non-numeric values."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _score(value: Any, digits: int = 3) -> str:
    v = _num(value)
    return "\u2013" if v is None else f"{v:.{digits}f}"


def _cell(value: Any) -> str:
    v = _num(value)
    if v is None:
        return "\u2013"
    return str(int(v)) if v in (0.0, 1.0) else f"{v:.2f}"


def _int(value: Any) -> str:
    v = _num(value)
    return "\u2013" if v is None else f"{round(v):,}"


def _color(value: Any, light: float = 85.0) -> str:
    """Score colour: pale red (0) through amber to green (1); grey when unknown."""
    v = _num(value)
    if v is None:
        return "#e5e7eb"
    v = min(max(v, 0.0), 1.0)
    return f"hsl({round(6 + v * 124)}, {round(62 - 10 * v)}%, {light:.0f}%)"


def _clean(value: Any) -> Any:
    """JSON-safe copy: NaN/inf become null, tuples lists, unknown objects strings."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return str(value)


def _embed_json(data: Any) -> str:
    """JSON for a <script type="application/json"> block: no "<", ">" or "&" can end or confuse the block."""
    text = json.dumps(_clean(data), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _utf16_len(text: str) -> int:
    """Length as JavaScript counts it (UTF-16 code units), so diff offsets line up in the browser."""
    return len(text.encode("utf-16-le")) // 2


# ---- diffs ----------------------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*\w+|\s*[^\w\s]|\s+")  # a word or sign with the spaces before it
_MAX_WORK = 1_000_000  # token pairs; beyond this diff by lines (difflib is quadratic in the worst case)


def word_diff(old: str, new: str) -> list[list[Any]]:
    """Word-level diff as ops over `old`: ["=", n] keep n chars, ["-", n] drop n chars, ["+", text] insert.

    Lengths count UTF-16 code units (what JS `substr` uses). Whitespace-only islands between two changes are
    folded into the change, so a rewritten sentence reads as one deletion and one insertion.
    """
    a, b = _TOKEN.findall(old), _TOKEN.findall(new)
    # the common head and tail cost nothing to find and are most of an evolved prompt
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    ma, mb = a[head: len(a) - tail], b[head: len(b) - tail]
    if len(ma) * len(mb) > _MAX_WORK:
        ma, mb = "".join(ma).splitlines(keepends=True), "".join(mb).splitlines(keepends=True)
        if len(ma) * len(mb) > _MAX_WORK:
            ma, mb = ["".join(ma)], ["".join(mb)]
    blocks: list[tuple[str, str, str]] = [("equal", "".join(a[:head]), "")] if head else []  # (tag, old, new)
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, ma, mb, autojunk=False).get_opcodes():
        blocks.append((op, "".join(ma[i1:i2]), "".join(mb[j1:j2])))
    if tail:
        blocks.append(("equal", "".join(a[len(a) - tail:]), ""))
    blocks = [blk for blk in blocks if blk[1] or blk[2]]
    merged: list[tuple[str, str, str]] = []
    for k, (tag, x, y) in enumerate(blocks):
        between = 0 < k < len(blocks) - 1 and blocks[k - 1][0] != "equal" and blocks[k + 1][0] != "equal"
        if tag == "equal" and between:
            around = min(len(blocks[k - 1][1]) + len(blocks[k - 1][2]),
                         len(blocks[k + 1][1]) + len(blocks[k + 1][2]))
            if not re.search(r"\w", x) or 4 * len(x) <= around:  # a sign or a short word amid big changes
                tag, y = "replace", x
        if merged and tag != "equal" and merged[-1][0] != "equal":
            _, px, py = merged[-1]
            merged[-1] = ("replace", px + x, py + y)
        else:
            merged.append((tag, x, y))
    ops: list[list[Any]] = []
    for tag, x, y in merged:
        if tag == "equal":
            ops.append(["=", _utf16_len(x)])
            continue
        if x:
            ops.append(["-", _utf16_len(x)])
        if y:
            ops.append(["+", y])
    return ops


def _words(text: str) -> int:
    return len(re.findall(r"\w+", text))


def _diff_stats(old: str, ops: Sequence[Sequence[Any]]) -> tuple[int, int]:
    """Words added and removed by a diff."""
    added = sum(_words(op[1]) for op in ops if op[0] == "+")
    removed, pos = 0, 0
    units = old.encode("utf-16-le")
    for op in ops:
        if op[0] in ("=", "-"):
            if op[0] == "-":
                removed += _words(units[2 * pos: 2 * (pos + op[1])].decode("utf-16-le", errors="replace"))
            pos += op[1]
    return added, removed


# ---- the model of the page ----------------------------------------------------------------------


class _View:
    """The snapshot, normalised: every field may be missing or None in a partial or odd snapshot."""

    def __init__(self, snapshot: Mapping[str, Any]) -> None:
        self.run: Mapping[str, Any] = snapshot.get("run") or {}
        self.result: Mapping[str, Any] = snapshot.get("result") or {}
        self.samples: list[Mapping[str, Any]] = list(snapshot.get("samples") or [])
        self.transcripts: list[Mapping[str, Any]] | None = (None if snapshot.get("transcripts") is None
                                                             else list(snapshot.get("transcripts") or []))
        self.evaluations: Mapping[str, Any] = snapshot.get("evaluations") or {}
        self.route: str | None = snapshot.get("route")  # the route an "auto" run took (engine/route.py)
        cands = []
        for pos, c in enumerate(self.result.get("candidates") or []):
            idx = c.get("index", pos)
            cands.append({**c, "index": int(idx) if _num(idx) is not None else pos})
        self.cands: list[dict[str, Any]] = cands
        self.by_idx = {c["index"]: c for c in cands}
        for c in cands:
            c["parents"] = [int(p) for p in (c.get("parents") or [])
                            if _num(p) is not None and int(p) in self.by_idx and int(p) != c["index"]]
            c["mean"] = _num(c.get("mean"))
            if c["mean"] is None and c.get("val_scores"):
                vals = [_num(v) or 0.0 for v in c["val_scores"].values()]
                c["mean"] = sum(vals) / len(vals)
        self.front = [int(i) for i in (self.result.get("pareto_front") or []) if _num(i) is not None]
        self.front_set = set(self.front)
        best = stored_best(cands, self.result)
        self.best_index: int | None = None if best is None else cands[best]["index"]
        comps: list[str] = []
        for texts in [c.get("texts") or {} for c in cands] + [self.result.get("best_candidate") or {}]:
            comps.extend(k for k in texts if k not in comps)
        self.components = comps
        self.val_ids: list[str] = []
        for c in cands:
            self.val_ids.extend(k for k in (c.get("val_scores") or {}) if k not in self.val_ids)


def _layout(view: _View) -> dict[int, tuple[float, int]]:
    """Layered layout: row = 1 + deepest parent (a child is always below its parents); within a row nodes go
    left to right in order of where their parents are, each as close below its parents as the row
    allows (x = max(mean parent x, previous x + 1)), so chains stay straight and nodes never overlap."""
    cands = sorted(view.cands, key=lambda c: c["index"])
    depth: dict[int, int] = {}
    rows: dict[int, list[int]] = {}
    for c in cands:
        ps = [p for p in c["parents"] if p in depth]
        depth[c["index"]] = d = 1 + max(depth[p] for p in ps) if ps else 0
        rows.setdefault(d, []).append(c["index"])
    xs: dict[int, float] = {}
    for d in sorted(rows):
        want = {}
        for i in rows[d]:
            ps = [xs[p] for p in view.by_idx[i]["parents"] if p in xs]
            want[i] = sum(ps) / len(ps) if ps else 0.0
        last = -math.inf
        for i in sorted(rows[d], key=lambda i: (want[i], i)):
            xs[i] = last = max(want[i], last + 1)
    return {i: (xs[i], depth[i]) for i in depth}


# ---- sections -----------------------------------------------------------------------------------


def _header(view: _View) -> str:
    run, res = view.run, view.result
    status = str(run.get("status") or "unknown")
    scls = status if status in ("finished", "running", "failed", "interrupted") else "other"
    seed, best = _num(res.get("seed_score")), _num(res.get("best_score"))
    if best is None and view.best_index is not None:
        best = view.by_idx[view.best_index]["mean"]
    delta = ""
    if seed is not None and best is not None:
        d = best - seed
        delta = f' <span class="{"delta-up" if d >= 0 else "delta-down"}">({d:+.3f})</span>'
    used, budget = _num(res.get("rollouts_used")), _num(res.get("budget"))
    pct = min(100.0, 100.0 * used / budget) if used is not None and budget else 0.0
    ledger = res.get("ledger") or {}
    calls = sum(_num(u.get("calls")) or 0 for u in ledger.values() if isinstance(u, Mapping))
    tokens = sum((_num(u.get("input_tokens")) or 0) + (_num(u.get("output_tokens")) or 0)
                 for u in ledger.values() if isinstance(u, Mapping))
    wall = _num(res.get("wall_seconds"))
    meta = [("task", run.get("task")), ("task LM", run.get("task_lm")), ("reflection LM", run.get("reflection_lm")),
            ("seed", run.get("seed")), ("created", _when(run.get("created")))]
    meta_html = "".join(f"<span>{_e(k)} <b>{_e(v)}</b></span>" for k, v in meta if v not in (None, ""))
    best_note = f"candidate #{view.best_index}" if view.best_index is not None else "no candidate yet"
    stats = [
        ("validation score", f"{_score(seed)} \u2192 {_score(best)}{delta}", best_note),
        *_test_stat(view),
        ("rollouts used / budget", f"{_int(used)} / {_int(budget)}",
         f'<div class="bar"><span style="width:{pct:.1f}%"></span></div>'),
        ("candidates", f"{len(view.cands)}", f"{len(view.front)} on the Pareto front; "
                                             f"{_e(_int(res.get('iterations')))} iterations"),
        ("LM calls", _int(calls), f"{_int(tokens)} tokens" + (f"; {wall:.1f} s wall time" if wall is not None else "")),
    ]
    stat_html = "".join(
        f'<div class="stat"><div class="k">{_e(k)}</div><div class="v">{v}</div>'
        f'<div class="small muted">{note}</div></div>' for k, v, note in stats)
    # the message for people; the StopReason value beside it (a run stored before 0.2 has only the message)
    stop = res.get("stop_message") or res.get("stop_reason")
    reason = StopReason.parse(str(res.get("stop_reason") or stop or ""))
    code = f' <span class="muted small">({_e(reason.value)})</span>' if reason and reason.value != stop else ""
    stop_html = (f'<div class="stat"><div class="k">stopped because</div><div class="v smallv">{_e(stop)}{code}</div>'
                 f'</div>' if stop else "")
    notes = constant_notes(res.get("candidates") or [], view.best_index)
    stop_html += (f'<div class="stat"><div class="k">not counted as gains</div><div class="v smallv">'
                  f'{"<br>".join(_e(n) for n in notes)}</div></div>' if notes else "")
    route = view.route
    route_html = (f'<div class="stat"><div class="k">route</div><div class="v smallv">{_e(route)}</div></div>'
                  if route else "")
    config = run.get("config")
    config_html = ""
    if config:
        config_html = (f'<details class="config"><summary>run configuration</summary>'
                       f'<pre>{_e(json.dumps(_clean(config), indent=2, ensure_ascii=False))}</pre></details>')
    nav = "".join(f'<a href="#{a}">{t}</a>' for a, t in (
        ("best", "best candidate"), ("lineage", "lineage"), ("progress", "score over rollouts"),
        ("proposals", "proposals"), ("transcripts", "reflection transcripts"), ("front", "Pareto front"),
        ("samples", "sample outputs"), ("ledger", "costs")))
    return (
        f'<header class="card"><div class="title-row"><h1>{_e(run.get("name") or "gepetto run")}</h1>'
        f'<span class="badge status-{scls}" id="run-status">{_e(status)}</span></div>'
        f'<div class="meta">{meta_html}</div>'
        f'<div class="stats">{stat_html}{stop_html}{route_html}</div>{config_html}<nav class="toc">{nav}</nav></header>'
    )


def _test_stat(view: _View) -> list[tuple[str, str, str]]:
    """The held-out test score (`gepetto evaluate`), seed and best, when the run was evaluated."""
    test = view.evaluations.get("test")
    if not isinstance(test, Mapping):
        return []
    cands = {c.get("label"): c for c in test.get("candidates") or [] if isinstance(c, Mapping)}
    seed = next((c for c in test.get("candidates") or [] if isinstance(c, Mapping) and c.get("index") == 0), None)
    best = cands.get("best")
    if best is None and seed is None:
        return []
    if best is not None and seed is not None and best is not seed:
        d = (_num(best.get("mean")) or 0.0) - (_num(seed.get("mean")) or 0.0)
        value = (f'{_score(seed.get("mean"))} \u2192 {_score(best.get("mean"))} '
                 f'<span class="{"delta-up" if d >= 0 else "delta-down"}">({d:+.3f})</span>')
    else:
        value = _score((best or seed or {}).get("mean"))
    which = f'candidate #{_e(best.get("index"))}, ' if best is not None else ""
    note = f'{which}{_int(test.get("examples"))} held-out examples'
    if _num(test.get("overlap")):
        note += f'; <b>{_int(test.get("overlap"))} also used to optimise</b>'
    return [("test score", value, note)]


def _best_section(view: _View) -> str:
    texts = view.result.get("best_candidate") or {}
    if not texts and view.best_index is not None:
        texts = view.by_idx[view.best_index].get("texts") or {}
    if not texts:
        return '<section class="card" id="best"><h2>Best candidate</h2><div class="empty">none yet</div></section>'
    boxes = "".join(
        f'<div><div class="comp-label">{_e(k)}</div><pre class="textbox best-text">{_e(v)}</pre></div>'
        for k, v in texts.items())
    which = f"candidate #{view.best_index}, " if view.best_index is not None else ""
    score = _score(view.result.get("best_score"))
    return (f'<section class="card" id="best"><div class="title-row" style="margin-bottom:8px">'
            f'<h2 style="margin:0">Best candidate</h2><span class="muted small">{which}validation score {score}</span>'
            f'<button type="button" id="copy-best" style="margin-left:auto">copy as JSON</button></div>'
            f'<div class="best-grid">{boxes}</div></section>')


_UNIT, _ROW, _R, _PAD = 42, 78, 13, 34


def _tree_svg(view: _View) -> str:
    if not view.cands:
        return '<div class="empty" style="padding:20px">no candidates yet</div>'
    pos = _layout(view)
    max_x = max(x for x, _ in pos.values())
    max_d = max(d for _, d in pos.values())
    w = int(2 * _PAD + max_x * _UNIT + 10)
    h = int(2 * _PAD + max_d * _ROW + 18)

    def xy(i: int) -> tuple[float, float]:
        x, d = pos[i]
        return _PAD + 5 + x * _UNIT, _PAD + d * _ROW

    labels = len(view.cands) <= 150
    edges, tags, nodes = [], [], []
    for c in view.cands:
        i = c["index"]
        cx, cy = xy(i)
        for p in c["parents"]:
            px, py = xy(p)
            top = py + _R + 21  # below the parent's score label
            my = (top + cy) / 2
            kind = "merge" if c.get("origin") == "merge" else "reflection"
            edges.append(f'<path class="edge {kind}" data-from="{p}" data-to="{i}" '
                         f'd="M{px:.1f},{top:.1f} C{px:.1f},{my:.1f} {cx:.1f},{my:.1f} {cx:.1f},{cy - _R:.1f}"/>')
        if labels and c.get("component"):
            comp = str(c["component"])
            short = comp if len(comp) <= 9 else comp[:8] + "\u2026"
            tags.append(f'<text class="elabel" x="{cx:.1f}" y="{cy - _R - 9:.1f}">{_e(short)}</text>')
        cls = ["node", _e(c.get("origin") or "")]
        if i in view.front_set:
            cls.append("front")
        if i == view.best_index:
            cls.append("best")
        parents = " + ".join(f"#{p}" for p in c["parents"]) or "none"
        what = f'{c.get("origin") or "?"}' + (f' of {c["component"]}' if c.get("component") else "")
        tip = (f'#{i} {what} | score {_score(c["mean"])} | parents {parents} | iteration {c.get("iteration")}'
               + (" | Pareto front" if i in view.front_set else "") + (" | BEST" if i == view.best_index else ""))
        ring = f'<circle class="ring-best" r="{_R + 4.5}"/>' if i == view.best_index else ""
        nodes.append(
            f'<g class="{" ".join(cls)}" data-select="{i}" tabindex="0" role="button" '
            f'transform="translate({cx:.1f},{cy:.1f})"><title>{_e(tip)}</title>{ring}'
            f'<circle class="ring-sel" r="{_R + 7}"/>'
            f'<circle class="body" r="{_R}" fill="{_color(c["mean"], 78)}"/>'
            f'<text class="nidx">{i}</text><text class="nscore" y="{_R + 17}">{_cell(c["mean"])}</text></g>')
    return (f'<svg class="tree" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
            f'data-w="{w}" data-h="{h}" role="img" aria-label="candidate lineage tree">'
            f'<g class="edges">{"".join(edges)}{"".join(tags)}</g><g class="nodes">{"".join(nodes)}</g></svg>')


def _lineage_section(view: _View) -> str:
    legend = (
        '<span class="legend">'
        '<span><svg width="16" height="16"><circle cx="8" cy="8" r="6" fill="hsl(130,52%,78%)" stroke="#7c8595"/>'
        '</svg> fill = validation score (red 0 \u2192 green 1)</span>'
        '<span><svg width="16" height="16"><circle cx="8" cy="8" r="6" fill="#fff" stroke="#1f2430" '
        'stroke-width="2.4"/></svg> Pareto front</span>'
        '<span><svg width="18" height="18"><circle cx="9" cy="9" r="7.5" fill="none" stroke="#d99a00" '
        'stroke-width="3"/>'
        '</svg> best</span>'
        '<span><svg width="26" height="10"><line x1="1" y1="5" x2="25" y2="5" stroke="#9aa3b2" stroke-width="1.6"/>'
        '</svg> reflection (label: component)</span>'
        '<span><svg width="26" height="10"><line x1="1" y1="5" x2="25" y2="5" stroke="#8b5cf6" stroke-width="1.6" '
        'stroke-dasharray="5 4"/></svg> merge (two parents)</span></span>')
    tools = ('<div class="tree-tools"><button type="button" id="zoom-out" title="zoom out">\u2212</button>'
             '<button type="button" id="zoom-in" title="zoom in">+</button>'
             '<button type="button" id="zoom-fit">fit</button><button type="button" id="zoom-1">1:1</button>'
             f'{legend}</div>')
    return (
        '<section class="card" id="lineage"><h2>Lineage</h2><div class="sub">Every candidate in the pool, '
        'by generation. Click a node to see its texts and what changed against its parent.</div>'
        f'<div class="lineage"><div>{tools}<div class="tree-box" id="tree-box">{_tree_svg(view)}</div></div>'
        '<aside class="panel" id="panel" aria-live="polite"><div class="empty">Select a candidate in the tree.</div>'
        '</aside></div></section>')


def _ticks(hi: float, n: int = 5) -> list[float]:
    if hi <= 0:
        return [0.0]
    raw = hi / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    out, t = [], 0.0
    while t <= hi + 1e-9:
        out.append(t)
        t += step
    return out


def _chart_svg(view: _View) -> str:
    res = view.result
    pairs = [(_num(p[0]), _num(p[1])) for p in (res.get("history") or []) if isinstance(p, Sequence) and len(p) >= 2]
    hist = sorted((x, y) for x, y in pairs if x is not None and y is not None)
    placed = [(_num(c.get("rollouts_at_creation")), c["mean"], c) for c in view.cands]
    points = [(x, y, c) for x, y, c in placed if x is not None and y is not None]
    if not hist and not points:
        return '<div class="empty">no scores yet</div>'
    used, budget = _num(res.get("rollouts_used")) or 0.0, _num(res.get("budget"))
    xmax = max([used, budget or 0.0, 1.0] + [x for x, _ in hist] + [x for x, _, _ in points])
    ys = [y for _, y in hist] + [y for _, y, _ in points]
    ylo, yhi = min([0.0, *ys]), max([1.0, *ys])
    w, h, ml, mr, mt, mb = 700, 290, 48, 18, 14, 40
    pw, ph = w - ml - mr, h - mt - mb

    def sx(x: float) -> float:
        return ml + pw * x / xmax

    def sy(y: float) -> float:
        return mt + ph * (1 - (y - ylo) / (yhi - ylo or 1))

    parts = []
    for t in _ticks(yhi - ylo, 4):
        y = ylo + t
        parts.append(f'<line class="grid" x1="{ml}" x2="{ml + pw}" y1="{sy(y):.1f}" y2="{sy(y):.1f}"/>'
                     f'<text class="tick" x="{ml - 6}" y="{sy(y) + 3.5:.1f}" text-anchor="end">{y:.2f}</text>')
    for t in _ticks(xmax, 6):
        parts.append(f'<line class="axis" x1="{sx(t):.1f}" x2="{sx(t):.1f}" y1="{mt + ph}" y2="{mt + ph + 4}"/>'
                     f'<text class="tick" x="{sx(t):.1f}" y="{mt + ph + 16}" text-anchor="middle">{t:g}</text>')
    parts.append(f'<line class="axis" x1="{ml}" x2="{ml + pw}" y1="{mt + ph}" y2="{mt + ph}"/>'
                 f'<line class="axis" x1="{ml}" x2="{ml}" y1="{mt}" y2="{mt + ph}"/>'
                 f'<text class="alabel" x="{ml + pw / 2:.1f}" y="{h - 6}" text-anchor="middle">rollouts used</text>'
                 f'<text class="alabel" transform="translate(13,{mt + ph / 2:.1f}) rotate(-90)" '
                 f'text-anchor="middle">validation score</text>')
    if budget:
        parts.append(f'<line class="budget-line" x1="{sx(budget):.1f}" x2="{sx(budget):.1f}" y1="{mt}" '
                     f'y2="{mt + ph}"/><text class="tick" x="{sx(budget) - 4:.1f}" y="{mt + 10}" '
                     f'text-anchor="end">budget</text>')
    seed = _num(res.get("seed_score"))
    if seed is not None:
        parts.append(f'<line class="seed-line" x1="{ml}" x2="{ml + pw}" y1="{sy(seed):.1f}" y2="{sy(seed):.1f}"/>'
                     f'<text class="tick" x="{ml + pw - 2}" y="{sy(seed) - 4:.1f}" text-anchor="end">seed</text>')
    if hist:
        d = f"M{sx(hist[0][0]):.1f},{sy(hist[0][1]):.1f}"
        for x, y in hist[1:]:
            d += f" H{sx(x):.1f} V{sy(y):.1f}"
        if used > hist[-1][0]:
            d += f" H{sx(used):.1f}"
        parts.append(f'<path class="best-line" d="{d}"/>')
    for x, y, c in sorted(points, key=lambda p: p[2]["index"] == view.best_index):
        i = c["index"]
        cls = f'pt {_e(c.get("origin") or "")}' + (" best" if i == view.best_index else "")
        r = 5.5 if i == view.best_index else 4
        parts.append(f'<circle class="{cls}" data-select="{i}" cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="{r}">'
                     f'<title>#{i} {_e(c.get("origin"))}: score {_score(y)} at {x:g} rollouts</title></circle>')
    return (f'<svg class="chart" viewBox="0 0 {w} {h}" width="100%" '
            f'role="img" aria-label="best validation score over rollouts used">{"".join(parts)}</svg>')


def _progress_section(view: _View) -> str:
    origins = {c.get("origin") for c in view.cands}
    demo = ("teal demonstration, " if "demo" in origins else "") + ("pink trim, " if "trim" in origins else "")
    return ('<section class="card" id="progress"><h2>Best validation score over rollouts</h2>'
            '<div class="sub">Line: best mean validation score so far. Dots: each candidate when it was added '
            f'(grey seed, blue reflection, {demo}purple merge, gold best); click one to inspect it.</div>'
            f'{_chart_svg(view)}</section>')


def _proposals_section(view: _View) -> str:
    props = {str(k): _num(v) or 0 for k, v in (view.result.get("proposals") or {}).items()}
    if not props:
        body = '<div class="empty">no proposal outcomes recorded</div>'
    else:
        top = max(props.values()) or 1
        rows = []
        for k, v in sorted(props.items(), key=lambda kv: (-kv[1], kv[0])):
            outcome = Outcome.parse(k)
            kind = {"accepted": "acc", "merge": "merge", "error": "err"}.get(outcome.group if outcome else "", "")
            rows.append(f'<tr><td>{_e(k)}</td><td>{_int(v)}</td><td style="width:45%">'
                        f'<span class="pbar {kind}" style="width:{100 * v / top:.1f}%"></span></td></tr>')
        total = sum(props.values())
        acc, lost = props.get(Outcome.ACCEPTED, 0), props.get(Outcome.NOT_BETTER, 0)
        rate = (f'<p class="muted small">{_int(acc)} of {_int(acc + lost)} proposals tested on a minibatch were '
                f'accepted.</p>' if acc + lost else "") + _racing_note(view)
        body = (f'<div class="table-wrap"><table class="data"><thead><tr><th>outcome</th><th>count</th><th></th>'
                f'</tr></thead>'
                f'<tbody>{"".join(rows)}</tbody><tfoot><tr class="total"><td>total</td><td>{_int(total)}</td>'
                f'<td></td></tr></tfoot></table></div>{rate}')
    return f'<section class="card" id="proposals"><h2>Proposals</h2><div class="sub">What became of each ' \
           f'reflection and merge attempt.</div>{body}</section>'


def _racing_note(view: _View) -> str:
    """With racing (EngineConfig.racing): how many validations it cut short and the rollouts that saved."""
    raced = [r for r in view.result.get("raced_out") or [] if isinstance(r, Mapping)]
    n = len(view.val_ids)
    if not raced or not n:
        return ""
    paid = sum(len(r.get("val_scores") or {}) for r in raced)
    return (f'<p class="muted small">Racing cut {_int(len(raced))} validations short (the child could neither enter '
            f'the front nor become the best; counted as raced out, not accepted): {_int(paid)} of '
            f'{_int(len(raced) * n)} validation rollouts run, {_int(len(raced) * n - paid)} saved.</p>')


_MAX_TRANSCRIPTS = 400  # proposals shown in full; a longer run lists the rest by count


def _messages_html(messages: Sequence[Mapping[str, Any]]) -> str:
    return "".join(f'<div class="msg"><div class="role">{_e(m.get("role"))}</div><pre>{_e(m.get("content"))}</pre>'
                   f'</div>' for m in messages if isinstance(m, Mapping))


def _attempt_html(a: Mapping[str, Any]) -> str:
    messages = [m for m in a.get("messages") or [] if isinstance(m, Mapping)]
    start = int(_num(a.get("new_from")) or 0) if a.get("continues") else 0
    shown = messages[start:]
    chars = sum(len(str(m.get("content") or "")) for m in shown)
    if a.get("continues"):
        label = "told, after its answer above"
        prompt = _messages_html(shown[1:] if shown and shown[0].get("role") == "assistant" else shown)
    else:
        roles = " + ".join(dict.fromkeys(str(m.get("role")) for m in shown))
        label = f"prompt shown ({roles}, {chars:,} characters)"
        prompt = _messages_html(shown)
    if not messages:
        prompt_html = '<div class="muted small">prompt not recorded (a run stored before prompts were kept)</div>'
    elif a.get("continues"):
        prompt_html = f'<div class="told"><div class="lbl">{_e(label)}</div>{prompt}</div>'
    else:
        prompt_html = f'<details class="prompt"><summary>{_e(label)}</summary>{prompt}</details>'
    if a.get("error"):
        verdict, cls = f'reflection error: {a.get("error")}', "bad"
    elif a.get("rejected"):
        verdict, cls = str(a.get("rejected")), "bad"
    else:
        verdict, cls = "passed vetting", "good"
    cut = " (cut off: the answer reached its token limit)" if a.get("finish_reason") == "length" else ""
    answer = a.get("answer")
    answer_html = (f'<div class="lbl">answer{_e(cut)}</div><pre class="box">{_e(answer)}</pre>' if answer not in
                   (None, "") else '<div class="lbl">answer</div><div class="empty">(empty)</div>')
    attempt = _num(a.get("attempt"))
    head = f"attempt {int(attempt) + 1}" if attempt is not None else "attempt"
    return (f'<div class="attempt"><div class="att-head"><b>{_e(head)}</b> <span class="verdict {cls}">'
            f'{_e(verdict)}</span></div>{prompt_html}{answer_html}</div>')


_VERDICT_CLASS = {"accepted": "v-accepted", "not better on minibatch": "v-notbetter", "refused": "v-refused",
                  "reflection error": "v-refused", "raced out in validation": "v-notbetter"}


def _transcript_html(n: int, t: Mapping[str, Any]) -> str:
    verdict = str(t.get("verdict") or "")
    cls = _VERDICT_CLASS.get(verdict, "v-other")
    test = t.get("test") if isinstance(t.get("test"), Mapping) else None
    parent = f'parent #{_e(t.get("parent"))}' if t.get("parent") is not None else "parent ?"
    comp = f', component <span class="mono">{_e(t.get("component"))}</span>' if t.get("component") else ""
    became = ""
    if t.get("candidate") is not None:
        became = f' \u2192 candidate #{_e(t.get("candidate"))} (validation {_score(t.get("candidate_mean"))})'
    attempts = [a for a in t.get("attempts") or [] if isinstance(a, Mapping)]
    bits = [f"{len(attempts)} reflection call{'s' if len(attempts) != 1 else ''}"] if attempts else []
    if test is not None:
        bits.append(f'minibatch {_score(test.get("minibatch_before"), 2)} \u2192 '
                    f'{_score(test.get("minibatch_after"), 2)}')
        if test.get("origin") == "demo":
            bits.append("a demonstration added, no reflection")
        elif test.get("origin") == "trim":
            bits.append("a sentence dropped, no reflection, tested on validation examples")
    body = "".join(_attempt_html(a) for a in attempts)
    if test is not None:
        rule = (f'<div class="lbl">rule</div><pre class="box">{_e(test.get("rule"))}</pre>' if test.get("rule")
                else "")
        pattern = f' for the pattern <i>{_e(test.get("pattern"))}</i>' if test.get("pattern") else ""
        outcome = "passed" if test.get("accepted") else "did not pass"
        body += (f'<div class="attempt"><div class="att-head"><b>test</b> <span class="verdict '
                 f'{"good" if test.get("accepted") else "bad"}">{outcome}</span> <span class="muted small">sum of '
                 f'the minibatch scores, parent {_score(test.get("minibatch_before"), 2)} \u2192 child '
                 f'{_score(test.get("minibatch_after"), 2)}{pattern}</span></div>{rule}'
                 f'<details class="prompt"><summary>the child\'s text</summary><pre class="box">{_e(test.get("text"))}'
                 f'</pre></details></div>')
    return (f'<details class="tx {cls}" id="tx-{n}"><summary><span class="vbadge {cls}">{_e(verdict)}</span> '
            f'<a href="#proposal={n}" title="link to this proposal"><b>#{n}</b></a> {parent}{comp}{became} '
            f'<span class="muted small">{_e("; ".join(bits))}</span></summary>'
            f'<div class="tx-body">{body}</div></details>')


def _transcripts_section(view: _View) -> str:
    head = ('<section class="card" id="transcripts"><h2>Reflection transcripts</h2><div class="sub">Each proposal: '
            'what the reflection LM was shown, what it answered, and what became of it (refused by vetting before '
            'any rollout, tested on the parent\'s minibatch, validated as a candidate). Open one to read it.</div>')
    if view.transcripts is None:
        return head + '<div class="empty">not in this snapshot</div></section>'
    items = [t for t in view.transcripts if isinstance(t, Mapping)]
    if not items:
        return head + ('<div class="empty">no proposal recorded (a run stored before transcripts were kept, or '
                       'no proposal made yet)</div></section>')
    counts: dict[str, int] = {}
    for t in items:
        key = _VERDICT_CLASS.get(str(t.get("verdict") or ""), "v-other")
        counts[key] = counts.get(key, 0) + 1
    filters = [("all", "all", len(items)), ("acc", "accepted", counts.get("v-accepted", 0)),
               ("nb", "not better", counts.get("v-notbetter", 0)), ("ref", "refused", counts.get("v-refused", 0))]
    radios = "".join(f'<input type="radio" name="txf" id="txf-{k}"{" checked" if k == "all" else ""}>'
                     for k, _, _ in filters)
    labels = "".join(f'<label for="txf-{k}">{_e(name)} <span class="muted">{n}</span></label>'
                     for k, name, n in filters)
    shown = items[:_MAX_TRANSCRIPTS]
    more = (f'<p class="muted small">{len(items) - len(shown)} later proposals are not shown.</p>'
            if len(items) > len(shown) else "")
    rows = "".join(_transcript_html(i + 1, t) for i, t in enumerate(shown))
    return (f'{head}<div class="tx-filter">{radios}<div class="tx-labels">{labels}</div>'
            f'<div class="tx-list">{rows}</div></div>{more}</section>')


def _front_section(view: _View) -> str:
    front = [i for i in view.front if i in view.by_idx]
    if not front or not view.val_ids:
        return ('<section class="card" id="front"><h2>Pareto front per validation example</h2>'
                '<div class="empty">no front yet</div></section>')
    cols = sorted(front, key=lambda i: (-(view.by_idx[i]["mean"] or 0.0), i))
    seed_idx = min(view.by_idx)
    ref = [seed_idx] if seed_idx not in front else []

    def score(i: int, eid: str) -> float | None:
        return _num((view.by_idx[i].get("val_scores") or {}).get(eid))

    head = ('<th class="exh">example</th>' + "".join(
        f'<th class="ref" data-select="{i}" title="seed, for reference">#{i} seed</th>' for i in ref) + "".join(
        f'<th data-select="{i}" title="candidate #{i}, mean {_score(view.by_idx[i]["mean"])}">#{i}'
        f'{_STAR if i == view.best_index else ""}</th>' for i in cols))
    rows, wins, oracle = [], dict.fromkeys(cols, 0), 0.0
    for eid in view.val_ids:
        vals = {i: score(i, eid) for i in cols}
        known = [v for v in vals.values() if v is not None]
        top = max(known) if known else None
        oracle += top or 0.0
        cells = "".join(f'<td class="c ref" style="background:{_color(score(i, eid), 92)}">{_cell(score(i, eid))}</td>'
                        for i in ref)
        for i in cols:
            v = vals[i]
            is_top = v is not None and top is not None and v >= top - 1e-12
            if is_top:
                wins[i] += 1
            cells += (f'<td class="c{" top" if is_top else ""}" style="background:{_color(v)}" '
                      f'title="#{i} on {_e(eid)}: {_score(v)}">{_cell(v)}</td>')
        rows.append(f'<tr><td class="ex" title="{_e(eid)}">{_e(eid)}</td>{cells}</tr>')
    foot = ('<td class="ex">mean / best on</td>' + "".join(
        f'<td class="c ref">{_score(view.by_idx[i]["mean"], 2)}</td>' for i in ref) + "".join(
        f'<td class="c" title="best (or tied) on {wins[i]} examples">{_score(view.by_idx[i]["mean"], 2)}'
        f'<br><span class="muted small">{wins[i]}</span></td>' for i in cols))
    n = len(view.val_ids)
    best_mean = view.by_idx[view.best_index]["mean"] if view.best_index is not None else None
    note = (f"{len(cols)} candidates on the front over {n} validation examples. Taking the best front candidate "
            f"on each example would score {oracle / n:.3f}; the best single candidate scores {_score(best_mean)}. "
            "Outlined cells: the best score on that example (ties included). Click a column to inspect it.")
    return (f'<section class="card" id="front"><h2>Pareto front per validation example</h2><div class="sub">'
            f'{_e(note)}</div><div class="heat-wrap"><table class="heat"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody><tfoot><tr>{foot}</tr></tfoot></table></div></section>')


def _ledger_section(view: _View) -> str:
    ledger = {k: v for k, v in (view.result.get("ledger") or {}).items() if isinstance(v, Mapping)}
    if not ledger:
        return '<section class="card" id="ledger"><h2>Costs</h2><div class="empty">no LM calls recorded</div></section>'
    keys = ("calls", "input_tokens", "cached_input_tokens", "output_tokens", "seconds", "cost", "cached_calls",
            "errors")
    total = {k: sum(_num(u.get(k)) or 0.0 for u in ledger.values()) for k in keys}
    any_est = any(u.get("estimated_tokens") for u in ledger.values())

    def row(name: str, u: Mapping[str, Any], est: bool, cls: str = "") -> str:
        mark = "\u2248" if est else ""
        cost = _num(u.get("cost"))
        return (f'<tr class="{cls}"><td>{_e(name)}</td><td>{_int(u.get("calls"))}</td>'
                f'<td>{mark}{_int(u.get("input_tokens"))}</td><td>{_int(u.get("cached_input_tokens"))}</td>'
                f'<td>{mark}{_int(u.get("output_tokens"))}</td>'
                f'<td>{_num(u.get("seconds")) or 0.0:.1f}</td>'
                f'<td>{"$" + format(cost, ".4f") if cost else _DASH}</td>'
                f'<td>{_int(u.get("cached_calls"))}</td><td>{_int(u.get("errors"))}</td>'
                f'<td>{"yes" if est else "no"}</td></tr>')

    rows = "".join(row(k, u, bool(u.get("estimated_tokens"))) for k, u in ledger.items())
    rows += row("total", total, any_est, "total")
    notes = ["\u2013 in cost: no price known for the model (local models cost nothing)."]
    if any_est:
        notes.insert(0, "\u2248: some calls reported no usage, so their tokens were estimated from the text length.")
    return ('<section class="card" id="ledger"><h2>Costs (ledger per role)</h2><div class="sub">LM seconds add up '
            'over concurrent calls, so they can exceed the wall time.</div>'
            '<div class="table-wrap"><table class="data"><thead><tr><th>role</th><th>calls</th><th>tokens in</th>'
            '<th title="of the tokens in, those the backend took from its prompt cache">prompt cache</th>'
            '<th>tokens out</th>'
            '<th>seconds</th><th>cost</th><th>cached</th><th>errors</th><th>estimated</th></tr></thead>'
            f'<tbody>{rows}</tbody></table></div><p class="muted small">{_e(" ".join(notes))}</p></section>')


def _when(ts: Any) -> Any:
    """A Unix time as a UTC date and time; anything else as is."""
    if isinstance(ts, (int, float)) and not isinstance(ts, bool):
        return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts))
    return ts


def _badge(value: Any) -> str:
    return f'<span class="score" style="background:{_color(value, 82)}">{_score(value, 2)}</span>'


def _samples_section(view: _View) -> str:
    if not view.samples:
        return ('<section class="card" id="samples"><h2>Sample outputs: seed vs best</h2>'
                '<div class="empty">no sample outputs in this snapshot</div></section>')
    out = []
    for s in view.samples:
        seed, best = s.get("seed") or {}, s.get("best") or {}
        cols = []
        for label, r, cls in (("seed", seed, "out-seed"), ("best", best, "out-best")):
            fb = r.get("feedback")
            cols.append(
                f'<div><h3>{label} {_badge(r.get("score"))}</h3><div class="lbl">output</div>'
                + (f'<pre class="box {cls}">{_e(r["output"])}</pre>' if r.get("output") not in (None, "")
                   else '<div class="empty">(empty output)</div>')
                + (f'<div class="lbl">feedback</div><pre class="box">{_e(fb)}</pre>' if fb else "") + "</div>")
        out.append(
            f'<div class="sample"><div class="sample-head"><span class="mono"><b>{_e(s.get("example_id"))}</b></span>'
            f'<span>seed {_badge(seed.get("score"))} \u2192 best {_badge(best.get("score"))}</span></div>'
            f'<div class="sample-io"><div><div class="lbl">inputs</div><pre class="box">{_e(s.get("inputs"))}</pre>'
            f'</div><div><div class="lbl">gold</div><pre class="box">{_e(s.get("gold"))}</pre></div></div>'
            f'<div class="sample-io">{"".join(cols)}</div></div>')
    return ('<section class="card" id="samples"><h2>Sample outputs: seed vs best</h2><div class="sub">The same '
            'validation examples run by the seed and by the best candidate (where they differ most), with the '
            f'metric\'s scores and feedback.</div>{"".join(out)}</section>')


# ---- data for the script ------------------------------------------------------------------------


def _script_data(view: _View) -> dict[str, Any]:
    strings: list[str] = []
    string_ids: dict[str, int] = {}

    def sid(text: Any) -> int:
        t = text if isinstance(text, str) else json.dumps(_clean(text), ensure_ascii=False)
        if t not in string_ids:
            string_ids[t] = len(strings)
            strings.append(t)
        return string_ids[t]

    out = []
    for c in view.cands:
        i = c["index"]
        texts = {k: (v if isinstance(v, str) else json.dumps(_clean(v), ensure_ascii=False))
                 for k, v in (c.get("texts") or {}).items()}
        item: dict[str, Any] = {
            "i": i, "id": c.get("id"), "origin": c.get("origin"), "parents": c["parents"],
            "iteration": c.get("iteration"), "component": c.get("component"), "mean": c["mean"],
            "at": _num(c.get("rollouts_at_creation")), "front": i in view.front_set, "best": i == view.best_index,
            "t": {k: sid(v) for k, v in texts.items()},
        }
        if c["parents"]:
            first = view.by_idx[c["parents"][0]]
            ptexts = {k: v if isinstance(v, str) else json.dumps(_clean(v), ensure_ascii=False)
                      for k, v in (first.get("texts") or {}).items()}
            diffs = {}
            for comp, new in texts.items():
                d: dict[str, Any] = {"vs": first["index"]}
                if c.get("origin") == "merge":
                    src = next((p for p in c["parents"]
                                if (view.by_idx[p].get("texts") or {}).get(comp) == new), None)
                    if src is not None:
                        d["from"] = src
                old = ptexts.get(comp)
                if old == new:
                    d["same"] = True
                else:
                    ops = word_diff(old or "", new)
                    d["ops"] = ops
                    d["add"], d["rem"] = _diff_stats(old or "", ops)
                diffs[comp] = d
            item["d"] = diffs
            mine, theirs = c.get("val_scores") or {}, first.get("val_scores") or {}
            better = [k for k in view.val_ids if (_num(mine.get(k)) or 0.0) > (_num(theirs.get(k)) or 0.0) + 1e-12]
            worse = [k for k in view.val_ids if (_num(mine.get(k)) or 0.0) < (_num(theirs.get(k)) or 0.0) - 1e-12]
            item.update(vs=first["index"], nb=len(better), nw=len(worse), better=better[:40], worse=worse[:40])
        out.append(item)
    best = view.result.get("best_candidate") or {}
    return {"candidates": out, "strings": strings, "components": view.components, "best_index": view.best_index,
            "best_candidate": best}


# ---- entry points -------------------------------------------------------------------------------


def render_report(snapshot: Mapping[str, Any]) -> str:
    """The whole report as one HTML document (inline CSS, script, SVG and data; nothing fetched).

    Every string of the snapshot is redacted (gepetto.secrets) and then escaped where it is written.
    """
    view = _View(redact_data(snapshot))
    try:
        from gepetto import __version__ as version
    except ImportError:  # pragma: no cover - the package is always importable here
        version = ""
    name = view.run.get("name") or "run"
    body = "".join([
        '<div id="js-error" hidden></div>',
        _header(view), _best_section(view), _lineage_section(view),
        f'<div class="two">{_progress_section(view)}{_proposals_section(view)}</div>',
        _transcripts_section(view), _front_section(view), _samples_section(view), _ledger_section(view),
        f'<footer>gepetto {_e(version)} report \u00b7 self-contained: no network needed</footer>',
    ])
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>gepetto report: {_e(name)}</title><style>{CSS}</style></head>"
        f"<body><main>{body}</main>"
        f'<script type="application/json" id="gepetto-data">{_embed_json(_script_data(view))}</script>'
        f"<script>{JS}</script></body></html>\n"
    )


def write_report(snapshot: Mapping[str, Any], path: str | Path) -> Path:
    """Render the report and write it to `path` (UTF-8, readable by its owner only); returns the path. The file
    is replaced whole or not at all: a write that fails (a full disk) leaves the previous report as it was."""
    out = Path(path)
    html = render_report(snapshot)
    if out.parent and not out.parent.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
    write_private_text(out, html)
    return out


__all__ = ["render_report", "word_diff", "write_report"]
