"""Sources: queries that produce elements themselves (``from_iterable``, ``return_value``, ``timer``, ...)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from reaqtive.fluent._base import new_query, require_positive_duration, require_time
from reaqtive.subscribable import Subscribable

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["SourceConstructors"]

R = TypeVar("R")


def require_due(value: object, op: str, name: str) -> timedelta | datetime:
    """A due time: a ``timedelta`` (from the start; negative means at once) or an aware ``datetime``."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, datetime):
        return require_time(value, op, name)
    raise TypeError(f"{op}: {name} must be a timedelta or a datetime, got {type(value).__name__}")


class SourceConstructors:
    """Static constructors of source queries (also exported as functions: ``reaqtive.from_iterable``)."""

    __slots__ = ()

    @staticmethod
    def from_iterable(iterable: Iterable[R]) -> Query[R]:
        """A cold source that emits the elements of ``iterable`` as they are requested, then completes.

        >>> from_iterable([1, 2, 3]).run(print)  # doctest: +ELLIPSIS
        1
        2
        3
        <...>

        Demand: emits only what was requested, from a drain loop (a ``request`` made inside ``on_next`` adds to
        the demand instead of recursing, rule 3.3); unbounded demand emits with no per-element accounting.
        A ``None`` element or an exception raised by the iterator becomes ``on_error``.
        """
        if not isinstance(iterable, Iterable):
            raise TypeError(f"from_iterable needs an iterable, got {type(iterable).__name__}")
        return new_query("from_iterable", (iterable,))

    @staticmethod
    def from_subscribable(source: Subscribable[R]) -> Query[R]:
        """Use any subscribable (a subject, a test source) as the source of a query."""
        if not isinstance(source, Subscribable):
            raise TypeError(f"from_subscribable needs a Subscribable, got {type(source).__name__}")
        return new_query("subscribable", (source,))

    @staticmethod
    def stream(uri: str) -> Query[Any]:
        """The engine stream ``uri``: the persistable way for a standing query to read a stream, resolved by the
        engine when the query is bound (and again after every recovery).

        State: the sequence number of the last event read (the watermark), so that a recovered query resumes
        reading a durable stream right after it. Demand: as the engine's stream states (see ``docs/engine.md``).
        """
        if not isinstance(uri, str) or not uri:
            raise TypeError(f"stream needs a non-empty URI string, got {uri!r}")
        return new_query("stream", (uri,))

    @staticmethod
    def return_value(value: R) -> Query[R]:
        """A source of exactly one element, ``value``, then completion (Reaqtive: ``Return``).

        >>> Query.return_value(42).run(print)  # doctest: +ELLIPSIS
        42
        <...>

        Hosted on a scheduler it emits there, one tick after the start under the test scheduler; standalone,
        inside ``start``. ``None`` is never an element (``TypeError``).
        State: none (the disposed flag records that it finished).
        Demand: the element waits for a ``request``; completion follows it at once.
        """
        if value is None:
            raise TypeError("return_value: value must not be None (None is never a stream element)")
        return new_query("return_value", (value,))

    @staticmethod
    def empty() -> Query[Any]:
        """A source that completes at once, without elements (Reaqtive: ``Empty``).

        >>> Query.empty().run(print, on_complete=lambda: print("done"))  # doctest: +ELLIPSIS
        done
        <...>

        Hosted, it completes on the scheduler (one tick after the start under the test scheduler).
        State: none. Demand: none needed (rule 1.2).
        """
        return new_query("empty", ())

    @staticmethod
    def never() -> Query[Any]:
        """A source that never signals anything: no element, no completion (Reaqtive: ``Never``).

        >>> handle = Query.never().run(print)   # nothing is printed, ever
        >>> handle.dispose()

        State: none. Demand: accepted and never used (a non-positive ``request`` still signals the rule 3.9
        ``ValueError``).
        """
        return new_query("never", ())

    @staticmethod
    def throw(error: BaseException) -> Query[Any]:
        """A source that fails at once with ``error`` (Reaqtive: ``Throw``).

        >>> Query.throw(ValueError("boom")).run(print, on_error=lambda e: print("error:", e))  # doctest: +ELLIPSIS
        error: boom
        <...>

        ``error`` is an exception instance. Hosted, it is signalled on the scheduler (one tick after the start
        under the test scheduler). State: none. Demand: none needed (rule 1.4).
        """
        if not isinstance(error, BaseException):
            raise TypeError(f"throw: error must be an exception instance, got {type(error).__name__}")
        return new_query("throw", (error,))

    @staticmethod
    def timer(due: timedelta | datetime, period: timedelta | None = None) -> Query[int]:
        """``0`` at ``due``, then completion; with ``period``: ``0, 1, 2, ...`` from ``due``, one per period,
        never completing (Reaqtive: ``Timer``).

        ``due`` is a delay from the moment the query starts (a ``timedelta``; zero or negative: at once) or an
        absolute, timezone-aware ``datetime`` (in the past: at once). ``period`` must be positive. Needs a
        scheduler in the operator context.

        >>> from datetime import timedelta
        >>> from reaqtive.testing import TestScheduler
        >>> scheduler = TestScheduler()
        >>> scheduler.start(lambda: Query.timer(timedelta(seconds=30))).messages
        [OnNext(0)@230, OnCompleted()@230]
        >>> scheduler = TestScheduler()
        >>> scheduler.start(lambda: Query.timer(timedelta(seconds=5), timedelta(seconds=10)), disposed=230).messages
        [OnNext(0)@205, OnNext(1)@215, OnNext(2)@225]

        The first due time is computed at the start and saved as an absolute time, so a recovered timer fires
        when it would have; ticks that came due during a pause or before a recovery fire back to back. An
        absolute first due time in the past is caught up by whole periods, so at most one past tick fires at
        once and the phase is kept (Reaqtive's rule; Rx would restart the phase now). A negative delay with a
        period fires at once and then every period (as Rx).
        State: the next due time, ticks that came due, ticks delivered (single: the due time, whether it came).
        Demand: time cannot be slowed, so ticks that find no demand are held (as a count: they are consecutive
        numbers) and delivered, each with its number, when demand arrives; more than ``MAX_QUEUE_SIZE`` held
        ticks (setting, unlimited by default) is ``LimitExceededError`` through ``on_error``.
        """
        due = require_due(due, "timer", "due")
        if period is None:
            return new_query("timer", (due,))
        return new_query("timer", (due, require_positive_duration(period, "timer", "period")))

    @staticmethod
    def interval(period: timedelta) -> Query[int]:
        """``0, 1, 2, ...``, one per ``period``, the first one ``period`` after the start (Reaqtive:
        ``Timer(period, period)``); never completes. Needs a scheduler in the operator context.

        >>> from datetime import timedelta
        >>> from reaqtive.testing import TestScheduler
        >>> scheduler = TestScheduler()
        >>> scheduler.start(lambda: Query.interval(timedelta(seconds=10)), disposed=235).messages
        [OnNext(0)@210, OnNext(1)@220, OnNext(2)@230]

        ``period`` must be positive (a zero period would fire without end at one instant).
        State and demand: as :meth:`timer` with a period (the same stage, ``reaqtive:timer+period``).
        """
        return new_query("interval", (require_positive_duration(period, "interval", "period"),))
