"""Run a keyed query on a streaming DataFrame, its state in Spark's checkpointed state store.

::

    from reaqtive.spark import run_stream

    events = spark.readStream.schema("sensor string, at timestamp, seq long, reading double").parquet("in/")
    outputs = run_stream(events, query, key="sensor", time="at", sequence="seq", buckets=16)
    outputs.writeStream.format("parquet").option("path", "out/").option("checkpointLocation", "ckpt/").start()

Each key runs its own instance of ``query`` (created at its first event; the query reads the key's payloads with
``Query.stream(uri)``); the keys are hashed into ``buckets`` groups, each hosted by a
:class:`~reaqtive.spark.processor.BucketProcessor` (``transformWithStateInPandas``, RocksDB state store). The
output is a streaming DataFrame ``key, seq, time, value, error`` for any sink; see ``docs/spark.md``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pyspark.sql import functions as F  # noqa: N812  (Spark's idiom)

from reaqtive.engine.expressions import FunctionRegistry
from reaqtive.fluent.query import Query
from reaqtive.operators.keyed_steps import keyed_execution_enabled
from reaqtive.spark._columns import BUCKET, bucket_count, key_type, prepare
from reaqtive.spark.host import KeyedQuery
from reaqtive.spark.live import DEFAULT_CACHE_KEYS
from reaqtive.spark.processor import MODE_EVENT, MODE_NONE, MODE_PROCESSING, BucketProcessor, ProcessorConfig
from reaqtive.spark.pushdown import payload_fields
from reaqtive.spark.session import use_rocksdb
from reaqtive.spark.values import value_type

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["TIME_MODES", "output_schema", "run_stream"]

TIME_MODES: Final = {"event": MODE_EVENT, "processing": MODE_PROCESSING, "none": MODE_NONE}


def output_schema(key: str, value_format: str = "json") -> str:
    """The schema of the processor's rows (``key`` typed as the events' key column, in DDL)."""
    return f"key {key}, seq bigint, time_us bigint, value {value_type(value_format)}, error string"


def run_stream(
    events: DataFrame,
    query: Query[Any] | Mapping[str, Any] | KeyedQuery,
    *,
    key: str,
    time: str,
    value: str | Sequence[str] | None = None,
    sequence: str | None = None,
    buckets: int | None = None,
    lateness: timedelta = timedelta(0),
    time_mode: str = "event",
    value_format: str = "json",
    initial_state: DataFrame | None = None,
    functions: FunctionRegistry | Mapping[str, Callable[..., Any]] | None = None,
    settings: Mapping[str, object] | None = None,
    cache_keys: int = DEFAULT_CACHE_KEYS,
    stats_dir: str | Path | None = None,
) -> DataFrame:
    """Run ``query`` once per ``key`` over the streaming DataFrame ``events``; returns the outputs as a streaming
    DataFrame ``key, seq, time, value, error`` (append mode): ``seq`` numbers each key's outputs from 0, ``time``
    is the key's clock when the output was produced, ``error`` is set on the last row of a key whose query
    failed.

    * ``key``: the key column (a string or integer type); ``time``: the event-time column (a timestamp);
      ``sequence``: an optional integer column that orders a key's events with equal times (without it, the
      payload's canonical JSON does, so a replay is still deterministic); ``value``: the payload column(s)
      (default: every other column, as a dict).
    * ``buckets``: how many groups the keys are hashed into (default: ``spark.sql.shuffle.partitions``). Fixed
      per checkpoint: a run with another count is refused (see docs/spark.md for choosing it).
    * ``time_mode``: ``"event"`` (default): the keys' clocks follow the event times and, between a key's events,
      the watermark (``max event time - lateness``; Spark drops rows older than the watermark);
      ``"processing"``: between events the clocks follow the batch's processing time; ``"none"``: only the
      events move the clocks (no Spark timers).
    * ``value_format``: ``"json"``, ``"binary"`` or a Spark SQL type (see :mod:`reaqtive.spark.values`).
    * ``initial_state``: a ``bucket, blob`` DataFrame (:func:`reaqtive.spark.initial_state_from_engine`) that
      seeds a new checkpoint.
    * ``cache_keys``: how many keys of live bucket state each Python worker keeps between micro-batches
      (:mod:`reaqtive.spark.live`; 0: none): a key of the table form counts 1 (about 1 KB), a live query
      instance of the instance form 100 (10 to 50 KB; by default, instance buckets of up to 1,000 keys).
      ``stats_dir``: a directory where each worker writes the cache's counters (read them with
      :func:`reaqtive.spark.live.read_stats`).

    A query that is a chain of operators with keyed steps (``map``, ``filter``, ``scan``, ``count``, ...; at most
    one tumbling ``aggregate_by_key``) runs in its **table form**: each key is a record of plain fields, not a
    query instance re-created per batch (``docs/spark.md``). ``keyed_execution(False)`` around this call keeps
    the instance form for new checkpoints; a checkpoint keeps the form it was created in.
    """
    if time_mode not in TIME_MODES:
        raise ValueError(f"time_mode must be one of {', '.join(TIME_MODES)}, got {time_mode!r}")
    if lateness < timedelta(0):
        raise ValueError(f"lateness must not be negative, got {lateness}")
    if not isinstance(cache_keys, int) or isinstance(cache_keys, bool) or cache_keys < 0:
        raise ValueError(f"cache_keys must be an int >= 0, got {cache_keys!r}")
    spark = events.sparkSession
    use_rocksdb(spark)
    keyed = KeyedQuery.of(query, functions, settings)
    count = bucket_count(spark, buckets)
    source = events
    if time_mode == "event":
        source = source.withWatermark(time, f"{lateness // timedelta(milliseconds=1)} milliseconds")
    prepared = prepare(source, key=key, time=time, value=value, sequence=sequence, buckets=count,
                       keep_time=time_mode == "event", reads=payload_fields(keyed.decoded(), keyed.stream))
    config = ProcessorConfig(count, TIME_MODES[time_mode], sequence is not None, value_format,
                             table=keyed_execution_enabled(), cache_keys=cache_keys,
                             stats_dir=None if stats_dir is None else str(stats_dir), run_id=uuid.uuid4().hex)
    outputs = prepared.groupBy(BUCKET).transformWithStateInPandas(
        BucketProcessor(keyed, config),
        output_schema(key_type(events, key), value_format),
        "Append",
        TIME_MODES[time_mode],
        initialState=None if initial_state is None else initial_state.groupBy(BUCKET),
    )
    return outputs.select("key", "seq", F.timestamp_micros("time_us").alias("time"), "value", "error")
