"""HTML report: rendering from hand-made and simulated snapshots, escaping, no network references, diffs."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import re
import time
from html.parser import HTMLParser
from typing import Any

import pytest

import gepetto
from gepetto.engine.events import CandidateAdded, Event
from gepetto.program import run_rollout
from gepetto.report import render_report, write_report
from gepetto.report.html import word_diff
from gepetto.testing import sim

ALERT = "<script>alert(1)</script>"
CLOSER = "</script><b>x</b>"


def _cand(index: int, texts: dict[str, str], parents: list[int], origin: str, scores: dict[str, float],
          component: str | None = None, at: int = 0) -> dict[str, Any]:
    return {"index": index, "id": f"id{index:04d}", "texts": texts, "parents": parents, "origin": origin,
            "iteration": index, "component": component, "val_scores": scores,
            "mean": sum(scores.values()) / len(scores), "rollouts_at_creation": at}


def hand_snapshot() -> dict[str, Any]:
    """Five candidates over four examples: two reflections, a merge, a hostile text, an emoji and a long text."""
    seed = {"instruction": "Answer the question.", "format": "Reply with one word."}
    c1 = {**seed, "instruction": "Answer the question. Cite the passage \U0001F600 first."}
    c2 = {**seed, "format": f"Reply with one word. {ALERT} and {CLOSER} & done"}
    c3 = {"instruction": c1["instruction"], "format": c2["format"]}
    c4 = {**c3, "instruction": "Think step by step.\n" + "Be precise. " * 120 + "Then answer."}
    ids = ["val-a", "val-b", "val-c", "val-d"]

    def sc(*v: float) -> dict[str, float]:
        return dict(zip(ids, v, strict=True))

    cands = [
        _cand(0, seed, [], "seed", sc(0, 0, 0.5, 0), at=4),
        _cand(1, c1, [0], "reflection", sc(1, 0, 0.5, 0), "instruction", at=14),
        _cand(2, c2, [0], "reflection", sc(0, 1, 0.5, 1), "format", at=24),
        _cand(3, c3, [1, 2], "merge", sc(1, 1, 0.5, 1), at=31),
        _cand(4, c4, [3], "reflection", sc(1, 0, 1, 1), "instruction", at=45),
    ]
    result = {
        "best_candidate": c3, "best_score": 0.875, "seed_score": 0.125, "candidates": cands,
        "pareto_front": [3, 4], "rollouts_used": 45, "budget": 60,
        "ledger": {
            "task": {"calls": 45, "input_tokens": 9000, "output_tokens": 450, "seconds": 12.5, "errors": 1,
                     "cached_calls": 3, "estimated_tokens": False, "cost": 0.0123},
            "reflection": {"calls": 6, "input_tokens": 7000, "output_tokens": 900, "seconds": 30.25, "errors": 0,
                           "cached_calls": 0, "estimated_tokens": True, "cost": 0.0},
        },
        "stop_reason": "budget spent", "iterations": 9,
        "proposals": {"accepted": 3, "rejected: not better on minibatch": 4, "merge accepted": 1,
                      "reflection error": 1},
        "history": [[4, 0.125], [14, 0.375], [31, 0.875]], "wall_seconds": 17.0,
    }
    samples = [
        {"example_id": "val-b", "inputs": f"question: what? {ALERT}", "gold": "Paris",
         "seed": {"output": "no idea", "score": 0.0, "feedback": "Wrong: expected Paris."},
         "best": {"output": "Paris", "score": 1.0, "feedback": "Correct."}},
        {"example_id": "val-d", "inputs": "question: who?", "gold": "Ada",
         "seed": {"output": "", "score": None, "feedback": None},
         "best": {"output": "Ada", "score": 1.0, "feedback": ""}},
    ]
    run = {"name": "hand <made> run", "status": "finished", "seed": 7, "created": "2026-01-02T03:04:05",
           "config": {"budget": 60, "note": ALERT}, "task": "demo", "task_lm": "local:qwen2.5-coder-0.5b",
           "reflection_lm": "local:qwen2.5-coder-1.5b"}
    return {"run": run, "result": result, "samples": samples}


def sim_snapshot(budget: int = 300, n_samples: int = 4) -> dict[str, Any]:
    """A snapshot of a real simulated run, with the seed's and best's outputs on a few validation examples."""
    t = sim.task(components=2, kinds=6)
    r = gepetto.optimize(t.seed_candidate, t.trainset, t.metric, valset=t.valset, program=t.program,
                         task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(forget=True, max_rules=2),
                         budget=budget, seed=1)
    result = r.to_dict()
    seed, best = r.candidates[0].candidate, r.best_candidate

    async def outputs() -> list[dict[str, Any]]:
        out = []
        for ex in t.valset[:n_samples]:
            entry: dict[str, Any] = {"example_id": ex.id, "inputs": json.dumps(dict(ex.inputs)), "gold": ex.gold}
            for label, cand in (("seed", seed), ("best", best)):
                ro = await run_rollout(t.program, t.metric, cand, ex, sim.SimTaskLM())
                entry[label] = {"output": ro.output, "score": ro.score.value, "feedback": ro.score.feedback}
            out.append(entry)
        return out

    samples = asyncio.run(outputs())
    run = {"name": "sim-run", "status": "finished", "seed": 1, "created": "2026-01-01T00:00:00",
           "config": {"budget": budget, "task": "sim"}, "task": "sim", "task_lm": "sim-task",
           "reflection_lm": "sim-reflection"}
    return {"run": run, "result": json.loads(json.dumps(result)), "samples": samples}


def big_snapshot(n: int = 300, n_val: int = 40, seed: int = 0) -> dict[str, Any]:
    """A random pool of `n` candidates (reflections and merges) to check the page scales."""
    rng = random.Random(seed)
    ids = [f"val-{i}" for i in range(n_val)]
    cands = [_cand(0, {"a": "Base text.", "b": "Other text."}, [], "seed", dict.fromkeys(ids, 0.0), at=n_val)]
    for i in range(1, n):
        if i > 5 and rng.random() < 0.1:
            p, q = rng.sample(range(i), 2)
            texts = {"a": cands[p]["texts"]["a"], "b": cands[q]["texts"]["b"]}
            parents, origin, comp = [p, q], "merge", None
        else:
            p = rng.randrange(max(0, i - 20), i)
            comp = rng.choice("ab")
            texts = {**cands[p]["texts"], comp: cands[p]["texts"][comp] + f" Rule {i}."}
            parents, origin = [p], "reflection"
        scores = {k: float(rng.random() < 0.2 + 0.6 * i / n) for k in ids}
        cands.append(_cand(i, texts, parents, origin, scores, comp, at=n_val * (i + 1)))
    means = [c["mean"] for c in cands]
    best = max(range(n), key=lambda i: (means[i], -i))
    history, top = [], -1.0
    for c in cands:
        if c["mean"] > top:
            top = c["mean"]
            history.append([c["rollouts_at_creation"], top])
    result = {"best_candidate": cands[best]["texts"], "best_score": means[best], "seed_score": 0.0,
              "candidates": cands, "pareto_front": sorted({*rng.sample(range(n), 25), best}),
              "rollouts_used": n_val * n, "budget": n_val * n + 100, "ledger": {}, "stop_reason": "budget spent",
              "iterations": n * 2, "proposals": {"accepted": n - 1}, "history": history, "wall_seconds": 1.0}
    run = {"name": "big", "status": "running", "seed": 0, "created": "", "config": {}, "task": "sim",
           "task_lm": "x", "reflection_lm": "y"}
    return {"run": run, "result": result, "samples": []}


class _Collect(HTMLParser):
    """Tags, attributes and script bodies of a page, as a browser's tokenizer would see them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts[-1] += data


def _parse(page: str) -> _Collect:
    p = _Collect()
    p.feed(page)
    p.close()
    return p


def _embedded(page: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/json" id="gepetto-data">(.*?)</script>', page, re.S)
    assert m is not None
    return json.loads(m.group(1))


def _no_network(page: str) -> None:
    parsed = _parse(page)
    for tag, attrs in parsed.tags:
        for key in ("src", "href", "srcset", "action", "data", "poster", "xlink:href"):
            value = (attrs.get(key) or "").strip().lower()
            assert not value.startswith(("http:", "https:", "//", "ftp:")), (tag, key, value)
        assert tag not in ("link", "iframe", "object", "embed", "img"), tag
    assert not re.search(r"@import|url\(\s*['\"]?(https?:)?//", page)
    assert "http://" not in page and "https://" not in page


def _apply_ops(old: str, ops: list) -> str:
    """Replay diff ops the way the page's script does (offsets in UTF-16 units); must give the new text."""
    units, pos, out = old.encode("utf-16-le"), 0, []
    for op in ops:
        if op[0] == "+":
            out.append(op[1])
            continue
        seg = units[2 * pos: 2 * (pos + op[1])].decode("utf-16-le")
        pos += op[1]
        if op[0] == "=":
            out.append(seg)
    assert pos * 2 == len(units)
    return "".join(out)


# ---- tests ----------------------------------------------------------------------------------------


def test_hand_snapshot_sections_and_values() -> None:
    page = render_report(hand_snapshot())
    assert page.startswith("<!DOCTYPE html>")
    for anchor in ("best", "lineage", "progress", "proposals", "front", "samples", "ledger"):
        assert f'id="{anchor}"' in page
    assert "hand &lt;made&gt; run" in page and "<made>" not in page
    assert "local:qwen2.5-coder-0.5b" in page and "local:qwen2.5-coder-1.5b" in page
    assert "0.125 \u2192 0.875" in page and "(+0.750)" in page
    assert "45 / 60" in page and "budget spent" in page
    # ledger: tokens with thousands separators, estimated marker only on the estimated role, cost, cached
    assert "9,000" in page and "\u22487,000" in page and "\u22489,000" not in page
    assert "$0.0123" in page and "30.2" in page
    # proposals with counts
    assert "rejected: not better on minibatch" in page and "merge accepted" in page
    assert "3 of 7 proposals tested on a minibatch were accepted" in page
    # samples: both outputs, gold and feedback side by side
    assert "Wrong: expected Paris." in page and "Paris" in page and "Ada" in page
    assert "(empty output)" in page  # the seed's empty answer on val-d is said, not shown as a blank box


def test_tree_has_every_candidate_front_best_and_merge_edges() -> None:
    page = render_report(hand_snapshot())
    nodes = re.findall(r'<g class="node ([^"]*)" data-select="(\d+)"', page)
    assert [int(i) for _, i in nodes] == [0, 1, 2, 3, 4]
    classes = {int(i): set(c.split()) for c, i in nodes}
    assert "best" in classes[3] and "front" in classes[3] and "front" in classes[4]
    assert "front" not in classes[0] and "best" not in classes[4]
    merge_edges = re.findall(r'<path class="edge merge" data-from="(\d+)" data-to="(\d+)"', page)
    assert sorted(merge_edges) == [("1", "3"), ("2", "3")]
    assert len(re.findall(r'<path class="edge reflection"', page)) == 3
    # chart: best line and one point per candidate
    assert 'class="best-line"' in page
    assert len(re.findall(r'<circle class="pt ', page)) == 5


def test_a_demonstration_child_is_shown_as_one() -> None:
    snap = hand_snapshot()
    cands = snap["result"]["candidates"]
    cands.append(_cand(5, {**cands[4]["texts"], "instruction": cands[4]["texts"]["instruction"]
                           + "\n\nExamples of correct answers:\nInput: who?\nOutput: Ada"}, [4], "demo",
                       {"val-a": 1, "val-b": 1, "val-c": 1, "val-d": 1}, "instruction", at=55))
    page = render_report(snap)
    assert re.search(r'<g class="node demo[ "]', page) and '<circle class="pt demo' in page
    assert "#5 demo of instruction" in page and "teal demonstration" in page
    assert "teal demonstration" not in render_report(hand_snapshot())  # said only when there is one


def test_tree_layout_rows_do_not_overlap() -> None:
    page = render_report(big_snapshot(300))
    pos = re.findall(r'data-select="(\d+)" tabindex="0" role="button" transform="translate\(([\d.]+),([\d.]+)\)"',
                     page)
    assert len(pos) == 300
    rows: dict[float, list[float]] = {}
    for _, x, y in pos:
        rows.setdefault(float(y), []).append(float(x))
    for xs in rows.values():
        xs.sort()
        assert all(b - a >= 40 for a, b in itertools.pairwise(xs))  # at least one node spacing apart
    # a child is always below all its parents
    where = {int(i): float(y) for i, _, y in pos}
    for c in big_snapshot(300)["result"]["candidates"]:
        for p in c["parents"]:
            assert where[c["index"]] > where[p]


def test_escaping_of_hostile_text() -> None:
    page = render_report(hand_snapshot())
    parsed = _parse(page)
    # exactly two script elements: the JSON data and our own code; no alert anywhere in live markup
    assert [a.get("type") for t, a in parsed.tags if t == "script"] == ["application/json", None]
    assert all("alert(1)" not in s for s in parsed.scripts[1:])
    assert "<script>alert" not in page and "</script><b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # server-rendered (best candidate, samples, config)
    data_block = parsed.scripts[0]
    assert "<" not in data_block and ">" not in data_block and "&" not in data_block
    data = json.loads(data_block)
    assert any(ALERT in s and CLOSER in s for s in data["strings"])  # the exact text survives the round trip


def test_no_network_references() -> None:
    for snap in (hand_snapshot(), big_snapshot(40)):
        page = render_report(snap)
        _no_network(page)
        assert "innerHTML" not in page and "eval(" not in page


def test_embedded_diffs_match_texts() -> None:
    snap = hand_snapshot()
    data = _embedded(render_report(snap))
    by = {c["i"]: c for c in data["candidates"]}
    strings = data["strings"]

    for c in data["candidates"]:
        for comp, d in (c.get("d") or {}).items():
            old = strings[by[d["vs"]]["t"][comp]]
            new = strings[c["t"][comp]]
            if d.get("same"):
                assert old == new
            else:
                assert _apply_ops(old, d["ops"]) == new
    c1 = by[1]["d"]
    assert c1["format"] == {"vs": 0, "same": True}
    assert c1["instruction"]["add"] == 4 and c1["instruction"]["rem"] == 0
    merge = by[3]
    assert merge["parents"] == [1, 2] and merge["d"]["format"]["from"] == 2 and merge["d"]["instruction"]["from"] == 1
    assert by[3]["best"] and by[3]["front"] and not by[0]["front"]
    assert by[4]["nb"] == 1 and by[4]["better"] == ["val-c"] and by[4]["worse"] == ["val-b"]


def test_word_diff_reads_as_words() -> None:
    ops = word_diff("Answer the question briefly.", "Answer the whole question in detail.")
    inserted = [op[1] for op in ops if op[0] == "+"]
    assert " whole" in inserted
    assert any("in detail" in t for t in inserted)
    assert word_diff("same", "same") == [["=", 4]]
    assert word_diff("", "new text") == [["+", "new text"]]
    # astral characters count as two UTF-16 units, as in JavaScript
    assert word_diff("\U0001F600 a", "\U0001F600 b") == [["=", 2], ["-", 2], ["+", " b"]]
    assert word_diff("Answer.", "Answer. Apply rule-2.") == [["=", 7], ["+", " Apply rule-2."]]
    # very long texts fall back to a line diff instead of quadratic work
    old = "\n".join(f"line {i} " + "w " * 30 for i in range(300))
    new = old.replace("line 0 ", "line 0 changed ").replace("line 299 ", "line 299 changed ")
    t0 = time.perf_counter()
    ops = word_diff(old, new)
    assert time.perf_counter() - t0 < 1.0
    assert _apply_ops(old, ops) == new
    inserted = [op[1] for op in ops if op[0] == "+"]
    assert len(inserted) == 2 and all("changed" in t and t.count("\n") <= 1 for t in inserted)


def test_real_sim_run_report(tmp_path) -> None:
    snap = sim_snapshot()
    res = snap["result"]
    path = write_report(snap, tmp_path / "sub" / "report.html")
    page = path.read_text(encoding="utf-8")
    _no_network(page)
    assert len(re.findall(r'<g class="node ', page)) == len(res["candidates"])
    best = max(res["candidates"], key=lambda c: (c["mean"], -c["index"]))
    assert f'data-select="{best["index"]}"' in page
    for text in res["best_candidate"].values():
        assert text in page
    assert res["stop_reason"] in page or json.dumps(res["stop_reason"])[1:-1] in page
    data = _embedded(page)
    assert data["best_index"] == best["index"]
    assert len(data["candidates"]) == len(res["candidates"])
    # samples: the best candidate answers where the seed did not
    assert any(s["best"]["score"] > s["seed"]["score"] for s in snap["samples"])
    assert "answer-" in page and "Questions of kind" in page
    # the front table has one row per validation example
    assert page.count('<td class="ex" title="val-') == len(best["val_scores"])


def test_degenerate_snapshots_render() -> None:
    one = hand_snapshot()
    one["result"]["candidates"] = one["result"]["candidates"][:1]
    one["result"]["pareto_front"] = [0]
    one["result"]["history"] = [[4, 0.125]]
    page = render_report(one)
    assert page.count('<g class="node ') == 1
    assert _embedded(page)["best_index"] == 0
    # stopped before the seed was validated: NaN scores, no candidates, no samples
    empty = {"run": {"name": "x", "status": "failed"},
             "result": {"best_candidate": {"a": "t"}, "best_score": float("nan"), "seed_score": float("nan"),
                        "candidates": [], "pareto_front": [], "rollouts_used": 0, "budget": 10, "ledger": {},
                        "stop_reason": "boom", "iterations": 0, "proposals": {}, "history": [],
                        "wall_seconds": 0.0},
             "samples": []}
    page = render_report(empty)
    assert "no candidates yet" in page and "NaN" not in page
    assert _embedded(page)["candidates"] == []
    # partial snapshot from the store while running: None fields
    partial = hand_snapshot()
    partial["run"]["status"] = "running"
    partial["result"].update(budget=None, wall_seconds=None, proposals={}, stop_reason="(unfinished)")
    assert "(unfinished)" in render_report(partial)
    assert "<html" in render_report({})


def test_big_pool_renders_quickly() -> None:
    snap = big_snapshot(300, n_val=100)
    t0 = time.perf_counter()
    page = render_report(snap)
    took = time.perf_counter() - t0
    assert took < 5.0
    assert page.count('<g class="node ') == 300
    assert len(page) < 3_000_000


@pytest.mark.parametrize("status", ["finished", "running", "failed", "interrupted", "weird<status>"])
def test_status_badge(status: str) -> None:
    snap = hand_snapshot()
    snap["run"]["status"] = status
    page = render_report(snap)
    m = re.search(r'<span class="badge (status-\w+)" id="run-status">([^<]*)</span>', page)
    assert m is not None
    assert m.group(2) == status.replace("<", "&lt;").replace(">", "&gt;")
    assert m.group(1) == (f"status-{status}" if status.isalpha() else "status-other")


def test_report_from_the_run_store(tmp_path) -> None:
    """The snapshot the run store produces (unfinished, then finished) renders, with the stored sample outputs."""
    from gepetto.store.snapshot import run_snapshot
    from gepetto.store.sqlite import RunStore, StoredRollouts

    t = sim.task(components=2, kinds=6)
    store = RunStore(tmp_path / "runs.sqlite")
    store.create_run("r", {"task": "sim", "task_lm": "sim", "reflection_lm": "sim", "budget": 200}, seed=2)
    store.put_examples("r", "val", list(t.valset))

    def record(event: Event) -> None:
        if isinstance(event, CandidateAdded):
            store.put_candidate("r", event.record)

    engine = gepetto.build_engine(t.seed_candidate, t.trainset, t.metric, valset=t.valset, program=t.program,
                                  task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(forget=True, max_rules=2),
                                  rollout_store=StoredRollouts(store, "r"), callbacks=record, budget=200, seed=2)
    result = gepetto.run_engine(engine)
    partial = render_report(run_snapshot(store, "r"))  # no result stored yet: rebuilt from the candidates
    assert "(unfinished)" in partial and partial.count('<g class="node ') == len(result.candidates)
    store.finish_run("r", "finished", result.to_dict())
    snap = run_snapshot(store, "r")
    page = render_report(snap)
    _no_network(page)
    assert snap["samples"] and page.count('<div class="sample">') == len(snap["samples"])
    assert all(text in page for text in result.best_candidate.values())
    assert result.stop_message in page and f"({result.stop_reason.value})" in page
