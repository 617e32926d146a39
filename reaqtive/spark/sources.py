"""Reading Parquet events whatever unit their timestamps were written in (pandas writes nanoseconds).

::

    from reaqtive.spark import read_events

    events = read_events(spark, "in/", "sensor string, at timestamp, seq long, reading double")
    outputs = run_stream(events, query, key="sensor", time="at", sequence="seq")

Spark reads Parquet timestamps in milli- and microseconds, and refuses nanoseconds, which pandas writes by default
(``df.to_parquet(path)`` with a ``datetime64[ns]`` column): ``FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH``.
:func:`read_events` has Spark read a nanosecond column as the integer it is stored as
(``spark.sql.legacy.parquet.nanosAsLong``), then converts it in the JVM to the schema's timestamp type, the
sub-microsecond digits dropped (rounded towards the past); other timestamp columns are read as Spark reads them.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Final

from pyspark.errors import AnalysisException
from pyspark.sql import functions as F  # noqa: N812  (Spark's idiom)
from pyspark.sql.types import LongType, StructField, StructType, TimestampNTZType, TimestampType

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["NANOS_AS_LONG", "read_events"]

NANOS_AS_LONG: Final = "spark.sql.legacy.parquet.nanosAsLong"
"""Spark's setting that reads a Parquet ``TIMESTAMP(NANOS)`` column as a ``long`` instead of refusing it."""

# A value in micro- or milliseconds (any time Spark can hold) read as nanoseconds lands within this many
# nanoseconds of 1970-01-01 (about 106 days): such a value in a nanosecond column means a file of another unit
# among nanosecond files, which would otherwise become a silently wrong time.
_SUSPICIOUS_NANOS: Final = 2**63 // 1000


def read_events(
    spark: SparkSession,
    path: str | os.PathLike[str],
    schema: str | StructType,
    *,
    streaming: bool = True,
    nanoseconds: bool | Collection[str] | None = None,
    options: Mapping[str, str] | None = None,
) -> DataFrame:
    """The Parquet files at ``path`` as a streaming DataFrame (``streaming=False``: a static one) with ``schema``
    (DDL text or a ``StructType``), their timestamp columns read whether the files hold them in milli-, micro- or
    nanoseconds.

    * ``nanoseconds``: which of the schema's (top-level) timestamp columns the files store in nanoseconds:
      ``None`` (default) asks the files that are at ``path`` now (Spark reads a footer); ``True``/``False``: all
      or none; or the column names. A stream that starts on an empty directory and will receive nanosecond
      files needs ``nanoseconds=True``, as nothing is there to ask.
    * ``options``: reader options (``maxFilesPerTrigger``, ``recursiveFileLookup``, ...).

    The files of one input must share each column's unit: a micro- or millisecond file among nanosecond files
    fails the batch with an error naming the column (its values, read as nanoseconds, fall within about 106
    days of 1970-01-01, which the check takes for that mistake), and a nanosecond file among the others fails
    with Spark's ``PARQUET_COLUMN_DATA_TYPE_MISMATCH``. Sets ``spark.sql.legacy.parquet.nanosAsLong`` on the
    session: it only changes how nanosecond columns read (which Spark refuses otherwise).
    """
    target = _struct(schema)
    stamps = [field.name for field in target.fields if isinstance(field.dataType, TimestampType | TimestampNTZType)]
    location = os.fspath(path)
    reader_options = dict(options or {})
    spark.conf.set(NANOS_AS_LONG, "true")
    if nanoseconds is None:
        nanos = _nanosecond_columns(spark, location, stamps, reader_options)
    elif isinstance(nanoseconds, bool):
        nanos = set(stamps) if nanoseconds else set()
    else:
        nanos = set(nanoseconds)
        unknown = nanos - set(stamps)
        if unknown:
            raise ValueError(f"nanoseconds names {', '.join(sorted(unknown))}, not timestamp columns of the schema "
                             f"(its timestamp columns: {', '.join(stamps) or 'none'})")
    stored = StructType([StructField(field.name, LongType(), field.nullable) if field.name in nanos else field
                         for field in target.fields])
    reader = spark.readStream if streaming else spark.read
    frame = reader.schema(stored).options(**reader_options).parquet(location)
    if not nanos:
        return frame
    return frame.select(*[_from_nanos(field.name, field.dataType) if field.name in nanos else F.col(field.name)
                          for field in target.fields])


def _struct(schema: str | StructType) -> StructType:
    """The schema as a ``StructType``; :class:`ValueError` for DDL of another type (``"bigint"``)."""
    parsed = StructType.fromDDL(schema) if isinstance(schema, str) else schema
    if not isinstance(parsed, StructType):
        raise ValueError(f"the schema must list columns (\"name type, ...\"), got {schema!r}")
    return parsed


def _nanosecond_columns(spark: SparkSession, path: str, stamps: list[str], options: Mapping[str, str]) -> set[str]:
    """The timestamp columns that the files at ``path`` store in nanoseconds: Spark (with ``nanosAsLong``) infers
    those as ``bigint``. No files yet: none."""
    if not stamps:
        return set()
    try:
        found = spark.read.options(**options).parquet(path).schema
    except AnalysisException as error:
        if error.getCondition() in ("UNABLE_TO_INFER_SCHEMA", "PATH_NOT_FOUND"):
            return set()  # nothing to ask yet: the columns are read as Spark reads timestamps
        raise
    stored = {field.name: field.dataType for field in found.fields}
    return {name for name in stamps if isinstance(stored.get(name), LongType)}


def _from_nanos(name: str, kind: object) -> Column:
    """The nanosecond count in column ``name`` as a ``timestamp`` (the count taken as UTC, as Spark takes a
    microsecond count) or a ``timestamp_ntz`` (the count as a wall clock), whole microseconds (floor)."""
    quoted = "`" + name.replace("`", "``") + "`"
    micros = f"(({quoted} - pmod({quoted}, 1000)) div 1000)"  # floor, exact (a double would lose digits)
    if isinstance(kind, TimestampNTZType):
        converted = F.expr(f"timestampadd(MICROSECOND, {micros}, TIMESTAMP_NTZ'1970-01-01 00:00:00')")
    else:
        converted = F.expr(f"timestamp_micros({micros})")
    raw = F.col(name)
    suspicious = F.abs(raw) < F.lit(_SUSPICIOUS_NANOS)
    message = F.concat(
        F.lit(f"read_events: column {name!r} is read as nanoseconds, but "),
        raw.cast("string"),
        F.lit(" is within 106 days of 1970-01-01 as nanoseconds: a file in micro- or milliseconds among them? "
              "Write every file of one input in one unit"),
    )
    return F.when(raw.isNotNull() & suspicious, F.raise_error(message)).otherwise(converted).alias(name)
