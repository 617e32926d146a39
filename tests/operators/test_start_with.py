"""start_with: values from scheduled tasks one tick apart, then the source; demand; recovery before and after
the source is subscribed."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import Query, from_iterable
from reaqtive.core.errors import UnknownOperatorError
from reaqtive.core.visitors import initialize
from reaqtive.state import CheckpointMode, save_subscription, state_loader
from reaqtive.testing import Recorded, TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import Demand, assert_checkpoint_anywhere
from tests.support import Recorder

HOT = [on_next(150, 1), on_next(210, 2), on_next(230, 3), on_next(260, 4), on_completed(300)]


def test_start_with_emits_the_values_one_tick_apart_then_subscribes_with_the_last() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.start_with(7, 8, 9))
    assert result.messages == [
        on_next(201, 7),
        on_next(202, 8),
        on_next(203, 9),
        on_next(210, 2),
        on_next(230, 3),
        on_next(260, 4),
        on_completed(300),
    ]
    assert xs.subscriptions == [subscribe(203, 300)]


def test_start_with_does_not_see_hot_elements_emitted_before_its_last_value() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.start_with(*range(100, 115)))
    assert result.values == [*range(100, 115), 3, 4]
    assert result.messages[14] == on_next(215, 114)
    assert xs.subscriptions == [subscribe(215, 300)], "the 210 element came before the subscription"


def test_start_with_without_values_subscribes_one_tick_after_start() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(201, 1), on_next(202, 2), on_completed(300))
    result = scheduler.start(xs.start_with)
    assert result.messages == [on_next(202, 2), on_completed(300)]
    assert xs.subscriptions == [subscribe(201, 300)]


def test_start_with_a_cold_source_starts_it_after_the_values() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_cold_observable(on_next(10, "a"), on_completed(20))
    result = scheduler.start(lambda: xs.start_with("x", "y"))
    assert result.messages == [on_next(201, "x"), on_next(202, "y"), on_next(212, "a"), on_completed(222)]
    assert xs.subscriptions == [subscribe(202, 222)]


def test_start_with_passes_the_source_error() -> None:
    scheduler = TestScheduler()
    failure = KeyError("upstream")
    xs = scheduler.create_hot_observable(on_next(210, 1), on_error(220, failure))
    result = scheduler.start(lambda: xs.start_with(0))
    assert result.messages == [on_next(201, 0), on_next(210, 1), on_error(220, failure)]
    assert xs.subscriptions == [subscribe(201, 220)]


def test_start_with_disposed_during_the_values_never_subscribes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.start_with(7, 8, 9), disposed=202)
    assert result.messages == [on_next(201, 7)], "the dispose at 202 runs before the task due at 202"
    assert xs.subscriptions == []


def test_start_with_disposed_after_subscribing_unsubscribes_the_source() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.start_with(7), disposed=240)
    assert result.messages == [on_next(201, 7), on_next(210, 2), on_next(230, 3)]
    assert xs.subscriptions == [subscribe(201, 240)]


def test_start_with_a_source_that_cannot_be_subscribed_is_an_error() -> None:
    scheduler = TestScheduler()
    result = scheduler.start(lambda: Query("no such operator").start_with(1))
    assert result.messages == [on_next(201, 1), on_error(201, UnknownOperatorError)]


def test_start_with_values_wait_for_demand_and_the_rest_goes_to_the_source() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(250, observer.request, 2)
    scheduler.schedule_absolute(270, observer.request, 3)
    result = scheduler.start(lambda: xs.start_with(7, 8, 9), observer=observer)
    assert result.messages == [
        on_next(251, 7),
        on_next(252, 8),
        on_next(271, 9),  # the last value; its task subscribes and hands the 2 requests left to the source
        on_completed(300),
    ]
    assert xs.subscriptions == [subscribe(271, 300)]
    assert xs.requests == [Recorded(271, 2)]


def test_start_with_one_at_a_time_demand() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.start_with(7, 8), observer=scheduler.create_observer(request=1))
    assert result.messages == [
        on_next(201, 7),
        on_next(202, 8),
        on_next(210, 2),
        on_next(230, 3),
        on_next(260, 4),
        on_completed(300),
    ]
    # After the values used their demand, the source gets exactly one request per element delivered.
    assert xs.requests == [Recorded(202, 1), Recorded(210, 1), Recorded(230, 1), Recorded(260, 1)]


def test_start_with_non_positive_request_during_the_values_is_a_rule_3_9_error() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(250, observer.request, 0)
    result = scheduler.start(lambda: xs.start_with(7), observer=observer)
    assert result.messages == [on_error(251, ValueError)]
    assert xs.subscriptions == []


def test_start_with_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.start_with(7, 8, 9), HOT)
    assert_checkpoint_anywhere(lambda xs: xs.start_with(*range(100, 112)), HOT)
    assert_checkpoint_anywhere(lambda xs: xs.start_with(), HOT)


def test_start_with_checkpointed_while_emitting_continues_with_the_next_value() -> None:
    """Reaqtive's StartWith_SaveAndReload_BeforeDoSubscribe: values at 201.., the source subscribed with the
    last one; a restart in the middle neither repeats nor skips a value."""
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 100), on_completed(300))
    observer = scheduler.create_observer()
    scheduler.advance_to(200)
    handle = initialize(xs.start_with(1, 2, 3, 4, 5).subscribe(observer), scheduler.create_context())
    scheduler.advance_to(202)
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None and observer.values == [1, 2]

    recovered = TestScheduler()
    recovered.advance_to(202)
    ys = recovered.create_hot_observable(on_next(210, 100), on_completed(300))
    again = recovered.create_observer()
    initialize(ys.start_with(1, 2, 3, 4, 5).subscribe(again), recovered.create_context(), state_loader(blob))
    recovered.advance_to(400)
    assert again.messages == [
        on_next(203, 3),
        on_next(204, 4),
        on_next(205, 5),
        on_next(210, 100),
        on_completed(300),
    ]
    assert ys.subscriptions == [subscribe(205, 300)]


def test_start_with_recovered_after_subscribing_resubscribes_while_loading() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 100), on_completed(300))
    scheduler.advance_to(200)
    query_of: Any = lambda s: s.map_indexed(lambda x, i: (x, i)).start_with((0, -1))  # noqa: E731
    handle = initialize(query_of(xs).subscribe(scheduler.create_observer()), scheduler.create_context())
    scheduler.advance_to(220)
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None

    recovered = TestScheduler()
    recovered.advance_to(220)
    ys = recovered.create_hot_observable(on_next(250, 200), on_completed(300))
    again = recovered.create_observer()
    initialize(query_of(ys).subscribe(again), recovered.create_context(), state_loader(blob))
    recovered.advance_to(400)
    # No value again, and the inner map_indexed's index (1 after the 210 element) was loaded with the source.
    assert again.messages == [on_next(250, (200, 1)), on_completed(300)]
    assert ys.subscriptions == [subscribe(220, 300)]


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.integers(-9, -1), max_size=6),
    size=st.integers(0, 10),
    requests=st.lists(st.integers(1, 4), min_size=1, max_size=8),
)
def test_start_with_standalone_never_delivers_more_than_requested(
    values: list[int], size: int, requests: list[int]
) -> None:
    recorder = Recorder()
    from_iterable(range(size)).start_with(*values).run(recorder)
    expected = [*values, *range(size)]
    requested = 0
    for n in requests:
        recorder.request(n)
        requested += n
        assert recorder.values == expected[: min(requested, len(expected))]
    assert recorder.completed == (1 if requested >= len(expected) else 0)
    assert not recorder.violations


def test_start_with_standalone_one_at_a_time_from_inside_on_next() -> None:
    recorder = Recorder(initial=1, per_item=1)
    from_iterable(range(1000)).start_with(*range(-500, 0)).run(recorder)
    assert recorder.values == list(range(-500, 1000)) and recorder.completed == 1 and not recorder.violations


def test_start_with_argument_validation() -> None:
    with pytest.raises(TypeError, match="start_with: a value must not be None"):
        from_iterable([1]).start_with(1, None)


def test_start_with_recovered_while_its_values_wait_for_demand_emits_one_tick_after_the_request() -> None:
    # Nobody asks until 264: the first value goes out at 265, also after a restart at 263 (a recovered stage
    # must not start stepping before anybody asked).
    report = assert_checkpoint_anywhere(
        lambda xs: xs.start_with(-1), [on_completed(300)], demand=Demand(requests=((264, 1),)), ticks=[263]
    )
    assert report.expected == (on_next(265, -1), on_completed(300))


def test_start_with_steps_to_the_next_value_only_while_there_is_demand() -> None:
    # One value asked at the start (201), the next at 202: it goes out at 203, one tick after its request, as
    # after a restart at 201, where no step can be pending.
    report = assert_checkpoint_anywhere(
        lambda xs: xs.start_with(-1, -2),
        [on_completed(300)],
        demand=Demand(initial=1, requests=((202, 1),)),
        ticks=[201],
    )
    assert report.expected == (on_next(201, -1), on_next(203, -2), on_completed(300))
