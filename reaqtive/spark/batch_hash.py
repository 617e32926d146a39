"""``run_batch`` for window aggregates that do not depend on the order of their values: aggregated in the JVM.

``count``, ``min``, ``max`` and integer ``sum``/``average`` of a window are the same whatever order its values come
in, so Spark may aggregate them as it aggregates its own: a hash ``groupBy`` of (key, window, inner key) with
partial aggregation before the shuffle. One row per window and inner key reaches Python, not one per event. The rows
are still the per-key path's (:mod:`reaqtive.spark.table`), row for row, because each part of a row is exact in any
order:

* **the value**: a count; an integer sum as ``decimal(38,0)`` (exact; Python's ints do not overflow either, and an
  average is the same ``int / int`` as the stage's); an integer ``min``/``max``. A floating-point ``min``/``max``
  follows the stage's comparison (``value < acc``, the first of equal values stays): a window whose first value is
  NaN keeps NaN (nothing compares below it), any other NaN is passed over; a minimum (maximum) of zero is the first
  zero in event order (``-0.0 == 0.0``, so its sign is the first one's). Spark's own ``min``/``max`` put NaN above
  every number and do not order zeros, so the JVM gives the minimum without NaN, the first value and the first zero
  (``min_by`` over ``(time, sequence)``), and Python picks.
* **the order of rows**: a key's windows in time order, a window's inner keys in the order they first appeared (the
  least ``(time, sequence)`` of their events); ``seq`` numbers them.
* **the time of a row and what ends a key** are the window path's (:mod:`reaqtive.spark.batch_windows`): every
  window but a key's last closes at its end; the last as ``until`` and ``complete`` say.
* **a null value** ends the key with the per-key path's error row: the JVM keeps the ``(time, sequence)`` of a
  window's null values (rare: a list per window and inner key, empty without nulls) and its first non-null value's,
  which say at which event the fold of ``acc + value`` (or ``value < acc``) first meets a null and with which
  operand types; the error's text is made by running that operation. A window of one null value closes as the
  stage closes it (``sum``, ``min``, ``max``: a null; ``average``: the error of ``None / 1``).

Floating-point sums and averages are not here: their last bits depend on the order of additions (docs/spark.md,
"The batch path"); they take the sorted window path. A null time or sequence number is refused with
:class:`ValueError` (their events have no order; the per-key path fails on them too, or orders them by chance).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import pyarrow as pa
from pyspark.sql import functions as F  # noqa: N812  (Spark's idiom)

from reaqtive.spark.batch_windows import WindowPlan, _Aggregate, _WindowText
from reaqtive.spark.values import encode_values

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["hash_aggregable", "run_hashed"]

_ORDER_FREE: Final = frozenset({"count", "min", "max"})
_FLUSH_ROWS: Final = 10_000

Row = tuple[Any, int, int, Any, "str | None"]


def hash_aggregable(plan: WindowPlan) -> bool:
    """Whether the plan's windows are the same in any order of their values (see the module)."""
    return plan.kind in _ORDER_FREE or not plan.floating


def run_hashed(events: DataFrame, plan: WindowPlan, *, key: str, key_type: str, time: str, sequence: str,
               until: int | None, complete: bool, partitions: int, value_format: str) -> DataFrame:
    """The outputs ``key, seq, time_us, value, error`` of the plan's query over ``events`` (see the module)."""
    from reaqtive.spark.streaming import output_schema

    t = F.unix_micros(F.col(time).cast("timestamp"))
    s = F.col(sequence).cast("long")
    order = F.struct(t.alias("t"), s.alias("s"))
    window = t - F.pmod(t - F.lit(plan.offset), F.lit(plan.span))
    inner = F.lit(None) if plan.key_field is None else F.col(plan.key_field)
    aggregates: list[Column] = [
        F.count(F.lit(1)).alias("n"), F.min(order).alias("first"), F.max(t).alias("last"),
        F.count(F.when(s.isNull(), 1)).alias("unordered"),
    ]
    if plan.value_field is not None:
        v = F.col(plan.value_field).cast("double" if plan.floating else "bigint")
        aggregates += [F.collect_list(F.when(v.isNull(), order)).alias("nulls"),
                       F.min(F.when(v.isNotNull(), order)).alias("valued")]
        if plan.kind == "min":
            aggregates.append(F.min(v).alias("acc"))
        elif plan.kind == "max":
            aggregates.append(F.max(F.when(~F.isnan(v), v) if plan.floating else v).alias("acc"))
        else:  # an integer sum or average: exact
            aggregates.append(F.sum(v.cast("decimal(38,0)")).alias("acc"))
        if plan.floating:  # the stage's comparison: what Python picks from (see the module)
            aggregates += [F.min_by(v, order).alias("first_value"),
                           F.min_by(v, F.when(v == F.lit(0.0), order)).alias("first_zero")]
    groups = (events.groupBy(F.col(key).alias("key"), window.alias("w"), inner.alias("k")).agg(*aggregates)
              .repartition(partitions, "key").sortWithinPartitions("key", "w", "first"))
    return groups.mapInArrow(_HashedWindows(plan, key_type, value_format, until=until, complete=complete),
                             output_schema(key_type, value_format))


class _Group(NamedTuple):
    """One window and inner key of a key, as the JVM aggregated it: the window's start (µs since 1970), the inner
    key, the events, the first event's ``(time, sequence)``, the null values' and the first non-null value's, and
    the aggregate of the non-null values."""

    window: int
    inner: Any
    n: int
    first: tuple[int, int]
    nulls: list[tuple[int, int]]
    valued: tuple[int, int] | None
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

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows: list[Row] = []
        current: Any = None
        groups: list[_Group] = []
        last = 0
        started = False
        for batch in batches:
            for key, group, group_last in self._groups(batch):
                if not started or key != current:
                    if started:
                        rows += self._key(current, groups, last)
                    current, groups, last, started = key, [], group_last, True
                groups.append(group)
                last = max(last, group_last)
            if len(rows) >= _FLUSH_ROWS:
                yield self._batch(rows)
                rows = []
        if started:
            rows += self._key(current, groups, last)
        if rows:
            yield self._batch(rows)

    def _groups(self, batch: pa.RecordBatch) -> Iterator[tuple[Any, _Group, int]]:
        """Each row of ``batch`` as (key, group, its last event time)."""
        plan = self._plan
        columns = batch.to_pydict()
        count = batch.num_rows
        nothing = [None] * count
        valued = plan.value_field is not None
        nulls = columns["nulls"] if valued else [[]] * count
        firsts_valued = columns["valued"] if valued else nothing
        accs = columns["acc"] if valued else nothing
        first_values = columns.get("first_value", nothing)
        first_zeros = columns.get("first_zero", nothing)
        for index, (key, window, inner, n, first, last, unordered) in enumerate(zip(
                columns["key"], columns["w"], columns["k"], columns["n"], columns["first"], columns["last"],
                columns["unordered"], strict=True)):
            if window is None or unordered:
                raise ValueError(f"run_batch: key {key!r} has an event with a null time or sequence number; every "
                                 "event needs both (they order the key's events)")
            acc = accs[index]
            if plan.floating:
                acc = _float_pick(acc, first_values[index], first_zeros[index])
            elif type(acc) is Decimal:
                acc = int(acc)
            valued_at = firsts_valued[index]
            group = _Group(window, inner, n, (first["t"], first["s"]),
                           sorted((null["t"], null["s"]) for null in nulls[index]),
                           None if valued_at is None else (valued_at["t"], valued_at["s"]), acc)
            yield key, group, last

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
                when, text = failure
                rows.append((key, len(rows), when, self._no_value, text))
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
        """The first event of a window at which a fold meets a null, as ``(time, error text)``, or ``None``."""
        found: tuple[tuple[int, int], str] | None = None
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
        return None if found is None else (found[0][0], found[1])

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


def _float_pick(extreme: float | None, first: float | None, first_zero: float | None) -> float | None:
    """The stage's floating-point ``min``/``max`` from Spark's (NaN passed over; ``None``: no value but NaN or
    null), the window's first value and its first zero."""
    if first is not None and math.isnan(first):
        return first  # nothing compares below (or above) a NaN accumulator: it stays
    if extreme == 0 and first_zero is not None:
        return first_zero  # -0.0 == 0.0: the first zero stays, with its sign
    return extreme
