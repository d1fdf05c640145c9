"""Kill-and-resume: a run SIGKILLed at random points and resumed ends exactly like an uninterrupted run."""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from gepetto.engine.events import RolloutFinished, StopReason
from gepetto.runner import load_config, start_or_resume
from gepetto.store.snapshot import run_snapshot
from gepetto.store.sqlite import RunStore
from gepetto.testing import sim

SCRIPT = Path(__file__).parent / "helpers" / "kill_run.py"


def _run(storage, name, kill_after, per_round=1, options=None):
    extra = [json.dumps(options)] if options else []
    return subprocess.run([sys.executable, str(SCRIPT), str(storage), name, str(kill_after), str(per_round), *extra],
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


# a SIGKILL in every phase: seed validation, parent minibatch, reflection (before the call and right after an
# answer), a child's minibatch and validation, merge subsample and merge validation
PHASE_KILLS = ["validation/seed:1:5", "minibatch:3:1", "reflection:4:0", "proposal:3:0", "validation/reflection:3:4",
               "merge:1:0", "validation/merge:1:3", "validation/reflection:6:0"]


def _killed_everywhere(tmp_path, per_round):
    whole = _run(tmp_path / "whole.sqlite", "r", "never", per_round)
    assert whole.returncode == 0, whole.stderr
    expected, _ = _final(tmp_path / "whole.sqlite", "r")
    origins = {c["origin"] for c in expected["candidates"]}
    assert origins == {"seed", "reflection", "merge"}  # the path goes through every phase
    storage = tmp_path / "killed.sqlite"
    for when in PHASE_KILLS:
        killed = _run(storage, "r", when, per_round)
        assert killed.returncode == -9, (when, killed.stdout, killed.stderr)
    final = _run(storage, "r", "never", per_round)
    assert final.returncode == 0, final.stderr
    got, snap = _final(storage, "r")
    assert got == expected
    assert snap["run"]["status"] == "finished"
    assert snap["result"]["rollouts_used"] == RunStore(storage).count_rollouts("r")  # nothing paid twice
    assert not RunStore(storage).events("r", "diverged")  # every session retraced the stored path


def test_killed_in_every_phase_with_several_proposals_per_round_resumes_exactly(tmp_path):
    _killed_everywhere(tmp_path, per_round=3)


@pytest.mark.slow
def test_killed_in_every_phase_with_one_proposal_per_round_resumes_exactly(tmp_path):
    _killed_everywhere(tmp_path, per_round=1)


# racing validation: SIGKILLs in the middle of races (a few rollouts into a validation, right after a
# cut was logged, inside a merge child's validation)
RACING = {"validation": "racing(chunk=1)", "fewshot": 0, "proposer": "auto(trim=0)"}  # (the kill points are on
# a path without demonstrations or trims)
RACING_KILLS = ["validation/reflection:2:2", "cut:1:0", "validation/merge:1:1", "validation/reflection:6:3",
                "cut:2:0"]


def test_killed_in_the_middle_of_races_resumes_exactly(tmp_path):
    whole = _run(tmp_path / "whole.sqlite", "r", "never", 3, RACING)
    assert whole.returncode == 0, whole.stderr
    expected, snap = _final(tmp_path / "whole.sqlite", "r")
    raced = snap["result"]["raced_out"]
    assert len(raced) >= 2 and {c["origin"] for c in raced} == {"reflection", "merge"}
    storage = tmp_path / "killed.sqlite"
    for when in RACING_KILLS:
        killed = _run(storage, "r", when, 3, RACING)
        assert killed.returncode == -9, (when, killed.stdout, killed.stderr)
    final = _run(storage, "r", "never", 3, RACING)
    assert final.returncode == 0, final.stderr
    got, snap = _final(storage, "r")
    assert got == expected and snap["result"]["raced_out"] == raced
    assert snap["result"]["rollouts_used"] == RunStore(storage).count_rollouts("r")  # nothing paid twice
    assert not RunStore(storage).events("r", "diverged")


def test_sigterm_stops_gracefully_and_the_run_resumes_exactly(tmp_path):
    whole = _run(tmp_path / "whole.sqlite", "r", "never", 3)
    expected, _ = _final(tmp_path / "whole.sqlite", "r")
    storage = tmp_path / "t.sqlite"
    stopped = _run(storage, "r", "sigterm:60", 3)
    assert stopped.returncode == 0, stopped.stderr  # a graceful stop, like Ctrl-C
    assert stopped.stdout.strip().endswith("interrupted (SIGTERM)")
    snap = run_snapshot(RunStore(storage), "r")
    assert snap["run"]["status"] == "interrupted" and snap["result"]["stop_reason"] == StopReason.SIGTERM.value
    assert snap["result"]["stop_message"] == "interrupted (SIGTERM)"
    final = _run(storage, "r", "never", 3)
    assert final.returncode == 0, final.stderr
    assert _final(storage, "r")[0] == expected and whole.returncode == 0


class SampledReflection(sim.SimReflectionLM):
    """A sampled reflection LM that ignores the `seed` parameter (as many APIs do): each process draws its own
    answers, and some calls fail with an error that is not an outage."""

    instances = 0

    def __init__(self, **kw):
        super().__init__(**kw)
        SampledReflection.instances += 1
        self.rng = random.Random(SampledReflection.instances)

    async def complete(self, messages, **params):
        if self.rng.random() < 0.2:
            self.calls += 1
            raise ValueError("the prompt is too long for this model")
        return await super().complete(messages, **{**params, "seed": self.rng.random()})


def _sampled_lms(monkeypatch):
    from gepetto.lm import names

    real = names.make_lm
    made = []

    def make_lm(name):
        lm = SampledReflection(noise=0.5) if name.startswith("sim:reflection") else real(name)
        made.append(lm)
        return lm

    monkeypatch.setattr(names, "make_lm", make_lm)
    return made


def test_reflection_answers_and_errors_are_replayed_on_resume_with_the_cache_off(tmp_path, monkeypatch):
    made = _sampled_lms(monkeypatch)
    cfg = load_config(task="sim", task_lm="sim:task", reflection_lm="sim:reflection", budget=150, seed=3,
                      cache="off", task_options={"kinds": 6})
    _, first = start_or_resume(cfg, storage=tmp_path / "s.sqlite", run="r")
    assert first.proposals.get("reflection error", 0) > 0
    _, again = start_or_resume(cfg, storage=tmp_path / "s.sqlite", run="r")  # a new process would sample anew
    assert [c.to_dict() for c in again.candidates] == [c.to_dict() for c in first.candidates]
    assert again.proposals == first.proposals and again.rollouts_used == first.rollouts_used
    reflection_lms = [lm for lm in made if isinstance(lm, SampledReflection)]
    assert reflection_lms[-1].calls == 0  # every answer and error came from the run store


def test_the_ledger_is_saved_with_each_rollout(tmp_path):
    storage = tmp_path / "s.sqlite"
    seen = []

    def hook(event):
        if isinstance(event, RolloutFinished):
            stored = RunStore(storage).ledger("r")
            seen.append((event.used, stored.get("task", {}).get("calls", 0)))

    cfg = load_config(task="sim", task_lm="sim:task", reflection_lm="sim:reflection", budget=60, seed=3)
    start_or_resume(cfg, storage=storage, run="r", callbacks=hook)
    assert seen and all(used == calls for used, calls in seen)  # a kill now loses no task call's cost


def test_lm_failure_options_are_run_options():
    from gepetto.runner import ConfigError

    assert load_config(max_lm_failures=2, lm_retry_pause=0.5).max_lm_failures == 2
    with pytest.raises(ConfigError, match="max_lm_failures"):
        load_config(max_lm_failures=0)


def test_killed_inside_store_transactions_and_lm_calls_resumes_exactly(tmp_path, monkeypatch):
    """SIGKILL with a run-store transaction open (statements run, no COMMIT) and inside LM calls; the resumed run
    equals an uninterrupted one and pays again only for the rollouts that were in flight (the full table:
    benchmarks/reliability/kills.py)."""
    monkeypatch.setenv("KILL_RUN_CACHE", "off")  # every rollout is paid with one task-LM call: count them
    monkeypatch.setenv("KILL_RUN_PAID", str(tmp_path / "paid-whole"))
    whole = _run(tmp_path / "whole.sqlite", "r", "never", 3)
    assert whole.returncode == 0, whole.stderr
    expected, _ = _final(tmp_path / "whole.sqlite", "r")
    paid_whole = (tmp_path / "paid-whole").read_text().split()
    monkeypatch.setenv("KILL_RUN_PAID", str(tmp_path / "paid"))
    storage = tmp_path / "killed.sqlite"
    lost = []
    for when in ["tx:put_rollout:20", "tx:put_candidate:3", "call:reflection:2", "tx:put_lm_answer:2"]:
        calls = (tmp_path / "paid").read_text().split().count("task") if (tmp_path / "paid").exists() else 0
        stored = RunStore(storage).count_rollouts("r") if storage.exists() else 0
        killed = _run(storage, "r", when, 3)
        assert killed.returncode == -9, (when, killed.stdout, killed.stderr)
        lost.append((tmp_path / "paid").read_text().split().count("task") - calls
                    - (RunStore(storage).count_rollouts("r") - stored))
    final = _run(storage, "r", "never", 3)
    assert final.returncode == 0, final.stderr
    assert _final(storage, "r")[0] == expected
    paid = (tmp_path / "paid").read_text().split()
    assert paid.count("task") - paid_whole.count("task") == sum(lost)  # paid twice: only what was lost in flight
    assert all(0 <= n <= 4 for n in lost)  # at most max_concurrency rollouts are in flight
    assert RunStore(storage).count_rollouts("r") == expected["rollouts_used"]


class _SessionParent:
    """A parent selector that decides on something outside the run (here a switch; in life the clock or an
    unseeded random source): a resumed run cannot retrace its path."""

    latest = False

    def __call__(self, state, rng):
        return len(state.records) - 1 if _SessionParent.latest else state.archive.sample(rng)


def test_a_resume_that_leaves_its_stored_path_says_so(tmp_path):
    import warnings

    import gepetto

    task = sim.task(kinds=6, components=2)

    def session(budget):
        return gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                                program=task.program, task_lm=sim.SimTaskLM(), fewshot=0,
                                reflection_lm=sim.SimReflectionLM(noise=0.3, seed=5, forget=True, max_rules=2),
                                budget=budget, seed=2, storage=tmp_path / "s.sqlite", run="r",
                                parent_selector=_SessionParent())

    _SessionParent.latest = False
    first = session(120)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same path: no warning
        again = session(200)
    store = RunStore(tmp_path / "s.sqlite")
    assert again.rollouts_used > first.rollouts_used and not store.events("r", "diverged")
    _SessionParent.latest = True  # another path from the start
    with pytest.warns(RuntimeWarning, match=r"did not retrace its stored path on resume: \d+ of its \d+ stored"):
        session(320)
    [diverged] = store.events("r", "diverged")
    stored = store.events("r", "start")[-1]["data"]["stored_rollouts"]
    assert diverged["data"]["stored_rollouts"] == stored == again.rollouts_used
    assert 0 < diverged["data"]["left_behind"] < stored and diverged["data"]["paid"] > 0


def test_a_run_whose_inputs_hold_a_set_resumes_under_another_hash_seed(tmp_path):
    """Repro f6 (round 2): the stored inputs kept a set in the first process's hash order, so a process with another
    PYTHONHASHSEED found "other examples" and refused to resume; they are stored sorted now."""
    import os
    import subprocess
    import sys

    script = tmp_path / "set_inputs.py"
    script.write_text(
        "import sys\nimport gepetto\nfrom gepetto.testing.sim import metric\n"
        "ex = lambda i: gepetto.Example({'q': f'question {i} kind {i % 3}', "
        "'tags': {'alpha', 'beta', 'gamma', f't{i}'}}, gold=f'answer-{i}')\n"
        "res = gepetto.optimize('Answer the question.', [ex(i) for i in range(6)], metric, valset=[ex(i) for i in "
        "range(6, 12)], task_lm='sim:task', reflection_lm='sim:reflection', budget=int(sys.argv[2]), "
        "storage=sys.argv[1], run='r', progress=False)\nprint('OK', res.rollouts_used)\n")
    store = str(tmp_path / "f6.sqlite")
    for hash_seed, budget in (("1", "30"), ("2", "45"), ("3", "60")):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run([sys.executable, str(script), store, budget], capture_output=True, text=True, env=env,
                             timeout=120)
        assert out.stdout.startswith("OK"), out.stdout + out.stderr


KILLRUN = '''
import os, sys, signal, hashlib, json
import gepetto
from gepetto import Example
from gepetto.engine import events as ev
from gepetto.testing import sim
from gepetto.testing.sim import SimReflectionLM, SimTaskLM
from gepetto.lm.base import Completion

storage, kill_after, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
SK = "sk-test-ABCDEFGHIJKLMNOPQRSTUV012345"

class Task:
    name = "task"
    def __init__(self): self.inner = SimTaskLM()
    async def complete(self, messages, **params):
        out = await self.inner.complete(messages, **params)
        return Completion(out.text + " (auth Bearer abcdefgh12345678XYZ)", out.usage) if mode == "out" else out

def metric(e, o, t):
    return sim.metric(e, o.split(" (auth")[0] if isinstance(o, str) else o, t)

n = 0
def cb(e):
    global n
    if isinstance(e, ev.RolloutFinished):
        n += 1
        if n == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

t = sim.task(n_train=12, n_val=12, kinds=6)
train, val = t.trainset, t.valset
if mode == "input":
    train, val = ([Example({"q": e.inputs["q"] + f" token {SK}"}, gold=e.gold, id=e.id) for e in part]
                  for part in (train, val))
res = gepetto.optimize(t.seed_candidate, train, metric, valset=val, task_lm=Task(),
                       reflection_lm=SimReflectionLM(noise=0.3, seed=5), budget=150, seed=3, max_concurrency=4,
                       storage=storage, run="r", callbacks=cb, progress=False)
print("RESULT", round(res.best_score, 4), res.rollouts_used, [c.candidate.id for c in res.candidates],
      hashlib.sha1(json.dumps(res.best_candidate.to_dict(), sort_keys=True).encode()).hexdigest())
'''


@pytest.mark.parametrize("mode", ["input", "out"])
def test_a_killed_run_whose_examples_or_answers_hold_secrets_resumes_to_the_uninterrupted_result(mode, tmp_path):
    """Repro a03 (round 2): the killed process decided on unredacted rollouts, its resume on the stored (redacted)
    ones, and took another path (6 stored rollouts never asked for again, 28 new ones paid); a run now goes on with
    the rollouts as stored, in every process."""
    import subprocess
    import sys

    script = tmp_path / "killrun.py"
    script.write_text(KILLRUN)

    def go(store, kill_after):
        out = subprocess.run([sys.executable, str(script), str(tmp_path / store), str(kill_after), mode],
                             capture_output=True, text=True, timeout=120)
        return next((line for line in out.stdout.splitlines() if line.startswith("RESULT")), None)

    whole = go("whole.sqlite", -1)
    assert whole is not None
    assert go("killed.sqlite", 23) is None  # killed mid-run
    assert go("killed.sqlite", -1) == whole


def test_a_demonstration_that_copies_a_key_is_the_same_prompt_returned_exported_and_resumed(tmp_path, monkeypatch):
    """Repro a18 (round 2): few-shot demonstrations copied an sk- key from an input into the returned prompt, while
    the store kept it redacted, so `export` and a resumed run gave another prompt. One policy for all now: the
    returned, exported and resumed prompts agree, and none holds the key."""
    from typer.testing import CliRunner

    import gepetto
    from gepetto.cli import app
    from gepetto.types import Example

    monkeypatch.chdir(tmp_path)
    key = "sk-proj-AbCdEf0123456789XyZ"

    def ex(i: int, part: str) -> Example:
        return Example({"q": f"question {i} kind {i % 3} (customer key {key})"}, gold=f"answer-{i}", id=f"{part}-{i}")

    train, val = [ex(i, "tr") for i in range(9)], [ex(i, "va") for i in range(9, 18)]
    kw = dict(task_lm="sim:task", reflection_lm="sim:reflection", budget=120, storage="demo.sqlite", run="d", seed=1,
              fewshot="fewshot(k=2, share=1.0, adaptive=false, gold=true)", progress=False)
    first = gepetto.optimize("Answer the question.", train, sim.metric, valset=val, **kw).best_candidate["instruction"]
    exported = CliRunner().invoke(app, ["export", "d", "--storage", "demo.sqlite"])
    assert exported.exit_code == 0, exported.output
    resumed = gepetto.optimize("Answer the question.", train, sim.metric, valset=val,
                               **{**kw, "budget": 160}).best_candidate["instruction"]
    assert json.loads(exported.output)["instruction"] == first
    assert key not in first and key not in resumed and "[REDACTED]" not in first
    assert resumed == first  # the repro's expected line: the resumed run (budget 120 -> 160) returns the same text
