"""Benchmark results stay light and findable: small PNGs, large raw numbers gzipped (and still read), an index
naming every result file, and every figure a page shows present."""

import gzip
import re
from pathlib import Path

from benchmarks.compare.measure import JSON_BYTES, PNG_BYTES, RunRecord, load_json, load_meta, save_json

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
RESULT_DIRS = [BENCH / "results", BENCH / "reliability" / "results"]
INDEX = (BENCH / "RESULTS.md").read_text()


def result_files() -> list[Path]:
    return sorted(p for d in RESULT_DIRS for p in d.iterdir() if p.is_file())


def test_figures_are_small_and_raw_numbers_over_the_limit_are_gzipped():
    assert result_files()
    heavy = [f"{p.name}: {p.stat().st_size} bytes" for p in BENCH.rglob("*.png") if p.stat().st_size > PNG_BYTES]
    assert not heavy, heavy
    raw = [p.name for p in result_files() if p.suffix in (".json", ".jsonl") and p.stat().st_size > JSON_BYTES]
    assert not raw, f"gzip these (gzip -9n): {raw}"


def test_the_index_names_every_result_file_and_each_file_it_names_exists():
    unnamed = []
    for p in result_files():
        stem = re.sub(r"(_mean)?\.(md|json|json\.gz|jsonl\.gz|png)$", "", p.name)
        if p.name not in INDEX and f"`{stem}`" not in INDEX:
            unnamed.append(p.name)
    assert not unnamed, f"name these in benchmarks/RESULTS.md: {unnamed}"
    named = re.findall(r"`((?:reliability/)?(?:results/)?[a-z][\w.-]*\.(?:md|json|json\.gz|jsonl\.gz|png))`", INDEX)
    assert len(named) > 20
    missing = [n for n in named if not any((BENCH / n).exists() or (d / Path(n).name).exists() for d in RESULT_DIRS)]
    assert not missing, missing


def test_every_figure_a_page_shows_is_there():
    pages = [*(BENCH / "results").glob("*.md"), *(BENCH.parent / "docs").glob("**/*.md"), BENCH.parent / "README.md"]
    shown = [(page, target) for page in pages
             for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", page.read_text()) if "://" not in target]
    assert len(shown) > 30  # the results pages show their plots
    missing = [f"{page.name}: {target}" for page, target in shown if not (page.parent / target).exists()]
    assert not missing, missing


def _record(seed: int, points: int) -> RunRecord:
    curve = [(i * 3, round(i / points, 4)) for i in range(points)]
    return RunRecord("gepetto", "rules-easy", seed, 500, 0.9, 0.95, 0.1, 99, 99, 1.5, 99, (10, 2), 9, (100, 20),
                     curve, 5)


def test_large_raw_numbers_are_written_gzipped_and_read_back_under_either_name(tmp_path):
    small, large = [_record(0, 3)], [_record(s, 400) for s in range(30)]
    save_json(small, {"track": "sim"}, tmp_path / "small.json")
    save_json(large, {"track": "sim", "argv": ["sim"]}, tmp_path / "large.json")
    assert (tmp_path / "small.json").exists() and not (tmp_path / "small.json.gz").exists()
    assert not (tmp_path / "large.json").exists()
    packed = tmp_path / "large.json.gz"
    assert len(gzip.decompress(packed.read_bytes())) > JSON_BYTES > packed.stat().st_size
    assert load_json(tmp_path / "large.json") == load_json(packed) == large  # the plain name finds the .gz
    assert load_meta(tmp_path / "large.json")["argv"] == ["sim"]
    save_json(small, {"track": "sim"}, tmp_path / "large.json")  # rewritten small: the stale .gz goes
    assert not packed.exists() and load_json(tmp_path / "large.json") == small
