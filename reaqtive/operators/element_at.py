"""``element_at``: the element at a position (0-based), with an ``_or_default`` form for a shorter source."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.operators._aggregate import AggregateStage
from reaqtive.streams import Subscriber

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["ElementAt"]

T = TypeVar("T")


@register_operator("element_at")
@register_operator("element_at_or_default")
class ElementAt(AggregateStage[T, T], Generic[T]):
    """The running stage of ``Query.element_at`` (``(source, index)``) and ``element_at_or_default``
    (``(source, index, default)``): the element at ``index``, at once. A source that ends before it is an
    ``IndexError``, or the default. State: the held result, then ``remaining: int`` (elements still to skip)."""

    name = "reaqtive:element_at"
    version: Version = (1,)

    __slots__ = ("_default", "_index", "_op", "_remaining")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        default: object = None
        if query.op == "element_at_or_default":
            args = arguments(query, "source", "index", "default")
            default = args.element(2)
        else:
            args = arguments(query, "source", "index")
        super().__init__(args.source(0), downstream)
        index = args.integer(1)
        self._op = query.op
        self._index = index
        self._default: T | None = default  # type: ignore[assignment]
        self._remaining = index

    def save_state_core(self, writer: StateWriter) -> None:
        super().save_state_core(writer)
        writer.write(self._remaining)

    def load_state_core(self, reader: StateReader) -> None:
        super().load_state_core(reader)
        self._remaining = reader.read_int("remaining", maximum=self._index)

    def on_next(self, value: T) -> None:
        remaining = self._remaining
        if remaining:
            self._remaining = remaining - 1
            self._state.changed = True
        else:
            self._finish(value)

    def result_at_completion(self) -> T:
        default = self._default
        if default is None:
            seen = self._index - self._remaining
            raise IndexError(
                f"{self._op}: index {self._index} is out of range: the source completed after {seen} "
                f"element{'' if seen == 1 else 's'}"
            )
        return default
