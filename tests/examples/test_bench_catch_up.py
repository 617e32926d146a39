"""bench/catch_up.py keeps working (a tiny configuration; the figures themselves are not checked)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_catch_up_benchmark_runs_and_prints_its_figures(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["bench/catch_up.py", "--events", "3000", "--queries", "3", "--rounds", "1"])
    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # as when it runs as a script: bench/_workloads.py
    runpy.run_path(str(ROOT / "bench" / "catch_up.py"), run_name="__main__")
    out = capsys.readouterr().out
    for label in ("plain Python loop (a)", "in step (events x queries)/s", "catch-up of (a), log events/s",
                  "catch-up of buffer(10 s)"):
        assert label in out, out
