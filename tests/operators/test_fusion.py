"""Stage fusion (issue 15): adjacent per-element stages handle an element in one Python frame, bound from the same
expression into the same tree, with the same errors, demand and saved state as the separate stages."""

from __future__ import annotations

import doctest
import operator
import sys
import traceback
from collections.abc import Iterator
from typing import Any

import pytest

from reaqtive import OperatorContext, Query, SimpleSubject, from_iterable
from reaqtive.core.operator import OperatorBase
from reaqtive.core.streams import LONG_MAX
from reaqtive.core.visitors import initialize, subscribe_all, walk
from reaqtive.operators import _fusion
from reaqtive.operators._fusion import (
    MAX_RUN,
    FusedEntry,
    set_stage_fusion,
    stage_fusion,
    stage_fusion_enabled,
)
from reaqtive.operators.do import Do
from reaqtive.operators.filter import Filter
from reaqtive.operators.map import Map
from reaqtive.operators.scan import ScanSeed
from reaqtive.state.traversal import save_subscription, state_loader
from reaqtive.testing import TestScheduler, on_completed, on_next
from tests.operators._fusion_support import fusion
from tests.support import Recorder

CONTEXT = OperatorContext("test://fusion")


@pytest.fixture(autouse=True)
def _restore_the_switch() -> Iterator[None]:
    previous = stage_fusion_enabled()
    yield
    set_stage_fusion(previous)


def start(query: Query[Any], recorder: Recorder, context: OperatorContext = CONTEXT) -> Any:
    return initialize(query.subscribe(recorder), context)


def bound(query: Query[Any]) -> Any:
    """``query`` subscribed and every stage bound, nothing started (so nothing has ended either)."""
    handle = query.subscribe(Recorder())
    subscribe_all(handle)
    return handle


def entries(handle: Any) -> list[FusedEntry]:
    """The entries of the fused runs under ``handle`` (the subscribers their upstream stages emit to)."""
    found = []
    for node in walk(handle):
        assert isinstance(node, OperatorBase)
        if isinstance(node.output, FusedEntry):
            found.append(node.output)
    return found


def double(x: int) -> int:
    return x * 2


def divisible_by_3(x: int) -> bool:
    return x % 3 == 0


# -- binding ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fused", [True, False])
def test_a_fused_chain_binds_to_the_same_stages_in_the_same_tree(fused: bool) -> None:
    query = from_iterable(range(10)).map(double).filter(divisible_by_3).do(print).scan(0, operator.add)
    with fusion(fused):
        handle = bound(query)
    assert [type(node).__name__ for node in walk(handle)] == ["ScanSeed", "Do", "Filter", "Map", "FromIterable"]
    assert [type(entry).__name__ for entry in entries(handle)] == (["Fused_Map_Filter_Do_ScanSeed"] if fused else [])


def test_binding_leaves_the_expression_as_it_was() -> None:
    from reaqtive.engine.expressions import encode_query

    query = from_iterable([1, 2, 3]).map(abs).filter(bool).scan(0, operator.add)
    before, text = encode_query(query), repr(query)
    with fusion(True):
        start(query, Recorder(initial=LONG_MAX))
    assert encode_query(query) == before and repr(query) == text
    assert query == from_iterable([1, 2, 3]).map(abs).filter(bool).scan(0, operator.add)


def test_every_element_passes_the_whole_run_in_one_frame() -> None:
    depths: dict[str, set[int]] = {"map": set(), "filter": set(), "do": set(), "scan": set()}

    def depth() -> int:
        frame, count = sys._getframe(2), 0
        while frame is not None:
            frame, count = frame.f_back, count + 1  # type: ignore[assignment]
        return count

    def f(x: int) -> int:
        depths["map"].add(depth())
        return x + 1

    def p(x: int) -> bool:
        depths["filter"].add(depth())
        return True

    def d(x: int) -> None:
        depths["do"].add(depth())

    def acc(a: int, x: int) -> int:
        depths["scan"].add(depth())
        return a + x

    for fused in (True, False):
        subject = SimpleSubject[int]()
        with fusion(fused):
            start(subject.as_query().map(f).filter(p).do(d).scan(0, acc), Recorder(initial=LONG_MAX))
        subject.on_next(1)
        distinct = {frozenset(found) for found in depths.values()}
        assert len(distinct) == (1 if fused else 4), depths  # fused: every function at one depth
        for found in depths.values():
            found.clear()


def test_a_long_chain_binds_as_runs_of_at_most_max_run_stages() -> None:
    query = from_iterable(range(3))
    for _ in range(2 * MAX_RUN + 5):
        query = query.map(lambda x: x + 1)
    recorder = Recorder(initial=LONG_MAX)
    with fusion(True):
        assert len(entries(bound(query))) == 3
        start(query, recorder)
    assert recorder.values == [2 * MAX_RUN + 5 + x for x in range(3)] and recorder.completed == 1


def test_a_stage_that_is_not_fusible_splits_the_runs() -> None:
    recorder = Recorder(initial=LONG_MAX)
    query = from_iterable(range(8)).map(double).filter(divisible_by_3).take(2).map(str).filter(bool)
    with fusion(True):
        assert len(entries(bound(query))) == 2
        start(query, recorder)
    assert recorder.values == ["0", "6"] and recorder.completed == 1


def test_a_run_of_one_stage_has_an_entry_only_below_a_source_that_emits_batches() -> None:
    with fusion(True):
        assert len(entries(bound(from_iterable([1]).map(double)))) == 1
        assert not entries(bound(from_iterable([1]).take(1).map(double)))
        assert len(entries(bound(from_iterable([1]).take(1).map(double).filter(bool)))) == 1


def test_once_bound_the_stages_of_a_run_hold_their_own_sources_again() -> None:
    inner = from_iterable([1]).map(double)
    query = inner.filter(divisible_by_3).scan(0, operator.add)
    with fusion(True):
        handle = bound(query)
    scan, filter_, map_, _ = walk(handle)
    assert scan._source is query.args[0]  # type: ignore[attr-defined]
    assert filter_._source is inner  # type: ignore[attr-defined]
    assert map_._source is inner.args[0]  # type: ignore[attr-defined]


def test_the_switch_applies_to_what_is_bound_while_it_is_in_force() -> None:
    assert stage_fusion_enabled()
    with stage_fusion(False):
        assert not stage_fusion_enabled()
        unfused = bound(from_iterable([1]).map(double))
    assert stage_fusion_enabled()
    fused = bound(from_iterable([1]).map(double))
    assert not entries(unfused) and len(entries(fused)) == 1
    assert set_stage_fusion(False) is True and set_stage_fusion(True) is False
    with pytest.raises(TypeError, match="must be a bool"):
        set_stage_fusion(1)  # type: ignore[arg-type]


def test_the_module_examples_run() -> None:
    result = doctest.testmod(_fusion, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_arguments_of_stages_below_the_top_are_checked_when_they_would_be_unfused() -> None:
    bad = Query("map", (Query("filter", (from_iterable([1]), "not callable")), double))
    for fused in (True, False):
        with fusion(fused):
            handle = bad.subscribe(Recorder())  # binding the top stage does not bind the one below yet
            with pytest.raises(TypeError, match="filter"):
                initialize(handle, CONTEXT)


# -- errors ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("failing", [0, 1, 2, 3])
@pytest.mark.parametrize("fused", [True, False])
def test_a_failing_function_ends_the_query_through_the_stages_below_it_and_unsubscribes(
    failing: int, fused: bool
) -> None:
    seen: list[str] = []

    def fail_or(value: Any, stage: int) -> None:
        seen.append(f"{stage}:{value}")
        if stage == failing and value == 2:
            raise KeyError(f"stage {stage}")

    subject = SimpleSubject[int]()
    recorder = Recorder(initial=LONG_MAX)
    query = (
        subject.as_query()
        .map(lambda x: fail_or(x, 0) or x)
        .do(lambda x: fail_or(x, 1), on_error=lambda e: seen.append(f"do saw {e!r}"))
        .filter(lambda x: fail_or(x, 2) or True)
        .scan(0, lambda a, x: fail_or(x, 3) or a + x)
    )
    with fusion(fused):
        start(query, recorder)
    for value in (1, 2, 3):
        subject.on_next(value)
    assert recorder.values == [1] and [repr(e) for e in recorder.errors] == [repr(KeyError(f"stage {failing}"))]
    assert subject.subscriber_count == 0
    expected_calls = [f"{stage}:1" for stage in range(4)] + [f"{stage}:2" for stage in range(failing + 1)]
    do_saw = ["do saw KeyError('stage 0')"] if failing == 0 else []  # only a failure upstream of do reaches it
    assert seen == expected_calls + do_saw


@pytest.mark.parametrize("fused", [True, False])
def test_a_selector_returning_none_and_a_predicate_without_truth_are_errors_of_their_stage(fused: bool) -> None:
    class NoTruth:
        def __bool__(self) -> bool:
            raise ArithmeticError("no truth")

    with fusion(fused):
        none = Recorder(initial=LONG_MAX)
        start(from_iterable([1, 2]).map(lambda x: None if x == 2 else x).filter(bool), none)
        truth = Recorder(initial=LONG_MAX)
        start(from_iterable([1, 2]).map(double).filter(lambda x: NoTruth() if x == 4 else True), truth)
        accumulator = Recorder(initial=LONG_MAX)
        start(from_iterable([1, 2]).filter(bool).scan(lambda a, x: None), accumulator)
    assert none.values == [1] and "map: the selector returned None for 2" in str(none.errors[0])
    assert truth.values == [2] and isinstance(truth.errors[0], ArithmeticError)
    assert accumulator.values == [1] and "scan: the accumulator returned None for 2" in str(accumulator.errors[0])


@pytest.mark.parametrize("fused", [True, False])
def test_a_side_effect_that_disposes_the_query_stops_the_element_where_the_stage_would(fused: bool) -> None:
    calls: list[str] = []
    handles: list[Any] = []
    recorder = Recorder(initial=LONG_MAX)

    def dispose_at_3(x: int) -> None:
        calls.append(f"do {x}")
        if x == 3:
            handles[0].dispose()

    query = from_iterable(range(10)).do(dispose_at_3).map(lambda x: calls.append(f"map {x}") or x)
    with fusion(fused):
        handle = query.subscribe(recorder)
        handles.append(handle)
        initialize(handle, CONTEXT)
    assert calls == ["do 0", "map 0", "do 1", "map 1", "do 2", "map 2", "do 3"]
    assert recorder.values == [0, 1, 2] and not recorder.terminated


def test_a_traceback_through_a_fused_run_shows_the_lines_it_ran() -> None:
    def boom(x: int) -> int:
        raise ZeroDivisionError("boom")

    recorder = Recorder(initial=LONG_MAX)
    with fusion(True):
        start(from_iterable([1]).map(double).map(boom), recorder)
    text = "".join(traceback.format_exception(recorder.errors[0]))
    assert "<reaqtive fused Map_Map" in text and "v2 = f1(v1)" in text


@pytest.mark.parametrize("fused", [True, False])
def test_a_subscriber_that_raises_out_of_on_next_is_not_taken_for_an_error_of_the_iterable(fused: bool) -> None:
    class Raising(Recorder):
        def on_next(self, value: Any) -> None:
            raise RuntimeError("subscriber broke rule 2.13")

    handle_holder: list[Any] = []
    with fusion(fused), pytest.raises(RuntimeError, match=r"rule 2\.13"):
        handle = from_iterable(range(5)).map(double).filter(bool).subscribe(Raising(initial=LONG_MAX))
        handle_holder.append(handle)
        initialize(handle, CONTEXT)
    # the source ends the subscription it cannot go on with; the stages are left to the host, fused or not
    assert [node.is_disposed for node in walk(handle_holder[0])] == [False, False, True]  # type: ignore[attr-defined]


# -- the batch path from from_iterable ----------------------------------------------------------------------------


class Replayable:
    """An iterable that yields the same elements each time and logs every element taken from it."""

    def __init__(self, values: list[Any], fail_at: int | None = None) -> None:
        self.values = values
        self.fail_at = fail_at
        self.pulled: list[Any] = []

    def __iter__(self) -> Iterator[Any]:
        for index, value in enumerate(self.values):
            if index == self.fail_at:
                raise OSError(f"read failed at {index}")
            self.pulled.append(value)
            yield value


@pytest.mark.parametrize(
    ("values", "fail_at", "take"),
    [
        (list(range(20)), None, None),
        ([1, 2, None, 4], None, None),
        (list(range(300)), 250, None),
        (list(range(300)), None, 7),
        (list(range(300)), None, 200),
        ([], None, None),
    ],
)
def test_from_iterable_into_a_run_takes_delivers_and_saves_what_it_does_into_separate_stages(
    values: list[Any], fail_at: int | None, take: int | None
) -> None:
    outcomes = []
    for fused in (True, False):
        source = Replayable(values, fail_at)
        query = from_iterable(source).map(lambda x: x + 1).filter(lambda x: x % 2 == 1)
        if take is not None:
            query = query.take(take)
        recorder = Recorder(initial=LONG_MAX)
        with fusion(fused):
            handle = start(query, recorder)
        errors = [repr(e) for e in recorder.errors]
        outcomes.append((recorder.values, errors, recorder.completed, source.pulled, save_subscription(handle)))
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("fused", [True, False])
def test_a_pause_in_the_middle_of_a_hosted_drain_saves_and_resumes_at_the_same_element(fused: bool) -> None:
    """A hosted from_iterable hands a run a batch at a time and looks at its yield token between batches, as the
    unfused loop does: a checkpoint's pause stops it at the same element, with the same state saved."""
    scheduler = TestScheduler()
    pauses: list[Any] = []

    def pause_at_300(x: int) -> None:
        if x == 300:
            pauses.append(scheduler.pause())

    results = []
    for form in (fused, not fused):
        recorder = Recorder(initial=LONG_MAX)
        query = from_iterable(range(1000)).do(pause_at_300).map(double).filter(divisible_by_3)
        with fusion(form):
            handle = start(query, recorder, scheduler.create_context())
        scheduler.advance_by(1)
        assert scheduler.status.value != "running"
        blob = save_subscription(handle)
        results.append((len(recorder.values), blob))
        scheduler.resume()
        scheduler.advance_by(1)
        assert recorder.completed == 1 and len(recorder.values) == 334
        recovered = Recorder(initial=LONG_MAX)
        with fusion(not form):  # and the blob loads into the other form, which finishes the work
            initialize(query.subscribe(recovered), scheduler.create_context(), state_loader(blob))
        scheduler.advance_by(1)
        assert recorder.values[: results[-1][0]] + recovered.values == recorder.values
        scheduler = TestScheduler()
    assert results[0] == results[1]


@pytest.mark.parametrize("fused", [True, False])
def test_a_filter_in_a_run_replaces_dropped_elements_under_bounded_demand(fused: bool) -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_cold_observable(*[on_next(10 + i, i) for i in range(12)], on_completed(40))
    recorder = Recorder()
    with fusion(fused):
        start(xs.map(double).filter(divisible_by_3).map(str), recorder, scheduler.create_context())
    scheduler.advance_to(205)
    recorder.request(2)
    scheduler.advance_to(300)
    assert recorder.values == ["0", "6"]
    assert [r.value for r in xs.requests] == [2, 1, 1]  # two asked for, two dropped on the way to the second


def test_stage_classes_keep_their_own_on_next() -> None:
    """Unfused, each stage runs its own on_next; the fused steps are the same code, as templates."""
    for cls in (Map, Filter, Do, ScanSeed):
        assert "on_next" in cls.__dict__ and "fused_step" in cls.__dict__
