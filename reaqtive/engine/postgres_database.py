"""The engine's store in a PostgreSQL database: what the SQLite file keeps, in tables of one schema.

``Engine("postgresql://user@host:5432/dbname")`` (or ``postgres://...``, or a libpq ``key=value`` DSN) opens a
:class:`PostgresEngineStore`: the checkpoint store is a :class:`~reaqtive.state.PostgresCheckpointStore`, and the
ingress log, the durable sink, the acknowledgements and the dead letters are the tables of
:mod:`reaqtive.engine.database` with the same columns, rows, checksums and transactions — it *is* an
:class:`~reaqtive.engine.database.EngineStore`, whose every method runs here unchanged but for the SQL dialect.
It is at engine layout 5; a database of layout 4 (the first one PostgreSQL stores had) is migrated when it is
opened, in the opening transaction, as the SQLite file is (its dead letters get their numbers). An unknown
layout is refused untouched (:class:`~reaqtive.engine.database.UnknownEngineVersionError`).

**Tables** (in the connection's current schema): ``reaqtive_meta`` and ``reaqtive_blobs`` (the checkpoint
store's), ``reaqtive_ingress``, ``reaqtive_stream_heads``, ``reaqtive_egress``, ``reaqtive_acks``,
``reaqtive_dead_letters``, ``reaqtive_failed_elements`` and ``reaqtive_dead_letter_acks``. Blobs are ``bytea``,
numbers ``bigint``, names ``text COLLATE "C"`` (ordered by their bytes, as SQLite orders them). A dead letter's
``time`` is kept as the msgpack of what it was stored with (an integer, or the bytes of a damaged row's times),
since a column of PostgreSQL has one type.

**Transactions** map one to one to the SQLite store's: an append (or a group commit) is one transaction, durable
when it returns (``synchronous_commit`` on, the server's default; ``synchronous="OFF"`` turns it off for the
engine's sessions, which then survive the engine's crash but not the server's); a checkpoint is one transaction of
the checkpoint store. A client killed at any moment leaves the previous or the next state: the server rolls back
what was not committed.

**One writer.** The engine takes a session-level advisory lock (``pg_try_advisory_lock``, keyed by the schema) on
its checkpoint connection in the opening transaction and holds it until it closes; a second engine on the same
schema gets :class:`~reaqtive.state.StoreLockedError` naming the database and the holder's pid (from the holder's
``application_name``, ``reaqtive checkpoints (pid N)``). A killed engine's connections close with it, and the
server drops the lock.

**Integrity.** Every row is verified against its checksum when read, as in the file: a row changed behind the
engine's back is reported exactly as the SQLite store reports it (a damaged ingress row is quarantined, a damaged
output raises :class:`~reaqtive.state.DamagedRowError`). psycopg errors become
:class:`~reaqtive.state.StoreError` subclasses naming the database (never its password) and the operation.

Two connections (checkpoints and the rest), as the SQLite store has. ``path`` is the database's URL without the
password, a ``str``. ``reaqtive inspect DSN`` reads the tables in a ``READ ONLY`` transaction
(:func:`reaqtive.engine.inspection.read_store`).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

import msgpack

from reaqtive.engine.database import (
    _INGRESS_COUNTS,
    _INGRESS_EXTENTS,
    _INSERT_DEAD_LETTER,
    _INSERT_FAILED,
    _INSERT_OUTPUTS,
    _LETTER_ID_KEY,
    _POSITION_KEY,
    _SET_COUNTER,
    _SET_POSITION,
    ENGINE_SCHEMA_VERSION,
    ROW_EVENTS,
    EngineStore,
    UnknownEngineVersionError,
    check_layout,
    dead_letter_id_checksum,
)
from reaqtive.state import DEFAULT_CODEC, StateCodec, StoreError, StoreLockedError
from reaqtive.state.postgres_store import (
    PostgresCheckpointStore,
    application_name,
    application_pid,
    connect,
    describe_dsn,
    postgres_error,
    psycopg_module,
)

__all__ = ["PostgresEngineStore", "postgres_sql"]

_MIGRATES: Final = (4,)  # the older engine layouts of a PostgreSQL store that opening migrates
_WRITER_LOCK: Final = 0x72710002  # the advisory lock's first key; the second is the schema's
_NAME: Final = 'text COLLATE "C" NOT NULL'  # byte order, as SQLite's BINARY
_TABLES: Final = (
    f"CREATE TABLE reaqtive_ingress (pos bigint PRIMARY KEY, stream {_NAME}, seq bigint NOT NULL, "
    "count integer NOT NULL, times bytea NOT NULL, payload bytea NOT NULL, crc bigint NOT NULL, "
    "UNIQUE (stream, seq))",
    f"CREATE TABLE reaqtive_stream_heads (stream {_NAME} PRIMARY KEY, next_seq bigint NOT NULL)",
    f"CREATE TABLE reaqtive_egress (subscription {_NAME}, seq bigint NOT NULL, count integer NOT NULL, "
    "payload bytea NOT NULL, crc bigint NOT NULL, PRIMARY KEY (subscription, seq))",
    f"CREATE TABLE reaqtive_dead_letters (stream {_NAME}, seq bigint NOT NULL, pos bigint, time bytea, "
    "payload bytea, reason text NOT NULL, at bigint NOT NULL, crc bigint NOT NULL, id bigint NOT NULL UNIQUE, "
    "id_crc bigint NOT NULL, PRIMARY KEY (stream, seq))",
    f"CREATE TABLE reaqtive_acks (subscription {_NAME} PRIMARY KEY, seq bigint NOT NULL, crc bigint NOT NULL)",
)
# The tables layout 5 added (the dead letters' numbers are added to their table by the migration).
_TABLES_5: Final = (
    f"CREATE TABLE reaqtive_failed_elements (id bigint PRIMARY KEY, subscription {_NAME}, unit {_NAME}, "
    f"path {_NAME}, pos bigint NOT NULL, ordinal bigint NOT NULL, operator text NOT NULL, error_type text NOT NULL, "
    "message text NOT NULL, traceback text NOT NULL, element text, at bigint NOT NULL, payload bytea, "
    "crc bigint NOT NULL, UNIQUE (subscription, unit, path, pos, ordinal))",
    f"CREATE TABLE reaqtive_dead_letter_acks (name {_NAME} PRIMARY KEY, id bigint NOT NULL, crc bigint NOT NULL)",
)

# The statements of EngineStore that are not plain SQL with '?' parameters, in PostgreSQL's words.
_DIALECT: Final = {
    _INSERT_DEAD_LETTER: (
        "INSERT INTO reaqtive_dead_letters (stream, seq, pos, time, payload, reason, at, crc, id, id_crc) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
    ),
    _INSERT_FAILED: (
        "INSERT INTO reaqtive_failed_elements (id, subscription, unit, path, pos, ordinal, operator, error_type, "
        "message, traceback, element, at, payload, crc) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
        "%s, %s) ON CONFLICT DO NOTHING"
    ),
    _SET_COUNTER: (
        "INSERT INTO reaqtive_meta (key, value) VALUES (%s, to_jsonb(%s::bigint)) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
    ),
    _INSERT_OUTPUTS: (
        "INSERT INTO reaqtive_egress (subscription, seq, count, payload, crc) VALUES (%s, %s, %s, %s, %s) "
        "ON CONFLICT DO NOTHING"
    ),
    _SET_POSITION: (
        f"INSERT INTO reaqtive_meta (key, value) VALUES ('{_POSITION_KEY}', to_jsonb(%s::bigint)) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
    ),
    # every count is an integer here; one no writer writes (damage) stands for one event, as in SQLite
    _INGRESS_COUNTS: (
        f"SELECT stream, SUM(CASE WHEN count BETWEEN 1 AND {ROW_EVENTS} THEN count ELSE 1 END) "
        "FROM reaqtive_ingress GROUP BY stream"
    ),
    _INGRESS_EXTENTS: (
        f"SELECT stream, SUM(CASE WHEN count BETWEEN 1 AND {ROW_EVENTS} THEN count ELSE 1 END), "
        "SUM(COALESCE(length(payload), 0) + COALESCE(length(times), 0)), MIN(seq), MIN(pos), "
        f"MAX(pos + CASE WHEN count BETWEEN 1 AND {ROW_EVENTS} THEN count ELSE 1 END - 1) "
        "FROM reaqtive_ingress GROUP BY stream"
    ),
}
_TRANSLATED: dict[str, str] = {}


def postgres_sql(sql: str) -> str:
    """A statement of :class:`EngineStore` (SQLite's dialect, ``?`` parameters) in PostgreSQL's (``%s``)."""
    translated = _TRANSLATED.get(sql)
    if translated is None:
        translated = _DIALECT.get(sql) or sql.replace("%", "%%").replace("?", "%s")
        _TRANSLATED[sql] = translated
    return translated



def stored_time(column: object) -> object:
    """A dead letter's time as the SQLite store keeps it: PostgreSQL keeps its msgpack (a column has one type)."""
    if type(column) is not bytes:
        return column
    try:
        return msgpack.unpackb(column)
    except Exception:  # changed behind the store's back: the raw bytes, which do not verify
        return column

class PostgresEngineStore(EngineStore):
    """The engine's store in the PostgreSQL database ``dsn`` names, held by this store alone until :meth:`close`
    (see the module docstring). ``synchronous``: ``"OFF"`` turns ``synchronous_commit`` off for the store's
    sessions; the other values keep the server's setting. Raises :class:`~reaqtive.state.StoreLockedError` if
    another engine holds the schema, :class:`~reaqtive.state.StoreConnectionError` if the server cannot be
    reached, and other :class:`~reaqtive.state.StoreError` subclasses for everything else that stops the open.

    Example: ``store = PostgresEngineStore("postgresql://app@db:5432/events")``
    """

    def __init__(self, dsn: str, *, synchronous: str = "FULL", codec: StateCodec = DEFAULT_CODEC) -> None:
        psycopg = psycopg_module()
        self._setup(describe_dsn(dsn), synchronous, codec)
        self._driver_errors = (psycopg.Error,)
        self._writer = None
        self.checkpoints = PostgresCheckpointStore(dsn, synchronous=synchronous, prepare=self._prepare)
        try:
            self._db = connect(dsn, self._where, application=application_name("engine"), synchronous=synchronous)
            try:
                self._load_acks()
            except BaseException:
                self._db.close()
                raise
        except BaseException:
            self.checkpoints.close()  # and with its connection, the writer lock
            raise

    @property
    def path(self) -> str:
        """The database, as a URL without the password."""
        return self._where

    @property
    def in_memory(self) -> bool:
        """Always false: the store is a database."""
        return False

    def _prepare(self, db: Any) -> None:
        """Inside the checkpoint store's opening transaction: refuse an unknown layout, take the writer lock,
        create the engine tables of a new store or migrate an older one."""
        row = db.execute("SELECT value FROM reaqtive_meta WHERE key = 'engine_schema_version'").fetchone()
        version = None if row is None else row[0]
        if version is not None and version not in (ENGINE_SCHEMA_VERSION, *_MIGRATES):
            raise UnknownEngineVersionError(
                f"{self._where}: written by an engine with store layout version {version!r}; this engine knows "
                f"version {ENGINE_SCHEMA_VERSION} (and migrates version "
                f"{', '.join(map(str, _MIGRATES))}). The database was left untouched"
            )
        if version is not None:  # before the lock is taken: a mismatch leaves the database untouched
            check_layout(self._where, version, _postgres_columns(db))
        (schema,) = db.execute("SELECT current_schema()").fetchone()
        key = zlib.crc32(schema.encode("utf-8")) & 0x7FFFFFFF
        (taken,) = db.execute("SELECT pg_try_advisory_lock(%s, %s)", (_WRITER_LOCK, key)).fetchone()
        if not taken:
            raise StoreLockedError(self._where, _holder(db, key), inspectable=False)
        if version is None:
            for statement in (*_TABLES, *_TABLES_5):
                db.execute(statement)
            db.execute("INSERT INTO reaqtive_meta (key, value) VALUES ('engine_schema_version', to_jsonb(%s))",
                       (ENGINE_SCHEMA_VERSION,))
        elif version == 4:
            _migrate_from_4(db)

    # -- the database seam ----------------------------------------------------------------------------------------

    def _store_error(self, error: Exception, operation: str, *, rolled_back: bool = False) -> StoreError:
        return postgres_error(error, self._where, operation, rolled_back=rolled_back)

    def _all(self, db: Any, sql: str, params: Sequence[object] = ()) -> list[Any]:
        rows: list[Any] = db.execute(postgres_sql(sql), params).fetchall()
        return rows

    def _one(self, db: Any, sql: str, params: Sequence[object] = ()) -> Any:
        return db.execute(postgres_sql(sql), params).fetchone()

    def _exec(self, db: Any, sql: str, params: Sequence[object] = ()) -> None:
        db.execute(postgres_sql(sql), params)

    def _many(self, db: Any, sql: str, rows: Sequence[Sequence[object]]) -> None:
        if rows:
            db.cursor().executemany(postgres_sql(sql), rows)  # pipelined: no round trip per row

    def _insert_dead_letters(self, db: Any, rows: Sequence[tuple[object, ...]]) -> int:
        if not rows:
            return 0
        stored = [(*row[:3], None if row[3] is None else msgpack.packb(row[3]), *row[4:]) for row in rows]
        cursor = db.cursor()
        # A pipeline does not count the rows an executemany changed: each new row returns one.
        cursor.executemany(postgres_sql(_INSERT_DEAD_LETTER) + " RETURNING 1", stored, returning=True)
        new = len(cursor.fetchall())
        while cursor.nextset():
            new += len(cursor.fetchall())
        return new

    def _stored_time(self, column: object) -> object:
        return stored_time(column)

    @contextmanager
    def _transaction(self, operation: str) -> Iterator[Any]:
        """One transaction: committed at the end of the block, rolled back if it raises."""
        with self._lock:
            db: Any = self._db
            try:
                # Pipelined: statements whose results are not read go out without waiting for the server, so an
                # append is a few round trips however many statements it runs; the commit is waited for.
                with db.pipeline(), db.transaction():
                    yield db
            except self._driver_errors as error:
                raise self._store_error(error, operation, rolled_back=True) from error

    def __repr__(self) -> str:
        return f"PostgresEngineStore({self._where!r})"


def _migrate_from_4(db: Any) -> None:
    """Engine layout 4 → 5, inside the opening transaction (see the SQLite store's migration): every dead letter
    gets a number in the order ``(pos, stream, seq)``, never-logged events (``pos`` NULL) last, and an ``id_crc``;
    its other columns and its ``crc`` stay as they were. The failed elements' table and the dead letters'
    acknowledgement are created empty."""
    keys = db.execute("SELECT stream, seq FROM reaqtive_dead_letters ORDER BY pos ASC NULLS LAST, stream, seq"
                      ).fetchall()
    db.execute("ALTER TABLE reaqtive_dead_letters ADD COLUMN id bigint, ADD COLUMN id_crc bigint")
    if keys:
        db.cursor().executemany(
            "UPDATE reaqtive_dead_letters SET id = %s, id_crc = %s WHERE stream = %s AND seq = %s",
            [(n, dead_letter_id_checksum(n, stream, seq), stream, seq) for n, (stream, seq) in enumerate(keys, 1)],
        )
        db.execute(postgres_sql(_SET_COUNTER), (_LETTER_ID_KEY, len(keys)))
    db.execute("ALTER TABLE reaqtive_dead_letters ALTER COLUMN id SET NOT NULL, ALTER COLUMN id_crc SET NOT NULL, "
               "ADD UNIQUE (id)")
    for statement in _TABLES_5:
        db.execute(statement)
    db.execute("UPDATE reaqtive_meta SET value = to_jsonb(5) WHERE key = 'engine_schema_version'")


def _postgres_columns(db: Any) -> dict[str, set[str]]:
    """The column names of each ``reaqtive_`` table of the connection's current schema."""
    columns: dict[str, set[str]] = {}
    for table, column in db.execute(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema() "
        "AND table_name LIKE 'reaqtive\\_%%'"
    ).fetchall():
        columns.setdefault(table, set()).add(column)
    return columns


def _holder(db: Any, key: int) -> int | None:
    """The pid of the client holding the writer lock, from its ``application_name`` (``None``: unknown)."""
    row = db.execute(
        "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s AND l.objid = %s AND l.objsubid = 2 "
        "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        (_WRITER_LOCK, key),
    ).fetchone()
    return None if row is None else application_pid(row[0])
