"""map_indexed and filter_indexed: the index, errors, demand, checkpoints."""

from __future__ import annotations

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

HOT = [on_next(150, 1), on_next(210, 2), on_next(230, 3), on_next(260, 4), on_next(270, 5), on_completed(300)]


# -- map_indexed -----------------------------------------------------------------------------------------------


def test_map_indexed_passes_each_element_with_its_index_from_zero() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.map_indexed(lambda x, i: (x, i)))
    assert result.messages == [
        on_next(210, (2, 0)),
        on_next(230, (3, 1)),
        on_next(260, (4, 2)),
        on_next(270, (5, 3)),
        on_completed(300),
    ]
    assert xs.subscriptions == [subscribe(200, 300)]


def test_map_indexed_selector_exception_at_the_same_tick_then_unsubscribes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    boom = RuntimeError("boom")

    def selector(x: int, i: int) -> int:
        if i == 1:
            raise boom
        return x

    result = scheduler.start(lambda: xs.map_indexed(selector))
    assert result.messages == [on_next(210, 2), on_error(230, boom)]
    assert xs.subscriptions == [subscribe(200, 230)]


def test_map_indexed_selector_returning_none_is_a_type_error() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.map_indexed(lambda x, i: None))
    assert result.messages == [on_error(210, TypeError)]
    assert xs.subscriptions == [subscribe(200, 210)]


def test_map_indexed_source_error_and_disposal() -> None:
    scheduler = TestScheduler()
    failure = KeyError("upstream")
    xs = scheduler.create_hot_observable(on_next(210, 1), on_error(220, failure))
    assert scheduler.start(lambda: xs.map_indexed(lambda x, i: x + i)).messages == [
        on_next(210, 1),
        on_error(220, failure),
    ]
    scheduler = TestScheduler()
    ys = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: ys.map_indexed(lambda x, i: x + i), disposed=240)
    assert result.messages == [on_next(210, 2), on_next(230, 4)]
    assert ys.subscriptions == [subscribe(200, 240)]


def test_map_indexed_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.map_indexed(lambda x, i: x * 100 + i), HOT)


def test_map_indexed_with_one_at_a_time_demand() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = scheduler.create_observer(request=0)
    for tick in (205, 250, 280):
        scheduler.schedule_absolute(tick, observer.request, 1)
    result = scheduler.start(lambda: xs.map_indexed(lambda x, i: i), observer=observer)
    assert result.messages == [on_next(210, 0), on_next(250, 1), on_next(280, 2)]
    assert xs.requests == [Recorded(205, 1), Recorded(250, 1), Recorded(280, 1)], "nothing held, nothing extra"


def test_map_indexed_marks_its_state_changed_per_element() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2))
    handle = initialize(
        xs.map_indexed(lambda x, i: x).subscribe(scheduler.create_observer()), scheduler.create_context()
    )
    save_subscription(handle, CheckpointMode.FULL)
    confirm_saved(handle)
    stage = walk(handle)[0]
    assert isinstance(stage, StatefulOperator) and not stage.state_changed
    scheduler.advance_to(210)
    assert stage.state_changed, "the index moved: the next checkpoint must save it"


# -- filter_indexed --------------------------------------------------------------------------------------------


def test_filter_indexed_counts_every_element_kept_or_not() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.filter_indexed(lambda x, i: i % 2 == 0))
    assert result.messages == [on_next(210, 2), on_next(260, 4), on_completed(300)]
    assert xs.subscriptions == [subscribe(200, 300)]


def test_filter_indexed_predicate_exception_at_the_same_tick_then_unsubscribes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.filter_indexed(lambda x, i: 1 / (i - 2)))
    assert result.messages == [on_next(210, 2), on_next(230, 3), on_error(260, ZeroDivisionError)]
    assert xs.subscriptions == [subscribe(200, 260)]


def test_filter_indexed_source_error_and_disposal() -> None:
    scheduler = TestScheduler()
    failure = KeyError("upstream")
    xs = scheduler.create_hot_observable(on_next(210, 1), on_error(220, failure))
    assert scheduler.start(lambda: xs.filter_indexed(lambda x, i: True)).messages == [
        on_next(210, 1),
        on_error(220, failure),
    ]
    scheduler = TestScheduler()
    ys = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: ys.filter_indexed(lambda x, i: i > 0), disposed=240)
    assert result.messages == [on_next(230, 3)]
    assert ys.subscriptions == [subscribe(200, 240)]


def test_filter_indexed_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.filter_indexed(lambda x, i: i % 2 == 1), HOT)


def test_filter_indexed_with_one_at_a_time_demand_replaces_dropped_elements() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(205, observer.request, 1)
    scheduler.schedule_absolute(240, observer.request, 1)
    result = scheduler.start(lambda: xs.filter_indexed(lambda x, i: i % 2 == 0), observer=observer)
    assert result.messages == [on_next(210, 2), on_next(260, 4)]
    # 240: one requested; the held element 3 (index 1) is dropped and replaced by one more request.
    assert xs.requests == [Recorded(205, 1), Recorded(240, 1), Recorded(240, 1)]


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.integers(0, 9), max_size=40),
    requests=st.lists(st.integers(1, 5), min_size=1, max_size=8),
)
def test_filter_indexed_never_delivers_more_than_requested(values: list[int], requests: list[int]) -> None:
    recorder = Recorder()
    from_iterable(values).filter_indexed(lambda x, i: (x + i) % 3 == 0).run(recorder)
    expected = [x for i, x in enumerate(values) if (x + i) % 3 == 0]
    requested = 0
    for n in requests:
        recorder.request(n)
        requested += n
        assert recorder.values == expected[: min(requested, len(expected))]
    assert not recorder.violations


@pytest.mark.parametrize("op", ["map_indexed", "filter_indexed"])
def test_indexed_arguments_are_validated_when_the_query_is_built(op: str) -> None:
    with pytest.raises(TypeError, match=f"{op}: .* must be callable"):
        getattr(from_iterable([1]), op)(42)
