"""take_while and take_while_indexed: values, completion at the first false, errors, demand, checkpoints."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import OperatorContext, from_iterable
from reaqtive.core.visitors import initialize
from reaqtive.testing import Recorded, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.operators._take_skip_support import recover, run, save_at, saved_fields, saved_nodes
from tests.support import Recorder

HOT = [on_next(150, 1), on_next(210, 2), on_next(230, 3), on_next(260, 4), on_next(300, 1), on_completed(400)]
FAILURE = RuntimeError("source failed")
BOOM = ValueError("predicate failed")


def test_take_while_completes_at_the_first_false_element_and_unsubscribes() -> None:
    result, (xs,) = run(lambda xs: xs.take_while(lambda x: x < 4), HOT)
    assert result.messages == [on_next(210, 2), on_next(230, 3), on_completed(260)]
    assert xs.subscriptions == [subscribe(200, 260)]


def test_take_while_inclusive_emits_the_first_false_element_then_completes() -> None:
    result, (xs,) = run(lambda xs: xs.take_while(lambda x: x < 4, inclusive=True), HOT)
    assert result.messages == [on_next(210, 2), on_next(230, 3), on_next(260, 4), on_completed(260)]
    assert xs.subscriptions == [subscribe(200, 260)]


def test_take_while_always_true_completes_with_the_source() -> None:
    result, _ = run(lambda xs: xs.take_while(lambda x: True), HOT)
    assert result.values == [2, 3, 4, 1] and result.messages[-1] == on_completed(400)


def test_take_while_false_at_once_only_completes() -> None:
    result, (xs,) = run(lambda xs: xs.take_while(lambda x: False), HOT)
    assert result.messages == [on_completed(210)]
    assert xs.subscriptions == [subscribe(200, 210)]


def test_take_while_predicate_error_at_the_same_tick_then_unsubscribes() -> None:
    def predicate(x: int) -> bool:
        if x == 3:
            raise BOOM
        return True

    result, (xs,) = run(lambda xs: xs.take_while(predicate), HOT)
    assert result.messages == [on_next(210, 2), on_error(230, BOOM)]
    assert xs.subscriptions == [subscribe(200, 230)]


def test_take_while_passes_a_source_error() -> None:
    result, _ = run(lambda xs: xs.take_while(lambda x: True), [on_next(210, 1), on_error(220, FAILURE)])
    assert result.messages == [on_next(210, 1), on_error(220, FAILURE)]


def test_take_while_disposed_early_unsubscribes() -> None:
    result, (xs,) = run(lambda xs: xs.take_while(lambda x: True), HOT, disposed=240)
    assert result.values == [2, 3] and xs.subscriptions == [subscribe(200, 240)]


@pytest.mark.parametrize("op", ["take_while", "take_while_indexed"])
def test_take_while_arguments_are_validated(op: str) -> None:
    with pytest.raises(TypeError, match=f"{op}: predicate must be callable"):
        getattr(from_iterable([1]), op)(3)
    with pytest.raises(TypeError, match=f"{op}: inclusive must be a bool"):
        getattr(from_iterable([1]), op)(lambda *a: True, inclusive=1)


def test_take_while_with_one_at_a_time_demand_passes_demand_through() -> None:
    result, (xs,) = run(lambda xs: xs.take_while(lambda x: x < 4), HOT, observer_request=1)
    assert result.messages == [on_next(210, 2), on_next(230, 3), on_completed(260)]
    assert xs.requests == [Recorded(200, 1), Recorded(210, 1), Recorded(230, 1)]


def test_take_while_indexed_passes_the_index() -> None:
    seen: list[tuple[int, int]] = []

    def predicate(x: int, i: int) -> bool:
        seen.append((x, i))
        return i < 2

    result, (xs,) = run(lambda xs: xs.take_while_indexed(predicate), HOT)
    assert result.messages == [on_next(210, 2), on_next(230, 3), on_completed(260)]
    assert seen == [(2, 0), (3, 1), (4, 2)] and xs.subscriptions == [subscribe(200, 260)]


def test_take_while_indexed_predicate_error_becomes_on_error() -> None:
    result, (xs,) = run(lambda xs: xs.take_while_indexed(lambda x, i: 1 // (1 - i)), HOT)
    assert result.messages == [on_next(210, 2), on_error(230, ZeroDivisionError)]
    assert xs.subscriptions == [subscribe(200, 230)]


def test_take_while_indexed_saves_the_index_and_continues_counting() -> None:
    create = lambda xs: xs.take_while_indexed(lambda x, i: i < 2)  # noqa: E731
    blob = save_at(create, [HOT], 220)
    (record,) = saved_nodes(blob)
    assert record.name == "reaqtive:take_while+indexed" and saved_fields(record) == [False, 1]
    result, _ = recover(create, [HOT], blob, restart=225)
    assert result.messages == [on_next(230, 3), on_completed(260)]


@pytest.mark.parametrize(
    "create",
    [
        lambda xs: xs.take_while(lambda x: x < 4),
        lambda xs: xs.take_while(lambda x: x < 4, inclusive=True),
        lambda xs: xs.take_while_indexed(lambda x, i: i < 2),
        lambda xs: xs.take_while_indexed(lambda x, i: i < 2, inclusive=True),
    ],
    ids=["plain", "inclusive", "indexed", "indexed-inclusive"],
)
def test_take_while_survives_a_checkpoint_anywhere(create: Any) -> None:
    assert_checkpoint_anywhere(create, HOT)


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.integers(0, 9), max_size=25),
    limit=st.integers(0, 9),
    inclusive=st.booleans(),
    indexed=st.booleans(),
    requests=st.lists(st.integers(1, 6), min_size=1, max_size=8),
)
def test_take_while_agrees_with_itertools_under_any_demand(
    values: list[int], limit: int, inclusive: bool, indexed: bool, requests: list[int]
) -> None:
    expected = list(itertools.takewhile(lambda x: x < limit, values))
    if inclusive and len(expected) < len(values):
        expected.append(values[len(expected)])
    source = from_iterable(values)
    query = (
        source.take_while_indexed(lambda x, i: x < limit, inclusive=inclusive)
        if indexed
        else source.take_while(lambda x: x < limit, inclusive=inclusive)
    )
    recorder = Recorder()
    initialize(query.subscribe(recorder), OperatorContext("test://take_while"))
    requested = 0
    for n in requests:
        recorder.request(n)
        requested += n
        assert recorder.values == expected[:requested]
    assert not recorder.violations
