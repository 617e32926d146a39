"""``spark-submit --master spark://... --py-files reaqtive.zip,user.zip tests/spark/cluster_driver.py JOB RESULT``:
the cluster tests' driver, run as a user runs a job on a cluster (reaqtive and the query functions come from the
shipped zips, nothing else on the path has them). ``JOB`` (JSON) names what to run; ``RESULT`` receives, as
JSON, the rows each run wrote and what the executors imported.

* ``readme``: the README's Spark example, as written (its ``local_session()`` returns the session spark-submit
  made, on the cluster), run in the driver's working directory (``in/``, ``out/``, ``ckpt/``);
* ``stream``: the acceptance query over ``files`` into a file sink, one file per micro-batch;
* ``batch``: ``run_batch`` of the acceptance query over the first ``files`` until the last event;
* ``windows``: ``run_batch`` of the README's query (its window path, ``reaqtive.spark.batch_windows``) over the
  README's input until ``until``;
* ``kill``: the acceptance query with the crash tests' fault point streamed over ``files``: the executor that
  meets the event named by ``REAQTIVE_TEST_STALL`` (``spark.executorEnv``) hangs there until the test kills its
  worker; Spark runs the lost tasks again on the other executor, from the state the last batch committed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from reaqtive.spark import read_events, run_batch, use_rocksdb
from tests.spark import queries

EXECUTOR_DEADLINE = 120.0  # seconds for the executors to register
STARTED = time.monotonic()


def executors(spark: SparkSession) -> list[str]:
    """The ids of the executors registered with the driver (the driver itself left out)."""
    ids = spark.sparkContext._jsc.sc().getExecutorIds()  # no public Python API for it
    return sorted(str(ids.apply(index)) for index in range(ids.size()))


def imported_from(_: Any) -> tuple[str, str, str]:
    """Where a Python worker imports reaqtive and the query functions from (a task's function), and its working
    directory (its executor's: ``work/<application>/<executor id>``)."""
    import reaqtive
    import tests.spark.queries

    return os.getcwd(), os.path.abspath(reaqtive.__file__), os.path.abspath(tests.spark.queries.__file__)


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[0]).read_text())
    spark = SparkSession.builder.appName("reaqtive-cluster-test").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    use_rocksdb(spark)
    deadline = time.monotonic() + EXECUTOR_DEADLINE
    while len(executors(spark)) < job["executors"]:  # both workers take part from the first task on
        if time.monotonic() > deadline:
            raise TimeoutError(f"{job['executors']} executors did not register in {EXECUTOR_DEADLINE:.0f} s")
        time.sleep(0.2)
    import reaqtive

    result: dict[str, Any] = {"executors": executors(spark), "driver_imports": str(reaqtive.__file__)}
    tasks = 4 * job["executors"]
    result["imports"] = spark.sparkContext.parallelize(range(tasks), tasks).map(imported_from).collect()

    timings = result["seconds"] = {"start": time.monotonic() - STARTED}
    if "readme" in job:
        block = job["readme"]
        exec(compile(block, "README.md", "exec"), {})
        result["readme"] = queries.sink_rows_json(spark, Path("out").resolve())
        result["master"] = spark.sparkContext.master
        timings["readme"] = time.monotonic() - STARTED
    if "stream" in job:
        stream = job["stream"]
        queries.run_files(spark, Path(stream["files"]), Path(stream["out"]), Path(stream["checkpoint"]), buckets=4)
        result["stream"] = queries.sink_rows_json(spark, Path(stream["out"]))
        timings["stream"] = time.monotonic() - STARTED
    if "batch" in job:
        batch = job["batch"]
        events = spark.read.schema(queries.SCHEMA).parquet(*batch["files"])
        outputs = run_batch(events, queries.totals_query(), key="key", time="at", sequence="seq",
                            value=["kind", "amount", "seq"], until=datetime.fromisoformat(batch["until"]))
        result["batch"] = [[row.key, row.seq, None, row.value, row.error] for row in outputs.collect()]
        timings["batch"] = time.monotonic() - STARTED
    if "windows" in job:
        windows = job["windows"]
        namespace: dict[str, Any] = {}
        exec(compile(job["readme"].split("\nspark = ")[0], "README.md", "exec"), namespace)  # the query
        functions = {"no_key": namespace["no_key"], "reading": namespace["reading"]}
        events = read_events(spark, windows["files"], "sensor string, at timestamp, seq long, reading double",
                             streaming=False)
        from reaqtive.spark.batch_windows import plan_windows
        from reaqtive.spark.host import KeyedQuery

        result["windows_path"] = plan_windows(KeyedQuery.of(namespace["per_sensor"], functions), events,
                                              key="sensor", time="at", value=None, sequence="seq",
                                              value_format="json") is not None
        outputs = run_batch(events, namespace["per_sensor"], key="sensor", time="at", sequence="seq",
                            until=datetime.fromisoformat(windows["until"]), functions=functions)
        result["windows"] = [[row.key, row.seq, None, row.value, row.error] for row in outputs.collect()]
        timings["windows"] = time.monotonic() - STARTED
    if "kill" in job:  # last: a worker is killed while it runs
        kill = job["kill"]
        queries.run_files(spark, Path(kill["files"]), Path(kill["out"]), Path(kill["checkpoint"]), crash=True,
                          buckets=4)
        result["kill"] = queries.sink_rows_json(spark, Path(kill["out"]))
        result["executors_after_kill"] = executors(spark)
        timings["kill"] = time.monotonic() - STARTED
    Path(argv[1]).write_text(json.dumps(result))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
