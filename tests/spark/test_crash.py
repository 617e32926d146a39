"""Crash: the driver is killed with SIGKILL while a micro-batch is in flight; a new driver process on the same
checkpoint finishes, and the file sink holds exactly what an uncrashed run writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.spark import queries
from tests.spark.conftest import ROOT

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EVENTS, KEYS, FILES = 2_000, 100, 2
STALL_AT_BATCH = 1
DEADLINE = 240.0  # seconds a driver may take to reach the stall point or to finish


def driver(files: Path, out: Path, checkpoint: Path, stall: str | None) -> subprocess.Popen[str]:
    """A driver process (its own process group, so that the kill takes its JVM and Python workers too)."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYTHONPATH=str(ROOT))
    env.pop(queries.STALL_ENV, None)
    if stall is not None:
        env[queries.STALL_ENV] = stall
    return subprocess.Popen(
        [sys.executable, "-m", "tests.spark.crash_driver", str(files), str(out), str(checkpoint)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )


def test_a_driver_killed_mid_batch_recovers_to_the_uncrashed_output(spark: SparkSession, tmp_path: Path) -> None:
    events = queries.events(EVENTS, KEYS, seed=11)
    files = tmp_path / "in"
    queries.write_files(files, events, FILES)
    out, checkpoint, marker = tmp_path / "out", tmp_path / "ckpt", tmp_path / "stalled"
    stall_seq = STALL_AT_BATCH * (EVENTS // FILES) + 17  # an event of the second (last) file: batch 1

    crashing = driver(files, out, checkpoint, f"{marker}:{stall_seq}")
    try:
        # Meanwhile, the uncrashed run, in this process's session (its workers never stall).
        queries.run_files(spark, files, tmp_path / "ref-out", tmp_path / "ref-ckpt", crash=True)
        expected = queries.sink_rows(spark, tmp_path / "ref-out")

        deadline = time.monotonic() + DEADLINE
        while not marker.exists():  # a worker reached the stall point: batch 1 is in flight
            if crashing.poll() is not None:
                pytest.fail(f"the driver ended before the stall point:\n{crashing.stdout.read()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail("the driver did not reach the stall point in time")
            time.sleep(0.1)
        os.killpg(crashing.pid, signal.SIGKILL)
        crashing.wait(timeout=60)
    finally:
        if crashing.poll() is None:
            os.killpg(crashing.pid, signal.SIGKILL)
            crashing.wait()
    assert crashing.returncode == -signal.SIGKILL
    assert (checkpoint / "offsets" / str(STALL_AT_BATCH)).exists()  # planned ...
    assert not (checkpoint / "commits" / str(STALL_AT_BATCH)).exists()  # ... never committed

    recovering = driver(files, out, checkpoint, None)
    try:
        output, _ = recovering.communicate(timeout=DEADLINE)
    finally:
        if recovering.poll() is None:
            os.killpg(recovering.pid, signal.SIGKILL)
    assert recovering.returncode == 0, output[-3000:]
    assert (checkpoint / "commits" / str(STALL_AT_BATCH)).exists()

    rows = queries.sink_rows(spark, out)
    assert rows == expected
    assert len(expected) > 100
