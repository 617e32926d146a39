"""Integrity of the engine's store (issue 14): checksummed ingress and egress rows bound to their place, damaged
events returned marked for quarantine, the dead letters, the migration of a layout-1 file, typed errors, one
writer per store, and the output counters recovery needs. (The ingress tests damage rows of one event each, as
the fixture appends them; rows of many events and the migration of layout 2: ``test_ingress_runs.py``.)

The row-damage tests run on both stores, an SQLite file and a PostgreSQL database (same tables, same columns,
damaged through SQL the same way); the file's own damage, the migration and the file lock are SQLite's, and a
PostgreSQL store's damaged tables have their own test."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgpack
import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reaqtive.engine import DeadLetter, EngineStore, IngressEvent, UnknownEngineVersionError
from reaqtive.engine import database as engine_store
from reaqtive.engine.database import (
    ENGINE_SCHEMA_VERSION,
    dead_letter_checksum,
    egress_checksum,
    ingress_checksum,
    pack_times,
    to_micros,
)
from reaqtive.engine.inspection import read_store
from reaqtive.engine.stores import open_engine_store
from reaqtive.state import (
    DEFAULT_CODEC,
    DamagedRowError,
    StoreCorruptError,
    StoreError,
    StoreLockedError,
    checksum,
)
from reaqtive.state.sqlite_store import row_checksum
from tests.engine.store_targets import STORES, StoreSql, store_sql

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAMAGED = "does not match its checksum"


def second(i: int) -> datetime:
    return T0 + timedelta(seconds=i)


def on_postgresql(path: object) -> bool:
    """Whether ``path`` (a store's ``path``) is a PostgreSQL database: its URL (the test server has no password)."""
    return isinstance(path, str) and path.startswith("postgresql://")


def postgres_sql(sql: str) -> str:
    """SQLite's blob literal ``X'hex'`` in PostgreSQL's words (the rest of the tests' SQL is common)."""
    return re.sub(r"X'([0-9a-fA-F]*)'", r"'\\x\1'::bytea", sql)


def execute(path: Path | str, sql: str, params: tuple[object, ...] = ()) -> None:
    if on_postgresql(path):
        StoreSql(str(path)).execute(postgres_sql(sql), params)
        return
    db = sqlite3.connect(path)
    with db:
        db.execute(sql, params)
    db.close()


def query(path: Path | str, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    if on_postgresql(path):
        return StoreSql(str(path)).rows(postgres_sql(sql), params)
    db = sqlite3.connect(path)
    db.text_factory = lambda data: data.decode("utf-8", "surrogateescape")
    try:
        return db.execute(sql, params).fetchall()
    finally:
        db.close()


def fill(store: EngineStore) -> EngineStore:
    for i in range(5):
        store.append("a", [(i * 10, second(i))])  # pos 1..5, a row each
    for i in range(3):
        store.append("b", [("b" * i, second(i))])  # pos 6..8
    for i in range(4):
        store.write_outputs([("q", i, i * i)])  # a row each
    store.write_outputs([("r", i, -i) for i in range(3)])  # one row of three
    return store


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EngineStore]:
    store = fill(open_engine_store(store_sql(request.param, tmp_path, request).target, synchronous="OFF"))
    yield store
    store.close()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[EngineStore]:
    """For what only the file has: ``reaqtive inspect``, text columns holding any bytes."""
    store = fill(EngineStore(tmp_path / "s.db", synchronous="OFF"))
    yield store
    store.close()


# -- ingress ----------------------------------------------------------------------------------------------------------


def test_ingress_rows_carry_checksums_over_their_place_and_content(store: EngineStore) -> None:
    rows = query(store.path, "SELECT pos, stream, seq, count, times, payload, crc FROM reaqtive_ingress ORDER BY pos")
    assert [row[0] for row in rows] == list(range(1, 9))
    for pos, stream, seq, count, times, payload, crc in rows:
        assert crc == ingress_checksum(pos, stream, seq, count, times, payload)  # type: ignore[arg-type]
    assert store.last_position() == 8


def test_two_swapped_ingress_payloads_are_returned_as_damaged_events_and_the_batch_goes_on(store: EngineStore) -> None:
    (p2, c2), (p7, c7) = query(store.path, "SELECT payload, crc FROM reaqtive_ingress WHERE pos IN (2, 7) "
                                           "ORDER BY pos")
    execute(store.path, "UPDATE reaqtive_ingress SET payload = ?, crc = ? WHERE pos = 2", (p7, c7))
    execute(store.path, "UPDATE reaqtive_ingress SET payload = ?, crc = ? WHERE pos = 7", (p2, c2))
    events = store.read_ingress(0, 100)
    assert [e.pos for e in events] == list(range(1, 9))
    damaged = {e.pos: e for e in events if e.damage is not None}
    assert set(damaged) == {2, 7}
    assert all(DAMAGED in (e.damage or "") and e.value is None for e in damaged.values())
    assert damaged[2].stream == "a" and damaged[2].seq == 1 and damaged[2].payload == p7, "what the row says"
    assert [e.value for e in events if e.damage is None] == [0, 20, 30, 40, "", "bb"]


def test_two_ingress_events_reordered_in_the_log_are_both_damaged(store: EngineStore) -> None:
    execute(store.path, "UPDATE reaqtive_ingress SET pos = -1 WHERE pos = 3")
    execute(store.path, "UPDATE reaqtive_ingress SET pos = 3 WHERE pos = 4")
    execute(store.path, "UPDATE reaqtive_ingress SET pos = 4 WHERE pos = -1")
    events = store.read_ingress(0, 100)
    assert [e.pos for e in events if e.damage is not None] == [3, 4]


@pytest.mark.parametrize(("column", "value"), [
    ("times", pack_times([to_micros(second(99))])), ("seq", 17), ("stream", "c"), ("crc", 12345), ("count", 2),
])
def test_a_changed_ingress_column_is_detected(store: EngineStore, column: str, value: object) -> None:
    execute(store.path, f"UPDATE reaqtive_ingress SET {column} = ? WHERE pos = 3", (value,))
    events = store.read_ingress(0, 100)
    assert [e.pos for e in events if e.damage] == [3]


def test_a_row_whose_payload_cannot_be_decoded_is_a_marked_event_not_an_exception(store: EngineStore) -> None:
    for pos, payload in ((2, b""), (3, b"\xc1"), (4, DEFAULT_CODEC.encode(1) + DEFAULT_CODEC.encode(2))):
        (stream, seq, count, times) = query(
            store.path, "SELECT stream, seq, count, times FROM reaqtive_ingress WHERE pos = ?", (pos,))[0]
        crc = ingress_checksum(pos, stream, seq, count, times, payload)  # type: ignore[arg-type]
        execute(store.path, "UPDATE reaqtive_ingress SET payload = ?, crc = ? WHERE pos = ?", (payload, crc, pos))
    events = store.read_ingress(0, 100)
    assert len(events) == 8
    assert {e.pos for e in events if e.damage} == {2, 3, 4}
    assert all("cannot be decoded" in (e.damage or "") for e in events if e.pos in (2, 3, 4))


def test_a_stream_name_damaged_into_invalid_utf8_does_not_fail_the_batch(sqlite_store: EngineStore) -> None:
    store = sqlite_store  # a PostgreSQL text column holds valid UTF-8 only
    execute(store.path, "UPDATE reaqtive_ingress SET stream = CAST(X'e1' AS TEXT) WHERE pos = 5")
    events = store.read_ingress(0, 100)
    assert [(e.pos, e.stream) for e in events if e.damage] == [(5, "\udce1")]
    assert store.quarantine([(events[4], events[4].damage or "")]) == 1
    (letter,) = store.dead_letters()
    assert letter.stream == "\\xe1" and letter.seq == 4 and letter.value == 40 and letter.damage is None
    assert store.ingress_counts() == {"a": 4, "b": 3, "\udce1": 1}


@st.composite
def ingress_flips(draw: st.DrawFn) -> tuple[str, int, int]:
    return draw(st.sampled_from(("pos", "stream", "seq", "count", "times", "payload", "crc"))), \
        draw(st.integers(0, 999)), \
        draw(st.integers(1, 255))


@pytest.fixture(scope="module", params=STORES)
def flip_store(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[EngineStore]:
    if request.param == "sqlite":
        store = EngineStore(tmp_path_factory.mktemp("flips") / "s.db", synchronous="OFF")
    else:
        store = open_engine_store(request.getfixturevalue("postgres_server").create_database(), synchronous="OFF")
    store.append("sensors://7", [({"reading": 21.5, "unit": "C"}, second(1))])
    store.append("sensors://8", [("next", second(2))])
    yield store
    store.close()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flip=ingress_flips())
@example(flip=("stream", 142, 15))  # '7' ^ 15 is '8': the other row's stream, at the same seq
@example(flip=("pos", 0, 1))  # a position moved beyond the last one the store gave: a read there must still look
def test_any_single_byte_changed_in_any_column_of_an_ingress_row_is_detected(
    flip: tuple[str, int, int], flip_store: EngineStore
) -> None:
    column, index, mask = flip
    path = flip_store.path
    original = query(path, "SELECT pos, stream, seq, count, times, payload, crc FROM reaqtive_ingress "
                           "WHERE pos = 1")[0]
    row = dict(zip(("pos", "stream", "seq", "count", "times", "payload", "crc"), original, strict=True))
    value = row[column]
    if on_postgresql(path) and column == "stream":  # valid UTF-8 without NUL only: flip a code point
        code = ord(value[index % len(value)]) ^ mask  # type: ignore[index, arg-type]
        changed: object = str(value).replace(value[index % len(value)], chr(code or 0x80), 1)  # type: ignore[index]
        cast = "?"
    elif isinstance(value, int):
        width = 4 if on_postgresql(path) and column == "count" else 8  # PostgreSQL's count is an integer
        raw = bytearray(value.to_bytes(width, "big", signed=True))
        raw[index % width] ^= mask
        changed = int.from_bytes(raw, "big", signed=True)
        cast = "?"
    else:
        raw = bytearray(value.encode() if isinstance(value, str) else value)  # type: ignore[arg-type]
        raw[index % len(raw)] ^= mask
        changed, cast = bytes(raw), "CAST(? AS TEXT)" if column == "stream" else "?"
    if column == "pos" and query(path, "SELECT 1 FROM reaqtive_ingress WHERE pos = ?", (changed,)):
        return  # the other row's place: the primary key refuses it
    try:
        execute(path, f"UPDATE reaqtive_ingress SET {column} = {cast} WHERE pos = 1", (changed,))
    except (sqlite3.IntegrityError, psycopg.errors.UniqueViolation):
        return  # the other row's (stream, seq) ('sensors://7' flipped to 'sensors://8'): its unique key refuses it
    try:
        events = read_all(flip_store)  # a flipped pos may lie far away: a read takes rows within `limit` positions
        assert len(events) == 2
        assert [e.value for e in events if e.damage is None] == ["next"], f"{column}[{index}] ^ {mask} unnoticed"
    finally:
        execute(path, "DELETE FROM reaqtive_ingress WHERE pos != 2")
        execute(path, "INSERT INTO reaqtive_ingress VALUES (?, ?, ?, ?, ?, ?, ?)", original)


def read_all(store: EngineStore) -> list[IngressEvent]:
    events: list[IngressEvent] = []
    while batch := store.read_ingress(events[-1].pos if events else -(2**63), 10):
        events += batch
    return events


def flipped(value: object, bit: int) -> tuple[object, str]:
    """``value`` with one bit flipped, and the SQL placeholder that stores it with its type (text as raw bytes)."""
    if isinstance(value, int):
        return value ^ (1 << bit), "?"
    raw = bytearray(value.encode() if isinstance(value, str) else value)  # type: ignore[arg-type]
    raw[bit // 8 % len(raw)] ^= 1 << (bit % 8)
    return bytes(raw), "CAST(? AS TEXT)" if isinstance(value, str) else "?"


def postgres_flipped(value: object, changed: object, placeholder: str, bit: int) -> tuple[object, str]:
    """The flip as a PostgreSQL column can hold it: an ``integer`` wraps around at 32 bits, and ``text`` (valid
    UTF-8 without NUL) gets a character's code point flipped instead of a byte."""
    if isinstance(value, int) and isinstance(changed, int) and abs(value) < 2**31:
        return (changed + 2**31) % 2**32 - 2**31, placeholder
    if isinstance(value, str):
        index = bit // 8 % len(value)
        code = ord(value[index]) ^ (1 << (bit % 8))
        return value[:index] + chr(code or 0x80) + value[index + 1:], "?"
    return changed, placeholder


TABLE_COLUMNS = {
    "reaqtive_ingress": ("stream", "seq", "count", "times", "payload", "crc"),  # pos: ..._reordered...
    "reaqtive_egress": ("subscription", "seq", "payload", "crc"),
    "reaqtive_dead_letters": ("stream", "seq", "pos", "time", "payload", "reason", "at", "crc"),
}


@pytest.mark.parametrize("bit", [0, 5, 13, 31])
@pytest.mark.parametrize(("table", "column"), [(t, c) for t, columns in TABLE_COLUMNS.items() for c in columns])
def test_a_flipped_bit_in_any_column_of_any_engine_table_is_detected(
    store: EngineStore, table: str, column: str, bit: int
) -> None:
    store.append("a", [(99, second(10**6))], quarantine=far_future)
    store.quarantine([(store.read_ingress(0, 1)[0], "poison")])
    # the last row of each table: a flipped seq never collides with another row's key
    where = {"reaqtive_ingress": "pos = 8", "reaqtive_egress": "subscription = 'r' AND seq = 2",
             "reaqtive_dead_letters": "stream = 'a' AND seq = 0"}[table]
    ((value,),) = query(store.path, f"SELECT {column} FROM {table} WHERE {where}")
    changed, placeholder = flipped(value, bit)
    if on_postgresql(store.path):
        changed, placeholder = postgres_flipped(value, changed, placeholder, bit)
    execute(store.path, f"UPDATE {table} SET {column} = {placeholder} WHERE {where}", (changed,))
    if table == "reaqtive_ingress":
        assert [e.pos for e in store.read_ingress(0, 100) if e.damage] == [8]
    elif table == "reaqtive_egress":
        assert len(store.read_outputs("q")) == 4, "another subscription's outputs stay readable"
        with pytest.raises(DamagedRowError):
            store.read_outputs()
    else:
        letters = store.dead_letters()
        assert len(letters) == 2
        assert [d.damage is None for d in letters if d.pos is None] == [True], "the other one is sound"
        assert [d.pos for d in letters if d.damage is not None] in ([1], [changed]), "the flipped one is damaged"


# -- append-time quarantine and dead letters --------------------------------------------------------------------------


def far_future(value: object, time: datetime) -> str | None:
    return "dated too far in the future" if time > second(1000) else None


def test_append_quarantines_what_the_judge_refuses_and_numbers_every_event(store: EngineStore) -> None:
    seqs = store.append("a", [(50, second(5)), (60, second(10**6)), (70, second(7))], quarantine=far_future)
    assert seqs == [5, 6, 7]
    assert store.stream_heads() == {"a": 8, "b": 3}
    logged = [(e.pos, e.seq, e.value) for e in store.read_ingress(8, 100)]
    assert logged == [(9, 5, 50), (10, 7, 70)], "positions stay contiguous; the refused event has none"
    (letter,) = store.dead_letters("a")
    assert letter == DeadLetter("a", 6, None, second(10**6), 60, "dated too far in the future", letter.at)
    assert letter.at is not None and abs(letter.at - datetime.now(UTC)) < timedelta(minutes=1)
    assert letter.payload == DEFAULT_CODEC.encode(60)
    assert store.dead_lettered() == {("a", 6)} and store.dead_letters("b") == []


def test_quarantine_keeps_the_original_bytes_of_a_damaged_event_and_ignores_repeats(store: EngineStore) -> None:
    execute(store.path, "UPDATE reaqtive_ingress SET payload = X'c1c1' WHERE pos = 2")  # behind the old crc
    execute(store.path, "UPDATE reaqtive_ingress SET times = ? WHERE pos = 3", (pack_times([2**62]),))  # too late
    events = store.read_ingress(0, 100)
    damaged = [(e, e.damage or "") for e in events if e.damage]
    assert [e.pos for e, _ in damaged] == [2, 3]
    assert store.quarantine(damaged, at=second(500)) == 2
    assert store.quarantine(damaged) == 0, "insert or ignore"
    assert store.quarantine([(IngressEvent(0, "b", 9, second(9), {"x": 1}), "poison")], at=second(501)) == 1
    letters = {(d.stream, d.seq): d for d in store.dead_letters()}
    assert letters[("a", 1)].payload == b"\xc1\xc1" and letters[("a", 1)].value is None
    assert letters[("a", 1)].time == second(1) and letters[("a", 1)].pos == 2 and DAMAGED in letters[("a", 1)].reason
    assert letters[("a", 2)].time is None and letters[("a", 2)].value == 20, "an unusable time is None"
    assert letters[("a", 2)].at == second(500)
    assert letters[("b", 9)].value == {"x": 1} and letters[("b", 9)].reason == "poison"
    ((time,),) = query(store.path, "SELECT time FROM reaqtive_dead_letters WHERE seq = 2 AND stream = 'a'")
    # PostgreSQL's column has one type: it keeps the msgpack of what SQLite keeps as it is
    assert (msgpack.unpackb(time) if on_postgresql(store.path) else time) == 2**62
    assert store.dead_lettered() == {("a", 1), ("a", 2), ("b", 9)}
    rows = query(store.path, "SELECT stream, seq, pos, time, payload, reason, at, crc FROM reaqtive_dead_letters")
    for *columns, crc in rows:
        if on_postgresql(store.path) and columns[3] is not None:
            columns[3] = msgpack.unpackb(columns[3])  # the checksum covers the time, not its msgpack
        assert crc == dead_letter_checksum(*columns)  # type: ignore[arg-type]


def test_the_inspector_shows_the_dead_letters(sqlite_store: EngineStore) -> None:
    from reaqtive.engine.inspection import format_summary, summary_to_json

    store = sqlite_store  # reaqtive inspect reads SQLite files

    store.append("a", [(1, second(10**6))], quarantine=far_future)
    summary = read_store(store.path)
    assert [(d.stream, d.seq, d.reason) for d in summary.dead_letters] == [("a", 5, "dated too far in the future")]
    assert "dead letters (1 quarantined events" in format_summary(summary)
    assert summary_to_json(summary)["dead_letters"][0]["time"] == second(10**6).isoformat()


def test_a_damaged_dead_letter_is_listed_marked(store: EngineStore) -> None:
    store.append("a", [(1, second(10**6))], quarantine=far_future)
    execute(store.path, "UPDATE reaqtive_dead_letters SET reason = 'edited'")
    (letter,) = store.dead_letters()
    assert letter.reason == "edited" and letter.damage is not None and DAMAGED in letter.damage


# -- egress -----------------------------------------------------------------------------------------------------------


def test_egress_rows_carry_checksums_over_subscription_seq_count_and_payload(store: EngineStore) -> None:
    rows = query(store.path, "SELECT subscription, seq, count, payload, crc FROM reaqtive_egress "
                             "ORDER BY subscription, seq")
    assert [(s, q, n) for s, q, n, _, _ in rows] == [("q", 0, 1), ("q", 1, 1), ("q", 2, 1), ("q", 3, 1), ("r", 2, 3)]
    for subscription, seq, count, payload, crc in rows:
        assert crc == egress_checksum(subscription, seq, count, payload)  # type: ignore[arg-type]


def test_consecutive_outputs_share_a_row_and_replays_are_ignored(store: EngineStore) -> None:
    store.write_outputs([("r", i, -i) for i in range(6)])  # 0..2 are there: only 3..5 are new
    store.write_outputs([("r", 9, "gap"), ("r", 7, "late"), ("r", 8, "ok")])  # sorted, a gap before 7
    assert store.read_outputs("r") == [("r", 0, 0), ("r", 1, -1), ("r", 2, -2), ("r", 3, -3), ("r", 4, -4),
                                       ("r", 5, -5), ("r", 7, "late"), ("r", 8, "ok"), ("r", 9, "gap")]
    assert store.read_outputs("r", after=3, upto=7) == [("r", 4, -4), ("r", 5, -5), ("r", 7, "late")]
    rows = query(store.path, "SELECT seq, count FROM reaqtive_egress WHERE subscription = 'r' ORDER BY seq")
    assert rows == [(2, 3), (5, 3), (9, 3)]
    assert store.output_extents()["r"] == (9, 0, 9), "a gap shows: 9 outputs from #0 to #9"
    store.delete_outputs("r", upto=4)  # the row 3..5 holds #5 too: it stays whole
    assert store.read_outputs("r", after=4)[0] == ("r", 5, -5)
    assert query(store.path, "SELECT seq FROM reaqtive_egress WHERE subscription = 'r' ORDER BY seq") == [(5,), (9,)]


def test_a_damaged_row_of_several_outputs_names_them_all(store: EngineStore) -> None:
    execute(store.path, "UPDATE reaqtive_egress SET payload = X'070707' WHERE subscription = 'r'")
    with pytest.raises(DamagedRowError, match=r"output r#0-2 of the durable sink") as caught:
        store.read_outputs("r", upto=0)
    assert caught.value.row == "r#0-2"
    execute(store.path, "UPDATE reaqtive_egress SET count = 2 WHERE subscription = 'r'")
    with pytest.raises(DamagedRowError):
        store.read_outputs("r")


def test_outputs_of_a_healthy_subscription_are_readable_beside_a_damaged_one(store: EngineStore) -> None:
    execute(store.path, "UPDATE reaqtive_egress SET payload = X'07' WHERE subscription = 'q' AND seq = 2")
    assert store.read_outputs("r") == [("r", 0, 0), ("r", 1, -1), ("r", 2, -2)]
    assert store.read_outputs("q", upto=1) == [("q", 0, 0), ("q", 1, 1)]
    with pytest.raises(DamagedRowError, match=r"output q#2 of the durable sink does not match") as caught:
        store.read_outputs("q")
    assert caught.value.row == "q#2" and caught.value.table == "reaqtive_egress"
    with pytest.raises(DamagedRowError, match="q#2"):
        store.read_outputs()


def test_two_swapped_outputs_are_detected(store: EngineStore) -> None:
    rows = dict(((s, q), (p, c)) for s, q, p, c in
                query(store.path, "SELECT subscription, seq, payload, crc FROM reaqtive_egress"))
    execute(store.path, "UPDATE reaqtive_egress SET payload = ?, crc = ? WHERE subscription = 'q' AND seq = 1",
            rows[("q", 3)])
    with pytest.raises(DamagedRowError, match="q#1"):
        store.read_outputs("q")
    assert store.read_outputs("q", after=1) == [("q", 2, 4), ("q", 3, 9)]


def test_output_ranges_and_the_highest_seq_per_subscription(store: EngineStore) -> None:
    assert store.read_outputs("q", after=0, upto=2) == [("q", 1, 1), ("q", 2, 4)]
    assert store.read_outputs("q", after=3) == []
    assert store.read_outputs(after=1, upto=2) == [("q", 2, 4), ("r", 2, -2)]
    assert store.max_output_seqs() == {"q": 3, "r": 2}
    store.write_outputs([("p", 7, None), ("q", 40, 1), ("q", 5, 1)])
    grouped = dict(query(store.path, "SELECT subscription, MAX(seq) FROM reaqtive_egress GROUP BY subscription"))
    assert store.max_output_seqs() == grouped == {"p": 7, "q": 40, "r": 2}
    store.delete_outputs("q")
    assert store.max_output_seqs() == {"p": 7, "r": 2}


def test_max_output_seqs_is_empty_without_outputs(tmp_path: Path) -> None:
    store = EngineStore(tmp_path / "e.db")
    try:
        assert store.max_output_seqs() == {}
    finally:
        store.close()


# -- migration from layout 1 ------------------------------------------------------------------------------------------

# The layout-1 file as released (the checkpoint store's schema 1 and the engine's tables), copied on purpose.
V1_DDL = (
    "CREATE TABLE reaqtive_meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID",
    "CREATE TABLE reaqtive_blobs (category TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, "
    "crc INTEGER NOT NULL, PRIMARY KEY (category, key)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS reaqtive_ingress (pos INTEGER PRIMARY KEY AUTOINCREMENT, "
    "stream TEXT NOT NULL, seq INTEGER NOT NULL, time INTEGER NOT NULL, payload BLOB NOT NULL, "
    "UNIQUE (stream, seq))",
    "CREATE TABLE IF NOT EXISTS reaqtive_stream_heads (stream TEXT PRIMARY KEY, next_seq INTEGER NOT NULL) "
    "WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS reaqtive_egress (subscription TEXT NOT NULL, seq INTEGER NOT NULL, "
    "payload BLOB NOT NULL, PRIMARY KEY (subscription, seq)) WITHOUT ROWID",
)


def build_v1(path: Path) -> None:
    encode = DEFAULT_CODEC.encode
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    for statement in V1_DDL:
        db.execute(statement)
    db.executemany("INSERT INTO reaqtive_meta VALUES (?, ?)", [
        ("format", "reaqtive-checkpoint-store"), ("schema_version", 1), ("checkpoint_id", 4),
        ("engine_schema_version", 1)])
    blobs = {("state", "q://a"): b"state a", ("state", "q://b"): b"state b", ("artifacts", "q://a"): b"{}"}
    db.executemany("INSERT INTO reaqtive_blobs VALUES (?, ?, ?, ?)",
                   [(c, k, v, checksum(v)) for (c, k), v in blobs.items()])
    db.execute("UPDATE reaqtive_blobs SET value = X'00ff' WHERE key = 'q://b'")  # damaged before the upgrade
    db.executemany("INSERT INTO reaqtive_ingress (stream, seq, time, payload) VALUES (?, ?, ?, ?)",
                   [("a", i, to_micros(second(i)), encode(i)) for i in range(4)])
    db.execute("UPDATE reaqtive_ingress SET stream = CAST(X'61e1' AS TEXT) WHERE seq = 3")  # no writer does that
    db.execute("INSERT INTO reaqtive_stream_heads VALUES ('a', 4)")
    db.executemany("INSERT INTO reaqtive_egress VALUES (?, ?, ?)", [("q", i, encode(i * 2)) for i in range(3)])
    db.execute("DELETE FROM reaqtive_ingress WHERE seq = 0")  # truncated by a checkpoint: positions go on
    db.close()


def meta(path: Path) -> dict[object, object]:
    return dict(query(path, "SELECT key, value FROM reaqtive_meta"))


def test_a_layout_1_file_is_migrated_in_place_and_keeps_its_damage(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    build_v1(path)
    damaged_blob = query(path, "SELECT value, crc FROM reaqtive_blobs WHERE key = 'q://b'")
    summary = read_store(path)  # the inspector reads layout 1
    assert summary.damaged == ["state/q://b"] and [s.retained for s in summary.streams] == [2, 1]
    store = EngineStore(path)
    try:
        assert meta(path)["schema_version"] == 2 and meta(path)["engine_schema_version"] == ENGINE_SCHEMA_VERSION
        events = store.read_ingress(0, 10)
        assert [(e.pos, e.seq, e.value, e.damage is None) for e in events] == [
            (2, 1, 1, True), (3, 2, 2, True), (4, 3, None, False)]
        assert store.read_outputs() == [("q", 0, 0), ("q", 1, 2), ("q", 2, 4)]
        snapshot = store.checkpoints.read(strict=False)
        assert set(snapshot.damaged) == {("state", "q://b")} and snapshot.get("state", "q://a") == b"state a"
        assert store.append("a", [(9, second(9))]) == [4] and store.last_position() == 5
        assert store.dead_letters() == []
    finally:
        store.close()
    ((value, crc),) = query(path, "SELECT value, crc FROM reaqtive_blobs WHERE key = 'q://b'")
    assert value == damaged_blob[0][0] and crc == damaged_blob[0][1] - 2**32  # type: ignore[operator]
    assert read_store(path).damaged == ["state/q://b"], "the inspector reads layout 2"


def test_the_migration_is_one_transaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "v1.db"
    build_v1(path)
    before = {table: query(path, f"SELECT * FROM {table}") for table in
              ("reaqtive_meta", "reaqtive_blobs", "reaqtive_ingress", "reaqtive_egress")}
    migrate = engine_store._migrate_from_1

    def failing(db: sqlite3.Connection) -> None:
        migrate(db)
        raise OSError("the disk went away")

    monkeypatch.setattr(engine_store, "_migrate_from_1", failing)
    with pytest.raises(OSError, match="the disk went away"):
        EngineStore(path)
    assert {table: query(path, f"SELECT * FROM {table}") for table in before} == before
    monkeypatch.undo()
    EngineStore(path).close()  # the failed open released the lock too
    assert meta(path)["engine_schema_version"] == ENGINE_SCHEMA_VERSION


def test_a_file_of_an_unknown_engine_layout_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "v9.db"
    EngineStore(path).close()
    execute(path, "UPDATE reaqtive_meta SET value = 9 WHERE key = 'engine_schema_version'")
    before = path.read_bytes()
    with pytest.raises(UnknownEngineVersionError, match="layout version 9"):
        EngineStore(path)
    assert path.read_bytes() == before


def test_a_foreign_file_gets_no_lock_file(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    execute(path, "CREATE TABLE users (name TEXT)")
    with pytest.raises(StoreError, match="not a reaqtive checkpoint store"):
        EngineStore(path)
    assert not (tmp_path / "app.db.lock").exists()


# -- one writer per store ---------------------------------------------------------------------------------------------


def test_a_second_store_on_the_same_file_is_refused_in_the_same_process(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    first = EngineStore(path)
    with pytest.raises(StoreLockedError, match=rf"open by another engine of this process \(pid {os.getpid()}\)") \
            as caught:
        EngineStore(path)
    assert caught.value.pid == os.getpid() and first.lock_path == (tmp_path / "s.db.lock").resolve()
    first.append("a", [(1, T0)])  # the refused open did not disturb the holder
    assert read_store(path).streams[0].appended == 1, "the read-only inspector takes no lock"
    first.close()
    second = EngineStore(path)
    assert [e.value for e in second.read_ingress(0, 10)] == [1]
    second.close()
    assert (tmp_path / "s.db.lock").exists(), "never deleted"


HOLDER = """
import sys, time
from reaqtive.engine.database import EngineStore
store = EngineStore(sys.argv[1])
store.append("a", [(1, __import__("datetime").datetime(2026, 1, 1, tzinfo=__import__("datetime").UTC))])
print("holding", flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_store_held_by_another_process_is_refused_until_that_process_is_killed(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        with pytest.raises(StoreLockedError, match=rf"open by another engine \(pid {holder.pid}\)"):
            EngineStore(path)
        assert read_store(path).streams[0].appended == 1
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    store = EngineStore(path)  # the kernel dropped the dead holder's lock
    try:
        assert [e.value for e in store.read_ingress(0, 10)] == [1]
    finally:
        store.close()


# -- typed errors -----------------------------------------------------------------------------------------------------


def exercise(store: EngineStore) -> None:
    """Every operation of the store, on whatever it holds."""
    store.checkpoints.read(strict=False)
    for event in store.read_ingress(0, 1000):
        if event.damage:
            store.quarantine([(event, event.damage)])
    store.stream_heads()
    store.ingress_counts()
    store.last_position()
    store.position_after("a", 3)
    store.dead_letters()
    store.dead_lettered()
    store.max_output_seqs()
    store.append("a", [(1, T0)], quarantine=far_future)
    store.write_outputs([("q", 1000, "new")])
    store.truncate_ingress({"a": 5})
    store.delete_outputs("r")
    store.read_outputs("q")


def test_a_damaged_file_raises_store_errors_only(tmp_path: Path) -> None:
    source = tmp_path / "source.db"
    store = EngineStore(source, synchronous="OFF")
    store.append("a", [({"n": i, "pad": "x" * 50}, second(i)) for i in range(400)])
    store.write_outputs([("q", i, "y" * i) for i in range(200)])
    with store.checkpoints.begin() as tx:
        tx.put("state", "q", b"s" * 3000)
        tx.commit()
    store.close()
    data = source.read_bytes()
    copies = tmp_path / "copies"
    outcomes: dict[str, int] = {}
    cases = [(f"truncated to {n}", data[:n]) for n in range(1024, len(data), len(data) // 9)]
    cases += [(f"page {start // 4096} overwritten", data[:start] + bytes(range(256)) * 16 + data[start + 4096:])
              for start in range(0, len(data), 4096)]
    cases += [(f"bytes at {start} overwritten", data[:start] + b"\x55\xaa\x00\xff" + data[start + 4:])
              for start in range(60, len(data), 1499)]
    for number, (what, content) in enumerate(cases):
        shutil.rmtree(copies, ignore_errors=True)
        copies.mkdir()
        path = copies / f"{number}.db"
        path.write_bytes(content)
        try:
            store = EngineStore(path, synchronous="OFF")
            try:
                exercise(store)
            finally:
                store.close()
            outcomes["worked"] = outcomes.get("worked", 0) + 1
        except StoreError as error:
            assert str(path) in str(error), f"{what}: {error} does not name the file"
            outcomes[type(error).__name__] = outcomes.get(type(error).__name__, 0) + 1
        except Exception as error:
            raise AssertionError(f"{what}: {type(error).__name__}: {error}") from error
    assert outcomes.get("StoreCorruptError", 0) > 0, outcomes


POSTGRES_DAMAGE = (
    "DROP TABLE reaqtive_ingress",
    "DROP TABLE reaqtive_egress",
    "DROP TABLE reaqtive_blobs",
    "DROP TABLE reaqtive_stream_heads",
    "DELETE FROM reaqtive_meta",
    "ALTER TABLE reaqtive_ingress ALTER COLUMN payload TYPE text USING encode(payload, 'hex')",
    "ALTER TABLE reaqtive_ingress ALTER COLUMN count TYPE text",
    "ALTER TABLE reaqtive_ingress RENAME COLUMN times TO t",
    "ALTER TABLE reaqtive_egress DROP COLUMN crc",
    "ALTER TABLE reaqtive_egress ALTER COLUMN seq TYPE numeric",
    "ALTER TABLE reaqtive_stream_heads ALTER COLUMN next_seq TYPE text",
    "ALTER TABLE reaqtive_blobs ALTER COLUMN value TYPE text USING encode(value, 'escape')",
    "ALTER TABLE reaqtive_dead_letters ALTER COLUMN time TYPE bigint USING 0",
    "ALTER TABLE reaqtive_egress DROP CONSTRAINT reaqtive_egress_pkey",
)


@pytest.mark.parametrize("damage", POSTGRES_DAMAGE)
def test_on_postgresql_damaged_tables_raise_store_errors_only(postgres_dsn: str, damage: str) -> None:
    """The database's counterpart of a damaged file: tables dropped, columns of another type or name, a key
    gone. Every operation of the store either works or raises a StoreError naming the database, never a
    psycopg error."""
    store = fill(open_engine_store(postgres_dsn, synchronous="OFF"))
    store.append("a", [(1, second(10**6))], quarantine=far_future)
    where, events, outputs = store.path, read_all(store), store.read_outputs()
    store.close()
    StoreSql(postgres_dsn).execute(damage)
    try:
        store = open_engine_store(postgres_dsn, synchronous="OFF")
        try:
            # what it reads is what was stored, or marked damaged: never silently another value
            assert {e for e in read_all(store) if e.damage is None} <= set(events), damage
            with contextlib.suppress(DamagedRowError):
                assert store.read_outputs() == outputs, damage
            exercise(store)
        finally:
            store.close()
    except StoreError as error:
        assert str(where) in str(error), f"{damage}: {error} does not name the database"
    except Exception as error:
        raise AssertionError(f"{damage}: {type(error).__module__}.{type(error).__name__}: {error}") from error


def test_a_closed_store_raises_store_errors(tmp_path: Path) -> None:
    store = EngineStore(tmp_path / "s.db")
    store.close()
    with pytest.raises(StoreError, match=r"s\.db: reading the ingress log failed"):
        store.read_ingress(0, 10)
    with pytest.raises(StoreError, match="appending to stream 'a' failed"):
        store.append("a", [(1, T0)])


def test_sqlite_reports_of_damage_become_store_corrupt_errors() -> None:
    error = sqlite3.DatabaseError("database disk image is malformed")
    error.sqlite_errorcode = 11  # type: ignore[attr-defined]
    from reaqtive.state.sqlite_store import store_error

    assert isinstance(store_error(error, "x.db", "reading"), StoreCorruptError)
    assert type(store_error(sqlite3.OperationalError("database is locked"), "x.db", "reading")) is StoreError


def test_blob_rows_written_by_the_engine_store_verify_with_the_public_checksum(store: EngineStore) -> None:
    with store.checkpoints.begin() as tx:
        tx.put("state", "q", b"blob")
        tx.commit()
    ((crc,),) = query(store.path, "SELECT crc FROM reaqtive_blobs WHERE key = 'q'")
    assert crc == row_checksum("state", "q", b"blob")


def test_a_store_dropped_without_close_releases_the_lock_when_collected(tmp_path: Path) -> None:
    import gc

    path = tmp_path / "s.db"
    EngineStore(path)  # abandoned, as an in-process test "crashes" an engine
    gc.collect()
    EngineStore(path).close()


@pytest.mark.skipif(sys.platform == "win32", reason="symbolic links")
def test_a_store_opened_through_a_symbolic_link_shares_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    (tmp_path / "alias.db").symlink_to(path)
    store = EngineStore(path)
    try:
        with pytest.raises(StoreLockedError):
            EngineStore(tmp_path / "alias.db")
    finally:
        store.close()
