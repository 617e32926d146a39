"""``never``: a source that never signals anything after ``on_subscribe``."""

from __future__ import annotations

from typing import Any

from reaqtive.core.arguments import ArgsRecord
from reaqtive.core.binding import register_operator
from reaqtive.core.expression import Expression, source_node
from reaqtive.core.operator import Version
from reaqtive.core.scheduler_interface import YieldToken
from reaqtive.core.streams import Subscriber
from reaqtive.operators._source import PullSource

__all__ = ["Never", "NeverArgs", "never"]


def never() -> Expression[Any]:
    """A source that never signals anything: no element, no completion; it ends only when disposed.

    >>> handle = Query.never().run(print)   # nothing is printed, ever
    >>> handle.dispose()

    **State.** None.

    **Demand.** Accepted and never used (a non-positive ``request`` still signals the rule 3.9 ``ValueError``,
    through the pull-source drain, so on the scheduler when hosted).

    Reaqtive: Never.
    """
    return source_node("never", ())


class NeverArgs(ArgsRecord):
    """The arguments of a ``never`` node: none."""


@register_operator("never", builder=never, args=NeverArgs)
class Never(PullSource[Any]):
    """The running source of :func:`never`: a pull source whose drain has nothing to emit."""

    name = "reaqtive:never"
    version: Version = (1,)

    __slots__ = ()

    def __init__(self, query: Expression[Any], downstream: Subscriber[Any]) -> None:
        NeverArgs.read(query)
        super().__init__(downstream)

    def drain_on_start(self) -> bool:
        return False  # nothing to signal, ever

    def emit(self, demand: int, token: YieldToken) -> int:
        return 0
