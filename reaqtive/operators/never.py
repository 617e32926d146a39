"""``never``: a source that never signals anything after ``on_subscribe``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.operator import Version
from reaqtive.operators._source import PullSource
from reaqtive.scheduler_interface import YieldToken
from reaqtive.streams import Subscriber

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["Never"]


@register_operator("never")
class Never(PullSource[Any]):
    """The running source of ``Query.never``: no element, no completion, ever; it ends only when disposed.

    State: none beyond the base. Demand is accepted and never used; a non-positive ``request`` still signals
    the rule 3.9 ``ValueError`` (through the pull-source drain, so on the scheduler when hosted).
    """

    name = "reaqtive:never"
    version: Version = (1,)

    __slots__ = ()

    def __init__(self, query: Query[Any], downstream: Subscriber[Any]) -> None:
        arguments(query)  # none
        super().__init__(downstream)

    def drain_on_start(self) -> bool:
        return False  # nothing to signal, ever

    def emit(self, demand: int, token: YieldToken) -> int:
        return 0
