"""Bad input, and what gepetto does with it: one clear error, or a failed rollout recorded with the reason.

Each test is one row of docs/reliability.md. Through the CLI a user error never shows a traceback: exit
code 2 and one `error:` line.
"""

from __future__ import annotations

import asyncio
import math
import os
import sqlite3

import pytest
from typer.testing import CliRunner

import gepetto
from gepetto.cli import app
from gepetto.engine.events import StopReason
from gepetto.store.sqlite import RunStore, StoreError
from gepetto.testing import ScriptedLM, sim
from gepetto.types import Example, Score

SIM = ["--task", "sim", "--task-lm", "sim:task", "--reflection-lm", "sim:reflection"]


def optimize(trainset, valset=None, metric=None, program=None, seed="Answer the question.", **config):
    task = sim.task()
    config.setdefault("budget", 60)
    return gepetto.optimize(seed, trainset, metric or task.metric, valset=valset, program=program or task.program,
                            task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(), **config)


def evaluate(metric=None, program=None, examples=None, candidate="Answer the question.", **options):
    task = sim.task(n_train=3, n_val=3)
    return gepetto.evaluate(candidate, examples or task.valset, metric or task.metric,
                            program=program or task.program, task_lm=sim.SimTaskLM(), **options)


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()

    def invoke(*args):
        res = runner.invoke(app, [str(a) for a in args])
        # a user error ends in typer.Exit (SystemExit), never in another exception with a traceback
        assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
        assert "Traceback" not in res.output
        return res

    return invoke


# ---- data -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("train, val, message", [
    ([], None, "trainset is empty"),
    (sim.examples(3, 2, "t"), [], "valset is empty"),
])
def test_empty_dataset_is_one_clear_error(train, val, message) -> None:
    with pytest.raises(ValueError, match=message):
        optimize(train, val)


def test_empty_split_through_the_cli_exits_2(cli) -> None:
    res = cli("optimize", *SIM, "--n-train", 0, "--budget", 30, "-q")
    assert res.exit_code == 2 and "n_train" in res.output


def test_tiny_dataset_runs() -> None:
    one = sim.examples(1, 1, "t")
    result = optimize(one, sim.examples(1, 1, "v"), budget=12, minibatch_size=3)
    assert result.rollouts_used <= 12 and len(result.candidates) >= 1


def test_budget_below_one_validation_pass_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match="smaller than one validation pass"):
        optimize(sim.examples(4, 2, "t"), sim.examples(10, 2, "v"), budget=5)


def test_duplicate_ids_within_a_split_are_one_clear_error() -> None:
    dup = [Example({"question": "question 1 kind 0"}, "answer-1", id="same"),
           Example({"question": "question 2 kind 0"}, "answer-2", id="same")]
    with pytest.raises(ValueError, match=r"trainset has duplicate example ids \('same'\)"):
        optimize(dup)


def test_identical_examples_without_ids_are_one_clear_error() -> None:
    data = [{"q": "question 1 kind 0", "answer": "answer-1"}] * 2 + [{"q": "question 2 kind 0", "answer": "answer-2"}]
    with pytest.raises(ValueError, match="two identical examples share one: drop the copies or give ids"):
        optimize(data)


def test_same_id_for_different_examples_across_splits_is_one_clear_error() -> None:
    train = [Example({"question": "question 1 kind 0"}, "answer-1", id="x1")]
    val = [Example({"question": "question 9 kind 1"}, "answer-9", id="x1")]
    with pytest.raises(ValueError, match="x1"):
        optimize(train, val, budget=10)


def test_example_missing_a_field_is_a_failed_rollout() -> None:
    async def program(candidate, example, ctx):
        return await ctx.lm("instruction", example["question"])

    ev = evaluate(program=program, examples=[Example({"text": "no question here"}, "answer-1", id="e1")])
    r = ev.rollouts[0]
    assert r.score.value == 0.0 and "KeyError" in r.error and "'question'" in r.error
    assert "The program raised an error" in r.score.feedback


# ---- candidates and programs -----------------------------------------------------------------------

def test_program_asking_for_an_unknown_component_is_a_failed_rollout() -> None:
    async def program(candidate, example, ctx):
        return await ctx.lm("summary", example["q"])

    ev = evaluate(program=program)
    assert all(r.score.value == 0.0 and "component 'summary'" in r.error for r in ev.rollouts)


def test_evolving_a_component_the_seed_lacks_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match="not in the seed candidate"):
        optimize(sim.examples(4, 2, "t"), components=["summary"])


def test_several_components_without_a_program_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match="needs a program"):
        gepetto.optimize({"a": "x", "b": "y"}, sim.examples(4, 2, "t"), sim.metric)


def test_program_raising_is_a_failed_rollout_and_the_run_goes_on() -> None:
    def program(candidate, example, ctx):
        if example.id.endswith("1"):
            raise RuntimeError("the tool crashed")
        return ctx.lm("instruction", example["q"])

    result = optimize(sim.examples(6, 2, "t"), sim.examples(4, 2, "v"), program=program, budget=40)
    assert result.rollouts_used > 4 and 0.0 <= result.best_score <= 1.0
    ev = evaluate(program=program, examples=sim.examples(3, 2, "v"))
    failed = [r for r in ev.rollouts if r.error]
    assert failed and all("RuntimeError: the tool crashed" in r.error for r in failed)


def test_program_hanging_is_cut_by_the_rollout_timeout_and_the_run_goes_on() -> None:
    async def program(candidate, example, ctx):
        if example.id.endswith("1"):
            await asyncio.sleep(3600)  # a tool that never answers
        return await ctx.lm("instruction", example["q"])

    result = optimize(sim.examples(6, 2, "t"), sim.examples(4, 2, "v"), program=program, budget=40,
                      rollout_timeout=0.3)
    assert result.rollouts_used > 4 and result.best_score > 0
    ev = gepetto.evaluate("Answer. Apply rule-1. Apply rule-0.", sim.examples(4, 2, "v"), sim.metric,
                          program=program, task_lm=sim.SimTaskLM(), rollout_timeout=0.3)
    hung = [r for r in ev.rollouts if r.error]
    assert [r.example_id for r in hung] == ["v-1"] and hung[0].stage == "program"
    assert hung[0].error == "TimeoutError: no result within 0.3 s (rollout_timeout)"
    assert "took longer than the 0.3 s allowed per rollout" in hung[0].score.feedback
    assert ev.mean == 0.75  # the others were scored as usual


def test_metric_hanging_is_cut_by_the_rollout_timeout() -> None:
    async def metric(example, output, trace):
        await asyncio.sleep(3600)  # e.g. a judge LM that never answers, behind no timeout of its own

    ev = evaluate(metric=metric, rollout_timeout=0.2)
    assert all(r.stage == "metric" and r.error.startswith("TimeoutError") for r in ev.rollouts)


HUNG_SYNC_PROGRAM = """
import threading, gepetto
from gepetto.testing import sim

def program(candidate, example, ctx):
    if example.id.endswith("1"):
        threading.Event().wait()  # a sync program that hangs for good: its thread can only be abandoned
    return ctx.lm("instruction", example["q"])

r = gepetto.optimize("Answer the question.", sim.examples(6, 2, "t"), sim.metric, valset=sim.examples(4, 2, "v"),
                     program=program, task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(), budget=30,
                     rollout_timeout=0.3)
print("done", r.rollouts_used, r.stop_reason)
"""


def test_sync_program_hanging_is_cut_and_does_not_hold_up_the_end_of_the_run() -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", HUNG_SYNC_PROGRAM], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("done "), proc.stdout


@pytest.mark.parametrize("value", [0, -1, "30", True])
def test_invalid_rollout_timeout_is_one_clear_error(value) -> None:
    with pytest.raises(gepetto.ConfigError, match="rollout_timeout: must be a number of seconds above 0"):
        optimize(sim.examples(3, 2, "t"), rollout_timeout=value)


# ---- metrics ----------------------------------------------------------------------------------------

def test_metric_raising_is_a_failed_rollout() -> None:
    def metric(example, output, trace):
        raise ZeroDivisionError("division by zero in my metric")

    ev = evaluate(metric=metric)
    assert all(r.score.value == 0.0 and "The metric raised an error" in r.score.feedback for r in ev.rollouts)
    assert "ZeroDivisionError" in ev.rollouts[0].error


@pytest.mark.parametrize("value", [math.nan, 1.5, -0.1, "0.5", None, [0.5]])
def test_metric_returning_an_unusable_value_is_a_failed_rollout_naming_it(value) -> None:
    ev = evaluate(metric=lambda e, o, t: value)
    for r in ev.rollouts:
        assert r.score.value == 0.0 and r.error and "metric" in r.score.feedback.lower()
        assert repr(value) in r.error or str(value) in r.error


def test_metric_returning_a_numpy_scalar_is_accepted() -> None:
    np = pytest.importorskip("numpy")
    ev = evaluate(metric=lambda e, o, t: np.float32(0.5))
    assert all(r.score.value == 0.5 and r.error is None for r in ev.rollouts)


@pytest.mark.parametrize("bad", ["nan", "feedback", "sysexit"])
def test_a_metric_that_fails_on_one_seed_example_costs_that_rollout_not_the_run(bad) -> None:
    """Repro a15 (round 2): one NaN on one seed example stopped the whole run; a Score whose feedback is no text and
    sys.exit() inside a metric gave raw errors. Each is a failed rollout naming it; the run goes on."""
    task = sim.task(n_train=6, n_val=6)

    def metric(e, o, t):
        if e.id.endswith("-1"):
            if bad == "nan":
                return float("nan")
            if bad == "feedback":
                return Score(0.5, feedback=["not", "text"])  # type: ignore[arg-type]
            raise SystemExit(3)
        return task.metric(e, o, t)

    result = gepetto.optimize(task.seed_candidate, task.trainset, metric, valset=task.valset, program=task.program,
                              task_lm=sim.SimTaskLM(), reflection_lm="sim:reflection", budget=40, progress=False)
    assert result.rollouts_used > len(task.valset)  # it went on past the seed's validation
    ev = evaluate(metric=metric)
    failed = [r for r in ev.rollouts if r.error]
    assert failed and all(r.example_id.endswith("-1") and r.stage == "metric" and r.score.value == 0.0
                          for r in failed)
    said = {"nan": "ScoreIsNaN: Score.value must be a number in [0, 1], got float: nan",
            "feedback": "TypeError: Score.feedback must be a str, got list", "sysexit": "SystemExit: 3"}[bad]
    assert failed[0].error.startswith(said), failed[0].error


def test_a_keyboard_interrupt_in_the_metric_stops_the_run_as_ctrl_c_does() -> None:
    """Repro a15 (round 2), case kbint: a KeyboardInterrupt raised in the metric escaped the run with asyncio's
    "Task was destroyed but it is pending" warnings. It is a stop like Ctrl-C: the run returns what it has, no
    verdict is recorded for that example, and the stop names it."""
    task = sim.task(n_train=6, n_val=6)
    interrupted = []

    def metric(e, o, t):
        if e.id == "val-1" and not interrupted:
            interrupted.append(e.id)
            raise KeyboardInterrupt
        return task.metric(e, o, t)

    result = gepetto.optimize(task.seed_candidate, task.trainset, metric, valset=task.valset, program=task.program,
                              task_lm=sim.SimTaskLM(), reflection_lm="sim:reflection", budget=40, progress=False)
    assert interrupted and result.stop_reason is StopReason.INTERRUPTED
    assert "KeyboardInterrupt in the program or metric on 'val-1'" in result.stop_message
    assert result.best_candidate == task.seed_candidate


def test_score_out_of_range_is_refused_where_it_is_made() -> None:
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        Score(1.5, "too good")


# ---- reflection ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("junk", ["", "Certainly! Please provide the instruction.", "<new_instruction>",
                                  "\x00\x01 binary \ufffd", "Answer the question."])
def test_junk_reflection_output_is_rejected_and_the_run_goes_on(junk) -> None:
    task = sim.task(n_train=6, n_val=4)
    result = gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                              program=task.program, task_lm=sim.SimTaskLM(),
                              reflection_lm=ScriptedLM(lambda m, p: junk), budget=40, max_idle_iterations=3)
    assert len(result.candidates) == 1 and result.best_candidate == task.seed_candidate
    assert any(k.startswith("rejected") for k in result.proposals)


# ---- configuration ------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, fragment", [
    (["--budget", "0"], "budget"),
    (["--task", "nope"], "unknown task"),
    (["--task-lm", "gpt-4"], "accepted forms"),
    (["--cache", "sometimes"], "cache"),
    (["--config", "missing.yaml"], "does not exist"),
    (["--task-option", "novalue"], "KEY=VALUE"),
])
def test_invalid_config_through_the_cli_is_one_line_and_exit_2(cli, args, fragment) -> None:
    res = cli("optimize", *SIM, "-q", *args)
    assert res.exit_code == 2 and "error:" in res.output and fragment in res.output


def test_unparsable_config_file_exits_2(cli, tmp_path) -> None:
    (tmp_path / "bad.yaml").write_text("budget: [unclosed\n")
    res = cli("optimize", "--config", tmp_path / "bad.yaml", "-q")
    assert res.exit_code == 2 and "cannot be parsed" in res.output


def test_invalid_engine_option_in_python_names_the_options() -> None:
    with pytest.raises(TypeError, match="unknown option"):
        optimize(sim.examples(4, 2, "t"), budgit=10)


# ---- the run store ------------------------------------------------------------------------------------

JUNK = b"this is not a SQLite file, whatever its name says. " * 20


@pytest.mark.parametrize("command", [["runs"], ["show", "r"], ["report", "r", "-o", "r.html"], ["export", "r"]])
def test_corrupted_store_file_is_one_clear_error(cli, tmp_path, command) -> None:
    (tmp_path / "runs.sqlite").write_bytes(JUNK)
    res = cli(*command, "--storage", "runs.sqlite")
    assert res.exit_code == 2 and "is not a usable gepetto run store" in res.output


def test_corrupted_store_file_when_optimizing_is_one_clear_error(cli, tmp_path) -> None:
    (tmp_path / "runs.sqlite").write_bytes(JUNK)
    res = cli("optimize", *SIM, "--budget", 30, "--storage", "runs.sqlite", "-q")
    assert res.exit_code == 2 and "is not a usable gepetto run store" in res.output
    assert (tmp_path / "runs.sqlite").read_bytes() == JUNK  # the user's file is left as it was


def _damage_store(path, first_page: int) -> None:
    """Scramble the pages of a real store from `first_page` on (page 1 holds the header and the schema): a file
    that opens as SQLite and fails when some of its tables are read, as after a disk error or a copy cut short."""
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = db.execute("PRAGMA page_size").fetchone()[0]
    db.close()
    data = bytearray(path.read_bytes())
    for off in range(page * (first_page - 1), len(data)):
        data[off] = (data[off] * 7 + 13) & 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("first_page", [2, 4])  # 2: no table is readable; 4: the runs table still is
@pytest.mark.parametrize("command", [["runs"], ["show", "r"], ["report", "r", "-o", "r.html"], ["export", "r"],
                                     ["optimize", *SIM, "--budget", 60, "--run", "r", "-q"]])
def test_store_damaged_inside_is_one_clear_error(cli, tmp_path, command, first_page) -> None:
    assert cli("optimize", *SIM, "--budget", 30, "--run", "r", "--storage", "runs.sqlite", "-q").exit_code == 0
    _damage_store(tmp_path / "runs.sqlite", first_page)
    res = cli(*command, "--storage", "runs.sqlite")
    assert res.exit_code == 2 and "is not a usable gepetto run store (database disk image is malformed)" in res.output


def test_store_disk_full_is_one_clear_error_and_the_run_resumes(cli, tmp_path, monkeypatch) -> None:
    """A full disk is simulated by SQLite's own size limit (max_page_count): writes fail with SQLITE_FULL."""
    args = ["optimize", *SIM, "--budget", 300, "--run", "r", "-q"]
    assert cli(*args, "--storage", "whole.sqlite").exit_code == 0
    real_connect = sqlite3.connect

    def small_disk(*a, **kw):
        db = real_connect(*a, **kw)
        db.execute("PRAGMA max_page_count = 16")
        return db

    monkeypatch.setattr(sqlite3, "connect", small_disk)
    res = cli(*args, "--storage", "runs.sqlite")
    assert res.exit_code == 2
    assert "the run store runs.sqlite cannot grow (database or disk is full): free some space and resume" in res.output
    monkeypatch.setattr(sqlite3, "connect", real_connect)  # space freed
    stopped = RunStore("runs.sqlite").count_rollouts("r")
    assert stopped > 0 and cli(*args, "--storage", "runs.sqlite").exit_code == 0
    whole, resumed = (RunStore(p).get_run("r").result for p in ("whole.sqlite", "runs.sqlite"))
    assert [c["texts"] for c in resumed["candidates"]] == [c["texts"] for c in whole["candidates"]]
    assert resumed["best_score"] == whole["best_score"] and resumed["rollouts_used"] == whole["rollouts_used"]


def test_a_damaged_response_cache_means_uncached_calls_not_failed_rollouts(tmp_path) -> None:
    import asyncio

    from gepetto.lm.cache import CachedLM

    cached = CachedLM(sim.SimTaskLM(), tmp_path / "cache.sqlite")
    messages = [{"role": "system", "content": "Apply rule-1."}, {"role": "user", "content": "question 5 kind 1"}]
    assert asyncio.run(cached.complete(messages)).text == "answer-5"
    cached._db.execute("DROP TABLE lm_cache")  # what a damaged file does to the reads and writes: they fail
    with pytest.warns(UserWarning, match="response cache .* cannot be used .*no such table"):
        out = asyncio.run(cached.complete(messages))
    assert out.text == "answer-5" and not out.cached


def test_sqlite_file_of_something_else_is_one_clear_error(cli, tmp_path) -> None:
    db = sqlite3.connect(tmp_path / "other.sqlite")
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    res = cli("runs", "--storage", "other.sqlite")
    assert res.exit_code == 2 and "is not a usable gepetto run store" in res.output


def test_read_only_store_can_be_read(cli, tmp_path) -> None:
    res = cli("optimize", *SIM, "--budget", 30, "--run", "r", "--storage", "runs.sqlite", "-q")
    assert res.exit_code == 0
    os.chmod(tmp_path / "runs.sqlite", 0o400)
    try:
        for command in (["runs"], ["show", "r"], ["export", "r"]):
            out = cli(*command, "--storage", "runs.sqlite")
            assert out.exit_code == 0 and "r" in out.output
    finally:
        os.chmod(tmp_path / "runs.sqlite", 0o600)


def test_read_only_store_when_writing_is_one_clear_error(tmp_path, monkeypatch) -> None:
    """Root may write anywhere, so the refusal is simulated where SQLite would raise it."""
    real_connect = sqlite3.connect

    def readonly_connect(*args, **kwargs):
        class ReadOnly:
            def __init__(self, db):
                self.db = db

            def execute(self, sql, *a):
                raise sqlite3.OperationalError("attempt to write a readonly database")

        return ReadOnly(real_connect(*args, **kwargs))

    monkeypatch.setattr(sqlite3, "connect", readonly_connect)
    with pytest.raises(StoreError, match=r"cannot write to the run store .*readonly"):
        RunStore(tmp_path / "runs.sqlite")


def test_report_to_an_unwritable_path_is_one_clear_error(cli, tmp_path) -> None:
    assert cli("optimize", *SIM, "--budget", 30, "--run", "r", "--storage", "runs.sqlite", "-q").exit_code == 0
    (tmp_path / "a-file").write_text("x")
    res = cli("report", "r", "-o", tmp_path / "a-file" / "report.html", "--storage", "runs.sqlite")
    assert res.exit_code == 2 and "cannot write the report" in res.output


def test_missing_store_and_unknown_run_are_one_clear_error(cli, tmp_path) -> None:
    assert cli("show", "r", "--storage", "nowhere.sqlite").exit_code == 2  # (`runs` lists none: tests/test_cli.py)
    assert cli("optimize", *SIM, "--budget", 30, "--run", "r", "--storage", "runs.sqlite", "-q").exit_code == 0
    res = cli("show", "nope", "--storage", "runs.sqlite")
    assert res.exit_code == 2 and "no run named 'nope'" in res.output
