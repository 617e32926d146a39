"""``finally_action``: run an action exactly once when the subscription ends, however it ends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import args_record, require_callable
from reaqtive.core.binding import register_operator
from reaqtive.core.context import DEFAULT_LOGGER
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import Version
from reaqtive.core.streams import Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.scheduler import ActionTask
from reaqtive.state import StatefulUnaryOperatorBase

__all__ = ["FinallyAction", "FinallyActionArgs", "finally_action"]

T = TypeVar("T")


def finally_action(action: Callable[[], object]) -> OperatorCall[Any]:
    """Run ``action()`` exactly once when the subscription ends: after ``on_complete`` or ``on_error`` went
    downstream, or when it is cancelled or disposed.

    >>> from_iterable([1]).finally_action(lambda: print("done")).run(print)  # doctest: +ELLIPSIS
    1
    done
    <...>

    A query recovered from a checkpoint taken after it ended does not run the action again. An exception
    from ``action`` cannot reach the (finished) downstream and ``cancel`` must return normally (rule 3.15; a
    terminal signal must not throw back upstream either, rule 2.13): with a scheduler it is raised in a task of
    the stage, so it goes to the scheduler's ``unhandled_exception`` chain (logged, and the query's scheduler
    faulted unless a handler handles it); standalone it is logged on the context's logger.

    **State.** None beyond the base.

    **Demand.** Passed upstream unchanged.

    Reaqtive: Finally.
    """
    require_callable(action, "finally_action", "action")
    return OperatorCall("finally_action", (action,))


FinallyActionArgs = args_record("FinallyActionArgs", source="source", action="function")


@register_operator("finally_action", frames=2, builder=finally_action, args=FinallyActionArgs)
class FinallyAction(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of :func:`finally_action`: the action runs in ``on_dispose``, which the base calls once
    however the subscription ends; a node restored as disposed skips it (it ran before that checkpoint)."""

    name = "reaqtive:finally_action"
    version: Version = (1,)

    __slots__ = ("_action", "_source")

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = FinallyActionArgs.read(query)
        self._source: Subscribable[T] = args.source
        self._action: Callable[[], object] = args.action

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_next(self, value: T) -> None:
        self._downstream.on_next(value)

    def on_dispose(self) -> None:
        if self._disposed_from_state:
            return
        try:
            self._action()
        except Exception as error:
            # Not the error policy's: the action runs once the subscription has ended, with no element to skip and
            # nothing left to stop or go on with. The error is reported to the host as it always was.
            self._report(error)

    def _report(self, error: Exception) -> None:
        context = self._context
        if context is not None and context.has_scheduler:
            context.scheduler.schedule(ActionTask(self._reraise, error))
            return
        logger = context.logger if context is not None else DEFAULT_LOGGER
        logger.error("finally_action: the action raised %r", error, exc_info=error)

    def _reraise(self, error: BaseException) -> None:
        raise error  # in a task of this stage, so a host knows whose error it is
