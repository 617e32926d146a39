"""Transform and filter: ``map``, ``filter``, ``trace``, ..."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

from reaqtive.fluent._base import derive, require_callable

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["TransformMixin"]

T = TypeVar("T")
R = TypeVar("R")


class TransformMixin(Generic[T]):
    """Operators that transform or filter elements one by one."""

    __slots__ = ()

    def map(self, selector: Callable[[T], R]) -> Query[R]:
        """Apply ``selector`` to each element.

        >>> from_iterable([1, 2]).map(lambda x: x * 10).run(print)  # doctest: +ELLIPSIS
        10
        20
        <...>

        Demand: passed upstream unchanged. An exception from ``selector`` (or a ``None`` result) becomes
        ``on_error`` and ends the subscription.
        """
        require_callable(selector, "map", "selector")
        return derive(self, "map", selector)

    def filter(self, predicate: Callable[[T], object]) -> Query[T]:
        """Keep the elements for which ``predicate`` is true.

        >>> from_iterable(range(6)).filter(lambda x: x % 2 == 0).run(print)  # doctest: +ELLIPSIS
        0
        2
        4
        <...>

        Demand: passed upstream; each dropped element is replaced by a ``request(1)`` upstream, unless demand
        is unbounded. An exception from ``predicate`` becomes ``on_error``.
        """
        require_callable(predicate, "filter", "predicate")
        return derive(self, "filter", predicate)

    def trace(self, label: str, emit: Callable[[str], object] = print) -> Query[T]:
        """Report every signal crossing this point, including ``request(n)`` from downstream, as text lines
        ``"[label] on_next(3)"`` passed to ``emit`` (``print`` by default). Elements pass through unchanged.

        >>> from_iterable([7]).trace("src").run(lambda x: None)  # doctest: +ELLIPSIS
        [src] request(9223372036854775807)
        [src] on_subscribe
        [src] on_next(7)
        [src] on_complete
        <...>

        (The request comes first: stages start from the subscriber side, and demand waits for the upstream.)
        Demand: passed upstream unchanged.
        """
        if not isinstance(label, str):
            raise TypeError(f"trace: label must be a str, got {type(label).__name__}")
        require_callable(emit, "trace", "emit")
        return derive(self, "trace", label, emit)
