"""sample: by a sampler stream and by a period; completion rules, errors, demand, recovery."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import LONG_MAX, OperatorContext, Query, SimpleSubject
from reaqtive.core.visitors import initialize
from reaqtive.testing import Recorded, TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import Demand, assert_checkpoint_anywhere
from tests.support import Recorder

BOOM = RuntimeError("boom")
SOURCE = [on_next(210, 1), on_next(220, 2), on_next(260, 3), on_completed(270)]
SAMPLER = [on_next(230, "s"), on_next(250, "s"), on_next(280, "s"), on_next(290, "s")]


def s(seconds: int) -> timedelta:
    return timedelta(seconds=seconds)


def run(source: list[Any], sampler: list[Any], observer_request: int | None = None, **kw: Any) -> Any:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*source)
    ys = scheduler.create_hot_observable(*sampler)
    observer = scheduler.create_observer(request=observer_request)
    for tick, n in kw.pop("requests", []):
        scheduler.schedule_absolute(tick, lambda n=n: observer.request(n))
    result = scheduler.start(lambda: xs.sample(ys), observer=observer, **kw)
    return result, xs, ys


# -- by a sampler stream -----------------------------------------------------------------------------------------


def test_each_sample_emits_the_latest_new_value_and_completes_at_the_first_sample_after_the_source_end() -> None:
    result, xs, ys = run(SOURCE, SAMPLER)
    assert result.messages == [on_next(230, 2), on_next(280, 3), on_completed(280)]
    assert xs.subscriptions == [subscribe(200, 270)]
    assert ys.subscriptions == [subscribe(200, 280)]


def test_a_value_is_sampled_once_and_a_sample_without_a_new_value_emits_nothing() -> None:
    result, _, _ = run([on_next(210, 1)], [on_next(220, 0), on_next(230, 0), on_next(240, 0)], disposed=300)
    assert result.messages == [on_next(220, 1)]


def test_source_completion_with_nothing_pending_completes_at_the_next_sample() -> None:
    result, _, _ = run([on_next(210, 1), on_completed(240)], [on_next(220, 0), on_next(250, 0)])
    assert result.messages == [on_next(220, 1), on_completed(250)]


def test_the_sampler_completion_is_a_last_sample() -> None:
    result, _, _ = run([on_next(210, 1), on_next(220, 2)], [on_completed(230)], disposed=300)
    assert result.messages == [on_next(230, 2)]


def test_source_completing_after_the_sampler_completed_completes_at_once() -> None:
    result, _xs, ys = run([on_next(210, 1), on_next(240, 2), on_completed(250)], [on_completed(230)])
    assert result.messages == [on_next(230, 1), on_completed(250)], "value 2 can never be sampled: dropped"
    assert ys.subscriptions == [subscribe(200, 230)]


def test_sampler_completing_after_the_source_completed_emits_the_last_value_and_completes() -> None:
    result, _, _ = run([on_next(210, 1), on_completed(220)], [on_completed(230)])
    assert result.messages == [on_next(230, 1), on_completed(230)]


def test_source_error_goes_downstream_at_once_and_unsubscribes_both() -> None:
    result, xs, ys = run([on_next(210, 1), on_error(220, BOOM)], SAMPLER)
    assert result.messages == [on_error(220, BOOM)]
    assert xs.subscriptions == [subscribe(200, 220)] and ys.subscriptions == [subscribe(200, 220)]


def test_sampler_error_goes_downstream_at_once_and_unsubscribes_both() -> None:
    result, xs, ys = run(SOURCE, [on_next(230, 0), on_error(240, BOOM)])
    assert result.messages == [on_next(230, 2), on_error(240, BOOM)]
    assert xs.subscriptions == [subscribe(200, 240)] and ys.subscriptions == [subscribe(200, 240)]


def test_disposal_unsubscribes_both_inputs() -> None:
    result, xs, ys = run(SOURCE, SAMPLER, disposed=240)
    assert result.messages == [on_next(230, 2)]
    assert xs.subscriptions == [subscribe(200, 240)] and ys.subscriptions == [subscribe(200, 240)]


def test_any_subscribable_can_be_the_sampler_and_it_runs_standalone() -> None:
    source, sampler = SimpleSubject[int](), SimpleSubject[str]()
    recorder = Recorder(initial=LONG_MAX)
    initialize(Query.from_subscribable(source).sample(sampler).subscribe(recorder), OperatorContext("test://sample"))
    source.on_next(1)
    source.on_next(2)
    sampler.on_next("tick")
    sampler.on_next("tick")
    source.on_next(3)
    source.on_complete()
    sampler.on_next("tick")
    assert recorder.values == [2, 3] and recorder.completed == 1


@settings(max_examples=40, deadline=None)
@given(
    values=st.dictionaries(st.integers(101, 199).map(lambda t: 2 * t), st.integers(0, 99), max_size=20),
    samples=st.sets(st.integers(100, 199).map(lambda t: 2 * t + 1), max_size=20),
    end=st.one_of(st.none(), st.integers(101, 200).map(lambda t: 2 * t)),
)
def test_sample_matches_a_simple_model(values: dict[int, int], samples: set[int], end: int | None) -> None:
    """Source elements at even ticks, samples at odd ticks (so no two events share a tick)."""
    if end is not None:
        values = {t: v for t, v in values.items() if t < end}
    source = [on_next(t, v) for t, v in sorted(values.items())] + ([on_completed(end)] if end is not None else [])
    sampler = [on_next(t, "s") for t in sorted(samples)]
    expected: list[Any] = []
    latest: int | None = None
    events = sorted([(t, "v", v) for t, v in values.items()] + [(t, "s", 0) for t in samples])
    for t, kind, v in events:
        if kind == "v":
            latest = v
            continue
        if latest is not None:
            expected.append(on_next(t, latest))
            latest = None
        if end is not None and t > end:
            expected.append(on_completed(t))
            break
    result, _, _ = run(source, sampler)
    assert result.messages == expected


# -- by a period -------------------------------------------------------------------------------------------------


def test_sample_by_period_samples_every_period_from_the_start() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*SOURCE)
    result = scheduler.start(lambda: xs.sample(s(15)))
    assert result.messages == [on_next(215, 1), on_next(230, 2), on_next(260, 3), on_completed(275)]
    assert xs.subscriptions == [subscribe(200, 270)]


def test_sample_by_period_is_sample_over_an_interval() -> None:
    query = Query.never().sample(s(5))
    assert query.op == "sample" and query.args[1] == Query.interval(s(5))


# -- demand ------------------------------------------------------------------------------------------------------


def test_inputs_are_requested_without_bound() -> None:
    _, xs, ys = run(SOURCE, SAMPLER, observer_request=1)
    assert xs.requests == [Recorded(200, LONG_MAX)] and ys.requests == [Recorded(200, LONG_MAX)]


def test_one_at_a_time_demand_gets_every_sample() -> None:
    result, _, _ = run(SOURCE, SAMPLER, observer_request=1)
    assert result.messages == [on_next(230, 2), on_next(280, 3), on_completed(280)]


def test_a_sample_without_demand_waits_and_a_newer_sample_replaces_it() -> None:
    source = [on_next(210, 1), on_next(240, 2), on_next(245, 3)]
    sampler = [on_next(220, 0), on_next(250, 0), on_next(270, 0)]
    result, _, _ = run(source, sampler, observer_request=0, requests=[(260, 1), (300, 5)], disposed=400)
    assert result.messages == [on_next(261, 3)], "the sample of 220 (value 1) was replaced by the one of 250"


def test_completion_waits_for_the_last_sample_to_be_delivered() -> None:
    source = [on_next(210, 1), on_completed(215)]
    result, _, _ = run(source, [on_next(220, 0)], observer_request=0, requests=[(260, 1)])
    assert result.messages == [on_next(261, 1), on_completed(261)]


def test_non_positive_request_is_a_rule_3_9_error() -> None:
    result, xs, _ = run(SOURCE, SAMPLER, observer_request=0, requests=[(215, -3)])
    assert result.messages == [on_error(216, lambda e: isinstance(e, ValueError) and "3.9" in str(e))]
    assert xs.subscriptions == [subscribe(200, 216)]


# -- checkpoint anywhere and arguments ---------------------------------------------------------------------------


def test_sample_by_sampler_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda xs, ys: xs.sample(ys), SOURCE, SAMPLER)
    assert_checkpoint_anywhere(
        lambda xs, ys: xs.sample(ys), [on_next(210, 1), on_next(240, 2), on_completed(250)], [on_completed(230)]
    )


def test_sample_by_period_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.sample(s(15)), SOURCE, ticks=range(200, 290, 4))


@pytest.mark.parametrize(
    ("sampler", "error", "message"),
    [
        (5, TypeError, "sample: sampler must be a query"),
        (s(0), ValueError, "sample: period must be positive"),
        (s(-1), ValueError, "sample: period must be positive"),
    ],
)
def test_arguments_are_validated(sampler: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        Query.never().sample(sampler)


def test_a_sample_recovered_while_it_waits_for_demand_goes_out_one_tick_after_the_request() -> None:
    # The sample of 210 waits for demand; the subscriber asks at 216 and gets it at 217, also after a restart
    # at 215 (a recovered sample must not start delivering before anybody asked).
    report = assert_checkpoint_anywhere(
        lambda xs, ys: xs.sample(ys),
        [on_next(205, 1), on_next(212, 2)],
        [on_next(210, 0), on_next(230, 0)],
        demand=Demand(requests=((216, 1),)),
        ticks=[215],
    )
    assert report.expected == (on_next(217, 1),)


def test_a_periodic_sample_and_a_delivery_in_the_same_instant_keep_their_order_after_a_restart() -> None:
    # The sample of 254 (4) waits; the subscriber asks at 262, and at 263 the period samples 6 before the
    # delivery: 6 goes out. A recovered query schedules the delivery and the period's tick anew, in another
    # order; delivering after the timers of the instant keeps the result.
    report = assert_checkpoint_anywhere(
        lambda xs: xs.sample(s(9)),
        [on_next(250, 4), on_next(263, 6)],
        demand=Demand(requests=((262, 1),)),
        ticks=[262],
    )
    assert report.expected == (on_next(263, 6),)
