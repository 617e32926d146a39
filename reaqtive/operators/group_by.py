"""``group_by``: split a stream into one inner stream (a *group*) per key."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import (
    ArgsRecord,
    Arguments,
    arguments,
    require_callable,
    require_duration,
    require_positive_int,
)
from reaqtive.core.binding import register_operator
from reaqtive.core.context import OperatorContext
from reaqtive.core.describe import error_text, shown
from reaqtive.core.errors import LimitExceededError, ObjectDisposedError
from reaqtive.core.expression import Expression, GroupedStreamNode, InnerStreamNode, OperatorCall, new_grouped_stream
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.scheduler_interface import Scheduler
from reaqtive.core.streams import LONG_MAX, Subscriber
from reaqtive.core.subjects import MultiSubject
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators._inner_subjects import Inner, InnerStreamOperator
from reaqtive.operators._places import number_of, read_number
from reaqtive.operators._timing import add_safe
from reaqtive.operators.settings import MAX_GROUP_COUNT, UNLIMITED, read_limit
from reaqtive.scheduler import ActionTask
from reaqtive.state.fields import time_bounds

__all__ = [
    "GroupBy",
    "GroupByArgs",
    "GroupByExpiring",
    "bind_group_by",
    "group_by",
    "none_element_error",
    "unhashable_key_error",
]

T = TypeVar("T")


def group_by(
    key_selector: Callable[[Any], object],
    element_selector: Callable[[Any], Any] | None = None,
    *,
    max_groups: int | None = None,
    expire_after: timedelta | None = None,
) -> OperatorCall[Any]:
    """Split the elements into one inner stream per key: each new key emits a
    :class:`~reaqtive.fluent.query.GroupedStream` (a query, with ``.key``), and each element goes into the group of
    ``key_selector(element)``, as ``element_selector(element)`` if given.

    >>> from_iterable(range(7)).group_by(lambda x: x % 3).flat_map(
    ...     lambda g: g.to_list().map(lambda xs: (g.key, xs))).run(print)  # doctest: +ELLIPSIS
    (0, [0, 3, 6])
    (1, [1, 4])
    (2, [2, 5])
    <...>

    Subscribe to a group while it is being emitted (``flat_map`` does): its first element is pushed right
    after, and a group keeps no elements for late subscribers. The source's completion completes every
    group, then the result; an error (of the source, a selector, a limit) goes to every group, then to the
    result. Disposing the result completes the live groups.

    Keys are any hashable value, ``None`` included (a key, not an element: it is a group like any other), and
    are saved in checkpoints, so a checkpointed ``group_by`` needs keys the state codec can write (plain data,
    or a type registered with ``register_state_type``); any other key fails the checkpoint with
    ``StateEncodeError``. User code runs in this order: the key selector, the element selector, then (for a new
    key) the group is created and emitted, and the element goes into its group (Rx calls the element selector
    after emitting a new group; here it runs first, so that an element the error policy skips opens no group).
    A selector that raises, a key that cannot be hashed, or an element selector returning ``None`` fails the
    operator (after the new key's group went out, as in Rx), or, under a skip policy, skips the element: it goes
    into no group, and opens none.

    ``max_groups`` bounds the open groups (so does the host's ``MAX_GROUP_COUNT``); one more is a
    ``LimitExceededError``. With ``expire_after`` a group that received no element for that long completes
    and is forgotten (its subject deleted); a later element with its key opens a new group, with a new id. An
    element that arrives at the very instant its group would expire keeps it alive (on virtual time, sources
    run before timers at equal times). Expiry needs a scheduler.

    **State.** The group counter, whether the source completed and, per open group, its number and key (its
    subject's id is ``<prefix>/<number>`` under an environment; elements into emitted groups change nothing, so
    a differential checkpoint writes only the groups' own consumers that changed); with ``expire_after``, the
    time of each group's latest element, which changes with every element (a recovered group expires when it
    would have); groups waiting for demand, with their elements.

    **Demand.** Everything upstream once the result was asked for anything. A new group goes out only on
    demand; until then it waits with its elements (at most ``MAX_QUEUE_SIZE`` in all, 256 by default, then
    ``LimitExceededError``). Inside a group, each subscriber has its own demand and the bounded buffer of
    the group's subject (1024 elements, then ``BufferOverflowError``).

    Reaqtive: GroupBy.
    """
    require_callable(key_selector, "group_by", "key_selector")
    if element_selector is not None:
        require_callable(element_selector, "group_by", "element_selector")
    if max_groups is not None:
        max_groups = require_positive_int(max_groups, "group_by", "max_groups")
    if expire_after is not None:
        expire_after = require_duration(expire_after, "group_by", "expire_after")
        if expire_after <= timedelta(0):
            raise ValueError(f"group_by: expire_after must be positive, got {expire_after}")
    return OperatorCall("group_by", (key_selector, element_selector, max_groups, expire_after))


class GroupByArgs(ArgsRecord, source="source", key_selector="function", element_selector="optional_function",
                  max_groups="optional_positive_count", expire_after="optional_positive_duration"):
    """The arguments of a ``group_by`` node: ``(source, key_selector, element_selector, max_groups,
    expire_after)``."""


def _arguments(query: Expression[Any]) -> Arguments:
    return arguments(query, "source", "key_selector", "element_selector", "max_groups", "expire_after")


@register_operator("group_by", frames=8, builder=group_by, args=GroupByArgs)
def bind_group_by(query: Expression[Any], subscriber: Subscriber[Any]) -> SubscriptionHandle:
    """The binder of :func:`group_by`: :class:`GroupBy`, or :class:`GroupByExpiring` with ``expire_after``."""
    if GroupByArgs.read(query).expire_after is None:
        return GroupBy(query, subscriber)
    return GroupByExpiring(query, subscriber)


def none_element_error() -> TypeError:
    """The failure of an element selector that returned ``None`` (shared with the keyed path)."""
    return TypeError("group_by: the element selector returned None (None is never an element)")


class _Selecting:
    """The lock-free path into a group with an element selector: select, then push."""

    __slots__ = ("_owner", "_push", "_selector")

    def __init__(self, owner: GroupBy[Any], selector: Callable[[Any], object], push: Callable[[Any], None]) -> None:
        self._owner = owner
        self._selector = selector
        self._push = push

    def __call__(self, value: object) -> None:
        try:
            element = self._selector(value)
        except Exception as error:
            self._owner._user_error(error, value)
            return
        if element is None:
            self._owner._user_error(none_element_error(), value)
            return
        self._push(element)


def unhashable_key_error(key: object, error: TypeError) -> TypeError:
    """The failure of a key that cannot be hashed (shared with the keyed path)."""
    failure = TypeError(f"group_by: the key {shown(key)} cannot be hashed ({error_text(error)})")
    failure.__cause__ = error
    return failure


class GroupBy(InnerStreamOperator[T], Generic[T]):
    """The running stage of :func:`group_by` without expiry; the shared rules of inner subjects (their ids,
    demand across the boundary, termination, serialization, their state) are in
    :mod:`reaqtive.operators._inner_subjects`.

    With unbounded outer demand and nothing waiting, elements of emitted groups take a lock-free path (a key
    lookup and a push into the subject): only the source's thread changes anything then.
    """

    name = "reaqtive:group_by"
    version: Version = (1,)
    state_fields = ("next_number", "source_done", "pulled", "groups")
    kind = "group_by"

    __slots__ = (
        "_element_selector",
        "_groups",
        "_key_selector",
        "_limit_name",
        "_max_groups",
        "_sinks",
    )

    def __init__(self, query: Expression[Any], downstream: Subscriber[InnerStreamNode[Any]]) -> None:
        args = GroupByArgs.read(query)
        super().__init__(args.source, downstream)
        self._key_selector: Callable[[T], object] = args.key_selector
        self._element_selector: Callable[[T], object] | None = args.element_selector
        max_groups = args.max_groups
        self._max_groups: int = max_groups if max_groups is not None else UNLIMITED
        self._limit_name = "max_groups"
        self._groups: dict[object, Inner] = {}  # the open groups by key (emitted or waiting)
        # The emitted open groups: where an element goes (the subject's input, through the element selector)
        self._sinks: dict[object, Callable[[Any], None]] = {}

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        setting = read_limit(context, MAX_GROUP_COUNT)
        if setting < self._max_groups:
            self._max_groups, self._limit_name = setting, MAX_GROUP_COUNT

    def save_state_core(self, writer: StateWriter) -> None:
        with self._lock:
            self._save_inners(writer)

    def load_state_core(self, reader: StateReader) -> None:
        self._load_inners(reader)
        self._rebuild(reader, self._open_inners())

    def _rebuild(self, reader: StateReader, groups: Any) -> None:
        self._groups = {}
        self._sinks = {}
        for group in groups:
            if group.key in self._groups:  # (a key that cannot be hashed raises: an OperatorStateError)
                raise reader.invalid("inners", "one open group per key", group.key)
            self._groups[group.key] = group
            if group.sink is not None:
                self._sinks[group.key] = self._sink_of(group.sink)

    def _sink_of(self, sink: Subscriber[Any]) -> Callable[[Any], None]:
        selector = self._element_selector
        return sink.on_next if selector is None else _Selecting(self, selector, sink.on_next)

    # -- elements ----------------------------------------------------------------------------------------------

    def on_next(self, value: T) -> None:
        try:
            key = self._key_selector(value)
        except Exception as error:
            self._user_error(error, value)
            return
        if self._fast:
            # The lock-free path (unbounded demand, nothing waiting, no timers: only this thread changes
            # anything): an element of an emitted group goes straight into it.
            try:
                sink = self._sinks[key]
            except KeyError:
                pass  # a new group
            except TypeError as error:
                self._user_error(unhashable_key_error(key, error), value)
                return
            else:
                try:
                    sink(value)
                except ObjectDisposedError:
                    if self._disposed:
                        return  # disposed from another thread meanwhile
                    raise
                return
        self._serialize(self._element, (key, value))

    def _element(self, key_and_value: tuple[object, T]) -> None:
        if self._terminated:
            return
        key, value = key_and_value
        try:
            group = self._groups.get(key)
        except TypeError as error:
            failure = unhashable_key_error(key, error)
            if not self._skips(failure, value):
                self._fail(failure)
            return
        # The element selector runs before a new group opens, so that a skipped element opens none; an error that
        # stops the query still does so after the new group went out (a limit first), as it always did.
        element: object = value
        selected: Exception | None = None
        selector = self._element_selector
        if selector is not None:
            try:
                element = selector(value)
                if element is None:
                    raise none_element_error()
            except Exception as error:
                if self._skips(error, value):
                    return
                selected = error
        if group is None:
            if len(self._groups) >= self._max_groups:
                self._fail(LimitExceededError(self.name, self._limit_name, self._max_groups))
                return
            group = self._new_inner(key)
            self._groups[key] = group
            if not self._open(group):
                return
        if selected is not None:
            self._fail(selected)
            return
        self._touch(group)
        self._push(group, element)

    def _touch(self, group: Inner) -> None:
        """An element for ``group`` (expiry keeps the time)."""

    # -- the shared machinery's hooks --------------------------------------------------------------------------

    def _make_stream(
        self, inner: Inner, subject: MultiSubject[Any, Any], stream_id: str | None
    ) -> GroupedStreamNode[Any]:
        if not inner.closed:
            sink = inner.sink
            assert sink is not None
            self._sinks[inner.key] = self._sink_of(sink)
        return new_grouped_stream(subject, stream_id, inner.key)

    def _close_all(self) -> None:
        groups = list(self._groups.values())
        self._groups.clear()
        self._sinks.clear()
        for group in groups:
            self._end(group)

    def _forget_all(self) -> None:
        self._groups.clear()
        self._sinks.clear()

    def _fast_allowed(self) -> bool:
        return (
            self._demand == LONG_MAX
            and not self._pending
            and self._ready
            and not self._terminated
            and not self._disposed
        )


class GroupByExpiring(GroupBy[T], Generic[T]):
    """The running stage of :func:`group_by` with ``expire_after``: as :class:`GroupBy`, plus expiry.

    One timer is pending at a time, for the group idle the longest; groups are kept in the order of their
    latest element (and saved in it), so each element costs a dictionary re-insertion and a read of the clock.
    Every element goes through a serialized action, since the timer changes groups too. State version 2 adds the
    pending timer (due, armed: it fires early when the group it was armed for got a newer element, and re-arms;
    its number among the timers armed in that tick), so a recovered one stands where it stood among the timers
    of its instant; version 1 still loads.
    """

    name = "reaqtive:group_by+expiry"
    version: Version = (2,)
    older_versions = frozenset({(1,)})

    __slots__ = ("_expire_after", "_number", "_scheduler", "_timer_armed", "_timer_due", "_timer_task")

    def __init__(self, query: Expression[Any], downstream: Subscriber[InnerStreamNode[Any]]) -> None:
        super().__init__(query, downstream)
        expire_after = GroupByArgs.read(query).expire_after
        if expire_after is None:  # a query bound to the wrong stage
            _arguments(query).fail(4, "a positive timedelta")
        self._expire_after = expire_after
        self._scheduler: Scheduler | None = None
        self._timer_due: datetime | None = None
        self._timer_armed: datetime | None = None
        self._timer_task: ActionTask | None = None  # the pending timer's task: told its place in line
        self._number: int | None = None  # a loaded timer's place among the timers armed in its tick

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._scheduler = context.scheduler  # MissingSchedulerError without one: expiry needs a clock

    def save_state_core(self, writer: StateWriter) -> None:
        with self._lock:
            self._save_inners(writer)
            writer.write([[group.number, group.last] for group in self._groups.values()])
            writer.write(self._timer_due)
            writer.write(self._timer_armed if self._timer_due is not None else None)
            writer.write(number_of(self._timer_task) if self._timer_due is not None else None)

    def load_state_core(self, reader: StateReader) -> None:
        self.load_older_state_core(reader, (1,))  # (1,) is (2,) without the timer
        due = reader.read_optional_datetime("timer due", *time_bounds(self.context, self._expire_after))
        armed = reader.read_optional_datetime("timer armed", *time_bounds(self.context))
        if (due is None) != (armed is None) or (due is not None and armed is not None and armed > due):
            raise reader.invalid("timer armed", "a time at or before the timer due, exactly with it", armed)
        self._timer_due, self._timer_armed = due, armed
        self._number = read_number(reader)

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        self._load_inners(reader)
        inners = self._inners
        ordered: list[Inner] = []
        earliest, latest = time_bounds(self.context)
        for record in reader.read_records("latest", 2):  # every open group, in the order of their latest element
            number = record.read_int("number")
            group = inners.get(number)
            if group is None or group.closed or group.last is not None:
                raise record.invalid("number", "an open group of the state, once", number)
            group.last = record.read_datetime("last", ordered[-1].last if ordered else earliest, latest)
            ordered.append(group)
        if len(ordered) != sum(1 for _ in self._open_inners()):
            raise reader.invalid("latest", "a record for every open group", len(ordered))
        self._rebuild(reader, ordered)

    def _fast_allowed(self) -> bool:
        return False  # the timer changes groups: every element goes through an action

    def _touch(self, group: Inner) -> None:
        scheduler = self._scheduler
        assert scheduler is not None
        group.last = now = scheduler.now
        groups = self._groups
        key = group.key
        del groups[key]  # re-insert: the groups stay in the order of their latest element
        groups[key] = group
        self._state.changed = True
        if self._timer_due is None:
            self._schedule(add_safe(now, self._expire_after))

    def _begin(self) -> None:
        if self._timer_due is not None:  # recovered: the timer as it stood, in its place in line
            scheduler = self._scheduler
            assert scheduler is not None
            task = self._timer_task = ActionTask(self._on_timer, armed=self._timer_armed, arrival=self._number)
            scheduler.schedule(task, due=self._timer_due)
        elif self._groups:  # recovered with open groups from a version 1 state
            first = next(iter(self._groups.values()))
            self._schedule(add_safe(first.last, self._expire_after))

    def _schedule(self, due: datetime) -> None:
        scheduler = self._scheduler
        assert scheduler is not None
        self._timer_due, self._timer_armed = due, scheduler.now
        task = self._timer_task = ActionTask(self._on_timer)
        scheduler.schedule(task, due=due)

    def _on_timer(self) -> None:
        if self._disposed:
            return  # muted: a disposed operator's timer may still run
        self._serialize(self._expire, None)

    def _expire(self, _: object) -> None:
        """An action: end every group idle for ``expire_after``; re-arm the timer for the next one."""
        self._timer_due = None
        if self._terminated:
            return
        scheduler = self._scheduler
        assert scheduler is not None
        now = scheduler.now
        groups = self._groups
        while groups and not (self._terminated or self._disposed):
            group = next(iter(groups.values()))
            due = add_safe(group.last, self._expire_after)
            if due > now:
                self._schedule(due)
                return
            del groups[group.key]
            self._sinks.pop(group.key, None)
            self._end(group)
