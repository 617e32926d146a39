"""The dirty registry: operators report their units' changes, and a differential checkpoint visits only those.

The property at the end is the one that matters: with the registry, a differential checkpoint writes exactly the
units a walk of every operator would have found dirty, and after every commit the store holds what a full
checkpoint of a twin world, fed the same inputs, holds: no change is missed, across many kinds of operators,
inner units, timers, bounded demand and failed commits.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reaqtive import OperatorContext, Query, SimpleSubject
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.streams import LONG_MAX, Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.core.visitors import initialize
from reaqtive.scheduler import VirtualTimeScheduler
from reaqtive.state import (
    STATE_CATEGORY,
    Checkpointer,
    CheckpointError,
    CheckpointMode,
    CheckpointResult,
    DirtyRegistry,
    InMemoryCheckpointStore,
    InnerEnvironment,
    StateChangedTracker,
    StatefulUnaryOperatorBase,
    has_state_changed,
    save_subscription,
    state_loader,
)
from reaqtive.state.traversal import confirm_saved
from tests.state.support import RunningSum
from tests.support import Recorder

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def context(key: str, environment: InnerEnvironment, scheduler: VirtualTimeScheduler | None = None) -> OperatorContext:
    return OperatorContext(key, scheduler, execution_environment=environment)


def running_sum(environment: InnerEnvironment, key: str, subject: SimpleSubject[int] | None = None,
                blob: bytes | None = None) -> RunningSum:
    node = RunningSum(subject or SimpleSubject[int](), Recorder(initial=LONG_MAX))
    initialize(node, context(key, environment), None if blob is None else state_loader(blob))
    return node


# -- the tracker ---------------------------------------------------------------------------------------------------


def test_a_bound_tracker_reports_its_unit_once_per_interval_then_stores_plainly() -> None:
    environment = InnerEnvironment()
    tracker = StateChangedTracker()
    tracker.loaded()
    tracker.bind(context("sub://1", environment))
    assert tracker.reporting and not environment.dirty.noted
    tracker.changed = True
    assert environment.dirty.noted == {"sub://1"}
    assert type(tracker) is StateChangedTracker, "after the report, a change is a plain slot store"
    assert environment.dirty.take() == {"sub://1"}
    tracker.changed = True
    assert not environment.dirty.noted, "a second change in the same interval reports nothing"
    tracker.saved()
    assert tracker.reporting, "a save waits for the next change again"
    tracker.changed = True
    assert environment.dirty.noted == {"sub://1"}


def test_an_unbound_tracker_never_reports_and_a_change_before_binding_is_reported_at_binding() -> None:
    environment = InnerEnvironment()
    tracker = StateChangedTracker()
    tracker.changed = True
    tracker.saved()
    tracker.changed = True
    assert type(tracker) is StateChangedTracker and not environment.dirty.noted
    tracker.bind(context("sub://1", environment))
    assert environment.dirty.noted == {"sub://1"}


def test_clearing_the_flag_through_the_operator_waits_for_the_next_change_again() -> None:
    environment = InnerEnvironment()
    node = running_sum(environment, "sub://1")
    environment.dirty.take()
    node.state_changed = True
    environment.dirty.take()
    node.state_changed = False
    node.state_changed = True
    assert environment.dirty.noted == {"sub://1"}


# -- the stateful bases --------------------------------------------------------------------------------------------


def test_a_new_node_reports_its_unit_when_it_starts_and_a_loaded_one_does_not() -> None:
    environment = InnerEnvironment()
    subject = SimpleSubject[int]()
    node = running_sum(environment, "sub://new", subject)
    assert environment.dirty.take() == {"sub://new"}
    subject.on_next(5)
    assert environment.dirty.take() == {"sub://new"}
    blob = save_subscription(node)
    assert blob is not None
    running_sum(environment, "sub://loaded", blob=blob)
    assert not environment.dirty.noted


def test_disposing_reports_the_unit_the_terminal_state_must_be_saved() -> None:
    environment = InnerEnvironment()
    node = running_sum(environment, "sub://1")
    blob = save_subscription(node)
    confirm_saved(node)
    environment.dirty.take()
    node.dispose()
    assert environment.dirty.noted == {"sub://1"}
    assert blob is not None


class LazyCount(StatefulUnaryOperatorBase[int, int]):
    """Counts without a flag per element: its dirtiness is computed, as a count buffer's is."""

    name = "test:lazy_count"
    version: Version = (1,)

    def __init__(self, source: Subscribable[int], downstream: Subscriber[int]) -> None:
        super().__init__(downstream)
        self._source = source
        self.count = 0
        self.saved_count = 0

    @property
    def state_changed(self) -> bool:
        return self._state.state_changed or self.count != self.saved_count

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self.count)
        self.saved_count = self.count

    def load_state_core(self, reader: StateReader) -> None:
        self.count = self.saved_count = reader.read()

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_next(self, value: int) -> None:
        self.count += 1
        self._downstream.on_next(self.count)


def test_a_node_with_computed_dirtiness_is_watched_asked_at_every_take_and_unwatched_when_disposed() -> None:
    assert LazyCount.watched and not RunningSum.watched
    environment = InnerEnvironment()
    subject = SimpleSubject[int]()
    node = LazyCount(subject, Recorder(initial=LONG_MAX))
    initialize(node, context("sub://lazy", environment))
    assert [watched for watched, _ in environment.dirty.watched()] == [node]
    save_subscription(node)
    confirm_saved(node)
    assert environment.dirty.take() == {"sub://lazy"}  # reported at start (new)
    assert environment.dirty.take() == set()
    subject.on_next(1)
    assert environment.dirty.take() == {"sub://lazy"}, "no flag was set: the registry asked"
    node.dispose()
    assert environment.dirty.watched() == []


# -- the checkpointer with a registry ------------------------------------------------------------------------------


class SpyRegistry(DirtyRegistry):
    """Records what each checkpoint took."""

    __slots__ = ("visited",)

    def __init__(self) -> None:
        super().__init__()
        self.visited: list[set[str]] = []

    def take(self) -> set[str]:
        taken = super().take()
        self.visited.append(set(taken))
        return taken


class Rig:
    """Running sums ``sub://0..n-1`` under an environment with a registry, checkpointed with it."""

    def __init__(self, count: int) -> None:
        self.scheduler = VirtualTimeScheduler(timedelta(microseconds=1), epoch=T0)
        self.environment = InnerEnvironment()
        self.registry = self.environment.dirty = SpyRegistry()
        self.visited = self.registry.visited
        self.store = InMemoryCheckpointStore()
        self.checkpointer = Checkpointer(self.scheduler, self.store)
        self.subjects = [SimpleSubject[int]() for _ in range(count)]
        self.handles: dict[str, SubscriptionHandle] = {
            f"sub://{i}": running_sum(self.environment, f"sub://{i}", subject)
            for i, subject in enumerate(self.subjects)
        }

    def checkpoint(self, **kwargs: Any) -> CheckpointResult:
        return self.checkpointer.checkpoint(self.handles, dirty=self.environment.dirty, **kwargs)


def test_a_differential_checkpoint_visits_only_the_units_that_reported() -> None:
    rig = Rig(50)
    assert len(rig.checkpoint().saved) == 50  # all new
    rig.subjects[3].on_next(1)
    rig.subjects[7].on_next(1)
    result = rig.checkpoint()
    assert sorted(result.saved) == ["sub://3", "sub://7"]
    assert rig.visited[-1] == {"sub://3", "sub://7"}
    assert rig.checkpoint().saved == () and rig.visited[-1] == set()


def test_a_failed_commit_puts_what_it_saved_back_into_the_registry() -> None:
    rig = Rig(5)
    rig.checkpoint()
    rig.subjects[1].on_next(1)
    rig.store.fail_commits(1)
    with pytest.raises(CheckpointError):
        rig.checkpoint()
    assert rig.environment.dirty.noted == {"sub://1"}
    assert rig.checkpoint().saved == ("sub://1",)
    assert rig.checkpoint().saved == ()


def test_a_failed_serialization_puts_everything_it_took_back() -> None:
    rig = Rig(5)
    rig.checkpoint()
    rig.subjects[1].on_next(1)
    rig.subjects[2].on_next(1)
    rig.store.fail_puts(STATE_CATEGORY, "sub://2")
    with pytest.raises(CheckpointError):
        rig.checkpoint()
    assert sorted(rig.checkpoint().saved) == ["sub://1", "sub://2"]


def test_an_isolated_owner_stays_in_the_registry() -> None:
    rig = Rig(3)
    rig.checkpoint()
    rig.subjects[0].on_next(1)
    rig.subjects[1].on_next(1)
    node = rig.handles["sub://1"]
    assert isinstance(node, RunningSum)
    node.total = object()  # type: ignore[assignment]  # cannot be encoded
    result = rig.checkpoint(isolate=lambda key, error: key)
    assert result.saved == ("sub://0",)
    assert rig.environment.dirty.noted == {"sub://1"}


def test_a_change_during_the_commit_is_reported_for_the_next_checkpoint() -> None:
    rig = Rig(3)
    rig.checkpoint()
    rig.subjects[0].on_next(1)
    original = rig.store._apply

    def during(changes: Any) -> int:
        rig.subjects[0].on_next(2)  # the scheduler runs again while the commit is in flight
        return original(changes)

    rig.store._apply = during  # type: ignore[method-assign]
    assert rig.checkpoint().saved == ("sub://0",)
    rig.store._apply = original  # type: ignore[method-assign]
    assert rig.environment.dirty.noted == {"sub://0"}
    assert rig.checkpoint().saved == ("sub://0",)


def test_a_full_checkpoint_writes_everything_and_starts_the_registry_afresh() -> None:
    rig = Rig(4)
    rig.checkpoint()
    rig.subjects[2].on_next(1)
    assert len(rig.checkpoint(mode=CheckpointMode.FULL).saved) == 4
    assert rig.checkpoint().saved == ()


def test_units_the_host_no_longer_has_are_dropped() -> None:
    rig = Rig(2)
    rig.checkpoint()
    rig.subjects[1].on_next(1)
    del rig.handles["sub://1"]
    assert rig.checkpoint().saved == ()
    assert not rig.environment.dirty.noted


def test_deleting_an_inner_unit_forgets_its_report() -> None:
    registry = DirtyRegistry()
    registry.note("q/inner0")
    registry.forget("q/inner0")
    assert registry.take() == set()


# -- the property: with many kinds of operators, nothing is missed -------------------------------------------------


def parity(x: int) -> int:
    return x % 2


def fail_on_sevens(total: int) -> int:
    if total % 7 == 0:
        raise ValueError("a multiple of seven")
    return total


def queries(a: Query[int], b: Query[int]) -> dict[str, Query[Any]]:
    """Queries over the hot inputs ``a`` and ``b``: flags per element, computed dirtiness (buffer), inner units
    (group_by, window, flat_map), timers, terminal states (take), set-like state (distinct), and nodes created
    inside a unit after it was saved (a retried attempt, a delayed subscription)."""
    return {
        "q://scan": a.scan(0, operator.add),
        "q://buffer": a.buffer(3),
        "q://buffer_skip": b.buffer(2, 3),
        "q://window": a.window(2).flat_map(lambda window: window.scan(0, operator.add)),
        "q://groups": a.group_by(parity).flat_map(lambda group: group.scan(0, operator.add)),
        "q://groups_buffer": b.group_by(parity).flat_map(lambda group: group.buffer(2)),
        "q://take": b.take(4),
        "q://distinct": a.distinct(),
        "q://distinct_until": b.distinct_until_changed(),
        "q://timed_buffer": a.buffer(timedelta(seconds=3)),
        "q://debounce": b.debounce(timedelta(seconds=2)),
        "q://switch": a.switch_latest(lambda x: b.take(2).map(lambda y: x * 100 + y)),
        "q://merge": a.merge(b).skip(2).take_while(lambda x: x < 8),
        "q://combine": a.combine_latest(b, lambda x, y: x + y),
        "q://sample": b.sample(timedelta(seconds=2)),
        "q://count": a.count(),
        "q://interval": Query.interval(timedelta(seconds=4)).take_until(b.filter(lambda x: x == 9)),
        "q://retry": a.scan(0, operator.add).map(fail_on_sevens).retry(),
        "q://delayed": b.scan(0, operator.add).delay_subscription(timedelta(seconds=5)),
    }


BOUNDED = {"q://scan", "q://buffer", "q://groups", "q://merge"}  # their consumer asks for two at a time


class World:
    """Every query of :func:`queries` over two hot subjects, on virtual time, checkpointed into its own store:
    differentially through the registry (``registry=True``), or by full checkpoints."""

    def __init__(self, registry: bool) -> None:
        self.registry = registry
        self.scheduler = VirtualTimeScheduler(timedelta(microseconds=1), epoch=T0)
        self.scheduler.advance_to(T0)
        self.a, self.b = SimpleSubject[int](name="a"), SimpleSubject[int](name="b")
        self.environment = InnerEnvironment()
        self.store = InMemoryCheckpointStore()
        self.checkpointer = Checkpointer(self.scheduler, self.store)
        self.handles: dict[str, SubscriptionHandle] = {}
        self.consumers: dict[str, Recorder] = {}
        self.stored: set[str] = set()
        for key, query in queries(self.a.as_query(), self.b.as_query()).items():
            consumer = Recorder(initial=2, per_item=1) if key in BOUNDED else Recorder(initial=LONG_MAX)
            handle = query.subscribe(consumer)
            initialize(handle, OperatorContext(key, self.scheduler, execution_environment=self.environment))
            self.handles[key] = handle
            self.consumers[key] = consumer

    def units(self) -> dict[str, SubscriptionHandle]:
        return {**self.handles, **self.environment.inner_subscriptions()}

    def push(self, stream: str, value: int) -> None:
        (self.a if stream == "a" else self.b).on_next(value)
        self.scheduler.advance_by(timedelta(0))

    def advance(self, seconds: float) -> None:
        self.scheduler.advance_by(timedelta(seconds=seconds))

    def expected(self) -> set[str]:
        """Brute force: the units a walk of every operator finds dirty, and those the store has never seen."""
        units = self.units()
        return {key for key, handle in units.items() if has_state_changed(handle)} | (units.keys() - self.stored)

    def checkpoint(self, full: bool = False) -> CheckpointResult:
        units = self.units()
        removed = self.environment.removed_inner_ids()
        mode = CheckpointMode.FULL if full or not self.registry else CheckpointMode.DIFFERENTIAL
        result = self.checkpointer.checkpoint(
            units, mode=mode, removed=removed, whole=units.keys() - self.stored,
            dirty=self.environment.dirty if self.registry else None,
        )
        self.stored.update(result.saved)
        self.stored.difference_update(removed)
        self.environment.confirm_removed(removed)
        return result

    def rows(self) -> dict[str, bytes]:
        return dict(self.store.read().items(STATE_CATEGORY))


@dataclass(frozen=True)
class Step:
    kind: str  # "a"/"b": push a value; "time": advance; "checkpoint" (compared with a full walk first), "quiet"
    # (not compared: the walk asks watched nodes, which may report them), "full"; "fail"/"fail_after": the commit
    # fails (applying nothing / after applying); "request": the bounded consumers ask for more
    value: int = 0


steps = st.lists(
    st.one_of(
        st.builds(Step, st.sampled_from(["a", "b"]), st.integers(0, 9)),
        st.builds(Step, st.just("time"), st.integers(1, 5)),
        st.builds(Step, st.sampled_from(["checkpoint", "quiet", "quiet", "full", "fail", "fail_after", "request"])),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_a_differential_checkpoint_through_the_registry_writes_exactly_the_dirty_units_and_misses_nothing(
    script: list[Step],
) -> None:
    differential, truth = World(registry=True), World(registry=False)
    for step in [*script, Step("quiet"), Step("checkpoint")]:
        if step.kind in ("a", "b"):
            for world in (differential, truth):
                world.push(step.kind, step.value)
        elif step.kind == "time":
            for world in (differential, truth):
                world.advance(step.value)
        elif step.kind == "request":  # the bounded consumers ask for more
            for world in (differential, truth):
                for key in BOUNDED:
                    world.consumers[key].request(3)
        elif step.kind in ("fail", "fail_after"):
            differential.store.fail_commits(1, after_apply=step.kind == "fail_after")
            with pytest.raises(CheckpointError):
                differential.checkpoint()
        else:
            expected = differential.expected() if step.kind == "checkpoint" else None
            saved = differential.checkpoint(full=step.kind == "full").saved
            if expected is not None:
                assert set(saved) == expected, "the registry visited other units than a full walk finds dirty"
            truth.checkpoint()
            assert differential.rows() == truth.rows(), "the store misses a change a full checkpoint has"

