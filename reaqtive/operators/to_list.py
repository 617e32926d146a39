"""``to_list``: all the elements, as one list."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.context import OperatorContext
from reaqtive.errors import LimitExceededError
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.operators._aggregate import AggregateStage
from reaqtive.operators.settings import MAX_LIST_SIZE, UNLIMITED, read_limit
from reaqtive.streams import Subscriber

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["ToList"]

T = TypeVar("T")


@register_operator("to_list", frames=4)
class ToList(AggregateStage[T, list[T]], Generic[T]):
    """The running stage of ``Query.to_list``. State: the held result, then ``items: list``. The setting
    ``MAX_LIST_SIZE`` bounds the list: one element more is a ``LimitExceededError``."""

    name = "reaqtive:to_list"
    version: Version = (1,)

    __slots__ = ("_items", "_limit")

    def __init__(self, query: Query[Any], downstream: Subscriber[list[T]]) -> None:
        super().__init__(arguments(query, "source").source(0), downstream)
        self._items: list[T] = []
        self._limit = UNLIMITED

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._limit = read_limit(context, MAX_LIST_SIZE)

    def save_state_core(self, writer: StateWriter) -> None:
        super().save_state_core(writer)
        writer.write(self._items)

    def read_result(self, reader: StateReader) -> list[T]:
        return reader.read_list("result")

    def load_state_core(self, reader: StateReader) -> None:
        super().load_state_core(reader)
        self._items = reader.read_list("items")  # a list of the user's elements

    def on_next(self, value: T) -> None:
        items = self._items
        if len(items) >= self._limit:
            self._signal_error(LimitExceededError(self.name, MAX_LIST_SIZE, self._limit))
            return
        items.append(value)
        self._state.changed = True

    def result_at_completion(self) -> list[T]:
        items, self._items = self._items, []  # the list moves into the (possibly held) result
        return items
