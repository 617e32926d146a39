"""A one-input stage run by its operator's keyed step: the step is the operator's per-element logic, written
once, and this stage, the keyed table (:mod:`reaqtive.operators.keyed_groups`) and, for a fusible operator, the
fused run (:mod:`reaqtive.operators._fusion`, from the step's template) all run it.

The stage holds the step's field for its one stream (:attr:`StepStage._field`, ``step.initial`` at first) and,
per element, calls ``step.next(field, value)`` under one ``try``: a
:class:`~reaqtive.operators.keyed_steps.StepOperatorError` (the operator's own error: a limit, a missing element)
stops the stage whatever the query's error policy; any other exception is the user's (``_user_error``: the policy
skips the element, the field stays, or stops the query). A new field marks the state changed; the output goes
downstream unless it is :data:`~reaqtive.operators.keyed_steps.SKIP`, and a field
:data:`~reaqtive.operators.keyed_steps.DONE` completes the stage after it (the stage keeps
:meth:`StepStage.field_at_end`). A stage whose step drops elements (``drops``) asks its upstream for one more in
place of each dropped one while the downstream's demand is bounded.

By default the field is saved as it is; a stage whose saved layout differs (or whose field needs a check when
read) overrides ``save_state_core`` / ``load_state_core``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from reaqtive.core.context import OperatorContext
from reaqtive.core.operator import StateReader, StateWriter
from reaqtive.core.streams import LONG_MAX, Subscriber, add_demand
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators.keyed_steps import DONE, SKIP, KeyedStep, StepOperatorError
from reaqtive.state import StatefulUnaryOperatorBase

__all__ = ["StepStage"]


class StepStage(StatefulUnaryOperatorBase[Any, Any]):
    """The stage of an operator whose keyed step is its per-element logic (see the module). A subclass builds
    its step from the query's checked arguments and passes it, with the source, to ``__init__``."""

    timeless = True
    drops: ClassVar[bool] = False
    """Whether an element the step puts nothing out for is replaced upstream (``request(1)``) while the
    downstream's demand is bounded (``filter``, ``skip_while``), as is an element the error policy skips."""

    __slots__ = ("_field", "_requested", "_source", "_step")

    def __init__(self, downstream: Subscriber[Any], source: Subscribable[Any], step: KeyedStep) -> None:
        super().__init__(downstream)
        self._source = source
        self._step = step
        self._field: Any = step.initial
        self._requested = 0  # the downstream's demand in total, kept by a stage that drops elements

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._step.set_context(context)  # (the host's limits)

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._field)

    def load_state_core(self, reader: StateReader) -> None:
        self._field = reader.read()

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def request(self, n: int) -> None:
        if self.drops and n > 0:
            self._requested = add_demand(self._requested, n)
        super().request(n)

    def on_next(self, value: Any) -> None:
        old = self._field
        try:
            field, output = self._step.next(old, value)
        except StepOperatorError as error:
            self._signal_error(error.error)
            return
        except Exception as error:  # the user's: the policy skips the element (the field stays) or stops
            self._user_error(error, value)
            return
        done = field is DONE
        if done:
            field = self.field_at_end(old)
        if field is not old or self._step.in_place:
            self._field = field
            self._state.changed = True
        if output is not SKIP:
            self._downstream.on_next(output)
        elif self.drops and not done:
            self._replace_dropped()
        if done:
            self._signal_complete()

    def field_at_end(self, field: Any) -> Any:
        """The field the stage keeps (and a checkpoint of the completed stage saves) when the step ended the
        stream (:data:`~reaqtive.operators.keyed_steps.DONE`) from ``field``: ``field`` by default."""
        return field

    def _replace_dropped(self) -> None:
        """Ask the upstream for one more element in place of a dropped one, unless demand is unbounded."""
        if self._requested != LONG_MAX:
            upstream = self._upstream
            if upstream is not None:
                upstream.request(1)

    def _element_skipped(self) -> None:
        if self.drops:
            self._replace_dropped()  # as a dropped element
        else:
            super()._element_skipped()
