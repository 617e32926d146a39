"""The due-time queue: work ordered by (due time, priority, arrival), built on :class:`sortedcontainers.SortedList`.

A lower priority value runs first, and among equal due times and priorities the earlier arrival runs first
(FIFO). Entries can be removed in O(log n), which is how disposing a scheduler cancels its pending timers.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Generic, TypeVar

from sortedcontainers import SortedList

__all__ = ["DueQueue", "TickQueue"]

D = TypeVar("D")
I = TypeVar("I")  # noqa: E741  (the item type)

Entry = tuple[Any, int, int, Any]
"""``(due, priority, arrival, item)``: arrivals are unique, so items themselves are never compared."""


class DueQueue(Generic[D, I]):
    """Items waiting for a due time ``D`` (a datetime, or integer ticks in virtual time). Not thread-safe.

    >>> queue: DueQueue[int, str] = DueQueue()
    >>> _ = queue.add(5, 1, "b"); _ = queue.add(5, 0, "a"); _ = queue.add(3, 2, "first")
    >>> queue.pop_due(5)
    ['first', 'a', 'b']
    """

    __slots__ = ("_arrivals", "_entries")

    def __init__(self) -> None:
        self._entries: Any = SortedList()
        self._arrivals = itertools.count()

    def next_arrival(self) -> int:
        """A fresh arrival number (for callers that keep an item's place in line across moves)."""
        return next(self._arrivals)

    def restart_arrivals(self, start: int) -> None:
        """Draw the next arrival numbers from ``start`` on (a caller that raises the counter past numbers given
        back to it; ``start`` must be past every number drawn so far, which keeps arrivals unique)."""
        self._arrivals = itertools.count(start)

    def add(self, due: D, priority: int, item: I, arrival: int | None = None) -> Entry:
        """Queue ``item``; returns the entry to pass to :meth:`remove`. ``arrival`` keeps an earlier place."""
        entry: Entry = (due, priority, next(self._arrivals) if arrival is None else arrival, item)
        self._entries.add(entry)
        return entry

    def remove(self, entry: Entry) -> None:
        """Remove an entry returned by :meth:`add`; an entry already gone is ignored."""
        self._entries.discard(entry)

    def first(self) -> Entry | None:
        """The entry that comes out next, or ``None``."""
        entries = self._entries
        return entries[0] if entries else None

    def first_due(self) -> D | None:
        """The earliest due time, or ``None`` when empty."""
        entries = self._entries
        return entries[0][0] if entries else None

    def pop(self) -> Entry:
        """Remove and return the first entry; raises :class:`IndexError` when empty."""
        return self._entries.pop(0)  # type: ignore[no-any-return]

    def pop_due(self, now: D) -> list[I]:
        """Remove and return, in order, every item due at or before ``now``."""
        entries = self._entries
        due: list[I] = []
        while entries and entries[0][0] <= now:
            due.append(entries.pop(0)[3])
        return due

    def clear(self) -> None:
        """Drop everything."""
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __repr__(self) -> str:
        return f"<DueQueue {len(self._entries)} entries>"


class TickQueue(DueQueue[int, I]):
    """A :class:`DueQueue` on integer ticks that keeps its earliest due tick in :attr:`next_due` (``NO_DUE``
    when empty), so that a hot loop can ask "is anything due by tick t?" with one comparison, no call.

    A binary heap rather than a sorted list: the virtual scheduler adds and pops an entry per timer that fires
    (a keyed window stage at 100,000 keys does so about once per event), and a heap does each in a few C calls.
    :meth:`remove` is lazy: the entry stays in the heap, no longer live, and is dropped when it comes to the top
    (an entry is live while ``_live`` maps its arrival to that very tuple; ``_dead`` holds the removed ones
    still in the heap, so that an item added again with the same place in line never meets its dead twin, which
    would compare equal up to the items, and items are not comparable)."""

    NO_DUE: int = 1 << 63

    __slots__ = ("_dead", "_heap", "_live", "next_due")

    def __init__(self) -> None:
        super().__init__()
        self._heap: list[Entry] = []
        self._live: dict[int, Entry] = {}
        self._dead: dict[int, Entry] = {}
        self.next_due = self.NO_DUE

    def _top(self) -> Entry | None:
        """The first live entry (dead ones on top dropped), and ``next_due`` brought up to date."""
        heap, live = self._heap, self._live
        while heap:
            entry = heap[0]
            if live.get(entry[2]) is entry:
                self.next_due = entry[0]
                return entry
            heapq.heappop(heap)
            if self._dead.get(entry[2]) is entry:
                del self._dead[entry[2]]
        self.next_due = self.NO_DUE
        return None

    def add(self, due: int, priority: int, item: I, arrival: int | None = None) -> Entry:
        if arrival is None:
            arrival = next(self._arrivals)
        entry: Entry = (due, priority, arrival, item)
        if arrival in self._dead:  # (rare: a task moved back in line) its dead twin leaves the heap first
            self._purge(self._dead.pop(arrival))
        self._live[arrival] = entry
        heapq.heappush(self._heap, entry)
        if due < self.next_due:  # noqa: PLR1730  (a comparison, not a call: the virtual scheduler's hot path)
            self.next_due = due
        return entry

    def _purge(self, entry: Entry) -> None:
        self._heap = [other for other in self._heap if other is not entry]
        heapq.heapify(self._heap)

    def remove(self, entry: Entry) -> None:
        live = self._live
        if live.get(entry[2]) is entry:
            del live[entry[2]]
            self._dead[entry[2]] = entry
            if entry[0] == self.next_due:
                self._top()

    def first(self) -> Entry | None:
        return self._top()

    def first_due(self) -> int | None:
        entry = self._top()
        return None if entry is None else entry[0]

    def pop(self) -> Entry:
        heap, live = self._heap, self._live
        entry = heap[0] if heap else None
        if entry is None or live.get(entry[2]) is not entry:  # (the top is live but after a rare purge)
            entry = self._top()
            if entry is None:
                raise IndexError("pop from an empty TickQueue")
        heapq.heappop(heap)
        del live[entry[2]]
        if heap:
            top = heap[0]
            if live.get(top[2]) is top:  # the common case, without a call: the next top is live
                self.next_due = top[0]
                return entry
        self._top()
        return entry

    def pop_due(self, now: int) -> list[I]:
        due: list[I] = []
        while self.next_due <= now:
            due.append(self.pop()[3])
        return due

    def clear(self) -> None:
        self._heap.clear()
        self._live.clear()
        self._dead.clear()
        self.next_due = self.NO_DUE

    def __len__(self) -> int:
        return len(self._live)

    def __bool__(self) -> bool:
        return bool(self._live)

    def __repr__(self) -> str:
        return f"<TickQueue {len(self._live)} entries>"
