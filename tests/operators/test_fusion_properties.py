"""Fusion changes nothing but frames (issue 15): random chains of map/filter/do/scan (with stages that split
runs), random inputs, functions that fail at random elements, bounded and unbounded demand. Fused and unfused,
the subscriber gets the same notifications, the user's functions see the same calls, the source sees the same
requests, and every checkpoint writes the same bytes; state saved in one form loads into the other and
continues as if nothing had happened."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reaqtive import OperatorContext, from_iterable
from reaqtive.core.streams import LONG_MAX
from reaqtive.core.visitors import initialize
from reaqtive.operators._fusion import set_stage_fusion, stage_fusion_enabled
from reaqtive.state.traversal import save_subscription
from reaqtive.testing import Recorded, TestScheduler, on_completed, on_next
from reaqtive.testing.checkpoint import Demand, assert_checkpoint_anywhere
from tests.operators._fusion_support import Alternating, Calls, Step, build, fusion, steps_strategy
from tests.support import Recorder


@pytest.fixture(autouse=True)
def _restore_the_switch() -> Iterator[None]:
    previous = stage_fusion_enabled()
    yield
    set_stage_fusion(previous)


@dataclass(frozen=True)
class Consumer:
    """The subscriber's demand: ``initial`` in ``on_subscribe``, ``per_item`` more from inside each element, then
    each of ``later`` once the source is idle. ``initial=LONG_MAX``: unbounded."""

    initial: int
    per_item: int = 0
    later: tuple[int, ...] = ()


CONSUMERS = st.one_of(
    st.just(Consumer(LONG_MAX)),
    st.builds(
        Consumer,
        initial=st.integers(0, 5),
        per_item=st.integers(0, 2),
        later=st.lists(st.integers(1, 6), max_size=6).map(tuple),
    ),
)

VALUES = st.lists(st.integers(0, 60), max_size=40)


@dataclass
class Outcome:
    values: list[Any]
    errors: list[tuple[type[BaseException], tuple[Any, ...]]]
    completed: int
    violations: list[str]
    calls: list[tuple[int, str, Any]]
    states: list[bytes | None]
    requests: list[Any]


def _outcome(recorder: Recorder, calls: Calls, states: list[bytes | None], requests: list[Any]) -> Outcome:
    return Outcome(
        recorder.values,
        [(type(e), e.args) for e in recorder.errors],
        recorder.completed,
        recorder.violations,
        calls.log,
        states,
        requests,
    )


def run_cold(steps: tuple[Step, ...], values: list[int], consumer: Consumer, *, fused: bool, hosted: bool) -> Outcome:
    """``from_iterable(values)`` through ``steps``, standalone or on a test scheduler; state saved after the start
    and after every later request."""
    calls = Calls()
    recorder = Recorder(initial=consumer.initial, per_item=consumer.per_item)
    scheduler = TestScheduler() if hosted else None
    context = scheduler.create_context() if scheduler is not None else OperatorContext("test://fusion")
    with fusion(fused):
        handle = build(from_iterable(values), steps, calls).subscribe(recorder)
        calls.handle = handle
        initialize(handle, context)
    if scheduler is not None:
        scheduler.run()
    states = [save_subscription(handle)]
    for n in consumer.later:
        if recorder.terminated:
            break
        recorder.request(n)
        if scheduler is not None:
            scheduler.run()
        states.append(save_subscription(handle))
    return _outcome(recorder, calls, states, [])


def run_hot(steps: tuple[Step, ...], values: list[int], consumer: Consumer, *, fused: bool) -> Outcome:
    """A hot test source (one element per tick) through ``steps``, the later requests at ticks between the
    elements; state saved at every tick."""
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(
        *[on_next(201 + 2 * i, v) for i, v in enumerate(values)], on_completed(202 + 2 * len(values))
    )
    calls = Calls()
    recorder = Recorder(initial=consumer.initial, per_item=consumer.per_item)
    states: list[bytes | None] = []
    with fusion(fused):
        handle = build(xs, steps, calls).subscribe(recorder)
        calls.handle = handle
        initialize(handle, scheduler.create_context())
    for i, n in enumerate(consumer.later):
        scheduler.schedule_absolute(204 + 5 * i, recorder.request, n)
    for tick in range(201, 203 + 2 * len(values)):
        scheduler.schedule_absolute(tick, lambda: states.append(save_subscription(handle)))
    scheduler.advance_to(300)
    return _outcome(recorder, calls, states, [(r.time, r.value) for r in xs.requests])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps_strategy(dispose=True), values=VALUES, consumer=CONSUMERS, hosted=st.booleans())
def test_fused_and_unfused_runs_from_an_iterable_are_indistinguishable(
    steps: tuple[Step, ...], values: list[int], consumer: Consumer, hosted: bool
) -> None:
    fused = run_cold(steps, values, consumer, fused=True, hosted=hosted)
    unfused = run_cold(steps, values, consumer, fused=False, hosted=hosted)
    assert fused == unfused
    assert not fused.violations


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps_strategy(dispose=True), values=VALUES, consumer=CONSUMERS)
def test_fused_and_unfused_runs_over_a_hot_source_are_indistinguishable(
    steps: tuple[Step, ...], values: list[int], consumer: Consumer
) -> None:
    fused = run_hot(steps, values, consumer, fused=True)
    unfused = run_hot(steps, values, consumer, fused=False)
    assert fused == unfused
    assert not fused.violations


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=steps_strategy(dispose=True),
    values=st.lists(st.one_of(st.integers(0, 60), st.none()), max_size=300),
    consumer=CONSUMERS,
)
def test_longer_iterables_with_none_elements_cross_batches_alike(
    steps: tuple[Step, ...], values: list[int], consumer: Consumer
) -> None:
    """More than one hosted batch (128 elements), and ``None`` elements, which the source refuses."""
    for hosted in (False, True):
        assert run_cold(steps, values, consumer, fused=True, hosted=hosted) == run_cold(
            steps, values, consumer, fused=False, hosted=hosted
        )


DEMANDS = st.one_of(
    st.none(),
    st.builds(
        Demand,
        initial=st.integers(0, 3),
        requests=st.lists(st.tuples(st.integers(200, 260), st.integers(1, 4)), max_size=4).map(
            lambda r: tuple(sorted(r))
        ),
        batch=st.integers(0, 2),
    ),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps_strategy(max_size=6), values=st.lists(st.integers(0, 60), max_size=12), demand=DEMANDS)
def test_state_saved_by_either_form_loads_into_the_other_and_continues(
    steps: tuple[Step, ...], values: list[int], demand: Demand | None
) -> None:
    """The checkpoint-anywhere harness, with every world bound in the other form than the one before: each
    restart saves in one form and loads into the other (both directions, starting fused and starting unfused),
    and the output must equal the uninterrupted run's."""
    script: list[Recorded[Any]] = [on_next(203 + 4 * i, v) for i, v in enumerate(values)]
    script.append(on_completed(205 + 4 * len(values)))
    for first in (True, False):
        factory = Alternating(lambda xs: build(xs, steps), first)
        assert_checkpoint_anywhere(factory, script, demand=demand)
        assert set(factory.modes) == {True, False}


def double(x: int) -> int:
    return x * 2


def divisible_by_3(x: int) -> bool:
    return x % 3 == 0


def add(total: int, x: int) -> int:
    return total + x


def positive(x: int) -> bool:
    return x > 0


@pytest.mark.parametrize("first", [True, False])
def test_a_store_written_by_one_form_recovers_in_the_other(tmp_path: Any, first: bool) -> None:
    """Through the engine and its SQLite store: checkpoint with fusion on (off), reopen with it off (on); the
    outputs equal those of an engine that never restarted."""
    from datetime import UTC, datetime, timedelta

    from reaqtive import Engine, FunctionRegistry, Query

    functions = FunctionRegistry()
    for function in (double, divisible_by_3, add, positive):
        functions.register(function.__name__, function)
    query = Query.stream("s://numbers").map(double).filter(divisible_by_3).scan(0, add).filter(positive)
    start = datetime(2026, 1, 1, tzinfo=UTC)

    def feed(engine: Engine, numbers: range) -> None:
        for n in numbers:
            engine.append("s://numbers", n, start + timedelta(seconds=n))
        engine.process()

    with fusion(True), Engine(tmp_path / "straight.db", functions=functions) as engine:
        engine.create_stream("s://numbers")
        engine.create_subscription("q://sums", query)
        feed(engine, range(40))
        expected = [o.value for o in engine.outputs("q://sums")]
    assert expected == [sum(2 * n for n in range(k + 1) if n % 3 == 0) for k in range(3, 40) if k % 3 == 0]
    store = tmp_path / "restarted.db"
    with fusion(first), Engine(store, functions=functions) as engine:
        engine.create_stream("s://numbers")
        engine.create_subscription("q://sums", query)
        feed(engine, range(25))
        engine.checkpoint()
        feed(engine, range(25, 30))  # after the checkpoint: replayed on recovery
    with fusion(not first), Engine(store, functions=functions) as engine:
        feed(engine, range(30, 40))
        assert [o.value for o in engine.outputs("q://sums")] == expected
