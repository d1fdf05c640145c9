"""The HTML report in a real headless Chromium: the script runs without errors, the DOM it builds is right,
selection by URL hash works, hostile text stays text, and the page renders to a non-blank screenshot."""

from __future__ import annotations

import html
import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest

from gepetto.report import render_report, write_report
from test_report import ALERT, big_snapshot, hand_snapshot, sim_snapshot

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome",
                                                        "google-chrome-stable")) if p), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH "
                                "(Debian: apt-get install chromium); browser tests need a real browser")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _chromium(tmp_path: Path, *args: str) -> str:
    assert CHROMIUM is not None
    profile = tmp_path / "profile"
    profile.mkdir(exist_ok=True)
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _dump(tmp_path: Path, snapshot: dict[str, Any] | None = None, fragment: str = "", page: str | None = None) -> str:
    path = tmp_path / "report.html"
    if page is not None:
        path.write_text(page, encoding="utf-8")
    else:
        assert snapshot is not None
        write_report(snapshot, path)
    dom = _chromium(tmp_path, "--dump-dom", path.as_uri() + fragment)
    assert "<body" in dom, dom[:500]
    return dom


def _body_attrs(dom: str) -> dict[str, str]:
    m = re.search(r"<body([^>]*)>", dom)
    assert m is not None
    return {k: html.unescape(v) for k, v in re.findall(r'([\w-]+)="([^"]*)"', m.group(1))}


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def _panel(dom: str) -> str:
    m = re.search(r'<aside class="panel" id="panel"[^>]*>(.*?)</aside>', dom, re.S)
    assert m is not None
    return m.group(1)


def _assert_clean(dom: str) -> dict[str, str]:
    body = _body_attrs(dom)
    assert "data-js-error" not in body, body.get("data-js-error")
    assert body.get("data-ready") == "1"
    assert re.search(r'<div id="js-error" hidden=""', dom)
    return body


def test_dom_after_script_ran(tmp_path: Path) -> None:
    snap = hand_snapshot()
    dom = _dump(tmp_path, snap)
    body = _assert_clean(dom)
    assert body.get("data-selected") == "3"  # the best candidate is shown when no hash is given
    assert len(re.findall(r'<g class="node [^"]*" data-select="\d+"', dom)) == 5
    assert re.search(r'<svg class="chart"', dom) and 'class="best-line"' in dom
    for text in snap["result"]["best_candidate"].values():
        assert html.escape(text, quote=False) in dom
    # the hostile text is present as text, and no script element was injected: only the data block and ours
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", dom, re.S)
    assert [a.strip() for a, _ in scripts] == ['type="application/json" id="gepetto-data"', ""]
    assert "alert(1)" not in scripts[1][1]
    assert "<script>alert" not in dom
    panel_text = _text(_panel(dom))
    assert ALERT in panel_text  # candidate 3's "format" text, written with textContent


def test_hash_selects_candidate_and_shows_diff(tmp_path: Path) -> None:
    snap = hand_snapshot()
    dom = _dump(tmp_path, snap, "#select=4")
    body = _assert_clean(dom)
    assert body.get("data-selected") == "4"
    assert re.search(r'<g class="node [^"]*selected[^"]*" data-select="4"', dom)
    assert not re.search(r'<g class="node [^"]*selected[^"]*" data-select="3"', dom)
    panel = _panel(dom)
    text = _text(panel)
    assert "Candidate #4" in text and "reflection" in text
    c4 = snap["result"]["candidates"][4]["texts"]
    assert c4["instruction"] in text  # full text (the "text" view)
    # the diff against parent #3: the old instruction deleted, the new one inserted, as elements
    dels = [_text(d) for d in re.findall(r'<del class="d-del">(.*?)</del>', panel, re.S)]
    inss = [_text(d) for d in re.findall(r'<ins class="d-ins">(.*?)</ins>', panel, re.S)]
    assert any("Cite the passage" in d for d in dels)
    assert any("Think step by step" in i for i in inss)
    assert "changed vs #3" in text and "unchanged from #3" in text
    # the ancestors' path is highlighted in the tree
    for i in (0, 1, 2, 3):
        assert re.search(rf'<g class="node [^"]*\banc\b[^"]*" data-select="{i}"', dom)


def test_sim_run_in_browser(tmp_path: Path) -> None:
    snap = sim_snapshot()
    cands = snap["result"]["candidates"]
    child = next(c for c in cands if c["origin"] == "reflection")
    dom = _dump(tmp_path, snap, f"#select={child['index']}")
    body = _assert_clean(dom)
    assert body.get("data-selected") == str(child["index"])
    assert len(re.findall(r'<g class="node ', dom)) == len(cands)
    panel = _text(_panel(dom))
    for text in child["texts"].values():
        assert text in panel
    # the diff of the changed component: without deletions it reads as the new text, without insertions as the old
    comp = child["component"]
    block = re.search(rf'<div class="comp" data-comp="{comp}">.*?<pre class="diff textbox comp-diff">(.*?)</pre>',
                      _panel(dom), re.S)
    assert block is not None and "<ins" in block.group(1)
    diff = block.group(1)
    assert _text(re.sub(r"<del[^>]*>.*?</del>", "", diff, flags=re.S)) == child["texts"][comp]
    assert _text(re.sub(r"<ins[^>]*>.*?</ins>", "", diff, flags=re.S)) == cands[child["parents"][0]]["texts"][comp]


def test_large_pool_and_unknown_hash(tmp_path: Path) -> None:
    dom = _dump(tmp_path, big_snapshot(300), "#select=9999")
    body = _assert_clean(dom)
    assert body.get("data-select-missing") == "9999"
    assert len(re.findall(r'<g class="node ', dom)) == 300
    dom = _dump(tmp_path, big_snapshot(300), "#select=250")
    assert _assert_clean(dom).get("data-selected") == "250"
    assert "Candidate #250" in _text(_panel(dom))


def test_empty_run_has_no_script_errors(tmp_path: Path) -> None:
    snap = hand_snapshot()
    snap["result"].update(candidates=[], pareto_front=[], history=[], best_score=float("nan"))
    snap["samples"] = []
    dom = _dump(tmp_path, snap)
    _assert_clean(dom)
    assert "no candidates yet" in dom


def test_script_errors_are_detected(tmp_path: Path) -> None:
    """Negative control: a broken data block must show up as data-js-error (else the checks above prove nothing)."""
    page = render_report(hand_snapshot())
    page = re.sub(r'(<script type="application/json" id="gepetto-data">).*?(</script>)', r"\1{broken\2", page,
                  flags=re.S)
    dom = _dump(tmp_path, page=page)
    body = _body_attrs(dom)
    assert body.get("data-js-error")
    assert "data-ready" not in body
    assert re.search(r'<div id="js-error">Report script error: ', dom)


def _png_info(data: bytes) -> tuple[int, int, int]:
    """Width, height and number of distinct byte values in the decoded pixel stream (a blank page has few)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos: pos + 8])
        chunk = data[pos + 8: pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", chunk[:8])
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    return width, height, len(set(zlib.decompress(idat)))


def test_screenshot_is_not_blank(tmp_path: Path) -> None:
    path = tmp_path / "report.html"
    write_report(sim_snapshot(), path)
    shot = tmp_path / "shot.png"
    _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1400,2000", path.as_uri() + "#select=3")
    data = shot.read_bytes()
    width, height, distinct = _png_info(data)
    assert (width, height) == (1400, 2000)
    assert len(data) > 40_000 and distinct > 100
    keep = os.environ.get("GEPETTO_REPORT_SCREENSHOT")  # to look at it: GEPETTO_REPORT_SCREENSHOT=/path.png
    if keep:
        shutil.copyfile(shot, keep)


def _with_transcripts(snap: dict[str, Any]) -> dict[str, Any]:
    """The hand-made snapshot with a test score and three proposals: accepted, refused (a hostile answer), not
    better on its minibatch."""
    prompt = [{"role": "system", "content": "You improve instructions."},
              {"role": "user", "content": f"<current_instruction>\nAnswer.\n</current_instruction> {ALERT}"}]
    snap = {**snap, "evaluations": {"test": {"split": "test", "examples": 20, "overlap": 0, "candidates": [
        {"index": 0, "label": "seed", "mean": 0.25}, {"index": 3, "label": "best", "mean": 0.8}]}}}
    snap["transcripts"] = [
        {"proposal": "0.0", "parent": 0, "component": "instruction", "verdict": "accepted", "candidate": 1,
         "candidate_mean": 0.375, "test": {"parent": 0, "component": "instruction", "text": "Cite the passage.",
                                           "minibatch_before": 0.0, "minibatch_after": 2.0, "accepted": True},
         "attempts": [{"attempt": 0, "messages": prompt, "answer": "<new_instruction>Cite.</new_instruction>",
                       "rejected": None, "new_from": 0, "continues": False}]},
        {"proposal": "0.1", "parent": 1, "component": "format", "verdict": "refused", "candidate": None, "test": None,
         "attempts": [{"attempt": 0, "messages": prompt, "answer": f"Sure! {ALERT}", "rejected": "rejected: chat reply",
                       "new_from": 0, "continues": False},
                      {"attempt": 1, "messages": [*prompt, {"role": "assistant", "content": f"Sure! {ALERT}"},
                                                  {"role": "user", "content": "That was a chat reply."}],
                       "answer": "", "rejected": "rejected: empty", "new_from": 2, "continues": True}]},
        {"proposal": "0.2", "parent": 1, "component": "instruction", "verdict": "not better on minibatch",
         "candidate": None, "attempts": [], "test": {"parent": 1, "component": "instruction", "text": "x",
                                                     "minibatch_before": 2.0, "minibatch_after": 1.0,
                                                     "accepted": False, "origin": "demo"}},
    ]
    return snap


def test_transcripts_open_from_the_url_and_their_text_stays_text(tmp_path: Path) -> None:
    dom = _dump(tmp_path, _with_transcripts(hand_snapshot()), "#proposal=2")
    body = _assert_clean(dom)
    assert body.get("data-open-proposal") == "2"
    assert re.search(r'<details class="tx v-refused" id="tx-2" open="">', dom)
    assert not re.search(r'id="tx-1" open', dom)  # only the one asked for
    two = dom[dom.index('id="tx-2"'):dom.index('id="tx-3"')]
    assert "rejected: chat reply" in two and "rejected: empty" in two and "That was a chat reply." in two
    assert len(re.findall(r'<details class="prompt" open="">', two)) == 1  # its prompt is opened too
    assert "<script>alert" not in dom and "Sure! &lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert "0.250 \u2192 0.800" in _text(dom)  # the test score in the header


def test_compare_page_renders_in_the_browser(tmp_path: Path) -> None:
    from gepetto.report.compare import render_compare

    a, b = _with_transcripts(hand_snapshot()), sim_snapshot(budget=120)
    page = render_compare([a, b])
    dom = _dump(tmp_path, page=page)
    assert "<body" in dom and dom.count('class="run-line"') == 2
    assert "hand &lt;made&gt; run" in dom and "sim-run" in dom and "<script>alert" not in dom
    shot = tmp_path / "compare.png"
    (tmp_path / "compare.html").write_text(page, encoding="utf-8")
    _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1400,1200", (tmp_path / "compare.html").as_uri())
    width, _, distinct = _png_info(shot.read_bytes())
    assert width == 1400 and distinct > 50
