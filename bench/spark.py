"""Spark costs: reaqtive's keyed runners against native Spark on the same query and events, in one run.

Run: .venv/bin/python bench/spark.py [--keys 100,10000,100000] [--events N] [--repeat R] [--buckets B]
[--master spark://HOST:PORT --py-files reaqtive.zip [--conf NAME=VALUE ...]]

(needs the ``spark`` extra and Java 17+; ``make bench`` runs it with the defaults, about 10 minutes on 2 cores).
By default Spark runs in the bench's process, ``local[2]``; ``--master`` runs the same on a cluster (the executors
import reaqtive from the ``--py-files`` zip; ``python -m tests.spark.cluster`` starts a 2-worker standalone
cluster on this machine and prints both).

**Native comparison (the default; the targets of issue 18).** The query, per sensor: the average reading of each
one-minute tumbling window (``aggregate_by_key`` with ``Tumbling``, the README's example). For each key count K,
N events (default 100,000) over K sensors, spread over 10 minutes of event time in whole milliseconds, written as
5 Parquet files (one per micro-batch, so the watermark closes windows batch after batch), read in one Spark
session (local[2]):

* **native stream**: ``withWatermark(at, 0).groupBy(sensor, window(at, 1 minute)).avg(reading)``, append mode,
  into Parquet, ``maxFilesPerTrigger=1``, ``availableNow``;
* **run_stream**: the reaqtive query on the same stream (4 buckets), into Parquet;
* **native batch**: the same ``groupBy`` on all the files at once, written to Parquet;
* **run_batch**: the reaqtive query on all the files at once (``until`` the stream's final watermark), to Parquet;
* **plain loop**: the same per-sensor, per-minute averages in dicts (the floor any engine is measured against).

``--aggregate count|max|min|sum`` measures another aggregate on every side (the average is the README's);
``--pre-aggregate`` runs ``run_batch(pre_aggregate=True)``, which aggregates every one of them (float sums and
averages exactly rounded) in the JVM before the shuffle (docs/spark.md, "Batch: backfill and replay").

The runs are interleaved (native stream, run_stream, native stream, run_stream, ...; then the batches alike), each
on a fresh output and checkpoint; a side's figure is the best of its ``--repeat`` runs. A streaming run's figure is
the median of its batches' ``triggerExecution`` (batches with input rows). The table at the end gives the ratios to
native Spark and the issues' targets: 100 keys: run_stream <= 1.3x native per batch; 10,000 keys: <= 1.5x; 100,000
keys: stated; run_batch <= 1.5x native batch.

The outputs are checked: the (sensor, window start, average) rows of native stream and run_stream (and of native
batch and run_batch, on the windows the final watermark closes) are compared and any difference is printed; a
difference between run_stream and run_batch fails the run (exit code 1). With the lead's worker-side live cache
(``run_stream(stats_dir=...)``, ``reaqtive.spark.live.read_stats``) each run_stream reports its cache counters.

**Acceptance query (``--only totals``).** The former bench: per key, a group-by on the event's kind, a one-minute
window sum, a running total of the window sums (the acceptance query of ``tests/spark``), through a plain loop,
the embedded engine (``reaqtive.spark.embedded_query``, durable ingress, a checkpoint per micro-batch's worth of
events), ``run_stream`` (one file per micro-batch) and ``run_batch``; defaults: 1,000,000 events over 100,000 keys
in 10 files, 8 buckets. The runs must agree on the number of outputs (exit code 1 otherwise).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from operator import add
from pathlib import Path
from typing import Any

from reaqtive import Query, Tumbling
from reaqtive.engine import Engine, FunctionRegistry

T0 = datetime(2026, 3, 1, tzinfo=UTC)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)


def say(line: str) -> None:
    print(line, flush=True)


def micros(when: datetime) -> int:
    return (when - EPOCH) // MICROSECOND


# =================================================================================================================
# The native comparison (the default)
# =================================================================================================================

SENSOR_SCHEMA = "sensor string, at timestamp, seq bigint, reading double"
NATIVE_SCHEMA = "sensor string, window struct<start: timestamp, end: timestamp>, average double"
REAQTIVE_SCHEMA = "key string, seq bigint, time timestamp, value string, error string"
# Ten minutes of event time whatever the event count: each of the 5 files covers two minutes, so every batch's
# watermark closes windows, and a key with a few events still sees several of them.
SENSOR_SPAN = timedelta(minutes=10)
MINUTE_US = 60_000_000
STREAM_TARGETS: dict[int, float | str] = {100: 1.3, 10_000: 1.5, 100_000: "stated"}  # issue 35 (10,000: was 2x)
BATCH_TARGET = 1.5

SensorEvent = tuple[str, datetime, int, float]
Row = tuple[str, int, float]  # sensor, window start (µs since the epoch), average rounded to 9 digits


# -- the query ------------------------------------------------------------------------------------------------------

def no_key(event: Any) -> None:
    return None  # each sensor runs its own instance of the query already: one key inside it


def reading(event: Any) -> Any:
    return event["reading"]


SENSOR_FUNCTIONS = {"no_key": no_key, "reading": reading}


AGGREGATES = ("average", "count", "max", "min", "sum")
AGGREGATE = "average"  # --aggregate: the README's average (a float average folds in event order in run_batch)
PRE_AGGREGATE = False  # --pre-aggregate: run_batch(pre_aggregate=True) (the aggregate is computed in the JVM)


def per_sensor_query() -> Query[Any]:
    return Query.stream("sensors").aggregate_by_key(no_key, Tumbling(timedelta(minutes=1)), AGGREGATE, reading)


def native_aggregate() -> Any:
    """Native Spark's aggregate of ``reading`` for ``AGGREGATE``, as a double (the rows compare as numbers)."""
    from pyspark.sql import functions as F  # noqa: N812

    function = {"average": F.avg, "count": F.count, "max": F.max, "min": F.min, "sum": F.sum}[AGGREGATE]
    return function("reading").cast("double").alias("average")


# -- data -----------------------------------------------------------------------------------------------------------

def make_sensor_events(count: int, keys: int, seed: int = 5) -> list[SensorEvent]:
    rng = random.Random(seed)
    span_ms = SENSOR_SPAN // timedelta(milliseconds=1)
    # Quarter readings are exact in binary: a sum is the same whatever order Spark's partial aggregation adds in,
    # so the averages of the two sides compare exactly.
    return [(f"s{rng.randrange(keys):06d}", T0 + timedelta(milliseconds=i * span_ms // count), i,
             rng.randrange(400) / 4) for i in range(count)]


def write_sensor_files(directory: Path, events: Sequence[SensorEvent], files: int) -> None:
    import pandas as pd

    directory.mkdir(parents=True)
    size = -(-len(events) // files)
    for number in range(files):
        chunk = events[number * size:(number + 1) * size]
        pd.DataFrame({
            "sensor": [e[0] for e in chunk],
            "at": pd.to_datetime([e[1] for e in chunk], utc=True),
            "seq": [e[2] for e in chunk],
            "reading": [e[3] for e in chunk],
        }).to_parquet(directory / f"part-{number:03d}.parquet", coerce_timestamps="us", index=False)


# -- the runs -------------------------------------------------------------------------------------------------------

@dataclass
class StreamRun:
    seconds: float
    latencies: list[float]  # triggerExecution of each batch with input rows, in seconds
    rows: set[Row]
    errors: int = 0
    cache: dict[str, int] | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.latencies)


@dataclass
class BatchRun:
    seconds: float
    rows: set[Row]
    errors: int = 0


def plain_averages(events: Sequence[SensorEvent], until_us: int) -> tuple[float, set[Row]]:
    """Per sensor, the ``AGGREGATE`` (by default the average) of each minute's readings, the minute closed by the
    sensor's next minute or, at the end, by ``until_us`` (the rows a stream emits): seconds and rows."""
    step = {"average": add, "sum": add, "count": add, "max": max, "min": min}[AGGREGATE]

    def result(acc: float, count: int) -> float:
        return acc / count if AGGREGATE == "average" else float(count) if AGGREGATE == "count" else acc

    started = time.perf_counter()
    open_minute: dict[str, int] = {}
    accs: dict[str, float] = {}
    counts: dict[str, int] = {}
    rows: set[Row] = set()
    for sensor, when, _, value in events:
        minute = micros(when) // MINUTE_US
        current = open_minute.get(sensor)
        if current != minute:
            if current is not None:
                rows.add((sensor, current * MINUTE_US, round(result(accs[sensor], counts[sensor]), 9)))
            open_minute[sensor] = minute
            accs[sensor] = value
            counts[sensor] = 1
            continue
        accs[sensor] = step(accs[sensor], value)
        counts[sensor] += 1
    for sensor, minute in open_minute.items():
        if (minute + 1) * MINUTE_US <= until_us:
            rows.add((sensor, minute * MINUTE_US, round(result(accs[sensor], counts[sensor]), 9)))
    return time.perf_counter() - started, rows


def native_rows(spark: Any, path: Path) -> set[Row]:
    from pyspark.sql import functions as F  # noqa: N812  (Spark's idiom)

    frame = spark.read.schema(NATIVE_SCHEMA).parquet(str(path))
    return {(r[0], r[1], round(r[2], 9)) for r in
            frame.select("sensor", F.unix_micros("window.start"), "average").collect()}


def reaqtive_rows(spark: Any, path: Path) -> tuple[set[Row], int]:
    """The rows of a reaqtive output (each value ``[null, start, end, average]`` as canonical JSON, the datetimes
    in ISO 8601) and how many rows carry an error."""
    rows: set[Row] = set()
    errors = 0
    for key, value, error in spark.read.schema(REAQTIVE_SCHEMA).parquet(str(path)).select(
            "key", "value", "error").collect():
        if error is not None:
            errors += 1
            continue
        _, start, _, average = json.loads(value)
        rows.add((key, micros(datetime.fromisoformat(start)), round(average, 9)))
    return rows, errors


def batch_latencies(running: Any) -> list[float]:
    return [p["durationMs"]["triggerExecution"] / 1e3 for p in running.recentProgress if p["numInputRows"] > 0]


def native_stream(spark: Any, files: Path, scratch: Path) -> StreamRun:
    from pyspark.sql import functions as F  # noqa: N812

    events = spark.readStream.schema(SENSOR_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(files))
    averages = (events.withWatermark("at", "0 milliseconds").groupBy("sensor", F.window("at", "1 minute"))
                .agg(native_aggregate()))
    started = time.perf_counter()
    running = (averages.writeStream.format("parquet").outputMode("append").option("path", str(scratch / "out"))
               .option("checkpointLocation", str(scratch / "ckpt")).trigger(availableNow=True).start())
    running.awaitTermination()
    seconds = time.perf_counter() - started
    return StreamRun(seconds, batch_latencies(running), native_rows(spark, scratch / "out"))


def reaqtive_stream(spark: Any, files: Path, scratch: Path, buckets: int) -> StreamRun:
    from reaqtive.spark import run_stream

    events = spark.readStream.schema(SENSOR_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(files))
    from reaqtive.spark.live import read_stats

    stats = scratch / "stats"
    outputs = run_stream(events, per_sensor_query(), key="sensor", time="at", sequence="seq", value=["reading"],
                         buckets=buckets, functions=SENSOR_FUNCTIONS, stats_dir=stats)
    started = time.perf_counter()
    running = (outputs.writeStream.format("parquet").option("path", str(scratch / "out"))
               .option("checkpointLocation", str(scratch / "ckpt")).trigger(availableNow=True).start())
    running.awaitTermination()
    seconds = time.perf_counter() - started
    rows, errors = reaqtive_rows(spark, scratch / "out")
    return StreamRun(seconds, batch_latencies(running), rows, errors, read_stats(stats))


def native_batch(spark: Any, files: Path, scratch: Path, until_us: int) -> BatchRun:
    from pyspark.sql import functions as F  # noqa: N812

    started = time.perf_counter()
    (spark.read.schema(SENSOR_SCHEMA).parquet(str(files)).groupBy("sensor", F.window("at", "1 minute"))
     .agg(native_aggregate()).write.parquet(str(scratch / "out")))
    seconds = time.perf_counter() - started
    # Native batch has every window, the last open ones too; the comparison takes those the watermark closes.
    closed = {row for row in native_rows(spark, scratch / "out") if row[1] + MINUTE_US <= until_us}
    return BatchRun(seconds, closed)


def reaqtive_batch(spark: Any, files: Path, scratch: Path, until: datetime) -> BatchRun:
    from reaqtive.spark import run_batch

    started = time.perf_counter()
    events = spark.read.schema(SENSOR_SCHEMA).parquet(str(files))
    outputs = run_batch(events, per_sensor_query(), key="sensor", time="at", sequence="seq", value=["reading"],
                        until=until, functions=SENSOR_FUNCTIONS, pre_aggregate=PRE_AGGREGATE)
    outputs.write.parquet(str(scratch / "out"))
    seconds = time.perf_counter() - started
    rows, errors = reaqtive_rows(spark, scratch / "out")
    return BatchRun(seconds, rows, errors)


# -- reporting ------------------------------------------------------------------------------------------------------

def difference(name: str, mine: set[Row], theirs: set[Row], other: str) -> str:
    """``outputs agree``, or how ``mine`` and ``theirs`` differ, saying when only the last windows differ."""
    if mine == theirs:
        return f"{name} and {other}: outputs agree ({len(mine):,} rows)"
    only_mine, only_theirs = mine - theirs, theirs - mine
    last_start = max(row[1] for row in mine | theirs)
    where = ("only in the last window" if all(row[1] == last_start for row in only_mine | only_theirs)
             else "windows " + ", ".join(sorted({datetime.fromtimestamp(row[1] / 1e6, UTC).strftime("%H:%M")
                                                for row in only_mine | only_theirs})))
    return (f"{name} and {other}: outputs DIFFER ({len(mine):,} vs {len(theirs):,} rows; {len(only_mine):,} only "
            f"in {name}, {len(only_theirs):,} only in {other}; {where})")


def cache_line(cache: dict[str, int] | None, batches: int) -> str:
    """The live cache's counters and reaqtive's own Python time (both workers' CPU seconds per batch)."""
    if cache is None:
        return "cache statistics: n/a"
    hits, misses, stale = cache["hits"], cache["misses"], cache["stale"]
    lookups = hits + misses + stale
    rate = f"{100 * hits / lookups:.1f}%" if lookups else "n/a"
    python = cache["python_us"] / 1e6 / max(batches, 1)
    keys = cache["reused"] + cache["decoded"]
    reuse = f"{100 * cache['reused'] / keys:.1f}%" if keys else "n/a"
    return (f"cache: buckets: hits {hits:,}, misses {misses:,}, stale {stale:,} (hit rate {rate}); keys: "
            f"{cache['reused']:,} went on live, {cache['decoded']:,} decoded (live {reuse}); reaqtive's Python "
            f"{python:.3f} CPU s per batch ({cache['calls']:,} bucket calls)")


def target_text(ratio: float, target: float | str) -> str:
    if isinstance(target, str):
        return target
    return f"<= {target:g}x {'met' if ratio <= target else 'MISSED'}"


@dataclass
class KeysResult:
    keys: int
    events: int
    loop_s: float
    native_stream: list[StreamRun]
    reaqtive_stream: list[StreamRun]
    native_batch: list[BatchRun]
    reaqtive_batch: list[BatchRun]


def compare_keys(spark: Any, scratch: Path, keys: int, args: argparse.Namespace) -> tuple[KeysResult, bool]:
    """One key count: the runs, interleaved, their lines, the checks; the result and whether run_stream and
    run_batch agree."""
    from reaqtive.spark import final_watermark

    events_count, files, buckets, repeat = args.events, args.batches, args.buckets, args.repeat

    events = make_sensor_events(events_count, keys)
    write_sensor_files(scratch / "in", events, files)
    until = final_watermark(events[-1][1])
    until_us = micros(until)
    say(f"\n== {keys:,} keys: {events_count:,} events, {files} files (micro-batches), {buckets} buckets, "
        f"{spark.sparkContext.master}")
    loops = [plain_averages(events, until_us) for _ in range(repeat)]
    loop_s, loop_rows = min(loops, key=lambda pair: pair[0])
    say(f"plain loop: {events_count / loop_s:,.0f} events/s ({loop_s:.3f} s, {len(loop_rows):,} closed windows)")

    def stream_line(name: str, run: StreamRun) -> str:
        return (f"{name}: median {run.median:.3f} s/batch, max {max(run.latencies):.3f} s, {len(run.latencies)} "
                f"batches, total {run.seconds:.2f} s ({events_count / run.seconds:,.0f} events/s, x loop "
                f"{run.seconds / loop_s:.0f}; {len(run.rows):,} rows)")

    result = KeysResult(keys, events_count, loop_s, [], [], [], [])
    for number in range(1, 0 if args.skip_stream else repeat + 1):
        run = native_stream(spark, scratch / "in", scratch / f"native-stream-{number}")
        result.native_stream.append(run)
        say(stream_line(f"native stream #{number}", run))
        run = reaqtive_stream(spark, scratch / "in", scratch / f"run-stream-{number}", buckets)
        result.reaqtive_stream.append(run)
        say(stream_line(f"run_stream #{number}   ", run) + (f"; {run.errors:,} ERROR rows" if run.errors else ""))
        say(f"  {cache_line(run.cache, len(run.latencies))}")
    reaqtive = result.reaqtive_stream[0].rows if result.reaqtive_stream else loop_rows
    if result.reaqtive_stream:
        say(difference("native stream", result.native_stream[0].rows, reaqtive, "run_stream"))
        say(difference("plain loop", loop_rows, reaqtive, "run_stream"))
    agree = True
    if not args.skip_batch:
        for number in range(1, repeat + 1):
            batch = native_batch(spark, scratch / "in", scratch / f"native-batch-{number}", until_us)
            result.native_batch.append(batch)
            say(f"native batch #{number}: {batch.seconds:.2f} s ({events_count / batch.seconds:,.0f} events/s, x loop "
                f"{batch.seconds / loop_s:.0f})")
            batch = reaqtive_batch(spark, scratch / "in", scratch / f"run-batch-{number}", until)
            result.reaqtive_batch.append(batch)
            say(f"run_batch #{number}:    {batch.seconds:.2f} s ({events_count / batch.seconds:,.0f} events/s, x loop "
                f"{batch.seconds / loop_s:.0f}; {len(batch.rows):,} rows"
                + (f"; {batch.errors:,} ERROR rows)" if batch.errors else ")"))
        say(difference("native batch (closed windows)", result.native_batch[0].rows, result.reaqtive_batch[0].rows,
                       "run_batch"))
        line = difference("run_stream" if result.reaqtive_stream else "plain loop", reaqtive,
                          result.reaqtive_batch[0].rows, "run_batch")
        agree = reaqtive == result.reaqtive_batch[0].rows and not any(
            run.errors for run in result.reaqtive_stream + result.reaqtive_batch)
        say(line)
    return result, agree


def print_tables(results: Sequence[KeysResult]) -> None:
    say("\n| keys | native stream median s/batch | run_stream median s/batch | ratio | target | native batch s "
        "| run_batch s | ratio | target |")
    say("|---:|---:|---:|---:|---|---:|---:|---:|---|")
    for r in results:
        cells = [f"{r.keys:,}", "-", "-", "-", "-"]
        if r.reaqtive_stream:
            native = min(run.median for run in r.native_stream)
            ours = min(run.median for run in r.reaqtive_stream)
            stream_ratio = ours / native
            cells[1:] = [f"{native:.3f}", f"{ours:.3f}", f"{stream_ratio:.2f}x",
                         target_text(stream_ratio, STREAM_TARGETS.get(r.keys, "-"))]
        if r.native_batch:
            native_b = min(run.seconds for run in r.native_batch)
            ours_b = min(run.seconds for run in r.reaqtive_batch)
            cells += [f"{native_b:.2f}", f"{ours_b:.2f}", f"{ours_b / native_b:.2f}x",
                      target_text(ours_b / native_b, BATCH_TARGET)]
        else:
            cells += ["-", "-", "-", "-"]
        say("| " + " | ".join(cells) + " |")

    say("\nevents/s over a whole run (best of the repeats; x loop: times the plain loop's seconds)\n")
    say("| keys | plain loop | native stream | run_stream | native batch | run_batch |")
    say("|---:|---:|---:|---:|---:|---:|")
    for r in results:
        def cell(seconds: float, r: KeysResult = r) -> str:
            return f"{r.events / seconds:,.0f} (x{seconds / r.loop_s:.0f})"
        cells = [f"{r.keys:,}", f"{r.events / r.loop_s:,.0f}"]
        streams = [min(run.seconds for run in r.native_stream), min(run.seconds for run in r.reaqtive_stream)] if (
            r.reaqtive_stream) else []
        cells += [cell(seconds) for seconds in streams] if streams else ["-", "-"]
        cells += ([cell(min(run.seconds for run in r.native_batch)), cell(min(run.seconds for run in r.reaqtive_batch))]
                  if r.native_batch else ["-", "-"])
        say("| " + " | ".join(cells) + " |")


def warm_up(spark: Any, scratch: Path, buckets: int) -> None:
    """Each runner once on a small input, so the first key count does not pay alone for the JVM's JIT and the
    Python workers' start."""
    from reaqtive.spark import final_watermark

    events = make_sensor_events(2_000, 100)
    write_sensor_files(scratch / "in", events, 2)
    until = final_watermark(events[-1][1])
    native_stream(spark, scratch / "in", scratch / "native-stream")
    reaqtive_stream(spark, scratch / "in", scratch / "run-stream", buckets)
    native_batch(spark, scratch / "in", scratch / "native-batch", micros(until))
    reaqtive_batch(spark, scratch / "in", scratch / "run-batch", until)


def bench_session(args: argparse.Namespace) -> Any:
    """``local[2]``, or a session on ``--master`` with the same settings, the ``--py-files`` shipped to its
    executors (``spark.submit.pyFiles``) and the ``--conf`` settings."""
    from reaqtive.spark import local_session

    if args.master is None:
        return local_session("reaqtive-bench", cores=2)
    import os

    from pyspark.sql import SparkSession

    from reaqtive.spark.session import PROVIDER_CONF, ROCKSDB_PROVIDER

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = {PROVIDER_CONF: ROCKSDB_PROVIDER, "spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false", "spark.sql.adaptive.enabled": "false",
                "spark.executor.cores": "1", "spark.executor.memory": "512m", "spark.pyspark.python": sys.executable}
    if args.py_files:
        settings["spark.submit.pyFiles"] = args.py_files
    settings.update(args.conf)
    builder = SparkSession.builder.master(args.master).appName("reaqtive-bench")
    for name, value in settings.items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def compare_native(args: argparse.Namespace) -> int:
    scratch = Path(tempfile.mkdtemp(prefix="reaqtive-bench-spark-"))
    try:
        started = time.perf_counter()
        spark = bench_session(args)
        say(f"Spark session start: {time.perf_counter() - started:.1f} s")
        warm_up(spark, scratch / "warm-up", args.buckets)
        say(f"warm-up (each runner once on a small input, not reported): {time.perf_counter() - started:.1f} s")
        results, agree = [], True
        for keys in args.keys:
            result, agreed = compare_keys(spark, scratch / f"keys-{keys}", keys, args)
            results.append(result)
            agree = agree and agreed
        spark.stop()
        print_tables(results)
        say(f"\n(whole bench: {time.perf_counter() - started:.0f} s)")
        if not agree:
            say("MISMATCH: run_stream and run_batch produced different rows (or error rows)")
            return 1
        return 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# =================================================================================================================
# The acceptance query (--only totals)
# =================================================================================================================

STREAM = "bench://spark/events"
SCHEMA = "key string, at timestamp, seq bigint, kind string, amount bigint"
# The events span SPAN of event time, whatever their number: each (key, kind) group sees three one-minute windows.
# A time window opens a new (possibly empty) window every minute for every group, events or not, so a long span
# over 300,000 groups would measure little else than empty windows.
SPAN = timedelta(minutes=3)

Event = tuple[str, datetime, int, str, int]


# -- the query (its functions are named: Spark ships them to its workers with the query) --------------------------

def kind_of(event: dict[str, Any]) -> object:
    return event["kind"]


def amount_of(event: dict[str, Any]) -> int:
    return int(event["amount"])


def window_sum(window: Query[int]) -> Query[int]:
    return window.sum()


def kind_totals(group: Query[dict[str, Any]]) -> Query[int]:
    return group.map(amount_of).window(timedelta(minutes=1)).flat_map(window_sum).scan(0, add)


def tag_with_group(group: Any, total: int) -> list[object]:
    return [group.key, total]


FUNCTIONS = {f.__name__: f for f in (kind_of, amount_of, window_sum, kind_totals, tag_with_group)}


def totals_query() -> Query[Any]:
    return Query.stream(STREAM).group_by(kind_of).flat_map(kind_totals, tag_with_group)


# -- data -----------------------------------------------------------------------------------------------------------

def make_events(count: int, keys: int, seed: int = 3) -> list[Event]:
    rng = random.Random(seed)
    span_ms = SPAN // timedelta(milliseconds=1)
    # Whole milliseconds (several events share one; seq orders them), as Spark's watermark: the engine's clock
    # then ends where Spark's watermark does (docs/spark.md, "Equivalence with the embedded engine").
    return [(f"k{rng.randrange(keys):06d}", T0 + timedelta(milliseconds=i * span_ms // count), i, rng.choice("abc"),
             rng.randrange(100)) for i in range(count)]


def write_files(directory: Path, events: Sequence[Event], files: int) -> None:
    import pandas as pd

    directory.mkdir(parents=True)
    size = -(-len(events) // files)
    for number in range(files):
        chunk = events[number * size:(number + 1) * size]
        pd.DataFrame({
            "key": [e[0] for e in chunk],
            "at": pd.to_datetime([e[1] for e in chunk], utc=True),
            "seq": [e[2] for e in chunk],
            "kind": [e[3] for e in chunk],
            "amount": [e[4] for e in chunk],
        }).to_parquet(directory / f"part-{number:03d}.parquet", coerce_timestamps="us", index=False)


# -- the runs -------------------------------------------------------------------------------------------------------

def plain_loop(events: Sequence[Event]) -> tuple[float, int]:
    """Per key and kind, sum each minute's amounts; a closed minute adds to the running total (one output)."""
    started = time.perf_counter()
    open_minute: dict[tuple[str, str], int] = {}
    sums: dict[tuple[str, str], int] = {}
    totals: dict[tuple[str, str], int] = {}
    outputs = 0
    for key, when, _, kind, amount in events:
        group = (key, kind)
        minute = int((when - T0).total_seconds()) // 60
        current = open_minute.get(group)
        if current != minute:
            if current is not None:
                totals[group] = totals.get(group, 0) + sums[group]
                outputs += 1
            open_minute[group] = minute
            sums[group] = 0
        sums[group] += amount
    return time.perf_counter() - started, outputs


def embedded(events: Sequence[Event], store: Path, checkpoint_every: int) -> tuple[float, float, int]:
    """Seconds to append, seconds to process (with a checkpoint every ``checkpoint_every`` events, as Spark
    commits its state after each micro-batch, the final clock move and a last checkpoint), outputs."""
    from reaqtive.spark import embedded_query, final_watermark

    functions = FunctionRegistry()
    for name, function in FUNCTIONS.items():
        functions.register(name, function)
    with Engine(store, functions=functions, start=T0, checkpoint_every_events=checkpoint_every) as engine:
        engine.create_stream(STREAM)
        engine.create_subscription("bench://spark/totals", embedded_query(totals_query(), functions))
        started = time.perf_counter()
        for i in range(0, len(events), 10_000):
            engine.append_many(STREAM, [([e[0], {"kind": e[3], "amount": e[4], "seq": e[2]}], e[1])
                                        for e in events[i:i + 10_000]])
        appended = time.perf_counter()
        engine.process()
        engine.advance_time(final_watermark(events[-1][1]))  # where Spark's watermark ends
        engine.checkpoint()
        processed = time.perf_counter()
        outputs = len(engine.outputs("bench://spark/totals"))
    return appended - started, processed - appended, outputs


def spark_streaming(
    spark: Any, files: Path, scratch: Path, buckets: int
) -> tuple[float, list[dict[str, Any]], int, dict[str, int]]:
    from reaqtive.spark import run_stream
    from reaqtive.spark.live import read_stats

    events = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(files))
    outputs = run_stream(events, totals_query(), key="key", time="at", sequence="seq",
                         value=["kind", "amount", "seq"], buckets=buckets, functions=FUNCTIONS,
                         stats_dir=scratch / "stats")
    started = time.perf_counter()
    running = (outputs.writeStream.format("parquet").option("path", str(scratch / "out"))
               .option("checkpointLocation", str(scratch / "ckpt")).trigger(availableNow=True).start())
    running.awaitTermination()
    seconds = time.perf_counter() - started
    batches = [p for p in running.recentProgress if p["numInputRows"] > 0]
    return seconds, batches, spark.read.parquet(str(scratch / "out")).count(), read_stats(scratch / "stats")


def spark_batch(spark: Any, files: Path, scratch: Path, until: datetime) -> tuple[float, int]:
    from reaqtive.spark import run_batch

    started = time.perf_counter()
    events = spark.read.schema(SCHEMA).parquet(str(files))
    outputs = run_batch(events, totals_query(), key="key", time="at", sequence="seq",
                        value=["kind", "amount", "seq"], until=until, functions=FUNCTIONS)
    outputs.write.parquet(str(scratch / "batch-out"))
    seconds = time.perf_counter() - started
    return seconds, spark.read.parquet(str(scratch / "batch-out")).count()


def totals_keys(spark: Any, scratch: Path, keys: int, args: argparse.Namespace) -> bool:
    """The acceptance query for one key count; whether the runs agree on the number of outputs."""
    from reaqtive.spark import final_watermark

    events_count, files, buckets = args.events, args.batches, args.buckets

    events = make_events(events_count, keys)
    write_files(scratch / "in", events, files)
    say(f"\n== {events_count:,} events over {keys:,} keys, {files} micro-batches, {buckets} buckets, "
        f"{spark.sparkContext.master}")

    loop_s, loop_outputs = plain_loop(events)
    say(f"plain loop:        {events_count / loop_s:>12,.0f} events/s  ({loop_s:.2f} s, {loop_outputs:,} closed "
        "windows)")

    append_s, process_s, engine_outputs = embedded(events, scratch / "engine.db", -(-events_count // files))
    say(f"embedded engine:   {events_count / process_s:>12,.0f} events/s  (process {process_s:.2f} s; append "
        f"{append_s:.2f} s; {engine_outputs:,} outputs; x loop {process_s / loop_s:.1f})")

    stream_s, batches, stream_outputs, cache = spark_streaming(spark, scratch / "in", scratch, buckets)
    latencies = [p["durationMs"]["triggerExecution"] / 1e3 for p in batches]
    say(f"Spark streaming:   {events_count / stream_s:>12,.0f} events/s  ({stream_s:.2f} s, {len(batches)} "
        f"batches; {stream_outputs:,} outputs; x loop {stream_s / loop_s:.1f}, x engine "
        f"{stream_s / process_s:.2f})")
    say(f"  per-batch latency: first {latencies[0]:.2f} s, then median "
        f"{statistics.median(latencies[1:] or latencies):.2f} s, max {max(latencies[1:] or latencies):.2f} s "
        f"({events_count // files:,} events each)")
    say(f"  {cache_line(cache, len(batches))}")
    agree = stream_outputs == engine_outputs
    if not args.skip_batch:
        batch_s, batch_outputs = spark_batch(spark, scratch / "in", scratch, final_watermark(events[-1][1]))
        say(f"Spark batch:       {events_count / batch_s:>12,.0f} events/s  ({batch_s:.2f} s; {batch_outputs:,} "
            f"outputs; x loop {batch_s / loop_s:.1f}, x engine {batch_s / process_s:.2f})")
        agree = agree and batch_outputs == engine_outputs
    return agree


def acceptance_totals(args: argparse.Namespace) -> int:
    scratch = Path(tempfile.mkdtemp(prefix="reaqtive-bench-spark-"))
    try:
        started = time.perf_counter()
        spark = bench_session(args)
        say(f"Spark session start: {time.perf_counter() - started:.1f} s")
        agree = True
        for keys in args.keys:
            agree = totals_keys(spark, scratch / f"keys-{keys}", keys, args) and agree
        spark.stop()
        if not agree:
            say("MISMATCH: the runs produced different numbers of outputs")
            return 1
        return 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# =================================================================================================================

# Per mode: events, keys, files, buckets
DEFAULTS = {"native": (100_000, [100, 10_000, 100_000], 5, 4), "totals": (1_000_000, [100_000], 10, 8)}


def key_counts(text: str) -> list[int]:
    try:
        counts = [int(part.replace("_", "")) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected key counts separated by commas, got {text!r}") from None
    if not counts or min(counts) <= 0:
        raise argparse.ArgumentTypeError(f"key counts must be positive, got {text!r}")
    return counts


def setting(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Defaults are per mode (native / totals): --events 100,000 / 1,000,000; --keys 100,10000,100000 / "
               "100000; --batches 5 / 10; --buckets 4 / 8. See the module docstring for what is measured.")
    parser.add_argument("--only", choices=("native", "totals"), default="native",
                        help="native (default): reaqtive against native Spark on per-sensor one-minute averages; "
                             "totals: the acceptance query through a plain loop, the embedded engine, run_stream "
                             "and run_batch")
    parser.add_argument("--aggregate", choices=AGGREGATES, default="average",
                        help="native: the per-sensor window aggregate, both sides (default: average, the README's; "
                             "with --pre-aggregate run_batch aggregates it in the JVM)")
    parser.add_argument("--pre-aggregate", action="store_true",
                        help="native: run_batch(pre_aggregate=True): the aggregate computed in the JVM")
    parser.add_argument("--events", type=int, help="events per key count")
    parser.add_argument("--keys", type=key_counts, help="key counts, separated by commas (one run each)")
    parser.add_argument("--batches", type=int, help="input files, one per micro-batch")
    parser.add_argument("--buckets", type=int, help="run_stream's buckets")
    parser.add_argument("--repeat", type=int, default=2,
                        help="native: runs of each side, interleaved; the best counts (default 2)")
    parser.add_argument("--skip-batch", action="store_true", help="skip the batch (backfill) runs")
    parser.add_argument("--skip-stream", action="store_true", help="skip the streaming runs")
    parser.add_argument("--master", help="a Spark master URL (default: local[2] in this process)")
    parser.add_argument("--py-files", help="with --master: zips for the executors' Python path (reaqtive's)")
    parser.add_argument("--conf", type=setting, action="append", default=[], metavar="NAME=VALUE",
                        help="with --master: a Spark setting (repeatable)")
    args = parser.parse_args(argv)
    global AGGREGATE, PRE_AGGREGATE  # (the runs read them; one bench run, one aggregate)
    AGGREGATE, PRE_AGGREGATE = args.aggregate, args.pre_aggregate
    events, keys, batches, buckets = DEFAULTS[args.only]
    args.events = args.events or events
    args.keys = args.keys or keys
    args.batches = args.batches or batches
    args.buckets = args.buckets or buckets
    if args.repeat <= 0:
        parser.error("--repeat must be positive")
    if args.skip_batch and args.skip_stream:
        parser.error("--skip-batch and --skip-stream leave nothing to run")
    if (args.py_files or args.conf) and args.master is None:
        parser.error("--py-files and --conf go with --master")
    return acceptance_totals(args) if args.only == "totals" else compare_native(args)


if __name__ == "__main__":
    sys.exit(main())
