"""Queries are data: an immutable expression of operator names and arguments, built with a fluent API.

>>> from reaqtive import from_iterable
>>> query = from_iterable(range(10)).map(lambda x: x * 2).filter(lambda x: x % 3 == 0)
>>> query.op, len(query.args)
('filter', 2)

Building a query runs nothing. ``query.subscribe(subscriber)`` *binds* the expression: it looks each operator
name up in the registry (:mod:`reaqtive.binding`) and creates the running operators, still without starting them.
:meth:`Query.run` binds and starts in one call. Because an expression holds names and plain arguments rather than
objects with behaviour, the engine can persist it and re-create the same operators after a restart.

Arguments are validated when the query is built, so a bad argument fails where it is written; binding checks
them again (:mod:`reaqtive.arguments`), for expressions that did not come through the builders.

**Depth.** Each element, completion and request passes through every stage of a query as a nested Python call,
so how deep a query can be is bounded by Python's recursion limit. Each operator states the frames one of its
stages takes (:func:`reaqtive.binding.frames_of`: 2 for ``map``, 3 for ``filter``, more for stages that hand
elements through queues or inner subscriptions); a query needs the sum along its deepest path
(:attr:`Query.frames`), and may take :func:`frame_budget` frames: the recursion limit less
:data:`RESERVED_FRAMES`, 850 at the default limit of 1,000, so a source and 423 ``map`` stages or 282 ``filter``
stages. Subscribing a query that needs more raises :class:`~reaqtive.errors.QueryTooDeepError` before anything
runs (never a ``RecursionError`` halfway through processing); raise the limit (``sys.setrecursionlimit``) to run
deeper ones. Everything else (binding, starting, saving, loading, disposing, comparing and printing queries)
walks the tree without recursion, at any depth.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Final, Generic, TypeGuard, TypeVar, overload

from reaqtive.arguments import arguments
from reaqtive.binding import bind, frames_of, register_operator
from reaqtive.context import HigherOrderEnvironment, OperatorContext
from reaqtive.errors import QueryTooDeepError
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
    "frame_budget",
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

RESERVED_FRAMES: Final = 150
"""Frames of the recursion limit kept for what runs below and above a query's stages: the host's call stack,
scheduler tasks, the source's loop, the subscriber, user functions, the teardown at completion."""


def frame_budget() -> int:
    """The nested Python frames a query's stages may take: :func:`sys.getrecursionlimit` less
    :data:`RESERVED_FRAMES` (850 at the default limit of 1,000).

    Subscribing a query whose :attr:`Query.frames` exceed it raises :class:`~reaqtive.errors.QueryTooDeepError`.
    Inner queries of higher-order operators are subscribed when they start, deeper in the stack than their
    outer query's stages: the check counts each on its own, which the heavier frames of the higher-order
    operators (:func:`reaqtive.binding.frames_of`) allow for.
    """
    return max(0, sys.getrecursionlimit() - RESERVED_FRAMES)


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

    __slots__ = ("_args", "_depth", "_frames", "_op")

    def __init__(self, op: str, args: tuple[object, ...] = ()) -> None:
        if not isinstance(op, str) or not op:
            raise TypeError(f"op must be a non-empty str, got {op!r}")
        self._op = op
        self._args = args = tuple(args)
        depth = 0
        for arg in args:
            if _is_query(arg) and arg._depth > depth:
                depth = arg._depth
        self._depth: int = depth + 1
        self._frames: int | None = None  # computed at the first subscribe, when every operator is registered

    @property
    def op(self) -> str:
        """The operator name, e.g. ``"map"``."""
        return self._op

    @property
    def args(self) -> tuple[object, ...]:
        """The arguments: sources (queries), functions and constants."""
        return self._args

    @property
    def depth(self) -> int:
        """The number of stages on the longest path from this node to a source (a source alone is 1 deep)."""
        return self._depth

    @property
    def frames(self) -> int:
        """The nested Python frames the stages on this query's deepest path take (the operators'
        :func:`~reaqtive.binding.frames_of`, added up along the path); see :func:`frame_budget`."""
        frames = self._frames
        if frames is None:
            frames = self._frames = _frames_needed(self)
        return frames

    def subscribe_core(self, observer: Subscriber[T]) -> SubscriptionHandle:
        frames = self._frames
        if frames is None:
            frames = self._frames = _frames_needed(self)
        budget = sys.getrecursionlimit() - RESERVED_FRAMES
        if frames > budget:
            raise QueryTooDeepError(self._depth, frames, budget, frames + RESERVED_FRAMES)
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
        if not isinstance(other, Query):
            return False
        # Compared with a stack of pairs, not recursively, so that queries of any depth compare.
        pending: list[tuple[Query[Any], Query[Any]]] = [(self, other)]
        while pending:
            mine, theirs = pending.pop()
            if mine is theirs:
                continue
            if mine._op != theirs._op or len(mine._args) != len(theirs._args):
                return False
            for a, b in zip(mine._args, theirs._args, strict=True):
                if isinstance(a, Query) and isinstance(b, Query):
                    pending.append((a, b))
                elif isinstance(a, Query) or isinstance(b, Query) or not a == b:
                    return False
        return True

    def __hash__(self) -> int:
        # Arguments may be unhashable (lists); equal queries must hash equal, so hash the shape only.
        return hash((self._op, len(self._args)))

    def __repr__(self) -> str:
        # ``source.op(args)`` down the chain of first arguments, built without recursion.
        chain: list[Query[Any]] = [self]
        while True:
            args = chain[-1]._args
            if not (args and isinstance(args[0], Query) and type(args[0]).__repr__ is Query.__repr__):
                break
            chain.append(args[0])
        root = chain.pop()
        args = root._args
        if args and isinstance(args[0], Query):  # a source that prints itself (an inner stream, a test source)
            parts = [f"{args[0]!r}.{root._op}({', '.join(_describe(a) for a in args[1:])})"]
        else:
            parts = [f"{root._op}({', '.join(_describe(a) for a in args)})"]
        parts.extend(f".{node._op}({', '.join(_describe(a) for a in node._args[1:])})" for node in reversed(chain))
        return "".join(parts)


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
    return arguments(query, "source").source(0).subscribe(subscriber)


_QUERY_CLASSES: dict[type, bool] = {}


def _is_query(value: object) -> TypeGuard[Query[Any]]:
    """``isinstance(value, Query)``, remembered per class (``Query`` is an ABC: its checks cost microseconds, and
    queries are built per key by keyed queries)."""
    cls = type(value)
    known = _QUERY_CLASSES.get(cls)
    if known is None:
        known = _QUERY_CLASSES[cls] = issubclass(cls, Query)
    return known


def _frames_needed(query: Query[Any]) -> int:
    """:attr:`Query.frames` of ``query``, computed in post-order with a stack (no recursion), reusing what its
    sub-queries computed before."""
    stack: list[tuple[Query[Any], bool]] = [(query, False)]
    while stack:
        node, ready = stack.pop()
        if node._frames is not None:
            continue
        sources = [arg for arg in node._args if _is_query(arg)]
        if ready:
            below = max((source._frames or 0 for source in sources), default=0)
            node._frames = frames_of(node._op) + below
        else:
            stack.append((node, True))
            stack.extend((source, False) for source in sources if source._frames is None)
    frames = query._frames
    assert frames is not None  # computed above
    return frames


def _describe(value: object) -> str:
    if isinstance(value, Query):
        return repr(value)
    if callable(value):
        return f"<{getattr(value, '__qualname__', type(value).__name__)}>"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
