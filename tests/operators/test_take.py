"""take(count) and take(duration): values, completion, errors, disposal, demand, checkpoints, threads."""

from __future__ import annotations

import itertools
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import MissingSchedulerError, OperatorContext, from_iterable
from reaqtive.core.streams import LONG_MAX
from reaqtive.core.visitors import initialize
from reaqtive.scheduler import LogicalScheduler, PhysicalScheduler
from reaqtive.testing import Recorded, TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.operators._take_skip_support import recover, run, save_at, saved_fields, saved_nodes
from tests.support import Recorder

HOT = [on_next(150, 1), on_next(210, 2), on_next(230, 3), on_next(260, 4), on_next(300, 5), on_completed(400)]
FAILURE = RuntimeError("source failed")


# -- take(count) -------------------------------------------------------------------------------------------------


def test_take_completes_with_the_last_element_and_unsubscribes_from_the_source() -> None:
    result, (xs,) = run(lambda xs: xs.take(3), HOT)
    assert result.messages == [on_next(210, 2), on_next(230, 3), on_next(260, 4), on_completed(260)]
    assert xs.subscriptions == [subscribe(200, 260)]


def test_take_more_than_the_source_has_completes_with_the_source() -> None:
    result, (xs,) = run(lambda xs: xs.take(10), HOT)
    assert result.values == [2, 3, 4, 5] and result.messages[-1] == on_completed(400)
    assert xs.subscriptions == [subscribe(200, 400)]


def test_take_zero_completes_at_once_without_subscribing_to_the_source() -> None:
    result, (xs,) = run(lambda xs: xs.take(0), HOT)
    assert result.messages == [on_completed(200)]
    assert xs.subscriptions == [] and xs.requests == []


def test_take_passes_a_source_error() -> None:
    result, (xs,) = run(lambda xs: xs.take(3), [on_next(210, 1), on_error(220, FAILURE)])
    assert result.messages == [on_next(210, 1), on_error(220, FAILURE)]
    assert xs.subscriptions == [subscribe(200, 220)]


def test_take_disposed_early_unsubscribes_at_dispose_time() -> None:
    result, (xs,) = run(lambda xs: xs.take(3), HOT, disposed=240)
    assert result.messages == [on_next(210, 2), on_next(230, 3)]
    assert xs.subscriptions == [subscribe(200, 240)]


@pytest.mark.parametrize(
    ("argument", "error", "message"),
    [
        (-1, ValueError, "take: count must be >= 0"),
        (True, TypeError, "take: count must be an int or a timedelta, got bool"),
        ("3", TypeError, "take: count must be an int or a timedelta, got str"),
        (1.5, TypeError, "take: count must be an int or a timedelta, got float"),
        (timedelta(seconds=-1), ValueError, "take: duration must be >= 0"),
    ],
)
def test_take_arguments_are_validated_when_the_query_is_built(argument: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        from_iterable([1]).take(argument)


def test_take_requests_only_what_it_still_needs_with_unbounded_demand() -> None:
    _result, (xs,) = run(lambda xs: xs.take(3), HOT)
    assert xs.requests == [Recorded(200, 3)], "LONG_MAX downstream becomes the 3 elements take will pass"


def test_take_with_one_at_a_time_demand_never_delivers_more_than_requested() -> None:
    result, (xs,) = run(lambda xs: xs.take(3), HOT, observer_request=1)
    assert result.messages == [on_next(210, 2), on_next(230, 3), on_next(260, 4), on_completed(260)]
    # One request per delivered element; the observer's fourth request is not passed on: take needs no more.
    assert xs.requests == [Recorded(200, 1), Recorded(210, 1), Recorded(230, 1)]


def test_take_delivers_only_on_demand_and_holds_nothing() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(250, observer.request, 1)
    scheduler.schedule_absolute(320, observer.request, 5)
    result = scheduler.start(lambda: xs.take(3), observer=observer)
    # The source keeps what was not requested (take buffers nothing); take asks for at most 3 in all.
    assert result.messages == [on_next(250, 2), on_next(320, 3), on_next(320, 4), on_completed(320)]
    assert xs.requests == [Recorded(250, 1), Recorded(320, 2)]


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(0, 30),
    count=st.integers(0, 20),
    requests=st.lists(st.integers(1, 8), max_size=10),
)
def test_take_never_requests_more_than_count_upstream(size: int, count: int, requests: list[int]) -> None:
    lines: list[str] = []
    recorder = Recorder()
    query = from_iterable(range(size)).trace("up", emit=lines.append).take(count)
    initialize(query.subscribe(recorder), OperatorContext("test://take"))
    requested = 0
    for n in requests:
        recorder.request(n)
        requested += n
        assert recorder.values == list(range(min(size, count, requested)))
    upstream = sum(int(line[len("[up] request(") : -1]) for line in lines if line.startswith("[up] request("))
    assert upstream <= count and upstream <= requested
    assert not recorder.violations
    assert recorder.completed == (1 if count == 0 or min(size, count) <= requested else 0)


@pytest.mark.parametrize("count", [0, 1, 3, 10])
def test_take_survives_a_checkpoint_anywhere(count: int) -> None:
    assert_checkpoint_anywhere(lambda xs: xs.take(count), HOT)


def test_take_saves_how_many_are_still_to_pass_and_continues_from_there() -> None:
    blob = save_at(lambda xs: xs.take(3), [HOT], 220)
    (record,) = saved_nodes(blob)
    assert (record.path, record.name, record.version) == ((0,), "reaqtive:take", (1,))
    assert saved_fields(record) == [False, 2]  # not disposed; two still to pass
    result, (xs,) = recover(lambda xs: xs.take(3), [HOT], blob, restart=225)
    assert result.messages == [on_next(230, 3), on_next(260, 4), on_completed(260)]
    assert xs.requests == [Recorded(225, 2)], "the recovered stage asks for what it still needs"


# -- take(duration) ----------------------------------------------------------------------------------------------


def test_take_duration_completes_at_the_end_and_unsubscribes() -> None:
    result, (xs,) = run(lambda xs: xs.take(timedelta(seconds=45)), HOT)
    assert result.messages == [on_next(210, 2), on_next(230, 3), on_completed(245)]
    assert xs.subscriptions == [subscribe(200, 245)]


def test_take_duration_passes_an_element_at_the_very_end() -> None:
    result, _ = run(lambda xs: xs.take(timedelta(seconds=30)), HOT)
    assert result.messages == [on_next(210, 2), on_next(230, 3), on_completed(230)]


def test_take_zero_duration_completes_at_once() -> None:
    result, (xs,) = run(lambda xs: xs.take(timedelta(0)), HOT)
    assert result.messages == [on_completed(200)]
    assert xs.subscriptions == [subscribe(200, 200)]


def test_take_duration_completes_with_an_earlier_source_and_its_timer_stays_silent() -> None:
    result, (xs,) = run(lambda xs: xs.take(timedelta(seconds=500)), HOT)
    assert result.messages == [on_next(210, 2), on_next(230, 3), on_next(260, 4), on_next(300, 5), on_completed(400)]
    assert xs.subscriptions == [subscribe(200, 400)]


def test_take_duration_passes_a_source_error() -> None:
    result, _ = run(lambda xs: xs.take(timedelta(seconds=50)), [on_next(210, 1), on_error(220, FAILURE)])
    assert result.messages == [on_next(210, 1), on_error(220, FAILURE)]


def test_take_duration_disposed_before_the_end_emits_nothing_more() -> None:
    result, (xs,) = run(lambda xs: xs.take(timedelta(seconds=45)), HOT, disposed=220)
    assert result.messages == [on_next(210, 2)]
    assert xs.subscriptions == [subscribe(200, 220)]


def test_take_duration_with_one_at_a_time_demand_passes_demand_through() -> None:
    result, (xs,) = run(lambda xs: xs.take(timedelta(seconds=45)), HOT, observer_request=1)
    assert result.messages == [on_next(210, 2), on_next(230, 3), on_completed(245)]
    assert xs.requests == [Recorded(200, 1), Recorded(210, 1), Recorded(230, 1)]


def test_take_duration_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.take(timedelta(seconds=45)), HOT, ticks=range(200, 320, 5))


def test_take_duration_recovered_ends_when_the_original_would_have() -> None:
    create = lambda xs: xs.take(timedelta(seconds=45))  # noqa: E731
    blob = save_at(create, [HOT], 220)
    (record,) = saved_nodes(blob)
    assert record.name == "reaqtive:take+duration"
    fields = saved_fields(record)
    assert fields[0] is False and fields[1].timestamp() == 245, "the absolute end time is saved"
    result, _ = recover(create, [HOT], blob, restart=235)
    assert result.messages == [on_completed(245)], "not 45 s after the restart"
    late, (xs,) = recover(create, [HOT], blob, restart=250)
    assert late.messages == [on_completed(250)], "past its end: completes as soon as it is back"
    assert xs.subscriptions == [subscribe(250, 250)]


def test_take_duration_needs_a_scheduler() -> None:
    with pytest.raises(MissingSchedulerError, match=r"take\(duration\) is time-based"):
        from_iterable([1]).take(timedelta(seconds=1)).run(lambda x: None, context=OperatorContext("test://none"))


def test_take_duration_never_overlaps_its_completion_with_an_element_on_real_threads() -> None:
    """An endless source on worker threads, a timer on another: the lock keeps signals apart (rule 1.3) and
    nothing follows the completion (rule 1.7)."""

    class Watcher(Recorder):
        def __init__(self) -> None:
            super().__init__(initial=LONG_MAX)
            self.inside = False
            self.overlaps = 0
            self.done = threading.Event()

        def on_next(self, value: Any) -> None:
            if self.inside:
                self.overlaps += 1
            self.inside = True
            time.sleep(0)  # let another thread run here, if it can
            super().on_next(value)
            self.inside = False

        def on_complete(self) -> None:
            if self.inside:
                self.overlaps += 1
            super().on_complete()
            self.done.set()

    with PhysicalScheduler(workers=2, name="test-take") as physical:
        context = OperatorContext("test://take/threads", LogicalScheduler(physical))
        watcher = Watcher()
        from_iterable(itertools.count(1)).take(timedelta(milliseconds=30)).run(watcher, context=context)
        assert watcher.done.wait(5)
        time.sleep(0.02)
    assert watcher.completed == 1 and not watcher.errors
    assert watcher.values[:3] == [1, 2, 3] and watcher.overlaps == 0 and not watcher.violations
