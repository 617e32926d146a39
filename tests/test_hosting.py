"""The query host (reaqtive.state.host): bind, feed, advance, save and load a query with its inner units."""

from __future__ import annotations

import doctest
import operator
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reaqtive
import reaqtive.state.host
from reaqtive import Query, SimpleSubject
from reaqtive.core.streams import LONG_MAX, Subscription
from reaqtive.scheduler import VirtualTimeScheduler
from reaqtive.state import CheckpointMode, InnerEnvironment, MissingStateError, StateShapeError
from reaqtive.state.fields import SAVED_BY, STARTED_AT
from reaqtive.state.host import HostedQuery, QueryHost, QueryState

US = timedelta(microseconds=1)
QueryFactory = Callable[[SimpleSubject[Any]], Query[Any]]


class Outputs:
    """The observer of a hosted query: records ``(tick, value)``, and the end as ``(tick, "completed")`` or
    ``(tick, error)``."""

    def __init__(self, scheduler: VirtualTimeScheduler) -> None:
        self.scheduler = scheduler
        self.seen: list[tuple[int, Any]] = []

    def on_subscribe(self, subscription: Subscription) -> None:
        subscription.request(LONG_MAX)

    def on_next(self, value: Any) -> None:
        self.seen.append((self.scheduler.clock, value))

    def on_error(self, error: BaseException) -> None:
        self.seen.append((self.scheduler.clock, error))

    def on_complete(self) -> None:
        self.seen.append((self.scheduler.clock, "completed"))


class World:
    """One life of a query: a host at ``clock``, the query bound on a fresh input subject."""

    def __init__(self, create: QueryFactory, clock: int = 0, **host_options: Any) -> None:
        self.scheduler = VirtualTimeScheduler(US, name="world")
        self.scheduler.advance_to(clock)
        self.host = QueryHost(self.scheduler, **host_options)
        self.events: SimpleSubject[Any] = SimpleSubject(name="events")
        self.outputs = Outputs(self.scheduler)
        self.query: HostedQuery = self.host.bind("q", create(self.events), self.outputs)

    def feed(self, events: list[tuple[int, Any]]) -> None:
        for at, value in events:
            self.host.deliver(self.events, value, at)


def running_sums(events: SimpleSubject[Any]) -> Query[Any]:
    """Per key, the running sum of its values: one inner subscription per key, each with its own state."""
    return Query.from_subscribable(events).group_by(lambda e: e[0]).flat_map(
        lambda group: group.map(lambda e: e[1]).scan(0, operator.add).map(lambda total: (group.key, total))
    )


def quiet_values(events: SimpleSubject[Any]) -> Query[Any]:
    """Each value once ``value`` µs passed without a newer one: an inner subscription (a timer) per value."""
    values = Query.from_subscribable(events).map(lambda e: e[1])
    return values.debounce(lambda v: Query.timer(timedelta(microseconds=v)))


def window_counts(events: SimpleSubject[Any]) -> Query[Any]:
    """How many events fell into each 25 µs window: inner subjects and subscriptions opened by timers."""
    return Query.from_subscribable(events).window(timedelta(microseconds=25)).flat_map(lambda w: w.count())


def sums_then_quiet(events: SimpleSubject[Any]) -> Query[Any]:
    """The running sums, debounced (by the value's size): inner units of two kinds."""
    return running_sums(events).debounce(lambda kv: Query.timer(timedelta(microseconds=1 + kv[1] % 7)))


QUERIES: dict[str, QueryFactory] = {
    "running_sums": running_sums,
    "quiet_values": quiet_values,
    "window_counts": window_counts,
    "sums_then_quiet": sums_then_quiet,
}


# -- binding and starting ------------------------------------------------------------------------------------------


def test_the_module_example_runs() -> None:
    public = {key: getattr(reaqtive, key) for key in reaqtive.__all__}
    result = doctest.testmod(reaqtive.state.host, extraglobs=public, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_bind_builds_the_tree_and_nothing_runs_until_start() -> None:
    world = World(running_sums)
    world.events.on_next(("a", 1))  # no subscriber yet: the tree is built, not subscribed to its source
    assert world.outputs.seen == []
    world.query.start()
    world.feed([(5, ("a", 2))])
    assert world.outputs.seen == [(5, ("a", 2))]
    assert world.host.queries == {"q": world.query}


def test_an_instance_id_is_hosted_once() -> None:
    world = World(running_sums)
    with pytest.raises(ValueError, match="already hosted"):
        world.host.bind("q", running_sums(world.events), Outputs(world.scheduler))


def test_a_query_is_started_once() -> None:
    world = World(running_sums)
    world.query.start()
    with pytest.raises(RuntimeError, match="already started"):
        world.query.start()


def test_the_context_carries_the_host_settings_the_query_settings_and_the_time_bounds() -> None:
    contexts: list[Any] = []

    def spy(events: SimpleSubject[Any]) -> Query[Any]:
        return Query.from_subscribable(events).do(lambda _: None)

    world = World(spy, clock=100, settings={"limit": 1, "shared": "host"})
    original = world.query.handle

    class Capture(reaqtive.SubscriptionVisitor):
        def visit_node(self, node: Any) -> None:
            contexts.append(node.context)

    started = world.scheduler.to_datetime(40)
    world.query.start(settings={"shared": "query"}, started_at=started)
    Capture().apply(original)
    context = contexts[0]
    assert context.instance_id == "q"
    assert context.scheduler is world.scheduler
    assert context.execution_environment is world.host.environment
    assert context.get_setting("limit") == 1 and context.get_setting("shared") == "query"
    assert context.get_setting(STARTED_AT) == started
    assert context.get_setting(SAVED_BY) == world.scheduler.now, "saved by now: the later of now and the start"


def test_a_query_that_fails_to_start_is_no_longer_hosted() -> None:
    world = World(running_sums)
    saved = World(quiet_values).query  # another query's state: the shapes differ
    saved.start()
    state = saved.save(mode=CheckpointMode.FULL).state
    with pytest.raises(StateShapeError, match="state of 'q'"):
        world.query.start(state)
    assert world.host.queries == {}


# -- feeding and advancing -------------------------------------------------------------------------------------


def test_deliver_moves_the_clock_to_the_event_firing_earlier_timers_first() -> None:
    world = World(quiet_values)
    world.query.start()
    world.feed([(10, ("a", 5)), (30, ("a", 3))])
    assert world.outputs.seen == [(15, 5)], "the first value's timer fired at 15, before the event at 30"
    world.feed([(20, ("a", 1))])  # older than the clock: delivered at the clock (30), replacing the pending 3
    world.host.advance(100)
    assert world.outputs.seen == [(15, 5), (31, 1)]
    assert world.scheduler.clock == 100


def test_advance_never_goes_back_and_settle_runs_what_is_due_now() -> None:
    world = World(quiet_values, clock=50)
    world.query.start()
    world.host.advance(10)
    assert world.scheduler.clock == 50
    world.events.on_next(("a", 0))  # a zero-length timer: due at this very instant
    assert world.outputs.seen == []
    world.host.settle()
    assert world.outputs.seen == [(50, 0)]
    world.host.advance(world.scheduler.to_datetime(70))
    assert world.scheduler.clock == 70


# -- saving and loading with inner units ------------------------------------------------------------------------


@pytest.mark.usefixtures("general_path")  # the general path's own units
def test_a_save_has_one_unit_per_inner_subscription_and_a_quiet_unit_keeps_its_bytes() -> None:
    world = World(running_sums)
    world.query.start()
    world.feed([(1, ("a", 1)), (2, ("b", 10))])
    first = world.query.save()
    assert sorted(first.state.inner) == sorted(world.query.inner_units()) and len(first.state.inner) == 2
    assert first.written == ("q", *world.query.inner_units()), "a first save writes every unit whole"
    first.confirm()

    assert world.query.save(first.state).written == (), "nothing changed since the confirmed save"
    world.feed([(3, ("a", 2))])
    second = world.query.save(first.state)
    a_unit, b_unit = world.query.inner_units()
    assert second.written == (a_unit,), "only key a's inner subscription changed"
    assert second.state.main == first.state.main
    assert second.state.inner[b_unit] == first.state.inner[b_unit]
    assert second.state.inner[a_unit] != first.state.inner[a_unit]
    assert second.state.units("q") == {"q": first.state.main, **second.state.inner}


def test_a_save_that_is_not_confirmed_writes_the_same_units_again() -> None:
    world = World(running_sums)
    world.query.start()
    world.feed([(1, ("a", 1))])
    first = world.query.save()  # the commit failed: no confirm
    again = world.query.save(first.state)
    assert again.written == first.written


def test_a_unit_the_previous_state_does_not_hold_is_written_whole() -> None:
    world = World(running_sums)
    world.query.start()
    world.feed([(1, ("a", 1))])
    saving = world.query.save()
    saving.confirm()
    # A differential save against a store that holds nothing writes every unit, clean or not.
    assert world.query.save(None).written == saving.written


@pytest.mark.usefixtures("general_path")  # the general path's own units
def test_ended_inner_units_are_removed_from_the_state_until_confirmed() -> None:
    def until_negative(events: SimpleSubject[Any]) -> Query[Any]:
        return Query.from_subscribable(events).group_by(lambda e: e[0]).flat_map(
            lambda group: group.map(lambda e: e[1]).take_while(lambda v: v >= 0).scan(0, operator.add)
        )

    world = World(until_negative)
    world.query.start()
    world.feed([(1, ("a", 1)), (2, ("b", 1))])
    first = world.query.save()
    first.confirm()
    a_unit = next(iter(world.query.inner_units()))
    world.feed([(3, ("a", -1))])  # key a's inner query completes
    assert a_unit not in world.query.inner_units()
    second = world.query.save(first.state)
    assert second.removed == (a_unit,)
    assert a_unit not in second.state.inner
    assert world.host.environment.removed_inner_ids() == [a_unit]
    second.confirm()
    assert world.host.environment.removed_inner_ids() == []


def test_load_re_creates_the_inner_units_from_their_own_blobs() -> None:
    world = World(running_sums)
    world.query.start()
    world.feed([(1, ("a", 1)), (2, ("b", 10)), (3, ("a", 2))])
    saved = world.query.save().state

    later = World(running_sums, clock=3)
    later.query.start(saved)
    assert list(later.query.inner_units()) == list(saved.inner), "the same ids, re-created by their parent"
    assert later.query.unclaimed() == [] and later.query.load_failures() == {}
    later.feed([(4, ("b", 5)), (5, ("a", 4)), (6, ("c", 1))])
    assert later.outputs.seen == [(4, ("b", 15)), (5, ("a", 7)), (6, ("c", 1))]


@pytest.mark.usefixtures("general_path")  # the general path's own units
def test_a_missing_inner_unit_is_a_load_failure_of_the_query() -> None:
    world = World(running_sums)
    world.query.start()
    world.feed([(1, ("a", 1))])
    saved = world.query.save().state
    (unit,) = saved.inner

    later = World(running_sums, clock=1)
    later.query.start(QueryState(saved.main, {}))
    failures = later.query.load_failures()
    assert list(failures) == [unit] and isinstance(failures[unit], MissingStateError)
    assert isinstance(later.outputs.seen[-1][1], MissingStateError), "the parent failed the query"


def test_restored_states_no_parent_re_creates_are_orphans_the_next_save_drops() -> None:
    world = World(running_sums)
    world.query.start()
    world.feed([(1, ("a", 1))])
    saved = world.query.save().state
    stray = "q/flat_map0/99"

    later = World(running_sums, clock=1)
    later.query.start(QueryState(saved.main, {**saved.inner, stray: next(iter(saved.inner.values()))}))
    assert later.query.unclaimed() == [stray]
    saving = later.query.save(QueryState(saved.main, {**saved.inner, stray: b"..."}))
    assert saving.removed == (stray,) and stray not in saving.state.inner


@pytest.mark.usefixtures("general_path")  # the general path's own units
def test_units_are_the_query_and_its_inner_subscriptions_and_the_host_knows_all_of_them() -> None:
    world = World(running_sums)
    other = world.host.bind("r", running_sums(world.events), Outputs(world.scheduler))
    world.query.start()
    other.start()
    world.feed([(1, ("a", 1))])
    assert list(world.query.units()) == ["q", "q/flat_map0/0"]
    assert list(other.units()) == ["r", "r/flat_map0/0"]
    assert world.host.units() == {**world.query.units(), **other.units()} | {
        "q": world.query.handle, "r": other.handle
    }
    assert list(world.host.units()) == ["q", "r", "q/flat_map0/0", "r/flat_map0/0"]


@pytest.mark.usefixtures("general_path")  # the general path's own units
def test_delete_removes_the_inner_units_and_releases_the_ids() -> None:
    world = World(running_sums)
    world.query.start()
    world.feed([(1, ("a", 1))])
    world.query.delete()
    assert world.host.queries == {} and world.host.environment.inner_subscriptions() == {}
    assert world.host.environment.removed_inner_ids() == ["q/flat_map0/0"]
    again = world.host.bind("q", running_sums(world.events), Outputs(world.scheduler))
    again.start()
    world.feed([(2, ("b", 1))])
    assert list(again.inner_units()) == ["q/flat_map0/0"], "the same ids as after a recovery"


def test_abandon_stops_the_query_and_keeps_its_stored_units() -> None:
    world = World(running_sums)
    world.query.start()
    world.feed([(1, ("a", 1))])
    world.query.abandon()
    assert world.host.queries == {} and world.host.environment.inner_subscriptions() == {}
    assert world.host.environment.removed_inner_ids() == [], "nothing is marked for deletion"


def test_dispose_disposes_the_queries_the_environment_and_the_scheduler() -> None:
    world = World(running_sums, environment=InnerEnvironment())
    world.query.start()
    world.feed([(1, ("a", 1))])
    world.host.dispose()
    assert world.host.queries == {} and world.host.environment.inner_subscriptions() == {}
    world.events.on_next(("a", 2))
    assert world.outputs.seen == [(1, ("a", 1))]


# -- the round trip ------------------------------------------------------------------------------------------------

END = 1_000

events_strategy = st.lists(
    st.tuples(st.integers(0, 12), st.tuples(st.sampled_from("abc"), st.integers(0, 9))), min_size=1, max_size=25
).map(lambda steps: [(sum(gap for gap, _ in steps[: i + 1]), event) for i, (_, event) in enumerate(steps)])


def uninterrupted(create: QueryFactory, events: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
    world = World(create)
    world.query.start()
    world.feed(events)
    world.host.advance(END)
    return world.outputs.seen


def restarted(
    create: QueryFactory, events: list[tuple[int, Any]], cuts: list[int], mode: CheckpointMode
) -> list[tuple[int, Any]]:
    """Run with a save, a crash and a load into a fresh host after each cut (the number of events delivered
    by then; between two events a cut also advances the clock halfway to the next one)."""
    seen: list[tuple[int, Any]] = []
    state: QueryState | None = None
    clock, done = 0, 0
    for cut in [*cuts, None]:
        world = World(create, clock)
        world.query.start(state, started_at=world.scheduler.to_datetime(0))
        upto = len(events) if cut is None else cut
        world.feed(events[done:upto])
        done = upto
        if cut is None:
            world.host.advance(END)
        elif cut < len(events):
            world.host.advance((world.scheduler.clock + events[cut][0]) // 2)
        seen += world.outputs.seen
        if cut is not None:
            saving = world.query.save(state, mode)
            saving.confirm()
            state, clock = saving.state, world.scheduler.clock
    return seen


@pytest.mark.parametrize("name", QUERIES)
@settings(max_examples=40, deadline=None)
@given(events=events_strategy, data=st.data())
def test_a_query_saved_anywhere_and_loaded_into_a_fresh_host_continues_as_if_uninterrupted(
    name: str, events: list[tuple[int, Any]], data: st.DataObject
) -> None:
    create = QUERIES[name]
    expected = uninterrupted(create, events)
    cut = data.draw(st.integers(0, len(events)), label="cut")
    assert restarted(create, events, [cut], CheckpointMode.FULL) == expected
    cuts = sorted(data.draw(st.sets(st.integers(0, len(events)), max_size=4), label="cuts"))
    assert restarted(create, events, cuts, CheckpointMode.DIFFERENTIAL) == expected
