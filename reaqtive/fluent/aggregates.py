"""Aggregates: ``aggregate``, ``count``, ``sum``, ``first``, ``to_list``, ..."""

from __future__ import annotations

from typing import Generic, TypeVar

__all__ = ["AggregateMixin"]

T = TypeVar("T")


class AggregateMixin(Generic[T]):
    """The aggregates family of fluent methods (see :mod:`reaqtive.fluent`)."""

    __slots__ = ()
