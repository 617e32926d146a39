"""never: no signal after on_subscribe, ever; only disposal ends it."""

from __future__ import annotations

from reaqtive import LONG_MAX, OperatorContext, Query
from reaqtive.core.visitors import initialize
from reaqtive.testing import TestScheduler, on_error
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.support import Recorder


def test_never_signals_nothing() -> None:
    scheduler = TestScheduler()
    result = scheduler.start(Query.never)
    assert result.messages == []
    assert result.handle is not None


def test_never_with_one_at_a_time_demand_signals_nothing() -> None:
    scheduler = TestScheduler()
    assert scheduler.start(Query.never, observer=scheduler.create_observer(request=1)).messages == []


def test_never_standalone_accepts_demand_and_is_disposed() -> None:
    recorder = Recorder(initial=LONG_MAX)
    handle = initialize(Query.never().subscribe(recorder), OperatorContext("test://never"))
    recorder.request(5)
    handle.dispose()
    assert recorder.values == [] and recorder.errors == [] and recorder.completed == 0
    assert getattr(handle, "is_disposed", False)


def test_never_non_positive_request_is_a_rule_3_9_error_on_the_scheduler() -> None:
    scheduler = TestScheduler()
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(250, lambda: observer.request(-1))
    result = scheduler.start(Query.never, observer=observer)
    assert result.messages == [on_error(251, lambda e: isinstance(e, ValueError) and "3.9" in str(e))]


def test_never_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(Query.never, ticks=[200, 201, 500])
