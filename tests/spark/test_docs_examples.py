"""The Spark examples of the README and docs/spark.md run as written, on the shared session, and give the
one-minute averages they promise; ``examples/spark_sensor_averages.py`` runs as a script, in a subprocess, in a
fresh directory, on Parquet files pandas wrote with its defaults (nanosecond timestamps), ends by itself, and gives
the embedded engine's rows."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.spark import queries
from tests.spark.queries import T0
from tests.test_docs import ROOT, python_blocks, section

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# (sensor, seconds after T0, reading): s1 averages 15 over its first minute and 30 over its second (closed by
# its event at 150 s); s2's first minute (20) is closed by its event at 70 s.
READINGS = [("s1", 0, 10.0), ("s2", 5, 20.0), ("s1", 30, 20.0), ("s1", 61, 30.0), ("s2", 70, 1.0),
            ("s1", 150, 40.0)]


def write_input(directory: Path) -> None:
    """The readings as pandas writes them by default: ``at`` a ``datetime64[ns]`` column, stored as Parquet
    ``INT64 TIMESTAMP(NANOS)``, which Spark's own reader refuses."""
    import pandas as pd

    directory.mkdir()
    frame = pd.DataFrame(
        [(sensor, T0 + timedelta(seconds=at), seq, reading) for seq, (sensor, at, reading) in enumerate(READINGS)],
        columns=["sensor", "at", "seq", "reading"],
    )
    frame.to_parquet(directory / "part-0.parquet")
    assert str(pd.read_parquet(directory / "part-0.parquet")["at"].dtype).startswith("datetime64[ns")


def run_example(spark: SparkSession, block: str, name: str, directory: Path) -> dict[str, list[float]]:
    """Run ``block`` with its paths under ``directory`` (it returns once what ``in/`` holds is processed), return
    each sensor's window averages, in order."""
    # Spark resolves relative paths against the JVM's working directory, fixed when the shared session started.
    for relative in ("in/", "out/", "ckpt/"):
        assert f'"{relative}"' in block, f"{name}'s example no longer uses {relative}"
        block = block.replace(f'"{relative}"', repr(str(directory / relative)))
    before = {query.id for query in spark.streams.active}
    exec(compile(block, name, "exec"), {})
    assert not [query for query in spark.streams.active if query.id not in before], "the example left a stream"
    return averages_in(directory / "out")


def averages_in(out: Path) -> dict[str, list[float]]:
    """Each sensor's averages in the example's output (``[None, start, end, average]`` values: one key inside each
    sensor's query), in ``seq`` order; read with pandas, as a user would."""
    import pandas as pd

    frame = pd.read_parquet(out).sort_values(["key", "seq"])
    averages: dict[str, list[float]] = {}
    for key, value, error in zip(frame["key"], frame["value"], frame["error"], strict=True):
        assert error is None or pd.isna(error), error
        inner_key, start, end, average = json.loads(value)
        assert inner_key is None and start < end
        averages.setdefault(key, []).append(average)
    return averages


@pytest.mark.parametrize(("document", "heading"), [("README.md", "On Apache Spark"), ("docs/spark.md", None)])
def test_spark_example_runs(
    spark: SparkSession, tmp_path: Path, document: str, heading: str | None
) -> None:
    path = ROOT / document
    block = python_blocks(section(path, heading) if heading else path.read_text())[0]
    write_input(tmp_path / "in")
    averages = run_example(spark, block, document, tmp_path)
    # A window closes when a later event of its sensor moves the sensor's clock past it (or the watermark does):
    # at least the windows closed by events are there, with the right averages.
    assert averages["s1"][:2] == [15.0, 30.0]
    assert averages["s2"][:1] == [20.0]


SCRIPT = ROOT / "examples" / "spark_sensor_averages.py"


def test_the_example_script_runs_as_a_user_runs_it(tmp_path: Path) -> None:
    """``python examples/spark_sensor_averages.py`` in a fresh folder holding ``in/`` as pandas writes Parquet by
    default: it ends by itself, with rc 0, having written the embedded engine's rows (the script starts its own
    Spark, so it runs alone)."""
    import pandas as pd

    events = queries.sensor_events()
    queries.write_sensor_files(tmp_path / "in", events, 3)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    done = subprocess.run([sys.executable, str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    frame = pd.read_parquet(tmp_path / "out")
    assert frame["error"].isna().all()
    rows = sorted((key, seq, json.loads(value)) for key, seq, value in zip(frame["key"], frame["seq"], frame["value"],
                                                                         strict=True))
    spec = importlib.util.spec_from_file_location("spark_sensor_averages", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)  # the script's query; its main() is not called
    functions = {"no_key": script.no_key, "reading": script.reading}
    expected = queries.sensor_engine_rows(script.per_sensor, functions, events, tmp_path / "engine.db")
    assert rows == expected
    assert len({key for key, _, _ in expected}) == 7 and len(expected) > 50
    assert (tmp_path / "ckpt").is_dir()
