"""examples/service.py: the embedded service runs, restarts, and after a crash gives the uncrashed results."""

from __future__ import annotations

import importlib.util
import runpy
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICE = ROOT / "examples" / "service.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("service_example", SERVICE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_runs_stops_restarts_and_reports(capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(SERVICE), run_name="__main__")
    out = capsys.readouterr().out
    assert "second run: recovered 3 subscriptions" in out
    assert "readings counted: 600" in out, "the count went on from where the first run stopped"
    assert "5-minute averages of s07: [24.27, 28.78, 33.28, 37.78, 42.27, 46.78]" in out
    assert "alerts: 146, first: s07 is at 30.7 C (above 30)" in out


def test_a_crashed_service_recovers_to_the_uncrashed_results(tmp_path: Path) -> None:
    service_module = load_example()
    service_class, feed, start = service_module.TemperatureService, service_module.feed, service_module.T0

    reference = service_class(tmp_path / "reference.db", start=start)
    reference.watch("s07")
    feed(reference, 0, 600)
    reference.step()
    expected = {uri: reference.results(uri) for uri in ("svc://alerts", "svc://count", "svc://watch/s07")}
    reference.close()

    crashing = service_class(tmp_path / "crashing.db", start=start, checkpoint_every_events=200)
    crashing.watch("s07")
    feed(crashing, 0, 350)
    crashing.step()  # 700 events: checkpoints at 200, 400 and 600, then 100 more; then the process "dies"
    crashing.engine.close()  # closing takes no checkpoint; it releases the store, as a dying process does
    restarted = service_class(tmp_path / "crashing.db", start=start)
    assert restarted.recovered == 3
    assert restarted.engine.streams()["svc://readings"].delivered < 349, "some readings are replayed"
    feed(restarted, 350, 600)  # every append before the crash was durable: the producer resumes after them
    restarted.step()
    assert {uri: restarted.results(uri) for uri in expected} == expected
    restarted.close()
