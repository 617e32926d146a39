"""flat_map and merge_all: merging inner streams, completion in either order, errors and disposal of inners,
demand on both sides of the boundary, limits, and checkpoints with live inner subscriptions (hosted inner ids,
differential saves, inner streams saved by reference)."""

from __future__ import annotations

import operator
from typing import Any

import pytest

from reaqtive import (
    LimitExceededError,
    OperatorContext,
    Query,
    SimpleSubject,
    from_iterable,
    never,
    return_value,
)
from reaqtive.core.visitors import initialize
from reaqtive.fluent.query import InnerStream
from reaqtive.operators.flat_map import FlatMap
from reaqtive.operators.settings import MAX_CONCURRENT_INNER, MAX_QUEUE_SIZE
from reaqtive.state import (
    CheckpointMode,
    InnerEnvironment,
    OperatorStateError,
    confirm_saved,
    save_subscription,
    state_loader,
)
from reaqtive.testing import Recorded, TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import Demand, assert_checkpoint_anywhere
from tests.operators._inner_support import assert_restarts_agree, flood
from tests.operators._versions_support import save_as_version_1
from tests.operators.test_merge import run_concurrently
from tests.support import Recorder

BOOM = RuntimeError("boom")

XS = [on_next(210, 1), on_next(230, 2), on_next(260, 3), on_completed(300)]
YS = [on_next(215, "a"), on_next(235, "b"), on_next(265, "c"), on_next(290, "d"), on_completed(400)]


def pairs(ys: Query[str]) -> Any:
    return lambda x: ys.map(lambda y: (x, y))


# -- behaviour ---------------------------------------------------------------------------------------------------


def test_flat_map_merges_the_inner_streams_and_completes_after_the_outer_and_every_inner() -> None:
    """The outer completes at 300, before its inners: the result completes with the last inner, at 400."""
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*XS)
    ys = scheduler.create_hot_observable(*YS)
    result = scheduler.start(lambda: xs.flat_map(pairs(ys)))
    assert result.messages == [
        on_next(215, (1, "a")),
        on_next(235, (1, "b")), on_next(235, (2, "b")),
        on_next(265, (1, "c")), on_next(265, (2, "c")), on_next(265, (3, "c")),
        on_next(290, (1, "d")), on_next(290, (2, "d")), on_next(290, (3, "d")),
        on_completed(400),
    ]  # fmt: skip
    assert xs.subscriptions == [subscribe(200, 300)]
    assert ys.subscriptions == [subscribe(210, 400), subscribe(230, 400), subscribe(260, 400)]


def test_flat_map_completes_with_the_outer_when_the_inners_completed_first() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(230, 2), on_completed(350))
    ys = scheduler.create_hot_observable(*YS)
    result = scheduler.start(lambda: xs.flat_map(lambda x: ys.take(1).map(lambda y: (x, y))))
    assert result.messages == [on_next(215, (1, "a")), on_next(235, (2, "b")), on_completed(350)]
    assert ys.subscriptions == [subscribe(210, 215), subscribe(230, 235)]


def test_flat_map_with_a_result_selector_sees_the_outer_element() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*XS)
    ys = scheduler.create_hot_observable(*YS)
    result = scheduler.start(lambda: xs.flat_map(lambda x: ys.take(2), lambda x, y: f"{x}{y}"))
    assert result.values == ["1a", "1b", "2b", "2c", "3c", "3d"]
    assert result.messages[-1] == on_completed(300)


def test_flat_map_of_cold_inners_runs_each_from_its_start() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(215, 2), on_completed(220))
    ys = scheduler.create_cold_observable(on_next(10, "a"), on_next(20, "b"), on_completed(30))
    result = scheduler.start(lambda: xs.flat_map(pairs(ys)))
    assert result.messages == [
        on_next(220, (1, "a")), on_next(225, (2, "a")), on_next(230, (1, "b")), on_next(235, (2, "b")),
        on_completed(245),
    ]  # fmt: skip


def test_flat_map_selector_error_ends_the_result_and_disposes_every_inner() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*XS)
    ys = scheduler.create_hot_observable(*YS)

    def selector(x: int) -> Query[Any]:
        if x == 2:
            raise BOOM
        return ys.map(lambda y: (x, y))

    result = scheduler.start(lambda: xs.flat_map(selector))
    assert result.messages == [on_next(215, (1, "a")), on_error(230, BOOM)]
    assert xs.subscriptions == [subscribe(200, 230)]
    assert ys.subscriptions == [subscribe(210, 230)]


@pytest.mark.parametrize("bad", [None, 42])
def test_flat_map_selector_must_return_a_query(bad: object) -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*XS)
    result = scheduler.start(lambda: xs.flat_map(lambda x: bad))  # type: ignore[arg-type,return-value]
    assert result.messages == [on_error(210, TypeError)]
    assert xs.subscriptions == [subscribe(200, 210)]


def test_flat_map_result_selector_error_and_none() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*XS)
    ys = scheduler.create_hot_observable(*YS)
    result = scheduler.start(lambda: xs.flat_map(lambda x: ys, lambda x, y: 1 // 0))
    assert result.messages == [on_error(215, ZeroDivisionError)]
    assert ys.subscriptions == [subscribe(210, 215)]
    result = TestScheduler().start(
        lambda: from_iterable([1]).flat_map(return_value, lambda x, y: None)  # type: ignore[arg-type,return-value]
    )
    assert result.messages == [on_error(202, TypeError)]


def test_flat_map_inner_error_ends_the_result_and_disposes_the_outer_and_the_other_inners() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*XS)
    ys = scheduler.create_hot_observable(*YS)
    zs = scheduler.create_hot_observable(on_next(240, "z"), on_error(250, BOOM))
    result = scheduler.start(lambda: xs.flat_map(lambda x: zs if x == 2 else ys))
    assert result.messages == [on_next(215, "a"), on_next(235, "b"), on_next(240, "z"), on_error(250, BOOM)]
    assert xs.subscriptions == [subscribe(200, 250)]
    assert ys.subscriptions == [subscribe(210, 250)]
    assert zs.subscriptions == [subscribe(230, 250)]


def test_flat_map_outer_error_disposes_the_inners() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_error(240, BOOM))
    ys = scheduler.create_hot_observable(*YS)
    result = scheduler.start(lambda: xs.flat_map(pairs(ys)))
    assert result.messages == [on_next(215, (1, "a")), on_next(235, (1, "b")), on_error(240, BOOM)]
    assert ys.subscriptions == [subscribe(210, 240)]


def test_flat_map_disposed_early_disposes_the_outer_and_every_inner() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*XS)
    ys = scheduler.create_hot_observable(*YS)
    result = scheduler.start(lambda: xs.flat_map(pairs(ys)), disposed=250)
    assert result.values == [(1, "a"), (1, "b"), (2, "b")]
    assert xs.subscriptions == [subscribe(200, 250)]
    assert ys.subscriptions == [subscribe(210, 250), subscribe(230, 250)]


def test_flat_map_of_an_empty_outer_completes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_completed(250))
    assert scheduler.start(lambda: xs.flat_map(return_value)).messages == [on_completed(250)]


def test_flat_map_runs_standalone_synchronously() -> None:
    recorder = Recorder(initial=100)
    initialize(
        from_iterable(range(3)).flat_map(lambda x: from_iterable([x] * x)).subscribe(recorder),
        OperatorContext("test://flat_map"),
    )
    assert recorder.values == [1, 2, 2] and recorder.completed == 1


# -- demand ------------------------------------------------------------------------------------------------------


def test_flat_map_one_at_a_time_never_delivers_more_than_requested() -> None:
    recorder = Recorder(initial=1, per_item=1)
    query = from_iterable(range(50)).flat_map(lambda x: from_iterable(range(x, x + 10)))
    initialize(query.subscribe(recorder), OperatorContext("test://flat_map"))
    assert sorted(recorder.values) == sorted(v for x in range(50) for v in range(x, x + 10))
    assert recorder.completed == 1 and not recorder.violations


def test_flat_map_asks_the_outer_one_at_a_time_while_a_bounded_downstream_waits() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_next(230, 3), on_completed(240))
    ys = scheduler.create_hot_observable(on_next(300, "a"), on_next(310, "b"), on_completed(320))
    observer = scheduler.create_observer(request=1)
    result = scheduler.start(lambda: xs.flat_map(pairs(ys)), observer=observer)
    # while nothing came out, each outer element opened an inner and the next one was asked for
    assert [r.value for r in xs.requests] == [1, 1, 1, 1]
    assert result.values == [(1, "a"), (2, "a"), (3, "a"), (1, "b"), (2, "b"), (3, "b")]


def test_flat_map_stops_asking_the_outer_once_the_downstream_is_served() -> None:
    recorder = Recorder(initial=2)
    outer = SimpleSubject[int]()
    initialize(
        outer.as_query().flat_map(lambda x: from_iterable([x, x])).subscribe(recorder),
        OperatorContext("test://flat_map"),
    )
    outer.on_next(1)  # two elements: the demand of 2 is served, the outer is not asked for more
    outer.on_next(2)  # waits in the subject's buffer
    assert recorder.values == [1, 1]
    recorder.request(3)
    assert recorder.values == [1, 1, 2, 2]


def test_flat_map_asks_each_inner_for_no_more_than_its_queue_holds() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(205, 1))
    ys = scheduler.create_hot_observable(*[on_next(210 + i, i) for i in range(12)])
    observer = scheduler.create_observer(request=0)
    for tick in (300, 310, 320, 330):
        scheduler.schedule_absolute(tick, observer.request, 3)
    scheduler.schedule_absolute(201, observer.request, 1)
    context = scheduler.create_context({MAX_QUEUE_SIZE: 4})
    result = scheduler.start(lambda: xs.flat_map(lambda x: ys), observer=observer, context=context)
    assert result.values == list(range(12)) and result.messages[0] == on_next(210, 0)
    # asked for 4, then 3 more each time 3 went out: never more than 4 outstanding or queued
    assert ys.requests == [Recorded(205, 4), Recorded(300, 3), Recorded(310, 3), Recorded(320, 3), Recorded(330, 3)]


def test_flat_map_inner_that_ignores_demand_overflows_its_queue() -> None:
    recorder = Recorder()
    context = OperatorContext("test://flat_map", settings={MAX_QUEUE_SIZE: 2})
    outer = SimpleSubject[int]()
    initialize(outer.as_query().flat_map(lambda x: flood(1, 2, 3, 4)).subscribe(recorder), context)
    recorder.request(1)
    outer.on_next(0)
    assert recorder.values == [1]
    assert isinstance(recorder.errors[0], LimitExceededError) and recorder.errors[0].setting == MAX_QUEUE_SIZE


def test_flat_map_unbounded_demand_asks_inners_without_bound() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1))
    ys = scheduler.create_hot_observable(on_next(220, "a"))
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(205, observer.request, 2)
    scheduler.schedule_absolute(230, observer.request, 2**63 - 1)
    scheduler.start(lambda: xs.flat_map(lambda x: ys), observer=observer)
    assert ys.requests == [Recorded(210, 256), Recorded(230, 2**63 - 1)]
    # one outer element at a time while the bounded demand waits (the second came at 210), then unbounded
    assert xs.requests == [Recorded(205, 1), Recorded(210, 1), Recorded(230, 2**63 - 1)]


def test_flat_map_queues_drain_in_turns() -> None:
    """Without demand elements queue per inner; then they go out one inner at a time, in turn."""
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(201, "x"), on_next(202, "y"), on_next(203, "z"))
    streams = {
        "x": scheduler.create_hot_observable(on_next(210, 1), on_next(211, 2), on_next(212, 3), on_next(213, 4)),
        "y": scheduler.create_hot_observable(on_next(220, 10), on_next(221, 20)),
        "z": scheduler.create_hot_observable(on_next(230, 100)),
    }
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(201, observer.request, 1)  # opens the inners, one after the other
    scheduler.schedule_absolute(300, observer.request, 100)
    result = scheduler.start(lambda: xs.flat_map(lambda k: streams[k]), observer=observer)
    assert result.values == [1, 2, 10, 100, 3, 20, 4]


def test_flat_map_request_zero_signals_rule_3_9() -> None:
    recorder = Recorder()
    initialize(from_iterable([1]).flat_map(return_value).subscribe(recorder), OperatorContext("test://flat_map"))
    recorder.request(0)
    assert isinstance(recorder.errors[0], ValueError) and "3.9" in str(recorder.errors[0])


@pytest.mark.parametrize(("bounded", "capacity"), [(False, 256), (True, 1), (True, 5)])
def test_flat_map_serializes_signals_from_concurrent_inner_threads(bounded: bool, capacity: int) -> None:
    """Three inner subjects fed by three threads (and, bounded, a thread requesting): no overlapping signals,
    nothing lost, each inner's order kept."""
    recorder = run_concurrently(
        lambda *queries: from_iterable(queries).merge_all(),
        3,
        1500,
        bounded=bounded,
        capacity=capacity,
        value=lambda i, j: i * 10_000 + j,
    )
    assert recorder.errors == [] and recorder.completed == 1
    assert recorder.overlaps == 0 and not recorder.violations
    assert sorted(recorder.values) == sorted(i * 10_000 + j for i in range(3) for j in range(1500))
    for index in range(3):
        mine = [v for v in recorder.values if v // 10_000 == index]
        assert mine == sorted(mine), "each inner's order is kept"


# -- bounds on live inners ---------------------------------------------------------------------------------------


def test_flat_map_max_concurrent_opens_the_next_inner_when_one_completes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_next(230, 3), on_completed(240))
    ys = scheduler.create_hot_observable(*YS)
    result = scheduler.start(lambda: xs.flat_map(lambda x: ys.take(1).map(lambda y: (x, y)), max_concurrent=1))
    # the outer elements wait in the hot source until a slot is free
    assert result.messages == [
        on_next(215, (1, "a")), on_next(235, (2, "b")), on_next(265, (3, "c")), on_completed(265)
    ]  # fmt: skip
    assert ys.subscriptions == [subscribe(210, 215), subscribe(220, 235), subscribe(235, 265)]
    assert [r.value for r in xs.requests] == [1, 1, 1]


def test_flat_map_setting_bounds_live_inners_like_max_concurrent() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_completed(240))
    ys = scheduler.create_hot_observable(*YS)
    context = scheduler.create_context({MAX_CONCURRENT_INNER: 1})
    result = scheduler.start(lambda: xs.flat_map(lambda x: ys.take(1).map(lambda y: (x, y))), context=context)
    assert result.messages == [on_next(215, (1, "a")), on_next(235, (2, "b")), on_completed(240)]


def test_flat_map_outer_that_ignores_demand_exceeds_the_limit() -> None:
    recorder = Recorder(initial=100)
    context = OperatorContext("test://flat_map", settings={MAX_CONCURRENT_INNER: 2})
    initialize(flood(1, 2, 3).flat_map(lambda x: never()).subscribe(recorder), context)
    error = recorder.errors[0]
    assert isinstance(error, LimitExceededError) and error.setting == MAX_CONCURRENT_INNER and error.limit == 2
    recorder = Recorder(initial=100)
    initialize(flood(1, 2).flat_map(lambda x: never(), max_concurrent=1).subscribe(recorder), context)
    error = recorder.errors[0]
    assert isinstance(error, LimitExceededError) and error.setting == "max_concurrent"


def test_flat_map_validates_its_arguments() -> None:
    xs = from_iterable([1])
    with pytest.raises(TypeError, match="flat_map: selector"):
        xs.flat_map(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="flat_map: result_selector"):
        xs.flat_map(return_value, 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="flat_map: max_concurrent"):
        xs.flat_map(return_value, max_concurrent=0)
    with pytest.raises(ValueError, match="merge_all: max_concurrent"):
        xs.merge_all(max_concurrent=0)


# -- merge_all ---------------------------------------------------------------------------------------------------


def test_merge_all_merges_a_stream_of_streams() -> None:
    scheduler = TestScheduler()
    ys = scheduler.create_hot_observable(*YS)
    zs = scheduler.create_hot_observable(on_next(240, "z"), on_completed(250))
    xs = scheduler.create_hot_observable(on_next(210, ys), on_next(230, zs), on_completed(300))
    result = scheduler.start(xs.merge_all)
    assert result.messages == [
        on_next(215, "a"), on_next(235, "b"), on_next(240, "z"), on_next(265, "c"), on_next(290, "d"),
        on_completed(400),
    ]  # fmt: skip
    assert zs.subscriptions == [subscribe(230, 250)]


def test_merge_all_max_concurrent_and_non_query_elements() -> None:
    scheduler = TestScheduler()
    ys = scheduler.create_hot_observable(on_next(215, "a"), on_completed(220))
    zs = scheduler.create_hot_observable(on_next(218, "early"), on_next(225, "b"), on_completed(230))
    xs = scheduler.create_hot_observable(on_next(210, ys), on_next(212, zs), on_completed(240))
    result = scheduler.start(lambda: xs.merge_all(max_concurrent=1))
    assert result.messages == [on_next(215, "a"), on_next(225, "b"), on_completed(240)]
    result = TestScheduler().start(lambda: from_iterable([1]).merge_all())
    assert result.messages == [on_error(201, TypeError)]


def test_merge_all_completes_with_the_outer_when_the_inners_completed_first() -> None:
    scheduler = TestScheduler()
    ys = scheduler.create_hot_observable(on_next(215, "a"), on_completed(220))
    zs = scheduler.create_hot_observable(on_next(235, "b"), on_completed(240))
    xs = scheduler.create_hot_observable(on_next(210, ys), on_next(230, zs), on_completed(350))
    result = scheduler.start(xs.merge_all)
    assert result.messages == [on_next(215, "a"), on_next(235, "b"), on_completed(350)]
    assert ys.subscriptions == [subscribe(210, 220)] and zs.subscriptions == [subscribe(230, 240)]


def test_merge_all_inner_error_ends_the_result_and_disposes_the_outer_and_the_other_inners() -> None:
    scheduler = TestScheduler()
    ys = scheduler.create_hot_observable(*YS)
    zs = scheduler.create_hot_observable(on_next(240, "z"), on_error(250, BOOM))
    xs = scheduler.create_hot_observable(on_next(210, ys), on_next(230, zs), on_completed(300))
    result = scheduler.start(xs.merge_all)
    assert result.messages == [on_next(215, "a"), on_next(235, "b"), on_next(240, "z"), on_error(250, BOOM)]
    assert xs.subscriptions == [subscribe(200, 250)]
    assert ys.subscriptions == [subscribe(210, 250)] and zs.subscriptions == [subscribe(230, 250)]


def test_merge_all_outer_error_and_disposal_dispose_the_inners() -> None:
    scheduler = TestScheduler()
    ys = scheduler.create_hot_observable(*YS)
    xs = scheduler.create_hot_observable(on_next(210, ys), on_error(240, BOOM))
    assert scheduler.start(xs.merge_all).messages == [on_next(215, "a"), on_next(235, "b"), on_error(240, BOOM)]
    assert ys.subscriptions == [subscribe(210, 240)]

    scheduler = TestScheduler()
    ys = scheduler.create_hot_observable(*YS)
    xs = scheduler.create_hot_observable(on_next(210, ys), on_completed(300))
    assert scheduler.start(xs.merge_all, disposed=250).values == ["a", "b"]
    assert xs.subscriptions == [subscribe(200, 250)] and ys.subscriptions == [subscribe(210, 250)]


# -- checkpoints -------------------------------------------------------------------------------------------------


def test_flat_map_survives_a_checkpoint_anywhere_with_live_inners() -> None:
    assert_checkpoint_anywhere(lambda xs, ys: xs.flat_map(pairs(ys)), XS, YS)


def test_flat_map_with_stateful_inners_survives_a_checkpoint_anywhere() -> None:
    """Each inner counts its elements: that count lives in the inner subscription's own saved state."""
    assert_checkpoint_anywhere(
        lambda xs, ys: xs.flat_map(lambda x: ys.scan(0, lambda n, _: n + 1), lambda x, n: (x, n)), XS, YS
    )


def test_flat_map_completion_orders_survive_a_checkpoint_anywhere() -> None:
    early = [on_next(210, 1), on_next(230, 2), on_completed(350)]
    assert_checkpoint_anywhere(lambda xs, ys: xs.flat_map(lambda x: ys.take(1).map(lambda y: (x, y))), early, YS)
    assert_checkpoint_anywhere(
        lambda xs, ys: xs.flat_map(lambda x: ys.take(1).map(lambda y: (x, y)), max_concurrent=1), XS, YS
    )


def test_flat_map_errors_survive_a_checkpoint_anywhere() -> None:
    failing = [on_next(240, "z"), on_error(250, ValueError("inner"))]
    assert_checkpoint_anywhere(lambda xs, ys, zs: xs.flat_map(lambda x: zs if x == 2 else ys), XS, YS, failing)
    assert_checkpoint_anywhere(
        lambda xs, ys: xs.flat_map(pairs(ys)), [on_next(210, 1), on_error(270, ValueError("outer"))], YS
    )


def test_flat_map_queued_elements_and_their_turns_survive_a_restart() -> None:
    """A slow subscriber: elements wait in the queues, and take turns, across the restart."""
    ys = [*(on_next(215, i) for i in range(6)), on_completed(217)]
    zs = [*(on_next(216, 100 + i) for i in range(6)), on_completed(218)]
    outer = [on_next(210, 0), on_next(211, 1), on_completed(212)]
    requests = {205: 2, **{300 + i: 1 for i in range(10)}}
    expected = assert_restarts_agree(
        lambda xs, ys, zs: xs.flat_map(lambda k: ys if k == 0 else zs),
        [outer, ys, zs],
        [216, 220, 300, 303, 306, 309],  # where no requested element is missing (see run_restarted)
        requests=requests,
    )
    assert [m.value.value for m in expected[:-1]] == [0, 1, 2, 100, 3, 101, 4, 102, 5, 103, 104, 105]  # type: ignore[union-attr]
    assert expected[-1] == on_completed(309)


def test_flat_map_checkpoint_standalone_with_live_inners_is_a_clear_error() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1))
    result = scheduler.start(lambda: xs.flat_map(lambda x: never()), disposed=300)
    # disposed at 300, so the inner is gone and the state can be saved again
    assert save_subscription(result.handle) is not None  # type: ignore[arg-type]
    subject = SimpleSubject[int]()
    handle = subject.as_query().flat_map(lambda x: never()).subscribe(Recorder(initial=1))
    initialize(handle, OperatorContext("test://standalone"))
    assert save_subscription(handle) is not None  # no live inner yet: fine
    subject.on_next(1)
    with pytest.raises(OperatorStateError, match="needs a HigherOrderEnvironment"):
        save_subscription(handle)


def hosted_world(scheduler: TestScheduler, environment: InnerEnvironment) -> tuple[OperatorContext, Any, Any]:
    keys = scheduler.create_hot_observable(on_next(210, 1), on_next(211, 2), on_next(212, 3))
    values = scheduler.create_hot_observable(on_next(250, 2), on_next(270, 3))
    return scheduler.create_context(environment=environment, instance_id="sub://q"), keys, values


def count_matching(values: Query[int]) -> Any:
    return lambda key: values.filter(lambda v: v == key).scan(0, lambda n, _: n + 1).map(lambda n: (key, n))


def test_hosted_inner_ids_are_deterministic_and_a_differential_checkpoint_writes_only_the_changed_inner() -> None:
    scheduler, environment = TestScheduler(), InnerEnvironment()
    context, keys, values = hosted_world(scheduler, environment)
    observer = scheduler.create_observer()
    scheduler.advance_to(200)
    handle = initialize(keys.flat_map(count_matching(values)).subscribe(observer), context)
    scheduler.advance_to(230)
    inner = environment.inner_subscriptions()
    assert sorted(inner) == ["sub://q/flat_map0/0", "sub://q/flat_map0/1", "sub://q/flat_map0/2"]
    main = save_subscription(handle, CheckpointMode.FULL)
    blobs = {inner_id: save_subscription(h, CheckpointMode.FULL) for inner_id, h in inner.items()}
    for each in (handle, *inner.values()):
        confirm_saved(each)

    scheduler.advance_to(260)  # the inner of key 2 counted one element; nothing else changed
    assert observer.values == [(2, 1)]
    assert save_subscription(handle, CheckpointMode.DIFFERENTIAL) is None, "the flat_map node did not change"
    changed = {
        inner_id: blob
        for inner_id, h in environment.inner_subscriptions().items()
        if (blob := save_subscription(h, CheckpointMode.DIFFERENTIAL)) is not None
    }
    assert list(changed) == ["sub://q/flat_map0/1"]
    blobs.update(changed)

    # recover from the full blobs plus the differential one: the same ids, every saved state claimed
    again, restored = TestScheduler(), InnerEnvironment()
    context, keys, values = hosted_world(again, restored)
    restored.restore({k: v for k, v in blobs.items() if v is not None})
    again.advance_to(260)
    recovered = again.create_observer()
    assert main is not None
    initialize(keys.flat_map(count_matching(values)).subscribe(recovered), context, state_loader(main))
    assert sorted(restored.inner_subscriptions()) == sorted(inner)
    assert restored.unclaimed_inner_ids() == []
    again.advance_to(300)
    assert recovered.values == [(3, 1)], "the recovered inner of key 3 continues from its own state"


def test_deleted_inners_are_reported_for_removal() -> None:
    scheduler, environment = TestScheduler(), InnerEnvironment()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2))
    ys = scheduler.create_hot_observable(on_next(230, "a"), on_next(240, "b"))
    context = scheduler.create_context(environment=environment, instance_id="sub://q")
    scheduler.start(lambda: xs.flat_map(ys.take), context=context, disposed=260)
    # inner 0 took one element and completed at 230; inner 1 was deleted when the query was disposed
    assert environment.removed_inner_ids() == ["sub://q/flat_map0/0", "sub://q/flat_map0/1"]
    assert environment.inner_subscriptions() == {}


def test_inner_streams_are_saved_by_reference_and_resubscribed_after_a_restart() -> None:
    """Outer elements that are inner streams (groups, windows) are saved as references to their subjects."""

    def world(environment: InnerEnvironment) -> tuple[SimpleSubject[Any], Recorder, Any]:
        outer = SimpleSubject[Any]()
        recorder = Recorder(initial=100)
        handle = outer.as_query().merge_all().subscribe(recorder)
        return outer, recorder, handle

    environment = InnerEnvironment()
    context = OperatorContext("sub://q", execution_environment=environment)
    outer, recorder, handle = world(environment)
    initialize(handle, context)
    for name in ("w0", "w1"):
        outer.on_next(
            InnerStream(environment.get_or_create_subject(f"sub://q/window0/{name}"), f"sub://q/window0/{name}")
        )
    environment.get_subject("sub://q/window0/w1").on_next(1)  # type: ignore[attr-defined]
    assert recorder.values == [1]
    main = save_subscription(handle)
    assert main is not None
    inner = {key: save_subscription(unit) for key, unit in environment.inner_subscriptions().items()}

    restored = InnerEnvironment()
    restored.restore({key: blob for key, blob in inner.items() if blob is not None})
    outer, recorder, handle = world(restored)
    initialize(handle, OperatorContext("sub://q", execution_environment=restored), state_loader(main))
    assert sorted(restored.inner_subscriptions()) == ["sub://q/merge_all0/0", "sub://q/merge_all0/1"]
    restored.get_subject("sub://q/window0/w0").on_next(7)  # type: ignore[attr-defined]
    assert recorder.values == [7], "the subject was re-created by reference and subscribed again"


def test_a_stream_of_plain_queries_cannot_be_checkpointed_while_an_inner_is_live() -> None:
    environment = InnerEnvironment()
    outer = SimpleSubject[Any]()
    handle = outer.as_query().merge_all().subscribe(Recorder(initial=1))
    initialize(handle, OperatorContext("sub://q", execution_environment=environment))
    outer.on_next(never())
    with pytest.raises(OperatorStateError, match=r"xs.flat_map\(f\)"):
        save_subscription(handle)


@pytest.mark.parametrize(
    ("create", "late"),
    [
        pytest.param(lambda xs: xs.window(3).merge_all(), [], id="windows"),
        # the third group waits (with its elements) for a free slot: the source's completion frees one
        pytest.param(lambda xs: xs.group_by(lambda x: x // 10).merge_all(max_concurrent=2), [21, 22], id="groups"),
    ],
)
def test_merge_all_of_inner_streams_survives_a_checkpoint_anywhere(create: Any, late: list[int]) -> None:
    """Windows and groups are saved by reference: merge_all of them checkpoints with live inners."""
    values = [1, 2, 11, 3, 12, 21, 4, 22]
    script = [on_next(210 + i, v) for i, v in enumerate(values)] + [on_completed(300)]
    report = assert_checkpoint_anywhere(create, script)
    on_time = [on_next(210 + i, v) for i, v in enumerate(values) if v not in late]
    assert list(report.expected) == [*on_time, *(on_next(300, v) for v in late), on_completed(300)]


def test_flat_map_of_groups_survives_a_checkpoint_anywhere() -> None:
    """``group_by`` then a running count per group: groups are saved by reference, counts in each inner."""
    if not hasattr(Query, "group_by"):
        pytest.skip("group_by is not there yet")
    script = [on_next(210 + i, v) for i, v in enumerate([1, 2, 11, 3, 12, 21, 4, 22])] + [on_completed(300)]
    assert_checkpoint_anywhere(
        lambda xs: xs.group_by(lambda x: x // 10).flat_map(
            lambda g: g.scan(0, operator.add), lambda g, total: (g.key, total)
        ),
        script,
    )


def test_flat_map_recovered_with_an_outer_request_outstanding_asks_for_it_again() -> None:
    # The subscriber asks for 2 at 201: flat_map asks the outer for one element, whose inner delivers both at
    # 206, and asks for the next outer element meanwhile. At 207 that request is outstanding, the subscriber's
    # is not: the recovered subscriber asks for nothing, so the stage must ask again itself, or the outer
    # element of 210 (and its inner's elements) would wait for the subscriber's next request.
    report = assert_checkpoint_anywhere(
        lambda xs: xs.flat_map(lambda x: from_iterable([x, x * 10])),
        [on_next(205, 1), on_next(210, 2), on_completed(220)],
        demand=Demand(requests=((201, 2), (230, 2))),
        ticks=[207],
    )
    assert report.expected == (
        on_next(206, 1),
        on_next(206, 10),
        on_next(230, 2),
        on_next(230, 20),
        on_completed(230),
    )


def test_flat_map_state_of_version_1_loads_without_an_outstanding_outer_request() -> None:
    def run(scheduler: TestScheduler, xs: Any, observer: Any, loader: Any = None) -> Any:
        context = scheduler.create_context(environment=InnerEnvironment(), instance_id="sub://q")
        return initialize(xs.flat_map(lambda x: from_iterable([x])).subscribe(observer), context, loader)

    scheduler = TestScheduler()
    scheduler.advance_to(200)
    observer = scheduler.create_observer(request=2)
    handle = run(scheduler, scheduler.create_hot_observable(on_next(205, 1)), observer)
    scheduler.advance_to(207)
    assert observer.values == [1]
    blob = save_as_version_1(FlatMap, 1, handle)  # version 1 did not save the outstanding outer request
    handle.dispose()

    xs = scheduler.create_hot_observable(on_next(210, 2))
    run(scheduler, xs, scheduler.create_observer(request=0), state_loader(blob))
    scheduler.advance_to(220)
    assert xs.requests == [], "as version 1 did: nothing asked again"
