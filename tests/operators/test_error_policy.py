"""The error policy (issue 30): a user function that raises skips its element, or stops the query.

For every operator with a user function, on random inputs and random failing elements:

* under a policy that **skips**, the outputs equal those of the same query over the input without the failing
  elements, tick for tick, and the state saved at every tick equals the state of that run (a skipped element leaves
  no trace in the operator's state; an index-based operator gives it no index); with one subscriber asking one
  element at a time too;
* under a policy that **stops**, the outputs are exactly those without a policy (``on_error``), and the policy was
  asked once, by that operator, about the failing element.

Then the paths that need more than one table: fused runs (``map -> filter -> scan``, failures at each step, bounded
demand), keyed ``group_by(k).flat_map(...)`` (the keyed path gives the general path's outputs under skip too),
functions without an element (``NO_ELEMENT``: an aggregate's result, ``do``'s ``on_complete``, a window's row), a
checkpoint anywhere under skip, and a policy that raises (it stops the query, its error chained).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reaqtive import Query, keyed_execution
from reaqtive.core.error_policy import ERROR_POLICY_SETTING, NO_ELEMENT
from reaqtive.operators.keyed_window import Fold, Hopping, Session, Tumbling
from reaqtive.state import CheckpointMode
from reaqtive.state.host import QueryHost, QueryState
from reaqtive.testing import (
    DEFAULT_INSTANCE_ID,
    Demand,
    HotSource,
    Notification,
    OnCompleted,
    OnError,
    OnNext,
    PolicyCall,
    Recorded,
    RecordingPolicy,
    TestableQuery,
    TestScheduler,
    assert_checkpoint_anywhere,
    check_checkpoint_anywhere,
    on_completed,
    on_next,
)
from tests.operators import (
    _keyed_cases,
    _keyed_cases_aggregates,
    _keyed_cases_misc,
    _keyed_cases_take_skip,
    _keyed_cases_windows,
)
from tests.operators._keyed_cases import Variant

SUBSCRIBED = 200
DISPOSED = 400
Script = list[Recorded[Notification[Any]]]
Messages = list[Recorded[Notification[Any]]]


class BadElementError(Exception):
    """What a user function raises on a failing element."""


def check(bad: frozenset[object], value: object) -> None:
    """Raise :class:`BadElementError` when ``value`` is one of the failing elements."""
    if value in bad:
        raise BadElementError(f"bad element {value!r}")


def skip_all() -> RecordingPolicy:
    return RecordingPolicy(skip=True)


# -- running a query on virtual time, saving its state at chosen ticks ------------------------------------------------


def run_world(
    create: Callable[..., Any],
    scripts: Sequence[Script],
    settings: dict[str, object] | None = None,
    *,
    save_at: Iterable[int] = (),
    keyed: bool = True,
    request: int | None = None,
) -> tuple[Messages, list[QueryState]]:
    """Run ``create(*sources)`` over hot sources playing ``scripts`` (subscribed at 200, disposed at 400), as a
    hosted query (its inner subscriptions are units of an environment, as under the engine); return its messages and
    its full state at each tick of ``save_at``. ``request``: the subscriber's demand, ``n`` at a time (unbounded by
    default)."""
    with keyed_execution(keyed):
        scheduler = TestScheduler()
        hot = [HotSource(scheduler, script) for script in scripts]
        sources = [TestableQuery(source) for source in hot]
        observer = scheduler.create_observer(request=request)
        host = QueryHost(scheduler, settings=settings)
        queries: list[Any] = []

        def subscribe() -> None:
            query = host.bind(DEFAULT_INSTANCE_ID, create(*sources), observer)
            queries.append(query)
            query.start()

        def dispose() -> None:
            queries[0].handle.dispose()

        scheduler.schedule_absolute(SUBSCRIBED, subscribe)
        scheduler.schedule_absolute(DISPOSED, dispose)
        states: list[QueryState] = []
        for tick in sorted(save_at):
            scheduler.advance_to(tick)
            states.append(queries[0].save(mode=CheckpointMode.FULL).state)
        scheduler.advance_to(DISPOSED + 1)
        host.environment.dispose()
        scheduler.dispose()
    return list(observer.messages), states


def script_of(values: Sequence[object], start: int = 201, step: int = 3, complete: bool = True) -> Script:
    script: Script = [on_next(start + step * index, value) for index, value in enumerate(values)]
    if complete:
        script.append(on_completed(start + step * len(values) + 1))
    return script


def without(values: Sequence[int], bad: frozenset[object]) -> list[bool]:
    """Which elements the run without the failing ones keeps: all but the failing ones."""
    return [value not in bad for value in values]


def keeping(scripts: Sequence[Script], keep: Sequence[bool]) -> list[Script]:
    """``scripts`` with the elements of the first one that ``keep`` does not keep removed (the others keep their
    ticks, the completion too)."""
    first: Script = []
    flags = iter(keep)
    for message in scripts[0]:
        if not isinstance(message.value, OnNext) or next(flags):
            first.append(message)
    return [first, *scripts[1:]]


def has_error(messages: Messages) -> bool:
    return any(isinstance(message.value, OnError) for message in messages)


# -- the cases: one per operator and user function -------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """An operator with a user function that raises on the elements of ``bad``.

    ``create(bad, *sources)`` builds the query; with ``bad`` empty it fails on nothing. ``operator``: the persisted
    name of the stage that asks the policy. ``scripts(values, bad)``: the input scripts (one source by default: the
    values every 3 ticks, then completion; ``values`` go to the first); ``oracle(values, bad)``: which of ``values``
    the run without the failing elements keeps (all but the failing ones, by default); ``element(value)``: what the
    policy is told the element is.
    """

    label: str
    operator: str
    create: Callable[..., Any]
    scripts: Callable[[list[int], frozenset[object]], list[Script]] = lambda values, bad: [script_of(values)]
    oracle: Callable[[list[int], frozenset[object]], list[bool]] = without
    element: Callable[[int], object] = lambda value: value
    keyed: bool = True
    compare_state: bool = True
    """False where the skip run's state must differ from the oracle's: the element did reach a stage before the one
    that skips it (``flat_map``'s result selector drops an inner element, its outer element came; an inner ``scan``
    skips an element whose group ``group_by`` opened), or the state cannot be saved (``merge_all`` of plain
    queries)."""

    def __repr__(self) -> str:
        return self.label


def strings_for(bad: frozenset[object]) -> Callable[[int], object]:
    """Failing elements become strings, which do not add to or compare with numbers."""
    return lambda x: f"s{x}" if x in bad else x


def skip_while_oracle(predicate: Callable[[int, int], bool]) -> Callable[[list[int], frozenset[object]], list[bool]]:
    """``skip_while``: the predicate runs only until it is false, so failing elements after that pass."""

    def oracle(values: list[int], bad: frozenset[object]) -> list[bool]:
        kept, running, index = [], False, 0
        for value in values:
            kept.append(running or value not in bad)
            if not running and value not in bad:
                running = not predicate(value, index)
                index += 1
        return kept

    return oracle


def tail_first(values: list[int], bad: frozenset[object]) -> list[Script]:
    """Two sources: the other one's elements first, the first one's good elements (so that every element of the
    first arrives second, and the answer is ``True`` unless an element remains unpaired)."""
    good = [value for value in values if value not in bad]
    return [script_of(values, start=260), script_of(good, start=201, step=1)]


def paired(values: list[int], bad: frozenset[object]) -> list[bool]:
    """With :func:`tail_first`: a failing element after the last good one finds no element to be compared with (the
    comparer is not called: the answer is ``False``, an element more), so the run without the failing ones has it."""
    last_good = max((index for index, value in enumerate(values) if value not in bad), default=-1)
    return [value not in bad or index > last_good for index, value in enumerate(values)]


def other_first(values: list[int], bad: frozenset[object]) -> list[Script]:
    """Two sources: the other one emits 100 first, so every element of the first combines."""
    return [script_of(values, start=203), [on_next(201, 100), on_completed(390)]]


class Target:
    """A ``contains`` value whose ``==`` raises on the failing elements (``x == target`` falls back to it)."""

    def __init__(self, bad: frozenset[object]) -> None:
        self.bad = bad

    def __eq__(self, other: object) -> bool:
        check(self.bad, other)
        return other == 7

    __hash__ = None  # type: ignore[assignment]


def inner_of(x: int) -> Query[int]:
    return Query.from_iterable([x, x + 100])


def later(x: int) -> Query[int]:
    return Query.timer(timedelta(seconds=5)).map(lambda _: x)


CASES: list[Case] = [
    Case("map", "reaqtive:map", lambda bad, xs: xs.map(lambda x: check(bad, x) or x * 2)),
    Case("map returning None", "reaqtive:map", lambda bad, xs: xs.map(lambda x: None if x in bad else x * 2)),
    Case("map_indexed", "reaqtive:map+index", lambda bad, xs: xs.map_indexed(lambda x, i: check(bad, x) or (x, i))),
    Case("filter", "reaqtive:filter", lambda bad, xs: xs.filter(lambda x: check(bad, x) or x % 3 != 0)),
    Case("filter_indexed", "reaqtive:filter+index",
         lambda bad, xs: xs.filter_indexed(lambda x, i: check(bad, x) or (x + i) % 2 == 0)),
    Case("scan", "reaqtive:scan", lambda bad, xs: xs.scan(lambda a, x: check(bad, x) or a + x)),
    Case("scan with a seed", "reaqtive:scan+seed", lambda bad, xs: xs.scan(10, lambda a, x: check(bad, x) or a + x)),
    Case("scan returning None", "reaqtive:scan+seed",
         lambda bad, xs: xs.scan(10, lambda a, x: None if x in bad else a + x)),
    Case("do", "reaqtive:do", lambda bad, xs: xs.do(lambda x: check(bad, x))),
    Case("distinct by key", "reaqtive:distinct", lambda bad, xs: xs.distinct(lambda x: check(bad, x) or x % 5)),
    Case("distinct by an unhashable key", "reaqtive:distinct",
         lambda bad, xs: xs.distinct(lambda x: [x] if x in bad else x % 5)),
    Case("distinct by comparer", "reaqtive:distinct+comparer",
         lambda bad, xs: xs.distinct(comparer=lambda seen, x: check(bad, x) or seen % 4 == x % 4)),
    Case("distinct_until_changed by key", "reaqtive:distinct_until_changed",
         lambda bad, xs: xs.distinct_until_changed(lambda x: check(bad, x) or x // 3)),
    Case("distinct_until_changed by comparer", "reaqtive:distinct_until_changed",
         lambda bad, xs: xs.distinct_until_changed(comparer=lambda current, x: check(bad, x) or current % 2 == x % 2)),
    Case("skip_while", "reaqtive:skip_while", lambda bad, xs: xs.skip_while(lambda x: check(bad, x) or x < 6),
         oracle=skip_while_oracle(lambda x, i: x < 6)),
    Case("skip_while_indexed", "reaqtive:skip_while+indexed",
         lambda bad, xs: xs.skip_while_indexed(lambda x, i: check(bad, x) or i < 3),
         oracle=skip_while_oracle(lambda x, i: i < 3)),
    Case("take_while", "reaqtive:take_while", lambda bad, xs: xs.take_while(lambda x: check(bad, x) or x < 10)),
    Case("take_while_indexed", "reaqtive:take_while+indexed",
         lambda bad, xs: xs.take_while_indexed(lambda x, i: check(bad, x) or i < 4, inclusive=True)),
    Case("count", "reaqtive:count", lambda bad, xs: xs.count(lambda x: check(bad, x) or x % 2 == 0)),
    Case("first", "reaqtive:first", lambda bad, xs: xs.first_or_default(-1, lambda x: check(bad, x) or x > 9)),
    Case("last", "reaqtive:last", lambda bad, xs: xs.last(lambda x: check(bad, x) or x % 3 == 1)),
    Case("single", "reaqtive:single", lambda bad, xs: xs.single_or_default(-1, lambda x: check(bad, x) or x == 7)),
    Case("any", "reaqtive:any", lambda bad, xs: xs.any(lambda x: check(bad, x) or x > 10)),
    Case("all", "reaqtive:all", lambda bad, xs: xs.all(lambda x: check(bad, x) or x < 11)),
    Case("contains", "reaqtive:contains", lambda bad, xs: xs.contains(Target(bad))),
    Case("min by key", "reaqtive:min", lambda bad, xs: xs.min(lambda x: check(bad, x) or x % 7)),
    Case("max by key", "reaqtive:max", lambda bad, xs: xs.max(lambda x: check(bad, x) or x % 7)),
    Case("max of values that do not compare", "reaqtive:max", lambda bad, xs: xs.map(strings_for(bad)).max(),
         element=lambda x: f"s{x}"),
    Case("sum of values that do not add", "reaqtive:sum", lambda bad, xs: xs.map(strings_for(bad)).sum(),
         element=lambda x: f"s{x}"),
    Case("average of values that do not add", "reaqtive:average",
         lambda bad, xs: xs.map(strings_for(bad)).average(), element=lambda x: f"s{x}"),
    Case("aggregate", "reaqtive:aggregate", lambda bad, xs: xs.aggregate(lambda a, x: check(bad, x) or a + x)),
    Case("aggregate with a seed", "reaqtive:aggregate+seed",
         lambda bad, xs: xs.aggregate(lambda a, x: check(bad, x) or [*a, x], [], tuple)),
    Case("group_by key selector", "reaqtive:group_by",
         lambda bad, xs: xs.group_by(lambda x: check(bad, x) or x % 3).flat_map(
             lambda g: g.to_list().map(lambda items: (g.key, items))), keyed=False),
    Case("group_by key selector, keyed", "reaqtive:group_by+keyed",
         lambda bad, xs: xs.group_by(lambda x: check(bad, x) or x % 3).flat_map(
             lambda g: g.to_list().map(lambda items: (g.key, items)))),
    Case("group_by unhashable key", "reaqtive:group_by",
         lambda bad, xs: xs.group_by(lambda x: [x] if x in bad else x % 3).flat_map(
             lambda g: g.count().map(lambda n: (g.key, n))), keyed=False),
    Case("group_by unhashable key, keyed", "reaqtive:group_by+keyed",
         lambda bad, xs: xs.group_by(lambda x: [x] if x in bad else x % 3).flat_map(
             lambda g: g.count().map(lambda n: (g.key, n)))),
    Case("group_by element selector", "reaqtive:group_by",
         lambda bad, xs: xs.group_by(lambda x: x % 4, lambda x: check(bad, x) or x * 10).flat_map(
             lambda g: g.count().map(lambda n: (g.key, n))), keyed=False),
    Case("group_by element selector, keyed", "reaqtive:group_by+keyed",
         lambda bad, xs: xs.group_by(lambda x: x % 4, lambda x: check(bad, x) or x * 10).flat_map(
             lambda g: g.count().map(lambda n: (g.key, n)))),
    Case("group_by element selector returning None", "reaqtive:group_by",
         lambda bad, xs: xs.group_by(lambda x: x % 4, lambda x: None if x in bad else x).flat_map(
             lambda g: g.to_list()), keyed=False),
    Case("group_by inner scan", "reaqtive:scan+seed",
         lambda bad, xs: xs.group_by(lambda x: x % 2).flat_map(
             lambda g: g.scan(0, lambda a, x: check(bad, x) or a + x).map(lambda s: (g.key, s))), keyed=False,
         compare_state=False),
    Case("group_by inner scan, keyed", "reaqtive:group_by+keyed",
         lambda bad, xs: xs.group_by(lambda x: x % 2).flat_map(
             lambda g: g.scan(0, lambda a, x: check(bad, x) or a + x).map(lambda s: (g.key, s))),
         compare_state=False),
    Case("group_by result selector", "reaqtive:flat_map",
         lambda bad, xs: xs.group_by(lambda x: x % 3).flat_map(
             lambda g: g.take(100), lambda g, x: check(bad, x) or (g.key, x)), keyed=False, compare_state=False),
    Case("group_by result selector, keyed", "reaqtive:group_by+keyed",
         lambda bad, xs: xs.group_by(lambda x: x % 3).flat_map(
             lambda g: g.take(100), lambda g, x: check(bad, x) or (g.key, x)), compare_state=False),
    Case("flat_map selector", "reaqtive:flat_map", lambda bad, xs: xs.flat_map(lambda x: check(bad, x) or inner_of(x))),
    Case("flat_map result selector", "reaqtive:flat_map",
         lambda bad, xs: xs.flat_map(lambda x: Query.from_iterable([x]), lambda x, y: check(bad, y) or (x, y)),
         compare_state=False),
    Case("merge_all of an element that is no query", "reaqtive:merge_all",
         lambda bad, xs: xs.map(lambda x: -1 if x in bad else Query.from_iterable([x])).merge_all(),
         element=lambda x: -1, compare_state=False),
    Case("switch_latest selector", "reaqtive:switch_latest",
         lambda bad, xs: xs.switch_latest(lambda x: check(bad, x) or later(x))),
    Case("debounce selector", "reaqtive:debounce+selector",
         lambda bad, xs: xs.debounce(lambda x: check(bad, x) or Query.timer(timedelta(seconds=2 + x % 3)))),
    Case("combine_latest selector", "reaqtive:combine_latest",
         lambda bad, xs, ys: xs.combine_latest(ys, lambda x, y: check(bad, x) or x + y), scripts=other_first),
    Case("sequence_equal comparer", "reaqtive:sequence_equal",
         lambda bad, xs, ys: xs.sequence_equal(ys, lambda x, y: check(bad, x) or x == y), scripts=tail_first,
         oracle=paired),
    Case("aggregate_by_key key selector", "reaqtive:aggregate_by_key",
         lambda bad, xs: xs.aggregate_by_key(lambda x: check(bad, x) or x % 3, Tumbling(timedelta(seconds=10)), "sum")),
    Case("aggregate_by_key value selector", "reaqtive:aggregate_by_key",
         lambda bad, xs: xs.aggregate_by_key(lambda x: x % 2, Tumbling(timedelta(seconds=7)), "max",
                                             lambda x: check(bad, x) or -x)),
    Case("aggregate_by_key unhashable key", "reaqtive:aggregate_by_key",
         lambda bad, xs: xs.aggregate_by_key(lambda x: [x] if x in bad else x % 3, Tumbling(timedelta(seconds=10)))),
    Case("aggregate_by_key hopping fold", "reaqtive:aggregate_by_key+hopping",
         lambda bad, xs: xs.aggregate_by_key(lambda x: x % 2, Hopping(timedelta(seconds=12), timedelta(seconds=4)),
                                             Fold(0, lambda a, x: check(bad, x) or a + x))),
    Case("aggregate_by_key session fold", "reaqtive:aggregate_by_key+session",
         lambda bad, xs: xs.aggregate_by_key(lambda x: x % 3, Session(timedelta(seconds=8)),
                                             Fold(0, lambda a, x: check(bad, x) or a * 2 + x))),
]

# Elements: 0 first (never failing: scan, aggregate, min/max and average take their first element without calling
# the function), then values from 1 to 12, some of which fail.
values_lists = st.lists(st.integers(1, 12), min_size=3, max_size=14).map(lambda values: [0, *values])
bad_sets = st.frozensets(st.integers(1, 12), max_size=5)


def ticks_of(scripts: Sequence[Script]) -> list[int]:
    """Where to compare the saved states: the subscription and every input tick."""
    return sorted({SUBSCRIBED} | {message.time for script in scripts for message in script})


@pytest.mark.parametrize("case", CASES, ids=repr)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=values_lists, bad=bad_sets)
# (a timer's saved number once counted every task the scheduler had queued, the script's skipped elements too)
@example(values=[0, 1, 1, 1], bad=frozenset([1]))
def test_skip_equals_the_query_over_the_input_without_the_failing_elements(
    case: Case, values: list[int], bad: frozenset[object]
) -> None:
    policy = skip_all()
    scripts = case.scripts(values, bad)
    oracle_scripts = keeping(scripts, case.oracle(values, bad))
    ticks = ticks_of(scripts) if case.compare_state else []
    skipped, skipped_states = run_world(
        lambda *sources: case.create(bad, *sources), scripts, policy.settings, save_at=ticks, keyed=case.keyed
    )
    expected, expected_states = run_world(
        lambda *sources: case.create(frozenset(), *sources), oracle_scripts, save_at=ticks, keyed=case.keyed
    )
    assert skipped == expected
    assert skipped_states == expected_states  # the skipped elements left no trace in the state, at any tick
    reported = {case.element(value) for value in bad}  # type: ignore[arg-type]
    for call in policy.calls:
        assert call.operator == case.operator
        assert call.element in reported or (isinstance(call.element, list) and call.element[0] in bad)


@pytest.mark.parametrize("case", CASES, ids=repr)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=values_lists, bad=bad_sets)
def test_skip_under_bounded_demand_delivers_what_was_asked(
    case: Case, values: list[int], bad: frozenset[object]
) -> None:
    """One element at a time: a skipped element is replaced upstream, so the subscriber still gets every element it
    asked for, as the run without the failing elements gives them."""
    scripts = case.scripts(values, bad)
    oracle_scripts = keeping(scripts, case.oracle(values, bad))
    skipped, _ = run_world(
        lambda *sources: case.create(bad, *sources), scripts, skip_all().settings, keyed=case.keyed, request=1
    )
    expected, _ = run_world(
        lambda *sources: case.create(frozenset(), *sources), oracle_scripts, keyed=case.keyed, request=1
    )
    assert skipped == expected


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_stop_is_the_behaviour_without_a_policy(case: Case) -> None:
    values = [0, 1, 2, 3, 1, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    bad = frozenset({1})
    scripts = case.scripts(values, bad)
    policy = RecordingPolicy(skip=False)
    stopped, _ = run_world(lambda *sources: case.create(bad, *sources), scripts, policy.settings, keyed=case.keyed)
    unchanged, _ = run_world(lambda *sources: case.create(bad, *sources), scripts, keyed=case.keyed)
    assert stopped == unchanged
    assert has_error(stopped)
    assert len(policy.calls) == 1
    (call,) = policy.calls
    assert call.operator == case.operator
    assert call.element == case.element(1) or call.element == [1]
    error = stopped[-1].value
    assert isinstance(error, OnError)
    assert error.error is call.error  # the query stopped with the error the policy was told about


# -- index-based operators: a skipped element takes no index --------------------------------------------------------


def test_a_skipped_element_takes_no_index() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*script_of(["a", "b", "c", "d"]))
    policy = skip_all()
    result = scheduler.start(
        lambda: xs.map_indexed(lambda x, i: (1 // (x != "b")) and f"{i}:{x}"),
        context=scheduler.create_context(policy.settings),
    )
    assert result.values == ["0:a", "1:c", "2:d"]
    assert [(call.operator, type(call.error), call.element) for call in policy.calls] == [
        ("reaqtive:map+index", ZeroDivisionError, "b")
    ]


def test_a_slow_subscriber_gets_as_many_elements_as_it_asked_for() -> None:
    """Three asked at 250, while the source held seven: three of them are skipped at ``map`` and one dropped by
    ``filter``, each replaced upstream by a ``request(1)``, so the three elements arrive at 250 (and the completion,
    which needs no demand, right after them)."""
    from reaqtive.operators._fusion import stage_fusion

    for fused in (True, False):
        with stage_fusion(fused):
            scheduler = TestScheduler()
            xs = scheduler.create_hot_observable(*script_of([1, 0, 0, 2, 0, 5, 4]))
            observer = scheduler.create_observer(request=0)
            scheduler.schedule_absolute(250, observer.request, 3)
            policy = skip_all()
            result = scheduler.start(
                lambda: xs.map(lambda x: 10 // x).filter(lambda y: y != 5),  # noqa: B023
                context=scheduler.create_context(policy.settings),
                observer=observer,
            )
        assert result.messages == [
            Recorded(250, OnNext(10)), Recorded(250, OnNext(2)), Recorded(250, OnNext(2)), Recorded(250, OnCompleted())
        ]
        assert [str(request) for request in xs.requests] == ["3@250", "1@250", "1@250", "1@250", "1@250"]
        assert [call.element for call in policy.calls] == [0, 0, 0]


# -- fused runs -------------------------------------------------------------------------------------------------------


def fused_chain(bad_map: frozenset[object], bad_filter: frozenset[object], bad_scan: frozenset[object]) -> Any:
    """``map -> filter -> scan`` over the source, each failing on its own elements (known by the source's value:
    ``map`` makes ``x * 10``)."""

    def create(xs: Query[int]) -> Query[Any]:
        return (
            xs.map(lambda x: check(bad_map, x) or x * 10)
            .filter(lambda y: check(bad_filter, y // 10) or y % 30 != 0)
            .scan(0, lambda a, y: check(bad_scan, y // 10) or a + y)
        )

    return create


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=values_lists,
    bad_map=bad_sets,
    bad_filter=bad_sets,
    bad_scan=bad_sets,
    fused=st.booleans(),
    request=st.sampled_from([None, 1, 2]),
)
def test_a_fused_run_skips_at_each_step_and_goes_on(  # noqa: PLR0917 (hypothesis's arguments)
    values: list[int],
    bad_map: frozenset[object],
    bad_filter: frozenset[object],
    bad_scan: frozenset[object],
    fused: bool,
    request: int | None,
) -> None:
    from reaqtive.operators._fusion import stage_fusion

    policy = skip_all()
    all_bad = bad_map | bad_filter | bad_scan
    script = script_of(values)
    with stage_fusion(fused):
        skipped, skipped_states = run_world(
            fused_chain(bad_map, bad_filter, bad_scan), [script], policy.settings, save_at=ticks_of([script]),
            request=request,
        )
        oracle = keeping([script], without(values, all_bad))
        expected, expected_states = run_world(
            fused_chain(frozenset(), frozenset(), frozenset()), oracle, save_at=ticks_of([script]), request=request
        )
    assert skipped == expected
    assert skipped_states == expected_states
    # Each failing element was dropped at the first step that fails on it, which asked the policy about its own input.
    for call in policy.calls:
        if call.operator == "reaqtive:map":
            assert call.element in bad_map
        elif call.operator == "reaqtive:filter":
            assert call.element // 10 in bad_filter and call.element // 10 not in bad_map  # type: ignore[operator]
        else:
            assert call.operator == "reaqtive:scan+seed"
            assert call.element // 10 in bad_scan and call.element // 10 not in bad_map | bad_filter  # type: ignore[operator]


def test_a_fused_run_over_a_batching_source_skips_and_goes_on() -> None:
    """``from_iterable`` hands the fused run batches: a skip in the middle of one goes on with the next element."""
    from reaqtive.operators._fusion import stage_fusion

    values = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    for request in (None, 1, 3):
        results = []
        for fused in (True, False):
            with stage_fusion(fused):
                scheduler = TestScheduler()
                policy = skip_all()
                query = Query.from_iterable(values)
                observer = scheduler.create_observer(request=request)
                result = scheduler.start(
                    lambda: fused_chain(frozenset({2}), frozenset({5}), frozenset({7}))(query),  # noqa: B023
                    context=scheduler.create_context(policy.settings),
                    observer=observer,
                )
                results.append((result.values, [(c.operator, c.element) for c in policy.calls]))
        assert results[0] == results[1]
        # map skips 2; filter skips 50, drops 0, 30, 60, 90 (y % 30 == 0); scan skips 70: 10, 40, 80 are summed
        assert results[0][0] == [10, 50, 130]
        assert results[0][1] == [("reaqtive:map", 2), ("reaqtive:filter", 50), ("reaqtive:scan+seed", 70)]


# -- keyed group_by ... flat_map: the keyed path gives the general path's outputs under skip -------------------------

VARIANTS: list[Variant] = [
    *_keyed_cases.VARIANTS,
    *_keyed_cases_aggregates.VARIANTS,
    *_keyed_cases_take_skip.VARIANTS,
    *_keyed_cases_misc.VARIANTS,
    *_keyed_cases_windows.VARIANTS,
]
TIMED = set(map(repr, _keyed_cases_windows.TIMED))


@dataclass
class KeyedChain:
    key_fails: bool
    element_fails: bool
    chain: list[Variant] = field(default_factory=list)
    expire_after: int | None = None  # ticks

    def key(self, x: int) -> object:
        if self.key_fails and x == 13:
            raise KeyError("no key for 13")
        return [x] if self.key_fails and x == 19 else x % 3

    def element(self, x: int) -> object:
        if self.element_fails and x == 17:
            raise ValueError("no element for 17")
        return None if self.element_fails and x == 11 else x

    def inner(self, group: Query[Any]) -> Query[Any]:
        query = group
        for variant in self.chain:
            query = variant.apply(query)
        return query.map(lambda value: (group.key, value))

    def create(self, xs: Query[int]) -> Query[Any]:
        expire_after = None if self.expire_after is None else timedelta(seconds=self.expire_after)
        return xs.group_by(self.key, self.element, expire_after=expire_after).flat_map(self.inner)

    def __repr__(self) -> str:
        return (
            f"group_by(key fails={self.key_fails}, element fails={self.element_fails}, "
            f"expire_after={self.expire_after}).flat_map(g.{self.chain})"
        )


def runs_keyed(chain: KeyedChain) -> bool:
    """At most one time window in a chain, and none with expiry: the others keep the general path."""
    clocks = sum(1 for variant in chain.chain if repr(variant) in TIMED)
    return clocks == 0 or (clocks == 1 and chain.expire_after is None)


keyed_chains = st.builds(
    KeyedChain,
    key_fails=st.booleans(),
    element_fails=st.booleans(),
    chain=st.lists(st.sampled_from(VARIANTS), max_size=4),
    expire_after=st.sampled_from([None, None, 4, 7]),
).filter(runs_keyed)


@st.composite
def keyed_scripts(draw: st.DrawFn) -> Script:
    values = draw(st.lists(st.integers(0, 20), min_size=6, max_size=22))
    return script_of(values, complete=draw(st.booleans()))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=keyed_chains, script=keyed_scripts())
def test_keyed_and_general_paths_skip_the_same_elements(chain: KeyedChain, script: Script) -> None:
    """The variants' functions fail on chosen elements (``_keyed_cases``): under skip, the keyed stage and the general
    path (a subscription tree per group, each inner stage asking the policy) give the same messages, tick for tick."""
    keyed, _ = run_world(chain.create, [script], skip_all().settings, keyed=True)
    general, _ = run_world(chain.create, [script], skip_all().settings, keyed=False)
    assert keyed == general


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=keyed_chains, script=keyed_scripts(), demand=st.none() | st.just(Demand(initial=1, batch=1)))
def test_keyed_under_skip_survives_a_checkpoint_anywhere(
    chain: KeyedChain, script: Script, demand: Demand | None
) -> None:
    with keyed_execution(True):
        assert_checkpoint_anywhere(chain.create, script, demand=demand, settings=skip_all().settings,
                                   disposed=DISPOSED)


def test_a_skipped_element_changes_only_its_keys_record() -> None:
    """``g.map_indexed(...).scan(...)`` keyed, the scan failing on 7: the key's ``map_indexed`` counted it (it
    passed there, as the stage before a skipping stage does on the general path), its scan did not; the other keys'
    records are untouched. Saved states equal the general path's outputs and a checkpoint restarts from them."""
    values = [1, 2, 4, 7, 5, 8, 10, 11]

    def create(xs: Query[int]) -> Query[Any]:
        return xs.group_by(lambda x: x % 3).flat_map(
            lambda g: g.map_indexed(lambda x, i: (x, i))
            .scan(0, lambda a, xi: 1 // (xi[0] != 7) and a + xi[0] * 10 + xi[1])
            .map(lambda s: (g.key, s))
        )

    policy = skip_all()
    script = script_of(values)
    keyed, _ = run_world(create, [script], policy.settings, keyed=True)
    general, _ = run_world(create, [script], skip_all().settings, keyed=False)
    assert keyed == general
    # key 1: 1, 4, 7 (skipped at scan, index 2 used), 10 -> 10+0, +40+1, +100+3
    assert [m.value.value for m in keyed if isinstance(m.value, OnNext)] == [
        (1, 10), (2, 20), (1, 51), (2, 71), (2, 153), (1, 154), (2, 266)
    ]
    assert [(call.operator, call.element) for call in policy.calls] == [("reaqtive:group_by+keyed", (7, 2))]
    with keyed_execution(True):
        assert_checkpoint_anywhere(create, script, settings=skip_all().settings, disposed=DISPOSED)


# -- user functions without an element: the policy is told NO_ELEMENT ----------------------------------------------


def run_simple(create: Callable[[Query[int]], Query[Any]], values: Sequence[int], policy: RecordingPolicy | None
               ) -> list[Any]:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*script_of(values))
    context = scheduler.create_context(None if policy is None else policy.settings)
    return scheduler.start(lambda: create(xs), context=context).messages


def test_an_aggregates_result_that_raises_is_skipped_and_the_stage_completes() -> None:
    def create(xs: Query[int]) -> Query[Any]:
        return xs.aggregate(operator.add, 0, lambda total: 1 // 0)

    policy = skip_all()
    assert run_simple(create, [1, 2], policy) == [Recorded(208, OnCompleted())]
    assert [(call.operator, type(call.error), call.element) for call in policy.calls] == [
        ("reaqtive:aggregate+seed", ZeroDivisionError, NO_ELEMENT)
    ]
    stopped = run_simple(create, [1, 2], RecordingPolicy(skip=False))
    assert stopped == run_simple(create, [1, 2], None)
    assert isinstance(stopped[-1].value, OnError)


def test_a_none_result_is_skipped_too() -> None:
    policy = skip_all()
    messages = run_simple(lambda xs: xs.aggregate(operator.add, result_selector=lambda a: None), [1, 3], policy)
    assert messages == [Recorded(208, OnCompleted())]
    assert [(type(call.error), call.element) for call in policy.calls] == [(TypeError, NO_ELEMENT)]


def test_an_aggregate_without_elements_stops_whatever_the_policy() -> None:
    """An error of the operator itself (no element to aggregate) is no user error: the policy is not asked."""
    policy = skip_all()
    for create in (lambda xs: xs.min(), lambda xs: xs.average(), lambda xs: xs.aggregate(operator.add)):
        messages = run_simple(create, [], policy)
        assert isinstance(messages[-1].value, OnError)
        assert isinstance(messages[-1].value.error, ValueError)
    assert policy.calls == []


def test_do_on_complete_that_raises_is_skipped_and_the_stage_completes() -> None:
    policy = skip_all()
    messages = run_simple(lambda xs: xs.do(on_complete=lambda: 1 // 0), [1], policy)
    assert messages == [Recorded(201, OnNext(1)), Recorded(205, OnCompleted())]
    assert [call.element for call in policy.calls] == [NO_ELEMENT]
    stopped = run_simple(lambda xs: xs.do(on_complete=lambda: 1 // 0), [1], RecordingPolicy(skip=False))
    assert isinstance(stopped[-1].value, OnError)


@pytest.mark.parametrize(
    ("window", "rows"),
    [
        # tumbling [200, 210) and [210, 220): key 1 of the second sums to 3
        (Tumbling(timedelta(seconds=10)), [(1, -50), (0, 100), (0, 14)]),
        # sessions 4 ticks apart: key 1 at 201, then at 213 (sums to 3); key 0 from 204 to 210, then at 216
        (Session(timedelta(seconds=4)), [(1, -50), (0, 20), (0, 33)]),
    ],
    ids=["tumbling", "session"],
)
def test_a_window_whose_result_raises_closes_without_a_row(window: Any, rows: list[tuple[int, int]]) -> None:
    def create(xs: Query[int]) -> Query[Any]:
        fold = Fold(0, operator.add, lambda total: 100 // (total - 3))
        return xs.aggregate_by_key(lambda x: x % 2, window, fold).map(lambda row: (row[0], row[3]))

    policy = skip_all()
    messages = run_simple(create, [1, 2, 2, 4, 3, 6], policy)
    assert [message.value.value for message in messages if isinstance(message.value, OnNext)] == rows
    assert [call.element for call in policy.calls] == [NO_ELEMENT]
    assert isinstance(messages[-1].value, OnCompleted)
    stopped = run_simple(create, [1, 2, 2, 4, 3, 6], RecordingPolicy(skip=False))
    assert stopped == run_simple(create, [1, 2, 2, 4, 3, 6], None)
    assert isinstance(stopped[-1].value, OnError)


def test_the_keyed_path_skips_a_result_at_the_end_and_completes_the_rest() -> None:
    """``g.aggregate(...)`` whose result selector raises for one key, then ``count``: keyed as on the general path,
    that key's aggregate emits nothing, and the count after it still completes (with 0)."""

    def create(xs: Query[int]) -> Query[Any]:
        return xs.group_by(lambda x: x % 2).flat_map(
            lambda g: g.aggregate(operator.add, 0, lambda total: 10 // (total - 4)).count().map(
                lambda n: (g.key, n)
            )
        )

    script = script_of([1, 2, 3, 4])
    keyed, _ = run_world(create, [script], skip_all().settings, keyed=True)
    general, _ = run_world(create, [script], skip_all().settings, keyed=False)
    assert keyed == general
    assert [m.value.value for m in keyed if isinstance(m.value, OnNext)] == [(1, 0), (0, 1)]


# -- checkpoints under skip ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", [case for case in CASES if case.compare_state], ids=repr)
@pytest.mark.parametrize("demand", [None, Demand(initial=1, requests=((230, 2), (270, 20)))], ids=["unbounded", "slow"])
def test_skipping_survives_a_checkpoint_anywhere(case: Case, demand: Demand | None) -> None:
    """A skip under a restart at every tick (each skipped element replaced upstream under bounded demand); the
    outputs are those without the failing elements. (The slow subscriber asks for everything at last: a failing
    element still held upstream for lack of demand would hold back the completion that follows it.)"""
    values = [0, 3, 1, 4, 1, 5, 9, 2, 6, 5]
    bad = frozenset({1, 5})
    scripts = case.scripts(values, bad)
    with keyed_execution(case.keyed):
        report = check_checkpoint_anywhere(
            lambda *sources: case.create(bad, *sources), *scripts, settings=skip_all().settings, demand=demand,
            disposed=DISPOSED,
        )
        report.raise_on_failure()
        oracle = check_checkpoint_anywhere(
            lambda *sources: case.create(frozenset(), *sources), *keeping(scripts, case.oracle(values, bad)),
            demand=demand, ticks=(), chained=False, disposed=DISPOSED,
        )
    assert report.expected == oracle.expected


# -- the policy itself ------------------------------------------------------------------------------------------------


class Unreliable:
    """A policy that raises."""

    def skips(self, operator: Any, error: Exception, element: object) -> bool:
        raise RuntimeError("the dead letter store is down")


def test_a_policy_that_raises_stops_the_query_with_the_users_error_and_its_own_chained() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*script_of([1, 0, 2]))
    context = scheduler.create_context({ERROR_POLICY_SETTING: Unreliable()})
    messages = scheduler.start(lambda: xs.map(lambda x: 10 // x), context=context).messages
    assert messages[0] == Recorded(201, OnNext(10))
    last = messages[-1].value
    assert isinstance(last, OnError) and len(messages) == 2
    error = last.error
    assert isinstance(error, ZeroDivisionError)
    assert isinstance(error.__cause__, RuntimeError)
    assert "the dead letter store is down" in str(error.__cause__)
    assert any("error policy raised" in note for note in error.__notes__)


def test_a_policy_that_raises_under_a_lock_stops_the_keyed_stage() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*script_of([1, 2, 0, 3]))
    context = scheduler.create_context({ERROR_POLICY_SETTING: Unreliable()})
    messages = scheduler.start(
        lambda: xs.group_by(lambda x: x % 2).flat_map(lambda g: g.map(lambda x: 10 // x)), context=context
    ).messages
    assert [m.value.value for m in messages[:-1]] == [10, 5]
    assert isinstance(messages[-1].value, OnError)
    assert isinstance(messages[-1].value.error.__cause__, RuntimeError)


def test_a_policy_can_decide_per_error() -> None:
    policy = RecordingPolicy(skip=lambda operator, error, element: isinstance(error, ZeroDivisionError))
    messages = run_simple(lambda xs: xs.map(lambda x: 10 // x if x < 5 else {}[x]), [1, 0, 2, 7, 3], policy)
    assert [m.value.value for m in messages[:-1]] == [10, 5]
    assert isinstance(messages[-1].value, OnError) and isinstance(messages[-1].value.error, KeyError)
    assert [call.element for call in policy.calls] == [0, 7]
    assert policy.calls[0] == PolicyCall("reaqtive:map", policy.calls[0].error, 0)


def test_limits_and_upstream_errors_stop_whatever_the_policy() -> None:
    from reaqtive.operators.settings import MAX_LIST_SIZE
    from reaqtive.testing import on_error

    policy = skip_all()
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*script_of([1, 2, 3]))
    context = scheduler.create_context({**policy.settings, MAX_LIST_SIZE: 2})
    messages = scheduler.start(xs.to_list, context=context).messages
    assert isinstance(messages[-1].value, OnError)
    scheduler = TestScheduler()
    ys = scheduler.create_hot_observable(on_next(201, 1), on_error(205, BadElementError("upstream")))
    messages = scheduler.start(lambda: ys.map(str), context=scheduler.create_context(policy.settings)).messages
    assert isinstance(messages[-1].value, OnError)
    assert policy.calls == []
