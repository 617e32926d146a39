"""What the fluent mixins share: building a node, and argument checks with clear messages."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from reaqtive.arguments import (
    require_callable,
    require_duration,
    require_int,
    require_non_negative_int,
    require_positive_duration,
    require_positive_int,
    require_time,
)

if TYPE_CHECKING:
    from reaqtive.expression import OperatorCall
    from reaqtive.query import Query

R = TypeVar("R")
X = TypeVar("X")

__all__ = [
    "Fluent",
    "derive",
    "new_query",
    "require_callable",
    "require_duration",
    "require_int",
    "require_non_negative_int",
    "require_positive_duration",
    "require_positive_int",
    "require_time",
]


def new_query(op: str, args: tuple[object, ...]) -> Query[Any]:
    """A query node ``op(*args)``."""
    from reaqtive.query import Query  # the mixins are Query's bases, so Query is imported late

    return Query(op, args)


def derive(source: object, op: str, *args: object) -> Query[Any]:
    """A query node ``op(source, *args)``: the usual shape of a fluent method's result."""
    return new_query(op, (source, *args))


class Fluent(Generic[R]):
    """The base of the fluent mixins: their one-line methods chain through ``Expression.pipe``, declared here for
    the type checker only (at run time the node's own ``pipe`` is found)."""

    __slots__ = ()

    if TYPE_CHECKING:  # the same signature as Expression.pipe
        @overload
        def pipe(self, step: OperatorCall[X], /) -> Query[X]: ...

        @overload
        def pipe(self, *steps: OperatorCall[Any] | Callable[[Query[Any]], Query[Any]]) -> Query[Any]: ...

        def pipe(self, *steps: OperatorCall[Any] | Callable[[Query[Any]], Query[Any]]) -> Query[Any]: ...
