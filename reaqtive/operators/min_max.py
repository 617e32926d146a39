"""``min`` and ``max``: the smallest / largest element, optionally by a key, as Python's ``min``/``max``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Final, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.operators._aggregate import AggregateStage, no_elements_error
from reaqtive.streams import Subscriber

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["Max", "Min"]

T = TypeVar("T")

_UNKNOWN: Final[Any] = object()
"""The key of the best element is not known yet (after a restart: keys are not state, they are recomputed)."""


class _Extremum(AggregateStage[T, T], Generic[T]):
    """Keeps the best element so far; with equal keys, the first one stays (as Python's ``min``/``max``).

    State: the held result, then ``best`` (``None`` until the first element: ``None`` is never an element). The
    key of ``best`` is not saved (a key may be any object); after a restart it is computed again, once.
    """

    smallest: ClassVar[bool]
    """``True`` for ``min``."""

    __slots__ = ("_best", "_best_key", "_key")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        args = arguments(query, "source", "key")
        super().__init__(args.source(0), downstream)
        key = args.optional_function(1)
        self._key: Callable[[T], Any] | None = key
        self._best: T | None = None
        self._best_key: Any = _UNKNOWN

    def save_state_core(self, writer: StateWriter) -> None:
        super().save_state_core(writer)
        writer.write(self._best)

    def load_state_core(self, reader: StateReader) -> None:
        super().load_state_core(reader)
        self._best = reader.read()  # the user's element
        self._best_key = _UNKNOWN

    def on_next(self, value: T) -> None:
        best = self._best
        key = self._key
        try:
            value_key = value if key is None else key(value)
            if best is not None:
                best_key = self._best_key
                if best_key is _UNKNOWN:
                    best_key = self._best_key = best if key is None else key(best)
                if not (value_key < best_key if self.smallest else value_key > best_key):
                    return
        except Exception as error:  # the key function, or elements that do not compare
            self._signal_error(error)
            return
        self._best = value
        self._best_key = value_key
        self._state.changed = True

    def result_at_completion(self) -> T:
        best = self._best
        if best is None:
            raise no_elements_error("min" if self.smallest else "max")
        return best


@register_operator("min", frames=4)
class Min(_Extremum[T], Generic[T]):
    """The running stage of ``Query.min``."""

    name = "reaqtive:min"
    version: Version = (1,)
    smallest = True

    __slots__ = ()


@register_operator("max", frames=4)
class Max(_Extremum[T], Generic[T]):
    """The running stage of ``Query.max``."""

    name = "reaqtive:max"
    version: Version = (1,)
    smallest = False

    __slots__ = ()
