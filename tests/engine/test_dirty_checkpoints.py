"""The engine's differential checkpoints visit only what reported a change, and miss nothing.

Two engines run the same script in lockstep: one takes differential checkpoints (through the dirty registry, and
some of its commits fail), the other full checkpoints at the same points. After every checkpoint both stores must
hold the same state rows and output counters, the differential one must have written exactly the units a walk of
every operator finds dirty, and the ingress the engine may drop must stop at the lowest watermark of every reader,
found by walking every query. The queries cover readers that fall behind (bounded demand) and catch up, inner
units, timers, terminal states and crashes.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reaqtive import GroupedStream, Query
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.core.visitors import walk
from reaqtive.engine import DISCARD_SINK, Engine, FunctionRegistry, StreamReader
from reaqtive.state import (
    STATE_CATEGORY,
    CheckpointError,
    CheckpointResult,
    InjectedFaultError,
    has_state_changed,
    read_blob,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def busy_inner(_: int) -> Query[Any]:
    """Reads two events of ``b``: while it waits, a ``max_concurrent=1`` outer asks ``a`` for nothing more."""
    return Query.stream("b").take(2)


def inner_of_b(_: int) -> Query[Any]:
    return Query.stream("b")


def parity(x: int) -> int:
    return x % 2


def group_sum(group: GroupedStream[int]) -> Query[Any]:
    return group.scan(0, operator.add)


def double(x: int) -> int:
    return 2 * x


def group_doubled(group: GroupedStream[int]) -> Query[Any]:
    return group.map(double)


def window_sum(window: Query[int]) -> Query[Any]:
    return window.scan(0, operator.add)


def functions() -> FunctionRegistry:
    registry = FunctionRegistry()
    for function in (busy_inner, inner_of_b, parity, group_sum, double, group_doubled, window_sum, operator.add):
        registry.register(function.__name__, function)
    return registry


QUERIES: dict[str, Query[Any]] = {
    "sum": Query.stream("a").scan(0, operator.add),
    "lagging": Query.stream("a").flat_map(busy_inner, max_concurrent=1),
    "switch": Query.stream("a").switch_latest(inner_of_b),
    "groups": Query.stream("a").group_by(parity).flat_map(group_sum),
    "stateless_groups": Query.stream("b").group_by(parity).flat_map(group_doubled),
    "buffer": Query.stream("b").buffer(3),
    "window": Query.stream("a").window(2).flat_map(window_sum),
    "take": Query.stream("b").take(5),
    "distinct": Query.stream("a").distinct(),
    "timed": Query.stream("a").buffer(timedelta(seconds=3)),
    "debounce": Query.stream("b").debounce(timedelta(seconds=2)),
    "plain": Query.stream("b").map(double),
    "combined": Query.stream("a").combine_latest(Query.stream("b"), operator.add),
    "until": Query.stream("a").take_until(Query.stream("b").skip(3)),
}


class Twin:
    """One engine of the pair, with a spy on its checkpoints: the units it saved, and what a walk of every
    operator said was dirty just before (measured inside the checkpoint call, before the pause)."""

    def __init__(self, path: Path, full: bool) -> None:
        self.path = path
        self.full = full
        self.engine = self.open()
        self.engine.create_stream("a")
        self.engine.create_stream("b")
        for uri, query in QUERIES.items():
            self.engine.create_subscription(uri, query, observer=DISCARD_SINK)

    def open(self) -> Engine:
        engine = Engine(self.path, functions=functions(), start=T0, synchronous="OFF")
        checkpoint = engine._checkpointer.checkpoint
        twin = self

        def spy(handles: dict[str, SubscriptionHandle], **kwargs: Any) -> CheckpointResult:
            twin.expected = {key for key, handle in handles.items() if has_state_changed(handle)} | set(kwargs["whole"])
            result = checkpoint(handles, **kwargs)
            twin.saved = set(result.saved)
            return result

        engine._checkpointer.checkpoint = spy  # type: ignore[method-assign]
        self.expected: set[str] = set()
        self.saved: set[str] = set()
        return engine

    def crash(self) -> None:
        self.engine.close()  # no checkpoint: everything after the last one is replayed at the next open
        self.engine = self.open()

    def checkpoint(self, *, force_full: bool = False, brute_force: bool = True) -> None:
        if brute_force or self.full or force_full:
            self.engine.checkpoint(full=self.full or force_full)
            return
        # Without the spy's walk (it asks watched nodes, which may report their units on the way).
        spy = self.engine._checkpointer.checkpoint
        del self.engine._checkpointer.checkpoint  # type: ignore[attr-defined]
        try:
            self.engine.checkpoint()
        finally:
            self.engine._checkpointer.checkpoint = spy  # type: ignore[method-assign]
            self.expected = self.saved = set()

    def fail_next_commit(self) -> None:
        store = self.engine._store.checkpoints
        apply = store._apply

        def failing(changes: Any) -> int:
            store._apply = apply  # type: ignore[method-assign]
            raise InjectedFaultError("injected commit failure (nothing was applied)")

        store._apply = failing  # type: ignore[method-assign]
        with pytest.raises(CheckpointError):
            self.checkpoint(brute_force=False)

    def rows(self) -> dict[tuple[str, str], bytes]:
        """The state rows and the output counters the store holds."""
        snapshot = self.engine._store.checkpoints.read(strict=False)
        return {(category, key): blob for category in (STATE_CATEGORY, "outputs")
                for key, blob in snapshot.items(category)}


def units(engine: Engine) -> dict[str, SubscriptionHandle]:
    running = {uri: hosted.handle for uri, hosted in engine._subscriptions.items()}
    return {**running, **engine._environment.inner_subscriptions()}


def brute_force_covered(engine: Engine) -> dict[str, int]:
    """Per stream, the last event every live reader processed, walking every query (what the registry's watched
    readers must give): one floor of the log for all streams, the lowest log position a reader behind its stream
    stands at (the inner queries its events start may read any stream from there), or a query behind the engine,
    or a pin."""
    floor = engine._positions.cursor.pos
    for handle in units(engine).values():
        for node in walk(handle):
            if isinstance(node, StreamReader) and not node.is_disposed \
                    and node.watermark < engine._positions.delivered_at.get(node.uri, -1):
                floor = min(floor, node.watermark)
    for lag in engine._behind.values():
        floor = min(floor, lag.pos, lag.cursor.pos)
    for pin in engine._stopped.pins.values():
        floor = min(floor, pin.floor)
    if floor >= engine._positions.cursor.pos:
        return dict(engine._positions.delivered)
    retained = engine._store.first_retained()
    covered: dict[str, int] = {}
    for stream, delivered in engine._positions.delivered.items():
        at = engine._store.seq_at_position(stream, floor)
        keep = at if at is not None else retained.get(stream, delivered + 1) - 1
        covered[stream] = min(delivered, keep)
    return covered


def normalized(covered: dict[str, int], engine: Engine) -> dict[str, int]:
    """A stream no reader holds back is covered up to what was delivered (or nothing)."""
    return {stream: covered.get(stream, engine._positions.delivered.get(stream, -1)) for stream in ("a", "b")}


@dataclass(frozen=True)
class Step:
    kind: str  # "a"/"b": append; "process": up to n events; "checkpoint"/"quiet"/"full"; "fail"; "crash"
    n: int = 0


steps = st.lists(
    st.one_of(
        st.builds(Step, st.sampled_from(["a", "b"]), st.integers(0, 9)),
        st.builds(Step, st.just("process"), st.integers(1, 6)),
        st.builds(Step, st.sampled_from(["checkpoint", "quiet", "quiet", "full", "fail", "crash"])),
    ),
    min_size=1,
    max_size=50,
)


def run_in_lockstep(directory: Path, script: list[Step]) -> None:
    differential = Twin(directory / "differential.db", full=False)
    truth = Twin(directory / "full.db", full=True)
    second = 0
    try:
        for step in [*script, Step("process", 100), Step("quiet"), Step("checkpoint")]:
            if step.kind in ("a", "b"):
                second += 1
                for twin in (differential, truth):
                    twin.engine.append(step.kind, step.n, T0 + timedelta(seconds=second))
            elif step.kind == "process":
                for twin in (differential, truth):
                    twin.engine.process(max_events=step.n)
            elif step.kind == "crash":
                for twin in (differential, truth):
                    twin.crash()
            elif step.kind == "fail":
                differential.fail_next_commit()
            else:
                differential.checkpoint(force_full=step.kind == "full", brute_force=step.kind == "checkpoint")
                truth.checkpoint()
                if step.kind == "checkpoint":
                    assert differential.saved == differential.expected, "visited other units than a walk finds dirty"
                assert differential.rows() == truth.rows(), "the differential store misses a change"
                engine = differential.engine
                assert normalized(engine._covered_by_checkpoint(), engine) == normalized(
                    brute_force_covered(engine), engine
                ), "the ingress kept for the readers is not what every reader needs"
    finally:
        differential.engine.close()
        truth.engine.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=steps)
def test_differential_checkpoints_write_exactly_the_dirty_units_and_the_store_equals_a_full_checkpoints(
    tmp_path_factory: Any, script: list[Step]
) -> None:
    run_in_lockstep(tmp_path_factory.mktemp("dirty"), script)


# -- the reader's special cases, one by one ------------------------------------------------------------------------


def reader_mark(engine: Engine, uri: str) -> object:
    """What the store holds as the outer stream reader's state of subscription ``uri``."""
    blob = engine._store.checkpoints.read().get(STATE_CATEGORY, uri)
    assert blob is not None
    (record,) = [r for r in read_blob(blob) if r.name == StreamReader.name]
    reader = record.reader()
    reader.read()  # the disposed flag
    return reader.read()


def test_a_reader_that_falls_behind_without_receiving_anything_is_saved_and_holds_the_ingress(tmp_path: Path) -> None:
    with Engine(tmp_path / "s.db", functions=functions(), start=T0) as engine:
        engine.create_stream("a")
        engine.create_stream("b")
        engine.create_subscription("lagging", QUERIES["lagging"], observer=DISCARD_SINK)
        engine.append("a", 1, T0 + timedelta(seconds=1))
        engine.process()
        engine.checkpoint()  # its inner now waits for b: the outer asks a for nothing more
        assert reader_mark(engine, "lagging") is None
        for second in range(2, 5):
            engine.append("a", second, T0 + timedelta(seconds=second))
        engine.process()
        metrics = engine.checkpoint()
        assert metrics.dirty_subscriptions == 1, "falling behind changed what the reader saves"
        assert reader_mark(engine, "lagging") == 1, "the log position of a#0, the last event it read"
        assert engine._covered_by_checkpoint()["a"] == 0, "the ingress after its watermark must stay"
        engine.append_many("b", [(10, T0 + timedelta(seconds=5)), (11, T0 + timedelta(seconds=6))])
        engine.process()
        engine.checkpoint()
        assert reader_mark(engine, "lagging") == 2, "the inner ended: the outer read the next event (a#1)"


def test_a_reader_that_catches_up_is_saved_caught_up(tmp_path: Path) -> None:
    with Engine(tmp_path / "s.db", functions=functions(), start=T0) as engine:
        engine.create_stream("a")
        engine.create_stream("b")
        engine.create_subscription("lagging", QUERIES["lagging"], observer=DISCARD_SINK)
        engine.append_many("a", [(i, T0 + timedelta(seconds=i)) for i in range(1, 3)])
        engine.process()
        engine.checkpoint()
        assert reader_mark(engine, "lagging") == 1, "the log position of a#0"
        engine.append_many("b", [(i, T0 + timedelta(seconds=10 + i)) for i in range(4)])
        engine.process()
        engine.checkpoint()
        assert reader_mark(engine, "lagging") is None


def test_after_recovery_a_differential_checkpoint_of_clean_subscriptions_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Engine(path, functions=functions(), start=T0) as engine:
        engine.create_stream("a")
        for i in range(200):
            engine.create_subscription(f"q{i}", Query.stream("a").scan(0, operator.add), observer=DISCARD_SINK)
        engine.append("a", 1, T0 + timedelta(seconds=1))
        engine.process()
        engine.checkpoint()
    with Engine(path, functions=functions(), start=T0) as engine:
        assert engine._environment.dirty.noted == frozenset(), "recovered subscriptions are clean"
        assert engine._environment.dirty.watched() == [], "caught-up readers with unbounded demand are not watched"
        assert engine.checkpoint().dirty_subscriptions == 0
        engine.append("a", 2, T0 + timedelta(seconds=2))
        engine.process()
        assert engine.checkpoint().dirty_subscriptions == 200



def test_a_finished_query_is_written_once_not_each_time_its_stream_moves_on(tmp_path: Path) -> None:
    """Found by the lockstep property: a disposed reader saved its watermark, which changed (it fell behind) with
    every event after it ended, with nothing reporting it. A reader that reads nothing more saves "caught up"."""
    with Engine(tmp_path / "s.db", functions=functions(), start=T0) as engine:
        engine.create_stream("b")
        engine.create_subscription("take", Query.stream("b").take(2), observer=DISCARD_SINK)
        engine.append_many("b", [(i, T0 + timedelta(seconds=i)) for i in range(1, 3)])
        engine.process()
        assert engine.checkpoint().dirty_subscriptions == 1  # it completed: its end is saved
        assert reader_mark(engine, "take") is None
        engine.append("b", 3, T0 + timedelta(seconds=3))
        engine.process()
        assert engine.checkpoint().dirty_subscriptions == 0
        take = engine._subscriptions["take"].handle
        assert not has_state_changed(take), "what a full checkpoint would write is stored"
