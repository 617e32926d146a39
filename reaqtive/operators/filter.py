"""``filter`` and ``filter_indexed``: keep the elements that satisfy a predicate (of the element and its index)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import args_record, require_callable
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import StateReader, Version
from reaqtive.core.streams import LONG_MAX, Subscriber, add_demand
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators._fusion import FusedStep, fusible
from reaqtive.operators.keyed_steps import SKIP, KeyedStep, TemplateStep, register_keyed_step
from reaqtive.operators.step_stage import StepStage, runs_inline, step_operator
from reaqtive.state import StatefulUnaryOperatorBase

__all__ = ["Filter", "FilterArgs", "FilterIndexed", "FilterIndexedArgs", "filter", "filter_indexed"]

T = TypeVar("T")


def filter(predicate: Callable[[T], object]) -> OperatorCall[T]:
    """Keep the elements for which ``predicate`` is true.

    >>> from_iterable(range(6)).filter(lambda x: x % 2 == 0).run(print)  # doctest: +ELLIPSIS
    0
    2
    4
    <...>

    An exception from ``predicate`` becomes ``on_error``, or drops the element under a skip policy
    (``docs/operators.md``, "When user code raises").

    **State.** None beyond the base.

    **Demand.** Passed upstream; each dropped element is replaced by a ``request(1)`` upstream, so the
    downstream's outstanding demand stays covered, unless demand is unbounded (once the downstream has requested
    ``LONG_MAX`` in total, rule 3.17, dropping costs nothing more).

    Reaqtive: Where.
    """
    require_callable(predicate, "filter", "predicate")
    return OperatorCall("filter", (predicate,))


def filter_indexed(predicate: Callable[[T, int], object]) -> OperatorCall[T]:
    """Keep the elements for which ``predicate(element, index)`` is true; the index counts every element
    received, kept or not, from 0.

    >>> from_iterable("abcde").filter_indexed(lambda x, i: i % 2 == 0).run(print)  # doctest: +ELLIPSIS
    a
    c
    e
    <...>

    An exception from ``predicate`` becomes ``on_error``, or drops the element under a skip policy: a skipped
    element takes no index (the next one gets its index).

    **State.** The index of the next element.

    **Demand.** As :meth:`filter` (a ``request(1)`` upstream for each dropped element, unless demand is
    unbounded).

    Reaqtive: Where+Index.
    """
    require_callable(predicate, "filter_indexed", "predicate")
    return OperatorCall("filter_indexed", (predicate,))


FilterArgs = args_record("FilterArgs", source="source", predicate="function")
FilterIndexedArgs = args_record("FilterIndexedArgs", source="source", predicate="function")


@fusible("filter", builder=filter, args=FilterArgs)
class Filter(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of :func:`filter`: ``_unbounded`` caches ``_requested == LONG_MAX``, read per dropped
    element. Its ``on_next``, its step in a fused run and its keyed step (:class:`FilterStep`) are compiled from
    one template, :attr:`fused_step` (:mod:`reaqtive.operators._fusion`)."""

    timeless = True
    name = "reaqtive:filter"
    version: Version = (1,)

    __slots__ = ("_predicate", "_requested", "_source", "_unbounded")

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = FilterArgs.read(query)
        self._source: Subscribable[T] = args.source
        self._predicate: Callable[[T], object] = args.predicate
        self._requested = 0
        self._unbounded = False  # self._requested == LONG_MAX, read per dropped element

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def request(self, n: int) -> None:
        if n > 0:
            self._requested = requested = add_demand(self._requested, n)
            self._unbounded = requested == LONG_MAX
        super().request(n)

    fused_step = FusedStep(
        "_predicate",
        """
        try:
            drop = not {fn}({value})
        except Exception as error:
            {stage}._user_error(error, {value})
            {stop}
        if drop:
            if {bounded}:
                if not {stage}._unbounded:
                    {stage}._replace_dropped()
            {stop}
        """,
    )
    """The per-element logic (truthiness inside the ``try``: ``bool()`` of a result may raise too): the stage's
    ``on_next``, its fused step and its keyed step are compiled from it."""

    on_next = fused_step.stage_on_next()

    def _replace_dropped(self) -> None:
        """Ask the upstream for one more element in place of a dropped one (bounded demand only)."""
        upstream = self._upstream
        if upstream is not None:
            upstream.request(1)

    def _element_skipped(self) -> None:
        if not self._unbounded:  # as a dropped element
            self._replace_dropped()


@step_operator("filter_indexed", lambda args: FilterIndexedStep(args.predicate),
               builder=filter_indexed, args=FilterIndexedArgs)
class FilterIndexed(StepStage):
    """The running stage of :func:`filter_indexed`, run by its keyed step (:class:`FilterIndexedStep`)."""

    name = "reaqtive:filter+index"
    version: Version = (1,)
    drops = True

    def load_state_core(self, reader: StateReader) -> None:
        self._field = reader.read_int("index")


class FilterStep(TemplateStep):
    """:class:`Filter` for one key of a keyed chain (:mod:`reaqtive.operators.keyed_steps`), from its template."""

    __slots__ = ()

    next = Filter.fused_step.keyed_next()


@register_keyed_step("filter")
def filter_step(query: Expression[Any]) -> FilterStep:
    """The keyed step of a ``filter`` node."""
    return FilterStep(FilterArgs.read(query).predicate)


@runs_inline(FilterIndexed)
class FilterIndexedStep(KeyedStep):
    """The per-element logic of :func:`filter_indexed` (the stage and a keyed chain run it): the field is the
    index of the next element; a skipped element takes no index."""

    __slots__ = ("_predicate",)

    initial = 0

    def __init__(self, predicate: Callable[[Any, int], object]) -> None:
        self._predicate = predicate

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        return state + 1, (value if self._predicate(value, state) else SKIP)

    def check(self, state: Any) -> bool:
        return type(state) is int and state >= 0
