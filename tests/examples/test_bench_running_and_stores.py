"""bench/running.py and bench/stores.py keep working (tiny configurations; the figures themselves are not
checked, only that each line is printed)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_bench(name: str, argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    monkeypatch.setattr(sys, "argv", [f"bench/{name}", *argv])
    runpy.run_path(str(ROOT / "bench" / name), run_name="__main__")
    return capsys.readouterr().out


def test_running_bench_prints_timer_lateness_and_the_mode_ratio(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run_bench("running.py", ["--timers", "20", "--spread", "0.2", "--events", "5000", "--rounds", "1"],
                    monkeypatch, capsys)
    assert "timer lateness, serve() thread" in out and "timer lateness, AsyncEngine task" in out
    assert "running mode / manual mode" in out


def test_stores_bench_prints_both_stores(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_bench("stores.py", ["--events", "3000", "--subscriptions", "40", "--fsync", "off"], monkeypatch, capsys)
    assert out.count("SQLite ") == 4 and out.count("PostgreSQL ") == 4
    assert "plain loop" in out
