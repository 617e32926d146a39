"""Combining sources: ``merge``, ``combine_latest``.

Both are n-ary. Call them on the first source (``xs.merge(ys, zs)``) or on the class with every source
(``Query.merge(xs, ys, zs)``, ``Query.combine_latest(xs, ys, selector)``): the class form is the same method,
called unbound, so it reads as a static constructor. Sources are queries, or any subscribable (a subject, a test
source), which is wrapped with ``Query.from_subscribable``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.fluent._base import new_query, require_callable
from reaqtive.subscribable import Subscribable

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["CombineMixin"]

T = TypeVar("T")
R = TypeVar("R")


def _as_query(source: object, op: str, position: int) -> Query[Any]:
    from reaqtive.query import Query  # the mixins are Query's bases, so Query is imported late

    if isinstance(source, Query):
        return source
    if isinstance(source, Subscribable):
        return Query.from_subscribable(source)
    raise TypeError(f"{op}: source {position} must be a query or a subscribable, got {type(source).__name__}")


class CombineMixin(Generic[T]):
    """The combine family of fluent methods (see :mod:`reaqtive.fluent`)."""

    __slots__ = ()

    def merge(self, *others: Subscribable[T]) -> Query[T]:
        """The elements of this source and of ``others``, interleaved as they arrive (Rx ``Merge``).

        >>> from_iterable([1, 2]).merge(from_iterable([10, 20])).run(print)  # doctest: +ELLIPSIS
        1
        2
        10
        20
        <...>
        >>> Query.merge(from_iterable("a"), from_iterable("b"), from_iterable("c")).run(print)  # doctest: +ELLIPSIS
        a
        b
        c
        <...>

        Completes when every source has completed; an error from any source is delivered at once (queued
        elements are dropped) and unsubscribes the others. A single source (``xs.merge()``) is allowed: it passes
        its elements through. (The merge of a stream of streams is ``flat_map``'s business.)

        State: per source, whether it completed and the elements queued for lack of demand.

        Demand: each source has a bounded queue of ``MAX_QUEUE_SIZE`` elements (256 when the host sets none) and
        is asked for no more than its queue can hold, then for more as its elements go downstream. Elements go
        straight through when there is demand and nothing queued; queues drain round-robin, one element per
        source in turn, so one fast source cannot starve the others.
        """
        sources = tuple(_as_query(source, "merge", i) for i, source in enumerate((self, *others)))
        return new_query("merge", sources)

    def combine_latest(
        self, *others_and_selector: Subscribable[Any] | Callable[..., R], selector: Callable[..., R] | None = None
    ) -> Query[Any]:
        """Whenever any source emits, the combination of the latest element of every source (Rx
        ``CombineLatest``): ``xs.combine_latest(ys, selector)``, ``Query.combine_latest(xs, ys, zs, selector)``.

        The selector, the last positional argument or ``selector=``, receives one argument per source, in order;
        without one the combination is a tuple.

        >>> xs, ys = from_iterable([1, 2]), from_iterable([10, 20])
        >>> xs.combine_latest(ys, lambda x, y: x + y).run(print)  # doctest: +ELLIPSIS
        12
        22
        <...>
        >>> Query.combine_latest(from_iterable("a"), from_iterable("xy")).run(print)  # doctest: +ELLIPSIS
        ('a', 'x')
        ('a', 'y')
        <...>

        (Standalone, each source runs to its end as it starts, so ``1`` is gone before ``10`` arrives.) Nothing
        is emitted until every source has an element. Completes when every source has completed, or **at once**
        when a source completes without ever having produced an element (as Rx does; the original Reaqtive waited
        for the next element of another source). An error from a source or from the selector is delivered at
        once and unsubscribes every source. A selector returning ``None`` is a ``TypeError``.

        State: per source, whether it completed and its latest element, and the elements queued for lack of
        demand.

        Demand: one combination per element once every source has one; elements that cannot combine yet are
        taken without demand. Elements waiting for demand queue in arrival order, at most ``MAX_QUEUE_SIZE`` per
        source (256 when the host sets none); each source is asked for no more than that.
        """
        items = list(others_and_selector)
        if selector is None and items and callable(items[-1]) and not isinstance(items[-1], Subscribable):
            selector = items.pop()  # type: ignore[assignment]
        if selector is not None:
            require_callable(selector, "combine_latest", "selector")
        if not items:
            raise ValueError("combine_latest: needs at least one other source (2 to N sources in all)")
        sources = tuple(_as_query(source, "combine_latest", i) for i, source in enumerate((self, *items)))
        return new_query("combine_latest", (*sources, selector))
