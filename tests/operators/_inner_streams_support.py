"""Test helpers for operators that emit inner streams (``group_by``, ``window``): an outer observer that
subscribes to each inner stream while it is being emitted, as ``flat_map`` does, and records both levels."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reaqtive.core.subscribable import Subscribable
from reaqtive.fluent.query import GroupedStream, InnerStream
from reaqtive.testing import MockObserver, TestScheduler
from reaqtive.testing.notifications import Notification, OnCompleted, OnError, OnNext, Recorded


class InnerCollector(MockObserver[Any]):
    """Records the outer stream and, for each inner stream, subscribes a :class:`MockObserver` during
    ``on_next`` (``inner_request`` as in :class:`MockObserver`)."""

    __test__ = False

    def __init__(self, scheduler: TestScheduler, request: int | None = None, inner_request: int | None = None):
        super().__init__(scheduler, request=request)
        self.scheduler = scheduler
        self.inner_request = inner_request
        self.streams: list[InnerStream[Any]] = []
        self.inners: list[MockObserver[Any]] = []

    def on_next(self, value: Any) -> None:
        super().on_next(value)
        assert isinstance(value, InnerStream)
        observer = self.scheduler.create_observer(self.inner_request)
        self.streams.append(value)
        self.inners.append(observer)
        value.subscribe(observer)

    @property
    def outer(self) -> list[Recorded[Notification[Any]]]:
        """The outer messages, each stream shown as its key (groups) or its position (windows)."""
        result: list[Recorded[Notification[Any]]] = []
        position = 0
        for message in self.messages:
            notification = message.value
            if isinstance(notification, OnNext):
                stream = notification.value
                label = stream.key if isinstance(stream, GroupedStream) else position
                position += 1
                result.append(Recorded(message.time, OnNext(label)))
            else:
                result.append(message)
        return result

    def group(self, key: object) -> list[Recorded[Notification[Any]]]:
        """The messages of the (first) group with ``key``."""
        for stream, observer in zip(self.streams, self.inners, strict=True):
            if isinstance(stream, GroupedStream) and stream.key == key:
                return observer.messages
        raise AssertionError(f"no group {key!r}; groups: {[getattr(s, 'key', None) for s in self.streams]}")

    def windows(self) -> list[list[Recorded[Notification[Any]]]]:
        """The messages of every window, in order."""
        return [observer.messages for observer in self.inners]

    def window_values(self) -> list[list[Any]]:
        """The values of every window, with ``"|"`` for a completion and ``"!"`` for an error."""
        result = []
        for observer in self.inners:
            values: list[Any] = []
            for message in observer.messages:
                notification = message.value
                if isinstance(notification, OnNext):
                    values.append(notification.value)
                elif isinstance(notification, OnCompleted):
                    values.append("|")
                elif isinstance(notification, OnError):
                    values.append("!")
            result.append(values)
        return result


def run_inner(
    scheduler: TestScheduler,
    create: Callable[[], Subscribable[Any]],
    *,
    request: int | None = None,
    inner_request: int | None = None,
    **start: Any,
) -> InnerCollector:
    """``scheduler.start(create)`` with an :class:`InnerCollector` as the observer."""
    collector = InnerCollector(scheduler, request, inner_request)
    scheduler.start(create, observer=collector, **start)
    return collector
