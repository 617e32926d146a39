"""``empty``: a source that completes without emitting anything."""

from __future__ import annotations

from typing import Any, TypeVar

from reaqtive.core.arguments import ArgsRecord
from reaqtive.core.binding import register_operator
from reaqtive.core.expression import Expression, source_node
from reaqtive.core.operator import Version
from reaqtive.core.scheduler_interface import YieldToken
from reaqtive.core.streams import Subscriber
from reaqtive.operators._source import TERMINATED, PullSource

__all__ = ["Empty", "EmptyArgs", "empty"]

T = TypeVar("T")


def empty() -> Expression[Any]:
    """A source that completes at once, without elements.

    >>> Query.empty().run(print, on_complete=lambda: print("done"))  # doctest: +ELLIPSIS
    done
    <...>

    Hosted, it completes on the scheduler (one tick after the start under the test scheduler); standalone, inside
    ``start``.

    **State.** None (a completed source is restored as disposed).

    **Demand.** None needed (rule 1.2).

    Reaqtive: Empty.
    """
    return source_node("empty", ())


class EmptyArgs(ArgsRecord):
    """The arguments of an ``empty`` node: none."""


@register_operator("empty", builder=empty, args=EmptyArgs)
class Empty(PullSource[Any]):
    """The running source of :func:`empty`: its first drain completes."""

    name = "reaqtive:empty"
    version: Version = (1,)

    __slots__ = ()

    def __init__(self, query: Expression[Any], downstream: Subscriber[Any]) -> None:
        EmptyArgs.read(query)
        super().__init__(downstream)

    def emit(self, demand: int, token: YieldToken) -> int:
        self._signal_complete()
        return TERMINATED
