"""Take and skip: ``take``, ``skip`` (by count or duration), ``take_while``, ``skip_while`` (+ indexed),
``take_until``, ``skip_until`` (another stream or an absolute time).

Reaqtive names: Take, Skip, TakeWhile, SkipWhile, TakeUntil, SkipUntil. The time-based forms (``take``/``skip``
with a :class:`~datetime.timedelta`, ``take_until``/``skip_until`` with a :class:`~datetime.datetime`) run their
own timer on the scheduler of the operator context, so they need one (an engine, or a context with a
scheduler); the original composes them from ``Timer``, we do not, and save the absolute time instead.

None of them holds elements: each element is passed or dropped as it arrives (their buffer bound is zero), and
an element is never delivered without the downstream's demand.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from reaqtive.core.subscribable import Subscribable
from reaqtive.fluent._base import Fluent, LazyModule

if TYPE_CHECKING:
    from reaqtive.fluent.query import Query

if TYPE_CHECKING:  # the operator modules, typed; at run time each is imported on first use
    from reaqtive.operators import skip_until, take, take_until, take_while
else:
    skip_until = LazyModule("skip_until")
    take = LazyModule("take")
    take_until = LazyModule("take_until")
    take_while = LazyModule("take_while")

__all__ = ["TakeSkipMixin"]

T = TypeVar("T")


class TakeSkipMixin(Fluent[T], Generic[T]):
    """Operators that pass or drop a prefix of the stream: by count, by time, by predicate, or by a signal."""

    __slots__ = ()

    @overload
    def take(self, count: int, /) -> Query[T]: ...

    @overload
    def take(self, duration: timedelta, /) -> Query[T]: ...

    def take(self, count: int | timedelta, /) -> Query[T]:
        return self.pipe(take.take(count))

    @overload
    def skip(self, count: int, /) -> Query[T]: ...

    @overload
    def skip(self, duration: timedelta, /) -> Query[T]: ...

    def skip(self, count: int | timedelta, /) -> Query[T]:
        return self.pipe(take.skip(count))

    def take_while(self, predicate: Callable[[T], object], *, inclusive: bool = False) -> Query[T]:
        return self.pipe(take_while.take_while(predicate, inclusive=inclusive))

    def take_while_indexed(self, predicate: Callable[[T, int], object], *, inclusive: bool = False) -> Query[T]:
        return self.pipe(take_while.take_while_indexed(predicate, inclusive=inclusive))

    def skip_while(self, predicate: Callable[[T], object]) -> Query[T]:
        return self.pipe(take_while.skip_while(predicate))

    def skip_while_indexed(self, predicate: Callable[[T, int], object]) -> Query[T]:
        return self.pipe(take_while.skip_while_indexed(predicate))

    @overload
    def take_until(self, other: Subscribable[Any], /) -> Query[T]: ...

    @overload
    def take_until(self, end_time: datetime, /) -> Query[T]: ...

    def take_until(self, other: Subscribable[Any] | datetime, /) -> Query[T]:
        return self.pipe(take_until.take_until(other))

    @overload
    def skip_until(self, other: Subscribable[Any], /) -> Query[T]: ...

    @overload
    def skip_until(self, start_time: datetime, /) -> Query[T]: ...

    def skip_until(self, other: Subscribable[Any] | datetime, /) -> Query[T]:
        return self.pipe(skip_until.skip_until(other))
