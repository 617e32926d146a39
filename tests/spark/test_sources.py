"""read_events: Parquet timestamps in nano-, micro- or milliseconds read as the same times, static or streaming;
a file of another unit among nanosecond files is an error naming the column, not a wrong time."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from reaqtive.spark import read_events

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SCHEMA = "sensor string, at timestamp, seq long"
# Nanosecond digits that Spark's microseconds drop (towards the past, before 1970 too)
TIMES = ["2026-03-01 00:00:00.123456789", "2026-03-01 00:01:00.000000999", "1950-06-15 12:00:00.999999999"]
MICROS = [datetime(2026, 3, 1, 0, 0, 0, 123456), datetime(2026, 3, 1, 0, 1), datetime(1950, 6, 15, 12, 0, 0, 999999)]


def write(directory: Path, unit: str | None, *, aware: bool = False, name: str = "part-0.parquet") -> None:
    """The rows as pandas writes them: ``unit=None`` its defaults (nanoseconds), else the times floored to the
    unit and written in it (``coerce_timestamps``; pyarrow would truncate a time before 1970 towards 1970)."""
    import pandas as pd

    at = pd.Series(pd.to_datetime(TIMES, utc=aware))
    frame = pd.DataFrame({"sensor": ["a", "b", "c"], "at": at if unit is None else at.dt.floor(unit), "seq": [0, 1, 2]})
    directory.mkdir(parents=True, exist_ok=True)
    if unit is None:
        frame.to_parquet(directory / name)
    else:
        frame.to_parquet(directory / name, coerce_timestamps=unit)


def times(spark: SparkSession, path: Path, schema: str = SCHEMA, **options: Any) -> list[Any]:
    frame = read_events(spark, path, schema, streaming=False, **options)
    return [row.at for row in frame.orderBy("seq").collect()]


@pytest.mark.parametrize("aware", [False, True])
def test_nanosecond_files_read_as_the_microsecond_times_spark_reads(
    spark: SparkSession, tmp_path: Path, aware: bool
) -> None:
    write(tmp_path / "ns", None, aware=aware)
    write(tmp_path / "us", "us", aware=aware)
    with pytest.raises(Exception, match="PARQUET_COLUMN_DATA_TYPE_MISMATCH"):  # what a user meets without it
        spark.read.schema(SCHEMA).parquet(str(tmp_path / "ns")).collect()
    assert times(spark, tmp_path / "ns") == times(spark, tmp_path / "us") == MICROS
    ntz = "sensor string, at timestamp_ntz, seq long"
    assert times(spark, tmp_path / "ns", ntz) == times(spark, tmp_path / "us", ntz) == MICROS


def test_milliseconds_and_other_columns_read_unchanged(spark: SparkSession, tmp_path: Path) -> None:
    write(tmp_path / "ms", "ms")
    frame = read_events(spark, tmp_path / "ms", SCHEMA, streaming=False)
    assert frame.schema.simpleString() == "struct<sensor:string,at:timestamp,seq:bigint>"
    assert [row.at for row in frame.orderBy("seq").collect()] == [
        datetime(2026, 3, 1, 0, 0, 0, 123000), datetime(2026, 3, 1, 0, 1), datetime(1950, 6, 15, 12, 0, 0, 999000)]


def test_a_stream_started_on_an_empty_directory_reads_nanoseconds_when_told(
    spark: SparkSession, tmp_path: Path
) -> None:
    directory = tmp_path / "in"
    directory.mkdir()
    events = read_events(spark, directory, SCHEMA, nanoseconds=True)
    assert events.isStreaming
    write(directory, None)  # arrives after the stream was defined
    name = "read_events_stream"
    query = events.writeStream.format("memory").queryName(name).trigger(availableNow=True).start()
    try:
        query.awaitTermination()
        assert [row.at for row in spark.sql(f"select at from {name} order by seq").collect()] == MICROS
    finally:
        query.stop()
        spark.catalog.dropTempView(name)


def test_a_microsecond_file_among_nanosecond_files_fails_naming_the_column(
    spark: SparkSession, tmp_path: Path
) -> None:
    write(tmp_path / "in", None, name="part-0.parquet")
    write(tmp_path / "in", "us", name="part-1.parquet")
    with pytest.raises(Exception, match=r"read_events: column 'at' is read as nanoseconds"):
        times(spark, tmp_path / "in", nanoseconds=["at"])


def test_nanoseconds_must_name_timestamp_columns(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="nanoseconds names seq, not timestamp columns"):
        read_events(spark, tmp_path, SCHEMA, nanoseconds=["seq"])
