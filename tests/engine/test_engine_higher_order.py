"""Higher-order queries hosted by the engine: inner subscriptions are state units of their own in the store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from reaqtive import GroupedStream, Query
from reaqtive.engine import Engine
from reaqtive.state import STATE_CATEGORY, SqliteCheckpointStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def key_of(x: int) -> int:
    return x % 100 if x >= 0 else -1


def increment(count: int, _: object) -> int:
    return count + 1


def running_count(group: GroupedStream[int]) -> Query[Any]:
    return group.scan(0, increment)


def is_negative(x: int) -> bool:
    return x < 0


def state_keys(path: Path) -> list[str]:
    store = SqliteCheckpointStore(path)
    try:
        return sorted(key for key, _ in store.read(strict=False).items(STATE_CATEGORY))
    finally:
        store.close()


def per_key_counts(path: Path, events: range, crash_after: int | None = None) -> list[object]:
    """Run a running count per key over ``events``; with ``crash_after`` the engine checkpoints, processes that
    many more events, then dies without a checkpoint, and a new engine recovers and finishes."""
    engine = Engine(path, allow_modules=[__name__])
    engine.create_stream("raw")
    engine.create_subscription("q", Query.stream("raw").group_by(key_of).flat_map(running_count))
    engine.append_many("raw", [(x, T0 + timedelta(seconds=x)) for x in events])
    if crash_after is not None:
        engine.process(max_events=len(events) // 2)
        engine.checkpoint()
        engine.process(max_events=crash_after)
        engine.close()  # no checkpoint: what happened since the last one is replayed
        engine = Engine(path, allow_modules=[__name__])
    engine.process()
    values = [output.value for output in engine.outputs("q")]
    engine.close()
    return values


def test_a_group_by_recovers_its_groups_and_their_counts(tmp_path: Path) -> None:
    expected = per_key_counts(tmp_path / "oracle.db", range(1000))
    assert expected[:100] == [1] * 100 and expected[-100:] == [10] * 100
    assert per_key_counts(tmp_path / "crashed.db", range(1000), crash_after=123) == expected


@pytest.mark.usefixtures("general_path")  # the general path's own units
def test_a_differential_checkpoint_writes_only_the_groups_that_changed(tmp_path: Path) -> None:
    with Engine(tmp_path / "s.db", allow_modules=[__name__]) as engine:
        engine.create_stream("raw")
        engine.create_subscription("q", Query.stream("raw").group_by(key_of).flat_map(running_count))
        engine.append_many("raw", [(x, T0) for x in range(100)])
        engine.process()
        full = engine.checkpoint(full=True)
        assert full.dirty_subscriptions == 101, "the query and its 100 inner subscriptions"
        engine.append_many("raw", [(x, T0) for x in (3, 5, 103)])
        engine.process()
        differential = engine.checkpoint()
        assert differential.dirty_subscriptions == 2, "groups 3 and 5: the query itself (and its key table) is clean"
        assert differential.bytes_written * 20 < full.bytes_written, (differential, full)
        engine.append("raw", -7, T0)  # a new key: the key table changes
        engine.process()
        assert engine.checkpoint().dirty_subscriptions == 2, "the new group and the query"


def test_many_queries_over_one_busy_stream_are_written_only_when_their_state_changes(tmp_path: Path) -> None:
    with Engine(tmp_path / "s.db", allow_modules=[__name__]) as engine:
        engine.create_stream("raw")
        for i in range(50):
            engine.create_subscription(f"q{i}", Query.stream("raw").filter(is_negative).scan(0, increment))
        engine.create_subscription("all", Query.stream("raw").scan(0, increment))
        engine.checkpoint()
        engine.append_many("raw", [(1, T0), (2, T0), (-3, T0)])
        engine.process(max_events=2)
        metrics = engine.checkpoint()
        assert metrics.dirty_subscriptions == 1, "only 'all' counted something; the 50 others only read"
        engine.process()
        assert engine.checkpoint().dirty_subscriptions == 51, "-3 reached every count"
        engine.append_many("raw", [(4, T0), (-5, T0)])
        engine.process(max_events=1)  # the process dies after this: -5 is replayed to all after recovery
    with Engine(tmp_path / "s.db", allow_modules=[__name__]) as engine:
        engine.process()
        assert [o.value for o in engine.outputs("all")] == [1, 2, 3, 4, 5]
        assert [o.value for o in engine.outputs("q7")] == [1, 2]


@pytest.mark.usefixtures("general_path")  # the general path's own units
def test_deleting_a_subscription_deletes_the_state_of_its_inner_subscriptions(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Engine(path, allow_modules=[__name__]) as engine:
        engine.create_stream("raw")
        for uri in ("q", "keep"):
            engine.create_subscription(uri, Query.stream("raw").group_by(key_of).flat_map(running_count))
        engine.append_many("raw", [(x, T0) for x in range(5)])
        engine.process()
        engine.checkpoint()
        assert len([key for key in state_keys(path) if key.startswith("q/")]) == 5
        engine.delete_subscription("q")
        assert [key for key in state_keys(path) if key.startswith("q")] == [], "deleted at once, inner state too"
        assert len([key for key in state_keys(path) if key.startswith("keep/")]) == 5
        engine.append("raw", 7, T0)
        engine.process()
        engine.checkpoint()
    with Engine(path, allow_modules=[__name__]) as engine:
        assert engine.recovery.subscriptions == 1 and engine.recovery.inner_subscriptions == 6
        assert [key for key in state_keys(path) if key.startswith("q")] == []


def test_a_query_created_again_under_a_deleted_uri_recovers_its_inner_state(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Engine(path, allow_modules=[__name__]) as engine:
        engine.create_stream("raw")
        engine.create_subscription("q", Query.stream("raw").group_by(key_of).flat_map(running_count))
        engine.append_many("raw", [(x, T0) for x in range(3)])
        engine.process()
        engine.delete_subscription("q")
        engine.create_subscription("q", Query.stream("raw").group_by(key_of).flat_map(running_count))
        engine.append_many("raw", [(x, T0) for x in (0, 1)])
        engine.process()
        engine.checkpoint()
    with Engine(path, allow_modules=[__name__]) as engine:
        engine.append_many("raw", [(x, T0) for x in (0, 1, 2)])
        engine.process()
        assert [o.value for o in engine.outputs("q")] == [1, 1, 2, 2, 1], "the groups' counts went on"
