"""Durability details the crash test found (or that its design relies on), each pinned by a small test, and the
delivery guarantee of each source/sink pair that the crash test does not cover (see docs/engine.md)."""

from __future__ import annotations

import logging
import operator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from reaqtive import Query
from reaqtive.engine import ArtifactNotFoundError, Engine, EngineStatus, Output

T0 = datetime(2026, 1, 1, tzinfo=UTC)
received: list[Output] = []


def double(x: int) -> int:
    return x * 2


def collect(output: Output) -> None:
    received.append(output)


def second(i: int) -> datetime:
    return T0 + timedelta(seconds=i)


def values(engine: Engine, uri: str) -> list[object]:
    return [output.value for output in engine.outputs(uri)]


# -- bugs found by the crash test ---------------------------------------------------------------------------------


def test_outputs_produced_after_a_flush_of_the_durable_sink_are_kept(tmp_path: Path) -> None:
    # The sink of every subscription was the bound ``append`` of the buffer list, and a flush replaced the list:
    # everything produced after the first checkpoint went into the discarded list.
    with Engine(tmp_path / "s.db", allow_modules=[__name__]) as engine:
        engine.create_stream("raw")
        engine.create_subscription("q", Query.stream("raw").map(double))
        engine.append_many("raw", [(i, second(i)) for i in range(3)])
        engine.process()
        engine.checkpoint()
        engine.append_many("raw", [(i, second(i)) for i in range(3, 6)])
        engine.process()
        assert values(engine, "q") == [0, 2, 4, 6, 8, 10]


def test_a_periodic_checkpoint_reports_the_checkpointing_status(tmp_path: Path) -> None:
    statuses: list[EngineStatus] = []
    engine = Engine(tmp_path / "s.db", allow_modules=[__name__], checkpoint_every_events=2)

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("checkpoint "):
                statuses.append(engine.status)

    handler, logger = Seen(), logging.getLogger("reaqtive.engine")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with engine:
            engine.create_stream("raw")
            engine.append_many("raw", [(i, second(i)) for i in range(4)])
            engine.process()
            assert engine.status is EngineStatus.RUNNING
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert statuses == [EngineStatus.CHECKPOINTING, EngineStatus.CHECKPOINTING]


def run_with_late_query(path: Path, crash: bool) -> list[Output]:
    """Events 0..59 (a second apart); at 25 s a query with 10-second buffers is created; with ``crash`` the
    engine dies (no checkpoint after the creation) and a new one recovers and finishes."""
    engine = Engine(path, allow_modules=[__name__])
    engine.create_stream("raw")
    engine.append_many("raw", [(i, second(i)) for i in range(60)])
    engine.process(max_events=20)
    engine.checkpoint()
    engine.process(max_events=6)  # the clock is at 25 s
    engine.create_subscription("q", Query.stream("raw").buffer(timedelta(seconds=10)).map(len))
    if crash:
        engine.close()  # no checkpoint covers the new query
        engine = Engine(path, allow_modules=[__name__])
    engine.process()
    engine.advance_time(second(100))
    outputs = engine.outputs()
    engine.close()
    return outputs


def test_a_query_recovered_before_any_checkpoint_keeps_the_windows_of_its_creation(tmp_path: Path) -> None:
    # The query was recovered without state and started afresh at the recovery's clock (1970, or the last
    # checkpoint's time): its windows were aligned on that instead of its creation time. Now its state at
    # creation is committed with its record.
    expected = run_with_late_query(tmp_path / "oracle.db", crash=False)
    assert [o.value for o in expected][:4] == [9, 10, 10, 5], "windows from 25 s: [25, 35), [35, 45), ..."
    assert run_with_late_query(tmp_path / "crashed.db", crash=True) == expected


def test_a_restarted_engine_resumes_its_clock_where_the_checkpoint_left_it(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Engine(path, allow_modules=[__name__]) as engine:
        engine.create_stream("raw")
        engine.append_many("raw", [(i, second(i)) for i in range(5)])
        engine.process()
        engine.checkpoint()
    with Engine(path, allow_modules=[__name__]) as engine:
        assert engine.now == second(4), "not 1970: a query created now gets windows from now"
        engine.create_subscription("q", Query.stream("raw").buffer(timedelta(minutes=1)).map(len))
        engine.append_many("raw", [(7, second(30)), (8, second(70))])
        engine.process()
        assert values(engine, "q") == [1], "one window closed ([4 s, 64 s)), not 56 years of empty ones"


def test_a_deleted_subscription_leaves_no_outputs_behind_for_its_uri(tmp_path: Path) -> None:
    with Engine(tmp_path / "s.db", allow_modules=[__name__]) as engine:
        engine.create_stream("raw")
        engine.create_subscription("q", Query.stream("raw").map(double))
        engine.append("raw", 1, second(1))
        engine.process()
        engine.checkpoint()
        engine.append("raw", 2, second(2))
        engine.process()  # an output still buffered for the sink
        engine.delete_subscription("q")
        with pytest.raises(ArtifactNotFoundError, match="'q'"):  # its outputs went with it
            engine.outputs("q")
        engine.create_subscription("q", Query.stream("raw").map(operator.neg))
        engine.append("raw", 3, second(3))
        engine.process()
        assert engine.outputs("q") == [Output("q", 0, -3)], "the new query's outputs are not taken for replays"


# -- the delivery guarantees the crash test does not cover --------------------------------------------------------


def test_events_appended_but_not_processed_are_never_lost(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Engine(path, allow_modules=[__name__]) as engine:
        engine.create_stream("raw")
        engine.create_subscription("q", Query.stream("raw").map(double))
        engine.append_many("raw", [(i, second(i)) for i in range(3)])
        engine.process(max_events=1)
        engine.checkpoint()
        engine.append("raw", 3, second(3))
        # the process dies here: events 1..3 were appended, never processed
    with Engine(path, allow_modules=[__name__]) as engine:
        engine.process()
        assert values(engine, "q") == [0, 2, 4, 6]


def test_an_observer_callback_receives_every_output_at_least_once_with_ids(tmp_path: Path) -> None:
    received.clear()
    path = tmp_path / "s.db"
    with Engine(path, allow_modules=[__name__]) as engine:
        engine.create_stream("raw")
        engine.define_observer("collector", collect)
        engine.create_subscription("q", Query.stream("raw").scan(0, operator.add), observer="collector")
        engine.append_many("raw", [(i, second(i)) for i in range(4)])
        engine.process(max_events=2)
        engine.checkpoint()
        engine.process()  # outputs 2 and 3 were delivered, then the process dies before a checkpoint
    with Engine(path, allow_modules=[__name__]) as engine:
        engine.append("raw", 4, second(4))
        engine.process()
    assert [(o.seq, o.value) for o in received] == [(0, 0), (1, 1), (2, 3), (3, 6), (2, 3), (3, 6), (4, 10)]
    deduplicated = {(o.subscription, o.seq): o.value for o in received}
    assert deduplicated == {("q", 0): 0, ("q", 1): 1, ("q", 2): 3, ("q", 3): 6, ("q", 4): 10}, "ids identify replays"


def test_wall_clock_mode_loses_nothing_after_a_crash(tmp_path: Path) -> None:
    # At-least-once into callbacks, effectively-once into the durable sink for what does not depend on time; the
    # times at which time-based operators fire are not replayed exactly (the clock follows the wall clock).
    path = tmp_path / "s.db"
    with Engine(path, allow_modules=[__name__], clock="wall") as engine:
        engine.create_stream("raw")
        engine.create_subscription("q", Query.stream("raw").map(double))
        engine.append_many("raw", [(i, None) for i in range(3)])
        engine.process(max_events=1)
        engine.checkpoint()
        engine.process()
    with Engine(path, allow_modules=[__name__], clock="wall") as engine:
        engine.append("raw", 3)
        engine.process()
        assert values(engine, "q") == [0, 2, 4, 6]
        assert engine.now >= datetime.now(UTC) - timedelta(minutes=1)


@pytest.mark.parametrize("full", [False, True])
def test_a_checkpoint_reports_what_it_did(tmp_path: Path, full: bool) -> None:
    with Engine(tmp_path / "s.db", allow_modules=[__name__]) as engine:
        engine.create_stream("raw")
        for i in range(3):
            engine.create_subscription(f"q{i}", Query.stream("raw").scan(0, operator.add))
        engine.append("raw", 1, T0)
        engine.process()
        metrics = engine.checkpoint(full=full)
        assert metrics.full is full and metrics.dirty_subscriptions == 3 and metrics.bytes_written > 0
        assert metrics.pause_seconds >= metrics.serialize_seconds >= 0 and metrics.commit_seconds > 0
        assert engine.last_checkpoint == metrics
        assert engine.checkpoint().dirty_subscriptions == 0, "nothing changed since"


def test_a_new_store_starts_its_clock_where_asked_or_at_the_first_need(tmp_path: Path) -> None:
    with Engine(tmp_path / "a.db", allow_modules=[__name__], start=second(10)) as engine:
        assert engine.now == second(10)
    with Engine(tmp_path / "b.db", allow_modules=[__name__]) as engine:
        engine.create_stream("raw")
        engine.create_subscription("q", Query.stream("raw").buffer(timedelta(minutes=1)).map(len))
        assert engine.now >= datetime.now(UTC) - timedelta(minutes=1), "not 1970: no window per minute since then"
        engine.append("raw", 1)
        engine.process()
        engine.advance_time(engine.now + timedelta(minutes=2))
        assert values(engine, "q") == [1, 0]
    with Engine(tmp_path / "c.db", allow_modules=[__name__]) as engine:
        engine.create_stream("raw")
        engine.append("raw", 1, second(5))
        engine.process()
        assert engine.now == second(5), "the first event sets a new store's clock"
