"""empty: completes at once, without demand; on the scheduler at tick + 1 when hosted."""

from __future__ import annotations

from reaqtive import OperatorContext, Query
from reaqtive.core.visitors import initialize
from reaqtive.testing import TestScheduler, on_completed
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.support import Recorder


def test_empty_completes_one_tick_after_the_subscription() -> None:
    assert TestScheduler().start(Query.empty).messages == [on_completed(201)]


def test_empty_standalone_completes_inside_start_without_any_request() -> None:
    recorder = Recorder()
    initialize(Query.empty().subscribe(recorder), OperatorContext("test://empty"))
    assert recorder.completed == 1 and recorder.values == [] and not recorder.violations


def test_empty_with_one_at_a_time_demand_completes() -> None:
    scheduler = TestScheduler()
    result = scheduler.start(Query.empty, observer=scheduler.create_observer(request=1))
    assert result.messages == [on_completed(201)]


def test_empty_disposed_before_it_completes_signals_nothing() -> None:
    assert TestScheduler().start(Query.empty, disposed=200).messages == []


def test_empty_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(Query.empty, ticks=[200, 201, 202])
