"""``window`` by time: inner streams closed on the clock (duration, duration and shift), or on the clock or a
count.

Three stages over one base, mirroring the time buffers (:mod:`reaqtive.operators.buffer_time`):

* :class:`WindowTime` (``window(duration)``): a window every ``duration``, the first at the subscription;
* :class:`WindowTimeShift` (``window(duration, shift)`` with ``shift != duration``): a window opens every
  ``shift`` (the first at the subscription) and completes ``duration`` after it opened; at an instant where one
  completes and one opens, the completion comes first;
* :class:`WindowTimeOrCount` (``window(duration, count)``): a window completes when it holds ``count`` elements
  or ``duration`` after it opened, whichever comes first; the next opens at once, and a completion by count
  restarts the timer from that instant.

As in Rx, windows open eagerly and are emitted even if they stay empty; when the source completes, the open
windows complete (oldest first), then the output. An element that arrives at the very instant a window closes
is still in that window (on virtual time, sources run before timers at equal times).

Times are absolute (``datetime``) and saved, so a recovered window closes when it would have; a timer that is
past due when it runs (after a pause, or a restart after downtime) catches up with every close it missed.

**Demand.** The clock does not wait for demand: windows that open without outer demand wait, with their
elements, bounded by ``MAX_QUEUE_SIZE`` (see :mod:`reaqtive.operators._inner_streams`). ``window(duration)`` and
``window(duration, shift)`` ask the upstream for everything (``LONG_MAX``) once the downstream has asked for
anything; ``window(duration, count)`` asks for ``n * count`` elements per ``n`` windows requested. Inside a
window, the subject's per-subscriber demand and bounded buffer apply.
"""

from __future__ import annotations

from collections import deque
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.binding import register_operator
from reaqtive.context import OperatorContext
from reaqtive.errors import LimitExceededError
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.operators._inner_streams import Inner, InnerStreamOperator
from reaqtive.operators._timing import add_safe
from reaqtive.operators.settings import MAX_WINDOW_COUNT, UNLIMITED, read_limit
from reaqtive.scheduler import ActionTask
from reaqtive.scheduling import Scheduler
from reaqtive.streams import LONG_MAX, Subscriber
from reaqtive.subjects import MultiSubject
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import InnerStream, Query

__all__ = ["WindowTime", "WindowTimeOrCount", "WindowTimeShift", "bind_window_time"]

T = TypeVar("T")


@register_operator("window_time")
def bind_window_time(query: Query[Any], subscriber: Subscriber[Any]) -> SubscriptionHandle:
    """The binder of ``Query.window(duration[, shift])``: arguments ``(source, duration, shift)``."""
    _, duration, shift = query.args
    if shift == duration:
        return WindowTime(query, subscriber)
    return WindowTimeShift(query, subscriber)


class _TimeWindow(InnerStreamOperator[T], Generic[T]):
    """What the time-driven windows share: the open windows, the timer and its generations.

    Subclasses implement :meth:`_start_fresh` (the first windows, at the subscription), :meth:`_advance`
    (close and open everything due by ``now``), :meth:`_next_due`, :meth:`_element`, and save/load their times
    after the base's inner streams.
    """

    kind = "window"

    __slots__ = ("_generation", "_max_windows", "_scheduler", "_windows")

    def __init__(self, query: Query[Any], downstream: Subscriber[InnerStream[Any]]) -> None:
        source = query.args[0]
        assert isinstance(source, Subscribable)
        super().__init__(source, downstream)
        self._windows: deque[Inner] = deque()  # the open windows, oldest first
        self._generation = 0  # the current timer; a timer of an earlier generation is stale
        self._scheduler: Scheduler | None = None
        self._max_windows = UNLIMITED

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._scheduler = context.scheduler  # MissingSchedulerError without one: time needs a clock
        self._max_windows = read_limit(context, MAX_WINDOW_COUNT)

    def _load_windows(self, reader: StateReader) -> None:
        self._load_inners(reader)
        self._windows = deque(self._open_inners())

    # -- subclass hooks ----------------------------------------------------------------------------------------

    def _start_fresh(self, now: datetime) -> None:
        raise NotImplementedError

    def _advance(self, now: datetime) -> None:
        """Close and open every window due by ``now``."""
        raise NotImplementedError

    def _next_due(self) -> datetime:
        raise NotImplementedError

    # -- the timer ---------------------------------------------------------------------------------------------

    def _now(self) -> datetime:
        scheduler = self._scheduler
        assert scheduler is not None
        return scheduler.now

    def _begin(self) -> None:
        if not self._loaded:
            self._start_fresh(self._now())
        if not (self._terminated or self._source_done):  # no timer once the source is done
            self._schedule_timer(self._generation, self._next_due())

    def _schedule_timer(self, generation: int, due: datetime) -> None:
        scheduler = self._scheduler
        assert scheduler is not None
        scheduler.schedule(ActionTask(self._on_timer, generation), due=due)

    def _on_timer(self, generation: int) -> None:
        if self._disposed:
            return  # muted: a disposed operator's timer may still run
        self._serialize(self._timer_action, generation)

    def _timer_action(self, generation: int) -> None:
        if self._terminated or self._source_done or generation != self._generation:
            return
        self._advance(self._now())
        if not (self._terminated or self._disposed):
            self._schedule_timer(generation, self._next_due())

    # -- windows -----------------------------------------------------------------------------------------------

    def _open_window(self) -> bool:
        windows = self._windows
        if len(windows) >= self._max_windows:
            self._fail(LimitExceededError(self.name, MAX_WINDOW_COUNT, self._max_windows))
            return False
        window = self._new_inner(None)
        windows.append(window)
        return self._open(window)

    def _close_all(self) -> None:
        windows = self._windows
        while windows and not self._terminated:
            self._end(windows.popleft())

    def _forget_all(self) -> None:
        self._windows.clear()

    def _make_stream(self, inner: Inner, subject: MultiSubject[Any, Any], stream_id: str | None) -> InnerStream[Any]:
        from reaqtive.query import InnerStream  # the query layer builds on the operators' registry

        return InnerStream(subject, stream_id)


class WindowTime(_TimeWindow[T], Generic[T]):
    """The running stage of ``Query.window(duration)``: a window every ``duration``, from the subscription on.

    State: the inner streams (counter, the open window, windows waiting for demand with their elements), the
    absolute time the open window closes. Demand: see :mod:`reaqtive.operators.window_time`. Limits:
    ``MAX_QUEUE_SIZE``.
    """

    name = "reaqtive:window/time"
    version: Version = (1,)

    __slots__ = ("_duration", "_next_tick")

    def __init__(self, query: Query[Any], downstream: Subscriber[InnerStream[Any]]) -> None:
        super().__init__(query, downstream)
        _, duration, _ = query.args
        assert isinstance(duration, timedelta)
        self._duration = duration
        self._next_tick: datetime | None = None

    def save_state_core(self, writer: StateWriter) -> None:
        with self._lock:
            self._save_inners(writer)
            writer.write(self._next_tick)

    def load_state_core(self, reader: StateReader) -> None:
        self._load_windows(reader)
        self._next_tick = reader.read()

    def _start_fresh(self, now: datetime) -> None:
        self._next_tick = add_safe(now, self._duration)
        self._open_window()

    def _next_due(self) -> datetime:
        assert self._next_tick is not None
        return self._next_tick

    def _advance(self, now: datetime) -> None:
        windows = self._windows
        next_tick = self._next_tick
        assert next_tick is not None
        while next_tick <= now and not (self._terminated or self._disposed):
            if windows:
                self._end(windows.popleft())
            next_tick = add_safe(next_tick, self._duration)
            self._next_tick = next_tick
            self._state.changed = True
            if not self._open_window():
                return

    def _element(self, value: T) -> None:
        if self._terminated:
            return
        windows = self._windows
        if windows:
            self._push(windows[0], value)


class WindowTimeShift(_TimeWindow[T], Generic[T]):
    """The running stage of ``Query.window(duration, shift)`` with ``shift != duration``: a window opens every
    ``shift`` (the first at the subscription) and completes ``duration`` after it opened; a completion comes
    before an opening at the same instant. Windows overlap when ``shift < duration`` and leave gaps (elements
    in no window are dropped) when ``shift > duration``.

    State: the inner streams (counter, the open windows, windows waiting for demand with their elements), the
    absolute time the next window opens (the oldest window's close follows from it: windows open ``shift``
    apart and all last ``duration``). Limits: ``MAX_WINDOW_COUNT`` (at most ``ceil(duration / shift)`` windows
    are open at once), ``MAX_QUEUE_SIZE``.
    """

    name = "reaqtive:window/time+shift"
    version: Version = (1,)

    __slots__ = ("_duration", "_next_open", "_shift")

    def __init__(self, query: Query[Any], downstream: Subscriber[InnerStream[Any]]) -> None:
        super().__init__(query, downstream)
        _, duration, shift = query.args
        assert isinstance(duration, timedelta) and isinstance(shift, timedelta)
        self._duration = duration
        self._shift = shift
        self._next_open: datetime | None = None

    def save_state_core(self, writer: StateWriter) -> None:
        with self._lock:
            self._save_inners(writer)
            writer.write(self._next_open)

    def load_state_core(self, reader: StateReader) -> None:
        self._load_windows(reader)
        self._next_open = reader.read()

    def _next_close(self) -> datetime | None:
        """When the oldest open window closes (``None`` when none is open)."""
        if not self._windows:
            return None
        assert self._next_open is not None
        return self._next_open - self._shift * len(self._windows) + self._duration

    def _start_fresh(self, now: datetime) -> None:
        self._next_open = now
        self._advance(now)

    def _next_due(self) -> datetime:
        assert self._next_open is not None
        close = self._next_close()
        return self._next_open if close is None else min(close, self._next_open)

    def _advance(self, now: datetime) -> None:
        windows = self._windows
        while not (self._terminated or self._disposed):
            next_open = self._next_open
            assert next_open is not None
            close = self._next_close()
            if close is not None and close <= now and close <= next_open:  # the close first at equal times
                self._end(windows.popleft())
            elif next_open <= now:
                self._next_open = add_safe(next_open, self._shift)
                if not self._open_window():
                    return
            else:
                break
        self._state.changed = True

    def _element(self, value: T) -> None:
        if self._terminated:
            return
        for window in self._windows:
            if not self._push(window, value):
                return


@register_operator("window_time_or_count")
class WindowTimeOrCount(_TimeWindow[T], Generic[T]):
    """The running stage of ``Query.window(duration, count)``: a window completes when it holds ``count``
    elements or ``duration`` after it opened, whichever comes first; the next window opens at once, and a
    completion by count restarts the timer from that instant.

    State: the inner streams (counter, the open window, windows waiting for demand with their elements), the
    elements in the open window, the absolute time it closes by time. Demand: ``n`` windows ask the upstream
    for ``n * count`` elements (``LONG_MAX`` stays unbounded); windows closed by time wait for demand like the
    others. Limits: ``MAX_QUEUE_SIZE``.
    """

    name = "reaqtive:window/time_or_count"
    version: Version = (1,)

    __slots__ = ("_count", "_duration", "_filled", "_next_tick")

    def __init__(self, query: Query[Any], downstream: Subscriber[InnerStream[Any]]) -> None:
        super().__init__(query, downstream)
        _, duration, count = query.args
        assert isinstance(duration, timedelta) and isinstance(count, int)
        self._duration = duration
        self._count = count
        self._filled = 0  # elements in the open window
        self._next_tick: datetime | None = None

    def save_state_core(self, writer: StateWriter) -> None:
        with self._lock:
            self._save_inners(writer)
            writer.write(self._filled)
            writer.write(self._next_tick)

    def load_state_core(self, reader: StateReader) -> None:
        self._load_windows(reader)
        self._filled = reader.read()
        self._next_tick = reader.read()

    def _upstream_amount(self, n: int) -> int:
        count = self._count
        return LONG_MAX if n >= LONG_MAX // count else n * count

    def _recovered_amount(self) -> int:
        # The open window, if it was emitted before the restart, was requested then: what it can still take.
        windows = self._windows
        if windows and windows[0].held is None:
            return self._count - self._filled
        return 0

    def _start_fresh(self, now: datetime) -> None:
        self._next_tick = add_safe(now, self._duration)
        self._open_window()

    def _next_due(self) -> datetime:
        assert self._next_tick is not None
        return self._next_tick

    def _roll(self) -> bool:
        """Complete the open window and open the next."""
        windows = self._windows
        if windows:
            self._end(windows.popleft())
        self._filled = 0
        self._state.changed = True
        if self._terminated or self._disposed:
            return False
        return self._open_window()

    def _advance(self, now: datetime) -> None:
        next_tick = self._next_tick
        assert next_tick is not None
        while next_tick <= now and not (self._terminated or self._disposed):
            next_tick = add_safe(next_tick, self._duration)
            self._next_tick = next_tick
            if not self._roll():
                return

    def _element(self, value: T) -> None:
        if self._terminated:
            return
        windows = self._windows
        if not windows or not self._push(windows[0], value):
            return
        self._filled += 1
        self._state.changed = True
        if self._filled == self._count:
            self._next_tick = due = add_safe(self._now(), self._duration)
            self._generation = generation = self._generation + 1  # the previous window's timer is stale
            if self._roll():
                self._schedule_timer(generation, due)
