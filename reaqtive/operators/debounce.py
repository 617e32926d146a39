"""``debounce``: emit an element only once a quiet period followed it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import ArgsRecord, arguments, require_duration
from reaqtive.core.binding import register_operator
from reaqtive.core.context import OperatorContext
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.scheduler_interface import Scheduler
from reaqtive.core.streams import LONG_MAX, Subscriber, Subscription, require_not_none
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators._emitter import COMPLETE, IDLE, UnaryEmitterBase
from reaqtive.operators._inner_subscriptions import InnerHost, needs_environment_error, selected_source
from reaqtive.operators._places import number_of, read_number
from reaqtive.operators._timing import add_safe
from reaqtive.scheduler import ActionTask
from reaqtive.state.fields import time_bounds

__all__ = ["Debounce", "DebounceArgs", "DebounceSelector", "debounce"]

T = TypeVar("T")

_NOT_A_DURATION = "a timedelta >= 0, or a function returning a query"


def debounce(duration: timedelta | Callable[[Any], Subscribable[Any]]) -> OperatorCall[Any]:
    """Emit an element only once ``duration`` passed without a newer one (Rx ``Throttle``/``debounce``); or,
    with a function, once the query ``duration(element)`` emits or completes.

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
    pending element, then completes; its error drops it and goes downstream at once. A ``timedelta`` needs a
    scheduler (a timer of the scheduler, no inner subscription); ``duration(element)`` is an inner
    subscription, hosted by the environment when there is one: its first element or its completion ends the
    wait, its error ends the result, and a stale duration query's signals are ignored. A negative duration is
    refused. An exception from ``duration(element)`` (or a result that is not a query) ends the result, or, under
    a skip policy, skips the element: the pending one stays pending, with its duration query.

    **State.** The pending element, its absolute due time and timer (a recovered query re-arms the timer as it
    stood, so the element goes out when, and in the order, it would have) or its number (the id of its duration
    query) and whether that query is live, an element waiting for demand, and whether this source completed.
    Hosted, the duration query's own state (a timer's due time, say) is a unit of the environment under the id
    ``<prefix>/<n>`` (the n-th element), restored when the recovered query re-creates it from the saved pending
    element; standalone, checkpointing while a duration query is live is an error.

    **Demand.** This source is asked without bound (debouncing must see every element to know which is the
    last). At most one debounced element waits for downstream demand; a newer one replaces it (as
    ``sample``). The duration query is asked for one element.

    Reaqtive: Throttle.
    """
    if isinstance(duration, timedelta):
        duration = require_duration(duration, "debounce", "duration")
        if duration < timedelta(0):
            raise ValueError(f"debounce: duration must not be negative, got {duration}")
        return OperatorCall("debounce", (duration,))
    if not callable(duration):
        raise TypeError(
            f"debounce: duration must be a timedelta or a function returning a query, got {type(duration).__name__}"
        )
    return OperatorCall("debounce", (duration,))


@dataclass(frozen=True, slots=True)
class DebounceArgs(ArgsRecord):
    """The arguments of a ``debounce`` node: ``(source, duration)``, a ``timedelta`` or a function."""

    source: Subscribable[Any]
    duration: timedelta | Callable[[Any], Any]
    checks = ("source", "duration_or_function")


@register_operator("debounce", frames=20, builder=debounce, args=DebounceArgs)
def _bind_debounce(query: Expression[Any], downstream: Subscriber[Any]) -> _DebounceBase[Any]:
    """``debounce(duration)`` or ``debounce(duration_selector)``: one expression operator, two stages."""
    if isinstance(DebounceArgs.read(query).duration, timedelta):
        return Debounce(query, downstream)
    return DebounceSelector(query, downstream)


class _DebounceBase(UnaryEmitterBase[T, T], Generic[T]):
    """What both forms share: the pending element, the element waiting for demand, completion and delivery.

    Signals are serialized by the emitter (:mod:`reaqtive.operators._emitter`): the one waiting element is its
    queue. Both forms write this state first: whether an element is pending and which, whether a debounced
    element waits for demand and which, whether the source completed.
    """

    __slots__ = ("_has_pending", "_has_ready", "_pending", "_ready", "_source", "_source_done")

    def __init__(self, args: DebounceArgs, downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        self._source: Subscribable[T] = args.source
        self._pending: T | None = None
        self._has_pending = False
        self._ready: T | None = None  # debounced, waiting for demand
        self._has_ready = False
        self._source_done = False

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._has_pending)
        writer.write(self._pending)
        writer.write(self._has_ready)
        writer.write(self._ready)
        writer.write(self._source_done)

    def load_state_core(self, reader: StateReader) -> None:
        self._has_pending = reader.read_bool("has pending")
        self._pending = reader.read()  # the user's element
        self._has_ready = reader.read_bool("has ready")
        self._ready = reader.read()  # the user's element
        self._source_done = reader.read_bool("source done")
        if self._has_pending and self._source_done:
            raise reader.invalid("has pending", "False once the source completed (it debounces the pending one)",
                                 self._has_pending)

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_start(self) -> None:
        with self._lock:
            self._running = True
        self._request_upstream(LONG_MAX)  # the source, without bound: handed over when its subscription arrives
        self._drain()

    # -- the source ----------------------------------------------------------------------------------------------

    def on_complete(self) -> None:
        self._upstream_terminated()
        with self._lock:
            if self._source_done:
                return
            self._source_done = True
            self._flush()
        self._state.changed = True
        self._stop_waiting()
        self._drain()

    def _flush(self) -> None:
        """The pending element is debounced (lock held): it waits for demand, replacing an older one."""
        if self._has_pending:
            self._ready, self._has_ready = self._pending, True
            self._pending, self._has_pending = None, False

    def _stop_waiting(self) -> None:
        """The source completed: stop waiting for the quiet period (the pending element went out)."""

    # -- delivery: the emitter's hooks -------------------------------------------------------------------------

    def _poll(self) -> Any:
        if self._has_ready and self._demand:
            value, self._ready, self._has_ready = self._ready, None, False
            if self._demand != LONG_MAX:
                self._demand -= 1
            return value
        if self._source_done and not self._has_ready:
            return COMPLETE
        return IDLE

    def _deliver(self, item: Any) -> None:
        self._state.changed = True
        self._downstream.on_next(item)


class Debounce(_DebounceBase[T], Generic[T]):
    """The running stage of :func:`debounce` by time: a scheduler timer, no inner subscription.

    Each element becomes the pending one, due ``duration`` later (an absolute time from ``scheduler.now``). One
    timer is armed per quiet period, not one per element: when it fires early (a newer element moved the due
    time), it re-arms for the new due time.

    The timer task itself is saved (when it is due, when it was armed, its number among the timers armed in
    that tick): a recovered stage re-arms it as it stood, early fire included, in its place in line among the
    timers of its instant (see :class:`reaqtive.scheduler.ActionTask`'s ``armed`` and ``arrival``). State
    version 2 adds it; version 1 still loads, its timer re-armed at the due time at the restart's tick (as that
    release did).
    """

    name = "reaqtive:debounce"
    version: Version = (2,)
    older_versions = frozenset({(1,)})
    state_fields = ("has_pending", "pending", "has_ready", "ready", "source_done", "due", "timer_due",
                    "timer_armed", "timer_number")

    __slots__ = ("_due", "_duration", "_number", "_scheduler", "_task", "_timer")

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        args = DebounceArgs.read(query)
        super().__init__(args, downstream)
        duration = args.duration
        if not isinstance(duration, timedelta):  # a query bound to the wrong stage
            arguments(query, "source", "duration").fail(1, "a timedelta >= 0")
        self._duration = duration
        self._due: datetime | None = None
        # the scheduled timer task: (due, armed at; None until a version 1 state starts), None when none is
        self._timer: tuple[datetime, datetime | None] | None = None
        self._task: ActionTask | None = None  # the timer's task: the scheduler tells it its place in line
        self._number: int | None = None  # a loaded timer's place in its armed tick, until on_start re-arms it
        self._scheduler: Scheduler | None = None

    def save_state_core(self, writer: StateWriter) -> None:
        with self._lock:
            super().save_state_core(writer)
            writer.write(self._due)
            timer = self._timer if self._has_pending else None  # (a timer with nothing pending does nothing)
            writer.write(None if timer is None else timer[0])
            writer.write(None if timer is None else timer[1])
            writer.write(None if timer is None else number_of(self._task))

    def load_state_core(self, reader: StateReader) -> None:
        self.load_older_state_core(reader, (1,))
        bounds = time_bounds(self.context, self._duration)
        timer_due = reader.read_optional_datetime("timer due", *bounds)
        armed = reader.read_optional_datetime("timer armed", *time_bounds(self.context))
        number = read_number(reader)
        if (timer_due is None or armed is None) == self._has_pending:
            raise reader.invalid("timer due", "a time exactly while an element is pending", timer_due)
        if timer_due is not None and armed is not None:
            assert self._due is not None
            if not armed <= timer_due <= self._due:
                raise reader.invalid("timer due", f"armed ({armed}) <= timer due <= due ({self._due})", timer_due)
            self._timer = (timer_due, armed)
            self._number = number

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        # (1,) is (2,) without the timer: it is re-armed at the due time
        super().load_state_core(reader)
        self._due = reader.read_optional_datetime("due", *time_bounds(self.context, self._duration))
        if (self._due is None) == self._has_pending:
            raise reader.invalid("due", "a time exactly while an element is pending", self._due)
        self._timer = None if self._due is None else (self._due, None)

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._scheduler = context.scheduler  # raises MissingSchedulerError: the quiet period needs a clock

    def on_start(self) -> None:
        timer = self._timer
        if self._has_pending and timer is not None:  # recovered while an element was pending
            due, armed = timer
            if armed is None:  # a version 1 state: armed now
                scheduler = self._scheduler
                assert scheduler is not None
                self._timer = (due, scheduler.now)
                self._state.changed = True
            self._arm(due, armed, self._number)
        super().on_start()

    def on_next(self, value: T) -> None:
        scheduler = self._scheduler
        assert scheduler is not None
        with self._lock:
            if self._source_done or self._disposed:
                return
            self._pending, self._has_pending = value, True
            now = scheduler.now
            due = self._due = add_safe(now, self._duration)
            arm = self._timer is None
            if arm:
                self._timer = (due, now)
        self._state.changed = True
        if arm:
            self._arm(due)

    def _arm(self, due: datetime, armed: datetime | None = None, number: int | None = None) -> None:
        scheduler = self._scheduler
        assert scheduler is not None
        task = self._task = ActionTask(self._fire, armed=armed, arrival=number)
        scheduler.schedule(task, due)

    def _fire(self) -> None:
        scheduler = self._scheduler
        assert scheduler is not None
        with self._lock:
            if self._disposed:
                return
            due = self._due
            if not self._has_pending or due is None:
                self._timer = None
                return
            now = scheduler.now
            if now < due:
                rearm = True  # a newer element moved the due time: wait for it
                self._timer = (due, now)
            else:
                rearm = False
                self._timer = None
                self._flush()
                self._due = None
        self._state.changed = True
        if rearm:
            self._arm(due)
            return
        self._drain()

    def _stop_waiting(self) -> None:
        with self._lock:
            self._due = None


class DebounceSelector(_DebounceBase[T], Generic[T]):
    """The running stage of :func:`debounce` by a duration query.

    Each element becomes the pending one and opens its duration query, ``duration_selector(element)``, as the
    inner subscription number ``n`` (the n-th element), through :class:`InnerHost`
    (:mod:`reaqtive.operators._inner_subscriptions`), disposing (deleting) the previous one. The pending
    element's number is one less than the count of elements seen, so the count is all the state needs.
    """

    name = "reaqtive:debounce+selector"
    version: Version = (1,)
    state_fields = ("has_pending", "pending", "has_ready", "ready", "source_done", "count", "has_inner")

    __slots__ = ("_count", "_has_inner", "_host", "_selector")

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        args = DebounceArgs.read(query)
        super().__init__(args, downstream)
        selector = args.duration
        if isinstance(selector, timedelta):  # a query bound to the wrong stage
            arguments(query, "source", "duration").fail(1, _NOT_A_DURATION)
        self._selector: Callable[[T], Any] = selector
        self._count = 0  # elements seen: the pending element is number count - 1
        self._has_inner = False  # the pending element's duration query is live
        self._host: InnerHost | None = None

    def save_state_core(self, writer: StateWriter) -> None:
        with self._lock:
            if self._has_inner and not self._hosted:
                raise needs_environment_error("debounce")
            super().save_state_core(writer)
            writer.write(self._count)
            writer.write(self._has_inner)

    def load_state_core(self, reader: StateReader) -> None:
        super().load_state_core(reader)
        self._count = reader.read_int("count")
        self._has_inner = reader.read_bool("has inner")
        if self._has_inner and not (self._has_pending and self._count):
            raise reader.invalid("has inner", "False unless an element is pending", self._has_inner)
        if self._has_inner and not self._hosted:
            raise needs_environment_error("debounce")

    @property
    def _hosted(self) -> bool:
        return self._host is not None and self._host.hosted

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._host = InnerHost(context, "debounce")

    def on_start(self) -> None:
        if self._has_inner and self._has_pending:
            # Recovered while the pending element waited for its duration query: re-create it (hosted, it loads
            # its own saved state). Before the base starts delivering, so a query that ends at once is seen.
            self._open(self._count - 1, self._pending, restoring=True)  # type: ignore[arg-type]
        super().on_start()

    def on_dispose(self) -> None:
        self._stop_waiting()  # (the live duration query ends with the stage)

    def on_next(self, value: T) -> None:
        ended = self._source_done or self._disposed  # (a late element: no selector call)
        if ended:
            return
        try:  # selected first: an element the error policy skips changes nothing
            source = selected_source("debounce", self._selector(value))
        except Exception as error:
            self._user_error(error, value)
            return
        with self._lock:
            if self._source_done or self._disposed:
                return
            previous = self._count - 1 if self._has_inner else None
            number = self._count
            self._count = number + 1
            self._pending, self._has_pending = value, True
            self._has_inner = True
        self._state.changed = True
        host = self._host
        assert host is not None
        if previous is not None:
            host.delete(previous)
        self._open(number, value, source)

    def _open(
        self, number: int, value: T, source: Subscribable[Any] | None = None, *, restoring: bool = False
    ) -> None:
        """Subscribe to the duration query of element ``number`` (``source``, or selected now: a restored
        element, whose selector raising now stops the query whatever the error policy)."""
        host = self._host
        assert host is not None
        try:
            if source is None:
                source = selected_source("debounce", self._selector(value))
            host.subscribe(number, source, _DurationObserver(self, number), restoring=restoring)
        except Exception as error:
            self._fail(error)

    def _stop_waiting(self) -> None:
        """The duration query of the pending element, if live, is deleted."""
        with self._lock:
            live, self._has_inner = self._has_inner, False
        if live and self._host is not None:
            self._host.delete(self._count - 1)

    # -- the duration query --------------------------------------------------------------------------------------

    def _is_current(self, number: int) -> bool:
        """Whether ``number`` is the pending element's live duration query (lock held)."""
        return self._has_inner and number == self._count - 1 and not self._disposed

    def _duration_ended(self, number: int) -> None:
        with self._lock:
            if not self._is_current(number):
                return  # stale: replaced by a newer element, or the source completed
            self._has_inner = False
            self._flush()
        self._state.changed = True
        host = self._host
        assert host is not None
        host.delete(number)
        self._drain()

    def _duration_error(self, number: int, error: BaseException) -> None:
        with self._lock:
            current = self._is_current(number)
        if current:
            self._fail(error)


class _DurationObserver(Subscriber[Any]):
    """The subscriber of one duration query: its first element or completion ends the wait."""

    __slots__ = ("_number", "_parent", "_subscribed")

    def __init__(self, parent: DebounceSelector[Any], number: int) -> None:
        self._parent = parent
        self._number = number
        self._subscribed = False

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "subscription", "2.13")
        if self._subscribed:
            subscription.cancel()  # rule 2.5
            return
        self._subscribed = True
        subscription.request(1)

    def on_next(self, value: Any) -> None:
        self._parent._duration_ended(self._number)

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "error", "2.13")
        self._parent._duration_error(self._number, error)

    def on_complete(self) -> None:
        self._parent._duration_ended(self._number)
