"""``first``, ``last`` and ``single`` (each with a predicate, and an ``_or_default`` form for an empty source)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.operators._aggregate import AggregateStage, no_elements_error
from reaqtive.streams import Subscriber

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["First", "Last", "Single"]

T = TypeVar("T")


class _Pick(AggregateStage[T, T], Generic[T]):
    """What the three share: the arguments. ``op(source, predicate)`` and ``op_or_default(source, default,
    predicate)``; the predicate may be ``None``. Without a default, finding no element is an error."""

    __slots__ = ("_default", "_op", "_predicate")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        default: object = None
        if query.op.endswith("_or_default"):
            args = arguments(query, "source", "default", "predicate")
            default = args.element(1)
        else:
            args = arguments(query, "source", "predicate")
        super().__init__(args.source(0), downstream)
        self._op = query.op
        self._predicate: Callable[[T], object] | None = args.optional_function(len(args) - 1)
        self._default: T | None = default  # type: ignore[assignment]

    def _no_element(self) -> T:
        """The result when no element was found: the default, or the error."""
        if self._default is None:
            raise no_elements_error(self._op, self._predicate is not None)
        return self._default


@register_operator("first")
@register_operator("first_or_default")
class First(_Pick[T], Generic[T]):
    """The running stage of ``Query.first`` and ``first_or_default``: the first (matching) element, at once.
    State: only the held result."""

    name = "reaqtive:first"
    version: Version = (1,)

    __slots__ = ()

    def on_next(self, value: T) -> None:
        predicate = self._predicate
        if predicate is not None:
            try:
                if not predicate(value):
                    return
            except Exception as error:
                self._signal_error(error)
                return
        self._finish(value)

    def result_at_completion(self) -> T:
        return self._no_element()


@register_operator("last", frames=4)
@register_operator("last_or_default", frames=4)
class Last(_Pick[T], Generic[T]):
    """The running stage of ``Query.last`` and ``last_or_default``. State: the held result, then ``last``
    (``None`` until a (matching) element arrived: ``None`` is never an element)."""

    name = "reaqtive:last"
    version: Version = (1,)

    __slots__ = ("_last",)

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(query, downstream)
        self._last: T | None = None

    def save_state_core(self, writer: StateWriter) -> None:
        super().save_state_core(writer)
        writer.write(self._last)

    def load_state_core(self, reader: StateReader) -> None:
        super().load_state_core(reader)
        self._last = reader.read()  # the user's element, or None

    def on_next(self, value: T) -> None:
        predicate = self._predicate
        if predicate is not None:
            try:
                if not predicate(value):
                    return
            except Exception as error:
                self._signal_error(error)
                return
        self._last = value
        self._state.changed = True

    def result_at_completion(self) -> T:
        last = self._last
        return self._no_element() if last is None else last


@register_operator("single", frames=4)
@register_operator("single_or_default", frames=4)
class Single(_Pick[T], Generic[T]):
    """The running stage of ``Query.single`` and ``single_or_default``: a second (matching) element is an error
    at once, also with a default. State: the held result, then ``found`` (``None`` until a (matching) element
    arrived)."""

    name = "reaqtive:single"
    version: Version = (1,)

    __slots__ = ("_found",)

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(query, downstream)
        self._found: T | None = None

    def save_state_core(self, writer: StateWriter) -> None:
        super().save_state_core(writer)
        writer.write(self._found)

    def load_state_core(self, reader: StateReader) -> None:
        super().load_state_core(reader)
        self._found = reader.read()  # the user's element, or None

    def on_next(self, value: T) -> None:
        predicate = self._predicate
        if predicate is not None:
            try:
                if not predicate(value):
                    return
            except Exception as error:
                self._signal_error(error)
                return
        if self._found is not None:
            matching = " satisfying the predicate" if predicate is not None else ""
            self._signal_error(ValueError(f"{self._op}: the source has more than one element{matching}"))
            return
        self._found = value
        self._state.changed = True

    def result_at_completion(self) -> T:
        found = self._found
        return self._no_element() if found is None else found
