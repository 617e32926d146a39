"""``delay_subscription``: subscribe to the source only when a due time comes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import ArgsRecord
from reaqtive.core.binding import register_operator
from reaqtive.core.context import OperatorContext
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.scheduler_interface import Scheduler, earlier
from reaqtive.core.streams import Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SingleAssignmentSubscription, SubscriptionHandle
from reaqtive.core.visitors import set_context_all, start_all, subscribe_all
from reaqtive.operators._places import number_of, read_number
from reaqtive.operators._timing import due_bounds, due_time, require_due
from reaqtive.scheduler import ActionTask
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive.state.fields import time_bounds

__all__ = ["DelaySubscription", "DelaySubscriptionArgs", "delay_subscription"]

T = TypeVar("T")


def delay_subscription(due: timedelta | datetime) -> OperatorCall[Any]:
    """Subscribe to this source only at ``due``: a delay from the start (``timedelta``) or an absolute,
    timezone-aware ``datetime``. Needs a scheduler.

    >>> from datetime import timedelta
    >>> from reaqtive.testing import TestScheduler, on_next, on_completed
    >>> scheduler = TestScheduler()
    >>> xs = scheduler.create_cold_observable(on_next(10, "a"), on_completed(20))
    >>> scheduler.start(lambda: xs.delay_subscription(timedelta(seconds=50))).messages
    [OnNext('a')@260, OnCompleted()@270]
    >>> xs.subscriptions
    [Subscribe(250, 270)]

    A zero or negative delay, or a time already past, subscribes at once (as Rx, which treats a negative
    delay as zero; Reaqtive rejects a negative delay). If subscribing fails, the error goes downstream. After
    the due time, elements pass straight through.

    **State.** The absolute due time (computed at the start for a delay) and whether the source was subscribed:
    a recovered query re-creates the subscription, and its subtree's state is saved with the query's.

    **Demand.** Passed upstream unchanged; demand signalled before the source is subscribed is handed over at
    once when it is.

    Reaqtive: DelaySubscription.
    """
    return OperatorCall("delay_subscription", (require_due(due, "delay_subscription", "due"),))


@dataclass(frozen=True, slots=True)
class DelaySubscriptionArgs(ArgsRecord):
    """The arguments of a ``delay_subscription`` node: ``(source, due)``."""

    source: Subscribable[Any]
    due: timedelta | datetime
    checks = ("source", "due")


@register_operator("delay_subscription", frames=2, builder=delay_subscription, args=DelaySubscriptionArgs)
class DelaySubscription(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of :func:`delay_subscription`.

    Until the due time the source is not subscribed at all (its subtree does not exist); at the due time the
    stage subscribes and initializes it (subscribe, set the context, start), in a single-assignment holder that
    visitors reach, so the subtree's state is saved with the query's. A recovered stage that had subscribed
    re-creates the subtree while loading, so the load traversal loads it and the start traversal starts it.

    The state is the due time, whether the stage subscribed and (version 2) when the timer was armed (the
    subscription) and its number among the timers armed in that tick: a recovered timer goes back in line where
    it stood (see :class:`reaqtive.scheduler.ActionTask`'s ``armed`` and ``arrival``). Version 1 still loads:
    a relative due time tells when it was armed, an absolute one does not (the timer is re-armed at the
    restart's tick, as version 1 did).
    """

    name = "reaqtive:delay_subscription"
    version: Version = (2,)
    older_versions = frozenset({(1,)})

    __slots__ = ("_armed", "_due", "_holder", "_next_due", "_number", "_scheduler", "_source", "_subscribed",
                 "_timer_task")

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = DelaySubscriptionArgs.read(query)
        self._source: Subscribable[T] = args.source
        self._due = args.due
        self._next_due: datetime | None = None
        self._armed: datetime | None = None  # when the timer was armed (None: not yet, or not known)
        self._timer_task: ActionTask | None = None  # the timer's task: the scheduler tells it its place in line
        self._number: int | None = None  # a loaded timer's place among the timers armed in its tick
        self._subscribed = False
        self._holder = SingleAssignmentSubscription()
        self._scheduler: Scheduler | None = None

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._next_due)
        writer.write(self._subscribed)
        writer.write(self._armed)
        writer.write(None if self._subscribed else number_of(self._timer_task))

    def load_state_core(self, reader: StateReader) -> None:
        self._load(reader)
        self._armed = reader.read_optional_datetime("armed", *time_bounds(self.context))
        self._number = read_number(reader)
        if not self._subscribed and (self._armed is None) != (self._next_due is None):
            raise reader.invalid("armed", "a time exactly when the due time is set (before it subscribed)", self._armed)

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        # (1,) is (2,) without the last field: a relative due time was armed that long before it
        self._load(reader)
        if self._next_due is not None and isinstance(self._due, timedelta):
            self._armed = earlier(self._next_due, self._due)

    def _load(self, reader: StateReader) -> None:
        """The fields of both versions: the due time, whether the stage subscribed (then the subtree)."""
        self._next_due = reader.read_optional_datetime("next due", *due_bounds(self.context, self._due))
        self._subscribed = reader.read_bool("subscribed")
        if self._subscribed and self._next_due is None:
            raise reader.invalid("subscribed", "False before the due time was set", self._subscribed)
        if self._subscribed:
            # The saved state holds the subtree's nodes next: re-create it so the traversal loads and starts it.
            self._attach()

    def subscribe_input(self) -> SubscriptionHandle:
        return self._holder

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._scheduler = context.scheduler  # raises MissingSchedulerError: the due time needs a clock

    def on_next(self, value: T) -> None:
        self._downstream.on_next(value)

    def on_start(self) -> None:
        if self._subscribed:
            return  # recovered after the due time: the start traversal starts the re-created subtree
        scheduler = self._scheduler
        assert scheduler is not None
        armed = self._armed
        if self._next_due is None:
            self._next_due = due_time(scheduler.now, self._due)
        if armed is None:  # new, or a version 1 state that cannot tell: armed now
            self._armed = scheduler.now
            self._state.changed = True
        task = self._timer_task = ActionTask(self._subscribe_source, armed=armed,
                                             arrival=None if armed is None else self._number)
        scheduler.schedule(task, self._next_due)

    def _subscribe_source(self) -> None:
        if self._disposed:
            return
        self._subscribed = True
        self._state.changed = True
        try:
            handle = self._attach()
        except Exception as error:  # binding the source (not a user function on an element): it stops the query
            self._signal_error(error)
            return
        start_all(handle)

    def _attach(self) -> SubscriptionHandle:
        """Subscribe to the source and give the new subtree its inputs and context (not started)."""
        handle = self._source.subscribe(self)
        self._holder.subscription = handle
        subscribe_all(handle)
        set_context_all(handle, self.context)
        return handle
