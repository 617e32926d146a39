"""With the wall clock, outputs the durable sink got after the last checkpoint are provisional: a replay after a
restart may cut time windows otherwise, so the engine drops them at recovery and the sink takes the replay's
version. Without that, an event would be in two windows (found by tests/engine/test_running_crash.py)."""

from __future__ import annotations

import operator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from reaqtive import Query
from reaqtive.engine import Engine
from tests.engine.store_targets import STORES, store_sql

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def open_engine(target: Path | str, clock: str) -> Engine:
    return Engine(target, clock=clock, synchronous="NORMAL")


@pytest.mark.parametrize("kind", STORES)
def test_outputs_written_after_the_last_checkpoint_give_way_to_the_replay_under_the_wall_clock(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    sql = store_sql(kind, tmp_path, request)
    hour = timedelta(hours=1)
    with open_engine(sql.target, "wall") as engine:
        engine.create_stream("s")
        engine.create_subscription("total", Query.stream("s").scan(0, operator.add))
        engine.create_subscription("windows", Query.stream("s").buffer(hour, 1000))
        engine.append_many("s", [(i, None) for i in range(1, 4)])
        engine.process()
        engine.advance_time(datetime.now(UTC) + hour)  # window #0: [1, 2, 3]
        engine.checkpoint()
        engine.append_many("s", [(i, None) for i in range(4, 8)])
        engine.process()
        engine.advance_time(datetime.now(UTC) + 3 * hour)  # window #1: [4..7], after the checkpoint
        engine.append("s", 8, None)
        engine.process()
        assert [output.value for output in engine.outputs("windows") if output.value] == [[1, 2, 3], [4, 5, 6, 7]]
    # Closed without a checkpoint (a crash flushes less, never more): the replay delivers 4..8 at the recovery's
    # time, all in the window the checkpoint had open, so its window #1 is [4..8], not [4..7].
    with open_engine(sql.target, "wall") as engine:
        engine.process()
        assert [output.value for output in engine.outputs("total")] == [sum(range(1, n + 1)) for n in range(1, 9)]
        assert [output.seq for output in engine.outputs("total")] == list(range(8))
        engine.advance_time(datetime.now(UTC) + 5 * hour)
        windows = engine.outputs("windows")  # empty lists too: the hours with no event
        assert [output.seq for output in windows] == list(range(len(windows)))
        flat = [value for output in windows for value in output.value]
        assert flat == list(range(1, 9)), "every event in exactly one window"


@pytest.mark.parametrize("kind", STORES)
def test_under_the_event_clock_the_sink_keeps_its_first_copy(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    sql = store_sql(kind, tmp_path, request)
    with Engine(sql.target, synchronous="NORMAL", start=T0) as engine:
        engine.create_stream("s")
        engine.create_subscription("total", Query.stream("s").scan(0, operator.add))
        engine.append_many("s", [(i, T0 + timedelta(seconds=i)) for i in range(1, 4)])
        engine.process()
        engine.checkpoint()
        engine.append_many("s", [(i, T0 + timedelta(seconds=i)) for i in range(4, 8)])
        engine.process()
        engine.outputs("total")
    rows_before = sql.rows("SELECT seq, count, crc FROM reaqtive_egress WHERE subscription = ? ORDER BY seq",
                           ("total",))
    with Engine(sql.target, synchronous="NORMAL", start=T0) as engine:
        engine.process()
        assert [output.value for output in engine.outputs("total")] == [1, 3, 6, 10, 15, 21, 28]
    assert sql.rows("SELECT seq, count, crc FROM reaqtive_egress WHERE subscription = ? ORDER BY seq",
                    ("total",)) == rows_before, "the replay's identical outputs did not rewrite the sink's rows"
