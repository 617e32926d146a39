"""The durable checkpoint store: one SQLite file (standard library ``sqlite3``), in WAL mode.

Each checkpoint is one SQLite transaction (``BEGIN IMMEDIATE ... COMMIT``), so a crash — even ``kill -9`` in the
middle of a commit — leaves the file at the previous or the next checkpoint. With ``synchronous="FULL"`` (the
default) a returned commit is durable across power loss too; ``"NORMAL"`` is faster and still crash-safe for
process crashes. Every row carries a CRC-32 of its blob, verified whenever it is read.

Schema (version 1)::

    reaqtive_meta(key TEXT PRIMARY KEY, value)      -- format, schema_version, checkpoint_id
    reaqtive_blobs(category, key, value BLOB, crc)  -- PRIMARY KEY (category, key)

Opening never changes a file that is not a reaqtive store: a foreign SQLite database or a file that is not
SQLite at all raises :class:`NotAStoreError`, a store of another schema version
:class:`UnknownStoreVersionError`, and in both cases the file is left as it was.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Final

from reaqtive.state.errors import NotAStoreError, StateChecksumError, StoreError, UnknownStoreVersionError
from reaqtive.state.framing import checksum
from reaqtive.state.store import CheckpointSnapshot, CheckpointStore, CheckpointTransaction, StoreChanges

__all__ = ["SCHEMA_VERSION", "SqliteCheckpointStore"]

SCHEMA_VERSION: Final = 1
_FORMAT: Final = "reaqtive-checkpoint-store"
_SQLITE_HEADER: Final = b"SQLite format 3\x00"
_SYNCHRONOUS: Final = frozenset({"OFF", "NORMAL", "FULL", "EXTRA"})

_SCHEMA: Final = (
    "CREATE TABLE reaqtive_meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID",
    "CREATE TABLE reaqtive_blobs (category TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, "
    "crc INTEGER NOT NULL, PRIMARY KEY (category, key)) WITHOUT ROWID",
)


class SqliteCheckpointStore(CheckpointStore):
    """A checkpoint store in the SQLite file at ``path`` (created if missing or empty).

    ``synchronous``: SQLite's durability setting (``"FULL"`` by default). ``timeout``: seconds to wait for a
    lock held by another connection.
    """

    def __init__(self, path: str | os.PathLike[str], *, synchronous: str = "FULL", timeout: float = 30.0) -> None:
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
            raise StoreError(f"{self._where}: cannot open the checkpoint store: {error}") from error
        try:
            self._open(synchronous.upper())
        except BaseException:
            self._connection.close()
            raise

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    # -- opening -----------------------------------------------------------------------------------------------

    def _open(self, synchronous: str) -> None:
        connection = self._connection
        try:
            tables = _tables(connection)
            if not tables:
                connection.execute("PRAGMA journal_mode=WAL")
                self._create_schema()
            else:
                self._check_schema(tables)
                connection.execute("PRAGMA journal_mode=WAL")
            connection.execute(f"PRAGMA synchronous={synchronous}")
        except sqlite3.DatabaseError as error:
            raise NotAStoreError(f"{self._where}: not a reaqtive checkpoint store ({error})") from error

    def _create_schema(self) -> None:
        connection = self._connection
        connection.execute("BEGIN IMMEDIATE")
        try:
            if not _tables(connection):  # another process may have created it meanwhile
                for statement in _SCHEMA:
                    connection.execute(statement)
                connection.executemany(
                    "INSERT INTO reaqtive_meta (key, value) VALUES (?, ?)",
                    [("format", _FORMAT), ("schema_version", SCHEMA_VERSION), ("checkpoint_id", 0)],
                )
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        self._check_schema(_tables(connection))

    def _check_schema(self, tables: set[str]) -> None:
        if "reaqtive_meta" not in tables:
            raise NotAStoreError(
                f"{self._where}: an SQLite database but not a reaqtive checkpoint store (no reaqtive_meta table); "
                "it was left untouched"
            )
        meta = dict(self._connection.execute("SELECT key, value FROM reaqtive_meta").fetchall())
        if meta.get("format") != _FORMAT:
            raise NotAStoreError(f"{self._where}: reaqtive_meta does not describe a reaqtive checkpoint store")
        if meta.get("schema_version") != SCHEMA_VERSION:
            raise UnknownStoreVersionError(self._where, meta.get("schema_version"), SCHEMA_VERSION)
        if "reaqtive_blobs" not in tables:
            raise NotAStoreError(f"{self._where}: the reaqtive_blobs table is missing")

    # -- store -------------------------------------------------------------------------------------------------

    def begin(self) -> CheckpointTransaction:
        return _Transaction(self)

    def read(self, *, strict: bool = True) -> CheckpointSnapshot:
        """The latest committed checkpoint; every blob's checksum is verified.

        ``strict``: a damaged blob raises :class:`StateChecksumError`. Otherwise it is left out of the snapshot and
        listed in ``snapshot.damaged``, so that a host can recover everything else and report the rest (the
        damaged bytes stay in the file).
        """
        with self._lock:
            connection = self._connection
            try:
                connection.execute("BEGIN")
                try:
                    checkpoint_id = self._checkpoint_id()
                    rows = connection.execute("SELECT category, key, value, crc FROM reaqtive_blobs").fetchall()
                finally:
                    connection.execute("COMMIT")
            except sqlite3.Error as error:
                raise StoreError(f"{self._where}: cannot read the checkpoint store: {error}") from error
        data: dict[str, dict[str, bytes]] = {}
        damaged: dict[tuple[str, str], Exception] = {}
        for category, key, value, crc in rows:
            blob = bytes(value)
            if checksum(blob) != crc:
                damage = StateChecksumError(
                    f"{self._where}: blob {category}/{key} does not match its checksum (the file was damaged)"
                )
                if strict:
                    raise damage
                damaged[(category, key)] = damage
                continue
            data.setdefault(category, {})[key] = blob
        return CheckpointSnapshot(checkpoint_id, data, damaged)

    def close(self) -> None:
        with self._lock:
            self._connection.close()

    def _checkpoint_id(self) -> int:
        row = self._connection.execute("SELECT value FROM reaqtive_meta WHERE key = 'checkpoint_id'").fetchone()
        return int(row[0])

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
                raise StoreError(f"{self._where}: checkpoint commit failed and was rolled back: {error}") from error
            return checkpoint_id

    def _write(self, changes: StoreChanges) -> int:
        connection = self._connection
        connection.executemany("DELETE FROM reaqtive_blobs WHERE category = ?", [(c,) for c in changes.clears])
        puts = [(c, k, v, checksum(v)) for (c, k), v in changes.writes.items() if v is not None]
        deletes = [(c, k) for (c, k), v in changes.writes.items() if v is None]
        connection.executemany(
            "INSERT OR REPLACE INTO reaqtive_blobs (category, key, value, crc) VALUES (?, ?, ?, ?)", puts
        )
        connection.executemany("DELETE FROM reaqtive_blobs WHERE category = ? AND key = ?", deletes)
        checkpoint_id = self._checkpoint_id() + 1
        connection.execute("UPDATE reaqtive_meta SET value = ? WHERE key = 'checkpoint_id'", (checkpoint_id,))
        return checkpoint_id

    def __repr__(self) -> str:
        return f"SqliteCheckpointStore({self._where!r})"


class _Transaction(CheckpointTransaction):
    def __init__(self, store: SqliteCheckpointStore) -> None:
        super().__init__()
        self._store = store

    def _apply(self, changes: StoreChanges) -> int:
        return self._store._apply(changes)


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
