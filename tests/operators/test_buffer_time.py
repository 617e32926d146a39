"""buffer by duration, duration and shift, duration or count: timing, completion, errors, the demand policy of a
time-driven operator, limits, recovery."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import LONG_MAX, MissingSchedulerError, OperatorContext, SimpleSubject, from_iterable
from reaqtive.core.errors import LimitExceededError
from reaqtive.core.visitors import initialize, walk
from reaqtive.operators.buffer_time import BufferTime, BufferTimeOrCount, BufferTimeShift
from reaqtive.operators.settings import MAX_BUFFER_COUNT, MAX_BUFFER_SIZE, MAX_QUEUE_SIZE
from reaqtive.state import CheckpointMode, save_subscription, state_loader
from reaqtive.testing import Recorded, TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import Demand, assert_checkpoint_anywhere
from tests.operators._versions_support import save_as_version_1
from tests.support import Recorder


def s(seconds: int) -> timedelta:
    return timedelta(seconds=seconds)


HOT = [
    on_next(150, 0),
    on_next(210, 1),
    on_next(240, 2),
    on_next(250, 3),
    on_next(280, 4),
    on_next(330, 5),
    on_completed(370),
]


# -- buffer(duration) ------------------------------------------------------------------------------------------


def test_buffer_duration_closes_a_list_every_duration_including_empty_ones() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.buffer(s(50)))
    assert result.messages == [
        on_next(250, [1, 2, 3]),  # 3 arrives at 250, before the timer of the same instant
        on_next(300, [4]),
        on_next(350, [5]),
        on_next(370, []),  # the list open at completion, even empty
        on_completed(370),
    ]
    assert xs.subscriptions == [subscribe(200, 370)]


def test_buffer_duration_emits_empty_lists_while_the_source_is_silent() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_completed(340))
    result = scheduler.start(lambda: xs.buffer(s(40)))
    assert result.messages == [
        on_next(240, [1]),
        on_next(280, []),
        on_next(320, []),
        on_next(340, []),
        on_completed(340),
    ]


def test_buffer_duration_source_error_drops_the_open_list() -> None:
    scheduler = TestScheduler()
    boom = RuntimeError("boom")
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(260, 2), on_error(270, boom))
    result = scheduler.start(lambda: xs.buffer(s(50)))
    assert result.messages == [on_next(250, [1]), on_error(270, boom)]
    assert xs.subscriptions == [subscribe(200, 270)]


def test_buffer_duration_disposed_stops_the_timer() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.buffer(s(50)), disposed=320)
    assert result.messages == [on_next(250, [1, 2, 3]), on_next(300, [4])]
    assert xs.subscriptions == [subscribe(200, 320)]
    assert scheduler.clock < 400, "no timer kept running after dispose"


def test_buffer_duration_needs_a_scheduler() -> None:
    with pytest.raises(MissingSchedulerError):
        from_iterable([1]).buffer(s(1)).run(lambda x: None, context=OperatorContext("test://none"))


# -- buffer(duration, shift) -----------------------------------------------------------------------------------


def test_buffer_duration_shift_overlapping_lists() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.buffer(s(50), s(30)))
    # lists open at 200, 230, 260, 290, 320, 350 and close 50 later
    assert result.messages == [
        on_next(250, [1, 2, 3]),
        on_next(280, [2, 3, 4]),  # opened at 230; 4 arrives at 280, before the close
        on_next(310, [4]),
        on_next(340, [5]),
        on_next(370, [5]),  # completion: the lists opened at 320 and 350
        on_next(370, []),
        on_completed(370),
    ]


def test_buffer_duration_shift_with_gaps_drops_elements_between_lists() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.buffer(s(20), s(50)))
    # lists [200, 220), [250, 270), [300, 320), [350, 370)
    assert result.messages == [
        on_next(220, [1]),
        on_next(270, []),  # 3 arrived at 250, before that list opened
        on_next(320, []),
        on_next(370, []),
        on_completed(370),
    ]


def test_buffer_duration_shift_closes_before_it_opens_at_the_same_instant() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(230, 2), on_next(245, 3), on_completed(250))
    result = scheduler.start(lambda: xs.buffer(s(40), s(20)))
    # at 240 the list of 200 closes, then the list of 240 opens: never three lists open at once
    assert result.messages == [
        on_next(240, [1, 2]),
        on_next(250, [2, 3]),
        on_next(250, [3]),
        on_completed(250),
    ]


def test_buffer_duration_shift_at_most_ceil_duration_over_shift_lists_are_open() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    context = scheduler.create_context({MAX_BUFFER_COUNT: 2})
    result = scheduler.start(lambda: xs.buffer(s(40), s(20)), context=context)
    assert result.messages[-1] == on_completed(370)

    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    context = scheduler.create_context({MAX_BUFFER_COUNT: 2})
    result = scheduler.start(lambda: xs.buffer(s(50), s(20)), context=context)
    assert result.messages == [on_error(240, LimitExceededError)]  # the third list would open at 240
    assert xs.subscriptions == [subscribe(200, 240)]


def test_buffer_duration_shift_source_error_and_dispose() -> None:
    scheduler = TestScheduler()
    boom = KeyError("boom")
    xs = scheduler.create_hot_observable(on_next(210, 1), on_error(225, boom))
    result = scheduler.start(lambda: xs.buffer(s(30), s(10)))
    assert result.messages == [on_error(225, boom)]
    assert xs.subscriptions == [subscribe(200, 225)]

    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.buffer(s(30), s(10)), disposed=235)
    assert result.messages == [on_next(230, [1])]
    assert xs.subscriptions == [subscribe(200, 235)]


# -- buffer(duration, count) -----------------------------------------------------------------------------------


def test_buffer_duration_or_count_closes_on_whichever_comes_first() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(
        on_next(210, 1), on_next(220, 2), on_next(230, 3), on_next(260, 4), on_next(340, 5), on_completed(400)
    )
    result = scheduler.start(lambda: xs.buffer(s(50), 2))
    assert result.messages == [
        on_next(220, [1, 2]),  # by count; the timer restarts: the next list closes by time at 270
        on_next(260, [3, 4]),  # by count again; next close by time at 310
        on_next(310, []),  # by time, empty
        on_next(360, [5]),
        on_next(400, []),
        on_completed(400),
    ]
    assert xs.subscriptions == [subscribe(200, 400)]


def test_buffer_duration_or_count_error_and_dispose() -> None:
    scheduler = TestScheduler()
    boom = RuntimeError("boom")
    xs = scheduler.create_hot_observable(on_next(210, 1), on_error(220, boom))
    result = scheduler.start(lambda: xs.buffer(s(50), 3))
    assert result.messages == [on_error(220, boom)]

    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.buffer(s(50), 3), disposed=260)
    assert result.messages == [on_next(250, [1, 2, 3])]
    assert xs.subscriptions == [subscribe(200, 260)]
    assert scheduler.clock < 400


def test_buffer_duration_or_count_translates_demand_like_the_count_buffer() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = scheduler.create_observer(request=1)
    result = scheduler.start(lambda: xs.buffer(s(1000), 2), observer=observer)
    assert result.messages == [
        on_next(240, [1, 2]),
        on_next(280, [3, 4]),
        on_next(370, [5]),
        on_completed(370),
    ]
    assert xs.requests == [Recorded(200, 2), Recorded(240, 2), Recorded(280, 2)]


def test_buffer_duration_or_count_size_limit() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    context = scheduler.create_context({MAX_BUFFER_SIZE: 2})
    result = scheduler.start(lambda: xs.buffer(s(100), 3), context=context)
    assert result.messages == [on_error(250, LimitExceededError)]


# -- the demand policy of the time-driven buffers --------------------------------------------------------------


QUERIES = {
    "duration": lambda xs: xs.buffer(s(50)),
    "duration+shift": lambda xs: xs.buffer(s(50), s(25)),
    "duration|count": lambda xs: xs.buffer(s(50), 100),
}


@pytest.mark.parametrize("kind", QUERIES)
def test_time_buffers_ask_the_upstream_only_once_the_downstream_asked(kind: str) -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(260, observer.request, 1)
    scheduler.start(lambda: QUERIES[kind](xs), observer=observer)
    assert xs.requests == [Recorded(260, LONG_MAX if kind != "duration|count" else 100)]


def test_closed_lists_wait_for_demand_in_order() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(205, observer.request, 1)
    scheduler.schedule_absolute(320, observer.request, 2)
    scheduler.schedule_absolute(500, observer.request, 10)
    result = scheduler.start(lambda: xs.buffer(s(50)), observer=observer)
    assert result.messages == [
        on_next(250, [1, 2, 3]),
        on_next(320, [4]),  # closed at 300, waited for demand
        on_next(350, [5]),
        on_next(500, []),  # closed at completion (370), then completion, after it
        on_completed(500),
    ]


@pytest.mark.parametrize("kind", QUERIES)
def test_time_buffers_with_one_at_a_time_demand_never_deliver_more_than_requested(kind: str) -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = scheduler.create_observer(request=0)
    for tick in range(205, 600, 40):  # one list every 40 ticks, slower than the lists close
        scheduler.schedule_absolute(tick, observer.request, 1)
    result = scheduler.start(lambda: QUERIES[kind](xs), observer=observer)
    requested_by = {tick: (tick - 205) // 40 + 1 for tick in range(205, 1001)}
    delivered = 0
    for message in result.messages:
        if message.value.kind.name == "ON_NEXT":
            delivered += 1
            assert delivered <= requested_by[message.time], f"more lists than requested at {message.time}"
    assert result.messages[-1].value.kind.name == "ON_COMPLETED"


def test_more_waiting_lists_than_the_queue_bound_is_an_error_at_the_overflowing_close() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1))
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(205, observer.request, 1)
    context = scheduler.create_context({MAX_QUEUE_SIZE: 2})
    result = scheduler.start(lambda: xs.buffer(s(10)), observer=observer, context=context)
    # 210: the first list goes out (demand 1); 220 and 230 wait (bound 2); 240 would be the third waiting
    assert result.messages == [on_next(210, [1]), on_error(240, LimitExceededError)]
    error = result.messages[1].value.error  # type: ignore[union-attr]
    assert error.setting == MAX_QUEUE_SIZE and error.limit == 2
    assert xs.subscriptions == [subscribe(200, 240)]


def test_the_default_queue_bound_is_256_lists() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable()
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(201, observer.request, 1)
    result = scheduler.start(lambda: xs.buffer(s(1)), observer=observer, disposed=2000)
    assert result.messages == [on_next(201, []), on_error(201 + 257, LimitExceededError)]


@pytest.mark.parametrize("kind", QUERIES)
def test_request_zero_signals_rule_3_9(kind: str) -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(230, observer.request, 0)
    result = scheduler.start(lambda: QUERIES[kind](xs), observer=observer)
    assert result.messages == [on_error(230, lambda e: isinstance(e, ValueError) and "3.9" in str(e))]
    assert xs.subscriptions == [subscribe(200, 230)]


def test_size_limit_of_the_duration_buffer() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    context = scheduler.create_context({MAX_BUFFER_SIZE: 2})
    result = scheduler.start(lambda: xs.buffer(s(50)), context=context)
    assert result.messages == [on_error(250, LimitExceededError)]
    assert xs.subscriptions == [subscribe(200, 250)]


def test_size_limit_of_the_duration_shift_buffer() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    context = scheduler.create_context({MAX_BUFFER_SIZE: 2})
    result = scheduler.start(lambda: xs.buffer(s(60), s(30)), context=context)
    assert result.messages == [on_error(250, LimitExceededError)]


# -- recovery --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "create",
    [
        lambda xs: xs.buffer(s(50)),
        lambda xs: xs.buffer(s(40), s(20)),
        lambda xs: xs.buffer(s(50), s(30)),
        lambda xs: xs.buffer(s(20), s(50)),
        lambda xs: xs.buffer(s(50), 2),
    ],
    ids=["duration", "shift-overlap", "shift-uneven", "shift-gaps", "duration|count"],
)
def test_time_buffers_survive_a_checkpoint_anywhere(create: Any) -> None:
    assert_checkpoint_anywhere(create, HOT)


def test_a_recovered_time_buffer_closes_when_it_would_have() -> None:
    """The close time is absolute state: restarted at 290 (by the harness), the list opened at 250 still closes
    at 300, with the element that arrived before the restart."""
    report = assert_checkpoint_anywhere(lambda xs: xs.buffer(s(50)), HOT, ticks=[290])
    assert report.expected[1] == on_next(300, [4])


def test_a_time_buffer_recovered_late_catches_up_with_the_closes_it_missed() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1))
    scheduler.advance_to(200)
    handle = xs.buffer(s(50)).subscribe(scheduler.create_observer())
    initialize(handle, scheduler.create_context())
    scheduler.advance_to(220)
    blob = save_subscription(handle, CheckpointMode.FULL)
    handle.dispose()
    assert blob is not None

    scheduler.advance_to(400)  # the process was down from 220 to 400
    ys = scheduler.create_hot_observable(on_next(410, 2), on_completed(420))
    observer = scheduler.create_observer()
    initialize(ys.buffer(s(50)).subscribe(observer), scheduler.create_context(), state_loader(blob))
    scheduler.advance_to(500)
    assert observer.messages == [
        on_next(400, [1]),  # due at 250
        on_next(400, []),  # 300
        on_next(400, []),  # 350
        on_next(400, []),  # 400
        on_next(420, [2]),
        on_completed(420),
    ]


def test_a_recovered_time_buffer_keeps_the_lists_waiting_for_demand_and_the_completion() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(260, 2), on_completed(280))
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(205, observer.request, 1)
    scheduler.advance_to(200)
    handle = xs.buffer(s(50)).subscribe(observer)
    initialize(handle, scheduler.create_context())
    scheduler.advance_to(300)
    assert observer.messages == [on_next(250, [1])]
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None

    ys = scheduler.create_hot_observable()
    recovered = scheduler.create_observer(request=1)
    initialize(ys.buffer(s(50)).subscribe(recovered), scheduler.create_context(), state_loader(blob))
    scheduler.advance_to(400)
    assert recovered.messages == [on_next(300, [2]), on_completed(300)]
    assert ys.requests == []


def test_a_recovered_time_buffer_lets_go_of_a_hot_source_that_had_completed() -> None:
    """A subject offers its subscription when subscribed, before the state says the source had completed: the
    recovered stage cancels it rather than leave it buffering for nobody."""
    scheduler = TestScheduler()
    scheduler.advance_to(200)
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(260, 2), on_completed(270))
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(205, observer.request, 1)
    handle = xs.buffer(s(50)).subscribe(observer)
    initialize(handle, scheduler.create_context())
    scheduler.advance_to(280)
    assert observer.messages == [on_next(250, [1])]
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None

    subject = SimpleSubject[int]()
    recovered = scheduler.create_observer(request=0)  # the last list waits for demand
    initialize(subject.as_query().buffer(s(50)).subscribe(recovered), scheduler.create_context(), state_loader(blob))
    assert subject.subscriber_count == 0
    scheduler.schedule_absolute(290, recovered.request, 1)
    scheduler.advance_to(300)
    assert recovered.messages == [on_next(290, [2]), on_completed(290)]


ARRIVALS = [on_next(212, 1), on_next(215, 2), on_next(222, 3), on_next(235, 4), on_completed(250)]


@pytest.mark.parametrize(
    ("create", "expected"),
    [
        (
            lambda xs: xs.buffer(s(10)),
            [[], [1, 2], [3], [4], []],
        ),
        (
            lambda xs: xs.buffer(s(10), s(5)),
            [[], [1, 2], [1, 2], [3], [3], [4], [4], [], [], []],
        ),
    ],
    ids=["duration", "duration and shift"],
)
def test_a_time_buffer_recovered_after_asking_for_everything_still_receives_while_the_subscriber_waits(
    create: Any, expected: list[list[int]]
) -> None:
    # The subscriber asks for one list at 205 (the buffer then asks the upstream for everything) and for more
    # only at 240: at the restart (210) it has nothing outstanding and asks for nothing. The elements of 212 to
    # 235 must still go into the lists of their time, not wait in the source until 240.
    report = assert_checkpoint_anywhere(create, ARRIVALS, demand=Demand(requests=((205, 1), (240, 9))), ticks=[210])
    assert [m.value.value for m in report.expected[:-1]] == expected  # type: ignore[union-attr]


def test_a_time_or_count_buffer_recovered_asks_the_upstream_again_for_what_was_outstanding() -> None:
    # Two lists of two asked for at 201 (4 elements upstream); the first closes by time at 210 with one
    # element, the second by count at 214: at the restart (215) the upstream still owes one element, which
    # the recovered subscriber (it has nothing outstanding) does not ask for again. It arrives at 216.
    report = assert_checkpoint_anywhere(
        lambda xs: xs.buffer(s(10), 2),
        [on_next(203, 1), on_next(213, 2), on_next(214, 3), on_next(216, 4), on_completed(250)],
        demand=Demand(requests=((201, 2), (240, 5))),
        ticks=[215],
    )
    assert report.expected == (
        on_next(210, [1]),
        on_next(214, [2, 3]),
        on_next(240, [4]),
        on_next(240, []),
        on_next(244, []),
        on_next(250, []),
        on_completed(250),
    )


@pytest.mark.parametrize(
    ("create", "stage", "dropped"),
    [
        (lambda xs: xs.buffer(s(10)), BufferTime, 1),
        (lambda xs: xs.buffer(s(10), s(5)), BufferTimeShift, 2),  # (version 3 added when its timer was armed)
        (lambda xs: xs.buffer(s(10), 2), BufferTimeOrCount, 2),
    ],
    ids=["duration", "duration and shift", "duration and count"],
)
def test_time_buffer_state_of_version_1_loads_as_nothing_asked_upstream(create: Any, stage: type, dropped: int) -> None:
    scheduler = TestScheduler()
    scheduler.advance_to(200)
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(205, observer.request, 1)
    handle = initialize(create(scheduler.create_hot_observable()).subscribe(observer), scheduler.create_context())
    scheduler.advance_to(207)
    blob = save_as_version_1(stage, dropped, handle)
    handle.dispose()

    xs = scheduler.create_hot_observable(on_next(208, 1))
    recovered = scheduler.create_observer(request=0)
    initialize(create(xs).subscribe(recovered), scheduler.create_context(), state_loader(blob))
    scheduler.advance_to(209)
    assert xs.requests == [], "version 1 did not save what the upstream was asked for"
    recovered.request(1)
    assert xs.requests == [Recorded(209, LONG_MAX if stage is not BufferTimeOrCount else 2)]


def test_the_stage_follows_the_arguments() -> None:
    source = from_iterable([1])
    assert isinstance(walk(source.buffer(s(1)).subscribe(Recorder()))[0], BufferTime)
    assert isinstance(walk(source.buffer(s(1), s(1)).subscribe(Recorder()))[0], BufferTime)
    assert isinstance(walk(source.buffer(s(2), s(1)).subscribe(Recorder()))[0], BufferTimeShift)
    assert isinstance(walk(source.buffer(s(2), 3).subscribe(Recorder()))[0], BufferTimeOrCount)


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((s(0),), ValueError, "duration must be positive"),
        ((s(-1),), ValueError, "duration must be positive"),
        ((s(1), s(0)), ValueError, "shift must be positive"),
        ((s(1), 0), ValueError, "count must be > 0"),
        ((s(1), 1.5), TypeError, "count must be an int"),
        ((1.5,), TypeError, "first argument must be a count"),
    ],
)
def test_arguments_are_validated_when_the_query_is_built(args: tuple[Any, ...], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        from_iterable([1]).buffer(*args)


def time_reference(times: list[int], end: int, duration: int, shift: int) -> list[Any]:
    """buffer(duration, shift) on virtual time from a subscription at 200: list ``k`` opens at ``200 + k * shift``
    and closes ``duration`` later; an element at an instant where a list opens is not in it (sources run before
    timers), one at the instant a list closes is. Completion at ``end`` emits the lists open then, oldest first."""
    out: list[Any] = []
    k = 0
    while 200 + k * shift < end:
        opens, closes = 200 + k * shift, 200 + k * shift + duration
        items = [t for t in times if opens < t <= closes]
        out.append((min(closes, end), k, items, closes >= end))
        k += 1
    out.sort(key=lambda entry: (entry[0], entry[3], entry[1]))  # by time; at the end, closed ones first
    return [on_next(time, items) for time, _, items, _ in out] + [on_completed(end)]


@settings(max_examples=60, deadline=None)
@given(
    times=st.sets(st.integers(201, 400), max_size=12),
    end=st.integers(201, 420),
    duration=st.integers(1, 60),
    shift=st.one_of(st.none(), st.integers(1, 60)),
)
def test_time_buffers_match_a_model(times: set[int], end: int, duration: int, shift: int | None) -> None:
    ordered = sorted(t for t in times if t < end)
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*[on_next(t, t) for t in ordered], on_completed(end))
    query = (lambda: xs.buffer(s(duration))) if shift is None else (lambda: xs.buffer(s(duration), s(shift)))
    result = scheduler.start(query)
    assert result.messages == time_reference(ordered, end, duration, duration if shift is None else shift)


def time_or_count_reference(times: list[int], end: int, duration: int, count: int) -> list[Any]:
    """buffer(duration, count) from a subscription at 200: a list closes at ``count`` elements (the timer then
    restarts from that instant) or ``duration`` after it opened; at an equal instant the element comes first."""
    out: list[Any] = []
    items: list[int] = []
    deadline = 200 + duration

    def run_timers(before: int) -> None:
        nonlocal items, deadline
        while deadline < before:
            out.append(on_next(deadline, items))
            items, deadline = [], deadline + duration

    for t in times:
        run_timers(t)
        items.append(t)
        if len(items) == count:
            out.append(on_next(t, items))
            items, deadline = [], t + duration
    run_timers(end)
    return [*out, on_next(end, items), on_completed(end)]


@settings(max_examples=60, deadline=None)
@given(
    times=st.sets(st.integers(201, 400), max_size=15),
    end=st.integers(201, 420),
    duration=st.integers(1, 60),
    count=st.integers(1, 4),
)
def test_time_or_count_buffer_matches_a_model(times: set[int], end: int, duration: int, count: int) -> None:
    ordered = sorted(t for t in times if t < end)
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*[on_next(t, t) for t in ordered], on_completed(end))
    result = scheduler.start(lambda: xs.buffer(s(duration), count))
    assert result.messages == time_or_count_reference(ordered, end, duration, count)
