// The report's script. It reads the embedded JSON, draws the candidate panel with textContent only (user texts are
// never parsed as HTML), wires clicks on tree nodes, chart points and front columns, and supports
// `#select=N` in the URL so a report can link to (and a headless browser can open) one candidate.
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

  // `#proposal=N` opens reflection transcript N with its prompts and scrolls to it (a link to one proposal)
  function hashProposal() {
    var m = /(?:^#|&)proposal=(\d+)/.exec(window.location.hash || "");
    return m ? parseInt(m[1], 10) : null;
  }
  function openProposal() {
    var n = hashProposal(), el = n !== null ? document.getElementById("tx-" + n) : null;
    if (!el) { return; }
    el.open = true;
    el.querySelectorAll("details.prompt").forEach(function (d) { d.open = true; });
    el.scrollIntoView();
    document.body.dataset.openProposal = String(n);
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
      openProposal();
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
    openProposal();
    // layout diagnostics for tests: a page wider than the window means something overflows
    document.body.dataset.pageWidth = String(document.documentElement.scrollWidth);
    document.body.dataset.viewWidth = String(document.documentElement.clientWidth);
    document.body.dataset.ready = "1";
  }

  try { init(); } catch (err) { fail(err && err.message ? err.message : String(err)); }
})();
