"""``python -m tests.spark.replay_driver FILES OUT CHECKPOINT STATS FAIL_BATCH``: the table-form query over the
event files on ``local[1]`` (one Python worker, so a replayed batch meets the live state its failed attempt left),
into an idempotent ``foreachBatch`` sink that fails batch ``FAIL_BATCH`` once, after its state was written; the
query is then restarted on the same checkpoint in the same session and runs to the end."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from reaqtive.spark import IdempotentBatchWriter, local_session, run_stream
from tests.spark import queries
from tests.spark.conftest import TEST_CONF


class FailingOnce:
    """Writes each batch, then fails batch ``fail_batch`` the first time it is written (as a sink that lost its
    connection after the write would): Spark has not committed the batch, and replays it on restart."""

    def __init__(self, writer: IdempotentBatchWriter, fail_batch: int) -> None:
        self.writer, self.fail_batch, self.failed = writer, fail_batch, False

    def __call__(self, batch: Any, batch_id: int) -> None:
        self.writer(batch, batch_id)
        if batch_id == self.fail_batch and not self.failed:
            self.failed = True
            raise RuntimeError(f"the sink failed after writing batch {batch_id}")


def main(argv: list[str]) -> int:
    files, out, checkpoint, stats = (Path(arg) for arg in argv[:4])
    sink = FailingOnce(IdempotentBatchWriter(out), int(argv[4]))
    spark = local_session("reaqtive-replay-test", cores=1, conf=TEST_CONF)
    try:
        from pyspark.errors import StreamingQueryException

        outputs = run_stream(queries.stream_of_files(spark, files), queries.table_query(), key="key", time="at",
                             sequence="seq", value=["kind", "amount", "seq"], buckets=2, stats_dir=stats)
        attempts = 0
        while True:
            attempts += 1
            running = (outputs.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
                       .trigger(availableNow=True).start())
            try:
                running.awaitTermination()
                break
            except StreamingQueryException:
                if attempts > 1:
                    raise
                print("replay driver: the sink failed, restarting", flush=True)
    finally:
        spark.stop()
    print(f"replay driver: finished after {attempts} runs", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
