"""The checkpoint-anywhere harness passes a correct stateful operator and catches broken ones."""

from __future__ import annotations

from typing import Any

import pytest

from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive.streams import Subscriber
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import SubscriptionHandle
from reaqtive.testing import on_completed, on_error, on_next
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere, check_checkpoint_anywhere


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
