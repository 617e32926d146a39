"""Backfill: a new subscription that starts in the retained log, processes its history, then joins live input.

``create_subscription(uri, query, start=...)`` with ``start="earliest"``, a log position or an aware
``datetime`` creates the subscription **behind the engine**, at the position that start resolves to: it is bound
on a timeline of its own (its clock at the start), its readers held off their streams, and the engine's
catch-up of queries behind it (:mod:`reaqtive.engine.behind`, ``Scheduling.catch_up``) hands it the log after
that position in slices, its clock following the events' times and its timers in between, until it reaches the
engine's position and rejoins, exactly as a resumed paused query does: no gap, no duplicate. There is no second
catch-up loop: a backfill *is* a query created behind.

This module resolves a start to a log position and a clock, with the checks (what the log retains for the
streams the query reads), and says where a backfill stands after a restart. It changes nothing itself.

* ``"earliest"``: the earliest position from which every stream the query reads is whole in the log: for a
  stream whose oldest events were truncated, just before its oldest retained event.
* a log position ``p`` (``Engine.log_position`` at some moment, or one ``streams()`` shows): as a subscription
  created when the engine stood at ``p``: it reads the events after ``p``.

  From a position (``"earliest"`` included) its clock starts at the time of the event at that position when the
  log retains it (the engine's clock when it stood there, with times in order), else at the time of its first
  event after it.
* an aware ``datetime`` ``t``: as a subscription created at ``t``: it reads the events from the first one (in
  log order, of the streams it reads) whose time is at or after ``t``, and its clock starts at ``t``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from reaqtive.engine.database import EngineStore, from_micros, to_micros
from reaqtive.engine.engine_errors import StartBeyondLogError, StartError, StartNotRetainedError
from reaqtive.engine.records import Behind

__all__ = ["EARLIEST", "BackfillStart", "behind_of", "check_start", "earliest_start", "resolve_start", "started_clock"]

EARLIEST: Final = "earliest"
"""``create_subscription(..., start=EARLIEST)``: from the earliest event the log retains for the query's streams."""

_SCAN: Final = 4096  # events read per step while looking for a start time


@dataclass(frozen=True)
class BackfillStart:
    """Where a backfill starts: it reads the events after log position ``pos``, its clock at ``clock``
    (microseconds since the epoch)."""

    pos: int
    clock: int

    def to_record(self) -> dict[str, Any]:
        """The ``backfill`` entry of the subscription's record."""
        return {"pos": self.pos, "clock": self.clock}


def check_start(start: object, where: str) -> None:
    """The checks of ``start`` that need no store: its form, and an aware time."""
    if start is None or (start == EARLIEST and isinstance(start, str)):
        return
    if isinstance(start, bool) or not isinstance(start, (int, datetime)):
        raise StartError(f"{where}: start must be None (now), 'earliest', a log position (an int) or a "
                         f"timezone-aware datetime, got {type(start).__name__} {start!r:.60}")
    if isinstance(start, int) and start < -1:
        raise StartError(f"{where}: start={start} is not a log position (positions are -1, before the first "
                         "event, and up)")
    if isinstance(start, datetime) and start.utcoffset() is None:
        raise StartError(f"{where}: start={start} is a naive datetime; give its time zone (e.g. "
                         "start.replace(tzinfo=UTC))")


def earliest_start(
    streams: Iterable[str], extents: Mapping[str, tuple[int, int, int, int, int]], heads: Mapping[str, int],
    delivered_at: Mapping[str, int],
) -> tuple[int, str | None]:
    """The earliest position from which every stream in ``streams`` is whole in the log, and the stream that
    bounds it (``None``: nothing was truncated of any of them, the whole log from the start)."""
    earliest, bound = -1, None
    for stream in sorted(streams):
        extent = extents.get(stream)
        if extent is not None:
            first_seq, first_pos = extent[2], extent[3]
            at = -1 if first_seq == 0 else first_pos - 1
        elif heads.get(stream, 0) == 0:
            at = -1  # never appended to
        else:
            at = delivered_at.get(stream, -1)  # every event of it delivered and truncated: its last one's position
        if at > earliest:
            earliest, bound = at, stream
    return earliest, bound


def resolve_start(
    start: object, *, where: str, store: EngineStore, streams: list[str], heads: Mapping[str, int],
    delivered_at: Mapping[str, int], cursor: int, now_micros: int,
) -> BackfillStart | None:
    """Resolve ``start`` (see the module) to where the backfill begins; ``None``: it starts now (no history to
    process). Raises :class:`StartNotRetainedError` for a start before what the log retains for ``streams``,
    :class:`StartBeyondLogError` for one past what the engine delivered (``cursor``) or after its clock."""
    check_start(start, where)
    if start is None:
        return None
    extents = store.ingress_extents()
    earliest, bound = earliest_start(streams, extents, heads, delivered_at)
    if isinstance(start, str):
        pos = earliest
    elif isinstance(start, int):
        if start > cursor:
            raise StartBeyondLogError(f"{where}: start={start} is past the log position the engine delivered up to "
                                      f"({cursor}): process() first, or start now (start=None)")
        if start < earliest:
            raise _not_retained(where, f"start={start}", bound, earliest, extents)
        pos = start
    else:
        assert isinstance(start, datetime)
        micros = to_micros(start)
        if micros > now_micros:
            raise StartBeyondLogError(f"{where}: start={start.isoformat()} is after the engine's clock "
                                      f"({from_micros(now_micros).isoformat()}): there is no history there")
        found = _first_at_or_after(store, set(streams), earliest, cursor, micros)
        if bound is not None and found is not None and found[2] and found[1] > micros:
            raise _not_retained(where, f"start={start.isoformat()}", bound, earliest, extents, first_time=found[1])
        pos = cursor if found is None else found[0] - 1
        return None if pos >= cursor else BackfillStart(pos, micros)
    if pos >= cursor:
        return None
    return BackfillStart(pos, min(_clock_at(store, set(streams), pos, cursor, now_micros), now_micros))


def _not_retained(
    where: str, what: str, stream: str | None, earliest: int, extents: Mapping[str, tuple[int, int, int, int, int]],
    *, first_time: int | None = None,
) -> StartNotRetainedError:
    extent = extents.get(stream or "")
    if extent is not None:
        held = f"it retains #{extent[2]:,} on, from log position {extent[3]}"
        if first_time is not None:
            held += f" (time {from_micros(first_time).isoformat()})"
    else:
        held = "it retains none of its events"
    return StartNotRetainedError(
        f"{where}: {what} is before what the log retains of stream {stream!r}: {held}; the earliest start is log "
        f"position {earliest} (start='earliest'); create the stream with retain= to keep more",
        stream=stream or "", earliest=earliest)


def _events_after(store: EngineStore, streams: set[str], after: int, cursor: int) -> Iterable[tuple[int, int]]:
    """``(pos, time)`` of each retained event of ``streams`` after ``after`` up to ``cursor``, in log order."""
    pos = after
    while pos < cursor:
        runs = store.read_ingress_runs(pos, _SCAN)
        if not runs:
            return
        for run in runs:
            pos = max(pos, run.pos + run.count - 1)
            if run.stream not in streams or run.damage is not None or run.micros is None:
                continue
            for index, micros in enumerate(run.micros):
                if run.pos + index > cursor:
                    return
                yield run.pos + index, micros


def _first_at_or_after(
    store: EngineStore, streams: set[str], after: int, cursor: int, micros: int,
) -> tuple[int, int, bool] | None:
    """The first event of ``streams`` after ``after`` whose time is at or after ``micros``: ``(pos, time,
    whether it is the first event there at all)``; ``None``: none."""
    first = True
    for pos, time in _events_after(store, streams, after, cursor):
        if time >= micros:
            return pos, time, first
        first = False
    return None


def _clock_at(store: EngineStore, streams: set[str], pos: int, cursor: int, now_micros: int) -> int:
    """Where a backfill's clock starts when its start is a position: the engine's clock when it stood there, as
    the log tells it (the time of the event at ``pos``, if the log retains it, of whichever stream); else the
    time of the query's first event after it."""
    runs = store.read_ingress_runs(pos - 1, 1) if pos >= 0 else []
    if runs and runs[0].pos == pos and runs[0].micros:
        return runs[0].micros[0]
    for _, time in _events_after(store, streams, pos, cursor):
        return time
    return now_micros


def behind_of(record: Mapping[str, Any]) -> Behind | None:
    """Where a backfilled subscription stands when no checkpoint since its creation says (it had not joined the
    engine yet): at its start, on its start clock. ``None`` for any other subscription, and once it joined."""
    entry = record.get("backfill")
    if entry is None or entry.get("joined"):
        return None
    return Behind(entry["pos"], entry["clock"], entry["pos"])


def started_clock(record: Mapping[str, Any]) -> int:
    """The clock a subscription started at (its record's ``clock``; a backfill's is its start's, earlier): no
    time its operators saved can be before it."""
    entry = record.get("backfill")
    return int(record["clock"]) if entry is None else min(int(record["clock"]), int(entry["clock"]))
