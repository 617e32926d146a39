"""skip_while and skip_while_indexed: values, the latch, errors, demand replacement, checkpoints."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import OperatorContext, from_iterable
from reaqtive.core.streams import LONG_MAX
from reaqtive.core.visitors import initialize
from reaqtive.testing import Recorded, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.operators._forged_support import forge
from tests.operators._take_skip_support import recover, run, save_at, saved_fields, saved_nodes
from tests.support import Recorder

HOT = [on_next(150, 1), on_next(210, 2), on_next(230, 3), on_next(260, 4), on_next(300, 1), on_completed(400)]
FAILURE = RuntimeError("source failed")
BOOM = ValueError("predicate failed")


def test_skip_while_drops_until_the_first_false_then_passes_everything() -> None:
    calls: list[int] = []

    def predicate(x: int) -> bool:
        calls.append(x)
        return x < 4

    result, (xs,) = run(lambda xs: xs.skip_while(predicate), HOT)
    assert result.messages == [on_next(260, 4), on_next(300, 1), on_completed(400)]
    assert calls == [2, 3, 4], "latched: the predicate is not called again"
    assert xs.subscriptions == [subscribe(200, 400)]


def test_skip_while_always_true_only_completes() -> None:
    result, _ = run(lambda xs: xs.skip_while(lambda x: True), HOT)
    assert result.messages == [on_completed(400)]


def test_skip_while_predicate_error_at_the_same_tick_then_unsubscribes() -> None:
    def predicate(x: int) -> bool:
        if x == 3:
            raise BOOM
        return True

    result, (xs,) = run(lambda xs: xs.skip_while(predicate), HOT)
    assert result.messages == [on_error(230, BOOM)]
    assert xs.subscriptions == [subscribe(200, 230)]


def test_skip_while_passes_a_source_error() -> None:
    result, _ = run(lambda xs: xs.skip_while(lambda x: True), [on_next(210, 1), on_error(220, FAILURE)])
    assert result.messages == [on_error(220, FAILURE)]


def test_skip_while_disposed_early_unsubscribes() -> None:
    result, (xs,) = run(lambda xs: xs.skip_while(lambda x: x < 3), HOT, disposed=240)
    assert result.messages == [on_next(230, 3)] and xs.subscriptions == [subscribe(200, 240)]


@pytest.mark.parametrize("op", ["skip_while", "skip_while_indexed"])
def test_skip_while_arguments_are_validated(op: str) -> None:
    with pytest.raises(TypeError, match=f"{op}: predicate must be callable"):
        getattr(from_iterable([1]), op)(None)


def test_skip_while_replaces_each_dropped_element_with_one_at_a_time_demand() -> None:
    result, (xs,) = run(lambda xs: xs.skip_while(lambda x: x < 4), HOT, observer_request=1)
    assert result.messages == [on_next(260, 4), on_next(300, 1), on_completed(400)]
    assert xs.requests == [
        Recorded(200, 1),
        Recorded(210, 1),  # replaces the dropped 2
        Recorded(230, 1),  # replaces the dropped 3
        Recorded(260, 1),  # the observer's next request
        Recorded(300, 1),
    ]


def test_skip_while_with_unbounded_demand_sends_no_replacements() -> None:
    _, (xs,) = run(lambda xs: xs.skip_while(lambda x: x < 4), HOT)
    assert xs.requests == [Recorded(200, LONG_MAX)]


def test_skip_while_saves_its_latch() -> None:
    create = lambda xs: xs.skip_while(lambda x: x < 4)  # noqa: E731
    (before,) = saved_nodes(save_at(create, [HOT], 240))
    (after,) = saved_nodes(save_at(create, [HOT], 270))
    assert before.name == "reaqtive:skip_while"
    assert saved_fields(before) == [False, False] and saved_fields(after) == [False, True]
    # Recovered after the latch, the predicate would drop the 1 at 300; the latch lets it pass.
    result, _ = recover(create, [HOT], save_at(create, [HOT], 270), restart=280)
    assert result.messages == [on_next(300, 1), on_completed(400)]


def test_skip_while_indexed_passes_the_index_and_saves_it() -> None:
    seen: list[tuple[int, int]] = []

    def predicate(x: int, i: int) -> bool:
        seen.append((x, i))
        return i < 2

    result, _ = run(lambda xs: xs.skip_while_indexed(predicate), HOT)
    assert result.messages == [on_next(260, 4), on_next(300, 1), on_completed(400)]
    assert seen == [(2, 0), (3, 1), (4, 2)]

    create = lambda xs: xs.skip_while_indexed(lambda x, i: i < 2)  # noqa: E731
    blob = save_at(create, [HOT], 220)
    (record,) = saved_nodes(blob)
    assert record.name == "reaqtive:skip_while+indexed" and saved_fields(record) == [False, False, 1]
    recovered, _ = recover(create, [HOT], blob, restart=225)
    assert recovered.messages == [on_next(260, 4), on_next(300, 1), on_completed(400)]


def test_skip_while_indexed_once_running_saves_index_0_and_loads_an_older_index() -> None:
    create = lambda xs: xs.skip_while_indexed(lambda x, i: i < 2)  # noqa: E731
    blob = save_at(create, [HOT], 270)  # after 4 (index 2) opened the gate
    (record,) = saved_nodes(blob)
    assert saved_fields(record) == [False, True, 0]  # the index no longer counts once running
    # The previous release saved the index it had reached (3): any index loads, and the gate stays open.
    older = forge(blob, 0, (2,), 3)
    assert saved_fields(saved_nodes(older)[0]) == [False, True, 3]
    for saved in (blob, older):
        recovered, _ = recover(create, [HOT], saved, restart=275)
        assert recovered.messages == [on_next(300, 1), on_completed(400)]


def test_skip_while_indexed_predicate_error_becomes_on_error() -> None:
    result, (xs,) = run(lambda xs: xs.skip_while_indexed(lambda x, i: 1 // (1 - i)), HOT)
    assert result.messages == [on_error(230, ZeroDivisionError)]
    assert xs.subscriptions == [subscribe(200, 230)]


@pytest.mark.parametrize(
    "create",
    [lambda xs: xs.skip_while(lambda x: x < 4), lambda xs: xs.skip_while_indexed(lambda x, i: i < 2)],
    ids=["plain", "indexed"],
)
def test_skip_while_survives_a_checkpoint_anywhere(create: Any) -> None:
    assert_checkpoint_anywhere(create, HOT)


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.integers(0, 9), max_size=25),
    limit=st.integers(0, 9),
    indexed=st.booleans(),
    requests=st.lists(st.integers(1, 6), min_size=1, max_size=8),
)
def test_skip_while_agrees_with_itertools_under_any_demand(
    values: list[int], limit: int, indexed: bool, requests: list[int]
) -> None:
    expected = list(itertools.dropwhile(lambda x: x < limit, values))
    source = from_iterable(values)
    query = source.skip_while_indexed(lambda x, i: x < limit) if indexed else source.skip_while(lambda x: x < limit)
    recorder = Recorder()
    initialize(query.subscribe(recorder), OperatorContext("test://skip_while"))
    requested = 0
    for n in requests:
        recorder.request(n)
        requested += n
        assert recorder.values == expected[:requested], "dropped elements are replaced: never stuck"
    assert not recorder.violations
