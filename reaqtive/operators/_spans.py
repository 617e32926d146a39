"""What ``buffer`` and ``window`` by time share (:mod:`reaqtive.operators.buffer_time`,
:mod:`reaqtive.operators.window_time`): their argument records, their timer, and the clock of their *spans* (a
list, a window) written once for both.

A span either follows the previous one (:class:`TickedSpans`: one open span, closed every ``duration``, or
sooner by count) or opens every ``shift`` and lasts ``duration`` (:class:`ShiftedSpans`). Times are absolute
and saved, so a recovered span closes when it would have; a timer that is past due when it runs (after a pause,
or a restart after downtime) catches up with every close it missed. Each timer carries the generation it was
scheduled in: a close by count reschedules, and the timer of an earlier generation is stale. What a span holds,
and what closing it means (a list queued for demand, a window completed), is the stage's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar

from reaqtive.core.arguments import ArgsRecord, Arguments
from reaqtive.core.operator import StateReader
from reaqtive.core.scheduler_interface import Scheduler
from reaqtive.core.subscribable import Subscribable
from reaqtive.operators._places import number_of, read_number
from reaqtive.operators._timing import MAX_SPAN, deadline, earlier, multiply_safe
from reaqtive.scheduler import ActionTask
from reaqtive.state.tracking import StateChangedTracker

__all__ = ["ShiftedSpans", "SpanClock", "SpanTimeArgs", "SpanTimeOrCountArgs", "TickedSpans"]


@dataclass(frozen=True, slots=True)
class SpanTimeArgs(ArgsRecord):
    """The arguments of ``buffer`` or ``window`` by time: ``(source, duration, shift)`` (``shift == duration``:
    one span after the other); :attr:`span` names a span in errors."""

    source: Subscribable[Any]
    duration: timedelta
    shift: timedelta
    checks = ("source", "positive_duration", "positive_duration")
    span: ClassVar[str] = "span"

    def validate(self, args: Arguments) -> None:
        if self.shift != self.duration and self.shift > MAX_SPAN:
            args.fail(2, f"at most {MAX_SPAN.days} days (a longer shift never opens a second {self.span})")


@dataclass(frozen=True, slots=True)
class SpanTimeOrCountArgs(ArgsRecord):
    """The arguments of ``buffer`` or ``window`` by time or count: ``(source, duration, count)``."""

    source: Subscribable[Any]
    duration: timedelta
    count: int
    checks = ("source", "positive_duration", "positive_count")


class SpanClock:
    """The timer of a stage of spans: ``_scheduler`` (set in ``set_context``) runs ``_on_timer(generation)`` at
    a due time. A slotless mixin: the stage declares the fields."""

    __slots__ = ()  # (a slotted mixin could not combine with the stages' bases: mypy wants an ignore to assign)

    _scheduler: Scheduler | None
    _generation: int  # the current timer; a timer of an earlier generation is stale
    _state: StateChangedTracker
    _timer_task: ActionTask | None  # the current timer's task: the scheduler tells it its place in line
    _number: int | None  # a loaded timer's place among the timers armed in its tick, until it is re-armed

    def _on_timer(self, generation: int) -> None:
        raise NotImplementedError

    def _advance(self, now: datetime) -> None:
        """Close and open every span due by ``now``."""
        raise NotImplementedError

    def _next_due(self) -> datetime:
        """When the timer is due next: the next close or open."""
        raise NotImplementedError

    def _schedule_timer(self, generation: int, due: datetime, armed: datetime | None = None,
                        number: int | None = None) -> None:
        scheduler = self._scheduler
        assert scheduler is not None
        task = self._timer_task = ActionTask(self._on_timer, generation, armed=armed, arrival=number)  # type: ignore[misc]  # (a slot of the stage)
        scheduler.schedule(task, due=due)

    def _rearm(self, generation: int, due: datetime) -> None:
        """Re-arm a recovered stage's timer where it stood in line: when it was armed, its number."""
        self._schedule_timer(generation, due, self._armed_at(due), self._number)

    def _timer_number(self) -> int | None:
        """What the stage saves of its timer's place in line (see :mod:`reaqtive.operators._places`)."""
        return number_of(self._timer_task)

    def _load_number(self, reader: StateReader) -> None:
        self._number = read_number(reader)  # type: ignore[misc]  # (a slot of the stage)

    def _armed_at(self, due: datetime) -> datetime | None:
        """When the timer due at ``due`` was armed, for a recovered stage re-arming it (``None``: not known; see
        :class:`reaqtive.scheduler.ActionTask`'s ``armed``)."""
        return None

    def _halted(self) -> bool:
        """Whether the stage stopped (failed, ended or disposed): no span closes or opens any more."""
        raise NotImplementedError


class TickedSpans(SpanClock):
    """One open span, closed every ``duration`` (and by a count stage also at ``count``, which restarts the
    clock): the time it closes, ``_next_tick``, is what the stage saves of the clock. The stage implements
    :meth:`_roll`."""

    __slots__ = ()

    _duration: timedelta
    _next_tick: datetime | None

    def _roll(self) -> bool:
        """Close the open span and open the next; ``False`` when the stage stopped."""
        raise NotImplementedError

    def _next_due(self) -> datetime:
        assert self._next_tick is not None
        return self._next_tick

    def _armed_at(self, due: datetime) -> datetime | None:
        # a span's close is armed as it opens (at the previous close, or at the count that closed it)
        return earlier(due, self._duration)

    def _advance(self, now: datetime) -> None:
        """Close and open every span due by ``now``. Clamped: a span that would close after ``datetime.max``
        never closes by time."""
        next_tick = self._next_tick
        assert next_tick is not None
        while next_tick <= now and not self._halted():
            next_tick = self._next_tick = deadline(next_tick, self._duration)  # type: ignore[misc]  # (a slot of the stage)
            self._state.changed = True
            if not self._roll():
                return


class ShiftedSpans(SpanClock):
    """Spans that open every ``shift`` (the first at the subscription) and close ``duration`` after they opened;
    a close comes before an open at the same instant. They overlap when ``shift < duration`` and leave gaps
    when ``shift > duration``.

    Of the clock, the time the next span opens (``_next_open``) is saved: the oldest span's close follows from
    it, since spans open ``shift`` apart and all last ``duration`` (so at most :meth:`_most_open` are open). So is
    when the timer was armed (``_armed``, at the previous open or close, or at the subscription: which, the
    state cannot tell), so that a recovered timer goes back in line where it stood. The stage implements
    :meth:`_open_count`, :meth:`_close_oldest` and :meth:`_open_next`, and declares ``_armed``.
    """

    __slots__ = ()

    _duration: timedelta
    _shift: timedelta
    _next_open: datetime | None
    _armed: datetime | None  # when the current timer was armed (None: not known, a state of an older version)

    def _schedule_timer(self, generation: int, due: datetime, armed: datetime | None = None,
                        number: int | None = None) -> None:
        scheduler = self._scheduler
        assert scheduler is not None
        self._armed = scheduler.now if armed is None else armed  # type: ignore[misc]  # (a slot of the stage)
        super()._schedule_timer(generation, due, armed, number)

    def _armed_at(self, due: datetime) -> datetime | None:
        return self._armed

    def _load_armed(
        self, reader: StateReader, running: bool, bounds: tuple[datetime | None, datetime | None]
    ) -> None:
        """Read ``_armed`` (within ``bounds``, the clock's), which a stage that runs on (``running``: a timer to
        re-arm) has, at or before the timer's due time."""
        self._armed = reader.read_optional_datetime("armed", *bounds)  # type: ignore[misc]  # (a slot of the stage)
        if running and (self._armed is None or self._armed > self._next_due()):
            raise reader.invalid("armed", "a time at or before the next open or close", self._armed)

    def _open_count(self) -> int:
        raise NotImplementedError

    def _close_oldest(self) -> None:
        raise NotImplementedError

    def _open_next(self, next_open: datetime) -> bool:
        """Open the span due at ``next_open`` and set the time the next one opens; ``False`` when the stage
        stopped (a limit)."""
        raise NotImplementedError

    def _most_open(self) -> int:
        """The spans open at once at most: those opened within the last duration."""
        return -(-self._duration // self._shift)

    def _next_close(self) -> datetime | None:
        """When the oldest open span closes (``None`` when none is open)."""
        count = self._open_count()
        if not count:
            return None
        assert self._next_open is not None
        # The oldest span opened `count` shifts before the next opening. Clamped: a span that would open after
        # datetime.max never opens, and one that would close after it never closes by time.
        return deadline(earlier(self._next_open, multiply_safe(self._shift, count)), self._duration)

    def _next_due(self) -> datetime:
        assert self._next_open is not None
        close = self._next_close()
        return self._next_open if close is None else min(close, self._next_open)

    def _advance(self, now: datetime) -> None:
        """Close and open every span due by ``now``, in time order."""
        while not self._halted():
            next_open = self._next_open
            assert next_open is not None
            close = self._next_close()
            if close is not None and close <= now and close <= next_open:  # the close first at equal times
                self._close_oldest()
            elif next_open <= now:
                if not self._open_next(next_open):
                    return
            else:
                break
        self._state.changed = True
