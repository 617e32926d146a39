"""Time and errors: ``delay_subscription``, ``sample``, ``retry``."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.fluent._base import derive, new_query, require_positive_duration, require_positive_int
from reaqtive.fluent.sources import require_due
from reaqtive.subscribable import Subscribable

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["TimeMixin"]

T = TypeVar("T")


class TimeMixin(Generic[T]):
    """The time family of fluent methods (see :mod:`reaqtive.fluent`)."""

    __slots__ = ()

    def delay_subscription(self, due: timedelta | datetime) -> Query[T]:
        """Subscribe to this source only at ``due``: a delay from the start (``timedelta``) or an absolute,
        timezone-aware ``datetime`` (Reaqtive: ``DelaySubscription``). Needs a scheduler.

        >>> from datetime import timedelta
        >>> from reaqtive.testing import TestScheduler, on_next, on_completed
        >>> scheduler = TestScheduler()
        >>> xs = scheduler.create_cold_observable(on_next(10, "a"), on_completed(20))
        >>> scheduler.start(lambda: xs.delay_subscription(timedelta(seconds=50))).messages
        [OnNext('a')@260, OnCompleted()@270]
        >>> xs.subscriptions
        [Subscribe(250, 270)]

        A zero or negative delay, or a time already past, subscribes at once (as Rx, which treats a negative
        delay as zero; Reaqtive rejects a negative delay). If subscribing fails, the error goes downstream.
        State: the absolute due time and whether the source was subscribed (a recovered query re-creates the
        subscription and its state). Demand: passed upstream unchanged (held until the source is subscribed).
        """
        return derive(self, "delay_subscription", require_due(due, "delay_subscription", "due"))

    def sample(self, sampler: Subscribable[Any] | timedelta) -> Query[T]:
        """At each element of ``sampler`` (or every ``sampler`` period, a ``timedelta``), emit the latest element
        of this source if a new one arrived since the previous sample (Reaqtive: ``Sample``).

        >>> from reaqtive.testing import TestScheduler, on_next, on_completed
        >>> scheduler = TestScheduler()
        >>> xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_next(260, 3),
        ...                                      on_completed(270))
        >>> ticks = scheduler.create_hot_observable(on_next(230, "s"), on_next(250, "s"), on_next(280, "s"))
        >>> scheduler.start(lambda: xs.sample(ticks)).messages
        [OnNext(2)@230, OnNext(3)@280, OnCompleted()@280]

        The sampler's completion is a last sample. The result completes at the first sample after this source
        completed (as Rx), or when this source completes after the sampler did (as Rx.NET; Reaqtive would never
        complete then). ``sample(period)`` is ``sample(interval(period))``: the period starts with the query.
        Errors of either stream go downstream at once.
        State: the latest value, the sample waiting for demand, whether each input ended.
        Demand: both inputs are requested without bound (only the latest value is kept). At most one sample
        waits for downstream demand; a newer sample replaces it (the older one is dropped).
        """
        if isinstance(sampler, timedelta):
            period = require_positive_duration(sampler, "sample", "period")
            return derive(self, "sample", new_query("interval", (period,)))
        if not isinstance(sampler, Subscribable):
            raise TypeError(f"sample: sampler must be a query (or a timedelta period), got {type(sampler).__name__}")
        from reaqtive.query import Query  # the mixins are Query's bases, so Query is imported late

        if not isinstance(sampler, Query):
            sampler = Query.from_subscribable(sampler)
        return derive(self, "sample", sampler)

    def retry(self, count: int | None = None) -> Query[T]:
        """On an error, subscribe to this source again: forever, or up to ``count`` attempts in all (the first
        included), after which the last error goes downstream (Reaqtive: ``Retry``).

        >>> from reaqtive.testing import TestScheduler, on_next, on_error
        >>> scheduler = TestScheduler()
        >>> xs = scheduler.create_cold_observable(on_next(5, 1), on_error(10, ValueError("flaky")))
        >>> scheduler.start(lambda: xs.retry(2)).messages
        [OnNext(1)@205, OnNext(1)@215, OnError(ValueError('flaky'))@220]
        >>> xs.subscriptions
        [Subscribe(200, 210), Subscribe(210, 220)]

        The new attempt starts inside the failed one's ``on_error`` (a cold source restarts in the same tick, as
        Rx). An attempt that fails again while it starts is not re-subscribed recursively: hosted, the next one
        is scheduled; standalone, a loop takes it. ``count`` must be at least 1 (Rx's ``retry(0)`` completes
        without subscribing, Reaqtive's subscribes once: both surprise, so it is refused).
        State: the attempts left (counted form); none forever.
        Demand: passed upstream; what was requested and not yet received is requested from each new attempt.
        """
        if count is not None:
            count = require_positive_int(count, "retry", "count")
        return derive(self, "retry", count)
