"""``window`` by time: inner streams closed on the clock (duration, duration and shift), or on the clock or a
count; the builder and the count form are in :mod:`reaqtive.operators.window`."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from reaqtive.core.binding import register_operator
from reaqtive.core.context import OperatorContext
from reaqtive.core.expression import Expression, InnerStreamNode
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.scheduler_interface import Scheduler
from reaqtive.core.streams import LONG_MAX, Subscriber, add_demand
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators._spans import ShiftedSpans, SpanClock, SpanTimeArgs, SpanTimeOrCountArgs, TickedSpans
from reaqtive.operators._timing import add_safe, count_demand
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
class WindowTimeArgs(SpanTimeArgs):
    """The arguments of a ``window_time`` node: ``(source, duration, shift)``."""

    span = "window"


@dataclass(frozen=True, slots=True)
class WindowTimeOrCountArgs(SpanTimeOrCountArgs):
    """The arguments of a ``window_time_or_count`` node: ``(source, duration, count)``."""


@register_operator("window_time", frames=8, builder=window, args=WindowTimeArgs)
def bind_window_time(query: Expression[Any], subscriber: Subscriber[Any]) -> SubscriptionHandle:
    """The binder of :func:`~reaqtive.operators.window.window` by time: :class:`WindowTime`, or
    :class:`WindowTimeShift` with a shift."""
    args = WindowTimeArgs.read(query)
    if args.shift == args.duration:
        return WindowTime(query, subscriber)
    return WindowTimeShift(query, subscriber)


class _TimeWindow(SpanClock, WindowsStage[T], Generic[T]):
    """What the time-driven windows share: the open windows (:class:`~reaqtive.operators.window.WindowsStage`),
    the timer and its generations (the clock, with absolute times, saved, and a late timer catching up:
    :mod:`reaqtive.operators._spans`); the shared rules of inner subjects are in
    :mod:`reaqtive.operators._inner_subjects`. The clock does not wait for demand: windows that open without
    outer demand wait, with their elements.

    Subclasses implement :meth:`_start_fresh` (the first windows, at the subscription), ``_advance``
    (close and open everything due by ``now``) and ``_next_due`` (:class:`~reaqtive.operators._spans.TickedSpans`,
    :class:`~reaqtive.operators._spans.ShiftedSpans`), :meth:`_element`, and save/load their times after the
    base's inner streams.
    """

    __slots__ = ("_generation", "_number", "_scheduler", "_timer_task")

    def __init__(self, source: Subscribable[T], downstream: Subscriber[InnerStreamNode[Any]]) -> None:
        super().__init__(source, downstream)
        self._generation = 0  # the current timer; a timer of an earlier generation is stale
        self._timer_task: ActionTask | None = None
        self._number: int | None = None
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

    def _halted(self) -> bool:
        return self._terminated or self._disposed

    # -- the timer ---------------------------------------------------------------------------------------------

    def _now(self) -> datetime:
        scheduler = self._scheduler
        assert scheduler is not None
        return scheduler.now

    def _begin(self) -> None:
        if not self._loaded:
            self._start_fresh(self._now())
        if not (self._terminated or self._source_done):  # no timer once the source is done
            due = self._next_due()
            if self._loaded:  # the timer goes back in line where it stood
                self._rearm(self._generation, due)
            else:
                self._schedule_timer(self._generation, due)

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


class _TickWindow(TickedSpans, _TimeWindow[T], Generic[T]):
    """One open window, closed every ``duration`` (by :class:`WindowTime`, and by :class:`WindowTimeOrCount`
    also at ``count``): the time it closes, and the roll from one window to the next."""

    __slots__ = ("_duration", "_next_tick")

    def __init__(
        self, source: Subscribable[T], duration: timedelta, downstream: Subscriber[InnerStreamNode[Any]]
    ) -> None:
        super().__init__(source, downstream)
        self._duration = duration
        self._next_tick: datetime | None = None

    def _start_fresh(self, now: datetime) -> None:
        self._next_tick = add_safe(now, self._duration)
        self._open_window()

    def _roll(self) -> bool:
        """Complete the open window and open the next (``False`` when the stage stopped)."""
        windows = self._windows
        if windows:
            self._end(windows.popleft())
        self._state.changed = True
        return not (self._terminated or self._disposed) and self._open_window()


class WindowTime(_TickWindow[T], Generic[T]):
    """The running stage of ``window(duration)``: a window every ``duration``, from the subscription on; it
    saves the absolute time the open window closes, and whether it asked the upstream for everything (see
    :mod:`reaqtive.operators._inner_subjects`). State version 2 adds the timer's number among the timers armed
    in its tick (its place in line after a restart); version 1 still loads, its timer in line after the others
    of its tick."""

    name = "reaqtive:window/time"
    version: Version = (2,)
    older_versions = frozenset({(1,)})

    __slots__ = ()

    def __init__(self, query: Expression[Any], downstream: Subscriber[InnerStreamNode[Any]]) -> None:
        args = WindowTimeArgs.read(query)
        super().__init__(args.source, args.duration, downstream)

    def save_state_core(self, writer: StateWriter) -> None:
        with self._lock:
            self._save_inners(writer)
            writer.write(self._next_tick)
            writer.write(self._timer_number())

    def load_state_core(self, reader: StateReader) -> None:
        self.load_older_state_core(reader, (1,))
        self._load_number(reader)

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        # (1,) is (2,) without the last field
        self._load_windows(reader, 1, 1)
        self._next_tick = self._load_next_due(reader, "next tick", self._duration)

    def _element(self, value: T) -> None:
        if self._terminated:
            return
        windows = self._windows
        if windows:
            self._push(windows[0], value)


class WindowTimeShift(ShiftedSpans, _TimeWindow[T], Generic[T]):
    """The running stage of ``window(duration, shift)`` with ``shift != duration``.

    It saves the absolute time the next window opens: the oldest window's close follows from it
    (:class:`~reaqtive.operators._spans.ShiftedSpans`). State version 2 adds when the timer was armed and its
    number among the timers armed in that tick (its place in line after a restart); version 1 still loads, its
    timer re-armed at the restart's tick.
    """

    name = "reaqtive:window/time+shift"
    version: Version = (2,)
    older_versions = frozenset({(1,)})

    __slots__ = ("_armed", "_duration", "_next_open", "_shift")

    def __init__(self, query: Expression[Any], downstream: Subscriber[InnerStreamNode[Any]]) -> None:
        args = WindowTimeArgs.read(query)
        super().__init__(args.source, downstream)
        self._duration = args.duration
        self._shift = args.shift
        self._next_open: datetime | None = None
        self._armed: datetime | None = None

    def save_state_core(self, writer: StateWriter) -> None:
        with self._lock:
            self._save_inners(writer)
            writer.write(self._next_open)
            writer.write(self._armed)
            writer.write(self._timer_number())

    def load_state_core(self, reader: StateReader) -> None:
        self.load_older_state_core(reader, (1,))
        running = self._next_open is not None and not (self._terminated or self._source_done)
        self._load_armed(reader, running, time_bounds(self.context))
        self._load_number(reader)

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        # (1,) is (2,) without the last field
        self._load_windows(reader, 0, self._most_open())
        self._next_open = self._load_next_due(reader, "next open", self._shift)

    def _start_fresh(self, now: datetime) -> None:
        self._next_open = now
        self._advance(now)

    def _open_count(self) -> int:
        return len(self._windows)

    def _close_oldest(self) -> None:
        self._end(self._windows.popleft())

    def _open_next(self, next_open: datetime) -> bool:
        self._next_open = add_safe(next_open, self._shift)
        return self._open_window()

    def _element(self, value: T) -> None:
        if self._terminated:
            return
        for inner in self._windows:
            if not self._push(inner, value):
                return


@register_operator("window_time_or_count", frames=8, builder=window, args=WindowTimeOrCountArgs)
class WindowTimeOrCount(_TickWindow[T], Generic[T]):
    """The running stage of ``window(duration, count)``.

    A window closed by time takes one window of demand but fewer than ``count`` elements, so what the upstream
    had been asked for does not follow from the windows: the stage saves the elements requested upstream and
    not yet received and the windows the downstream had outstanding, asks the upstream for the former again
    when it starts, and takes the first windows the recovered downstream asks for as the ones already
    translated. Its state is version 3: version 2 added the demand, version 3 the timer's number among the
    timers armed in its tick (its place in line after a restart). Version 2 still loads (its timer in line after
    the others of its tick), and so does version 1 (without the demand), which then asks again for what the open
    window can still take if it was emitted, as version 1 did.
    """

    name = "reaqtive:window/time_or_count"
    version: Version = (3,)
    older_versions = frozenset({(1,), (2,)})

    __slots__ = ("_count", "_credit", "_filled", "_reask", "_requested")

    def __init__(self, query: Expression[Any], downstream: Subscriber[InnerStreamNode[Any]]) -> None:
        args = WindowTimeOrCountArgs.read(query)
        super().__init__(args.source, args.duration, downstream)
        self._count = args.count
        self._filled = 0  # elements in the open window
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
            writer.write(self._timer_number())

    def load_state_core(self, reader: StateReader) -> None:
        self.load_older_state_core(reader, (2,))
        self._load_number(reader)

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        # (2,) is (3,) without the last field.
        self._load_window(reader)
        if version != (1,):
            self._requested = self._reask = reader.read_int("requested")
            self._credit = reader.read_int("demand")
            return
        # (1,): without the demand. Version 1 asked again for what the open window can still take, if it had
        # been emitted (it was requested then); the downstream's re-request is translated as a new one.
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

    def _roll(self) -> bool:
        self._filled = 0
        return super()._roll()

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
