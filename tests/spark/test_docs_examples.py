"""The Spark examples of the README and docs/spark.md run as written, on the shared session, and give the
one-minute averages they promise."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.spark.queries import T0
from tests.test_docs import ROOT, python_blocks, section

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# (sensor, seconds after T0, reading): s1 averages 15 over its first minute and 30 over its second (closed by
# its event at 150 s); s2's first minute (20) is closed by its event at 70 s.
READINGS = [("s1", 0, 10.0), ("s2", 5, 20.0), ("s1", 30, 20.0), ("s1", 61, 30.0), ("s2", 70, 1.0),
            ("s1", 150, 40.0)]


def write_input(directory: Path) -> None:
    import pandas as pd

    directory.mkdir()
    frame = pd.DataFrame(
        [(sensor, T0 + timedelta(seconds=at), seq, reading) for seq, (sensor, at, reading) in enumerate(READINGS)],
        columns=["sensor", "at", "seq", "reading"],
    )
    frame.to_parquet(directory / "part-0.parquet", coerce_timestamps="us", index=False)


def run_example(spark: SparkSession, block: str, name: str, directory: Path) -> dict[str, list[float]]:
    """Run ``block`` with its paths under ``directory``, drain the stream it started, return each sensor's
    averages."""
    # Spark resolves relative paths against the JVM's working directory, fixed when the shared session started.
    for relative in ("in/", "out/", "ckpt/"):
        assert f'"{relative}"' in block, f"{name}'s example no longer uses {relative}"
        block = block.replace(f'"{relative}"', repr(str(directory / relative)))
    before = {query.id for query in spark.streams.active}
    exec(compile(block, name, "exec"), {})
    (started,) = [query for query in spark.streams.active if query.id not in before]
    try:
        started.processAllAvailable()
    finally:
        started.stop()
    rows = spark.read.parquet(str(directory / "out")).orderBy("key", "seq").collect()
    averages: dict[str, list[float]] = {}
    for row in rows:
        assert row.error is None
        averages.setdefault(row.key, []).append(json.loads(row.value))
    return averages


@pytest.mark.parametrize(("document", "heading"), [("README.md", "On Apache Spark"), ("docs/spark.md", None)])
def test_spark_example_runs(
    spark: SparkSession, tmp_path: Path, document: str, heading: str | None
) -> None:
    path = ROOT / document
    block = python_blocks(section(path, heading) if heading else path.read_text())[0]
    write_input(tmp_path / "in")
    averages = run_example(spark, block, document, tmp_path)
    # A window closes when a later event of its sensor moves the sensor's clock past it (or the watermark does,
    # in a later batch): at least the windows closed by events are there, with the right averages.
    assert averages["s1"][:2] == [15.0, 30.0]
    assert averages["s2"][:1] == [20.0]
