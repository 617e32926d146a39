"""Take and skip: ``take``, ``skip``, ``take_while``, ``take_until``, ..."""

from __future__ import annotations

from typing import Generic, TypeVar

__all__ = ["TakeSkipMixin"]

T = TypeVar("T")


class TakeSkipMixin(Generic[T]):
    """The take skip family of fluent methods (see :mod:`reaqtive.fluent`)."""

    __slots__ = ()
