"""``aggregate``: fold the source with an accumulator (with or without a seed), emit the final accumulation."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.operators._aggregate import AggregateStage, no_elements_error
from reaqtive.streams import Subscriber
from reaqtive.subscriptions import SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["Aggregate", "AggregateSeed"]

T = TypeVar("T")
A = TypeVar("A")
R = TypeVar("R")


@register_operator("aggregate", frames=4)
def _bind_aggregate(query: Query[Any], downstream: Subscriber[Any]) -> SubscriptionHandle:
    """``(source, accumulator, result_selector)`` folds without a seed; ``(..., seed)`` with one."""
    shapes = ("source", "accumulator", "result_selector"), ("source", "accumulator", "result_selector", "seed")
    if len(arguments(query, *shapes)) == 4:  # the stages check the values
        return AggregateSeed(query, downstream)
    return Aggregate(query, downstream)


class Aggregate(AggregateStage[T, Any], Generic[T]):
    """``aggregate(accumulator)``: the first element starts the accumulation. State: the held result (see
    :mod:`~reaqtive.operators._aggregate`), then ``has_value: bool, accumulation``. An empty source is an error."""

    name = "reaqtive:aggregate"
    version: Version = (1,)

    __slots__ = ("_accumulation", "_accumulator", "_has_value", "_result_selector")

    def __init__(self, query: Query[Any], downstream: Subscriber[Any]) -> None:
        args = arguments(query, "source", "accumulator", "result_selector")
        super().__init__(args.source(0), downstream)
        self._accumulator: Callable[[Any, T], Any] = args.function(1)
        self._result_selector: Callable[[Any], Any] | None = args.optional_function(2)
        self._has_value = False
        self._accumulation: Any = None

    def save_state_core(self, writer: StateWriter) -> None:
        super().save_state_core(writer)
        writer.write(self._has_value)
        writer.write(self._accumulation)

    def load_state_core(self, reader: StateReader) -> None:
        super().load_state_core(reader)
        self._has_value = reader.read_bool("has value")
        self._accumulation = reader.read()  # the user's accumulation

    def on_next(self, value: T) -> None:
        if self._has_value:
            try:
                self._accumulation = self._accumulator(self._accumulation, value)
            except Exception as error:
                self._signal_error(error)
                return
        else:
            self._accumulation = value
            self._has_value = True
        self._state.changed = True

    def result_at_completion(self) -> Any:
        if not self._has_value:
            raise no_elements_error("aggregate")
        selector = self._result_selector
        return self._accumulation if selector is None else selector(self._accumulation)


class AggregateSeed(AggregateStage[T, Any], Generic[T, A]):
    """``aggregate(accumulator, seed)``: the accumulation starts at ``seed``; an empty source gives ``seed``
    (through the result selector, if any). State: the held result, then ``accumulation``."""

    name = "reaqtive:aggregate+seed"
    version: Version = (1,)

    __slots__ = ("_accumulation", "_accumulator", "_result_selector")

    def __init__(self, query: Query[Any], downstream: Subscriber[Any]) -> None:
        args = arguments(query, "source", "accumulator", "result_selector", "seed")
        super().__init__(args.source(0), downstream)
        self._accumulator: Callable[[A, T], A] = args.function(1)
        self._result_selector: Callable[[A], Any] | None = args.optional_function(2)
        self._accumulation: A = args.value(3)  # type: ignore[assignment]

    def save_state_core(self, writer: StateWriter) -> None:
        super().save_state_core(writer)
        writer.write(self._accumulation)

    def load_state_core(self, reader: StateReader) -> None:
        super().load_state_core(reader)
        self._accumulation = reader.read()  # the user's accumulation

    def on_next(self, value: T) -> None:
        try:
            self._accumulation = self._accumulator(self._accumulation, value)
        except Exception as error:
            self._signal_error(error)
            return
        self._state.changed = True

    def result_at_completion(self) -> Any:
        selector = self._result_selector
        return self._accumulation if selector is None else selector(self._accumulation)
