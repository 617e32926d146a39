"""Higher-order operators: ``flat_map``, ``switch_latest``, ``group_by``, ``window``, ``debounce``."""

from __future__ import annotations

from typing import Generic, TypeVar

__all__ = ["HigherOrderMixin"]

T = TypeVar("T")


class HigherOrderMixin(Generic[T]):
    """The higher order family of fluent methods (see :mod:`reaqtive.fluent`)."""

    __slots__ = ()
