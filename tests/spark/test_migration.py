"""Migration: an embedded engine's checkpoint seeds a Spark query (``initialState``), Spark's state reads back,
and the idempotent ``foreachBatch`` sink keeps only committed batches."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reaqtive.engine import Engine
from reaqtive.engine.expressions import FunctionRegistry
from reaqtive.spark import (
    IdempotentBatchWriter,
    embedded_query,
    initial_state_from_engine,
    inspect_state,
    per_key_outputs,
    read_committed,
    run_stream,
)
from tests.spark import queries

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EVENTS, KEYS, FILES, ON_ENGINE = 4_000, 80, 4, 2
SUBSCRIPTION = "reaqtive://spark/totals"


def engine_outputs(path: Path, events: list[queries.Event], *, finish: bool) -> list[tuple[Any, int, Any]]:
    """Run the embedded form over ``events``, checkpoint, close; ``finish``: move the clock to the last event."""
    functions = FunctionRegistry()
    with Engine(path, functions=functions, start=queries.T0) as engine:
        engine.create_stream(queries.STREAM)
        engine.create_subscription(SUBSCRIPTION, embedded_query(queries.totals_query(), functions))
        engine.append_many(queries.STREAM, [([key, payload], when) for key, when, _, payload in events])
        engine.process()
        if finish:
            engine.advance_time(events[-1][1])
        engine.checkpoint()
        return per_key_outputs(engine.outputs(SUBSCRIPTION))


def test_an_engine_checkpoint_seeds_spark_which_continues_it(spark: SparkSession, tmp_path: Path) -> None:
    events = queries.events(EVENTS, KEYS, seed=5)
    files = queries.write_files(tmp_path / "all", events, FILES)
    expected = sorted(engine_outputs(tmp_path / "full.db", events, finish=True))
    split = ON_ENGINE * EVENTS // FILES
    on_engine = engine_outputs(tmp_path / "engine.db", events[:split], finish=False)

    rest = tmp_path / "rest"  # the files the engine had not processed go to Spark
    rest.mkdir()
    for path in files[ON_ENGINE:]:
        shutil.copy(path, rest / path.name)
    initial = initial_state_from_engine(spark, tmp_path / "engine.db", SUBSCRIPTION, queries.totals_query(),
                                        buckets=4)
    assert initial.count() == 4  # one blob per bucket
    outputs = run_stream(queries.stream_of_files(spark, rest), queries.totals_query(), key="key", time="at",
                         sequence="seq", value=["kind", "amount", "seq"], buckets=4, initial_state=initial)
    out, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    (outputs.writeStream.foreachBatch(IdempotentBatchWriter(out)).option("checkpointLocation", str(checkpoint))
     .trigger(availableNow=True).start().awaitTermination())

    def committed() -> list[tuple[Any, int, Any]]:
        rows = read_committed(spark, out, checkpoint).collect()
        return sorted((row.key, row.seq, json.loads(row.value)) for row in rows)

    on_spark = committed()
    assert sorted(on_engine + on_spark) == expected
    first_on_spark: dict[str, int] = {}
    for key, seq, _ in on_spark:
        first_on_spark[key] = min(seq, first_on_spark.get(key, seq))
    on_engine_count = Counter(key for key, _, _ in on_engine)
    assert first_on_spark == {key: on_engine_count[key] for key in first_on_spark}  # numbering continues
    assert sum(on_engine_count.values()) > 0

    # A batch written but never committed (the process died before the commit) is not read.
    spark.read.parquet(str(out)).limit(3).drop("batch_id").write.parquet(str(out / "batch_id=99"))
    assert committed() == on_spark

    summary = inspect_state(checkpoint, spark, keys=True)
    assert summary["keys"] == KEYS
    last_seq = {key: seq for key, seq, _ in expected}
    assert {key["key"]: key["outputs"] for key in summary["key_states"]} == {k: s + 1 for k, s in last_seq.items()}
    assert all(key["instance"].startswith(SUBSCRIPTION + "/") for key in summary["key_states"])
