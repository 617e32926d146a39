"""``throw``: a source that fails at once with a given error."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.operator import Version
from reaqtive.operators._source import TERMINATED, PullSource
from reaqtive.scheduler_interface import YieldToken
from reaqtive.streams import Subscriber

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["Throw"]


@register_operator("throw")
class Throw(PullSource[Any]):
    """The running source of ``Query.throw``: signals ``on_error(error)`` at once (no demand needed, rule 1.4).

    State: none beyond the base (a failed source is restored as disposed). Hosted, the error goes out on the
    scheduler (one tick after the start under the test scheduler); standalone, inside ``start``.
    """

    name = "reaqtive:throw"
    version: Version = (1,)

    __slots__ = ("_error",)

    def __init__(self, query: Query[Any], downstream: Subscriber[Any]) -> None:
        super().__init__(downstream)
        self._error = arguments(query, "error").instance(0, BaseException, "an exception instance")

    def emit(self, demand: int, token: YieldToken) -> int:
        self._signal_error(self._error)
        return TERMINATED
