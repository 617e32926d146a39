"""Positions follow from the log (issue 29): where a reader starts is a function of the durable log alone, so a first
run, a recovery, a recovery interrupted by a second crash, and a run with another query paused hand every reader
the same events.

Each scenario runs an engine through crashes (a close without a checkpoint, the durable sink's unwritten outputs
dropped, as a kill leaves it) and compares every subscription's outputs with a **reference**: the same appends in
the same order, processed by an in-memory engine that never crashed, paused or checkpointed. On SQLite and on
PostgreSQL. Also: a relative timer under the wall clock counts from its creation, not from an idle clock.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from reaqtive import Query
from reaqtive.engine import Engine, EngineStatus, FunctionRegistry, RecoveryError, RecoveryPolicy, delivery
from tests.engine.store_targets import STORES, store_sql

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def tagged(acc: list[Any], value: Any) -> list[Any]:
    return [acc[0], value]


def slow_inner(outer: Any) -> Query[Any]:
    """Six events of ``b`` after the outer element, tagged with it: while it waits, a bounded outer lags (a third
    of the events are ``a``: two inners at a time cannot keep up)."""
    return Query.stream("b").take(6).scan([outer, None], tagged)


def switch_inner(outer: Any) -> Query[Any]:
    return Query.stream("b").scan([outer, None], tagged)


def functions() -> FunctionRegistry:
    registry = FunctionRegistry()
    for function in (tagged, slow_inner, switch_inner, operator.add):
        registry.register(function.__name__, function)
    return registry


QUERIES: dict[str, Query[Any]] = {
    "bounded": Query.stream("a").flat_map(slow_inner, max_concurrent=2),
    "switch": Query.stream("a").switch_latest(switch_inner),
    "merged": Query.stream("a").merge(Query.stream("b")).scan(0, operator.add),
    "timed": Query.stream("a").merge(Query.stream("b")).buffer(timedelta(seconds=5)),
}

Step = tuple[str, Any]


def plan(events: int, seed: int) -> list[Step]:
    """Appends to ``a`` and ``b`` (a third to ``a``: its elements start inner readers of ``b``)."""
    steps: list[Step] = []
    for i in range(events):
        stream = "a" if (i * 7 + seed) % 3 == 0 else "b"
        steps.append(("append", (stream, 1000 * (stream == "b") + i, at(i))))
    return steps


class Crashing:
    """An engine on a store that crashes as a kill leaves it: what the durable sink had not written is lost."""

    def __init__(self, target: Path | str, **options: Any) -> None:
        self.target = target
        self.options = {"functions": functions(), "start": T0, "synchronous": "NORMAL", **options}
        self.engine = Engine(target, **self.options)

    def crash(self) -> None:
        self.engine._outputs.buffer.clear()  # a kill loses the outputs not written to the sink yet
        self.engine.close()
        self.engine = Engine(self.target, **self.options)

    def outputs(self, uri: str) -> list[tuple[int, Any]]:
        return [(output.seq, output.value) for output in self.engine.outputs(uri)]


def reference(steps: list[Step], upto: int | None = None) -> dict[str, list[tuple[int, Any]]]:
    with Engine(":memory:", functions=functions(), start=T0) as engine:
        engine.create_stream("a")
        engine.create_stream("b")
        for uri, query in QUERIES.items():
            engine.create_subscription(uri, query)
        for _, (stream, value, time) in steps[:upto]:
            engine.append(stream, value, time)
        engine.process()
        engine.advance_time(at(10_000))
        return {uri: [(o.seq, o.value) for o in engine.outputs(uri)] for uri in QUERIES}


@pytest.fixture(params=STORES)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    return store_sql(request.param, tmp_path, request).target


def setup(target: Path | str, **options: Any) -> Crashing:
    run = Crashing(target, **options)
    run.engine.create_stream("a")
    run.engine.create_stream("b")
    for uri, query in QUERIES.items():
        run.engine.create_subscription(uri, query)
    return run


def finish(run: Crashing, steps: list[Step]) -> dict[str, list[tuple[int, Any]]]:
    for uri in run.engine.paused():
        run.engine.resume(uri)
    run.engine.process()
    run.engine.advance_time(at(10_000))
    assert run.engine.status is EngineStatus.RUNNING, run.engine.faults
    return {uri: run.outputs(uri) for uri in QUERIES}


def append_all(run: Crashing, steps: list[Step], chunk: int, between: Callable[[int], None]) -> None:
    for start in range(0, len(steps), chunk):
        for _, (stream, value, time) in steps[start:start + chunk]:
            run.engine.append(stream, value, time)
        between(start // chunk)


@pytest.mark.parametrize(("first_crash", "second_crash_after", "every"), [(1, 3, 3), (1, 8, 3), (3, 30, 3),
                                                                         (3, 30, 5), (2, 1, 1000), (4, 12, 4)])
def test_a_second_crash_during_the_catch_up_of_a_lagging_reader_changes_no_output(
    target: Path | str, first_crash: int, second_crash_after: int, every: int
) -> None:
    """Issue 29, defect 1: a flat_map with max_concurrent=2 lags behind ``a`` (its inners wait for ``b``) beside a
    switch_latest that never lags. Crash after a checkpoint taken while it lagged; append more, and at the next
    open process a few events (the lagging query's catch-up and new events, with checkpoints every few events),
    crash again: no inner reader may be handed an event from before the outer element that created it. (Before
    log positions, this gave the flat_map and the switch_latest extra outputs.)"""
    steps = plan(150, seed=0)
    run = setup(target, checkpoint_every_events=every)
    crashed = False

    def between(chunk: int) -> None:
        nonlocal crashed
        if crashed:
            crashed = False
            run.engine.process(max_events=second_crash_after)
            run.crash()
        run.engine.process()
        if chunk == first_crash:
            run.engine.checkpoint()
            run.crash()
            crashed = True

    append_all(run, steps, 10, between)
    try:
        assert finish(run, steps) == reference(steps)
    finally:
        run.engine.close()


def test_an_inner_reader_created_after_another_query_was_paused_reads_only_what_follows_its_event(
    target: Path | str,
) -> None:
    """Issue 29, defect 2: pause an unrelated query, checkpoint and reopen (its readers lag: it catches up), append
    ``b`` events and an ``a`` element that makes the flat_map and the switch_latest create inner readers of ``b``,
    checkpoint and reopen again: the inners are handed nothing of ``b`` from before that element."""
    run = setup(target)
    run.engine.create_stream("x")
    run.engine.create_subscription("unrelated", Query.stream("x").merge(Query.stream("b")).scan(0, operator.add))
    run.engine.append("x", 1, at(0))
    run.engine.process()
    run.engine.pause("unrelated")
    run.engine.append("x", 2, at(1))
    run.engine.process()
    run.engine.checkpoint()
    run.engine.close()
    run.engine = Engine(run.target, **run.options)
    run.engine.append_many("b", [(101, at(2)), (102, at(3)), (103, at(4))])
    run.engine.append("a", 7, at(5))
    run.engine.process()
    run.engine.checkpoint()
    run.engine.close()
    run.engine = Engine(run.target, **run.options)
    run.engine.process()
    run.engine.append("b", 104, at(6))
    run.engine.process()
    try:
        assert [value for _, value in run.outputs("bounded")] == [[7, 104]]
        assert [value for _, value in run.outputs("switch")] == [[7, 104]]
        assert [value for _, value in run.outputs("unrelated")] == [1, 3, 104, 206, 309, 413]
    finally:
        run.engine.close()


@pytest.mark.parametrize("pause_at", [0, 2, 5])
def test_pauses_crashes_and_reopens_in_any_order_change_no_output(target: Path | str, pause_at: int) -> None:
    """Every query paused at some point, resumed later, with a checkpoint and a crash while paused, a crash
    during the catch-up, and a reopen: each equals the reference, time-based buffer included (event clock)."""
    steps = plan(100, seed=1)
    run = setup(target, checkpoint_every_events=6)

    def between(chunk: int) -> None:
        engine = run.engine
        if chunk == pause_at:
            for uri in QUERIES:
                engine.pause(uri)
        engine.process(max_events=7)
        if chunk == pause_at + 1:
            engine.checkpoint()
            run.crash()  # the pause ends with the process; the queries catch up from where they stood
            run.engine.pause("timed")
        if chunk == pause_at + 2:
            run.engine.resume("timed")
            run.engine.process(max_events=3)
            run.crash()  # during the catch-up
        if chunk == pause_at + 3:
            run.engine.checkpoint()
            run.engine.close()
            run.engine = Engine(run.target, **run.options)

    append_all(run, steps, 10, between)
    try:
        assert finish(run, steps) == reference(steps)
    finally:
        run.engine.close()


class WallClock(datetime):
    """The wall clock the engine's delivery reads (``datetime.now``), moved by the test: real datetimes, so the
    state codec saves them as any."""

    current = T0

    @classmethod
    def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
        return cls.current

    @classmethod
    def tick(cls, delta: timedelta) -> None:
        cls.current = cls.current + delta


def test_a_relative_timer_under_the_wall_clock_counts_from_its_creation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29, defect 6: an idle engine's clock stands where it last moved; a ``timer`` created later must count
    its delay from the wall clock at its creation, not from that stale clock (it fired 4 ms after creation)."""
    monkeypatch.setattr(delivery, "datetime", WallClock)
    WallClock.current = T0
    with Engine(tmp_path / "s.db", clock="wall", start=T0, synchronous="NORMAL") as engine:
        engine.create_subscription("far", Query.timer(timedelta(hours=1)))
        engine.process()
        WallClock.tick(timedelta(seconds=2))  # idle: nothing moves the engine's clock
        engine.create_subscription("soon", Query.timer(timedelta(seconds=1)))
        WallClock.tick(timedelta(milliseconds=900))
        engine.process()
        assert engine.outputs("soon") == [], "due 1 s after its creation, not 1 s after the clock last moved"
        WallClock.tick(timedelta(milliseconds=100))
        engine.process()
        assert [output.value for output in engine.outputs("soon")] == [0]


def test_a_query_kept_without_running_while_it_stood_behind_catches_up_exactly_once_it_recovers(
    target: Path | str,
) -> None:
    """A paused query whose function is missing at the next open is kept (KEEP) where it stood, position and
    clock; checkpoints go on without it; once the function is registered again it catches up on its own clock:
    its time windows equal those of a query never paused, never stopped."""
    steps = plan(90, seed=2)
    run = setup(target)
    incomplete = FunctionRegistry()
    for function in (tagged, switch_inner, operator.add):  # slow_inner, which "bounded" names, is missing
        incomplete.register(function.__name__, function)

    def between(chunk: int) -> None:
        run.engine.process(max_events=6)
        if chunk == 2:
            run.engine.pause("bounded")
            run.engine.pause("timed")
        if chunk == 4:
            run.engine.checkpoint()
            run.crash()
            run.engine.close()
            run.engine = Engine(run.target, **{**run.options, "functions": incomplete,
                                                "recovery_policy": RecoveryPolicy.KEEP})
            assert [failure.uri for failure in run.engine.recovery.failures] == ["bounded"]
        if chunk == 6:
            run.engine.process()
            run.engine.checkpoint()
            run.engine.close()
            run.engine = Engine(run.target, **run.options)
            assert run.engine.status is EngineStatus.RUNNING

    append_all(run, steps, 10, between)
    try:
        assert finish(run, steps) == reference(steps)
    finally:
        run.engine.close()


def test_a_query_is_behind_while_paused_and_until_its_catch_up_reaches_the_engine(tmp_path: Path) -> None:
    with Engine(tmp_path / "s.db", functions=functions(), start=T0) as engine:
        engine.create_stream("a")
        engine.create_subscription("sum", Query.stream("a").scan(0, operator.add))
        engine.create_subscription("twin", Query.stream("a").scan(0, operator.add))
        engine.pause("sum")
        engine.append_many("a", [(i, at(i)) for i in range(1, 6)])
        engine.process()
        assert engine.is_behind("sum") and not engine.is_behind("twin")
        engine.resume("sum")
        assert engine.is_behind("sum"), "resumed: the next process() catches it up"
        assert engine.process() == 5, "the catch-up's events count"
        assert not engine.is_behind("sum")
        assert [o.value for o in engine.outputs("sum")] == [o.value for o in engine.outputs("twin")]


@pytest.mark.parametrize("forged", ["behind-pos", "behind-clock", "pinned-pos", "delivered-at"])
def test_a_delivery_record_that_puts_a_query_ahead_of_the_engine_refuses_the_open(
    tmp_path: Path, forged: str
) -> None:
    """A position forged ahead (behind a valid checksum) would make a query skip events silently: refused, like a
    record that says more was delivered than appended, and nothing is changed."""
    import json

    from tests.engine.test_engine_faults import put_row, rows

    path = tmp_path / "s.db"
    run = setup(path)
    run.engine.append_many("a", [(i, at(i)) for i in range(5)])
    run.engine.process()
    run.engine.pause("merged")
    run.engine.append_many("b", [(i, at(10 + i)) for i in range(3)])
    run.engine.process()
    run.engine.checkpoint()
    run.engine.close()
    record = json.loads(rows(path, "engine")["delivery"])
    if forged == "behind-pos":
        record["behind"]["merged"]["pos"] = record["pos"] + 1
    elif forged == "behind-clock":
        record["behind"]["merged"]["clock"] = record["now"] + 1
    elif forged == "pinned-pos":
        record["pinned"] = {"merged": {"pos": record["pos"] + 2, "floor": 0}}
    else:
        record["delivered_at"]["b"] = record["pos"] + 1
    put_row(path, "engine", "delivery", json.dumps(record).encode())
    before = store_content(path)
    with pytest.raises(RecoveryError, match="engine/delivery"):
        Engine(path, **run.options)
    # The content, not the file's bytes: SQLite may move the write-ahead log's pages into the file meanwhile.
    assert store_content(path) == before


def store_content(path: Path) -> list[str]:
    """Everything the store file holds, as SQL (read through a connection closed at once)."""
    import contextlib
    import sqlite3

    with contextlib.closing(sqlite3.connect(path)) as db:
        return list(db.iterdump())
