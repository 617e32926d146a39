"""The built-in aggregates of ``aggregate_by_key`` (count, sum, average, min, max, and a user's fold), and the
exactly rounded sum its ``sum`` and ``average`` compute over floats.

**Exactly rounded sums.** A window's ``sum`` is the exact real sum of its values rounded once to the nearest float
(ties to even), as :func:`math.fsum` rounds: so it does not depend on the order the values are added in, and a
host that adds them in another order (Spark's hash aggregation, partial sums joined later) gives the same bits.
What that means per case:

* an all-int window stays an exact ``int`` (as Python adds ints); a window with a float in it gives a float, the
  exact sum of all its values (ints included, exactly: not converted to float first, so ``2**53 + 1`` plus
  ``1.0`` is ``9007199254740994.0``) rounded once; a sum beyond the largest float rounds to ``±inf``;
* NaN anywhere gives NaN; ``inf`` and ``-inf`` together give NaN (not :func:`math.fsum`'s ``ValueError``); an
  infinity otherwise gives that infinity (also beside an int too large for a float);
* a sum of exactly zero is ``0.0``, and ``-0.0`` when every value is ``-0.0`` (as IEEE addition, and the left
  fold this replaced, give);
* ``average`` is that sum divided by the count (``sum / count``, one more rounding: so an average row is always
  the sum row divided by the count row);
* values of other types (``Decimal``, ``Fraction``, NumPy scalars, strings, ``None``) are added as before, with
  ``+`` from the first value on (the accumulator, if exact so far, rounded first): their results and errors are
  the left fold's.

The accumulator stays what the left fold kept while it can: the first value, an int, a float whose additions so
far were exact, or an infinity or NaN; past the first inexact float addition it is an :class:`ExactSum` (an
integer mantissa and a power of two, saved as that pair). A float accumulator saved by the left fold is an exact
value too, so state saved before this change loads and goes on (from its already rounded sum).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Final

from reaqtive.state.codec import register_state_type
from reaqtive.state.state_errors import StateFormatError

__all__ = ["KINDS", "ExactSum", "WindowAggregate", "add_exact", "rounded", "sum_exact"]

# The aggregate, as a small int the per-element path compares (the first four start from the first value, the first
# two add)
SUM, AVERAGE, MIN, MAX, COUNT, FOLD = range(6)
KINDS: Final = {"count": COUNT, "sum": SUM, "average": AVERAGE, "min": MIN, "max": MAX}

_INF: Final = math.inf


class ExactSum:
    """An exact finite sum: ``mantissa * 2**exponent``, the exponent in ``-1074..0`` (every float and int is a
    multiple of ``2**-1074``). Mutable: :func:`add_exact` adds into it and returns it (one object per window, not
    one per element). ``scale`` (``2**-exponent``, or NaN where that is no float) makes the common step one float
    multiplication: a value that is a multiple of ``2**exponent`` scales to an integral float, exactly."""

    __slots__ = ("exponent", "mantissa", "scale")

    def __init__(self, mantissa: int, exponent: int) -> None:
        self.mantissa = mantissa
        self.exponent = exponent
        self.scale = 2.0**-exponent if exponent >= -1023 else math.nan

    def add_float(self, value: float) -> ExactSum:
        """Add a finite float that is not a multiple of ``2**exponent``: the exponent moves down to a little below
        the value's own (a margin of 8 bits, so that the values near it do not move it again)."""
        numerator, denominator = value.as_integer_ratio()
        own = 1 - denominator.bit_length()  # (the denominator is a power of two)
        exponent = max(min(own - _MARGIN, self.exponent), -1074)
        self.mantissa = (self.mantissa << (self.exponent - exponent)) + (numerator << (own - exponent))
        self.exponent = exponent
        self.scale = 2.0**-exponent if exponent >= -1023 else math.nan
        return self

    def add_sum(self, other: ExactSum) -> ExactSum:
        """Add another exact sum."""
        low = min(self.exponent, other.exponent)
        self.mantissa = (self.mantissa << (self.exponent - low)) + (other.mantissa << (other.exponent - low))
        if low != self.exponent:
            self.exponent = low
            self.scale = 2.0**-low if low >= -1023 else math.nan
        return self

    def value(self) -> float:
        """The sum rounded once to the nearest float (``int / int`` is correctly rounded in CPython, subnormal
        results included); beyond the largest float: ``±inf``."""
        try:
            return self.mantissa / (1 << -self.exponent)
        except OverflowError:
            return _INF if self.mantissa > 0 else -_INF

    def __eq__(self, other: object) -> bool:
        if type(other) is not ExactSum:
            return NotImplemented
        low = min(self.exponent, other.exponent)  # both mantissas at the smaller exponent
        return self.mantissa << (self.exponent - low) == other.mantissa << (other.exponent - low)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"ExactSum({self.mantissa}, {self.exponent})"


_MARGIN: Final = 8


def _decode(fields: Any) -> ExactSum:
    if (type(fields) is not tuple or len(fields) != 2 or type(fields[0]) is not int or type(fields[1]) is not int
            or not -1074 <= fields[1] <= 0):
        raise StateFormatError(f"an exact sum must be (mantissa, exponent) with an int exponent in -1074..0, "
                               f"not {fields!r:.80}")
    return ExactSum(fields[0], fields[1])


register_state_type(ExactSum, "reaqtive:exact_sum", lambda s: (s.mantissa, s.exponent), _decode)


def _exact(value: int | float) -> ExactSum:
    """A finite float or an int as an :class:`ExactSum`."""
    if type(value) is float:
        return ExactSum(0, 0).add_float(value)
    return ExactSum(int(value), 0)


def add_exact(acc: Any, value: Any) -> Any:
    """``acc`` with ``value`` added, exactly where both are ints or floats (see the module); the accumulator of
    the next step, which :func:`rounded` turns into the window's sum."""
    value_type, acc_type = type(value), type(acc)
    if value_type is float:
        if acc_type is ExactSum:
            scaled = value * acc.scale  # exact: a power of two >= 1 (inf past the largest float)
            if scaled.is_integer():  # the common case: a multiple of 2**exponent
                acc.mantissa += int(scaled)
                return acc
            if value - value == 0.0:
                return acc.add_float(value)
            return value  # an infinity or NaN: the sum is that
        if acc_type is float:
            total = acc + value
            if total - total == 0.0:  # finite: exact if the rounding error is zero (Knuth's two-sum)
                back = total - acc
                if (acc - (total - back)) + (value - back) == 0.0:
                    return total
            elif acc - acc != 0.0 or value - value != 0.0:
                return total  # an infinity or NaN operand: IEEE's result (inf + -inf is NaN)
            return _exact(acc).add_float(value)
        if acc_type is int or acc_type is bool:
            return _exact(acc).add_float(value) if value - value == 0.0 else value
    elif value_type is int or value_type is bool:
        if acc_type is ExactSum:
            acc.mantissa += int(value) << -acc.exponent
            return acc
        if acc_type is float:
            if acc - acc != 0.0:
                return acc  # an infinity or NaN stays (also beside an int too large for a float)
            return _exact(acc).add_sum(ExactSum(int(value), 0))
    return _round_then_add(acc, value)


def _round_then_add(acc: Any, value: Any) -> Any:
    """The left fold's step for values of other types (and its error)."""
    return (acc.value() if type(acc) is ExactSum else acc) + value


def rounded(acc: Any) -> Any:
    """A sum's accumulator as the window's value: an :class:`ExactSum` rounded once, anything else as it is."""
    return acc.value() if type(acc) is ExactSum else acc


def sum_exact(values: Sequence[Any], *, floats: bool = False) -> Any:
    """The accumulator of the window of ``values`` (at least one), as :func:`add_exact` from the first would
    leave it (or already rounded: the same window value). ``floats``: every value is a float (an Arrow double
    column), summed by :func:`math.fsum` in C with its special cases made the module's."""
    if len(values) == 1:
        return values[0]
    if floats:
        try:
            total = math.fsum(values)
        except ValueError:
            return math.nan  # inf and -inf (with or without NaN)
        except OverflowError:
            pass  # an intermediate sum past the largest float: the exact fold below
        else:
            if total == 0.0 and all(math.copysign(1.0, value) < 0 for value in values):
                return -0.0  # every value -0.0 (fsum gives 0.0)
            return total
    acc = values[0]
    for index in range(1, len(values)):
        acc = add_exact(acc, values[index])
    return acc


class WindowAggregate:
    """The aggregate of a window, from its first value to its row's value: what the stages share with Spark's
    table form (:class:`reaqtive.spark.table.TumblingWindowStep`) and its batch paths. A subclass declares the
    four slots and sets them from :meth:`parts`."""

    __slots__ = ()
    _kind: int
    _seed: Any
    _accumulator: Callable[[Any, Any], Any] | None
    _result_selector: Callable[[Any], Any] | None

    @staticmethod
    def parts(aggregate: str | tuple[Any, ...]) -> tuple[int, Any, Any, Any]:
        """``(kind, seed, accumulator, result selector)`` of an aggregate argument (a name, or a fold)."""
        if isinstance(aggregate, str):
            return KINDS[aggregate], None, None, None
        _, seed, accumulator, result_selector = aggregate
        return FOLD, seed, accumulator, result_selector

    def _first(self, value: Any) -> Any:
        """The accumulator of a window whose first value is ``value``."""
        kind = self._kind
        if kind is COUNT:
            return None
        if kind is FOLD:
            accumulator = self._accumulator
            assert accumulator is not None
            return accumulator(self._seed, value)
        return value

    def _step(self, acc: Any, value: Any) -> Any:
        """``acc`` with one more value."""
        kind = self._kind
        if kind is SUM or kind is AVERAGE:
            return acc + value if type(acc) is int and type(value) is int else add_exact(acc, value)
        if kind is MIN:
            return value if value < acc else acc  # strictly less: the first of equal values stays
        if kind is MAX:
            return value if value > acc else acc
        if kind is FOLD:
            accumulator = self._accumulator
            assert accumulator is not None
            return accumulator(acc, value)
        return None

    def _result(self, count: int, acc: Any) -> Any:
        """The value of a closed window of ``count`` elements."""
        kind = self._kind
        if kind is COUNT:
            return count
        if kind is SUM:
            return acc.value() if type(acc) is ExactSum else acc
        if kind is AVERAGE:
            return (acc.value() if type(acc) is ExactSum else acc) / count
        if kind is FOLD and self._result_selector is not None:
            return self._result_selector(acc)
        return acc
