"""``clamp``: behaviour on virtual time, its argument checks (where the query is written and at bind), and a
restart at every tick. Only the public API: ``reaqtive`` and ``reaqtive.testing``."""

from __future__ import annotations

import math

import pytest
from reaqtive_signals import clamp

from reaqtive import CallbackSubscriber, OperatorArgumentError, Query, from_iterable, keyed_execution
from reaqtive.testing import (
    Demand,
    TestScheduler,
    assert_checkpoint_anywhere,
    on_completed,
    on_error,
    on_next,
    subscribe,
)

HOT = [on_next(150, 99), on_next(210, -5), on_next(220, 3), on_next(230, 12.5), on_next(240, 10), on_completed(250)]


def test_each_element_is_clamped_into_the_bounds() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.pipe(clamp(0, 10)))
    assert result.messages == [on_next(210, 0), on_next(220, 3), on_next(230, 10), on_next(240, 10),
                               on_completed(250)]
    assert xs.subscriptions == [subscribe(200, 250)]


def test_an_element_that_cannot_be_compared_ends_the_query_with_its_error() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, "x"), on_next(230, 2))
    result = scheduler.start(lambda: xs.pipe(clamp(0, 10)))
    assert result.messages == [on_next(210, 1), on_error(220, TypeError)]
    assert xs.subscriptions == [subscribe(200, 220)]


def test_a_source_error_passes_through() -> None:
    scheduler = TestScheduler()
    boom = RuntimeError("boom")
    xs = scheduler.create_hot_observable(on_next(210, 20), on_error(220, boom))
    assert scheduler.start(lambda: xs.pipe(clamp(0, 10))).messages == [on_next(210, 10), on_error(220, boom)]


def test_demand_passes_upstream_unchanged() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.pipe(clamp(0, 10)), observer=scheduler.create_observer(request=1))
    assert result.values == [0, 3, 10, 10]
    assert [request.value for request in xs.requests] == [1, 1, 1, 1, 1]


@pytest.mark.parametrize(
    ("low", "high", "error", "message"),
    [
        ("0", 10, TypeError, "clamp: low must be a number, got str"),
        (0, None, TypeError, "clamp: high must be a number, got NoneType"),
        (True, 10, TypeError, "clamp: low must be a number, got bool"),
        (math.nan, 10, ValueError, "clamp: low must not be NaN"),
        (10, 0, ValueError, "clamp: low must be <= high, got 10 > 0"),
    ],
)
def test_bad_bounds_fail_where_the_query_is_written(low: object, high: object, error: type, message: str) -> None:
    with pytest.raises(error, match=f"^{message}$"):
        clamp(low, high)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0,), r"operator 'signals:clamp' takes 3 arguments"),
        (("0", 10), r"args\[1\] \(low\) must be a number"),
        ((5, 1), r"args\[2\] \(high\) must be a number .* >= low \(5\)"),
        ((0, math.nan), r"args\[2\] \(high\) must be a number"),
    ],
)
def test_a_stored_query_with_bad_arguments_is_refused_at_bind(args: tuple[object, ...], message: str) -> None:
    # A query decoded from a store never went through clamp(): the stage checks its arguments again.
    with pytest.raises(OperatorArgumentError, match=message):
        Query("signals:clamp", (from_iterable([1]), *args)).subscribe(CallbackSubscriber(print))


def test_it_survives_a_restart_at_every_tick() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.pipe(clamp(0, 10)), HOT)
    assert_checkpoint_anywhere(lambda xs: xs.pipe(clamp(0, 10)), HOT, demand=Demand(initial=1, batch=1))


def test_clamp_written_once_as_a_step_runs_keyed_in_a_group_with_the_general_results() -> None:
    # ClampStep is clamp's only per-element logic: the stage runs it, and so does the keyed table of a
    # group_by ... flat_map over clamp; both give what the general path (a stage per group) gives.
    events = [(0, -5), (1, 3), (0, 12), (2, 7.5), (1, 20), (2, "x"), (0, 4)]

    def query() -> Query[float]:
        grouped = from_iterable(events).group_by(lambda e: e[0], lambda e: e[1])
        return grouped.flat_map(lambda group: group.pipe(clamp(0, 10)))

    def run() -> tuple[list[float], list[type]]:
        values: list[float] = []
        errors: list[type] = []
        query().run(values.append, on_error=lambda error: errors.append(type(error)))
        return values, errors

    top = query().explain().stages[0]
    assert (top.op, top.path) == ("group_by+flat_map", "keyed")
    with keyed_execution(False):
        general = run()
    assert run() == general == ([0, 3, 10, 7.5, 10], [TypeError])
