"""Buffers: ``buffer`` by count, count and skip, duration, duration and shift, duration or count."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Generic, TypeVar, overload

from reaqtive.fluent._base import Fluent, LazyModule

if TYPE_CHECKING:
    from reaqtive.fluent.query import Query

if TYPE_CHECKING:  # the operator modules, typed; at run time each is imported on first use
    from reaqtive.operators import buffer
else:
    buffer = LazyModule("buffer")

__all__ = ["BufferMixin"]

T = TypeVar("T")


class BufferMixin(Fluent[T], Generic[T]):
    """The buffers family of fluent methods (see :mod:`reaqtive.fluent`)."""

    __slots__ = ()

    @overload
    def buffer(self, count: int, skip: int | None = None, /) -> Query[list[T]]: ...

    @overload
    def buffer(self, duration: timedelta, shift: timedelta | None = None, /) -> Query[list[T]]: ...

    @overload
    def buffer(self, duration: timedelta, count: int, /) -> Query[list[T]]: ...

    def buffer(self, first: int | timedelta, second: int | timedelta | None = None, /) -> Query[list[T]]:
        return self.pipe(buffer.buffer(first, second))
