"""The dead letters of the engine's delivery, a part that owns its state: the events taken out of delivery for good
(quarantined: damaged, misplaced, dated out of bounds, or missing from the log) and the elements a query's error
policy skipped, each written to the store at the end of the batch that met it.

The engine makes one :class:`Quarantine` on its store and asks it instead of sharing its fields: whether an event
is among the dead letters (:meth:`Quarantine.holds`, :meth:`Quarantine.any_in` for a run), to take an event out
(:meth:`Quarantine.take_out`), to record events missing from the log (:meth:`Quarantine.note_missing`) or a
skipped element (:meth:`Quarantine.skipped`), and to write what the batch found (:meth:`Quarantine.flush`).
Everything runs under the engine's lock, except :meth:`Quarantine.add_appended`, called by an append for the
events dated too far ahead (a set's ``update`` under the engine's lock too: the delivery must know these numbers
are taken, not missing).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sortedcontainers import SortedList

from reaqtive.engine.database import ElementLetter, EngineStore, IngressEvent, element_payload, from_micros
from reaqtive.engine.failures import ElementFailure, element_repr

__all__ = ["Quarantine"]

_MISSING = "missing from the log: its row was deleted or lost"


class Quarantine:
    """The dead letters of the engine's delivery (see the module)."""

    __slots__ = ("_elements", "_events", "_index", "_index_size", "_keys", "_log", "_ordinals", "_store")

    def __init__(self, store: EngineStore, log: logging.Logger | logging.LoggerAdapter[logging.Logger]) -> None:
        self._store = store
        self._log = log
        self._keys: set[tuple[str, int]] = store.dead_lettered()  # (stream, seq) of every event taken out
        self._events: list[tuple[IngressEvent, str]] = []  # taken out in this batch, with why
        self._elements: list[ElementLetter] = []  # skipped in this batch
        # Per subscription, the event its skipped elements came from last, and how many of them at each operator.
        self._ordinals: dict[str, tuple[int, dict[tuple[str, str, str], int]]] = {}
        self._index: dict[str, SortedList] = {}  # per stream, its dead sequence numbers (see any_in)
        self._index_size = 0

    # -- questions -------------------------------------------------------------------------------------------------

    def __bool__(self) -> bool:
        """Whether any event was ever taken out (the common case: none, and every check is skipped)."""
        return bool(self._keys)

    def holds(self, stream: str, seq: int) -> bool:
        """Whether event ``seq`` of ``stream`` is among the dead letters."""
        return (stream, seq) in self._keys

    def any_in(self, stream: str, first: int, last: int) -> bool:
        """Whether an event from ``first`` to ``last`` of ``stream`` is among the dead letters (an index per
        stream, rebuilt when the set grew)."""
        if self._index_size != len(self._keys):
            index: dict[str, SortedList] = {}
            for name, number in self._keys:
                index.setdefault(name, SortedList()).add(number)
            self._index, self._index_size = index, len(self._keys)
        numbers = self._index.get(stream)
        if not numbers:
            return False
        at: int = numbers.bisect_left(first)
        return at < len(numbers) and bool(numbers[at] <= last)

    def per_stream(self, delivered: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
        """Per stream, how many of its events are dead letters, and how many of those lie past ``delivered``
        (its last delivered sequence number): those are no backlog."""
        dead: dict[str, int] = {}
        ahead: dict[str, int] = {}
        for stream, seq in list(self._keys):
            dead[stream] = dead.get(stream, 0) + 1
            if seq > delivered.get(stream, -1):
                ahead[stream] = ahead.get(stream, 0) + 1
        return dead, ahead

    # -- taking out ------------------------------------------------------------------------------------------------

    def add_appended(self, stream: str, first: int, reasons: Sequence[str | None]) -> None:
        """An append wrote the events of ``stream`` from ``first`` on; those with a reason went to the dead letters
        at once (dated too far ahead): their numbers are taken, not missing."""
        self._keys.update((stream, first + i) for i, reason in enumerate(reasons) if reason is not None)

    def take_out(self, event: IngressEvent, reason: str) -> None:
        """Take ``event`` out of delivery for good, with its reason (a dead letter, written at the batch's end)."""
        self._keys.add((event.stream, event.seq))
        self._events.append((event, reason))
        self._log.warning("event %s#%d quarantined: %s", event.stream, event.seq, reason,
                          extra={"reaqtive_event": "quarantine", "stream": event.stream, "seq": event.seq,
                                 "reason": reason})

    def note_missing(self, stream: str, first: int, seq: int) -> None:
        """Events ``first`` to ``seq - 1`` of ``stream`` are neither in the log nor among the dead letters: rows
        deleted or lost from the file. Nothing can bring them back; each is recorded as a dead letter without
        content, so that the loss is visible (``dead_letters()``, ``reaqtive inspect``) rather than silent."""
        missing = [number for number in range(first, seq) if (stream, number) not in self._keys]
        for number in missing:
            self._keys.add((stream, number))
            gap = IngressEvent(-1, stream, number, from_micros(0), None, damage="missing", payload=None, micros=None)
            self._events.append((gap, _MISSING))
        if missing:
            self._log.error("stream %r: %d event(s) missing from the log before #%d", stream, len(missing), seq,
                            extra={"reaqtive_event": "events_missing", "stream": stream, "seq": missing[0],
                                   "events": len(missing)})

    def skipped(self, failure: ElementFailure) -> None:
        """A user function raised and the subscription's policy skipped the element: it is kept as a dead letter
        (written with the batch's quarantine; recorded once, a replay finds it there)."""
        # Several elements of one event may fail at one operator: the n-th of them, counted by element, keeps its
        # own letter (a replay numbers them the same way, so each is recorded once).
        # Counted per event: a replay (after a crash, a restart, a catch-up) meets the event again and counts anew.
        shown = element_repr(failure.element)
        position, counts = self._ordinals.get(failure.subscription, (None, {}))
        if position != failure.position:
            counts = {}
            self._ordinals[failure.subscription] = (failure.position, counts)
        key = (failure.unit, failure.path, shown)
        ordinal = counts[key] = counts.get(key, -1) + 1
        self._elements.append(ElementLetter(
            failure.subscription, failure.unit, failure.path, failure.position, failure.operator, failure.error_type,
            failure.message, failure.traceback, element_payload(failure.element, self._store.codec), shown,
            ordinal))
        self._log.warning("subscription %r skipped an element: %s", failure.subscription, failure.describe(),
                          extra={"reaqtive_event": "element_skipped", "subscription": failure.subscription,
                                 "error_type": failure.error_type, "pos": failure.position, "unit": failure.unit,
                                 "operator": failure.operator, "path": failure.path})

    def restart_count(self, subscription: str) -> None:
        """``subscription`` goes on from a checkpoint: its skipped elements are counted anew."""
        self._ordinals.pop(subscription, None)

    def flush(self) -> None:
        """Write the dead letters of the batch: the events taken out and the elements skipped."""
        if self._events:
            events, self._events = self._events, []
            self._store.quarantine(events)
        if self._elements:
            elements, self._elements = self._elements, []
            self._store.record_failed_elements(elements)
