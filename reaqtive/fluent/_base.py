"""What the fluent mixins share: the base that declares ``pipe`` for the type checker."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

if TYPE_CHECKING:
    from reaqtive.core.expression import Expression, OperatorCall
    from reaqtive.fluent.query import Query

__all__ = ["Fluent", "LazyModule"]

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


class LazyModule:
    """An operator module imported on first attribute access: the fluent methods reach their builders through it,
    so that ``import reaqtive`` does not import the whole operator library (each attribute is cached once read)."""

    def __init__(self, name: str) -> None:
        self._module_name = f"reaqtive.operators.{name}"

    def __getattr__(self, attribute: str) -> Any:
        import importlib

        value = getattr(importlib.import_module(self._module_name), attribute)
        setattr(self, attribute, value)  # later reads find it on the instance, as on a module
        return value

    def __repr__(self) -> str:
        return f"<lazy module {self._module_name!r}>"
