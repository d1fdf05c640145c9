"""The run store on a real PostgreSQL server: the same API and results as SQLite, every command on a URL, resume after
SIGKILLs, one owner per run across machines, several processes writing one store, the response cache in the same
database, the DSPy and gepa-adapter integrations, and a password in the URL never written or shown.

The server is started by the tests (gepetto.testing.postgres: the PostgreSQL binaries of this machine, Debian's
package in CI). Without binaries or the `postgres` extra the tests skip, saying why; with GEPETTO_REQUIRE_POSTGRES=1
(set by .ci/run) they fail instead.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gepetto.cli import app
from gepetto.db import SCHEMA_NAME, StoreError, shown, sqlite_path
from gepetto.engine.state import CandidateRecord
from gepetto.lm.base import Completion, Usage
from gepetto.program import Rollout, TraceEntry
from gepetto.store.snapshot import run_snapshot
from gepetto.store.sqlite import RunInUse, RunStore
from gepetto.types import Candidate, Example, Score

ROOT = Path(__file__).resolve().parents[1]
KILL_RUN = ROOT / "tests" / "helpers" / "kill_run.py"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
SIM = ["--task", "sim", "--task-lm", "sim:task", "--reflection-lm", "sim:reflection"]


def _unavailable(why: str) -> None:
    if os.environ.get("GEPETTO_REQUIRE_POSTGRES"):
        pytest.fail(f"GEPETTO_REQUIRE_POSTGRES is set and no PostgreSQL server can be started: {why}")
    pytest.skip(f"no PostgreSQL server can be started here: {why}")


@pytest.fixture(scope="session")
def pg():
    try:
        import psycopg  # noqa: F401
        import sqlalchemy  # noqa: F401
    except ImportError as exc:
        _unavailable(f"the postgres extra is not installed ({exc}): pip install -e '.[postgres]'")
    from gepetto.testing.postgres import PostgresServer, ServerUnavailable

    server = PostgresServer()
    try:
        server.start()
    except ServerUnavailable as exc:
        _unavailable(str(exc))
    yield server
    server.stop()


_numbers = itertools.count()


@pytest.fixture
def url(pg):
    """A fresh database of the test server, as a URL with the login's password."""
    return pg.create_database(f"t{next(_numbers)}")


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    outputs: list[str] = []

    def invoke(*args, input=None):
        res = runner.invoke(app, [str(a) for a in args], catch_exceptions=False, input=input)
        outputs.append(res.output)
        return res

    invoke.outputs = outputs
    return invoke


def _tables(url: str) -> dict[str, list[tuple]]:
    """Every row of every table of the store, as the database holds it."""
    import psycopg

    plain = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain) as conn:
        names = [r[0] for r in conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema=%s",
                                            (SCHEMA_NAME,))]
        return {n: list(conn.execute(f"SELECT * FROM {SCHEMA_NAME}.{n}")) for n in names}


# ---- storage values ----------------------------------------------------------------------------------------
def test_storage_values_name_a_file_or_a_database():
    assert sqlite_path("gepetto.sqlite") == Path("gepetto.sqlite")
    assert sqlite_path(Path("/x/y.sqlite")) == Path("/x/y.sqlite")
    assert sqlite_path("sqlite:///runs/a.db") == Path("runs/a.db")  # optuna's and SQLAlchemy's spelling
    assert sqlite_path("sqlite:////abs/a.db") == Path("/abs/a.db")
    assert sqlite_path("postgresql://u@h/db") is None and sqlite_path("postgresql+psycopg://u@h/db") is None
    with pytest.raises(StoreError, match=r"SQLite file path .* or a PostgreSQL URL") as other:
        sqlite_path("mysql://u:secret-pw@h/db")
    assert "secret-pw" not in str(other.value)
    with pytest.raises(StoreError, match="names a file"):
        sqlite_path("sqlite://")
    assert shown("postgresql://ann:s3cret-pw@db.example:5432/runs?sslmode=require&password=x9") == \
        "postgresql://ann@db.example:5432/runs?sslmode=require"


def test_a_sqlite_url_opens_the_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = RunStore("sqlite:///a.sqlite")
    store.create_run("r", {"task": "sim"}, seed=0)
    assert store.dialect == "sqlite" and RunStore(tmp_path / "a.sqlite").get_run("r") is not None


# ---- the same store API, the same answers ------------------------------------------------------------------
def _exercise(store: RunStore) -> dict:
    """The store's API on one small run; what it gives back, without the clock."""
    store.create_run("r", {"budget": 10, "task": "sim"}, seed=3)
    store.create_run("other", {"task": "sim"}, seed=4)
    cand = Candidate(instruction="Be brief.")
    rollout = Rollout("ex-1", Score(0.5, "half right\x00", {"f1": 0.7}, "answered x, expected y"), {"answer": "x"},
                      [TraceEntry("instruction", "in <b>", "out", "stop")], None)
    store.put_rollout("r", cand, "ex-1", rollout)
    store.put_rollout("r", cand, "ex-1", rollout)  # a replay writes nothing new
    odd = type("Odd", (), {"__repr__": lambda self: "<odd output>"})()  # not JSON: kept as its repr
    store.put_rollout("r", cand, "ex-0", Rollout("ex-0", Score(0.0, "boom"), odd, [], "ValueError: boom", "metric"))
    store.put_examples("r", "val", [Example({"q": f"q{i}"}, f"g{i}", id=f"e{9 - i}") for i in range(4)])
    rec = CandidateRecord(index=0, candidate=cand, parents=(), origin="seed", iteration=0, component=None,
                          val_scores={"e9": 0.5, "e8": 0.0}, rollouts_at_creation=2)
    store.put_candidate("r", rec)
    store.put_candidate("r", CandidateRecord(**{**rec.__dict__, "val_scores": {"e9": 1.0, "e8": 0.0}}))  # replaced
    for i in (3, 1, 2):
        store.put_lm_answer("r", f"k{i}", Completion(f"answer {i}", Usage(10, i)), messages=[{"role": "user",
                                                                                             "content": f"q{i}"}])
    store.put_lm_answer("r", "bad", None, TimeoutError("too slow"))
    store.add_event("r", "start", {"session": 0})
    store.add_event("r", "done", {"session": 0})
    store.save_ledger("r", {"task": {"calls": 3}})
    store.finish_run("r", "finished", {"best_score": 0.5})
    store.delete_run("other")
    rollouts = {f"{c}/{e}": (r.score.value, r.score.feedback, r.score.objectives, r.score.pattern, r.output,
                             [t.to_dict() for t in r.trace], r.error, r.stage)
                for (c, e), r in sorted(store.rollouts("r").items())}
    info = store.get_run("r")
    return {"runs": [(i.name, i.status, i.seed, i.config, i.result, i.pid) for i in store.list_runs()],
            "alive": info.alive, "count": store.count_rollouts("r"), "rollouts": rollouts,
            "examples": store.examples("r", "val"), "candidates": store.candidates("r"),
            "exchanges": store.lm_exchanges("r"), "answer": store.lm_answer("r", "k1"),
            "error": str(store.lm_answer("r", "bad")), "ledger": store.ledger("r"),
            "events": [(e["kind"], e["data"]) for e in store.events("r")], "starts": len(store.events("r", "start"))}


def test_postgres_gives_what_sqlite_gives(url, tmp_path):
    on_sqlite = _exercise(RunStore(tmp_path / "s.sqlite"))
    on_postgres = _exercise(RunStore(url))
    feedback = on_postgres["rollouts"][f"{Candidate(instruction='Be brief.').id}/ex-1"][1]
    assert feedback == "half right\ufffd"  # PostgreSQL's text holds no NUL: it is kept as U+FFFD
    on_postgres["rollouts"] = {k: (v[0], v[1].replace("\ufffd", "\x00"), *v[2:])
                               for k, v in on_postgres["rollouts"].items()}
    assert on_postgres == on_sqlite
    assert list(on_postgres["examples"]) == ["e9", "e8", "e7", "e6"]  # in the order given, not by key
    assert list(on_postgres["exchanges"]) == ["k3", "k1", "k2", "bad"]  # in the order first asked
    # the tables live in the schema gepetto: a database shared with other tools (MLflow has a `runs` table) is fine
    assert {"runs", "evaluations", "lm_answers", "events", "examples", "candidates"} <= set(_tables(url))


def test_the_spellings_of_a_postgresql_url_open_one_store(pg, url):
    RunStore(url).create_run("r", {"task": "sim"}, seed=0)
    for spelling in ("postgres://", "postgresql+psycopg://"):
        store = RunStore(url.replace("postgresql://", spelling), readonly=True)
        assert [r.name for r in store.list_runs()] == ["r"] and pg.password not in str(store.path)
    with pytest.raises(StoreError, match="not a usable database URL") as other_driver:
        RunStore(url.replace("postgresql://", "postgresql+nodriver://"))
    assert pg.password not in str(other_driver.value)


def test_a_readonly_store_reads_and_writes_nothing(url, pg):
    with pytest.raises(StoreError, match=r"no run store at postgresql://gepetto@127\.0\.0\.1"):
        RunStore(url, readonly=True)  # no tables yet: nothing is created
    assert _tables(url) == {}
    RunStore(url).create_run("r", {"task": "sim"}, seed=0)
    reader = RunStore(url, readonly=True)
    assert reader.get_run("r").status == "running"
    with pytest.raises(StoreError, match="opened for reading only"):
        reader.add_event("r", "x", {})


def test_errors_say_where_and_never_show_the_password(pg, url):
    wrong = url.replace(pg.password, "not-the-password-9")
    with pytest.raises(StoreError) as refused:
        RunStore(wrong)
    assert "refused the login" in str(refused.value) and "not-the-password-9" not in str(refused.value)
    with pytest.raises(StoreError, match=r"no database for the run store .*createdb") as missing:
        RunStore(pg.url("nowhere"))
    assert pg.password not in str(missing.value)
    closed = f"postgresql://gepetto:{pg.password}@127.0.0.1:1/x"
    with pytest.raises(StoreError, match="cannot reach the database") as away:
        RunStore(closed)
    assert pg.password not in str(away.value)


def test_a_user_given_rights_on_the_tables_needs_no_right_to_create(pg, url):
    RunStore(url).create_run("r", {"task": "sim"}, seed=0)  # the owner creates the tables once
    db = url.rsplit("/", 1)[1]
    pg.superuser(f"CREATE ROLE bob LOGIN PASSWORD 'bob-pw-2' NOINHERIT; REVOKE CREATE ON DATABASE {db} FROM PUBLIC")
    pg.superuser("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    with pytest.raises(StoreError, match="this database user lacks privileges on the run store"):
        RunStore(f"postgresql://bob:bob-pw-2@127.0.0.1:{pg.port}/{db}").list_runs()
    import psycopg

    with psycopg.connect(url) as conn:  # what a team's database owner grants
        conn.execute(f"GRANT USAGE ON SCHEMA {SCHEMA_NAME} TO bob")
        conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {SCHEMA_NAME} TO bob")
        conn.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {SCHEMA_NAME} TO bob")
    bob = RunStore(f"postgresql://bob:bob-pw-2@127.0.0.1:{pg.port}/{db}")
    bob.create_run("b", {"task": "sim"}, seed=1)
    assert {r.name for r in bob.list_runs()} == {"r", "b"}


def test_a_dropped_connection_costs_no_run(pg, url):
    store = RunStore(url)
    store.create_run("r", {"task": "sim"}, seed=0)
    store.add_event("r", "start", {})
    pg.superuser(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{pg.user}'")
    store.add_event("r", "done", {})  # a new connection, checked before use
    assert [e["kind"] for e in store.events("r")] == ["start", "done"]


# ---- every command on a URL ----------------------------------------------------------------------------------
def test_every_command_on_a_postgres_store_gives_what_sqlite_gives(cli, pg, url, tmp_path):
    def best(storage):
        return json.loads(cli("export", "r1", "--storage", storage).output)

    def line(out):
        return next(x for x in out.splitlines() if x.startswith("validation:")).split("; wall time")[0]

    on_sqlite = cli("optimize", *SIM, "--budget", 80, "--run", "r1", "--storage", "runs.sqlite", "-q")
    done = cli("optimize", *SIM, "--budget", 80, "--run", "r1", "--storage", url, "-q")
    assert done.exit_code == 0, done.output
    assert line(done.output) == line(on_sqlite.output) and best(url) == best("runs.sqlite")
    runs = cli("runs", "--storage", url)
    assert runs.exit_code == 0 and "r1" in runs.output and "finished" in runs.output
    show = cli("show", "r1", "--storage", url)
    assert show.exit_code == 0 and "Pareto front" in show.output and "reflection" in show.output
    # resume: a finished run replays without paying; more budget goes on
    before = cli("export", "r1", "--rollouts", "--storage", url).output
    again = cli("optimize", "--run", "r1", "--storage", url, "-q")
    assert again.exit_code == 0 and line(again.output) == line(done.output)
    assert cli("export", "r1", "--rollouts", "--storage", url).output == before
    more = cli("optimize", "--run", "r1", "--storage", url, "--budget", 140, "-q")
    assert more.exit_code == 0 and "/140 rollouts" in more.output
    # evaluate keeps the test score with the run; the response cache is in the same database
    ev = cli("evaluate", "r1", "--storage", url)
    assert ev.exit_code == 0, ev.output
    assert "test (12 examples): seed 0.000 -> best 1.000" in cli("show", "r1", "--storage", url).output
    assert len(_tables(url)["lm_cache"]) > 0
    rep = cli("report", "r1", "-o", tmp_path / "r1.html", "--storage", url)
    assert rep.exit_code == 0, rep.output
    html = (tmp_path / "r1.html").read_text()
    assert "Reflection transcripts" in html and "test score" in html
    rows = cli("export", "r1", "--rollouts", "-o", "rollouts.csv", "--storage", url)
    assert rows.exit_code == 0 and len(Path("rollouts.csv").read_text().splitlines()) > 100
    assert cli("optimize", *SIM, "--reflection-lm", "sim:reflection?max_rules=2", "--budget", 60, "--run", "r2",
               "--storage", url, "-q").exit_code == 0
    compared = cli("compare", "r1", "r2", "-o", "compare.html", "--storage", url)
    assert compared.exit_code == 0 and "options that differ" in compared.output
    check = cli("check", "--run", "r1", "--storage", url)
    assert "exists in postgresql://gepetto@127.0.0.1" in check.output
    kept = cli("delete", "r2", "--storage", url, input="n\n")
    assert kept.exit_code == 1 and RunStore(url).get_run("r2") is not None
    assert cli("delete", "r2", "--yes", "--storage", url).exit_code == 0
    assert RunStore(url).get_run("r2") is None and not RunStore(url).events("r2")
    assert cli("show", "r2", "--storage", url).exit_code == 2
    # the password was used and never written or shown: not in any table, output or report
    everything = json.dumps(_tables(url), default=str)
    assert pg.password not in everything and pg.password not in html
    assert not [out for out in cli.outputs if pg.password in out]
    assert "postgresql://gepetto@127.0.0.1" in cli("show", "nope", "--storage", url).output


def test_the_storage_environment_variable_and_an_empty_database(cli, url, monkeypatch):
    monkeypatch.setenv("GEPETTO_STORAGE", url)
    empty = cli("runs")
    assert empty.exit_code == 0 and "no runs in postgresql://gepetto@127.0.0.1" in empty.output
    assert cli("show", "x").exit_code == 2
    assert cli("optimize", *SIM, "--budget", 30, "--run", "e", "-q").exit_code == 0
    assert "e" in cli("runs").output


# ---- resume after SIGKILLs -----------------------------------------------------------------------------------
def _kill_run(storage, when, per_round=3):
    return subprocess.run([sys.executable, str(KILL_RUN), str(storage), "r", str(when), str(per_round)],
                          capture_output=True, text=True, timeout=300, env=ENV)


def _final(storage):
    res = run_snapshot(RunStore(storage), "r")["result"]
    keep = ("best_candidate", "best_score", "seed_score", "candidates", "pareto_front", "rollouts_used",
            "stop_reason", "iterations", "history", "proposals")
    return {k: res[k] for k in keep}


def test_a_run_killed_in_every_phase_resumes_to_what_an_uninterrupted_run_gives(url, tmp_path):
    whole = _kill_run(tmp_path / "whole.sqlite", "never")
    assert whole.returncode == 0, whole.stderr
    for when in ["validation/seed:1:5", "reflection:4:0", "tx:put_rollout:30", "validation/reflection:3:4",
                 "validation/merge:1:3"]:
        killed = _kill_run(url, when)
        assert killed.returncode == -9, (when, killed.stderr)
        assert RunStore(url).get_run("r").shown_status == "stopped (killed?)"
    final = _kill_run(url, "never")
    assert final.returncode == 0, final.stderr
    assert _final(url) == _final(tmp_path / "whole.sqlite")
    assert _final(url)["rollouts_used"] == RunStore(url).count_rollouts("r")  # nothing paid twice


# ---- one owner per run, across machines ----------------------------------------------------------------------
def _claimed_elsewhere(url, *, pid=4242, host="build-7", age=0.0):
    """Make run `r` look claimed by process `pid` on another machine that beat `age` seconds ago."""
    import psycopg

    with psycopg.connect(url) as conn:
        conn.execute(f"UPDATE {SCHEMA_NAME}.runs SET status='running', pid=%s, pid_started=1, host=%s, host_id=%s, "
                     "heartbeat=EXTRACT(EPOCH FROM clock_timestamp()) - %s WHERE name='r'",
                     (pid, host, f"{host}/boot", age))


def test_a_run_running_on_another_machine_is_refused_with_its_host_and_pid(cli, url):
    assert cli("optimize", *SIM, "--budget", 40, "--run", "r", "--storage", url, "-q").exit_code == 0
    _claimed_elsewhere(url)
    refused = cli("optimize", "--run", "r", "--storage", url, "--budget", 60, "-q")
    assert refused.exit_code == 2
    assert "run 'r' is running in process 4242 on build-7" in refused.output
    info = RunStore(url).get_run("r")
    assert info.alive and info.remote and info.owner == "4242 on build-7"
    with pytest.raises(RunInUse, match="process 4242 on build-7"):
        RunStore(url).claim_run("r")
    gone = cli("delete", "r", "--yes", "--storage", url)
    assert gone.exit_code == 2 and "4242 on build-7" in gone.output
    assert "running" in cli("runs", "--storage", url).output
    # a machine that has not beaten for longer than the grace period is gone: its run is taken over and resumed
    _claimed_elsewhere(url, age=3600)
    assert RunStore(url).get_run("r").shown_status == "stopped (killed?)"
    resumed = cli("optimize", "--run", "r", "--storage", url, "--budget", 60, "-q")
    assert resumed.exit_code == 0, resumed.output
    info = RunStore(url).get_run("r")
    assert info.status == "finished" and not info.remote


def test_a_process_that_lost_its_run_stops_and_leaves_it_to_the_new_owner(url, monkeypatch):
    from gepetto.runner import _with_owner_check
    from gepetto.store import sqlite as store_module

    monkeypatch.setattr(store_module, "HEARTBEAT_SECONDS", 0.05)
    store = RunStore(url)
    store.create_run("r", {"task": "sim"}, seed=0)
    stop = _with_owner_check(None, store, "r")[0]
    told = []
    store.watch_ownership("r", lambda: told.append("lost"))  # (what the engine's stop is armed with)
    first = _tables(url)["runs"][0]
    waited = time.monotonic()
    while _tables(url)["runs"][0] == first and time.monotonic() - waited < 120:  # it beats
        time.sleep(0.05)
    assert _tables(url)["runs"][0] != first
    assert store.owns("r") and stop(None) is None
    with pytest.warns(RuntimeWarning, match="taken over by another process"):
        _claimed_elsewhere(url)  # another machine took the run over (this process was silent too long)
        waited = time.monotonic()
        while not told and time.monotonic() - waited < 120:  # (the heartbeat's thread warns, then tells)
            time.sleep(0.05)
    assert not store.owns("r") and stop(None) == "run 'r' was taken over by another process" and told == ["lost"]
    # this process writes nothing more for the run; the new owner's row is left alone
    store.add_event("r", "late", {})
    store.save_ledger("r", {"task": {"calls": 99}})
    store.put_rollout("r", Candidate(instruction="x"), "e", Rollout("e", Score(1.0, "ok")))
    store.finish_run("r", "interrupted", None)
    info, reader = RunStore(url).get_run("r"), RunStore(url)
    assert (info.status, info.pid, info.host) == ("running", 4242, "build-7")
    assert not reader.events("r", "late") and reader.ledger("r") == {} and reader.count_rollouts("r") == 0


def test_a_run_taken_over_while_it_runs_stops_at_once(url, monkeypatch):
    import asyncio

    from gepetto.config import load_config
    from gepetto.runner import open_run
    from gepetto.store import sqlite as store_module

    monkeypatch.setattr(store_module, "HEARTBEAT_SECONDS", 0.05)
    cfg = load_config(task="sim", task_lm="sim:task?latency=0.05", reflection_lm="sim:reflection", budget=400,
                      max_concurrency=2)
    stored = open_run(cfg, storage=url, run="r")

    async def take_over_after_the_first_rollouts():
        while stored.store.count_rollouts("r") < 3:
            await asyncio.sleep(0.05)
        await asyncio.to_thread(_claimed_elsewhere, url)

    async def both():
        taker = asyncio.create_task(take_over_after_the_first_rollouts())
        result = await stored.run_async()
        await taker
        return result

    with pytest.warns(RuntimeWarning, match="taken over"):
        result = asyncio.run(both())
    assert result.stop_message == "run 'r' was taken over by another process" and result.rollouts_used < 100
    info = RunStore(url).get_run("r")
    assert (info.status, info.pid, info.host) == ("running", 4242, "build-7")  # left to the new owner
    assert not RunStore(url).events("r", "done")


def test_the_same_run_on_this_machine_in_a_live_process_is_refused(url):
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from gepetto.store.sqlite import RunStore\n"
        "s = RunStore(sys.argv[1]); s.create_run('r', {'task': 'sim'}, seed=0); print('claimed', flush=True)\n"
        "sys.stdin.readline()\n"), url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=ENV)
    try:
        assert holder.stdout.readline().strip() == "claimed"
        with pytest.raises(RunInUse, match=rf"process {holder.pid}: wait"):  # (no host: this machine)
            RunStore(url).claim_run("r")
    finally:
        holder.communicate("\n", timeout=60)
    RunStore(url).claim_run("r")  # its process has ended: taken over


# ---- several processes, one store ------------------------------------------------------------------------------
def _optimize_process(storage, run, budget=80, reflection="sim:reflection"):
    return subprocess.Popen([sys.executable, "-c", "from gepetto.cli import main; main()", "optimize", "--task", "sim",
                             "--task-lm", "sim:task?latency=0.003", "--reflection-lm", reflection, "--budget",
                             str(budget), "--run", run, "--storage", str(storage), "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ENV)


def _result(storage, run):
    res = run_snapshot(RunStore(storage, readonly=True), run, transcripts=False)["result"]
    return {k: res[k] for k in ("best_candidate", "best_score", "candidates", "rollouts_used", "history")}


def test_three_processes_write_one_store_at_once_and_two_race_for_one_run(url, tmp_path):
    runs = {"a": "sim:reflection", "b": "sim:reflection?max_rules=2", "c": "sim:reflection?noise=0.3&seed=2"}
    procs = {name: _optimize_process(url, name, reflection=r) for name, r in runs.items()}
    racers = [_optimize_process(url, "same") for _ in range(2)]
    outs = {name: p.communicate(timeout=600) for name, p in procs.items()}
    raced = [p.communicate(timeout=600) for p in racers]
    assert all(p.returncode == 0 for p in procs.values()), outs
    # each run's result is the one it gives alone on SQLite: the runs beside it changed nothing
    for name, reflection in runs.items():
        alone = _optimize_process(tmp_path / "alone.sqlite", name, reflection=reflection)
        assert alone.wait(timeout=600) == 0
        assert _result(url, name) == _result(tmp_path / "alone.sqlite", name)
    # the race for one run: the second either is refused while the first runs, or replays the finished run
    codes = sorted(p.returncode for p in racers)
    assert codes in ([0, 0], [0, 2]), raced
    if codes == [0, 2]:
        assert "run 'same' is running in process" in "".join(err for _, err in raced)
    store = RunStore(url, readonly=True)
    assert store.count_rollouts("same") == _result(url, "same")["rollouts_used"]  # nothing written twice
    assert store.get_run("same").status == "finished"
    assert _result(url, "same") == _result(url, "a")  # the same configuration as run a
    starts = {name: store.events(name, "start")[0]["time"] for name in runs}
    dones = {name: store.events(name, "done")[-1]["time"] for name in runs}
    overlap = min(dones.values()) - max(starts.values())
    print(f"the three runs ran together for {overlap:.2f} s")  # (shown with -s; not asserted: speed varies)


# ---- the integrations ----------------------------------------------------------------------------------------
def test_the_gepa_adapter_resumes_from_a_postgres_store(url):
    from test_gepa_adapter import run_triage

    first, adapter, _ = run_triage(storage=url, run="triage")
    again, adapter2, _ = run_triage(storage=url, run="triage")
    assert adapter.calls and adapter2.calls == []  # every rollout came back from the store
    assert again.best_candidate == first.best_candidate
    from gepetto.report import render_report

    assert "Dear customer, thanks" in render_report(run_snapshot(RunStore(url, readonly=True), "triage"))


def test_dspy_programs_store_and_resume_on_postgres(url):
    dspy = pytest.importorskip("dspy")
    from test_dspy import _optimize, ex

    calls = []
    inner = ex._ScriptedEngine()

    class Counting:
        def complete(self, request):
            calls.append(request)
            return inner.complete(request)

        def stream(self, request):
            raise NotImplementedError

        def close(self):
            pass

    lm = dspy.LM("scripted/counting", engine=Counting(), cache=False)
    _, first = _optimize(lm=lm, budget=25, storage=url, run="cc")
    info = RunStore(url).get_run("cc")
    assert info.config["task"] == "python:dspy_program:CityCountry" and info.status == "finished" and calls
    paid = len(calls)
    _, again = _optimize(lm=lm, budget=25, storage=url, run="cc")  # replayed from the store: DSPy's LM is not called
    assert len(calls) == paid and again.best_candidate == first.best_candidate
