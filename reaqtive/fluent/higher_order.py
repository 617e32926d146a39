"""Higher-order operators: ``flat_map``, ``switch_latest``, ``group_by``, ``window``, ``debounce``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from reaqtive.fluent._base import (
    derive,
    require_callable,
    require_duration,
    require_positive_duration,
    require_positive_int,
)
from reaqtive.subscribable import Subscribable

if TYPE_CHECKING:
    from reaqtive.query import GroupedStream, InnerStream, Query

__all__ = ["HigherOrderMixin"]

T = TypeVar("T")


class HigherOrderMixin(Generic[T]):
    """The higher order family of fluent methods (see :mod:`reaqtive.fluent`)."""

    __slots__ = ()

    # -- flat_map, merge_all, switch_latest, debounce (issue 7A) --

    def flat_map(
        self,
        selector: Callable[[T], Subscribable[Any]],
        result_selector: Callable[[T, Any], Any] | None = None,
        *,
        max_concurrent: int | None = None,
    ) -> Query[Any]:
        """Each element selects an inner stream (``selector(element)``, a query); the result is the elements of
        every inner stream, merged as they arrive (Reaqtive ``SelectMany``, Rx ``SelectMany``/``flatMap``).

        >>> from_iterable([1, 2]).flat_map(lambda x: from_iterable([x, x * 10])).run(print)  # doctest: +ELLIPSIS
        1
        10
        2
        20
        <...>
        >>> from_iterable("ab").flat_map(lambda x: from_iterable([1, 2]), lambda x, n: x * n).run(print)
        ... # doctest: +ELLIPSIS
        a
        aa
        b
        bb
        <...>

        With ``result_selector`` each inner element ``y`` of element ``x`` becomes ``result_selector(x, y)``. At
        most ``max_concurrent`` inner subscriptions are live at once (no bound by default; the host's
        ``MAX_CONCURRENT_INNER`` bounds it too). Completes when this source and every inner stream completed, in
        either order; the first error (of this source, an inner stream or a selector) ends the result at once
        and disposes every inner subscription.

        State: the number of elements seen and, per live inner stream, the element that selected it, which
        must be a value the state codec can save, or a group or window (saved by reference): after a restart
        ``selector`` is called again on it, so it must be deterministic. Hosted (the engine, or an
        ``InnerEnvironment``), each inner subscription is checkpointed as a unit of its own under the id
        ``<prefix>/<n>`` (the n-th element); standalone, checkpointing with live inners is an error.

        Demand: the outer source is asked for elements only as inner slots allow: without bound when downstream
        demand is unbounded and ``max_concurrent`` is not set, as many as there are free slots when it is, and
        one at a time while a bounded downstream waits for more than is queued. Each inner stream is asked for
        what its queue (``MAX_QUEUE_SIZE``, 256 by default) can hold, or without bound once downstream demand is
        unbounded; queues drain in turns, one element per inner, in a deterministic order.
        """
        require_callable(selector, "flat_map", "selector")
        if result_selector is not None:
            require_callable(result_selector, "flat_map", "result_selector")
        if max_concurrent is not None:
            max_concurrent = require_positive_int(max_concurrent, "flat_map", "max_concurrent")
        return derive(self, "flat_map", selector, result_selector, max_concurrent)

    def merge_all(self, max_concurrent: int | None = None) -> Query[Any]:
        """The elements of the inner streams this source emits (its elements are queries: groups, windows,
        any query), merged as they arrive (Reaqtive ``Merge`` of a stream of streams; RxPY ``merge_all``).

        >>> inner = [from_iterable([1, 2]), from_iterable([3])]
        >>> from_iterable(inner).merge_all().run(print)  # doctest: +ELLIPSIS
        1
        2
        3
        <...>

        ``flat_map`` with the identity: the same completion, errors, bound and demand. State: as ``flat_map``;
        groups and windows are saved by reference, but a plain query cannot be saved, so checkpointing a live
        inner of ``xs.map(f).merge_all()`` is an error: write ``xs.flat_map(f)``, which saves the element.
        """
        if max_concurrent is not None:
            max_concurrent = require_positive_int(max_concurrent, "merge_all", "max_concurrent")
        return derive(self, "merge_all", max_concurrent)

    def switch_latest(self, selector: Callable[[T], Subscribable[Any]] | None = None) -> Query[Any]:
        """The elements of the latest inner stream: each element of this source (a query, or with ``selector``
        the query ``selector(element)``) replaces the current inner subscription (Reaqtive ``Switch``; with a
        selector, RxJS/RxPY ``switch_map``).

        >>> from reaqtive.testing import TestScheduler, on_next, on_completed
        >>> scheduler = TestScheduler()
        >>> ys = scheduler.create_hot_observable(on_next(215, "a"), on_next(235, "b"), on_completed(250))
        >>> zs = scheduler.create_hot_observable(on_next(225, "c"), on_next(240, "d"), on_completed(260))
        >>> xs = scheduler.create_hot_observable(on_next(210, ys), on_next(230, zs), on_completed(245))
        >>> scheduler.start(lambda: xs.switch_latest()).messages
        [OnNext('a')@215, OnNext('d')@240, OnCompleted()@260]

        The previous inner subscription is disposed and what it had queued is dropped. Completes when this
        source and the latest inner stream completed; the latest inner's error ends the result, a stale
        inner's signals are ignored; an error of this source or of ``selector`` ends it at once.

        State: the number of elements seen and the latest inner: the element that selected it (as for
        ``flat_map``: a value, or a group or window by reference; a plain query cannot be saved, so use
        ``switch_latest(selector)`` to checkpoint) and its queued elements.
        Demand: as ``flat_map`` with at most one inner: this source is asked without bound when downstream
        demand is unbounded, else for one element at a time while downstream waits for more than is queued.
        """
        if selector is not None:
            require_callable(selector, "switch_latest", "selector")
        return derive(self, "switch_latest", selector)

    def debounce(self, duration: timedelta | Callable[[T], Subscribable[Any]]) -> Query[T]:
        """Emit an element only once ``duration`` passed without a newer one (Reaqtive ``Throttle``, Rx
        ``Throttle``/``debounce``); or, with a function, once the query ``duration(element)`` emits or completes.

        >>> from datetime import timedelta
        >>> from reaqtive.testing import TestScheduler, on_next, on_completed
        >>> scheduler = TestScheduler()
        >>> xs = scheduler.create_hot_observable(on_next(210, 1), on_next(215, 2), on_next(240, 3),
        ...                                      on_completed(245))
        >>> scheduler.start(lambda: xs.debounce(timedelta(seconds=10))).messages
        [OnNext(2)@225, OnNext(3)@245, OnCompleted()@245]
        >>> scheduler = TestScheduler()
        >>> xs = scheduler.create_hot_observable(on_next(210, 5), on_next(212, 20), on_next(240, 3))
        >>> scheduler.start(lambda: xs.debounce(lambda x: Query.timer(timedelta(seconds=x))), disposed=300).messages
        [OnNext(20)@232, OnNext(3)@243]

        A newer element replaces the pending one (and its duration query). This source's completion emits the
        pending element, then completes; its error drops it. A ``timedelta`` needs a scheduler (a timer of the
        scheduler, no inner subscription); ``duration(element)`` is an inner subscription, hosted by the
        environment when there is one. A negative duration is refused.

        State: the pending element, its absolute due time or its number (the id of its duration query), and an
        element waiting for demand.
        Demand: this source is asked without bound (debouncing must see every element to know which is the
        last). At most one debounced element waits for downstream demand; a newer one replaces it (as
        ``sample``). The duration query is asked for one element.
        """
        if isinstance(duration, timedelta):
            duration = require_duration(duration, "debounce", "duration")
            if duration < timedelta(0):
                raise ValueError(f"debounce: duration must not be negative, got {duration}")
            return derive(self, "debounce", duration)
        if not callable(duration):
            raise TypeError(
                f"debounce: duration must be a timedelta or a function returning a query, got {type(duration).__name__}"
            )
        return derive(self, "debounce", duration)

    # -- group_by, window (issue 7B) --

    def group_by(
        self,
        key_selector: Callable[[T], object],
        element_selector: Callable[[T], Any] | None = None,
        *,
        max_groups: int | None = None,
        expire_after: timedelta | None = None,
    ) -> Query[GroupedStream[Any]]:
        """Split the elements into one inner stream per key: each new key emits a
        :class:`~reaqtive.query.GroupedStream` (a query, with ``.key``), and each element goes into the group of
        ``key_selector(element)``, as ``element_selector(element)`` if given (Reaqtive ``GroupBy``).

        >>> from_iterable(range(7)).group_by(lambda x: x % 3).flat_map(
        ...     lambda g: g.to_list().map(lambda xs: (g.key, xs))).run(print)  # doctest: +ELLIPSIS
        (0, [0, 3, 6])
        (1, [1, 4])
        (2, [2, 5])
        <...>

        Subscribe to a group while it is being emitted (``flat_map`` does): its first element is pushed right
        after, and a group keeps no elements for late subscribers. The source's completion completes every
        group, then the result; an error (of the source, a selector, a limit) goes to every group, then to the
        result. Disposing the result completes the live groups. Keys are any hashable value, ``None``
        included, and are saved in checkpoints (plain data, or a type registered with the state codec).

        ``max_groups`` bounds the open groups (so does the host's ``MAX_GROUP_COUNT``); one more is a
        ``LimitExceededError``. With ``expire_after`` a group that received no element for that long
        completes and is forgotten; a later element with its key opens a new group. Expiry needs a scheduler.

        State: the group counter and, per open group, its number and key (its subject's id is
        ``<prefix>/<number>`` under an environment; elements into emitted groups change nothing, so a
        differential checkpoint writes only the groups' own consumers that changed); with ``expire_after``, the
        time of each group's latest element; groups waiting for demand, with their elements.

        Demand: everything upstream once the result was asked for anything. A new group goes out only on
        demand; until then it waits with its elements (at most ``MAX_QUEUE_SIZE`` in all, 256 by default, then
        ``LimitExceededError``). Inside a group, each subscriber has its own demand and the bounded buffer of
        the group's subject (1024 elements, then ``BufferOverflowError``).
        """
        require_callable(key_selector, "group_by", "key_selector")
        if element_selector is not None:
            require_callable(element_selector, "group_by", "element_selector")
        if max_groups is not None:
            max_groups = require_positive_int(max_groups, "group_by", "max_groups")
        if expire_after is not None:
            expire_after = require_duration(expire_after, "group_by", "expire_after")
            if expire_after <= timedelta(0):
                raise ValueError(f"group_by: expire_after must be positive, got {expire_after}")
        return derive(self, "group_by", key_selector, element_selector, max_groups, expire_after)

    @overload
    def window(self, count: int, skip: int | None = None, /) -> Query[InnerStream[T]]: ...

    @overload
    def window(self, duration: timedelta, shift: timedelta | None = None, /) -> Query[InnerStream[T]]: ...

    @overload
    def window(self, duration: timedelta, count: int, /) -> Query[InnerStream[T]]: ...

    def window(self, first: int | timedelta, second: int | timedelta | None = None, /) -> Query[InnerStream[T]]:
        """Split the elements into inner streams (windows) by count, by time, or by whichever comes first: the
        inner-stream cousin of ``buffer`` (Reaqtive ``Window``). Each window is an
        :class:`~reaqtive.query.InnerStream` (a query).

        * ``window(count)``: consecutive windows of ``count`` elements;
        * ``window(count, skip)``: a window opens every ``skip`` elements and completes at ``count``;
        * ``window(duration)``: a window every ``duration``;
        * ``window(duration, shift)``: a window opens every ``shift`` and completes ``duration`` after it
          opened (a completion before an opening at the same instant);
        * ``window(duration, count)``: a window completes at ``count`` elements or ``duration`` after it
          opened, whichever comes first; a completion by count restarts the timer.

        As in Rx, windows open eagerly (the first at the subscription, the next as soon as the previous one
        completes or its time comes) and are emitted even if they stay empty, so ``window(n)`` over a multiple
        of ``n`` elements ends with an empty window:

        >>> from_iterable(range(5)).window(2).flat_map(lambda w: w.to_list()).run(print)  # doctest: +ELLIPSIS
        [0, 1]
        [2, 3]
        [4]
        <...>
        >>> from_iterable(range(4)).window(2).flat_map(lambda w: w.to_list()).run(print)  # doctest: +ELLIPSIS
        [0, 1]
        [2, 3]
        []
        <...>

        Subscribe to a window while it is being emitted (``flat_map`` does). The source's completion completes
        the open windows, then the result; an error goes to every window, then to the result. Disposing the
        result completes the open windows. The time forms need a scheduler.

        State: the window counter, the open windows (by number; under an environment the subject of window
        ``n`` is ``<prefix>/<n>``), the windows waiting for demand with their elements; by count also the
        elements received, by time the absolute time of the next close/open (a recovered window closes when it
        would have, and missed closes are caught up).

        Demand: by count, translated: ``n`` windows ask the upstream for the elements that complete them. By
        time, windows open on the clock: everything upstream once the result was asked for anything
        (``window(duration, count)``: ``n * count`` elements per ``n`` windows). A window goes out only on
        demand; until then it waits with its elements (at most ``MAX_QUEUE_SIZE`` in all, then
        ``LimitExceededError``). Inside a window, each subscriber has its own demand and the bounded buffer of
        the window's subject.

        Limits: ``MAX_WINDOW_COUNT`` (windows open at once, with ``skip``/``shift``), ``MAX_QUEUE_SIZE``.
        """
        if isinstance(first, timedelta):
            duration = require_positive_duration(first, "window", "duration")
            if second is None:
                return derive(self, "window_time", duration, duration)
            if isinstance(second, timedelta):
                shift = require_positive_duration(second, "window", "shift")
                return derive(self, "window_time", duration, shift)
            count = require_positive_int(second, "window", "count")
            return derive(self, "window_time_or_count", duration, count)
        if isinstance(first, int) and not isinstance(first, bool):
            count = require_positive_int(first, "window", "count")
            if second is None:
                return derive(self, "window", count, count)
            if isinstance(second, timedelta):
                raise TypeError("window: with a count, the second argument is skip (an int), got a timedelta")
            skip = require_positive_int(second, "window", "skip")
            return derive(self, "window", count, skip)
        raise TypeError(
            f"window: the first argument must be a count (int) or a duration (timedelta), got {type(first).__name__}"
        )
