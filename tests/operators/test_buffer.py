"""buffer by count, and by count and skip: values, completion, errors, demand translation, limits, recovery."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import LONG_MAX, OperatorContext, SimpleSubject, from_iterable
from reaqtive.core.errors import LimitExceededError
from reaqtive.core.visitors import initialize, walk
from reaqtive.operators.buffer import BufferCount, BufferCountSkip
from reaqtive.operators.settings import MAX_BUFFER_COUNT, MAX_BUFFER_SIZE
from reaqtive.state import CheckpointMode, save_subscription, state_loader
from reaqtive.testing import Recorded, TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.support import Recorder

CONTEXT = OperatorContext("test://buffer")

HOT = [
    on_next(150, 0),
    on_next(210, 1),
    on_next(220, 2),
    on_next(230, 3),
    on_next(240, 4),
    on_next(250, 5),
    on_next(260, 6),
    on_next(270, 7),
    on_completed(300),
]


def reference(values: list[int], count: int, skip: int) -> list[list[int]]:
    """Rx's buffer(count, skip): a list opens at every skip-th element, closes at count; the open ones at the end."""
    buffers: list[list[int]] = []
    out: list[list[int]] = []
    for index, value in enumerate(values):
        if index % skip == 0:
            buffers.append([])
        for buffer in buffers:
            buffer.append(value)
        if buffers and len(buffers[0]) == count:
            out.append(buffers.pop(0))
    return out + [buffer for buffer in buffers if buffer]


def start(query: Any, recorder: Recorder, context: OperatorContext = CONTEXT) -> Any:
    return initialize(query.subscribe(recorder), context)


# -- buffer(count) ---------------------------------------------------------------------------------------------


def test_buffer_count_emits_consecutive_lists_and_the_partial_one_at_completion() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.buffer(3))
    assert result.messages == [
        on_next(230, [1, 2, 3]),
        on_next(260, [4, 5, 6]),
        on_next(300, [7]),
        on_completed(300),
    ]
    assert xs.subscriptions == [subscribe(200, 300)]


def test_buffer_count_emits_no_empty_list_when_the_count_divides_the_elements() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_completed(230))
    result = scheduler.start(lambda: xs.buffer(2))
    assert result.messages == [on_next(220, [1, 2]), on_completed(230)]


def test_buffer_count_of_an_empty_source_completes_without_a_list() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_completed(250))
    assert scheduler.start(lambda: xs.buffer(3)).messages == [on_completed(250)]


def test_buffer_count_source_error_drops_the_partial_list() -> None:
    scheduler = TestScheduler()
    boom = RuntimeError("boom")
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_next(230, 3), on_error(240, boom))
    result = scheduler.start(lambda: xs.buffer(2))
    assert result.messages == [on_next(220, [1, 2]), on_error(240, boom)]
    assert xs.subscriptions == [subscribe(200, 240)]


def test_buffer_count_disposed_early_unsubscribes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.buffer(3), disposed=245)
    assert result.messages == [on_next(230, [1, 2, 3])]
    assert xs.subscriptions == [subscribe(200, 245)]


def test_buffer_count_translates_demand_n_lists_to_n_times_count_elements() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = scheduler.create_observer(request=1)
    result = scheduler.start(lambda: xs.buffer(3), observer=observer)
    assert result.messages == [
        on_next(230, [1, 2, 3]),
        on_next(260, [4, 5, 6]),
        on_next(300, [7]),
        on_completed(300),
    ]
    # one list at a time: three elements at a time, each request made as the previous list went out
    assert xs.requests == [Recorded(200, 3), Recorded(230, 3), Recorded(260, 3)]


def test_buffer_count_with_unbounded_demand_requests_unbounded_upstream() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    scheduler.start(lambda: xs.buffer(3))
    assert xs.requests == [Recorded(200, LONG_MAX)]


def test_buffer_count_one_list_at_a_time_never_delivers_more_than_requested() -> None:
    recorder = Recorder(initial=1, per_item=1)
    start(from_iterable(range(1000)).buffer(7), recorder)
    assert recorder.values == reference(list(range(1000)), 7, 7)
    assert recorder.completed == 1 and not recorder.violations


def test_buffer_count_holds_no_more_than_the_requested_lists_need() -> None:
    """The source never emits more than was requested, so a list can only be waiting for its own elements."""
    recorder = Recorder()
    source_values = iter(range(100))
    start(from_iterable(source_values).buffer(4), recorder)
    recorder.request(2)
    assert recorder.values == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert next(source_values) in (8, 9), "the source was asked for 8 elements (it may look one ahead)"


def test_buffer_count_size_limit_fails_at_the_element_that_exceeds_it() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    context = scheduler.create_context({MAX_BUFFER_SIZE: 2})
    result = scheduler.start(lambda: xs.buffer(3), context=context)
    assert result.messages == [on_error(230, LimitExceededError)]
    error = result.messages[0].value.error  # type: ignore[union-attr]
    assert error.setting == MAX_BUFFER_SIZE and error.limit == 2 and "reaqtive:buffer/count" in str(error)
    assert xs.subscriptions == [subscribe(200, 230)]


def test_buffer_count_within_the_size_limit_is_fine() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    context = scheduler.create_context({MAX_BUFFER_SIZE: 3})
    result = scheduler.start(lambda: xs.buffer(3), context=context)
    assert result.messages[-1] == on_completed(300)


def test_buffer_count_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.buffer(3), HOT)


def test_buffer_count_is_dirty_after_each_element_without_marking_it_per_element() -> None:
    """The per-element path stores no dirty flag; the change is found when the checkpoint asks."""
    from reaqtive.state import DirtyState, confirm_saved

    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_next(230, 3), on_next(240, 4))
    handle = xs.buffer(3).subscribe(scheduler.create_observer())
    initialize(handle, scheduler.create_context())
    stage = walk(handle)[0]
    assert isinstance(stage, BufferCount)
    for tick, dirty in [(210, True), (215, False), (220, True), (230, True), (235, False), (240, True)]:
        scheduler.advance_to(tick)
        assert stage.state_changed is dirty, f"at {tick}"
        assert (stage.state_status is not DirtyState.CLEAN) is dirty
        save_subscription(handle, CheckpointMode.DIFFERENTIAL)
        confirm_saved(handle)


def test_buffer_count_recovered_partial_list_reduces_the_first_upstream_request() -> None:
    """A restored partial list of 2 elements needs only 1 more for the first list: the upstream is asked for
    exactly that, so the list at completion always has demand."""
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2))
    query = xs.buffer(3)
    handle = query.subscribe(scheduler.create_observer())
    initialize(handle, scheduler.create_context())
    scheduler.advance_to(230)
    blob = save_subscription(handle, CheckpointMode.FULL)
    handle.dispose()
    assert blob is not None

    ys = scheduler.create_hot_observable(on_next(240, 3), on_next(250, 4), on_completed(260))
    observer = scheduler.create_observer(request=1)
    initialize(ys.buffer(3).subscribe(observer), scheduler.create_context(), state_loader(blob))
    scheduler.advance_to(300)
    assert observer.messages == [on_next(240, [1, 2, 3]), on_next(260, [4]), on_completed(260)]
    assert ys.requests == [Recorded(230, 1), Recorded(240, 3)]


# -- buffer(count, skip) ---------------------------------------------------------------------------------------


def test_buffer_count_skip_overlapping_lists() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.buffer(3, 2))
    assert result.messages == [
        on_next(230, [1, 2, 3]),
        on_next(250, [3, 4, 5]),
        on_next(270, [5, 6, 7]),
        on_next(300, [7]),
        on_completed(300),
    ]
    assert xs.subscriptions == [subscribe(200, 300)]


def test_buffer_count_skip_with_gaps_drops_the_elements_between_lists() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.buffer(2, 3))
    assert result.messages == [
        on_next(220, [1, 2]),
        on_next(250, [4, 5]),
        on_next(300, [7]),
        on_completed(300),
    ]


def test_buffer_count_skip_completes_when_the_source_ends_in_a_gap_after_the_requested_lists() -> None:
    recorder = Recorder(initial=1)
    start(from_iterable([1, 2, 3]).buffer(2, 3), recorder)
    assert recorder.values == [[1, 2]] and recorder.completed == 1


def test_buffer_count_skip_error_drops_the_open_lists() -> None:
    scheduler = TestScheduler()
    boom = ValueError("boom")
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_next(230, 3), on_error(235, boom))
    result = scheduler.start(lambda: xs.buffer(2, 1))
    assert result.messages == [on_next(220, [1, 2]), on_next(230, [2, 3]), on_error(235, boom)]
    assert xs.subscriptions == [subscribe(200, 235)]


def test_buffer_count_skip_disposed_early_unsubscribes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.buffer(3, 1), disposed=235)
    assert result.messages == [on_next(230, [1, 2, 3])]
    assert xs.subscriptions == [subscribe(200, 235)]


def test_buffer_count_skip_translates_demand_to_the_elements_that_close_the_lists() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = scheduler.create_observer(request=1)
    scheduler.start(lambda: xs.buffer(3, 2), observer=observer)
    # the first list needs 3 elements, each further one 2 more (they overlap by one)
    assert xs.requests == [Recorded(200, 3), Recorded(230, 2), Recorded(250, 2), Recorded(270, 2)]

    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = scheduler.create_observer(request=1)
    scheduler.start(lambda: xs.buffer(2, 3), observer=observer)
    # with gaps: each list and the skipped element after it (a source that ends in a gap completes)
    assert xs.requests == [Recorded(200, 3), Recorded(220, 3), Recorded(250, 3)]


def test_buffer_count_skip_lists_open_at_completion_wait_for_demand() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_next(230, 3), on_completed(240))
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(205, observer.request, 1)
    scheduler.schedule_absolute(300, observer.request, 1)
    scheduler.schedule_absolute(400, observer.request, 5)
    result = scheduler.start(lambda: xs.buffer(3, 1), observer=observer)
    assert result.messages == [
        on_next(230, [1, 2, 3]),
        on_next(300, [2, 3]),
        on_next(400, [3]),
        on_completed(400),
    ]


def test_buffer_count_skip_request_zero_after_completion_signals_rule_3_9() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_completed(240))
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(300, observer.request, 0)
    result = scheduler.start(lambda: xs.buffer(3, 1), observer=observer)
    assert result.messages == [on_error(300, lambda e: isinstance(e, ValueError) and "3.9" in str(e))]


def test_buffer_count_skip_buffer_count_limit() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    context = scheduler.create_context({MAX_BUFFER_COUNT: 2})
    result = scheduler.start(lambda: xs.buffer(4, 1), context=context)
    assert result.messages == [on_error(230, LimitExceededError)]  # the third list opens with the third element
    assert xs.subscriptions == [subscribe(200, 230)]


def test_buffer_count_skip_buffer_size_limit() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    context = scheduler.create_context({MAX_BUFFER_SIZE: 2})
    result = scheduler.start(lambda: xs.buffer(3, 2), context=context)
    assert result.messages == [on_error(230, LimitExceededError)]


@pytest.mark.parametrize(("count", "skip"), [(3, 2), (2, 3), (4, 1)])
def test_buffer_count_skip_survives_a_checkpoint_anywhere(count: int, skip: int) -> None:
    assert_checkpoint_anywhere(lambda xs: xs.buffer(count, skip), HOT)


def test_buffer_count_skip_recovers_lists_waiting_for_demand_after_completion() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_completed(230))
    observer = scheduler.create_observer(request=0)
    handle = xs.buffer(3, 1).subscribe(observer)
    initialize(handle, scheduler.create_context())
    scheduler.schedule_absolute(205, observer.request, 1)
    scheduler.advance_to(240)
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None and observer.messages == [on_next(230, [1, 2])]

    ys = scheduler.create_hot_observable()
    recovered = scheduler.create_observer()
    initialize(ys.buffer(3, 1).subscribe(recovered), scheduler.create_context(), state_loader(blob))
    scheduler.advance_to(250)
    assert recovered.messages == [on_next(240, [2]), on_completed(240)]
    assert ys.requests == [], "the source had completed: the recovered stage does not ask it for anything"

    subject = SimpleSubject[int]()  # a hot source offers its subscription at subscribe time: it is let go
    initialize(
        subject.as_query().buffer(3, 1).subscribe(scheduler.create_observer(request=0)),
        scheduler.create_context(),
        state_loader(blob),
    )
    assert subject.subscriber_count == 0


# -- both ------------------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.integers(0, 99), max_size=40),
    count=st.integers(1, 5),
    skip=st.integers(1, 5),
    requests=st.lists(st.integers(1, 4), min_size=1, max_size=15),
)
def test_buffer_matches_rx_and_never_delivers_more_than_requested(
    values: list[int], count: int, skip: int, requests: list[int]
) -> None:
    recorder = Recorder()
    start(from_iterable(values).buffer(count, skip), recorder)
    expected = reference(values, count, skip)
    requested = 0
    for n in requests:
        recorder.request(n)
        requested += n
        assert recorder.values == expected[: min(requested, len(expected))]
    assert not recorder.violations
    if requested >= len(expected):
        assert recorder.completed == 1


def test_the_stage_follows_the_arguments() -> None:
    assert isinstance(walk(from_iterable([1]).buffer(2).subscribe(Recorder()))[0], BufferCount)
    assert isinstance(walk(from_iterable([1]).buffer(2, 2).subscribe(Recorder()))[0], BufferCount)
    assert isinstance(walk(from_iterable([1]).buffer(2, 1).subscribe(Recorder()))[0], BufferCountSkip)


@pytest.mark.parametrize("skip", [None, 1, 3])
def test_request_zero_signals_rule_3_9(skip: int | None) -> None:
    recorder = Recorder()
    query = from_iterable(range(10)).buffer(2) if skip is None else from_iterable(range(10)).buffer(2, skip)
    start(query, recorder)
    recorder.request(0)
    assert isinstance(recorder.errors[0], ValueError) and "3.9" in str(recorder.errors[0])


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((0,), ValueError, "count must be > 0"),
        ((-1,), ValueError, "count must be > 0"),
        ((2, 0), ValueError, "skip must be > 0"),
        ((True,), TypeError, "first argument must be a count"),
        (("3",), TypeError, "first argument must be a count"),
        ((2, "1"), TypeError, "skip must be an int"),
        ((2, timedelta(seconds=1)), TypeError, "second argument is skip"),
    ],
)
def test_arguments_are_validated_when_the_query_is_built(args: tuple[Any, ...], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        from_iterable([1]).buffer(*args)
