"""Keyed steps for windows inside groups: ``g.window(...).flat_map(lambda w: <chain over w>)``.

The Rx way of a per-key windowed aggregate, ``group_by(k).flat_map(lambda g: g.window(d).flat_map(lambda w:
w.aggregate(...)))``, is on the general path a group stage, a window stage per group, a ``flat_map`` per group
and a subscription tree per window. When the window's inner query is itself a chain of operators with keyed
steps (:func:`~reaqtive.operators.keyed_groups.chain_of`), the ``window`` and the ``flat_map`` over it are **one
step** of the keyed chain, whose field holds the open windows, each as the tuple of its inner chain's fields:

* ``window(count)`` / ``window(count, skip)``: :class:`WindowCountStep`, field ``(elements received, open
  windows oldest first)`` (the window numbers follow from the count, as in ``WindowCount``);
* ``window(duration)``: :class:`WindowTimeStep`, a :class:`~reaqtive.operators.keyed_timed.TimedStep`, field
  ``(the open window's end, a sequence number, its inner fields)``: Rx's alignment is kept, the key's first
  window opens with its group (at its first element) and the next one as soon as it closes; an idle key's
  window closes empty every ``duration`` (its inner query completes without elements, as on the general path:
  ``count()`` gives 0, ``average()`` fails the query).

An empty window's inner fields are the inner chain's initial tuple, shared by every key (a window costs nothing
until an element comes). An element goes into every open window, oldest first, each window's results leave in
order, then the window the element filled closes (its inner query completes) and the next opens: the order of
the general path with unbounded demand. A user error inside a window's inner query goes through the query's
error policy (asked through the stage, as for the chain's own steps): skipped, the element is dropped at that
inner step of that window; otherwise the query stops after the results produced before it.

``flat_map`` over something that is not a window, or with a ``result_selector`` or ``max_concurrent``, a window
selector that raises, reads another stream, or whose inner query is not a chain of keyed steps (or holds a
time-based one) keeps the general path, as do ``window(duration, shift)`` and ``window(duration, count)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from reaqtive.core.error_policy import NO_ELEMENT
from reaqtive.core.expression import Expression, is_expression, new_inner_stream
from reaqtive.core.streams import Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators.flat_map import FlatMapArgs
from reaqtive.operators.keyed_groups import chain_or_reason
from reaqtive.operators.keyed_steps import (
    DONE,
    SKIP,
    KeyedStep,
    Several,
    StepOperatorError,
    complete_steps,
    feed_steps,
    register_keyed_step,
)
from reaqtive.operators.keyed_timed import US, TimedStep
from reaqtive.operators.window import WindowArgs
from reaqtive.operators.window_time import WindowTimeArgs

__all__ = ["InnerChain", "WindowCountStep", "WindowTimeStep", "WindowTimeStep1", "window_flat_map_step"]

_NONE: Final[tuple[Any, ...]] = ()


class InnerChain:
    """The keyed steps of a window's inner query, run over a tuple of fields (``()`` once the chain ended: a
    window whose inner query completed early, ``w.first()``, drops its later elements). The rules are the
    stage's (:meth:`~reaqtive.operators.keyed_groups.KeyedGroups._feed`); results are appended to the caller's
    list, so that those produced before a failure are kept."""

    __slots__ = ("_skips", "_steps", "in_place", "initial", "names", "one")

    def __init__(self, steps: tuple[KeyedStep, ...], names: tuple[str, ...]) -> None:
        self._steps = steps
        self.names = names
        self.initial: tuple[Any, ...] = tuple(step.initial for step in steps) or (None,)
        self.in_place = any(step.in_place for step in steps)  # a field may change in place (see KeyedStep.in_place)
        # The step of a one-step chain: the inlined paths
        self.one = steps[0] if len(steps) == 1 and not steps[0].several else None
        self._skips: Any = None

    def attach(self, stage: Any) -> None:
        """The stage whose error policy decides the inner steps' user errors."""
        self._skips = stage._user_skips
        for step in self._steps:
            step.attach(stage)

    def set_context(self, context: Any) -> None:
        for step in self._steps:
            step.set_context(context)

    def _stop(self, error: Exception, value: Any) -> bool:
        """A step raised ``error`` on ``value``: ``True`` if the policy skips it; else raises what stops the
        query (a user error is wrapped, so that the stage does not ask the policy a second time)."""
        if isinstance(error, StepOperatorError):
            raise error
        skips = self._skips
        if skips is not None and skips(error, value):
            return True
        raise StepOperatorError(error) from error

    def feed(self, fields: tuple[Any, ...], value: Any, outputs: list[Any]) -> tuple[Any, ...]:
        """``value`` into a window whose inner fields are ``fields``: its new fields (``fields`` itself when
        nothing changed), its results appended to ``outputs``."""
        if not fields:
            return fields  # its inner query completed: the window's later elements are dropped
        step = self.one
        if step is not None:
            field = fields[0]
            try:
                state, output = step.next(field, value)
            except Exception as error:
                self._stop(error, value)
                return fields
            if state is DONE:
                if output is not SKIP:
                    outputs.append(output)
                return _NONE
            if output is not SKIP:
                outputs.append(output)
            return fields if state is field else (state,)
        work = list(fields)
        if self._run(work, 0, value, outputs):
            return _NONE
        return tuple(work)

    def complete(self, fields: tuple[Any, ...], outputs: list[Any]) -> None:
        """The window closed: its inner query completes, its final results appended to ``outputs``."""
        if not fields:
            return
        step = self.one
        if step is None:
            self._complete(list(fields), 0, outputs)
            return
        try:
            final = step.complete(fields[0])
        except Exception as error:
            self._stop(error, NO_ELEMENT)
            return  # skipped: no final results
        outputs.extend(final)
        if type(final) is Several and final.failure is not None:
            raise final.failure

    def _run(self, fields: list[Any], index: int, value: Any, outputs: list[Any]) -> bool:
        return feed_steps(self._steps, fields, index, value, outputs, skips=self._stop)

    def _complete(self, fields: list[Any], index: int, outputs: list[Any]) -> None:
        complete_steps(self._steps, fields, index, outputs, skips=self._stop)

    def check(self, fields: object) -> bool:
        """Whether ``fields``, read from a store, can be a window's inner fields."""
        if fields == ():
            return True
        if type(fields) is not tuple or len(fields) != len(self.initial):
            return False
        return all(step.check(field) for step, field in zip(self._steps, fields, strict=False))


def _result(outputs: list[Any]) -> Any:
    """A step's output for ``outputs``: ``SKIP``, the one value, or :class:`Several`."""
    if not outputs:
        return SKIP
    if len(outputs) == 1:
        return outputs[0]
    return Several(outputs)


class _WindowStep(KeyedStep):
    """What the window steps share: the inner chain, the error policy and context passed on to it."""

    __slots__ = ("_inner", "_op", "in_place")

    several = True
    since = 3

    def __init__(self, op: str, inner: InnerChain) -> None:
        self._op = op
        self._inner = inner
        # A window's query that changes a field in place (to_list's list) changes the window's field in place too:
        # the stage then saves the key's record after each element.
        self.in_place = inner.in_place

    def set_context(self, context: Any) -> None:
        self._inner.set_context(context)

    def attach(self, stage: Any) -> None:
        self._inner.attach(stage)

    def chain_name(self, node: Expression[Any]) -> str:
        return f"{self._op}.flat_map[{','.join(self._inner.names)}]"

    def source_of(self, node: Expression[Any]) -> object:
        window_node = node.args[0]
        assert is_expression(window_node)
        return window_node.args[0]

    def complete(self, state: Any) -> Sequence[Any]:
        outputs: list[Any] = []
        try:
            self._close_all(state, outputs)
        except Exception as error:
            if not outputs:
                raise
            return Several(outputs, error)  # the results before the failure go on first
        return tuple(outputs)

    def _close_all(self, state: Any, outputs: list[Any]) -> None:
        """The group completed: the open windows of ``state`` close, their final results appended to
        ``outputs``."""
        raise NotImplementedError


class WindowCountStep(_WindowStep):
    """``window(count, skip).flat_map(chain)`` for one key (see the module). Field: ``(elements received, the
    open windows' inner fields, oldest first)``; window ``n`` opens at element ``n * skip`` and closes at
    ``count`` elements."""

    __slots__ = ("_count", "_skip", "initial")

    def __init__(self, inner: InnerChain, count: int, skip: int) -> None:
        super().__init__("window", inner)
        self._count = count
        self._skip = skip
        self.initial = (0, (inner.initial,))  # window 0 opens with the group

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        index, windows = state
        inner, count, skip = self._inner, self._count, self._skip
        outputs: list[Any] = []
        try:
            opened: list[Any] = [inner.feed(window, value, outputs) for window in windows]
            oldest = max(0, (index - count) // skip + 1)  # the oldest open window's number
            index += 1
            if opened and index - oldest * skip == count:
                inner.complete(opened.pop(0), outputs)
            if index % skip == 0:
                opened.append(inner.initial)
        except Exception as error:
            if not outputs:
                raise
            return state, Several(outputs, error)  # the results before the failure go on first
        return (index, tuple(opened)), _result(outputs)

    def _close_all(self, state: Any, outputs: list[Any]) -> None:
        for window in state[1]:
            self._inner.complete(window, outputs)

    def check(self, state: Any) -> bool:
        if type(state) is not tuple or len(state) != 2:
            return False
        index, windows = state
        if type(index) is not int or index < 0 or type(windows) is not tuple:
            return False
        count, skip = self._count, self._skip
        expected = len(range(max(0, (index - count) // skip + 1), index // skip + 1))
        return len(windows) == expected and all(self._inner.check(window) for window in windows)


class WindowTimeStep(_WindowStep, TimedStep):
    """``window(duration).flat_map(chain)`` for one key (see the module). Field: ``(the open window's end in
    microseconds from the epoch, the stage's sequence number, its inner fields)``."""

    __slots__ = ("_duration",)

    def __init__(self, inner: InnerChain, duration: int) -> None:
        super().__init__("window_time", inner)
        self._duration = duration

    @property
    def ahead(self) -> int:
        return self._duration

    def open(self, now: int, seq: int) -> Any:
        return (now + self._duration, seq, self._inner.initial)

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        outputs: list[Any] = []
        window = state[2]
        try:
            fed = self._inner.feed(window, value, outputs)
        except Exception as error:
            if not outputs:
                raise
            return state, Several(outputs, error)
        if fed is not window:
            state = (state[0], state[1], fed)
        return state, _result(outputs) if outputs else SKIP

    def tick(self, field: Any, now: int, seq: int) -> tuple[Any, list[Any]]:
        due, _, window = field
        inner, duration, initial = self._inner, self._duration, self._inner.initial
        outputs: list[Any] = []
        try:
            while due <= now:  # every period due (more than one when the tick runs late)
                inner.complete(window, outputs)
                window = initial
                due += duration
        except Exception as error:
            return (due, seq, initial), Several(outputs, error)
        return (due, seq, window), outputs

    def _close_all(self, state: Any, outputs: list[Any]) -> None:
        self._inner.complete(state[2], outputs)

    def check(self, state: Any) -> bool:
        return (
            type(state) is tuple
            and len(state) in self._lengths
            and type(state[0]) is int
            and type(state[1]) is int
            and state[1] >= 0
            and (len(state) == 2 or self._window_fits(state[2]))
        )

    _lengths: tuple[int, ...] = (3,)  # a field's lengths: (end, sequence number, the window's fields)

    def _window_fits(self, window: object) -> bool:
        """Whether ``window``, read from a store, can be the open window's fields."""
        return self._inner.check(window)


class WindowTimeStep1(WindowTimeStep):
    """:class:`WindowTimeStep` whose inner query is one step (``w.aggregate(...)``, ``w.count()``): the field
    holds that step's field itself, ``[end, sequence number, inner field]``, or ``[end, sequence number]`` once
    the window's inner query ended. It is a list, changed in place (``in_place``): an element, a tick and an idle
    key's tick allocate neither a field nor a record (per key and per event, objects the collector would scan);
    a record loaded with a tuple there (an older store) gets a list (:meth:`loaded`)."""

    __slots__ = ("_fold", "_one")

    def __init__(self, inner: InnerChain, duration: int, one: KeyedStep) -> None:
        from reaqtive.operators.aggregate import AggregateSeedStep  # (local: the operator loads on first use)

        super().__init__(inner, duration)
        self._one = one
        self.in_place = True
        # ``w.aggregate(f, seed)``: its step's next is ``f`` with no output, called here without that step
        self._fold = one._accumulator if type(one) is AggregateSeedStep else None

    def open(self, now: int, seq: int) -> Any:
        return [now + self._duration, seq, self._one.initial]

    def loaded(self, field: Any) -> Any:
        return field if type(field) is list else list(field)

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        if len(state) == 2:
            return state, SKIP  # the window's inner query ended: its later elements are dropped
        field = state[2]
        fold = self._fold
        try:
            if fold is not None:
                state[2] = fold(field, value)
                return state, SKIP
            new, output = self._one.next(field, value)
        except Exception as error:
            self._inner._stop(error, value)
            return state, SKIP  # skipped: the field stays
        if new is DONE:
            del state[2]
        elif new is not field:
            state[2] = new
        return state, output

    def _final(self, field: Any, outputs: list[Any]) -> None:
        """The inner step completes on ``field``: its final results appended to ``outputs``."""
        try:
            final = self._one.complete(field)
        except Exception as error:
            self._inner._stop(error, NO_ELEMENT)
            return  # skipped: no final results
        outputs.extend(final)
        if type(final) is Several and final.failure is not None:
            raise final.failure

    def empty_outputs(self) -> list[Any] | None:
        try:
            final = self._one.complete(self._one.initial)
        except Exception:
            return None  # (its tick fails, or goes through the error policy: not quiet)
        if type(final) is Several and final.failure is not None:
            return None
        return list(final)

    def quiet_tick(self, field: Any, now: int, seq: int) -> Any:
        initial = self._one.initial
        if len(field) == 3 and field[2] is not initial:
            return None  # an element reached the window: it is not empty
        duration = self._duration
        due = field[0] + duration
        if due <= now:  # (a tick that runs late: the periods missed)
            due += ((now - due) // duration + 1) * duration
        field[0] = due  # (_reopened, inlined: the window holds its initial field already, if any)
        field[1] = seq
        if len(field) == 2:
            field.append(initial)
        return field

    def tick(self, field: Any, now: int, seq: int) -> tuple[Any, list[Any]]:
        due = field[0]
        duration = self._duration
        initial = self._one.initial
        outputs: list[Any] = []
        try:
            if len(field) == 3:
                self._final(field[2], outputs)
            due += duration
            while due <= now:  # the empty windows of the periods missed (a tick that ran late)
                self._final(initial, outputs)
                due += duration
        except Exception as error:
            return self._reopened(field, due, seq), Several(outputs, error)
        return self._reopened(field, due, seq), outputs

    def _reopened(self, field: list[Any], due: int, seq: int) -> list[Any]:
        """``field`` (in place) as the key's new window's: due at ``due``, number ``seq``, nothing in it."""
        field[0] = due
        field[1] = seq
        if len(field) == 3:
            field[2] = self._one.initial
        else:
            field.append(self._one.initial)  # (its last window's query had ended: the new one starts afresh)
        return field

    def _close_all(self, state: Any, outputs: list[Any]) -> None:
        if len(state) == 3:  # (else the window's inner query ended: nothing to close)
            self._final(state[2], outputs)

    _lengths = (2, 3)  # (end, sequence number) once the window's inner query ended

    def check(self, state: Any) -> bool:
        if type(state) is list:  # (this step's own; a tuple from an older store is accepted too, then made a list)
            state = tuple(state)
        return super().check(state)

    def _window_fits(self, window: object) -> bool:
        return self._one.check(window)


class _NoWindow(Subscribable[Any]):
    """The subject behind the stand-in window: never subscribed (the window step feeds its chain itself)."""

    __slots__ = ()

    def subscribe_core(self, observer: Subscriber[Any]) -> SubscriptionHandle:
        raise TypeError("the stand-in window of a keyed window step is not a stream")


def _inner_chain(selector: Any) -> InnerChain | None:
    """The inner chain of a window selector, called once on a stand-in window; ``None`` keeps the general path."""
    probe = new_inner_stream(_NoWindow(), None)
    try:
        result = selector(probe)
    except Exception:
        return None  # the general path calls it per window and fails there
    chain = chain_or_reason(result, probe)
    if isinstance(chain, str):
        return None
    steps, names = chain
    if any(step.timed for step in steps):
        return None  # a clock inside a window: the general path
    return InnerChain(steps, names)


@register_keyed_step("flat_map")
def window_flat_map_step(node: Expression[Any]) -> KeyedStep | None:
    """The keyed step of ``flat_map`` over a window of the chain (see the module), else ``None``."""
    args = FlatMapArgs.read(node)
    if args.result_selector is not None or args.max_concurrent is not None:
        return None
    window_node = node.args[0]
    if not is_expression(window_node) or window_node.op not in ("window", "window_time"):
        return None
    if window_node.op == "window":
        window_args = WindowArgs.read(window_node)
        inner = _inner_chain(args.selector)
        return None if inner is None else WindowCountStep(inner, window_args.count, window_args.skip)
    time_args = WindowTimeArgs.read(window_node)
    if time_args.shift != time_args.duration:
        return None
    inner = _inner_chain(args.selector)
    if inner is None:
        return None
    duration = time_args.duration // US
    one = inner.one
    return WindowTimeStep(inner, duration) if one is None else WindowTimeStep1(inner, duration, one)
