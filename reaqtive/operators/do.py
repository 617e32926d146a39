"""``do``: run side effects for the signals that pass, leaving them unchanged."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.operator import Version
from reaqtive.operators._fusion import FusedStep, fusible
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive.streams import Subscriber, require_not_none
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["Do"]

T = TypeVar("T")


def _ignore(value: object) -> None:
    """The side effect of a callback that was not given."""


@fusible("do", frames=2)
class Do(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of ``Query.do``: calls the side-effect callback first, then passes the signal on.

    A callback's exception ends the stage with ``on_error`` (for ``on_error``: the callback's exception replaces
    the upstream's error). State: none beyond the base. Demand passes straight through. Fuses with adjacent
    fusible stages (:mod:`reaqtive.operators._fusion`).
    """

    name = "reaqtive:do"
    version: Version = (1,)

    __slots__ = ("_on_complete", "_on_error", "_on_next", "_source")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "on_next", "on_error", "on_complete")
        self._source: Subscribable[T] = args.source(0)
        on_next = args.optional_function(1)
        self._on_error: Callable[[BaseException], object] | None = args.optional_function(2)
        self._on_complete: Callable[[], object] | None = args.optional_function(3)
        if on_next is None and self._on_error is None and self._on_complete is None:
            args.fail(1, "callable when on_error and on_complete are None (do needs at least one callback)")
        self._on_next: Callable[[T], object] = on_next if on_next is not None else _ignore

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_next(self, value: T) -> None:
        try:
            self._on_next(value)
        except Exception as error:
            self._signal_error(error)
            return
        self._downstream.on_next(value)

    fused_step = FusedStep(
        "_on_next",
        """
        try:
            {fn}({value})
        except Exception as error:
            {stage}._signal_error(error)
            {stop}
        """,
    )
    """:meth:`on_next` as a step of a fused run."""

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "error", "2.13")
        self._upstream_terminated()
        callback = self._on_error
        if callback is not None:
            try:
                callback(error)
            except Exception as callback_error:
                callback_error.__context__ = error
                error = callback_error
        self._signal_error(error)

    def on_complete(self) -> None:
        self._upstream_terminated()
        callback = self._on_complete
        if callback is not None:
            try:
                callback()
            except Exception as error:
                self._signal_error(error)
                return
        self._signal_complete()
