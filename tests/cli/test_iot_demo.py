"""The IoT demo: a worker process killed with SIGKILL and restarted ends with the durable sink of an uncrashed run."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pytest

from reaqtive.cli import main
from reaqtive.cli.demos import iot

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the demo kills its worker with SIGKILL")

# 40 minutes of event time: enough for sensor s03's first excursion above the threshold
EVENTS = 12_000
EVERY = 1_000


def test_demo_recovers_after_kill_and_equals_the_uncrashed_run(tmp_path: Path) -> None:
    lines: list[str] = []
    report = iot.run_demo(iot.DemoConfig(events=EVENTS, every=EVERY, crash_at=0.5, store_dir=tmp_path), lines.append)

    assert report.equal, report.differences
    assert lines[-1] == "recovered results EQUAL the uncrashed run: nothing lost, nothing twice"
    assert report.killed_at >= EVENTS // 2, "killed once half the input was processed"
    assert report.before_crash.checkpoints >= 2, "killed after some periodic checkpoints"
    assert report.killed_at < EVENTS, "killed before the end"
    assert report.resumed_at <= report.killed_at and report.resumed_at % EVERY == 0, (
        "the restarted engine resumes from a periodic checkpoint"
    )
    assert report.recovered_subscriptions == len(iot.queries())
    assert report.recovered_inner > 0, "group_by and window inner subscriptions were recovered too"
    assert all(count > 0 for count in report.reference_outputs.values()), report.reference_outputs
    assert any("kill -9" in line for line in lines) and any("[restarted] recovered" in line for line in lines)
    # the stores stay where --store put them, and their sinks are what was compared
    outputs = iot.durable_outputs(tmp_path / "crashed.db")
    assert {uri: len(rows) for uri, rows in outputs.items()} == report.recovered_outputs
    assert all(seqs == list(range(len(seqs))) for seqs in ([s for s, _ in rows] for rows in outputs.values())), (
        "each query's outputs are numbered 0, 1, 2, ... with no gap and no duplicate"
    )


def test_hot_minutes_are_per_sensor_averages_above_the_threshold(tmp_path: Path) -> None:
    iot.run_demo(iot.DemoConfig(events=EVENTS, every=EVERY, crash_at=0.5, store_dir=tmp_path), lambda _: None)
    outputs = iot.durable_outputs(tmp_path / "reference.db")

    hot = [value for _, value in outputs["iot://hot-minutes"]]
    assert hot and all(v["average"] > iot.THRESHOLD for v in hot)
    assert {v["sensor"] for v in hot} == {"s03"}, "only the sensor that heats up"
    expected_first = _first_hot_minute()
    assert hot[0]["average"] == expected_first
    counts = [value for _, value in outputs["iot://counts"]]
    five_minutes = int(timedelta(minutes=5) / iot.STEP)
    assert all(sum(c.values()) == five_minutes for c in counts), "every 5-minute window counts all its readings"
    alerts = [value for _, value in outputs["iot://alerts"]]
    assert alerts and all(a.startswith("ALERT s07") for a in alerts)


def _first_hot_minute() -> float:
    """The first one-minute average of s03 above the threshold, computed directly from the input. The group's
    time buffer starts when the group does, at s03's first reading; a reading at a window's end opens the next."""
    readings = [iot.reading(i) for i in range(EVENTS)]
    mine = [(when, r["celsius"]) for r, when in readings if r["sensor"] == "s03"]
    start = mine[0][0]
    minutes: dict[int, list[float]] = {}
    for when, celsius in mine:
        minutes.setdefault((when - start) // timedelta(minutes=1), []).append(celsius)
    for _, values in sorted(minutes.items()):
        average = round(sum(values) / len(values), 2)
        if average > iot.THRESHOLD:
            return average
    raise AssertionError("s03 never goes above the threshold")


def test_cli_demo_exits_zero_and_prints_equal(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["demo", "--events", str(EVENTS), "--every", str(EVERY), "--store", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "1. reference run" in out and "[crash run]" in out and "outputs per query" in out
    assert out.rstrip().endswith("recovered results EQUAL the uncrashed run: nothing lost, nothing twice")


def test_cli_demo_refuses_too_few_events(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--events", "1000", "--every", "1000"]) == 2
    assert "--events must be at least" in capsys.readouterr().err


def test_backpressure_demo_prints_requests_and_elements(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--backpressure"]) == 0
    out = capsys.readouterr().out
    assert "sink   -> request(4)" in out, "the sink's demand is shown"
    assert "[source] request(1)" in out, "the filter's replacement requests reach the source"
    assert "sink   <- 49" in out and "sink   <- complete" in out
    assert "BufferOverflowError" in out, "the hot subject's overflow policy is shown"


def test_a_difference_is_reported_and_fails_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    report = iot.DemoReport(events=10, reference_outputs={"iot://alerts": 2}, recovered_outputs={"iot://alerts": 1},
                            differences=["iot://alerts: 2 outputs in the reference run, 1 in the crashed one"])
    assert report_lines_end(report) == "recovered results DIFFER from the uncrashed run"
    monkeypatch.setattr(iot, "run_demo", lambda config, say: report)
    assert main(["demo", "--events", "8000", "--every", "1000"]) == 1


def report_lines_end(report: iot.DemoReport) -> str:
    lines = iot.report_lines(report)
    assert any(line.strip().startswith("DIFFERENT") and "iot://alerts" in line for line in lines)
    return lines[-1]
