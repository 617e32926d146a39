"""ignore_elements: only the terminal signal passes; demand is unbounded upstream."""

from __future__ import annotations

from reaqtive import from_iterable
from reaqtive.core.streams import LONG_MAX
from reaqtive.testing import Recorded, TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.support import Recorder

HOT = [on_next(150, 1), on_next(210, 2), on_next(230, 3), on_completed(300)]


def test_ignore_elements_passes_only_completion() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(xs.ignore_elements)
    assert result.messages == [on_completed(300)]
    assert xs.subscriptions == [subscribe(200, 300)]


def test_ignore_elements_passes_the_error() -> None:
    scheduler = TestScheduler()
    failure = KeyError("upstream")
    xs = scheduler.create_hot_observable(on_next(210, 1), on_error(220, failure))
    result = scheduler.start(xs.ignore_elements)
    assert result.messages == [on_error(220, failure)]
    assert xs.subscriptions == [subscribe(200, 220)]


def test_ignore_elements_disposed_early_unsubscribes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(xs.ignore_elements, disposed=250)
    assert result.messages == []
    assert xs.subscriptions == [subscribe(200, 250)]


def test_ignore_elements_requests_everything_upstream_without_downstream_demand() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = scheduler.create_observer(request=0)  # never requests anything
    result = scheduler.start(xs.ignore_elements, observer=observer)
    assert result.messages == [on_completed(300)], "completion needs no demand (rule 1.2)"
    assert xs.requests == [Recorded(200, LONG_MAX)], "one unbounded request: nothing is ever held"


def test_ignore_elements_with_one_at_a_time_demand() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(xs.ignore_elements, observer=scheduler.create_observer(request=1))
    assert result.messages == [on_completed(300)]
    assert xs.requests == [Recorded(200, LONG_MAX)], "downstream requests do not reach the upstream"


def test_ignore_elements_over_a_cold_iterable_runs_it_to_the_end() -> None:
    recorder = Recorder()  # requests nothing
    from_iterable(range(10_000)).ignore_elements().run(recorder)
    assert recorder.values == [] and recorder.completed == 1


def test_ignore_elements_non_positive_request_is_a_rule_3_9_error() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(300, 1))
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(250, observer.request, 0)
    result = scheduler.start(xs.ignore_elements, observer=observer)
    assert result.messages == [on_error(250, ValueError)]
    assert xs.subscriptions == [subscribe(200, 250)]


def test_ignore_elements_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.ignore_elements(), HOT)
