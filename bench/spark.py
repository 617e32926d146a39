"""Spark costs: a keyed query on Spark Structured Streaming (local[2]) against the embedded engine and a plain Python
loop, on the same events, in one run.

Run: .venv/bin/python bench/spark.py [--events N] [--keys K] [--batches M] [--buckets B] [--skip-batch]

(needs the ``spark`` extra and Java 17+; ``make bench`` runs it with the defaults: 1,000,000 events over 100,000
keys in 10 Parquet files, 8 buckets).

The query, per key: a group-by on the event's kind, a one-minute event-time window summing the amounts, a running
total of the window sums (the acceptance query of ``tests/spark``). Reported:

* **plain loop**: the same per-key, per-kind, per-minute sums in dicts (no operators, no state saving, no time);
* **embedded engine**: the same query as one subscription (``reaqtive.spark.embedded_query``: ``group_by`` on the
  key), events appended to the durable ingress (SQLite, one transaction per 10,000) and processed with a
  checkpoint every micro-batch's worth of events (Spark commits its state after each batch), clock moved to the
  last event, a last checkpoint; the appending is reported apart from the processing;
* **Spark streaming**: ``run_stream`` over the files, one file per micro-batch, into a Parquet file sink
  (``availableNow``): events per second over the whole run, and per-batch latency (Spark's ``triggerExecution``);
  session start is reported apart;
* **Spark batch**: ``run_batch`` over all files at once (a backfill), written to Parquet.

The three reaqtive runs must agree on the number of outputs (checked; a mismatch fails the run with exit code 1).
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from operator import add
from pathlib import Path
from typing import Any

from reaqtive import Query
from reaqtive.engine import Engine, FunctionRegistry

T0 = datetime(2026, 3, 1, tzinfo=UTC)
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


def spark_streaming(spark: Any, files: Path, scratch: Path, buckets: int) -> tuple[float, list[dict[str, Any]], int]:
    from reaqtive.spark import run_stream

    events = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(files))
    outputs = run_stream(events, totals_query(), key="key", time="at", sequence="seq",
                         value=["kind", "amount", "seq"], buckets=buckets, functions=FUNCTIONS)
    started = time.perf_counter()
    running = (outputs.writeStream.format("parquet").option("path", str(scratch / "out"))
               .option("checkpointLocation", str(scratch / "ckpt")).trigger(availableNow=True).start())
    running.awaitTermination()
    seconds = time.perf_counter() - started
    batches = [p for p in running.recentProgress if p["numInputRows"] > 0]
    return seconds, batches, spark.read.parquet(str(scratch / "out")).count()


def spark_batch(spark: Any, files: Path, scratch: Path, until: datetime) -> tuple[float, int]:
    from reaqtive.spark import run_batch

    started = time.perf_counter()
    events = spark.read.schema(SCHEMA).parquet(str(files))
    outputs = run_batch(events, totals_query(), key="key", time="at", sequence="seq",
                        value=["kind", "amount", "seq"], until=until, functions=FUNCTIONS)
    outputs.write.parquet(str(scratch / "batch-out"))
    seconds = time.perf_counter() - started
    return seconds, spark.read.parquet(str(scratch / "batch-out")).count()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=10, help="input files, one per micro-batch")
    parser.add_argument("--buckets", type=int, default=8)
    parser.add_argument("--skip-batch", action="store_true", help="skip the Spark batch (backfill) run")
    args = parser.parse_args(argv)

    def say(line: str) -> None:
        print(line, flush=True)

    from reaqtive.spark import final_watermark, local_session

    scratch = Path(tempfile.mkdtemp(prefix="reaqtive-bench-spark-"))
    try:
        events = make_events(args.events, args.keys)
        write_files(scratch / "in", events, args.batches)
        say(f"{args.events:,} events over {args.keys:,} keys, {args.batches} micro-batches, "
            f"{args.buckets} buckets, local[2]")

        loop_s, loop_outputs = plain_loop(events)
        say(f"plain loop:        {args.events / loop_s:>12,.0f} events/s  ({loop_s:.2f} s, {loop_outputs:,} closed "
            "windows)")

        append_s, process_s, engine_outputs = embedded(events, scratch / "engine.db", -(-args.events // args.batches))
        say(f"embedded engine:   {args.events / process_s:>12,.0f} events/s  (process {process_s:.2f} s; append "
            f"{append_s:.2f} s; {engine_outputs:,} outputs; x loop {process_s / loop_s:.1f})")

        started = time.perf_counter()
        spark = local_session("reaqtive-bench", cores=2)
        say(f"Spark session start: {time.perf_counter() - started:.1f} s")
        stream_s, batches, stream_outputs = spark_streaming(spark, scratch / "in", scratch, args.buckets)
        latencies = [p["durationMs"]["triggerExecution"] / 1e3 for p in batches]
        say(f"Spark streaming:   {args.events / stream_s:>12,.0f} events/s  ({stream_s:.2f} s, {len(batches)} "
            f"batches; {stream_outputs:,} outputs; x loop {stream_s / loop_s:.1f}, x engine "
            f"{stream_s / process_s:.2f})")
        say(f"  per-batch latency: first {latencies[0]:.2f} s, then median "
            f"{statistics.median(latencies[1:] or latencies):.2f} s, max {max(latencies[1:] or latencies):.2f} s "
            f"({args.events // args.batches:,} events each)")
        failed = stream_outputs != engine_outputs
        if not args.skip_batch:
            batch_s, batch_outputs = spark_batch(spark, scratch / "in", scratch, final_watermark(events[-1][1]))
            say(f"Spark batch:       {args.events / batch_s:>12,.0f} events/s  ({batch_s:.2f} s; {batch_outputs:,} "
                f"outputs; x loop {batch_s / loop_s:.1f}, x engine {batch_s / process_s:.2f})")
            failed = failed or batch_outputs != engine_outputs
        spark.stop()
        if failed:
            say("MISMATCH: the runs produced different numbers of outputs")
            return 1
        return 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
