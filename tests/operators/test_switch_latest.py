"""switch_latest: only the latest inner's elements pass, switching disposes (deletes) the previous inner and drops
what it queued, completion in either order, errors of the latest vs stale inners, demand, checkpoints."""

from __future__ import annotations

from typing import Any

import pytest

from reaqtive import OperatorContext, Query, SimpleSubject, from_iterable, never, return_value
from reaqtive.core.visitors import initialize
from reaqtive.state import InnerEnvironment, OperatorStateError, save_subscription
from reaqtive.testing import TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import Demand, assert_checkpoint_anywhere
from tests.operators._inner_support import assert_restarts_agree
from tests.support import Recorder

BOOM = RuntimeError("boom")

XS = [on_next(210, 1), on_next(230, 2), on_next(260, 3), on_completed(300)]
YS = [on_next(215, "a"), on_next(220, "b"), on_next(235, "c"), on_next(265, "d"), on_next(290, "e"), on_completed(400)]


def pairs(ys: Query[str]) -> Any:
    return lambda x: ys.map(lambda y: (x, y))


def test_switch_latest_passes_only_the_latest_inner_and_disposes_the_previous_one() -> None:
    scheduler = TestScheduler()
    ys = scheduler.create_hot_observable(on_next(215, "a"), on_next(235, "b"), on_completed(250))
    zs = scheduler.create_hot_observable(on_next(225, "c"), on_next(240, "d"), on_completed(260))
    xs = scheduler.create_hot_observable(on_next(210, ys), on_next(230, zs), on_completed(245))
    result = scheduler.start(xs.switch_latest)
    assert result.messages == [on_next(215, "a"), on_next(240, "d"), on_completed(260)]
    assert xs.subscriptions == [subscribe(200, 245)]
    assert ys.subscriptions == [subscribe(210, 230)]
    assert zs.subscriptions == [subscribe(230, 260)]


def test_switch_latest_with_a_selector() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*XS)
    ys = scheduler.create_hot_observable(*YS)
    result = scheduler.start(lambda: xs.switch_latest(pairs(ys)))
    assert result.messages == [
        on_next(215, (1, "a")), on_next(220, (1, "b")), on_next(235, (2, "c")), on_next(265, (3, "d")),
        on_next(290, (3, "e")), on_completed(400),
    ]  # fmt: skip
    assert ys.subscriptions == [subscribe(210, 230), subscribe(230, 260), subscribe(260, 400)]


def test_switch_latest_completes_with_the_outer_when_the_latest_inner_completed_first() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(230, 2), on_completed(350))
    ys = scheduler.create_hot_observable(*YS)
    result = scheduler.start(lambda: xs.switch_latest(lambda x: ys.take(1)))
    assert result.messages == [on_next(215, "a"), on_next(235, "c"), on_completed(350)]


def test_switch_latest_of_an_empty_outer_completes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_completed(250))
    assert scheduler.start(xs.switch_latest).messages == [on_completed(250)]


def test_switch_latest_latest_inner_error_ends_the_result() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*XS)
    ys = scheduler.create_hot_observable(*YS)
    zs = scheduler.create_hot_observable(on_next(240, "z"), on_error(250, BOOM))
    result = scheduler.start(lambda: xs.switch_latest(lambda x: zs if x == 2 else ys))
    assert result.messages == [on_next(215, "a"), on_next(220, "b"), on_next(240, "z"), on_error(250, BOOM)]
    assert xs.subscriptions == [subscribe(200, 250)]
    assert zs.subscriptions == [subscribe(230, 250)]


def test_switch_latest_ignores_a_stale_inner_error() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*XS)
    ys = scheduler.create_hot_observable(*YS)
    zs = scheduler.create_hot_observable(on_next(215, "z"), on_error(240, BOOM))
    result = scheduler.start(lambda: xs.switch_latest(lambda x: zs if x == 1 else ys))
    assert result.messages == [on_next(215, "z"), on_next(235, "c"), on_next(265, "d"), on_next(290, "e"),
                               on_completed(400)]  # fmt: skip
    assert zs.subscriptions == [subscribe(210, 230)]


def test_switch_latest_selector_error_ends_the_result_and_disposes_the_inner() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*XS)
    ys = scheduler.create_hot_observable(*YS)

    def selector(x: int) -> Query[Any]:
        if x == 2:
            raise BOOM
        return ys

    result = scheduler.start(lambda: xs.switch_latest(selector))
    assert result.messages == [on_next(215, "a"), on_next(220, "b"), on_error(230, BOOM)]
    assert ys.subscriptions == [subscribe(210, 230)]
    assert xs.subscriptions == [subscribe(200, 230)]
    result = TestScheduler().start(lambda: from_iterable([1]).switch_latest())
    assert result.messages == [on_error(201, TypeError)]


def test_switch_latest_outer_error_and_disposal() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_error(240, BOOM))
    ys = scheduler.create_hot_observable(*YS)
    result = scheduler.start(lambda: xs.switch_latest(pairs(ys)))
    assert result.messages == [on_next(215, (1, "a")), on_next(220, (1, "b")), on_next(235, (1, "c")),
                               on_error(240, BOOM)]  # fmt: skip
    assert ys.subscriptions == [subscribe(210, 240)]
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*XS)
    ys = scheduler.create_hot_observable(*YS)
    scheduler.start(lambda: xs.switch_latest(pairs(ys)), disposed=250)
    assert ys.subscriptions == [subscribe(210, 230), subscribe(230, 250)]


def test_switch_latest_drops_what_the_previous_inner_queued() -> None:
    scheduler = TestScheduler()
    ys = scheduler.create_hot_observable(on_next(215, "a"), on_next(220, "b"))
    zs = scheduler.create_hot_observable(on_next(240, "c"), on_completed(245))
    xs = scheduler.create_hot_observable(on_next(210, ys), on_next(230, zs), on_completed(235))
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(201, observer.request, 1)
    scheduler.schedule_absolute(250, observer.request, 10)
    result = scheduler.start(xs.switch_latest, observer=observer)
    # "b" waited for demand when zs came: it is dropped with ys
    assert result.messages == [on_next(215, "a"), on_next(250, "c"), on_completed(250)]


def test_switch_latest_one_at_a_time_switches_when_the_subscriber_catches_up() -> None:
    """A bounded subscriber is served from the current inner before the outer is asked for the next one."""
    recorder = Recorder(initial=1, per_item=1)
    query = from_iterable(range(5)).switch_latest(lambda x: from_iterable([x, x]))
    initialize(query.subscribe(recorder), OperatorContext("test://switch"))
    assert recorder.values == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert recorder.completed == 1 and not recorder.violations


def test_switch_latest_with_unbounded_demand_switches_at_once() -> None:
    recorder = Recorder(initial=2**63 - 1)
    outer = SimpleSubject[Query[int]]()
    inner = SimpleSubject[int]()
    initialize(outer.as_query().switch_latest().subscribe(recorder), OperatorContext("test://switch"))
    outer.on_next(inner.as_query())
    inner.on_next(1)
    outer.on_next(never())
    inner.on_next(2)
    assert recorder.values == [1] and inner.subscriber_count == 0


def test_switch_latest_request_zero_signals_rule_3_9() -> None:
    recorder = Recorder()
    initialize(from_iterable([1]).switch_latest(return_value).subscribe(recorder), OperatorContext("test://s"))
    recorder.request(-1)
    assert isinstance(recorder.errors[0], ValueError) and "3.9" in str(recorder.errors[0])


def test_switch_latest_validates_its_argument() -> None:
    with pytest.raises(TypeError, match="switch_latest: selector"):
        from_iterable([1]).switch_latest(3)  # type: ignore[arg-type]


# -- hosted, checkpoints ---------------------------------------------------------------------------------------


def test_switch_latest_deletes_the_previous_inner_from_the_environment() -> None:
    scheduler, environment = TestScheduler(), InnerEnvironment()
    xs = scheduler.create_hot_observable(*XS)
    ys = scheduler.create_hot_observable(*YS)
    context = scheduler.create_context(environment=environment, instance_id="sub://q")
    scheduler.start(lambda: xs.switch_latest(pairs(ys)), context=context, disposed=270)
    assert environment.removed_inner_ids() == [f"sub://q/switch_latest0/{n}" for n in range(3)]
    assert environment.inner_subscriptions() == {}


def test_switch_latest_survives_a_checkpoint_anywhere_with_a_live_inner() -> None:
    assert_checkpoint_anywhere(lambda xs, ys: xs.switch_latest(pairs(ys)), XS, YS)
    assert_checkpoint_anywhere(
        lambda xs, ys: xs.switch_latest(lambda x: ys.scan(0, lambda n, _: n + 1).map(lambda n: (x, n))), XS, YS
    )


def test_switch_latest_completion_and_errors_survive_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(
        lambda xs, ys: xs.switch_latest(lambda x: ys.take(1)), [on_next(210, 1), on_next(230, 2), on_completed(350)], YS
    )
    failing = [on_next(240, "z"), on_error(250, ValueError("inner"))]
    assert_checkpoint_anywhere(lambda xs, ys, zs: xs.switch_latest(lambda x: zs if x == 2 else ys), XS, YS, failing)


def test_switch_latest_queued_elements_survive_a_restart() -> None:
    ys = [*(on_next(215, i) for i in range(4)), on_completed(216)]
    outer = [on_next(210, 0), on_completed(212)]
    requests = {205: 1, **{300 + i: 1 for i in range(3)}}
    expected = assert_restarts_agree(
        lambda xs, ys: xs.switch_latest(lambda k: ys), [outer, ys], [215, 216, 300, 301, 302], requests=requests
    )
    assert expected == [on_next(215, 0), on_next(300, 1), on_next(301, 2), on_next(302, 3), on_completed(302)]


def test_switch_latest_over_plain_queries_cannot_be_checkpointed_with_a_live_inner() -> None:
    environment = InnerEnvironment()
    outer = SimpleSubject[Any]()
    handle = outer.as_query().switch_latest().subscribe(Recorder(initial=1))
    initialize(handle, OperatorContext("sub://q", execution_environment=environment))
    outer.on_next(never())
    with pytest.raises(OperatorStateError, match=r"switch_latest\(f\)"):
        save_subscription(handle)


def test_switch_latest_recovered_with_an_outer_request_outstanding_asks_for_it_again() -> None:
    # As flat_map's: at 207 the next outer element is requested and the subscriber's demand is met.
    report = assert_checkpoint_anywhere(
        lambda xs: xs.switch_latest(lambda x: from_iterable([x, x * 10])),
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
