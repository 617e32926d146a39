"""distinct_until_changed: keys, comparers, dirty only on change, demand, checkpoints."""

from __future__ import annotations

from itertools import groupby
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import from_iterable
from reaqtive.core.operator import StatefulOperator
from reaqtive.core.visitors import initialize, walk
from reaqtive.state import CheckpointMode, confirm_saved, save_subscription
from reaqtive.testing import Recorded, TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.support import Recorder

HOT = [
    on_next(150, 1),
    on_next(210, 2),
    on_next(220, 2),
    on_next(230, -2),
    on_next(240, 3),
    on_next(250, 3),
    on_next(260, 2),
    on_completed(300),
]

VARIANTS = {
    "plain": lambda xs: xs.distinct_until_changed(),
    "key": lambda xs: xs.distinct_until_changed(abs),
    "comparer": lambda xs: xs.distinct_until_changed(comparer=lambda a, b: abs(a) == abs(b)),
    "key+comparer": lambda xs: xs.distinct_until_changed(lambda x: x * 10, comparer=lambda a, b: abs(a) == abs(b)),
}


def test_distinct_until_changed_drops_repeats_of_the_last_element() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(xs.distinct_until_changed)
    assert result.messages == [
        on_next(210, 2),
        on_next(230, -2),
        on_next(240, 3),
        on_next(260, 2),
        on_completed(300),
    ]
    assert xs.subscriptions == [subscribe(200, 300)]


@pytest.mark.parametrize("variant", ["key", "comparer", "key+comparer"])
def test_distinct_until_changed_by_key_or_comparer(variant: str) -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: VARIANTS[variant](xs))
    assert result.messages == [on_next(210, 2), on_next(240, 3), on_next(260, 2), on_completed(300)]


def test_distinct_until_changed_comparer_receives_current_key_then_new_key() -> None:
    calls: list[tuple[int, int]] = []

    def comparer(current: int, key: int) -> bool:
        calls.append((current, key))
        return current == key

    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 1), on_next(230, 2))
    scheduler.start(lambda: xs.distinct_until_changed(comparer=comparer))
    assert calls == [(1, 1), (1, 2)], "the first element is never compared"


def test_distinct_until_changed_key_selector_exception_at_the_same_tick_then_unsubscribes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.distinct_until_changed(lambda x: 1 / (x + 2)))
    assert result.messages == [on_next(210, 2), on_error(230, ZeroDivisionError)]
    assert xs.subscriptions == [subscribe(200, 230)]


def test_distinct_until_changed_comparer_exception_at_the_same_tick_then_unsubscribes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    boom = RuntimeError("boom")

    def comparer(a: int, b: int) -> bool:
        raise boom

    result = scheduler.start(lambda: xs.distinct_until_changed(comparer=comparer))
    assert result.messages == [on_next(210, 2), on_error(220, boom)]
    assert xs.subscriptions == [subscribe(200, 220)]


def test_distinct_until_changed_source_error_and_disposal() -> None:
    scheduler = TestScheduler()
    failure = KeyError("upstream")
    xs = scheduler.create_hot_observable(on_next(210, 1), on_error(220, failure))
    assert scheduler.start(xs.distinct_until_changed).messages == [on_next(210, 1), on_error(220, failure)]
    scheduler = TestScheduler()
    ys = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(ys.distinct_until_changed, disposed=235)
    assert result.values == [2, -2]
    assert ys.subscriptions == [subscribe(200, 235)]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_distinct_until_changed_survives_a_checkpoint_anywhere(variant: str) -> None:
    assert_checkpoint_anywhere(VARIANTS[variant], HOT)


def test_distinct_until_changed_marks_its_state_changed_only_when_the_key_changes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 1), on_next(230, 2))
    scheduler.advance_to(200)
    handle = initialize(xs.distinct_until_changed().subscribe(scheduler.create_observer()), scheduler.create_context())
    stage = walk(handle)[0]
    assert isinstance(stage, StatefulOperator)
    scheduler.advance_to(210)
    save_subscription(handle, CheckpointMode.FULL)
    confirm_saved(handle)
    scheduler.advance_to(220)
    assert not stage.state_changed, "a repeated key changes nothing"
    scheduler.advance_to(230)
    assert stage.state_changed


def test_distinct_until_changed_with_one_at_a_time_demand_replaces_dropped_elements() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(205, observer.request, 1)
    scheduler.schedule_absolute(225, observer.request, 1)
    result = scheduler.start(lambda: xs.distinct_until_changed(abs), observer=observer)
    assert result.messages == [on_next(210, 2), on_next(240, 3)]
    # 225: the held repeat 2 is dropped and replaced at once; -2 (230) is dropped and replaced; 3 is delivered.
    assert xs.requests == [Recorded(205, 1), Recorded(225, 1), Recorded(225, 1), Recorded(230, 1)]


@settings(max_examples=50, deadline=None)
@given(
    values=st.lists(st.integers(-3, 3), max_size=30),
    requests=st.lists(st.integers(1, 4), min_size=1, max_size=8),
)
def test_distinct_until_changed_matches_groupby_and_never_over_delivers(values: list[int], requests: list[int]) -> None:
    recorder = Recorder()
    query: Any = from_iterable(values).distinct_until_changed(abs)
    query.run(recorder)
    expected = [next(group) for _, group in groupby(values, key=abs)]
    requested = 0
    for n in requests:
        recorder.request(n)
        requested += n
        assert recorder.values == expected[: min(requested, len(expected))]
    assert not recorder.violations


def test_distinct_until_changed_argument_validation() -> None:
    source = from_iterable([1])
    with pytest.raises(TypeError, match="distinct_until_changed: key_selector must be callable"):
        source.distinct_until_changed(1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="distinct_until_changed: comparer must be callable"):
        source.distinct_until_changed(comparer="==")  # type: ignore[arg-type]
