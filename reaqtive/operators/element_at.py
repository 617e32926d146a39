"""``element_at``: the element at a position (0-based), with an ``_or_default`` form for a shorter source."""

from __future__ import annotations

from typing import Any, TypeVar

from reaqtive.core.arguments import args_record, require_non_negative_int
from reaqtive.core.expression import OperatorCall
from reaqtive.core.operator import StateReader, Version
from reaqtive.operators._aggregate import require_element
from reaqtive.operators.keyed_steps import (
    DONE,
    SKIP,
    KeyedStep,
    StepOperatorError,
)
from reaqtive.operators.step_stage import StepAggregate, runs_inline, step_operator

__all__ = ["ElementAt", "ElementAtArgs", "ElementAtOrDefaultArgs", "element_at", "element_at_or_default"]

T = TypeVar("T")


def element_at(index: int) -> OperatorCall[Any]:
    """The element at ``index`` (0-based), at once; then the source is cancelled. A source that ends
    before it is an ``IndexError``.

    >>> from_iterable("abcd").element_at(2).run(print)  # doctest: +ELLIPSIS
    c
    <...>

    **State.** The held result (see :mod:`reaqtive.operators._aggregate`), then ``remaining: int``, the
    elements still to skip (``reaqtive:element_at``).

    **Demand.** Everything once asked.

    Reaqtive: ElementAt.
    """
    require_non_negative_int(index, "element_at", "index")
    return OperatorCall("element_at", (index,))


def element_at_or_default(index: int, default: Any) -> OperatorCall[Any]:
    """As :meth:`element_at`, but ``default`` when the source ends before ``index``.

    >>> from_iterable("ab").element_at_or_default(5, "?").run(print)  # doctest: +ELLIPSIS
    ?
    <...>

    **State.** The held result, then ``remaining: int`` (``reaqtive:element_at``).

    **Demand.** Everything once asked; the result is held until demanded.

    Reaqtive: ElementAtOrDefault.
    """
    require_non_negative_int(index, "element_at_or_default", "index")
    require_element(default, "element_at_or_default", "default")
    return OperatorCall("element_at_or_default", (index, default))


ElementAtArgs = args_record("ElementAtArgs", source="source", index="count")
ElementAtOrDefaultArgs = args_record("ElementAtOrDefaultArgs", source="source", index="count", default="element")


@step_operator("element_at", lambda args: ElementAtStep("element_at", args.index, None), builder=element_at,
               args=ElementAtArgs)
@step_operator("element_at_or_default", lambda args: ElementAtStep("element_at_or_default", args.index, args.default),
               owned="default", builder=element_at_or_default, args=ElementAtOrDefaultArgs)
class ElementAt(StepAggregate):
    """The running stage of :func:`element_at` and :func:`element_at_or_default` (one persisted name: the
    default is part of the query, not of the state)."""

    name = "reaqtive:element_at"
    version: Version = (1,)
    state_fields = ("held", "?result", "remaining")

    __slots__ = ()

    def read_field(self, reader: StateReader) -> int:
        return reader.read_int("remaining", maximum=self._step.initial)


def _out_of_range_error(op: str, index: int, remaining: int) -> IndexError:
    """The error of ``element_at`` whose source completed with ``remaining`` elements still to skip."""
    seen = index - remaining
    return IndexError(
        f"{op}: index {index} is out of range: the source completed after {seen} element{'' if seen == 1 else 's'}"
    )


@runs_inline(ElementAt)
class ElementAtStep(KeyedStep):
    """The per-element logic of :class:`ElementAt` (the stage and a keyed chain run it): the field is how
    many elements are still to skip; the element at the index ends the stream."""

    __slots__ = ("_default", "_op", "initial")

    def __init__(self, op: str, index: int, default: object) -> None:
        self._op = op
        self.initial = index
        self._default = default

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        if state:
            return state - 1, SKIP
        return DONE, value

    def complete(self, state: Any) -> tuple[Any, ...]:
        default = self._default
        if default is None:
            raise StepOperatorError(_out_of_range_error(self._op, self.initial, state))
        return (default,)

    def check(self, state: Any) -> bool:
        return type(state) is int and 0 <= state <= self.initial
