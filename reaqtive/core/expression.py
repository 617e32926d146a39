"""The expression layer: a query is an immutable node, an operator name and its arguments.

:class:`Expression` is the node: equality, printing, depth, binding (``subscribe``), ``run`` and ``pipe``. It
knows no operator. The fluent methods users chain (``.map``, ``.take``) are the facade
:class:`reaqtive.fluent.query.Query` adds on top, one typed line each delegating to the operator's builder; the
builders live with their stages in :mod:`reaqtive.operators` and return an :class:`OperatorCall` (an operator
applied to its arguments, waiting for its source). The layers import downwards only: operators build on this
module, the facade on the operators. Nodes made below the facade (a builder's source, a group of ``group_by``) are
made through :func:`new_node` and friends, which make facade nodes once :mod:`reaqtive.fluent.query` has been
imported (it always is: ``import reaqtive`` imports it).

**Depth.** Each element, completion and request passes through every stage of a query as a nested Python call,
so how deep a query can be is bounded by Python's recursion limit. Each operator states the frames one of its
stages takes (:func:`reaqtive.core.binding.frames_of`: 2 for ``map``, 3 for ``filter``, more for stages that hand
elements through queues or inner subscriptions); a query needs the sum along its deepest path
(:attr:`Expression.frames`), and may take :func:`frame_budget` frames: the recursion limit less
:data:`RESERVED_FRAMES`, 850 at the default limit of 1,000, so a source and 423 ``map`` stages or 282 ``filter``
stages. Subscribing a query that needs more raises :class:`~reaqtive.core.errors.QueryTooDeepError` before anything
runs (never a ``RecursionError`` halfway through processing); raise the limit (``sys.setrecursionlimit``) to run
deeper ones. Everything else (binding, starting, saving, loading, disposing, comparing and printing queries)
walks the tree without recursion, at any depth.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Generic, TypeGuard, TypeVar, overload

from reaqtive.core.arguments import arguments
from reaqtive.core.binding import bind, frames_of, register_operator
from reaqtive.core.context import HigherOrderEnvironment, OperatorContext
from reaqtive.core.errors import QueryTooDeepError
from reaqtive.core.streams import Subscriber
from reaqtive.core.subjects import use_query_maker
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscribers import CallbackSubscriber
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.core.visitors import initialize

if TYPE_CHECKING:
    from reaqtive.core.scheduler_interface import Scheduler

__all__ = [
    "DEFAULT_INSTANCE_ID",
    "RESERVED_FRAMES",
    "Expression",
    "GroupedStreamNode",
    "InnerStreamNode",
    "OperatorCall",
    "as_expression",
    "frame_budget",
    "grouped_stream_class",
    "inner_stream_from_reference",
    "is_expression",
    "new_grouped_stream",
    "new_inner_stream",
    "new_node",
    "source_node",
    "standalone_scheduler",
    "use_facade",
]

T = TypeVar("T")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

DEFAULT_INSTANCE_ID = "reaqtive://local"
"""The instance id of queries run outside an engine."""

RESERVED_FRAMES: Final = 150
"""Frames of the recursion limit kept for what runs below and above a query's stages: the host's call stack,
scheduler tasks, the source's loop, the subscriber, user functions, the teardown at completion."""


def frame_budget() -> int:
    """The nested Python frames a query's stages may take: :func:`sys.getrecursionlimit` less
    :data:`RESERVED_FRAMES` (850 at the default limit of 1,000).

    Subscribing a query whose :attr:`Expression.frames` exceed it raises
    :class:`~reaqtive.core.errors.QueryTooDeepError`. Inner queries of higher-order operators are subscribed when they
    start, deeper in the stack than their outer query's stages: the check counts each on its own, which the
    heavier frames of the higher-order operators (:func:`reaqtive.core.binding.frames_of`) allow for.
    """
    return max(0, sys.getrecursionlimit() - RESERVED_FRAMES)


class OperatorCall(Generic[R_co]):
    """An operator applied to its arguments, waiting for its source: what a builder returns (``take(3)``).

    ``query.pipe(call)`` makes the node ``op(query, *args)``; a source's call (``from_iterable([1])``) becomes a
    node of its own with :meth:`reaqtive.fluent.query.Query.source`. Builders check their arguments before they make the
    call, so a bad argument fails where the query is written.
    """

    __slots__ = ("args", "op")

    def __init__(self, op: str, args: tuple[object, ...] = ()) -> None:
        self.op = op
        self.args = args

    def __call__(self, source: Subscribable[Any]) -> Expression[R_co]:
        """The node ``op(source, *args)``."""
        return new_node(self.op, (as_expression(source), *self.args))

    def __repr__(self) -> str:
        return f"{self.op}({', '.join(_describe(a) for a in self.args)})"


def source_node(op: str, args: tuple[object, ...] = ()) -> Expression[Any]:
    """The node of a source operator (no upstream): what a source's builder returns (``from_iterable([1])``)."""
    return new_node(op, args)


class Expression(Subscribable[T], Generic[T]):
    """An immutable query expression node: an operator name and its arguments.

    Arguments are constants, functions, or other expressions (the sources). Two expressions built the same way
    from the same objects are equal. Users hold :class:`reaqtive.fluent.query.Query`, this node with the fluent methods.
    """

    __slots__ = ("_args", "_depth", "_frames", "_op")

    def __init__(self, op: str, args: tuple[object, ...] = ()) -> None:
        if not isinstance(op, str) or not op:
            raise TypeError(f"op must be a non-empty str, got {op!r}")
        self._op = op
        self._args = args = tuple(args)
        depth = 0
        for arg in args:
            if is_expression(arg) and arg._depth > depth:
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
        :func:`~reaqtive.core.binding.frames_of`, added up along the path); see :func:`frame_budget`."""
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

    # -- chaining ----------------------------------------------------------------------------------------------

    @overload
    def pipe(self, step: OperatorCall[R], /) -> Expression[R]: ...

    # Several operator calls: the last one's type (the facade's pipe narrows these to Query, with the same arities).
    @overload
    def pipe(self, step1: OperatorCall[Any], step2: OperatorCall[R], /) -> Expression[R]: ...

    @overload
    def pipe(self, step1: OperatorCall[Any], step2: OperatorCall[Any], step3: OperatorCall[R], /) -> Expression[R]: ...

    @overload
    def pipe(self, step1: OperatorCall[Any], step2: OperatorCall[Any], step3: OperatorCall[Any],
             step4: OperatorCall[R], /) -> Expression[R]: ...

    @overload
    def pipe(self, *steps: OperatorCall[Any] | Callable[[Expression[Any]], Expression[Any]]) -> Expression[Any]: ...

    def pipe(self, *steps: OperatorCall[Any] | Callable[[Expression[Any]], Expression[Any]]) -> Expression[Any]:
        """Apply ``steps`` in order: each an operator call (``take(3)``, a user operator's ``clamp(0, 10)``) or
        a function from a query to a query. ``query.pipe(take(3))`` is ``query.take(3)``.

        >>> from reaqtive.operators.take import take
        >>> from_iterable(range(5)).pipe(take(2)).run(print)  # doctest: +ELLIPSIS
        0
        1
        <...>
        """
        query: Any = self
        for step in steps:
            if isinstance(step, OperatorCall):
                query = new_node(step.op, (query, *step.args))
            elif callable(step):
                query = step(query)
                if not is_expression(query):
                    raise TypeError(f"pipe: a step must return a query, {step!r} returned {type(query).__name__}")
            else:
                raise TypeError(f"pipe: a step must be an operator call or a function, got {type(step).__name__}")
        return query  # type: ignore[no-any-return]

    # -- running -----------------------------------------------------------------------------------------------

    @overload
    def run(
        self,
        observer: Subscriber[T],
        *,
        context: OperatorContext | None = None,
        scheduler: Scheduler | None = None,
    ) -> SubscriptionHandle: ...

    @overload
    def run(
        self,
        observer: Callable[[T], object] | None = None,
        on_error: Callable[[BaseException], object] | None = None,
        on_complete: Callable[[], object] | None = None,
        *,
        context: OperatorContext | None = None,
        scheduler: Scheduler | None = None,
        batch_size: int | None = None,
    ) -> SubscriptionHandle: ...

    def run(
        self,
        observer: Subscriber[T] | Callable[[T], object] | None = None,
        on_error: Callable[[BaseException], object] | None = None,
        on_complete: Callable[[], object] | None = None,
        *,
        context: OperatorContext | None = None,
        scheduler: Scheduler | None = None,
        batch_size: int | None = None,
    ) -> SubscriptionHandle:
        """Bind and start the query: subscribe, set the context, start. Returns the handle to dispose.

        >>> import threading
        >>> from datetime import timedelta
        >>> from reaqtive import interval
        >>> ticks, done = [], threading.Event()
        >>> handle = interval(timedelta(milliseconds=10)).take(3).run(ticks.append, on_complete=done.set)
        >>> done.wait(5), ticks       # handle.dispose() would have stopped it earlier
        (True, [0, 1, 2])
        >>> from_iterable([1, 0]).map(lambda x: 1 / x).run(print)
        Traceback (most recent call last):
        ZeroDivisionError: division by zero

        ``observer`` is a :class:`~reaqtive.core.streams.Subscriber`, or the ``on_next`` function of a
        :class:`~reaqtive.core.subscribers.CallbackSubscriber` built from the other arguments.

        **Time.** Without a ``context`` the query runs standalone, as in Rx: what can run on the caller's
        thread does (``from_iterable(...).run(print)`` has printed everything when ``run`` returns), and the
        operators that need a clock (``interval``, ``timer``, time windows, ``delay``...) run on a real-time
        scheduler shared by standalone queries, one daemon worker thread made on first use
        (:func:`standalone_scheduler`).
        ``scheduler=`` gives them another one instead (a :class:`~reaqtive.scheduler.VirtualTimeScheduler` in a
        test, or a :class:`~reaqtive.scheduler.LogicalScheduler` of your own pool); with it, every operator that
        can use a scheduler uses it. ``context`` replaces all of this (the engine passes its own).

        **Errors.** With ``on_error``, a failure of the query (a function of it raising, a source failing) goes
        there. Without it, as Rx does with a subscriber that has no error handler, the failure is not swallowed:
        a failure while ``run`` runs — every failure of a query over an iterable — is raised from ``run`` (the
        query is then over and disposed); one that comes later, on a scheduler's thread, cannot be raised to
        the caller any more and is logged at ERROR with its traceback (``reaqtive.subscribers``; shown on stderr
        even without logging configured): pass ``on_error`` to handle those. A :class:`Subscriber` given as
        ``observer`` receives errors itself, and nothing is raised.
        """
        if context is not None and scheduler is not None:
            raise TypeError("run: give a context or a scheduler, not both (the context names its scheduler)")
        subscriber: Subscriber[T]
        failures: _RunFailures | None = None
        if isinstance(observer, Subscriber):
            subscriber = observer
        else:
            if on_error is None:
                failures = _RunFailures()
                on_error = failures.on_error
            subscriber = CallbackSubscriber(observer, on_error, on_complete, batch_size=batch_size)
        if context is None:
            context = (OperatorContext(DEFAULT_INSTANCE_ID, scheduler) if scheduler is not None
                       else _StandaloneContext(DEFAULT_INSTANCE_ID))
        handle = self.subscribe(subscriber)
        try:
            initialize(handle, context)
        finally:
            error = failures.finish() if failures is not None else None
        if error is not None:
            handle.dispose()
            raise error
        return handle

    # -- data model --------------------------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Expression):
            return False
        # Compared with a stack of pairs, not recursively, so that queries of any depth compare.
        pending: list[tuple[Expression[Any], Expression[Any]]] = [(self, other)]
        while pending:
            mine, theirs = pending.pop()
            if mine is theirs:
                continue
            if mine._op != theirs._op or len(mine._args) != len(theirs._args):
                return False
            for a, b in zip(mine._args, theirs._args, strict=True):
                if isinstance(a, Expression) and isinstance(b, Expression):
                    pending.append((a, b))
                elif isinstance(a, Expression) or isinstance(b, Expression) or not a == b:
                    return False
        return True

    def __hash__(self) -> int:
        # Arguments may be unhashable (lists); equal queries must hash equal, so hash the shape only.
        return hash((self._op, len(self._args)))

    def __repr__(self) -> str:
        # ``source.op(args)`` down the chain of first arguments, built without recursion.
        chain: list[Expression[Any]] = [self]
        while True:
            args = chain[-1]._args
            if not (args and isinstance(args[0], Expression) and type(args[0]).__repr__ is Expression.__repr__):
                break
            chain.append(args[0])
        root = chain.pop()
        args = root._args
        if args and isinstance(args[0], Expression):  # a source that prints itself (an inner stream, a test source)
            parts = [f"{args[0]!r}.{root._op}({', '.join(_describe(a) for a in args[1:])})"]
        else:
            parts = [f"{root._op}({', '.join(_describe(a) for a in args)})"]
        parts.extend(f".{node._op}({', '.join(_describe(a) for a in node._args[1:])})" for node in reversed(chain))
        return "".join(parts)




class InnerStreamNode(Expression[T], Generic[T]):
    """The node of an inner subject of a higher-order operator: a window of ``window``, or (as
    :class:`GroupedStreamNode`) a group of ``group_by``; users hold :class:`reaqtive.fluent.query.InnerStream`.

    ``stream_id`` is the subject's id in the :class:`~reaqtive.core.context.HigherOrderEnvironment` (``None`` when the
    operator runs without one). An operator that keeps inner streams in its state (``flat_map`` over groups)
    saves :meth:`reference` and re-creates the stream with :func:`inner_stream_from_reference` after a restart.
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
    def from_reference(reference: tuple[object, ...], environment: HigherOrderEnvironment) -> InnerStreamNode[Any]:
        """Re-create a saved inner stream, looking its subject up (or re-creating it) in ``environment``."""
        return inner_stream_from_reference(reference, environment)

    def __repr__(self) -> str:
        return f"InnerStream({self._stream_id!r})"


class GroupedStreamNode(InnerStreamNode[T], Generic[T]):
    """The node of one group of ``group_by``: a query over the group's elements, with its ``key``."""

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


# -- making facade nodes below the facade -------------------------------------------------------------------------

# These functions are typed with the node classes of this module: the facade's classes are defined above the
# core, which must not import them (not even for the type checker). At run time they make the facade's classes,
# and the facade's own methods are typed with them.

class _Facade:
    """The node classes users hold, set once by :mod:`reaqtive.fluent.query` (:func:`use_facade`)."""

    query: Any = Expression
    inner_stream: Any = InnerStreamNode
    grouped_stream: Any = GroupedStreamNode


def use_facade(query: type[Expression[Any]], inner_stream: type[InnerStreamNode[Any]],
               grouped_stream: type[GroupedStreamNode[Any]]) -> None:
    """Make :func:`new_node` and friends build these classes (called by :mod:`reaqtive.fluent.query` when it loads)."""
    _Facade.query, _Facade.inner_stream, _Facade.grouped_stream = query, inner_stream, grouped_stream


def new_node(op: str, args: tuple[object, ...]) -> Expression[Any]:
    """The query node ``op(*args)``, with the fluent methods."""
    return _Facade.query(op, args)  # type: ignore[no-any-return]


def new_inner_stream(subject: Subscribable[T], stream_id: str | None) -> InnerStreamNode[T]:
    """A window's query over ``subject`` (see :class:`InnerStreamNode`)."""
    return _Facade.inner_stream(subject, stream_id)  # type: ignore[no-any-return]


def new_grouped_stream(subject: Subscribable[T], stream_id: str | None, key: object) -> GroupedStreamNode[T]:
    """A group's query over ``subject`` (see :class:`GroupedStreamNode`)."""
    return _Facade.grouped_stream(subject, stream_id, key)  # type: ignore[no-any-return]


def grouped_stream_class() -> type[GroupedStreamNode[Any]]:
    """The class of the groups users hold (:class:`reaqtive.fluent.query.GroupedStream` once the facade is loaded)."""
    return _Facade.grouped_stream  # type: ignore[no-any-return]


def inner_stream_from_reference(
    reference: tuple[object, ...], environment: HigherOrderEnvironment
) -> InnerStreamNode[Any]:
    """Re-create a saved inner stream (:meth:`InnerStreamNode.reference`), looking its subject up (or
    re-creating it) in ``environment``."""
    kind, stream_id, *rest = reference
    if not isinstance(stream_id, str):
        raise TypeError(f"an inner stream saved without an environment id cannot be restored: {reference!r}")
    subject = environment.get_or_create_subject(stream_id)
    if kind == "group":
        return new_grouped_stream(subject, stream_id, rest[0])
    if kind == "window":
        return new_inner_stream(subject, stream_id)
    raise ValueError(f"unknown inner stream reference {reference!r}")


def as_expression(source: Subscribable[Any]) -> Expression[Any]:
    """``source`` as a node: a query as it is, any other subscribable (a subject, a test source) wrapped."""
    if is_expression(source):
        return source
    if not isinstance(source, Subscribable):
        raise TypeError(f"a source must be a query (or another Subscribable), got {type(source).__name__}")
    return new_node("subscribable", (source,))


def _subscribable_node(source: Subscribable[Any]) -> Expression[Any]:
    """The ``subscribable`` node over ``source`` (what a subject's ``as_query`` returns)."""
    return new_node("subscribable", (source,))


use_query_maker(_subscribable_node)


@register_operator("subscribable", internal=True)
def _bind_subscribable(query: Expression[Any], subscriber: Subscriber[Any]) -> SubscriptionHandle:
    return arguments(query, "source").source(0).subscribe(subscriber)


_EXPRESSION_CLASSES: dict[type, bool] = {}


def is_expression(value: object) -> TypeGuard[Expression[Any]]:
    """``isinstance(value, Expression)``, remembered per class (``Expression`` is an ABC: its checks cost
    microseconds, and queries are built per key by keyed queries)."""
    cls = type(value)
    known = _EXPRESSION_CLASSES.get(cls)
    if known is None:
        known = _EXPRESSION_CLASSES[cls] = issubclass(cls, Expression)
    return known


def _frames_needed(query: Expression[Any]) -> int:
    """:attr:`Expression.frames` of ``query``, computed in post-order with a stack (no recursion), reusing what its
    sub-queries computed before."""
    stack: list[tuple[Expression[Any], bool]] = [(query, False)]
    while stack:
        node, ready = stack.pop()
        if node._frames is not None:
            continue
        sources = [arg for arg in node._args if is_expression(arg)]
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
    if isinstance(value, Expression):
        return repr(value)
    if callable(value):
        return f"<{getattr(value, '__qualname__', type(value).__name__)}>"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# -- running standalone ------------------------------------------------------------------------------------------

_RUN_LOG: Final = logging.getLogger("reaqtive.subscribers")


class _RunFailures:
    """The ``on_error`` of ``run(on_next)`` without one: keeps a failure that happens while ``run`` runs, for
    ``run`` to raise; logs one that happens after (on a scheduler's thread, where raising reaches nobody)."""

    __slots__ = ("_error", "_lock", "_returned")

    def __init__(self) -> None:
        self._error: BaseException | None = None
        self._returned = False
        self._lock = threading.Lock()  # a failure on a worker thread as run returns is raised or logged, not lost

    def on_error(self, error: BaseException) -> None:
        with self._lock:
            if not self._returned:
                self._error = self._error or error
                return
        _RUN_LOG.error("unhandled error at the end of a query (pass on_error to run to handle it)", exc_info=error)

    def finish(self) -> BaseException | None:
        """``run`` returns: the failure to raise, if one came; later ones are logged."""
        with self._lock:
            self._returned = True
            return self._error


_STANDALONE: list[Scheduler] = []  # the real-time scheduler of standalone queries, once made
_STANDALONE_LOCK: Final = threading.Lock()


def standalone_scheduler() -> Scheduler:
    """The real-time scheduler of queries run standalone (``run()`` without a context or scheduler), made on
    first use: one :class:`~reaqtive.scheduler.LogicalScheduler` on a pool of one daemon worker thread (it never
    keeps the process alive), shared by every standalone query. A task that raises (a bug, or an ``on_error``
    callback that raises) is logged and dropped; the scheduler is not faulted, so other queries go on."""
    with _STANDALONE_LOCK:
        if not _STANDALONE:
            # Imported here, once: the scheduler implementations are a layer above this module, named only for
            # this default (reaqtive.scheduler imports nothing of the core, so there is no cycle).
            from reaqtive.scheduler import LogicalScheduler, PhysicalScheduler, UnhandledExceptionArgs

            def log_and_go_on(args: UnhandledExceptionArgs) -> None:
                _RUN_LOG.error("a task of a standalone query raised; it is dropped", exc_info=args.exception)
                args.handled = True

            scheduler = LogicalScheduler(PhysicalScheduler(workers=1, name="reaqtive-run"), name="reaqtive-run")
            scheduler.unhandled_exception += log_and_go_on
            _STANDALONE.append(scheduler)
        return _STANDALONE[0]


class _StandaloneContext(OperatorContext):
    """The context of ``run()`` without one: no scheduler as far as :attr:`has_scheduler` says, so that the
    operators for which one is optional run on the caller's thread (Rx's immediate default for iterables); the
    operators that need a clock get :func:`standalone_scheduler` from :attr:`scheduler`."""

    __slots__ = ()

    @property
    def scheduler(self) -> Scheduler:
        return standalone_scheduler()

    def derive(self, instance_id: str) -> OperatorContext:
        """An inner artifact's context: standalone too, with the same logger and settings."""
        context = _StandaloneContext(instance_id)
        context._logger = self._logger
        context._settings = self._settings
        return context
