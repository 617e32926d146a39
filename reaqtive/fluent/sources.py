"""Sources: queries that produce elements themselves (``from_iterable``, ...)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, TypeVar

from reaqtive.fluent._base import new_query
from reaqtive.subscribable import Subscribable

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["SourceConstructors"]

R = TypeVar("R")


class SourceConstructors:
    """Static constructors of source queries (also exported as functions: ``reaqtive.from_iterable``)."""

    __slots__ = ()

    @staticmethod
    def from_iterable(iterable: Iterable[R]) -> Query[R]:
        """A cold source that emits the elements of ``iterable`` as they are requested, then completes.

        >>> from_iterable([1, 2, 3]).run(print)  # doctest: +ELLIPSIS
        1
        2
        3
        <...>

        Demand: emits only what was requested, from a drain loop (a ``request`` made inside ``on_next`` adds to
        the demand instead of recursing, rule 3.3); unbounded demand emits with no per-element accounting.
        A ``None`` element or an exception raised by the iterator becomes ``on_error``.
        """
        if not isinstance(iterable, Iterable):
            raise TypeError(f"from_iterable needs an iterable, got {type(iterable).__name__}")
        return new_query("from_iterable", (iterable,))

    @staticmethod
    def from_subscribable(source: Subscribable[R]) -> Query[R]:
        """Use any subscribable (a subject, a test source) as the source of a query."""
        if not isinstance(source, Subscribable):
            raise TypeError(f"from_subscribable needs a Subscribable, got {type(source).__name__}")
        return new_query("subscribable", (source,))
