"""A throwaway PostgreSQL server for tests: ``initdb`` in a temporary directory, started on a free port of
127.0.0.1, stopped and removed at the end.

>>> with throwaway_cluster() as cluster:              # doctest: +SKIP
...     dsn = cluster.create_database("scratch")
...     engine = Engine(dsn)

The server comes from the OS's ``postgresql`` package (or ``$REAQTIVE_PG_BINDIR``). ``initdb`` refuses to run as
root, so as root the server runs as the ``postgres`` OS user. It is tuned for speed (``fsync=off``,
``full_page_writes=off``): only the *server* crashing could lose data with these, and tests never kill the server —
they kill clients, whose crash semantics (``synchronous_commit`` is left at its default) stay intact.

``python -m reaqtive.testing.postgres --check`` exits 0 if a server can be started here, else prints the one
thing to install and exits 2 (``make test`` runs it first, so a missing server fails at once, never skips).

This module imports without psycopg: only the methods that connect import it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:
    from psycopg import sql

__all__ = [
    "BINDIR_ENV",
    "INSTRUCTION",
    "PostgresCluster",
    "PostgresClusterError",
    "PostgresNotFoundError",
    "check",
    "find_bindir",
    "throwaway_cluster",
]

BINDIR_ENV = "REAQTIVE_PG_BINDIR"

INSTRUCTION = (
    "PostgreSQL server binaries not found: install them (Debian/Ubuntu: `apt-get install postgresql`; "
    f"macOS: `brew install postgresql@15`), or set {BINDIR_ENV} to the directory holding initdb and pg_ctl"
)

# The OS user that runs the server when we are root (initdb refuses root); the Debian package creates it.
SERVER_OS_USER = "postgres"
SUPERUSER = "postgres"

# Where packages put the server binaries, newest version first after sorting; pg_config and PATH come after.
_VERSIONED_BINDIRS = (
    "/usr/lib/postgresql/*/bin",  # Debian, Ubuntu
    "/usr/pgsql-*/bin",  # RHEL, Fedora (PGDG)
    "/opt/homebrew/opt/postgresql@*/bin",  # macOS, Apple silicon
    "/usr/local/opt/postgresql@*/bin",  # macOS, Intel
)

_START_ATTEMPTS = 3  # a free port can be taken between finding it and the server binding it
_TIMEOUT_S = 60.0


class PostgresClusterError(RuntimeError):
    """The throwaway server could not be set up, started or stopped; the message says which step and why."""


class PostgresNotFoundError(PostgresClusterError):
    """No PostgreSQL server binaries here (or, as root, no ``postgres`` OS user to run them as)."""


def _version_key(path: Path) -> tuple[int, ...]:
    """Sort key for a versioned binary directory: the numbers in its name (``.../15/bin`` -> ``(15,)``)."""
    return tuple(int(number) for number in re.findall(r"\d+", str(path.parent)))


def _has_server(bindir: Path) -> bool:
    return all((bindir / name).is_file() and os.access(bindir / name, os.X_OK) for name in ("initdb", "pg_ctl"))


def find_bindir() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl``: ``$REAQTIVE_PG_BINDIR`` if set (and only it), else the newest
    packaged version, else ``pg_config --bindir``, else ``PATH``; ``None`` if none holds a server."""
    override = os.environ.get(BINDIR_ENV)
    if override:
        # An explicit choice is never second-guessed: a wrong one must fail, not fall back to another version.
        path = Path(override)
        return path if _has_server(path) else None
    candidates: list[Path] = []
    for pattern in _VERSIONED_BINDIRS:
        root = Path(pattern.split("*")[0]).parent
        found = sorted(root.glob(Path(pattern).relative_to(root).as_posix()), key=_version_key, reverse=True)
        candidates.extend(found)
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True)
            candidates.append(Path(out.stdout.strip()))
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).parent)
    return next((path for path in candidates if _has_server(path)), None)


def _running_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def check() -> Path:
    """The binary directory if a throwaway server can be started here, else :class:`PostgresNotFoundError`
    whose message is the one instruction to follow."""
    bindir = find_bindir()
    if bindir is None:
        raise PostgresNotFoundError(INSTRUCTION)
    _check_server_user()
    return bindir


def _check_server_user() -> None:
    """As root, the ``postgres`` OS user (and ``runuser``) the server must run as."""
    if _running_as_root():
        try:
            pwd.getpwnam(SERVER_OS_USER)
        except KeyError:
            raise PostgresNotFoundError(
                f"running as root, and initdb refuses root: create the `{SERVER_OS_USER}` OS user to run the "
                f"throwaway server as (Debian/Ubuntu: `apt-get install postgresql` creates it), or run as "
                f"another user"
            ) from None
        if shutil.which("runuser") is None:
            raise PostgresNotFoundError("running as root: `runuser` (util-linux) is needed to run the server")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresCluster:
    """One throwaway PostgreSQL server: :meth:`start` it (or use it as a context manager), get a DSN with
    :meth:`dsn` or a fresh database with :meth:`create_database`, :meth:`stop` it — which also removes every
    file. An interpreter exit stops it too, and a failed start leaves nothing behind."""

    def __init__(self, bindir: Path | str | None = None, *, settings: dict[str, str] | None = None) -> None:
        self._bindir = Path(bindir) if bindir is not None else None
        self._settings = dict(settings or {})
        self._base: Path | None = None
        self._port: int | None = None
        self._as_user: str | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._port is not None

    @property
    def base_dir(self) -> Path:
        """The temporary directory holding the data directory, the log and the unix socket."""
        if self._base is None:
            raise PostgresClusterError("the cluster is not started")
        return self._base

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def socket_dir(self) -> Path:
        return self.base_dir / "socket"

    @property
    def log_file(self) -> Path:
        return self.base_dir / "server.log"

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def port(self) -> int:
        if self._port is None:
            raise PostgresClusterError("the cluster is not started")
        return self._port

    def start(self) -> PostgresCluster:
        """initdb in a new temporary directory and start the server on a free port; on any failure everything
        made so far is removed and :class:`PostgresClusterError` says what failed (with the server's log)."""
        if self._base is not None:
            raise PostgresClusterError("the cluster is already started")
        bindir = self._bindir if self._bindir is not None else check()
        if not _has_server(bindir):
            raise PostgresNotFoundError(INSTRUCTION)
        _check_server_user()
        self._bindir = bindir
        self._as_user = SERVER_OS_USER if _running_as_root() else None
        self._base = Path(tempfile.mkdtemp(prefix="reaqtive-pg-"))
        atexit.register(self.stop)
        try:
            self._initdb()
            self._start_server()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server (immediately: its data is thrown away) and remove its directory. Idempotent."""
        base = self._base
        if base is None:
            return
        atexit.unregister(self.stop)
        try:
            if (base / "data" / "postmaster.pid").exists():
                self._stop_server()
        finally:
            self._port = None
            self._base = None
            shutil.rmtree(base, ignore_errors=True)

    def __enter__(self) -> PostgresCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- databases ---------------------------------------------------------------------------------------------

    def dsn(self, dbname: str = "postgres") -> str:
        """A ``postgresql://`` URL for ``dbname`` over TCP on the loopback (trust authentication)."""
        return f"postgresql://{SUPERUSER}@{self.host}:{self.port}/{quote(dbname, safe='')}"

    def create_database(self, name: str | None = None, *, template: str | None = None) -> str:
        """Create a database (a fresh unique name if ``name`` is None) and return its DSN. ``template``: a copy
        of that database (which no session may be connected to), made by the server in one quick step."""
        from psycopg import sql

        name = name if name is not None else f"t_{uuid.uuid4().hex}"
        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        self._admin(statement)
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        """Drop a database, ending any session still connected to it (a killed test may leave some)."""
        from psycopg import sql

        self._admin(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def _admin(self, statement: sql.Composed) -> None:
        import psycopg

        # CREATE/DROP DATABASE cannot run inside a transaction block.
        with psycopg.connect(self.dsn(), autocommit=True, connect_timeout=10) as connection:
            connection.execute(statement)

    # -- internals ---------------------------------------------------------------------------------------------

    def _tool(self, name: str) -> str:
        assert self._bindir is not None
        return str(self._bindir / name)

    def _run(self, args: Sequence[str], step: str) -> subprocess.CompletedProcess[str]:
        command = list(args)
        if self._as_user is not None:
            command = ["runuser", "-u", self._as_user, "--", *command]
        try:
            # cwd: the server's OS user may not be allowed into the caller's directory.
            done = subprocess.run(
                command, cwd=self.base_dir, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise PostgresClusterError(f"{step}: {error}") from error
        if done.returncode != 0:
            raise PostgresClusterError(
                f"{step} failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()}{self._log_tail()}"
            )
        return done

    def _log_tail(self) -> str:
        try:
            lines = self.log_file.read_text(errors="replace").splitlines()[-20:]
        except OSError:
            return ""
        return "\nserver log:\n" + "\n".join(lines) if lines else ""

    def _initdb(self) -> None:
        base = self.base_dir
        self.socket_dir.mkdir()
        if self._as_user is not None:
            user = pwd.getpwnam(self._as_user)
            for path in (base, self.socket_dir):
                os.chown(path, user.pw_uid, user.pw_gid)
        self._run(
            [
                self._tool("initdb"),
                "--pgdata",
                str(self.data_dir),
                "--username",
                SUPERUSER,
                "--auth",
                "trust",
                "--encoding",
                "UTF8",
                "--locale",
                "C",
                "--no-sync",  # a throwaway cluster: nothing to make durable
            ],
            "initdb",
        )
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.socket_dir}'",
            "fsync": "off",  # the server is never killed in tests; clients are, and commit semantics are kept
            "full_page_writes": "off",
            "max_connections": "200",  # crash tests leave killed clients' sessions until the server notices
            "shared_buffers": "32MB",
            "log_min_messages": "warning",
            **self._settings,
        }
        lines = "".join(f"{key} = {value}\n" for key, value in settings.items())
        conf = self.data_dir / "postgresql.conf"
        # Appending as root keeps the file's owner (the server's user).
        with conf.open("a") as handle:
            handle.write("\n# reaqtive.testing.postgres\n" + lines)

    def _start_server(self) -> None:
        last: PostgresClusterError | None = None
        for _ in range(_START_ATTEMPTS):
            port = _free_port()
            try:
                self._run(
                    [
                        self._tool("pg_ctl"),
                        "start",
                        "--pgdata",
                        str(self.data_dir),
                        "--log",
                        str(self.log_file),
                        "--wait",
                        "--timeout",
                        str(int(_TIMEOUT_S)),
                        "--options",
                        f"-p {port}",
                    ],
                    "pg_ctl start",
                )
            except PostgresClusterError as error:
                # Most likely the port was taken meanwhile: try another (a real fault fails every attempt).
                last = error
                continue
            self._port = port
            return
        assert last is not None
        raise last

    def _stop_server(self) -> None:
        try:
            self._run(
                [self._tool("pg_ctl"), "stop", "--pgdata", str(self.data_dir), "--mode", "immediate", "--wait"],
                "pg_ctl stop",
            )
        except PostgresClusterError:
            # pg_ctl could not stop it: end the postmaster directly so no server outlives its directory.
            with contextlib.suppress(OSError, ValueError, IndexError):
                pid = int((self.data_dir / "postmaster.pid").read_text().splitlines()[0])
                os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def throwaway_cluster(bindir: Path | str | None = None) -> Iterator[PostgresCluster]:
    """A started :class:`PostgresCluster`, stopped and removed when the block ends (also on failure)."""
    cluster = PostgresCluster(bindir)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """``--check``: exit 0 if a throwaway server can be started here, else print the instruction and exit 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args != ["--check"]:
        print("usage: python -m reaqtive.testing.postgres --check", file=sys.stderr)
        return 2
    try:
        check()
    except PostgresNotFoundError as error:
        print(error, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
