"""Queries are data: an immutable expression of operator names and arguments, built with a fluent API.

>>> from reaqtive import from_iterable
>>> query = from_iterable(range(10)).map(lambda x: x * 2).filter(lambda x: x % 3 == 0)
>>> query.op, len(query.args)
('filter', 2)

Building a query runs nothing. ``query.subscribe(subscriber)`` *binds* the expression: it looks each operator
name up in the registry (:mod:`reaqtive.binding`) and creates the running operators, still without starting them.
:meth:`Query.run` binds and starts in one call. Because an expression holds names and plain arguments rather than
objects with behaviour, the engine can persist it and re-create the same operators after a restart.

Arguments are validated when the query is built, so a bad argument fails where it is written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

from reaqtive.binding import bind, register_operator
from reaqtive.context import HigherOrderEnvironment, OperatorContext
from reaqtive.fluent.aggregates import AggregateMixin
from reaqtive.fluent.buffers import BufferMixin
from reaqtive.fluent.combine import CombineMixin
from reaqtive.fluent.higher_order import HigherOrderMixin
from reaqtive.fluent.sources import SourceConstructors
from reaqtive.fluent.take_skip import TakeSkipMixin
from reaqtive.fluent.time import TimeMixin
from reaqtive.fluent.transform import TransformMixin
from reaqtive.streams import Subscriber
from reaqtive.subscribable import Subscribable
from reaqtive.subscribers import CallbackSubscriber
from reaqtive.subscriptions import SubscriptionHandle
from reaqtive.visitors import initialize

__all__ = [
    "DEFAULT_INSTANCE_ID",
    "GroupedStream",
    "InnerStream",
    "Query",
    "combine_latest",
    "empty",
    "from_iterable",
    "interval",
    "merge",
    "never",
    "return_value",
    "throw",
    "timer",
]

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_INSTANCE_ID = "reaqtive://local"
"""The instance id of queries run outside an engine."""


class Query(
    SourceConstructors,
    TransformMixin[T],
    TakeSkipMixin[T],
    AggregateMixin[T],
    CombineMixin[T],
    BufferMixin[T],
    TimeMixin[T],
    HigherOrderMixin[T],
    Subscribable[T],
    Generic[T],
):
    """An immutable query expression node: an operator name and its arguments.

    Arguments are constants, functions, or other queries (the sources). Two queries built the same way from
    the same objects are equal. The fluent methods come from one mixin per operator family
    (:mod:`reaqtive.fluent`).
    """

    __slots__ = ("_args", "_op")

    def __init__(self, op: str, args: tuple[object, ...] = ()) -> None:
        if not isinstance(op, str) or not op:
            raise TypeError(f"op must be a non-empty str, got {op!r}")
        self._op = op
        self._args = tuple(args)

    @property
    def op(self) -> str:
        """The operator name, e.g. ``"map"``."""
        return self._op

    @property
    def args(self) -> tuple[object, ...]:
        """The arguments: sources (queries), functions and constants."""
        return self._args

    def subscribe_core(self, observer: Subscriber[T]) -> SubscriptionHandle:
        return bind(self, observer)

    # -- running -----------------------------------------------------------------------------------------------

    @overload
    def run(
        self,
        observer: Subscriber[T],
        *,
        context: OperatorContext | None = None,
    ) -> SubscriptionHandle: ...

    @overload
    def run(
        self,
        observer: Callable[[T], object] | None = None,
        on_error: Callable[[BaseException], object] | None = None,
        on_complete: Callable[[], object] | None = None,
        *,
        context: OperatorContext | None = None,
        batch_size: int | None = None,
    ) -> SubscriptionHandle: ...

    def run(
        self,
        observer: Subscriber[T] | Callable[[T], object] | None = None,
        on_error: Callable[[BaseException], object] | None = None,
        on_complete: Callable[[], object] | None = None,
        *,
        context: OperatorContext | None = None,
        batch_size: int | None = None,
    ) -> SubscriptionHandle:
        """Bind and start the query: subscribe, set the context, start. Returns the handle to dispose.

        ``observer`` is a :class:`~reaqtive.streams.Subscriber`, or the ``on_next`` function of a
        :class:`~reaqtive.subscribers.CallbackSubscriber` built from the other arguments. Without a
        ``context`` the query runs standalone (no scheduler: time-based operators need one).
        """
        subscriber: Subscriber[T]
        if isinstance(observer, Subscriber):
            subscriber = observer
        else:
            subscriber = CallbackSubscriber(observer, on_error, on_complete, batch_size=batch_size)
        handle = self.subscribe(subscriber)
        return initialize(handle, context if context is not None else OperatorContext(DEFAULT_INSTANCE_ID))

    # -- data model --------------------------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Query) and other._op == self._op and other._args == self._args

    def __hash__(self) -> int:
        # Arguments may be unhashable (lists); equal queries must hash equal, so hash the shape only.
        return hash((self._op, len(self._args)))

    def __repr__(self) -> str:
        args = list(self._args)
        if args and isinstance(args[0], Query):
            source = args.pop(0)
            return f"{source!r}.{self._op}({', '.join(_describe(a) for a in args)})"
        return f"{self._op}({', '.join(_describe(a) for a in args)})"


class InnerStream(Query[T], Generic[T]):
    """A query over an inner subject of a higher-order operator: a window of ``window``, or (as
    :class:`GroupedStream`) a group of ``group_by``.

    ``stream_id`` is the subject's id in the :class:`~reaqtive.context.HigherOrderEnvironment` (``None`` when the
    operator runs without one). An operator that keeps inner streams in its state (``flat_map`` over groups)
    saves :meth:`reference` and re-creates the stream with :meth:`from_reference` after a restart.
    """

    __slots__ = ("_stream_id",)

    def __init__(self, subject: Subscribable[T], stream_id: str | None) -> None:
        super().__init__("subscribable", (subject,))
        self._stream_id = stream_id

    @property
    def stream_id(self) -> str | None:
        """The inner subject's id in the environment, or ``None`` standalone."""
        return self._stream_id

    def reference(self) -> tuple[object, ...]:
        """What to save to re-create this stream after a restart: ``("window", stream_id)``."""
        return ("window", self._stream_id)

    @staticmethod
    def from_reference(reference: tuple[object, ...], environment: HigherOrderEnvironment) -> InnerStream[Any]:
        """Re-create a saved inner stream, looking its subject up (or re-creating it) in ``environment``."""
        kind, stream_id, *rest = reference
        if not isinstance(stream_id, str):
            raise TypeError(f"an inner stream saved without an environment id cannot be restored: {reference!r}")
        subject = environment.get_or_create_subject(stream_id)
        if kind == "group":
            return GroupedStream(subject, stream_id, rest[0])
        if kind == "window":
            return InnerStream(subject, stream_id)
        raise ValueError(f"unknown inner stream reference {reference!r}")

    def __repr__(self) -> str:
        return f"InnerStream({self._stream_id!r})"


class GroupedStream(InnerStream[T], Generic[T]):
    """One group of ``group_by``: a query over the group's elements, with its ``key``."""

    __slots__ = ("_key",)

    def __init__(self, subject: Subscribable[T], stream_id: str | None, key: object) -> None:
        super().__init__(subject, stream_id)
        self._key = key

    @property
    def key(self) -> object:
        """The group's key."""
        return self._key

    def reference(self) -> tuple[object, ...]:
        """``("group", stream_id, key)``."""
        return ("group", self._stream_id, self._key)

    def __repr__(self) -> str:
        return f"GroupedStream({self._key!r}, {self._stream_id!r})"


from_iterable = Query.from_iterable
return_value = Query.return_value
empty = Query.empty
never = Query.never
throw = Query.throw
timer = Query.timer
interval = Query.interval


def merge(*sources: Subscribable[T]) -> Query[T]:
    """The elements of all ``sources``, interleaved as they arrive (see :meth:`Query.merge`)."""
    if not sources:
        raise TypeError("merge needs at least one source")
    first, *others = sources
    return Query.merge(Query.from_subscribable(first) if not isinstance(first, Query) else first, *others)


def combine_latest(*sources_and_selector: Any, selector: Callable[..., Any] | None = None) -> Query[Any]:
    """The latest elements of every source, combined whenever one emits (see :meth:`Query.combine_latest`)."""
    if not sources_and_selector:
        raise TypeError("combine_latest needs at least two sources")
    first, *rest = sources_and_selector
    query = first if isinstance(first, Query) else Query.from_subscribable(first)
    return query.combine_latest(*rest, selector=selector)


@register_operator("subscribable")
def _bind_subscribable(query: Query[Any], subscriber: Subscriber[Any]) -> SubscriptionHandle:
    source = query.args[0]
    assert isinstance(source, Subscribable)
    return source.subscribe(subscriber)


def _describe(value: object) -> str:
    if isinstance(value, Query):
        return repr(value)
    if callable(value):
        return f"<{getattr(value, '__qualname__', type(value).__name__)}>"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
