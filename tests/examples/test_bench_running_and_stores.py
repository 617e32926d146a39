"""bench/running.py and bench/stores.py keep working (tiny configurations; the figures themselves are not
checked, only that each line is printed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_bench(name: str, argv: list[str]) -> str:
    """As make bench runs it: a subprocess whose sys.path[0] is bench/, where the script finds _workloads.py."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / name), *argv], check=False, capture_output=True,
                          text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_running_bench_prints_timer_lateness_and_the_mode_ratio() -> None:
    out = run_bench("running.py", ["--timers", "20", "--spread", "0.2", "--events", "5000", "--rounds", "1"])
    assert "timer lateness, serve() thread" in out and "timer lateness, AsyncEngine task" in out
    assert "running mode / manual mode" in out


def test_stores_bench_prints_both_stores() -> None:
    out = run_bench("stores.py", ["--events", "3000", "--subscriptions", "40", "--fsync", "off"])
    assert out.count("SQLite ") == 4 and out.count("PostgreSQL ") == 4
    assert "plain loop" in out
