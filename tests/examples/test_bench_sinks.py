"""bench/sinks.py keeps working (a tiny configuration; the figures themselves are not checked)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_sinks_benchmark_runs_and_prints_its_figures(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["bench/sinks.py", "--events", "3000", "--latency", "0.01", "--rounds", "1"])
    runpy.run_path(str(ROOT / "bench" / "sinks.py"), run_name="__main__")
    out = capsys.readouterr().out
    for label in ("appends", "end to end", "webhook requests", "plain loop"):
        assert label in out, out
