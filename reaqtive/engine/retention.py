"""Log retention per stream: how much of a stream's input log the engine keeps beyond what its readers need.

By default a checkpoint truncates the ingress log below the lowest position any query still needs (its *floor*,
see ``docs/engine.md``, "Durable ingress"). A stream created with ``retain=`` keeps more: the newest events that
are younger than an age, the newest ``events`` events, or the newest rows up to ``bytes`` stored bytes. Retention
is a second bound on truncation, never a first: a checkpoint deletes a row of a stream only when both the floor
and the retention let it go, so retention never takes away what a reader or a query behind the engine needs. What
is retained can be read again by a backfill (``create_subscription(..., start=...)``, :mod:`reaqtive.engine.backfill`).

This module owns the :class:`Retention` record (checked, stored in the stream's record, shown) and
:func:`retention_cut`, which finds in the store what a retention lets go; it never deletes anything itself (the
checkpoint truncates, :mod:`reaqtive.engine.checkpointing`).

How each form is measured:

* **age**: an event's age is the engine's clock (the event clock, or the wall clock) less the event's time, as the
  log keeps it; a stream's events are let go from the oldest on while they are older than ``age`` (the first one
  young enough keeps itself and everything after it, whatever their times).
* **events**: the newest ``events`` events of the stream (by sequence number) are kept.
* **bytes**: a row's stored bytes are its payload and its times as written (``length()`` of the two columns,
  which both stores read from the row's header without reading the blobs); the oldest rows go while the rows
  after them still hold at least ``bytes`` bytes. Indexes and the store's own overhead are not counted: the
  sizing table of ``docs/deploying.md`` gives the factor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, Protocol

from reaqtive.engine.database import unpack_times
from reaqtive.engine.engine_errors import MalformedRecordError, RetentionError

__all__ = ["Retention", "StreamExtent", "check_retention", "retention_cut", "retention_from_record"]

_MICROSECOND: Final = timedelta(microseconds=1)
_SCAN_ROWS: Final = 256  # rows read per query while looking for where a retention starts


@dataclass(frozen=True)
class Retention:
    """How much of a stream's log to keep beyond what its readers need (``create_stream(uri, retain=...)``).

    ``age``: the events younger than this (by the engine's clock against each event's time); ``events``: the
    newest this many events; ``bytes``: the newest rows up to this many stored bytes (payload and times). Give one
    or several: an event is kept while any of them keeps it. ``retain=timedelta(days=7)`` is
    ``Retention(age=timedelta(days=7))``.

    Example: ``engine.create_stream("orders", retain=Retention(events=1_000_000))``
    """

    age: timedelta | None = None
    events: int | None = None
    bytes: int | None = None

    def __post_init__(self) -> None:
        if self.age is None and self.events is None and self.bytes is None:
            raise RetentionError("a Retention needs age=, events= or bytes= (for the default, what the stream's "
                                 "readers need, pass retain=None)")
        if self.age is not None and (not isinstance(self.age, timedelta) or self.age <= timedelta(0)):
            raise RetentionError(f"Retention(age=...) must be a positive timedelta, got {self.age!r}")
        for name in ("events", "bytes"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise RetentionError(f"Retention({name}=...) must be a whole number > 0, got {value!r}")

    def to_record(self) -> dict[str, int]:
        """The form the stream's record stores (the age in microseconds)."""
        record: dict[str, int] = {}
        if self.age is not None:
            record["age"] = self.age // _MICROSECOND
        if self.events is not None:
            record["events"] = self.events
        if self.bytes is not None:
            record["bytes"] = self.bytes
        return record

    def describe(self) -> str:
        """Short text for people: ``"7 days or 1,000 events"``."""
        parts = []
        if self.age is not None:
            parts.append(_age_text(self.age))
        if self.events is not None:
            parts.append(f"{self.events:,} events")
        if self.bytes is not None:
            parts.append(f"{self.bytes:,} bytes")
        return " or ".join(parts)


def _age_text(age: timedelta) -> str:
    """``7 days``, ``36 hours``, ``90 seconds``: the largest whole unit; else the timedelta's own text."""
    for unit, name in ((timedelta(days=1), "day"), (timedelta(hours=1), "hour"), (timedelta(minutes=1), "minute"),
                       (timedelta(seconds=1), "second")):
        if age % unit == timedelta(0):
            count = age // unit
            return f"{count:,} {name}{'s' if count != 1 else ''}"
    return str(age)


@dataclass(frozen=True)
class StreamExtent:
    """What the log holds of one stream: its events and stored bytes (a row partly covered counts whole), the
    sequence number and log position of its oldest event, and the log position of its newest."""

    events: int
    bytes: int
    first_seq: int
    first_pos: int
    last_pos: int


def check_retention(retain: object, where: str) -> Retention | None:
    """``retain`` as given to ``create_stream``: ``None``, a :class:`Retention` or a ``timedelta`` (an age)."""
    if retain is None or isinstance(retain, Retention):
        return retain
    if isinstance(retain, timedelta):
        if retain <= timedelta(0):
            raise RetentionError(f"{where}: retain must be a positive age, got {retain!r}")
        return Retention(age=retain)
    raise RetentionError(f"{where}: retain must be None (what the stream's readers need), a timedelta (an age) or "
                         f"a Retention(age=..., events=..., bytes=...), got {type(retain).__name__} {retain!r:.60}")


def retention_from_record(uri: str, record: Mapping[str, Any]) -> Retention | None:
    """The retention a stream's record stores (``None``: none; records of older stores have none)."""
    stored = record.get("retain")
    if stored is None:
        return None
    try:
        if not isinstance(stored, dict) or not set(stored) <= {"age", "events", "bytes"}:
            raise RetentionError(f"unknown form {stored!r:.60}")
        age = stored.get("age")
        if age is not None and (not isinstance(age, int) or isinstance(age, bool)):
            raise RetentionError(f"age {age!r:.40} is not microseconds")
        return Retention(None if age is None else age * _MICROSECOND, stored.get("events"), stored.get("bytes"))
    except RetentionError as error:
        raise MalformedRecordError(f"the record of stream {uri!r} has a retention that is not valid: {error}") \
            from error


class RetainedRows(Protocol):
    """What :func:`retention_cut` reads of the store."""

    def oldest_ingress_rows(self, stream: str, after_seq: int, limit: int) -> list[tuple[Any, ...]]: ...


def retention_cut(
    store: RetainedRows, stream: str, retention: Retention, *, head: int, extent: StreamExtent | None,
    now_micros: int | None,
) -> int:
    """The sequence number of the last event of ``stream`` that ``retention`` lets go (-1: none). ``head`` is the
    stream's next sequence number, ``extent`` what the log holds of it, ``now_micros`` the engine's clock (an age
    keeps everything while the clock has not started). An event is kept while any form keeps it."""
    if extent is None:
        return head - 1  # nothing retained: nothing to keep
    cuts: list[int] = []
    if retention.bytes is not None:
        cuts.append(extent.first_seq - 1 + _rows_to_let_go(store, stream, extent, retention.bytes))
    if retention.events is not None:
        cuts.append(head - retention.events - 1)
    if retention.age is not None:
        if now_micros is None:
            cuts.append(-1)
        else:
            cutoff = now_micros - retention.age // _MICROSECOND
            cuts.append(_older_than(store, stream, extent.first_seq - 1, cutoff))
    return max(-1, min(cuts))


def _rows_to_let_go(store: RetainedRows, stream: str, extent: StreamExtent, limit: int) -> int:
    """How many events, from the oldest, go while the rows after them still hold at least ``limit`` bytes."""
    remaining = extent.bytes
    let_go = 0
    after = extent.first_seq - 1
    while remaining > limit:
        rows = store.oldest_ingress_rows(stream, after, _SCAN_ROWS)
        if not rows:
            break
        for seq, count, size, _times in rows:
            if type(seq) is not int or type(count) is not int or count < 1 or remaining - (size or 0) < limit:
                return let_go
            remaining -= size or 0
            let_go = seq + count - extent.first_seq
            after = seq + count - 1
    return let_go


def _older_than(store: RetainedRows, stream: str, after: int, cutoff: int) -> int:
    """The last sequence number of the oldest events of ``stream`` (after ``after``) whose times are all before
    ``cutoff`` (microseconds): where the first event young enough stands, less one."""
    cut = after
    while True:
        rows = store.oldest_ingress_rows(stream, after, _SCAN_ROWS)
        if not rows:
            return cut
        for seq, count, _size, times in rows:
            if type(seq) is not int or type(count) is not int or count < 1:
                return cut
            try:
                micros = unpack_times(times, count)
            except (ValueError, TypeError):
                return cut  # a damaged row keeps itself and what follows
            for index, time in enumerate(micros):
                if time >= cutoff:
                    return seq + index - 1
            cut = after = seq + count - 1


def time_of(store: RetainedRows, stream: str, seq: int) -> int | None:
    """The time (microseconds) of event ``seq`` of ``stream`` if the log retains it (``None``: not, or damaged)."""
    rows = store.oldest_ingress_rows(stream, seq - 1, 1)
    if not rows:
        return None
    first, count, _size, times = rows[0]
    try:
        micros = unpack_times(times, count)
    except (ValueError, TypeError):
        return None
    index = seq - first
    return micros[index] if 0 <= index < len(micros) else None
