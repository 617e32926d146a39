"""map and filter: values, user-function errors, demand."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import OperatorContext, SimpleSubject, from_iterable
from reaqtive.visitors import initialize
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
