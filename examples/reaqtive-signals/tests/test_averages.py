"""``ewma``: behaviour on virtual time, the warm-up's demand, its argument checks, a restart at every tick, and
an upgrade at every tick from the state version 1 that reaqtive-signals 0.1 saved. Only the public API:
``reaqtive``, ``reaqtive.state``'s operator base and ``reaqtive.testing``."""

from __future__ import annotations

from typing import Any

import pytest
from reaqtive_signals import EwmaArgs, clamp, ewma

from reaqtive import CallbackSubscriber, OperatorArgumentError, OperatorCall, Query, from_iterable, register_operator
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.streams import Subscriber
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive.testing import (
    Demand,
    Recorded,
    TestScheduler,
    assert_checkpoint_anywhere,
    on_completed,
    on_error,
    on_next,
    subscribe,
)

HOT = [on_next(150, 1), on_next(210, 10), on_next(220, 20), on_next(230, 20), on_next(240, 0), on_completed(250)]
LONG = [*(on_next(210 + 10 * i, (7 * i) % 11) for i in range(12)), on_completed(400)]


def test_the_average_moves_by_alpha_times_the_difference() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.pipe(ewma(0.5)))
    assert result.messages == [on_next(210, 10.0), on_next(220, 15.0), on_next(230, 17.5), on_next(240, 8.75),
                               on_completed(250)]
    assert xs.subscriptions == [subscribe(200, 250)]


def test_it_chains_after_clamp() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 4), on_next(220, 30), on_next(230, 8), on_completed(240))
    result = scheduler.start(lambda: xs.pipe(clamp(0, 10), ewma(0.5, warmup=2)))
    assert result.messages == [on_next(220, 7.0), on_next(230, 7.5), on_completed(240)]


def test_the_warm_up_replaces_each_swallowed_element_with_a_request_upstream() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.pipe(ewma(0.5, warmup=3)), observer=scheduler.create_observer(request=1))
    assert result.values == [17.5, 8.75]
    # 1 at the subscription, 1 for each of the two swallowed elements, then 1 per delivered element
    assert xs.requests == [Recorded(200, 1), Recorded(210, 1), Recorded(220, 1), Recorded(230, 1), Recorded(240, 1)]


@pytest.mark.parametrize("element", ["x", True, (1,)])
def test_an_element_that_is_not_a_number_ends_the_query(element: object) -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, element), on_next(230, 2))
    result = scheduler.start(lambda: xs.pipe(ewma(0.5)))
    assert result.messages == [on_next(210, 1.0), on_error(220, TypeError)]
    assert xs.subscriptions == [subscribe(200, 220)]


def test_an_overflow_is_the_query_s_error() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 10**400))
    assert scheduler.start(lambda: xs.pipe(ewma(0.5))).messages == [on_error(210, OverflowError)]


@pytest.mark.parametrize(
    ("alpha", "warmup", "error", "message"),
    [
        ("0.5", 1, TypeError, "ewma: alpha must be a number, got str"),
        (0, 1, ValueError, r"ewma: alpha must be > 0 and <= 1, got 0"),
        (1.5, 1, ValueError, r"ewma: alpha must be > 0 and <= 1, got 1.5"),
        (float("nan"), 1, ValueError, r"ewma: alpha must be > 0 and <= 1, got nan"),
        (0.5, 0, ValueError, "ewma: warmup must be > 0, got 0"),
        (0.5, 2.0, TypeError, "ewma: warmup must be an int, got float"),
    ],
)
def test_bad_arguments_fail_where_the_query_is_written(alpha: object, warmup: object, error: type,
                                                       message: str) -> None:
    with pytest.raises(error, match=f"^{message}$"):
        ewma(alpha, warmup=warmup)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), r"operator 'signals:ewma' takes 2 arguments \(source, alpha\) or 3 arguments"),
        ((2,), r"args\[1\] \(alpha\) must be a number > 0 and <= 1"),
        ((0.5, 0), r"args\[2\] \(warmup\) must be an int >= 1"),
    ],
)
def test_a_stored_query_with_bad_arguments_is_refused_at_bind(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(OperatorArgumentError, match=message):
        Query("signals:ewma", (from_iterable([1]), *args)).subscribe(CallbackSubscriber(print))


def test_a_node_written_by_version_0_1_has_no_warm_up_argument() -> None:
    # reaqtive-signals 0.1 wrote ewma(alpha) as (source, alpha): stored queries keep that shape.
    old: Query[float] = Query("signals:ewma", (from_iterable([1]), 0.5))
    assert EwmaArgs.read(old).warmup == 1
    assert EwmaArgs.read(from_iterable([1]).pipe(ewma(0.5, warmup=3))).warmup == 3


@pytest.mark.parametrize("warmup", [1, 3])
def test_it_survives_a_restart_at_every_tick(warmup: int) -> None:
    assert_checkpoint_anywhere(lambda xs: xs.pipe(ewma(0.3, warmup=warmup)), LONG)


@pytest.mark.parametrize("demand", [Demand(initial=1, batch=1), Demand(requests=((205, 2), (300, 1), (330, 20)))],
                         ids=["one-at-a-time", "slow"])
def test_it_survives_a_restart_at_every_tick_under_bounded_demand(demand: Demand) -> None:
    assert_checkpoint_anywhere(lambda xs: xs.pipe(clamp(1, 9), ewma(0.3, warmup=3)), LONG, demand=demand)


# -- an upgrade: state version 1 (reaqtive-signals 0.1) loads in version 2 -------------------------------------

@register_operator("signals_v1:ewma")
class EwmaV1(StatefulUnaryOperatorBase[float, float]):
    """The stage as reaqtive-signals 0.1 released it (kept here, under a test-only operator name, to write its
    state): no warm-up, and state version 1, the average alone, under the same persisted name."""

    name = "signals:ewma"
    version: Version = (1,)

    def __init__(self, query: Any, downstream: Subscriber[float]) -> None:
        super().__init__(downstream)
        args = EwmaArgs.read(query)
        self._source = args.source
        self._alpha = args.alpha
        self._average: float | None = None

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._average)

    def load_state_core(self, reader: StateReader) -> None:
        self._average = reader.read()

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_next(self, value: float) -> None:
        average = self._average
        self._average = average = float(value) if average is None else average + self._alpha * (value - average)
        self._state.changed = True
        self._downstream.on_next(average)


def test_a_version_1_state_saved_at_any_tick_loads_and_goes_on_as_before() -> None:
    # Crashed at each tick under 0.1, recovered under 0.2: the query keeps the shape 0.1 stored, (source, alpha).
    before = OperatorCall[float]("signals_v1:ewma", (0.3,))
    after = OperatorCall[float]("signals:ewma", (0.3,))
    report = assert_checkpoint_anywhere(lambda xs: xs.pipe(before), LONG, recover_with=lambda xs: xs.pipe(after))
    assert len(report.outcomes) > 10
    assert_checkpoint_anywhere(lambda xs: xs.pipe(before), LONG, recover_with=lambda xs: xs.pipe(after),
                               demand=Demand(initial=1, batch=1))
