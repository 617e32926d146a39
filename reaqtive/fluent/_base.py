"""What the fluent mixins share: the base that declares ``pipe`` for the type checker."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

if TYPE_CHECKING:
    from reaqtive.core.expression import Expression, OperatorCall
    from reaqtive.fluent.query import Query

__all__ = ["Fluent"]

R = TypeVar("R")
X = TypeVar("X")


class Fluent(Generic[R]):
    """The base of the fluent mixins: their one-line methods chain through ``Expression.pipe``, declared here for
    the type checker only (at run time the node's own ``pipe`` is found)."""

    __slots__ = ()

    if TYPE_CHECKING:  # Expression.pipe, typed with the facade: a step is given a Query, and pipe returns one
        @overload
        def pipe(self, step: OperatorCall[X], /) -> Query[X]: ...

        # Several operator calls (``q.pipe(ops.map(f), ops.take(3))``): the query has the last one's type.
        @overload
        def pipe(self, step1: OperatorCall[Any], step2: OperatorCall[X], /) -> Query[X]: ...

        @overload
        def pipe(self, step1: OperatorCall[Any], step2: OperatorCall[Any], step3: OperatorCall[X], /) -> Query[X]: ...

        @overload
        def pipe(self, step1: OperatorCall[Any], step2: OperatorCall[Any], step3: OperatorCall[Any],
                 step4: OperatorCall[X], /) -> Query[X]: ...

        @overload
        def pipe(self, *steps: OperatorCall[Any] | Callable[[Query[Any]], Expression[Any]]) -> Query[Any]: ...

        def pipe(self, *steps: OperatorCall[Any] | Callable[[Query[Any]], Expression[Any]]) -> Query[Any]: ...
