"""``map`` and ``map_indexed``: apply a function to each element (and its index)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import args_record, require_callable
from reaqtive.core.describe import shown
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import StateReader, Version
from reaqtive.core.streams import Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators._fusion import FusedStep, fusible
from reaqtive.operators.keyed_steps import KeyedStep, TemplateStep, register_keyed_step
from reaqtive.operators.step_stage import StepStage, runs_inline, step_operator
from reaqtive.state import StatefulUnaryOperatorBase

__all__ = ["Map", "MapArgs", "MapIndexed", "MapIndexedArgs", "map", "map_indexed"]

S = TypeVar("S")
T = TypeVar("T")
R = TypeVar("R")


def map(selector: Callable[[T], R]) -> OperatorCall[R]:
    """Apply ``selector`` to each element.

    >>> from_iterable([1, 2]).map(lambda x: x * 10).run(print)  # doctest: +ELLIPSIS
    10
    20
    <...>

    An exception from ``selector`` (or a ``None`` result) becomes ``on_error`` and ends the subscription, or
    skips the element under a skip policy (``docs/operators.md``, "When user code raises").

    **State.** None beyond the base (disposed).

    **Demand.** Passed upstream unchanged: one element in, one out.

    Reaqtive: Select.
    """
    require_callable(selector, "map", "selector")
    return OperatorCall("map", (selector,))


def map_indexed(selector: Callable[[T, int], R]) -> OperatorCall[R]:
    """Apply ``selector(element, index)`` to each element; the index counts from 0.

    >>> from_iterable("ab").map_indexed(lambda x, i: f"{i}:{x}").run(print)  # doctest: +ELLIPSIS
    0:a
    1:b
    <...>

    An exception from ``selector`` (or a ``None`` result) becomes ``on_error`` and ends the subscription, or
    skips the element under a skip policy: a skipped element takes no index (the next one gets its index).

    **State.** The index of the next element.

    **Demand.** Passed upstream unchanged: one element in, one out.

    Reaqtive: Select with index (``rc:Select+Index``).
    """
    require_callable(selector, "map_indexed", "selector")
    return OperatorCall("map_indexed", (selector,))


MapArgs = args_record("MapArgs", source="source", selector="function")
MapIndexedArgs = args_record("MapIndexedArgs", source="source", selector="function")


@fusible("map", frames=2, builder=map, args=MapArgs)
class Map(StatefulUnaryOperatorBase[S, R], Generic[S, R]):
    """The running stage of :func:`map`. Its ``on_next``, its step in a fused run and its keyed step
    (:class:`MapStep`) are compiled from one template, :attr:`fused_step` (:mod:`reaqtive.operators._fusion`)."""

    timeless = True
    name = "reaqtive:map"
    version: Version = (1,)

    __slots__ = ("_selector", "_source")

    def __init__(self, query: Expression[Any], downstream: Subscriber[R]) -> None:
        super().__init__(downstream)
        args = MapArgs.read(query)
        self._source: Subscribable[S] = args.source
        self._selector: Callable[[S], R] = args.selector

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    fused_step = FusedStep(
        "_selector",
        """
        try:
            {result} = {fn}({value})
        except Exception as error:
            {stage}._user_error(error, {value})
            {stop}
        if {result} is None:
            {stage}._selector_returned_none({value})
            {stop}
        """,
    )
    """The per-element logic: the stage's ``on_next``, its fused step and its keyed step are compiled from it."""

    on_next = fused_step.stage_on_next()

    def _selector_returned_none(self, value: object) -> None:
        self._user_error(TypeError(f"map: the selector returned None for {shown(value)}; None is never an element"),
                         value)


@step_operator("map_indexed", lambda args: MapIndexedStep(args.selector),
               frames=2, builder=map_indexed, args=MapIndexedArgs)
class MapIndexed(StepStage):
    """The running stage of :func:`map_indexed`, run by its keyed step (:class:`MapIndexedStep`)."""

    name = "reaqtive:map+index"
    version: Version = (1,)

    def load_state_core(self, reader: StateReader) -> None:
        self._field = reader.read_int("index")


class MapStep(TemplateStep):
    """:class:`Map` for one key of a keyed chain (:mod:`reaqtive.operators.keyed_steps`), from its template."""

    __slots__ = ()

    next = Map.fused_step.keyed_next()
    _selector_returned_none = Map._selector_returned_none


@register_keyed_step("map")
def map_step(query: Expression[Any]) -> MapStep:
    """The keyed step of a ``map`` node."""
    return MapStep(MapArgs.read(query).selector)


@runs_inline(MapIndexed)
class MapIndexedStep(KeyedStep):
    """The per-element logic of :func:`map_indexed` (the stage and a keyed chain run it): the field is the index
    of the next element; a skipped element takes no index."""

    __slots__ = ("_selector",)

    initial = 0

    def __init__(self, selector: Callable[[Any, int], Any]) -> None:
        self._selector = selector

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        result = self._selector(value, state)
        if result is None:
            raise TypeError(f"map_indexed: the selector returned None for {shown(value)}; None is never an element")
        return state + 1, result

    def check(self, state: Any) -> bool:
        return type(state) is int and state >= 0
