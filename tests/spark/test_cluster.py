"""On a real standalone cluster: a master and two workers (one core each) in processes of their own, the package
shipped to the executors as users ship it (zips given to ``spark-submit --py-files``; the executors' Python has
no path to this checkout), the driver started with ``spark-submit``. The README's query and the acceptance
queries give the embedded engine's rows, row for row; so does a run whose worker is killed in the middle of a
batch, and a run whose driver is killed in the middle of a batch and submitted again on the same checkpoint.

One cluster and one driver run serve the module: starting JVMs is most of the cost on 2 cores."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from reaqtive.spark import final_watermark
from tests.spark import queries
from tests.spark.cluster import ROOT, START_DEADLINE, StandaloneCluster, package_zips
from tests.spark.conftest import PARTIAL_FILES, Acceptance
from tests.test_docs import python_blocks, section

WORKERS = 2
DRIVER_DEADLINE = 300.0  # seconds for the driver's whole run on a loaded 2-core machine
# The first test's setup starts the cluster and runs the driver: pytest-timeout's limit must cover both deadlines
pytestmark = pytest.mark.timeout(START_DEADLINE + DRIVER_DEADLINE + 60)
KILL_EVENTS, KILL_KEYS, KILL_FILES = 2_000, 100, 2


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A master and two workers on 127.0.0.1 for the session; stopped (their process groups killed) at its end,
    whatever happened."""
    running = StandaloneCluster(tmp_path_factory.mktemp("cluster"), WORKERS, cores=1, memory="1g")
    try:
        yield running.start()
    finally:
        running.stop()


@dataclass
class ClusterRun:
    result: dict[str, Any]
    readme_expected: list[tuple[str, int, Any]]
    zips: list[Path]
    killed_executor: str
    killed_worker: str
    kill_expected: list[tuple[Any, int, Any]]


def readme_block() -> str:
    return python_blocks(section(ROOT / "README.md", "On Apache Spark"))[0]


@pytest.fixture(scope="module")
def cluster_run(acceptance: Acceptance, cluster: StandaloneCluster, tmp_path_factory: pytest.TempPathFactory
                ) -> ClusterRun:
    """One ``spark-submit`` of ``cluster_driver.py``: the README example in a fresh directory holding
    pandas-default Parquet files, the acceptance query streamed, run_batch, and a stream whose worker this
    fixture kills when its executor reaches the stall point (a marker file holding the executor's directory)."""
    root = tmp_path_factory.mktemp("cluster-run")
    zips = package_zips(root / "ship")
    readme = root / "readme"
    events = queries.sensor_events()
    queries.write_sensor_files(readme / "in", events, 3)
    block = readme_block()
    definitions: dict[str, Any] = {}
    exec(compile(block.split("\nspark = ")[0], "README.md", "exec"), definitions)  # the query, not the run
    functions = {"no_key": definitions["no_key"], "reading": definitions["reading"]}
    first = sorted(acceptance.files.iterdir())[:PARTIAL_FILES]
    size = -(-len(acceptance.events) // len(list(acceptance.files.iterdir())))
    job = {
        "executors": WORKERS,
        "readme": block,
        "stream": {"files": str(acceptance.files), "out": str(root / "out"), "checkpoint": str(root / "ckpt")},
        "batch": {"files": [str(path) for path in first],
                  "until": acceptance.events[PARTIAL_FILES * size - 1][1].isoformat()},
    }
    last = events[-1][1].floor("us").tz_localize("UTC").to_pydatetime()
    job["windows"] = {"files": str(readme / "in"), "until": final_watermark(last).isoformat()}
    kill_events = queries.events(KILL_EVENTS, KILL_KEYS, seed=11)
    queries.write_files(root / "kill-in", kill_events, KILL_FILES)
    job["kill"] = {"files": str(root / "kill-in"), "out": str(root / "kill-out"),
                   "checkpoint": str(root / "kill-ckpt")}
    marker = root / "stalled"
    stall = f"{marker}:{KILL_EVENTS // KILL_FILES + 17}"  # an event of the second (last) file: batch 1
    (root / "job.json").write_text(json.dumps(job))
    log = root / "driver.log"
    driver = cluster.submit(ROOT / "tests" / "spark" / "cluster_driver.py", [str(root / "job.json"),
                            str(root / "result.json")], zips, cwd=readme, log=log,
                            conf={"spark.sql.shuffle.partitions": str(WORKERS),
                                  "spark.sql.session.timeZone": "UTC", "spark.sql.adaptive.enabled": "false",
                                  f"spark.executorEnv.{queries.STALL_ENV}": stall})
    try:
        deadline = time.monotonic() + DRIVER_DEADLINE
        while not marker.exists():  # an executor reached the stall point: the kill run's batch 1 is in flight
            if driver.poll() is not None:
                pytest.fail(f"the cluster driver ended before the stall point:\n{log.read_text()[-6000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"the cluster driver did not reach the stall point:\n{log.read_text()[-4000:]}")
            time.sleep(0.2)
        stalled_in = re.search(r"/worker-(\d+)/app-[^/]+/(\d+)$", marker.read_text())  # the executor's directory
        assert stalled_in is not None, marker.read_text()
        cluster.kill_worker(int(stalled_in.group(1)))
        driver.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pytest.fail(f"the cluster driver did not finish in {DRIVER_DEADLINE:.0f} s:\n{log.read_text()[-4000:]}")
    finally:
        if driver.poll() is None:
            cluster.kill_group(driver)
    assert driver.returncode == 0, log.read_text()[-6000:] + cluster.log_tails()
    result = json.loads((root / "result.json").read_text())
    print(f"cluster driver: seconds since its start {result['seconds']}")
    expected = queries.sensor_engine_rows(definitions["per_sensor"], functions, events, root / "engine.db")
    return ClusterRun(result, expected, zips, stalled_in.group(2), stalled_in.group(1),
                      queries.engine_totals(kill_events, root / "kill-engine.db"))


@dataclass
class DriverKillRun:
    first_returncode: int | None
    result: dict[str, Any]
    expected: list[tuple[Any, int, Any]]
    planned_not_committed: bool


def kill_job(root: Path, seed: int) -> tuple[dict[str, Any], list[queries.Event]]:
    """A job of cluster_driver.py streaming the crash query over fresh event files into ``root``."""
    events = queries.events(KILL_EVENTS, KILL_KEYS, seed=seed)
    queries.write_files(root / "in", events, KILL_FILES)
    job = {"executors": WORKERS,
           "kill": {"files": str(root / "in"), "out": str(root / "out"), "checkpoint": str(root / "ckpt")}}
    (root / "job.json").write_text(json.dumps(job))
    return job, events


@pytest.fixture(scope="module")
def driver_kill_run(cluster_run: ClusterRun, cluster: StandaloneCluster, tmp_path_factory: pytest.TempPathFactory
                    ) -> DriverKillRun:
    """After the worker kill (``cluster_run``): the lost worker started again, then a driver SIGKILLed (with its JVM
    and Python workers) while an executor holds batch 1 in flight; a second ``spark-submit`` of the same job on
    the same checkpoint location runs to the end."""
    root = tmp_path_factory.mktemp("driver-kill")
    cluster.restart_worker(int(cluster_run.killed_worker))
    _, events = kill_job(root, seed=23)
    marker = root / "stalled"
    conf = {"spark.sql.shuffle.partitions": str(WORKERS), "spark.sql.session.timeZone": "UTC",
            "spark.sql.adaptive.enabled": "false"}
    script, args = ROOT / "tests" / "spark" / "cluster_driver.py", [str(root / "job.json"), str(root / "result.json")]
    first_log = root / "driver-1.log"
    stall = {f"spark.executorEnv.{queries.STALL_ENV}": f"{marker}:{KILL_EVENTS // KILL_FILES + 17}"}
    first = cluster.submit(script, args, cluster_run.zips, cwd=root, log=first_log, conf={**conf, **stall})
    try:
        deadline = time.monotonic() + DRIVER_DEADLINE
        while not marker.exists():  # an executor holds the second file's batch
            if first.poll() is not None:
                pytest.fail(f"the first driver ended before the stall point:\n{first_log.read_text()[-6000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"the first driver did not reach the stall point:\n{first_log.read_text()[-4000:]}")
            time.sleep(0.2)
    finally:
        cluster.kill_group(first)  # the driver and everything of its process group: JVM, Python
    checkpoint = root / "ckpt"
    planned_not_committed = (checkpoint / "offsets" / "1").exists() and not (checkpoint / "commits" / "1").exists()

    second_log = root / "driver-2.log"
    second = cluster.submit(script, args, cluster_run.zips, cwd=root, log=second_log, conf=conf)
    try:
        second.wait(timeout=DRIVER_DEADLINE)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the second driver did not finish in {DRIVER_DEADLINE:.0f} s:\n{second_log.read_text()[-4000:]}")
    finally:
        if second.poll() is None:
            cluster.kill_group(second)
    assert second.returncode == 0, second_log.read_text()[-6000:] + cluster.log_tails()
    return DriverKillRun(first.returncode, json.loads((root / "result.json").read_text()),
                         queries.engine_totals(events, root / "engine.db"), planned_not_committed)


def test_the_executors_import_the_shipped_zips_not_this_checkout(cluster_run: ClusterRun) -> None:
    result = cluster_run.result
    assert len(result["executors"]) == WORKERS
    reaqtive_zip, user_zip = (path.name for path in cluster_run.zips)
    # The driver imports from the zip spark-submit put on its path; each task's Python worker from the copy its
    # executor fetched into its own directory.
    assert f"{reaqtive_zip}/reaqtive/__init__.py" in result["driver_imports"]
    for directory, package, functions in result["imports"]:
        assert package == f"{directory}/{reaqtive_zip}/reaqtive/__init__.py"
        assert functions == f"{directory}/{user_zip}/tests/spark/queries.py"
        assert not package.startswith(str(ROOT))
    assert len({directory for directory, _, _ in result["imports"]}) == WORKERS  # both executors ran tasks


def test_the_readme_example_on_the_cluster_gives_the_engines_rows(cluster_run: ClusterRun) -> None:
    assert cluster_run.result["master"].startswith("spark://127.0.0.1:")
    rows = queries.sink_values(cluster_run.result["readme"])
    assert rows == cluster_run.readme_expected
    assert len(rows) > 50


def test_the_acceptance_query_streams_on_the_cluster_as_in_the_engine(
    cluster_run: ClusterRun, acceptance: Acceptance
) -> None:
    rows = cluster_run.result["stream"]
    assert queries.sink_values(rows) == acceptance.expected
    assert len({(row[0], row[1]) for row in rows}) == len(rows)  # each (key, seq) once


def test_run_batch_on_the_cluster_gives_the_engines_rows(cluster_run: ClusterRun, acceptance: Acceptance) -> None:
    assert queries.sink_values(cluster_run.result["batch"]) == acceptance.partial_expected


def test_the_readme_query_in_run_batchs_window_path_on_the_cluster_gives_the_engines_rows(
        cluster_run: ClusterRun) -> None:
    """run_batch of the README's query takes the window path (reaqtive.spark.batch_windows) on the executors, and
    its rows are the engine's."""
    assert cluster_run.result["windows_path"]
    assert queries.sink_values(cluster_run.result["windows"]) == cluster_run.readme_expected


def test_a_worker_killed_mid_batch_leaves_the_outputs_of_an_uninterrupted_run(cluster_run: ClusterRun) -> None:
    """SIGKILL to the worker whose executor is in the middle of batch 1 (with the executor and its Python
    workers): Spark runs the lost tasks again on the other executor from the state batch 0 committed, and the
    sink holds exactly the rows of an uninterrupted run."""
    result = cluster_run.result
    assert cluster_run.killed_executor in result["executors"]
    assert result["executors_after_kill"] == sorted(set(result["executors"]) - {cluster_run.killed_executor})
    rows = result["kill"]
    assert queries.sink_values(rows) == cluster_run.kill_expected
    assert len({(row[0], row[1]) for row in rows}) == len(rows)
    assert len(rows) > 100


def test_a_driver_killed_mid_batch_and_submitted_again_leaves_the_outputs_of_an_uninterrupted_run(
    driver_kill_run: DriverKillRun,
) -> None:
    """SIGKILL to the driver (client mode: its JVM and Python) while an executor holds batch 1: the application
    ends with the batch planned in the checkpoint's offsets but not committed; a new spark-submit on the same
    checkpoint location plans batch 1 again from the state batch 0 committed, and the sink holds exactly the
    rows of an uninterrupted run."""
    assert driver_kill_run.planned_not_committed, "the kill came while batch 1 was in flight"
    assert driver_kill_run.first_returncode == -signal.SIGKILL
    rows = driver_kill_run.result["kill"]
    assert queries.sink_values(rows) == driver_kill_run.expected
    assert len({(row[0], row[1]) for row in rows}) == len(rows)
    assert len(rows) > 100
    assert len(driver_kill_run.result["executors_after_kill"]) == WORKERS, "the restarted worker took part"
