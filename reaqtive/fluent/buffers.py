"""Buffers: ``buffer`` by count, count and skip, duration, duration and shift, duration or count."""

from __future__ import annotations

from typing import Generic, TypeVar

__all__ = ["BufferMixin"]

T = TypeVar("T")


class BufferMixin(Generic[T]):
    """The buffers family of fluent methods (see :mod:`reaqtive.fluent`)."""

    __slots__ = ()
