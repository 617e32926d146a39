"""The projection both runners start with: events as ``(bucket, key, t, [s,] v)`` columns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from pyspark.sql import functions as F  # noqa: N812  (Spark's idiom)

from reaqtive.spark._hashing import bucket_labels

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["BUCKET", "KEY_TYPES", "bucket_count", "bucket_of", "key_type", "prepare"]

BUCKET: Final = "bucket"
KEY_TYPES: Final = frozenset({"string", "bigint", "int", "smallint", "tinyint"})
"""Key column types: the keys are kept in the bucket's state as msgpack map keys."""


def bucket_of(key: Column, buckets: int) -> Column:
    """The bucket of a key: the label (:func:`~reaqtive.spark._hashing.bucket_labels`) of bucket index
    ``pmod(xxhash64(key), buckets)`` (Spark's own 64-bit hash, seed 42)."""
    index = F.pmod(F.xxhash64(key), F.lit(buckets)).cast("int")
    labels = F.array(*[F.lit(label) for label in bucket_labels(buckets)])
    return F.element_at(labels, index + 1).cast("int")


def bucket_count(spark: SparkSession, buckets: int | None) -> int:
    """``buckets``, or ``spark.sql.shuffle.partitions`` when ``None``; :class:`ValueError` unless positive."""
    count = buckets if buckets is not None else int(spark.conf.get("spark.sql.shuffle.partitions") or 200)
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        raise ValueError(f"buckets must be a positive int, got {count!r}")
    return count


def prepare(
    events: DataFrame,
    *,
    key: str,
    time: str,
    value: str | Sequence[str] | None,
    sequence: str | None,
    buckets: int | None,
    keep_time: bool = False,
    reads: frozenset[str] | None = None,
) -> DataFrame:
    """``bucket`` (unless ``buckets`` is ``None``), ``key``, ``t`` (event time in µs since 1970 UTC), ``s`` (the
    sequence column, if any), ``v`` (the payload: one column as it is, several as a struct, by default every
    other column), and with ``keep_time`` the original time column (a watermark needs it to drop late rows).
    ``reads``: the payload fields the query reads (:func:`reaqtive.spark.pushdown.payload_fields`): without
    ``value``, the payload is those columns only, when they all exist."""
    columns = events.columns
    for name in (key, time, *([sequence] if sequence else [])):
        if name not in columns:
            raise ValueError(f"the events have no column {name!r} (columns: {', '.join(columns)})")
    key_type(events, key)
    time_type = events.schema[time].dataType.simpleString()
    if time_type not in ("timestamp", "timestamp_ntz"):
        raise ValueError(f"the time column {time!r} must be a timestamp, it is {time_type}")
    payload: Column
    if isinstance(value, str):
        payload = F.col(value)
    else:
        names = list(value) if value is not None else [c for c in columns if c not in (key, time, sequence)]
        if value is None and reads and reads <= set(names):
            names = [name for name in names if name in reads]  # projection pushed down: Spark ships no more
        if not names:
            raise ValueError("the events have no payload column besides the key, time and sequence")
        payload = F.struct(*[F.col(name) for name in names])
    selected = [] if buckets is None else [bucket_of(F.col(key), buckets).alias(BUCKET)]
    selected += [F.col(key).alias("key"), F.unix_micros(F.col(time).cast("timestamp")).alias("t")]
    if sequence:
        selected.append(F.col(sequence).cast("long").alias("s"))
    selected.append(payload.alias("v"))
    if keep_time:
        selected.append(F.col(time))
    return events.select(*selected)


def key_type(events: DataFrame, key: str) -> str:
    """The Spark SQL type of the key column, in DDL form; :class:`ValueError` for a type keys cannot have."""
    found = str(events.schema[key].dataType.simpleString())
    if found not in KEY_TYPES:
        raise ValueError(f"the key column {key!r} is {found}; keys must be one of {', '.join(sorted(KEY_TYPES))}")
    return found
