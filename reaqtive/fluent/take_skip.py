"""Take and skip: ``take``, ``skip`` (by count or duration), ``take_while``, ``skip_while`` (+ indexed),
``take_until``, ``skip_until`` (another stream or an absolute time).

Reaqtive names: Take, Skip, TakeWhile, SkipWhile, TakeUntil, SkipUntil. The time-based forms (``take``/``skip``
with a :class:`~datetime.timedelta`, ``take_until``/``skip_until`` with a :class:`~datetime.datetime`) run their
own timer on the scheduler of the operator context, so they need one (an engine, or a context with a
scheduler); the original composes them from ``Timer``, we do not, and save the absolute time instead.

None of them holds elements: each element is passed or dropped as it arrives (their buffer bound is zero), and
an element is never delivered without the downstream's demand.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from reaqtive.fluent._base import Fluent, derive, new_query, require_callable, require_non_negative_int, require_time
from reaqtive.operators import take
from reaqtive.subscribable import Subscribable

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["TakeSkipMixin"]

T = TypeVar("T")


def _count_or_duration(value: object, op: str) -> tuple[str, int | timedelta]:
    """``(op, count)`` for an int, ``(op + "_duration", duration)`` for a timedelta; both must be >= 0."""
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise ValueError(f"{op}: duration must be >= 0, got {value}")
        return f"{op}_duration", value
    if isinstance(value, int) and not isinstance(value, bool):
        return op, require_non_negative_int(value, op, "count")
    raise TypeError(f"{op}: count must be an int or a timedelta, got {type(value).__name__}")


def _other_or_time(value: object, op: str) -> tuple[str, object]:
    """``(op, query)`` for a stream, ``(op + "_time", datetime)`` for an aware datetime."""
    if isinstance(value, datetime):
        return f"{op}_time", require_time(value, op, "time")
    if isinstance(value, Subscribable):
        from reaqtive.query import Query  # the mixins are Query's bases, so Query is imported late

        return op, value if isinstance(value, Query) else new_query("subscribable", (value,))
    raise TypeError(f"{op}: other must be a query (or another Subscribable) or a datetime, got {type(value).__name__}")


class TakeSkipMixin(Fluent[T], Generic[T]):
    """Operators that pass or drop a prefix of the stream: by count, by time, by predicate, or by a signal."""

    __slots__ = ()

    @overload
    def take(self, count: int, /) -> Query[T]: ...

    @overload
    def take(self, duration: timedelta, /) -> Query[T]: ...

    def take(self, count: int | timedelta, /) -> Query[T]:
        return self.pipe(take.take(count))

    @overload
    def skip(self, count: int, /) -> Query[T]: ...

    @overload
    def skip(self, duration: timedelta, /) -> Query[T]: ...

    def skip(self, count: int | timedelta, /) -> Query[T]:
        """Drop the first ``count`` elements (an ``int``), or the elements of the first ``duration`` after the
        subscription started (a ``timedelta``); pass the rest.

        >>> from_iterable(range(5)).skip(3).run(print)  # doctest: +ELLIPSIS
        3
        4
        <...>

        By time, on the virtual-time scheduler (one tick is one second; an element at the very end of the
        duration is still dropped):

        >>> from datetime import timedelta
        >>> from reaqtive.testing import TestScheduler, on_next
        >>> scheduler = TestScheduler()
        >>> xs = scheduler.create_hot_observable(on_next(210, "a"), on_next(250, "b"), on_next(260, "c"))
        >>> scheduler.start(lambda: xs.skip(timedelta(seconds=50))).messages
        [OnNext('c')@260]

        Completion and errors pass at any time. State: count: how many are still to drop; duration: the
        absolute end time and whether it was reached. Demand: count: the elements to drop are requested with
        the first demand (``n + count`` once), then demand passes unchanged; duration: each dropped element is
        replaced by ``request(1)`` upstream, unless demand is unbounded. Reaqtive: Skip (its duration form is
        composed from SkipUntil and Timer).
        """
        op, argument = _count_or_duration(count, "skip")
        return derive(self, op, argument)

    def take_while(self, predicate: Callable[[T], object], *, inclusive: bool = False) -> Query[T]:
        """Pass elements while ``predicate`` is true; at the first false one, complete and unsubscribe from the
        source (emitting that element first when ``inclusive``, as RxPY does).

        >>> from_iterable([1, 2, 5, 1]).take_while(lambda x: x < 3).run(print)  # doctest: +ELLIPSIS
        1
        2
        <...>

        State: nothing (a stage past the first false element has completed). Demand: passed upstream
        unchanged. An exception from ``predicate`` becomes ``on_error``. Reaqtive: TakeWhile.
        """
        require_callable(predicate, "take_while", "predicate")
        if not isinstance(inclusive, bool):
            raise TypeError(f"take_while: inclusive must be a bool, got {type(inclusive).__name__}")
        return derive(self, "take_while", predicate, inclusive)

    def take_while_indexed(self, predicate: Callable[[T, int], object], *, inclusive: bool = False) -> Query[T]:
        """``take_while`` with the element's index (0, 1, ...) as the predicate's second argument.

        >>> from_iterable("abcd").take_while_indexed(lambda x, i: i < 2).run(print)  # doctest: +ELLIPSIS
        a
        b
        <...>

        State: the index of the next element. Demand: passed upstream unchanged. Reaqtive: TakeWhile+Index.
        """
        require_callable(predicate, "take_while_indexed", "predicate")
        if not isinstance(inclusive, bool):
            raise TypeError(f"take_while_indexed: inclusive must be a bool, got {type(inclusive).__name__}")
        return derive(self, "take_while_indexed", predicate, inclusive)

    def skip_while(self, predicate: Callable[[T], object]) -> Query[T]:
        """Drop elements while ``predicate`` is true; from the first false one on, pass every element (the
        predicate is not called again).

        >>> from_iterable([1, 2, 5, 1]).skip_while(lambda x: x < 3).run(print)  # doctest: +ELLIPSIS
        5
        1
        <...>

        State: whether the predicate has been false yet. Demand: each dropped element is replaced by
        ``request(1)`` upstream, unless demand is unbounded. An exception from ``predicate`` becomes
        ``on_error``. Reaqtive: SkipWhile.
        """
        require_callable(predicate, "skip_while", "predicate")
        return derive(self, "skip_while", predicate)

    def skip_while_indexed(self, predicate: Callable[[T, int], object]) -> Query[T]:
        """``skip_while`` with the element's index (0, 1, ...) as the predicate's second argument.

        >>> from_iterable("abcd").skip_while_indexed(lambda x, i: i < 2).run(print)  # doctest: +ELLIPSIS
        c
        d
        <...>

        State: whether the predicate has been false yet, and the index of the next element. Demand: as
        ``skip_while``. Reaqtive: SkipWhile+Index.
        """
        require_callable(predicate, "skip_while_indexed", "predicate")
        return derive(self, "skip_while_indexed", predicate)

    @overload
    def take_until(self, other: Subscribable[Any], /) -> Query[T]: ...

    @overload
    def take_until(self, end_time: datetime, /) -> Query[T]: ...

    def take_until(self, other: Subscribable[Any] | datetime, /) -> Query[T]:
        """Pass elements until ``other`` emits its first element, or until the aware ``datetime`` ``end_time``;
        then complete and unsubscribe.

        >>> source, stop = SimpleSubject(), SimpleSubject()
        >>> handle = source.as_query().take_until(stop.as_query()).run(print, on_complete=lambda: print("done"))
        >>> source.on_next(1); source.on_next(2); stop.on_next("stop"); source.on_next(3)
        1
        2
        done

        ``other``'s error is the result's error; ``other`` completing without an element lets every element
        pass (as in Rx). ``other`` is subscribed before the source, so one that signals at once ends the result
        before the source emits. An ``end_time`` in the past completes at once. State: stream: whether ``other``
        completed without an element; time: nothing. Demand: passed upstream unchanged; ``other`` is asked
        for one element. Reaqtive: TakeUntil (its time form is composed with Timer).
        """
        op, argument = _other_or_time(other, "take_until")
        return derive(self, op, argument)

    @overload
    def skip_until(self, other: Subscribable[Any], /) -> Query[T]: ...

    @overload
    def skip_until(self, start_time: datetime, /) -> Query[T]: ...

    def skip_until(self, other: Subscribable[Any] | datetime, /) -> Query[T]:
        """Drop elements until ``other`` emits its first element, or until the aware ``datetime``
        ``start_time``; then pass every element.

        >>> source, start = SimpleSubject(), SimpleSubject()
        >>> handle = source.as_query().skip_until(start.as_query()).run(print)
        >>> source.on_next(1); start.on_next("go"); source.on_next(2); source.on_next(3)
        2
        3

        With a stream, as in Rx: ``other``'s error (before its first element) is the result's error; ``other``
        completing without an element keeps the gate shut; the source completing while the gate is shut is
        dropped like its elements, so the result does not complete (``other`` may still fail it). With a time,
        completion and errors pass at any time, and a ``start_time`` in the past drops nothing. State: stream:
        whether the gate is open, whether ``other`` and the source ended; time: whether the gate is open.
        Demand: each dropped element is replaced by ``request(1)`` upstream, unless demand is unbounded;
        ``other`` is asked for one element. Reaqtive: SkipUntil (its time form is composed with Timer).
        """
        op, argument = _other_or_time(other, "skip_until")
        return derive(self, op, argument)
