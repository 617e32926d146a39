"""``finally_action``: run an action exactly once when the subscription ends, however it ends."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.context import DEFAULT_LOGGER
from reaqtive.operator import Version
from reaqtive.scheduler import ActionTask
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive.streams import Subscriber
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["FinallyAction"]

T = TypeVar("T")


@register_operator("finally_action", frames=2)
class FinallyAction(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of ``Query.finally_action``: elements pass unchanged; ``action`` runs when the stage is
    disposed (after ``on_complete``/``on_error`` went downstream, or on cancel/dispose), exactly once.

    A node restored as disposed does not run the action again: it ran before that checkpoint was taken.

    The action's exception cannot go downstream (the subscription is over) and is not raised into the caller
    (``cancel`` returns normally, rule 3.15; a terminal signal must not throw back upstream, rule 2.13): with a
    scheduler it is raised in a task, so it reaches the scheduler's ``unhandled_exception`` chain (logged, and
    the query's scheduler faulted unless a handler handles it); standalone, it is logged on the context's logger.

    State: none beyond the base. Demand passes straight through.
    """

    name = "reaqtive:finally_action"
    version: Version = (1,)

    __slots__ = ("_action", "_source")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "action")
        self._source: Subscribable[T] = args.source(0)
        self._action: Callable[[], object] = args.function(1)

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
