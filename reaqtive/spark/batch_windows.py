"""``run_batch`` for a table of built-in window aggregates: sorted in the JVM, folded over plain columns in Python.

The query ``Query.stream(s).aggregate_by_key(key_selector, Tumbling(size), kind, value_selector)`` with ``kind``
one of ``count``, ``sum``, ``average``, ``min``, ``max``, and selectors that are field getters
(``itemgetter("name")``, ``def f(event): return event["name"]``; for the key also ``def f(event): return None``:
one inner key) needs, per event, only its time, sequence number, inner key and value. The JVM sorts the events by
``(key, time, sequence)`` and hands those four columns to Python as Arrow arrays; Python walks each key's events
window by window, with no query, record or payload dict per event. The rows are the ones the per-key path
(:mod:`reaqtive.spark.table`) gives, row for row, because:

* **windows**: a batch delivers a key's events sorted by ``(time, sequence)``, so the key's clock is each event's
  time and an event falls in the window of its own time, ``t - (t - origin) % size``. Every window but a key's
  last closes at its end (the next event is past it); the last closes at its end if ``until`` reaches it, else
  at the key's end with ``complete`` (stamped with the clock then, ``max(last event, until)``), else never. A
  window's rows come in the order its inner keys first appeared.
* **aggregates**: the stage's own code (:class:`~reaqtive.operators.keyed_window.WindowAggregate`) folds each
  window's values as the stage does: floating-point sums exactly rounded (:func:`math.fsum` in C, with the stage's
  rules for infinities, NaN and negative zero), ``min``/``max`` compared the same way (NaN, negative zero) in
  event order, integers as Python ints.
* **what the fold would fail on**: a null value (``None + 1.0``), a null time or sequence: such a key's events
  run through the per-key path (:meth:`~reaqtive.spark.batch.KeyFolder.fold`), so its rows, errors included,
  are the per-key path's.

A float sum does not depend on the order of its values (exactly rounded on both sides), so
``run_batch(..., pre_aggregate=True)`` may also aggregate it in the JVM (:mod:`reaqtive.spark.batch_hash`).

A query, or input, outside this (a sequence column is needed: without it, events at one instant are ordered by
their payload's JSON) takes the per-key path of :func:`~reaqtive.spark.run_batch`.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import reduce
from operator import add
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F  # noqa: N812  (Spark's idiom)

from reaqtive.core.expression import is_expression
from reaqtive.core.scheduler_interface import utc
from reaqtive.operators.keyed_window import AggregateByKeyArgs, WindowAggregate
from reaqtive.operators.window_aggregates import sum_exact
from reaqtive.scheduler.clock import EPOCH
from reaqtive.spark.pushdown import field_names, returns_none
from reaqtive.spark.values import canonical_json as _json
from reaqtive.spark.values import encode_values

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from reaqtive.spark.batch import KeyFolder
    from reaqtive.spark.host import KeyedQuery

__all__ = ["WindowPlan", "plan_windows", "run_windows"]

_US: Final = timedelta(microseconds=1)
_KINDS: Final = frozenset({"count", "sum", "average", "min", "max"})
_INTEGRAL: Final = frozenset({"bigint", "int", "smallint", "tinyint"})
_FLOATING: Final = frozenset({"double", "float"})
_KEY_TYPES: Final = _INTEGRAL | {"string", "boolean"}
_FORMATS: Final = frozenset({"json", "binary"})
_COUNT_KIND: Final = WindowAggregate.parts("count")[0]
_MIN_KIND: Final = WindowAggregate.parts("min")[0]
_MAX_KIND: Final = WindowAggregate.parts("max")[0]
_ADDING: Final = frozenset({WindowAggregate.parts("sum")[0], WindowAggregate.parts("average")[0]})
_ARROW_KEYS: Final = {"string": pa.string(), "bigint": pa.int64(), "int": pa.int32(), "smallint": pa.int16(),
                      "tinyint": pa.int8()}


@dataclass(frozen=True)
class WindowPlan:
    """What the JVM computes for a query it can aggregate: the payload fields of the inner key (``None``: one
    inner key, ``None``) and of the value (``None`` for ``count``), the aggregate, whether the value is floating
    point, the window's size and origin in µs."""

    key_field: str | None
    value_field: str | None
    kind: str
    floating: bool
    span: int
    offset: int
    origin: datetime

    def payload(self, inner: Any, value: Any) -> dict[str, Any]:
        """An event's payload as the per-key path reads it: the fields the selectors read (nothing else of it can
        reach a row)."""
        payload = {} if self.key_field is None else {self.key_field: inner}
        if self.value_field is not None:
            payload[self.value_field] = value
        return payload


def plan_windows(keyed: KeyedQuery, events: DataFrame, *, key: str, time: str, value: object,
                 sequence: str | None, value_format: str) -> WindowPlan | None:
    """The JVM plan of ``keyed`` over ``events``, or ``None`` when the rows could differ from the per-key path's
    (see the module)."""
    if sequence is None or isinstance(value, str) or value_format not in _FORMATS or keyed.settings:
        return None
    node: Any = keyed.decoded()
    if not is_expression(node) or node.op != "aggregate_by_key":
        return None
    source = node.args[0]
    if not is_expression(source) or source.op != "stream" or source.args != (keyed.stream,):
        return None
    try:
        args = AggregateByKeyArgs.read(node)
    except Exception:
        return None  # the per-key path reports it as it always did
    if args.kind != "tumbling" or not isinstance(args.aggregate, str) or args.aggregate not in _KINDS:
        return None
    columns = {field.name: field.dataType.simpleString() for field in events.schema.fields}
    payload = set(value) if value is not None else set(columns) - {key, time, sequence}  # type: ignore[call-overload]
    key_field: str | None = None
    if not returns_none(args.key_selector):
        key_field = _single_field(args.key_selector)
        if key_field is None or key_field not in payload or columns.get(key_field) not in _KEY_TYPES:
            return None
    value_field: str | None = None
    floating = False
    if args.aggregate != "count":
        value_field = _single_field(args.value_selector)
        if value_field is None or value_field not in payload:
            return None
        value_type = columns.get(value_field)
        if value_type not in _INTEGRAL | _FLOATING:
            return None
        floating = value_type in _FLOATING
    origin = utc(args.origin)
    return WindowPlan(key_field, value_field, args.aggregate, floating, args.window[1] // _US,
                      (origin - EPOCH) // _US, origin)


def _single_field(function: object) -> str | None:
    names = field_names(function)
    return next(iter(names)) if names is not None and len(names) == 1 else None


def run_windows(events: DataFrame, plan: WindowPlan, folder: KeyFolder, *, key: str, key_type: str, time: str,
                sequence: str, until: int | None, complete: bool, partitions: int, value_format: str) -> DataFrame:
    """The outputs ``key, seq, time_us, value, error`` of the plan's query over ``events`` (see the module)."""
    from reaqtive.spark.streaming import output_schema

    value: Column = F.lit(None)
    if plan.value_field is not None:
        value = F.col(plan.value_field).cast("double" if plan.floating else "bigint")
    rows = events.select(
        F.col(key).alias("key"), F.unix_micros(F.col(time).cast("timestamp")).alias("t"),
        F.col(sequence).cast("long").alias("s"),
        (F.lit(None) if plan.key_field is None else F.col(plan.key_field)).alias("k"), value.alias("v"),
    ).repartition(partitions, "key").sortWithinPartitions("key", "t", "s")
    return rows.mapInArrow(_Windows(plan, folder, key_type, value_format, until=until, complete=complete),
                           output_schema(key_type, value_format))


class _Key:
    """One key's events as columns, in order (the sequence numbers stay Arrow slices: only a key run per key
    reads them)."""

    __slots__ = ("inner", "key", "maybe_null", "orders", "times", "values")

    def __init__(self, key: Any) -> None:
        self.key = key
        self.times: list[Any] = []
        self.orders: list[pa.Array] = []
        self.inner: list[Any] = []
        self.values: list[Any] = []
        self.maybe_null = False
        """Whether a batch it came in holds a null where the fold would meet it."""

    def sequence(self) -> list[Any]:
        return [order for part in self.orders for order in part.to_pylist()]


class _WindowText:
    """What both window paths share: a window's rows as the stage writes them, and output batches."""

    def __init__(self, plan: WindowPlan, key_type: str, value_format: str) -> None:
        self._plan = plan
        self._value_format = value_format
        self._starts: dict[int, tuple[datetime, datetime]] = {}
        self._starts_json: dict[int, str] = {}
        self._json = value_format == "json"
        self._schema = pa.schema([
            ("key", _ARROW_KEYS[key_type]), ("seq", pa.int64()), ("time_us", pa.int64()),
            ("value", pa.string() if value_format == "json" else pa.binary()), ("error", pa.string()),
        ])

    def window_rows(self, key: Any, seq: int, when: int, start: int,
                    results: list[tuple[Any, Any]]) -> list[tuple[Any, int, int, Any, str | None]]:
        """The rows of the window starting at ``start`` (µs since 1970), closed at ``when``: one per ``(inner key,
        result)``, numbered from ``seq``."""
        rows: list[tuple[Any, int, int, Any, str | None]] = []
        if self._json:  # the canonical JSON of the row, written directly (the bounds' text is shared)
            between = self._bounds_json(start)
            for name, value in results:
                rows.append((key, seq + len(rows), when, "[" + _json(name) + between + _json(value) + "]", None))
        else:
            bounds = self._bounds(start)
            for name, value in results:
                encoded = encode_values([(name, *bounds, value)], self._value_format)[0]
                rows.append((key, seq + len(rows), when, encoded, None))
        return rows

    def _bounds_json(self, start: int) -> str:
        """``,"start","end",`` as the row's canonical JSON has them."""
        text = self._starts_json.get(start)
        if text is None:
            if len(self._starts_json) >= _BOUNDS_CACHE:
                self._starts_json.clear()
            start_at, end_at = self._bounds(start)
            text = self._starts_json[start] = "," + _json(start_at) + "," + _json(end_at) + ","
        return text

    def _bounds(self, start: int) -> tuple[datetime, datetime]:
        """A window's start and end as the stage writes them (the keys of a partition share their windows)."""
        bounds = self._starts.get(start)
        if bounds is None:
            if len(self._starts) >= _BOUNDS_CACHE:
                self._starts.clear()
            plan = self._plan
            relative = start - plan.offset
            bounds = self._starts[start] = (plan.origin + timedelta(microseconds=relative),
                                            plan.origin + timedelta(microseconds=relative + plan.span))
        return bounds

    def _batch(self, rows: list[tuple[Any, int, int, Any, str | None]]) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([
            pa.array([row[0] for row in rows], self._schema.field("key").type),
            pa.array([row[1] for row in rows], pa.int64()),
            pa.array([row[2] for row in rows], pa.int64()),
            pa.array([row[3] for row in rows], self._schema.field("value").type),  # (encoded already)
            pa.array([row[4] for row in rows], pa.string()),
        ], schema=self._schema)


class _Windows(_WindowText):
    """The ``mapInArrow`` function: a partition's events sorted by key, time and sequence in; per key, its
    windows' rows as the stage writes them (or the key run per key) out."""

    def __init__(self, plan: WindowPlan, folder: KeyFolder, key_type: str, value_format: str, *, until: int | None,
                 complete: bool) -> None:
        super().__init__(plan, key_type, value_format)
        self._folder = folder
        self._until = until
        self._complete = complete
        self._aggregate = _Aggregate(plan.kind, floats=plan.floating)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows: list[tuple[Any, int, int, Any, str | None]] = []
        current: _Key | None = None
        checked = ("t", "s", "v") if self._plan.value_field is not None else ("t", "s")
        for batch in batches:
            column = batch.column("key")
            keys = column.to_pylist()
            times, orders = batch.column("t").to_pylist(), batch.column("s")
            values = batch.column("v").to_pylist() if self._plan.value_field is not None else None
            inner = batch.column("k").to_pylist() if self._plan.key_field is not None else None
            maybe_null = any(batch.column(name).null_count for name in checked)
            start = 0
            for end in [*_changes(column), len(keys)]:  # one run of a key after the other
                if current is None or keys[start] != current.key:
                    if current is not None:
                        rows += self._key(current)
                    current = _Key(keys[start])
                current.times += times[start:end]
                current.orders.append(orders.slice(start, end - start))
                if values is not None:
                    current.values += values[start:end]
                if inner is not None:
                    current.inner += inner[start:end]
                current.maybe_null |= maybe_null
                start = end
            if len(rows) >= _FLUSH_ROWS:
                yield self._batch(rows)
                rows = []
        if current is not None:
            rows += self._key(current)
        if rows:
            yield self._batch(rows)

    def _key(self, key: _Key) -> list[tuple[Any, int, int, Any, str | None]]:
        if key.maybe_null and (None in key.times or None in key.sequence() or (
                self._plan.value_field is not None and None in key.values)):
            return self._per_key(key)
        return self._windows(key)

    def _windows(self, key: _Key) -> list[tuple[Any, int, int, Any, str | None]]:
        """A key's rows: windows in order, a window's inner keys in the order they first appeared."""
        plan, until = self._plan, self._until
        times, inner = key.times, key.inner
        values = key.values if plan.value_field is not None else [None] * len(times)  # (a count reads none)
        span, offset = plan.span, plan.offset
        one_key = plan.key_field is None
        fold, first, step, result = self._aggregate.fold, self._aggregate.first, self._aggregate.step, \
            self._aggregate.result
        rows: list[tuple[Any, int, int, Any, str | None]] = []
        count = len(times)
        index = 0
        while index < count:
            begin = times[index]
            start = begin - (begin - offset) % span
            end = start + span
            stop = bisect_left(times, end, index)
            if stop < count or (until is not None and end <= until):
                when = end
            elif self._complete:
                when = times[-1] if until is None else max(times[-1], until)
            else:
                break  # the key's last window is still open
            if one_key:
                groups = [(None, stop - index, fold(values, index, stop))]
            else:
                windows: dict[Any, list[Any]] = {}
                for position in range(index, stop):
                    record = windows.get(inner[position])
                    if record is None:
                        windows[inner[position]] = [1, first(values[position])]
                    else:
                        record[0] += 1
                        record[1] = step(record[1], values[position])
                groups = [(name, number, acc) for name, (number, acc) in windows.items()]
            rows += self.window_rows(key.key, len(rows), when, start,
                                     [(name, result(number, acc)) for name, number, acc in groups])
            index = stop
        return rows

    def _per_key(self, key: _Key) -> list[tuple[Any, int, int, Any, str | None]]:
        """A key whose fold would meet a null (or whose times are null): its events run through the per-key path,
        as without this module."""
        payload, count = self._plan.payload, len(key.times)
        inner = key.inner or [None] * count
        values = key.values or [None] * count
        events = [(when, order, payload(name, value))
                  for when, order, name, value in zip(key.times, key.sequence(), inner, values, strict=True)]
        outputs = self._folder.fold(key.key, events)
        values = encode_values([row.value for row in outputs], self._value_format)
        return [(row.key, row.seq, row.time, value, row.error) for row, value in zip(outputs, values, strict=True)]



_FLUSH_ROWS: Final = 10_000
_BOUNDS_CACHE: Final = 4096


def _changes(keys: pa.Array) -> list[int]:
    """The positions where the key differs from the one before."""
    if len(keys) < 2:
        return []
    after, before = keys.slice(1), keys.slice(0, len(keys) - 1)
    different = pc.not_equal(after, before)
    if keys.null_count:  # (not_equal is null beside a null key: a null next to a value differs from it)
        different = pc.if_else(pc.is_null(different), pc.xor(pc.is_null(after), pc.is_null(before)), different)
    return [index + 1 for index in pc.indices_nonzero(different).to_pylist()]


class _Aggregate(WindowAggregate):
    """The stage's own aggregate: each window's value is computed by the stage's code."""

    __slots__ = ("_accumulator", "_floats", "_kind", "_result_selector", "_seed", "first", "result", "step")

    def __init__(self, kind: str, *, floats: bool = False) -> None:
        self._kind, self._seed, self._accumulator, self._result_selector = self.parts(kind)
        self._floats = floats
        self.first, self.step, self.result = self._first, self._step, self._result

    def fold(self, values: list[Any], begin: int, end: int) -> Any:
        """The accumulator of the window of ``values[begin:end]``, as the stage's fold leaves it: the exactly
        rounded sum (``sum``, ``average``: :func:`~reaqtive.operators.window_aggregates.sum_exact`, in C for a
        column of floats; Python's ints for an integer column), or the strict comparison that keeps the first of
        equal values (``min``, ``max``: what the built-ins do: an item replaces the current one only if ``item <
        current``); a count reads none."""
        kind = self._kind
        if kind == _COUNT_KIND:
            return None
        if kind in _ADDING:
            return sum_exact(values[begin:end], floats=True) if self._floats else \
                reduce(add, values[begin:end])
        if kind == _MIN_KIND:
            return min(values[begin:end])
        if kind == _MAX_KIND:
            return max(values[begin:end])
        step = self._step  # (no other kind is planned: the stage's own step, value by value)
        acc = self._first(values[begin])
        for position in range(begin + 1, end):
            acc = step(acc, values[position])
        return acc
