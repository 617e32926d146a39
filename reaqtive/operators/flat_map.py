"""``flat_map`` and ``merge_all``: every outer element selects an inner stream; the result merges them all.

The machinery (inner subscriptions hosted by the environment, saved outer elements, bounded queues that drain
in turns) is shared with ``switch_latest`` in :mod:`reaqtive.operators._inner_subscriptions`; this module decides
what an outer
element does: it opens one more inner subscription, up to the bound on live inners.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.context import OperatorContext
from reaqtive.errors import LimitExceededError
from reaqtive.operator import Version
from reaqtive.operators._inner_subscriptions import InnerMergeBase, InnerSlot, selected_source
from reaqtive.operators.settings import MAX_CONCURRENT_INNER, read_limit
from reaqtive.streams import Subscriber
from reaqtive.subscribable import Subscribable

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["FlatMap", "MergeAll"]

R = TypeVar("R")


@register_operator("flat_map", frames=20)
class FlatMap(InnerMergeBase[R], Generic[R]):
    """The running stage of ``Query.flat_map``.

    Each outer element opens an inner subscription, to ``selector(element)``. Elements of every inner stream go
    downstream, through ``result_selector(element, inner)`` if there is one. Completes once the outer and every
    inner completed and the queues are empty; the first error of the outer, of an inner or of a selector is
    delivered at once and disposes everything (the inners hosted by an environment are deleted from it).

    At most ``min(max_concurrent, MAX_CONCURRENT_INNER)`` inner subscriptions are live at once: the outer is
    asked for no more elements than that (see :meth:`InnerMergeBase._request_outer`); an outer source that sends
    more anyway ends the stage with :class:`~reaqtive.errors.LimitExceededError`.

    State: the number of outer elements seen (the next inner id), whether the outer completed, and per inner:
    its number, whether it ended, the outer element that created it (while live: a value, or a group or window by
    reference) and the elements queued for lack of demand; the outer elements requested and not yet received
    (asked for again when a recovered stage starts: version 2; version 1 still loads). Hosted, each inner
    subscription's own state is a separate unit of the environment.
    """

    name = "reaqtive:flat_map"
    version: Version = (2,)
    older_versions = frozenset({(1,)})

    __slots__ = ("_max_concurrent", "_selector")

    def __init__(self, query: Query[Any], downstream: Subscriber[R]) -> None:
        args = arguments(query, "source", "selector", "result_selector", "max_concurrent")
        super().__init__(args.source(0), downstream)
        self._selector: Callable[[Any], Any] | None = args.function(1)
        self._result_selector = args.optional_function(2)
        self._max_concurrent: int | None = args.optional_integer(3, minimum=1)

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        limit = read_limit(context, MAX_CONCURRENT_INNER)
        max_concurrent = self._max_concurrent
        self._bound = limit if max_concurrent is None else min(max_concurrent, limit)

    def select(self, element: Any) -> Subscribable[Any]:
        selector = self._selector
        return selected_source(self.label, element if selector is None else selector(element))

    def on_next(self, value: Any) -> None:
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
        if self._subscribe_slot(slot):
            self._request_outer()


@register_operator("merge_all", frames=20)
class MergeAll(FlatMap[R], Generic[R]):
    """The running stage of ``Query.merge_all``: :class:`FlatMap` whose outer elements are the inner streams.

    Its own persisted name, so that a query changed from ``merge_all()`` to ``flat_map(f)`` (or back) is a
    shape error on recovery rather than one reading the other's state. State and demand as :class:`FlatMap`.
    """

    name = "reaqtive:merge_all"
    version: Version = (2,)
    older_versions = frozenset({(1,)})
    label = "merge_all"
    kind = "merge_all"

    __slots__ = ()

    def __init__(self, query: Query[Any], downstream: Subscriber[R]) -> None:
        args = arguments(query, "source", "max_concurrent")
        InnerMergeBase.__init__(self, args.source(0), downstream)
        self._selector = None
        self._max_concurrent = args.optional_integer(1, minimum=1)
