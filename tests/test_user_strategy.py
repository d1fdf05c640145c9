"""A strategy added as a new user adds one: a class of their own, in their own file, that keeps one decision
protocol (here `ParentSelector`), given to `gepetto.optimize(...)`; nothing of gepetto is touched. The stored run
resumes exactly from the same file, and is refused, with a message saying why and what to do, where the object
cannot be had (the CLI) or another strategy is given."""

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from gepetto.cli import app
from gepetto.store.sqlite import RunStore

SRC = Path(__file__).resolve().parents[1] / "src"

# the user's file, as docs/strategies.md shows it: their class, and their call with it
USER_FILE = '''
"""newest.py: improve the latest candidate, a chain instead of the Pareto front's sampling."""
import json
import random
import sys

import gepetto
from gepetto.strategies import RunState
from gepetto.testing import sim


class Newest:
    """A ParentSelector: the index of the parent of the next proposal."""

    def __call__(self, state: RunState, rng: random.Random) -> int:
        return len(state.records) - 1


if __name__ == "__main__":
    storage, run, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
    selector = Newest() if sys.argv[4:] != ["pareto"] else "pareto"
    task = sim.task(kinds=6)
    try:
        result = gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                                  program=task.program, task_lm="sim:task", reflection_lm="sim:reflection",
                                  budget=budget, parent_selector=selector, storage=storage, run=run,
                                  progress=False)
    except gepetto.ConfigError as exc:
        sys.exit(f"ConfigError: {exc}")
    print(json.dumps({"best": result.best_candidate.to_dict(), "score": result.best_score,
                      "candidates": [c.to_dict() for c in result.candidates], "rollouts": result.rollouts_used,
                      "parents": [c.parents for c in result.candidates]}))
'''


def run_user_file(path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, env=env, timeout=300,
                          cwd=path.parent)


def test_a_parent_selector_of_ones_own_from_ones_own_file_runs_stores_and_resumes(tmp_path):
    user = tmp_path / "newest.py"
    user.write_text(USER_FILE)
    storage = str(tmp_path / "runs.sqlite")

    whole = run_user_file(user, storage, "whole", "150")
    assert whole.returncode == 0, whole.stderr
    result = json.loads(whole.stdout)
    # the selector decided: every child after the seed's first is a child of the candidate before it
    parents = result["parents"]
    assert len(parents) > 3 and all(p == [i - 1] for i, p in enumerate(parents) if i > 0 and len(p) == 1)
    assert result["score"] > result["candidates"][0]["mean"]
    assert RunStore(storage).get_run("whole").config["parent_selector"] == "python:__main__:Newest"

    # stopped by its budget, then resumed from the same file with a larger one: the uninterrupted run's result
    assert run_user_file(user, storage, "part", "70").returncode == 0
    resumed = run_user_file(user, storage, "part", "150")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == result

    # another strategy on resume changes the path: refused, naming the option and what was stored
    other = run_user_file(user, storage, "part", "200", "pareto")
    assert other.returncode == 1
    assert "parent_selector: stored 'python:__main__:Newest', now 'pareto'" in other.stderr

    # the CLI cannot have the object: refused, saying how to resume it
    cli = CliRunner().invoke(app, ["optimize", "--storage", storage, "--run", "part", "--budget", "200"])
    assert cli.exit_code == 2, cli.output
    said = " ".join(cli.output.split())
    assert "given to gepetto.optimize() in Python: resume the run by calling gepetto.optimize() again with the " \
           "same arguments and the same run= name" in said, said
