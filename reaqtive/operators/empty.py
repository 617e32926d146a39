"""``empty``: a source that completes without emitting anything."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.operator import Version
from reaqtive.operators._source import TERMINATED, PullSource
from reaqtive.scheduler_interface import YieldToken
from reaqtive.streams import Subscriber

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["Empty"]

T = TypeVar("T")


@register_operator("empty")
class Empty(PullSource[Any]):
    """The running source of ``Query.empty``: completes at once (no demand needed, rule 1.2).

    State: none beyond the base (a completed source is restored as disposed). Hosted, the completion goes out
    on the scheduler (one tick after the start under the test scheduler); standalone, inside ``start``.
    """

    name = "reaqtive:empty"
    version: Version = (1,)

    __slots__ = ()

    def __init__(self, query: Query[Any], downstream: Subscriber[Any]) -> None:
        arguments(query)  # none
        super().__init__(downstream)

    def emit(self, demand: int, token: YieldToken) -> int:
        self._signal_complete()
        return TERMINATED
