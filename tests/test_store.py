"""The SQLite run store: rollouts, candidates, runs, events; replaying a run over its stored rollouts."""

import sqlite3
import threading

import gepetto
from gepetto.engine.events import CandidateAdded
from gepetto.program import Rollout, TraceEntry
from gepetto.store.snapshot import run_snapshot
from gepetto.store.sqlite import SCHEMA, RunStore, StoredRollouts
from gepetto.testing import sim
from gepetto.types import Candidate, Example, Score


def test_rollouts_round_trip_and_are_idempotent(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite")
    store.create_run("r", {"budget": 10}, seed=3)
    cand = Candidate(instruction="Be brief.")
    run = Rollout("ex-1", Score(0.5, "half right", {"f1": 0.7}), {"answer": "x"},
                  [TraceEntry("instruction", "in <b>", "out", "stop")], None)
    store.put_rollout("r", cand, "ex-1", run)
    store.put_rollout("r", cand, "ex-1", run)  # a replay writes nothing new
    assert store.count_rollouts("r") == 1
    back = RunStore(tmp_path / "runs.sqlite").rollouts("r")[(cand.id, "ex-1")]
    assert back.score == run.score and back.output == {"answer": "x"}
    assert back.trace[0].to_dict() == run.trace[0].to_dict()
    odd = Rollout("ex-2", Score(0.0, "boom"), object(), [], "ValueError: boom", "metric")
    store.put_rollout("r", cand, "ex-2", odd)  # non-JSON output is kept as its repr
    back = store.rollouts("r")[(cand.id, "ex-2")]
    assert (back.error, back.stage) == ("ValueError: boom", "metric")  # a resumed run knows the metric failed


def test_a_store_from_before_the_stage_and_pattern_columns_is_upgraded(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    old = SCHEMA.replace("    pattern TEXT NOT NULL DEFAULT '',\n    stage TEXT,\n", "")
    assert old != SCHEMA
    db.executescript(old)
    assert not {"stage", "pattern"} & {row[1] for row in db.execute("PRAGMA table_info(evaluations)")}
    db.close()
    store = RunStore(path)
    cand = Candidate(instruction="x")
    store.put_rollout("r", cand, "e", Rollout("e", Score(1.0, "ok")))
    store.put_rollout("r", cand, "f", Rollout("f", Score(0.0, "no", pattern="answered x, expected y")))
    assert store.rollouts("r")[(cand.id, "e")].stage is None
    assert store.rollouts("r")[(cand.id, "f")].score.pattern == "answered x, expected y"


def test_a_new_store_another_process_is_writing_is_waited_for_not_refused(tmp_path):
    # two processes starting one run on a new file: SQLite refused the switch to WAL at once ("database is locked")
    path = tmp_path / "s.sqlite"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("CREATE TABLE t (x)")
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO t VALUES (1)")
    release = threading.Timer(0.3, lambda: other.execute("COMMIT"))
    release.start()
    store = RunStore(path)
    release.join()
    other.close()
    store.create_run("r", {"task": "sim"}, seed=0)
    assert store.get_run("r") is not None
    assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_runs_status_and_listing(tmp_path):
    store = RunStore(tmp_path / "s.sqlite")
    store.create_run("a", {"task": "sim"}, seed=0)
    store.create_run("b", {"task": "sim"}, seed=1)
    assert [r.name for r in store.list_runs()] == ["b", "a"]
    assert store.get_run("a").shown_status == "running"  # this process is alive
    store.finish_run("a", "finished", {"best_score": 1.0})
    info = store.get_run("a")
    assert info.status == "finished" and info.result == {"best_score": 1.0}
    store.add_event("b", "start", {"session": 0})
    store.add_event("b", "done", {"session": 0})
    assert [e["kind"] for e in store.events("b")] == ["start", "done"]
    store.delete_run("b")
    assert store.get_run("b") is None and store.events("b") == []


def _engine(store, name, **config):
    task = sim.task()
    return gepetto.build_engine(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                                program=task.program, task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(),
                                rollout_store=StoredRollouts(store, name), **config)


def test_replay_over_stored_rollouts_pays_nothing_and_gives_the_same_result(tmp_path):
    store = RunStore(tmp_path / "s.sqlite")
    store.create_run("r", {}, seed=0)
    first = _engine(store, "r", budget=120, seed=4)
    a = gepetto.run_engine(first)
    second = _engine(store, "r", budget=120, seed=4)
    b = gepetto.run_engine(second)
    assert second.task_lm.lm.calls == 0  # every rollout came from the store
    assert second.rollout_store.replayed == a.rollouts_used
    assert [c.to_dict() for c in a.candidates] == [c.to_dict() for c in b.candidates]
    assert a.rollouts_used == b.rollouts_used


def test_snapshot_of_a_stored_run(tmp_path):
    store = RunStore(tmp_path / "s.sqlite")
    store.create_run("r", {"task": "sim", "budget": 120}, seed=0)
    task = sim.task()
    store.put_examples("r", "val", task.valset)
    engine = _engine(store, "r", budget=120, seed=1)
    engine.callbacks.append(lambda e: store.put_candidate("r", e.record) if isinstance(e, CandidateAdded) else None)
    result = gepetto.run_engine(engine)
    partial = run_snapshot(store, "r")  # unfinished: rebuilt from the stored candidates
    assert partial["result"]["best_score"] == result.best_score
    assert partial["result"]["pareto_front"] == result.pareto_front
    assert partial["result"]["rollouts_used"] == result.rollouts_used
    store.finish_run("r", "finished", result.to_dict())
    snap = run_snapshot(store, "r")
    assert snap["run"]["status"] == "finished"
    sample = snap["samples"][0]
    assert sample["seed"]["score"] == 0.0 and sample["best"]["score"] == 1.0
    assert "question" in sample["inputs"] and sample["gold"].startswith("answer-")


def test_examples_are_stored_with_the_run(tmp_path):
    store = RunStore(tmp_path / "s.sqlite")
    store.put_examples("r", "val", [Example({"q": "hi"}, gold={"a": 1}, id="e1")])
    assert store.examples("r", "val") == {"e1": {"inputs": {"q": "hi"}, "gold": {"a": 1}}}


def test_a_store_on_a_read_only_filesystem_is_read_as_immutable(tmp_path, monkeypatch):
    """Repro a16 (round 2): on a read-only filesystem SQLite cannot create the shared-memory file a WAL store needs,
    so even `runs` and `show` failed ("unable to open database file"); reading falls back to an immutable open."""
    import pytest

    from gepetto import db as dbmod

    task = sim.task(n_train=4, n_val=4)
    gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset, program=task.program,
                     task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(), budget=20,
                     storage=str(tmp_path / "s.sqlite"), run="r", progress=False)
    sqlite3.connect(tmp_path / "s.sqlite").execute("PRAGMA wal_checkpoint(TRUNCATE)")  # (as the last closer does)
    real, opened = sqlite3.connect, []

    class ReadOnlyFS:  # what a read-only mount does to a WAL file opened with mode=ro only
        def __init__(self, where, **kw):
            opened.append(where)
            self.db, self.immutable = real(where, **kw), "immutable=1" in where

        def execute(self, *args):
            if not self.immutable:
                raise sqlite3.OperationalError("unable to open database file")
            return self.db.execute(*args)

        def __getattr__(self, name):
            return getattr(self.db, name)

    monkeypatch.setattr(dbmod.sqlite3, "connect", ReadOnlyFS)
    store = RunStore(tmp_path / "s.sqlite", readonly=True)
    assert [r.name for r in store.list_runs()] == ["r"] and store.candidates("r")
    assert [u.rsplit("?", 1)[1] for u in opened] == ["mode=ro", "mode=ro&immutable=1"]
    def broken(where, **kw):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(dbmod.sqlite3, "connect", broken)
    with pytest.raises(Exception, match="disk I/O error"):  # another error is no reason to read it as immutable
        RunStore(tmp_path / "s.sqlite", readonly=True)
