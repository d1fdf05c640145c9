"""Where a run store lives: a SQLite file (the default, Python's sqlite3) or a PostgreSQL database given by URL
(SQLAlchemy Core and psycopg, the `postgres` extra), behind the few calls the run store and the response cache make.

The store's statements are written once, in SQLite's dialect with `?` parameters; `Database.dialect` tells the
store where PostgreSQL needs other words (an upsert, an ordering column, the schema). A PostgreSQL store keeps its
tables in the schema `gepetto` of the database it is given, so it shares a database with other tools (MLflow's
`runs` table among them) without a clash. A URL's password is used to connect and never written or shown:
`shown(storage)` is the form every message uses.
"""

from __future__ import annotations

import contextlib
import platform
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from gepetto.secrets import create_private_file, redact

SCHEMA_NAME = "gepetto"  # the PostgreSQL schema holding a store's tables
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
_POSTGRES = ("postgresql", "postgres")


class StoreError(RuntimeError):
    """The run store cannot be used (not a SQLite file, corrupted, read-only, a database that refuses the
    connection, ...); the message says what and where."""


def is_url(storage: str | Path) -> bool:
    """Whether `storage` is a database URL (`scheme://...`) rather than a file path."""
    return isinstance(storage, str) and _URL.match(storage) is not None


def _scheme(storage: str) -> tuple[str, str | None]:
    match = _URL.match(storage)
    scheme = match.group(1).lower() if match else ""
    base, _, driver = scheme.partition("+")
    return base, driver or None


def sqlite_path(storage: str | Path) -> Path | None:
    """The file of a SQLite store (a path, or a `sqlite:///path` URL as SQLAlchemy and optuna write it), None for a
    PostgreSQL URL; an unsupported URL raises StoreError."""
    if not is_url(storage):
        return Path(storage)
    base, _ = _scheme(str(storage))
    if base in _POSTGRES:
        return None
    if base == "sqlite":
        path = unquote(urlsplit(str(storage)).path)
        rest = str(storage).split("://", 1)[1]
        if not rest.startswith("/") or rest in ("/", "/:memory:"):
            raise StoreError(f"{storage}: a SQLite URL names a file, as sqlite:///relative.db or sqlite:////abs.db")
        return Path(path[1:] if path.startswith("/") else path)
    raise StoreError(f"storage {shown(str(storage))!r}: give a SQLite file path (e.g. gepetto.sqlite) or a PostgreSQL "
                     "URL (postgresql://user@host/db); other databases are not supported")


def shown(storage: str | Path) -> str:
    """`storage` as messages show it: a URL without its password (in the user part or as a `password=` query
    parameter), a path as it is."""
    if not is_url(storage):
        return str(storage)
    parts = urlsplit(str(storage))
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.split(':', 1)[0]}@{host}"
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                       if k.lower() not in ("password", "passfile")], safe="/:,")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


class Rows(list):
    """The rows of a statement, read at once (a damaged page can fail a fetch as well as the statement)."""

    rowcount: int = -1

    def fetchone(self) -> Any:
        return self[0] if self else None

    def fetchall(self) -> list[Any]:
        return list(self)


class Database:
    """One store's connection: statements in SQLite's words with `?` parameters, errors as StoreError."""

    dialect: str
    where: str  # the store as messages show it (no password)

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Rows:
        raise NotImplementedError

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        raise NotImplementedError

    def transaction(self, lock: str | None = None) -> contextlib.AbstractContextManager[Database]:
        """A transaction; `lock`: a name that no other transaction holding it may run beside (SQLite's write
        transactions are serial anyway)."""
        raise NotImplementedError

    def columns(self, table: str) -> set[str]:
        raise NotImplementedError

    def schema(self, statements: Sequence[str]) -> None:
        """Create the tables that are missing (statements of CREATE ... IF NOT EXISTS)."""
        for statement in statements:
            self.execute(statement)

    def now(self) -> float:
        """The time on the store's clock (the database server's, which every machine of a team shares)."""
        return time.time()

    def close(self) -> None:
        raise NotImplementedError


# ---- SQLite --------------------------------------------------------------------------------------------------
def sqlite_error(path: Path, exc: BaseException) -> StoreError:
    text = str(exc)
    if "is full" in text:  # SQLITE_FULL ("database or disk is full"): the disk, or a size limit
        return StoreError(f"the run store {path} cannot grow ({text}): free some space and resume the run (all it "
                          "stored so far is kept), or pass another --storage")
    if "not a database" in text or "malformed" in text or "no such table" in text:
        return StoreError(f"{path} is not a usable gepetto run store ({text}); pass another --storage, or move "
                          "the file away")
    if isinstance(exc, PermissionError) or "readonly" in text or "read-only" in text or "unable to open" in text:
        return StoreError(f"cannot write to the run store {path} ({text}); check the permissions of the file and "
                          "its directory, or pass another --storage")
    return StoreError(f"cannot use the run store {path}: {type(exc).__name__}: {text}")


class SQLiteDatabase(Database):
    """A SQLite file in WAL mode, created readable by its owner only; `readonly` opens an existing file to read."""

    dialect = "sqlite"

    def __init__(self, path: Path, *, readonly: bool = False, timeout: float = 5.0) -> None:
        self.path, self.where = path, str(path)
        try:
            if readonly:
                if not path.is_file():
                    raise StoreError(f"no run store at {path}")
                self._db = self._read_only(path, timeout)
            else:
                if path.parent and not path.parent.exists():
                    path.parent.mkdir(parents=True, exist_ok=True)
                create_private_file(path)
                self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=timeout)
                self._wal(timeout)
                self.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process kills
        except (sqlite3.Error, OSError) as exc:
            raise sqlite_error(path, exc) from None
        self._lock = threading.Lock()

    @staticmethod
    def _read_only(path: Path, timeout: float) -> sqlite3.Connection:
        """A connection that only reads. A file in WAL mode on a read-only filesystem cannot be read that way (SQLite
        must create its shared-memory file beside it): it is then opened as immutable, which it is there."""
        for query in ("mode=ro", "mode=ro&immutable=1"):
            db = sqlite3.connect(f"{path.resolve().as_uri()}?{query}", uri=True, check_same_thread=False,
                                 isolation_level=None, timeout=timeout)
            try:
                db.execute("SELECT count(*) FROM sqlite_master").fetchone()
                return db
            except sqlite3.OperationalError as exc:
                db.close()
                if "unable to open" not in str(exc) or query.endswith("immutable=1"):
                    raise
        raise AssertionError("unreachable")

    def _wal(self, timeout: float) -> None:
        """Switch the file to WAL mode. SQLite answers "database is locked" at once, without waiting, while another
        process opens the same new file: the switch is tried again until `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Rows:
        try:
            cursor = self._db.execute(sql, args)
            rows = Rows(cursor.fetchall())
            rows.rowcount = cursor.rowcount
            return rows
        except sqlite3.Error as exc:
            raise sqlite_error(self.path, exc) from None

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        try:
            self._db.executemany(sql, rows)
        except sqlite3.Error as exc:
            raise sqlite_error(self.path, exc) from None

    def executescript(self, script: str) -> None:
        try:
            self._db.executescript(script)
        except sqlite3.Error as exc:
            raise sqlite_error(self.path, exc) from None

    @contextmanager
    def transaction(self, lock: str | None = None) -> Iterator[Database]:
        with self._lock:
            self.execute("BEGIN IMMEDIATE")
            try:
                yield self
                self.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:  # SQLite may have rolled back already (e.g. the disk is full)
                    with contextlib.suppress(StoreError):
                        self.execute("ROLLBACK")
                raise

    def columns(self, table: str) -> set[str]:
        return {row[1] for row in self.execute(f"PRAGMA table_info({table})")}

    def close(self) -> None:
        self._db.close()


# ---- PostgreSQL ----------------------------------------------------------------------------------------------
def _engine_url(storage: str) -> Any:
    """The SQLAlchemy URL of a PostgreSQL store: psycopg (3) unless the URL names another driver."""
    from sqlalchemy.engine import make_url

    url = make_url(storage)
    if url.drivername in _POSTGRES:
        url = url.set(drivername="postgresql+psycopg")
    return url


def postgres_error(where: str, exc: BaseException) -> StoreError:
    """A database error as one line that says where and what to do; never the password (`where` has none)."""
    orig = getattr(exc, "orig", None) or exc
    text = redact(" ".join(str(orig).split()))
    if "password authentication failed" in text or "no password supplied" in text:
        return StoreError(f"the database of the run store {where} refused the login ({text}): check the user and "
                          "its password (in the URL, PGPASSWORD or ~/.pgpass)")
    if "does not exist" in text and "database" in text:
        return StoreError(f"no database for the run store {where} ({text}): create it first (createdb NAME)")
    if "connection" in text and ("refused" in text or "failed" in text or "timeout" in text or "closed" in text):
        return StoreError(f"cannot reach the database of the run store {where} ({text}): is the server running, "
                          "and are the host and port right?")
    if "read-only transaction" in text:
        return StoreError(f"the run store {where} was opened for reading only ({text})")
    if "permission denied" in text:
        return StoreError(f"this database user lacks privileges on the run store {where} ({text}): ask for them on "
                          f"the schema {SCHEMA_NAME!r} and its tables and sequences, or pass another --storage")
    return StoreError(f"cannot use the run store {where}: {type(orig).__name__}: {text}")


def _text(value: Any) -> Any:
    # PostgreSQL's text holds no NUL character (SQLite's does): it is kept as U+FFFD
    return value.replace("\x00", "\ufffd") if isinstance(value, str) and "\x00" in value else value


class PostgresDatabase(Database):
    """A PostgreSQL database through a SQLAlchemy engine: pooled connections checked before use (a restarted
    server or a dropped connection costs no run), tables in the schema `gepetto`, the server's clock."""

    dialect = "postgresql"

    def __init__(self, storage: str, *, readonly: bool = False) -> None:
        self.where = shown(storage)
        try:
            import sqlalchemy
            from sqlalchemy import event
        except ImportError:
            raise StoreError(f"the run store {self.where} is a PostgreSQL database: install gepetto's postgres extra "
                             "(pip install -e '.[postgres]': SQLAlchemy and psycopg)") from None
        self._errors: tuple[type[BaseException], ...] = (sqlalchemy.exc.SQLAlchemyError,)
        try:
            import psycopg

            self._errors += (psycopg.Error,)
        except ImportError:
            pass
        try:
            url = _engine_url(storage)
            self._engine = sqlalchemy.create_engine(url, pool_pre_ping=True, pool_size=2, max_overflow=8)
        except ImportError as exc:
            raise StoreError(f"the run store {self.where} needs a PostgreSQL driver ({exc}): install gepetto's "
                             "postgres extra (pip install -e '.[postgres]')") from None
        except Exception as exc:  # ArgumentError: a URL SQLAlchemy cannot read
            raise StoreError(f"storage {self.where!r} is not a usable database URL: {redact(str(exc))}") from None

        @event.listens_for(self._engine, "connect")
        def _session(dbapi_connection: Any, _record: Any) -> None:
            with contextlib.closing(dbapi_connection.cursor()) as cur:
                cur.execute(f"SET search_path TO {SCHEMA_NAME}")
                # a commit returns before the server has flushed it to disk: a killed process loses nothing, a
                # crash of the server the last moment's commits (SQLite's WAL with synchronous=NORMAL, the same)
                cur.execute("SET synchronous_commit TO off")
                if readonly:
                    cur.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
            dbapi_connection.commit()

        self._reader = self._engine.execution_options(isolation_level="AUTOCOMMIT")
        self._local = threading.local()  # .conn: the connection of this thread's transaction in progress

    @staticmethod
    def _sql(sql: str) -> str:
        return sql.replace("%", "%%").replace("?", "%s")

    def _run(self, conn: Any, sql: str, args: Sequence[Any] | list[Sequence[Any]], many: bool = False) -> Rows:
        if many:
            conn.exec_driver_sql(self._sql(sql), [tuple(_text(a) for a in row) for row in args])
            return Rows()
        result = conn.exec_driver_sql(self._sql(sql), tuple(_text(a) for a in args))
        rows = Rows(tuple(r) for r in result.fetchall()) if result.returns_rows else Rows()
        rows.rowcount = result.rowcount
        return rows

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Rows:
        conn = getattr(self._local, "conn", None)
        try:
            if conn is not None:
                return self._run(conn, sql, args)
            with self._reader.connect() as conn:
                return self._run(conn, sql, args)
        except self._errors as exc:
            raise postgres_error(self.where, exc) from None

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        conn = getattr(self._local, "conn", None)
        try:
            if conn is not None:
                self._run(conn, sql, list(rows), many=True)
            else:
                with self._engine.begin() as conn:
                    self._run(conn, sql, list(rows), many=True)
        except self._errors as exc:
            raise postgres_error(self.where, exc) from None

    @contextmanager
    def transaction(self, lock: str | None = None) -> Iterator[Database]:
        if getattr(self._local, "conn", None) is not None:
            raise RuntimeError("a store transaction inside another one")
        try:
            with self._engine.begin() as conn:
                self._local.conn = conn
                try:
                    if lock is not None:  # held until the transaction ends; taken in the same order by everyone
                        conn.exec_driver_sql("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                                             (f"{SCHEMA_NAME}:{lock}",))
                    yield self
                finally:
                    self._local.conn = None
        except self._errors as exc:
            raise postgres_error(self.where, exc) from None

    def schema(self, statements: Sequence[str]) -> None:
        """Create the schema and tables when one is missing, one process at a time (two processes creating the same
        table at once: one would fail). A store whose tables exist is left alone: its users need no right to
        create anything (PostgreSQL checks that right before it sees that a table exists)."""
        tables = re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", " ".join(statements))
        if all(self.has_table(t) for t in tables):
            self.check_access()
            return
        with self.transaction(lock="schema"):
            if not self.execute("SELECT 1 FROM pg_namespace WHERE nspname=?", (SCHEMA_NAME,)):
                self.execute(f"CREATE SCHEMA {SCHEMA_NAME}")
            for statement in statements:
                self.execute(statement)

    def check_access(self) -> None:
        """Raise StoreError when this user may not use the schema (its tables would look missing)."""
        if not self.execute("SELECT has_schema_privilege(?, 'USAGE')", (SCHEMA_NAME,)).fetchone()[0]:
            raise postgres_error(self.where, PermissionError(f"permission denied for schema {SCHEMA_NAME}"))

    def has_table(self, table: str) -> bool:
        return bool(self.execute("SELECT 1 FROM pg_tables WHERE schemaname=? AND tablename=?", (SCHEMA_NAME, table)))

    def columns(self, table: str) -> set[str]:
        return {r[0] for r in self.execute("SELECT column_name FROM information_schema.columns WHERE table_schema=? "
                                           "AND table_name=?", (SCHEMA_NAME, table))}

    def now(self) -> float:
        return float(self.execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())").fetchone()[0])

    def close(self) -> None:
        self._engine.dispose()


def open_database(storage: str | Path, *, readonly: bool = False, timeout: float = 5.0) -> Database:
    """The connection to the store `storage`: a SQLite file (path or sqlite:/// URL) or a PostgreSQL URL."""
    path = sqlite_path(storage)
    if path is None:
        return PostgresDatabase(str(storage), readonly=readonly)
    return SQLiteDatabase(path, readonly=readonly, timeout=timeout)


def host_identity() -> tuple[str, str]:
    """This machine's name (shown) and an id that tells it from another machine of the same name or a container
    on the same kernel: the name with the kernel's boot id."""
    name = platform.node() or "unknown"
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return name, f"{name}/{boot}"
