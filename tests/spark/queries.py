"""Queries, data and helpers of the Spark tests (a module of its own: Spark's Python workers import these
functions by name, and the crash test's driver process runs :func:`run_files`)."""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from operator import add
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reaqtive import Query, Tumbling

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

T0 = datetime(2026, 3, 1, tzinfo=UTC)
STREAM = "reaqtive://spark/events"
SCHEMA = "key string, at timestamp, seq bigint, kind string, amount bigint"
STALL_ENV = "REAQTIVE_TEST_STALL"
"""Crash tests: ``<marker path>:<seq>``: the first worker that meets event ``seq`` writes its working directory
(on a cluster, its executor's) into the marker and hangs; a retry after the kill finds the marker and goes on."""

Event = tuple[str, datetime, int, dict[str, Any]]


def kind_of(event: dict[str, Any]) -> object:
    return event["kind"]


def amount_of(event: dict[str, Any]) -> int:
    return int(event["amount"])


def window_sum(window: Query[int]) -> Query[int]:
    return window.sum()


def kind_totals(group: Query[dict[str, Any]]) -> Query[int]:
    """Per kind: the running total of the amounts, one value per minute of event time."""
    return group.map(amount_of).window(timedelta(minutes=1)).flat_map(window_sum).scan(0, add)


def tag_with_group(group: Any, total: int) -> list[object]:
    return [group.key, total]


def window_text(row: tuple[Any, datetime, datetime, int]) -> str:
    kind, start, _, total = row
    return f"{kind} {start:%H:%M} {total}"


def table_query() -> Query[Any]:
    """A query with a table form (reaqtive.spark.table): per key, each kind's sum per minute (aggregate_by_key),
    its large sums, as text, numbered."""
    return (Query.stream(STREAM).aggregate_by_key(kind_of, Tumbling(timedelta(minutes=1)), "sum", amount_of)
            .filter(large_sum).map(window_text).map_indexed(numbered))


def large_sum(row: tuple[Any, datetime, datetime, int]) -> bool:
    return row[3] > 150


def numbered(text: str, index: int) -> str:
    return f"{index}: {text}"


def totals_query() -> Query[Any]:
    """The acceptance query, per key: a group-by (on the kind), a time window and a scan."""
    return Query.stream(STREAM).group_by(kind_of).flat_map(kind_totals, tag_with_group)


def stall_when_told(event: dict[str, Any]) -> dict[str, Any]:
    """The crash tests' fault: hang (with a marker on disk) at the event named by ``REAQTIVE_TEST_STALL``, once."""
    told = os.environ.get(STALL_ENV)
    if told:
        marker, seq = told.rsplit(":", 1)
        if event["seq"] == int(seq) and not os.path.exists(marker):
            Path(marker).write_text(os.getcwd())
            time.sleep(600)  # keeps the batch in flight until the test kills the driver or the worker
    return event


def crash_query() -> Query[Any]:
    """The acceptance query, with the crash test's fault point in front."""
    return Query.stream(STREAM).map(stall_when_told).group_by(kind_of).flat_map(kind_totals, tag_with_group)


def events(count: int, keys: int, seed: int = 7, spacing: timedelta = timedelta(milliseconds=36)) -> list[Event]:
    """``count`` events ``(key, time, seq, payload)`` over ``keys`` keys, in time order, ``spacing`` apart."""
    rng = random.Random(seed)
    return [
        (f"k{rng.randrange(keys):06d}", T0 + i * spacing, i,
         {"kind": rng.choice("abc"), "amount": rng.randrange(100), "seq": i})
        for i in range(count)
    ]


def write_files(directory: Path, all_events: Sequence[Event], files: int) -> list[Path]:
    """The events as ``files`` Parquet files of equal size, in time order (``part-000.parquet``, ...)."""
    import pandas as pd

    directory.mkdir(parents=True, exist_ok=True)
    size = -(-len(all_events) // files)
    paths = []
    for number in range(files):
        chunk = all_events[number * size:(number + 1) * size]
        frame = pd.DataFrame({
            "key": [event[0] for event in chunk],
            "at": pd.to_datetime([event[1] for event in chunk], utc=True),
            "seq": [event[2] for event in chunk],
            "kind": [event[3]["kind"] for event in chunk],
            "amount": [event[3]["amount"] for event in chunk],
        })
        path = directory / f"part-{number:03d}.parquet"
        frame.to_parquet(path, coerce_timestamps="us", allow_truncated_timestamps=False, index=False)
        paths.append(path)
    return paths


def stream_of_files(spark: SparkSession, directory: Path) -> DataFrame:
    """The event files as a stream, one file per micro-batch."""
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(directory))


def run_files(spark: SparkSession, directory: Path, out: Path, checkpoint: Path, *, crash: bool = False,
              buckets: int = 4, initial_state: DataFrame | None = None,
              query: Query[Any] | None = None, **options: Any) -> StreamingQuery:
    """Run the (crash) query, or ``query``, over the event files into a Parquet file sink, until every file is
    processed (``options``: more arguments of ``run_stream``)."""
    from reaqtive.spark import run_stream

    if query is None:
        query = crash_query() if crash else totals_query()
    outputs = run_stream(stream_of_files(spark, directory), query, key="key", time="at", sequence="seq",
                         value=["kind", "amount", "seq"], buckets=buckets, initial_state=initial_state, **options)
    writer = (outputs.writeStream.format("parquet").option("path", str(out))
              .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True))
    running = writer.start()
    running.awaitTermination()
    return running


def sink_rows(spark: SparkSession, out: Path) -> list[tuple[Any, ...]]:
    """The file sink's rows (read through its ``_spark_metadata`` log), sorted, values decoded."""
    rows = spark.read.parquet(str(out)).collect()
    return sorted((row.key, row.seq, row.time, json.loads(row.value), row.error) for row in rows)


def plain_rows(rows: Sequence[tuple[Any, ...]]) -> list[tuple[Any, int, Any]]:
    """``(key, seq, value)`` of sink rows, for comparing with the embedded engine."""
    return sorted((row[0], row[1], row[3]) for row in rows)


def engine_totals(all_events: Sequence[Event], store: Path) -> list[tuple[Any, int, Any]]:
    """The acceptance query's outputs for ``all_events`` in the embedded engine, run to Spark's final watermark:
    ``(key, seq, value)``, sorted."""
    from reaqtive.engine import Engine
    from reaqtive.engine.expressions import FunctionRegistry
    from reaqtive.spark import embedded_query, final_watermark, per_key_outputs

    functions = FunctionRegistry()
    with Engine(store, functions=functions, start=T0) as engine:
        engine.create_stream(STREAM)
        engine.create_subscription("reaqtive://spark/totals", embedded_query(totals_query(), functions))
        engine.append_many(STREAM, [([key, payload], when) for key, when, _, payload in all_events])
        engine.process()
        engine.advance_time(final_watermark(all_events[-1][1]))
        return sorted(per_key_outputs(engine.outputs("reaqtive://spark/totals")))


SensorEvent = tuple[str, Any, int, float]
"""The README's input: ``(sensor, at, seq, reading)``, ``at`` a pandas ``Timestamp`` (nanoseconds)."""


def sensor_events(count: int = 400, sensors: int = 7, seed: int = 5) -> list[SensorEvent]:
    """Readings about 1.3 s apart, their times naive (pandas' ``datetime64[ns]``, which Spark takes as UTC) with
    nanosecond digits (pandas keeps them; Spark holds microseconds); the last on a whole minute (where the
    watermark ends: it closes the minute before)."""
    import pandas as pd

    rng = random.Random(seed)
    start = pd.Timestamp(T0).tz_localize(None)
    rows = [(f"s{rng.randrange(sensors)}", start + pd.Timedelta(nanoseconds=1_300_000_000 * i + rng.randrange(10**6)),
             i, float(rng.randrange(1000)) / 8) for i in range(count - 1)]
    last = start + pd.Timedelta(minutes=-(-1_300 * count // 60_000))
    rows.append(("s0", last, count - 1, 1.0))
    return rows


def write_sensor_files(directory: Path, events: Sequence[SensorEvent], files: int) -> None:
    """The readings as ``files`` Parquet files written with pandas' defaults (``at``: ``INT64 TIMESTAMP(NANOS)``)."""
    import pandas as pd

    directory.mkdir(parents=True, exist_ok=True)
    size = -(-len(events) // files)
    for number in range(files):
        frame = pd.DataFrame(events[number * size:(number + 1) * size], columns=["sensor", "at", "seq", "reading"])
        frame.to_parquet(directory / f"part-{number}.parquet")


def sensor_engine_rows(query: Query[Any], functions: dict[str, Any], events: Sequence[SensorEvent],
                       store: Path) -> list[tuple[str, int, Any]]:
    """``query`` (the README's, reading ``{"reading": ...}`` payloads) per sensor in the embedded engine over
    ``events`` at the microseconds Spark sees, until Spark's final watermark: ``(key, seq, value)``, each value as
    the JSON Spark writes, decoded."""
    from reaqtive.engine import Engine
    from reaqtive.engine.expressions import FunctionRegistry
    from reaqtive.spark import embedded_query, final_watermark, per_key_outputs
    from reaqtive.spark.values import canonical_json

    registry = FunctionRegistry()
    for name, function in functions.items():
        registry.register(name, function)
    times = [at.floor("us").tz_localize("UTC").to_pydatetime() for _, at, _, _ in events]
    with Engine(store, functions=registry, start=T0) as engine:
        engine.create_stream("sensors")
        engine.create_subscription("reaqtive://sensors/averages", embedded_query(query, registry))
        engine.append_many("sensors", [([sensor, {"reading": reading}], when)
                                       for (sensor, _, _, reading), when in zip(events, times, strict=True)])
        engine.process()
        engine.advance_time(final_watermark(times[-1]))
        outputs = per_key_outputs(engine.outputs("reaqtive://sensors/averages"))
    return sorted((key, seq, json.loads(canonical_json(value))) for key, seq, value in outputs)


def sink_values(rows: Sequence[Any]) -> list[tuple[Any, int, Any]]:
    """``(key, seq, decoded value)`` of output rows (``key, seq, time, value, error``) without errors, sorted."""
    errors = [row for row in rows if row[4] is not None]
    assert not errors, errors[:3]
    return sorted((row[0], row[1], json.loads(row[3])) for row in rows)


def sink_rows_json(spark: SparkSession, out: Path) -> list[list[Any]]:
    """The file sink's rows (read through its ``_spark_metadata`` log) as JSON-ready lists ``[key, seq, time,
    value, error]`` (``time`` as ISO text, ``value`` as written)."""
    return [[row.key, row.seq, row.time.isoformat(), row.value, row.error]
            for row in spark.read.parquet(str(out)).collect()]
