"""The report's inline stylesheet and script (no network: the page must work from a file, offline)."""

CSS = r"""
:root {
  --bg: #f5f6f8; --card: #fff; --ink: #1f2430; --muted: #667085; --line: #e3e6eb; --accent: #2563eb;
  --best: #d99a00; --front: #1f2430; --merge: #8b5cf6; --refl: #2563eb; --seed: #6b7280;
  --ins: #d9f5e1; --ins-ink: #0f5b2a; --del: #fde0de; --del-ink: #8a1c12;
  --mono: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", "DejaVu Sans Mono", monospace;
}
* { box-sizing: border-box; }
html { scroll-behavior: smooth; }
body { margin: 0; background: var(--bg); color: var(--ink);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "Noto Sans", sans-serif; }
main { max-width: 1440px; margin: 0 auto; padding: 18px 22px 40px; }
h1 { font-size: 22px; margin: 0; font-weight: 650; word-break: break-word; }
h2 { font-size: 16px; margin: 0 0 10px; font-weight: 650; }
h3 { font-size: 14px; margin: 0 0 6px; font-weight: 600; }
a { color: var(--accent); }
pre, code, .mono { font-family: var(--mono); font-size: 12.5px; }
pre { white-space: pre-wrap; word-break: break-word; margin: 0; }
.muted { color: var(--muted); }
.small { font-size: 12px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 16px 18px;
  margin: 14px 0; }
.card > .sub { margin: -6px 0 12px; color: var(--muted); font-size: 13px; }
nav.toc { display: flex; flex-wrap: wrap; gap: 4px 14px; margin: 8px 0 0; font-size: 13px; }
nav.toc a { text-decoration: none; }
nav.toc a:hover { text-decoration: underline; }
.title-row { display: flex; align-items: center; gap: 12px; flex-wrap: wrap; }
.badge { display: inline-block; padding: 1px 9px; border-radius: 999px; font-size: 12px; font-weight: 600;
  border: 1px solid transparent; }
.status-finished { background: #dcf5e3; color: #116329; border-color: #b5e5c3; }
.status-running { background: #dbe7ff; color: #1c4fd1; border-color: #bcd0fb; }
.status-failed { background: #fde0de; color: #a4190e; border-color: #f7bdb8; }
.status-interrupted { background: #fdf0cf; color: #8a5a00; border-color: #f2d991; }
.status-other { background: #eceef2; color: #444; }
.meta { display: flex; flex-wrap: wrap; gap: 4px 18px; margin-top: 6px; color: var(--muted); font-size: 13px; }
.meta b { color: var(--ink); font-weight: 600; }
.stats { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(170px, 100%), 1fr)); gap: 10px;
  margin-top: 14px; }
.stat { border: 1px solid var(--line); border-radius: 8px; padding: 9px 12px; background: #fbfcfd; }
.stat .k { font-size: 12px; color: var(--muted); }
.stat .v { font-size: 19px; font-weight: 650; margin-top: 2px; word-break: break-word; }
.stat .v.smallv { font-size: 13.5px; font-weight: 500; }
.delta-up { color: #127a36; font-size: 13px; font-weight: 600; }
.delta-down { color: #b42318; font-size: 13px; font-weight: 600; }
.bar { height: 6px; background: #eceef2; border-radius: 3px; overflow: hidden; margin-top: 6px; }
.bar > span { display: block; height: 100%; background: var(--accent); }
details.config summary { cursor: pointer; color: var(--muted); font-size: 13px; margin-top: 10px; }
details.config pre { background: #f7f8fa; border: 1px solid var(--line); border-radius: 6px; padding: 10px;
  max-height: 320px; overflow: auto; margin-top: 6px; }
.best-grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(320px, 100%), 1fr)); gap: 12px; }
.textbox { background: #f7f8fa; border: 1px solid var(--line); border-radius: 6px; padding: 9px 11px;
  max-height: 340px; overflow: auto; }
.comp-label { font-family: var(--mono); font-size: 12px; font-weight: 600; color: #344054; }
button { font: inherit; font-size: 12px; border: 1px solid #cfd4dc; background: #fff; border-radius: 6px;
  padding: 2px 9px; cursor: pointer; color: var(--ink); }
button:hover { background: #f0f2f5; }
button.on { background: #1f2430; color: #fff; border-color: #1f2430; }
.lineage { display: grid; grid-template-columns: minmax(0, 1.45fr) minmax(330px, 1fr); gap: 14px; }
@media (max-width: 980px) { .lineage { grid-template-columns: minmax(0, 1fr); } }
.tree-tools { display: flex; align-items: center; gap: 6px; flex-wrap: wrap; margin-bottom: 8px; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 14px; font-size: 12px; color: var(--muted); align-items: center; }
.legend svg { vertical-align: middle; }
.tree-box { border: 1px solid var(--line); border-radius: 8px; overflow: auto; height: 600px; background: #fcfcfd; }
.tree-box svg { display: block; margin: 0 auto; }
.panel { border: 1px solid var(--line); border-radius: 8px; height: 640px; overflow: auto; padding: 12px 14px;
  background: #fff; }
.panel h3 { font-size: 15px; }
.panel .kv { display: grid; grid-template-columns: auto 1fr; gap: 2px 10px; font-size: 13px; margin: 6px 0 10px; }
.panel .kv dt { color: var(--muted); }
.panel .kv dd { margin: 0; }
.comp { border-top: 1px solid var(--line); padding: 10px 0 6px; }
.comp-head { display: flex; align-items: center; gap: 8px; flex-wrap: wrap; margin-bottom: 6px; }
.tag { font-size: 11.5px; padding: 0 7px; border-radius: 999px; background: #eceef2; color: #475467; }
.tag.changed { background: #e6efff; color: #1c4fd1; }
.tag.merged { background: #efe7ff; color: #6d3fd8; }
.toggle { margin-left: auto; display: inline-flex; gap: 3px; }
.diff .d-ins { background: var(--ins); color: var(--ins-ink); border-radius: 2px; text-decoration: none; }
.diff .d-del { background: var(--del); color: var(--del-ink); border-radius: 2px; text-decoration: line-through; }
.diff .d-fold { color: var(--muted); background: #eef0f3; border-radius: 3px; cursor: pointer; padding: 0 4px;
  font-style: italic; }
.idlist { font-family: var(--mono); font-size: 11.5px; color: #475467; word-break: break-word; }
svg text { font-family: system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; }
.tree .edge { fill: none; stroke: #9aa3b2; stroke-width: 1.4; }
.tree .edge.merge { stroke: var(--merge); stroke-dasharray: 5 4; stroke-width: 1.5; }
.tree .edge.hl { stroke: var(--accent); stroke-width: 2.6; }
.tree .edge.merge.hl { stroke: var(--merge); stroke-width: 2.6; }
.tree .elabel { font-size: 9.5px; fill: #6b7280; text-anchor: middle; paint-order: stroke; stroke: #fcfcfd;
  stroke-width: 3px; stroke-linejoin: round; }
.tree .node { cursor: pointer; }
.tree .node circle.body { stroke: #7c8595; stroke-width: 1.2; }
.tree .node.front circle.body { stroke: var(--front); stroke-width: 2.4; }
.tree .node .ring-best { fill: none; stroke: var(--best); stroke-width: 3; }
.tree .node .ring-sel { fill: rgba(37, 99, 235, .16); stroke: var(--accent); stroke-width: 2; opacity: 0; }
.tree .node.selected .ring-sel { opacity: 1; }
.tree .node.anc circle.body { stroke: var(--accent); stroke-width: 2.2; }
.tree .node:hover circle.body, .tree .node:focus circle.body { stroke: var(--accent); stroke-width: 2.6; }
.tree .node:focus { outline: none; }
.tree .nidx { font-size: 10px; font-weight: 700; fill: #1f2430; text-anchor: middle; dominant-baseline: central;
  pointer-events: none; }
.tree .nscore { font-size: 10px; fill: #475467; text-anchor: middle; pointer-events: none; }
.tree .node.best .nscore { fill: #8a5a00; font-weight: 700; }
.two { display: grid; grid-template-columns: minmax(0, 1.35fr) minmax(0, 1fr); gap: 14px; }
@media (max-width: 980px) { .two { grid-template-columns: minmax(0, 1fr); } .two > .card { margin: 7px 0; } }
.two > .card { margin: 0; }
.chart .axis { stroke: #98a2b3; stroke-width: 1; }
.chart .grid { stroke: #eceef2; stroke-width: 1; }
.chart .tick { font-size: 10.5px; fill: #667085; }
.chart .alabel { font-size: 11px; fill: #475467; }
.chart .best-line { fill: none; stroke: var(--accent); stroke-width: 2.4; }
.chart .seed-line { stroke: #98a2b3; stroke-dasharray: 4 4; }
.chart .budget-line { stroke: #d0d5dd; stroke-dasharray: 2 4; }
.chart .pt { cursor: pointer; stroke: #fff; stroke-width: 1; }
.chart .pt.seed { fill: var(--seed); }
.chart .pt.reflection { fill: var(--refl); opacity: .55; }
.chart .pt.merge { fill: var(--merge); opacity: .7; }
.chart .pt.best { fill: var(--best); opacity: 1; stroke: #1f2430; stroke-width: 1.4; }
.chart .pt.selected { stroke: #1f2430; stroke-width: 2.4; opacity: 1; }
table { border-collapse: collapse; }
.table-wrap { overflow-x: auto; }
table.data { width: 100%; font-size: 13px; }
table.data th, table.data td { padding: 5px 9px; border-bottom: 1px solid var(--line); text-align: right;
  white-space: nowrap; }
table.data th:first-child, table.data td:first-child { text-align: left; }
table.data thead th { color: var(--muted); font-weight: 600; font-size: 12px; }
table.data tr.total td { font-weight: 650; border-top: 2px solid var(--line); }
.pbar { display: inline-block; height: 9px; border-radius: 2px; background: #98a2b3; vertical-align: middle; }
.pbar.acc { background: #2f9e5a; }
.pbar.err { background: #d9453a; }
.pbar.merge { background: var(--merge); }
.heat-wrap { max-height: 520px; overflow: auto; border: 1px solid var(--line); border-radius: 8px; }
table.heat { font-size: 12px; }
table.heat th, table.heat td { padding: 3px 8px; text-align: center; border-bottom: 1px solid #f0f1f4; }
table.heat thead th { position: sticky; top: 0; background: #fff; z-index: 1; border-bottom: 1px solid var(--line);
  font-weight: 600; cursor: pointer; }
table.heat thead th.exh { cursor: default; text-align: left; }
table.heat tfoot td { position: sticky; bottom: 0; background: #fff; border-top: 1px solid var(--line);
  font-weight: 600; }
table.heat td.ex { text-align: left; font-family: var(--mono); font-size: 11.5px; color: #344054; max-width: 260px;
  overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
table.heat td.c { min-width: 52px; font-variant-numeric: tabular-nums; }
table.heat td.top { font-weight: 700; box-shadow: inset 0 0 0 2px #1f2430; }
table.heat td.ref, table.heat th.ref { opacity: .75; border-right: 2px solid var(--line); }
table.heat th.selected { color: var(--accent); text-decoration: underline; }
.sample { border: 1px solid var(--line); border-radius: 8px; margin: 12px 0; overflow: hidden; }
.sample-head { display: flex; gap: 12px; align-items: center; flex-wrap: wrap; padding: 8px 12px;
  background: #f7f8fa; border-bottom: 1px solid var(--line); }
.sample-io { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 0; }
.sample-io > div { padding: 10px 12px; min-width: 0; }
.sample-io > div + div { border-left: 1px solid var(--line); }
.sample .lbl { font-size: 11.5px; text-transform: uppercase; letter-spacing: .04em; color: var(--muted);
  margin: 6px 0 3px; font-weight: 600; }
.sample .box { background: #f7f8fa; border: 1px solid var(--line); border-radius: 6px; padding: 7px 9px;
  max-height: 260px; overflow: auto; }
.sample .box.out-best { background: #f3fbf6; border-color: #cdebd8; }
.score { display: inline-block; min-width: 44px; text-align: center; border-radius: 5px; padding: 0 6px;
  font-weight: 650; font-variant-numeric: tabular-nums; border: 1px solid rgba(0,0,0,.08); }
.empty { color: var(--muted); font-style: italic; padding: 14px 0; }
#js-error { background: #fde0de; color: #8a1c12; border: 1px solid #f7bdb8; border-radius: 8px; padding: 8px 12px;
  margin: 10px 0; }
footer { color: var(--muted); font-size: 12px; margin-top: 20px; text-align: center; }
@media (max-width: 760px) { .sample-io { grid-template-columns: minmax(0, 1fr); }
  .sample-io > div + div { border-left: 0; border-top: 1px solid var(--line); } }
"""

# The script reads the embedded JSON, draws the candidate panel with textContent only (never innerHTML: the
# texts are user data), wires clicks on tree nodes, chart points and front columns, and supports
# `#select=N` in the URL so a report can link to (and a headless browser can open) one candidate.
JS = r"""
(function () {
  "use strict";
  function fail(msg) {
    try {
      document.body.dataset.jsError = String(msg);
      var box = document.getElementById("js-error");
      if (box) { box.hidden = false; box.textContent = "Report script error: " + msg; }
    } catch (e) { /* nothing more we can do */ }
  }
  window.addEventListener("error", function (ev) { fail(ev.message || "error"); });

  var DATA, byIdx = {}, selected = null, zoom = 1;

  function el(tag, attrs, kids) {
    var n = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        if (k === "text") { n.textContent = attrs[k]; }
        else if (k === "cls") { n.className = attrs[k]; }
        else { n.setAttribute(k, attrs[k]); }
      });
    }
    (kids || []).forEach(function (c) {
      if (c === null || c === undefined) { return; }
      n.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return n;
  }
  function fmt(v) { return (v === null || v === undefined) ? "\u2013" : Number(v).toFixed(3); }
  function textOf(c, comp) { var i = c.t[comp]; return i === undefined ? null : DATA.strings[i]; }

  function diffNode(oldText, ops) {
    var pre = el("pre", { cls: "diff textbox" }), pos = 0;
    ops.forEach(function (op) {
      if (op[0] === "+") { pre.appendChild(el("ins", { cls: "d-ins", text: op[1] })); return; }
      var seg = oldText.substr(pos, op[1]);
      pos += op[1];
      if (op[0] === "-") { pre.appendChild(el("del", { cls: "d-del", text: seg })); return; }
      if (seg.length > 700) {
        var head = seg.slice(0, 250), tail = seg.slice(seg.length - 250);
        var fold = el("span", { cls: "d-fold", title: "click to show", text:
          " \u2026 " + (seg.length - 500) + " unchanged characters \u2026 " });
        fold.addEventListener("click", function () {
          fold.replaceWith(document.createTextNode(seg.slice(250, seg.length - 250)));
        });
        pre.appendChild(document.createTextNode(head));
        pre.appendChild(fold);
        pre.appendChild(document.createTextNode(tail));
      } else {
        pre.appendChild(document.createTextNode(seg));
      }
    });
    return pre;
  }

  function componentBlock(c, comp) {
    var text = textOf(c, comp), d = (c.d || {})[comp], head = el("div", { cls: "comp-head" }, [
      el("span", { cls: "comp-label", text: comp })]);
    var box = el("div", { cls: "comp", "data-comp": comp }, [head]);
    var textPre = el("pre", { cls: "textbox comp-text", text: text === null ? "(missing)" : text });
    if (!d) {
      head.appendChild(el("span", { cls: "tag", text: c.origin === "seed" ? "seed text" : "no parent to compare" }));
      box.appendChild(textPre);
      return box;
    }
    var parentText = textOf(byIdx[d.vs], comp);
    if (d.same) {
      var msg = "unchanged from #" + d.vs;
      if (d.from !== undefined && d.from !== d.vs) { msg = "taken from #" + d.from + " (same as #" + d.vs + ")"; }
      head.appendChild(el("span", { cls: "tag", text: msg }));
      box.appendChild(textPre);
      return box;
    }
    var label = "changed vs #" + d.vs + ": +" + d.add + " \u2212" + d.rem + " words";
    head.appendChild(el("span", { cls: "tag changed", text: label }));
    if (d.from !== undefined && d.from !== null) {
      head.appendChild(el("span", { cls: "tag merged", text: "taken from #" + d.from }));
    }
    var diffPre = diffNode(parentText === null ? "" : parentText, d.ops);
    diffPre.classList.add("comp-diff");
    textPre.hidden = true;
    var bDiff = el("button", { cls: "on", type: "button", text: "diff" });
    var bText = el("button", { type: "button", text: "text" });
    bDiff.addEventListener("click", function () { diffPre.hidden = false; textPre.hidden = true;
      bDiff.className = "on"; bText.className = ""; });
    bText.addEventListener("click", function () { diffPre.hidden = true; textPre.hidden = false;
      bText.className = "on"; bDiff.className = ""; });
    head.appendChild(el("span", { cls: "toggle" }, [bDiff, bText]));
    box.appendChild(diffPre);
    box.appendChild(textPre);
    return box;
  }

  function idList(ids, total) {
    var s = ids.join(", ");
    if (total > ids.length) { s += ", \u2026 (" + (total - ids.length) + " more)"; }
    return el("span", { cls: "idlist", text: s });
  }

  function renderPanel(c) {
    var panel = document.getElementById("panel");
    while (panel.firstChild) { panel.removeChild(panel.firstChild); }
    var flags = [];
    if (c.best) { flags.push("best"); }
    if (c.front) { flags.push("on the Pareto front"); }
    var title = "Candidate #" + c.i + " \u00b7 " + c.origin;
    if (c.component) { title += " of \u201c" + c.component + "\u201d"; }
    panel.appendChild(el("h3", { id: "panel-title", text: title }));
    var kv = el("dl", { cls: "kv" });
    function row(k, v) { kv.appendChild(el("dt", { text: k })); kv.appendChild(el("dd", {}, [v])); }
    row("validation score", fmt(c.mean) + (flags.length ? "  (" + flags.join(", ") + ")" : ""));
    row("parents", c.parents.length ? c.parents.map(function (p) { return "#" + p; }).join(" + ") : "none (seed)");
    row("iteration", String(c.iteration));
    row("created at", c.at === null ? "\u2013" : c.at + " rollouts used");
    row("id", c.id);
    if (c.vs !== undefined && c.vs !== null) {
      row("vs #" + c.vs, el("span", {}, [
        "better on " + c.nb + ", worse on " + c.nw + " validation examples"]));
      if (c.nb) { row("better on", idList(c.better, c.nb)); }
      if (c.nw) { row("worse on", idList(c.worse, c.nw)); }
    }
    panel.appendChild(kv);
    DATA.components.forEach(function (comp) {
      if (c.t[comp] !== undefined) { panel.appendChild(componentBlock(c, comp)); }
    });
  }

  function markAll(selector, cls, on) {
    document.querySelectorAll(selector).forEach(function (n) { n.classList.toggle(cls, on); });
  }

  function ancestors(i) {
    var seen = {}, stack = [i];
    while (stack.length) {
      var k = stack.pop();
      if (seen[k] || !byIdx[k]) { continue; }
      seen[k] = true;
      byIdx[k].parents.forEach(function (p) { stack.push(p); });
    }
    return seen;
  }

  function scrollToNode(i) {
    var box = document.getElementById("tree-box"), g = document.querySelector('.tree .node[data-select="' + i + '"]');
    if (!box || !g) { return; }
    var b = box.getBoundingClientRect(), r = g.getBoundingClientRect();
    box.scrollLeft += (r.left + r.width / 2) - (b.left + b.width / 2);
    box.scrollTop += (r.top + r.height / 2) - (b.top + b.height / 2);
  }

  function select(i, fromUser) {
    var c = byIdx[i];
    if (!c) { return false; }
    selected = i;
    markAll("[data-select].selected", "selected", false);
    markAll('[data-select="' + i + '"]', "selected", true);
    var anc = ancestors(i);
    document.querySelectorAll(".tree .node").forEach(function (n) {
      n.classList.toggle("anc", !!anc[n.getAttribute("data-select")] && n.getAttribute("data-select") !== String(i));
    });
    document.querySelectorAll(".tree .edge").forEach(function (e) {
      e.classList.toggle("hl", !!anc[e.getAttribute("data-to")] && !!anc[e.getAttribute("data-from")]);
    });
    renderPanel(c);
    document.body.dataset.selected = String(i);
    if (fromUser && window.history && history.replaceState) {
      try { history.replaceState(null, "", "#select=" + i); } catch (e) { /* file: URLs may refuse */ }
    }
    return true;
  }

  function hashSelection() {
    var m = /(?:^#|&)select=(\d+)/.exec(window.location.hash || "");
    return m ? parseInt(m[1], 10) : null;
  }

  function setZoom(z) {
    var svg = document.querySelector("#tree-box svg");
    if (!svg) { return; }
    zoom = Math.max(0.15, Math.min(2.5, z));
    var w = +svg.getAttribute("data-w"), h = +svg.getAttribute("data-h");
    svg.setAttribute("width", String(Math.round(w * zoom)));
    svg.setAttribute("height", String(Math.round(h * zoom)));
  }
  function fitZoom() {
    var svg = document.querySelector("#tree-box svg"), box = document.getElementById("tree-box");
    if (!svg || !box) { return 1; }
    var w = +svg.getAttribute("data-w"), h = +svg.getAttribute("data-h");
    return Math.max(0.15, Math.min(1.6, (box.clientWidth - 6) / w, (box.clientHeight - 6) / h));
  }
  function initialZoom() {
    // small trees are enlarged to fill the box; big ones stay at 1:1 (legible) and scroll
    var z = fitZoom();
    return z >= 0.6 ? z : 1;
  }

  function copyBest(btn) {
    var txt = JSON.stringify(DATA.best_candidate, null, 2);
    function done(ok) {
      btn.textContent = ok ? "copied" : "copy failed";
      setTimeout(function () { btn.textContent = "copy as JSON"; }, 1500);
    }
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(txt).then(function () { done(true); }, function () { done(false); });
    } else { done(false); }
  }

  function init() {
    DATA = JSON.parse(document.getElementById("gepetto-data").textContent);
    DATA.candidates.forEach(function (c) { byIdx[c.i] = c; });
    document.addEventListener("click", function (ev) {
      var t = ev.target && ev.target.closest ? ev.target.closest("[data-select]") : null;
      if (t) { select(parseInt(t.getAttribute("data-select"), 10), true); }
    });
    document.addEventListener("keydown", function (ev) {
      var t = ev.target;
      if ((ev.key === "Enter" || ev.key === " ") && t && t.getAttribute && t.getAttribute("data-select") !== null) {
        ev.preventDefault();
        select(parseInt(t.getAttribute("data-select"), 10), true);
      }
    });
    window.addEventListener("hashchange", function () {
      var h = hashSelection();
      if (h !== null && h !== selected && select(h, false)) { scrollToNode(h); }
    });
    var zin = document.getElementById("zoom-in"), zout = document.getElementById("zoom-out");
    var zfit = document.getElementById("zoom-fit"), z1 = document.getElementById("zoom-1");
    if (zin) { zin.addEventListener("click", function () { setZoom(zoom * 1.25); }); }
    if (zout) { zout.addEventListener("click", function () { setZoom(zoom / 1.25); }); }
    if (zfit) { zfit.addEventListener("click", function () { setZoom(fitZoom()); }); }
    if (z1) { z1.addEventListener("click", function () { setZoom(1); }); }
    var cb = document.getElementById("copy-best");
    if (cb) { cb.addEventListener("click", function () { copyBest(cb); }); }
    setZoom(initialZoom());
    if (DATA.candidates.length) {
      var h = hashSelection(), start = (h !== null && byIdx[h]) ? h : DATA.best_index;
      if (h !== null && !byIdx[h]) { document.body.dataset.selectMissing = String(h); }
      select(start, false);
      scrollToNode(start);
    }
    // layout diagnostics for tests: a page wider than the window means something overflows
    document.body.dataset.pageWidth = String(document.documentElement.scrollWidth);
    document.body.dataset.viewWidth = String(document.documentElement.clientWidth);
    document.body.dataset.ready = "1";
  }

  try { init(); } catch (err) { fail(err && err.message ? err.message : String(err)); }
})();
"""
