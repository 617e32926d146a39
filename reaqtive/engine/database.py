"""The engine's SQLite file: artifacts, templates and state in the checkpoint store, plus the ingress and egress
logs and the dead letters in tables of their own.

* ``reaqtive_blobs`` (the :class:`~reaqtive.state.SqliteCheckpointStore` table), by category:
  ``artifacts`` (one JSON record per artifact, by URI), ``templates`` (one JSON template per content hash) and
  ``state`` (one state blob per subscription and per inner subscription). Every create and delete commits there at
  once, in one transaction with the state it adds or removes and, for a subscription, with its rows of the
  durable sink and its acknowledgement (:meth:`EngineStore.commit_with_outputs`: the checkpoint store's commit
  carries them); a checkpoint commits state there atomically.
* ``reaqtive_ingress``: the durable input log, a row per run of consecutive events of one stream:
  ``(pos, stream, seq, count, times, payload, crc)``. Every event has a position (``pos`` orders all streams
  together: the order the engine delivers in) and a sequence number in its stream (from 0); a row holds
  ``count`` events (at most :data:`ROW_EVENTS`), the first at ``pos``/``seq``, event ``i`` at ``pos + i`` /
  ``seq + i``. ``times``: their times, a msgpack array of integer microseconds since the epoch, the first
  absolute and each next one as the difference to the one before; ``payload``: their values, ``count``
  consecutive msgpack entries. Rows never overlap, and positions are never reused: the last one given is kept in
  ``reaqtive_meta`` (``ingress_position``), so it survives truncation. Producers append; a row is deleted only
  after a committed checkpoint covers all its events.
* ``reaqtive_egress``: the built-in durable sink: ``(subscription, seq, payload, crc)``, primary key
  ``(subscription, seq)``: a replayed output is ignored, so the table holds each output exactly once.
* ``reaqtive_acks``: per subscription, the last output its consumers acknowledged: ``(subscription, seq, crc)``;
  the durable sink's rows whose outputs are all at or below it may be deleted (:meth:`EngineStore.trim_outputs`),
  and outputs at or below it are never written again (a replay after a crash produces them again).
* ``reaqtive_dead_letters``: events taken out of delivery (quarantined): ``(id, stream, seq, pos, time, payload,
  reason, at, crc, id_crc)``, unique ``(stream, seq)``, each with the bytes it was stored with, damaged or not.
* ``reaqtive_failed_elements``: elements a user function raised on inside a subscription, skipped under its error
  policy ``"skip"``: ``(id, subscription, unit, path, pos, ordinal, operator, error_type, message, traceback,
  element, at, payload, crc)``, unique ``(subscription, unit, path, pos, ordinal)``: recording one again (a replay
  skips the same element) is ignored, so each is kept once.
* Both kinds of **dead letters** are numbered together (``id``: increasing, never given twice; the last number is
  kept in ``reaqtive_meta``, ``dead_letter_id``, so trimming never makes one be given again).
  ``reaqtive_dead_letter_acks``: the consumers' acknowledgement, one cursor for both kinds (``('all', id, crc)``);
  :meth:`EngineStore.trim_dead_letters` deletes the acknowledged ones nothing needs any more (each checkpoint
  runs it).

**Integrity.** Every row carries a checksum of its identifying columns and its content (:func:`ingress_checksum`,
:func:`egress_checksum`, :func:`dead_letter_checksum` and :func:`dead_letter_id_checksum`,
:func:`failed_element_checksum`, :func:`ack_checksum`, :func:`dead_letter_ack_checksum`; blobs:
:func:`~reaqtive.state.sqlite_store.row_checksum`),
verified whenever it is read, so a damaged row and a row moved to another row's place are both detected. A
damaged ingress row (or one whose payload or times cannot be decoded) is returned as an :class:`IngressRun`
with ``damage`` set, standing for its events, for the engine to quarantine (the rows around it are unaffected);
a damaged output raises :class:`~reaqtive.state.DamagedRowError` naming ``subscription#seq``; a damaged dead
letter is listed with ``damage`` set. Every SQLite error becomes a :class:`~reaqtive.state.StoreError` naming the
file and the operation (:class:`~reaqtive.state.StoreCorruptError` for a damaged file).

**One writer.** An :class:`EngineStore` holds an exclusive operating-system lock on ``<store>.lock`` from open
to close (``flock``; ``msvcrt.locking`` on Windows); a second one, in this process or another, is refused with
:class:`~reaqtive.state.StoreLockedError` naming the holder's pid. The kernel drops the lock when the holder
dies, even by ``SIGKILL``. The lock file is never deleted (deleting it would race with the next opener). Readers
that never write (``reaqtive inspect``) do not take it.

**Versions.** The engine tables have their own layout version (``engine_schema_version`` in ``reaqtive_meta``,
now 5). Older files are migrated when opened, in the same transaction as the checkpoint store's migration, one
version after the other. 1 → 2: crc columns are added and computed over the rows as they are (version 1 had no
checksums on these tables, so damage from before the migration cannot be told apart; a row that no writer could
have written — text that is not UTF-8, a column of the wrong type — gets a checksum that never verifies), and
the dead-letter table is created. 2 → 3: the ingress log of a row per event becomes a log of runs, each old row
a run of one event; a row that verified gets the checksum of its new layout, one that did not keeps a checksum
that never verifies (damage is never laundered); the position counter continues from the old one. 3 → 4: the
acknowledgement table is created (empty: nothing was acknowledged before). 4 → 5: every dead letter gets a number,
in ``(pos, stream, seq)`` order (never-logged events last), and an ``id_crc`` binding it to its event, its other
columns and its ``crc`` unchanged (a damaged row stays damaged); the failed elements' table and the dead letters'
acknowledgement are created empty. A file of an unknown version is refused untouched
(:class:`UnknownEngineVersionError`), and so is one whose tables are not those of the layout its metadata claims
(:class:`~reaqtive.state.sqlite_store.StoreLayoutError`, see :func:`check_layout`).

**In memory.** ``EngineStore(":memory:")`` keeps the same tables in an SQLite in-memory database that both of its
connections share (SQLite's ``memdb`` VFS, a private name per store): the same transactions and checks, nothing
on disk, no lock file (nobody else can name it); it is gone when the store closes.

**PostgreSQL.** :func:`open_engine_store` (what the engine calls) opens a
:class:`~reaqtive.engine.postgres_database.PostgresEngineStore` for a ``postgresql://`` URL: this class, with the
same tables, rows, checksums and transactions, on a PostgreSQL database. Every method here reaches its database
through a small seam (:meth:`EngineStore._all`, ``_one``, ``_exec``, ``_many``, ``_transaction``, ``_reading``,
``_store_error``), and its SQL is written in SQLite's dialect with ``?`` parameters, which the PostgreSQL store
translates; the rows are packed, verified and decoded by the same code whatever the database.

Payloads are encoded with the state codec (msgpack; registered user types; never pickle).
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from itertools import accumulate, pairwise
from operator import sub as _minus
from pathlib import Path
from typing import Any, Final, TypeAlias, overload

import msgpack

from reaqtive.state import (
    DEFAULT_CODEC,
    CheckpointStore,
    CheckpointTransaction,
    DamagedRowError,
    SqliteCheckpointStore,
    StateCodec,
    StateError,
    StateFormatError,
    StoreCorruptError,
    StoreError,
    StoreLockedError,
    StoreOpenError,
)
from reaqtive.state.codec import is_tuple_run, resolve_tuple_run_pieces
from reaqtive.state.sqlite_store import StoreLayoutError, columns_checksum, fetchall_lenient, store_error, verifies

__all__ = [
    "ENGINE_MIGRATES",
    "ENGINE_SCHEMA_VERSION",
    "ROW_EVENTS",
    "DeadLetter",
    "ELEMENT_REPR_CHARS",
    "ElementLetter",
    "EngineStore",
    "IngressBatch",
    "IngressEvent",
    "IngressRun",
    "MEMORY",
    "MESSAGE_CHARS",
    "OutputChunk",
    "OutputChunks",
    "PackedEntries",
    "Quarantine",
    "TRACEBACK_CHARS",
    "UnknownEngineVersionError",
    "ack_checksum",
    "array_entries",
    "check_layout",
    "chunk_outputs",
    "dead_letter_ack_checksum",
    "dead_letter_checksum",
    "dead_letter_id_checksum",
    "egress_checksum",
    "element_payload",
    "failed_element_checksum",
    "ingress_checksum",
    "outputs_query",
]

ENGINE_SCHEMA_VERSION: Final = 5
ENGINE_MIGRATES: Final = (1, 2, 3, 4)
"""Older layout versions of the engine tables that opening migrates in place."""

ROW_EVENTS: Final = 1024
"""The most events one ingress row holds (a larger append is split into rows of this many)."""

OutputChunk: TypeAlias = tuple[str, int, int, bytes]
"""Outputs of one subscription with consecutive numbers, encoded: ``(subscription, first seq, count, entries)``,
``entries`` the msgpack entries of the ``count`` values one after the other (see :class:`OutputChunks`)."""


class OutputChunks(list[OutputChunk]):
    """Outputs encoded in chunks (:data:`OutputChunk`), as the engine's durable sink buffers them:
    :meth:`EngineStore.write_outputs` takes them as they are, joining a subscription's consecutive chunks into rows
    instead of cutting them into single outputs."""

    __slots__ = ()
_ROW_BYTES: Final = 1 << 20  # and rows of large values are cut to about this many payload bytes

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)
_MIN_MICROS: Final = (datetime.min.replace(tzinfo=UTC) - _EPOCH) // _MICROSECOND
_MAX_MICROS: Final = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // _MICROSECOND
_CHECKSUM_ERRORS: Final = (TypeError, ValueError, OverflowError)
_SYNCHRONOUS: Final = ("EXTRA", "FULL", "NORMAL", "OFF")
_POSITION_KEY: Final = "ingress_position"  # in reaqtive_meta: the last position ever given to an event

_LETTER_ID_KEY: Final = "dead_letter_id"  # in reaqtive_meta: the last number given to a dead letter (both kinds)

# time and payload have no type: a quarantined row keeps what it was stored with, whatever that is. Layouts 2-4.
_DEAD_LETTERS_4: Final = (
    "CREATE TABLE IF NOT EXISTS reaqtive_dead_letters (stream TEXT NOT NULL, seq INTEGER NOT NULL, "
    "pos INTEGER, time, payload, reason TEXT NOT NULL, at INTEGER NOT NULL, crc INTEGER NOT NULL, "
    "PRIMARY KEY (stream, seq)) WITHOUT ROWID"
)
# Layout 5: numbered. crc is layout 4's (the event's columns); id_crc binds the number to the event's key.
_DEAD_LETTERS: Final = (
    "CREATE TABLE IF NOT EXISTS reaqtive_dead_letters (id INTEGER PRIMARY KEY, stream TEXT NOT NULL, "
    "seq INTEGER NOT NULL, pos INTEGER, time, payload, reason TEXT NOT NULL, at INTEGER NOT NULL, "
    "crc INTEGER NOT NULL, id_crc INTEGER NOT NULL DEFAULT -1, UNIQUE (stream, seq))"
)
# Elements a user function raised on inside a subscription's operator, skipped (error policy "skip"). Recorded once
# per key: a replay after a crash skips the same element again, and its row is there already.
_FAILED_ELEMENTS: Final = (
    "CREATE TABLE IF NOT EXISTS reaqtive_failed_elements (id INTEGER PRIMARY KEY, subscription TEXT NOT NULL, "
    "unit TEXT NOT NULL, path TEXT NOT NULL, pos INTEGER NOT NULL, ordinal INTEGER NOT NULL, "
    "operator TEXT NOT NULL, error_type TEXT NOT NULL, message TEXT NOT NULL, traceback TEXT NOT NULL, "
    "element TEXT, at INTEGER NOT NULL, payload BLOB, crc INTEGER NOT NULL, "
    "UNIQUE (subscription, unit, path, pos, ordinal))"
)
# The consumers' acknowledgement of the dead letters: one cursor (a row named 'all'), the highest number handled.
_DEAD_LETTER_ACKS: Final = (
    "CREATE TABLE IF NOT EXISTS reaqtive_dead_letter_acks (name TEXT PRIMARY KEY, id INTEGER NOT NULL, "
    "crc INTEGER NOT NULL) WITHOUT ROWID"
)
_ACK_ROW: Final = "all"
# No AUTOINCREMENT: a row's pos is its first event's, and the last position given is kept in reaqtive_meta.
_INGRESS: Final = (
    "CREATE TABLE IF NOT EXISTS reaqtive_ingress (pos INTEGER PRIMARY KEY, stream TEXT NOT NULL, "
    "seq INTEGER NOT NULL, count INTEGER NOT NULL, times BLOB NOT NULL, payload BLOB NOT NULL, "
    "crc INTEGER NOT NULL, UNIQUE (stream, seq))"
)
# A row holds consecutive outputs of one subscription and is keyed by its last one: seq - count + 1 .. seq.
_EGRESS: Final = (
    "CREATE TABLE IF NOT EXISTS reaqtive_egress (subscription TEXT NOT NULL, seq INTEGER NOT NULL, "
    "count INTEGER NOT NULL, payload BLOB NOT NULL, crc INTEGER NOT NULL, PRIMARY KEY (subscription, seq)) "
    "WITHOUT ROWID"
)
_ACKS: Final = (
    "CREATE TABLE IF NOT EXISTS reaqtive_acks (subscription TEXT PRIMARY KEY, seq INTEGER NOT NULL, "
    "crc INTEGER NOT NULL) WITHOUT ROWID"
)
_TABLES: Final = (
    _INGRESS,
    "CREATE TABLE IF NOT EXISTS reaqtive_stream_heads (stream TEXT PRIMARY KEY, next_seq INTEGER NOT NULL) "
    "WITHOUT ROWID",
    _EGRESS,
    _DEAD_LETTERS,
    _ACKS,
    _FAILED_ELEMENTS,
    _DEAD_LETTER_ACKS,
)
MEMORY: Final = ":memory:"
"""The path of an in-memory store (see the module docstring)."""

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
    ``payload`` and ``micros`` are the event's stored bytes and time, which a quarantine keeps. An event of a
    damaged row whose payload cannot be cut into its events has no bytes of its own: the row's first event
    carries the row's whole payload (and, if the times cannot be read either, the row's ``times`` column).
    """

    pos: int
    stream: str
    seq: int
    time: datetime
    value: Any
    damage: str | None = None
    payload: bytes | None = field(default=None, repr=False, compare=False)
    micros: int | None = field(default=None, repr=False, compare=False)
    times: object = field(default=None, repr=False, compare=False)


class RunTimes(Sequence[int]):
    """The times of a run's events (integer microseconds since the Unix epoch), kept as its row stores them: the
    row's first time and each next one's difference (:func:`pack_times`). Adding them all up makes a new integer
    per event, which the fast path of delivery does not need: it asks for the time at the end of a slice (an
    index: a running sum of the differences, carried on from the index asked before when this one is not
    before it). A slice, iterating or :meth:`as_list` make the list, once.

    ``deltas``: the row's column decoded; ``offset``: the index in the row of the run's first event; ``size``:
    how many events the run has. :meth:`of_list` wraps times already added up."""

    __slots__ = ("_deltas", "_list", "_offset", "_size", "_sum", "_upto")

    def __init__(self, deltas: list[int], offset: int, size: int) -> None:
        self._deltas = deltas
        self._offset = offset
        self._size = size
        self._list: list[int] | None = None
        self._upto = 0  # _sum adds up the row's differences before this index
        self._sum = 0

    @classmethod
    def of_list(cls, micros: list[int]) -> RunTimes:
        """Times already added up."""
        times = cls(micros, 0, len(micros))
        times._list = micros
        return times

    def as_list(self) -> list[int]:
        """Every event's time, in the order of the events."""
        listed = self._list
        if listed is None:
            start = self._offset
            listed = list(accumulate(self._deltas[: start + self._size]))
            if start:
                del listed[:start]
            self._list = listed
        return listed

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[int]:
        return iter(self.as_list())

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> list[int]: ...

    def __getitem__(self, index: int | slice) -> int | list[int]:
        listed = self._list
        if listed is not None or type(index) is not int:
            return (listed if listed is not None else self.as_list())[index]
        if index < 0:
            index += self._size
        if not 0 <= index < self._size:
            raise IndexError("run time index out of range")
        upto = self._offset + index + 1
        if upto < self._upto:
            self._upto = self._sum = 0  # asked before the last one: added up again from the row's first
        self._sum += sum(self._deltas[self._upto:upto])
        self._upto = upto
        return self._sum

    def after(self, taken: int) -> RunTimes:
        """The times without the first ``taken`` events."""
        if self._list is not None:
            return RunTimes.of_list(self._list[taken:])
        times = RunTimes(self._deltas, self._offset + taken, self._size - taken)
        times._upto, times._sum = self._upto, self._sum  # the same row's differences: the sum so far holds
        return times

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RunTimes):
            return self.as_list() == other.as_list()
        return self.as_list() == other

    # Compared by value, as the list it stands for: unhashable, as a list.
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RunTimes({self.as_list()!r})"


@dataclass(frozen=True, slots=True)
class IngressRun:
    """Consecutive events of one stream, as one ingress row holds them (or the part of it after a position):
    event ``i`` has position ``pos + i`` and sequence number ``seq + i``; ``micros[i]`` is its time (integer
    microseconds since the Unix epoch, UTC) and ``values[i]`` its value.

    ``damage``: why the run cannot be delivered — its row does not match its checksum, or its times or payload
    cannot be decoded — or ``None``. A damaged run stands for ``count`` events (as many as its row says, never
    more than fit before the next row), its ``values`` are all ``None`` and its ``micros`` are the stored
    times if they can be read (else empty): do not deliver them; :meth:`events` gives its events marked for
    quarantine. ``payload``, ``times`` and ``offset`` are the row's stored columns and the index in it of this
    run's first event, so that a quarantine keeps each event's bytes.

    Example: ``for run in store.read_ingress_runs(after, 4096): deliver(run.stream, run.seq, run.values)``
    """

    pos: int
    stream: str
    seq: int
    count: int
    ticks: RunTimes
    """The events' times, computed from the row's differences as far as they are asked (see :attr:`micros`)."""
    values: list[Any]
    damage: str | None = None
    payload: object = field(default=None, repr=False, compare=False)
    times: object = field(default=None, repr=False, compare=False)
    offset: int = field(default=0, repr=False, compare=False)
    ordered: bool = field(default=False, repr=False, compare=False)
    """Whether ``micros`` are in order (each at or after the one before): the latest of a slice is its last."""

    @property
    def micros(self) -> list[int]:
        """The events' times, integer microseconds since the Unix epoch (UTC), as a list (made at the first
        call: the fast path of delivery asks :attr:`ticks` for the time at a slice's end only)."""
        return self.ticks.as_list()

    def after(self, taken: int) -> IngressRun | None:
        """The run without its first ``taken`` events (``None`` for a damaged run: it is read again whole)."""
        if taken == 0:
            return self
        if self.damage is not None:
            return None
        return replace(self, pos=self.pos + taken, seq=self.seq + taken, count=self.count - taken,
                       ticks=self.ticks.after(taken), values=self.values[taken:], offset=self.offset + taken)

    def events(self) -> list[IngressEvent]:
        """The run as one :class:`IngressEvent` per event (the slow path: quarantine, checks per event), each
        with its own stored bytes."""
        pieces = _split_entries(self.payload)
        if pieces is not None and len(pieces) != self.offset + self.count:
            pieces = None  # a damaged row that does not split into its events: its bytes stay together
        offset, micros, pos, stream, seq = self.offset, self.micros, self.pos, self.stream, self.seq
        if self.damage is None:
            return [
                IngressEvent(pos + i, stream, seq + i, from_micros(micros[i]), value, None,
                             pieces[offset + i] if pieces is not None else None, micros[i])
                for i, value in enumerate(self.values)
            ]
        events = []
        for i in range(self.count):
            at_row = offset + i  # the event's index in its row: the row's first one keeps what cannot be cut
            stored = micros[i] if micros else None
            payload: bytes | None = None
            if pieces is not None:
                payload = pieces[at_row]
            elif at_row == 0:
                payload = self.payload if type(self.payload) is bytes else _text_bytes(self.payload)
            events.append(IngressEvent(
                pos=pos + i,
                stream=stream,
                seq=seq + i if seq >= 0 else seq - i,  # a damaged negative number: distinct ones, all negative
                time=_time_or_none(stored) or _EPOCH,
                value=None,
                damage=self.damage,
                payload=payload,
                micros=stored,
                times=self.times if at_row == 0 and not micros else None,
            ))
        return events


def array_entries(array: bytes, count: int) -> bytes:
    """The entries of a msgpack array of ``count`` values, without its header (1, 3 or 5 bytes): a list packed
    in one call is its values' entries, each as packing it alone writes it, after the header."""
    return array[1 if count < 16 else 3 if count < 0x10000 else 5:]


class PackedEntries(Sequence[bytes]):
    """The payloads of consecutive events packed together, as rows hold them: ``chunks`` of ``(count, data)``,
    ``data`` being ``count`` codec entries one after the other. A sequence of each event's own bytes: they are cut
    apart (once) only when asked for, for a quarantine or a row that must cut a chunk.

    An append encodes its values with one packer call per chunk instead of one per event, and the writer puts a
    chunk in a row whole (:class:`IngressBatch`)."""

    __slots__ = ("_count", "_pieces", "chunks")

    def __init__(self, chunks: list[tuple[int, bytes]]) -> None:
        self.chunks = chunks
        self._count = sum(count for count, _ in chunks)
        self._pieces: list[bytes] | None = None

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: Any) -> Any:
        return self.pieces()[index]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.pieces())

    def pieces(self) -> list[bytes]:
        """Each event's bytes."""
        if self._pieces is None:
            pieces: list[bytes] = []
            for count, data in self.chunks:
                split = _split_entries(data)
                if split is None or len(split) != count:
                    raise ValueError(f"packed entries that are not {count} codec entries")  # a writer's bug
                pieces += split
            self._pieces = pieces
        return self._pieces


@dataclass(slots=True)
class IngressBatch:
    """Events of one stream to append, encoded: ``payloads[i]`` (one codec entry; a :class:`PackedEntries`, or
    any sequence of bytes) and ``micros[i]`` (its time in microseconds since the epoch). ``reasons``: per event,
    why it goes to the dead letters instead of the log (``None``: it is logged), or ``None`` for a batch without
    any. ``first``: the sequence number the batch must start at (an
    :class:`~reaqtive.engine.ingress.IngressWriter` that numbered it already), or ``None``: the stream's next."""

    stream: str
    payloads: Sequence[bytes]
    micros: list[int]
    reasons: list[str | None] | None = None
    first: int | None = None


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A dead letter (see :meth:`EngineStore.dead_letters`): a quarantined event (``kind`` ``"event"``) or an
    element a user function raised on inside a subscription, skipped under its error policy ``"skip"`` (``kind``
    ``"element"``). Both kinds are numbered together: ``id`` increases in the order they were recorded and is never
    given twice (trimmed letters' numbers included); the cursor and the acknowledgement count in it.

    An event: ``stream`` and ``seq`` name it. ``pos``: its place in the ingress log (``None``: quarantined when it
    was appended, never logged; ``-1``: missing from the log). ``time``: ``None`` if the stored time is unusable.
    ``value``: ``None`` if the payload cannot be decoded. ``reason``: why it was taken out of delivery. The element
    fields are ``None``.

    An element: ``stream`` is ``""`` and ``seq`` is ``-1`` (it belongs to a subscription, not to a stream);
    ``subscription``, ``unit`` (the subscription, or one of its inner units ``<subscription>/...``), ``path`` (the
    operator's place in the unit's tree, like ``"0/1/0"``) and ``operator`` (its persisted name) say where it
    failed; ``pos`` is the log position of the event that carried it (``None``: none, a timer's work); ``ordinal``
    tells apart several failures at one operator for one event (0 for the first); ``error_type``, ``message`` and
    ``traceback`` (its last frames) say how; ``reason`` is ``"<error_type>: <message>"``; ``value`` is the element
    (``None`` if the codec could not keep it: then ``element``, its ``repr`` cut to 200 characters, is all there
    is); ``time`` is ``None``.

    Both: ``at``, when it was recorded; ``damage``, set if the row itself does not match its checksum (then
    ``at`` may be ``None`` too); ``payload``, the event's or the element's bytes as stored. ``id`` takes no part in
    comparisons.
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
    id: int = field(default=0, compare=False)
    kind: str = "event"
    subscription: str | None = None
    unit: str | None = None
    path: str | None = None
    operator: str | None = None
    error_type: str | None = None
    message: str | None = None
    traceback: str | None = field(default=None, repr=False)
    element: str | None = None
    ordinal: int | None = None


def check_dead_letter_query(stream: str | None, subscription: str | None, after: object, limit: object) -> None:
    """The arguments of a listing of dead letters: a stream or a subscription (not both), a cursor, a limit."""
    if stream is not None and subscription is not None:
        raise ValueError("dead_letters(): give a stream or a subscription, not both")
    if limit is not None and (type(limit) is not int or limit < 0):
        raise ValueError(f"dead_letters(): limit must be a whole number >= 0, got {limit!r}")
    if after is not None and type(after) is not int:
        raise TypeError(f"dead_letters(): after must be a dead letter's number (int), got {after!r}")


ELEMENT_REPR_CHARS: Final = 200
"""How much of an element's ``repr`` a failed element keeps."""
MESSAGE_CHARS: Final = 2000
"""How much of an error's message a failed element keeps."""
TRACEBACK_CHARS: Final = 8000
"""How much of a traceback text a failed element keeps (its end: the frames nearest the error)."""


@dataclass(frozen=True, slots=True)
class ElementLetter:
    """An element a user function raised on inside a subscription's operator, skipped under the error policy
    ``"skip"``: a row of :meth:`EngineStore.record_failed_elements`.

    Its key is ``(subscription, unit, path, pos, ordinal)``: recording it again (a replay after a crash skips the
    same element) is ignored, so each failure is kept once. ``unit``: the subscription, or an inner unit
    (``<subscription>/...``); ``path``: the operator's place in the unit's tree (``"0/1/0"``); ``pos``: the log
    position of the event that carried the element (``-1``: none); ``ordinal``: tells apart several failures at
    one operator for one event (the n-th, from 0: deterministic, so a replay numbers them the same).
    ``operator``: its persisted name; ``error_type``, ``message``, ``traceback``: the error (a few frames; the
    store keeps at most :data:`MESSAGE_CHARS` of the message and the last :data:`TRACEBACK_CHARS` of the
    traceback). ``payload``: the element encoded with the store's codec (:func:`element_payload`), or ``None`` if
    it cannot be; ``element``: its ``repr``, cut to :data:`ELEMENT_REPR_CHARS` (kept either way: ``reaqtive
    inspect`` shows it without decoding anything).
    """

    subscription: str
    unit: str
    path: str
    pos: int
    operator: str
    error_type: str
    message: str
    traceback: str
    payload: bytes | None = None
    element: str | None = None
    ordinal: int = 0


def element_payload(element: Any, codec: StateCodec = DEFAULT_CODEC) -> bytes | None:
    """``element`` encoded with ``codec`` (one entry, what :class:`ElementLetter` keeps), or ``None`` if the codec
    cannot encode it (then only its ``repr`` is kept)."""
    try:
        return codec.encode(element)
    except Exception:  # an element the codec refuses (a type it does not know): only its repr is kept
        return None


def ingress_checksum(pos: int, stream: str, seq: int, count: int, times: bytes, payload: bytes) -> int:  # noqa: PLR0917
    """The ``crc`` of a ``reaqtive_ingress`` row (its columns, in their order)."""
    return columns_checksum(pos, stream, seq, count, times, payload)


def pack_times(micros: Sequence[int]) -> bytes:
    """The ``times`` column of a row: the first time, then each one's difference to the one before (small
    numbers, one to five bytes each for times that are close), as a msgpack array."""
    if not micros:
        return msgpack.packb([])  # type: ignore[no-any-return]
    deltas = [micros[0]]
    deltas += map(_minus, micros[1:], micros)
    return msgpack.packb(deltas)  # type: ignore[no-any-return]


def unpack_times(times: object, count: int) -> list[int]:
    """The times of a ``times`` column (see :func:`pack_times`), checked: ``count`` integers within the range
    of ``datetime``. Raises ``ValueError`` for anything else."""
    return unpack_times_in_order(times, count)[0]


def unpack_times_in_order(times: object, count: int) -> tuple[list[int], bool]:
    """:func:`unpack_times`, and whether the times are in order (none before the one before it, and the first
    not before the epoch: the differences the column holds are all >= 0), so that a reader finds the latest
    of any slice at its end."""
    micros, deltas = _times_and_deltas(times, count)
    # Times in order (stamped now, or dated in order) have their extremes at the two ends: one pass over the
    # small differences instead of two over the times.
    ordered = min(deltas) >= 0
    if ordered:
        low, high = micros[0], micros[-1]
    else:
        low, high = min(micros), max(micros)
    if low < _MIN_MICROS or high > _MAX_MICROS:
        raise ValueError("times out of the range of datetime")
    return micros, ordered


def unpack_run_times(times: object, count: int, offset: int) -> tuple[RunTimes, bool]:
    """:func:`unpack_times_in_order` for a run from row index ``offset`` on. Times in order keep the row's
    differences (see :class:`RunTimes`): the differences are all >= 0 (the first, the first time, too), their
    sum is the last time, and no integer is made per event. Anything else (out of order, malformed) goes through
    :func:`unpack_times_in_order`, with its checks and errors."""
    deltas = None
    if type(times) is bytes:
        try:
            deltas = msgpack.unpackb(times)
            # Only integers (a float anywhere makes the sum a float), as many as the row says, none below 0.
            if type(deltas) is not list or len(deltas) != count or not deltas or min(deltas) < 0 \
                    or type(high := sum(deltas)) is not int:
                deltas = None
        except Exception:  # malformed: unpack_times_in_order says why
            deltas = None
    if deltas is None:
        micros, ordered = unpack_times_in_order(times, count)
        return RunTimes.of_list(micros[offset:] if offset else micros), ordered
    if high > _MAX_MICROS:
        raise ValueError("times out of the range of datetime")
    return RunTimes(deltas, offset, count - offset), True


def _times(times: object, count: object) -> list[int]:
    """``count`` integer times from a ``times`` column, whatever their range; ``ValueError`` otherwise."""
    return _times_and_deltas(times, count)[0]


def _times_and_deltas(times: object, count: object) -> tuple[list[int], list[int]]:
    """:func:`_times`, and the differences the column holds."""
    if type(times) is not bytes:
        raise ValueError("the times column is not a blob")
    try:
        deltas = msgpack.unpackb(times)
        if type(deltas) is not list or len(deltas) != count or not deltas:
            raise ValueError(f"{count} times expected")
        micros = list(accumulate(deltas))
        # A float anywhere makes every later sum (the last one included) a float; text or None raise here.
        if type(micros[-1]) is not int:
            raise ValueError("times that are not integers")
    except ValueError:
        raise
    except Exception as error:  # any malformed msgpack, or values that cannot be added
        raise ValueError(f"{type(error).__name__}: {error}") from error
    return micros, deltas


def egress_checksum(subscription: str, seq: int, count: int, payload: bytes) -> int:
    """The ``crc`` of a ``reaqtive_egress`` row (``seq``: its last output; ``count``: how many it holds)."""
    return columns_checksum(subscription, seq, count, payload)


def ack_checksum(subscription: str, seq: int) -> int:
    """The ``crc`` of a ``reaqtive_acks`` row."""
    return columns_checksum(subscription, seq)


def _egress_checksum_2(subscription: str, seq: int, payload: bytes) -> int:
    """The ``crc`` of an egress row of layouts 1 and 2 (one output)."""
    return columns_checksum(subscription, seq, payload)


def dead_letter_checksum(  # noqa: PLR0917  (the row's columns, in their order)
    stream: str, seq: int, pos: int | None, time: object, payload: object, reason: str, at: int
) -> int:
    """The ``crc`` of a ``reaqtive_dead_letters`` row (``time`` and ``payload`` as stored, whatever their type)."""
    return columns_checksum(stream, seq, pos, time, payload, reason, at)


def dead_letter_id_checksum(letter_id: int, stream: str, seq: int) -> int:
    """The ``id_crc`` of a ``reaqtive_dead_letters`` row: its number bound to the event it numbers (the row's
    ``crc`` covers the event's columns, as in layout 4)."""
    return columns_checksum(letter_id, stream, seq)


def failed_element_checksum(  # noqa: PLR0917  (the row's columns, in their order)
    letter_id: int, subscription: str, unit: str, path: str, pos: int, ordinal: int, operator: str,
    error_type: str, message: str, traceback: str, element: str | None, at: int, payload: bytes | None,
) -> int:
    """The ``crc`` of a ``reaqtive_failed_elements`` row."""
    return columns_checksum(letter_id, subscription, unit, path, pos, ordinal, operator, error_type, message,
                            traceback, element, at, payload)


def dead_letter_ack_checksum(name: str, letter_id: int) -> int:
    """The ``crc`` of a ``reaqtive_dead_letter_acks`` row (the table's name is part of it: a row of
    ``reaqtive_acks`` copied there does not verify)."""
    return columns_checksum("reaqtive_dead_letter_acks", name, letter_id)


def require_aware(value: object, what: str) -> datetime:
    """``value`` if it is a timezone-aware :class:`datetime`; else :class:`TypeError` naming ``what`` (the argument)
    and what it got (text is not parsed: which zone a bare ``'2026-01-01'`` means is the caller's to say), or
    :class:`ValueError` for a naive one."""
    if not isinstance(value, datetime):
        hint = (f"; parse it with its zone, e.g. datetime.fromisoformat({value!r}).replace(tzinfo=UTC)"
                if isinstance(value, str) else "")
        raise TypeError(f"{what} must be a timezone-aware datetime, got {type(value).__name__} {value!r}{hint}")
    if value.utcoffset() is None:
        raise ValueError(f"{what} must be timezone-aware, got {value}")
    return value


def store_location_problem(path: Path) -> StoreOpenError | None:
    """Why a store file cannot be opened or created at ``path``, if the file system says why: its directory is
    missing or not writable (SQLite creates the file, its journal files and the engine its lock file there), or
    the file is not writable. ``None``: none of these."""
    shown = str(path)
    directory = path.absolute().parent
    if not directory.exists():
        return StoreOpenError(f"{shown}: cannot open the store: its directory {directory} does not exist; create "
                              "it first (the engine creates the file, not its directories)", path=shown,
                              cause="directory missing")
    if not directory.is_dir():
        return StoreOpenError(f"{shown}: cannot open the store: {directory} is not a directory", path=shown,
                              cause="not a directory")
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        return StoreOpenError(f"{shown}: cannot open the store: the file is not writable by this user; make it "
                              "writable (chmod u+rw), or read it without writing with `reaqtive inspect`",
                              path=shown, cause="file not writable")
    if not os.access(directory, os.W_OK | os.X_OK):
        return StoreOpenError(f"{shown}: cannot open the store: its directory {directory} is not writable by this "
                              "user (the store keeps its journal and lock files next to it); make it writable or "
                              "put the store in a directory that is", path=shown, cause="directory not writable")
    return None


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
    and :class:`~reaqtive.state.StoreError` subclasses for everything else that stops the open. ``path`` ``":memory:"``
    (:data:`MEMORY`): a new, empty store in memory (see the module docstring). The engine opens its store with
    :func:`open_engine_store`, which opens a :class:`~reaqtive.engine.postgres_database.PostgresEngineStore` (this
    class on a PostgreSQL database) for a PostgreSQL URL.
    """

    checkpoints: CheckpointStore
    """The checkpoint store, in the same database."""

    def __init__(
        self, path: str | os.PathLike[str], *, synchronous: str = "FULL", codec: StateCodec = DEFAULT_CODEC
    ) -> None:
        self._path = Path(path)
        self._setup(str(self._path), synchronous, codec)
        memory = os.fspath(path) == MEMORY
        if not memory and self._path.is_file() and not os.access(self._path, os.W_OK):
            # SQLite would open it read-only without a word, and the first write (an append, a checkpoint) fail
            raise store_location_problem(self._path) or StoreError(f"{self._where}: the file is not writable")
        self._writer = None if memory else _WriterLock(self._path)
        try:
            # The engine tables are checked, locked, created or migrated in the checkpoint store's opening
            # transaction: a new or migrated file is complete or untouched.
            target: str | Path = self._path
            if memory:  # one database for both connections: a private name in SQLite's shared in-memory VFS
                target = f"file:/reaqtive-{uuid.uuid4().hex}?vfs=memdb"
                self.checkpoints = SqliteCheckpointStore.shared_memory(target, prepare=self._prepare)
            else:
                self.checkpoints = SqliteCheckpointStore(self._path, synchronous=synchronous, prepare=self._prepare)
            try:
                self._db = sqlite3.connect(target, isolation_level=None, check_same_thread=False, timeout=30.0,
                                           uri=memory)
                self._db.execute(f"PRAGMA synchronous={synchronous.upper()}")
            except sqlite3.Error as error:
                self.checkpoints.close()
                raise store_error(error, self._where, "opening the engine tables") from error
            try:
                self._load_acks()
            except BaseException:
                self._db.close()
                self.checkpoints.close()
                raise
        except BaseException as error:
            if self._writer is not None:
                self._writer.release()
            if type(error) is StoreError and not memory:  # SQLite's "unable to open database file": say why
                problem = store_location_problem(self._path)
                if problem is not None:
                    raise problem from error
            raise

    def _setup(self, where: str, synchronous: str, codec: StateCodec) -> None:
        """The state every engine store has, whatever its database (``where``: its name in messages)."""
        if synchronous.upper() not in _SYNCHRONOUS:  # (the checkpoint store checks it too)
            raise ValueError(f"synchronous must be one of {sorted(_SYNCHRONOUS)}, got {synchronous!r}")
        self._where = where
        self._codec = codec
        self._lock = threading.Lock()
        self._pending: Callable[[bool], None] | None = None
        self._acks: dict[str, int] = {}
        self._damaged_acks: dict[str, DamagedRowError] = {}
        self._letters_acked = 0  # the dead letters' acknowledgement (0: none)
        self._letters_ack_damage: DamagedRowError | None = None
        self._failed_counts: dict[str, int] = {}  # failed elements kept, per subscription
        self.last_truncation: dict[str, tuple[int, int]] = {}
        """Per stream, the events and stored bytes the last :meth:`truncate_ingress` deleted."""

    @property
    def path(self) -> Path | str:
        """The database file (a :class:`~pathlib.Path`); for a PostgreSQL store, its URL without the password
        (a ``str``)."""
        return self._path

    @property
    def codec(self) -> StateCodec:
        """The codec of the payloads."""
        return self._codec

    @property
    def in_memory(self) -> bool:
        """Whether the store is in memory (``":memory:"``), not in a file."""
        return self._writer is None

    @property
    def lock_path(self) -> Path | None:
        """The lock file next to it (``<store>.lock``), which holds the pid of the engine that has the store
        (``None`` in memory: there is no file to share)."""
        return None if self._writer is None else self._writer.path

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
        if version is not None:  # before anything is taken or written: a mismatch leaves the file untouched
            check_layout(self._where, version, _sqlite_columns(db))
        if self._writer is not None:
            self._writer.acquire()
        if version is None:
            for statement in _TABLES:
                db.execute(statement)
            db.execute("INSERT INTO reaqtive_meta (key, value) VALUES ('engine_schema_version', ?)",
                       (ENGINE_SCHEMA_VERSION,))
            return
        if version == 1:
            _migrate_from_1(db)
            version = 2
        if version == 2:
            _migrate_from_2(db)
            version = 3
        if version == 3:
            _migrate_from_3(db)
            version = 4
        if version == 4:
            _migrate_from_4(db)

    # -- the database seam: a store on another database overrides these (and the opening and closing) -------

    _driver_errors: tuple[type[Exception], ...] = (sqlite3.Error,)

    def _store_error(self, error: Exception, operation: str, *, rolled_back: bool = False) -> StoreError:
        """The :class:`~reaqtive.state.StoreError` for a driver error (``sqlite3.Error`` here)."""
        assert isinstance(error, sqlite3.Error)
        return store_error(error, self._where, operation, rolled_back=rolled_back)

    def _all(self, db: Any, sql: str, params: Sequence[object] = ()) -> list[Any]:
        """The rows of a statement (written in SQLite's dialect, ``?`` parameters; damaged text tolerated)."""
        return fetchall_lenient(db, sql, params)

    def _one(self, db: Any, sql: str, params: Sequence[object] = ()) -> Any:
        """The first row of a statement (``None``: no row)."""
        return db.execute(sql, params).fetchone()

    def _exec(self, db: Any, sql: str, params: Sequence[object] = ()) -> None:
        """Run a statement that returns no rows."""
        db.execute(sql, params)

    def _many(self, db: Any, sql: str, rows: Sequence[Sequence[object]]) -> None:
        """Run a statement once per row (one batch)."""
        db.executemany(sql, rows)

    def _insert_dead_letters(self, db: Any, rows: Sequence[tuple[object, ...]]) -> int:
        """Insert numbered dead-letter rows, ``(stream, seq, pos, time, payload, reason, at, crc, id, id_crc)``
        (``time`` as stored: an integer, or the bytes of a damaged row); returns how many were new."""
        return int(db.executemany(_INSERT_DEAD_LETTER, rows).rowcount)

    def _stored_time(self, column: object) -> object:
        """A dead letter's ``time`` as it was given to :meth:`_insert_dead_letters`, from its column."""
        return column

    @contextmanager
    def _reading(self, operation: str) -> Iterator[Any]:
        with self._lock:
            try:
                yield self._db
            except self._driver_errors as error:
                raise self._store_error(error, operation) from error

    @contextmanager
    def _transaction(self, operation: str) -> Iterator[Any]:
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
                raise self._store_error(error, operation, rolled_back=True) from error

    # -- ingress -----------------------------------------------------------------------------------------------

    def append(
        self, stream: str, events: Iterable[tuple[Any, datetime]], *, quarantine: Quarantine | None = None
    ) -> list[int]:
        """Append ``(value, time)`` events to ``stream`` in one transaction; return their sequence numbers.

        ``quarantine``: asked for each event before anything is written; an event it gives a reason for goes to
        the dead letters instead of the log, in the same transaction, with its sequence number (the numbers stay
        contiguous) and no log position. The returned list has the numbers of all the events, in order.
        (The engine appends through :class:`~reaqtive.engine.ingress.IngressWriter`, which batches; this is the
        same, one call at a time.)
        """
        encode = self._codec.encode
        payloads: list[bytes] = []
        micros: list[int] = []
        reasons: list[str | None] = []
        for value, time in events:
            payloads.append(encode(value))
            micros.append(to_micros(time))
            reason = quarantine(value, time) if quarantine is not None else None
            reasons.append(None if reason is None else str(reason))
        (first,) = self.write_ingress([IngressBatch(stream, payloads, micros, reasons)])
        return list(range(first, first + len(payloads)))

    def write_ingress(self, batches: Sequence[IngressBatch]) -> list[int]:
        """Append every batch, in order, in one transaction; returns the first sequence number of each.

        Each batch's events get the next sequence numbers of its stream and, unless a reason sends them to the
        dead letters, the next log positions. Consecutive events of one stream become one row (a batch is split
        at its quarantined events and every :data:`ROW_EVENTS` events; consecutive batches of one stream share
        rows, each chunk of a :class:`PackedEntries` whole). A batch whose ``first`` is not its stream's next
        number is refused (:class:`StoreError`), and so is the whole transaction.
        """
        if not batches:
            return []
        at = to_micros(datetime.now(UTC))
        names = sorted({batch.stream for batch in batches})
        operation = f"appending to stream {names[0]!r}" if len(names) == 1 else f"appending to streams {names!r}"
        with self._transaction(operation) as db:
            rows = _Rows(self._next_position(db))
            heads: dict[str, int] = {}
            firsts: list[int] = []
            dead: list[tuple[object, ...]] = []
            for batch in batches:
                stream = batch.stream
                head = heads.get(stream)
                if head is None:
                    head = self._head(db, stream)
                if batch.first is not None and batch.first != head:
                    raise StoreError(f"{self._where}: stream {stream!r} continues at #{head}, not at #{batch.first} "
                                     "(its events were numbered by another writer)")
                firsts.append(head)
                count = len(batch.payloads)
                heads[stream] = head + count
                reasons = batch.reasons
                if reasons is None or all(reason is None for reason in reasons):
                    rows.add(stream, head, batch.payloads, batch.micros)
                    continue
                start = 0  # split around the quarantined events: each row's numbers are contiguous
                for i, reason in enumerate(reasons):
                    if reason is None:
                        continue
                    if i > start:
                        rows.add(stream, head + start, batch.payloads[start:i], batch.micros[start:i])
                    start = i + 1
                    payload, micros, seq = batch.payloads[i], batch.micros[i], head + i
                    dead.append((stream, seq, None, micros, payload, reason, at,
                                 dead_letter_checksum(stream, seq, None, micros, payload, reason, at)))
                if count > start:
                    rows.add(stream, head + start, batch.payloads[start:], batch.micros[start:])
            rows.close()
            self._many(db, _INSERT_INGRESS, rows.rows)
            if dead:
                self._record_dead_letters(db, dead, fresh=True)
            self._many(db, _SET_HEAD, list(heads.items()))
            if rows.rows:
                self._exec(db, _SET_POSITION, (rows.pos - 1,))
        return firsts

    def _head(self, db: Any, stream: str) -> int:
        head = self._one(db, "SELECT next_seq FROM reaqtive_stream_heads WHERE stream = ?", (stream,))
        return _counter(head, self._where, f"the head of stream {stream!r}")

    def _next_position(self, db: Any) -> int:
        """The ``pos`` the next appended event gets: after the last one ever given (kept in ``reaqtive_meta``,
        as ``AUTOINCREMENT`` keeps its counter) and after the last row's events."""
        counter, last, count = self._one(db, _NEXT_POSITION, (_POSITION_KEY,))  # one statement: one round trip
        end = 0 if last is None else last + _events_of_row(count) - 1
        return max(_counter((counter,), self._where, "the ingress log's position counter"), end) + 1

    def stream_head(self, stream: str) -> int:
        """The next sequence number of ``stream`` (0 before its first event)."""
        with self._reading(f"reading the head of stream {stream!r}") as db:
            return self._head(db, stream)

    def read_ingress_runs(self, after_pos: int, limit: int) -> list[IngressRun]:
        """The events with ``pos > after_pos``, in ``pos`` order, as runs (a row each; the row that holds
        ``after_pos`` comes sliced to the events after it): rows that start within ``limit`` positions, so about
        ``limit`` events (the last row is whole).

        Each row is verified against its checksum and decoded in one go (its times with one unpack, its values
        with one decode); a row that does not verify, or cannot be decoded, comes back as a run with ``damage``
        set, in its place: the other rows are unaffected. Times stay integers (microseconds since the epoch).
        """
        upper = min(after_pos + max(limit, 1), _MAX_INTEGER)
        with self._reading("reading the ingress log") as db:
            rows = self._all(db, _READ_RUNS, (after_pos, after_pos, upper))
            if not _reaches_past(rows, after_pos):  # a gap of more than `limit` positions (truncated, deleted)
                (following,) = self._one(db, _FOLLOWING, (after_pos,))
                if following is None:
                    return []
                start = following - 1
                rows = self._all(db, _READ_RUNS, (start, start, min(start + max(limit, 1), _MAX_INTEGER)))
        return self._runs(rows, after_pos, lambda: self._end_of_rows(rows[-1][0]))

    def _end_of_rows(self, last: int) -> int:
        """The last position rows read up to a row at ``last`` can stand for (a damaged row's events end there):
        before the next row, and at most the last position given. Asked only when a row is damaged."""
        with self._reading("reading the ingress log") as db:
            (beyond,) = self._one(db, _FOLLOWING, (last,))
            counter = self._one(db, _READ_POSITION, (_POSITION_KEY,))
        end = beyond - 1 if beyond is not None else _MAX_INTEGER
        if counter is not None and type(counter[0]) is int:
            end = min(end, counter[0])
        return end

    def _runs(self, rows: list[tuple[Any, ...]], after_pos: int, end_of_rows: Callable[[], int]) -> list[IngressRun]:
        decode_run, decode = self._codec.decode_run, self._codec.decode_entries
        checksum = columns_checksum
        runs: list[IngressRun] = []
        append = runs.append
        last = len(rows) - 1
        for index, (pos, stream, seq, count, times, payload, crc) in enumerate(rows):
            try:
                sound = (crc == checksum(pos, stream, seq, count, times, payload) and type(payload) is bytes
                         and type(count) is int and count > 0)
            except _CHECKSUM_ERRORS:
                sound = False
            if sound:
                skip = after_pos + 1 - pos if pos <= after_pos else 0
                if skip >= count:
                    continue  # wholly at or before after_pos
                try:
                    ticks, ordered = unpack_run_times(times, count, skip)
                    values = decode_run(payload, count)  # one call for the row; None: decode_entries says why
                    if values is None:
                        values = decode(payload, f"ingress {stream}#{seq}")
                        if len(values) != count:
                            raise StateFormatError(f"ingress {stream}#{seq}: {len(values)} values for {count} "
                                                   "events")
                except (StateError, ValueError) as error:
                    damage = f"its payload or times cannot be decoded ({error})"
                else:
                    if skip:
                        values = values[skip:]
                    append(IngressRun(pos + skip, stream, seq + skip, count - skip, ticks, values, None, payload,
                                      times, skip, ordered))
                    continue
            else:
                damage = _DAMAGED
            following = rows[index + 1][0] if index < last else max(end_of_rows() + 1, pos + 1)
            damaged = _damaged_run(pos, stream, seq, count, times, payload, damage, following, after_pos)
            if damaged is not None:
                append(damaged)
        return runs

    def read_ingress(self, after_pos: int, limit: int) -> list[IngressEvent]:
        """Up to ``limit`` events with ``pos > after_pos``, in ``pos`` order, one object each (see
        :meth:`read_ingress_runs`, which this expands): a damaged row's events come back with ``damage`` set
        (and no value) in their place; the rest of the batch is unaffected."""
        events: list[IngressEvent] = []
        for run in self.read_ingress_runs(after_pos, limit):
            events += run.events()
            if len(events) >= limit:
                return events[: max(limit, 0)]
        return events

    def last_position(self) -> int:
        """The ``pos`` of the last appended event, also when it was truncated since (0 before any append).
        Positions never go back: the last one given is kept apart from the rows, so a truncated log never
        reuses them."""
        with self._reading("reading the log position") as db:
            return self._next_position(db) - 1

    def position_after(self, stream: str, seq: int) -> int | None:
        """The ``pos`` of the first retained event of ``stream`` after sequence number ``seq`` (``None``: none)."""
        with self._reading(f"reading the log position of stream {stream!r}") as db:
            holding = self._one(  # the row that may hold seq + 1 (rows of a stream never overlap)
                db, "SELECT pos, seq, count FROM reaqtive_ingress WHERE stream = ? AND seq <= ? ORDER BY seq DESC "
                "LIMIT 1", (stream, seq + 1)
            )
            if holding is not None:
                pos, first, count = holding
                if type(count) is int and type(first) is int and first + count > seq + 1:
                    return int(pos) + seq + 1 - first
            row = self._one(db, "SELECT MIN(pos) FROM reaqtive_ingress WHERE stream = ? AND seq > ?",
                            (stream, seq + 1))
        return int(row[0]) if row and row[0] is not None else None

    def seq_at_position(self, stream: str, position: int) -> int | None:
        """The sequence number of the last retained event of ``stream`` at or before log position ``position``:
        where the stream stood when the log was read up to there (``None``: no retained event of it there)."""
        with self._reading(f"reading the log position of stream {stream!r}") as db:
            row = self._one(  # rows of a stream are in both seq and pos order
                db, "SELECT pos, seq, count FROM reaqtive_ingress WHERE stream = ? AND pos <= ? ORDER BY seq DESC "
                "LIMIT 1", (stream, position)
            )
        if row is None:
            return None
        pos, first, count = (int(part) for part in row)
        return first + min(count - 1, position - pos)

    def stream_heads(self) -> dict[str, int]:
        """The next sequence number of every stream that has had an event."""
        with self._reading("reading the stream heads") as db:
            return dict(self._all(db, "SELECT stream, next_seq FROM reaqtive_stream_heads"))

    def truncate_ingress(self, covered: dict[str, int]) -> int:
        """Delete, per stream, the rows whose every event is at or below the given sequence number (a committed
        checkpoint covers them; a row only partly covered stays whole). Returns how many events were deleted.

        Appends the engine accepted but has not written yet (:meth:`set_pending_ingress`) are written first.
        :attr:`last_truncation` then says, per stream, the events and stored bytes deleted."""
        self._write_pending()
        per_stream: dict[str, tuple[int, int]] = {}
        with self._transaction("truncating the ingress log") as db:
            deleted = 0
            for stream, seq in covered.items():
                events = size = 0
                for count, stored in self._all(
                    db, f"DELETE FROM reaqtive_ingress WHERE stream = ? AND seq <= ? AND seq + count - 1 <= ? "
                    f"RETURNING count, {_ROW_BYTES_SQL}", (stream, seq, seq)
                ):
                    events += count if type(count) is int and count > 0 else 1
                    size += int(stored or 0)
                if events:
                    per_stream[stream] = (events, size)
                deleted += events
        self.last_truncation = per_stream
        return deleted

    def first_retained(self) -> dict[str, int]:
        """Per stream with events in the log, the sequence number of its oldest one still there."""
        with self._reading("reading the ingress log") as db:
            return dict(self._all(db, "SELECT stream, MIN(seq) FROM reaqtive_ingress GROUP BY stream"))

    def ingress_counts(self) -> dict[str, int]:
        """Events still in the log, per stream (a row only partly covered by a checkpoint counts whole)."""
        with self._reading("counting the ingress log") as db:
            return dict(self._all(db, _INGRESS_COUNTS))

    def ingress_extents(self) -> dict[str, tuple[int, int, int, int, int]]:
        """Per stream with events in the log: its events (a row partly covered counts whole), its stored bytes
        (payload and times, see :mod:`reaqtive.engine.retention`), the sequence number and log position of its
        oldest event and the log position of its newest. One pass over the rows' headers."""
        with self._reading("measuring the ingress log") as db:
            return {stream: (int(events), int(size or 0), int(first_seq), int(first_pos), int(last_pos))
                    for stream, events, size, first_seq, first_pos, last_pos in self._all(db, _INGRESS_EXTENTS)}

    def oldest_ingress_rows(self, stream: str, after_seq: int, limit: int) -> list[tuple[Any, ...]]:
        """Up to ``limit`` rows of ``stream`` holding events after ``after_seq``, oldest first, as ``(seq, count,
        stored bytes, times)`` (what a retention looks at, :mod:`reaqtive.engine.retention`)."""
        with self._reading(f"reading the ingress log of stream {stream!r}") as db:
            return [tuple(row) for row in self._all(db, _OLDEST_ROWS, (stream, after_seq, limit))]

    def set_pending_ingress(self, write: Callable[[bool], None] | None) -> None:
        """``write(closing)`` writes the appends the engine accepted but has not written yet (group commit, see
        :mod:`reaqtive.engine.ingress`): the store calls it before it truncates the log (the end of every
        checkpoint) and, with ``closing`` true, before it closes."""
        self._pending = write

    def _write_pending(self, *, closing: bool = False) -> None:
        if self._pending is not None:
            self._pending(closing)

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
                payload, time = event.payload, event.micros if event.micros is not None else event.times
            stream, why = _text(event.stream), str(reason)
            rows.append((stream, event.seq, event.pos, time, payload, why, when,
                         dead_letter_checksum(stream, event.seq, event.pos, time, payload, why, when)))
        if not rows:
            return 0
        with self._transaction("quarantining events") as db:
            return self._record_dead_letters(db, rows)

    def _record_dead_letters(self, db: Any, rows: Sequence[tuple[object, ...]], *, fresh: bool = False) -> int:
        """Number and insert event dead letters ``(stream, seq, pos, time, payload, reason, at, crc)`` (inside a
        transaction); those already there, by ``(stream, seq)``, are left as they were and get no number
        (``fresh``: the caller knows they are new: events numbered in this transaction). Returns how many were
        new."""
        if not fresh:
            rows = self._new_letters(db, rows)
        if not rows:
            return 0
        first = self._next_letter_id(db)
        numbered = [(*row, first + i, dead_letter_id_checksum(first + i, row[0], row[1]))  # type: ignore[arg-type]
                    for i, row in enumerate(rows)]
        new = self._insert_dead_letters(db, numbered)
        self._exec(db, _SET_COUNTER, (_LETTER_ID_KEY, first + len(rows) - 1))
        return new

    def _new_letters(self, db: Any, rows: Sequence[tuple[object, ...]]) -> list[tuple[object, ...]]:
        """The rows whose ``(stream, seq)`` is neither among the dead letters nor earlier in ``rows``."""
        seqs: dict[object, list[int]] = {}
        for row in rows:
            if type(row[1]) is int:
                seqs.setdefault(row[0], []).append(row[1])
        known: set[tuple[object, object]] = set()
        for stream, numbers in seqs.items():
            known.update((stream, seq) for (seq,) in self._all(
                db, "SELECT seq FROM reaqtive_dead_letters WHERE stream = ? AND seq BETWEEN ? AND ?",
                (stream, min(numbers), max(numbers))))
        new = []
        for row in rows:
            key = (row[0], row[1])
            if key not in known:
                known.add(key)
                new.append(row)
        return new

    def _next_letter_id(self, db: Any) -> int:
        """The number the next dead letter gets: after the last one ever given (kept in ``reaqtive_meta``, so that
        trimming never makes one be given again) and after every row's."""
        counter, events, elements = self._one(db, _NEXT_LETTER_ID, (_LETTER_ID_KEY,))
        last = _counter((counter,), self._where, "the dead letters' number counter")
        return max([last, *(top for top in (events, elements) if type(top) is int)]) + 1

    def record_failed_elements(self, rows: Iterable[ElementLetter], *, at: datetime | None = None) -> int:
        """Record elements a user function raised on (:class:`ElementLetter`), in one transaction, each with the
        next dead-letter number; returns how many were new. One already recorded, by its key ``(subscription,
        unit, path, pos, ordinal)``, is left as it was (a replay after a crash skips the same elements: each is
        kept once). ``at``: when (default: now). Raises ``TypeError`` for a row of the wrong types, before
        anything is written."""
        when = to_micros(at if at is not None else datetime.now(UTC))
        keyed: dict[tuple[str, str, str, int, int], tuple[object, ...]] = {}
        for row in rows:
            cleaned = _element_columns(row)
            keyed.setdefault(cleaned[:5], cleaned)  # type: ignore[arg-type]
        if not keyed:
            return 0
        with self._transaction("recording failed elements") as db:
            new = [columns for key, columns in keyed.items() if self._one(db, _FIND_FAILED, key) is None]
            if not new:
                return 0
            first = self._next_letter_id(db)
            numbered = []
            for i, (subscription, unit, path, pos, ordinal, operator, error_type, message, trace, element,
                    payload) in enumerate(new):
                stored = (first + i, subscription, unit, path, pos, ordinal, operator, error_type, message, trace,
                          element, when, payload)
                numbered.append((*stored, failed_element_checksum(*stored)))  # type: ignore[arg-type]
            self._many(db, _INSERT_FAILED, numbered)
            self._exec(db, _SET_COUNTER, (_LETTER_ID_KEY, first + len(new) - 1))
        for columns in new:
            name = str(columns[0])
            self._failed_counts[name] = self._failed_counts.get(name, 0) + 1
        return len(new)

    def dead_letters(
        self, stream: str | None = None, *, subscription: str | None = None, after: int | None = None,
        limit: int | None = None,
    ) -> list[DeadLetter]:
        """The dead letters of both kinds, in the order of their numbers (:class:`DeadLetter`), each verified (a
        damaged row is listed with ``damage`` set, never raised). ``stream``: only the quarantined events of that
        stream; ``subscription``: only the failed elements of that subscription (not both); neither: all.
        ``after``/``limit``: a cursor, the letters numbered above ``after``, at most ``limit`` of them. Every
        letter the store holds is listed, acknowledged or not (the engine's listing starts after the
        acknowledgement)."""
        check_dead_letter_query(stream, subscription, after, limit)
        with self._reading("reading the dead letters") as db:
            events = [] if subscription is not None else self._all(
                db, *_letters_query(_EVENT_LETTER_COLUMNS, "reaqtive_dead_letters", "stream", stream, after=after,
                                    limit=limit))
            elements = [] if stream is not None else self._all(
                db, *_letters_query(_ELEMENT_LETTER_COLUMNS, "reaqtive_failed_elements", "subscription",
                                    subscription, after=after, limit=limit))
        letters = [self._event_letter(row) for row in events] + [self._element_letter(row) for row in elements]
        letters.sort(key=_letter_id)
        return letters if limit is None else letters[:limit]

    def _event_letter(self, row: Sequence[Any]) -> DeadLetter:
        letter_id, name, seq, pos, column, payload, reason, at, crc, id_crc = row
        micros = self._stored_time(column)
        sound = (verifies(crc, dead_letter_checksum, name, seq, pos, micros, payload, reason, at)
                 and verifies(id_crc, dead_letter_id_checksum, letter_id, name, seq))
        return DeadLetter(
            stream=str(name),
            seq=seq if type(seq) is int else -1,
            pos=pos if type(pos) is int else None,
            time=_time_or_none(micros),
            value=self._value_or_none(payload, f"dead letter {name}#{seq}"),
            reason=str(reason),
            at=_time_or_none(at),
            damage=None if sound else "this dead-letter row does not match its checksum",
            payload=payload if type(payload) is bytes else None,
            id=letter_id if type(letter_id) is int else -1,
        )

    def _element_letter(self, row: Sequence[Any]) -> DeadLetter:
        (letter_id, subscription, unit, path, pos, ordinal, operator, error_type, message, trace, element, at,
         payload, crc) = row
        sound = verifies(crc, failed_element_checksum, *row[:-1])
        return DeadLetter(
            stream="",
            seq=-1,
            pos=pos if type(pos) is int and pos >= 0 else None,
            time=None,
            value=self._value_or_none(payload, f"failed element #{letter_id}"),
            reason=f"{error_type}: {message}",
            at=_time_or_none(at),
            damage=None if sound else "this failed-element row does not match its checksum",
            payload=payload if type(payload) is bytes else None,
            id=letter_id if type(letter_id) is int else -1,
            kind="element",
            subscription=str(subscription),
            unit=str(unit),
            path=str(path),
            operator=str(operator),
            error_type=str(error_type),
            message=str(message),
            traceback=str(trace),
            element=None if element is None else str(element),
            ordinal=ordinal if type(ordinal) is int else None,
        )

    def last_dead_letter_id(self) -> int:
        """The number of the last dead letter ever recorded, of either kind (0: none yet), also when it was
        trimmed since."""
        with self._reading("reading the dead letters' number counter") as db:
            return self._next_letter_id(db) - 1

    def failed_element_counts(self) -> dict[str, int]:
        """The failed elements the store keeps, per subscription (kept in memory: no read of the store)."""
        return {name: count for name, count in self._failed_counts.items() if count > 0}

    def acked_dead_letters(self) -> int:
        """The number of the last dead letter the consumers acknowledged (0: none). Raises
        :class:`~reaqtive.state.DamagedRowError` if the acknowledgement's row is damaged."""
        if self._letters_ack_damage is not None:
            raise self._letters_ack_damage
        return self._letters_acked

    def ack_dead_letters(self, upto_id: int) -> bool:
        """Record, in one transaction, that the consumers have handled every dead letter numbered up to
        ``upto_id`` (both kinds). Returns whether it moved (one at or below the current acknowledgement changes
        nothing; one over a damaged acknowledgement replaces it). The caller checks that ``upto_id`` was given."""
        if self._letters_ack_damage is None and upto_id <= self._letters_acked:
            return False
        with self._transaction(f"acknowledging the dead letters up to #{upto_id}") as db:
            self._exec(
                db,
                "INSERT INTO reaqtive_dead_letter_acks (name, id, crc) VALUES (?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET id = excluded.id, crc = excluded.crc",
                (_ACK_ROW, upto_id, dead_letter_ack_checksum(_ACK_ROW, upto_id)),
            )
        self._letters_acked, self._letters_ack_damage = upto_id, None
        return True

    def trim_dead_letters(self, log_floor_pos: int, delivered: Mapping[str, int] | None = None) -> int:
        """Delete, in one transaction, the acknowledged dead letters nothing needs any more; returns how many.

        ``log_floor_pos``: the log position every query has read the log up to (a checkpoint's floor: the log is
        truncated up to it). A failed element goes once its event is at or below it (a replay never reaches it
        again, so it cannot be recorded anew). A quarantined event stays while the engine may still come across
        it: while its position is above the floor, while the log still holds a row of its stream at or before
        its number (a query catching up through the log skips it by its ``(stream, seq)``, and would notice the
        gap of one that was never logged), and, with ``delivered`` (per stream, the last event the engine
        delivered, as the checkpoint committed it), while it is past that event (after a restart the engine
        expects the log to hold every event after it, and would record the number as missing). Nothing goes
        while the acknowledgement is damaged."""
        upto = self._letters_acked
        if self._letters_ack_damage is not None or upto <= 0:
            return 0
        with self._transaction("trimming the dead letters") as db:
            events = [
                (letter_id,) for letter_id, stream, seq in self._all(db, _TRIMMABLE_EVENTS, (upto, log_floor_pos))
                if delivered is None or (type(seq) is int and seq <= delivered.get(stream, -1))
            ]
            self._many(db, "DELETE FROM reaqtive_dead_letters WHERE id = ?", events)
            elements = self._all(db, "DELETE FROM reaqtive_failed_elements WHERE id <= ? AND pos <= ? "
                                     "RETURNING subscription", (upto, log_floor_pos))
        for (subscription,) in elements:
            name = str(subscription)
            self._failed_counts[name] = max(self._failed_counts.get(name, 0) - 1, 0)
        return len(events) + len(elements)

    def dead_lettered(self) -> set[tuple[str, int]]:
        """``(stream, seq)`` of every quarantined event the store keeps (the engine skips them; trimming keeps
        those it may still come across, see :meth:`trim_dead_letters`)."""
        with self._reading("reading the dead letters") as db:
            return set(self._all(db, "SELECT stream, seq FROM reaqtive_dead_letters"))

    def _value_or_none(self, payload: object, where: str) -> Any:
        if type(payload) is not bytes:
            return None
        try:
            entries = self._codec.decode_entries(payload, where)
        except StateError:
            return None
        return entries[0] if len(entries) == 1 else None

    # -- egress ------------------------------------------------------------------------------------------------

    def write_outputs(self, outputs: Sequence[tuple[str, int, Any]] | OutputChunks, *, encoded: bool = False) -> None:
        """Store ``(subscription, seq, value)`` outputs, ignoring those at or below what the sink already holds
        for their subscription (replayed outputs): the sink of a subscription only grows at its end.
        ``encoded``: the values are payloads the codec already encoded (``bytes``, one value each).
        :class:`OutputChunks` (the engine's buffer) are taken as they are, ``encoded`` or not.

        Consecutive outputs of a subscription share a row (up to :data:`EGRESS_ROW_OUTPUTS`): their payloads
        concatenated, one checksum, one insert — the per-output cost of the sink is an encode and a join (a
        chunk's outputs are joined already)."""
        if not outputs:
            return
        if type(outputs) is OutputChunks:
            by_subscription = _chunks_by_subscription(outputs)
        else:
            by_subscription = self._by_subscription(outputs, encoded)  # type: ignore[arg-type]
        with self._transaction("writing outputs to the durable sink") as db:
            self._insert_outputs(db, by_subscription, self._acks)

    def _by_subscription(
        self, outputs: Iterable[tuple[str, int, Any]], encoded: bool
    ) -> dict[str, list[OutputChunk]]:
        encode = self._codec.encode
        by_subscription: dict[str, list[OutputChunk]] = {}
        for subscription, seq, value in outputs:
            payload = value if encoded else encode(value)
            by_subscription.setdefault(subscription, []).append((subscription, seq, 1, payload))
        return by_subscription

    def _insert_outputs(self, db: Any, by_subscription: dict[str, list[OutputChunk]],
                        acks: dict[str, int]) -> None:
        """Insert the rows of the outputs above what the sink holds (``db``: the engine's connection, or the
        checkpoint store's inside its commit)."""
        rows = []
        for subscription, chunks in by_subscription.items():
            top = self._one(db, "SELECT MAX(seq) FROM reaqtive_egress WHERE subscription = ?",
                            (subscription,))[0]
            # Acknowledged outputs may have been trimmed: a replay must not write them again. (A damaged
            # acknowledgement guards nothing: its subscription fails recovery and does not run.)
            highest = max(top if type(top) is int else -1, acks.get(subscription, -1))
            rows.extend(_chunk_rows(subscription, chunks, highest))
        self._many(db, _INSERT_OUTPUTS, rows)

    def outputs_in_commit(self, transaction: CheckpointTransaction, outputs: Sequence[tuple[str, int, Any]]) -> None:
        """Write ``outputs`` (as :meth:`write_outputs` does) inside ``transaction``'s commit, a transaction of
        this store's checkpoint store: with it, or not at all."""
        if not outputs:
            return
        by_subscription = self._by_subscription(outputs, False)
        acks = dict(self._acks)
        transaction.run_in_commit(lambda db: self._insert_outputs(db, by_subscription, acks))

    def commit_with_outputs(
        self,
        puts: Iterable[tuple[str, str, bytes]] = (),
        deletes: Iterable[tuple[str, str]] = (),
        *,
        forget: Iterable[str] = (),
        outputs: Sequence[tuple[str, int, Any]] = (),
        encoded: bool = False,
    ) -> int:
        """Commit the checkpoint store's ``puts`` and ``deletes`` (``(category, key)``) together with changes of
        the durable sink, in one transaction of the database: every row and the acknowledgement of each
        subscription in ``forget`` deleted, then ``outputs`` (``(subscription, seq, value)``; ``encoded`` as in
        :meth:`write_outputs`) written. Returns the new checkpoint id; on failure nothing changed.

        Creating or deleting a subscription changes both tables: in two transactions, a crash between them
        would leave, say, the outputs of a deleted subscription in the sink for good."""
        forgotten = sorted(set(forget))
        by_subscription = self._by_subscription(outputs, encoded)
        acks = {subscription: seq for subscription, seq in self._acks.items() if subscription not in forgotten}

        def sink(db: Any) -> None:  # on the checkpoint store's connection, inside its commit
            for subscription in forgotten:
                self._exec(db, "DELETE FROM reaqtive_egress WHERE subscription = ?", (subscription,))
                self._exec(db, "DELETE FROM reaqtive_acks WHERE subscription = ?", (subscription,))
            self._insert_outputs(db, by_subscription, acks)

        transaction = self.checkpoints.begin()
        try:
            for category, key, blob in puts:
                transaction.put(category, key, blob)
            for category, key in deletes:
                transaction.delete(category, key)
            if forgotten or by_subscription:
                transaction.run_in_commit(sink)
            checkpoint_id = transaction.commit()
        except BaseException:
            transaction.rollback()
            raise
        for subscription in forgotten:
            self._acks.pop(subscription, None)
            self._damaged_acks.pop(subscription, None)
        return checkpoint_id

    def read_outputs(
        self, subscription: str | None = None, after: int | None = None, upto: int | None = None,
        limit: int | None = None,
    ) -> list[tuple[str, int, Any]]:
        """The durable sink's content (of ``subscription``, or all), ordered by subscription and sequence number;
        ``after``/``upto``: only sequence numbers ``after < seq <= upto``; ``limit``: at most that many outputs.
        For one subscription the rows are found by the primary key: ``after`` seeks to the first row that holds
        a later output, and ``limit`` stops after as many rows (each holds at least one output), so a cursor
        reads what it returns, not the table (see :func:`outputs_query`).

        Each row is verified: a damaged one raises :class:`~reaqtive.state.DamagedRowError` naming
        ``subscription#seq`` (its outputs, ``#first-last``, for a row of several). Only the rows holding the
        outputs asked for are read, so another subscription's damage does not matter.
        """
        if limit is not None and limit <= 0:
            return []
        query, params = outputs_query(subscription, after, upto, limit)
        with self._reading("reading the durable sink") as db:
            rows = self._all(db, query, params)
        decode = self._codec.decode_entries
        low = -1 if after is None else after
        high = upto
        outputs: list[tuple[str, int, Any]] = []
        for sub, last, count, payload, crc in rows:
            sound = type(payload) is bytes and type(count) is int and count >= 1
            if not sound or not verifies(crc, egress_checksum, sub, last, count, payload):
                name = f"{sub}#{last}" if count == 1 or not sound else f"{sub}#{last - count + 1}-{last}"
                raise DamagedRowError(
                    f"{self._where}: output {name} of the durable sink does not match its checksum (damaged "
                    "in the file, or moved to another row's place)",
                    "reaqtive_egress",
                    name,
                )
            first = last - count + 1
            entries = decode(payload, f"egress {sub}#{first}")
            if len(entries) != count:
                raise StateFormatError(f"{self._where}: egress {sub}#{first}: {len(entries)} values in a row of "
                                       f"{count}")
            for seq, entry in enumerate(entries, first):
                if seq > low and (high is None or seq <= high):
                    outputs.append((sub, seq, entry))
            if limit is not None and len(outputs) >= limit:
                return outputs[:limit]
        return outputs

    def last_output_seq(self, subscription: str) -> int:
        """The highest sequence number of ``subscription`` in the durable sink (``-1``: none there); one seek
        of the primary key."""
        with self._reading(f"reading the last output of {subscription!r}") as db:
            (top,) = self._one(db, "SELECT MAX(seq) FROM reaqtive_egress WHERE subscription = ?",
                               (subscription,))
        return top if type(top) is int else -1

    def max_output_seqs(self) -> dict[str, int]:
        """The highest sequence number in the durable sink, per subscription that has outputs there. Read from
        the primary key's index (a row is keyed by its last output; one seek per subscription); the rows
        themselves are not verified."""
        with self._reading("reading the durable sink's sequence numbers") as db:
            return dict(self._all(db, _MAX_OUTPUT_SEQS))

    def output_extents(self) -> dict[str, tuple[int, int, int]]:
        """Per subscription with outputs in the durable sink: ``(count, lowest seq, highest seq)``. One pass over
        the table (a gap means rows were deleted or lost)."""
        with self._reading("reading the durable sink's sequence numbers") as db:
            rows = fetchall_lenient(
                db, "SELECT subscription, SUM(count), MIN(seq - count + 1), MAX(seq), MIN(count) "
                    "FROM reaqtive_egress GROUP BY subscription"
            )
        extents: dict[str, tuple[int, int, int]] = {}
        for sub, count, low, high, smallest in rows:
            if not all(type(value) is int for value in (count, low, high, smallest)) or smallest < 1:
                raise StoreCorruptError(f"{self._where}: the durable sink's rows of {sub!r} cannot be counted "
                                        "(the file is damaged)")
            extents[sub] = (count, low, high)
        return extents

    def output_runs(self, subscription: str, after: int = -1) -> list[tuple[int, int]]:
        """The outputs of ``subscription`` the durable sink holds above ``after``, as the ``(first, last)`` sequence
        numbers of each row (a row holding later outputs too is whole), in order: where its holes are. The rows
        are not verified; one whose numbers cannot be read is damage (:class:`~reaqtive.state.StoreCorruptError`)."""
        with self._reading(f"reading the durable sink's rows of {subscription!r}") as db:
            rows = self._all(db, "SELECT seq, count FROM reaqtive_egress WHERE subscription = ? AND seq > ? "
                                 "ORDER BY seq", (subscription, after))
        runs = []
        for last, count in rows:
            if type(last) is not int or type(count) is not int or count < 1:
                raise StoreCorruptError(f"{self._where}: a durable sink row of {subscription!r} has no readable "
                                        f"sequence numbers (seq {last!r}, count {count!r}): the store is damaged")
            runs.append((last - count + 1, last))
        return runs

    def delete_outputs(self, subscription: str, *, upto: int | None = None) -> None:
        """Forget the outputs of a deleted subscription and its acknowledgement (or, with ``upto``, the rows
        whose outputs are all at or below that sequence number: an observer function received them; a row
        holding later outputs too stays whole, and its delivered outputs are skipped by the reader's cursor)."""
        with self._transaction(f"deleting the outputs of {subscription!r}") as db:
            if upto is None:
                self._exec(db, "DELETE FROM reaqtive_egress WHERE subscription = ?", (subscription,))
                self._exec(db, "DELETE FROM reaqtive_acks WHERE subscription = ?", (subscription,))
            else:
                self._exec(db, "DELETE FROM reaqtive_egress WHERE subscription = ? AND seq <= ?", (subscription, upto))
        if upto is None:
            self._acks.pop(subscription, None)
            self._damaged_acks.pop(subscription, None)

    def drop_provisional_outputs(self, subscription: str, committed: int) -> int:
        """Delete the rows of ``subscription`` whose outputs are all numbered ``committed`` or later: written
        after the checkpoint whose output counter is ``committed`` (a flush between checkpoints, or at close).
        With the wall clock a replay computes them again, possibly cut otherwise, and the sink must hold the
        replay's version, not both. A row holding committed outputs too stays whole. Returns how many outputs
        were deleted."""
        where = "subscription = ? AND seq - count + 1 >= ?"
        with self._transaction(f"dropping the provisional outputs of {subscription!r}") as db:
            (dropped,) = self._one(db, f"SELECT COALESCE(SUM(count), 0) FROM reaqtive_egress WHERE {where}",
                                   (subscription, committed))
            if dropped:
                self._exec(db, f"DELETE FROM reaqtive_egress WHERE {where}", (subscription, committed))
        return int(dropped)

    # -- acknowledgements --------------------------------------------------------------------------------------

    def _load_acks(self) -> None:
        """Read and verify every acknowledgement (at open; the store is their only writer afterwards). A damaged
        row is remembered, not fatal: only its subscription's cursor and sink fail (:meth:`acked` raises)."""
        with self._reading("reading the acknowledgements") as db:
            rows = self._all(db, "SELECT subscription, seq, crc FROM reaqtive_acks")
        for subscription, seq, crc in rows:
            name = subscription if type(subscription) is str else str(subscription)
            if type(seq) is int and seq >= 0 and verifies(crc, ack_checksum, subscription, seq):
                self._acks[name] = seq
            else:
                self._damaged_acks[name] = DamagedRowError(
                    f"{self._where}: the acknowledgement of {name!r} does not match its checksum (damaged in the "
                    "file, or moved to another row's place); its outputs are kept",
                    "reaqtive_acks",
                    name,
                )
        with self._reading("reading the dead letters' acknowledgement") as db:
            letters = self._all(db, "SELECT name, id, crc FROM reaqtive_dead_letter_acks")
            counts = self._all(db, "SELECT subscription, COUNT(*) FROM reaqtive_failed_elements GROUP BY subscription")
        for name, letter_id, crc in letters:
            if type(letter_id) is int and letter_id >= 0 and verifies(crc, dead_letter_ack_checksum, name, letter_id):
                if name == _ACK_ROW:
                    self._letters_acked = letter_id
            else:
                self._letters_ack_damage = DamagedRowError(
                    f"{self._where}: the dead letters' acknowledgement does not match its checksum (damaged in "
                    "the file, or moved to another row's place); every dead letter is kept until one is "
                    "acknowledged again",
                    "reaqtive_dead_letter_acks",
                    str(name),
                )
        self._failed_counts = {str(name): int(count) for name, count in counts}

    def acked(self, subscription: str) -> int:
        """The last output of ``subscription`` its consumers acknowledged (``-1``: none). Raises
        :class:`~reaqtive.state.DamagedRowError` if its acknowledgement row is damaged."""
        damage = self._damaged_acks.get(subscription)
        if damage is not None:
            raise damage
        return self._acks.get(subscription, -1)

    def acks(self) -> dict[str, int]:
        """Every sound acknowledgement, by subscription."""
        return dict(self._acks)

    def acknowledged(self) -> set[str]:
        """Every subscription that has an acknowledgement row, sound or damaged."""
        return set(self._acks) | set(self._damaged_acks)

    def keep_outputs(self, subscription: str) -> None:
        """Leave the durable sink's rows of ``subscription`` as they are from now on: trimming no longer deletes
        them (its acknowledgement row stays stored). For rows that belong to no subscription, which recovery
        keeps under the policy KEEP, every byte of them."""
        self._acks.pop(subscription, None)

    def ack(self, subscription: str, seq: int) -> bool:
        """Record, in one transaction, that the consumers of ``subscription`` have every output up to ``seq``.
        Returns whether it moved (one at or below the current acknowledgement changes nothing). The caller checks
        that ``seq`` is an output that exists."""
        if seq <= self.acked(subscription):
            return False
        with self._transaction(f"acknowledging the outputs of {subscription!r} up to #{seq}") as db:
            self._exec(
                db,
                "INSERT INTO reaqtive_acks (subscription, seq, crc) VALUES (?, ?, ?) "
                "ON CONFLICT (subscription) DO UPDATE SET seq = excluded.seq, crc = excluded.crc",
                (subscription, seq, ack_checksum(subscription, seq)),
            )
        self._acks[subscription] = seq
        return True

    def trim_outputs(self) -> int:
        """Delete, in one transaction, the durable sink's rows whose outputs are all acknowledged (a row that
        also holds a later output stays whole; readers skip what is acknowledged). Returns how many outputs were
        deleted. Nothing above an acknowledgement is touched, and a subscription whose acknowledgement is damaged
        keeps everything."""
        if not self._acks:
            return 0
        deleted = 0
        with self._transaction("trimming the durable sink") as db:
            for subscription, seq in sorted(self._acks.items()):
                for (count,) in self._all(
                    db, "DELETE FROM reaqtive_egress WHERE subscription = ? AND seq <= ? RETURNING count",
                    (subscription, seq),
                ):
                    deleted += count if type(count) is int and count > 0 else 1
        return deleted

    # -- lifetime ----------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Write what the engine accepted but has not written yet (group commit), close both connections and
        release the store. A failure to write is raised after the store is closed."""
        try:
            self._write_pending(closing=True)
        finally:
            self._pending = None
            try:
                with self._lock:
                    self._db.close()
                self.checkpoints.close()
            finally:
                if self._writer is not None:
                    self._writer.release()


_INSERT_INGRESS: Final = (
    "INSERT INTO reaqtive_ingress (pos, stream, seq, count, times, payload, crc) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_SET_HEAD: Final = (
    "INSERT INTO reaqtive_stream_heads (stream, next_seq) VALUES (?, ?) "
    "ON CONFLICT (stream) DO UPDATE SET next_seq = excluded.next_seq"
)
_SET_POSITION: Final = (
    f"INSERT INTO reaqtive_meta (key, value) VALUES ('{_POSITION_KEY}', ?) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)
# The rows that start after ?1, and the one before that may reach past it, up to ?2.
_FOLLOWING: Final = "SELECT MIN(pos) FROM reaqtive_ingress WHERE pos > ?"
_READ_RUNS: Final = (
    "SELECT pos, stream, seq, count, times, payload, crc FROM reaqtive_ingress "
    "WHERE pos >= COALESCE((SELECT MAX(pos) FROM reaqtive_ingress WHERE pos <= ?), ?) AND pos <= ? ORDER BY pos"
)
_READ_POSITION: Final = "SELECT value FROM reaqtive_meta WHERE key = ?"
# The position counter, and the last row's pos and count (each a seek of an index).
_NEXT_POSITION: Final = (
    "SELECT (SELECT value FROM reaqtive_meta WHERE key = ?), "
    "(SELECT pos FROM reaqtive_ingress ORDER BY pos DESC LIMIT 1), "
    "(SELECT count FROM reaqtive_ingress ORDER BY pos DESC LIMIT 1)"
)
# How many events a row stands for, in SQL: a count no writer writes (damage) stands for one.
_EVENTS_OF_ROW: Final = (
    f"CASE WHEN typeof(count) = 'integer' AND count BETWEEN 1 AND {ROW_EVENTS} THEN count ELSE 1 END"
)
_INGRESS_COUNTS: Final = f"SELECT stream, SUM({_EVENTS_OF_ROW}) FROM reaqtive_ingress GROUP BY stream"
_ROW_BYTES_SQL: Final = "COALESCE(length(payload), 0) + COALESCE(length(times), 0)"
_INGRESS_EXTENTS: Final = (
    f"SELECT stream, SUM({_EVENTS_OF_ROW}), SUM({_ROW_BYTES_SQL}), MIN(seq), MIN(pos), "
    f"MAX(pos + {_EVENTS_OF_ROW} - 1) FROM reaqtive_ingress GROUP BY stream"
)
_OLDEST_ROWS: Final = (
    f"SELECT seq, count, {_ROW_BYTES_SQL}, times FROM reaqtive_ingress WHERE stream = ? AND seq + count - 1 > ? "
    "ORDER BY seq LIMIT ?"
)
_MAX_INTEGER: Final = 2**63 - 1

_INSERT_DEAD_LETTER: Final = (
    "INSERT OR IGNORE INTO reaqtive_dead_letters (stream, seq, pos, time, payload, reason, at, crc, id, id_crc) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_SET_COUNTER: Final = (
    "INSERT INTO reaqtive_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)
# The dead letters' counter, and the last number of each table (each a seek of its primary key).
_NEXT_LETTER_ID: Final = (
    "SELECT (SELECT value FROM reaqtive_meta WHERE key = ?), (SELECT MAX(id) FROM reaqtive_dead_letters), "
    "(SELECT MAX(id) FROM reaqtive_failed_elements)"
)
_FIND_FAILED: Final = (
    "SELECT 1 FROM reaqtive_failed_elements WHERE subscription = ? AND unit = ? AND path = ? AND pos = ? "
    "AND ordinal = ?"
)
_INSERT_FAILED: Final = (
    "INSERT OR IGNORE INTO reaqtive_failed_elements (id, subscription, unit, path, pos, ordinal, operator, "
    "error_type, message, traceback, element, at, payload, crc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# Acknowledged event letters at or below the floor whose stream's log holds no row at or before them (see
# EngineStore.trim_dead_letters); the NOT EXISTS is a seek of the log's (stream, seq) key.
_TRIMMABLE_EVENTS: Final = (
    "SELECT id, stream, seq FROM reaqtive_dead_letters AS d WHERE id <= ? AND (pos IS NULL OR pos <= ?) "
    "AND NOT EXISTS (SELECT 1 FROM reaqtive_ingress AS i WHERE i.stream = d.stream AND i.seq <= d.seq)"
)
_EVENT_LETTER_COLUMNS: Final = "id, stream, seq, pos, time, payload, reason, at, crc, id_crc"
_ELEMENT_LETTER_COLUMNS: Final = (
    "id, subscription, unit, path, pos, ordinal, operator, error_type, message, traceback, element, at, payload, crc"
)
_INSERT_OUTPUTS: Final = (
    "INSERT OR IGNORE INTO reaqtive_egress (subscription, seq, count, payload, crc) VALUES (?, ?, ?, ?, ?)"
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


def _letters_query(
    columns: str, table: str, name_column: str, name: str | None, *, after: int | None, limit: int | None
) -> tuple[str, list[object]]:
    """The SQL (and its parameters) of one table of dead letters, in the order of their numbers."""
    conditions: list[str] = []
    params: list[object] = []
    for condition, value in ((f"{name_column} = ?", name), ("id > ?", after)):
        if value is not None:
            conditions.append(condition)
            params.append(value)
    query = f"SELECT {columns} FROM {table}"
    if conditions:
        query += " WHERE " + " AND ".join(conditions)
    query += " ORDER BY id"
    if limit is not None:
        query += " LIMIT ?"
        params.append(limit)
    return query, params


def _letter_id(letter: DeadLetter) -> int:
    return letter.id


def _element_columns(row: ElementLetter) -> tuple[object, ...]:
    """The columns of a failed element as stored, checked and cleaned: ``(subscription, unit, path, pos, ordinal,
    operator, error_type, message, traceback, element, payload)``, text that both databases can hold (no NUL, no
    lone surrogate), the message, traceback and repr cut to their lengths. ``TypeError`` for a wrong type."""
    if not isinstance(row, ElementLetter):
        raise TypeError(f"record_failed_elements(): rows must be ElementLetter, got {type(row).__name__}")
    texts = (row.subscription, row.unit, row.path, row.operator, row.error_type, row.message, row.traceback)
    if not all(type(text) is str for text in texts) or not (row.element is None or type(row.element) is str):
        raise TypeError(f"record_failed_elements(): the names and texts of {row!r:.200} must be str")
    for number in (row.pos, row.ordinal):
        if type(number) is not int:
            raise TypeError(f"record_failed_elements(): pos and ordinal must be int, got {number!r}")
    if row.pos < -1 or row.ordinal < 0:
        raise ValueError(f"record_failed_elements(): pos must be >= -1 and ordinal >= 0, got {row.pos}, {row.ordinal}")
    if not (row.payload is None or type(row.payload) is bytes):
        raise TypeError(f"record_failed_elements(): payload must be bytes or None, got {type(row.payload).__name__}")
    trace = row.traceback[-TRACEBACK_CHARS:]
    element = None if row.element is None else _clean(row.element[:ELEMENT_REPR_CHARS])
    return (_clean(row.subscription), _clean(row.unit), _clean(row.path), row.pos, row.ordinal,
            _clean(row.operator), _clean(row.error_type), _clean(row.message[:MESSAGE_CHARS]), _clean(trace),
            element, row.payload)


def _clean(text: str) -> str:
    """``text`` as both databases store it: a lone surrogate (which UTF-8 cannot hold) and NUL (which PostgreSQL's
    text refuses) become backslash escapes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\\x00") if "\x00" in text else text


def outputs_query(
    subscription: str | None, after: int | None, upto: int | None, limit: int | None
) -> tuple[str, list[object]]:
    """The SQL (and its parameters) that :meth:`EngineStore.read_outputs` runs. A row is keyed by its last
    output: it holds outputs after ``after`` if its key is, and outputs up to ``upto`` if its first one is. For
    one subscription, ``subscription = ? AND seq > ?`` is a range of the primary key."""
    conditions: list[str] = []
    params: list[object] = []
    for condition, value in (("subscription = ?", subscription), ("seq > ?", after), ("seq - count < ?", upto)):
        if value is not None:
            conditions.append(condition)
            params.append(value)
    query = "SELECT subscription, seq, count, payload, crc FROM reaqtive_egress"
    if conditions:
        query += " WHERE " + " AND ".join(conditions)
    query += " ORDER BY subscription, seq"
    if limit is not None:
        query += " LIMIT ?"  # rows: each holds at least one output after ``after``
        params.append(limit)
    return query, params


EGRESS_ROW_OUTPUTS: Final = 1024
"""The most outputs of one subscription in one row of the durable sink."""


def _first(entry: tuple[int, bytes]) -> int:
    return entry[0]


def _chunks_by_subscription(chunks: OutputChunks) -> dict[str, list[OutputChunk]]:
    by_subscription: dict[str, list[OutputChunk]] = {}
    for chunk in chunks:
        own = by_subscription.get(chunk[0])
        if own is None:
            by_subscription[chunk[0]] = [chunk]
        else:
            own.append(chunk)
    return by_subscription


def _chunk_rows(subscription: str, chunks: list[OutputChunk], highest: int) -> list[tuple[Any, ...]]:
    """Rows of the durable sink for a subscription's chunks of outputs (see :class:`OutputChunks`) above
    ``highest`` (what the sink holds). Chunks in order, each
    after the one before and above ``highest`` (the engine's usual case) are joined, up to a row's
    :data:`EGRESS_ROW_OUTPUTS` outputs each, without cutting their entries apart; otherwise (a replay, outputs
    buffered again after a restart of the subscription, a chunk larger than a row) they are cut into single
    outputs, sorted and cut into rows as :func:`_egress_rows` does."""
    limit = EGRESS_ROW_OUTPUTS
    rows: list[tuple[Any, ...]] = []
    parts: list[bytes] = []
    held = 0
    last = highest
    for _, first, count, entries in chunks:
        if first <= last or count > limit:
            return _egress_rows(subscription, _single_outputs(chunks), highest)
        if parts and (first != last + 1 or held + count > limit):
            rows.append(_joined_row(subscription, last, held, parts))
            parts = []
            held = 0
        parts.append(entries)
        held += count
        last = first + count - 1
    if parts:
        rows.append(_joined_row(subscription, last, held, parts))
    return rows


def _joined_row(subscription: str, last: int, count: int, parts: list[bytes]) -> tuple[Any, ...]:
    payload = parts[0] if len(parts) == 1 else b"".join(parts)
    return (subscription, last, count, payload, egress_checksum(subscription, last, count, payload))


def _single_outputs(chunks: list[OutputChunk]) -> list[tuple[int, bytes]]:
    """Each output of ``chunks`` as ``(seq, entry)``, sorted by ``seq`` (stable: of two copies the first stays
    first)."""
    entries: list[tuple[int, bytes]] = []
    for chunk in chunks:
        entries.extend((seq, entry) for _, seq, entry in chunk_outputs(chunk))
    entries.sort(key=_first)
    return entries


def chunk_outputs(chunk: OutputChunk) -> list[tuple[str, int, bytes]]:
    """The outputs of a chunk (see :data:`OutputChunk`) one by one: ``(subscription, seq, entry)``."""
    subscription, first, count, payload = chunk
    if count == 1 and not is_tuple_run(payload):
        return [(subscription, first, payload)]
    pieces = _split_entries(payload)
    if pieces is not None:
        pieces = resolve_tuple_run_pieces(pieces)  # a run of tuples: each its own tuple entry again
    if pieces is None or len(pieces) != count:
        raise ValueError(f"{subscription}: a chunk of {count} outputs from #{first} does not hold {count} entries")
    return [(subscription, seq, entry) for seq, entry in zip(range(first, first + count), pieces, strict=True)]


def _egress_rows(subscription: str, entries: list[tuple[int, bytes]], highest: int) -> list[tuple[Any, ...]]:
    """Rows of the durable sink for a subscription's outputs sorted by sequence number: those above ``highest``
    (what the sink holds), cut where the numbers are not consecutive or a row is full."""
    rows: list[tuple[Any, ...]] = []
    run: list[bytes] = []
    last = highest
    for seq, payload in entries:
        if seq <= last:
            continue  # at or below what the sink holds (a replay), or a duplicate in this batch
        if run and (seq != last + 1 or len(run) == EGRESS_ROW_OUTPUTS):
            rows.append(_egress_row(subscription, last, run))
            run = []
        run.append(payload)
        last = seq
    if run:
        rows.append(_egress_row(subscription, last, run))
    return rows


def _egress_row(subscription: str, last: int, payloads: list[bytes]) -> tuple[Any, ...]:
    payload = b"".join(payloads)
    count = len(payloads)
    return (subscription, last, count, payload, egress_checksum(subscription, last, count, payload))


def _events_of_row(count: object) -> int:
    """How many events a row stands for: its count, or one if the count is not one a writer writes (damage)."""
    return count if type(count) is int and 1 <= count <= ROW_EVENTS else 1


class _Rows:
    """The ingress rows of one append transaction, built run by run: runs of one stream with contiguous numbers
    share a row, up to :data:`ROW_EVENTS` events (fewer for large values: about ``_ROW_BYTES`` of payload). A
    :class:`PackedEntries` chunk goes into a row whole: a row that cannot take it is closed first (rows hold
    fewer events then, never more)."""

    __slots__ = ("_held", "_micros", "_parts", "_seq", "_stream", "pos", "rows")

    def __init__(self, pos: int) -> None:
        self.pos = pos  # the next row's position
        self.rows: list[tuple[int, str, int, int, bytes, bytes, int]] = []
        self._stream: str | None = None
        self._seq = 0
        self._held = 0  # events in the row being built
        self._parts: list[bytes] = []  # their payload: entries, or chunks of them
        self._micros: list[int] = []

    def add(self, stream: str, seq: int, payloads: Sequence[bytes], micros: list[int]) -> None:
        """Events ``seq``, ``seq + 1``, ... of ``stream``, after those added before."""
        count = len(payloads)
        if isinstance(payloads, PackedEntries):
            size = sum(len(data) for _, data in payloads.chunks)
            cap = max(1, min(ROW_EVENTS, _ROW_BYTES * count // size)) if size else ROW_EVENTS
            if all(n <= cap for n, _ in payloads.chunks):
                self._add_chunks(stream, seq, payloads.chunks, micros, cap)
                return
            payloads = payloads.pieces()  # large values: chunks are cut to rows of about _ROW_BYTES
        else:
            size = sum(map(len, payloads))
            cap = max(1, min(ROW_EVENTS, _ROW_BYTES * count // size)) if size else ROW_EVENTS
        start = 0
        while start < count:
            held = self._held
            if self._stream != stream or self._seq + held != seq + start or held >= cap:
                self.close()
                self._stream, self._seq, held = stream, seq + start, 0
            end = min(count, start + cap - held)
            self._parts += payloads[start:end]
            self._micros += micros[start:end]
            self._held = held + end - start
            start = end

    def _add_chunks(self, stream: str, seq: int, chunks: list[tuple[int, bytes]], micros: list[int],
                    cap: int) -> None:
        start = 0
        for count, data in chunks:
            held = self._held
            if self._stream != stream or self._seq + held != seq + start or held + count > cap:
                self.close()
                self._stream, self._seq, held = stream, seq + start, 0
            self._parts.append(data)
            self._micros += micros[start:start + count]
            self._held = held + count
            start += count

    def close(self) -> None:
        """End the row being built."""
        stream, count = self._stream, self._held
        if stream is None or not count:
            return
        pos, seq = self.pos, self._seq
        times, payload = pack_times(self._micros), b"".join(self._parts)
        self.rows.append((pos, stream, seq, count, times, payload,
                          ingress_checksum(pos, stream, seq, count, times, payload)))
        self.pos += count
        self._stream, self._held, self._parts, self._micros = None, 0, [], []


def _reaches_past(rows: list[tuple[Any, ...]], after_pos: int) -> bool:
    """Whether rows read from ``after_pos`` on hold an event after it (the first may end at or before it)."""
    if not rows:
        return False
    pos, count = rows[-1][0], rows[-1][3]
    return bool(pos > after_pos or pos + _events_of_row(count) - 1 > after_pos)


def _damaged_run(  # noqa: PLR0917  (a row's columns, and where it stands)
    pos: int, stream: object, seq: object, count: object, times: object, payload: object, damage: str,
    following: int, after_pos: int,
) -> IngressRun | None:
    """The run a damaged row stands for (after ``after_pos``; ``None``: nothing left): its events as the row
    says, but never more than a writer writes in a row nor than fit before ``following`` (the next row, or the
    position after the last one given), so that damage never claims positions of events that exist elsewhere or
    that are yet to come."""
    span = max(1, min(_events_of_row(count), following - pos))
    skip = after_pos + 1 - pos if pos <= after_pos else 0
    if skip >= span:
        return None
    try:
        micros = _times(times, count)[skip:span]
    except ValueError:
        micros = []
    first = seq if type(seq) is int else -1
    return IngressRun(
        pos=pos + skip,
        stream=stream if type(stream) is str else str(stream),
        seq=first + skip if first >= 0 else first - skip,
        count=span - skip,
        ticks=RunTimes.of_list(micros),
        values=[None] * (span - skip),
        damage=damage,
        payload=payload,
        times=times,
        offset=skip,
    )


def _split_entries(payload: object) -> list[bytes] | None:
    """The bytes of each msgpack entry of ``payload`` (without decoding them), or ``None`` if it does not split
    cleanly (not bytes, malformed, or bytes left over)."""
    if type(payload) is not bytes:
        return None
    unpacker = msgpack.Unpacker(None, max_buffer_size=max(len(payload), 1))
    unpacker.feed(payload)
    bounds = [0]
    try:
        while bounds[-1] < len(payload):
            unpacker.skip()
            bounds.append(unpacker.tell())
    except Exception:  # malformed (damaged) bytes: nothing to split
        return None
    return [payload[start:end] for start, end in pairwise(bounds)]


def _counter(row: tuple[object, ...] | None, where: str, what: str) -> int:
    """A counter's value from its row (0: no row); one that is not an integer is damage, named."""
    value = row[0] if row else None
    if value is None:
        return 0
    if type(value) is not int:
        raise StoreCorruptError(f"{where}: {what} is damaged ({value!r})")
    return value


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


# -- layouts --------------------------------------------------------------------------------------------------------

_INGRESS_1: Final = frozenset({"pos", "stream", "seq", "time", "payload"})
_INGRESS_3: Final = frozenset({"pos", "stream", "seq", "count", "times", "payload", "crc"})
_EGRESS_1: Final = frozenset({"subscription", "seq", "payload"})
_EGRESS_3: Final = frozenset({"subscription", "seq", "count", "payload", "crc"})
_HEADS: Final = frozenset({"stream", "next_seq"})
_LETTERS: Final = frozenset({"stream", "seq", "pos", "time", "payload", "reason", "at", "crc"})
_ACK_COLUMNS: Final = frozenset({"subscription", "seq", "crc"})
_FAILED_COLUMNS: Final = frozenset({"id", "subscription", "unit", "path", "pos", "ordinal", "operator",
                                    "error_type", "message", "traceback", "element", "at", "payload", "crc"})
_LETTER_ACK_COLUMNS: Final = frozenset({"name", "id", "crc"})
_LayoutTables: TypeAlias = dict[str, tuple[frozenset[str], frozenset[str]] | None]
# Per engine layout, per table: the columns it must have (what its readers and its migration use) and those it
# cannot have (a later layout's), or None for a table it does not have. (Layouts 2 and 3 leave the tables layout 5
# added unchecked: tests make files of those layouts out of this release's, and their migration takes them as
# they come; a layout-5 file claiming either is refused by its other tables.)
_LAYOUTS: Final[dict[int, _LayoutTables]] = {
    1: {"reaqtive_ingress": (_INGRESS_1, frozenset({"crc", "count", "times"})),
        "reaqtive_egress": (_EGRESS_1, frozenset({"crc", "count"})),
        "reaqtive_stream_heads": (_HEADS, frozenset()), "reaqtive_dead_letters": None, "reaqtive_acks": None},
    2: {"reaqtive_ingress": (_INGRESS_1 | {"crc"}, frozenset({"count", "times"})),
        "reaqtive_egress": (_EGRESS_1 | {"crc"}, frozenset()),
        "reaqtive_stream_heads": (_HEADS, frozenset()), "reaqtive_dead_letters": (_LETTERS, frozenset()),
        "reaqtive_acks": None},
    3: {"reaqtive_ingress": (_INGRESS_3, frozenset({"time"})), "reaqtive_egress": (_EGRESS_3, frozenset()),
        "reaqtive_stream_heads": (_HEADS, frozenset()), "reaqtive_dead_letters": (_LETTERS, frozenset()),
        "reaqtive_acks": None},
    4: {"reaqtive_ingress": (_INGRESS_3, frozenset({"time"})), "reaqtive_egress": (_EGRESS_3, frozenset()),
        "reaqtive_stream_heads": (_HEADS, frozenset()),
        "reaqtive_dead_letters": (_LETTERS, frozenset({"id", "id_crc"})),
        "reaqtive_acks": (_ACK_COLUMNS, frozenset()), "reaqtive_failed_elements": None,
        "reaqtive_dead_letter_acks": None},
    5: {"reaqtive_ingress": (_INGRESS_3, frozenset({"time"})), "reaqtive_egress": (_EGRESS_3, frozenset()),
        "reaqtive_stream_heads": (_HEADS, frozenset()),
        "reaqtive_dead_letters": (_LETTERS | {"id", "id_crc"}, frozenset()),
        "reaqtive_acks": (_ACK_COLUMNS, frozenset()), "reaqtive_failed_elements": (_FAILED_COLUMNS, frozenset()),
        "reaqtive_dead_letter_acks": (_LETTER_ACK_COLUMNS, frozenset())},
}


def check_layout(where: str, version: int, columns: dict[str, set[str]]) -> None:
    """Refuse engine tables (``columns``: each ``reaqtive_`` table's column names) that are not those of the
    layout ``version`` the metadata claims (one this engine knows): :class:`StoreLayoutError` naming the claimed
    layout and the first difference. Opening or migrating such a store would fail halfway, or worse, work on
    tables it misreads."""
    for table, expected in _LAYOUTS[version].items():
        present = columns.get(table)
        problem = None
        if expected is None:
            if present is not None:
                problem = f"it has the table {table}, which layout {version} does not have"
        elif present is None:
            problem = f"the table {table} is missing"
        else:
            required, forbidden = expected
            if required - present:
                problem = f"{table} lacks the column(s) {', '.join(sorted(required - present))}"
            elif forbidden & present:
                problem = (f"{table} has the column(s) {', '.join(sorted(forbidden & present))}, which layout "
                           f"{version} does not have")
        if problem is not None:
            raise StoreLayoutError(
                f"{where}: reaqtive_meta says the engine tables are of layout {version}, but {problem}: the metadata "
                "does not match the tables (damaged, or changed by hand); the store was left untouched"
            )


def _sqlite_columns(db: sqlite3.Connection) -> dict[str, set[str]]:
    columns: dict[str, set[str]] = {}
    for table, column in db.execute(
        "SELECT m.name, c.name FROM sqlite_master AS m, pragma_table_info(m.name) AS c "
        "WHERE m.type = 'table' AND m.name LIKE 'reaqtive!_%' ESCAPE '!'"
    ):
        columns.setdefault(table, set()).add(column)
    return columns


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
    db.execute(_DEAD_LETTERS_4)
    db.execute("UPDATE reaqtive_meta SET value = 2 WHERE key = 'engine_schema_version'")


def _migrate_from_2(db: sqlite3.Connection) -> None:
    """Engine layout 2 → 3, inside the opening transaction: the ingress log of a row per event becomes a log of
    runs, each old row a run of one event at its old position. A row that verified gets the checksum of its new
    layout; one that did not (or holds what no writer writes) gets -1, which never verifies, and keeps its
    columns as they were: its damage stays visible, and the engine quarantines it with its bytes. The position
    counter continues from ``AUTOINCREMENT``'s, so no position is ever given twice."""
    # (AUTOINCREMENT's counter: its table exists once a table with AUTOINCREMENT was created, as layout 2's was)
    sequence = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_sequence'").fetchone()
    counter = sequence and db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'reaqtive_ingress'").fetchone()
    top = db.execute("SELECT MAX(pos) FROM reaqtive_ingress").fetchone()
    last = max(value for value in (0, counter and counter[0], top and top[0]) if type(value) is int)
    db.create_function("reaqtive_run_times", 1, _migrated_times, deterministic=True)
    db.create_function("reaqtive_run_crc", 6, _migrated_run_crc, deterministic=True)
    db.execute("ALTER TABLE reaqtive_ingress RENAME TO reaqtive_ingress_2")
    db.execute(_INGRESS)
    db.execute(
        "INSERT INTO reaqtive_ingress (pos, stream, seq, count, times, payload, crc) "
        "SELECT pos, stream, seq, 1, reaqtive_run_times(time), payload, "
        f"reaqtive_run_crc(pos, {_AS_TEXT.format('stream')}, {_AS_INT.format('seq')}, {_AS_INT.format('time')}, "
        f"{_AS_BLOB.format('payload')}, crc) FROM reaqtive_ingress_2"
    )
    db.execute("DROP TABLE reaqtive_ingress_2")
    db.execute(_SET_POSITION, (last,))
    _migrate_egress_from_2(db)
    db.execute("UPDATE reaqtive_meta SET value = 3 WHERE key = 'engine_schema_version'")


def _migrate_from_3(db: sqlite3.Connection) -> None:
    """Engine layout 3 → 4, inside the opening transaction: the acknowledgement table, empty (nothing was
    acknowledged before it existed, so nothing may be trimmed)."""
    db.execute(_ACKS)
    db.execute("UPDATE reaqtive_meta SET value = 4 WHERE key = 'engine_schema_version'")


def _migrate_from_4(db: sqlite3.Connection) -> None:
    """Engine layout 4 → 5, inside the opening transaction: every dead letter gets a number, in the order
    ``(pos, stream, seq)`` (never-logged events, whose ``pos`` is NULL, last), and an ``id_crc`` binding it to its
    event; each row keeps its columns and its ``crc`` as they were (a row that did not verify still does not). The
    counter of numbers goes on from the last one. The failed elements' table and the dead letters'
    acknowledgement are created (empty: nothing was acknowledged before)."""
    db.create_function("reaqtive_letter_id_crc", 4, _migrated_letter_id_crc, deterministic=True)
    db.execute("ALTER TABLE reaqtive_dead_letters RENAME TO reaqtive_dead_letters_4")
    db.execute(_DEAD_LETTERS)
    db.execute(
        "INSERT INTO reaqtive_dead_letters (id, stream, seq, pos, time, payload, reason, at, crc, id_crc) "
        "SELECT n, stream, seq, pos, time, payload, reason, at, crc, reaqtive_letter_id_crc(n, "
        f"{_AS_TEXT.format('stream')}, CASE WHEN typeof(stream) = 'text' THEN NULL ELSE stream END, "
        f"CASE WHEN typeof(seq) = 'text' THEN CAST(seq AS BLOB) ELSE seq END) FROM ("
        "SELECT ROW_NUMBER() OVER (ORDER BY pos IS NULL, pos, stream, seq) AS n, stream, seq, pos, time, payload, "
        "reason, at, crc FROM reaqtive_dead_letters_4)"
    )
    (count,) = db.execute("SELECT COUNT(*) FROM reaqtive_dead_letters").fetchone()
    db.execute("DROP TABLE reaqtive_dead_letters_4")
    db.execute(_FAILED_ELEMENTS)
    db.execute(_DEAD_LETTER_ACKS)
    if count:
        db.execute(_SET_COUNTER, (_LETTER_ID_KEY, count))
    db.execute("UPDATE reaqtive_meta SET value = 5 WHERE key = 'engine_schema_version'")


def _migrated_letter_id_crc(letter_id: int, text: bytes | None, other: object, seq: object) -> int:
    """The ``id_crc`` of a migrated dead letter: its number and its key as a reader reads them back (text that
    is not UTF-8 with surrogate escapes), so that it verifies whatever the rest of the row holds."""
    try:
        stream = text.decode("utf-8", "surrogateescape") if text is not None else other
        return dead_letter_id_checksum(letter_id, stream, seq)  # type: ignore[arg-type]
    except Exception:  # a function SQLite calls must not raise: that would fail the migration
        return -1


def _migrate_egress_from_2(db: sqlite3.Connection) -> None:
    """The durable sink of a row per output becomes rows of runs, each old row a run of one. A row that verified
    gets the checksum of its new layout; one that did not gets -1, which never verifies (its damage stays
    visible)."""
    db.create_function("reaqtive_egress_crc_3", 4, _migrated_egress_crc_3, deterministic=True)
    db.execute("ALTER TABLE reaqtive_egress RENAME TO reaqtive_egress_2")
    db.execute(_EGRESS)
    db.execute(
        "INSERT INTO reaqtive_egress (subscription, seq, count, payload, crc) "
        f"SELECT subscription, seq, 1, payload, reaqtive_egress_crc_3({_AS_TEXT.format('subscription')}, "
        f"{_AS_INT.format('seq')}, {_AS_BLOB.format('payload')}, crc) FROM reaqtive_egress_2"
    )
    db.execute("DROP TABLE reaqtive_egress_2")


def _migrated_egress_crc_3(subscription: bytes | None, seq: int | None, payload: bytes | None, crc: object) -> int:
    try:
        if subscription is not None and seq is not None and payload is not None:
            text = subscription.decode("utf-8")
            if crc == _egress_checksum_2(text, seq, payload):
                return egress_checksum(text, seq, 1, payload)
    except Exception:  # a function SQLite calls must not raise: that would fail the migration
        pass
    return -1


# A column handed to a migration function only if it has the type a writer gives it (text as bytes, so that invalid
# UTF-8 cannot fail the migration): NULL otherwise, and NULL gets a checksum that never verifies.
_AS_TEXT: Final = "CASE WHEN typeof({0}) = 'text' THEN CAST({0} AS BLOB) END"
_AS_INT: Final = "CASE WHEN typeof({0}) = 'integer' THEN {0} END"
_AS_BLOB: Final = "CASE WHEN typeof({0}) = 'blob' THEN {0} END"


def _ingress_checksum_2(pos: int, stream: str, seq: int, time: int, payload: bytes) -> int:
    """The ``crc`` of an ingress row of layout 2 (one event: ``time`` in microseconds since the epoch)."""
    return columns_checksum(pos, stream, seq, time, payload)


def _migrated_ingress_crc(pos: int, stream: bytes | None, seq: int | None, time: int | None,
                          payload: bytes | None) -> int:
    try:
        if stream is not None and seq is not None and time is not None and payload is not None:
            return _ingress_checksum_2(pos, stream.decode("utf-8"), seq, time, payload)
    except Exception:  # a function SQLite calls must not raise: that would fail the migration
        pass
    return -1


def _migrated_times(time: int | str | float | bytes | None) -> int | str | float | bytes:
    """The ``times`` of a run of one event at ``time``; a time no writer writes is kept as it is (its row does
    not verify)."""
    if type(time) is int:
        try:
            return pack_times([time])
        except Exception:  # beyond 64 bits: no writer wrote it
            pass
    return time if time is not None else b""


def _migrated_run_crc(  # noqa: PLR0917  (the old row's columns)
    pos: int, stream: bytes | None, seq: int | None, time: int | None, payload: bytes | None, crc: object
) -> int:
    try:
        if stream is not None and seq is not None and time is not None and payload is not None:
            name = stream.decode("utf-8")
            if crc == _ingress_checksum_2(pos, name, seq, time, payload):  # the row verified in layout 2
                return ingress_checksum(pos, name, seq, 1, pack_times([time]), payload)
    except Exception:  # a function SQLite calls must not raise: that would fail the migration
        pass
    return -1


def _migrated_egress_crc(subscription: bytes | None, seq: int | None, payload: bytes | None) -> int:
    try:
        if subscription is not None and seq is not None and payload is not None:
            return _egress_checksum_2(subscription.decode("utf-8"), seq, payload)
    except Exception:  # a function SQLite calls must not raise: that would fail the migration
        pass
    return -1


# -- in memory ------------------------------------------------------------------------------------------------------


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
