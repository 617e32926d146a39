"""window by duration, duration and shift, duration or count: timing, eager (and empty) windows, completion and
errors, disposal, limits, demand, recovery on absolute times."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from reaqtive import CallbackSubscriber, MissingSchedulerError, OperatorContext, SimpleSubject, from_iterable
from reaqtive.core.errors import LimitExceededError
from reaqtive.core.visitors import initialize
from reaqtive.operators.settings import MAX_QUEUE_SIZE, MAX_WINDOW_COUNT
from reaqtive.operators.window_time import WindowTime, WindowTimeOrCount, WindowTimeShift
from reaqtive.state import CheckpointMode, InnerEnvironment, save_subscription, state_loader
from reaqtive.testing import Recorded, TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import Demand, assert_checkpoint_anywhere
from tests.operators._inner_streams_support import InnerCollector, run_inner
from tests.operators._versions_support import save_as_version_1


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


# -- window(duration) --------------------------------------------------------------------------------------------


def test_window_duration_opens_a_window_every_duration_including_empty_ones() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = run_inner(scheduler, lambda: xs.window(s(50)))
    assert result.outer == [on_next(200, 0), on_next(250, 1), on_next(300, 2), on_next(350, 3), on_completed(370)]
    assert result.windows() == [
        [on_next(210, 1), on_next(240, 2), on_next(250, 3), on_completed(250)],  # 3 arrives before the timer
        [on_next(280, 4), on_completed(300)],
        [on_next(330, 5), on_completed(350)],
        [on_completed(370)],
    ]
    assert xs.subscriptions == [subscribe(200, 370)]


def test_window_duration_source_error_reaches_the_open_window() -> None:
    scheduler = TestScheduler()
    boom = RuntimeError("boom")
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(260, 2), on_error(270, boom))
    result = run_inner(scheduler, lambda: xs.window(s(50)))
    assert result.outer == [on_next(200, 0), on_next(250, 1), on_error(270, boom)]
    assert result.window_values() == [[1, "|"], [2, "!"]]
    assert xs.subscriptions == [subscribe(200, 270)]


def test_window_duration_disposed_completes_the_window_and_stops_the_timer() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = run_inner(scheduler, lambda: xs.window(s(50)), disposed=260)
    assert result.outer == [on_next(200, 0), on_next(250, 1)]
    assert result.windows()[1] == [on_completed(260)]
    assert xs.subscriptions == [subscribe(200, 260)]


def test_time_windows_need_a_scheduler() -> None:
    with pytest.raises(MissingSchedulerError):
        from_iterable([1]).window(s(5)).run(lambda w: None, context=OperatorContext("test://none"))


@pytest.mark.parametrize("second", [None, s(2), 3])
def test_a_source_that_completed_before_the_start_gives_one_empty_window(second: Any) -> None:
    scheduler = TestScheduler()
    subject = SimpleSubject[int]()
    subject.on_complete()
    seen: list[object] = []
    query = subject.as_query().window(s(5)) if second is None else subject.as_query().window(s(5), second)
    query.flat_map(lambda w: w.to_list()).run(
        seen.append, None, lambda: seen.append("done"), context=scheduler.create_context()
    )
    scheduler.advance_to(100)
    assert seen == [[], "done"]


# -- window(duration, shift) -------------------------------------------------------------------------------------


def test_window_duration_shift_overlapping_windows() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = run_inner(scheduler, lambda: xs.window(s(50), s(30)))
    assert result.outer[:4] == [on_next(200, 0), on_next(230, 1), on_next(260, 2), on_next(290, 3)]
    windows = result.windows()
    assert windows[0] == [on_next(210, 1), on_next(240, 2), on_next(250, 3), on_completed(250)]
    assert windows[1] == [on_next(240, 2), on_next(250, 3), on_next(280, 4), on_completed(280)]
    assert windows[2] == [on_next(280, 4), on_completed(310)]
    assert windows[3] == [on_next(330, 5), on_completed(340)]
    assert windows[4] == [on_next(330, 5), on_completed(370)]
    assert windows[5] == [on_completed(370)]
    assert result.outer[-1] == on_completed(370)


def test_window_duration_shift_with_gaps_drops_elements_between_windows() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = run_inner(scheduler, lambda: xs.window(s(20), s(50)))
    assert result.outer == [on_next(200, 0), on_next(250, 1), on_next(300, 2), on_next(350, 3), on_completed(370)]
    # 3 arrives at 250 just before the window of 250 opens (sources before timers): in no window
    assert result.window_values() == [[1, "|"], ["|"], ["|"], ["|"]]


def test_window_duration_shift_completes_before_it_opens_at_the_same_instant() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_completed(245))
    order: list[str] = []

    class Closing(CallbackSubscriber[Any]):
        def __init__(self) -> None:
            super().__init__(None, None, lambda: order.append(f"close@{scheduler.clock}"))

    class Opening(InnerCollector):
        def on_next(self, value: Any) -> None:
            order.append(f"open@{scheduler.clock}")
            value.subscribe(Closing())

    scheduler.start(lambda: xs.window(s(20), s(10)), observer=Opening(scheduler))
    assert order == [
        "open@200",
        "open@210",
        "close@220",
        "open@220",
        "close@230",
        "open@230",
        "close@240",
        "open@240",
        "close@245",
        "close@245",
    ]


def test_window_duration_shift_limit_on_open_windows() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    context = scheduler.create_context({MAX_WINDOW_COUNT: 2})
    result = run_inner(scheduler, lambda: xs.window(s(50), s(20)), context=context)
    assert result.outer[-1] == on_error(240, LimitExceededError)  # the third window opens at 240
    assert xs.subscriptions == [subscribe(200, 240)]


# -- window(duration, count) -------------------------------------------------------------------------------------


def test_window_duration_or_count_closes_on_whichever_comes_first() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = run_inner(scheduler, lambda: xs.window(s(50), 2))
    assert result.outer == [on_next(200, 0), on_next(240, 1), on_next(280, 2), on_next(330, 3), on_completed(370)]
    assert result.windows() == [
        [on_next(210, 1), on_next(240, 2), on_completed(240)],  # by count; the timer restarts at 240
        [on_next(250, 3), on_next(280, 4), on_completed(280)],
        [on_next(330, 5), on_completed(330)],  # by time (5 arrives just before the timer)
        [on_completed(370)],
    ]


def test_window_duration_or_count_translates_demand() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = InnerCollector(scheduler, request=0)
    scheduler.schedule_absolute(205, observer.request, 1)
    scheduler.schedule_absolute(300, observer.request, 1)
    scheduler.start(lambda: xs.window(s(1000), 2), observer=observer)
    assert xs.requests == [Recorded(205, 2), Recorded(300, 2)]
    assert observer.window_values() == [[1, 2, "|"], [3, 4, "|"]]  # window 1 waited with 3 until 300


# -- demand ------------------------------------------------------------------------------------------------------


def test_time_windows_ask_the_upstream_only_once_the_downstream_asked() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = InnerCollector(scheduler, request=0)
    scheduler.schedule_absolute(235, observer.request, 10)
    scheduler.start(lambda: xs.window(s(50)), observer=observer)
    assert [r.time for r in xs.requests] == [235]
    assert observer.outer[0] == on_next(235, 0)
    assert observer.windows()[0][0] == on_next(235, 1)  # the hot source held 1 until asked


def test_windows_opened_by_the_clock_wait_for_demand_in_order() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = InnerCollector(scheduler, request=0)
    scheduler.schedule_absolute(205, observer.request, 1)
    scheduler.schedule_absolute(320, observer.request, 2)
    scheduler.start(lambda: xs.window(s(50)), observer=observer)
    assert observer.outer[:3] == [on_next(205, 0), on_next(320, 1), on_next(320, 2)]
    assert observer.windows()[1] == [on_next(320, 4), on_completed(320)]  # closed at 300, waited with 4
    assert observer.windows()[2] == [on_next(330, 5), on_completed(350)]


def test_more_waiting_windows_than_the_queue_bound_is_an_error() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = InnerCollector(scheduler, request=0)
    scheduler.schedule_absolute(205, observer.request, 1)
    context = scheduler.create_context({MAX_QUEUE_SIZE: 2})
    scheduler.start(lambda: xs.window(s(20)), observer=observer, context=context)
    # window 1 opens at 220 (1 waiting), window 2 at 240 (2), its element 2 at 240 (3): too many
    assert observer.outer == [on_next(205, 0), on_error(240, LimitExceededError)]


@pytest.mark.parametrize("create", [lambda xs: xs.window(s(50)), lambda xs: xs.window(s(50), s(20))])
def test_one_window_at_a_time_never_delivers_more_than_requested(create: Any) -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = InnerCollector(scheduler, request=1)
    scheduler.start(lambda: create(xs), observer=observer)
    assert observer.outer[-1] == on_completed(370)
    assert len(observer.inners) == len(observer.outer) - 1


# -- recovery ----------------------------------------------------------------------------------------------------


def test_a_recovered_time_window_closes_when_it_would_have_and_catches_up() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1))
    env = InnerEnvironment()
    context = scheduler.create_context(environment=env, instance_id="sub://t")
    scheduler.advance_to(200)
    handle = xs.window(s(50)).subscribe(InnerCollector(scheduler))
    initialize(handle, context)
    scheduler.advance_to(220)
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None

    scheduler.advance_to(400)  # the process was down from 220 to 400
    restored = InnerEnvironment()
    ys = scheduler.create_hot_observable(on_next(410, 2), on_completed(420))
    recovered = InnerCollector(scheduler)
    initialize(
        ys.window(s(50)).subscribe(recovered),
        scheduler.create_context(environment=restored, instance_id="sub://t"),
        state_loader(blob),
    )
    first = restored.get_subject("sub://t/window0/0")  # the consumer of window 0 finds it again
    tail = scheduler.create_observer()
    first.subscribe(tail)
    scheduler.advance_to(500)
    assert tail.messages == [on_completed(400)]  # due at 250
    # the windows of 250, 300 and 350 open and close at once; the window of 400 takes 2
    assert recovered.outer == [on_next(400, n) for n in range(4)] + [on_completed(420)]
    assert recovered.window_values() == [["|"], ["|"], ["|"], [2, "|"]]


SCRIPT = [
    on_next(210, 1),
    on_next(225, 2),
    on_next(230, 3),
    on_next(250, 4),
    on_next(275, 5),
    on_next(280, 6),
    on_completed(330),
]


@pytest.mark.parametrize(
    "create",
    [
        pytest.param(lambda xs: xs.window(s(25)).flat_map(lambda w: w.to_list()), id="duration"),
        pytest.param(lambda xs: xs.window(s(30), s(20)).flat_map(lambda w: w.to_list()), id="shift-overlap"),
        pytest.param(lambda xs: xs.window(s(10), s(25)).flat_map(lambda w: w.to_list()), id="shift-gaps"),
        pytest.param(lambda xs: xs.window(s(30), 2).flat_map(lambda w: w.to_list()), id="duration-or-count"),
        pytest.param(lambda xs: xs.window(s(20)).flat_map(lambda w: w.to_list(), max_concurrent=1), id="one-at-a-time"),
        pytest.param(lambda xs: xs.window(s(30), 2).flat_map(lambda w: w.count(), max_concurrent=1), id="ferry-1"),
    ],
)
def test_time_windows_survive_a_checkpoint_anywhere(create: Any) -> None:
    assert_checkpoint_anywhere(create, SCRIPT)


def test_a_time_or_count_window_recovered_asks_the_upstream_again_for_what_was_outstanding() -> None:
    # Windows of 2 elements or 10 ticks, consumed one at a time by flat_map. At 231 the upstream owes one
    # element of the windows asked for so far, and the window the clock opened at 230 waits for demand with the
    # element of 231: nobody downstream has anything outstanding, so the recovered stage must ask for that
    # element again itself, or the window would close at 240 without it.
    script = [on_next(205, 1), on_next(210, 3), on_next(212, 3), on_next(220, 2), on_next(231, 5), on_next(240, 1)]
    report = assert_checkpoint_anywhere(
        lambda xs: xs.window(s(10), 2).flat_map(lambda w: w.to_list()),
        [*script, on_completed(300)],
        demand=Demand(initial=2, requests=((240, 1), (241, 1))),
        ticks=[231],
    )
    assert report.expected == (on_next(210, [1, 3]), on_next(220, [3, 2]), on_next(240, []), on_next(241, [5, 1]))


def test_time_or_count_window_state_of_version_1_loads() -> None:
    scheduler = TestScheduler()
    scheduler.advance_to(200)
    observer = scheduler.create_observer(request=1)
    query = scheduler.create_hot_observable(on_next(205, 1)).window(s(10), 2)
    handle = initialize(query.subscribe(observer), scheduler.create_context())
    scheduler.advance_to(206)
    blob = save_as_version_1(WindowTimeOrCount, 2, handle)  # version 1 did not save the demand
    handle.dispose()

    xs = scheduler.create_hot_observable()
    recovered = scheduler.create_observer(request=0)
    initialize(xs.window(s(10), 2).subscribe(recovered), scheduler.create_context(), state_loader(blob))
    assert xs.requests == [Recorded(206, 1)], "as version 1: what the emitted open window can still take"


# -- arguments ---------------------------------------------------------------------------------------------------


def test_the_stage_follows_the_arguments() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable()
    assert type(xs.window(s(2)).subscribe(scheduler.create_observer())) is WindowTime
    assert type(xs.window(s(2), s(1)).subscribe(scheduler.create_observer())) is WindowTimeShift
    assert type(xs.window(s(2), 3).subscribe(scheduler.create_observer())) is WindowTimeOrCount


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((s(0),), ValueError, "duration must be positive"),
        ((s(1), s(0)), ValueError, "shift must be positive"),
        ((s(1), 0), ValueError, "count must be > 0"),
        ((2, s(1)), TypeError, "second argument is skip"),
    ],
)
def test_arguments_are_validated_when_the_query_is_built(args: tuple[Any, ...], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        from_iterable([1]).window(*args)
