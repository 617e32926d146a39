"""The checkpoint-anywhere harness passes a correct stateful operator and catches broken ones."""

from __future__ import annotations

from typing import Any

import pytest

from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.streams import LONG_MAX, Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive.testing import on_completed, on_error, on_next
from reaqtive.testing.checkpoint import Demand, assert_checkpoint_anywhere, check_checkpoint_anywhere


class RunningSum(StatefulUnaryOperatorBase[int, int]):
    """Emits the running sum; completes after ``limit`` elements. State: the sum and the count."""

    name = "test:harness_sum"
    version: Version = (1,)

    def __init__(self, source: Subscribable[int], limit: int, downstream: Subscriber[int]) -> None:
        super().__init__(downstream)
        self._source = source
        self._limit = limit
        self._total = 0
        self._count = 0

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._total)
        writer.write(self._count)

    def load_state_core(self, reader: StateReader) -> None:
        self._total = reader.read()
        self._count = reader.read()

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_next(self, value: int) -> None:
        self._total += value
        self._count += 1
        self.state_changed = True
        self._downstream.on_next(self._total)
        if self._count == self._limit:
            self._signal_complete()


class ForgetsTheCount(RunningSum):
    """Broken: the count is neither saved nor loaded, so a recovered query completes too late."""

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._total)

    def load_state_core(self, reader: StateReader) -> None:
        self._total = reader.read()


class SavesLessThanItLoads(RunningSum):
    """Broken: forgets to write the count but still reads it."""

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._total)


class NeverMarksDirty(RunningSum):
    """Broken: changes its state without telling the dirty tracking (differential checkpoints miss it)."""

    def on_next(self, value: int) -> None:
        self._total += value
        self._count += 1
        self._downstream.on_next(self._total)
        if self._count == self._limit:
            self._signal_complete()


class SumQuery(Subscribable[int]):
    """``source`` summed by ``stage`` (one of the classes above)."""

    def __init__(self, source: Subscribable[int], limit: int, stage: type[RunningSum]) -> None:
        self._source, self._limit, self._stage = source, limit, stage

    def subscribe_core(self, observer: Subscriber[int]) -> SubscriptionHandle:
        return self._stage(self._source, self._limit, observer)


INPUT = [on_next(150, 100), on_next(210, 1), on_next(220, 2), on_next(230, 3), on_next(250, 4), on_next(260, 5)]


def summed(stage: type[RunningSum], limit: int = 4) -> Any:
    return lambda xs: SumQuery(xs, limit, stage)


def test_a_correct_stateful_operator_passes_at_every_tick() -> None:
    report = assert_checkpoint_anywhere(summed(RunningSum), INPUT)
    assert report.expected == (on_next(210, 1), on_next(220, 3), on_next(230, 6), on_next(250, 10), on_completed(250))
    assert report.ticks == (200, 210, 220, 230, 250, 260)
    assert len(report.outcomes) == 7, "one run per tick, plus one run restarted at all of them"
    assert report.failures == ()


def test_every_tick_of_a_range_can_be_checked() -> None:
    report = assert_checkpoint_anywhere(summed(RunningSum, limit=10), INPUT, ticks=range(195, 270))
    assert report.ticks == tuple(range(200, 270)), "ticks before the subscription are skipped"


def test_errors_and_completion_of_the_input_are_part_of_the_output() -> None:
    error = ValueError("boom")
    assert_checkpoint_anywhere(summed(RunningSum, limit=10), [on_next(210, 1), on_error(220, error)])
    assert_checkpoint_anywhere(summed(RunningSum, limit=10), [on_next(210, 1), on_completed(220)])


def test_an_operator_that_forgets_a_field_is_caught() -> None:
    report = check_checkpoint_anywhere(summed(ForgetsTheCount), INPUT)
    assert {o.restarts for o in report.failures} >= {(210,), (220,), (230,)}
    with pytest.raises(AssertionError, match=r"restart at tick 210: output differs .* at message 4"):
        report.raise_on_failure()


def test_an_operator_that_saves_less_than_it_loads_is_caught_with_the_state_error() -> None:
    report = check_checkpoint_anywhere(summed(SavesLessThanItLoads), INPUT)
    assert report.failures
    with pytest.raises(AssertionError, match=r"StateFormatError.*read past the end") as raised:
        report.raise_on_failure()
    assert "test:harness_sum" in str(raised.value.__cause__)


def test_an_operator_that_does_not_mark_itself_dirty_is_caught_by_the_chained_differential_run() -> None:
    report = check_checkpoint_anywhere(summed(NeverMarksDirty), INPUT)
    assert [o.restarts for o in report.failures] == [(200, 210, 220, 230, 250, 260)]
    with pytest.raises(AssertionError, match="chained restarts"):
        report.raise_on_failure()


def test_stateless_queries_pass_trivially() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.map(lambda x: x * 2).filter(lambda x: x > 2), INPUT)


def test_several_inputs_each_get_their_script() -> None:
    report = assert_checkpoint_anywhere(
        lambda xs, ys: SumQuery(ys, 2, RunningSum), INPUT, [on_next(215, 7), on_next(240, 8)]
    )
    assert report.expected == (on_next(215, 7), on_next(240, 15), on_completed(240))
    assert 215 in report.ticks and 240 in report.ticks


def test_a_query_that_fails_without_restarts_is_reported_as_such() -> None:
    def broken(xs: Any) -> Any:
        raise RuntimeError("cannot build")

    with pytest.raises(RuntimeError, match="cannot build"):
        check_checkpoint_anywhere(broken, INPUT)


# -- bounded demand ------------------------------------------------------------------------------------------


class LatestStamped(StatefulUnaryOperatorBase[int, str]):
    """Asks its source for everything at the first request; keeps the latest element with the tick it arrived
    (``"x@tick"``) and emits it on demand. State: the latest element, whether the source was asked."""

    name = "test:harness_latest"
    version: Version = (1,)
    saves_the_pull = True

    def __init__(self, source: Subscribable[int], downstream: Subscriber[str]) -> None:
        super().__init__(downstream)
        self._source = source
        self._latest: str | None = None
        self._pulled = False
        self._demand = 0

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._latest)
        writer.write(self._pulled if self.saves_the_pull else False)

    def load_state_core(self, reader: StateReader) -> None:
        self._latest = reader.read()
        self._pulled = reader.read()

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_start(self) -> None:
        if self._pulled:  # asked before the restart: ask again (the recovered subscriber may ask for nothing)
            super().request(LONG_MAX)

    def request(self, n: int) -> None:
        self._demand += n
        if not self._pulled:
            self._pulled = True
            self.state_changed = True
            super().request(LONG_MAX)
        self._deliver()

    def on_next(self, value: int) -> None:
        self._latest = f"{value}@{int(self.context.scheduler.now.timestamp())}"
        self.state_changed = True
        self._deliver()

    def _deliver(self) -> None:
        if self._demand and self._latest is not None:
            self._demand -= 1
            latest, self._latest = self._latest, None
            self.state_changed = True
            self._downstream.on_next(latest)


class ForgetsThePull(LatestStamped):
    """Broken: does not save that it asked its source for everything (the defect of issue 14, item 13)."""

    saves_the_pull = False


class StampedQuery(Subscribable[str]):
    def __init__(self, source: Subscribable[int], stage: type[LatestStamped]) -> None:
        self._source, self._stage = source, stage

    def subscribe_core(self, observer: Subscriber[str]) -> SubscriptionHandle:
        return self._stage(self._source, observer)


def stamped(stage: type[LatestStamped]) -> Any:
    return lambda xs: StampedQuery(xs, stage)


STAMPED_INPUT = [on_next(210, 1), on_next(220, 2), on_next(225, 3)]
SLOW = Demand(requests=((205, 1), (230, 1)))


def test_an_operator_that_forgets_its_upstream_demand_is_caught_only_under_bounded_demand() -> None:
    # Unbounded, the recovered subscriber asks for everything again, which hides the defect.
    assert_checkpoint_anywhere(stamped(ForgetsThePull), STAMPED_INPUT)
    report = check_checkpoint_anywhere(stamped(ForgetsThePull), STAMPED_INPUT, demand=SLOW)
    assert report.expected == (on_next(210, "1@210"), on_next(230, "3@225"))
    # At 220 the stage had asked for everything and the subscriber has nothing outstanding: 3 waits in the
    # source until the subscriber's next request makes the forgetful stage ask again, at 230.
    assert (220,) in {o.restarts for o in report.failures}
    with pytest.raises(AssertionError, match=r"restart at tick 220: .*\n.*\n\s+actual   \[OnNext\('3@230'\)@230\]"):
        report.raise_on_failure()
    assert_checkpoint_anywhere(stamped(LatestStamped), STAMPED_INPUT, demand=SLOW)


def test_the_recovered_consumer_asks_again_for_what_it_had_outstanding() -> None:
    # At 215 the subscriber still waits for one of the two elements it asked for; it asks again after the
    # restart (nobody else would), and 2 arrives on time.
    report = assert_checkpoint_anywhere(
        lambda xs: xs.map(lambda x: x * 10), [on_next(210, 1), on_next(220, 2)], demand=Demand(requests=((205, 2),))
    )
    assert report.expected == (on_next(210, 10), on_next(220, 20))
    assert 215 not in report.ticks and (210,) in {o.restarts for o in report.outcomes}


def test_a_recovered_hot_source_replays_what_the_crashed_subscription_held_for_lack_of_demand() -> None:
    # 1 and 2 are sent at 210 and 220 while nobody asks: at the restart (225) the source's subscription holds
    # them, and the recovered one must deliver them when the subscriber asks at 230.
    report = assert_checkpoint_anywhere(
        lambda xs: xs.map(lambda x: x * 10),
        [on_next(210, 1), on_next(220, 2), on_completed(222)],
        demand=Demand(requests=((230, 1), (240, 1))),
        ticks=[225, 235],
    )
    assert report.expected == (on_next(230, 10), on_next(240, 20), on_completed(240))


def test_a_batch_consumer_asks_again_as_its_batches_fill_also_across_restarts() -> None:
    script = [on_next(210 + i, i) for i in range(7)] + [on_completed(250)]
    report = assert_checkpoint_anywhere(lambda xs: xs.map(lambda x: x), script, demand=Demand(initial=3, batch=3))
    assert report.expected == tuple(script)
    assert len(report.outcomes) == 10


def test_runs_restart_at_several_chosen_ticks_each() -> None:
    report = assert_checkpoint_anywhere(
        summed(RunningSum), INPUT, demand=Demand(initial=1, batch=1), ticks=[], runs=[[215, 221, 222], [150, 240]]
    )
    assert [o.restarts for o in report.outcomes] == [(215, 221, 222), (240,)], "ticks outside the run are dropped"


class IgnoresDemand(RunningSum):
    """Broken: asks its source for everything and passes it all on, whatever the subscriber asked for."""

    def request(self, n: int) -> None:
        super().request(LONG_MAX)


def test_an_operator_that_sends_more_than_was_requested_fails_the_harness() -> None:
    with pytest.raises(AssertionError, match=r"rule 1.1: 3 arrived at tick 220 without demand"):
        check_checkpoint_anywhere(summed(IgnoresDemand), INPUT, demand=Demand(initial=1))


def test_demand_scripts_are_checked() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        Demand(requests=((210, 0),))
    with pytest.raises(ValueError, match="at or after the subscription"):
        check_checkpoint_anywhere(summed(RunningSum), INPUT, demand=Demand(requests=((150, 1),)))


def test_an_inner_subscription_without_stateful_nodes_is_kept_by_differential_checkpoints() -> None:
    # merge_all of windows: each inner subscription is a window's subject subscription, with no stateful node,
    # so no node of it is ever dirty; a differential save must still keep a blob for it (its parent restores it).
    report = assert_checkpoint_anywhere(
        lambda xs: xs.window(2).merge_all(), [on_next(210, 1), on_next(220, 2), on_next(230, 3), on_completed(240)]
    )
    assert report.expected == (on_next(210, 1), on_next(220, 2), on_next(230, 3), on_completed(240))
