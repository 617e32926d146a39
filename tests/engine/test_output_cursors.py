"""Output cursors, acknowledgements and retention (issue 19): ``outputs(uri, after=seq, limit=n)`` read through the
durable sink's primary key, ``ack(uri, seq)`` recorded durably and only forward, acknowledged outputs trimmed in
one transaction, recovery unaffected; and the store layout 3 → 4 migration that adds the acknowledgement table."""

from __future__ import annotations

import operator
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reaqtive import Query
from reaqtive.engine import (
    DISCARD_SINK,
    AckError,
    ArtifactNotFoundError,
    Engine,
    EngineStore,
    RecoveryPolicy,
)
from reaqtive.engine import database as engine_store
from reaqtive.engine.database import ENGINE_SCHEMA_VERSION, MEMORY, ack_checksum, outputs_query
from reaqtive.state import DamagedRowError, StoreError

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(second: int) -> datetime:
    return T0 + timedelta(seconds=second)


def events(start: int, stop: int) -> list[tuple[int, datetime]]:
    return [(i, at(i)) for i in range(start, stop)]


def query(path: Path, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    db = sqlite3.connect(path)
    try:
        return db.execute(sql, params).fetchall()
    finally:
        db.close()


def execute(path: Path, sql: str, params: tuple[object, ...] = ()) -> None:
    db = sqlite3.connect(path)
    with db:
        db.execute(sql, params)
    db.close()


def open_engine(path: Path | str) -> Engine:
    return Engine(path, allow_modules=[__name__], start=T0, synchronous="OFF")


def running_sums(path: Path | str, count: int) -> Engine:
    """An engine with ``q://sum`` (a running sum of ``raw``) after ``count`` events, not checkpointed since."""
    engine = open_engine(path)
    engine.create_stream("raw")
    engine.create_subscription("q://sum", Query.stream("raw").scan(0, operator.add))
    engine.append_many("raw", events(0, count))
    engine.process()
    return engine


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    with running_sums(tmp_path / "s.db", 10) as opened:
        yield opened


def seqs(engine: Engine, uri: str = "q://sum", **cursor: int | None) -> list[int]:
    return [output.seq for output in engine.outputs(uri, **cursor)]


# -- cursors --------------------------------------------------------------------------------------------------------


def test_a_cursor_returns_the_outputs_after_a_seq_in_order(engine: Engine) -> None:
    assert seqs(engine, after=6) == [7, 8, 9]
    assert seqs(engine, after=-1, limit=3) == [0, 1, 2]
    assert seqs(engine, after=4, limit=2) == [5, 6]
    assert seqs(engine, after=9) == []
    assert seqs(engine, limit=0) == []


def test_a_cursor_needs_a_subscription_and_sound_bounds(engine: Engine) -> None:
    with pytest.raises(ValueError, match="after and limit need a subscription"):
        engine.outputs(after=3)
    with pytest.raises(ValueError, match="limit must be a whole number >= 0, got -1"):
        engine.outputs("q://sum", limit=-1)
    with pytest.raises(TypeError, match="after must be a sequence number"):
        engine.outputs("q://sum", after="3")  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=6),
    row=st.integers(min_value=1, max_value=8),
    after=st.integers(min_value=-1, max_value=120),
    limit=st.none() | st.integers(min_value=0, max_value=50),
)
def test_a_store_cursor_is_a_slice_of_the_whole_sink(
    batches: list[int], row: int, after: int, limit: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the rows' cut (batches written apart, rows of at most ``row`` outputs), a cursor gives exactly the
    outputs after ``after``, at most ``limit``, in order; another subscription's rows never mix in."""
    monkeypatch.setattr(engine_store, "EGRESS_ROW_OUTPUTS", row)
    store = EngineStore(MEMORY)
    try:
        seq = 0
        for size in batches:
            store.write_outputs([("q", seq + i, seq + i) for i in range(size)]
                                + [("p", seq + i, -1) for i in range(size)])
            seq += size
        whole = [(sub, s, value) for sub, s, value in store.read_outputs("q")]
        expected = [output for output in whole if output[1] > after][:limit]
        assert store.read_outputs("q", after=after, limit=limit) == expected
    finally:
        store.close()


def test_finding_one_new_output_among_50000_seeks_the_primary_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case: 50,000 rows of one output each (a consumer that polls flushes often), one new. The
    cursor's query is a range of the primary key, not a scan, and returns the new output."""
    monkeypatch.setattr(engine_store, "EGRESS_ROW_OUTPUTS", 1)
    path = tmp_path / "s.db"
    store = EngineStore(path, synchronous="OFF")
    try:
        store.write_outputs([("q://other", i, i) for i in range(1_000)])
        store.write_outputs([("q://sum", i, i) for i in range(50_000)])
        store.write_outputs([("q://sum", 50_000, "new")])
        assert query(path, "SELECT COUNT(*) FROM reaqtive_egress WHERE subscription = 'q://sum'") == [(50_001,)]
        assert store.read_outputs("q://sum", after=49_999, limit=100) == [("q://sum", 50_000, "new")]
    finally:
        store.close()
    for limit in (None, 100):
        sql, params = outputs_query("q://sum", 49_999, None, limit)
        plan = " | ".join(row[-1] for row in query(path, f"EXPLAIN QUERY PLAN {sql}", tuple(params)))
        assert "USING PRIMARY KEY (subscription=? AND seq>?)" in plan, plan
        assert "SCAN" not in plan and "TEMP B-TREE" not in plan, plan


# -- acknowledgements -----------------------------------------------------------------------------------------------


def test_acknowledged_outputs_are_no_longer_returned(engine: Engine) -> None:
    engine.ack("q://sum", 6)
    assert seqs(engine) == [7, 8, 9]
    assert seqs(engine, after=2, limit=2) == [7, 8], "a cursor below the acknowledgement starts after it"
    assert [o.seq for o in engine.outputs() if o.subscription == "q://sum"] == [7, 8, 9]


def test_an_acknowledgement_at_or_below_the_current_one_is_a_no_op(engine: Engine) -> None:
    engine.ack("q://sum", 6)
    engine.ack("q://sum", 3)
    engine.ack("q://sum", 6)
    engine.ack("q://sum", -1)
    assert seqs(engine) == [7, 8, 9]


def test_an_acknowledgement_beyond_the_last_output_is_refused(engine: Engine) -> None:
    with pytest.raises(AckError, match=r"ack\('q://sum', 10\): beyond its last output #9"):
        engine.ack("q://sum", 10)
    assert seqs(engine) == list(range(10)), "nothing was acknowledged"


def test_an_acknowledgement_of_what_is_not_a_durable_sink_is_refused(engine: Engine) -> None:
    engine.create_subscription("q://gone", Query.stream("raw").map(abs), observer=DISCARD_SINK)
    with pytest.raises(AckError, match="not to the durable sink"):
        engine.ack("q://gone", 0)
    with pytest.raises(ArtifactNotFoundError, match="no artifact 'q://none'"):
        engine.ack("q://none", 0)
    with pytest.raises(AckError, match="start at 0"):
        engine.ack("q://sum", -2)
    with pytest.raises(TypeError, match="seq must be a sequence number"):
        engine.ack("q://sum", 1.0)  # type: ignore[arg-type]


def test_an_acknowledgement_is_durable_at_once(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    engine = running_sums(path, 10)
    engine.ack("q://sum", 4)
    engine.close()  # no checkpoint
    with open_engine(path) as reopened:
        assert seqs(reopened) == [5, 6, 7, 8, 9]


# -- retention ------------------------------------------------------------------------------------------------------


def stored_seqs(path: Path, uri: str = "q://sum") -> list[tuple[object, ...]]:
    return query(path, "SELECT seq - count + 1, seq FROM reaqtive_egress WHERE subscription = ? ORDER BY seq", (uri,))


def test_trim_deletes_the_rows_whose_outputs_are_all_acknowledged(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with running_sums(path, 4) as engine:
        engine.outputs("q://sum")  # flushes #0-3 as one row
        engine.append_many("raw", events(4, 8))
        engine.process()
        engine.outputs("q://sum")  # #4-7
        engine.ack("q://sum", 5)
        assert engine.trim() == 4
        assert stored_seqs(path) == [(4, 7)], "the row that holds #6 and #7 stays whole"
        assert seqs(engine) == [6, 7]
        engine.ack("q://sum", 7)
        assert engine.trim() == 4
        assert stored_seqs(path) == []
        assert seqs(engine) == []


def test_a_checkpoint_trims(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with running_sums(path, 10) as engine:
        engine.ack("q://sum", 9)
        assert stored_seqs(path) == [(0, 9)], "acknowledged, still stored until the retention step"
        engine.checkpoint()
        assert stored_seqs(path) == []


def test_nothing_unacknowledged_is_trimmed(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with running_sums(path, 10) as engine:
        engine.create_subscription("q://twice", Query.stream("raw").map(abs))
        engine.append_many("raw", events(10, 12))
        engine.process()
        engine.outputs()
        engine.ack("q://twice", 0)
        engine.checkpoint()
        assert stored_seqs(path, "q://sum") == [(0, 9), (10, 11)]
        assert stored_seqs(path, "q://twice") == [(0, 1)], "#0 is acknowledged, but its row also holds #1"
        assert seqs(engine, "q://twice") == [1]


def test_a_failed_trim_deletes_nothing(tmp_path: Path) -> None:
    """Trimming is one transaction: a failure on its second subscription leaves the first one's rows too."""
    path = tmp_path / "s.db"
    with running_sums(path, 10) as engine:
        engine.create_subscription("q://w", Query.stream("raw").map(abs))
        engine.append_many("raw", events(10, 12))
        engine.process()
        engine.ack("q://sum", 11)
        engine.ack("q://w", 1)
        before = query(path, "SELECT subscription, seq FROM reaqtive_egress ORDER BY 1, 2")
        execute(path, "CREATE TRIGGER fail BEFORE DELETE ON reaqtive_egress WHEN old.subscription = 'q://w' "
                      "BEGIN SELECT RAISE(ABORT, 'the disk went away'); END")
        with pytest.raises(StoreError, match="the disk went away"):
            engine.trim()
        assert query(path, "SELECT subscription, seq FROM reaqtive_egress ORDER BY 1, 2") == before
        execute(path, "DROP TRIGGER fail")
        assert engine.trim() == 14


def test_a_failed_acknowledgement_records_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with running_sums(path, 10) as engine:
        engine.ack("q://sum", 2)
        execute(path, "CREATE TRIGGER fail BEFORE UPDATE ON reaqtive_acks "
                      "BEGIN SELECT RAISE(ABORT, 'the disk went away'); END")
        with pytest.raises(StoreError, match="the disk went away"):
            engine.ack("q://sum", 5)
        assert query(path, "SELECT seq FROM reaqtive_acks") == [(2,)]
        assert seqs(engine) == list(range(3, 10)), "the engine's view is the store's"


def test_recovery_after_a_trim_continues_the_numbering_without_writing_trimmed_outputs_again(
    tmp_path: Path,
) -> None:
    """Outputs beyond the checkpoint acknowledged and trimmed, then a crash: the replay produces them again
    (same ids), the sink does not take them back, and the numbering goes on."""
    with running_sums(tmp_path / "oracle.db", 15) as oracle:
        expected = oracle.outputs("q://sum")

    path = tmp_path / "s.db"
    engine = running_sums(path, 4)
    engine.checkpoint()
    engine.append_many("raw", events(4, 10))
    engine.process()
    engine.ack("q://sum", 9)  # beyond the checkpoint's counter (#3): everything
    engine.trim()
    assert stored_seqs(path) == []
    engine.close()  # a crash: no checkpoint since #3
    with open_engine(path) as recovered:
        assert recovered.recovery.failures == []
        recovered.append_many("raw", events(10, 15))
        recovered.process()
        assert recovered.outputs("q://sum") == [output for output in expected if output.seq > 9]
        assert stored_seqs(path) == [(10, 14)], "the replayed #4-9 were not written again"


def test_a_deleted_subscription_takes_its_acknowledgement_along(engine: Engine) -> None:
    engine.ack("q://sum", 9)
    engine.delete_subscription("q://sum")
    engine.create_subscription("q://sum", Query.stream("raw").scan(0, operator.add))
    engine.append("raw", 5, at(20))
    engine.process()
    assert seqs(engine) == [0], "a new subscription under the name starts unacknowledged"


def test_a_damaged_acknowledgement_fails_its_subscription_alone(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with running_sums(path, 10) as engine:
        engine.create_subscription("q://other", Query.stream("raw").map(abs))
        engine.ack("q://sum", 4)
        engine.checkpoint()
    execute(path, "UPDATE reaqtive_acks SET seq = 9 WHERE subscription = 'q://sum'")  # behind its checksum
    with Engine(path, allow_modules=[__name__], recovery_policy=RecoveryPolicy.KEEP, synchronous="OFF") as engine:
        assert [(f.uri, type(f.error)) for f in engine.recovery.failures] == [("q://sum", DamagedRowError)]
        assert "acknowledgement of 'q://sum'" in str(engine.recovery.failures[0].error)
        with pytest.raises(DamagedRowError):
            engine.outputs("q://sum")
        engine.append("raw", 3, at(30))
        engine.process()
        assert [o.value for o in engine.outputs("q://other")][-1] == 3
    assert query(path, "SELECT seq, crc FROM reaqtive_acks") == [(9, ack_checksum("q://sum", 4))], "kept as found"


# -- the store layout -----------------------------------------------------------------------------------------------


def layout_3_store(path: Path) -> None:
    """A store as the previous release wrote it: layout 3 is this one without the acknowledgement table."""
    with running_sums(path, 10) as engine:
        engine.checkpoint()
    execute(path, "DROP TABLE reaqtive_acks")
    execute(path, "UPDATE reaqtive_meta SET value = 3 WHERE key = 'engine_schema_version'")


def test_a_layout_3_store_is_migrated_and_nothing_is_acknowledged(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    layout_3_store(path)
    outputs_before = query(path, "SELECT * FROM reaqtive_egress ORDER BY subscription, seq")
    with open_engine(path) as engine:
        meta = dict(query(path, "SELECT key, value FROM reaqtive_meta"))
        assert meta["engine_schema_version"] == ENGINE_SCHEMA_VERSION
        assert query(path, "SELECT * FROM reaqtive_egress ORDER BY subscription, seq") == outputs_before
        assert seqs(engine) == list(range(10))
        engine.ack("q://sum", 3)
        engine.checkpoint()
        assert seqs(engine, after=-1, limit=2) == [4, 5]


def test_the_migration_from_layout_3_is_one_transaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "v3.db"
    layout_3_store(path)
    before = path.read_bytes()
    migrate = engine_store._migrate_from_3

    def failing(db: sqlite3.Connection) -> None:
        migrate(db)
        raise OSError("the disk went away")

    monkeypatch.setattr(engine_store, "_migrate_from_3", failing)
    with pytest.raises(OSError, match="the disk went away"):
        EngineStore(path)
    tables = {row[0] for row in query(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "reaqtive_acks" not in tables
    assert dict(query(path, "SELECT key, value FROM reaqtive_meta"))["engine_schema_version"] == 3
    assert path.read_bytes() == before
