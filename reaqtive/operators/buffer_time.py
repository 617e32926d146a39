"""``buffer`` on the clock: lists closed by time (duration, duration and shift), or by time or a count (the
builder, :func:`reaqtive.operators.buffer.buffer`, and the count forms are in :mod:`reaqtive.operators.buffer`)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from reaqtive.core.binding import register_operator
from reaqtive.core.context import OperatorContext
from reaqtive.core.errors import LimitExceededError
from reaqtive.core.expression import Expression
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.scheduler_interface import Scheduler
from reaqtive.core.streams import LONG_MAX, Subscriber, add_demand
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators._emitter import PullingEmitterBase
from reaqtive.operators._spans import ShiftedSpans, SpanClock, SpanTimeArgs, SpanTimeOrCountArgs, TickedSpans
from reaqtive.operators._timing import count_demand, deadline
from reaqtive.operators.buffer import buffer
from reaqtive.operators.keyed_steps import SKIP, KeyedStep, StepOperatorError, register_keyed_step
from reaqtive.operators.keyed_timed import US, TimedStep
from reaqtive.operators.settings import MAX_BUFFER_COUNT, MAX_BUFFER_SIZE, UNLIMITED, read_limit
from reaqtive.scheduler import ActionTask
from reaqtive.state.fields import time_bounds

__all__ = [
    "BufferTime",
    "BufferTimeArgs",
    "BufferTimeOrCount",
    "BufferTimeOrCountArgs",
    "BufferTimeShift",
    "BufferTimeStep",
    "bind_buffer_time",
    "buffer_time_step",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BufferTimeArgs(SpanTimeArgs):
    """The arguments of a ``buffer_time`` node: ``(source, duration, shift)`` (``shift == duration``: a list
    every ``duration``)."""

    span = "list"


@dataclass(frozen=True, slots=True)
class BufferTimeOrCountArgs(SpanTimeOrCountArgs):
    """The arguments of a ``buffer_time_or_count`` node: ``(source, duration, count)``."""


@register_operator("buffer_time", frames=4, builder=buffer, args=BufferTimeArgs)
def bind_buffer_time(query: Expression[Any], subscriber: Subscriber[Any]) -> SubscriptionHandle:
    """The binder of :func:`~reaqtive.operators.buffer.buffer` by duration (and shift): :class:`BufferTime`
    when ``shift == duration``, else :class:`BufferTimeShift`."""
    args = BufferTimeArgs.read(query)
    if args.shift == args.duration:
        return BufferTime(query, subscriber)
    return BufferTimeShift(query, subscriber)


class _TimeBuffer(SpanClock, PullingEmitterBase[T, list[T]], Generic[T]):
    """What the time-driven buffers share: the queue of closed lists, demand, the timer, and output through the
    serialized emitter of :mod:`reaqtive.operators._emitter` (timers, the source and ``request`` may run on
    different threads).

    The clock of the lists (absolute times, saved; a late timer catches up) is :mod:`reaqtive.operators._spans`.

    The upstream demand is state: what the upstream had been asked for is not a function of what a recovered
    downstream asks again (once everything was asked for, it stays asked for while the downstream has all it
    wanted; a list closed by time takes one list of demand but fewer than ``count`` elements). So a stage saves
    it and asks the upstream for it again when it starts (``_reasked``).

    Subclasses keep their open list(s) and times, and implement :meth:`_start_fresh` (the first open, at the
    subscription), ``_advance`` (close/open everything due by ``now``; under the lock) and ``_next_due``
    (:class:`~reaqtive.operators._spans.TickedSpans`, :class:`~reaqtive.operators._spans.ShiftedSpans`),
    :meth:`_close_all` (completion; under the lock) and save/load their own fields, then the base's
    (:meth:`_save_pending` / :meth:`_load_pending`).
    """

    __slots__ = (
        "_generation",
        "_max_buffers",
        "_max_size",
        "_number",
        "_restored",
        "_scheduler",
        "_source",
        "_timer_task",
    )

    def __init__(self, source: Subscribable[T], downstream: Subscriber[list[T]]) -> None:
        super().__init__(downstream)
        self._source = source
        # state
        self._restored = False
        # not state
        self._generation = 0  # the current timer; a timer of an earlier generation is stale
        self._timer_task: ActionTask | None = None
        self._number: int | None = None
        self._scheduler: Scheduler | None = None
        self._max_size = UNLIMITED
        self._max_buffers = UNLIMITED

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._scheduler = context.scheduler  # MissingSchedulerError without one: time needs a clock
        self._max_size = read_limit(context, MAX_BUFFER_SIZE)
        self._max_buffers = read_limit(context, MAX_BUFFER_COUNT)

    def _save_pending(self, writer: StateWriter) -> None:
        writer.write(list(self._pending))
        writer.write(self._source_done)

    def _load_pending(self, reader: StateReader, next_due: datetime | None) -> None:
        """Read the base's fields; ``next_due``: the subclass's time of its next close or open, which a stage
        that runs on (it started, its source did not complete) has."""
        self._pending = deque(reader.read_list("pending", of=list))  # closed lists of the user's elements
        self._source_done = reader.read_bool("source done")
        if next_due is None and not (self._source_done or self.is_disposed):
            raise reader.invalid("source done", "True when no list is due to close", self._source_done)
        self._restored = True

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    # -- subclass hooks (called with the lock held, except _start_fresh) --------------------------------------

    def _start_fresh(self, now: datetime) -> None:
        raise NotImplementedError

    def _halted(self) -> bool:
        return self._error is not None

    def _close_all(self) -> None:
        """The source completed: close the open lists (oldest first)."""
        raise NotImplementedError

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def on_start(self) -> None:
        if self._source_done:  # recovered while emitting the last lists: no source, no timer
            # A source that offered its subscription at subscribe time (a hot subject) is let go.
            upstream = self._upstream
            self._upstream_terminated()
            if upstream is not None:
                upstream.cancel()
        else:
            scheduler = self._scheduler
            assert scheduler is not None
            if not self._restored:
                self._start_fresh(scheduler.now)
            with self._lock:
                generation, due = self._generation, self._next_due()
                again, self._reasked = self._reasked, 0
            if again:
                self._request_upstream(again)  # what the upstream had been asked for at the checkpoint
            if self._restored:  # the timer goes back in line where it stood
                self._rearm(generation, due)
            else:
                self._schedule_timer(generation, due)
        self._running = True
        self._drain()

    def _on_timer(self, generation: int) -> None:
        if self._disposed:
            return  # muted: a disposed operator's timer may still run
        scheduler = self._scheduler
        assert scheduler is not None
        with self._lock:
            if self._source_done or self._error is not None or generation != self._generation:
                return
            self._advance(scheduler.now)
            failed = self._error is not None
            due = self._next_due()
        if not failed:
            self._schedule_timer(generation, due)
        self._drain()

    def _close(self, buffer: list[T]) -> None:
        """Queue a closed list for emission (lock held). More than ``max_pending`` lists beyond the outstanding
        demand is an overflow: the clock outran the downstream."""
        pending = self._pending
        if len(pending) + 1 - self._demand > self._max_pending:
            self._queue_overflow(self._max_pending)
            return
        pending.append(buffer)
        self._state.changed = True

    def _size_exceeded(self) -> None:
        """A list would exceed ``MAX_BUFFER_SIZE`` (lock held)."""
        self._set_error(LimitExceededError(self.name, MAX_BUFFER_SIZE, self._max_size))

    # -- from upstream -----------------------------------------------------------------------------------------

    def on_complete(self) -> None:
        self._upstream_terminated()
        with self._lock:
            if self._error is None and not self._source_done:
                self._close_all()
                self._source_done = True
                self._state.changed = True
        self._drain()



class _TickBuffer(TickedSpans, _TimeBuffer[T], Generic[T]):
    """One open list, closed every ``duration`` (by :class:`BufferTime`, and by :class:`BufferTimeOrCount` also
    at ``count``): the fields, their save and load, and the ticks they share.

    The saved fields are the open list, the absolute time it closes (``next tick``), then the base's; the
    subclasses write their own after them.
    """

    __slots__ = ("_buffer", "_duration", "_next_tick")

    def __init__(self, source: Subscribable[T], duration: timedelta, downstream: Subscriber[list[T]]) -> None:
        super().__init__(source, downstream)
        self._duration = duration
        self._buffer: list[T] = []
        self._next_tick: datetime | None = None

    def _save_tick(self, writer: StateWriter) -> None:
        writer.write(self._buffer)
        writer.write(self._next_tick)
        self._save_pending(writer)

    def _load_tick(self, reader: StateReader, below: int | None = None) -> None:
        """Read what :meth:`_save_tick` wrote; ``below``: the open list must be shorter (it closes at that)."""
        self._buffer = reader.read_list("buffer")  # the user's elements
        if below is not None and len(self._buffer) >= below:
            raise reader.invalid("buffer", f"a partial list: fewer than {below} elements", self._buffer)
        self._next_tick = reader.read_optional_datetime("next tick", *time_bounds(self.context, self._duration))
        self._load_pending(reader, self._next_tick)

    def _start_fresh(self, now: datetime) -> None:
        self._next_tick = deadline(now, self._duration)  # NEVER past datetime.max: no close by time

    def _roll(self) -> bool:
        self._close(self._buffer)
        self._buffer = []
        return self._error is None

    def _close_all(self) -> None:
        self._close(self._buffer)
        self._buffer = []


class BufferTime(_TickBuffer[T], Generic[T]):
    """The running stage of :func:`~reaqtive.operators.buffer.buffer` by duration: a list every ``duration``,
    from the subscription on. State version 2 adds whether the upstream was asked for everything, version 3
    the timer's number among the timers armed in its tick (its place in line after a restart); versions 1 and 2
    still load, as "not asked" and a timer in line after the others of its tick.
    """

    name = "reaqtive:buffer/time"
    version: Version = (3,)
    older_versions = frozenset({(1,), (2,)})

    __slots__ = ()

    def __init__(self, query: Expression[Any], downstream: Subscriber[list[T]]) -> None:
        args = BufferTimeArgs.read(query)
        super().__init__(args.source, args.duration, downstream)

    def save_state_core(self, writer: StateWriter) -> None:
        self._save_tick(writer)
        writer.write(self._pulled)
        writer.write(self._timer_number())

    def load_state_core(self, reader: StateReader) -> None:
        self.load_older_state_core(reader, (2,))
        self._load_number(reader)

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        # (1,) is (2,) without the last field, (2,) is (3,) without the last field
        self._load_tick(reader)
        if version != (1,):
            self._load_pulled(reader.read_bool("pulled"))

    def on_next(self, value: T) -> None:
        lock = self._lock
        lock.acquire()  # acquire/release: a third of the cost of ``with`` on CPython 3.11
        try:
            buffer = self._buffer
            if len(buffer) < self._max_size:
                buffer.append(value)
                self._state.changed = True
                return
            self._size_exceeded()
        finally:
            lock.release()
        self._drain()


class BufferTimeShift(ShiftedSpans, _TimeBuffer[T], Generic[T]):
    """The running stage of :func:`~reaqtive.operators.buffer.buffer` by duration and shift (``shift !=
    duration``): a list opens every ``shift`` (the first at the subscription) and closes ``duration`` after it
    opened; a close comes before an open at the same instant. Lists overlap when ``shift < duration`` and leave
    gaps (elements in no list are dropped) when ``shift > duration``.

    Only the time the next list opens is saved: the oldest list's close time follows from it
    (:class:`~reaqtive.operators._spans.ShiftedSpans`). State version 2 adds whether the upstream was asked for
    everything; version 3 when the timer was armed and its number among the timers armed in that tick (its
    place in line after a restart). Versions 1 and 2 still load, as "not asked" and a timer re-armed at the
    restart's tick.
    """

    name = "reaqtive:buffer/time+shift"
    version: Version = (3,)
    older_versions = frozenset({(1,), (2,)})

    __slots__ = ("_armed", "_buffers", "_duration", "_next_open", "_shift")

    def __init__(self, query: Expression[Any], downstream: Subscriber[list[T]]) -> None:
        args = BufferTimeArgs.read(query)
        super().__init__(args.source, downstream)
        self._duration = args.duration
        self._shift = args.shift
        self._buffers: deque[list[T]] = deque()
        self._next_open: datetime | None = None
        self._armed: datetime | None = None

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(list(self._buffers))
        writer.write(self._next_open)
        self._save_pending(writer)
        writer.write(self._pulled)
        writer.write(self._armed)
        writer.write(self._timer_number())

    def load_state_core(self, reader: StateReader) -> None:
        self.load_older_state_core(reader, (2,))
        running = self._next_open is not None and not self._source_done
        self._load_armed(reader, running, time_bounds(self.context))
        self._load_number(reader)

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        # (1,) is (2,) without the last field, (2,) is (3,) without the last field
        self._load_lists(reader)
        if version != (1,):
            self._load_pulled(reader.read_bool("pulled"))

    def _load_lists(self, reader: StateReader) -> None:
        """The fields every version has: the open lists, the next open, the closed lists, source done."""
        self._buffers = deque(reader.read_list("buffers", of=list))  # lists of the user's elements
        most = self._most_open()
        if len(self._buffers) > most:
            raise reader.invalid("buffers", f"at most {most} open lists", self._buffers)
        self._next_open = reader.read_optional_datetime("next open", *time_bounds(self.context, self._shift))
        self._load_pending(reader, self._next_open)

    def _start_fresh(self, now: datetime) -> None:
        self._next_open = now
        with self._lock:
            self._advance(now)

    def _open_count(self) -> int:
        return len(self._buffers)

    def _close_oldest(self) -> None:
        self._close(self._buffers.popleft())

    def _open_next(self, next_open: datetime) -> bool:
        if len(self._buffers) >= self._max_buffers:
            self._set_error(LimitExceededError(self.name, MAX_BUFFER_COUNT, self._max_buffers))
            return False
        self._buffers.append([])
        self._next_open = deadline(next_open, self._shift)
        return True

    def _close_all(self) -> None:
        buffers = self._buffers
        while buffers and self._error is None:
            self._close(buffers.popleft())

    def on_next(self, value: T) -> None:
        lock = self._lock
        lock.acquire()  # acquire/release: a third of the cost of ``with`` on CPython 3.11
        try:
            buffers = self._buffers
            if not buffers:
                return  # in a gap between lists
            if len(buffers[0]) < self._max_size:  # the oldest list is the longest
                for buffer in buffers:
                    buffer.append(value)
                self._state.changed = True
                return
            self._size_exceeded()
        finally:
            lock.release()
        self._drain()


@register_operator("buffer_time_or_count", frames=4, builder=buffer, args=BufferTimeOrCountArgs)
class BufferTimeOrCount(_TickBuffer[T], Generic[T]):
    """The running stage of :func:`~reaqtive.operators.buffer.buffer` by duration or count: a list closes when
    it holds ``count`` elements or ``duration`` after it opened, whichever comes first; a close by count opens
    the next list and restarts the timer from that instant (a new timer generation).

    State version 2 adds the elements requested upstream and not yet received, and the lists the downstream had
    requested and not yet received (``_credit``: the first lists a recovered downstream asks for again ask the
    upstream for nothing more), version 3 the timer's number among the timers armed in its tick (its place in
    line after a restart); versions 1 and 2 still load, as nothing outstanding and a timer in line after the
    others of its tick.
    """

    name = "reaqtive:buffer/time_or_count"
    version: Version = (3,)
    older_versions = frozenset({(1,), (2,)})

    __slots__ = ("_count", "_credit", "_requested")

    def __init__(self, query: Expression[Any], downstream: Subscriber[list[T]]) -> None:
        args = BufferTimeOrCountArgs.read(query)
        super().__init__(args.source, args.duration, downstream)
        self._count = args.count
        self._requested = 0  # elements requested upstream and not yet received
        self._credit = 0  # loaded downstream demand: lists the recovered downstream asks for again

    def save_state_core(self, writer: StateWriter) -> None:
        self._save_tick(writer)
        writer.write(self._requested)
        writer.write(add_demand(self._demand, self._credit))  # what the downstream will ask for again
        writer.write(self._timer_number())

    def load_state_core(self, reader: StateReader) -> None:
        self.load_older_state_core(reader, (2,))
        self._load_number(reader)

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        # (1,) is (2,) without the last two fields, (2,) is (3,) without the last field
        self._load_tick(reader, self._count)
        if version != (1,):
            self._requested = self._reasked = reader.read_int("requested")
            self._credit = reader.read_int("demand")

    def _upstream_demand(self, n: int) -> int:
        return count_demand(self, n)

    def on_next(self, value: T) -> None:
        scheduler = self._scheduler
        assert scheduler is not None
        lock = self._lock
        lock.acquire()  # acquire/release: a third of the cost of ``with`` on CPython 3.11
        try:
            buffer = self._buffer
            if len(buffer) >= self._max_size:
                self._size_exceeded()
                closed = False
            else:
                buffer.append(value)
                self._state.changed = True
                requested = self._requested
                if requested != LONG_MAX and requested:
                    self._requested = requested - 1
                if len(buffer) < self._count:
                    return
                self._close(buffer)
                self._buffer = []
                self._next_tick = due = deadline(scheduler.now, self._duration)
                self._generation = generation = self._generation + 1  # the previous list's timer is stale
                closed = self._error is None
        finally:
            lock.release()
        if closed:
            self._schedule_timer(generation, due)
        self._drain()


# -- keyed --------------------------------------------------------------------------------------------------------


class BufferTimeStep(TimedStep):
    """:class:`BufferTime` for one key of a keyed chain (``group_by(k).flat_map(lambda g: g.buffer(duration))``):
    the key's lists, every ``duration`` from its group's creation (Rx's alignment), empty ones too. The field is
    ``(the open list's end in microseconds from the epoch, the stage's sequence number, the open list)``, the
    list the key's own, appended to in place (see :mod:`reaqtive.operators.keyed_timed`)."""

    __slots__ = ("_duration", "_max_size")

    in_place = True
    since = 3  # (the keyed form with windows and time buffers: see keyed_steps.KEYED_FORM)

    def __init__(self, duration: int) -> None:
        self._duration = duration
        self._max_size = UNLIMITED

    def set_context(self, context: OperatorContext) -> None:
        self._max_size = read_limit(context, MAX_BUFFER_SIZE)

    @property
    def ahead(self) -> int:
        return self._duration

    def open(self, now: int, seq: int) -> Any:
        return (now + self._duration, seq, [])

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        buffer = state[2]
        if len(buffer) >= self._max_size:
            raise StepOperatorError(LimitExceededError(BufferTime.name, MAX_BUFFER_SIZE, self._max_size))
        buffer.append(value)
        return state, SKIP

    def tick(self, field: Any, now: int, seq: int) -> tuple[Any, list[Any]]:
        duration = self._duration
        due = field[0] + duration
        lists: list[Any] = [field[2]]
        while due <= now:  # the empty lists of the periods missed (a tick that ran late)
            lists.append([])
            due += duration
        return (due, seq, []), lists

    def complete(self, state: Any) -> tuple[Any, ...]:
        return (state[2],)

    def check(self, state: Any) -> bool:
        return (
            type(state) is tuple
            and len(state) == 3
            and type(state[0]) is int
            and type(state[1]) is int
            and state[1] >= 0
            and type(state[2]) is list
            and len(state[2]) <= self._max_size
        )


@register_keyed_step("buffer_time")
def buffer_time_step(query: Expression[Any]) -> KeyedStep | None:
    """The keyed step of a ``buffer_time`` node: lists every ``duration``; with a shift, the general path."""
    args = BufferTimeArgs.read(query)
    if args.shift != args.duration:
        return None
    return BufferTimeStep(args.duration // US)
