"""Time and errors: ``delay_subscription``, ``sample``, ``retry``."""

from __future__ import annotations

from typing import Generic, TypeVar

__all__ = ["TimeMixin"]

T = TypeVar("T")


class TimeMixin(Generic[T]):
    """The time family of fluent methods (see :mod:`reaqtive.fluent`)."""

    __slots__ = ()
