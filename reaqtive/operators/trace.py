"""``trace``: report every signal that crosses a point of the query, demand included (for debugging)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.operator import Version
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive.streams import Subscriber, Subscription
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["Trace"]

T = TypeVar("T")


@register_operator("trace")
class Trace(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of ``Query.trace``: passes everything through unchanged and reports each signal,
    including the ``request(n)`` coming up from downstream, as one line of text."""

    name = "reaqtive:trace"
    version: Version = (1,)

    __slots__ = ("_emit", "_label", "_source")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "label", "emit")
        self._source: Subscribable[T] = args.source(0)
        self._label = args.text(1)
        self._emit: Callable[[str], object] = args.function(2)

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
