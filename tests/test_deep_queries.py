"""Deep queries: a chain of hundreds or thousands of operators is created, run, checkpointed, recovered,
compared, printed and disposed without a RecursionError, or refused up front with a QueryTooDeepError that says
what recursion limit it needs, never halfway through processing."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from reaqtive import CallbackSubscriber, Query, QueryTooDeepError, from_iterable
from reaqtive.core.binding import frames_of
from reaqtive.core.operator import OperatorBase
from reaqtive.core.visitors import initialize, walk
from reaqtive.fluent.query import RESERVED_FRAMES, frame_budget
from reaqtive.state.traversal import save_subscription, state_loader
from reaqtive.testing import TestScheduler, on_completed, on_next, subscribe
from reaqtive.testing.sources import TestableQuery


def increment(x: int) -> int:
    return x + 1


def maps(source: Query[int], count: int) -> Query[int]:
    query = source
    for _ in range(count):
        query = query.map(increment)
    return query


@contextmanager
def recursion_limit(limit: int) -> Iterator[None]:
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


def run_checkpoint_recover(count: int) -> tuple[list[Any], list[Any], TestableQuery[int]]:
    """Run ``count`` maps over a hot source, checkpoint at 215, dispose, recover from the checkpoint, finish."""
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_completed(300))
    first = scheduler.create_observer()
    handle = maps(xs, count).subscribe(first)
    initialize(handle, scheduler.create_context())
    scheduler.advance_to(215)
    blob = save_subscription(handle)
    assert blob is not None
    handle.dispose()
    assert all(node.is_disposed for node in walk(handle) if isinstance(node, OperatorBase))
    second = scheduler.create_observer()
    recovered = maps(xs, count).subscribe(second)
    initialize(recovered, scheduler.create_context(), load_state=state_loader(blob))
    scheduler.advance_to(400)
    return first.messages, second.messages, xs


def test_a_chain_of_400_maps_runs_checkpoints_recovers_and_disposes_at_the_default_recursion_limit() -> None:
    assert sys.getrecursionlimit() >= 1000
    before, after, xs = run_checkpoint_recover(400)
    assert before == [on_next(210, 401)]
    assert after == [on_next(220, 402), on_completed(300)]
    assert xs.subscriptions == [subscribe(0, 215), subscribe(215, 300)]


def test_a_chain_of_400_maps_over_a_cold_source_completes_with_bounded_demand() -> None:
    values: list[int] = []
    done: list[bool] = []
    sink = CallbackSubscriber(values.append, None, lambda: done.append(True), batch_size=1)
    maps(from_iterable(range(5)), 400).run(sink)
    assert values == [400, 401, 402, 403, 404] and done == [True]


def test_a_chain_of_2000_maps_runs_and_recovers_once_the_recursion_limit_allows_it() -> None:
    query = maps(from_iterable([1]), 2000)
    with pytest.raises(QueryTooDeepError) as refused:
        query.subscribe(TestScheduler().create_observer())
    with recursion_limit(refused.value.needed):
        before, after, _ = run_checkpoint_recover(2000)
    assert before == [on_next(210, 2001)]
    assert after == [on_next(220, 2002), on_completed(300)]


def test_a_query_too_deep_for_the_recursion_limit_is_refused_at_subscribe_saying_the_limit_it_needs() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_completed(300))
    query = maps(xs, 2000)
    with pytest.raises(QueryTooDeepError) as refused:
        query.subscribe(scheduler.create_observer())
    error = refused.value
    assert isinstance(error, RecursionError)
    assert (error.depth, error.frames) == (2001, 2000 * frames_of("map") + frames_of("subscribable"))
    assert error.needed == error.frames + RESERVED_FRAMES and error.budget == frame_budget()
    assert f"sys.setrecursionlimit({error.needed})" in str(error)
    assert xs.subscriptions == []  # nothing was subscribed, nothing ran


def test_the_deepest_chain_the_budget_allows_runs_and_one_more_stage_is_refused() -> None:
    deepest = maps(from_iterable([1]), (frame_budget() - frames_of("from_iterable")) // frames_of("map"))
    values: list[int] = []
    deepest.run(values.append)
    assert values == [deepest.depth]
    with pytest.raises(QueryTooDeepError):
        deepest.map(increment).subscribe(TestScheduler().create_observer())


def test_a_deep_query_created_under_a_raised_limit_saves_loads_and_disposes_under_the_default_limit() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_completed(300))
    query = maps(xs, 3000)
    needed = query.frames + RESERVED_FRAMES
    with recursion_limit(needed):  # subscribing checks the query's frames against the limit
        handle = query.subscribe(scheduler.create_observer())
        initialize(handle, scheduler.create_context())
    # Saving, walking and disposing loop over the tree: the recursion limit plays no part.
    blob = save_subscription(handle)
    assert blob is not None
    handle.dispose()
    nodes = walk(handle)
    assert len(nodes) == 3001 and all(isinstance(node, OperatorBase) and node.is_disposed for node in nodes[:-1])
    with recursion_limit(needed):
        recovered = maps(xs, 3000).subscribe(scheduler.create_observer())
        initialize(recovered, scheduler.create_context(), load_state=state_loader(blob))
    recovered.dispose()
    assert xs.subscriptions == [subscribe(0, 0), subscribe(0, 0)]


def test_deep_queries_compare_and_print_without_recursion() -> None:
    first, second = maps(from_iterable([1]), 5000), maps(from_iterable([1]), 5000)
    assert first == second and first != maps(from_iterable([2]), 5000) and first != maps(from_iterable([1]), 4999)
    text = repr(first)
    assert text.startswith("from_iterable([1]).map(<increment>).map(") and text.count(".map(") == 5000
