"""``flat_map``, ``merge_all`` and ``switch_latest``: every outer element selects an inner stream; the result
merges them all, or follows the latest."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import ArgsRecord, args_record, require_callable, require_positive_int
from reaqtive.core.binding import register_operator
from reaqtive.core.context import OperatorContext
from reaqtive.core.errors import LimitExceededError
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import StateReader, Version
from reaqtive.core.streams import Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators._inner_subscriptions import InnerMergeBase, InnerSlot
from reaqtive.operators.keyed_groups import bind_keyed_groups
from reaqtive.operators.settings import MAX_CONCURRENT_INNER, read_limit

__all__ = [
    "FlatMap", "FlatMapArgs", "MergeAll", "MergeAllArgs", "SwitchLatest", "SwitchLatestArgs", "bind_flat_map",
    "flat_map", "merge_all", "switch_latest",
]

R = TypeVar("R")


def flat_map(
    selector: Callable[[Any], Subscribable[Any]],
    result_selector: Callable[[Any, Any], Any] | None = None,
    *,
    max_concurrent: int | None = None,
) -> OperatorCall[Any]:
    """Each element selects an inner stream (``selector(element)``, a query); the result is the elements of
    every inner stream, merged as they arrive (Rx ``SelectMany``/``flatMap``).

    >>> from_iterable([1, 2]).flat_map(lambda x: from_iterable([x, x * 10])).run(print)  # doctest: +ELLIPSIS
    1
    10
    2
    20
    <...>
    >>> from_iterable("ab").flat_map(lambda x: from_iterable([1, 2]), lambda x, n: x * n).run(print)
    ... # doctest: +ELLIPSIS
    a
    aa
    b
    bb
    <...>

    With ``result_selector`` each inner element ``y`` of element ``x`` becomes ``result_selector(x, y)``. At
    most ``max_concurrent`` inner subscriptions are live at once (no bound by default; the host's
    ``MAX_CONCURRENT_INNER`` bounds it too; an outer source that sends more than it was asked for ends the
    result with ``LimitExceededError``). Completes when this source and every inner stream completed, in either
    order; the first error (of this source, an inner stream or a selector) ends the result at once and disposes
    every inner subscription (hosted, deleting them from the environment). Under a skip policy, an element whose
    ``selector`` raised (or returned no query) opens no inner stream and takes no number, and an inner element
    whose ``result_selector`` raised is dropped (an inner stream's own errors still end the result).

    **State.** The number of elements seen, whether this source completed, the elements requested from it and
    not yet received (asked for again when a recovered query starts) and, per live inner stream, its number,
    whether it ended, its queued elements and the element that selected it, which must be a value the state
    codec can save, or a group or window (saved by reference): after a restart ``selector`` is called again on
    it, so it must be deterministic. Hosted (the engine, or an ``InnerEnvironment``), each inner subscription is
    checkpointed as a unit of its own under the id ``<prefix>/<n>`` (the n-th element); standalone,
    checkpointing with live inners is an error.

    **Demand.** The outer source is asked for elements only as inner slots allow: without bound when downstream
    demand is unbounded and ``max_concurrent`` is not set, as many as there are free slots when it is, and
    one at a time while a bounded downstream waits for more than is queued. Each inner stream is asked for
    what its queue (``MAX_QUEUE_SIZE``, 256 by default) can hold, or without bound once downstream demand is
    unbounded; queues drain in turns, one element per inner, in a deterministic order.

    **Keyed.** Over a ``group_by`` whose groups' query is a chain of operators with keyed steps, the ``group_by``
    and this run as one stage with a record per key (:mod:`reaqtive.operators.keyed_groups`), ``result_selector``
    (given a group with ``.key``) and ``max_concurrent`` included, with the same results; ``query.explain()``
    says which path a query takes, and why (``docs/higher-order.md``).

    Reaqtive: SelectMany.
    """
    require_callable(selector, "flat_map", "selector")
    if result_selector is not None:
        require_callable(result_selector, "flat_map", "result_selector")
    if max_concurrent is not None:
        max_concurrent = require_positive_int(max_concurrent, "flat_map", "max_concurrent")
    return OperatorCall("flat_map", (selector, result_selector, max_concurrent))


def merge_all(max_concurrent: int | None = None) -> OperatorCall[Any]:
    """The elements of the inner streams this source emits (its elements are queries: groups, windows,
    any query), merged as they arrive (RxPY ``merge_all``).

    >>> inner = [from_iterable([1, 2]), from_iterable([3])]
    >>> from_iterable(inner).merge_all().run(print)  # doctest: +ELLIPSIS
    1
    2
    3
    <...>

    ``flat_map`` with the identity: the same completion, errors, bound and demand.

    **State.** As ``flat_map``; groups and windows are saved by reference, but a plain query cannot be saved, so
    checkpointing a live inner of ``xs.map(f).merge_all()`` is an error: write ``xs.flat_map(f)``, which saves
    the element.

    **Demand.** As ``flat_map``.

    Reaqtive: Merge (of a stream of streams).
    """
    if max_concurrent is not None:
        max_concurrent = require_positive_int(max_concurrent, "merge_all", "max_concurrent")
    return OperatorCall("merge_all", (max_concurrent,))


FlatMapArgs = args_record("FlatMapArgs", source="source", selector="function", result_selector="optional_function",
                          max_concurrent="optional_positive_count")
MergeAllArgs = args_record("MergeAllArgs", source="source", max_concurrent="optional_positive_count")


@register_operator("flat_map", frames=20, builder=flat_map, args=FlatMapArgs)
def bind_flat_map(query: Expression[Any], subscriber: Subscriber[Any]) -> SubscriptionHandle:
    """The binder of :func:`flat_map`: over a ``group_by`` whose groups' query is a chain of operators with keyed
    steps, the keyed stage (:mod:`reaqtive.operators.keyed_groups`); otherwise :class:`FlatMap`."""
    args = FlatMapArgs.read(query)
    keyed = bind_keyed_groups(args.source, args.selector, args.result_selector, args.max_concurrent, subscriber)
    return keyed if keyed is not None else FlatMap(query, subscriber)


class FlatMap(InnerMergeBase[R], Generic[R]):
    """The running stage of :func:`flat_map`: an outer element opens one more inner subscription, up to the
    bound on live inners.

    The machinery (inner subscriptions hosted by the environment, saved outer elements, bounded queues that
    drain in turns) is shared with ``switch_latest`` in :mod:`reaqtive.operators._inner_subscriptions`. The
    outer is asked for no more elements than there are free slots (see :meth:`InnerMergeBase._request_outer`).
    Its state is version 2 (version 1, without the outer demand, still loads).
    """

    name = "reaqtive:flat_map"
    version: Version = (2,)
    older_versions = frozenset({(1,)})

    __slots__ = ("_max_concurrent",)

    def __init__(self, query: Expression[Any], downstream: Subscriber[R]) -> None:
        args = FlatMapArgs.read(query)
        super().__init__(args.source, downstream)
        self._selector = args.selector
        self._result_selector = args.result_selector
        self._max_concurrent: int | None = args.max_concurrent

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        limit = read_limit(context, MAX_CONCURRENT_INNER)
        max_concurrent = self._max_concurrent
        self._bound = limit if max_concurrent is None else min(max_concurrent, limit)

    def on_next(self, value: Any) -> None:
        source = self._selected(value)
        if source is None:
            return  # skipped (as if it had never come), or failing
        slot: InnerSlot | None = None
        with self._lock:
            if self._disposed or self._error is not None:
                return
            if self._live >= self._bound:
                # the outer sent more than it was asked for (rule 1.1), or the host's limit is lower
                limit = self._bound
                setting = MAX_CONCURRENT_INNER if limit != self._max_concurrent else "max_concurrent"
                self._error = LimitExceededError(self.label, setting, limit)
            else:
                slot = self._new_slot(value)
        if slot is None:
            self._drain()
            return
        if self._subscribe_slot(slot, source):
            self._request_outer()


@register_operator("merge_all", frames=20, builder=merge_all, args=MergeAllArgs)
class MergeAll(FlatMap[R], Generic[R]):
    """The running stage of :func:`merge_all`: :class:`FlatMap` whose outer elements are the inner streams.

    Its own persisted name, so that a query changed from ``merge_all()`` to ``flat_map(f)`` (or back) is a
    shape error on recovery rather than one reading the other's state.
    """

    name = "reaqtive:merge_all"
    version: Version = (2,)
    older_versions = frozenset({(1,)})
    label = "merge_all"
    kind = "merge_all"

    __slots__ = ()

    def __init__(self, query: Expression[Any], downstream: Subscriber[R]) -> None:
        args = MergeAllArgs.read(query)
        InnerMergeBase.__init__(self, args.source, downstream)
        self._max_concurrent = args.max_concurrent


def switch_latest(selector: Callable[[Any], Subscribable[Any]] | None = None) -> OperatorCall[Any]:
    """The elements of the latest inner stream: each element of this source (a query, or with ``selector``
    the query ``selector(element)``) replaces the current inner subscription (with a selector, RxJS/RxPY
    ``switch_map``).

    >>> from reaqtive.testing import TestScheduler, on_next, on_completed
    >>> scheduler = TestScheduler()
    >>> ys = scheduler.create_hot_observable(on_next(215, "a"), on_next(235, "b"), on_completed(250))
    >>> zs = scheduler.create_hot_observable(on_next(225, "c"), on_next(240, "d"), on_completed(260))
    >>> xs = scheduler.create_hot_observable(on_next(210, ys), on_next(230, zs), on_completed(245))
    >>> scheduler.start(lambda: xs.switch_latest()).messages
    [OnNext('a')@215, OnNext('d')@240, OnCompleted()@260]

    The previous inner subscription is disposed (hosted: deleted from the environment) and what it had queued is
    dropped. Completes when this source and the latest inner stream completed; the latest inner's error ends the
    result, a stale inner's signals are ignored; an error of this source or of ``selector`` ends it at once.
    Under a skip policy, an element whose ``selector`` raised (or that is no query) is dropped and the current
    inner stream goes on, as if the element had never come.

    **State.** The number of elements seen, whether this source completed, the elements requested from it and
    not yet received, and the latest inner: whether it ended, its queued elements and the element that selected
    it (as for ``flat_map``: a value, or a group or window by reference; a plain query cannot be saved, so use
    ``switch_latest(selector)`` to checkpoint).

    **Demand.** As ``flat_map`` with at most one inner: this source is asked without bound when downstream
    demand is unbounded, else for one element at a time while downstream waits for more than is queued, so a
    slow subscriber switches when it catches up rather than losing what it asked for.

    Reaqtive: Switch.
    """
    if selector is not None:
        require_callable(selector, "switch_latest", "selector")
    return OperatorCall("switch_latest", (selector,))


class SwitchLatestArgs(ArgsRecord, source="source", selector="optional_function"):
    """The arguments of a ``switch_latest`` node: ``(source, selector)``, ``selector`` ``None`` or a function."""


@register_operator("switch_latest", frames=20, builder=switch_latest, args=SwitchLatestArgs)
class SwitchLatest(InnerMergeBase[R], Generic[R]):
    """The running stage of :func:`switch_latest`, on the machinery of ``flat_map``
    (:mod:`reaqtive.operators._inner_subscriptions`) with at most one inner slot: a new outer element ends the
    current inner subscription and drops its queue before subscribing to the new one. Its state is version 2
    (version 1, without the outer demand, still loads).
    """

    name = "reaqtive:switch_latest"
    version: Version = (2,)
    older_versions = frozenset({(1,)})
    label = "switch_latest"
    kind = "switch_latest"

    __slots__ = ("_current",)

    def __init__(self, query: Expression[Any], downstream: Subscriber[R]) -> None:
        args = SwitchLatestArgs.read(query)
        super().__init__(args.source, downstream)
        self._selector = args.selector
        self._current: InnerSlot | None = None

    def load_state_core(self, reader: StateReader) -> None:
        super().load_state_core(reader)
        self._current = self._latest_slot(reader)

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        super().load_older_state_core(reader, version)
        self._current = self._latest_slot(reader)

    def _latest_slot(self, reader: StateReader) -> InnerSlot | None:
        """The one slot a switch keeps: the latest outer element's (a switch forgets the one before)."""
        numbers = list(self._slots)
        if numbers not in ([], [self._counter - 1]):
            raise reader.invalid("slots", f"at most the latest inner's, number {self._counter - 1}", numbers)
        return next(iter(self._slots.values()), None)

    def on_next(self, value: Any) -> None:
        source = self._selected(value)  # before the current inner ends: a skipped element leaves it live
        if source is None:
            return
        with self._lock:
            if self._disposed or self._error is not None:
                return
            previous = self._current
            ended = previous is not None and not previous.done
            if previous is not None:
                if ended:
                    previous.done = True
                    self._live -= 1
                self._drop_slot(previous)
            slot = self._current = self._new_slot(value)
        if ended:
            assert previous is not None
            self._end_slots([previous])
        if self._subscribe_slot(slot, source):
            self._request_outer()
