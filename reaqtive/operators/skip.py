"""``skip``: drop the first ``count`` elements, or the elements of the first ``duration``, pass the rest."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import ArgsRecord
from reaqtive.core.binding import register_operator
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.streams import Subscriber, add_demand
from reaqtive.core.subscribable import Subscribable
from reaqtive.operators._take_skip import OpenAtDeadline, count_or_duration
from reaqtive.operators._timing import deadline, earlier
from reaqtive.operators.keyed_steps import SKIP, KeyedStep
from reaqtive.operators.step_stage import StepStage, runs_inline, step_operator
from reaqtive.scheduler import ActionTask
from reaqtive.state.fields import time_bounds

__all__ = ["Skip", "SkipArgs", "SkipDuration", "SkipDurationArgs", "skip"]

T = TypeVar("T")


def skip(count: int | timedelta, /) -> OperatorCall[Any]:
    """Drop the first ``count`` elements (an ``int``), or the elements of the first ``duration`` after the
    subscription started (a ``timedelta``); pass the rest.

    >>> from_iterable(range(5)).skip(3).run(print)  # doctest: +ELLIPSIS
    3
    4
    <...>

    By time, on the virtual-time scheduler (one tick is one second; an element at the very end of the
    duration is still dropped):

    >>> from datetime import timedelta
    >>> from reaqtive.testing import TestScheduler, on_next
    >>> scheduler = TestScheduler()
    >>> xs = scheduler.create_hot_observable(on_next(210, "a"), on_next(250, "b"), on_next(260, "c"))
    >>> scheduler.start(lambda: xs.skip(timedelta(seconds=50))).messages
    [OnNext('c')@260]

    Completion and errors pass at any time. The duration is measured from the start; it needs a scheduler.

    **State.** Count: how many are still to drop. Duration: the absolute end time (set at the first start, so
    a recovered query opens when the original would have) and whether it was reached. Inside a keyed
    ``group_by``, by count, one field per key: how many are still to drop.

    **Demand.** Count: the elements to drop are requested together with the downstream's first demand
    (``n + count`` upstream, once; a recovered stage adds its restored count again), then demand passes
    unchanged: the dropped elements are paid for up front instead of one ``request(1)`` each. Duration: each
    dropped element is replaced by ``request(1)`` upstream, unless demand is unbounded.

    Reaqtive: Skip (its duration form is composed from SkipUntil and Timer).
    """
    op, argument = count_or_duration(count, "skip")
    return OperatorCall(op, (argument,))


@dataclass(frozen=True, slots=True)
class SkipArgs(ArgsRecord):
    """The arguments of a ``skip`` node: ``(source, count)``."""

    source: Subscribable[Any]
    count: int
    checks = ("source", "count")


@dataclass(frozen=True, slots=True)
class SkipDurationArgs(ArgsRecord):
    """The arguments of a ``skip_duration`` node: ``(source, duration)``."""

    source: Subscribable[Any]
    duration: timedelta
    checks = ("source", "duration")


@step_operator("skip", lambda args: SkipStep(args.count), builder=skip, args=SkipArgs)
class Skip(StepStage):
    """The running stage of :func:`skip` by count, run by its keyed step (:class:`SkipStep`): the first request
    (the total requested is still 0) carries the elements to drop, so the upstream is never asked for more than
    it takes to deliver what the downstream requested."""

    name = "reaqtive:skip"
    version: Version = (1,)
    state_fields = ("remaining",)

    __slots__ = ()

    def load_state_core(self, reader: StateReader) -> None:
        # _field is still the query's count here: what is left of it cannot be more
        self._field = reader.read_int("remaining", maximum=self._field)

    def request(self, n: int) -> None:
        if n > 0 and not self._requested:  # the first request (nothing flows before it: the field is stable)
            n = add_demand(n, self._field)
        super().request(n)


@register_operator("skip_duration", frames=2, builder=skip, args=SkipDurationArgs)
class SkipDuration(OpenAtDeadline[T], Generic[T]):
    """The running stage of :func:`skip` by duration: the timer only opens the gate (see
    :class:`OpenAtDeadline`), so it needs no lock. State: the end, whether the gate is open, and (version 2)
    the timer's number among the timers armed in its tick (:class:`DeadlineStage`)."""

    name = "reaqtive:skip+duration"
    version: Version = (2,)
    older_versions = frozenset({(1,)})  # without the timer's number: in line after the others of its tick
    operator_label = "skip(duration)"
    state_fields = ("end", "open", "timer_number")

    __slots__ = ("_duration", "_end", "_number", "_source", "_timer_task")

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        self._timer_task: ActionTask | None = None
        self._number: int | None = None
        args = SkipDurationArgs.read(query)
        self._source: Subscribable[T] = args.source
        self._duration = args.duration
        self._end: datetime | None = None

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._end)
        writer.write(self._open)
        self._save_number(writer)

    def load_state_core(self, reader: StateReader) -> None:
        self.load_older_state_core(reader, (1,))
        self._load_number(reader)

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        # (1,) is (2,) without the last field
        self._end = reader.read_optional_datetime("end", *time_bounds(self.context, self._duration))
        self._open = reader.read_bool("open")

    def deadline(self, now: datetime) -> datetime | None:
        if self._open:
            return None
        if self._end is None:
            self._end = deadline(now, self._duration)  # NEVER past datetime.max: it drops everything
            self._state.changed = True
        return self._end

    def armed_at(self, due: datetime) -> datetime | None:
        return earlier(due, self._duration)  # armed at the subscription, a duration before its end


@runs_inline(Skip)
class SkipStep(KeyedStep):
    """The per-element logic of :func:`skip` by count (the stage and a keyed chain run it): the field is how many are
    still to drop."""

    __slots__ = ("initial",)

    def __init__(self, count: int) -> None:
        self.initial = count

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        if state:
            return state - 1, SKIP
        return state, value

    def check(self, state: Any) -> bool:
        return type(state) is int and 0 <= state <= self.initial
