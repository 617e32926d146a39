"""``return_value``: a source of exactly one element."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import ArgsRecord
from reaqtive.core.binding import register_operator
from reaqtive.core.expression import Expression, source_node
from reaqtive.core.operator import Version
from reaqtive.core.scheduler_interface import YieldToken
from reaqtive.core.streams import Subscriber
from reaqtive.operators._source import TERMINATED, PullSource

__all__ = ["ReturnValue", "ReturnValueArgs", "return_value"]

T = TypeVar("T")
R = TypeVar("R")


def return_value(value: R) -> Expression[R]:
    """A source of exactly one element, ``value``, then completion.

    >>> Query.return_value(42).run(print)  # doctest: +ELLIPSIS
    42
    <...>

    ``None`` is never an element (``TypeError``).

    **State.** None: the element and the completion go out together, and the disposed flag that follows records
    that they did.

    **Demand.** The element waits for a ``request``; completion follows it at once. Hosted on a scheduler it
    goes out there (one tick after the request under the test scheduler, or after the start when the subscriber
    asked in ``on_subscribe``); standalone, inside ``start`` or ``request``.

    Reaqtive: Return.
    """
    if value is None:
        raise TypeError("return_value: value must not be None (None is never a stream element)")
    return source_node("return_value", (value,))


class ReturnValueArgs(ArgsRecord, value="element"):
    """The arguments of a ``return_value`` node: ``(value,)``."""


@register_operator("return_value", builder=return_value, args=ReturnValueArgs)
class ReturnValue(PullSource[T], Generic[T]):
    """The running source of :func:`return_value`; it does not drain at the start, as its completion follows the
    value, which waits for demand."""

    name = "reaqtive:return_value"
    version: Version = (1,)

    __slots__ = ("_value",)

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        self._value: T = ReturnValueArgs.read(query).value

    def drain_on_start(self) -> bool:
        return False  # the completion follows the value, which waits for demand

    def emit(self, demand: int, token: YieldToken) -> int:
        if not demand:
            return 0
        self._downstream.on_next(self._value)
        self._signal_complete()
        return TERMINATED
