"""``any``, ``all``, ``contains`` and ``is_empty``: a yes/no answer, given as soon as one element decides it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.operator import StateReader, Version
from reaqtive.operators._aggregate import AggregateStage
from reaqtive.streams import Subscriber

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["All", "Any", "Contains", "IsEmpty"]

T = TypeVar("T")


class _Quantifier(AggregateStage[T, bool], Generic[T]):
    """An answer that one element can decide; ``when_completed`` is the answer if none did. When an element
    decides, the answer goes downstream at once and the source is cancelled. State: only the held result."""

    when_completed: ClassVar[bool]

    __slots__ = ()

    def result_at_completion(self) -> bool:
        return self.when_completed

    def read_result(self, reader: StateReader) -> bool:
        return reader.read_bool("result")


@register_operator("any")
class Any(_Quantifier[T], Generic[T]):
    """The running stage of ``Query.any``: ``True`` at the first element (satisfying the predicate)."""

    name = "reaqtive:any"
    version: Version = (1,)
    when_completed = False

    __slots__ = ("_predicate",)

    def __init__(self, query: Query[object], downstream: Subscriber[bool]) -> None:
        args = arguments(query, "source", "predicate")
        super().__init__(args.source(0), downstream)
        predicate = args.optional_function(1)
        self._predicate: Callable[[T], object] | None = predicate

    def on_next(self, value: T) -> None:
        predicate = self._predicate
        if predicate is not None:
            try:
                if not predicate(value):
                    return
            except Exception as error:
                self._signal_error(error)
                return
        self._finish(True)


@register_operator("all")
class All(_Quantifier[T], Generic[T]):
    """The running stage of ``Query.all``: ``False`` at the first element not satisfying the predicate."""

    name = "reaqtive:all"
    version: Version = (1,)
    when_completed = True

    __slots__ = ("_predicate",)

    def __init__(self, query: Query[object], downstream: Subscriber[bool]) -> None:
        args = arguments(query, "source", "predicate")
        super().__init__(args.source(0), downstream)
        predicate = args.function(1)
        self._predicate: Callable[[T], object] = predicate

    def on_next(self, value: T) -> None:
        try:
            if self._predicate(value):
                return
        except Exception as error:
            self._signal_error(error)
            return
        self._finish(False)


@register_operator("contains")
class Contains(_Quantifier[T], Generic[T]):
    """The running stage of ``Query.contains``: ``True`` at the first element equal (``==``) to the value."""

    name = "reaqtive:contains"
    version: Version = (1,)
    when_completed = False

    __slots__ = ("_value",)

    def __init__(self, query: Query[object], downstream: Subscriber[bool]) -> None:
        args = arguments(query, "source", "value")
        super().__init__(args.source(0), downstream)
        self._value: object = args.element(1)

    def on_next(self, value: T) -> None:
        try:
            found = bool(value == self._value)
        except Exception as error:  # an __eq__ (or its truth value) that raises
            self._signal_error(error)
            return
        if found:
            self._finish(True)


@register_operator("is_empty")
class IsEmpty(_Quantifier[T], Generic[T]):
    """The running stage of ``Query.is_empty``: ``False`` at the first element."""

    name = "reaqtive:is_empty"
    version: Version = (1,)
    when_completed = True

    __slots__ = ()

    def __init__(self, query: Query[object], downstream: Subscriber[bool]) -> None:
        super().__init__(arguments(query, "source").source(0), downstream)

    def on_next(self, value: T) -> None:
        self._finish(False)
