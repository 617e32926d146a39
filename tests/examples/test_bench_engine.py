"""bench/engine.py keeps working (a tiny configuration; the figures themselves are not checked)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_engine_benchmark_runs_and_prints_its_table(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["bench/engine.py", "--subscriptions", "200", "--rounds", "3", "--events", "2000", "--synchronous", "NORMAL",
            "--keyed-events", "2000"]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # as when it runs as a script: bench/_workloads.py
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(ROOT / "bench" / "engine.py"), run_name="__main__")
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "differential (3x, 2 dirty): pause" in out, "1% of 200 subscriptions change per round"
    assert "recovery of 200 subscriptions" in out
    assert "memory per idle subscription" in out
    assert "plain Python loop (same work)" in out
    assert "keyed windows: 2,000 events over 200 keys" in out and "gc_freeze=True: process" in out
