"""What the aggregates share: their demand policy, holding the one result until the downstream may have it, the
state of a held result, their errors, and their builders' checks.

An aggregate (``count``, ``to_list``, ``first``, ...) reduces its source to exactly one element, then completes.

**Demand.** Nothing is requested upstream until the downstream has requested something; then the stage requests
everything (``LONG_MAX``) once, so its source runs on the unbounded fast path. The result goes downstream as soon
as it is known and the downstream has asked for anything (it only ever needs one). A source may complete without
being asked (an empty source, rule 1.2): the result is then **held** (the one element the stage ever buffers)
until the downstream requests, and a checkpoint taken meanwhile saves it, so it survives a restart. Errors need
no demand and are signalled at once.

**State** of every aggregate begins with ``held: bool`` and, when true, ``result``; the operator's own fields
follow. Held results and accumulations are the operator's values, so a checkpoint needs them to be state values
(``docs/state-format.md``); :class:`~decimal.Decimal` and :class:`~fractions.Fraction` are registered here, so
``sum``/``average`` over them checkpoint too; other types are registered with
:func:`reaqtive.state.register_state_type`.

**Errors.** An exception from a user function becomes ``on_error`` and ends the subscription, or, under a skip
policy (``docs/operators.md``, "When user code raises"), skips the element it was called on: the accumulation is
as if that element had never come. One at the end (a result selector, the division of ``average``, or a ``None``
result) skips the result: the stage completes without one. A source without the element an operator needs signals
``ValueError`` (as Python's ``min([])``); ``element_at`` past the end signals ``IndexError``: errors of the
operator, which stop the query whatever the policy. ``None`` is never an element, so the ``_or_default`` forms
take an explicit default.
"""

from __future__ import annotations

import contextlib
import threading
from decimal import Decimal
from fractions import Fraction
from typing import Final, Generic, TypeVar

from reaqtive.core.arguments import require_callable
from reaqtive.core.operator import StateReader, StateWriter
from reaqtive.core.streams import LONG_MAX, Subscriber, non_positive_request_error
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.state import StatefulUnaryOperatorBase, register_state_type

__all__ = ["AggregateStage", "no_elements_error", "none_result_error", "optional_callable", "require_element"]

S = TypeVar("S")
R = TypeVar("R")

# Guards the hand-over between "the result is known" (upstream side) and "the downstream asked" (downstream
# side). Each stage takes it at most a few times in its life, never per element, so one lock for all of them
# costs no memory per stage and is uncontended.
_HANDOFF: Final = threading.Lock()


def optional_callable(value: object, op: str, name: str) -> None:
    """The builders' check of an optional function: ``None``, or a callable."""
    if value is not None:
        require_callable(value, op, name)


def require_element(value: object, op: str, name: str) -> None:
    """The builders' check of a value that stands in for an element (a default, a start): never ``None``."""
    if value is None:
        raise TypeError(f"{op}: {name} must not be None (None is never a stream element)")


def no_elements_error(op: str, predicate: bool = False) -> ValueError:
    """The error of an aggregate that needs an element and found none (Python's ``min([])`` is a ValueError)."""
    what = "any element satisfying the predicate" if predicate else "any element"
    return ValueError(f"{op}: the source completed without {what}")


def none_result_error(name: str) -> TypeError:
    """The error of an aggregate (named by its stage's ``name``) whose result is ``None``."""
    return TypeError(f"{name}: the result is None, which is never an element")


class AggregateStage(StatefulUnaryOperatorBase[S, R], Generic[S, R]):
    """The base of single-input aggregates: its one subclass, :class:`~reaqtive.operators.step_stage.StepAggregate`,
    runs the operator's step per element and at completion, and calls :meth:`_finish` with the result (early,
    when an element decides it, as in ``first`` and ``any``); it extends ``save_state_core`` /
    ``load_state_core`` after calling ``super()``.
    """

    timeless = True
    __slots__ = ("_decided", "_demanded", "_held", "_result", "_source")

    def __init__(self, source: Subscribable[S], downstream: Subscriber[R]) -> None:
        super().__init__(downstream)
        self._source: Subscribable[S] = source
        self._demanded = False
        self._decided = False  # the result is known (held or on its way): later upstream signals change nothing
        self._held = False
        self._result: R | None = None

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._held)
        if self._held:
            writer.write(self._result)

    def load_state_core(self, reader: StateReader) -> None:
        self._held = self._decided = reader.read_bool("held")
        if self._held:
            self._result = self.read_result(reader)

    def read_result(self, reader: StateReader) -> R:
        """Read the held result: an element (never ``None``). A stage whose result is its own (a count, an
        answer) checks its type too."""
        result = reader.read()
        if result is None:
            raise reader.invalid("result", "an element (never None)", result)
        return result  # type: ignore[no-any-return]

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def _element_skipped(self) -> None:
        """Nothing owed: the stage asked its source for everything."""

    # -- demand ------------------------------------------------------------------------------------------------

    def request(self, n: int) -> None:
        if n <= 0:
            if self._held:  # the upstream is gone: the rule 3.9 error is ours to signal
                self._signal_error(non_positive_request_error(n))
            else:
                super().request(n)  # the upstream signals it, in order with its elements
            return
        with _HANDOFF:
            first = not self._demanded
            self._demanded = True
            held, self._held = self._held, False
        if held:
            self._emit(self._result)  # type: ignore[arg-type]
        elif first:
            super().request(LONG_MAX)

    # -- the result --------------------------------------------------------------------------------------------

    def on_start(self) -> None:
        if self._held:  # recovered with a held result: the source has nothing more to say
            self._release_upstream()

    def _finish(self, result: R, upstream_live: bool = True) -> None:
        """The result is known: emit it and complete if the downstream asked, else hold it. Once one result is
        held or sent, signals still in flight from a cancelled upstream (rule 2.8) change nothing."""
        if result is None:
            self._signal_error(none_result_error(self.name))
            return
        with _HANDOFF:
            if self._decided or self._disposed:
                return
            self._decided = True
            demanded = self._demanded
            if not demanded:
                self._held, self._result = True, result
                self._state.changed = True
        if demanded:
            self._emit(result)
        elif upstream_live:  # not reached with a conforming upstream: elements only come after demand
            self._release_upstream()

    def _emit(self, result: R) -> None:
        self._downstream.on_next(result)
        self._signal_complete()

    def _release_upstream(self) -> None:
        """Stop listening to the source while the stage itself lives on (holding its result)."""
        upstream = self._upstream
        self._upstream_terminated()  # later requests go nowhere; a late on_subscribe is cancelled
        for handle in self._inputs:
            handle.dispose()
        if upstream is not None:
            upstream.cancel()


def _register_number_types() -> None:
    """Exact numbers are saved as text (Decimal) and as a numerator/denominator pair (Fraction). A host that
    registered either type itself keeps its own encoding."""
    for cls, tag, encode, decode in (
        (Decimal, "reaqtive:decimal", str, Decimal),
        (Fraction, "reaqtive:fraction", lambda f: (f.numerator, f.denominator), lambda v: Fraction(*v)),
    ):
        with contextlib.suppress(ValueError):
            register_state_type(cls, tag, encode, decode)


_register_number_types()
