"""Recorded notifications and subscription logs, with the ReactiveTest-style helpers tests are written in.

>>> on_next(210, 1), on_completed(300), subscribe(200, 300)
(OnNext(1)@210, OnCompleted()@300, Subscribe(200, 300))

Expected values may be predicates: ``on_next(210, lambda x: x > 0)`` equals any ``on_next(210, v)`` with
``v > 0``, and ``on_error(300, ValueError)`` equals any ``ValueError`` at 300. An exception *instance* matches an
error of the same type with the same ``args`` (so ``on_error(300, ValueError("boom"))`` works without keeping
the very object the operator raised).
"""

from __future__ import annotations

import enum
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from reaqtive.core.streams import Subscriber

__all__ = [
    "CREATED",
    "DISPOSED",
    "INFINITE",
    "SUBSCRIBED",
    "Notification",
    "NotificationKind",
    "OnCompleted",
    "OnError",
    "OnErrorMatching",
    "OnNext",
    "OnNextMatching",
    "Recorded",
    "SubscriptionLog",
    "on_completed",
    "on_error",
    "on_next",
    "subscribe",
]

T = TypeVar("T")
V = TypeVar("V")

CREATED: Final = 100
"""Default virtual time at which :meth:`TestScheduler.start` creates the query."""
SUBSCRIBED: Final = 200
"""Default virtual time at which :meth:`TestScheduler.start` subscribes and starts it."""
DISPOSED: Final = 1000
"""Default virtual time at which :meth:`TestScheduler.start` disposes the subscription."""
INFINITE: Final = sys.maxsize
"""The unsubscribe time of a subscription that was never disposed."""


class NotificationKind(enum.Enum):
    """Which signal a notification stands for."""

    ON_NEXT = "N"
    ON_ERROR = "E"
    ON_COMPLETED = "C"


class Notification(ABC, Generic[T]):
    """One materialized signal: ``on_next(value)``, ``on_error(error)`` or ``on_complete()``."""

    __slots__ = ()

    @property
    @abstractmethod
    def kind(self) -> NotificationKind:
        """Which signal."""

    @abstractmethod
    def accept(self, subscriber: Subscriber[T]) -> None:
        """Deliver this signal to ``subscriber``."""

    @staticmethod
    def create_on_next(value: V) -> OnNext[V]:
        """An ``on_next(value)`` notification."""
        return OnNext(value)

    @staticmethod
    def create_on_error(error: BaseException) -> OnError:
        """An ``on_error(error)`` notification."""
        return OnError(error)

    @staticmethod
    def create_on_completed() -> OnCompleted:
        """An ``on_complete()`` notification."""
        return OnCompleted()


class OnNext(Notification[T]):
    """``on_next(value)``; equal to another ``OnNext`` with an equal value."""

    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value

    @property
    def kind(self) -> NotificationKind:
        return NotificationKind.ON_NEXT

    def accept(self, subscriber: Subscriber[T]) -> None:
        subscriber.on_next(self.value)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, OnNext):
            return bool(self.value == other.value)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((NotificationKind.ON_NEXT, self.value))

    def __repr__(self) -> str:
        return f"OnNext({self.value!r})"


class OnError(Notification[Any]):
    """``on_error(error)``; equal to another ``OnError`` whose error has the same type and ``args``."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        if not isinstance(error, BaseException):
            raise TypeError(f"OnError needs an exception, got {type(error).__name__}")
        self.error = error

    @property
    def kind(self) -> NotificationKind:
        return NotificationKind.ON_ERROR

    def accept(self, subscriber: Subscriber[Any]) -> None:
        subscriber.on_error(self.error)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, OnError):
            mine, theirs = self.error, other.error
            return mine is theirs or (type(mine) is type(theirs) and mine.args == theirs.args)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((NotificationKind.ON_ERROR, type(self.error)))

    def __repr__(self) -> str:
        return f"OnError({self.error!r})"


class OnCompleted(Notification[Any]):
    """``on_complete()``; all completions are equal."""

    __slots__ = ()

    @property
    def kind(self) -> NotificationKind:
        return NotificationKind.ON_COMPLETED

    def accept(self, subscriber: Subscriber[Any]) -> None:
        subscriber.on_complete()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, OnCompleted):
            return True
        return NotImplemented

    def __hash__(self) -> int:
        return hash(NotificationKind.ON_COMPLETED)

    def __repr__(self) -> str:
        return "OnCompleted()"


class OnNextMatching(Notification[T]):
    """An expected ``on_next`` whose value satisfies ``predicate`` (compares from either side)."""

    __slots__ = ("predicate",)

    def __init__(self, predicate: Callable[[T], object]) -> None:
        self.predicate = predicate

    @property
    def kind(self) -> NotificationKind:
        return NotificationKind.ON_NEXT

    def accept(self, subscriber: Subscriber[T]) -> None:
        raise TypeError("an expected notification (a predicate) cannot be delivered")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, OnNext):
            return bool(self.predicate(other.value))
        return other is self

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"OnNext(<{getattr(self.predicate, '__qualname__', 'predicate')}>)"


class OnErrorMatching(Notification[Any]):
    """An expected ``on_error`` whose error satisfies ``predicate`` (compares from either side)."""

    __slots__ = ("predicate",)

    def __init__(self, predicate: Callable[[BaseException], object]) -> None:
        self.predicate = predicate

    @property
    def kind(self) -> NotificationKind:
        return NotificationKind.ON_ERROR

    def accept(self, subscriber: Subscriber[Any]) -> None:
        raise TypeError("an expected notification (a predicate) cannot be delivered")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, OnError):
            return bool(self.predicate(other.error))
        return other is self

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"OnError(<{getattr(self.predicate, '__qualname__', 'predicate')}>)"


@dataclass(frozen=True, slots=True)
class Recorded(Generic[T]):
    """A value (usually a :class:`Notification`) at a virtual time in ticks; shown as ``value@time``."""

    time: int
    value: T

    def __repr__(self) -> str:
        return f"{self.value!r}@{self.time}"


@dataclass(frozen=True, slots=True)
class SubscriptionLog:
    """When a test source was subscribed and unsubscribed, in ticks (:data:`INFINITE`: still subscribed)."""

    subscribe: int
    unsubscribe: int = INFINITE

    def __repr__(self) -> str:
        end = "Infinite" if self.unsubscribe == INFINITE else str(self.unsubscribe)
        return f"Subscribe({self.subscribe}, {end})"


def on_next(time: int, value: Any) -> Recorded[Notification[Any]]:
    """``on_next(value)`` at ``time``; a function (not a class) is a predicate on the value."""
    if callable(value) and not isinstance(value, type):
        return Recorded(time, OnNextMatching(value))
    return Recorded(time, OnNext(value))


def on_completed(time: int) -> Recorded[Notification[Any]]:
    """``on_complete()`` at ``time``."""
    return Recorded(time, OnCompleted())


ErrorSpec = BaseException | type[BaseException] | Callable[[BaseException], object]
"""What ``on_error`` accepts: an exception, an exception type, or a predicate on the exception."""


def on_error(time: int, error: ErrorSpec) -> Recorded[Notification[Any]]:
    """``on_error`` at ``time``: an exception (same type and args match), an exception type (any instance
    matches), or a predicate on the exception."""
    if isinstance(error, BaseException):
        return Recorded(time, OnError(error))
    if isinstance(error, type) and issubclass(error, BaseException):
        kind = error
        return Recorded(time, OnErrorMatching(lambda e: isinstance(e, kind)))
    if callable(error):
        return Recorded(time, OnErrorMatching(error))
    raise TypeError(f"on_error needs an exception, an exception type or a predicate, got {type(error).__name__}")


def subscribe(start: int, end: int = INFINITE) -> SubscriptionLog:
    """The expected subscription log entry ``(start, end)``."""
    return SubscriptionLog(start, end)
