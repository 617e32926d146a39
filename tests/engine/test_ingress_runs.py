"""The ingress log as runs (issue 15, item 2): a row per run of consecutive events of one stream, read back in
runs, positions and sequence numbers exact, damage confined to its row, truncation by whole rows, and the
migration of a layout-2 file (a row per event) written by the previous release."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from msgpack import packb as msgpack_packb

from reaqtive import Query
from reaqtive.engine import Engine, EngineStore, IngressEvent, UnknownEngineVersionError
from reaqtive.engine import database as engine_store
from reaqtive.engine.database import (
    ENGINE_SCHEMA_VERSION,
    ROW_EVENTS,
    IngressRun,
    RunTimes,
    dead_letter_checksum,
    ingress_checksum,
    pack_times,
    to_micros,
    unpack_run_times,
    unpack_times,
    unpack_times_in_order,
)
from reaqtive.state import DEFAULT_CODEC, StoreError
from reaqtive.state.sqlite_store import columns_checksum

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAMAGED = "does not match its checksum"


def second(i: int) -> datetime:
    return T0 + timedelta(seconds=i)


def query(path: Path, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
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


def all_runs(store: EngineStore, after: int = 0, limit: int = 100) -> list[IngressRun]:
    runs: list[IngressRun] = []
    while batch := store.read_ingress_runs(after, limit):
        runs += batch
        after = batch[-1].pos + batch[-1].count - 1
    return runs


def events_of(runs: list[IngressRun]) -> list[tuple[int, str, int, int, Any]]:
    """(pos, stream, seq, micros, value) of every event of sound runs."""
    return [(run.pos + i, run.stream, run.seq + i, run.micros[i], run.values[i])
            for run in runs if run.damage is None for i in range(run.count)]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EngineStore]:
    store = EngineStore(tmp_path / "s.db", synchronous="OFF")
    yield store
    store.close()


def far_future(value: object, time: datetime) -> str | None:
    return "dated too far in the future" if time > second(10**5) else None


# -- rows and runs ----------------------------------------------------------------------------------------------------


def test_runs_of_many_streams_interleaved_come_back_with_exact_positions_numbers_times_and_values(
    store: EngineStore,
) -> None:
    rng = random.Random(15)
    streams = [f"s://{i}" for i in range(5)]
    written: list[tuple[str, int, int, Any]] = []  # (stream, seq, micros, value) of logged events, in log order
    refused: set[tuple[str, int]] = set()
    for batch_number in range(60):
        stream = rng.choice(streams)
        size = rng.choice((1, 1, 2, 7, 50, 300, ROW_EVENTS + 5))
        values: list[Any] = [rng.choice((batch_number, f"v{batch_number}", [batch_number, None], {"k": 1.5}))
                             for _ in range(size)]
        times = [second(rng.randrange(-10**5, 10**5)) if rng.random() > 0.01 else second(10**6)
                 for _ in range(size)]
        seqs = store.append(stream, list(zip(values, times, strict=True)), quarantine=far_future)
        for seq, value, time in zip(seqs, values, times, strict=True):
            if far_future(value, time):
                refused.add((stream, seq))
            else:
                written.append((stream, seq, to_micros(time), value))
    runs = all_runs(store, limit=777)
    assert events_of(runs) == [(pos, *event) for pos, event in enumerate(written, 1)]
    assert store.last_position() == len(written)
    for stream in streams:  # every number given: logged or quarantined, none twice
        numbers = sorted([seq for s, seq, _, _ in written if s == stream] + [seq for s, seq in refused if s == stream])
        assert numbers == list(range(store.stream_heads().get(stream, 0)))
    assert {(d.stream, d.seq) for d in store.dead_letters()} == refused and refused
    rows = query(store.path, "SELECT pos, stream, seq, count FROM reaqtive_ingress ORDER BY pos")
    assert all(1 <= count <= ROW_EVENTS for *_, count in rows)
    assert len(rows) < len(written) // 20, "a row per run, not per event"
    expanded = [(e.pos, e.stream, e.seq, to_micros(e.time), e.value) for e in store.read_ingress(0, 10**6)]
    assert expanded == events_of(runs), "read_ingress is the same log, an object per event"
    assert store.ingress_counts() == {s: sum(1 for w in written if w[0] == s) for s in streams if
                                      any(w[0] == s for w in written)}


def test_a_large_append_is_cut_into_rows_and_consecutive_appends_of_one_stream_stay_apart(store: EngineStore) -> None:
    store.append("a", [(i, second(i)) for i in range(2 * ROW_EVENTS + 10)])
    store.append("a", [(0, T0)])  # another call: another row (a row is written by one transaction)
    store.append("b", [("x" * 40_000, T0) for _ in range(60)])  # large values: rows of about a megabyte
    rows = query(store.path, "SELECT stream, seq, count, length(payload) FROM reaqtive_ingress ORDER BY pos")
    assert [row[:3] for row in rows[:4]] == [("a", 0, ROW_EVENTS), ("a", ROW_EVENTS, ROW_EVENTS),
                                              ("a", 2 * ROW_EVENTS, 10), ("a", 2 * ROW_EVENTS + 10, 1)]
    assert all(size <= 1.1 * 2**20 for *_, size in rows[4:]) and sum(r[2] for r in rows[4:]) == 60
    assert len(rows) > 5


def test_reads_after_a_position_in_the_middle_of_a_row_start_right_after_it(store: EngineStore) -> None:
    store.append("a", [(i, second(i)) for i in range(10)])  # pos 1..10, one row
    store.append("b", [(-i, second(i)) for i in range(3)])  # pos 11..13
    for after in range(14):
        runs = store.read_ingress_runs(after, 100)
        expected = [(p, "a" if p <= 10 else "b", p - 1 if p <= 10 else p - 11) for p in range(after + 1, 14)]
        assert [(p, s, q) for p, s, q, _, _ in events_of(runs)] == expected
        if runs:
            first = runs[0]
            assert first.pos == after + 1 and len(first.values) == len(first.micros) == first.count
    middle = store.read_ingress_runs(6, 1)[0]
    assert (middle.pos, middle.seq, middle.values, middle.micros[0]) == (7, 6, [6, 7, 8, 9], to_micros(second(6)))
    assert [(e.pos, e.seq, e.value, e.payload) for e in middle.events()] == [
        (7 + i, 6 + i, 6 + i, DEFAULT_CODEC.encode(6 + i)) for i in range(4)], "each event keeps its own bytes"
    assert [e.pos for e in store.read_ingress(3, 2)] == [4, 5], "read_ingress keeps its limit in events"


def test_a_read_limit_takes_whole_rows_within_limit_positions(store: EngineStore) -> None:
    for start in range(0, 40, 10):
        store.append("a", [(i, second(i)) for i in range(start, start + 10)])
    assert [(r.pos, r.count) for r in store.read_ingress_runs(0, 15)] == [(1, 10), (11, 10)]
    assert [(r.pos, r.count) for r in store.read_ingress_runs(5, 5)] == [(6, 5)]
    assert store.read_ingress_runs(40, 100) == []


def test_truncation_deletes_only_whole_rows_and_positions_are_never_reused(store: EngineStore) -> None:
    store.append("a", [(i, second(i)) for i in range(5)])  # pos 1..5: a#0..4
    store.append("b", [(i, second(i)) for i in range(3)])  # pos 6..8: b#0..2
    store.append("a", [(i, second(i)) for i in range(5, 8)])  # pos 9..11: a#5..7
    assert store.position_after("a", 2) == 4 and store.position_after("a", 4) == 9
    assert store.position_after("a", 7) is None and store.position_after("b", -1) == 6
    assert store.truncate_ingress({"a": 6, "b": 1}) == 5, "a#0..4: its row is wholly covered; a#5..7 is not"
    assert store.ingress_counts() == {"a": 3, "b": 3} and store.first_retained() == {"a": 5, "b": 0}
    assert store.position_after("a", 5) == 10, "a position in the middle of a row that stays"
    assert [e.pos for e in store.read_ingress(9, 100)] == [10, 11]
    assert store.truncate_ingress({"a": 7, "b": 2}) == 6
    assert store.ingress_counts() == {} and store.read_ingress_runs(0, 100) == []
    assert store.last_position() == 11, "kept after the log is empty"
    assert store.append("c", [(1, T0), (2, T0)]) == [0, 1]
    assert [(r.pos, r.stream) for r in store.read_ingress_runs(0, 100)] == [(12, "c")]


# -- damage -----------------------------------------------------------------------------------------------------------


@pytest.fixture
def three_rows(store: EngineStore) -> EngineStore:
    store.append("a", [(i, second(i)) for i in range(4)])  # pos 1..4
    store.append("b", [(i + 10, second(i)) for i in range(4)])  # pos 5..8
    store.append("a", [(i, second(i)) for i in range(4, 8)])  # pos 9..12
    return store


@pytest.mark.parametrize(("column", "change"), [
    ("payload", lambda v: v[:2] + bytes([v[2] ^ 0x01]) + v[3:]),  # a value flipped, still well formed
    ("payload", lambda v: v[:-1]),  # truncated: cannot be cut into its events
    ("times", lambda v: v[:1] + bytes([v[1] ^ 0x40]) + v[2:]),
    ("seq", lambda v: v + 1), ("stream", lambda v: "c"), ("count", lambda v: 3), ("crc", lambda v: v ^ 1),
])
def test_a_flipped_byte_damages_its_row_and_only_its_row(three_rows: EngineStore, column: str, change: Any) -> None:
    store = three_rows
    ((value,),) = query(store.path, f"SELECT {column} FROM reaqtive_ingress WHERE pos = 5")
    execute(store.path, f"UPDATE reaqtive_ingress SET {column} = ? WHERE pos = 5", (change(value),))
    runs = store.read_ingress_runs(0, 100)
    assert [(r.pos, r.damage is None) for r in runs] == [(1, True), (5, False), (9, True)]
    damaged = runs[1]
    assert DAMAGED in (damaged.damage or "") and damaged.values == [None] * damaged.count
    assert damaged.count == (3 if column == "count" else 4)
    events = store.read_ingress(0, 100)
    assert [e.pos for e in events if e.damage] == list(range(5, 5 + damaged.count))
    assert [e.value for e in events if not e.damage] == [0, 1, 2, 3, 4, 5, 6, 7]


def test_quarantined_events_of_a_damaged_row_keep_their_bytes(three_rows: EngineStore) -> None:
    store = three_rows
    ((payload,),) = query(store.path, "SELECT payload FROM reaqtive_ingress WHERE pos = 5")
    flipped = bytes([payload[0] ^ 0x01]) + payload[1:]  # 10 -> 11: still four entries
    execute(store.path, "UPDATE reaqtive_ingress SET payload = ? WHERE pos = 5", (flipped,))
    damaged = [e for e in store.read_ingress(0, 100) if e.damage]
    assert store.quarantine([(e, e.damage or "") for e in damaged]) == 4
    letters = store.dead_letters("b")
    assert [(d.seq, d.pos, d.time, d.payload, d.value) for d in letters] == [
        (0, 5, second(0), DEFAULT_CODEC.encode(11), 11)] + [
        (i, 5 + i, second(i), DEFAULT_CODEC.encode(i + 10), i + 10) for i in range(1, 4)]
    assert all(DAMAGED in d.reason for d in letters)


def test_a_damaged_row_that_cannot_be_cut_keeps_its_bytes_with_its_first_event(three_rows: EngineStore) -> None:
    store = three_rows
    ((payload,),) = query(store.path, "SELECT payload FROM reaqtive_ingress WHERE pos = 5")
    execute(store.path, "UPDATE reaqtive_ingress SET payload = ?, times = X'c1' WHERE pos = 5", (payload[:-1],))
    damaged = [e for e in store.read_ingress(0, 100) if e.damage]
    assert [(e.seq, e.payload, e.micros) for e in damaged] == [(0, payload[:-1], None)] + [(i, None, None)
                                                                                           for i in range(1, 4)]
    store.quarantine([(e, "damaged") for e in damaged])
    stored = query(store.path, "SELECT seq, time, payload FROM reaqtive_dead_letters ORDER BY seq")
    assert stored == [(0, b"\xc1", payload[:-1]), (1, None, None), (2, None, None), (3, None, None)]
    for row in query(store.path, "SELECT stream, seq, pos, time, payload, reason, at, crc FROM reaqtive_dead_letters"):
        assert row[-1] == dead_letter_checksum(*row[:-1])


def test_quarantine_of_one_event_of_a_sound_row_keeps_that_events_bytes(three_rows: EngineStore) -> None:
    store = three_rows
    (run,) = [r for r in store.read_ingress_runs(0, 100) if r.stream == "b"]
    event = run.events()[2]
    assert (event.pos, event.seq, event.value, event.payload) == (7, 2, 12, DEFAULT_CODEC.encode(12))
    store.quarantine([(event, "poison")])
    (letter,) = store.dead_letters()
    assert (letter.stream, letter.seq, letter.pos, letter.time, letter.value, letter.payload) == (
        "b", 2, 7, second(2), 12, DEFAULT_CODEC.encode(12))


def test_a_damaged_count_never_claims_events_of_the_next_row_or_beyond_the_last_position(
    three_rows: EngineStore,
) -> None:
    store = three_rows
    execute(store.path, "UPDATE reaqtive_ingress SET count = 900 WHERE pos IN (5, 9)")
    runs = store.read_ingress_runs(0, 5)  # the rows read end at row 5: the next one bounds it all the same
    assert [(r.pos, r.count, r.damage is None) for r in runs] == [(1, 4, True), (5, 4, False)]
    (last,) = store.read_ingress_runs(8, 100)
    assert (last.pos, last.count, last.damage is None) == (9, 4, False), "the last position given bounds it"
    assert store.append("a", [(99, T0)]) == [8]
    assert store.read_ingress_runs(12, 100)[0].pos == 13


def test_a_row_whose_times_or_values_do_not_match_its_count_is_damaged_not_an_exception(store: EngineStore) -> None:
    store.append("a", [(1, T0)])
    encode = DEFAULT_CODEC.encode
    for pos, count, times, payload in (
        (2, 2, pack_times([1, 2]), encode(1)),  # one value for two events
        (3, 1, pack_times([1, 2]), encode(1)),  # two times for one event
        (4, 1, b"\x91\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00", encode(1)),  # a float time
        (5, 1, pack_times([2**62]), encode(1)),  # beyond datetime
        (6, 1, pack_times([]), b""),
    ):
        execute(store.path, "INSERT INTO reaqtive_ingress VALUES (?, 'a', ?, ?, ?, ?, ?)",
                (pos, pos, count, times, payload, ingress_checksum(pos, "a", pos, count, times, payload)))
    runs = all_runs(store)
    assert [(r.pos, r.count, r.damage is None) for r in runs] == [(1, 1, True)] + [(p, 1, False) for p in range(2, 7)]
    assert all("cannot be decoded" in (r.damage or "") for r in runs[1:])
    assert unpack_times(pack_times([5, 3, 3, -7]), 4) == [5, 3, 3, -7]


# -- migration from layout 2 (the previous release) -------------------------------------------------------------------

# The previous release's ingress table and writer, copied on purpose (reaqtive/engine/database.py of layout 2): the
# table, its AUTOINCREMENT position counter, one row per event, the checksum of its five columns.
V2_INGRESS = (
    "CREATE TABLE IF NOT EXISTS reaqtive_ingress (pos INTEGER PRIMARY KEY AUTOINCREMENT, "
    "stream TEXT NOT NULL, seq INTEGER NOT NULL, time INTEGER NOT NULL, payload BLOB NOT NULL, "
    "crc INTEGER NOT NULL, UNIQUE (stream, seq))"
)
V2_INSERT_DEAD_LETTER = (
    "INSERT OR IGNORE INTO reaqtive_dead_letters (stream, seq, pos, time, payload, reason, at, crc) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


def v2_append(db: sqlite3.Connection, stream: str, events: list[tuple[Any, datetime]], quarantine: Any = None
              ) -> list[int]:
    """``EngineStore.append`` of layout 2, as released."""
    encode = DEFAULT_CODEC.encode
    rows = [(encode(value), to_micros(time), quarantine(value, time) if quarantine is not None else None)
            for value, time in events]
    at = to_micros(datetime.now(UTC))
    db.execute("BEGIN IMMEDIATE")
    head = db.execute("SELECT next_seq FROM reaqtive_stream_heads WHERE stream = ?", (stream,)).fetchone()
    first = head[0] if head else 0
    row = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'reaqtive_ingress'").fetchone()
    top = db.execute("SELECT MAX(pos) FROM reaqtive_ingress").fetchone()
    pos = max(row[0] if row else 0, top[0] or 0) + 1
    logged, dead = [], []
    for seq, (payload, micros, reason) in enumerate(rows, first):
        if reason is None:
            logged.append((pos, stream, seq, micros, payload, columns_checksum(pos, stream, seq, micros, payload)))
            pos += 1
        else:
            why = str(reason)
            dead.append((stream, seq, None, micros, payload, why, at,
                         dead_letter_checksum(stream, seq, None, micros, payload, why, at)))
    db.executemany(
        "INSERT INTO reaqtive_ingress (pos, stream, seq, time, payload, crc) VALUES (?, ?, ?, ?, ?, ?)", logged)
    if dead:
        db.executemany(V2_INSERT_DEAD_LETTER, dead)
    db.execute("INSERT INTO reaqtive_stream_heads (stream, next_seq) VALUES (?, ?) "
               "ON CONFLICT (stream) DO UPDATE SET next_seq = excluded.next_seq", (stream, first + len(rows)))
    db.execute("COMMIT")
    return list(range(first, first + len(rows)))


def add(a: int, b: int) -> int:
    return a + b


def v2_store(path: Path) -> None:
    """A store of the previous release: streams ``a`` and ``b``, a running sum over each, events of which one
    was quarantined when appended and one was damaged later, and the last row truncated (the position counter is
    past it). The other tables are the same in both layouts (the acknowledgements' came with layout 4), so the
    store is made by this release, its ingress log replaced by layout 2's, written by the previous release's
    writer, and its acknowledgement table dropped."""
    with Engine(path, allow_modules=[__name__], start=T0, synchronous="OFF") as engine:
        engine.create_stream("a")
        engine.create_stream("b")
        engine.create_subscription("sum-a", Query.stream("a").scan(0, add))
        engine.create_subscription("sum-b", Query.stream("b").scan(0, add))
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("DROP TABLE reaqtive_ingress")
    db.execute("DROP TABLE reaqtive_acks")
    db.execute(V2_INGRESS)
    db.execute("DELETE FROM reaqtive_meta WHERE key = 'ingress_position'")
    db.execute("UPDATE reaqtive_meta SET value = 2 WHERE key = 'engine_schema_version'")
    v2_append(db, "a", [(i, second(i)) for i in range(3)])  # pos 1..3: a#0..2
    v2_append(db, "b", [(100, second(3))])  # pos 4: b#0
    v2_append(db, "a", [(3, second(4)), (4, second(10**7)), (5, second(5))],
              quarantine=lambda value, time: "too far ahead" if time > second(10**6) else None)  # pos 5, 6: a#3, a#5
    v2_append(db, "b", [(200, second(6)), (300, second(7))])  # pos 7, 8
    v2_append(db, "a", [(6, second(8))])  # pos 9: a#6
    db.execute("UPDATE reaqtive_ingress SET payload = X'07' WHERE pos = 7")  # b#1 damaged behind its checksum
    db.execute("DELETE FROM reaqtive_ingress WHERE pos = 9")  # a#6: the last row, gone
    db.close()


def test_a_layout_2_file_of_the_previous_release_is_migrated_and_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    v2_store(path)
    assert query(path, "SELECT seq FROM sqlite_sequence WHERE name = 'reaqtive_ingress'") == [(9,)]
    before = query(path, "SELECT pos, stream, seq, time, payload FROM reaqtive_ingress ORDER BY pos")
    store = EngineStore(path, synchronous="OFF")
    try:
        meta = dict(query(path, "SELECT key, value FROM reaqtive_meta"))
        assert meta["engine_schema_version"] == ENGINE_SCHEMA_VERSION
        rows = query(path, "SELECT pos, stream, seq, count, times, payload, crc FROM reaqtive_ingress ORDER BY pos")
        assert [(p, s, q, c, unpack_times(t, 1)[0], v) for p, s, q, c, t, v, _ in rows] == [
            (p, s, q, 1, micros, v) for p, s, q, micros, v in before], "each old row is a run of one event"
        assert [crc == ingress_checksum(*row[:6]) for *row, crc in rows] == [True] * 6 + [False, True]
        assert rows[6][-1] == -1, "the damaged row keeps a checksum that never verifies"
        events = store.read_ingress(0, 100)
        assert [(e.pos, e.stream, e.seq, e.value, e.damage is None) for e in events] == [
            (1, "a", 0, 0, True), (2, "a", 1, 1, True), (3, "a", 2, 2, True), (4, "b", 0, 100, True),
            (5, "a", 3, 3, True), (6, "a", 5, 5, True), (7, "b", 1, None, False), (8, "b", 2, 300, True)]
        assert store.stream_heads() == {"a": 7, "b": 3}
        assert [(d.stream, d.seq, d.pos, d.reason) for d in store.dead_letters()] == [("a", 4, None, "too far ahead")]
        assert store.last_position() == 9, "the old AUTOINCREMENT counter goes on (pos 9 was truncated)"
        assert store.append("a", [(7, second(9)), (8, second(10))]) == [7, 8]
        assert [(r.pos, r.seq, r.count) for r in store.read_ingress_runs(8, 100)] == [(10, 7, 2)]
    finally:
        store.close()
    with Engine(path, allow_modules=[__name__], synchronous="OFF") as engine:
        engine.append("b", 400, second(11))
        assert engine.process() == 11
        outputs = [(o.subscription, o.value) for o in engine.outputs()]
        assert [v for s, v in outputs if s == "sum-a"] == [0, 1, 3, 6, 11, 18, 26], "a#4 quarantined, a#6 lost"
        assert [v for s, v in outputs if s == "sum-b"] == [100, 400, 800]
        letters = {(d.stream, d.seq): d for d in engine.dead_letters()}
        assert DAMAGED in letters[("b", 1)].reason and letters[("b", 1)].payload == b"\x07", "kept its bytes"
        assert letters[("b", 1)].pos == 7 and letters[("b", 1)].time == second(6)
        assert ("a", 6) in letters and "missing" in letters[("a", 6)].reason
        engine.checkpoint()
        assert engine.streams()["a"].retained == 0


def test_the_migration_from_layout_2_is_one_transaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "v2.db"
    v2_store(path)
    tables = ("reaqtive_meta", "reaqtive_blobs", "reaqtive_ingress", "reaqtive_stream_heads", "sqlite_sequence")
    before = {table: query(path, f"SELECT * FROM {table}") for table in tables}
    migrate = engine_store._migrate_from_2

    def failing(db: sqlite3.Connection) -> None:
        migrate(db)
        raise OSError("the disk went away")

    monkeypatch.setattr(engine_store, "_migrate_from_2", failing)
    with pytest.raises(OSError, match="the disk went away"):
        EngineStore(path)
    assert {table: query(path, f"SELECT * FROM {table}") for table in tables} == before
    monkeypatch.undo()
    EngineStore(path).close()
    assert dict(query(path, "SELECT key, value FROM reaqtive_meta"))["engine_schema_version"] == ENGINE_SCHEMA_VERSION


def test_a_file_of_the_next_layout_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "next.db"
    EngineStore(path).close()
    execute(path, "UPDATE reaqtive_meta SET value = ? WHERE key = 'engine_schema_version'",
            (ENGINE_SCHEMA_VERSION + 1,))
    before = path.read_bytes()
    with pytest.raises(UnknownEngineVersionError, match=f"layout version {ENGINE_SCHEMA_VERSION + 1}"):
        EngineStore(path)
    assert path.read_bytes() == before


def test_ingress_events_read_from_runs_are_the_objects_of_before(store: EngineStore) -> None:
    store.append("a", [({"n": 1}, second(1)), ((1, 2), second(2))])
    assert store.read_ingress(0, 10) == [IngressEvent(1, "a", 0, second(1), {"n": 1}),
                                         IngressEvent(2, "a", 1, second(2), (1, 2))]


# -- a run's times, kept as the row's differences (RunTimes) --------------------------------------------------------

@settings(max_examples=200, deadline=None)
@example(micros=[5, 7, 9], offset=1, asks=[("index", 1), ("index", 0), ("after", 1), ("index", 0)])
@example(micros=[0, 10, 3], offset=0, asks=[("index", 2)])
@example(micros=[-1, 10], offset=0, asks=[("index", 1)])
@given(
    micros=st.lists(st.integers(0, 253402300799999999), min_size=1, max_size=50).map(sorted)  # in order
    | st.lists(st.integers(-10**15, 10**16), min_size=1, max_size=50),
    offset=st.integers(0, 49),
    asks=st.lists(st.tuples(st.sampled_from(["index", "slice", "after", "list"]), st.integers(-60, 60)),
                  max_size=12),
)
def test_a_runs_times_read_from_the_rows_differences_are_the_times_whatever_is_asked(
    micros: list[int], offset: int, asks: list[tuple[str, int]],
) -> None:
    """The fast path reads a time at a slice's end from a running sum of the row's differences; any sequence of
    indexes (backwards too), slices and cuts (``after``) gives what the list of times gives, and a row out of
    order comes back as a list (not ``ordered``)."""
    offset = min(offset, len(micros) - 1)
    column = pack_times(micros)
    ticks, ordered = unpack_run_times(column, len(micros), offset)
    assert ordered == all(b >= a for a, b in zip([0, *micros], micros, strict=False))
    expected = micros[offset:]
    for kind, n in asks:
        if kind == "index":
            if -len(expected) <= n < len(expected):
                assert ticks[n] == expected[n]
            else:
                with pytest.raises(IndexError):
                    ticks[n]
        elif kind == "slice":
            assert ticks[n:] == expected[n:] and ticks[:n] == expected[:n]
        elif kind == "after" and 0 <= n <= len(expected):
            ticks, expected = ticks.after(n), expected[n:]
        elif kind == "list":
            assert ticks.as_list() == expected
        assert len(ticks) == len(expected) and bool(ticks) == bool(expected)
    assert list(ticks) == expected and ticks == expected and ticks == RunTimes.of_list(expected)


def test_a_row_whose_times_are_malformed_is_refused_as_the_list_reader_refuses_it() -> None:
    """The differences' fast check hands anything it does not take to unpack_times_in_order, errors included."""
    for column, count in [(b"\xc1", 1), (msgpack_packb([1, 2.5]), 2), (msgpack_packb([1, "x"]), 2), ("text", 1),
                          (msgpack_packb([1, 2]), 3), (msgpack_packb([253402300799999999, 5]), 2)]:
        with pytest.raises(ValueError) as fast:
            unpack_run_times(column, count, 0)
        with pytest.raises(ValueError) as listed:
            unpack_times_in_order(column, count)
        assert str(fast.value) == str(listed.value)


# -- the last position given, known to the store that gives it ------------------------------------------------------

class FailingCommit:
    """The store's connection, whose next COMMIT fails (as a full disk would make it)."""

    def __init__(self, db: Any) -> None:
        self.db, self.armed = db, True

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "COMMIT" and self.armed:
            self.armed = False
            raise sqlite3.OperationalError("disk I/O error")
        return self.db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


def test_a_reader_at_the_last_position_this_store_gave_still_finds_a_row_moved_beyond_it(tmp_path: Path) -> None:
    """A reader never takes the store's own last position as the log's end: a row whose position was damaged to
    lie beyond it is read and reported damaged, not hidden (a shortcut that skipped the query there hid it, and
    let a process() call succeed on a lost connection)."""
    store = EngineStore(tmp_path / "s.db", synchronous="OFF")
    try:
        store.append("a", [(0, second(0))])
        store.append("b", [(1, second(1))])  # pos 1 and 2, both given by this store
        assert len(store.read_ingress_runs(0, 100)) == 2  # a reader that read both stands at 2
        with sqlite3.connect(tmp_path / "s.db") as db:
            db.execute("UPDATE reaqtive_ingress SET pos = 9 WHERE pos = 2")
        (moved,) = store.read_ingress_runs(2, 100)
        assert moved.damage is not None and moved.pos == 9
    finally:
        store.close()


def test_a_store_opened_on_a_log_reads_what_another_store_appended(tmp_path: Path) -> None:
    first = EngineStore(tmp_path / "s.db", synchronous="OFF")
    first.append("a", [(i, second(i)) for i in range(3)])
    first.close()
    second_store = EngineStore(tmp_path / "s.db", synchronous="OFF")
    try:
        assert second_store.read_ingress_runs(3, 100) == []
        assert [e[4] for e in events_of(second_store.read_ingress_runs(0, 100))] == [0, 1, 2]
        second_store.append("a", [(3, second(3))])
        assert [e[4] for e in events_of(second_store.read_ingress_runs(3, 100))] == [3]
    finally:
        second_store.close()


def test_an_append_whose_commit_failed_hides_no_event_appended_after_it(store: EngineStore) -> None:
    """The position is noted before the commit: a failed commit leaves it high (a read asks the database), never
    low (which would hide what comes next)."""
    store.append("a", [(i, second(i)) for i in range(3)])  # pos 1..3
    real = store._db
    store._db = FailingCommit(real)  # type: ignore[assignment]
    try:
        with pytest.raises(StoreError):
            store.append("a", [(i, second(i)) for i in range(3, 8)])  # would have been pos 4..8
    finally:
        store._db = real
    assert store.read_ingress_runs(3, 100) == []  # rolled back: nothing after pos 3
    store.append("a", [(i, second(i)) for i in range(3, 5)])  # pos 4..5 (the failed ones were never given)
    assert [(*e[:3], e[4]) for e in events_of(store.read_ingress_runs(0, 100))] == [
        (p, "a", p - 1, p - 1) for p in range(1, 6)]
