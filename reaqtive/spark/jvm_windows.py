"""``run_batch`` for a table of built-in window aggregates, aggregated in the JVM: one row per window reaches Python.

The query ``Query.stream(s).aggregate_by_key(key_selector, Tumbling(size), kind, value_selector)`` with ``kind``
one of ``count``, ``sum``, ``average``, ``min``, ``max``, and selectors that are field getters
(``itemgetter("name")``, ``def f(event): return event["name"]``; for the key also ``def f(event): return None``:
one inner key), is a ``groupBy`` Spark SQL can run: per Spark key, window start and inner key. The rows are the
ones the per-key path (:mod:`reaqtive.spark.table`) gives, row for row, because:

* **windows**: a batch delivers a key's events sorted by ``(time, sequence)``, so the key's clock is each event's
  time and an event falls in the window of its own time, ``t - pmod(t - origin, size)`` (Python's ``%`` floors,
  as ``pmod`` does). Every window but a key's last closes at its end (the next event is past it); the last
  closes at its end if ``until`` reaches it, else at the key's end with ``complete`` (stamped with the clock then,
  ``max(last event, until)``), else never. A window's rows come in the order its inner keys first appeared:
  ``seq`` is ``row_number`` over the key by ``(window start, first (time, sequence) of the inner key)``.
* **aggregates**: ``count`` is a count. Integer ``sum``/``average`` add exactly (``decimal(38,0)``; Python's ints
  do not round either), the average is then ``sum / count`` in Python, as the engine divides. Integer
  ``min``/``max`` do not depend on order. Floating-point ``sum``/``average``/``min``/``max`` fold the window's
  values **in event order** in the JVM (``aggregate`` over the values sorted by ``(time, sequence)``, starting
  from the first value): IEEE double addition and the comparisons are the same in the JVM as in CPython, so the
  same fold in the same order gives the same bits (negative zeros, infinities and NaN sums included). That is the
  choice among the ways to make a float sum independent of order (docs/spark.md, "The batch path").
* **what the engine would fail on**: a null or NaN value where the engine's fold would meet it (a null in a sum,
  NaN in ``min``/``max``, where Spark's comparison differs from Python's), a null time or sequence: such a key's
  events are carried to Python and run through the per-key path (:class:`~reaqtive.spark.batch.KeyFolder`), so
  its rows, errors included, are the per-key path's. Nothing else of the query is Python's.

A query, or input, outside this (a sequence column is needed: without it, events at one instant are ordered by
their payload's JSON, which the JVM does not write) takes the per-key path of :func:`~reaqtive.spark.run_batch`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa
from pyspark.sql import Window
from pyspark.sql import functions as F  # noqa: N812  (Spark's idiom)

from reaqtive.core.expression import is_expression
from reaqtive.core.scheduler_interface import utc
from reaqtive.operators.keyed_window import AggregateByKeyArgs
from reaqtive.scheduler.clock import EPOCH
from reaqtive.spark.pushdown import field_names, returns_none
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
    value: Column = F.lit(None)
    if plan.value_field is not None:
        value = F.col(plan.value_field).cast("double" if plan.floating else "bigint")
    t = F.unix_micros(F.col(time).cast("timestamp"))
    rows = events.select(
        F.col(key).alias("key"), t.alias("t"), F.col(sequence).cast("long").alias("s"),
        (F.lit(None) if plan.key_field is None else F.col(plan.key_field)).alias("k"), value.alias("v"),
    ).repartition(partitions, "key")  # one exchange: the groups and the key's window below need no other
    start = F.col("t") - F.pmod(F.col("t") - F.lit(plan.offset), F.lit(plan.span))
    unusual = F.col("t").isNull() | F.col("s").isNull()  # what the per-key path must see for itself
    if plan.value_field is not None:
        unusual = unusual | F.col("v").isNull()
        if plan.floating and plan.kind in ("min", "max"):
            unusual = unusual | F.isnan("v")
    groups = rows.groupBy("key", start.alias("ws"), "k").agg(
        F.count(F.lit(1)).alias("n"),
        F.min(F.struct("t", "s")).alias("first"),
        F.max("t").alias("last_t"),
        F.max(unusual.cast("int")).alias("unusual"),
        _aggregate(plan).alias("acc"),
        F.collect_list(F.struct("t", "s", "v")).alias("events"),
    )
    whole_key = Window.partitionBy("key")
    in_order = Window.partitionBy("key").orderBy("ws", "first")
    last_start = F.max("ws").over(whole_key)
    closed = F.col("ws") < last_start
    if until is not None:
        closed = closed | (F.col("ws") + F.lit(plan.span) <= F.lit(until))
    end_clock = F.max("last_t").over(whole_key)
    if until is not None:
        end_clock = F.greatest(end_clock, F.lit(until))
    per_key = F.max("unusual").over(whole_key) > 0
    windows = groups.select(
        "key", "ws", "k", "n", "acc", F.col("events").alias("folded"),
        (F.row_number().over(in_order) - 1).alias("seq"),
        F.when(closed, F.col("ws") + F.lit(plan.span)).otherwise(end_clock).alias("time_us"),
        per_key.alias("per_key"),
        F.when(per_key, F.col("events")).alias("events"),
        closed.alias("closed"),
    )
    if plan.floating:
        windows = windows.withColumn("acc", F.when(~F.col("per_key"), _fold_in_order(plan, F.col("folded"))))
    if not complete:
        windows = windows.where(F.col("closed") | F.col("per_key"))
    formatter = _Rows(plan, folder, key_type, value_format)
    from reaqtive.spark.streaming import output_schema

    return windows.mapInArrow(formatter, output_schema(key_type, value_format))


def _aggregate(plan: WindowPlan) -> Column:
    """The window's accumulator where the JVM's order does not matter (``None`` where it folds in order)."""
    if plan.value_field is None or plan.floating:
        return F.lit(None)
    if plan.kind in ("sum", "average"):
        return F.sum(F.col("v").cast("decimal(38,0)"))
    return (F.min if plan.kind == "min" else F.max)("v").cast("decimal(38,0)")


def _fold_in_order(plan: WindowPlan, events: Column) -> Column:
    """The floating-point accumulator: the window's values folded in event order, from the first value (as the
    engine's ``first``, then ``acc + value`` or the strict comparison that keeps the first of equal values)."""
    ordered = F.array_sort(events)  # by (t, s): the order the per-key path delivers them in
    first = F.element_at(ordered, 1).getField("v")
    rest = F.slice(ordered, 2, F.size(ordered))  # (empty for one value)
    if plan.kind in ("sum", "average"):
        return F.aggregate(rest, first, lambda acc, event: acc + event.getField("v"))
    if plan.kind == "min":
        return F.aggregate(rest, first, lambda acc, event: F.when(event.getField("v") < acc, event.getField("v"))
                           .otherwise(acc))
    return F.aggregate(rest, first, lambda acc, event: F.when(event.getField("v") > acc, event.getField("v"))
                       .otherwise(acc))


class _Rows:
    """The ``mapInArrow`` function: a window's row as the engine writes it, or a key's events run per key."""

    def __init__(self, plan: WindowPlan, folder: KeyFolder, key_type: str, value_format: str) -> None:
        self._plan = plan
        self._folder = folder
        self._value_format = value_format
        self._schema = pa.schema([
            ("key", _ARROW_KEYS[key_type]), ("seq", pa.int64()), ("time_us", pa.int64()),
            ("value", pa.string() if value_format == "json" else pa.binary()), ("error", pa.string()),
        ])

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        pending: list[tuple[Any, int, int, Any, str | None]] = []
        events: list[tuple[int, Any, Any]] = []
        current: Any = None
        for batch in batches:
            columns = batch.to_pydict()
            for key, start, inner, count, acc, seq, when, per_key, key_events in zip(
                columns["key"], columns["ws"], columns["k"], columns["n"], columns["acc"], columns["seq"],
                columns["time_us"], columns["per_key"], columns["events"], strict=True,
            ):
                if per_key:  # (the rows of a key are consecutive: partitioned and ordered by key)
                    if events and key != current:
                        pending += self._per_key(current, events)
                        events = []
                    current = key
                    payload = self._plan.payload
                    events += [(event["t"], event["s"], payload(inner, event["v"])) for event in key_events]
                    continue
                pending.append((key, seq, when, self._row(start, inner, count, acc), None))
            if pending:  # (a key run per key may go on in the next batch: it is run once its rows are all read)
                yield self._batch(pending)
                pending = []
        if events:
            yield self._batch(self._per_key(current, events))

    def _row(self, start: int, inner: Any, count: int, acc: Any) -> tuple[Any, datetime, datetime, Any]:
        plan = self._plan
        relative = start - plan.offset
        start_at = plan.origin + timedelta(microseconds=relative)
        end_at = plan.origin + timedelta(microseconds=relative + plan.span)
        return inner, start_at, end_at, _result(plan, count, acc)

    def _per_key(self, key: Any, events: list[tuple[int, Any, Any]]) -> list[tuple[Any, int, int, Any, str | None]]:
        return [(row.key, row.seq, row.time, row.value, row.error) for row in self._folder.fold(key, events)]

    def _batch(self, rows: list[tuple[Any, int, int, Any, str | None]]) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([
            pa.array([row[0] for row in rows], self._schema.field("key").type),
            pa.array([row[1] for row in rows], pa.int64()),
            pa.array([row[2] for row in rows], pa.int64()),
            pa.array(encode_values([row[3] for row in rows], self._value_format), self._schema.field("value").type),
            pa.array([row[4] for row in rows], pa.string()),
        ], schema=self._schema)


def _result(plan: WindowPlan, count: int, acc: Any) -> Any:
    """The window's value, as the engine computes it from its count and accumulator."""
    kind = plan.kind
    if kind == "count":
        return count
    if isinstance(acc, Decimal):
        acc = int(acc)
    return acc / count if kind == "average" else acc
