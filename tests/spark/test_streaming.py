"""Acceptance: a keyed query on Spark Structured Streaming equals the embedded engine, row for row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from reaqtive.cli import main
from reaqtive.spark import format_state, inspect_state
from tests.spark import queries
from tests.spark.conftest import ACCEPTANCE_FILES, ACCEPTANCE_KEYS, Acceptance

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_spark_output_equals_the_embedded_engine_row_for_row(
    acceptance: Acceptance, spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    running = queries.run_files(spark, acceptance.files, out, checkpoint, buckets=4)

    data_batches = [p for p in running.recentProgress if p["numInputRows"] > 0]
    assert [p["numInputRows"] for p in data_batches] == [10_000] * ACCEPTANCE_FILES
    rows = queries.sink_rows(spark, out)
    assert queries.plain_rows(rows) == acceptance.expected
    assert len({(row[0], row[1]) for row in rows}) == len(rows)  # each (key, seq) once
    assert all(row[4] is None for row in rows)

    summary = inspect_state(checkpoint, spark, keys=True)
    assert (summary["buckets"], summary["keys"]) == (4, ACCEPTANCE_KEYS)
    assert sum(bucket["keys"] for bucket in summary["bucket_states"]) == ACCEPTANCE_KEYS
    produced = {key["key"]: key["outputs"] for key in summary["key_states"]}
    last_seq: dict[str, int] = {}
    for key, seq, _ in acceptance.expected:
        last_seq[key] = max(last_seq.get(key, -1), seq)
    assert produced == {key: seq + 1 for key, seq in last_seq.items()}
    assert "reaqtive:group_by+keyed+timed v2" in summary["key_states"][0]["operators"]  # windows in groups: keyed
    assert f"{ACCEPTANCE_KEYS} keys" in format_state(summary)

    # The command line shows the same state (through the test's active session).
    capsys.readouterr()
    assert main(["inspect", str(checkpoint), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["keys"] == ACCEPTANCE_KEYS
    assert main(["inspect", str(checkpoint), "--keys"]) == 0
    table = capsys.readouterr().out
    assert f"{ACCEPTANCE_KEYS} keys" in table and len(table.splitlines()) > ACCEPTANCE_KEYS
