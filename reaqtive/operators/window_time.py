"""``window`` by time: inner streams closed on the clock (duration, duration and shift), or on the clock or a
count; the builder and the count form are in :mod:`reaqtive.operators.window`."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import ArgsRecord, Arguments
from reaqtive.core.binding import register_operator
from reaqtive.core.context import OperatorContext
from reaqtive.core.expression import Expression, InnerStreamNode
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.scheduler_interface import Scheduler
from reaqtive.core.streams import LONG_MAX, Subscriber, add_demand
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators._timing import MAX_SPAN, add_safe, count_demand, earlier, multiply_safe
from reaqtive.operators.window import WindowsStage, window
from reaqtive.scheduler import ActionTask
from reaqtive.state.fields import time_bounds

__all__ = [
    "WindowTime",
    "WindowTimeArgs",
    "WindowTimeOrCount",
    "WindowTimeOrCountArgs",
    "WindowTimeShift",
    "bind_window_time",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class WindowTimeArgs(ArgsRecord):
    """The arguments of a ``window_time`` node: ``(source, duration, shift)``."""

    source: Subscribable[Any]
    duration: timedelta
    shift: timedelta
    checks = ("source", "positive_duration", "positive_duration")

    def validate(self, args: Arguments) -> None:
        if self.shift != self.duration and self.shift > MAX_SPAN:
            args.fail(2, f"at most {MAX_SPAN.days} days (a longer shift never opens a second window)")


@dataclass(frozen=True, slots=True)
class WindowTimeOrCountArgs(ArgsRecord):
    """The arguments of a ``window_time_or_count`` node: ``(source, duration, count)``."""

    source: Subscribable[Any]
    duration: timedelta
    count: int
    checks = ("source", "positive_duration", "positive_count")


@register_operator("window_time", frames=8, builder=window, args=WindowTimeArgs)
def bind_window_time(query: Expression[Any], subscriber: Subscriber[Any]) -> SubscriptionHandle:
    """The binder of :func:`~reaqtive.operators.window.window` by time: :class:`WindowTime`, or
    :class:`WindowTimeShift` with a shift."""
    args = WindowTimeArgs.read(query)
    if args.shift == args.duration:
        return WindowTime(query, subscriber)
    return WindowTimeShift(query, subscriber)


class _TimeWindow(WindowsStage[T], Generic[T]):
    """What the time-driven windows share: the open windows (:class:`~reaqtive.operators.window.WindowsStage`),
    the timer and its generations; the shared rules of
    inner subjects are in :mod:`reaqtive.operators._inner_subjects`.

    Times are absolute and saved, so a recovered window closes when it would have; a timer that is past due
    when it runs (after a pause, or a restart after downtime) catches up with every close it missed. The clock
    does not wait for demand: windows that open without outer demand wait, with their elements.

    Subclasses implement :meth:`_start_fresh` (the first windows, at the subscription), :meth:`_advance`
    (close and open everything due by ``now``), :meth:`_next_due`, :meth:`_element`, and save/load their times
    after the base's inner streams.
    """

    __slots__ = ("_generation", "_scheduler")

    def __init__(self, source: Subscribable[T], downstream: Subscriber[InnerStreamNode[Any]]) -> None:
        super().__init__(source, downstream)
        self._generation = 0  # the current timer; a timer of an earlier generation is stale
        self._scheduler: Scheduler | None = None

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._scheduler = context.scheduler  # MissingSchedulerError without one: time needs a clock

    def _load_windows(self, reader: StateReader, least: int, most: int) -> None:
        """Read the inner streams: ``least`` to ``most`` windows are open while the stage runs on, none once its
        source completed."""
        self._load_inners(reader)
        self._windows = deque(self._open_inners())
        if self._source_done or self.is_disposed:
            least = 0
        if not least <= len(self._windows) <= most:
            raise reader.invalid("inners", f"{least} to {most} open windows", len(self._windows))

    def _load_next_due(self, reader: StateReader, field: str, ahead: timedelta) -> datetime | None:
        """Read the time of the next close or open, ``ahead`` of the clock at most (only a stage that does not
        run on may lack it)."""
        due = reader.read_optional_datetime(field, *time_bounds(self.context, ahead))
        if due is None and not (self._source_done or self.is_disposed):
            raise reader.invalid(field, "a time while the stage runs on", due)
        return due

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


class WindowTime(_TimeWindow[T], Generic[T]):
    """The running stage of ``window(duration)``: a window every ``duration``, from the subscription on; it
    saves the absolute time the open window closes, and whether it asked the upstream for everything (see
    :mod:`reaqtive.operators._inner_subjects`)."""

    name = "reaqtive:window/time"
    version: Version = (1,)

    __slots__ = ("_duration", "_next_tick")

    def __init__(self, query: Expression[Any], downstream: Subscriber[InnerStreamNode[Any]]) -> None:
        args = WindowTimeArgs.read(query)
        super().__init__(args.source, downstream)
        self._duration = args.duration
        self._next_tick: datetime | None = None

    def save_state_core(self, writer: StateWriter) -> None:
        with self._lock:
            self._save_inners(writer)
            writer.write(self._next_tick)

    def load_state_core(self, reader: StateReader) -> None:
        self._load_windows(reader, 1, 1)
        self._next_tick = self._load_next_due(reader, "next tick", self._duration)

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
    """The running stage of ``window(duration, shift)`` with ``shift != duration``.

    It saves only the absolute time the next window opens: the oldest window's close follows from it, since
    windows open ``shift`` apart and all last ``duration`` (so at most ``ceil(duration / shift)`` are open).
    """

    name = "reaqtive:window/time+shift"
    version: Version = (1,)

    __slots__ = ("_duration", "_next_open", "_shift")

    def __init__(self, query: Expression[Any], downstream: Subscriber[InnerStreamNode[Any]]) -> None:
        args = WindowTimeArgs.read(query)
        super().__init__(args.source, downstream)
        self._duration = args.duration
        self._shift = args.shift
        self._next_open: datetime | None = None

    def save_state_core(self, writer: StateWriter) -> None:
        with self._lock:
            self._save_inners(writer)
            writer.write(self._next_open)

    def load_state_core(self, reader: StateReader) -> None:
        self._load_windows(reader, 0, -(-self._duration // self._shift))  # those opened within the last duration
        self._next_open = self._load_next_due(reader, "next open", self._shift)

    def _next_close(self) -> datetime | None:
        """When the oldest open window closes (``None`` when none is open)."""
        if not self._windows:
            return None
        assert self._next_open is not None
        # The oldest window opened len(windows) shifts before the next opening. Clamped: a window that would open
        # after datetime.max never opens, and one that would close after it never closes by time.
        return add_safe(earlier(self._next_open, multiply_safe(self._shift, len(self._windows))), self._duration)

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
        for inner in self._windows:
            if not self._push(inner, value):
                return


@register_operator("window_time_or_count", frames=8, builder=window, args=WindowTimeOrCountArgs)
class WindowTimeOrCount(_TimeWindow[T], Generic[T]):
    """The running stage of ``window(duration, count)``.

    A window closed by time takes one window of demand but fewer than ``count`` elements, so what the upstream
    had been asked for does not follow from the windows: the stage saves the elements requested upstream and
    not yet received and the windows the downstream had outstanding, asks the upstream for the former again
    when it starts, and takes the first windows the recovered downstream asks for as the ones already
    translated. Its state is version 2; version 1 (without the demand) still loads, and then asks again for
    what the open window can still take if it was emitted, as version 1 did.
    """

    name = "reaqtive:window/time_or_count"
    version: Version = (2,)
    older_versions = frozenset({(1,)})

    __slots__ = ("_count", "_credit", "_duration", "_filled", "_next_tick", "_reask", "_requested")

    def __init__(self, query: Expression[Any], downstream: Subscriber[InnerStreamNode[Any]]) -> None:
        args = WindowTimeOrCountArgs.read(query)
        super().__init__(args.source, downstream)
        self._duration = args.duration
        self._count = args.count
        self._filled = 0  # elements in the open window
        self._next_tick: datetime | None = None
        self._requested = 0  # elements requested upstream and not yet received
        self._credit = 0  # loaded downstream demand: windows the recovered downstream asks for again
        self._reask = 0  # loaded upstream demand: asked again at the start

    def save_state_core(self, writer: StateWriter) -> None:
        with self._lock:
            self._save_inners(writer)
            writer.write(self._filled)
            writer.write(self._next_tick)
            writer.write(self._requested)
            writer.write(add_demand(self._demand, self._credit))  # what the downstream will ask for again

    def load_state_core(self, reader: StateReader) -> None:
        self._load_window(reader)
        self._requested = self._reask = reader.read_int("requested")
        self._credit = reader.read_int("demand")

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        # (1,): without the demand. Version 1 asked again for what the open window can still take, if it had
        # been emitted (it was requested then); the downstream's re-request is translated as a new one.
        self._load_window(reader)
        windows = self._windows
        if windows and windows[0].held is None:
            self._requested = self._reask = self._count - self._filled

    def _load_window(self, reader: StateReader) -> None:
        """The fields both versions have: the inner streams, the open window's elements, its time to close."""
        self._load_windows(reader, 1, 1)
        self._filled = reader.read_int("filled", maximum=self._count - 1)
        self._next_tick = self._load_next_due(reader, "next tick", self._duration)

    def _upstream_amount(self, n: int) -> int:
        return count_demand(self, n)

    def _recovered_amount(self) -> int:
        # What the upstream had been asked for and had not sent at the checkpoint.
        amount, self._reask = self._reask, 0
        return amount

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
        requested = self._requested
        if requested != LONG_MAX and requested:
            self._requested = requested - 1
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
