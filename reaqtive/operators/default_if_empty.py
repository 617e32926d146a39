"""``default_if_empty``: pass the elements through, or a default value if there are none."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive.streams import Subscriber, non_positive_request_error
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["DefaultIfEmpty"]

T = TypeVar("T")


@register_operator("default_if_empty")
class DefaultIfEmpty(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of ``Query.default_if_empty``.

    Elements pass unchanged. If the upstream completes without any, the default value is emitted, then
    ``on_complete``; when the downstream has not requested anything yet, the default waits for its first
    ``request`` (one value held, never more).

    State: whether an element was seen; whether the upstream completed empty and the default still waits for
    demand (so a query recovered in that state emits it without its upstream). Demand passes straight through.
    """

    name = "reaqtive:default_if_empty"
    version: Version = (1,)

    __slots__ = ("_default", "_lock", "_not_empty", "_pending", "_requested", "_source")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "default")
        self._source: Subscribable[T] = args.source(0)
        self._default: T = args.element(1)  # type: ignore[assignment]
        self._not_empty = False
        self._pending = False
        self._requested = False  # the downstream requested something (guarded by _lock)
        self._lock = threading.Lock()

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._not_empty)
        writer.write(self._pending)

    def load_state_core(self, reader: StateReader) -> None:
        self._not_empty = reader.read_bool("not empty")
        self._pending = reader.read_bool("pending")
        if self._pending and self._not_empty:
            raise reader.invalid("pending", "False when an element was seen", self._pending)

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_start(self) -> None:
        if self._pending and not self._disposed:
            # Recovered after the upstream completed empty: only the default is left; the upstream is not needed.
            self._upstream_terminated()
            self.input.dispose()

    def request(self, n: int) -> None:
        if not self._requested:
            with self._lock:
                pending, self._pending = self._pending, False
                if n > 0:
                    self._requested = True
            if pending:
                if n > 0:
                    self._emit_default()
                else:
                    self._signal_error(non_positive_request_error(n))
                return
        super().request(n)

    def on_next(self, value: T) -> None:
        if not self._not_empty:
            self._not_empty = True
            self._state.changed = True
        self._downstream.on_next(value)

    def on_complete(self) -> None:
        self._upstream_terminated()
        if self._not_empty:
            self._signal_complete()
            return
        with self._lock:
            requested = self._requested
            if not requested:
                self._pending = True
        if requested:
            self._emit_default()
        else:
            self._state.changed = True

    def _emit_default(self) -> None:
        self._downstream.on_next(self._default)
        self._signal_complete()
