"""Combining sources: ``merge``, ``combine_latest``.

Both are n-ary. Call them on the first source (``xs.merge(ys, zs)``) or on the class with every source
(``Query.merge(xs, ys, zs)``, ``Query.combine_latest(xs, ys, selector)``): the class form is the same method,
called unbound, so it reads as a static constructor; its first source is then a query (the functions
``reaqtive.merge`` and ``reaqtive.combine_latest`` take any subscribable first). The other sources are queries,
or any subscribable (a subject, a test source), which is wrapped as ``Query.from_subscribable`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.core.subscribable import Subscribable
from reaqtive.fluent._base import Fluent, LazyModule

if TYPE_CHECKING:
    from reaqtive.fluent.query import Query

if TYPE_CHECKING:  # the operator modules, typed; at run time each is imported on first use
    from reaqtive.operators import merge
else:
    merge = LazyModule("merge")

__all__ = ["CombineMixin"]

T = TypeVar("T")
R = TypeVar("R")


class CombineMixin(Fluent[T], Generic[T]):
    """The combine family of fluent methods (see :mod:`reaqtive.fluent`)."""

    __slots__ = ()

    def merge(self, *others: Subscribable[T]) -> Query[T]:
        return self.pipe(merge.merge(*others))

    def combine_latest(
        self, *others_and_selector: Subscribable[Any] | Callable[..., R], selector: Callable[..., R] | None = None
    ) -> Query[Any]:
        return self.pipe(merge.combine_latest(*others_and_selector, selector=selector))
