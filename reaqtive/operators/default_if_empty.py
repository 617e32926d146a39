"""``default_if_empty``: pass the elements through, or a default value if there are none."""

from __future__ import annotations

import threading
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import args_record
from reaqtive.core.binding import register_operator
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.streams import Subscriber, non_positive_request_error
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators.keyed_steps import KeyedStep, is_immutable_value, register_keyed_step
from reaqtive.state import StatefulUnaryOperatorBase

__all__ = ["DefaultIfEmpty", "DefaultIfEmptyArgs", "default_if_empty"]

T = TypeVar("T")


def default_if_empty(default_value: T) -> OperatorCall[T]:
    """Pass the elements through; if the source completes without any, emit ``default_value``, then
    complete.

    >>> from_iterable([]).default_if_empty(0).run(print)  # doctest: +ELLIPSIS
    0
    <...>

    ``default_value`` is required and must not be ``None`` (``None`` is never an element; Reaqtive's
    one-argument overload emits ``default(T)``, which has no Python equivalent).

    **State.** Whether an element was seen, and whether the upstream completed empty and the default still waits
    for demand (so a query recovered in that state emits it without its upstream).

    **Demand.** Passed upstream unchanged; a default with no demand yet waits for the first ``request`` (one
    value held, never more).

    Reaqtive: DefaultIfEmpty.
    """
    if default_value is None:
        raise TypeError("default_if_empty: default_value must not be None (None is never an element)")
    return OperatorCall("default_if_empty", (default_value,))


DefaultIfEmptyArgs = args_record("DefaultIfEmptyArgs", source="source", default="element")


@register_operator("default_if_empty", builder=default_if_empty, args=DefaultIfEmptyArgs)
class DefaultIfEmpty(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of :func:`default_if_empty`: ``_lock`` serializes the first ``request`` with an empty
    completion, so that the default is emitted exactly once, by whichever of the two comes second."""

    name = "reaqtive:default_if_empty"
    version: Version = (1,)
    state_fields = ("not_empty", "pending")

    __slots__ = ("_default", "_lock", "_not_empty", "_pending", "_requested", "_source")

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = DefaultIfEmptyArgs.read(query)
        self._source: Subscribable[T] = args.source
        self._default: T = args.default
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


class DefaultIfEmptyStep(KeyedStep):
    """:class:`DefaultIfEmpty` for one key of a keyed chain: the field is whether an element was seen."""

    __slots__ = ("_default",)

    initial = False

    def __init__(self, default: object) -> None:
        self._default = default

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        return True, value

    def complete(self, state: Any) -> tuple[Any, ...]:
        return () if state else (self._default,)

    def check(self, state: Any) -> bool:
        return type(state) is bool


@register_keyed_step("default_if_empty")
def default_if_empty_step(query: Expression[Any]) -> DefaultIfEmptyStep | None:
    """The keyed step of a ``default_if_empty`` node; ``None`` (the general path) for a default every group must
    own (mutable: the general path makes one per group)."""
    default = DefaultIfEmptyArgs.read(query).default
    return DefaultIfEmptyStep(default) if is_immutable_value(default) else None
