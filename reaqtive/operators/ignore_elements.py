"""``ignore_elements``: drop every element, keep only the terminal signal."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import args_record
from reaqtive.core.binding import register_operator
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import Version
from reaqtive.core.streams import LONG_MAX, Subscriber, Subscription
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators.keyed_steps import SKIP, StatelessStep, register_keyed_step
from reaqtive.state import StatefulUnaryOperatorBase

__all__ = ["IgnoreElements", "IgnoreElementsArgs", "ignore_elements"]

T = TypeVar("T")


def ignore_elements() -> OperatorCall[Any]:
    """Drop every element; only ``on_complete`` or ``on_error`` pass.

    >>> from_iterable([1, 2]).ignore_elements().run(print, on_complete=lambda: print("done"))  # doctest: +ELLIPSIS
    done
    <...>

    **State.** None beyond the base.

    **Demand.** It never emits an element, so downstream demand limits nothing: it requests everything upstream
    (``LONG_MAX``) as soon as the upstream subscribes, whatever the downstream requested; nothing is held. A
    downstream ``request(n <= 0)`` goes upstream, which signals the rule 3.9 error.

    Reaqtive: IgnoreElements.
    """
    return OperatorCall("ignore_elements")


IgnoreElementsArgs = args_record("IgnoreElementsArgs", source="source")


@register_operator("ignore_elements", frames=2, builder=ignore_elements, args=IgnoreElementsArgs)
class IgnoreElements(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of :func:`ignore_elements`: unbounded demand is the upstream's fast path, and the
    rule 3.9 error for a bad request is the upstream's to signal, serialized with its other signals."""

    name = "reaqtive:ignore_elements"
    version: Version = (1,)

    __slots__ = ("_source",)

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        self._source: Subscribable[T] = IgnoreElementsArgs.read(query).source

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


class IgnoreElementsStep(StatelessStep):
    """:class:`IgnoreElements` for one key of a keyed chain."""

    __slots__ = ()

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        return None, SKIP


@register_keyed_step("ignore_elements")
def ignore_elements_step(query: Expression[Any]) -> IgnoreElementsStep:
    """The keyed step of an ``ignore_elements`` node."""
    IgnoreElementsArgs.read(query)  # (checks the node as the stage does)
    return IgnoreElementsStep()
