"""A checkpoint store in a PostgreSQL database, through psycopg 3 (the optional extra ``reaqtive[postgres]``).

It keeps what :class:`~reaqtive.state.SqliteCheckpointStore` keeps, with the same guarantees: each checkpoint is
one PostgreSQL transaction, so a crash of the client at any moment (even ``SIGKILL`` in the middle of a commit)
leaves the previous or the next checkpoint; a returned commit is durable as the server's ``synchronous_commit``
makes it (``on``, the default: flushed to the server's WAL before the commit returns).

Layout (version 2, the row checksums of the SQLite store's version 2), in the connection's current schema (the
first of its ``search_path``; choose another with ``?options=-csearch_path%3Dname`` in the URL)::

    reaqtive_meta(key text PRIMARY KEY, value jsonb)            -- format, schema_version, checkpoint_id
    reaqtive_blobs(category text, key text, value bytea, crc bigint, PRIMARY KEY (category, key))

Every row carries :func:`~reaqtive.state.sqlite_store.row_checksum` of its place and content, verified whenever it
is read: a value changed behind the store's back, or moved to another row's place, is reported as the SQLite
store reports it (:class:`DamagedRowError`, or left out of a non-strict read). A database whose ``reaqtive_meta``
describes something else is refused (:class:`NotAStoreError`), a store of an unknown layout version
(:class:`UnknownStoreVersionError`), both untouched. Every psycopg error becomes a :class:`StoreError` naming the
database (its URL without the password) and the operation; a server that cannot be reached raises
:class:`StoreConnectionError`, a DSN that cannot be parsed :class:`InvalidDsnError`.

psycopg is imported when a store is opened, never before: ``import reaqtive`` works without it, and opening a
store without it raises :class:`StoreError` saying to ``pip install 'reaqtive[postgres]'``.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any, Final
from urllib.parse import quote

from reaqtive.state.sqlite_store import SCHEMA_VERSION, row_checksum, verifies
from reaqtive.state.state_errors import (
    DamagedRowError,
    NotAStoreError,
    StoreCorruptError,
    StoreError,
    UnknownStoreVersionError,
)
from reaqtive.state.store import CheckpointSnapshot, CheckpointStore, CheckpointTransaction, StoreChanges

__all__ = [
    "InvalidDsnError",
    "PostgresCheckpointStore",
    "StoreConnectionError",
    "application_name",
    "application_pid",
    "connect",
    "describe_dsn",
    "is_postgres_dsn",
    "postgres_error",
    "psycopg_module",
]

_FORMAT: Final = "reaqtive-checkpoint-store"
_INSTALL: Final = "pip install 'reaqtive[postgres]'"
_SYNCHRONOUS: Final = frozenset({"OFF", "NORMAL", "FULL", "EXTRA"})
_URL: Final = re.compile(r"^postgres(?:ql)?://", re.IGNORECASE)
# One setting of a libpq key=value DSN: a keyword, '=', a value (quoted, or up to the next space).
_SETTING: Final = re.compile(r"\s*(\w+)\s*=\s*(?:'(?:[^'\\]|\\.)*'|[^\s']\S*)(?:\s+|$)")
_PLACE_KEYS: Final = ("host", "hostaddr", "dbname", "port", "service")
# SQLSTATEs of data the server itself finds damaged (data_corrupted, index_corrupted).
_CORRUPT: Final = frozenset({"XX001", "XX002"})
_CREATE_LOCK: Final = 0x72710001  # pg_advisory_xact_lock class: serializes stores creating one schema's tables

_SCHEMA: Final = (
    "CREATE TABLE reaqtive_meta (key text PRIMARY KEY, value jsonb NOT NULL)",
    "CREATE TABLE reaqtive_blobs (category text NOT NULL, key text NOT NULL, value bytea NOT NULL, "
    "crc bigint NOT NULL, PRIMARY KEY (category, key))",
)

_PUT: Final = (
    "INSERT INTO reaqtive_blobs (category, key, value, crc) "
    "SELECT * FROM unnest(%s::text[], %s::text[], %s::bytea[], %s::bigint[]) "
    "ON CONFLICT (category, key) DO UPDATE SET value = excluded.value, crc = excluded.crc"
)
_DELETE: Final = (
    "DELETE FROM reaqtive_blobs WHERE (category, key) IN (SELECT * FROM unnest(%s::text[], %s::text[]))"
)

Prepare = Callable[[Any], None]
"""A hook run, with the store's psycopg connection, inside the transaction that opens the store."""


class StoreConnectionError(StoreError):
    """The PostgreSQL server could not be reached, or refused the connection (the message says why)."""


class InvalidDsnError(StoreError, ValueError):
    """A PostgreSQL connection string (URL or ``key=value`` DSN) that cannot be parsed."""


# -- connection strings ---------------------------------------------------------------------------------------------


def is_postgres_dsn(target: object) -> bool:
    """Whether ``target`` names a PostgreSQL database: a ``postgresql://`` or ``postgres://`` URL, or a libpq
    ``key=value`` DSN naming a host, database, port or service (a :class:`~pathlib.Path` is always a file)."""
    if not isinstance(target, str):
        return False
    if _URL.match(target):
        return True
    keys: set[str] = set()
    at, end = 0, len(target.rstrip())
    while at < end:  # setting after setting, each matched once: linear in the length, whatever the text
        setting = _SETTING.match(target, at)
        if setting is None:
            return False
        keys.add(setting.group(1).lower())
        at = setting.end()
    return any(key in keys for key in _PLACE_KEYS)


def psycopg_module() -> ModuleType:
    """psycopg, imported now; :class:`StoreError` with the install command if it is not installed."""
    try:
        import psycopg  # an optional dependency: imported only by a PostgreSQL store
    except ImportError as error:
        raise StoreError(f"a PostgreSQL store needs psycopg 3, which is not installed: {_INSTALL}") from error
    return psycopg


def _parse(dsn: str) -> dict[str, Any]:
    psycopg = psycopg_module()
    try:
        return dict(psycopg.conninfo.conninfo_to_dict(dsn))
    except psycopg.Error as error:
        raise InvalidDsnError(f"not a valid PostgreSQL connection string: {_first_line(error)}") from error


def describe_dsn(dsn: str) -> str:
    """The database a connection string names, as a URL without the password (for messages):
    ``postgresql://user@host:port/dbname``; what the DSN leaves out is left out."""
    parts = _parse(dsn)
    user = parts.get("user")
    host = parts.get("host") or parts.get("hostaddr") or ""
    if host.startswith("/"):  # a unix-socket directory
        host = quote(host, safe="")
    port = parts.get("port")
    name = f"postgresql://{quote(user, safe='') + '@' if user else ''}{host}{':' + port if port else ''}"
    return f"{name}/{quote(parts.get('dbname') or '', safe='')}"


LOCK_TIMEOUT_SECONDS = 30.0
"""How long a store statement waits for a lock another session holds before it fails (SQLite's busy timeout)."""
_CONNECTION_DEFAULTS: Final[dict[str, int]] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
    "tcp_user_timeout": 60_000,  # milliseconds: data unacknowledged this long means the peer is gone
}
_LOCKED: Final = frozenset({"55P03"})  # lock_not_available: lock_timeout expired


def connect(dsn: str, where: str, *, application: str, synchronous: str = "FULL") -> Any:
    """An autocommit psycopg connection to ``dsn`` (``where``: its name in messages). ``synchronous``
    ``"OFF"`` turns the session's ``synchronous_commit`` off (commits survive a client crash but not a server
    crash); the other values keep the server's setting."""
    psycopg = psycopg_module()
    _parse(dsn)  # a malformed DSN is a clear error, before any network
    options: dict[str, Any] = {"autocommit": True, "application_name": application}
    # Bounded waits, as SQLite's busy timeout bounds them: a connection that cannot be made, a peer that went
    # silent (keepalives, unacknowledged sends), a lock another session holds (lock_timeout, set below).
    for option, value in _CONNECTION_DEFAULTS.items():
        if option not in dsn:
            options[option] = value
    try:
        connection = psycopg.connect(dsn, **options)
    except psycopg.OperationalError as error:
        raise StoreConnectionError(f"{where}: cannot connect to the PostgreSQL server: {_first_line(error)}") from error
    except psycopg.Error as error:
        connection_error = postgres_error(error, where, "connecting")
        raise connection_error from error
    try:
        connection.execute(f"SET lock_timeout = {int(LOCK_TIMEOUT_SECONDS * 1000)}")
        if synchronous.upper() == "OFF":
            connection.execute("SET synchronous_commit = off")
        (schema,) = connection.execute("SELECT current_schema()").fetchone()
        if schema is None:
            raise StoreError(f"{where}: the connection has no current schema (its search_path names none that "
                             "exists): create the schema, or set search_path")
    except BaseException as error:
        connection.close()
        if isinstance(error, psycopg.Error):
            raise postgres_error(error, where, "connecting") from error
        raise
    return connection


def postgres_error(error: Exception, where: str, operation: str, *, rolled_back: bool = False) -> StoreError:
    """The :class:`StoreError` for a psycopg error of ``operation`` on the database ``where``:
    :class:`StoreCorruptError` when the server reports damaged data, :class:`StoreConnectionError` when the
    connection is lost, a plain :class:`StoreError` otherwise."""
    failed = f"{where}: {operation} failed" + (" and was rolled back" if rolled_back else "")
    text = _first_line(error)
    state = getattr(error, "sqlstate", None)
    if state in _CORRUPT:
        return StoreCorruptError(f"{failed}: the database reports damaged data ({text}); restore it from a backup")
    if state in _LOCKED:
        return StoreError(f"{failed}: another session held a lock on the engine's tables for more than "
                          f"{LOCK_TIMEOUT_SECONDS:g} s ({text})")
    lost = state is None or state.startswith(("08", "57P"))  # no answer from the server, connection, shutdown
    if isinstance(error, psycopg_module().OperationalError) and lost:
        return StoreConnectionError(f"{failed}: the connection to the PostgreSQL server failed ({text})")
    return StoreError(f"{failed}: {text}")  # e.g. text with a NUL character, which PostgreSQL cannot store


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# -- the store ------------------------------------------------------------------------------------------------------


class PostgresCheckpointStore(CheckpointStore):
    """A checkpoint store in the PostgreSQL database ``dsn`` names (its tables created if missing).

    ``synchronous``: ``"OFF"`` turns ``synchronous_commit`` off for the store's session (a commit survives a
    crash of this process but not of the server); the other values keep the server's (``on`` by default).
    ``prepare``: called with the store's psycopg connection inside the one transaction that creates or opens the
    store (after its own tables), so that a host can create tables of its own atomically with them; if it
    raises, everything is rolled back, the database is left as it was, and the error propagates.

    Example: ``with PostgresCheckpointStore("postgresql://app@db/state") as store: store.read()``
    """

    def __init__(self, dsn: str, *, synchronous: str = "FULL", prepare: Prepare | None = None) -> None:
        if synchronous.upper() not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {sorted(_SYNCHRONOUS)}, got {synchronous!r}")
        self._where = describe_dsn(dsn)
        self._psycopg = psycopg_module()
        self._lock = threading.Lock()
        self._connection = connect(dsn, self._where, application=application_name("checkpoints"),
                                   synchronous=synchronous)
        try:
            self._open(prepare)
        except BaseException:
            self._connection.close()
            raise

    @property
    def where(self) -> str:
        """The database, as a URL without the password."""
        return self._where

    @property
    def connection(self) -> Any:
        """The store's psycopg connection (autocommit; a ``prepare`` hook's, and its host's writer lock's)."""
        return self._connection

    def _open(self, prepare: Prepare | None) -> None:
        with self._failing("opening the checkpoint store", rolled_back=True), self._connection.transaction():
            connection = self._connection
            (schema,) = connection.execute("SELECT current_schema()").fetchone()
            # Two stores opening one new schema at once: the second waits, then finds the tables made.
            connection.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_CREATE_LOCK, schema))
            tables = _tables(connection)
            if tables:
                self._check_schema(tables)  # refuses before anything is written
            else:
                for statement in _SCHEMA:
                    connection.execute(statement)
                connection.cursor().executemany(
                    "INSERT INTO reaqtive_meta (key, value) VALUES (%s, %s::jsonb)",
                    [(key, json.dumps(value)) for key, value in
                     (("format", _FORMAT), ("schema_version", SCHEMA_VERSION), ("checkpoint_id", 0))],
                )
            if prepare is not None:
                prepare(connection)

    def _check_schema(self, tables: set[str]) -> None:
        if "reaqtive_meta" not in tables:
            raise NotAStoreError(f"{self._where}: the schema has reaqtive tables but no reaqtive_meta; it was left "
                                 "untouched")
        meta = dict(self._connection.execute("SELECT key, value FROM reaqtive_meta").fetchall())
        if meta.get("format") != _FORMAT:
            raise NotAStoreError(f"{self._where}: reaqtive_meta does not describe a reaqtive checkpoint store; it "
                                 "was left untouched")
        version = meta.get("schema_version")
        if version != SCHEMA_VERSION:
            raise UnknownStoreVersionError(self._where, version, SCHEMA_VERSION)
        if "reaqtive_blobs" not in tables:
            raise NotAStoreError(f"{self._where}: the reaqtive_blobs table is missing")

    @contextmanager
    def _failing(self, operation: str, *, rolled_back: bool = False) -> Iterator[None]:
        try:
            yield
        except self._psycopg.Error as error:
            raise postgres_error(error, self._where, operation, rolled_back=rolled_back) from error

    # -- store ------------------------------------------------------------------------------------------------------

    def begin(self) -> CheckpointTransaction:
        return _Transaction(self)

    def read(self, *, strict: bool = True) -> CheckpointSnapshot:
        """The latest committed checkpoint (one consistent snapshot of the database); every row's checksum is
        verified. ``strict``: a damaged row raises :class:`DamagedRowError`; otherwise it is left out and listed
        in ``snapshot.damaged``."""
        with self._lock, self._failing("reading the checkpoint store"), self._connection.transaction():
            connection = self._connection
            connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            checkpoint_id = self._checkpoint_id()
            rows = connection.execute("SELECT category, key, value, crc FROM reaqtive_blobs").fetchall()
        # Columns have their types here (no text that is not text, as a damaged SQLite file may hold): only the
        # checksums tell sound rows from changed ones.
        data: dict[str, dict[str, bytes]] = {}
        keys: dict[str, str] = {}  # one str object per key across categories (a host keeps several of them)
        damaged: dict[tuple[str, str], Exception] = {}
        for category, key, value, crc in rows:
            if verifies(crc, row_checksum, category, key, value):
                data.setdefault(category, {})[keys.setdefault(key, key)] = value
            else:
                damaged[(category, key)] = self._damage(category, key)
        if strict and damaged:
            raise next(iter(damaged.values()))
        return CheckpointSnapshot(checkpoint_id, data, damaged)

    def _damage(self, category: str, key: str) -> DamagedRowError:
        row = f"{category}/{key}"
        return DamagedRowError(f"{self._where}: blob {row} does not match its checksum (changed in the database, or "
                               "moved to another row's place)", "reaqtive_blobs", row)

    def _checkpoint_id(self) -> int:
        row = self._connection.execute("SELECT value FROM reaqtive_meta WHERE key = 'checkpoint_id'").fetchone()
        if row is None or type(row[0]) is not int:
            raise StoreCorruptError(f"{self._where}: the checkpoint id in reaqtive_meta is damaged or missing")
        return row[0]

    def _apply(self, changes: StoreChanges) -> int:
        # Pipelined: the statements go out together, and only the checkpoint id and the commit are waited for.
        connection = self._connection
        with (self._lock, self._failing("checkpoint commit", rolled_back=True), connection.pipeline(),
              connection.transaction()):
            cursor = connection.cursor()
            if changes.clears:
                cursor.execute("DELETE FROM reaqtive_blobs WHERE category = ANY(%s)", (sorted(changes.clears),))
            # Each as one statement over arrays (unnest): a checkpoint of thousands of blobs is a few round trips.
            puts = [(c, k, v) for (c, k), v in changes.writes.items() if v is not None]
            if puts:
                categories, keys, values = (list(column) for column in zip(*puts, strict=True))
                cursor.execute(_PUT, (categories, keys, values, [row_checksum(*put) for put in puts]))
            deletes = [place for place, v in changes.writes.items() if v is None]
            if deletes:
                cursor.execute(_DELETE, tuple(list(column) for column in zip(*deletes, strict=True)))
            for hook in changes.hooks:  # the host's other tables, in this transaction (run_in_commit)
                hook(connection)
            checkpoint_id = self._checkpoint_id() + 1
            cursor.execute("UPDATE reaqtive_meta SET value = to_jsonb(%s::bigint) WHERE key = 'checkpoint_id'",
                           (checkpoint_id,))
            return checkpoint_id

    def close(self) -> None:
        """Close the connection. Its session's advisory locks (a host's writer lock) are released first: the
        server ends a closed session a moment later, and the next opener must not find the lock still held."""
        with self._lock:
            try:
                if not self._connection.closed and not self._connection.broken:
                    self._connection.execute("SELECT pg_advisory_unlock_all()")
            except self._psycopg.Error:
                pass  # a lost connection holds nothing any more
            finally:
                self._connection.close()

    def __repr__(self) -> str:
        return f"PostgresCheckpointStore({self._where!r})"


class _Transaction(CheckpointTransaction):
    """Changes that the store's ``_apply`` commits in one PostgreSQL transaction."""

    _runs_hooks = True

    def __init__(self, store: PostgresCheckpointStore) -> None:
        super().__init__()
        self._commit = store._apply

    def _apply(self, changes: StoreChanges) -> int:
        return self._commit(changes)


def application_name(role: str) -> str:
    """The ``application_name`` of a connection: who holds it (``pg_stat_activity`` shows it)."""
    return f"reaqtive {role} (pid {os.getpid()})"


def application_pid(name: object) -> int | None:
    """The client pid in an ``application_name`` this module gave (``None`` for any other)."""
    found = re.fullmatch(r"reaqtive [a-z ]+ \(pid (\d+)\)", name) if isinstance(name, str) else None
    return int(found.group(1)) if found else None


def _tables(connection: Any) -> set[str]:
    rows = connection.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
        "AND table_name LIKE 'reaqtive\\_%%'"
    ).fetchall()
    return {name for (name,) in rows}
