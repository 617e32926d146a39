"""Hot and cold test sources, the recording observer, notifications and ``start``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from reaqtive.core.context import OperatorContext
from reaqtive.core.operator import OperatorBase
from reaqtive.core.streams import LONG_MAX, Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.fluent.query import Query
from reaqtive.scheduler import ActionTask
from reaqtive.testing import (
    CREATED,
    DISPOSED,
    INFINITE,
    SUBSCRIBED,
    MockObserver,
    OnCompleted,
    OnError,
    OnNext,
    Recorded,
    SubscriptionLog,
    TestableQuery,
    TestScheduler,
    on_completed,
    on_error,
    on_next,
    subscribe,
)


class BoomError(Exception):
    pass


# -- notifications ---------------------------------------------------------------------------------------------


def test_helpers_build_recorded_notifications_with_readable_reprs() -> None:
    assert on_next(210, 1) == Recorded(210, OnNext(1))
    assert on_completed(300) == Recorded(300, OnCompleted())
    assert repr(on_next(210, "a")) == "OnNext('a')@210"
    assert repr(subscribe(200)) == "Subscribe(200, Infinite)"
    assert subscribe(200, 300) == SubscriptionLog(200, 300)
    assert subscribe(200).unsubscribe == INFINITE
    assert (CREATED, SUBSCRIBED, DISPOSED) == (100, 200, 1000)


def test_predicates_match_from_either_side_and_errors_match_by_type_and_args() -> None:
    assert on_next(210, lambda x: x > 3) == on_next(210, 5)
    assert on_next(210, 5) == on_next(210, lambda x: x > 3)
    assert on_next(210, lambda x: x > 3) != on_next(210, 2)
    assert on_next(210, lambda x: x > 3) != on_next(211, 5)
    assert on_next(210, int) == on_next(210, int)  # a class is a value, not a predicate
    error = BoomError("x")
    assert on_error(300, error) == on_error(300, error)
    assert on_error(300, BoomError("x")) == on_error(300, error)
    assert on_error(300, BoomError("y")) != on_error(300, error)
    assert on_error(300, ValueError("x")) != on_error(300, error)
    assert on_error(300, BoomError) == on_error(300, error)
    assert on_error(300, lambda e: "x" in str(e)) == on_error(300, error)
    assert on_next(300, 1) != on_completed(300)
    with pytest.raises(TypeError):
        on_error(300, 42)  # type: ignore[arg-type]


def test_notifications_deliver_themselves_to_a_subscriber() -> None:
    scheduler = TestScheduler()
    observer = scheduler.create_observer()
    OnNext(1).accept(observer)
    OnError(BoomError()).accept(observer)
    OnCompleted().accept(observer)
    assert [message.value.kind.name for message in observer.messages] == ["ON_NEXT", "ON_ERROR", "ON_COMPLETED"]


# -- hot sources -----------------------------------------------------------------------------------------------


def test_start_with_a_hot_source_records_output_and_the_subscription_log() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(
        on_next(150, 1), on_next(210, 2), on_next(220, 3), on_completed(300), on_next(310, 9)
    )
    assert isinstance(xs, Query) and isinstance(xs, TestableQuery)
    result = scheduler.start(lambda: xs.map(lambda x: x * 10))
    assert result.messages == [on_next(210, 20), on_next(220, 30), on_completed(300)]
    assert xs.subscriptions == [subscribe(200, 300)]
    assert xs.requests == [Recorded(200, LONG_MAX)]
    assert result.values == [20, 30]


def test_a_query_that_never_ends_is_disposed_at_the_disposed_time() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(1100, 2))
    result = scheduler.start(lambda: xs.filter(lambda x: x > 0))
    assert result.messages == [on_next(210, 1)]
    assert xs.subscriptions == [subscribe(200, 1000)]


def test_an_error_in_user_code_ends_the_query_at_the_same_tick_and_unsubscribes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 0), on_next(230, 2))
    result = scheduler.start(lambda: xs.map(lambda x: 10 // x))
    assert result.messages == [on_next(210, 10), on_error(220, ZeroDivisionError)]
    assert xs.subscriptions == [subscribe(200, 220)]


def test_a_hot_source_buffers_without_demand_and_delivers_on_request() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_next(230, 3), on_completed(240))
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(250, observer.request, 2)
    scheduler.schedule_absolute(300, observer.request, 1)
    result = scheduler.start(lambda: xs, observer=observer)
    assert result.messages == [on_next(250, 1), on_next(250, 2), on_next(300, 3), on_completed(300)]
    assert xs.requests == [Recorded(250, 2), Recorded(300, 1)]
    assert xs.subscriptions == [subscribe(200, 300)]  # the completion waited behind the buffer


def test_one_at_a_time_demand_is_recorded_with_its_times() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_completed(230))
    result = scheduler.start(lambda: xs, observer=scheduler.create_observer(request=1))
    assert result.messages == [on_next(210, 1), on_next(220, 2), on_completed(230)]
    assert xs.requests == [Recorded(200, 1), Recorded(210, 1), Recorded(220, 1)]


def test_filter_replaces_dropped_elements_with_requests_upstream() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_next(230, 4), on_completed(240))
    result = scheduler.start(lambda: xs.filter(lambda x: x % 2 == 0), observer=scheduler.create_observer(request=1))
    assert result.messages == [on_next(220, 2), on_next(230, 4), on_completed(240)]
    assert xs.requests == [Recorded(200, 1), Recorded(210, 1), Recorded(220, 1), Recorded(230, 1)]


def test_a_non_positive_request_signals_a_rule_3_9_error() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1))
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(205, observer.request, 0)
    result = scheduler.start(lambda: xs, observer=observer)
    assert result.messages == [on_error(205, lambda e: isinstance(e, ValueError) and "3.9" in str(e))]
    assert xs.subscriptions == [subscribe(200, 205)]


def test_each_hot_subscriber_has_its_own_demand_and_misses_what_came_before_it() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_completed(230))
    eager = scheduler.create_observer()
    late = scheduler.create_observer(request=0)
    context = scheduler.create_context()

    def attach(observer: MockObserver[Any]) -> None:
        from reaqtive.core.visitors import initialize

        initialize(xs.subscribe(observer), context)

    scheduler.schedule_absolute(200, attach, eager)
    scheduler.schedule_absolute(215, attach, late)
    scheduler.schedule_absolute(225, late.request, 5)
    scheduler.run()
    assert eager.messages == [on_next(210, 1), on_next(220, 2), on_completed(230)]
    assert late.messages == [on_next(225, 2), on_completed(230)]
    assert xs.subscriptions == [subscribe(200, 230), subscribe(215, 230)]


def test_a_hot_source_reports_what_each_subscription_holds_and_replays_a_backlog_to_new_subscriptions() -> None:
    from reaqtive.core.visitors import initialize
    from reaqtive.testing import HotSource

    scheduler = TestScheduler()
    source = HotSource(scheduler, [on_next(210, 1), on_next(220, 2), on_completed(230)])
    waiting = scheduler.create_observer(request=0)
    initialize(TestableQuery(source).subscribe(waiting), scheduler.create_context())
    scheduler.advance_to(235)
    assert source.held() == ((OnNext(1), OnNext(2), OnCompleted()),)

    # A new world: the first subscription starts with that backlog, the second one without.
    later = TestScheduler()
    later.advance_to(235)
    replaying = HotSource(later, [], backlog=source.held())
    first, second = later.create_observer(request=0), later.create_observer(request=0)
    initialize(TestableQuery(replaying).subscribe(first), later.create_context())
    initialize(TestableQuery(replaying).subscribe(second), later.create_context())
    later.schedule_absolute(240, first.request, 5)
    later.advance_to(250)
    assert first.messages == [on_next(240, 1), on_next(240, 2), on_completed(240)]
    assert second.messages == []
    assert replaying.held() == ((),)


def test_test_sources_reject_predicates_and_none_values() -> None:
    scheduler = TestScheduler()
    with pytest.raises(TypeError, match="predicates"):
        scheduler.create_hot_observable(on_next(210, lambda x: True))
    with pytest.raises(TypeError, match="None"):
        scheduler.create_cold_observable(Recorded(210, OnNext(None)))


# -- cold sources ----------------------------------------------------------------------------------------------


def test_a_cold_source_replays_relative_to_each_subscription() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_cold_observable(on_next(0, "a"), on_next(10, "b"), on_completed(20))
    first = scheduler.start(lambda: xs)
    assert first.messages == [on_next(200, "a"), on_next(210, "b"), on_completed(220)]
    assert scheduler.clock == DISPOSED  # start() ran until nothing was queued
    second = scheduler.start(lambda: xs, created=1100, subscribed=1200, disposed=1215)
    assert second.messages == [on_next(1200, "a"), on_next(1210, "b")]
    assert xs.subscriptions == [subscribe(200, 220), subscribe(1200, 1215)]
    assert scheduler.clock == 1215  # disposing cancelled the rest of its timeline
    assert scheduler.queue_length == 0


def test_a_cold_source_honours_demand() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_cold_observable(on_next(5, 1), on_next(6, 2), on_completed(7))
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(210, observer.request, 1)
    scheduler.schedule_absolute(220, observer.request, 1)
    result = scheduler.start(lambda: xs, observer=observer)
    assert result.messages == [on_next(210, 1), on_next(220, 2), on_completed(220)]


# -- start, contexts, observers --------------------------------------------------------------------------------


def test_start_steps_run_at_their_times_and_load_state_runs_between_set_context_and_start() -> None:
    scheduler = TestScheduler()
    steps: list[tuple[int, str]] = []
    xs = scheduler.create_cold_observable(on_next(1, 7))

    def create() -> Query[int]:
        steps.append((scheduler.clock, "create"))
        return xs

    def load_state(handle: SubscriptionHandle) -> None:
        steps.append((scheduler.clock, "load"))
        assert xs.subscriptions == [subscribe(250)]  # subscribed, not yet started
        assert xs.requests == []

    result = scheduler.start(create, created=150, subscribed=250, disposed=400, load_state=load_state)
    assert steps == [(150, "create"), (250, "load")]
    assert result.messages == [on_next(251, 7)]
    assert result.handle is not None
    assert xs.subscriptions == [subscribe(250, 400)]


def test_create_context_carries_the_scheduler_settings_and_environment() -> None:
    scheduler = TestScheduler()
    context = scheduler.create_context(settings={"rx://operators/toList/settings/maxListSize": 5})
    assert isinstance(context, OperatorContext)
    assert context.scheduler is scheduler
    assert context.try_get_element("rx://operators/toList/settings/maxListSize") == (True, 5)
    assert context.execution_environment is None
    assert context.instance_id == "reaqtive://test"


def test_the_observer_refuses_a_second_subscription() -> None:
    scheduler = TestScheduler()
    observer = scheduler.create_observer()
    xs = scheduler.create_hot_observable(on_next(210, 1))
    first = scheduler.create_hot_observable(on_next(210, 2))
    context = scheduler.create_context()
    from reaqtive.core.visitors import initialize

    initialize(first.subscribe(observer), context)
    initialize(xs.subscribe(observer), context)
    scheduler.run()
    assert observer.messages == [on_next(210, 2)]
    assert xs.subscriptions == [subscribe(0, 0)]
    with pytest.raises(ValueError):
        scheduler.create_observer(request=-1)


# -- an operator that uses the scheduler from its context (as docs/scheduler.md shows) --------------------------


class _Ticks(Subscribable[int]):
    """Emits 0 right away (an immediate task) and 1 after five seconds (a timer), then completes."""

    def subscribe_core(self, observer: Subscriber[int]) -> SubscriptionHandle:
        return _TicksOperator(observer)


class _TicksOperator(OperatorBase[int]):
    def on_start(self) -> None:
        scheduler = self.context.scheduler
        scheduler.schedule(ActionTask(self._emit, 0))
        scheduler.schedule(ActionTask(self._emit, 1), due=timedelta(seconds=5))

    def _emit(self, value: int) -> None:
        self._downstream.on_next(value)
        if value == 1:
            self._signal_complete()

    def request(self, n: int) -> None:
        pass  # a timer cannot be slowed down; the test requests unbounded


def test_an_operator_schedules_immediate_and_timed_work_from_its_context() -> None:
    scheduler = TestScheduler()
    result = scheduler.start(lambda: Query.from_subscribable(_Ticks()))
    assert result.messages == [on_next(201, 0), on_next(205, 1), on_completed(205)]

