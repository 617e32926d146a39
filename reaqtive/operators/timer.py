"""``timer`` and ``interval``: sources that emit on the scheduler's clock."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, ClassVar

from reaqtive.core.arguments import ArgsRecord, args_record, require_positive_duration
from reaqtive.core.binding import register_operator
from reaqtive.core.context import OperatorContext
from reaqtive.core.errors import LimitExceededError
from reaqtive.core.expression import Expression, source_node
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.scheduler_interface import Scheduler, YieldToken, utc
from reaqtive.core.streams import Subscriber, add_demand
from reaqtive.operators._places import number_of, read_number
from reaqtive.operators._source import EMIT_BATCH, TERMINATED, PullSource
from reaqtive.operators._timing import MAX_TIME, add_safe, due_bounds, due_time, multiply_safe, require_due
from reaqtive.operators.settings import MAX_QUEUE_SIZE, UNLIMITED, read_limit
from reaqtive.scheduler import YieldableActionTask
from reaqtive.state.fields import time_bounds

__all__ = [
    "IntervalArgs",
    "PeriodicTimer",
    "SingleTimer",
    "TimerArgs",
    "TimerPeriodArgs",
    "interval",
    "timer",
]

_ZERO = timedelta(0)


def timer(due: timedelta | datetime, period: timedelta | None = None) -> Expression[int]:
    """``0`` at ``due``, then completion; with ``period``: ``0, 1, 2, ...`` from ``due``, one per period,
    never completing.

    ``due`` is a delay from the moment the query starts (a ``timedelta``; zero or negative: at once, in the
    starting tick) or an absolute, timezone-aware ``datetime`` (in the past: at once). ``period`` must be
    positive. Needs a scheduler in the operator context.

    >>> from datetime import timedelta
    >>> from reaqtive.testing import TestScheduler
    >>> scheduler = TestScheduler()
    >>> scheduler.start(lambda: Query.timer(timedelta(seconds=30))).messages
    [OnNext(0)@230, OnCompleted()@230]
    >>> scheduler = TestScheduler()
    >>> scheduler.start(lambda: Query.timer(timedelta(seconds=5), timedelta(seconds=10)), disposed=230).messages
    [OnNext(0)@205, OnNext(1)@215, OnNext(2)@225]

    The first due time is computed at the start and saved as an absolute time, so a recovered timer fires
    when it would have; ticks that came due during a pause or before a recovery fire back to back, each with
    its own number. An absolute first due time in the past is caught up by whole periods, so at most one past
    tick fires at once and the phase is kept (Reaqtive's rule; Rx would restart the phase now). A negative
    delay with a period fires at once and then every period (as Rx).

    **State.** With a period: the next absolute due time, how many ticks came due, how many were delivered.
    Without: the absolute due time, and whether it came. Both (version 2) then the pending tick's number among
    the timers armed in its tick, its place in line after a restart (version 1 still loads).

    **Demand.** Time cannot be slowed, so ticks that find no demand are held (as a count: they are consecutive
    numbers) and go out, each with its number, as soon as demand arrives (on the scheduler: one tick after the
    request under the test scheduler); a tick that fires while there is demand goes out at once. More than
    ``MAX_QUEUE_SIZE`` held ticks (setting, unlimited by default) is ``LimitExceededError`` through
    ``on_error``, which ends the subscription.

    Reaqtive: Timer.
    """
    due = require_due(due, "timer", "due")
    if period is None:
        return source_node("timer", (due,))
    return source_node("timer", (due, require_positive_duration(period, "timer", "period")))


def interval(period: timedelta) -> Expression[int]:
    """``0, 1, 2, ...``, one per ``period``, the first one ``period`` after the start; never completes. Needs a
    scheduler in the operator context.

    >>> from datetime import timedelta
    >>> from reaqtive.testing import TestScheduler
    >>> scheduler = TestScheduler()
    >>> scheduler.start(lambda: Query.interval(timedelta(seconds=10)), disposed=235).messages
    [OnNext(0)@210, OnNext(1)@220, OnNext(2)@230]

    ``period`` must be positive (a zero period would fire without end at one instant).

    **State and demand.** As :func:`timer` with a period (the same stage, ``reaqtive:timer+period``).

    Reaqtive: Timer(period, period).
    """
    return source_node("interval", (require_positive_duration(period, "interval", "period"),))


class TimerArgs(ArgsRecord, due="due"):
    """The arguments of a ``timer`` node: ``(due,)``; ``(due, period)`` reads as a :class:`TimerPeriodArgs`."""


class TimerPeriodArgs(ArgsRecord, due="due", period="positive_duration"):
    """The arguments of a periodic ``timer`` node: ``(due, period)``."""


TimerArgs.alternatives = (TimerPeriodArgs,)


IntervalArgs = args_record("IntervalArgs", period="positive_duration")


class _TimerSource(PullSource[int]):
    """What both timers share: the due time, the tick counters and the drain that delivers held ticks.

    ``_fired`` ticks came due, ``_delivered`` of them went downstream; the rest are held for demand (consecutive
    numbers: two counters, not a buffer). Ticks come due in a scheduler task (:meth:`_fire`), which delivers at
    once when the drain is free; ``request`` goes through the pull-source drain (on the scheduler when hosted).
    The timer task joins the pull source's drain protocol: it either takes the drain and runs it inline, or marks
    it missed so that the running drain delivers the new ticks.

    **Recovery and timing.** A drain is pending between two instants exactly when ticks are held and there is
    demand for them (a request with nothing held only adds demand). A recovered timer re-creates that: when the
    downstream asks again, in ``on_subscribe``, for what it had outstanding and ticks are held, they go out in
    the next instant, as the original's pending drain would have delivered them, not in the starting instant.
    """

    periodic: ClassVar[bool] = False

    __slots__ = ("_delivered", "_due", "_fired", "_limit", "_next_due", "_number", "_task")

    def __init__(self, due: timedelta | datetime, downstream: Subscriber[int]) -> None:
        super().__init__(downstream)
        self._due = due
        self._next_due: datetime | None = None  # computed at start, or loaded
        self._fired = 0
        self._delivered = 0
        self._limit = UNLIMITED
        self._task: YieldableActionTask | None = None  # the pending tick's task: told its place in line
        self._number: int | None = None  # a loaded timer's place among the timers armed in its tick

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._scheduler = context.scheduler  # raises MissingSchedulerError: a timer needs a clock
        self._limit = read_limit(context, MAX_QUEUE_SIZE)

    def on_start(self) -> None:
        scheduler = self._clock()
        armed = None
        if self._next_due is None:
            self._next_due = self._first_due(scheduler.now)
            self._state.changed = True
        else:  # recovered: its timer goes back in line where it was first armed (see ActionTask.armed)
            armed = self._armed_at(self._next_due)
        self._schedule_fire(scheduler, armed, self._number if armed is not None else None)
        # The pull source holds its drain until the start and then schedules a first drain, which would keep
        # the drain busy until the next instant and delay a tick due right now. Drain here instead: it serves
        # the requests made in on_subscribe, then frees the drain. Except when recovered holding ticks that the
        # downstream (asking again in on_subscribe) wants: the original was then waiting for the drain that its
        # request had scheduled for the next instant, and the ticks go out then, not now.
        with self._lock:
            deferred = self._fired > self._delivered and self._demand > 0
        if deferred or not self._drain(YieldToken.NONE):
            scheduler.schedule(YieldableActionTask(self._drain))

    def _clock(self) -> Scheduler:
        scheduler = self._scheduler
        assert scheduler is not None, "set_context checked that there is a scheduler"
        return scheduler

    def request(self, n: int) -> None:
        with self._lock:
            if n > 0 and self._fired == self._delivered and self._bad_request is None:
                # Nothing held: the demand waits for the next tick, which goes out when it fires. No drain now,
                # so that whether a drain is pending follows from the state (held ticks and demand), which is
                # what a recovered timer can know (see on_start).
                self._demand = add_demand(self._demand, n)
                return
        super().request(n)

    def _first_due(self, now: datetime) -> datetime:
        return due_time(now, self._due)

    def _schedule_fire(self, scheduler: Scheduler, armed: datetime | None = None, number: int | None = None) -> None:
        """Schedule the next tick, unless there is none (``armed``, ``number``: a recovered timer's place)."""
        next_due = self._next_due
        if next_due is not None and next_due != MAX_TIME and (self.periodic or not self._fired):
            task = self._task = YieldableActionTask(self._fire, armed=armed, arrival=number)
            scheduler.schedule(task, next_due)

    def _save_number(self, writer: StateWriter) -> None:
        """The pending tick's place in line (see :mod:`reaqtive.operators._places`; read at a checkpoint)."""
        writer.write(number_of(self._task) if self._next_due is not None else None)

    def _armed_at(self, next_due: datetime) -> datetime | None:
        """When the timer due at ``next_due`` was armed: at the subscription, a relative first due time before it
        (``None`` where that cannot be known)."""
        due = self._due
        return add_safe(next_due, -due) if isinstance(due, timedelta) and due > _ZERO else None

    def _due_ticks(self, now: datetime) -> int:
        """How many ticks are due at ``now``; advances ``_next_due`` past them (called under the lock)."""
        return 1

    def _fire(self, token: YieldToken) -> bool:
        """The scheduler task of a due time: count the ticks that came due and deliver what demand allows."""
        if self._disposed:
            return True  # a disposed timer's task still runs, muted
        scheduler = self._clock()
        with self._lock:
            self._fired += self._due_ticks(scheduler.now)
            inline = not self._wip
            if inline:
                self._wip = True  # the drain is ours: deliver now, at the due time
            else:
                self._missed = True  # a running drain picks the new ticks up
        self._state.changed = True
        if inline and not self._drain(token):
            scheduler.schedule(YieldableActionTask(self._drain))  # paused mid-way: the drain goes on later
        if not self._disposed:
            self._schedule_fire(scheduler)
        return True

    def emit(self, demand: int, token: YieldToken) -> int:
        delivered = self._delivered
        pending = self._fired - delivered
        count = min(demand, pending)
        first = delivered if self.periodic else 0
        downstream = self._downstream
        emitted = 0
        while emitted < count:
            downstream.on_next(first + emitted)
            emitted += 1
            if self._disposed:
                return TERMINATED
            if emitted % EMIT_BATCH == 0 and token.is_yield_requested:
                break
        if emitted:
            self._delivered = delivered + emitted
            self._state.changed = True
            if not self.periodic:
                self._signal_complete()
                return TERMINATED
        held = pending - emitted
        if emitted == demand and held > self._limit:
            self._signal_error(LimitExceededError(self.name, MAX_QUEUE_SIZE, self._limit))
            return TERMINATED
        return emitted


@register_operator("timer", builder=timer, args=TimerArgs)
def _bind_timer(query: Expression[Any], downstream: Subscriber[int]) -> _TimerSource:
    """``timer(due)`` or ``timer(due, period)``: one expression operator, two stages (their state differs)."""
    if isinstance(TimerArgs.read_any(query), TimerPeriodArgs):
        return PeriodicTimer(query, downstream)
    return SingleTimer(query, downstream)


class SingleTimer(_TimerSource):
    """The running source of :func:`timer` without a period: one tick, held until there is demand, then the
    completion."""

    name = "reaqtive:timer"
    version: Version = (2,)
    older_versions = frozenset({(1,)})  # without the timer's number: in line after the others of its tick

    __slots__ = ()

    def __init__(self, query: Expression[Any], downstream: Subscriber[int]) -> None:
        super().__init__(TimerArgs.read(query).due, downstream)

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._next_due)
        writer.write(self._fired > 0)
        self._save_number(writer)

    def load_state_core(self, reader: StateReader) -> None:
        self.load_older_state_core(reader, (1,))
        self._number = read_number(reader)

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        self._next_due = reader.read_optional_datetime("next due", *due_bounds(self.context, self._due))
        fired = reader.read_bool("fired")
        if fired and self._next_due is None:
            raise reader.invalid("fired", "False before the due time was set", fired)
        self._fired = 1 if fired else 0


@register_operator("interval", builder=interval, args=IntervalArgs)
class PeriodicTimer(_TimerSource):
    """The running source of :func:`timer` with a period and of :func:`interval`: each firing counts every
    period that passed (:meth:`_due_ticks`), so missed ticks fire back to back."""

    name = "reaqtive:timer+period"
    version: Version = (2,)
    older_versions = frozenset({(1,)})  # without the timer's number: in line after the others of its tick
    periodic = True

    __slots__ = ("_period",)

    def __init__(self, query: Expression[Any], downstream: Subscriber[int]) -> None:
        due: timedelta | datetime
        if query.op == "interval":
            due = period = IntervalArgs.read(query).period
        else:
            args = TimerPeriodArgs.read(query)
            due, period = args.due, args.period
        super().__init__(due, downstream)
        self._period: timedelta = period

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._next_due)
        writer.write(self._fired)
        writer.write(self._delivered)
        self._save_number(writer)

    def load_state_core(self, reader: StateReader) -> None:
        self.load_older_state_core(reader, (1,))
        self._number = read_number(reader)

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        # (1,) is (2,) without the last field
        self._next_due = next_due = reader.read_optional_datetime("next due", *self._due_bounds())
        due, period = self._due, self._period
        # the ticks of an absolute first due time keep its phase
        if isinstance(due, datetime) and next_due not in (None, MAX_TIME) and (next_due - utc(due)) % period:
            raise reader.invalid("next due", f"the first due time plus whole periods of {period}", next_due)
        self._fired = reader.read_int("fired")
        self._delivered = reader.read_int("delivered", maximum=self._fired)

    def _due_bounds(self) -> tuple[datetime | None, datetime | None]:
        """The bounds of a saved next due time: from the first due time to a period after the clock (or the
        first due time, when that is later)."""
        due = self._due
        if not isinstance(due, datetime):
            return time_bounds(self.context, max(due, self._period))
        first = utc(due)
        _, latest = time_bounds(self.context, self._period)
        return first, None if latest is None else max(first, latest)

    def _first_due(self, now: datetime) -> datetime:
        due = self._due
        if isinstance(due, timedelta):
            return add_safe(now, max(due, _ZERO))
        behind = now - due
        if behind >= self._period:  # catch up: at most one past tick fires at once
            return due + self._period * (behind // self._period)
        return due

    def _armed_at(self, next_due: datetime) -> datetime | None:
        # after a tick, the next is armed as the last one fires, a period before it
        return add_safe(next_due, -self._period) if self._fired else super()._armed_at(next_due)

    def _due_ticks(self, now: datetime) -> int:
        next_due = self._next_due
        assert next_due is not None
        period = self._period
        count = 1 if now < next_due else (now - next_due) // period + 1
        self._next_due = add_safe(next_due, multiply_safe(period, count))
        return count
