"""Running reaqtive query definitions on Apache Spark Structured Streaming (the ``spark`` extra).

The same query that runs in the embedded engine runs once per key of a Spark DataFrame, its state kept in Spark's
checkpointed state store (``transformWithStateInPandas``, RocksDB), one opaque blob per hash bucket of keys::

    from reaqtive.spark import local_session, read_events, run_stream

    spark = local_session()
    events = read_events(spark, "in/", "sensor string, at timestamp, reading double")
    outputs = run_stream(events, query, key="sensor", time="at", buckets=16)
    outputs.writeStream.format("parquet").option("path", "out/").option("checkpointLocation", "ckpt/").start()

* :func:`run_stream`: a streaming DataFrame; :func:`run_batch`: a static one (backfill, replay);
  :func:`read_events`: Parquet input whatever its timestamps' unit (pandas writes nanoseconds);
* :func:`initial_state_from_engine` / :func:`export_engine_state`: seed a Spark query with an embedded engine's
  checkpoint; :func:`inspect_state`: read a Spark checkpoint's state back as plain data;
* :func:`embedded_query`: the embedded engine's form of a keyed query (the same results, row for row);
* :class:`IdempotentBatchWriter` / :func:`read_committed`: an idempotent ``foreachBatch`` sink.

``docs/spark.md`` tells when to use Spark, how state is laid out, what each sink guarantees, and what it costs.
The pieces that need no Spark (:mod:`reaqtive.spark.host`, :mod:`reaqtive.spark.embedded`) import without it; the
others need the extra: ``pip install 'reaqtive[spark]'`` and Java 17+.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from reaqtive.spark.batch import run_batch
    from reaqtive.spark.embedded import embedded_query, final_watermark, per_key_outputs
    from reaqtive.spark.host import BucketStateError, KeyedQuery, QueryMismatchError
    from reaqtive.spark.inspect import format_state, inspect_state
    from reaqtive.spark.migration import EngineExport, MigrationError, export_engine_state, initial_state_from_engine
    from reaqtive.spark.session import JavaNotFoundError, check_java, local_session, use_rocksdb
    from reaqtive.spark.sinks import IdempotentBatchWriter, last_committed_batch, read_committed
    from reaqtive.spark.sources import read_events
    from reaqtive.spark.streaming import run_stream

__all__ = [
    "SparkExtraMissingError",
    "BucketStateError",
    "EngineExport",
    "IdempotentBatchWriter",
    "JavaNotFoundError",
    "KeyedQuery",
    "MigrationError",
    "QueryMismatchError",
    "check_java",
    "embedded_query",
    "export_engine_state",
    "final_watermark",
    "format_state",
    "initial_state_from_engine",
    "inspect_state",
    "last_committed_batch",
    "local_session",
    "per_key_outputs",
    "read_committed",
    "read_events",
    "run_batch",
    "run_stream",
    "use_rocksdb",
]

_WHERE: Final = {
    "run_batch": "batch",
    "embedded_query": "embedded",
    "final_watermark": "embedded",
    "per_key_outputs": "embedded",
    "BucketStateError": "host",
    "KeyedQuery": "host",
    "QueryMismatchError": "host",
    "format_state": "inspect",
    "inspect_state": "inspect",
    "EngineExport": "migration",
    "MigrationError": "migration",
    "export_engine_state": "migration",
    "initial_state_from_engine": "migration",
    "JavaNotFoundError": "session",
    "check_java": "session",
    "local_session": "session",
    "use_rocksdb": "session",
    "IdempotentBatchWriter": "sinks",
    "last_committed_batch": "sinks",
    "read_committed": "sinks",
    "read_events": "sources",
    "run_stream": "streaming",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'reaqtive.spark' has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(f"reaqtive.spark.{module}"), name)
    except ModuleNotFoundError as error:
        if error.name and error.name.split(".")[0] in ("pyspark", "pandas", "pyarrow", "google"):
            raise SparkExtraMissingError(name, error.name) from error
        raise
    globals()[name] = value
    return value


class SparkExtraMissingError(ModuleNotFoundError):
    """A part of :mod:`reaqtive.spark` that needs the ``spark`` extra, used without it: a
    :class:`ModuleNotFoundError` (``except ImportError`` catches it) naming the missing module, the command that
    installs it and the Java that Spark needs."""

    def __init__(self, attribute: str, missing: str) -> None:
        super().__init__(
            f"reaqtive.spark.{attribute} needs the 'spark' extra ({missing} is missing): pip install "
            "'reaqtive[spark]', and Java 17+ to run Spark (see docs/spark.md)",
            name=missing,
        )


def __dir__() -> list[str]:
    return sorted(__all__)
