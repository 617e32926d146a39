"""``ignore_elements``: drop every element, keep only the terminal signal."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.operator import Version
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive.streams import LONG_MAX, Subscriber, Subscription
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["IgnoreElements"]

T = TypeVar("T")


@register_operator("ignore_elements", frames=2)
class IgnoreElements(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of ``Query.ignore_elements``: drops every element, forwards ``on_complete`` and
    ``on_error``.

    Demand: it never emits an element, so downstream demand does not limit anything: it requests ``LONG_MAX``
    upstream as soon as the upstream subscribes (the fast path, nothing held), whether or not the downstream has
    requested. A downstream ``request(n <= 0)`` goes upstream, which signals the rule 3.9 error.

    State: none beyond the base.
    """

    name = "reaqtive:ignore_elements"
    version: Version = (1,)

    __slots__ = ("_source",)

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        self._source: Subscribable[T] = arguments(query, "source").source(0)

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_subscribe(self, subscription: Subscription) -> None:
        super().on_subscribe(subscription)
        if self._upstream is subscription:
            subscription.request(LONG_MAX)

    def request(self, n: int) -> None:
        if n <= 0:
            super().request(n)  # the upstream signals the rule 3.9 error, serialized with its other signals

    def on_next(self, value: T) -> None:
        pass
