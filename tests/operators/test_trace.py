"""trace: reports signals including demand, passes elements through."""

from __future__ import annotations

from reaqtive import from_iterable
from tests.support import Recorder


def test_trace_reports_demand_and_elements_in_order() -> None:
    lines: list[str] = []
    recorder = Recorder(initial=2)
    from_iterable([5, 6, 7]).trace("t", lines.append).run(recorder)
    recorder.request(1)
    assert recorder.values == [5, 6, 7] and recorder.completed == 1
    assert lines == [
        "[t] request(2)",
        "[t] on_subscribe",
        "[t] on_next(5)",
        "[t] on_next(6)",
        "[t] request(1)",
        "[t] on_next(7)",
        "[t] on_complete",
    ]


def test_trace_reports_cancel_once() -> None:
    lines: list[str] = []
    recorder = Recorder(initial=1)
    from_iterable(range(10)).trace("t", lines.append).run(recorder)
    recorder.cancel()
    recorder.cancel()
    assert lines.count("[t] cancel") == 1
