"""``do``, ``finally_action`` and ``trace``: side effects that leave the signals passing unchanged (callbacks, an
action at the end, a report for debugging)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import ArgsRecord, Arguments, args_record, require_callable
from reaqtive.core.binding import register_operator
from reaqtive.core.context import DEFAULT_LOGGER
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import Version
from reaqtive.core.streams import Subscriber, Subscription, require_not_none
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators._fusion import FusedStep, fusible
from reaqtive.operators.keyed_steps import NO_OUTPUTS, TemplateStep, register_keyed_step
from reaqtive.scheduler import ActionTask
from reaqtive.state import StatefulUnaryOperatorBase

__all__ = ["Do", "DoArgs", "FinallyAction", "FinallyActionArgs", "Trace", "TraceArgs", "do", "finally_action", "trace"]

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


def trace(label: str, emit: Callable[[str], object] = print) -> OperatorCall[Any]:
    """Report every signal crossing this point, including ``request(n)`` from downstream, as text lines
    ``"[label] on_next(3)"`` passed to ``emit`` (``print`` by default). Elements pass through unchanged.

    >>> from_iterable([7]).trace("src").run(lambda x: None)  # doctest: +ELLIPSIS
    [src] request(9223372036854775807)
    [src] on_subscribe
    [src] on_next(7)
    [src] on_complete
    <...>

    (The request comes first: stages start from the subscriber side, and demand waits for the upstream.)

    **State.** None beyond the base.

    **Demand.** Passed upstream unchanged.
    """
    if not isinstance(label, str):
        raise TypeError(f"trace: label must be a str, got {type(label).__name__}")
    require_callable(emit, "trace", "emit")
    return OperatorCall("trace", (label, emit))


TraceArgs = args_record("TraceArgs", source="source", label="text", emit="function")


@register_operator("trace", builder=trace, args=TraceArgs)
class Trace(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of :func:`trace`: each signal is reported before it is passed on, so the lines come
    in the order the signals cross this point."""

    name = "reaqtive:trace"
    version: Version = (1,)

    __slots__ = ("_emit", "_label", "_source")

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = TraceArgs.read(query)
        self._source: Subscribable[T] = args.source
        self._label = args.label
        self._emit = args.emit

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def _report(self, text: str) -> None:
        self._emit(f"[{self._label}] {text}")

    def on_subscribe(self, subscription: Subscription) -> None:
        self._report("on_subscribe")
        super().on_subscribe(subscription)

    def request(self, n: int) -> None:
        self._report(f"request({n})")
        super().request(n)

    def cancel(self) -> None:
        if not self._disposed:
            self._report("cancel")
        super().cancel()

    def on_next(self, value: T) -> None:
        self._report(f"on_next({value!r})")
        self._downstream.on_next(value)

    def on_error(self, error: BaseException) -> None:
        self._report(f"on_error({error!r})")
        super().on_error(error)

    def on_complete(self) -> None:
        self._report("on_complete")
        super().on_complete()
