"""Transform and filter: ``map``, ``filter`` (and their indexed forms), ``scan``, ``do``, ``finally_action``,
``ignore_elements``, ``default_if_empty``, ``start_with``, ``distinct``, ``distinct_until_changed``, ``trace``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar, overload

from reaqtive.fluent._base import Fluent, LazyModule
from reaqtive.operators._seed import NO_SEED

if TYPE_CHECKING:
    from reaqtive.fluent.query import Query

if TYPE_CHECKING:  # the operator modules, typed; at run time each is imported on first use
    from reaqtive.operators import (
        default_if_empty,
        distinct,
        do,
        filter,
        ignore_elements,
        map,
        named,
        scan,
        start_with,
    )
else:
    default_if_empty = LazyModule("default_if_empty")
    distinct = LazyModule("distinct")
    do = LazyModule("do")
    filter = LazyModule("filter")
    ignore_elements = LazyModule("ignore_elements")
    map = LazyModule("map")
    scan = LazyModule("scan")
    start_with = LazyModule("start_with")
    named = LazyModule("named")

__all__ = ["TransformMixin"]

T = TypeVar("T")
R = TypeVar("R")
A = TypeVar("A")

_NO_SEED: Final[Any] = NO_SEED  # the builder's default, by a name the method's overloads do not hide


class TransformMixin(Fluent[T], Generic[T]):
    """Operators that transform or filter elements one by one."""

    __slots__ = ()

    def map(self, selector: Callable[[T], R]) -> Query[R]:
        return self.pipe(map.map(selector))

    def map_indexed(self, selector: Callable[[T, int], R]) -> Query[R]:
        return self.pipe(map.map_indexed(selector))

    def filter(self, predicate: Callable[[T], object]) -> Query[T]:
        return self.pipe(filter.filter(predicate))

    def filter_indexed(self, predicate: Callable[[T, int], object]) -> Query[T]:
        return self.pipe(filter.filter_indexed(predicate))

    @overload
    def scan(self, accumulator: Callable[[T, T], T], /) -> Query[T]: ...

    @overload
    def scan(self, seed: A, accumulator: Callable[[A, T], A], /) -> Query[A]: ...

    @overload
    def scan(self, accumulator: Callable[[A, T], A], /, *, seed: A) -> Query[A]: ...

    def scan(self, *args: Any, seed: Any = _NO_SEED) -> Query[Any]:
        return self.pipe(scan.scan(*args, seed=seed))

    def do(
        self,
        on_next: Callable[[T], object] | Any = None,
        on_error: Callable[[BaseException], object] | None = None,
        on_complete: Callable[[], object] | None = None,
    ) -> Query[T]:
        return self.pipe(do.do(on_next, on_error, on_complete))

    def finally_action(self, action: Callable[[], object]) -> Query[T]:
        return self.pipe(do.finally_action(action))

    def ignore_elements(self) -> Query[T]:
        return self.pipe(ignore_elements.ignore_elements())

    def default_if_empty(self, default_value: T) -> Query[T]:
        return self.pipe(default_if_empty.default_if_empty(default_value))

    def start_with(self, *values: T) -> Query[T]:
        return self.pipe(start_with.start_with(*values))

    def distinct(
        self,
        key_selector: Callable[[T], object] | None = None,
        comparer: Callable[[Any, Any], object] | None = None,
    ) -> Query[T]:
        return self.pipe(distinct.distinct(key_selector, comparer))

    def distinct_until_changed(
        self,
        key_selector: Callable[[T], object] | None = None,
        comparer: Callable[[Any, Any], object] | None = None,
    ) -> Query[T]:
        return self.pipe(distinct.distinct_until_changed(key_selector, comparer))

    def trace(self, label: str, emit: Callable[[str], object] = print) -> Query[T]:
        return self.pipe(do.trace(label, emit))

    def named(self, name: str) -> Query[T]:
        return self.pipe(named.named(name))
