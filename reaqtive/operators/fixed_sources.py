"""Sources whose whole output is fixed by their arguments: ``empty``, ``never``, ``return_value`` and ``throw``."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import args_record
from reaqtive.core.binding import register_operator
from reaqtive.core.expression import Expression, source_node
from reaqtive.core.operator import Version
from reaqtive.core.scheduler_interface import YieldToken
from reaqtive.core.streams import Subscriber
from reaqtive.operators._source import TERMINATED, PullSource

__all__ = [
    "Empty", "EmptyArgs", "Never", "NeverArgs", "ReturnValue", "ReturnValueArgs", "Throw", "ThrowArgs", "empty",
    "never", "return_value", "throw",
]

T = TypeVar("T")
R = TypeVar("R")


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


EmptyArgs = args_record("EmptyArgs")


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


NeverArgs = args_record("NeverArgs")


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


ReturnValueArgs = args_record("ReturnValueArgs", value="element")


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


ThrowArgs = args_record("ThrowArgs", error="exception")


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
