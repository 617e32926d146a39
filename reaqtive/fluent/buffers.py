"""Buffers: ``buffer`` by count, count and skip, duration, duration and shift, duration or count."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Generic, TypeVar, overload

from reaqtive.fluent._base import derive, require_positive_duration, require_positive_int

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["BufferMixin"]

T = TypeVar("T")


class BufferMixin(Generic[T]):
    """The buffers family of fluent methods (see :mod:`reaqtive.fluent`)."""

    __slots__ = ()

    @overload
    def buffer(self, count: int, skip: int | None = None, /) -> Query[list[T]]: ...

    @overload
    def buffer(self, duration: timedelta, shift: timedelta | None = None, /) -> Query[list[T]]: ...

    @overload
    def buffer(self, duration: timedelta, count: int, /) -> Query[list[T]]: ...

    def buffer(self, first: int | timedelta, second: int | timedelta | None = None, /) -> Query[list[T]]:
        """Collect elements into lists, by count, by time, or by whichever of the two comes first.

        * ``buffer(count)``: consecutive lists of ``count`` elements; at completion the last, shorter list
          (if not empty).
        * ``buffer(count, skip)``: a list opens every ``skip`` elements and closes at ``count`` elements: they
          overlap when ``skip < count`` and leave out elements when ``skip > count``. At completion the open
          lists are emitted.
        * ``buffer(duration)``: a list every ``duration``, from the subscription on, **empty lists included**
          (as in Rx); at completion the current list, even if empty.
        * ``buffer(duration, shift)``: a list opens every ``shift`` and closes ``duration`` after it opened;
          when a close and an open fall on the same instant, the close comes first.
        * ``buffer(duration, count)``: a list closes when it holds ``count`` elements or ``duration`` after it
          opened, whichever comes first; a close by count restarts the timer (Rx's ``Buffer(timeSpan, count)``).

        >>> from_iterable(range(7)).buffer(3).run(print)  # doctest: +ELLIPSIS
        [0, 1, 2]
        [3, 4, 5]
        [6]
        <...>
        >>> from_iterable(range(5)).buffer(3, 2).run(print)  # doctest: +ELLIPSIS
        [0, 1, 2]
        [2, 3, 4]
        [4]
        <...>

        On virtual time (one tick is a second), a list every 50 seconds from the subscription at 200:

        >>> from datetime import timedelta
        >>> from reaqtive.testing import TestScheduler, on_next, on_completed
        >>> scheduler = TestScheduler()
        >>> xs = scheduler.create_hot_observable(on_next(210, 1), on_next(240, 2), on_next(280, 3), on_completed(320))
        >>> scheduler.start(lambda: xs.buffer(timedelta(seconds=50))).messages
        [OnNext([1, 2])@250, OnNext([3])@300, OnNext([])@320, OnCompleted()@320]

        An element that arrives at the very instant a list closes is still in that list (sources run before
        timers at equal times). An error from the source drops the open lists. The time-driven forms need a
        scheduler in the operator context.

        State: the open list(s); by count also the number of elements received (with ``skip``); by time also the
        absolute time of the next close/open (a recovered buffer closes when it would have, and catches up on
        closes it missed while the process was down) and the closed lists waiting for demand.

        Demand: by count, translated: ``n`` lists ask the upstream for ``n * count`` elements (with ``skip``:
        exactly the elements that close ``n`` more lists, and the gap after them). By time, lists close on the
        clock whatever the demand: the upstream is asked for everything (``LONG_MAX``) once the downstream has
        asked for anything, closed lists wait for demand in a queue of at most ``MAX_QUEUE_SIZE`` lists (256 when the
        host sets none) and one more fails the query with ``LimitExceededError``. Duration-or-count asks the
        upstream for ``n * count`` elements per ``n`` lists, and queues as the time forms do.

        Limits: ``MAX_BUFFER_SIZE`` (elements in one list), ``MAX_BUFFER_COUNT`` (lists open at once, with
        ``skip``/``shift``); exceeding one is a ``LimitExceededError`` through ``on_error``.
        """
        if isinstance(first, timedelta):
            duration = require_positive_duration(first, "buffer", "duration")
            if second is None:
                return derive(self, "buffer_time", duration, duration)
            if isinstance(second, timedelta):
                shift = require_positive_duration(second, "buffer", "shift")
                return derive(self, "buffer_time", duration, shift)
            count = require_positive_int(second, "buffer", "count")
            return derive(self, "buffer_time_or_count", duration, count)
        if isinstance(first, int) and not isinstance(first, bool):
            count = require_positive_int(first, "buffer", "count")
            if second is None:
                return derive(self, "buffer", count, count)
            if isinstance(second, timedelta):
                raise TypeError("buffer: with a count, the second argument is skip (an int), got a timedelta")
            skip = require_positive_int(second, "buffer", "skip")
            return derive(self, "buffer", count, skip)
        raise TypeError(
            f"buffer: the first argument must be a count (int) or a duration (timedelta), got {type(first).__name__}"
        )
