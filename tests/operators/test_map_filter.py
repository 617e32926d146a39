"""map and filter: values, user-function errors, demand."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import OperatorContext, SimpleSubject, from_iterable
from reaqtive.core.visitors import initialize
from tests.support import Recorder

CONTEXT = OperatorContext("test://map-filter")


def start(query: Any, recorder: Recorder) -> Any:
    return initialize(query.subscribe(recorder), CONTEXT)


def test_map_applies_the_selector() -> None:
    recorder = Recorder(initial=100)
    start(from_iterable(range(5)).map(lambda x: x * 10), recorder)
    assert recorder.values == [0, 10, 20, 30, 40] and recorder.completed == 1


def test_map_selector_exception_becomes_on_error_and_disposes_the_source() -> None:
    subject = SimpleSubject[int]()
    recorder = Recorder(initial=100)

    def selector(x: int) -> int:
        if x == 2:
            raise ZeroDivisionError("bad")
        return x

    start(subject.as_query().map(selector), recorder)
    for value in (1, 2, 3):
        subject.on_next(value)
    assert recorder.values == [1]
    assert isinstance(recorder.errors[0], ZeroDivisionError)
    assert subject.subscriber_count == 0, "the subscription ended: the subject lost its subscriber"


def test_map_selector_returning_none_is_an_error() -> None:
    recorder = Recorder(initial=10)
    start(from_iterable([1]).map(lambda x: None), recorder)
    assert isinstance(recorder.errors[0], TypeError) and "None" in str(recorder.errors[0])


def test_map_passes_demand_through() -> None:
    recorder = Recorder()
    start(from_iterable(range(10)).map(str), recorder)
    recorder.request(4)
    assert recorder.values == ["0", "1", "2", "3"]


def test_filter_keeps_matching_elements() -> None:
    recorder = Recorder(initial=100)
    start(from_iterable(range(10)).filter(lambda x: x % 3 == 0), recorder)
    assert recorder.values == [0, 3, 6, 9] and recorder.completed == 1


def test_filter_predicate_exception_becomes_on_error() -> None:
    recorder = Recorder(initial=100)
    start(from_iterable(range(10)).filter(lambda x: 1 / (x - 4)), recorder)
    assert recorder.values == [0, 1, 2, 3] and isinstance(recorder.errors[0], ZeroDivisionError)


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(st.integers(0, 9), max_size=60),
    requests=st.lists(st.integers(1, 7), min_size=1, max_size=10),
)
def test_filter_requests_more_upstream_for_dropped_elements(values: list[int], requests: list[int]) -> None:
    """With bounded demand the filter replaces every dropped element, so the downstream gets exactly
    min(requested, matching) elements, never more than it asked for."""
    recorder = Recorder()
    start(from_iterable(values).filter(lambda x: x % 2 == 0), recorder)
    expected = [v for v in values if v % 2 == 0]
    requested = 0
    for n in requests:
        recorder.request(n)
        requested += n
        assert recorder.values == expected[: min(requested, len(expected))]
    assert not recorder.violations


def test_chained_operators_with_one_at_a_time_demand() -> None:
    recorder = Recorder(initial=1, per_item=1)
    start(from_iterable(range(1000)).map(lambda x: x * 2).filter(lambda x: x % 3 == 0), recorder)
    assert recorder.values == [x * 2 for x in range(1000) if (x * 2) % 3 == 0]
    assert recorder.completed == 1 and not recorder.violations


@pytest.mark.parametrize("op", ["map", "filter"])
def test_arguments_are_validated_when_the_query_is_built(op: str) -> None:
    with pytest.raises(TypeError, match=f"{op}: .* must be callable"):
        getattr(from_iterable([1]), op)(42)


# -- on virtual time, with the checkpoint-anywhere harness (the pattern every operator's tests follow) --------

from reaqtive.testing import TestScheduler, on_completed, on_error, on_next, subscribe  # noqa: E402
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere  # noqa: E402

HOT = [on_next(150, 1), on_next(210, 2), on_next(230, 3), on_next(260, 4), on_completed(300)]


def test_map_on_virtual_time_values_completion_and_unsubscription() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.map(lambda x: x * 10))
    assert result.messages == [on_next(210, 20), on_next(230, 30), on_next(260, 40), on_completed(300)]
    assert xs.subscriptions == [subscribe(200, 300)]


def test_map_error_in_selector_at_the_same_tick_and_unsubscribes() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    boom = RuntimeError("boom")

    def selector(x: int) -> int:
        if x == 3:
            raise boom
        return x

    result = scheduler.start(lambda: xs.map(selector))
    assert result.messages == [on_next(210, 2), on_error(230, boom)]
    assert xs.subscriptions == [subscribe(200, 230)]


def test_filter_disposed_early_unsubscribes_at_dispose_time() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.filter(lambda x: x % 2 == 0), disposed=240)
    assert result.messages == [on_next(210, 2)]
    assert xs.subscriptions == [subscribe(200, 240)]


def test_source_error_passes_through() -> None:
    scheduler = TestScheduler()
    failure = KeyError("upstream")
    xs = scheduler.create_hot_observable(on_next(210, 1), on_error(220, failure))
    result = scheduler.start(lambda: xs.map(str).filter(bool))
    assert result.messages == [on_next(210, "1"), on_error(220, failure)]


def test_map_and_filter_survive_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.map(lambda x: x * 3).filter(lambda x: x % 2 == 0), HOT)


def test_from_iterable_on_a_scheduler_emits_one_tick_after_subscription() -> None:
    scheduler = TestScheduler()
    result = scheduler.start(lambda: from_iterable([1, 2, 3]))
    assert result.messages == [on_next(201, 1), on_next(201, 2), on_next(201, 3), on_completed(201)]


def test_from_iterable_with_one_at_a_time_demand_on_a_scheduler() -> None:
    scheduler = TestScheduler()
    observer = scheduler.create_observer(request=1)
    result = scheduler.start(lambda: from_iterable(range(5)).map(lambda x: x + 1), observer=observer)
    assert [m.value.value for m in result.messages[:-1]] == [1, 2, 3, 4, 5]  # type: ignore[union-attr]
    assert result.messages[-1] == on_completed(201)


def test_from_iterable_resumes_after_recovery_where_it_was() -> None:
    from reaqtive.state import CheckpointMode, save_subscription, state_loader

    scheduler = TestScheduler()
    observer = scheduler.create_observer(request=0)
    query = from_iterable(range(10))
    handle = query.subscribe(observer)
    from reaqtive.core.visitors import initialize

    initialize(handle, scheduler.create_context())
    assert observer.subscription is not None
    observer.subscription.request(4)
    scheduler.run()
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None
    handle.dispose()

    recovered = scheduler.create_observer(request=100)
    initialize(query.subscribe(recovered), scheduler.create_context(), state_loader(blob))
    scheduler.run()
    values = [m.value.value for m in recovered.messages if m.value.kind.name == "ON_NEXT"]  # type: ignore[union-attr]
    assert values == [4, 5, 6, 7, 8, 9], "the recovered source skips what it had emitted before"


def test_filter_predicate_whose_truth_value_raises_becomes_on_error() -> None:
    class Ambiguous:
        def __bool__(self) -> bool:
            raise ValueError("the truth value is ambiguous")

    recorder = Recorder(initial=10)
    start(from_iterable([1, 2]).filter(lambda x: Ambiguous()), recorder)
    assert isinstance(recorder.errors[0], ValueError) and recorder.values == []
