"""``sum`` and ``average`` of numbers (int, float, Decimal, Fraction, or anything that adds and divides)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.operators._aggregate import AggregateStage, no_elements_error
from reaqtive.streams import Subscriber

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["Average", "Sum"]

T = TypeVar("T")


@register_operator("sum", frames=4)
class Sum(AggregateStage[T, Any], Generic[T]):
    """The running stage of ``Query.sum``: ``start + x1 + x2 + ...``, as Python's ``sum``. State: the held
    result, then ``total``."""

    name = "reaqtive:sum"
    version: Version = (1,)

    __slots__ = ("_total",)

    def __init__(self, query: Query[Any], downstream: Subscriber[Any]) -> None:
        args = arguments(query, "source", "start")
        super().__init__(args.source(0), downstream)
        self._total: Any = args.element(1)

    def save_state_core(self, writer: StateWriter) -> None:
        super().save_state_core(writer)
        writer.write(self._total)

    def load_state_core(self, reader: StateReader) -> None:
        super().load_state_core(reader)
        self._total = reader.read()  # the user's elements added up

    def on_next(self, value: T) -> None:
        try:
            self._total = self._total + value
        except Exception as error:  # e.g. a str among numbers
            self._signal_error(error)
            return
        self._state.changed = True

    def result_at_completion(self) -> Any:
        return self._total


@register_operator("average", frames=4)
class Average(AggregateStage[T, Any], Generic[T]):
    """The running stage of ``Query.average``: ``(x1 + ... + xn) / n`` with true division. State: the held
    result, then ``count: int, total`` (``total`` is ``None`` until the first element)."""

    name = "reaqtive:average"
    version: Version = (1,)

    __slots__ = ("_count", "_total")

    def __init__(self, query: Query[Any], downstream: Subscriber[Any]) -> None:
        super().__init__(arguments(query, "source").source(0), downstream)
        self._count = 0
        self._total: Any = None

    def save_state_core(self, writer: StateWriter) -> None:
        super().save_state_core(writer)
        writer.write(self._count)
        writer.write(self._total)

    def load_state_core(self, reader: StateReader) -> None:
        super().load_state_core(reader)
        self._count = reader.read_int("count")
        self._total = reader.read()  # the user's elements added up: None until the first one
        if (self._total is None) != (self._count == 0):
            raise reader.invalid("total", "None exactly when the count is 0", self._total)

    def on_next(self, value: T) -> None:
        if self._count:
            try:
                self._total = self._total + value
            except Exception as error:
                self._signal_error(error)
                return
        else:
            self._total = value  # no start value: timedelta, Decimal and Fraction keep their type
        self._count += 1
        self._state.changed = True

    def result_at_completion(self) -> Any:
        if not self._count:
            raise no_elements_error("average")
        return self._total / self._count
