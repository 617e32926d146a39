"""``take`` and ``skip``: the first ``count`` elements, or the elements of the first ``duration``: taken (then
complete), or dropped (the rest passes)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import args_record
from reaqtive.core.binding import register_operator
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.streams import Subscriber, add_demand
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import NOP_SUBSCRIPTION, SubscriptionHandle
from reaqtive.operators._take_skip import OpenAtDeadline, TakeUntilDeadline, count_or_duration
from reaqtive.operators._timing import deadline, earlier
from reaqtive.operators.keyed_steps import DONE, SKIP, KeyedStep, register_keyed_step
from reaqtive.operators.step_stage import StepStage, runs_inline, step_operator
from reaqtive.scheduler import ActionTask
from reaqtive.state.fields import time_bounds

__all__ = [
    "Skip", "SkipArgs", "SkipDuration", "SkipDurationArgs", "Take", "TakeArgs", "TakeDuration", "TakeDurationArgs",
    "skip", "take",
]

T = TypeVar("T")


def take(count: int | timedelta, /) -> OperatorCall[Any]:
    """The first ``count`` elements (an ``int``), or the elements of the first ``duration`` after the
    subscription started (a ``timedelta``); then complete and unsubscribe from the source.

    >>> from_iterable(range(10)).take(3).run(print)  # doctest: +ELLIPSIS
    0
    1
    2
    <...>

    By time, on the virtual-time scheduler (one tick is one second):

    >>> from datetime import timedelta
    >>> from reaqtive.testing import TestScheduler, on_next
    >>> scheduler = TestScheduler()
    >>> xs = scheduler.create_hot_observable(on_next(210, "a"), on_next(240, "b"), on_next(260, "c"))
    >>> scheduler.start(lambda: xs.take(timedelta(seconds=50))).messages
    [OnNext('a')@210, OnNext('b')@240, OnCompleted()@250]

    The count completes together with the last element; ``take(0)`` completes at once, at the start, without
    subscribing to the source (Reaqtive returns ``Empty``, which completes one scheduler step later). The
    duration is measured from the start (``take(timedelta(0))`` completes at once); it needs a scheduler.

    **State.** Count: how many are still to pass. Duration: the absolute end time, set at the first start (so a
    recovered query ends when the original would have, or at once if that time has passed). Inside a keyed
    ``group_by``, by count (not 0), one field per key: how many are still to pass.

    **Demand.** Count: never more upstream than still needed, ``min(n, remaining)``, so a source is never asked
    for an element the result would not deliver. Duration: passed upstream unchanged.

    Reaqtive: Take (its duration form is composed from TakeUntil and Timer).
    """
    op, argument = count_or_duration(count, "take")
    return OperatorCall(op, (argument,))


TakeArgs = args_record("TakeArgs", source="source", count="count")
TakeDurationArgs = args_record("TakeDurationArgs", source="source", duration="duration")


@register_operator("take", builder=take, args=TakeArgs)
class Take(StepStage):
    """The running stage of :func:`take` by count, run by its keyed step (:class:`TakeStep`).

    ``_can_request`` (how many may still be requested upstream) belongs to the demand path and the field (how
    many are still to pass) to the element path, so the two need no lock; a recovered stage starts with
    ``_can_request`` = what remains (its new upstream owes nothing).
    """

    name = "reaqtive:take"
    version: Version = (1,)
    state_fields = ("remaining",)

    __slots__ = ("_can_request",)

    def __init__(self, query: Expression[Any], downstream: Subscriber[Any]) -> None:
        args = TakeArgs.read(query)
        super().__init__(downstream, args.source, TakeStep(args.count))
        self._can_request = args.count

    def load_state_core(self, reader: StateReader) -> None:
        # the field is still the query's count here: what is left of it cannot be more
        self._field = self._can_request = reader.read_int("remaining", maximum=self._field)

    def subscribe_input(self) -> SubscriptionHandle:
        if self._field == 0:
            return NOP_SUBSCRIPTION  # take(0): the source is never needed
        return super().subscribe_input()

    def on_start(self) -> None:
        if self._field == 0:
            self._signal_complete()

    def request(self, n: int) -> None:
        if n <= 0:
            super().request(n)  # the upstream (or the base, before it arrived) signals the rule 3.9 error
            return
        want = min(n, self._can_request)
        if want:
            self._can_request -= want
            super().request(want)

    def field_at_end(self, field: Any) -> Any:
        return 0  # none remain


@register_operator("take_duration", frames=2, builder=take, args=TakeDurationArgs)
class TakeDuration(TakeUntilDeadline[T], Generic[T]):
    """The running stage of :func:`take` by duration: a lock (of :class:`TakeUntilDeadline`) serializes the
    timer's completion with the elements. State: the end, and (version 2) the timer's number among the timers
    armed in its tick (:class:`DeadlineStage`)."""

    name = "reaqtive:take+duration"
    version: Version = (2,)
    older_versions = frozenset({(1,)})  # without the timer's number: in line after the others of its tick
    operator_label = "take(duration)"
    state_fields = ("end", "timer_number")

    __slots__ = ("_duration", "_end", "_number", "_source", "_timer_task")

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        self._timer_task: ActionTask | None = None
        self._number: int | None = None
        args = TakeDurationArgs.read(query)
        self._source: Subscribable[T] = args.source
        self._duration = args.duration
        self._end: datetime | None = None

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._end)
        self._save_number(writer)

    def load_state_core(self, reader: StateReader) -> None:
        self.load_older_state_core(reader, (1,))
        self._load_number(reader)

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        # (1,) is (2,) without the last field
        self._end = reader.read_optional_datetime("end", *time_bounds(self.context, self._duration))

    def deadline(self, now: datetime) -> datetime | None:
        if self._end is None:
            self._end = deadline(now, self._duration)  # NEVER past datetime.max: it takes everything
            self._state.changed = True
        return self._end

    def armed_at(self, due: datetime) -> datetime | None:
        return earlier(due, self._duration)  # armed at the subscription, a duration before its end


@runs_inline(Take)
class TakeStep(KeyedStep):
    """The per-element logic of :func:`take` by count (the stage and a keyed chain run it): the field is how many are
    still to pass (>= 1; the chain
    ends with the last one)."""

    __slots__ = ("initial",)

    def __init__(self, count: int) -> None:
        self.initial = count

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        remaining = state - 1
        return (DONE if remaining == 0 else remaining), value

    def check(self, state: Any) -> bool:
        return type(state) is int and 1 <= state <= self.initial


@register_keyed_step("take")
def take_step(query: Expression[Any]) -> TakeStep | None:
    """The keyed step of a ``take`` node (by count); ``None`` for ``take(0)``, which ends before any element."""
    count = TakeArgs.read(query).count
    return TakeStep(count) if count > 0 else None


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


SkipArgs = args_record("SkipArgs", source="source", count="count")
SkipDurationArgs = args_record("SkipDurationArgs", source="source", duration="duration")


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
