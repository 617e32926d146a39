"""window by count and by count and skip: eager windows (Rx), completion and errors reaching every window,
disposal, limits, the translated demand policy, hosted subjects, recovery."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import SimpleSubject, from_iterable
from reaqtive.core.errors import LimitExceededError
from reaqtive.core.visitors import initialize
from reaqtive.fluent.query import InnerStream
from reaqtive.operators.settings import MAX_QUEUE_SIZE, MAX_WINDOW_COUNT
from reaqtive.operators.window import WindowCount, WindowCountSkip, elements_for
from reaqtive.state import CheckpointMode, InnerEnvironment, save_subscription, state_loader
from reaqtive.testing import Recorded, TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.operators._inner_streams_support import InnerCollector, run_inner

HOT = [
    on_next(150, 0),
    on_next(210, 1),
    on_next(220, 2),
    on_next(230, 3),
    on_next(240, 4),
    on_next(250, 5),
    on_completed(300),
]


def windows_of(query: Any) -> list[list[Any]]:
    """Run a window query standalone and return each window's values."""
    result: list[list[Any]] = []
    query.flat_map(lambda w: w.to_list()).run(result.append)
    return result


# -- window(count) -----------------------------------------------------------------------------------------------


def test_window_count_opens_eagerly_and_ends_with_the_open_window() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = run_inner(scheduler, lambda: xs.window(2))
    assert result.outer == [on_next(200, 0), on_next(220, 1), on_next(240, 2), on_completed(300)]
    assert result.windows() == [
        [on_next(210, 1), on_next(220, 2), on_completed(220)],
        [on_next(230, 3), on_next(240, 4), on_completed(240)],
        [on_next(250, 5), on_completed(300)],
    ]
    assert xs.subscriptions == [subscribe(200, 300)]


def test_window_count_over_a_multiple_of_count_ends_with_an_empty_window() -> None:
    """As in Rx.NET (Reaqtive's Window(n) tests pin it): the window opened by the last close stays empty."""
    assert windows_of(from_iterable(range(4)).window(2)) == [[0, 1], [2, 3], []]
    assert windows_of(from_iterable([]).window(2)) == [[]]


def test_window_count_source_error_reaches_the_open_window_then_the_output() -> None:
    scheduler = TestScheduler()
    boom = RuntimeError("boom")
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_next(230, 3), on_error(240, boom))
    result = run_inner(scheduler, lambda: xs.window(2))
    assert result.outer == [on_next(200, 0), on_next(220, 1), on_error(240, boom)]
    assert result.window_values() == [[1, 2, "|"], [3, "!"]]
    assert xs.subscriptions == [subscribe(200, 240)]


def test_an_error_in_a_window_consumer_ends_the_result_and_disposes_the_source() -> None:
    """An inner error (the consumer of the second window fails at 230): flat_map disposes window, which
    completes the open window and cancels the source."""
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)

    def check(x: int) -> int:
        if x == 3:
            raise ZeroDivisionError(x)
        return x

    result = scheduler.start(lambda: xs.window(2).flat_map(lambda w: w.map(check)))
    assert result.messages == [on_next(210, 1), on_next(220, 2), on_error(230, ZeroDivisionError)]
    assert xs.subscriptions == [subscribe(200, 230)]


def test_disposing_the_output_completes_the_open_window() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    env = InnerEnvironment()
    result = run_inner(scheduler, lambda: xs.window(3), disposed=235, context=scheduler.create_context(environment=env))
    assert result.window_values() == [[1, 2, 3, "|"], ["|"]]
    assert result.windows()[1] == [on_completed(235)]
    assert xs.subscriptions == [subscribe(200, 235)]
    assert env.inner_subject_ids() == []


# -- window(count, skip) -----------------------------------------------------------------------------------------


def test_window_count_skip_overlapping_windows() -> None:
    assert windows_of(from_iterable(range(7)).window(3, 2)) == [[0, 1, 2], [2, 3, 4], [4, 5, 6], [6]]


def test_window_count_skip_with_gaps_drops_elements_between_windows() -> None:
    assert windows_of(from_iterable(range(8)).window(2, 3)) == [[0, 1], [3, 4], [6, 7]]
    assert windows_of(from_iterable(range(7)).window(2, 3)) == [[0, 1], [3, 4], [6]]


def test_window_count_skip_timing_on_virtual_time() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = run_inner(scheduler, lambda: xs.window(3, 1))
    assert result.outer == [
        on_next(200, 0),
        on_next(210, 1),
        on_next(220, 2),
        on_next(230, 3),
        on_next(240, 4),
        on_next(250, 5),
        on_completed(300),
    ]
    assert result.window_values() == [[1, 2, 3, "|"], [2, 3, 4, "|"], [3, 4, 5, "|"], [4, 5, "|"], [5, "|"], ["|"]]


def test_window_count_skip_at_most_ceil_count_over_skip_windows_are_open() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    ok = run_inner(scheduler, lambda: xs.window(3, 1), context=scheduler.create_context({MAX_WINDOW_COUNT: 3}))
    assert ok.outer[-1] == on_completed(300)

    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    failed = run_inner(scheduler, lambda: xs.window(3, 1), context=scheduler.create_context({MAX_WINDOW_COUNT: 2}))
    assert failed.outer[-1] == on_error(220, LimitExceededError)
    assert failed.window_values() == [[1, 2, "!"], [2, "!"]]
    assert xs.subscriptions == [subscribe(200, 220)]


@settings(max_examples=60, deadline=None)
@given(length=st.integers(0, 20), count=st.integers(1, 5), skip=st.integers(1, 5))
def test_count_windows_match_a_model(length: int, count: int, skip: int) -> None:
    """Window k holds elements k*skip .. k*skip+count-1; windows open eagerly after every skip-th element."""
    opened = length // skip + 1
    expected = [list(range(k * skip, min(k * skip + count, length))) for k in range(opened)]
    assert windows_of(from_iterable(range(length)).window(count, skip)) == expected


def test_a_source_that_completed_before_the_start_gives_one_empty_window() -> None:
    subject = SimpleSubject[int]()
    subject.on_complete()
    assert windows_of(subject.as_query().window(2)) == [[]]


# -- demand ------------------------------------------------------------------------------------------------------


def test_elements_for_translates_windows_into_elements() -> None:
    assert elements_for(1, 3, 3, 0) == 3
    assert elements_for(2, 3, 1, 0) == 4  # windows 0 and 1 of (3, 1): up to element 3
    assert elements_for(1, 2, 3, 0) == 3  # with a gap: up to the start of the next window
    assert elements_for(2**63 - 1, 3, 3, 0) == 2**63 - 1


def test_window_count_asks_the_upstream_for_the_elements_of_the_requested_windows() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = InnerCollector(scheduler, request=1)
    scheduler.start(lambda: xs.window(2), observer=observer)
    # each window asks for 2 elements; the observer asks for the next window as soon as one arrives
    assert xs.requests == [Recorded(200, 4), Recorded(220, 2), Recorded(240, 2)]
    assert observer.window_values() == [[1, 2, "|"], [3, 4, "|"], [5, "|"]]
    assert observer.outer[-1] == on_completed(300)


def test_a_window_without_outer_demand_waits_and_so_does_the_completion() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_completed(230))
    observer = InnerCollector(scheduler, request=0)
    scheduler.schedule_absolute(205, observer.request, 1)
    scheduler.schedule_absolute(260, observer.request, 1)
    scheduler.start(lambda: xs.window(2), observer=observer)
    assert observer.outer == [on_next(205, 0), on_next(260, 1), on_completed(260)]
    assert observer.windows()[1] == [on_completed(260)]  # the final empty window went out on demand


def test_overlapping_windows_hold_elements_for_windows_not_yet_requested() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = InnerCollector(scheduler, request=0)
    scheduler.schedule_absolute(205, observer.request, 1)
    scheduler.schedule_absolute(245, observer.request, 1)
    scheduler.start(lambda: xs.window(3, 1), observer=observer)
    # one window asks for 3 elements; 2 and 3 also belong to window 1, which waits with them
    assert xs.requests == [Recorded(205, 3), Recorded(245, 1)]
    assert observer.window_values() == [[1, 2, 3, "|"], [2, 3, 4, "|"]]
    assert observer.windows()[1][:2] == [on_next(245, 2), on_next(245, 3)]


def test_a_consumer_taking_one_window_at_a_time_never_deadlocks_on_overlap() -> None:
    """flat_map(max_concurrent=1) asks for the next window only when the previous completed."""
    result: list[list[int]] = []
    from_iterable(range(6)).window(3, 1).flat_map(lambda w: w.to_list(), max_concurrent=1).run(result.append)
    assert result == [[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 5], [4, 5], [5], []]


def test_more_held_than_the_queue_bound_is_an_error() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = InnerCollector(scheduler, request=0)
    scheduler.schedule_absolute(205, observer.request, 1)
    context = scheduler.create_context({MAX_QUEUE_SIZE: 2})
    scheduler.start(lambda: xs.window(4, 1), observer=observer, context=context)
    # window 1 opens at 210 and waits (1), holds 2 (2); window 2 opens at 220 (3): too many
    assert observer.outer == [on_next(205, 0), on_error(220, LimitExceededError)]


def test_request_zero_is_a_rule_3_9_error() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = InnerCollector(scheduler)
    scheduler.schedule_absolute(225, observer.request, -1)
    scheduler.start(lambda: xs.window(2), observer=observer)
    assert observer.outer[-1] == on_error(225, ValueError)
    assert observer.window_values() == [[1, 2, "|"], ["!"]]


# -- hosted and recovery -----------------------------------------------------------------------------------------


def test_hosted_windows_are_environment_subjects_deleted_when_they_complete() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    env = InnerEnvironment()
    context = scheduler.create_context(environment=env, instance_id="sub://w")
    seen: list[list[str]] = []
    scheduler.schedule_absolute(235, lambda: seen.append(sorted(env.inner_subject_ids())))
    result = run_inner(scheduler, lambda: xs.window(2), context=context)
    assert [stream.stream_id for stream in result.streams] == [f"sub://w/window0/{n}" for n in range(3)]
    assert seen == [["sub://w/window0/1"]]
    assert env.inner_subject_ids() == []


def test_a_recovered_window_continues_in_the_same_subject() -> None:
    scheduler = TestScheduler()
    env = InnerEnvironment()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_next(230, 3))
    context = scheduler.create_context(environment=env, instance_id="sub://w")
    handle = xs.window(2).subscribe(InnerCollector(scheduler))
    initialize(handle, context)
    scheduler.advance_to(235)
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None

    restored = InnerEnvironment()
    ys = scheduler.create_hot_observable(on_next(240, 4), on_next(250, 5), on_completed(260))
    recovered = InnerCollector(scheduler)
    initialize(
        ys.window(2).subscribe(recovered),
        scheduler.create_context(environment=restored, instance_id="sub://w"),
        state_loader(blob),
    )
    window1 = InnerStream.from_reference(("window", "sub://w/window0/1"), restored)
    tail = scheduler.create_observer()
    window1.subscribe(tail)
    scheduler.advance_to(300)
    assert tail.messages == [on_next(240, 4), on_completed(240)]
    assert recovered.outer == [on_next(240, 0), on_completed(260)]  # one new window: the third
    assert recovered.streams[0].stream_id == "sub://w/window0/2"
    assert recovered.window_values() == [[5, "|"]]


SCRIPT = [
    on_next(210, 1),
    on_next(220, 2),
    on_next(230, 3),
    on_next(240, 4),
    on_next(250, 5),
    on_next(260, 6),
    on_next(270, 7),
    on_completed(300),
]


@pytest.mark.parametrize(
    "create",
    [
        pytest.param(lambda xs: xs.window(3).flat_map(lambda w: w.to_list()), id="count"),
        pytest.param(lambda xs: xs.window(3, 1).flat_map(lambda w: w.sum()), id="overlap"),
        pytest.param(lambda xs: xs.window(2, 3).flat_map(lambda w: w.to_list()), id="gaps"),
        pytest.param(lambda xs: xs.window(3, 2).flat_map(lambda w: w.to_list(), max_concurrent=1), id="one-at-a-time"),
        pytest.param(lambda xs: xs.window(2).flat_map(lambda w: w), id="flatten"),
        pytest.param(lambda xs: xs.window(3).flat_map(lambda w: w.take(1)), id="consumer-leaves"),
    ],
)
def test_count_windows_survive_a_checkpoint_anywhere(create: Any) -> None:
    assert_checkpoint_anywhere(create, SCRIPT)


# -- arguments ---------------------------------------------------------------------------------------------------


def test_the_stage_follows_the_arguments() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable()
    assert type(xs.window(2).subscribe(scheduler.create_observer())) is WindowCount
    assert type(xs.window(2, 1).subscribe(scheduler.create_observer())) is WindowCountSkip
    assert WindowCount.name == "reaqtive:window/count" and WindowCountSkip.name == "reaqtive:window/count+skip"


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((0,), ValueError, "count must be > 0"),
        ((2, 0), ValueError, "skip must be > 0"),
        ((True,), TypeError, "count .int. or a duration"),
        (("2",), TypeError, "count .int. or a duration"),
        ((2, 1.5), TypeError, "skip must be an int"),
    ],
)
def test_arguments_are_validated_when_the_query_is_built(args: tuple[Any, ...], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        from_iterable([1]).window(*args)
