"""A throwaway PostgreSQL server on 127.0.0.1 for tests and benchmarks of the shared run store.

It runs the server binaries found on this machine (`initdb` and `pg_ctl` on PATH, or Debian's
/usr/lib/postgresql/VERSION/bin; GEPETTO_PG_BINDIR names another directory) in a temporary directory: a login
with a password over TCP, the cluster's superuser over the server's own socket. PostgreSQL refuses to run as
root, so under root the server runs as the `postgres` user (Debian's package makes it), else as `nobody`.
Durability is off by default (fsync, synchronous commits: the data is thrown away when the server stops anyway);
`durable=True` keeps PostgreSQL's defaults, as a real server runs (benchmarks).
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any


class ServerUnavailable(RuntimeError):
    """No PostgreSQL server can be started here; the message says why."""


def find_bindir() -> Path | None:
    """The directory holding initdb and pg_ctl: GEPETTO_PG_BINDIR, PATH, or Debian's newest /usr/lib/postgresql."""
    given = os.environ.get("GEPETTO_PG_BINDIR")
    if given:
        return Path(given)
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                      key=lambda p: int(re.sub(r"\D", "", p.split("/")[4]) or 0))
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """`with PostgresServer() as pg: url = pg.create_database("x")`: a server of its own, stopped on exit.

    `url(database)` is a `postgresql://` URL for the login `user` (with its password; `password=False` leaves
    it out), `create_database` makes a database owned by that login."""

    def __init__(self, user: str = "gepetto", password: str | None = None, *, durable: bool = False) -> None:
        self.user, self.durable = user, durable
        self.password = password or f"pw-{secrets.token_hex(8)}"
        self.bindir = find_bindir()
        self.port = 0
        self._dir: Path | None = None
        self._as: dict[str, Any] = {}

    def _run(self, *args: str) -> str:
        assert self.bindir is not None and self._dir is not None
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        done = subprocess.run([str(self.bindir / args[0]), *args[1:]], capture_output=True, text=True, env=env,
                              cwd=self._dir, timeout=120, check=False, **self._as)
        if done.returncode != 0:
            why = done.stderr.strip() or done.stdout.strip()
            raise ServerUnavailable(f"{args[0]} failed ({done.returncode}): {why}")
        return done.stdout

    def start(self) -> PostgresServer:
        if self.bindir is None or not (self.bindir / "initdb").exists():
            raise ServerUnavailable("no PostgreSQL server binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql;"
                                    " install Debian's postgresql package, or set GEPETTO_PG_BINDIR")
        self._dir = Path(tempfile.mkdtemp(prefix="gepetto-pg-"))
        if os.geteuid() == 0:  # the server refuses root
            import pwd

            try:
                who = pwd.getpwnam("postgres")
            except KeyError:
                who = pwd.getpwnam("nobody")
            os.chown(self._dir, who.pw_uid, who.pw_gid)
            self._as = {"user": who.pw_uid, "group": who.pw_gid}
        try:
            data, sock = self._dir / "data", self._dir
            self._run("initdb", "-D", str(data), "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync",
                      "--auth-local=trust", "--auth-host=scram-sha-256")
            self.port = _free_port()
            options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={sock} "
                       "-c max_connections=100")
            if not self.durable:
                options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            self._run("pg_ctl", "-D", str(data), "-o", options, "-l", str(self._dir / "server.log"), "-w", "-t", "60",
                      "start")
            self.superuser(f"CREATE ROLE {self.user} LOGIN PASSWORD '{self.password}'")
        except BaseException:
            self.stop()
            raise
        return self

    def superuser(self, sql: str) -> None:
        """Run `sql` as the cluster's superuser (over the server's socket)."""
        import psycopg

        with psycopg.connect(host=str(self._dir), port=self.port, user="postgres", dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(sql)

    def url(self, database: str, *, password: bool = True, driver: str = "") -> str:
        login = f"{self.user}:{self.password}" if password else self.user
        return f"postgresql{'+' + driver if driver else ''}://{login}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A new empty database owned by the login; its URL."""
        self.superuser(f"CREATE DATABASE {name} OWNER {self.user}")
        return self.url(name)

    def log(self) -> str:
        path = self._dir / "server.log" if self._dir else None
        return path.read_text(errors="replace") if path and path.exists() else ""

    def stop(self) -> None:
        if self._dir is None:
            return
        if (self._dir / "data" / "postmaster.pid").exists():
            with contextlib.suppress(ServerUnavailable, subprocess.TimeoutExpired):
                self._run("pg_ctl", "-D", str(self._dir / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self._dir, ignore_errors=True)
        self._dir = None

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
