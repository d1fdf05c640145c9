"""benchmarks/local_batch.py: the drafting count that `lookup` predicts its speed-up from."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_local_batch", ROOT / "benchmarks" / "local_batch.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def test_a_copied_run_is_written_in_one_step(bench) -> None:
    prompt = [1, 2, 3, 4, 5, 6, 7, 8]
    # reading 3 finds 3 in the prompt, drafts 4 5 6 7: 4 5 6 are kept, 9 is written instead of 7; 9 occurs nowhere
    # before, so the last step reads it alone (and ends the answer)
    assert bench._draft_steps(prompt, [3, 4, 5, 6, 9], 4) == [5, 1]
    # drafts never run past k tokens: the same answer with drafts of 2 needs a step more
    assert bench._draft_steps(prompt, [3, 4, 5, 6, 9], 2) == [3, 3, 1]


def test_drafts_come_from_the_answer_too_and_every_token_costs_a_step_without_one(bench) -> None:
    assert bench._draft_steps([1, 2], [9, 9, 9], 2) == [1, 2]  # the second 9 drafts the third from the answer
    assert bench._draft_steps([1, 2], [7, 8, 9], 4) == [1, 1, 1]  # nothing to draft from: one token per step
    assert bench._draft_steps([1, 2], [], 4) == []
