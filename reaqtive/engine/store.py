"""The engine's SQLite file: artifacts, templates and state in the checkpoint store, plus the ingress and egress
logs in tables of their own.

* ``reaqtive_blobs`` (the :class:`~reaqtive.state.SqliteCheckpointStore` table), by category:
  ``artifacts`` (one JSON record per artifact, by URI), ``templates`` (one JSON template per content hash) and
  ``state`` (one state blob per subscription and per inner subscription). Every create and delete commits there at
  once, in one transaction with the state it adds or removes; a checkpoint commits state there atomically.
* ``reaqtive_ingress``: the durable input log: ``(pos, stream, seq, time, payload)``. ``pos`` orders all streams
  together (the order the engine delivers in), ``seq`` numbers each stream's events from 0. Producers append;
  entries are deleted only after a committed checkpoint covers them.
* ``reaqtive_egress``: the built-in durable sink: ``(subscription, seq, payload)``, primary key
  ``(subscription, seq)``: a replayed output is ignored, so the table holds each output exactly once.

Payloads are encoded with the state codec (msgpack; registered user types; never pickle).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from reaqtive.state import DEFAULT_CODEC, SqliteCheckpointStore, StateCodec, StoreError

__all__ = ["ENGINE_SCHEMA_VERSION", "EngineStore", "IngressEvent", "UnknownEngineVersionError"]

ENGINE_SCHEMA_VERSION: Final = 1
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

_TABLES: Final = (
    "CREATE TABLE IF NOT EXISTS reaqtive_ingress (pos INTEGER PRIMARY KEY AUTOINCREMENT, "
    "stream TEXT NOT NULL, seq INTEGER NOT NULL, time INTEGER NOT NULL, payload BLOB NOT NULL, "
    "UNIQUE (stream, seq))",
    "CREATE TABLE IF NOT EXISTS reaqtive_stream_heads (stream TEXT PRIMARY KEY, next_seq INTEGER NOT NULL) "
    "WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS reaqtive_egress (subscription TEXT NOT NULL, seq INTEGER NOT NULL, "
    "payload BLOB NOT NULL, PRIMARY KEY (subscription, seq)) WITHOUT ROWID",
)


class UnknownEngineVersionError(StoreError):
    """The file was written by an engine whose store layout this version does not know."""


@dataclass(frozen=True, slots=True)
class IngressEvent:
    """One event of the ingress log."""

    pos: int
    stream: str
    seq: int
    time: datetime
    value: Any


def to_micros(time: datetime) -> int:
    """Microseconds since the Unix epoch of an aware datetime."""
    return (time - _EPOCH) // timedelta(microseconds=1)


def from_micros(micros: int) -> datetime:
    """The aware UTC datetime ``micros`` microseconds after the Unix epoch."""
    return _EPOCH + timedelta(microseconds=micros)


class EngineStore:
    """The engine's SQLite file. ``synchronous``: SQLite's durability (``FULL`` survives power loss; ``NORMAL``
    survives a process crash, which is what ``kill -9`` tests)."""

    def __init__(
        self, path: str | os.PathLike[str], *, synchronous: str = "FULL", codec: StateCodec = DEFAULT_CODEC
    ) -> None:
        self._path = Path(path)
        self._codec = codec
        self.checkpoints = SqliteCheckpointStore(self._path, synchronous=synchronous)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False, timeout=30.0)
            self._db.execute(f"PRAGMA synchronous={synchronous.upper()}")
            self._prepare()
        except sqlite3.Error as error:
            self.checkpoints.close()
            raise StoreError(f"{self._path}: cannot open the engine tables: {error}") from error

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    def _prepare(self) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute("SELECT value FROM reaqtive_meta WHERE key = 'engine_schema_version'").fetchone()
            if row is None:
                for statement in _TABLES:
                    db.execute(statement)
                db.execute("INSERT INTO reaqtive_meta (key, value) VALUES ('engine_schema_version', ?)",
                           (ENGINE_SCHEMA_VERSION,))
            elif row[0] != ENGINE_SCHEMA_VERSION:
                raise UnknownEngineVersionError(
                    f"{self._path}: written by an engine with store layout version {row[0]}; this engine knows "
                    f"version {ENGINE_SCHEMA_VERSION}. The file was left untouched"
                )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    # -- ingress -----------------------------------------------------------------------------------------------

    def append(self, stream: str, events: Iterable[tuple[Any, datetime]]) -> list[int]:
        """Append ``(value, time)`` events to ``stream`` in one transaction; return their sequence numbers."""
        encode = self._codec.encode
        rows = [(encode(value), to_micros(time)) for value, time in events]
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                head = db.execute("SELECT next_seq FROM reaqtive_stream_heads WHERE stream = ?", (stream,)).fetchone()
                first = head[0] if head is not None else 0
                db.executemany(
                    "INSERT INTO reaqtive_ingress (stream, seq, time, payload) VALUES (?, ?, ?, ?)",
                    [(stream, first + i, micros, payload) for i, (payload, micros) in enumerate(rows)],
                )
                db.execute(
                    "INSERT INTO reaqtive_stream_heads (stream, next_seq) VALUES (?, ?) "
                    "ON CONFLICT (stream) DO UPDATE SET next_seq = excluded.next_seq",
                    (stream, first + len(rows)),
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return list(range(first, first + len(rows)))

    def read_ingress(self, after_pos: int, limit: int) -> list[IngressEvent]:
        """Up to ``limit`` events with ``pos > after_pos``, in ``pos`` order."""
        with self._lock:
            rows = self._db.execute(
                "SELECT pos, stream, seq, time, payload FROM reaqtive_ingress WHERE pos > ? ORDER BY pos LIMIT ?",
                (after_pos, limit),
            ).fetchall()
        decode = self._codec.decode_entries
        return [
            IngressEvent(pos, stream, seq, from_micros(micros), decode(payload, f"ingress {stream}#{seq}")[0])
            for pos, stream, seq, micros, payload in rows
        ]

    def last_position(self) -> int:
        """The ``pos`` of the last appended event, also when it was truncated since (0 before any append).
        Positions never go back: the table is ``AUTOINCREMENT``, so a truncated log never reuses them."""
        with self._lock:
            row = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'reaqtive_ingress'").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def position_after(self, stream: str, seq: int) -> int | None:
        """The ``pos`` of the first retained event of ``stream`` after sequence number ``seq`` (``None``: none)."""
        with self._lock:
            row = self._db.execute(
                "SELECT MIN(pos) FROM reaqtive_ingress WHERE stream = ? AND seq > ?", (stream, seq)
            ).fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def stream_heads(self) -> dict[str, int]:
        """The next sequence number of every stream that has had an event."""
        with self._lock:
            return dict(self._db.execute("SELECT stream, next_seq FROM reaqtive_stream_heads").fetchall())

    def truncate_ingress(self, covered: dict[str, int]) -> int:
        """Delete, per stream, the events at or below the given sequence number (a committed checkpoint covers
        them). Returns how many were deleted."""
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                deleted = 0
                for stream, seq in covered.items():
                    deleted += db.execute(
                        "DELETE FROM reaqtive_ingress WHERE stream = ? AND seq <= ?", (stream, seq)
                    ).rowcount
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return deleted

    def ingress_counts(self) -> dict[str, int]:
        """Events still in the log, per stream."""
        with self._lock:
            return dict(self._db.execute("SELECT stream, COUNT(*) FROM reaqtive_ingress GROUP BY stream").fetchall())

    # -- egress ------------------------------------------------------------------------------------------------

    def write_outputs(self, outputs: Sequence[tuple[str, int, Any]]) -> None:
        """Insert ``(subscription, seq, value)`` rows, ignoring those already there (replayed outputs)."""
        if not outputs:
            return
        encode = self._codec.encode
        rows = [(subscription, seq, encode(value)) for subscription, seq, value in outputs]
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany(
                    "INSERT OR IGNORE INTO reaqtive_egress (subscription, seq, payload) VALUES (?, ?, ?)", rows
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def read_outputs(self, subscription: str | None = None) -> list[tuple[str, int, Any]]:
        """The durable sink's content, ordered by subscription and sequence number."""
        query = "SELECT subscription, seq, payload FROM reaqtive_egress"
        params: tuple[str, ...] = ()
        if subscription is not None:
            query += " WHERE subscription = ?"
            params = (subscription,)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY subscription, seq", params).fetchall()
        decode = self._codec.decode_entries
        return [(sub, seq, decode(payload, f"egress {sub}#{seq}")[0]) for sub, seq, payload in rows]

    def delete_outputs(self, subscription: str) -> None:
        """Forget the outputs of a deleted subscription."""
        with self._lock:
            self._db.execute("DELETE FROM reaqtive_egress WHERE subscription = ?", (subscription,))

    # -- lifetime ----------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close both connections."""
        with self._lock:
            self._db.close()
        self.checkpoints.close()
