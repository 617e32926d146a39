"""Building blocks shared by the take and skip family: the builders' checks of an argument that picks the op, a
stage with a timer at an absolute time, the two gates built on it (end the stage at a deadline; open at a
deadline), the observer of a second "until" stream, and the replacement demand of stages that drop elements.

Module-private (its name starts with ``_``): the operators themselves live in ``take.py``, ``skip.py``,
``take_until.py`` and ``skip_until.py``.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from reaqtive.core.arguments import ArgsRecord, require_non_negative_int, require_time
from reaqtive.core.context import OperatorContext
from reaqtive.core.errors import MissingSchedulerError
from reaqtive.core.expression import OperatorCall, as_expression
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.streams import LONG_MAX, Subscriber, Subscription, add_demand, require_not_none
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import NOP_SUBSCRIPTION, SubscriptionHandle
from reaqtive.operators._places import number_of, read_number
from reaqtive.operators._timing import MAX_TIME
from reaqtive.scheduler import ActionTask
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive.state.fields import time_bounds

__all__ = [
    "AtATime",
    "DeadlineStage",
    "DroppingStage",
    "GateStage",
    "LockedEnd",
    "OpenAtDeadline",
    "TakeUntilDeadline",
    "UntilArgs",
    "UntilObserver",
    "UntilStage",
    "count_or_duration",
    "other_or_time",
]

T = TypeVar("T")


def count_or_duration(value: object, op: str) -> tuple[str, int | timedelta]:
    """The builders' check of ``take``/``skip``: ``(op, count)`` for an int, ``(op + "_duration", duration)`` for a
    timedelta; both must be >= 0."""
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise ValueError(f"{op}: duration must be >= 0, got {value}")
        return f"{op}_duration", value
    if isinstance(value, int) and not isinstance(value, bool):
        return op, require_non_negative_int(value, op, "count")
    raise TypeError(f"{op}: count must be an int or a timedelta, got {type(value).__name__}")


def other_or_time(value: object, op: str) -> OperatorCall[Any]:
    """The builders of ``take_until``/``skip_until``: the node ``op(query)`` for a stream (any subscribable, made
    a query), ``op_time(datetime)`` for an aware datetime."""
    if isinstance(value, datetime):
        return OperatorCall(f"{op}_time", (require_time(value, op, "time"),))
    if isinstance(value, Subscribable):
        return OperatorCall(op, (as_expression(value),))
    raise TypeError(f"{op}: other must be a query (or another Subscribable) or a datetime, got {type(value).__name__}")


@dataclass(frozen=True, slots=True)
class UntilArgs(ArgsRecord):
    """The arguments of a ``take_until`` or ``skip_until`` node with a stream: ``(source, other)``."""

    source: Subscribable[Any]
    other: Subscribable[Any]
    checks = ("source", "source")


class DroppingStage(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """A one-input stage that drops some elements and replaces each dropped one with ``request(1)`` upstream,
    unless the downstream's demand is unbounded (it has requested ``LONG_MAX`` in total, rule 3.17).

    ``_requested`` is written by :meth:`request` (the downstream's thread) and only read on the element path; a
    stale read costs at most one surplus ``request(1)`` to an upstream whose demand is already unbounded.
    """

    __slots__ = ("_requested",)

    def __init__(self, downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        self._requested = 0

    def request(self, n: int) -> None:
        if n > 0:
            self._requested = add_demand(self._requested, n)
        super().request(n)

    def _replace_dropped(self) -> None:
        """One element was dropped: ask for another, so the downstream's outstanding demand stays covered."""
        if self._requested != LONG_MAX:
            upstream = self._upstream
            if upstream is not None:
                upstream.request(1)

    def _element_skipped(self) -> None:
        self._replace_dropped()  # an element skipped after a user error is one more dropped


class DeadlineStage(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """A one-input stage with one timer at an absolute time (``take``/``skip`` by duration, ``take_until``/
    ``skip_until`` a time). Needs a scheduler in its context: ``set_context`` raises
    :class:`~reaqtive.core.errors.MissingSchedulerError` without one.

    At start the subclass names the deadline (:meth:`deadline`); a deadline already reached is handled at once,
    in ``start``, before the source starts; otherwise a task on the scheduler runs :meth:`on_deadline` when it
    is due. The task of a disposed stage finds it disposed and does nothing. The subclass saves the timer's
    number among the timers armed in its tick (:meth:`_save_number`, :meth:`_load_number`), so that a recovered
    timer goes back in line exactly where it stood (see :mod:`reaqtive.operators._places`).
    """

    # no fields of its own, so it combines with DroppingStage (a subclass declares ``_source``, ``_timer_task``
    # and ``_number``, both None at first)
    __slots__ = ()

    operator_label: ClassVar[str]
    """How the operator is named in messages, e.g. ``"take(duration)"``."""
    _source: Subscribable[Any]
    _timer_task: ActionTask | None  # the timer's task: the scheduler tells it its place in line
    _number: int | None  # a loaded timer's place among the timers armed in its tick, until on_start re-arms it

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    @abstractmethod
    def deadline(self, now: datetime) -> datetime | None:
        """The absolute time of the timer, or ``None`` when it is behind us (restored state says so)."""

    def armed_at(self, due: datetime) -> datetime | None:
        """When the timer due at ``due`` was armed (the subscription), where the state tells it: a recovered stage
        re-arms it in its place in line (``None``: not known; see :class:`reaqtive.scheduler.ActionTask`)."""
        return None

    @abstractmethod
    def on_deadline(self) -> None:
        """The deadline was reached (on the scheduler, or in ``start`` when it had passed already)."""

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        try:
            context.scheduler  # noqa: B018 - a standalone run() context makes its real-time scheduler on demand
        except MissingSchedulerError:
            raise MissingSchedulerError(
                f"{self.operator_label} is time-based: the operator context of {context.instance_id!r} needs a "
                "scheduler (run the query in an engine, or pass a context with one)"
            ) from None

    def on_start(self) -> None:
        scheduler = self.context.scheduler
        now = scheduler.now
        due = self.deadline(now)
        if due is None or due >= MAX_TIME:  # behind us, or never (a duration reaching past datetime.max)
            return
        if due <= now:
            self.on_deadline()
        else:
            armed = self.armed_at(due)
            task = self._timer_task = ActionTask(  # type: ignore[misc]  # (the subclass's slot)
                self._fire, armed=armed, arrival=None if armed is None else self._number)
            scheduler.schedule(task, due)

    def _save_number(self, writer: StateWriter) -> None:
        """Write the timer's number (read from its task at the checkpoint; ``None`` before the start)."""
        writer.write(number_of(self._timer_task))

    def _load_number(self, reader: StateReader) -> None:
        self._number = read_number(reader)  # type: ignore[misc]  # (the subclass's slot)

    def _fire(self) -> None:
        if not self._disposed:
            self.on_deadline()


class AtATime(DeadlineStage[T], Generic[T]):
    """A timer at a time given by the query (``take_until``/``skip_until`` a time), armed at the subscription.
    State version 2: the subclass's fields of version 1 (:meth:`_save_fields`, none by default), then when it
    subscribed (``_subscribed_at``, a slot the subclass declares) and the timer's number among the timers armed
    in that tick, so a recovered timer goes back in line where it stood. Version 1 still loads: its timer is
    re-armed at the restart's tick (as that version did)."""

    __slots__ = ()

    older_versions = frozenset({(1,)})
    _subscribed_at: datetime | None
    _time: datetime  # the query's (a slot the subclass declares)

    def _save_fields(self, writer: StateWriter) -> None:
        """Write the subclass's fields of version 1."""

    def save_state_core(self, writer: StateWriter) -> None:
        self._save_fields(writer)
        writer.write(self._subscribed_at)
        self._save_number(writer)

    def load_state_core(self, reader: StateReader) -> None:
        self.load_older_state_core(reader, (1,))  # (1,) is (2,) without the last two fields
        self._subscribed_at = reader.read_optional_datetime(  # type: ignore[misc]  # (the subclass's slot)
            "subscribed at", *time_bounds(self.context))
        self._load_number(reader)

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        """Read the subclass's fields of version 1."""

    def deadline(self, now: datetime) -> datetime | None:
        if self._subscribed_at is None:  # a new stage is armed now (a recovered one knows when, or re-arms now)
            self._subscribed_at = now  # type: ignore[misc]  # (the subclass's slot)
            self._state.changed = True
        return self._time

    def armed_at(self, due: datetime) -> datetime | None:
        return self._subscribed_at


class LockedEnd(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The source's error and completion, taken under ``_lock`` (the subclass's slot), so that they never overlap
    what else the lock serializes downstream (rule 1.3): ``take_until`` by a stream or a time."""

    __slots__ = ()

    _lock: threading.RLock

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "error", "2.13")
        with self._lock:
            self._upstream_terminated()
            self._signal_error(error)

    def on_complete(self) -> None:
        with self._lock:
            self._upstream_terminated()
            self._signal_complete()


class TakeUntilDeadline(LockedEnd[T], DeadlineStage[T], Generic[T]):
    """Passes every element until the deadline, then completes and unsubscribes from the source.

    The timer and the source may signal on different threads, so a lock serializes what goes downstream (rule
    1.3): an element never overlaps the completion, and nothing follows it. Demand passes straight through.
    """

    __slots__ = ("_lock",)

    def __init__(self, downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        self._lock = threading.RLock()  # re-entrant: a downstream may cancel from inside on_next

    def on_next(self, value: T) -> None:
        with self._lock:
            self._downstream.on_next(value)  # a no-op subscriber once completed

    def on_deadline(self) -> None:
        with self._lock:
            if not self._disposed:
                self._signal_complete()


class GateStage(DroppingStage[T], Generic[T]):
    """Drops every element until the gate opens (``_open``, saved by the subclass), then passes every element;
    each element dropped before is replaced with ``request(1)`` upstream, unless demand is unbounded
    (``skip_until`` by a stream or a time)."""

    __slots__ = ("_open",)

    def __init__(self, downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        self._open = False

    def on_next(self, value: T) -> None:
        if self._open:
            self._downstream.on_next(value)
        else:
            self._replace_dropped()


class OpenAtDeadline(GateStage[T], DeadlineStage[T], Generic[T]):
    """Drops every element until the deadline, then passes every element (:class:`GateStage`). The source's
    completion and errors pass at any time (as in Rx: a source that ends before the gate opens ends the result
    too).

    State: ``open`` (the deadline was reached), after whatever the subclass saves first. The timer only flips
    ``open``; it never signals downstream, so there is nothing to serialize and no lock.
    """

    __slots__ = ()

    def on_deadline(self) -> None:
        self._open = True
        self._state.changed = True


class UntilStage(LockedEnd[T], Generic[T]):
    """What ``take_until`` and ``skip_until`` with a stream share: two inputs, visited in this order, ``other``
    (input 0, through an :class:`UntilObserver`) and the source (input 1); a lock serializing what may race
    downstream (rule 1.3; :class:`LockedEnd`, whose completion ``skip_until`` replaces); ``other``'s error ends
    the stage, its completion without an element sets ``_other_done`` (saved: a recovered stage does not listen
    to it again, :meth:`_forget_ended_other`). A
    subclass declares the slots ``_lock``, ``_other``, ``_other_done``, ``_other_observer`` and ``_source`` (so
    that it may combine with :class:`DroppingStage`) and handles ``_on_other_next``."""

    __slots__ = ()

    _lock: threading.RLock
    _other: Subscribable[Any]
    _other_done: bool
    _other_observer: UntilObserver
    _source: Subscribable[T]

    def _init_until(self, source: Subscribable[T], other: Subscribable[Any]) -> None:
        # (mypy: the slots are the subclass's, see the class)
        self._source = source  # type: ignore[misc]
        self._other = other  # type: ignore[misc]
        self._other_done = False  # type: ignore[misc]
        self._other_observer = UntilObserver(self)  # type: ignore[misc]
        self._lock = threading.RLock()  # type: ignore[misc]  # re-entrant: a downstream may cancel or feed the other


    def subscribe_inputs(self) -> tuple[SubscriptionHandle, ...]:
        return (self._other.subscribe(self._other_observer), self.subscribe_input())

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    @property
    def input(self) -> SubscriptionHandle:
        """The source's subscription (input 1; input 0 is the other's)."""
        return self._inputs[1] if self._inputs else NOP_SUBSCRIPTION

    def _forget_ended_other(self) -> None:
        """Restored after the other ended: do not listen to it again."""
        if self._other_done:
            self._other_observer.cancel()
            self._inputs[0].dispose()

    def on_dispose(self) -> None:
        self._other_observer.cancel()

    @abstractmethod
    def _on_other_next(self) -> None:
        """The other emitted its first element."""

    def _on_other_error(self, error: BaseException) -> None:
        with self._lock:
            if not self._disposed:
                self._signal_error(error)

    def _on_other_complete(self) -> None:
        with self._lock:
            if not self._disposed:
                self._other_done = True  # type: ignore[misc]
                self._state.changed = True


class UntilOwner(Protocol):
    """What an :class:`UntilObserver` reports to: the stage that owns the second input."""

    def _on_other_next(self) -> None: ...

    def _on_other_error(self, error: BaseException) -> None: ...

    def _on_other_complete(self) -> None: ...


class UntilObserver(Subscriber[Any]):
    """Subscribes the "other" input of ``take_until``/``skip_until``: only its first signal matters, so it
    requests one element, reports the first signal to its owner and ignores anything after it.

    It ends the other subscription when the owner asks (:meth:`cancel`, from the owner's ``dispose``), never
    from inside the other's own ``on_complete``/``on_error`` (rule 2.3): after those the subscription has ended.
    """

    __slots__ = ("_done", "_owner", "_subscription")

    def __init__(self, owner: UntilOwner) -> None:
        self._owner = owner
        self._subscription: Subscription | None = None
        self._done = False

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "subscription", "2.13")
        if self._done or self._subscription is not None:
            subscription.cancel()  # the owner is gone, or a second subscription (rule 2.5)
            return
        self._subscription = subscription
        subscription.request(1)

    def on_next(self, value: Any) -> None:
        if self._done:
            return
        self._done = True
        self._owner._on_other_next()

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "error", "2.13")
        if self._done:
            return
        self._done = True
        self._subscription = None  # ended by the other itself
        self._owner._on_other_error(error)

    def on_complete(self) -> None:
        if self._done:
            return
        self._done = True
        self._subscription = None  # ended by the other itself
        self._owner._on_other_complete()

    def cancel(self) -> None:
        """Stop listening and cancel the other subscription, if it has not ended itself."""
        self._done = True
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            subscription.cancel()
