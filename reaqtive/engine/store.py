"""The engine's SQLite file: artifacts, templates and state in the checkpoint store, plus the ingress and egress
logs and the dead letters in tables of their own.

* ``reaqtive_blobs`` (the :class:`~reaqtive.state.SqliteCheckpointStore` table), by category:
  ``artifacts`` (one JSON record per artifact, by URI), ``templates`` (one JSON template per content hash) and
  ``state`` (one state blob per subscription and per inner subscription). Every create and delete commits there at
  once, in one transaction with the state it adds or removes; a checkpoint commits state there atomically.
* ``reaqtive_ingress``: the durable input log: ``(pos, stream, seq, time, payload, crc)``. ``pos`` orders all
  streams together (the order the engine delivers in), ``seq`` numbers each stream's events from 0. Producers
  append; entries are deleted only after a committed checkpoint covers them.
* ``reaqtive_egress``: the built-in durable sink: ``(subscription, seq, payload, crc)``, primary key
  ``(subscription, seq)``: a replayed output is ignored, so the table holds each output exactly once.
* ``reaqtive_dead_letters``: events taken out of delivery (quarantined): ``(stream, seq, pos, time, payload,
  reason, at, crc)``, primary key ``(stream, seq)``, each with the bytes it was stored with, damaged or not.

**Integrity.** Every row carries a checksum of its identifying columns and its content (:func:`ingress_checksum`,
:func:`egress_checksum`, :func:`dead_letter_checksum`; blobs: :func:`~reaqtive.state.sqlite_store.row_checksum`),
verified whenever it is read, so a damaged row and a row moved to another row's place are both detected. A
damaged ingress row (or one whose payload cannot be decoded) is returned as an :class:`IngressEvent` with
``damage`` set, for the engine to quarantine; a damaged output raises :class:`~reaqtive.state.DamagedRowError`
naming ``subscription#seq``. Every SQLite error becomes a :class:`~reaqtive.state.StoreError` naming the file and
the operation (:class:`~reaqtive.state.StoreCorruptError` for a damaged file).

**One writer.** An :class:`EngineStore` holds an exclusive operating-system lock on ``<store>.lock`` from open
to close (``flock``; ``msvcrt.locking`` on Windows); a second one, in this process or another, is refused with
:class:`~reaqtive.state.StoreLockedError` naming the holder's pid. The kernel drops the lock when the holder
dies, even by ``SIGKILL``. The lock file is never deleted (deleting it would race with the next opener). Readers
that never write (``reaqtive inspect``) do not take it.

**Versions.** The engine tables have their own layout version (``engine_schema_version`` in ``reaqtive_meta``,
now 2). A version-1 file is migrated when opened, in the same transaction as the checkpoint store's migration:
crc columns are added and computed over the rows as they are (version 1 had no checksums on these tables, so
damage from before the migration cannot be told apart; a row that no writer could have written — text that is
not UTF-8, a column of the wrong type — gets a checksum that never verifies), and the dead-letter table is
created. A file of an unknown version is refused untouched (:class:`UnknownEngineVersionError`).

Payloads are encoded with the state codec (msgpack; registered user types; never pickle).
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, TypeAlias

from reaqtive.state import (
    DEFAULT_CODEC,
    DamagedRowError,
    SqliteCheckpointStore,
    StateCodec,
    StateError,
    StateFormatError,
    StoreCorruptError,
    StoreError,
    StoreLockedError,
)
from reaqtive.state.sqlite_store import columns_checksum, fetchall_lenient, store_error, verifies

__all__ = [
    "ENGINE_MIGRATES",
    "ENGINE_SCHEMA_VERSION",
    "DeadLetter",
    "EngineStore",
    "IngressEvent",
    "Quarantine",
    "UnknownEngineVersionError",
    "dead_letter_checksum",
    "egress_checksum",
    "ingress_checksum",
]

ENGINE_SCHEMA_VERSION: Final = 2
ENGINE_MIGRATES: Final = (1,)
"""Older layout versions of the engine tables that opening migrates in place."""

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_CHECKSUM_ERRORS: Final = (TypeError, ValueError, OverflowError)

# time and payload have no type: a quarantined row keeps what it was stored with, whatever that is
_DEAD_LETTERS: Final = (
    "CREATE TABLE IF NOT EXISTS reaqtive_dead_letters (stream TEXT NOT NULL, seq INTEGER NOT NULL, "
    "pos INTEGER, time, payload, reason TEXT NOT NULL, at INTEGER NOT NULL, crc INTEGER NOT NULL, "
    "PRIMARY KEY (stream, seq)) WITHOUT ROWID"
)
_TABLES: Final = (
    "CREATE TABLE IF NOT EXISTS reaqtive_ingress (pos INTEGER PRIMARY KEY AUTOINCREMENT, "
    "stream TEXT NOT NULL, seq INTEGER NOT NULL, time INTEGER NOT NULL, payload BLOB NOT NULL, "
    "crc INTEGER NOT NULL, UNIQUE (stream, seq))",
    "CREATE TABLE IF NOT EXISTS reaqtive_stream_heads (stream TEXT PRIMARY KEY, next_seq INTEGER NOT NULL) "
    "WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS reaqtive_egress (subscription TEXT NOT NULL, seq INTEGER NOT NULL, "
    "payload BLOB NOT NULL, crc INTEGER NOT NULL, PRIMARY KEY (subscription, seq)) WITHOUT ROWID",
    _DEAD_LETTERS,
)

_DAMAGED: Final = "the row does not match its checksum (damaged in the file, or moved to another row's place)"

Quarantine: TypeAlias = Callable[[Any, datetime], str | None]
"""Decides at append time whether an event goes to the dead letters instead of the log: ``(value, time)`` → the
reason, or ``None`` to log it."""


class UnknownEngineVersionError(StoreError):
    """The file was written by an engine whose store layout this version does not know."""


# -- rows ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IngressEvent:
    """One event of the ingress log.

    ``damage``: why the event cannot be delivered — its row does not match its checksum, or its payload or time
    cannot be decoded — or ``None`` for a sound event. A damaged event has ``value`` ``None``, and its ``stream``,
    ``seq`` and ``time`` are what the row says, which may be wrong (``time`` is the Unix epoch when the row's time
    is unusable); the engine quarantines it (:meth:`EngineStore.quarantine`) instead of delivering it.
    ``payload`` and ``micros`` are the row's stored bytes and time, which a quarantine keeps.
    """

    pos: int
    stream: str
    seq: int
    time: datetime
    value: Any
    damage: str | None = None
    payload: bytes | None = field(default=None, repr=False, compare=False)
    micros: int | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A quarantined event (see :meth:`EngineStore.dead_letters`).

    ``pos``: its place in the ingress log (``None``: quarantined when it was appended, never logged). ``time``:
    ``None`` if the stored time is unusable. ``value``: ``None`` if the payload cannot be decoded. ``at``: when it
    was quarantined. ``damage``: set if this dead-letter row itself does not match its checksum (then ``at`` may be
    ``None`` too). ``payload``: the event's bytes as stored.
    """

    stream: str
    seq: int
    pos: int | None
    time: datetime | None
    value: Any
    reason: str
    at: datetime | None
    damage: str | None = None
    payload: bytes | None = field(default=None, repr=False, compare=False)


def ingress_checksum(pos: int, stream: str, seq: int, time: int, payload: bytes) -> int:
    """The ``crc`` of a ``reaqtive_ingress`` row (``time``: microseconds since the epoch)."""
    return columns_checksum(pos, stream, seq, time, payload)


def egress_checksum(subscription: str, seq: int, payload: bytes) -> int:
    """The ``crc`` of a ``reaqtive_egress`` row."""
    return columns_checksum(subscription, seq, payload)


def dead_letter_checksum(  # noqa: PLR0917  (the row's columns, in their order)
    stream: str, seq: int, pos: int | None, time: object, payload: object, reason: str, at: int
) -> int:
    """The ``crc`` of a ``reaqtive_dead_letters`` row (``time`` and ``payload`` as stored, whatever their type)."""
    return columns_checksum(stream, seq, pos, time, payload, reason, at)


def to_micros(time: datetime) -> int:
    """Microseconds since the Unix epoch of an aware datetime."""
    return (time - _EPOCH) // timedelta(microseconds=1)


def from_micros(micros: int) -> datetime:
    """The aware UTC datetime ``micros`` microseconds after the Unix epoch."""
    return _EPOCH + timedelta(microseconds=micros)


# -- the store ------------------------------------------------------------------------------------------------------


class EngineStore:
    """The engine's SQLite file, held by this store alone until :meth:`close` (see the module docstring).

    ``synchronous``: SQLite's durability (``FULL`` survives power loss; ``NORMAL`` survives a process crash, which
    is what ``kill -9`` tests). Raises :class:`~reaqtive.state.StoreLockedError` if another engine holds the file,
    and :class:`~reaqtive.state.StoreError` subclasses for everything else that stops the open.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, synchronous: str = "FULL", codec: StateCodec = DEFAULT_CODEC
    ) -> None:
        self._path = Path(path)
        self._where = str(self._path)
        self._codec = codec
        self._lock = threading.Lock()
        self._writer = _WriterLock(self._path)
        try:
            # The engine tables are checked, locked, created or migrated in the checkpoint store's opening
            # transaction: a new or migrated file is complete or untouched.
            self.checkpoints = SqliteCheckpointStore(self._path, synchronous=synchronous, prepare=self._prepare)
            try:
                self._db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False, timeout=30.0)
                self._db.execute(f"PRAGMA synchronous={synchronous.upper()}")
            except sqlite3.Error as error:
                self.checkpoints.close()
                raise store_error(error, self._where, "opening the engine tables") from error
        except BaseException:
            self._writer.release()
            raise

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    @property
    def lock_path(self) -> Path:
        """The lock file next to it (``<store>.lock``), which holds the pid of the engine that has the store."""
        return self._writer.path

    def _prepare(self, db: sqlite3.Connection) -> None:
        """Inside the opening transaction: refuse an unknown layout, take the writer lock, create or migrate."""
        row = db.execute("SELECT value FROM reaqtive_meta WHERE key = 'engine_schema_version'").fetchone()
        version = None if row is None else row[0]
        if version is not None and version != ENGINE_SCHEMA_VERSION and version not in ENGINE_MIGRATES:
            raise UnknownEngineVersionError(
                f"{self._where}: written by an engine with store layout version {version!r}; this engine knows "
                f"version {ENGINE_SCHEMA_VERSION} (and migrates version "
                f"{', '.join(map(str, ENGINE_MIGRATES))}). The file was left untouched"
            )
        self._writer.acquire()
        if version is None:
            for statement in _TABLES:
                db.execute(statement)
            db.execute("INSERT INTO reaqtive_meta (key, value) VALUES ('engine_schema_version', ?)",
                       (ENGINE_SCHEMA_VERSION,))
        elif version == 1:
            _migrate_from_1(db)

    @contextmanager
    def _reading(self, operation: str) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self._db
            except sqlite3.Error as error:
                raise store_error(error, self._where, operation) from error

    @contextmanager
    def _transaction(self, operation: str) -> Iterator[sqlite3.Connection]:
        """One write transaction: committed at the end of the block, rolled back if it raises."""
        with self._lock:
            db = self._db
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    yield db
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        with suppress(sqlite3.Error):  # the error that made us roll back is the one to report
                            db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as error:
                raise store_error(error, self._where, operation, rolled_back=True) from error

    # -- ingress -----------------------------------------------------------------------------------------------

    def append(
        self, stream: str, events: Iterable[tuple[Any, datetime]], *, quarantine: Quarantine | None = None
    ) -> list[int]:
        """Append ``(value, time)`` events to ``stream`` in one transaction; return their sequence numbers.

        ``quarantine``: asked for each event before anything is written; an event it gives a reason for goes to
        the dead letters instead of the log, in the same transaction, with its sequence number (the numbers stay
        contiguous) and no log position. The returned list has the numbers of all the events, in order.
        """
        encode = self._codec.encode
        rows = [
            (encode(value), to_micros(time), quarantine(value, time) if quarantine is not None else None)
            for value, time in events
        ]
        at = to_micros(datetime.now(UTC))
        with self._transaction(f"appending to stream {stream!r}") as db:
            head = db.execute("SELECT next_seq FROM reaqtive_stream_heads WHERE stream = ?", (stream,)).fetchone()
            first = _counter(head, self._where, f"the head of stream {stream!r}")
            pos = _next_position(db, self._where)
            logged, dead = [], []
            for seq, (payload, micros, reason) in enumerate(rows, first):
                if reason is None:
                    logged.append((pos, stream, seq, micros, payload, ingress_checksum(pos, stream, seq, micros,
                                                                                          payload)))
                    pos += 1
                else:
                    why = str(reason)
                    dead.append((stream, seq, None, micros, payload, why, at,
                                 dead_letter_checksum(stream, seq, None, micros, payload, why, at)))
            db.executemany(
                "INSERT INTO reaqtive_ingress (pos, stream, seq, time, payload, crc) VALUES (?, ?, ?, ?, ?, ?)",
                logged,
            )
            if dead:
                db.executemany(_INSERT_DEAD_LETTER, dead)
            db.execute(
                "INSERT INTO reaqtive_stream_heads (stream, next_seq) VALUES (?, ?) "
                "ON CONFLICT (stream) DO UPDATE SET next_seq = excluded.next_seq",
                (stream, first + len(rows)),
            )
        return list(range(first, first + len(rows)))

    def read_ingress(self, after_pos: int, limit: int) -> list[IngressEvent]:
        """Up to ``limit`` events with ``pos > after_pos``, in ``pos`` order, each verified against its checksum.

        A row that does not verify, or whose payload or time cannot be decoded, comes back as an event with
        ``damage`` set (and no value) in its place: the rest of the batch is unaffected.
        """
        with self._reading("reading the ingress log") as db:
            rows = fetchall_lenient(
                db,
                "SELECT pos, stream, seq, time, payload, crc FROM reaqtive_ingress WHERE pos > ? ORDER BY pos "
                "LIMIT ?",
                (after_pos, limit),
            )
        decode = self._codec.decode_entries
        checksum = columns_checksum
        events: list[IngressEvent] = []
        append = events.append
        for pos, stream, seq, micros, payload, crc in rows:
            try:
                sound = crc == checksum(pos, stream, seq, micros, payload) and type(payload) is bytes
            except _CHECKSUM_ERRORS:
                sound = False
            if sound:
                try:
                    entries = decode(payload, f"ingress {stream}#{seq}")
                    if len(entries) != 1:
                        raise StateFormatError(f"ingress {stream}#{seq}: {len(entries)} values in one payload")
                    append(IngressEvent(pos, stream, seq, from_micros(micros), entries[0], None, payload, micros))
                    continue
                except (StateError, OverflowError) as error:
                    damage = f"its payload or time cannot be decoded ({error})"
            else:
                damage = _DAMAGED
            append(_damaged_event((pos, stream, seq, micros, payload), damage))
        return events

    def last_position(self) -> int:
        """The ``pos`` of the last appended event, also when it was truncated since (0 before any append).
        Positions never go back: the table is ``AUTOINCREMENT``, so a truncated log never reuses them."""
        with self._reading("reading the log position") as db:
            row = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'reaqtive_ingress'").fetchone()
        return _counter(row, self._where, "the ingress log's position counter")

    def position_after(self, stream: str, seq: int) -> int | None:
        """The ``pos`` of the first retained event of ``stream`` after sequence number ``seq`` (``None``: none)."""
        with self._reading(f"reading the log position of stream {stream!r}") as db:
            row = db.execute(
                "SELECT MIN(pos) FROM reaqtive_ingress WHERE stream = ? AND seq > ?", (stream, seq)
            ).fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def stream_heads(self) -> dict[str, int]:
        """The next sequence number of every stream that has had an event."""
        with self._reading("reading the stream heads") as db:
            return dict(fetchall_lenient(db, "SELECT stream, next_seq FROM reaqtive_stream_heads"))

    def truncate_ingress(self, covered: dict[str, int]) -> int:
        """Delete, per stream, the events at or below the given sequence number (a committed checkpoint covers
        them). Returns how many were deleted."""
        with self._transaction("truncating the ingress log") as db:
            deleted = 0
            for stream, seq in covered.items():
                deleted += db.execute(
                    "DELETE FROM reaqtive_ingress WHERE stream = ? AND seq <= ?", (stream, seq)
                ).rowcount
        return deleted

    def first_retained(self) -> dict[str, int]:
        """Per stream with events in the log, the sequence number of its oldest one still there."""
        with self._reading("reading the ingress log") as db:
            return dict(fetchall_lenient(db, "SELECT stream, MIN(seq) FROM reaqtive_ingress GROUP BY stream"))

    def ingress_counts(self) -> dict[str, int]:
        """Events still in the log, per stream."""
        with self._reading("counting the ingress log") as db:
            return dict(fetchall_lenient(db, "SELECT stream, COUNT(*) FROM reaqtive_ingress GROUP BY stream"))

    # -- dead letters ------------------------------------------------------------------------------------------

    def quarantine(self, events: Iterable[tuple[IngressEvent, str]], *, at: datetime | None = None) -> int:
        """Put ``(event, reason)`` pairs into the dead letters, in one transaction; returns how many were new (an
        event already there, by ``(stream, seq)``, is left as it was).

        Each keeps the bytes and time it was stored with (an event read from the log, damaged or not); an event
        built by hand (no stored bytes, no damage) is encoded. ``at``: when (default: now). The log is not
        changed: its rows go when a checkpoint covers them, like any other.
        """
        encode = self._codec.encode
        when = to_micros(at if at is not None else datetime.now(UTC))
        rows = []
        for event, reason in events:
            payload: object
            time: object
            if event.payload is None and event.damage is None:
                payload, time = encode(event.value), to_micros(event.time)
            else:
                payload, time = event.payload, event.micros
            stream, why = _text(event.stream), str(reason)
            rows.append((stream, event.seq, event.pos, time, payload, why, when,
                         dead_letter_checksum(stream, event.seq, event.pos, time, payload, why, when)))
        if not rows:
            return 0
        with self._transaction("quarantining events") as db:
            return int(db.executemany(_INSERT_DEAD_LETTER, rows).rowcount)

    def dead_letters(self, stream: str | None = None) -> list[DeadLetter]:
        """The quarantined events (of ``stream``, or all), by stream and sequence number; each verified."""
        query = "SELECT stream, seq, pos, time, payload, reason, at, crc FROM reaqtive_dead_letters"
        params: tuple[str, ...] = ()
        if stream is not None:
            query += " WHERE stream = ?"
            params = (stream,)
        with self._reading("reading the dead letters") as db:
            rows = fetchall_lenient(db, query + " ORDER BY stream, seq", params)
        letters = []
        for name, seq, pos, micros, payload, reason, at, crc in rows:
            sound = verifies(crc, dead_letter_checksum, name, seq, pos, micros, payload, reason, at)
            letters.append(DeadLetter(
                stream=str(name),
                seq=seq if type(seq) is int else -1,
                pos=pos if type(pos) is int else None,
                time=_time_or_none(micros),
                value=self._value_or_none(payload, f"dead letter {name}#{seq}"),
                reason=str(reason),
                at=_time_or_none(at),
                damage=None if sound else "this dead-letter row does not match its checksum",
                payload=payload if type(payload) is bytes else None,
            ))
        return letters

    def dead_lettered(self) -> set[tuple[str, int]]:
        """``(stream, seq)`` of every quarantined event."""
        with self._reading("reading the dead letters") as db:
            return set(fetchall_lenient(db, "SELECT stream, seq FROM reaqtive_dead_letters"))

    def _value_or_none(self, payload: object, where: str) -> Any:
        if type(payload) is not bytes:
            return None
        try:
            entries = self._codec.decode_entries(payload, where)
        except StateError:
            return None
        return entries[0] if len(entries) == 1 else None

    # -- egress ------------------------------------------------------------------------------------------------

    def write_outputs(self, outputs: Sequence[tuple[str, int, Any]], *, encoded: bool = False) -> None:
        """Insert ``(subscription, seq, value)`` rows, ignoring those already there (replayed outputs).
        ``encoded``: the values are payloads the codec already encoded (``bytes``)."""
        if not outputs:
            return
        encode = self._codec.encode
        rows = []
        for subscription, seq, value in outputs:
            payload = value if encoded else encode(value)
            rows.append((subscription, seq, payload, egress_checksum(subscription, seq, payload)))
        with self._transaction("writing outputs to the durable sink") as db:
            db.executemany(
                "INSERT OR IGNORE INTO reaqtive_egress (subscription, seq, payload, crc) VALUES (?, ?, ?, ?)", rows
            )

    def read_outputs(
        self, subscription: str | None = None, after: int | None = None, upto: int | None = None
    ) -> list[tuple[str, int, Any]]:
        """The durable sink's content (of ``subscription``, or all), ordered by subscription and sequence number;
        ``after``/``upto``: only sequence numbers ``after < seq <= upto``.

        Each row is verified: a damaged one raises :class:`~reaqtive.state.DamagedRowError` naming
        ``subscription#seq``. Only the rows asked for are read, so another subscription's damage does not matter.
        """
        conditions, params = [], []
        for condition, value in (("subscription = ?", subscription), ("seq > ?", after), ("seq <= ?", upto)):
            if value is not None:
                conditions.append(condition)
                params.append(value)
        query = "SELECT subscription, seq, payload, crc FROM reaqtive_egress"
        if conditions:
            query += " WHERE " + " AND ".join(conditions)
        with self._reading("reading the durable sink") as db:
            rows = fetchall_lenient(db, query + " ORDER BY subscription, seq", params)
        decode = self._codec.decode_entries
        outputs = []
        for sub, seq, payload, crc in rows:
            where = f"egress {sub}#{seq}"
            if type(payload) is not bytes or not verifies(crc, egress_checksum, sub, seq, payload):
                raise DamagedRowError(
                    f"{self._where}: output {sub}#{seq} of the durable sink does not match its checksum (damaged "
                    "in the file, or moved to another row's place)",
                    "reaqtive_egress",
                    f"{sub}#{seq}",
                )
            entries = decode(payload, where)
            if len(entries) != 1:
                raise StateFormatError(f"{self._where}: {where}: {len(entries)} values in one payload")
            outputs.append((sub, seq, entries[0]))
        return outputs

    def max_output_seqs(self) -> dict[str, int]:
        """The highest sequence number in the durable sink, per subscription that has outputs there. Read from
        the primary key's index (one seek per subscription); the rows themselves are not verified."""
        with self._reading("reading the durable sink's sequence numbers") as db:
            return dict(fetchall_lenient(db, _MAX_OUTPUT_SEQS))

    def output_extents(self) -> dict[str, tuple[int, int, int]]:
        """Per subscription with outputs in the durable sink: ``(count, lowest seq, highest seq)``. One pass over
        the primary key's index (a gap means rows were deleted or lost)."""
        with self._reading("reading the durable sink's sequence numbers") as db:
            rows = fetchall_lenient(
                db, "SELECT subscription, COUNT(*), MIN(seq), MAX(seq) FROM reaqtive_egress GROUP BY subscription"
            )
        extents: dict[str, tuple[int, int, int]] = {}
        for sub, count, low, high in rows:
            if not all(type(value) is int for value in (count, low, high)):
                raise StoreCorruptError(f"{self._where}: the durable sink's rows of {sub!r} cannot be counted "
                                        "(the file is damaged)")
            extents[sub] = (count, low, high)
        return extents

    def delete_outputs(self, subscription: str, *, upto: int | None = None) -> None:
        """Forget the outputs of a deleted subscription (or, with ``upto``, those up to that sequence number:
        an observer function received them)."""
        with self._transaction(f"deleting the outputs of {subscription!r}") as db:
            if upto is None:
                db.execute("DELETE FROM reaqtive_egress WHERE subscription = ?", (subscription,))
            else:
                db.execute("DELETE FROM reaqtive_egress WHERE subscription = ? AND seq <= ?", (subscription, upto))

    # -- lifetime ----------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close both connections and release the store."""
        try:
            with self._lock:
                self._db.close()
            self.checkpoints.close()
        finally:
            self._writer.release()


_INSERT_DEAD_LETTER: Final = (
    "INSERT OR IGNORE INTO reaqtive_dead_letters (stream, seq, pos, time, payload, reason, at, crc) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)

# Each subscription's largest seq by index seeks: walk the distinct subscriptions of the primary key (skip-scan),
# taking MAX(seq) of each; a GROUP BY would read every row.
_MAX_OUTPUT_SEQS: Final = (
    "WITH RECURSIVE subs(name) AS ("
    " SELECT MIN(subscription) FROM reaqtive_egress"
    " UNION ALL SELECT (SELECT MIN(subscription) FROM reaqtive_egress WHERE subscription > name) FROM subs"
    " WHERE name IS NOT NULL) "
    "SELECT name, (SELECT MAX(seq) FROM reaqtive_egress WHERE subscription = name) FROM subs WHERE name IS NOT NULL"
)


def _next_position(db: sqlite3.Connection, where: str) -> int:
    """The ``pos`` the next appended event gets, as ``AUTOINCREMENT`` would give it (explicit here, because the
    row's checksum covers it)."""
    row = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'reaqtive_ingress'").fetchone()
    top = db.execute("SELECT MAX(pos) FROM reaqtive_ingress").fetchone()
    what = "the ingress log's position counter"
    return max(_counter(row, where, what), _counter(top, where, what)) + 1


def _counter(row: tuple[object, ...] | None, where: str, what: str) -> int:
    """A counter's value from its row (0: no row); one that is not an integer is damage, named."""
    value = row[0] if row else None
    if value is None:
        return 0
    if type(value) is not int:
        raise StoreCorruptError(f"{where}: {what} is damaged ({value!r})")
    return value


def _damaged_event(row: tuple[int, object, object, object, object], damage: str) -> IngressEvent:
    pos, stream, seq, micros, payload = row
    return IngressEvent(
        pos=pos,
        stream=stream if type(stream) is str else str(stream),
        seq=seq if type(seq) is int else -1,
        time=_time_or_none(micros) or _EPOCH,
        value=None,
        damage=damage,
        payload=payload if type(payload) is bytes else _text_bytes(payload),
        micros=micros if type(micros) is int else None,
    )


def _time_or_none(micros: object) -> datetime | None:
    if type(micros) is not int:
        return None
    try:
        return from_micros(micros)
    except OverflowError:
        return None


def _text(text: str) -> str:
    """``text`` as SQLite can store it: text read from a damaged row (invalid UTF-8, surrogate-escaped) becomes
    its bytes with backslash escapes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return text


def _text_bytes(value: object) -> bytes | None:
    """The stored bytes of a payload that SQLite holds as text after damage (``None`` for a number or NULL)."""
    return value.encode("utf-8", "surrogateescape") if isinstance(value, str) else None


# -- migration ------------------------------------------------------------------------------------------------------


def _migrate_from_1(db: sqlite3.Connection) -> None:
    """Engine layout 1 → 2, inside the opening transaction: crc columns on ingress and egress, computed over the
    rows as they are (a row no writer could have written gets -1, which never verifies); the dead-letter table."""
    db.create_function("reaqtive_ingress_crc", 5, _migrated_ingress_crc, deterministic=True)
    db.create_function("reaqtive_egress_crc", 3, _migrated_egress_crc, deterministic=True)
    db.execute("ALTER TABLE reaqtive_ingress ADD COLUMN crc INTEGER NOT NULL DEFAULT -1")
    db.execute(f"UPDATE reaqtive_ingress SET crc = reaqtive_ingress_crc(pos, {_AS_TEXT.format('stream')}, "
               f"{_AS_INT.format('seq')}, {_AS_INT.format('time')}, {_AS_BLOB.format('payload')})")
    db.execute("ALTER TABLE reaqtive_egress ADD COLUMN crc INTEGER NOT NULL DEFAULT -1")
    db.execute(f"UPDATE reaqtive_egress SET crc = reaqtive_egress_crc({_AS_TEXT.format('subscription')}, "
               f"{_AS_INT.format('seq')}, {_AS_BLOB.format('payload')})")
    db.execute(_DEAD_LETTERS)
    db.execute("UPDATE reaqtive_meta SET value = ? WHERE key = 'engine_schema_version'", (ENGINE_SCHEMA_VERSION,))


# A column handed to a migration function only if it has the type a writer gives it (text as bytes, so that invalid
# UTF-8 cannot fail the migration): NULL otherwise, and NULL gets a checksum that never verifies.
_AS_TEXT: Final = "CASE WHEN typeof({0}) = 'text' THEN CAST({0} AS BLOB) END"
_AS_INT: Final = "CASE WHEN typeof({0}) = 'integer' THEN {0} END"
_AS_BLOB: Final = "CASE WHEN typeof({0}) = 'blob' THEN {0} END"


def _migrated_ingress_crc(pos: int, stream: bytes | None, seq: int | None, time: int | None,
                          payload: bytes | None) -> int:
    try:
        if stream is not None and seq is not None and time is not None and payload is not None:
            return ingress_checksum(pos, stream.decode("utf-8"), seq, time, payload)
    except Exception:  # a function SQLite calls must not raise: that would fail the migration
        pass
    return -1


def _migrated_egress_crc(subscription: bytes | None, seq: int | None, payload: bytes | None) -> int:
    try:
        if subscription is not None and seq is not None and payload is not None:
            return egress_checksum(subscription.decode("utf-8"), seq, payload)
    except Exception:  # a function SQLite calls must not raise: that would fail the migration
        pass
    return -1


# -- one writer per store -------------------------------------------------------------------------------------------


class _WriterLock:
    """An exclusive lock on ``<store>.lock`` held by the operating system for this process (not a file's
    existence): the kernel releases it when the holder closes it or dies, however it dies. The file holds the
    holder's pid, for the message of those refused; it is never deleted. A store dropped without ``close`` (an
    engine abandoned in a test, say) releases it when it is garbage-collected."""

    def __init__(self, store: Path) -> None:
        self.store = store
        real = store.resolve()  # one lock file for every name of the store that is a symbolic link
        self.path = real.with_name(real.name + ".lock")
        self._release: weakref.finalize[[int], _WriterLock] | None = None

    def acquire(self) -> None:
        if self._release is not None and self._release.alive:
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise StoreError(f"{self.store}: cannot open the lock file {self.path}: {error}") from error
        try:
            if not _try_lock(fd):
                raise StoreLockedError(str(self.store), _read_pid(fd))
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as error:
            os.close(fd)
            raise StoreError(f"{self.store}: cannot take the lock {self.path}: {error}") from error
        except BaseException:
            os.close(fd)
            raise
        self._release = weakref.finalize(self, _unlock_and_close, fd)

    def release(self) -> None:
        if self._release is not None:
            self._release()  # once: a finalizer runs at most once


def _unlock_and_close(fd: int) -> None:
    try:
        _unlock(fd)
    finally:
        os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        return int(os.read(fd, 32).decode("ascii").strip())
    except (OSError, ValueError, UnicodeDecodeError):
        return None  # the holder has not written it yet


if sys.platform == "win32":  # pragma: no cover  (the lock byte lies beyond the pid, which others must read)
    import msvcrt

    _LOCK_OFFSET: Final = 1 << 30

    def _try_lock(fd: int) -> bool:
        os.lseek(fd, _LOCK_OFFSET, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

    def _unlock(fd: int) -> None:
        os.lseek(fd, _LOCK_OFFSET, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
