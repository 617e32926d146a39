"""``return_value``: a source of exactly one element."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.operator import Version
from reaqtive.operators._source import TERMINATED, PullSource
from reaqtive.scheduler_interface import YieldToken
from reaqtive.streams import Subscriber

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["ReturnValue"]

T = TypeVar("T")


@register_operator("return_value")
class ReturnValue(PullSource[T], Generic[T]):
    """The running source of ``Query.return_value``: emits its value once there is demand, then completes.

    State: none beyond the base. The element and the completion go out together, and the disposed flag that
    follows records that they did; before that there is nothing to remember.

    Demand: the element waits for ``request``; hosted, it goes out on the scheduler (one tick after the request
    under the test scheduler, or after the start when the subscriber asked in ``on_subscribe``), standalone
    inside ``start``/``request``.
    """

    name = "reaqtive:return_value"
    version: Version = (1,)

    __slots__ = ("_value",)

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        self._value: T = arguments(query, "value").element(0)  # type: ignore[assignment]

    def drain_on_start(self) -> bool:
        return False  # the completion follows the value, which waits for demand

    def emit(self, demand: int, token: YieldToken) -> int:
        if not demand:
            return 0
        self._downstream.on_next(self._value)
        self._signal_complete()
        return TERMINATED
