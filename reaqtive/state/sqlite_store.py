"""The durable checkpoint store: one SQLite file (standard library ``sqlite3``), in WAL mode.

Each checkpoint is one SQLite transaction (``BEGIN IMMEDIATE ... COMMIT``), so a crash — even ``kill -9`` in the
middle of a commit — leaves the file at the previous or the next checkpoint. With ``synchronous="FULL"`` (the
default) a returned commit is durable across power loss too; ``"NORMAL"`` is faster and still crash-safe for
process crashes.

Schema (version 2)::

    reaqtive_meta(key TEXT PRIMARY KEY, value)      -- format, schema_version, checkpoint_id
    reaqtive_blobs(category, key, value BLOB, crc)  -- PRIMARY KEY (category, key)

**Row checksums.** A row's ``crc`` is :func:`row_checksum` of the whole row — its place (category, key) and its
content (value) — verified whenever the row is read. So a damaged value, a damaged key and a row moved or copied
to another row's place (two subscriptions' state rows swapped) all fail verification; a checksum of the value
alone (schema version 1) passed the last two and loaded one query's state into another. :func:`columns_checksum`
is the one definition every reaqtive table's checksum uses (the engine's ingress, egress and dead-letter rows
too): the CRC-32 of the msgpack array of the row's columns.

**Migration.** A version-1 file is migrated in place when it is opened, in one transaction (together with the
tables of a ``prepare`` hook, see :class:`SqliteCheckpointStore`): every row's old value-only CRC is verified
first; a row that verifies gets its row checksum, a row that does not keeps its bytes and gets a checksum that can
never verify (``old crc - 2**32``: negative, the old value still readable), so damage stays damaged and is never
blessed by the migration. A crash during the migration leaves the file at version 1.

Opening never changes a file that is not a reaqtive store: a foreign SQLite database or a file that is not
SQLite at all raises :class:`NotAStoreError`, a store of an unknown schema version
:class:`UnknownStoreVersionError`, a store whose metadata does not match its tables (schema 1 claimed over
schema 2's rows) :class:`StoreLayoutError`, and in each case the file is left as it was. Every ``sqlite3`` error
becomes a :class:`StoreError` naming the file and the operation (:class:`StoreCorruptError` when SQLite reports
the file damaged, or reads text in it that is not UTF-8).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import msgpack

from reaqtive.state.framing import checksum
from reaqtive.state.state_errors import (
    DamagedRowError,
    NotAStoreError,
    StoreCorruptError,
    StoreError,
    StoreLayoutError,
    UnknownStoreVersionError,
)
from reaqtive.state.store import CheckpointSnapshot, CheckpointStore, CheckpointTransaction, StoreChanges

__all__ = [
    "MIGRATES",
    "SCHEMA_VERSION",
    "SqliteCheckpointStore",
    "StoreLayoutError",
    "columns_checksum",
    "fetchall_lenient",
    "row_checksum",
    "store_error",
    "verifies",
]

SCHEMA_VERSION: Final = 2
MIGRATES: Final = (1,)
"""Older schema versions a store opened for writing migrates in place."""

_FORMAT: Final = "reaqtive-checkpoint-store"
_SQLITE_HEADER: Final = b"SQLite format 3\x00"
_SYNCHRONOUS: Final = frozenset({"OFF", "NORMAL", "FULL", "EXTRA"})
_SQLITE_CORRUPT: Final = frozenset({11, 26})  # SQLITE_CORRUPT, SQLITE_NOTADB (primary result codes)
_INLINE: Final = 4096  # a trailing bytes column longer than this is checksummed without copying it
# What SQLite (or the sqlite3 module) says of a damaged file without a corruption code: a malformed page or schema,
# text in the file that is not UTF-8 ("Could not decode to UTF-8 column ..."), a damaged header.
_DAMAGE_SYMPTOMS: Final = ("malformed", "not a database", "Could not decode to UTF-8", "unsupported file format")

_SCHEMA: Final = (
    "CREATE TABLE reaqtive_meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID",
    "CREATE TABLE reaqtive_blobs (category TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, "
    "crc INTEGER NOT NULL, PRIMARY KEY (category, key)) WITHOUT ROWID",
)

Prepare = Callable[[sqlite3.Connection], None]
"""A hook run inside the transaction that opens a store for writing (see :class:`SqliteCheckpointStore`)."""


# -- row checksums ----------------------------------------------------------------------------------------------


def row_checksum(category: str, key: str, value: bytes) -> int:
    """The ``crc`` of a ``reaqtive_blobs`` row: it binds the value to its place, so a value damaged, or moved to
    another ``(category, key)``, fails verification."""
    return columns_checksum(category, key, value)


def columns_checksum(*columns: object) -> int:
    """The checksum of a stored row: the CRC-32 of the msgpack array of its column values, in order.

    msgpack tags every value with its type and length, so the encoding is unambiguous: a changed value, a value
    of another type, or two values exchanged between columns change it. Text is encoded with surrogate escapes,
    so a text column SQLite holds as invalid UTF-8 (read back with :func:`fetchall_lenient`) still gets a
    checksum, one that does not verify. A long trailing ``bytes`` column (a blob) is fed to the CRC without being
    copied; the result is the same.
    """
    packer = _packer()
    last = columns[-1] if columns else None
    if type(last) is bytes and len(last) > _INLINE:
        head = packer.pack((*columns[:-1], b""))  # ends with the empty bin: 0xc4 0x00
        return zlib.crc32(last, zlib.crc32(head[:-2] + _bin_header(len(last))))
    return zlib.crc32(packer.pack(columns))


_LOCAL: Final = threading.local()


def _packer() -> Any:
    packer = getattr(_LOCAL, "packer", None)
    if packer is None:
        packer = _LOCAL.packer = msgpack.Packer(unicode_errors="surrogateescape")
    return packer


def _bin_header(length: int) -> bytes:
    if length < 0x100:
        return b"\xc4" + length.to_bytes(1, "big")
    if length < 0x10000:
        return b"\xc5" + length.to_bytes(2, "big")
    return b"\xc6" + length.to_bytes(4, "big")


def verifies(crc: object, checksum_of: Callable[..., int], *columns: object) -> bool:
    """Whether a stored ``crc`` equals ``checksum_of(*columns)``; a row whose columns cannot even be checksummed
    (a column of a type no writer stores, after damage) does not verify."""
    try:
        return crc == checksum_of(*columns)
    except (TypeError, ValueError, OverflowError):
        return False


# -- SQLite errors and damaged text -----------------------------------------------------------------------------


def store_error(error: sqlite3.Error, where: str, operation: str, *, rolled_back: bool = False) -> StoreError:
    """The :class:`StoreError` for an ``sqlite3`` error of ``operation`` on the file ``where`` (``rolled_back``:
    of a write transaction, which was rolled back): :class:`StoreCorruptError` when SQLite reports the file
    damaged (a corruption code, a malformed page or schema, a damaged header, text in the file that is not
    UTF-8), a plain :class:`StoreError` otherwise."""
    code = getattr(error, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    text = str(error)
    failed = f"{where}: {operation} failed" + (" and was rolled back" if rolled_back else "")
    if primary in _SQLITE_CORRUPT or any(symptom in text for symptom in _DAMAGE_SYMPTOMS):
        return StoreCorruptError(
            f"{failed}: the store file is damaged ({text}); restore it from a backup (`reaqtive inspect` shows "
            "what is still readable)"
        )
    return StoreError(f"{failed}: {text}")


def fetchall_lenient(connection: sqlite3.Connection, sql: str, params: Sequence[object] = ()) -> list[Any]:
    """``connection.execute(sql, params).fetchall()``, except that text SQLite holds as invalid UTF-8 (a damaged
    row) comes back with surrogate escapes instead of failing the whole read. The fast path is untouched: only
    a read that fails that way is repeated (in the same transaction, if one is open)."""
    try:
        return connection.execute(sql, params).fetchall()
    except sqlite3.OperationalError as error:
        if "decode" not in str(error):
            raise
    previous = connection.text_factory
    connection.text_factory = _lenient_text
    try:
        return connection.execute(sql, params).fetchall()
    finally:
        connection.text_factory = previous


def _lenient_text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


# -- the store --------------------------------------------------------------------------------------------------


class SqliteCheckpointStore(CheckpointStore):
    """A checkpoint store in the SQLite file at ``path`` (created if missing or empty).

    ``synchronous``: SQLite's durability setting (``"FULL"`` by default). ``timeout``: seconds to wait for a
    lock held by another connection. ``prepare``: called with the store's connection inside the one transaction
    that creates, migrates or opens the store (after its own tables are created or migrated), so that a host
    can create or migrate tables of its own atomically with them; if it raises, everything is rolled back, the
    file is left as it was, and the error propagates.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "FULL",
        timeout: float = 30.0,
        prepare: Prepare | None = None,
    ) -> None:
        if synchronous.upper() not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {sorted(_SYNCHRONOUS)}, got {synchronous!r}")
        self._path = Path(path)
        self._where = str(self._path)
        self._lock = threading.Lock()
        _check_file_header(self._path, self._where)
        try:
            self._connection = sqlite3.connect(
                self._path, isolation_level=None, check_same_thread=False, timeout=timeout
            )
        except sqlite3.Error as error:
            raise store_error(error, self._where, "opening the checkpoint store") from error
        try:
            self._open(synchronous.upper(), prepare)
        except BaseException:
            self._connection.close()
            raise

    @classmethod
    def shared_memory(cls, uri: str, *, prepare: Prepare | None = None, timeout: float = 30.0) -> SqliteCheckpointStore:
        """A store in the SQLite in-memory database ``uri`` names (``file:/name?vfs=memdb``), which other
        connections of this process may open too (an in-memory engine keeps its own tables there). Nothing is
        durable, so writes are not synced; ``path`` is ``:memory:``."""
        store = cls.__new__(cls)
        store._path = Path(":memory:")
        store._where = ":memory:"
        store._lock = threading.Lock()
        try:
            store._connection = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False,
                                                timeout=timeout)
        except sqlite3.Error as error:
            raise store_error(error, store._where, "opening the checkpoint store") from error
        try:
            store._open("OFF", prepare)
        except BaseException:
            store._connection.close()
            raise
        return store

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    # -- opening -----------------------------------------------------------------------------------------------

    def _open(self, synchronous: str, prepare: Prepare | None) -> None:
        connection = self._connection
        try:
            tables = _tables(connection)
            version = self._check_schema(tables) if tables else None  # refuses before anything is written
            if not tables:
                connection.execute("PRAGMA journal_mode=WAL")
            if version != SCHEMA_VERSION or prepare is not None:
                self._prepare(prepare)
            if tables:
                connection.execute("PRAGMA journal_mode=WAL")
            connection.execute(f"PRAGMA synchronous={synchronous}")
        except sqlite3.Error as error:
            raise store_error(error, self._where, "opening the checkpoint store") from error
        except UnicodeDecodeError as error:  # text of SQLite's own schema that is not UTF-8
            raise StoreCorruptError(
                f"{self._where}: opening the checkpoint store failed: the store file is damaged (its schema is not "
                f"valid text: {error})"
            ) from error

    def _prepare(self, prepare: Prepare | None) -> None:
        """Create, migrate and hand to ``prepare``, in one write transaction."""
        connection = self._connection
        connection.execute("BEGIN IMMEDIATE")
        try:
            tables = _tables(connection)  # another process may have created or migrated it meanwhile
            if not tables:
                for statement in _SCHEMA:
                    connection.execute(statement)
                connection.executemany(
                    "INSERT INTO reaqtive_meta (key, value) VALUES (?, ?)",
                    [("format", _FORMAT), ("schema_version", SCHEMA_VERSION), ("checkpoint_id", 0)],
                )
            elif self._check_schema(tables) == 1:
                self._check_rows_of_schema_1()
                _migrate_from_1(connection)
            if prepare is not None:
                prepare(connection)
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        self._check_schema(_tables(connection))

    def _check_schema(self, tables: set[str]) -> int:
        """The schema version of an existing store (the current one or one it migrates); refuses anything else."""
        if "reaqtive_meta" not in tables:
            raise NotAStoreError(
                f"{self._where}: an SQLite database but not a reaqtive checkpoint store (no reaqtive_meta table); "
                "it was left untouched"
            )
        meta = dict(self._connection.execute("SELECT key, value FROM reaqtive_meta").fetchall())
        if meta.get("format") != _FORMAT:
            raise NotAStoreError(f"{self._where}: reaqtive_meta does not describe a reaqtive checkpoint store")
        version = meta.get("schema_version")
        if version != SCHEMA_VERSION and version not in MIGRATES:
            raise UnknownStoreVersionError(self._where, version, SCHEMA_VERSION, migrates=MIGRATES)
        if "reaqtive_blobs" not in tables:
            raise NotAStoreError(f"{self._where}: the reaqtive_blobs table is missing")
        return int(version)

    def _check_rows_of_schema_1(self) -> None:
        """Before migrating from schema 1: refuse rows that carry schema 2's row checksum, not schema 1's value
        checksum. Metadata that claims schema 1 over schema 2's rows is damaged (or was edited), and migrating
        would mark every sound row damaged."""
        rows = fetchall_lenient(self._connection, "SELECT category, key, value, crc FROM reaqtive_blobs")
        for category, key, value, crc in rows:
            if (type(value) is bytes and type(category) is str and type(key) is str and crc != checksum(value)
                    and verifies(crc, row_checksum, category, key, value)):
                raise StoreLayoutError(
                    f"{self._where}: reaqtive_meta says checkpoint store schema version 1, but row {category}/{key} "
                    f"carries the row checksum of version {SCHEMA_VERSION}: the metadata does not match the tables "
                    "(damaged, or changed by hand); the file was left untouched"
                )

    # -- store -------------------------------------------------------------------------------------------------

    def begin(self) -> CheckpointTransaction:
        return _Transaction(self)

    def read(self, *, strict: bool = True) -> CheckpointSnapshot:
        """The latest committed checkpoint; every row's checksum is verified.

        ``strict``: a damaged row raises :class:`DamagedRowError` (a :class:`StateChecksumError`). Otherwise it
        is left out of the snapshot and listed in ``snapshot.damaged``, so that a host can recover everything else
        and report the rest (the damaged bytes stay in the file). A row moved to another row's place counts as
        damaged: the checksum covers its category and key.
        """
        with self._lock:
            connection = self._connection
            try:
                connection.execute("BEGIN")
                try:
                    checkpoint_id = self._checkpoint_id()
                    rows = fetchall_lenient(connection, "SELECT category, key, value, crc FROM reaqtive_blobs")
                finally:
                    connection.execute("COMMIT")
            except sqlite3.Error as error:
                raise store_error(error, self._where, "reading the checkpoint store") from error
        data: dict[str, dict[str, bytes]] = {}
        damaged: dict[tuple[str, str], Exception] = {}
        keys: dict[str, str] = {}  # one str object per key across categories (a host keeps several of them)
        for category, key, value, crc in rows:
            if (
                type(value) is bytes
                and type(category) is str
                and type(key) is str
                and verifies(crc, row_checksum, category, key, value)
            ):
                data.setdefault(category, {})[keys.setdefault(key, key)] = value
                continue
            row = f"{category}/{key}"
            damage = DamagedRowError(
                f"{self._where}: blob {row} does not match its checksum (the file was damaged, or the row was "
                "moved to another row's place)",
                "reaqtive_blobs",
                row,
            )
            if strict:
                raise damage
            damaged[(str(category), str(key))] = damage
        return CheckpointSnapshot(checkpoint_id, data, damaged)

    def close(self) -> None:
        with self._lock:
            self._connection.close()

    def _checkpoint_id(self) -> int:
        row = self._connection.execute("SELECT value FROM reaqtive_meta WHERE key = 'checkpoint_id'").fetchone()
        if row is None or type(row[0]) is not int:
            raise StoreCorruptError(f"{self._where}: the checkpoint id in reaqtive_meta is damaged or missing")
        return row[0]

    def _apply(self, changes: StoreChanges) -> int:
        with self._lock:
            connection = self._connection
            try:
                connection.execute("BEGIN IMMEDIATE")
                try:
                    checkpoint_id = self._write(changes)
                    connection.execute("COMMIT")
                except BaseException:
                    if connection.in_transaction:
                        connection.execute("ROLLBACK")
                    raise
            except sqlite3.Error as error:
                raise store_error(error, self._where, "checkpoint commit", rolled_back=True) from error
            return checkpoint_id

    def _write(self, changes: StoreChanges) -> int:
        connection = self._connection
        connection.executemany("DELETE FROM reaqtive_blobs WHERE category = ?", [(c,) for c in changes.clears])
        puts = [(c, k, v, row_checksum(c, k, v)) for (c, k), v in changes.writes.items() if v is not None]
        deletes = [(c, k) for (c, k), v in changes.writes.items() if v is None]
        connection.executemany(
            "INSERT OR REPLACE INTO reaqtive_blobs (category, key, value, crc) VALUES (?, ?, ?, ?)", puts
        )
        connection.executemany("DELETE FROM reaqtive_blobs WHERE category = ? AND key = ?", deletes)
        for hook in changes.hooks:  # the host's other tables, in this transaction (run_in_commit)
            hook(connection)
        checkpoint_id = self._checkpoint_id() + 1
        connection.execute("UPDATE reaqtive_meta SET value = ? WHERE key = 'checkpoint_id'", (checkpoint_id,))
        return checkpoint_id

    def __repr__(self) -> str:
        return f"SqliteCheckpointStore({self._where!r})"


class _Transaction(CheckpointTransaction):
    _runs_hooks = True

    def __init__(self, store: SqliteCheckpointStore) -> None:
        super().__init__()
        self._store = store

    def _apply(self, changes: StoreChanges) -> int:
        return self._store._apply(changes)


# -- migration --------------------------------------------------------------------------------------------------


def _migrate_from_1(connection: sqlite3.Connection) -> None:
    """Schema 1 → 2, inside the caller's transaction: row checksums instead of value checksums (see the module
    docstring). Text goes to the checksum as bytes (``CAST``), so that a key damaged into invalid UTF-8 cannot fail
    the migration; such a key gets an unverifiable checksum."""
    connection.create_function("reaqtive_migrated_crc", 5, _migrated_crc, deterministic=True)
    connection.execute(
        "UPDATE reaqtive_blobs SET crc = reaqtive_migrated_crc(CAST(category AS BLOB), CAST(key AS BLOB), "
        "typeof(value) = 'blob', CAST(value AS BLOB), CASE WHEN typeof(crc) = 'integer' THEN crc END)"
    )
    connection.execute("UPDATE reaqtive_meta SET value = ? WHERE key = 'schema_version'", (SCHEMA_VERSION,))


def _migrated_crc(category: bytes, key: bytes, is_blob: int, value: bytes, old: int | None) -> int:
    try:
        if is_blob and old is not None and checksum(value) == old:
            return row_checksum(category.decode("utf-8"), key.decode("utf-8"), value)
    except Exception:  # a function SQLite calls must not raise: that would fail the migration
        pass
    # Damaged before the migration: a checksum no row can match (row checksums are never negative).
    return old - 2**32 if old is not None and 0 <= old < 2**32 else -1


# -- helpers ----------------------------------------------------------------------------------------------------


def _check_file_header(path: Path, where: str) -> None:
    """Refuse, before SQLite touches it, a non-empty file that is not an SQLite database."""
    try:
        with path.open("rb") as file:
            header = file.read(len(_SQLITE_HEADER))
    except FileNotFoundError:
        return
    except OSError as error:
        raise StoreError(f"{where}: cannot open the checkpoint store: {error}") from error
    if header and header != _SQLITE_HEADER:
        raise NotAStoreError(
            f"{where}: not a reaqtive checkpoint store (not an SQLite database); it was left untouched"
        )


def _tables(connection: sqlite3.Connection) -> set[str]:
    return {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
