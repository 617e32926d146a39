"""The table form and the live cache on Spark: the rows of the instance form, and a batch replayed after a
failure rebuilds from the committed state instead of going on from the live state its failed attempt left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reaqtive import keyed_execution
from reaqtive.spark import final_watermark, inspect_state, read_committed, run_batch
from reaqtive.spark.live import read_stats
from tests.spark import queries
from tests.spark.conftest import ROOT, Acceptance

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEADLINE = 300.0


def test_the_table_form_on_spark_gives_the_rows_of_the_instance_form(
    acceptance: Acceptance, spark: SparkSession, tmp_path: Path
) -> None:
    stats = tmp_path / "stats"
    queries.run_files(spark, acceptance.files, tmp_path / "table", tmp_path / "table-ckpt",
                      query=queries.table_query(), stats_dir=stats)
    with keyed_execution(False):
        queries.run_files(spark, acceptance.files, tmp_path / "instances", tmp_path / "instances-ckpt",
                          query=queries.table_query(), cache_keys=0)
    table_rows = queries.sink_rows(spark, tmp_path / "table")
    assert table_rows == queries.sink_rows(spark, tmp_path / "instances")
    assert len(table_rows) > 1_000 and all(row[4] is None for row in table_rows)
    counters = read_stats(stats)
    assert counters["hits"] + counters["misses"] + counters["stale"] >= 4 * 4  # 4 buckets, 5 batches: counted

    summary = inspect_state(tmp_path / "table-ckpt", spark, keys=True)
    assert {bucket["form"] for bucket in summary["bucket_states"]} == {"table"}
    assert summary["key_states"][0]["operators"] == [
        "aggregate_by_key (table)", "filter (table)", "map (table)", "map_indexed (table)"]
    produced = {key["key"]: key["outputs"] for key in summary["key_states"]}
    assert sum(produced.values()) == len(table_rows)
    instances = inspect_state(tmp_path / "instances-ckpt", spark)
    assert {bucket["form"] for bucket in instances["bucket_states"]} == {"instances"}


def test_run_batch_in_the_table_form_gives_the_rows_of_the_instance_form(
    acceptance: Acceptance, spark: SparkSession
) -> None:
    events = spark.read.schema(queries.SCHEMA).parquet(str(acceptance.files))
    options: dict[str, Any] = {"key": "key", "time": "at", "sequence": "seq", "value": ["kind", "amount", "seq"],
                               "until": final_watermark(acceptance.events[-1][1])}
    table_rows = run_batch(events, queries.table_query(), **options).collect()
    with keyed_execution(False):
        instance_frame = run_batch(events, queries.table_query(), **options)
    assert sorted(map(tuple, table_rows)) == sorted(map(tuple, instance_frame.collect()))
    assert len(table_rows) > 1_000


def test_a_replayed_batch_rebuilds_from_the_committed_state(spark: SparkSession, tmp_path: Path) -> None:
    files = tmp_path / "in"
    queries.write_files(files, queries.events(6_000, 200, seed=5), 4)
    out, checkpoint, stats = tmp_path / "out", tmp_path / "ckpt", tmp_path / "stats"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYTHONPATH=str(ROOT))
    driver = subprocess.run(
        [sys.executable, "-m", "tests.spark.replay_driver", str(files), str(out), str(checkpoint), str(stats), "2"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=DEADLINE, check=False,
    )
    assert driver.returncode == 0, (driver.stdout + driver.stderr)[-3000:]
    assert "the sink failed, restarting" in driver.stdout and "finished after 2 runs" in driver.stdout

    # The reference: the instance form, no cache, no failure.
    with keyed_execution(False):
        queries.run_files(spark, files, tmp_path / "ref", tmp_path / "ref-ckpt", query=queries.table_query(),
                          cache_keys=0, buckets=2)
    expected = queries.sink_rows(spark, tmp_path / "ref")
    committed = read_committed(spark, out, checkpoint).collect()
    rows = sorted((row.key, row.seq, row.time, json.loads(row.value), row.error) for row in committed)
    assert rows == expected and len(expected) > 100

    counters = read_stats(stats)
    # One worker: the replay of batch 2 met the live state its failed attempt wrote (not committed) and rebuilt
    # from the store; the other batches went on from their live state.
    assert counters["stale"] >= 1, counters
    assert counters["hits"] >= 1, counters
