"""Aggregates: ``aggregate``, ``count``, ``sum``, ``first``, ``to_list``, ...

Every aggregate reduces its source to **one element**, then completes. They share one demand policy, one way of
keeping their result and one set of errors, described in :mod:`reaqtive.operators._aggregate`: nothing is
requested until the downstream asks, then everything once; a result known before anyone asked is **held** (the
one element an aggregate ever buffers) and saved with a checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from reaqtive.core.subscribable import Subscribable
from reaqtive.fluent._base import Fluent, LazyModule
from reaqtive.operators._seed import NO_SEED
from reaqtive.scheduler.clock import EPOCH

if TYPE_CHECKING:
    from reaqtive.fluent.query import Query
    from reaqtive.operators.keyed_window import AggregateName, Fold, Hopping, Session, Tumbling, WindowRow

if TYPE_CHECKING:  # the operator modules, typed; at run time each is imported on first use
    from reaqtive.operators import (
        aggregate,
        any_all_contains,
        first_last_single,
        keyed_window,
        math_aggregates,
        sequence_equal,
    )
else:
    aggregate = LazyModule("aggregate")
    any_all_contains = LazyModule("any_all_contains")
    first_last_single = LazyModule("first_last_single")
    keyed_window = LazyModule("keyed_window")
    math_aggregates = LazyModule("math_aggregates")
    sequence_equal = LazyModule("sequence_equal")

__all__ = ["AggregateMixin"]

T = TypeVar("T")
A = TypeVar("A")
R = TypeVar("R")


class AggregateMixin(Fluent[T], Generic[T]):
    """Operators that reduce a source to one element (see the module for their shared demand policy)."""

    __slots__ = ()

    # -- folding -----------------------------------------------------------------------------------------------

    @overload
    def aggregate(self, accumulator: Callable[[T, T], T]) -> Query[T]: ...

    @overload
    def aggregate(self, accumulator: Callable[[T, T], T], *, result_selector: Callable[[T], R]) -> Query[R]: ...

    @overload
    def aggregate(self, accumulator: Callable[[A, T], A], seed: A) -> Query[A]: ...

    @overload
    def aggregate(self, accumulator: Callable[[A, T], A], seed: A, result_selector: Callable[[A], R]) -> Query[R]: ...

    def aggregate(
        self,
        accumulator: Callable[[Any, T], Any],
        seed: object = NO_SEED,
        result_selector: Callable[[Any], Any] | None = None,
    ) -> Query[Any]:
        return self.pipe(aggregate.aggregate(accumulator, seed, result_selector))

    def count(self, predicate: Callable[[T], object] | None = None) -> Query[int]:
        return self.pipe(math_aggregates.count(predicate))

    def sum(self, start: object = 0) -> Query[Any]:
        return self.pipe(math_aggregates.sum(start))

    def average(self) -> Query[Any]:
        return self.pipe(math_aggregates.average())

    def min(self, key: Callable[[T], Any] | None = None) -> Query[T]:
        return self.pipe(math_aggregates.min(key))

    def max(self, key: Callable[[T], Any] | None = None) -> Query[T]:
        return self.pipe(math_aggregates.max(key))

    def to_list(self) -> Query[list[T]]:
        return self.pipe(aggregate.to_list())

    # -- per key and time window (many rows, not one: see the builder) -----------------------------------------

    def aggregate_by_key(
        self,
        key_selector: Callable[[T], Any],
        window: Tumbling | Hopping | Session,
        aggregate: AggregateName | Fold = "count",
        value_selector: Callable[[T], Any] | None = None,
        *,
        origin: datetime = EPOCH,
    ) -> Query[WindowRow]:
        return self.pipe(keyed_window.aggregate_by_key(key_selector, window, aggregate, value_selector, origin=origin))

    # -- quantifiers: decided by one element -------------------------------------------------------------------

    def any(self, predicate: Callable[[T], object] | None = None) -> Query[bool]:
        return self.pipe(any_all_contains.any(predicate))

    def all(self, predicate: Callable[[T], object]) -> Query[bool]:
        return self.pipe(any_all_contains.all(predicate))

    def contains(self, value: object) -> Query[bool]:
        return self.pipe(any_all_contains.contains(value))

    def is_empty(self) -> Query[bool]:
        return self.pipe(any_all_contains.is_empty())

    # -- picking one element -----------------------------------------------------------------------------------

    def first(self, predicate: Callable[[T], object] | None = None) -> Query[T]:
        return self.pipe(first_last_single.first(predicate))

    def first_or_default(self, default: T, predicate: Callable[[T], object] | None = None) -> Query[T]:
        return self.pipe(first_last_single.first_or_default(default, predicate))

    def last(self, predicate: Callable[[T], object] | None = None) -> Query[T]:
        return self.pipe(first_last_single.last(predicate))

    def last_or_default(self, default: T, predicate: Callable[[T], object] | None = None) -> Query[T]:
        return self.pipe(first_last_single.last_or_default(default, predicate))

    def single(self, predicate: Callable[[T], object] | None = None) -> Query[T]:
        return self.pipe(first_last_single.single(predicate))

    def single_or_default(self, default: T, predicate: Callable[[T], object] | None = None) -> Query[T]:
        return self.pipe(first_last_single.single_or_default(default, predicate))

    def element_at(self, index: int) -> Query[T]:
        return self.pipe(first_last_single.element_at(index))

    def element_at_or_default(self, index: int, default: T) -> Query[T]:
        return self.pipe(first_last_single.element_at_or_default(index, default))

    # -- two sources -------------------------------------------------------------------------------------------

    def sequence_equal(self, other: Subscribable[T], comparer: Callable[[T, T], object] | None = None) -> Query[bool]:
        return self.pipe(sequence_equal.sequence_equal(other, comparer))
