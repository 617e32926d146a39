"""Keyed execution of ``group_by ... flat_map`` gives the general path's results (issue 17, item 1).

The differential property: random keyed queries (a key selector, maybe an element selector and a group limit, a
chain of inner operators drawn from every operator with a keyed step, some of whose functions fail), over random
inputs that complete, fail or stop, run once keyed and once on the general path (a subscription tree per group):

* with unbounded demand, the outputs are the same, message for message and tick for tick, errors included;
* with bounded, slow demand, once everything was delivered, every key's outputs are the same in the same order
  (the order across keys may differ: the general path drains its per-group queues in turns); when demand ran out
  or an error dropped queued results, each key's outputs are a prefix of its own (the general path holds a new
  group's elements until ``flat_map`` asks for the group, the keyed path processes each element as it arrives);
* keyed, the query survives a checkpoint anywhere under random bounded demand (the harness of
  ``reaqtive.testing.checkpoint``: restarted at every active tick and at random ticks, with the outputs of the
  uninterrupted run).

Then the rules of the choice: what keeps the general path, the key seen by the chain's functions, and the state.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reaqtive import (
    LimitExceededError,
    OperatorContext,
    Query,
    SimpleSubject,
    initialize,
    keyed_execution,
)
from reaqtive.core.streams import LONG_MAX
from reaqtive.operators.keyed_groups import KeyedGroupProbe, KeyedGroups, KeyedGroupsExpiring, keyed_chain
from reaqtive.operators.keyed_steps import keyed_step_factory
from reaqtive.state import InnerEnvironment, StateFormatError
from reaqtive.testing import Notification, OnError, Recorded, TestScheduler, on_completed, on_error, on_next
from reaqtive.testing.checkpoint import Demand, assert_checkpoint_anywhere, check_checkpoint_anywhere
from tests.operators import (
    _keyed_cases,
    _keyed_cases_aggregates,
    _keyed_cases_misc,
    _keyed_cases_take_skip,
    _keyed_cases_windows,
)
from tests.operators._keyed_cases import Variant
from tests.support import Recorder

VARIANTS: list[Variant] = [
    *_keyed_cases.VARIANTS,
    *_keyed_cases_aggregates.VARIANTS,
    *_keyed_cases_take_skip.VARIANTS,
    *_keyed_cases_misc.VARIANTS,
    *_keyed_cases_windows.VARIANTS,
]
TIMED = set(map(repr, _keyed_cases_windows.TIMED))

DISPOSED = 400
Script = list[Recorded[Notification[Any]]]


def key_13_fails(x: int) -> int:
    if x == 13:
        raise KeyError("no key for 13")
    return x % 3


KEYS: dict[str, Callable[[int], object]] = {
    "x%2": lambda x: x % 2,
    "x%3": lambda x: x % 3,
    "x%5": lambda x: x % 5,
    "one key": lambda x: "all",
    "None key for x%4==0": lambda x: None if x % 4 == 0 else x % 2,
    "key fails on 13": key_13_fails,
    "unhashable key for 19": lambda x: [x] if x == 19 else x % 2,
}
ELEMENTS: dict[str, Callable[[int], object] | None] = {
    "no element selector": None,
    "x*2": lambda x: x * 2,
    "None for 11": lambda x: None if x == 11 else x,
    "fails on 17": lambda x: 1 // (x - 17) and x,
}


class KeyedCase:
    """One random keyed query: ``xs.group_by(key, element, max_groups=).flat_map(chain tagged with the key)``."""

    def __init__(
        self, key: str, element: str, max_groups: int | None, chain: list[Variant], expire_after: int | None = None
    ) -> None:
        self.key, self.element, self.max_groups, self.chain = key, element, max_groups, chain
        self.expire_after = None if expire_after is None else timedelta(seconds=expire_after)  # ticks

    def inner(self, group: Query[Any]) -> Query[Any]:
        query = group
        for variant in self.chain:
            query = variant.apply(query)
        return query.map(lambda value: (group.key, value))

    def create(self, xs: Query[int]) -> Query[Any]:
        grouped = xs.group_by(
            KEYS[self.key], ELEMENTS[self.element], max_groups=self.max_groups, expire_after=self.expire_after
        )
        return grouped.flat_map(self.inner)

    def __repr__(self) -> str:
        chain = ".".join(map(repr, self.chain)) or "(identity)"
        expiry = "" if self.expire_after is None else f", expire_after={self.expire_after.seconds} ticks"
        return f"group_by({self.key}, {self.element}, max_groups={self.max_groups}{expiry}).flat_map(g.{chain})"


def runs_keyed(case: KeyedCase) -> bool:
    """Whether the case's chain and expiry run keyed: a chain with a clock (a time window) has only one, and no
    ``expire_after`` (the general path keeps the others, see ``keyed_timed.general_reason``)."""
    clocks = sum(1 for variant in case.chain if repr(variant) in TIMED)
    return clocks == 0 or (clocks == 1 and case.expire_after is None)


cases = st.builds(
    KeyedCase,
    key=st.sampled_from(sorted(KEYS)),
    element=st.sampled_from(sorted(ELEMENTS)),
    max_groups=st.sampled_from([None, None, None, 2]),
    chain=st.lists(st.sampled_from(VARIANTS), max_size=4),
    expire_after=st.sampled_from([None, None, 2, 3, 4, 7, 12]),  # ticks; elements come every 3 ticks
).filter(runs_keyed)


@st.composite
def scripts(draw: st.DrawFn, max_size: int = 24) -> Script:
    values = draw(st.lists(st.integers(0, 20), max_size=max_size))
    script: Script = [on_next(201 + 3 * index, value) for index, value in enumerate(values)]
    end = 205 + 3 * len(values)
    terminal = draw(st.sampled_from(["completed", "completed", "error", "none"]))
    if terminal == "completed":
        script.append(on_completed(end))
    elif terminal == "error":
        script.append(on_error(end, RuntimeError("source failed")))
    return script


demands = st.builds(
    Demand,
    initial=st.integers(0, 3),
    requests=st.lists(st.tuples(st.integers(200, 300), st.integers(1, 4)), max_size=5).map(
        lambda pairs: tuple(sorted(pairs))
    ),
    batch=st.sampled_from([0, 1, 2]),
)


def run(case: KeyedCase, script: Script, *, keyed: bool, demand: Demand | None = None) -> tuple[Any, ...]:
    """The messages of an uninterrupted run, bound keyed or on the general path."""
    with keyed_execution(keyed):
        report = check_checkpoint_anywhere(
            case.create, script, ticks=(), chained=False, demand=demand, disposed=DISPOSED
        )
    return report.expected


def by_key(messages: tuple[Any, ...]) -> tuple[dict[object, list[object]], list[Any]]:
    """Each key's outputs in order, and the terminal messages (their kind and error)."""
    outputs: dict[object, list[object]] = defaultdict(list)
    ends: list[Any] = []
    for message in messages:
        value = message.value
        if value.kind.name == "ON_NEXT":
            key, output = value.value
            outputs[repr(key)].append(output)
        else:
            ends.append(value)
    return dict(outputs), ends


def is_keyed(case: KeyedCase) -> bool:
    return keyed_chain(case.inner, KeyedGroupProbe.new()) is not None


# -- the differential property --------------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases, script=scripts())
@example(  # two keys' windows end at 217: key 1's average goes out before key None's empty window fails
    case=KeyedCase(
        "None key for x%4==0",
        "None for 11",
        None,
        [next(v for v in VARIANTS if v.label == "window(4s).flat_map(average)")],
    ),
    script=[on_next(201, 0), on_next(204, 0), on_next(207, 0), on_next(210, 0), on_next(213, 1), on_completed(220)],
)
def test_keyed_and_general_paths_give_the_same_messages(case: KeyedCase, script: Script) -> None:
    assert is_keyed(case), f"{case} should run keyed"
    assert run(case, script, keyed=True) == run(case, script, keyed=False)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases, script=scripts(), demand=demands)
@example(  # the general path holds key 0's group (its element fails) and goes on with key 1
    case=KeyedCase("x%5", "None for 11", None, [next(v for v in VARIANTS if v.label == "do(fails on 5)")]),
    script=[on_next(201, 1), on_next(204, 2), on_next(207, 5), on_next(210, 1), on_completed(217)],
    demand=Demand(initial=1, requests=((210, 2),), batch=0),
)
@example(  # a time buffer: the source held back by the demand delivers 207 and 210 into one buffer, on both paths
    case=KeyedCase("None key for x%4==0", "None for 11", None, [next(v for v in VARIANTS if v.label == "buffer(4s)")]),
    script=[on_next(201, 0), on_next(204, 0), on_next(207, 0), on_next(210, 0), on_completed(217)],
    demand=Demand(initial=0, requests=((202, 2),), batch=0),
)
def test_under_bounded_demand_every_keys_outputs_are_the_same(case: KeyedCase, script: Script, demand: Demand) -> None:
    check_bounded_demand(case, script, demand)


def check_bounded_demand(case: KeyedCase, script: Script, demand: Demand) -> None:
    """Under bounded ``demand``, the keyed and the general path agree per key (also the forms with result selectors
    and ``max_concurrent``: ``test_keyed_selectors``)."""
    keyed, keyed_ends = by_key(run(case, script, keyed=True, demand=demand))
    general, general_ends = by_key(run(case, script, keyed=False, demand=demand))
    unbounded, unbounded_ends = by_key(run(case, script, keyed=True))  # with the hot source's own timing
    completed = [end for end in keyed_ends + general_ends if not isinstance(end, OnError)]
    if case.expire_after is None and len(completed) == 2:
        assert keyed == general  # everything was delivered: the same results per key, in the same order
        return
    # Not everything was delivered (the demand ran out, or an error dropped the results still queued), or groups
    # expired: the general path holds a new group's elements until flat_map asks for the group, so under bounded
    # demand it may process them (and time their expiry) later than the keyed path, which processes every element
    # as it arrives. Each key's outputs, on either path, are a prefix of what the key produces with unbounded
    # demand; the keyed path ends as it does with unbounded demand, or not yet. (With expiry, a source held back
    # by the demand delivers elements later, which changes what expires: only the checkpoint test covers it. The same
    # holds for a time window or buffer in the chain: elements delivered later fall into later windows.)
    timed = any(repr(variant) in TIMED for variant in case.chain)
    if case.expire_after is None and not timed:
        # The general path may also deliver *more* than the unbounded run of a key when that run failed: the element
        # that failed it, in a group held back, is then processed later (or never), and other keys go on meanwhile.
        failed = any(isinstance(end, OnError) for end in unbounded_ends)
        for outputs in (keyed, general) if not failed else (keyed,):
            for key, values in outputs.items():
                assert values == unbounded[key][: len(values)]
        assert keyed_ends in ([], unbounded_ends)


restart_runs = st.lists(
    st.lists(st.integers(200, 290), min_size=1, max_size=4).map(lambda ticks: sorted(set(ticks))), max_size=2
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases, script=scripts(max_size=14), demand=st.none() | demands, runs=restart_runs)
@example(  # a window's to_list appends in place: the key's page must be saved after each element
    case=KeyedCase(
        "None key for x%4==0",
        "None for 11",
        None,
        [next(v for v in VARIANTS if v.label == "window(10s).flat_map(to_list)")],
    ),
    script=[on_next(201, 0), on_next(204, 0), on_completed(211)],
    demand=None,
    runs=[],
)
def test_keyed_survives_a_checkpoint_anywhere(
    case: KeyedCase, script: Script, demand: Demand | None, runs: list[list[int]]
) -> None:
    with keyed_execution(True):
        assert_checkpoint_anywhere(case.create, script, demand=demand, runs=runs, disposed=DISPOSED)


SLOW_DEMAND = Demand(initial=1, requests=((215, 2), (240, 1), (262, 5), (300, 50)))


@pytest.mark.parametrize("expire_after", [None, 4], ids=["groups", "expiring"])
@pytest.mark.parametrize("variant", VARIANTS, ids=repr)
def test_every_keyed_form_survives_a_checkpoint_anywhere_under_bounded_demand(
    variant: Variant, expire_after: int | None
) -> None:
    values = [3, 4, 7, 1, 9, 0, 5, 2, 6, 8, 4, 10, 11, 16, 15, 20, 12, 14]
    script: Script = [on_next(201 + 3 * i, x) for i, x in enumerate(values)] + [on_completed(262)]
    case = KeyedCase("x%3", "no element selector", None, [variant, *variant_tail(variant)], expire_after)
    if not runs_keyed(case):
        pytest.skip("a time window with expire_after keeps the general path")
    assert is_keyed(case)
    with keyed_execution(True):
        assert_checkpoint_anywhere(case.create, script, demand=SLOW_DEMAND, disposed=DISPOSED)


def variant_tail(variant: Variant) -> list[Variant]:
    """A second operator after ``variant`` (a count), so that what it emits is folded again at the end."""
    return [next(v for v in VARIANTS if v.label == "scan(0, count)")]


def test_every_operator_with_a_keyed_step_has_variants() -> None:
    from reaqtive.core.binding import registered_operators

    def built_in(op: str) -> bool:  # (a package of the user's, such as the example's signals:clamp, has its own)
        factory = keyed_step_factory(op)
        return factory is not None and factory.__module__.startswith("reaqtive.")

    with_steps = {op for op in registered_operators() if built_in(op)}
    assert with_steps == {variant.op for variant in VARIANTS}


@pytest.mark.parametrize("variant", VARIANTS, ids=repr)
def test_each_variant_alone_matches_on_a_fixed_script(variant: Variant) -> None:
    values = [3, 4, 7, 1, 9, 0, 5, 2, 6, 8, 4, 10, 11, 13, 16, 15, 20, 12, 14]
    script: Script = [on_next(201 + 2 * i, x) for i, x in enumerate(values)] + [on_completed(260)]
    case = KeyedCase("x%3", "no element selector", None, [variant])
    assert is_keyed(case)
    assert run(case, script, keyed=True) == run(case, script, keyed=False)


# -- what keeps the general path ------------------------------------------------------------------------------------


def bound_stage(query: Query[Any]) -> object:
    handle = query.subscribe(Recorder(initial=LONG_MAX))
    return handle


def groups() -> Query[int]:
    return Query.from_iterable(range(6)).group_by(lambda x: x % 2)


def key_at_selection(g: Query[Any]) -> Query[Any]:
    return g.take(1) if g.key == 0 else g  # type: ignore[attr-defined]


def key_captured(g: Query[Any]) -> Query[Any]:
    key = g.key  # type: ignore[attr-defined]
    return g.map(lambda x: (key, x))


NOT_KEYED: dict[str, Callable[[], Query[Any]]] = {
    "the key read while selecting": lambda: groups().flat_map(key_at_selection),
    "the key captured while selecting": lambda: groups().flat_map(key_captured),
    "a mutable seed": lambda: groups().flat_map(lambda g: g.scan([], lambda a, x: [*a, x])),
    "another stream": lambda: groups().flat_map(lambda g: g.merge(Query.from_iterable([9]))),
    "a higher-order inner query": lambda: groups().flat_map(lambda g: g.window(2).merge_all()),
    "max_concurrent with expiring groups": lambda: Query.from_iterable(range(6))
    .group_by(lambda x: x % 2, expire_after=timedelta(seconds=5))
    .flat_map(lambda g: g.map(str), max_concurrent=4),
    "a selector that fails": lambda: groups().flat_map(lambda g: 1 // 0),
    "not a group_by": lambda: Query.from_iterable(range(3)).flat_map(lambda x: Query.from_iterable([x])),
    "a stream that is not the group": lambda: groups().flat_map(lambda g: Query.from_iterable([1])),
}


@pytest.mark.parametrize("label", sorted(NOT_KEYED))
def test_what_keeps_the_general_path(label: str) -> None:
    handle = bound_stage(NOT_KEYED[label]())
    assert not isinstance(handle, KeyedGroups)


def test_expiring_groups_run_keyed_too() -> None:
    grouped = Query.from_iterable(range(6)).group_by(lambda x: x % 2, expire_after=timedelta(seconds=5))
    query = grouped.flat_map(lambda g: g.scan(0, operator.add))
    assert isinstance(bound_stage(query), KeyedGroupsExpiring)


def test_keyed_chains_run_keyed_and_the_switch_turns_it_off() -> None:
    query = groups().flat_map(lambda g: g.scan(0, operator.add))
    assert isinstance(bound_stage(query), KeyedGroups)
    with keyed_execution(False):
        assert not isinstance(bound_stage(query), KeyedGroups)


def test_the_chains_functions_see_the_key_of_the_element_at_hand_also_at_the_end() -> None:
    seen: list[object] = []

    def counted(g: Query[Any]) -> Query[Any]:
        def note(s: str) -> str:
            seen.append(g.key)  # type: ignore[attr-defined]
            return s

        return g.map(note).scan(0, lambda n, s: n + 1).map(lambda n: (g.key, n))  # type: ignore[attr-defined]

    source = SimpleSubject[str]()
    query = source.as_query().group_by(lambda s: s[0]).flat_map(counted)
    recorder = Recorder(initial=LONG_MAX)
    handle = query.subscribe(recorder)
    assert isinstance(handle, KeyedGroups)
    initialize(handle, OperatorContext("sub://x", TestScheduler()))
    for item in ["a1", "b1", "a2", "c1"]:
        source.on_next(item)
    assert seen == ["a", "b", "a", "c"]
    assert recorder.values == [("a", 1), ("b", 1), ("a", 2), ("c", 1)]


def test_a_new_key_beyond_max_groups_fails_as_the_general_path_does() -> None:
    script: Script = [on_next(201, 1), on_next(202, 2), on_next(203, 1), on_next(204, 3), on_completed(210)]
    case = KeyedCase("x%5", "no element selector", 2, [])
    keyed = run(case, script, keyed=True)
    assert keyed == run(case, script, keyed=False)
    assert isinstance(keyed[-1].value, OnError) and isinstance(keyed[-1].value.error, LimitExceededError)


# -- state ----------------------------------------------------------------------------------------------------------


def running_sums(xs: Query[tuple[str, int]]) -> Query[Any]:
    return xs.group_by(operator.itemgetter(0), operator.itemgetter(1)).flat_map(
        lambda g: g.scan(0, operator.add).map(lambda total: (g.key, total))
    )


def test_standalone_a_keyed_query_saves_and_loads_every_key_in_its_own_blob() -> None:
    from reaqtive.state import CheckpointMode, load_subscription, save_subscription

    source = SimpleSubject[tuple[str, int]]()
    first = running_sums(source.as_query()).subscribe(Recorder(initial=LONG_MAX))
    initialize(first, OperatorContext("sub://standalone", TestScheduler()))
    for item in [("a", 1), ("b", 10), ("a", 2)]:
        source.on_next(item)
    blob = save_subscription(first, CheckpointMode.FULL)
    first.dispose()

    source2 = SimpleSubject[tuple[str, int]]()
    recorder = Recorder(initial=LONG_MAX)
    second = running_sums(source2.as_query()).subscribe(recorder)
    initialize(second, OperatorContext("sub://standalone", TestScheduler()), lambda h: load_subscription(h, blob))
    source2.on_next(("a", 4))
    source2.on_next(("b", 1))
    assert recorder.values == [("a", 7), ("b", 11)]


def test_a_record_that_is_not_the_chains_is_refused_naming_the_key() -> None:
    environment = InnerEnvironment()
    source = SimpleSubject[tuple[str, int]]()
    handle = running_sums(source.as_query()).subscribe(Recorder(initial=LONG_MAX))
    assert isinstance(handle, KeyedGroups)
    initialize(handle, OperatorContext("sub://forged", TestScheduler(), execution_environment=environment))
    source.on_next(("a", 1))
    table = handle._table
    table.put("a", (None,))  # scan+seed's field is never None
    with pytest.raises(StateFormatError, match=r"key 'a'.*keyed_page"):
        handle._check_records("here")


def test_a_changed_inner_query_cannot_read_the_records_of_another() -> None:
    from reaqtive.state import CheckpointMode, load_subscription, save_subscription

    source = SimpleSubject[tuple[str, int]]()
    first = running_sums(source.as_query()).subscribe(Recorder(initial=LONG_MAX))
    initialize(first, OperatorContext("sub://changed", TestScheduler()))
    source.on_next(("a", 1))
    blob = save_subscription(first, CheckpointMode.FULL)
    other = (
        SimpleSubject[tuple[str, int]]()
        .as_query()
        .group_by(operator.itemgetter(0))
        .flat_map(lambda g: g.map(str).scan(0, lambda a, x: a + 1))
    )
    second = other.subscribe(Recorder(initial=LONG_MAX))
    with pytest.raises(StateFormatError, match="chain"):
        initialize(second, OperatorContext("sub://changed", TestScheduler()), lambda h: load_subscription(h, blob))
