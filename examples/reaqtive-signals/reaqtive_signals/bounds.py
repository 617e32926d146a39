"""``signals:clamp``: each element held between a lower and an upper bound (a stateless operator)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

from reaqtive import OperatorCall
from reaqtive.core.arguments import arguments
from reaqtive.core.operator import Version
from reaqtive.core.subscribable import Subscribable
from reaqtive.operators.keyed_steps import StatelessStep
from reaqtive.operators.step_stage import StepStage, runs_inline, step_operator

if TYPE_CHECKING:
    from reaqtive import Expression

__all__ = ["Clamp", "ClampArgs", "ClampStep", "clamp", "is_number"]

def is_number(value: object) -> TypeGuard[float]:
    """Whether ``value`` is an ``int`` or a ``float`` that is not NaN (a ``bool`` is not a number here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return not (isinstance(value, float) and math.isnan(value))


def clamp(low: float, high: float, /) -> OperatorCall[float]:
    """Each element clamped into ``[low, high]``: ``low`` if it is below, ``high`` if it is above, else itself.

    >>> from reaqtive import from_iterable
    >>> from reaqtive_signals import clamp
    >>> from_iterable([-5, 3, 12]).pipe(clamp(0, 10)).run(print)  # doctest: +ELLIPSIS
    0
    3
    10
    <...>

    ``low`` and ``high`` are numbers (``int`` or ``float``, not NaN) with ``low <= high``; anything else is a
    :class:`TypeError` or :class:`ValueError` here, where the query is written. An element that cannot be
    compared with them (a string) ends the query with ``on_error(TypeError)``.

    **State.** None (the bounds are the query's arguments, not state).

    **Demand.** Passed upstream unchanged: one element in, one out.

    Persisted as ``signals:clamp``.
    """
    for name, value in (("low", low), ("high", high)):
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise TypeError(f"clamp: {name} must be a number, got {type(value).__name__}")
        if not is_number(value):
            raise ValueError(f"clamp: {name} must not be NaN")
    if low > high:
        raise ValueError(f"clamp: low must be <= high, got {low} > {high}")
    return OperatorCall("signals:clamp", (low, high))


@dataclass(frozen=True, slots=True)
class ClampArgs:
    """The arguments of a ``signals:clamp`` node: ``(source, low, high)``."""

    source: Subscribable[Any]
    low: float
    high: float

    @classmethod
    def read(cls, query: Expression[Any]) -> ClampArgs:
        """The checked arguments of ``query`` (:class:`~reaqtive.core.errors.OperatorArgumentError` if they do not
        fit): a stored query never went through :func:`clamp`, so its checks are made again here."""
        args = arguments(query, "source", "low", "high")
        low, high = args.value(1), args.value(2)
        if not is_number(low):
            args.fail(1, "a number (an int or a float, not NaN)")
        if not is_number(high) or high < low:
            args.fail(2, f"a number (an int or a float, not NaN) >= low ({low})")
        return cls(args.source(0), low, high)


class ClampStep(StatelessStep):
    """The per-element logic of :func:`clamp`, written once: the stage runs it (compiled into its ``on_next``),
    and so does a keyed ``group_by ... flat_map`` whose inner query uses ``clamp``. A comparison with the user's
    element may raise (a ``str``): raised as it is, the stage or the keyed table hands it to the query's error
    policy (``on_error``, or skip the element)."""

    __slots__ = ("_high", "_low")

    def __init__(self, low: float, high: float) -> None:
        self._low = low
        self._high = high

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        return None, (self._low if value < self._low else self._high if value > self._high else value)


# frames=2: the stage passes an element down in one call and leaves request() to the base (as reaqtive's map).
# step_operator: registers the stage and gives it the constructor (query, downstream) that runs the step built from
# the checked record; the same function builds the keyed chain's step.
@step_operator("signals:clamp", lambda args: ClampStep(args.low, args.high), frames=2, builder=clamp, args=ClampArgs)
class Clamp(StepStage):
    """The running stage of :func:`clamp`, run by :class:`ClampStep`. It saves nothing of its own (the step is
    stateless); the base saves whether it was disposed, so a query that completed stays completed after a
    restart."""

    name = "signals:clamp"
    version: Version = (1,)


runs_inline(Clamp)(ClampStep)  # the step's next compiled into the stage's on_next: no call per element
