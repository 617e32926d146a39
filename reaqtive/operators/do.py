"""``do``: run side effects for the signals that pass, leaving them unchanged."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import ArgsRecord, Arguments, require_callable
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import Version
from reaqtive.core.streams import Subscriber, require_not_none
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators._fusion import FusedStep, fusible
from reaqtive.operators.keyed_steps import NO_OUTPUTS, TemplateStep, register_keyed_step
from reaqtive.state import StatefulUnaryOperatorBase

__all__ = ["Do", "DoArgs", "do"]

T = TypeVar("T")


def do(
    on_next: Callable[[T], object] | Any = None,
    on_error: Callable[[BaseException], object] | None = None,
    on_complete: Callable[[], object] | None = None,
) -> OperatorCall[T]:
    """Run side effects for the signals passing this point; the signals pass unchanged.

    Give callbacks (any of ``on_next``, ``on_error``, ``on_complete``), or one observer: an object with
    ``on_next``, ``on_error`` and ``on_complete`` methods (an ``on_subscribe`` it may have is not called).

    >>> from_iterable([1, 2]).do(lambda x: print("saw", x)).run(lambda x: None)  # doctest: +ELLIPSIS
    saw 1
    saw 2
    <...>

    The callback runs first, then the signal goes downstream. An exception from a callback becomes
    ``on_error`` and ends the subscription; one from ``on_error`` replaces the upstream's error (as in Rx).
    Under a skip policy, an element whose ``on_next`` raised is dropped, and an ``on_complete`` that raised
    still completes (the error of ``on_error`` always ends the subscription: it is ending already).
    A callback not given does nothing (Reaqtive's default ``on_error`` also ignores the error).

    **State.** None beyond the base.

    **Demand.** Passed upstream unchanged.

    Reaqtive: Do.
    """
    if _is_observer(on_next):
        if on_error is not None or on_complete is not None:
            raise TypeError("do: give either an observer or callbacks, not both")
        observer: Any = on_next
        return OperatorCall("do", (observer.on_next, observer.on_error, observer.on_complete))
    _require_optional_callable(on_next, "on_next")
    _require_optional_callable(on_error, "on_error")
    _require_optional_callable(on_complete, "on_complete")
    if on_next is None and on_error is None and on_complete is None:
        raise TypeError("do: give at least one callback (on_next, on_error, on_complete) or an observer")
    return OperatorCall("do", (on_next, on_error, on_complete))


def _require_optional_callable(value: object, name: str) -> None:
    if value is not None:
        require_callable(value, "do", name)


def _is_observer(value: object) -> bool:
    return all(callable(getattr(value, method, None)) for method in ("on_next", "on_error", "on_complete"))


class DoArgs(ArgsRecord, source="source", on_next="optional_function", on_error="optional_function",
             on_complete="optional_function"):
    """The arguments of a ``do`` node: ``(source, on_next, on_error, on_complete)``, at least one callback."""

    def validate(self, args: Arguments) -> None:
        if self.on_next is None and self.on_error is None and self.on_complete is None:
            args.fail(1, "callable when on_error and on_complete are None (do needs at least one callback)")


def _ignore(value: object) -> None:
    """The side effect of a callback that was not given."""


@fusible("do", frames=2, builder=do, args=DoArgs)
class Do(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of :func:`do`: an ``on_next`` not given is a function that does nothing, so that the
    element path (and the fused step) needs no test. Fuses with adjacent fusible stages
    (:mod:`reaqtive.operators._fusion`)."""

    timeless = True
    name = "reaqtive:do"
    version: Version = (1,)

    __slots__ = ("_on_complete", "_on_error", "_on_next", "_source")

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = DoArgs.read(query)
        self._source: Subscribable[T] = args.source
        self._on_error = args.on_error
        self._on_complete = args.on_complete
        self._on_next: Callable[[T], object] = args.on_next if args.on_next is not None else _ignore

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    fused_step = FusedStep(
        "_on_next",
        """
        try:
            {fn}({value})
        except Exception as error:
            {stage}._user_error(error, {value})
            {stop}
        """,
    )
    """The per-element logic: the stage's ``on_next``, its fused step and its keyed step are compiled from it."""

    on_next = fused_step.stage_on_next()

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "error", "2.13")
        self._upstream_terminated()
        callback = self._on_error
        if callback is not None:
            try:
                callback(error)
            except Exception as callback_error:  # (no error policy: the subscription ends with an error anyway)
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
                if not self._user_error(error):  # skipped: the completion goes on
                    return
        self._signal_complete()


class DoStep(TemplateStep):
    """:class:`Do` without ``on_error`` for one key of a keyed chain, from its template: ``on_complete`` runs
    when the key's chain completes (its input completed), not when a later operator ended it."""

    __slots__ = ("_on_complete",)

    next = Do.fused_step.keyed_next()

    def __init__(self, on_next: Callable[[Any], object], on_complete: Callable[[], object] | None) -> None:
        super().__init__(on_next)
        self._on_complete = on_complete

    def complete(self, state: Any) -> tuple[Any, ...]:
        if self._on_complete is not None:
            self._on_complete()
        return NO_OUTPUTS


@register_keyed_step("do")
def do_step(query: Expression[Any]) -> DoStep | None:
    """The keyed step of a ``do`` node; ``None`` (the general path) with an ``on_error`` callback: keyed, an
    error ends the whole result at once, and no key's chain sees it."""
    args = DoArgs.read(query)
    if args.on_error is not None:
        return None
    return DoStep(args.on_next if args.on_next is not None else _ignore, args.on_complete)
