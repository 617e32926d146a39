"""``filter`` and ``filter_indexed``: keep the elements that satisfy a predicate (of the element and its index)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.operators._fusion import FusedStep, fusible
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive.streams import LONG_MAX, Subscriber, add_demand
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["Filter", "FilterIndexed"]

T = TypeVar("T")


@fusible("filter")
class Filter(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of ``Query.filter``.

    Demand: passed upstream; each dropped element is replaced with ``request(1)`` upstream so the downstream's
    outstanding demand stays covered. Once the downstream has requested ``LONG_MAX`` in total, demand is
    effectively unbounded (rule 3.17) and dropping costs nothing more.

    State: none beyond the base. Fuses with adjacent fusible stages (:mod:`reaqtive.operators._fusion`).
    """

    name = "reaqtive:filter"
    version: Version = (1,)

    __slots__ = ("_predicate", "_requested", "_source", "_unbounded")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "predicate")
        self._source: Subscribable[T] = args.source(0)
        self._predicate: Callable[[T], object] = args.function(1)
        self._requested = 0
        self._unbounded = False  # self._requested == LONG_MAX, read per dropped element

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def request(self, n: int) -> None:
        if n > 0:
            self._requested = requested = add_demand(self._requested, n)
            self._unbounded = requested == LONG_MAX
        super().request(n)

    def on_next(self, value: T) -> None:
        try:
            drop = not self._predicate(value)  # truthiness inside the try: bool() of a result may raise too
        except Exception as error:
            self._signal_error(error)
            return
        if not drop:
            self._downstream.on_next(value)
        elif not self._unbounded:
            self._replace_dropped()

    fused_step = FusedStep(
        "_predicate",
        """
        try:
            drop = not {fn}({value})
        except Exception as error:
            {stage}._signal_error(error)
            {stop}
        if drop:
            if {bounded}:
                if not {stage}._unbounded:
                    {stage}._replace_dropped()
            {stop}
        """,
    )
    """:meth:`on_next` as a step of a fused run."""

    def _replace_dropped(self) -> None:
        """Ask the upstream for one more element in place of a dropped one (bounded demand only)."""
        upstream = self._upstream
        if upstream is not None:
            upstream.request(1)


@register_operator("filter_indexed")
class FilterIndexed(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of ``Query.filter_indexed``: keeps ``element`` when ``predicate(element, index)`` is
    true; the index counts every element received (kept or dropped), from 0.

    State: the index of the next element. Demand: as :class:`Filter` (a ``request(1)`` upstream for each dropped
    element, unless demand is unbounded).
    """

    name = "reaqtive:filter+index"
    version: Version = (1,)

    __slots__ = ("_index", "_predicate", "_requested", "_source")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "predicate")
        self._source: Subscribable[T] = args.source(0)
        self._predicate: Callable[[T, int], object] = args.function(1)
        self._requested = 0
        self._index = 0

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._index)

    def load_state_core(self, reader: StateReader) -> None:
        self._index = reader.read_int("index")

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def request(self, n: int) -> None:
        if n > 0:
            self._requested = add_demand(self._requested, n)
        super().request(n)

    def on_next(self, value: T) -> None:
        index = self._index
        try:
            drop = not self._predicate(value, index)  # truthiness inside the try: bool() of a result may raise
        except Exception as error:
            self._signal_error(error)
            return
        self._index = index + 1
        self._state.changed = True
        if not drop:
            self._downstream.on_next(value)
        elif self._requested != LONG_MAX:
            upstream = self._upstream
            if upstream is not None:
                upstream.request(1)
