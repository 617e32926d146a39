"""Keyed execution of ``flat_map``'s ``result_selector`` and ``max_concurrent`` over groups (issue 32, item 2).

The differential tests of ``test_keyed_groups.py``, extended: random keyed queries whose ``flat_map`` has a result
selector (``(g, value) -> (g.key, value)``, some failing or returning ``None`` on chosen values) and/or
``max_concurrent`` (keys beyond it wait for a slot, which a ``take`` frees), run keyed and on the general path:

* with unbounded demand, the same messages, tick for tick, errors included;
* with bounded demand, once everything was delivered, every key's outputs in the same order (else prefixes);
* keyed, the query survives a checkpoint anywhere under random bounded demand.

Then what the result selector is given (a group with ``.key``, one per key), the waiting keys' state, and the
binder's decision with its reasons (the same code ``explain`` reports).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from reaqtive import LimitExceededError, OperatorContext, Query, SimpleSubject, initialize, keyed_execution
from reaqtive.core.streams import LONG_MAX
from reaqtive.operators.keyed_groups import (
    KeyedGroup,
    KeyedGroups,
    KeyedGroupsBounded,
    is_key_pair,
    plan_keyed_groups,
)
from reaqtive.operators.keyed_steps import in_keyed_form
from reaqtive.operators.settings import MAX_QUEUE_SIZE
from reaqtive.state import CheckpointMode, load_subscription, save_subscription
from reaqtive.testing import TestScheduler, on_completed, on_next
from reaqtive.testing.checkpoint import Demand, assert_checkpoint_anywhere
from tests.operators._keyed_cases import Variant
from tests.operators.test_keyed_groups import (
    DISPOSED,
    ELEMENTS,
    KEYS,
    SLOW_DEMAND,
    TIMED,
    VARIANTS,
    KeyedCase,
    Script,
    check_bounded_demand,
    demands,
    restart_runs,
    run,
    scripts,
)
from tests.support import Recorder


def tag(group: Any, value: Any) -> tuple[object, Any]:
    return (group.key, value)


def tag_fails_on_8(group: Any, value: Any) -> tuple[object, Any]:
    if value == 8:
        raise ValueError("no result for 8")
    return (group.key, value)


def tag_none_on_10(group: Any, value: Any) -> tuple[object, Any] | None:
    return None if value == 10 else (group.key, value)


RESULTS = {"tag": tag, "tag, fails on 8": tag_fails_on_8, "tag, None on 10": tag_none_on_10}


class SelectorCase(KeyedCase):
    """:class:`KeyedCase` whose ``flat_map`` has a result selector (tagging with the key: the chain does not)
    and/or ``max_concurrent``."""

    def __init__(  # noqa: PLR0917 (the drawn parts of a case)
        self, key: str, element: str, max_groups: int | None, chain: list[Variant], expire_after: int | None,
        result: str | None, max_concurrent: int | None,
    ) -> None:
        super().__init__(key, element, max_groups, chain, expire_after)
        self.result, self.max_concurrent = result, max_concurrent

    def inner(self, group: Query[Any]) -> Query[Any]:
        if self.result is None:
            return super().inner(group)
        query = group
        for variant in self.chain:
            query = variant.apply(query)
        return query

    def create(self, xs: Query[int]) -> Query[Any]:
        grouped = xs.group_by(
            KEYS[self.key], ELEMENTS[self.element], max_groups=self.max_groups, expire_after=self.expire_after
        )
        selector = None if self.result is None else RESULTS[self.result]
        return grouped.flat_map(self.inner, selector, max_concurrent=self.max_concurrent)

    def __repr__(self) -> str:
        return f"{super().__repr__()} result={self.result} max_concurrent={self.max_concurrent}"


TAKES = [variant for variant in VARIANTS if variant.op in ("take", "first", "take_while", "element_at")]


@st.composite
def selector_cases(draw: st.DrawFn) -> SelectorCase:
    result = draw(st.sampled_from([None, *sorted(RESULTS)]))
    max_concurrent = draw(st.sampled_from([None, 1, 2]))
    if result is None and max_concurrent is None:
        result = "tag"
    chain = draw(st.lists(st.sampled_from(VARIANTS), max_size=3))
    if max_concurrent is not None and draw(st.booleans()):
        chain.append(draw(st.sampled_from(TAKES)))  # chains that end free slots
    expire_after = None if max_concurrent is not None else draw(st.sampled_from([None, None, 2, 4, 7]))
    assume(clocks_run_keyed(chain, expire_after, max_concurrent))
    return SelectorCase(
        draw(st.sampled_from(sorted(KEYS))), draw(st.sampled_from(sorted(ELEMENTS))),
        draw(st.sampled_from([None, None, 2])), chain, expire_after, result, max_concurrent,
    )


def clocks_run_keyed(chain: list[Variant], expire_after: object, max_concurrent: object) -> bool:
    """A chain with a time window runs keyed with one window, no ``expire_after`` and no ``max_concurrent``
    (``keyed_timed.general_reason``)."""
    clocks = sum(1 for variant in chain if repr(variant) in TIMED)
    return clocks == 0 or (clocks == 1 and expire_after is None and max_concurrent is None)


def is_keyed(case: SelectorCase) -> bool:
    source = Query.from_iterable([0]).group_by(KEYS[case.key], expire_after=case.expire_after)
    selector = None if case.result is None else RESULTS[case.result]
    return not isinstance(plan_keyed_groups(source, case.inner, selector, case.max_concurrent), str)


TAKE_2 = next(v for v in VARIANTS if v.label == "take(2)")
EXAMPLE = SelectorCase("x%3", "no element selector", None, [TAKE_2], None, "tag", 1)
EXAMPLE_SCRIPT: Script = [on_next(201 + 3 * i, x) for i, x in enumerate([1, 2, 4, 5, 7, 3, 8, 6])]
EXAMPLE_SCRIPT.append(on_completed(240))


# -- the differential property --------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=selector_cases(), script=scripts())
@example(case=EXAMPLE, script=EXAMPLE_SCRIPT)
def test_keyed_and_general_paths_give_the_same_messages(case: SelectorCase, script: Script) -> None:
    assert is_keyed(case), f"{case} should run keyed"
    assert run(case, script, keyed=True) == run(case, script, keyed=False)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=selector_cases(), script=scripts(), demand=demands)
@example(  # a time window in the chain: the source held back by the demand delivers later, into a later window
    case=SelectorCase("None key for x%4==0", "None for 11", None,
                      [next(v for v in VARIANTS if v.label == "window(7s).flat_map(tally).filter(non-empty)")],
                      None, "tag", None),
    script=[on_next(201, 0), on_next(204, 0), on_next(207, 1), on_next(210, 0), on_completed(217)],
    demand=Demand(initial=0, requests=((203, 1),), batch=0),
)
def test_under_bounded_demand_every_keys_outputs_are_the_same(
    case: SelectorCase, script: Script, demand: Demand
) -> None:
    check_bounded_demand(case, script, demand)  # one check for both files: a time window in the chain included


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=selector_cases(), script=scripts(max_size=14), demand=st.none() | demands, runs=restart_runs)
def test_keyed_survives_a_checkpoint_anywhere(
    case: SelectorCase, script: Script, demand: Demand | None, runs: list[list[int]]
) -> None:
    with keyed_execution(True):
        assert_checkpoint_anywhere(case.create, script, demand=demand, runs=runs, disposed=DISPOSED)


@pytest.mark.parametrize("max_concurrent", [None, 1, 2])
@pytest.mark.parametrize("result", sorted(RESULTS))
@pytest.mark.parametrize("variant", VARIANTS, ids=repr)
def test_every_keyed_form_with_a_selector_survives_a_checkpoint_anywhere_under_bounded_demand(
    variant: Variant, result: str, max_concurrent: int | None
) -> None:
    values = [3, 4, 7, 1, 9, 0, 5, 2, 6, 8, 4, 10, 11, 16, 15, 20, 12, 14]
    script: Script = [on_next(201 + 3 * i, x) for i, x in enumerate(values)] + [on_completed(262)]
    case = SelectorCase("x%3", "no element selector", None, [variant], None, result, max_concurrent)
    if not clocks_run_keyed([variant], None, max_concurrent):
        pytest.skip("a time window with max_concurrent keeps the general path")
    assert is_keyed(case)
    assert run(case, script, keyed=True) == run(case, script, keyed=False)
    with keyed_execution(True):
        assert_checkpoint_anywhere(case.create, script, demand=SLOW_DEMAND, disposed=DISPOSED)


# -- what the result selector is given ------------------------------------------------------------------------------


def test_the_result_selector_gets_one_group_per_key_with_its_key() -> None:
    seen: list[Any] = []

    def note(group: Any, count: int) -> tuple[object, int]:
        seen.append(group)
        return (group.key, count)

    source = SimpleSubject[str]()
    query = source.as_query().group_by(lambda s: s[0]).flat_map(lambda g: g.scan(0, lambda n, _: n + 1), note)
    recorder = Recorder(initial=LONG_MAX)
    handle = query.subscribe(recorder)
    assert isinstance(handle, KeyedGroups)
    initialize(handle, OperatorContext("sub://tag", TestScheduler()))
    for item in ["a1", "b1", "a2"]:
        source.on_next(item)
    assert recorder.values == [("a", 1), ("b", 1), ("a", 2)]
    assert all(isinstance(group, KeyedGroup) for group in seen)
    assert [group.key for group in seen] == ["a", "b", "a"]
    assert seen[0] == seen[2] and hash(seen[0]) == hash(seen[2]) and seen[0] != seen[1]  # equal by key
    assert repr(seen[1]) == "KeyedGroup(key='b')"
    with pytest.raises(AttributeError):
        seen[0].key = "c"  # type: ignore[misc]  # read-only, as a group's key is


def test_a_key_pair_selector_is_recognised_by_its_code_and_puts_out_what_calling_it_would() -> None:
    prefix = "k"

    def pair(group: Any, value: Any) -> tuple[object, Any]:
        """A docstring does not matter."""
        return (group.key, value)

    assert is_key_pair(tag) and is_key_pair(pair) and is_key_pair(lambda g, n: (g.key, n))
    assert not is_key_pair(lambda g, n: (n, g.key))  # other order
    assert not is_key_pair(lambda g, n: (g.name, n))  # another attribute
    assert not is_key_pair(lambda g, n: (g.key, n, prefix))  # more read (a closure)
    assert not is_key_pair(lambda g, n=1: (g.key, n) if n else None)
    assert not is_key_pair(tag_fails_on_8) and not is_key_pair(print) and not is_key_pair(None)

    def counts(selector: Any) -> list[Any]:
        source = SimpleSubject[str]()
        query = source.as_query().group_by(lambda s: s[0]).flat_map(lambda g: g.scan(0, lambda n, _: n + 1), selector)
        recorder = Recorder(initial=LONG_MAX)
        handle = query.subscribe(recorder)
        assert isinstance(handle, KeyedGroups)
        initialize(handle, OperatorContext("sub://pair", TestScheduler()))
        for item in ["a1", "b1", "a2"]:
            source.on_next(item)
        return recorder.values

    # Built by the stage (recognised) and by calling the selector (not recognised: it reads a global): the same.
    assert counts(pair) == counts(lambda g, n: tuple((g.key, n))) == [("a", 1), ("b", 1), ("a", 2)]


# -- max_concurrent ------------------------------------------------------------------------------------------------


def bounded(source: Query[int], limit: int) -> Query[Any]:
    return source.group_by(lambda x: x % 10).flat_map(lambda g: g.take(2), tag, max_concurrent=limit)


def test_keys_beyond_max_concurrent_wait_and_their_state_survives_a_restart() -> None:
    source = SimpleSubject[int]()
    first = bounded(source.as_query(), 1).subscribe(Recorder(initial=LONG_MAX))
    assert isinstance(first, KeyedGroupsBounded)
    initialize(first, OperatorContext("sub://bounded", TestScheduler()))
    for x in [1, 2, 12, 3]:  # key 1 live; keys 2 (two elements) and 3 wait
        source.on_next(x)
    assert first._waiting == {2: [2, 12], 3: [3]}
    blob = save_subscription(first, CheckpointMode.FULL)
    first.dispose()

    source2 = SimpleSubject[int]()
    recorder = Recorder(initial=LONG_MAX)
    second = bounded(source2.as_query(), 1).subscribe(recorder)
    initialize(second, OperatorContext("sub://bounded", TestScheduler()), lambda h: load_subscription(h, blob))
    source2.on_next(11)  # key 1's second element: its take ends, key 2 takes the slot (and ends), then key 3
    source2.on_next(13)
    assert recorder.values == [(1, 11), (2, 2), (2, 12), (3, 3), (3, 13)]


def test_waiting_keys_and_their_elements_are_bounded_as_group_by_bounds_them() -> None:
    source = SimpleSubject[int]()
    recorder = Recorder(initial=LONG_MAX)
    handle = bounded(source.as_query(), 1).subscribe(recorder)
    initialize(handle, OperatorContext("sub://held", TestScheduler(), settings={MAX_QUEUE_SIZE: 3}))
    for x in [1, 2, 12, 22]:  # key 2 waits (1) with three elements: 4 > 3
        source.on_next(x)
    (error,) = recorder.errors
    assert isinstance(error, LimitExceededError)
    assert error.setting == MAX_QUEUE_SIZE and error.limit == 3


def test_keyed_and_general_agree_on_waiting_keys_of_a_finite_source() -> None:
    events = [1, 2, 12, 3, 11, 13, 4, 22, 5, 14, 23, 24, 15]
    results = []
    for keyed in (True, False):
        recorder = Recorder(initial=LONG_MAX)
        with keyed_execution(keyed):
            handle = bounded(Query.from_iterable(events), 2).subscribe(recorder)
            assert isinstance(handle, KeyedGroupsBounded) == keyed
            scheduler = TestScheduler()
            initialize(handle, OperatorContext("sub://finite", scheduler))
            scheduler.advance_by(10)
        assert recorder.completed, recorder.errors
        results.append(recorder.values)
    assert results[0] == results[1]
    firsts: dict[int, list[int]] = {}
    for x in events:
        firsts.setdefault(x % 10, [])
        if len(firsts[x % 10]) < 2:
            firsts[x % 10].append(x)  # take(2): each key's first two
    assert sorted(results[0]) == sorted((key, x) for key, xs in firsts.items() for x in xs)


# -- the decision and its reasons -----------------------------------------------------------------------------------


def groups() -> Query[int]:
    return Query.from_iterable(range(6)).group_by(lambda x: x % 2)


@pytest.mark.parametrize(
    ("selector", "result_selector", "max_concurrent", "reason"),
    [
        (lambda g: g.window(2).merge_all(), None, None, "operators 'window', 'merge_all' have no keyed step"),
        (lambda g: g.map(lambda x: (g.key, x)) if g.key else g, None, None, "reads the group's key"),
        (lambda g: g.scan([], lambda a, x: [*a, x]), None, None, "mutable seed"),
        (lambda g: g.merge(Query.from_iterable([9])), None, None, "operator 'merge' has no keyed step"),
        (lambda g: Query.from_iterable([1]), None, None, "not a chain of operators over the group"),
        (lambda g: 1 // 0, None, None, "raised ZeroDivisionError"),
    ],
)
def test_the_decision_names_why_a_query_keeps_the_general_path(
    selector: Any, result_selector: Any, max_concurrent: int | None, reason: str
) -> None:
    decision = plan_keyed_groups(groups(), selector, result_selector, max_concurrent)
    assert isinstance(decision, str) and reason in decision


def test_a_subscription_of_the_form_before_selectors_keeps_the_general_path_for_them() -> None:
    with in_keyed_form(1):
        tagged = plan_keyed_groups(groups(), lambda g: g.count(), tag, None)
        limited = plan_keyed_groups(groups(), lambda g: g.count(), None, 2)
        plain = plan_keyed_groups(groups(), lambda g: g.count(), None, None)
    assert isinstance(tagged, str) and "result_selector" in tagged
    assert isinstance(limited, str) and "max_concurrent" in limited
    assert not isinstance(plain, str)
    with in_keyed_form(1):
        handle = groups().flat_map(lambda g: g.count(), tag).subscribe(Recorder(initial=LONG_MAX))
    assert not isinstance(handle, KeyedGroups)


def test_expiring_groups_with_max_concurrent_keep_the_general_path_saying_why() -> None:
    source = Query.from_iterable(range(6)).group_by(lambda x: x % 2, expire_after=timedelta(seconds=5))
    decision = plan_keyed_groups(source, lambda g: g.count(), None, 2)
    assert isinstance(decision, str) and "expire_after" in decision
