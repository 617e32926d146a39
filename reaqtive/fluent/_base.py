"""What the fluent mixins share: building a node, and argument checks with clear messages."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = [
    "derive",
    "new_query",
    "require_callable",
    "require_duration",
    "require_int",
    "require_non_negative_int",
    "require_positive_duration",
    "require_positive_int",
    "require_time",
]


def new_query(op: str, args: tuple[object, ...]) -> Query[Any]:
    """A query node ``op(*args)``."""
    from reaqtive.query import Query  # the mixins are Query's bases, so Query is imported late

    return Query(op, args)


def derive(source: object, op: str, *args: object) -> Query[Any]:
    """A query node ``op(source, *args)``: the usual shape of a fluent method's result."""
    return new_query(op, (source, *args))


def require_callable(value: object, op: str, name: str) -> None:
    """Raise :class:`TypeError` unless ``value`` is callable."""
    if not callable(value):
        raise TypeError(f"{op}: {name} must be callable, got {type(value).__name__}")


def require_int(value: object, op: str, name: str) -> int:
    """Return ``value`` if it is an ``int`` (not a ``bool``), else raise :class:`TypeError`."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{op}: {name} must be an int, got {type(value).__name__}")
    return value


def require_non_negative_int(value: object, op: str, name: str) -> int:
    """Return ``value`` if it is an ``int >= 0``; raise :class:`TypeError` / :class:`ValueError` otherwise."""
    number = require_int(value, op, name)
    if number < 0:
        raise ValueError(f"{op}: {name} must be >= 0, got {number}")
    return number


def require_positive_int(value: object, op: str, name: str) -> int:
    """Return ``value`` if it is an ``int > 0``; raise :class:`TypeError` / :class:`ValueError` otherwise."""
    number = require_int(value, op, name)
    if number <= 0:
        raise ValueError(f"{op}: {name} must be > 0, got {number}")
    return number


def require_duration(value: object, op: str, name: str) -> timedelta:
    """Return ``value`` if it is a :class:`~datetime.timedelta`, else raise :class:`TypeError`."""
    if not isinstance(value, timedelta):
        raise TypeError(f"{op}: {name} must be a timedelta, got {type(value).__name__}")
    return value


def require_positive_duration(value: object, op: str, name: str) -> timedelta:
    """Return ``value`` if it is a positive :class:`~datetime.timedelta`."""
    duration = require_duration(value, op, name)
    if duration <= timedelta(0):
        raise ValueError(f"{op}: {name} must be positive, got {duration}")
    return duration


def require_time(value: object, op: str, name: str) -> datetime:
    """Return ``value`` if it is an aware :class:`~datetime.datetime` (all times are aware, UTC-comparable)."""
    if not isinstance(value, datetime):
        raise TypeError(f"{op}: {name} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{op}: {name} must be timezone-aware (e.g. datetime.now(timezone.utc)), got {value}")
    return value
