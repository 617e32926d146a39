"""An idempotent ``foreachBatch`` sink, and reading back what it committed.

Spark's file sink is exactly-once on its own (its ``_spark_metadata`` log names the files of committed batches).
``foreachBatch`` is at least once: after a crash Spark runs the uncommitted batch again, with the same input and
the same state, so it produces the same rows. :class:`IdempotentBatchWriter` writes batch ``N`` to
``path/batch_id=N`` with ``overwrite``, so the second run replaces the first one's files; a reader must ignore
batch directories above the last batch the query committed (a batch being written when the process died),
which :func:`read_committed` does::

    query = outputs.writeStream.foreachBatch(IdempotentBatchWriter("out/")) \\
        .option("checkpointLocation", "ckpt/").start()
    ...
    rows = read_committed(spark, "out/", "ckpt/")
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["IdempotentBatchWriter", "last_committed_batch", "read_committed"]

_BATCH_COLUMN = "batch_id"


class IdempotentBatchWriter:
    """A ``foreachBatch`` function: batch ``N`` goes to ``path/batch_id=N``, replacing what a previous run of the
    same batch wrote. ``format`` and ``options``: as for ``DataFrameWriter``."""

    def __init__(self, path: str | os.PathLike[str], format: str = "parquet",
                 options: Mapping[str, str] | None = None) -> None:
        self.path = os.fspath(path)
        self.format = format
        self.options = dict(options or {})

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        writer = batch.write.mode("overwrite").format(self.format)
        for name, value in self.options.items():
            writer = writer.option(name, value)
        writer.save(os.path.join(self.path, f"{_BATCH_COLUMN}={batch_id}"))


def last_committed_batch(checkpoint: str | os.PathLike[str]) -> int | None:
    """The last batch id a streaming query committed in ``checkpoint`` (its ``commits`` log), or ``None``."""
    commits = os.path.join(os.fspath(checkpoint), "commits")
    if not os.path.isdir(commits):
        return None
    ids = [int(name) for name in os.listdir(commits) if name.isdigit()]
    return max(ids) if ids else None


def read_committed(spark: SparkSession, path: str | os.PathLike[str], checkpoint: str | os.PathLike[str],
                   format: str = "parquet") -> DataFrame:
    """The rows :class:`IdempotentBatchWriter` wrote for the batches the query committed (a ``batch_id`` column
    included); :class:`FileNotFoundError` when nothing was committed yet."""
    from pyspark.sql import functions as F  # noqa: N812

    last = last_committed_batch(checkpoint)
    if last is None:
        raise FileNotFoundError(f"the streaming query in {os.fspath(checkpoint)!r} has committed no batch yet")
    frame = spark.read.format(format).load(os.fspath(path))
    return frame.where(F.col(_BATCH_COLUMN) <= F.lit(last))
