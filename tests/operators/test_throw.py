"""throw: fails at once with the given error; on the scheduler at tick + 1 when hosted."""

from __future__ import annotations

import pytest

from reaqtive import OperatorContext, Query
from reaqtive.core.visitors import initialize
from reaqtive.testing import TestScheduler, on_error
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.support import Recorder

BOOM = ValueError("boom")


def test_throw_fails_one_tick_after_the_subscription() -> None:
    assert TestScheduler().start(lambda: Query.throw(BOOM)).messages == [on_error(201, BOOM)]


def test_throw_standalone_fails_inside_start_without_any_request() -> None:
    recorder = Recorder()
    initialize(Query.throw(BOOM).subscribe(recorder), OperatorContext("test://throw"))
    assert recorder.errors == [BOOM] and recorder.values == [] and recorder.completed == 0


def test_throw_with_one_at_a_time_demand() -> None:
    scheduler = TestScheduler()
    result = scheduler.start(lambda: Query.throw(BOOM), observer=scheduler.create_observer(request=1))
    assert result.messages == [on_error(201, BOOM)]


def test_throw_disposed_before_it_fails_signals_nothing() -> None:
    assert TestScheduler().start(lambda: Query.throw(BOOM), disposed=200).messages == []


@pytest.mark.parametrize("error", [None, "boom", ValueError])
def test_throw_needs_an_exception_instance(error: object) -> None:
    with pytest.raises(TypeError, match="throw: error must be an exception instance"):
        Query.throw(error)  # type: ignore[arg-type]


def test_throw_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda: Query.throw(BOOM), ticks=[200, 201, 202])
