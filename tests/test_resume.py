"""Kill-and-resume: a run SIGKILLed at random points and resumed ends exactly like an uninterrupted run."""

import random
import subprocess
import sys
from pathlib import Path

from gepetto.store.snapshot import run_snapshot
from gepetto.store.sqlite import RunStore

SCRIPT = Path(__file__).parent / "helpers" / "kill_run.py"


def _run(storage, name, kill_after):
    return subprocess.run([sys.executable, str(SCRIPT), str(storage), name, str(kill_after)],
                          capture_output=True, text=True, timeout=300)


def _final(storage, name):
    snap = run_snapshot(RunStore(storage), name)
    res = snap["result"]
    keep = ("best_candidate", "best_score", "seed_score", "candidates", "pareto_front", "rollouts_used",
            "stop_reason", "iterations", "history", "proposals")
    return {k: res[k] for k in keep}, snap


def test_killed_and_resumed_run_equals_uninterrupted_run(tmp_path):
    whole = _run(tmp_path / "whole.sqlite", "r", -1)
    assert whole.returncode == 0, whole.stderr
    expected, _ = _final(tmp_path / "whole.sqlite", "r")
    assert expected["rollouts_used"] > 60 and len(expected["candidates"]) > 2

    rng = random.Random(2026)
    points = sorted(rng.sample(range(1, expected["rollouts_used"]), 5))
    storage = tmp_path / "killed.sqlite"
    for n in points:
        killed = _run(storage, "r", n)
        assert killed.returncode == -9, killed.stderr  # it really died by SIGKILL
        assert RunStore(storage).get_run("r").shown_status == "stopped (killed?)"
    final = _run(storage, "r", -1)
    assert final.returncode == 0, final.stderr
    got, snap = _final(storage, "r")
    assert got == expected
    assert snap["run"]["status"] == "finished"
    store = RunStore(storage)
    starts = store.events("r", "start")
    assert [e["data"]["resumed"] for e in starts] == [False] + [True] * len(points)
    # the seed is validated once: its rollouts were never paid for again after the first kill
    assert all(e["data"]["stored_rollouts"] >= min(points) - 4 for e in starts[1:])
