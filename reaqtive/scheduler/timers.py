"""The due-time queue: work ordered by (due time, priority, arrival), built on :class:`sortedcontainers.SortedList`.

A lower priority value runs first, and among equal due times and priorities the earlier arrival runs first
(FIFO). Entries can be removed in O(log n), which is how disposing a scheduler cancels its pending timers.
"""

from __future__ import annotations

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
    when empty), so that a hot loop can ask "is anything due by tick t?" with one comparison, no call."""

    NO_DUE: int = 1 << 63

    __slots__ = ("next_due",)

    def __init__(self) -> None:
        super().__init__()
        self.next_due = self.NO_DUE

    def _refresh(self) -> None:
        entries = self._entries
        self.next_due = entries[0][0] if entries else self.NO_DUE

    def add(self, due: int, priority: int, item: I, arrival: int | None = None) -> Entry:
        entry = super().add(due, priority, item, arrival)
        self.next_due = min(self.next_due, due)
        return entry

    def remove(self, entry: Entry) -> None:
        super().remove(entry)
        self._refresh()

    def pop(self) -> Entry:
        entry = super().pop()
        self._refresh()
        return entry

    def pop_due(self, now: int) -> list[I]:
        due = super().pop_due(now)
        self._refresh()
        return due

    def clear(self) -> None:
        super().clear()
        self.next_due = self.NO_DUE
