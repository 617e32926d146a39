"""The batch path: the same query over a static DataFrame gives the streaming path's rows."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from reaqtive.spark import run_batch
from tests.spark import queries
from tests.spark.conftest import PARTIAL_FILES, Acceptance

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_a_static_dataframe_gives_the_engines_rows(acceptance: Acceptance, spark: SparkSession) -> None:
    """The first file of the acceptance data, against the engine's outputs at its checkpoint after it (its
    clock then at its last event: the batch run moves every key's clock there too)."""
    files = sorted(acceptance.files.iterdir())[:PARTIAL_FILES]
    events = spark.read.schema(queries.SCHEMA).parquet(*map(str, files))
    last = acceptance.events[events.count() - 1][1]
    outputs = run_batch(events, queries.totals_query(), key="key", time="at", sequence="seq",
                        value=["kind", "amount", "seq"], until=last)
    rows = sorted((row.key, row.seq, row.time, json.loads(row.value), row.error)
                  for row in outputs.collect())
    assert queries.plain_rows(rows) == acceptance.partial_expected
    assert len(rows) > 5_000
