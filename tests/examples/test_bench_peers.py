"""bench/peers.py keeps working (a tiny configuration in one process; the figures themselves are not checked)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_peers_benchmark_runs_and_prints_its_table() -> None:
    # A subprocess, as make bench runs it: bench/ is then sys.path[0], where peers.py finds _workloads.py.
    command = [sys.executable, str(ROOT / "bench" / "peers.py"), "--events", "2000", "--engine-events", "2000",
               "--rounds", "1", "--no-subprocess"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "| workload | loop + callbacks | reaqtive library `run()` | reaqtive engine `process()` " in done.stdout
    for key in "abc":
        assert f"| ({key}) " in done.stdout
    assert "targets (issues 15, 31)" in done.stdout


def test_the_workloads_expected_counts_are_the_plain_loops() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from _workloads import WORKLOADS, CountingSink
    finally:
        sys.path.remove(str(ROOT / "bench"))
    for n in (0, 1, 99, 100, 101, 2000):
        for workload in WORKLOADS:
            sink = CountingSink()
            workload.loop(n, sink)
            assert workload.expected(n) == sink.count, (workload.key, n)


@pytest.mark.slow
def test_peers_benchmark_measures_another_checkout_beside_this_one() -> None:
    """--against DIR: the reaqtive columns of DIR (here this very checkout) measured beside this one's."""
    command = [sys.executable, str(ROOT / "bench" / "peers.py"), "--events", "500", "--engine-events", "500",
               "--rounds", "1", "--only", "c", "--cpu-time", "--against", str(ROOT)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert f"against {ROOT} (measured beside each run of this checkout)" in done.stdout
    assert "| (c) | against | " in done.stdout and "| (c) | this | " in done.stdout
    assert "load average (1 min): " in done.stdout
