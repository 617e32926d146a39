"""``python -m tests.spark.crash_driver FILES OUT CHECKPOINT``: one run of the crash test's query, in a driver
process of its own (its own JVM and SparkSession), over the event files into a Parquet file sink."""

from __future__ import annotations

import sys
from pathlib import Path

from reaqtive.spark import local_session
from tests.spark.conftest import TEST_CONF
from tests.spark.queries import run_files


def main(argv: list[str]) -> int:
    files, out, checkpoint = (Path(arg) for arg in argv)
    spark = local_session("reaqtive-crash-test", cores=2, conf=TEST_CONF)
    try:
        run_files(spark, files, out, checkpoint, crash=True)
    finally:
        spark.stop()
    print("crash driver: finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
