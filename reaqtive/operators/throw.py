"""``throw``: a source that fails at once with a given error."""

from __future__ import annotations

from typing import Any

from reaqtive.core.arguments import ArgsRecord
from reaqtive.core.binding import register_operator
from reaqtive.core.expression import Expression, source_node
from reaqtive.core.operator import Version
from reaqtive.core.scheduler_interface import YieldToken
from reaqtive.core.streams import Subscriber
from reaqtive.operators._source import TERMINATED, PullSource

__all__ = ["Throw", "ThrowArgs", "throw"]


def throw(error: BaseException) -> Expression[Any]:
    """A source that fails at once with ``error``.

    >>> Query.throw(ValueError("boom")).run(print, on_error=lambda e: print("error:", e))  # doctest: +ELLIPSIS
    error: boom
    <...>

    ``error`` is an exception instance. Hosted, it is signalled on the scheduler (one tick after the start under
    the test scheduler); standalone, inside ``start``.

    **State.** None (a failed source is restored as disposed).

    **Demand.** None needed (rule 1.4).

    Reaqtive: Throw.
    """
    if not isinstance(error, BaseException):
        raise TypeError(f"throw: error must be an exception instance, got {type(error).__name__}")
    return source_node("throw", (error,))


class ThrowArgs(ArgsRecord, error="exception"):
    """The arguments of a ``throw`` node: ``(error,)``."""


@register_operator("throw", builder=throw, args=ThrowArgs)
class Throw(PullSource[Any]):
    """The running source of :func:`throw`: its first drain signals the error."""

    name = "reaqtive:throw"
    version: Version = (1,)

    __slots__ = ("_error",)

    def __init__(self, query: Expression[Any], downstream: Subscriber[Any]) -> None:
        super().__init__(downstream)
        self._error = ThrowArgs.read(query).error

    def emit(self, demand: int, token: YieldToken) -> int:
        self._signal_error(self._error)
        return TERMINATED
