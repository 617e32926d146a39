"""Higher-order operators: ``flat_map``, ``merge_all``, ``switch_latest``, ``debounce``, ``group_by``, ``window``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from reaqtive.core.subscribable import Subscribable
from reaqtive.fluent._base import Fluent, LazyModule

if TYPE_CHECKING:
    from reaqtive.fluent.query import GroupedStream, InnerStream, Query

if TYPE_CHECKING:  # the operator modules, typed; at run time each is imported on first use
    from reaqtive.operators import debounce, flat_map, group_by, window
else:
    debounce = LazyModule("debounce")
    flat_map = LazyModule("flat_map")
    group_by = LazyModule("group_by")
    window = LazyModule("window")

__all__ = ["HigherOrderMixin"]

T = TypeVar("T")


class HigherOrderMixin(Fluent[T], Generic[T]):
    """The higher order family of fluent methods (see :mod:`reaqtive.fluent`)."""

    __slots__ = ()

    def flat_map(
        self,
        selector: Callable[[T], Subscribable[Any]],
        result_selector: Callable[[T, Any], Any] | None = None,
        *,
        max_concurrent: int | None = None,
    ) -> Query[Any]:
        return self.pipe(flat_map.flat_map(selector, result_selector, max_concurrent=max_concurrent))

    def merge_all(self, max_concurrent: int | None = None) -> Query[Any]:
        return self.pipe(flat_map.merge_all(max_concurrent))

    def switch_latest(self, selector: Callable[[T], Subscribable[Any]] | None = None) -> Query[Any]:
        return self.pipe(flat_map.switch_latest(selector))

    def debounce(self, duration: timedelta | Callable[[T], Subscribable[Any]]) -> Query[T]:
        return self.pipe(debounce.debounce(duration))

    def group_by(
        self,
        key_selector: Callable[[T], object],
        element_selector: Callable[[T], Any] | None = None,
        *,
        max_groups: int | None = None,
        expire_after: timedelta | None = None,
    ) -> Query[GroupedStream[Any]]:
        return self.pipe(
            group_by.group_by(key_selector, element_selector, max_groups=max_groups, expire_after=expire_after)
        )

    @overload
    def window(self, count: int, skip: int | None = None, /) -> Query[InnerStream[T]]: ...

    @overload
    def window(self, duration: timedelta, shift: timedelta | None = None, /) -> Query[InnerStream[T]]: ...

    @overload
    def window(self, duration: timedelta, count: int, /) -> Query[InnerStream[T]]: ...

    def window(self, first: int | timedelta, second: int | timedelta | None = None, /) -> Query[InnerStream[T]]:
        return self.pipe(window.window(first, second))
