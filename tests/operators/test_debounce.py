"""debounce by a duration (a native timer) and by a duration selector (an inner subscription per pending
element): quiet periods, completion flushes, errors drop, disposal, demand (latest wins), checkpoints."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from reaqtive import MissingSchedulerError, OperatorContext, Query, SimpleSubject, empty, never
from reaqtive.core.visitors import initialize
from reaqtive.state import InnerEnvironment, OperatorStateError, save_subscription
from reaqtive.testing import TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.support import Recorder

BOOM = RuntimeError("boom")
TEN = timedelta(seconds=10)

XS = [on_next(210, 1), on_next(215, 2), on_next(240, 3), on_next(245, 4), on_next(247, 5), on_completed(300)]


def timer_of(seconds: int) -> Query[int]:
    return Query.timer(timedelta(seconds=seconds))


# -- by a duration -----------------------------------------------------------------------------------------------


def test_debounce_emits_an_element_after_a_quiet_period() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*XS)
    result = scheduler.start(lambda: xs.debounce(TEN))
    assert result.messages == [on_next(225, 2), on_next(257, 5), on_completed(300)]
    assert xs.subscriptions == [subscribe(200, 300)]


def test_debounce_completion_flushes_the_pending_element() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(215, 2), on_completed(220))
    assert scheduler.start(lambda: xs.debounce(TEN)).messages == [on_next(220, 2), on_completed(220)]


def test_debounce_error_drops_the_pending_element() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(215, 2), on_error(220, BOOM))
    assert scheduler.start(lambda: xs.debounce(TEN)).messages == [on_error(220, BOOM)]


def test_debounce_disposed_emits_nothing_more() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*XS)
    result = scheduler.start(lambda: xs.debounce(TEN), disposed=220)
    assert result.messages == []
    assert xs.subscriptions == [subscribe(200, 220)]


def test_debounce_zero_duration_emits_in_the_same_tick() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2))
    assert scheduler.start(lambda: xs.debounce(timedelta(0))).messages == [on_next(210, 1), on_next(220, 2)]


def test_debounce_needs_a_scheduler_and_validates_its_argument() -> None:
    recorder = Recorder(initial=1)
    with pytest.raises(MissingSchedulerError):
        initialize(never().debounce(TEN).subscribe(recorder), OperatorContext("test://debounce"))
    with pytest.raises(ValueError, match="negative"):
        never().debounce(timedelta(seconds=-1))
    with pytest.raises(TypeError, match="debounce"):
        never().debounce(3)  # type: ignore[arg-type]


# -- demand ------------------------------------------------------------------------------------------------------


def test_debounce_keeps_the_latest_debounced_element_while_nobody_asks() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(230, 2), on_completed(260))
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(250, observer.request, 1)
    scheduler.schedule_absolute(270, observer.request, 1)
    result = scheduler.start(lambda: xs.debounce(TEN), observer=observer)
    # 1 was debounced at 220 and replaced by 2 at 240 (latest wins); completion waits behind nothing then
    assert result.messages == [on_next(250, 2), on_completed(260)]
    assert [r.value for r in xs.requests] == [2**63 - 1]


def test_debounce_completion_waits_for_demand_for_the_flushed_element() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_completed(220))
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(250, observer.request, 1)
    result = scheduler.start(lambda: xs.debounce(TEN), observer=observer)
    assert result.messages == [on_next(250, 1), on_completed(250)]


def test_debounce_request_zero_signals_rule_3_9() -> None:
    scheduler = TestScheduler()
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(210, observer.request, 0)
    result = scheduler.start(lambda: never().debounce(TEN), observer=observer)
    assert result.messages == [on_error(210, ValueError)]


# -- by a duration selector --------------------------------------------------------------------------------------


def test_debounce_by_selector_waits_for_the_duration_query() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 5), on_next(212, 20), on_next(240, 3), on_completed(300))
    result = scheduler.start(lambda: xs.debounce(timer_of))
    assert result.messages == [on_next(232, 20), on_next(243, 3), on_completed(300)]


def test_debounce_by_selector_ends_the_wait_on_completion_and_disposes_stale_durations() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_next(230, 3), on_completed(300))
    ys = scheduler.create_hot_observable(on_completed(235))
    result = scheduler.start(lambda: xs.debounce(lambda x: ys))
    assert result.messages == [on_next(235, 3), on_completed(300)]
    assert ys.subscriptions == [subscribe(210, 220), subscribe(220, 230), subscribe(230, 235)]


def test_debounce_by_selector_completion_flushes_and_disposes_the_duration() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_completed(220))
    ys = scheduler.create_hot_observable(on_next(300, "late"))
    result = scheduler.start(lambda: xs.debounce(lambda x: ys))
    assert result.messages == [on_next(220, 1), on_completed(220)]
    assert ys.subscriptions == [subscribe(210, 220)]


def test_debounce_by_selector_errors() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2))
    ys = scheduler.create_hot_observable(on_error(230, BOOM))
    result = scheduler.start(lambda: xs.debounce(lambda x: ys))
    assert result.messages == [on_error(230, BOOM)]
    assert xs.subscriptions == [subscribe(200, 230)]

    def selector(x: int) -> Query[Any]:
        if x == 2:
            raise BOOM
        return never()

    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2))
    assert scheduler.start(lambda: xs.debounce(selector)).messages == [on_error(220, BOOM)]
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1))
    assert scheduler.start(lambda: xs.debounce(lambda x: None)).messages == [on_error(210, TypeError)]  # type: ignore[arg-type,return-value]


def test_debounce_by_selector_works_standalone() -> None:
    recorder = Recorder(initial=10)
    subject = SimpleSubject[int]()
    durations = SimpleSubject[str]()
    initialize(
        subject.as_query().debounce(lambda x: durations.as_query()).subscribe(recorder), OperatorContext("t://d")
    )
    subject.on_next(1)
    subject.on_next(2)
    durations.on_next("now")
    subject.on_next(3)
    subject.on_complete()
    assert recorder.values == [2, 3] and recorder.completed == 1
    assert durations.subscriber_count == 0
    recorder = Recorder(initial=10)
    initialize(Query.from_iterable([1, 2]).debounce(lambda x: empty()).subscribe(recorder), OperatorContext("t://d"))
    assert recorder.values == [1, 2]


# -- checkpoints -------------------------------------------------------------------------------------------------


def test_debounce_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.debounce(TEN), XS)
    assert_checkpoint_anywhere(lambda xs: xs.debounce(TEN), [on_next(210, 1), on_error(218, ValueError("x"))])


def test_debounce_by_selector_survives_a_checkpoint_anywhere_with_a_live_duration() -> None:
    """The duration query's own state (a timer's due time; a hot stream) is restored with it."""
    script = [on_next(210, 5), on_next(212, 20), on_next(240, 3), on_next(250, 8), on_completed(300)]
    assert_checkpoint_anywhere(lambda xs: xs.debounce(timer_of), script, ticks=range(200, 300))
    signals = [on_next(220, "s"), on_next(245, "s"), on_completed(280)]
    assert_checkpoint_anywhere(lambda xs, ys: xs.debounce(lambda x: ys), script, signals)


def test_debounce_by_selector_hosted_ids_and_deletion() -> None:
    scheduler, environment = TestScheduler(), InnerEnvironment()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2))
    context = scheduler.create_context(environment=environment, instance_id="sub://q")
    result = scheduler.start(lambda: xs.debounce(lambda x: never()), context=context, disposed=230)
    assert result.messages == []
    assert environment.removed_inner_ids() == ["sub://q/debounce0/0", "sub://q/debounce0/1"]


def test_debounce_by_selector_standalone_checkpoint_with_a_live_duration_is_a_clear_error() -> None:
    subject = SimpleSubject[int]()
    handle = subject.as_query().debounce(lambda x: never()).subscribe(Recorder(initial=1))
    initialize(handle, OperatorContext("t://d"))
    assert save_subscription(handle) is not None
    subject.on_next(1)
    with pytest.raises(OperatorStateError, match="needs a HigherOrderEnvironment"):
        save_subscription(handle)
