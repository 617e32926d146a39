"""``run_batch`` for window aggregates that do not depend on the order of their values: aggregated in the JVM.

``count``, ``min``, ``max``, ``sum`` and ``average`` of a window are the same whatever order its values come in
(float sums are exactly rounded: :mod:`reaqtive.operators.window_aggregates`), so Spark may aggregate them as it
aggregates its own: a hash ``groupBy`` of (key, window, inner key) with
partial aggregation before the shuffle. One row per window and inner key reaches Python, not one per event. The rows
are still the per-key path's (:mod:`reaqtive.spark.table`), row for row, because each part of a row is exact in any
order:

* **the value**: a count; an integer sum, exact (the sums of the values' high and low 32 bits, joined in Python,
  whose ints do not overflow either; an average is the same ``int / int`` as the stage's); a float sum, exact:
  each value as an integer mantissa ``m`` of an exponent bucket ``E`` (``v = m * 2**E``, exactly, see
  :func:`_with_float_parts`), grouped by bucket too and summed as integers are, joined in Python as
  ``sum(m_E * 2**E)`` and rounded once, as the stage rounds (NaN, infinities and ``-0.0`` are buckets of their
  own, so Python applies the stage's rules to them); an integer ``min``/``max``. A floating-point ``min``/``max``
  follows the stage's comparison (``value < acc``, the first of equal values stays): a window whose first value is
  NaN keeps NaN (nothing compares below it), any other NaN is passed over; a minimum (maximum) of zero is the first
  zero in event order (``-0.0 == 0.0``, so its sign is the first one's). Spark's own ``min``/``max`` put NaN above
  every number and do not order zeros, so the JVM gives the minimum without NaN, the first event's and the first
  NaN's ``(time, sequence)`` and the first zero (``min_by``), and Python picks.
* **the order of rows**: a key's windows in time order, a window's inner keys in the order they first appeared (the
  least ``(time, sequence)`` of their events, aggregated as one number: see ``_Orders``); ``seq`` numbers them.
* **the time of a row and what ends a key** are the window path's (:mod:`reaqtive.spark.batch_windows`): every
  window but a key's last closes at its end; the last as ``until`` and ``complete`` say.
* **a null value** ends the key with the per-key path's error row: an event with a null value is a group of its
  own (rare), so Python knows the ``(time, sequence)`` of a window's null values and of its first non-null value,
  which say at which event the fold of ``acc + value`` (or ``value < acc``) first meets a null and with which
  operand types; the error's text is made by running that operation. A window of one null value closes as the
  stage closes it (``sum``, ``min``, ``max``: a null; ``average``: the error of ``None / 1``).

It runs with ``run_batch(..., pre_aggregate=True)``: it pays when windows hold many events and costs more than the
sorted window path when they hold few (docs/spark.md, "Batch: backfill and replay"). A null
time or sequence number is refused with :class:`ValueError` (their events have no order; the per-key path fails on
them too, or orders them by chance).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import pyarrow as pa
from pyspark.sql import functions as F  # noqa: N812  (Spark's idiom)

from reaqtive.operators.window_aggregates import ExactSum
from reaqtive.spark.batch_windows import WindowPlan, _Aggregate, _WindowText
from reaqtive.spark.values import encode_values

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["hash_aggregable", "run_hashed"]

_ORDER_FREE: Final = frozenset({"count", "min", "max"})
_ADDING: Final = frozenset({"sum", "average"})
_DECIMAL: Final = "decimal(38,0)"
_SHIFT: Final = 1 << 64
_BIAS: Final = 1 << 63
_FLUSH_ROWS: Final = 10_000

Row = tuple[Any, int, int, Any, "str | None"]


def hash_aggregable(plan: WindowPlan) -> bool:
    """Whether the plan's windows are the same in any order of their values (see the module): every built-in
    aggregate is, floating-point sums too (exactly rounded)."""
    return plan.kind in _ORDER_FREE or plan.kind in _ADDING


def run_hashed(events: DataFrame, plan: WindowPlan, *, key: str, key_type: str, time: str, sequence: str,
               until: int | None, complete: bool, partitions: int, value_format: str) -> DataFrame:
    """The outputs ``key, seq, time_us, value, error`` of the plan's query over ``events`` (see the module)."""
    from reaqtive.spark.streaming import output_schema

    t = F.unix_micros(F.col(time).cast("timestamp"))
    s = F.col(sequence).cast("long")
    window = t - F.pmod(t - F.lit(plan.offset), F.lit(plan.span))
    orders = _Orders(plan.span, t, s, window)
    inner = F.lit(None) if plan.key_field is None else F.col(plan.key_field)
    grouping = [F.col(key).alias("key"), window.alias("w"), inner.alias("k")]
    aggregates: list[Column] = [
        F.count(F.lit(1)).alias("n"), *orders.least("first"), F.max(t).alias("last"),
        F.count(F.when(s.isNull(), 1)).alias("unordered"),
    ]
    if plan.value_field is not None:
        v = F.col(plan.value_field).cast("double" if plan.floating else "bigint")
        # An event with a null value is a group of its own (its time and sequence are part of the grouping): rare,
        # and Python needs where each is (see the module)
        grouping += [F.when(v.isNull(), t).alias("null_t"), F.when(v.isNull(), s).alias("null_s")]
        if plan.kind == "min":
            aggregates.append(F.min(v).alias("acc"))
        elif plan.kind == "max":
            aggregates.append(F.max(F.when(~F.isnan(v), v) if plan.floating else v).alias("acc"))
        else:  # a sum or average, exact: the high and low 32 bits of integers summed apart (no decimal per event)
            whole = v
            if plan.floating:  # a float as an integer mantissa of an exponent bucket, grouped by the bucket
                events = _with_float_parts(events, v)
                grouping.append(F.col(_E).alias("e"))
                whole = F.col(_M)
            aggregates += [F.sum(F.shiftright(whole, 32)).alias("acc"),
                           F.sum(whole.bitwiseAND(F.lit(0xFFFFFFFF))).alias("low")]
        if plan.floating and plan.kind in _ORDER_FREE:  # the stage's comparison: what Python picks from
            zero = v == F.lit(0.0)
            aggregates += [*orders.least("nan", F.isnan(v)), *orders.least("zero", zero),
                           *orders.value_at_least(v, "first_zero", zero)]  # (only NaN and zero events compute these)
    groups = (events.groupBy(*grouping).agg(*aggregates)
              .repartition(partitions, "key").sortWithinPartitions("key"))  # (Python orders a key's few rows)
    return groups.mapInArrow(_HashedWindows(plan, key_type, value_format, until=until, complete=complete),
                             output_schema(key_type, value_format))


# The exponent buckets of floats (see _with_float_parts), and the buckets of the values that have no mantissa
_BUCKET: Final = 8
_LOWEST: Final = -1080  # a bucket at or below the quantum of subnormals (2**-1074), so every float is a multiple
_NAN, _INF, _NEG_INF, _NEG_ZERO = 2000, 2001, 2002, 2003


_E, _M = "__reaqtive_e", "__reaqtive_m"


def _with_float_parts(events: DataFrame, v: Column) -> DataFrame:
    """``events`` with each double's exponent bucket ``E`` and integer mantissa ``m = v * 2**-E`` (``bigint``),
    exact: ``E`` is a multiple of 8 at least 53 below the value's exponent (``floor(log2|v|)``, which may be one
    off near a power of two: 54 below that, minus up to 7), so ``m`` is an integer, and at most 62 below, so
    ``|m| < 2**63``; the scaling is by powers of two in two steps (``2**-E`` alone may overflow a double), each
    exact (Java's ``pow`` of 2 to an integer is exact). A bucket holds values within a factor of 256, so a
    window's values fall in a few. NaN, ``inf``, ``-inf`` and ``-0.0`` are buckets of their own with ``m = 0``;
    ``0.0`` is in bucket 0. Two projections, so Spark computes each part once per event (inlined in the
    aggregation, ``E`` was evaluated once per use: it cost 0.7 CPU s per million events)."""
    finite = ~F.isnan(v) & (F.abs(v) != F.lit(math.inf)) & (v != F.lit(0.0))
    exponent = F.floor(F.log2(F.abs(v))).cast("int")
    scaled = F.greatest(F.floor((exponent - F.lit(54)) / F.lit(_BUCKET)).cast("int") * F.lit(_BUCKET),
                        F.lit(_LOWEST))
    bucket = (F.when(finite, scaled).when(F.isnan(v), F.lit(_NAN)).when(v == F.lit(math.inf), F.lit(_INF))
              .when(v == F.lit(-math.inf), F.lit(_NEG_INF))
              .when(v.cast("string").startswith("-"), F.lit(_NEG_ZERO)).otherwise(F.lit(0)))  # (only zeros
    # reach that test: the text is how SQL tells -0.0, its atan2 and comparisons add 0.0 or compare equal)
    e = F.col(_E)
    half = F.floor(-e / F.lit(2)).cast("int")
    mantissa = F.when(e < F.lit(_NAN), (v * F.pow(F.lit(2.0), half) * F.pow(F.lit(2.0), -e - half)).cast("bigint"))
    return events.withColumn(_E, bucket).withColumn(_M, F.coalesce(mantissa, F.lit(0).cast("bigint")))


class _Orders:
    """An event's ``(time, sequence)`` as one number that orders as the pair (Spark aggregates a number in a hash
    table; a struct's ``min`` would make it sort every event). Where the sequence fits beside the time within the
    window (``time - window start`` has as many bits as the window's span; the sequence gets the rest of a long:
    36 bits for a minute), a ``bigint``; else a ``decimal(38,0)`` (``time * 2**64 + sequence + 2**63``), slower
    to compute (in Java's big decimals), so only the events that need it compute it. Python compares both as the
    decimal's number (:meth:`_HashedWindows._least`)."""

    def __init__(self, span: int, t: Column, s: Column, window: Column) -> None:
        self.bits = _sequence_bits(span)
        bias = 1 << (self.bits - 1) if self.bits else 0
        self.fits = (s >= F.lit(-bias)) & (s < F.lit(bias)) if self.bits else F.lit(False)
        self.long = (t - window) * F.lit(1 << self.bits) + (s + F.lit(bias)) if self.bits else F.lit(None)
        shift, bias_wide = F.lit(Decimal(_SHIFT)).cast(_DECIMAL), F.lit(Decimal(_BIAS))
        self.wide = t.cast(_DECIMAL) * shift + (s.cast(_DECIMAL) + bias_wide)

    def least(self, name: str, where: Column | None = None) -> list[Column]:
        """The least order of the events (``where`` true), as ``name_long`` and ``name_wide``."""
        fits = self.fits if where is None else where & self.fits
        return [F.min(F.when(fits, self.long)).alias(f"{name}_long"),
                F.min(F.when(~self.fits if where is None else where & ~self.fits, self.wide)).alias(f"{name}_wide")]

    def value_at_least(self, value: Column, name: str, where: Column | None = None) -> list[Column]:
        """The value of the least event of each kind (``where`` true), as ``name_long`` and ``name_wide``."""
        fits = self.fits if where is None else where & self.fits
        return [F.min_by(value, F.when(fits, self.long)).alias(f"{name}_long"),
                F.min_by(value, F.when(~self.fits if where is None else where & ~self.fits, self.wide))
                .alias(f"{name}_wide")]


def _sequence_bits(span: int) -> int:
    """How many bits a sequence number gets beside the time within a window of ``span`` µs (0: none)."""
    bits = 62 - (span - 1).bit_length()
    return bits if bits >= 16 else 0


class _Group(NamedTuple):
    """One window and inner key of a key: the window's start (µs since 1970), the inner key, the events, the
    ``(time, sequence)`` order (:func:`_order`) of the first event, of the null values and of the first non-null
    value, and the aggregate of the non-null values."""

    window: int
    inner: Any
    n: int
    first: int
    nulls: list[int]
    valued: int | None
    acc: Any


class _HashedWindows(_WindowText):
    """The ``mapInArrow`` function: a partition's aggregated groups sorted by key, window and first event in; per
    key, the rows the per-key path gives out."""

    def __init__(self, plan: WindowPlan, key_type: str, value_format: str, *, until: int | None,
                 complete: bool) -> None:
        super().__init__(plan, key_type, value_format)
        self._until = until
        self._complete = complete
        self._aggregate = _Aggregate(plan.kind)
        self._sample = 1.0 if plan.floating else 1  # an operand of the value's type, for an error's text
        self._no_value = encode_values([None], value_format)[0]  # an error row's value, as the per-key path writes it
        self._bits = _sequence_bits(plan.span)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows: list[Row] = []
        current: Any = None
        parts: list[_Part] = []
        started = False
        for batch in batches:
            for part in self._parts(batch):
                if not started or part.key != current:
                    if started:
                        rows += self._key(current, *_merge(parts))
                    current, parts, started = part.key, [], True
                parts.append(part)
            if len(rows) >= _FLUSH_ROWS:
                yield self._batch(rows)
                rows = []
        if started:
            rows += self._key(current, *_merge(parts))
        if rows:
            yield self._batch(rows)

    def _parts(self, batch: pa.RecordBatch) -> Iterator[_Part]:
        """Each row of ``batch``: a window and inner key's non-null values, or one null value's events."""
        plan = self._plan
        columns = batch.to_pydict()
        nothing = [None] * batch.num_rows
        accs, lows = columns.get("acc", nothing), columns.get("low", nothing)
        null_times = columns.get("null_t", nothing)
        adding_floats = plan.floating and plan.kind in _ADDING
        buckets = columns.get("e", nothing)
        least = self._least
        for index, (key, window, inner, n, last, unordered) in enumerate(zip(
                columns["key"], columns["w"], columns["k"], columns["n"], columns["last"], columns["unordered"],
                strict=True)):
            if window is None or unordered:
                raise ValueError(f"run_batch: key {key!r} has an event with a null time or sequence number; every "
                                 "event needs both (they order the key's events)")
            first, _ = least(columns, "first", index, window)
            assert first is not None  # (every group has an event, and its time and sequence are not null)
            acc = accs[index]
            if adding_floats:
                acc = _FloatPart.of(buckets[index], (acc << 32) + lows[index])
            elif plan.floating:
                first_nan, _ = least(columns, "nan", index, window)
                _, first_zero = least(columns, "zero", index, window, "first_zero")
                acc = _float_pick(acc, first_nan == first, first_zero)
            elif lows[index] is not None:
                acc = (acc << 32) + lows[index]  # the high and the low 32 bits' sums
            yield _Part(key, window, inner, null_times[index] is not None, n, first, last, acc)

    def _least(self, columns: dict[str, list[Any]], name: str, index: int, window: int,
               value: str | None = None) -> tuple[int | None, Any]:
        """The least of a group's two orders ``name`` (see :class:`_Orders`) as ``time * 2**64 + sequence +
        2**63``, and the ``value`` columns' value at it."""
        bits = self._bits
        found, at = columns[f"{name}_long"][index], columns[f"{name}_wide"][index]
        chosen: int | None = None if at is None else int(at)
        suffix = "_wide"
        if found is not None:
            relative, sequence = found >> bits, (found & ((1 << bits) - 1)) - (1 << (bits - 1))
            candidate = (window + relative) * _SHIFT + sequence + _BIAS
            if chosen is None or candidate < chosen:
                chosen, suffix = candidate, "_long"
        return chosen, None if value is None or chosen is None else columns[value + suffix][index]

    def _key(self, key: Any, groups: list[_Group], last: int) -> list[Row]:
        """A key's rows: its windows in order until one closes with an error or a null value fails a fold."""
        rows: list[Row] = []
        plan, until = self._plan, self._until
        start = 0
        while start < len(groups):
            window = groups[start].window
            stop = start + 1
            while stop < len(groups) and groups[stop].window == window:
                stop += 1
            failure = self._step_failure(groups[start:stop])
            if failure is not None:
                at, text = failure
                rows.append((key, len(rows), at >> 64, self._no_value, text))
                return rows
            end = window + plan.span
            if stop < len(groups) or (until is not None and end <= until):
                when = end
            elif self._complete:
                when = last if until is None else max(last, until)
            else:
                return rows  # the key's last window is still open
            try:
                results = [(group.inner, self._aggregate.result(group.n, group.acc)) for group in groups[start:stop]]
            except Exception as error:  # the stage's result fails (an average of one null): the key ends
                rows.append((key, len(rows), when, self._no_value, f"{type(error).__name__}: {error}"))
                return rows
            rows += self.window_rows(key, len(rows), when, window, results)
            start = stop
        return rows

    def _step_failure(self, groups: list[_Group]) -> tuple[int, str] | None:
        """The first event of a window at which a fold meets a null, as ``(its order, error text)``, or
        ``None``."""
        found: tuple[int, str] | None = None
        operands: tuple[Any, Any]
        for group in groups:
            if group.n < 2 or not group.nulls:
                continue
            nulls = group.nulls
            if nulls[0] == group.first:  # the accumulator is null from the first value: the second event fails
                second = min([*nulls[1:2], *([group.valued] if group.valued is not None else [])])
                at, operands = second, (None, None if second in nulls else self._sample)
            else:
                at, operands = nulls[0], (self._sample, None)
            if found is None or at < found[0]:
                found = at, self._step_error(*operands)
        return found

    def _step_error(self, acc: Any, value: Any) -> str:
        """The text of the error the stage's step raises on these operands (its own operation, run)."""
        try:
            if self._plan.kind in ("sum", "average"):
                _ = acc + value  # (the table form's step for sums)
            else:
                self._aggregate.step(acc, value)
        except Exception as error:
            return f"{type(error).__name__}: {error}"
        raise AssertionError(f"a {self._plan.kind} step of {acc!r} and {value!r} did not fail")  # pragma: no cover


class _Part(NamedTuple):
    """A row of the JVM's aggregate: a key's window and inner key, whether it holds null values (one ``(time,
    sequence)``), its events, the order of its first, its last time and the aggregate of its values."""

    key: Any
    window: int
    inner: Any
    nulled: bool
    n: int
    first: int
    last: int
    acc: Any


def _merge(parts: list[_Part]) -> tuple[list[_Group], int]:
    """A key's parts as its groups, in window order and, in a window, in the order the inner keys first appeared;
    and the key's last event time."""
    merged: dict[tuple[int, Any], list[Any]] = {}
    for part in parts:
        entry = merged.get((part.window, part.inner))
        if entry is None:
            entry = merged[(part.window, part.inner)] = [0, part.first, [], None, None]
        entry[0] += part.n
        entry[1] = min(entry[1], part.first)
        if part.nulled:
            entry[2] += [part.first] * part.n
        elif entry[4] is None:
            entry[3], entry[4] = part.first, part.acc
        else:  # another exponent bucket of a float sum's values
            entry[3], entry[4] = min(entry[3], part.first), entry[4].merge(part.acc)
    groups = [_Group(window, inner, n, first, sorted(nulls), valued, acc.acc() if type(acc) is _FloatPart else acc)
              for (window, inner), (n, first, nulls, valued, acc) in merged.items()]
    groups.sort(key=lambda group: (group.window, group.first))
    return groups, max(part.last for part in parts)


class _FloatPart:
    """The values of a float sum's exponent buckets, merged: whether NaN, ``inf`` or ``-inf`` is among them, whether
    every value is ``-0.0``, and the exact sum of the finite ones."""

    __slots__ = ("exact", "inf", "nan", "neg_inf", "neg_zero")

    def __init__(self, nan: bool, inf: bool, neg_inf: bool, neg_zero: bool, exact: ExactSum) -> None:
        self.nan, self.inf, self.neg_inf, self.neg_zero, self.exact = nan, inf, neg_inf, neg_zero, exact

    @classmethod
    def of(cls, bucket: int, mantissa: int) -> _FloatPart:
        """A bucket's part: the sum of its mantissas, or its special value."""
        special = bucket in (_NAN, _INF, _NEG_INF, _NEG_ZERO)
        if special:
            exact = ExactSum(0, 0)
        elif bucket >= 0:
            exact = ExactSum(mantissa << bucket, 0)
        else:  # (below the quantum 2**-1074, the mantissas are multiples of the difference: exact)
            exact = ExactSum(mantissa >> (-1074 - bucket), -1074) if bucket < -1074 else ExactSum(mantissa, bucket)
        return cls(bucket == _NAN, bucket == _INF, bucket == _NEG_INF, bucket == _NEG_ZERO, exact)

    def merge(self, other: _FloatPart) -> _FloatPart:
        self.nan, self.inf, self.neg_inf = self.nan or other.nan, self.inf or other.inf, self.neg_inf or other.neg_inf
        self.neg_zero = self.neg_zero and other.neg_zero
        self.exact.add_sum(other.exact)
        return self

    def acc(self) -> Any:
        """The accumulator the stage's fold ends with (the same window value, by the rules of
        :mod:`reaqtive.operators.window_aggregates`)."""
        if self.nan or (self.inf and self.neg_inf):
            return math.nan
        if self.inf or self.neg_inf:
            return math.inf if self.inf else -math.inf
        return -0.0 if self.neg_zero else self.exact


def _float_pick(extreme: float | None, nan_first: bool, first_zero: float | None) -> float | None:
    """The stage's floating-point ``min``/``max`` from Spark's (NaN passed over; ``None``: no value but NaN or
    null), whether the window's first value is NaN, and its first zero."""
    if nan_first:
        return math.nan  # nothing compares below (or above) a NaN accumulator: it stays
    if extreme == 0 and first_zero is not None:
        return first_zero  # -0.0 == 0.0: the first zero stays, with its sign
    return extreme
