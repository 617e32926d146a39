"""``trace``: report every signal that crosses a point of the query, demand included (for debugging)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import args_record, require_callable
from reaqtive.core.binding import register_operator
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import Version
from reaqtive.core.streams import Subscriber, Subscription
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.state import StatefulUnaryOperatorBase

__all__ = ["Trace", "TraceArgs", "trace"]

T = TypeVar("T")


def trace(label: str, emit: Callable[[str], object] = print) -> OperatorCall[Any]:
    """Report every signal crossing this point, including ``request(n)`` from downstream, as text lines
    ``"[label] on_next(3)"`` passed to ``emit`` (``print`` by default). Elements pass through unchanged.

    >>> from_iterable([7]).trace("src").run(lambda x: None)  # doctest: +ELLIPSIS
    [src] request(9223372036854775807)
    [src] on_subscribe
    [src] on_next(7)
    [src] on_complete
    <...>

    (The request comes first: stages start from the subscriber side, and demand waits for the upstream.)

    **State.** None beyond the base.

    **Demand.** Passed upstream unchanged.
    """
    if not isinstance(label, str):
        raise TypeError(f"trace: label must be a str, got {type(label).__name__}")
    require_callable(emit, "trace", "emit")
    return OperatorCall("trace", (label, emit))


TraceArgs = args_record("TraceArgs", source="source", label="text", emit="function")


@register_operator("trace", builder=trace, args=TraceArgs)
class Trace(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of :func:`trace`: each signal is reported before it is passed on, so the lines come
    in the order the signals cross this point."""

    name = "reaqtive:trace"
    version: Version = (1,)

    __slots__ = ("_emit", "_label", "_source")

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = TraceArgs.read(query)
        self._source: Subscribable[T] = args.source
        self._label = args.label
        self._emit = args.emit

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def _report(self, text: str) -> None:
        self._emit(f"[{self._label}] {text}")

    def on_subscribe(self, subscription: Subscription) -> None:
        self._report("on_subscribe")
        super().on_subscribe(subscription)

    def request(self, n: int) -> None:
        self._report(f"request({n})")
        super().request(n)

    def cancel(self) -> None:
        if not self._disposed:
            self._report("cancel")
        super().cancel()

    def on_next(self, value: T) -> None:
        self._report(f"on_next({value!r})")
        self._downstream.on_next(value)

    def on_error(self, error: BaseException) -> None:
        self._report(f"on_error({error!r})")
        super().on_error(error)

    def on_complete(self) -> None:
        self._report("on_complete")
        super().on_complete()
