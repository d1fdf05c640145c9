"""The run store: runs, candidates, evaluations and an append-only event log in one SQLite file (WAL), or in a
PostgreSQL database that several machines and runs share (gepetto.db says how a storage is opened).

Every finished rollout is committed as soon as it finishes, so a killed run loses only what was in flight.
Resuming replays the run over its stored rollouts and reflection answers (see engine/loop.py), which takes
exactly the same path as the first time. State is JSON and SQL: nothing stored is ever unpickled or
executed. Every text written is redacted first (gepetto.secrets), and a new store file is readable by its
owner only (0600; SQLite gives its -wal and -shm files the same mode).

One live process runs a run (`claim_run`). On one machine that is its pid and start time; a run in a PostgreSQL
store may run on another machine, whose process is alive while it beats (`HEARTBEAT_SECONDS`, on the database
server's clock) and taken to be dead when it has not for `GRACE_SECONDS`.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gepetto.db import (
    Database,
    PostgresDatabase,
    SQLiteDatabase,
    StoreError,
    host_identity,
    open_database,
    shown,
    sqlite_path,
)
from gepetto.engine.state import CandidateRecord
from gepetto.lm.base import LM, Completion, LMError, LMUnavailable, Message, Usage
from gepetto.lm.cache import cache_key
from gepetto.program import Rollout, TraceEntry
from gepetto.secrets import redact, redact_data
from gepetto.types import Candidate, Example, Score, portable

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    name TEXT PRIMARY KEY,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    status TEXT NOT NULL,
    seed INTEGER NOT NULL,
    config TEXT NOT NULL,
    pid INTEGER,
    result TEXT,
    ledger TEXT,
    pid_started REAL
);
CREATE TABLE IF NOT EXISTS candidates (
    run TEXT NOT NULL,
    idx INTEGER NOT NULL,
    id TEXT NOT NULL,
    texts TEXT NOT NULL,
    parents TEXT NOT NULL,
    origin TEXT NOT NULL,
    iteration INTEGER NOT NULL,
    component TEXT,
    mean REAL NOT NULL,
    val_scores TEXT NOT NULL,
    rollouts_at_creation INTEGER NOT NULL,
    PRIMARY KEY (run, idx)
);
CREATE TABLE IF NOT EXISTS evaluations (
    run TEXT NOT NULL,
    candidate_id TEXT NOT NULL,
    example_id TEXT NOT NULL,
    score REAL NOT NULL,
    feedback TEXT NOT NULL,
    objectives TEXT NOT NULL,
    output TEXT,
    trace TEXT NOT NULL,
    error TEXT,
    texts TEXT,
    pattern TEXT NOT NULL DEFAULT '',
    stage TEXT,
    PRIMARY KEY (run, candidate_id, example_id)
);
CREATE TABLE IF NOT EXISTS examples (
    run TEXT NOT NULL,
    id TEXT NOT NULL,
    split TEXT NOT NULL,
    inputs TEXT NOT NULL,
    gold TEXT,
    PRIMARY KEY (run, id, split)
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY,
    run TEXT NOT NULL,
    time REAL NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_run ON events (run, seq);
CREATE TABLE IF NOT EXISTS lm_answers (
    run TEXT NOT NULL,
    key TEXT NOT NULL,
    text TEXT NOT NULL,
    finish_reason TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    estimated INTEGER NOT NULL,
    error_type TEXT,
    messages TEXT,
    PRIMARY KEY (run, key)
);
"""

# The same tables in PostgreSQL (schema gepetto): floats in double precision, `seq` columns for the insertion order
# SQLite's rowid gives, and the owner's machine and heartbeat in `runs`.
PG_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS runs (name TEXT PRIMARY KEY, created DOUBLE PRECISION NOT NULL,
       updated DOUBLE PRECISION NOT NULL, status TEXT NOT NULL, seed BIGINT NOT NULL, config TEXT NOT NULL,
       pid BIGINT, result TEXT, ledger TEXT, pid_started DOUBLE PRECISION, host TEXT, host_id TEXT,
       heartbeat DOUBLE PRECISION)""",
    """CREATE TABLE IF NOT EXISTS candidates (run TEXT NOT NULL, idx INTEGER NOT NULL, id TEXT NOT NULL,
       texts TEXT NOT NULL, parents TEXT NOT NULL, origin TEXT NOT NULL, iteration INTEGER NOT NULL, component TEXT,
       mean DOUBLE PRECISION NOT NULL, val_scores TEXT NOT NULL, rollouts_at_creation BIGINT NOT NULL,
       PRIMARY KEY (run, idx))""",
    """CREATE TABLE IF NOT EXISTS evaluations (run TEXT NOT NULL, candidate_id TEXT NOT NULL, example_id TEXT NOT NULL,
       score DOUBLE PRECISION NOT NULL, feedback TEXT NOT NULL, objectives TEXT NOT NULL, output TEXT,
       trace TEXT NOT NULL, error TEXT, texts TEXT, pattern TEXT NOT NULL DEFAULT '', stage TEXT,
       seq BIGSERIAL, PRIMARY KEY (run, candidate_id, example_id))""",
    """CREATE TABLE IF NOT EXISTS examples (run TEXT NOT NULL, id TEXT NOT NULL, split TEXT NOT NULL,
       inputs TEXT NOT NULL, gold TEXT, seq BIGSERIAL, PRIMARY KEY (run, id, split))""",
    """CREATE TABLE IF NOT EXISTS events (seq BIGSERIAL PRIMARY KEY, run TEXT NOT NULL, time DOUBLE PRECISION NOT NULL,
       kind TEXT NOT NULL, data TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS events_run ON events (run, seq)",
    """CREATE TABLE IF NOT EXISTS lm_answers (run TEXT NOT NULL, key TEXT NOT NULL, text TEXT NOT NULL,
       finish_reason TEXT NOT NULL, input_tokens BIGINT NOT NULL, output_tokens BIGINT NOT NULL,
       estimated INTEGER NOT NULL, error_type TEXT, messages TEXT, seq BIGSERIAL, PRIMARY KEY (run, key))""",
]
# the key of each table, for PostgreSQL's upserts (SQLite's INSERT OR REPLACE / OR IGNORE)
_KEYS = {"examples": ("run", "id", "split"), "candidates": ("run", "idx"),
         "evaluations": ("run", "candidate_id", "example_id"), "lm_answers": ("run", "key")}
HEARTBEAT_SECONDS = 15.0  # how often the owner of a run in a PostgreSQL store says it is alive
GRACE_SECONDS = 90.0  # a run on another machine whose owner has not said so for this long is taken to be dead


def process_started(pid: int) -> float | None:
    """When process `pid` started (clock ticks since boot, from /proc), or None where that cannot be read: with the
    pid, it names a process for good (a pid is reused once its process has died)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return float(stat[stat.rindex(b")") + 2:].split()[19])  # field 22, counted after the command name
    except (OSError, ValueError, IndexError):
        return None


def owner_alive(pid: int | None, started: float | None, host_id: str | None = None, beat_age: float | None = None
                ) -> bool:
    """Whether the process that claimed a run lives: on this machine (or a store that keeps no machine), by its pid
    and start time; on another, by a heartbeat younger than GRACE_SECONDS."""
    if host_id is None or host_id == HOST_ID:
        return process_alive(pid, started)
    return beat_age is not None and beat_age < GRACE_SECONDS


def process_alive(pid: int | None, started: float | None = None) -> bool:
    """Whether process `pid` exists, and is the one that started at `started` (when both are known)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:  # it exists, under another user
        pass
    except OSError:
        return False
    now = process_started(pid) if started is not None else None
    return started is None or now is None or now == started


_ME = (os.getpid(), process_started(os.getpid()))
HOST, HOST_ID = host_identity()


def _me() -> tuple[int, float | None]:
    """This process's pid and start time (a forked child is another process)."""
    global _ME
    if _ME[0] != os.getpid():
        _ME = (os.getpid(), process_started(os.getpid()))
    return _ME


@dataclass
class RunInfo:
    """One row of the runs table, with the final result when the run ended."""

    name: str
    created: float
    updated: float
    status: str
    seed: int
    config: dict[str, Any]
    pid: int | None
    result: dict[str, Any] | None
    pid_started: float | None = None
    host: str | None = None  # the machine of the process that runs it (a PostgreSQL store; None: this one)
    host_id: str | None = None
    beat_age: float | None = None  # seconds since that process last said it was alive (a PostgreSQL store)

    @property
    def alive(self) -> bool:
        """Whether the process that runs it still exists (a killed run stays 'running' in the table)."""
        return self.status == "running" and owner_alive(self.pid, self.pid_started, self.host_id, self.beat_age)

    @property
    def remote(self) -> bool:
        """Whether the process that runs (or ran) it is on another machine."""
        return self.host_id is not None and self.host_id != HOST_ID

    @property
    def owned_elsewhere(self) -> bool:
        """Whether another live process runs it now (this one may not)."""
        return self.alive and (self.pid != os.getpid() or self.remote)

    @property
    def owner(self) -> str:
        """The process that runs it, as messages name it: its pid, and its machine when that is another."""
        return f"{self.pid} on {self.host}" if self.remote else str(self.pid)

    @property
    def shown_status(self) -> str:
        return "stopped (killed?)" if self.status == "running" and not self.alive else self.status


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (set, tuple)):
        return redact_data(list(obj))
    if hasattr(obj, "to_dict"):
        return redact_data(obj.to_dict())
    return redact(repr(obj))


def dumps(obj: Any) -> str:
    """JSON with every string redacted: what goes to disk never holds a secret."""
    return json.dumps(redact_data(obj), ensure_ascii=False, default=_json_default)


class RunInUse(StoreError):
    """The run is being run by another live process: two processes on one run would pay twice and mix their
    pools, so the second is refused."""


def run_in_use(name: str, pid: int | None, host: str | None = None) -> RunInUse:
    where = f"process {pid}" + (f" on {host}" if host else "")
    return RunInUse(f"run {name!r} is running in {where}: wait for it to end, stop it (Ctrl-C, SIGTERM or its "
                    "stop file), or give another run name")


def store_exists(storage: str | Path) -> bool:
    """Whether `storage` holds a run store already (a file; a database with the store's tables), so reading it
    creates nothing. A database that cannot be reached raises StoreError."""
    path = sqlite_path(storage)
    if path is not None:
        return path.exists()
    db = PostgresDatabase(str(storage), readonly=True)
    try:
        return db.has_table("runs")
    finally:
        db.close()


class RunStore:
    """A run store holding any number of runs: a SQLite file, or a PostgreSQL database given by URL
    (`postgresql://user@host/db`) that several processes and machines write at once. Safe to share between the
    event loop and worker threads.

    `readonly=True` opens an existing store for reading only (listing, showing, reports): it works on a file
    the user may not write. A store that cannot be used raises StoreError, saying where and why. `path` is where
    the store is as messages show it (a URL without its password); `storage` is what it was opened with.
    """

    def __init__(self, path: str | Path, *, readonly: bool = False) -> None:
        self.storage = path
        self.path: Path | str = sqlite_path(path) or shown(path)
        self._db: Database = open_database(path, readonly=readonly)
        self.dialect = self._db.dialect
        try:
            if isinstance(self._db, SQLiteDatabase):
                self._sqlite_schema(self._db, readonly)
            elif isinstance(self._db, PostgresDatabase):
                if readonly:
                    if not self._db.has_table("runs"):
                        raise StoreError(f"no run store at {self.path} (no gepetto tables in that database)")
                    self._db.check_access()
                else:
                    self._db.schema(PG_SCHEMA)
        except StoreError:
            with contextlib.suppress(Exception):
                self._db.close()
            raise
        self._beating: dict[str, threading.Event] = {}  # runs this process claimed, by name: stops its heartbeat
        self._lost: set[str] = set()  # runs another process took over from this one (a PostgreSQL store)
        self._saved_ledgers: dict[str, str] = {}
        self._watchers: dict[str, list[Callable[[], None]]] = {}  # called when a run is lost (watch_ownership)

    @staticmethod
    def _sqlite_schema(db: SQLiteDatabase, readonly: bool) -> None:
        if readonly:
            db.execute("SELECT name, status, config FROM runs LIMIT 1").fetchall()  # a run store?
            return
        db.executescript(SCHEMA)
        columns = db.columns("evaluations")
        if "pattern" not in columns:  # a store written before Score.pattern existed
            db.execute("ALTER TABLE evaluations ADD COLUMN pattern TEXT NOT NULL DEFAULT ''")
        if "stage" not in columns:  # a store written before rollouts kept the stage of their error
            db.execute("ALTER TABLE evaluations ADD COLUMN stage TEXT")
        if "messages" not in db.columns("lm_answers"):
            # a store written before reflection prompts were kept with their answers
            db.execute("ALTER TABLE lm_answers ADD COLUMN messages TEXT")
        if "pid_started" not in db.columns("runs"):
            db.execute("ALTER TABLE runs ADD COLUMN pid_started REAL")  # before runs had one owner

    @property
    def shared(self) -> bool:
        """Whether several machines may write this store (a database server): runs then beat (claim_run)."""
        return self.dialect == "postgresql"

    def close(self) -> None:
        for stop in self._beating.values():
            stop.set()
        self._beating.clear()
        self._db.close()

    @contextmanager
    def _tx(self, lock: str | None = None) -> Iterator[Database]:
        with self._db.transaction(lock) as db:
            yield db

    def _insert(self, table: str, columns: Sequence[str], conflict: str) -> str:
        """An INSERT of one row into `table` that replaces (`conflict` "replace") or keeps ("ignore") a row with
        the same key."""
        values = ",".join("?" * len(columns))
        if self.dialect == "sqlite":
            return f"INSERT OR {conflict.upper()} INTO {table} ({', '.join(columns)}) VALUES ({values})"
        key = _KEYS[table]
        if conflict == "ignore":
            action = "NOTHING"
        else:
            action = "UPDATE SET " + ", ".join(f"{c}=EXCLUDED.{c}" for c in columns if c not in key)
        return (f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({values}) ON CONFLICT ({', '.join(key)}) "
                f"DO {action}")

    @property
    def _order(self) -> str:
        """The column that orders a table's rows as they were inserted."""
        return "rowid" if self.dialect == "sqlite" else "seq"

    # ---- runs -------------------------------------------------------------------------------
    def claim_run(self, name: str, config: Mapping[str, Any] | None = None, seed: int = 0) -> None:
        """Make this process the one that runs `name`, in one transaction: create the run (`config` given: a new
        run), or take it over to resume it (None). Raises RunInUse while another live process runs it (on this
        machine, or one that beat within GRACE_SECONDS on another); the owner a killed process left behind is
        taken over. A run created meanwhile by another process is refused too. In a shared store this process
        then beats for the run until `finish_run`."""
        pid, started = _me()
        now = time.time()
        shared = self.shared
        owner_cols = ", host, host_id, EXTRACT(EPOCH FROM clock_timestamp()) - heartbeat" if shared else ""
        with self._tx(lock=f"run:{name}") as db:
            row = db.execute(f"SELECT status, pid, pid_started{owner_cols} FROM runs WHERE name=?", (name,)).fetchone()
            if row is not None:
                status, owner, owner_started = row[:3]
                host, host_id, age = row[3:] if shared else (None, None, None)
                mine = owner == pid and host_id in (None, HOST_ID)
                if status == "running" and not mine and owner_alive(owner, owner_started, host_id, age):
                    raise run_in_use(name, owner, host if host_id not in (None, HOST_ID) else None)
                if config is not None:
                    raise RunInUse(f"run {name!r} was created by another process meanwhile ({owner}); start again "
                                   "to resume it")
                if shared:
                    db.execute("UPDATE runs SET status='running', pid=?, pid_started=?, updated=?, host=?, host_id=?, "
                               "heartbeat=EXTRACT(EPOCH FROM clock_timestamp()) WHERE name=?",
                               (pid, started, now, HOST, HOST_ID, name))
                else:
                    db.execute("UPDATE runs SET status='running', pid=?, pid_started=?, updated=? WHERE name=?",
                               (pid, started, now, name))
            elif config is None:
                raise StoreError(f"run {name!r} is not in {self.path} any more (deleted meanwhile?)")
            elif shared:
                db.execute("INSERT INTO runs (name, created, updated, status, seed, config, pid, pid_started, host, "
                           "host_id, heartbeat) VALUES (?,?,?,?,?,?,?,?,?,?,EXTRACT(EPOCH FROM clock_timestamp()))",
                           (name, now, now, "running", seed, dumps(dict(config)), pid, started, HOST, HOST_ID))
            else:
                db.execute("INSERT INTO runs (name, created, updated, status, seed, config, pid, pid_started) "
                           "VALUES (?,?,?,?,?,?,?,?)",
                           (name, now, now, "running", seed, dumps(dict(config)), pid, started))
        self._saved_ledgers.pop(name, None)
        if shared:
            self._start_beating(name)

    def _start_beating(self, name: str) -> None:
        self._lost.discard(name)
        if name in self._beating:
            return
        stop = self._beating[name] = threading.Event()
        threading.Thread(target=self._beat, args=(name, stop), name=f"gepetto-heartbeat-{name}", daemon=True).start()

    def _beat(self, name: str, stop: threading.Event) -> None:
        """Say every HEARTBEAT_SECONDS that this process still runs `name`, until told to stop; a run another
        process has taken over meanwhile (this one was silent for longer than GRACE_SECONDS) is lost: `owns` says
        so and the runner stops."""
        pid, _ = _me()
        while not stop.wait(HEARTBEAT_SECONDS):
            try:
                with self._tx() as db:
                    beat = db.execute("UPDATE runs SET heartbeat=EXTRACT(EPOCH FROM clock_timestamp()) WHERE name=? "
                                      "AND pid=? AND host_id=? AND status='running'", (name, pid, HOST_ID))
            except Exception:  # the server is away for a moment: the next beat tries again
                continue
            if beat.rowcount == 0:
                self._lost.add(name)
                why = (f"was taken over by another process (this one was not heard from for {GRACE_SECONDS:.0f} s)"
                       if self._db.execute("SELECT 1 FROM runs WHERE name=?", (name,)) else "was deleted")
                warnings.warn(f"run {name!r} {why}: this process stops running it", RuntimeWarning, stacklevel=1)
                for lost in list(self._watchers.get(name, [])):
                    lost()
                return

    def owns(self, name: str) -> bool:
        """False once another process has taken `name` over from this one (a shared store; see `_beat`): this
        process then writes nothing more for it."""
        return name not in self._lost

    def watch_ownership(self, name: str, lost: Callable[[], None]) -> Callable[[], None]:
        """Call `lost()` (from the heartbeat's thread) when another process takes `name` over; returns the
        function that stops watching."""
        self._watchers.setdefault(name, []).append(lost)

        def unwatch() -> None:
            with contextlib.suppress(ValueError):
                self._watchers.get(name, []).remove(lost)

        return unwatch

    def create_run(self, name: str, config: Mapping[str, Any], seed: int) -> None:
        self.claim_run(name, config, seed)

    def mark_running(self, name: str) -> None:
        self.claim_run(name)

    def finish_run(self, name: str, status: str, result: Mapping[str, Any] | None, *, keep_result: bool = False
                   ) -> None:
        """End this process's session of `name`; `keep_result`: the stored result stays (a better one). In a shared
        store, a run another process has taken over is left to it."""
        stop = self._beating.pop(name, None)
        if stop is not None:
            stop.set()
        mine, args = "", tuple[Any, ...]()
        if self.shared:
            mine, args = " AND pid=? AND host_id=?", (_me()[0], HOST_ID)
        with self._tx() as db:
            if keep_result:
                db.execute(f"UPDATE runs SET status=?, updated=?, pid=NULL, pid_started=NULL WHERE name=?{mine}",
                           (status, time.time(), name, *args))
            else:
                db.execute("UPDATE runs SET status=?, updated=?, result=?, pid=NULL, pid_started=NULL WHERE "
                           f"name=?{mine}",
                           (status, time.time(), dumps(result) if result is not None else None, name, *args))

    def update_config(self, name: str, config: Mapping[str, Any]) -> None:
        if name in self._lost:  # taken over by another process: it writes no more for it
            return
        with self._tx() as db:
            db.execute("UPDATE runs SET config=?, updated=? WHERE name=?", (dumps(dict(config)), time.time(), name))

    def save_ledger(self, name: str, ledger: Mapping[str, Any]) -> None:
        """The cumulative ledger of a run over all its sessions (a resumed run starts from it). The ledger this
        process saved last is not written again (a replayed rollout costs nothing: on a database server every
        write is a round trip)."""
        text = dumps(dict(ledger))
        if self._saved_ledgers.get(name) == text or name in self._lost:
            return
        with self._tx() as db:
            db.execute("UPDATE runs SET ledger=?, updated=? WHERE name=?", (text, time.time(), name))
        self._saved_ledgers[name] = text

    def ledger(self, name: str) -> dict[str, Any]:
        row = self._db.execute("SELECT ledger FROM runs WHERE name=?", (name,)).fetchone()
        return json.loads(row[0]) if row and row[0] else {}

    def _run_columns(self) -> str:
        columns = "name, created, updated, status, seed, config, pid, result, "
        if self.shared:
            return columns + "pid_started, host, host_id, EXTRACT(EPOCH FROM clock_timestamp()) - heartbeat"
        # a read-only store from an older version may lack the owner's start time
        has = "pid_started" in self._db.columns("runs")
        return columns + ("pid_started" if has else "NULL") + ", NULL, NULL, NULL"

    def get_run(self, name: str) -> RunInfo | None:
        row = self._db.execute(f"SELECT {self._run_columns()} FROM runs WHERE name=?", (name,)).fetchone()
        return self._run_info(row) if row else None

    def list_runs(self) -> list[RunInfo]:
        rows = self._db.execute(f"SELECT {self._run_columns()} FROM runs ORDER BY created DESC").fetchall()
        return [self._run_info(r) for r in rows]

    @staticmethod
    def _run_info(row: tuple) -> RunInfo:
        name, created, updated, status, seed, config, pid, result, pid_started, host, host_id, age = row
        return RunInfo(name, created, updated, status, seed, json.loads(config), pid,
                       json.loads(result) if result else None, pid_started, host, host_id,
                       None if age is None else float(age))

    def delete_run(self, name: str) -> None:
        stop = self._beating.pop(name, None)
        if stop is not None:  # this process's own run: it beats for it no more
            stop.set()
        self._saved_ledgers.pop(name, None)
        with self._tx(lock=f"run:{name}") as db:
            for table in ("runs", "candidates", "evaluations", "examples", "events", "lm_answers"):
                db.execute(f"DELETE FROM {table} WHERE {'name' if table == 'runs' else 'run'}=?", (name,))

    def put_examples(self, run: str, split: str, examples: list[Example]) -> None:
        if run in self._lost:  # taken over by another process: it writes no more for it
            return
        with self._tx() as db:
            db.executemany(self._insert("examples", ("run", "id", "split", "inputs", "gold"), "replace"),
                           [(run, e.id, split, dumps(portable(dict(e.inputs))), dumps(portable(e.gold)))
                            for e in examples])

    def examples(self, run: str, split: str) -> dict[str, dict[str, Any]]:
        rows = self._db.execute(f"SELECT id, inputs, gold FROM examples WHERE run=? AND split=? ORDER BY {self._order}",
                                (run, split)).fetchall()
        return {i: {"inputs": json.loads(inp), "gold": json.loads(g) if g else None} for i, inp, g in rows}

    # ---- candidates, evaluations, events -----------------------------------------------------------
    def put_candidate(self, run: str, rec: CandidateRecord) -> None:
        if run in self._lost:  # taken over by another process: it writes no more for it
            return
        columns = ("run", "idx", "id", "texts", "parents", "origin", "iteration", "component", "mean", "val_scores",
                   "rollouts_at_creation")
        with self._tx() as db:
            db.execute(self._insert("candidates", columns, "replace"),
                       (run, rec.index, rec.candidate.id, dumps(rec.candidate.to_dict()), dumps(list(rec.parents)),
                        redact(rec.origin), rec.iteration, None if rec.component is None else redact(rec.component),
                        rec.mean, dumps(rec.val_scores),
                        rec.rollouts_at_creation))

    def candidates(self, run: str) -> list[dict[str, Any]]:
        rows = self._db.execute("SELECT idx, id, texts, parents, origin, iteration, component, mean, val_scores, "
                                "rollouts_at_creation FROM candidates WHERE run=? ORDER BY idx", (run,)).fetchall()
        # (made the best by evidence bought after it joined: engine/loop.py `_confirm`, kept as events)
        confirmed = {e["data"].get("index") for e in self.events(run, "confirmed")}
        return [{"index": r[0], "id": r[1], "texts": json.loads(r[2]), "parents": json.loads(r[3]), "origin": r[4],
                 "iteration": r[5], "component": r[6], "mean": r[7], "val_scores": json.loads(r[8]),
                 "rollouts_at_creation": r[9], **({"confirmed": True} if r[0] in confirmed else {})} for r in rows]

    def put_rollout(self, run: str, candidate: Candidate, example_id: str, rollout: Rollout) -> None:
        """Commit one finished rollout (idempotent: a replayed rollout is not written twice)."""
        if run in self._lost:
            return
        row = _rollout_row(rollout)
        columns = ("run", "candidate_id", "example_id", "score", "feedback", "objectives", "output", "trace", "error",
                   "texts", "pattern", "stage")
        with self._tx() as db:
            db.execute(self._insert("evaluations", columns, "ignore"),
                       (run, candidate.id, example_id, row[0], row[1], row[2], row[3], row[4], row[5],
                        dumps(candidate.to_dict()), row[6], row[7]))

    def rollouts(self, run: str) -> dict[tuple[str, str], Rollout]:
        """All stored rollouts of a run, keyed by (candidate id, example id)."""
        columns = self._db.columns("evaluations")
        # a read-only store from an older version may lack the newer columns
        pattern = "pattern" if "pattern" in columns else "''"
        stage = "stage" if "stage" in columns else "NULL"
        order = " ORDER BY seq" if self.shared else ""  # (SQLite: in the order of its key, as it always was)
        rows = self._db.execute("SELECT candidate_id, example_id, score, feedback, objectives, output, trace, error, "
                                f"{pattern}, {stage} FROM evaluations WHERE run=?{order}", (run,)).fetchall()
        return {(cid, eid): _rollout_of(eid, *row) for cid, eid, *row in rows}

    def delete_rollouts(self, run: str, candidate_id: str) -> None:
        if run in self._lost:  # taken over by another process: it writes no more for it
            return
        """Forget one candidate's rollouts (after a MetricError: they hold no scores, only the broken metric's)."""
        with self._tx() as db:
            db.execute("DELETE FROM evaluations WHERE run=? AND candidate_id=?", (run, candidate_id))

    def count_rollouts(self, run: str) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM evaluations WHERE run=?", (run,)).fetchone()[0])

    def put_lm_answer(self, run: str, key: str, out: Completion | None, error: BaseException | None = None,
                      messages: Sequence[Message] | None = None) -> None:
        """Keep one LM answer of a run (or the error it raised instead), under its request's cache key, with the
        request's messages (redacted): what the report shows as the prompt."""
        if run in self._lost:
            return
        if out is None:
            out, error_type = Completion(str(error)), type(error).__name__
        else:
            error_type = None
        shown_messages = dumps([dict(m) for m in messages]) if messages is not None else None
        columns = ("run", "key", "text", "finish_reason", "input_tokens", "output_tokens", "estimated", "error_type",
                   "messages")
        with self._tx() as db:  # (the text redacted: a resumed run is shown it redacted too, as the first one was)
            db.execute(self._insert("lm_answers", columns, "ignore"),
                       (run, key, redact(out.text), out.finish_reason, out.usage.input_tokens, out.usage.output_tokens,
                        int(out.usage.estimated), error_type, shown_messages))

    def lm_exchanges(self, run: str) -> dict[str, dict[str, Any]]:
        """Every kept LM request of a run by key, in the order first asked: its messages (None when stored by a
        version that did not keep them), the answer's text and finish reason, and the error type if it failed."""
        messages = "messages" if "messages" in self._db.columns("lm_answers") else "NULL"  # an older read-only store
        rows = self._db.execute(f"SELECT key, {messages}, text, finish_reason, error_type FROM lm_answers "
                                f"WHERE run=? ORDER BY {self._order}", (run,)).fetchall()
        return {key: {"messages": json.loads(m) if m else None, "text": text, "finish_reason": finish,
                      "error_type": error_type} for key, m, text, finish, error_type in rows}

    def lm_answer(self, run: str, key: str) -> Completion | LMError | None:
        """A kept answer (as a cached Completion), the error it was (as an LMError to raise), or None."""
        row = self._db.execute("SELECT text, finish_reason, input_tokens, output_tokens, estimated, error_type "
                               "FROM lm_answers WHERE run=? AND key=?", (run, key)).fetchone()
        if row is None:
            return None
        text, finish, n_in, n_out, estimated, error_type = row
        if error_type is not None:
            return LMError(text if error_type == "LMError" else f"{error_type}: {text}")
        return Completion(text, Usage(n_in, n_out, bool(estimated)), finish, cached=True)

    def add_event(self, run: str, kind: str, data: Mapping[str, Any]) -> None:
        if run in self._lost:  # taken over by another process: it writes no more for it
            return
        with self._tx() as db:
            db.execute("INSERT INTO events (run, time, kind, data) VALUES (?,?,?,?)",
                       (run, time.time(), kind, dumps(dict(data))))

    def events(self, run: str, kind: str | None = None) -> list[dict[str, Any]]:
        q, args = "SELECT seq, time, kind, data FROM events WHERE run=?", [run]
        if kind:
            q, args = q + " AND kind=?", [*args, kind]
        rows = self._db.execute(q + " ORDER BY seq", args).fetchall()
        return [{"seq": s, "time": t, "kind": k, "data": json.loads(d)} for s, t, k, d in rows]


# the key (in lm_answers) of the request a RecordedLM answered last in this asyncio task (each proposal of a round
# runs in a task of its own): what links a ReflectionAnswered event to the prompt and answer stored for it
LAST_ANSWER: ContextVar[str | None] = ContextVar("gepetto_last_answer", default=None)


class RecordedLM:
    """A run's reflection LM: each answer, and each error other than an outage (LMUnavailable: no answer, the
    engine asks again), is kept in the run store with the request's messages, and a resumed run gets the very
    same answers and errors back, whatever the response-cache setting. That is what makes a resumed run take
    the same path. `LAST_ANSWER` holds the key of the request answered last in the calling task."""

    def __init__(self, lm: LM, store: RunStore, run: str) -> None:
        self.lm, self.store, self.run, self.name = lm, store, run, lm.name
        self.replayed = 0

    async def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        key = cache_key(self.name, messages, params)
        kept = self.store.lm_answer(self.run, key)
        if kept is not None:
            self.replayed += 1
            LAST_ANSWER.set(key)
            if isinstance(kept, LMError):
                raise kept
            return kept
        try:
            out = await self.lm.complete(messages, **params)
        except LMUnavailable:
            raise
        except Exception as exc:
            self.store.put_lm_answer(self.run, key, None, exc, messages=messages)
            LAST_ANSWER.set(key)
            raise
        self.store.put_lm_answer(self.run, key, out, messages=messages)
        LAST_ANSWER.set(key)
        return out


def _rollout_row(rollout: Rollout) -> tuple[Any, ...]:
    """A rollout's stored columns (score, feedback, objectives, output, trace, error, pattern, stage), redacted."""
    try:
        output = json.dumps(redact_data(rollout.output), ensure_ascii=False)
    except (TypeError, ValueError):
        output = json.dumps(redact(repr(rollout.output)), ensure_ascii=False)
    error = redact(rollout.error) if rollout.error is not None else None
    return (rollout.score.value, redact(rollout.score.feedback), dumps(dict(rollout.score.objectives)), output,
            dumps([t.to_dict() for t in rollout.trace]), error, redact(rollout.score.pattern), rollout.stage)


def _rollout_of(example_id: str, score: float, feedback: str, objectives: str, output: str | None, trace: str,
                error: str | None, pattern: str | None, stage: str | None) -> Rollout:
    """A rollout from its stored columns."""
    return Rollout(example_id, Score(score, feedback, json.loads(objectives), pattern or ""),
                   json.loads(output) if output is not None else None, [TraceEntry(**t) for t in json.loads(trace)],
                   error, stage)


def as_stored(rollout: Rollout) -> Rollout:
    """`rollout` exactly as the store gives it back (redacted, its output through JSON): what a run goes on with, so
    that the run and its resume decide on the same data (a secret in an input, a task LM's answer or a feedback is
    redacted in both, and in a prompt a demonstration copies from it)."""
    return _rollout_of(rollout.example_id, *_rollout_row(rollout))


class StoredRollouts:
    """The engine's RolloutStore for one run: reads are served from memory, writes are committed at once."""

    def __init__(self, store: RunStore, run: str) -> None:
        self.store, self.run = store, run
        self._known = store.rollouts(run)
        self.stored_at_start = len(self._known)
        self.replayed = 0
        self.paid = 0  # new rollouts this session
        self._not_asked = set(self._known)  # stored rollouts this session has not asked for (yet)

    def get(self, candidate_id: str, example_id: str) -> Rollout | None:
        found = self._known.get((candidate_id, example_id))
        self.replayed += found is not None
        self._not_asked.discard((candidate_id, example_id))
        return found

    def put(self, candidate: Candidate, example_id: str, rollout: Rollout) -> Rollout:
        """Store `rollout`; returns it as stored (`as_stored`), which the run goes on with."""
        self.store.put_rollout(self.run, candidate, example_id, rollout)
        stored = as_stored(rollout)
        self._known[(candidate.id, example_id)] = stored
        self.paid += 1
        return stored

    @property
    def left_behind(self) -> int:
        """Stored rollouts this session never asked for. An exact resume asks again for every stored rollout (it
        takes the stored path first), so a session that ran to its end, paid new rollouts and still left some
        behind took another path."""
        return len(self._not_asked)
