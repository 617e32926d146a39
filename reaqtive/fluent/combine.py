"""Combining sources: ``merge``, ``combine_latest``."""

from __future__ import annotations

from typing import Generic, TypeVar

__all__ = ["CombineMixin"]

T = TypeVar("T")


class CombineMixin(Generic[T]):
    """The combine family of fluent methods (see :mod:`reaqtive.fluent`)."""

    __slots__ = ()
