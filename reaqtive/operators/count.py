"""``count``: how many elements the source had (optionally, how many satisfied a predicate)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.operators._aggregate import AggregateStage
from reaqtive.streams import Subscriber

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["Count"]

T = TypeVar("T")


@register_operator("count", frames=4)
class Count(AggregateStage[T, int], Generic[T]):
    """The running stage of ``Query.count``. State: the held result, then ``count: int``."""

    name = "reaqtive:count"
    version: Version = (1,)

    __slots__ = ("_count", "_predicate")

    def __init__(self, query: Query[Any], downstream: Subscriber[int]) -> None:
        args = arguments(query, "source", "predicate")
        super().__init__(args.source(0), downstream)
        predicate = args.optional_function(1)
        self._predicate: Callable[[T], object] | None = predicate
        self._count = 0

    def save_state_core(self, writer: StateWriter) -> None:
        super().save_state_core(writer)
        writer.write(self._count)

    def read_result(self, reader: StateReader) -> int:
        return reader.read_int("result")

    def load_state_core(self, reader: StateReader) -> None:
        super().load_state_core(reader)
        self._count = reader.read_int("count")

    def on_next(self, value: T) -> None:
        predicate = self._predicate
        if predicate is not None:
            try:
                if not predicate(value):
                    return
            except Exception as error:
                self._signal_error(error)
                return
        self._count += 1
        self._state.changed = True

    def result_at_completion(self) -> int:
        return self._count
