"""Dead letters of both kinds (issue 30, item 1): quarantined events and failed elements, numbered together, listed
by stream or subscription with a cursor, acknowledged like outputs, trimmed by the checkpoints when nothing needs
them; the store layout 5 that holds them, and the migration from layout 4. On both stores: an SQLite file and a
PostgreSQL database."""

from __future__ import annotations

import asyncio
import json
import operator
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgpack
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from reaqtive import Query
from reaqtive.cli import main
from reaqtive.engine import (
    AckError,
    AsyncEngine,
    DeadLetter,
    ElementLetter,
    Engine,
    PrometheusMetrics,
    postgres_database,
    read_engine,
)
from reaqtive.engine import database as engine_store
from reaqtive.engine.database import (
    ELEMENT_REPR_CHARS,
    ENGINE_SCHEMA_VERSION,
    MESSAGE_CHARS,
    EngineStore,
    IngressEvent,
    dead_letter_checksum,
    element_payload,
)
from reaqtive.engine.inspection import format_summary, read_store, summary_to_json
from reaqtive.engine.stores import open_engine_store
from reaqtive.state import DEFAULT_CODEC, DamagedRowError
from reaqtive.state.sqlite_store import StoreLayoutError
from tests.engine.store_targets import STORES, StoreSql, store_sql

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAMAGED = "does not match its checksum"


def second(i: int) -> datetime:
    return T0 + timedelta(seconds=i)


def far_future(value: object, time: datetime) -> str | None:
    return "dated too far in the future" if time > second(1000) else None


def failure(subscription: str = "q", pos: int = 5, *, unit: str | None = None, path: str = "0/1",
            ordinal: int = 0, value: object = None, message: str = "'celsius'") -> ElementLetter:
    """A failed element as the engine records it under the error policy "skip"."""
    return ElementLetter(
        subscription=subscription, unit=subscription if unit is None else unit, path=path, pos=pos,
        operator="reaqtive:map", error_type="KeyError", message=message,
        traceback='Traceback (most recent call last):\n  File "app.py", line 3, in celsius\nKeyError: \'celsius\'\n',
        payload=element_payload(value if value is not None else {"sensor": "k1"}),
        element=repr(value if value is not None else {"sensor": "k1"}), ordinal=ordinal,
    )


@pytest.fixture(params=STORES)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> StoreSql:
    return store_sql(request.param, tmp_path, request)


@pytest.fixture
def store(target: StoreSql) -> Iterator[EngineStore]:
    opened = open_engine_store(target.target, synchronous="OFF")
    try:
        yield opened
    finally:
        opened.close()


def ids(letters: list[DeadLetter]) -> list[int]:
    return [letter.id for letter in letters]


# -- recording and listing --------------------------------------------------------------------------------------------


def test_recording_a_failed_element_again_is_ignored(target: StoreSql, store: EngineStore) -> None:
    first, second_one, other = failure(pos=5), failure(pos=6), failure("r", pos=5)
    assert store.record_failed_elements([first, second_one, first]) == 2, "a repeat in one call counts once"
    assert store.record_failed_elements([first, second_one]) == 0, "a replay records nothing new"
    assert store.record_failed_elements([second_one, other, failure(pos=5, ordinal=1)]) == 2
    assert store.record_failed_elements([failure(pos=5, unit="q/g/1"), failure(pos=5, path="0/2")]) == 2
    assert ids(store.dead_letters()) == [1, 2, 3, 4, 5, 6], "no number is spent on a repeat"
    assert store.failed_element_counts() == {"q": 5, "r": 1}
    assert store.last_dead_letter_id() == 6
    store.close()
    store = open_engine_store(target.target, synchronous="OFF")
    try:
        assert store.failed_element_counts() == {"q": 5, "r": 1}, "counted again at open"
        assert store.record_failed_elements([first, other]) == 0, "also after a restart"
        assert store.record_failed_elements([failure(pos=7)]) == 1
        assert ids(store.dead_letters()) == [1, 2, 3, 4, 5, 6, 7]
    finally:
        store.close()


def test_a_failed_element_keeps_where_how_and_what(store: EngineStore) -> None:
    awkward = "bad \x00 byte \ud800 " + "x" * (MESSAGE_CHARS + 50)
    rows = [failure(pos=5, value={"sensor": "k1", "n": 1}),
            ElementLetter("q", "q/g/7", "1/0", -1, "reaqtive:filter", "ValueError", awkward, "tb", None,
                          "<object>" + "y" * 300)]
    assert store.record_failed_elements(rows, at=second(50)) == 2
    kept, timer = store.dead_letters()
    assert (kept.kind, kept.stream, kept.seq, kept.pos, kept.time, kept.damage) == ("element", "", -1, 5, None, None)
    assert (kept.subscription, kept.unit, kept.path, kept.operator) == ("q", "q", "0/1", "reaqtive:map")
    assert (kept.error_type, kept.message, kept.reason) == ("KeyError", "'celsius'", "KeyError: 'celsius'")
    assert kept.value == {"sensor": "k1", "n": 1} and kept.payload == DEFAULT_CODEC.encode({"sensor": "k1", "n": 1})
    assert kept.traceback is not None and "KeyError" in kept.traceback and kept.at == second(50)
    assert kept.ordinal == 0 and kept.element == "{'sensor': 'k1', 'n': 1}"
    assert timer.pos is None, "no event carried it (-1)"
    assert timer.value is None and timer.payload is None and timer.element == "<object>" + "y" * 192
    assert len(timer.element) == ELEMENT_REPR_CHARS
    assert timer.message is not None and timer.message.startswith("bad \\x00 byte \\ud800 ")
    assert len(timer.message) <= MESSAGE_CHARS + 20, "the message is cut (its escapes are a few characters longer)"


def test_rows_of_the_wrong_types_are_refused_before_anything_is_written(store: EngineStore) -> None:
    with pytest.raises(TypeError, match="ElementLetter"):
        store.record_failed_elements([("q", "q", "0", 1)])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="pos and ordinal"):
        store.record_failed_elements([failure(), ElementLetter("q", "q", "0", "5", "op", "E", "m", "t")])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pos must be >= -1"):
        store.record_failed_elements([ElementLetter("q", "q", "0", -2, "op", "E", "m", "t")])
    with pytest.raises(TypeError, match="payload"):
        store.record_failed_elements([ElementLetter("q", "q", "0", 1, "op", "E", "m", "t", "bytes?")])  # type: ignore[arg-type]
    assert store.dead_letters() == [] and store.last_dead_letter_id() == 0


def test_both_kinds_are_listed_together_by_number_with_filters_and_a_cursor(store: EngineStore) -> None:
    store.append("a", [(1, second(1)), (2, second(10**6))], quarantine=far_future)  # a#1: never logged
    store.record_failed_elements([failure("q", pos=1)])
    store.append("b", [(3, second(3))])
    logged = store.read_ingress(1, 10)[0]
    assert store.quarantine([(logged, "poison")]) == 1
    assert store.quarantine([(logged, "poison")]) == 0, "already there: no number spent"
    store.record_failed_elements([failure("r", pos=2)])
    letters = store.dead_letters()
    assert [(d.id, d.kind, d.stream or d.subscription) for d in letters] == [
        (1, "event", "a"), (2, "element", "q"), (3, "event", "b"), (4, "element", "r")]
    assert [(d.seq, d.pos, d.value) for d in letters if d.kind == "event"] == [(1, None, 2), (0, 2, 3)]
    assert all(d.subscription is None and d.error_type is None for d in letters if d.kind == "event")
    assert ids(store.dead_letters("a")) == [1] and ids(store.dead_letters("b")) == [3]
    assert ids(store.dead_letters(subscription="q")) == [2] and ids(store.dead_letters(subscription="r")) == [4]
    assert ids(store.dead_letters(after=1, limit=2)) == [2, 3]
    assert ids(store.dead_letters(after=3)) == [4] and store.dead_letters(after=4) == []
    assert store.dead_letters(limit=0) == [] and ids(store.dead_letters(limit=1)) == [1]
    assert ids(store.dead_letters(subscription="q", after=2)) == []
    with pytest.raises(ValueError, match="not both"):
        store.dead_letters("a", subscription="q")
    with pytest.raises(ValueError, match="limit"):
        store.dead_letters(limit=-1)
    assert store.dead_lettered() == {("a", 1), ("b", 0)}, "the engine's skip set: events only"


# -- acknowledgement and retention ----------------------------------------------------------------------------------


def test_trimming_deletes_only_what_nothing_needs_any_more(target: StoreSql, store: EngineStore) -> None:
    store.append("a", [(0, second(0))])  # pos 1: a#0
    store.append("a", [(1, second(1)), (2, second(10**6))], quarantine=far_future)  # pos 2: a#1; a#2 never logged
    store.append("a", [(3, second(3))])  # pos 3: a#3
    (event,) = [e for e in store.read_ingress(0, 10) if e.seq == 1]
    store.quarantine([(event, "poison")])  # a#1, logged at pos 2
    store.record_failed_elements([failure(pos=3), failure(pos=1)])
    by_key = {(d.stream, d.seq) if d.kind == "event" else d.pos: d.id for d in store.dead_letters()}
    assert by_key == {("a", 2): 1, ("a", 1): 2, 3: 3, 1: 4}
    assert store.trim_dead_letters(100, {"a": 3}) == 0, "nothing is acknowledged"
    assert store.ack_dead_letters(4) and store.acked_dead_letters() == 4
    assert store.trim_dead_letters(1, {"a": 3}) == 1, "the element of the event at pos 1 (at the floor)"
    assert ids(store.dead_letters()) == [1, 2, 3]
    assert store.trim_dead_letters(2, {"a": 3}) == 0, "a#1 and the rows before a#2 are still in the log"
    store.truncate_ingress({"a": 1})  # the rows of a#0 and a#1
    assert store.trim_dead_letters(2, {"a": 1}) == 1, "a#1 goes; a#2 is past what was delivered"
    assert ids(store.dead_letters()) == [1, 3] and store.dead_lettered() == {("a", 2)}
    assert store.trim_dead_letters(2, {"a": 3}) == 1, "a#2 goes: delivered past, no row before it in the log"
    assert ids(store.dead_letters()) == [3], "the element of the event at pos 3, above the floor, stays"
    assert store.trim_dead_letters(3) == 1 and store.dead_letters() == []
    assert store.failed_element_counts() == {}
    store.record_failed_elements([failure(pos=9)])
    assert ids(store.dead_letters()) == [5], "numbers are never given again"
    assert store.trim_dead_letters(100) == 0, "not acknowledged"
    rows = target.rows("SELECT key, value FROM reaqtive_meta WHERE key = 'dead_letter_id'")
    assert rows == [("dead_letter_id", 5)]


def test_a_letter_on_a_stream_whose_log_reaches_back_before_it_stays(store: EngineStore) -> None:
    """A query catching up through the log notices a number missing between two logged events: the letter of an
    event never logged must stay while rows before it are in the log."""
    store.append("a", [(0, second(0)), (1, second(10**6)), (2, second(2))], quarantine=far_future)
    store.ack_dead_letters(1)
    assert store.trim_dead_letters(5, {"a": 2}) == 0, "a#0 is still in the log"
    store.truncate_ingress({"a": 0})
    assert store.trim_dead_letters(5, {"a": 2}) == 1


def test_an_acknowledgement_only_moves_forward_and_is_durable(target: StoreSql) -> None:
    far = datetime.now(UTC) + timedelta(days=400)
    with Engine(target.target, start=T0) as engine:
        engine.create_stream("a")
        engine.append_many("a", [(1, far), (2, far), (3, far)])
        assert ids(engine.dead_letters()) == [1, 2, 3]
        assert engine.ack_dead_letters(0) is False, "0 acknowledges nothing"
        for wrong, error in ((-1, AckError), (4, AckError), ("2", TypeError), (True, TypeError)):
            with pytest.raises(error):
                engine.ack_dead_letters(wrong)  # type: ignore[arg-type]
        with pytest.raises(AckError, match="beyond the last dead letter #3; nothing was acknowledged"):
            engine.ack_dead_letters(4)
        assert engine.ack_dead_letters(2) is True
        assert engine.ack_dead_letters(1) is False and engine.ack_dead_letters(2) is False
        assert ids(engine.dead_letters()) == [3], "the listing starts after the acknowledgement"
        assert ids(engine.dead_letters(after=0)) == [3] and ids(engine.dead_letters(after=3)) == []
        assert ids(engine.dead_letters("a")) == [3] and engine.dead_letters(subscription="q") == []
    with Engine(target.target) as engine:  # durable when it returned (no checkpoint since)
        assert ids(engine.dead_letters()) == [3]
        assert engine._store.acked_dead_letters() == 2
        assert ids(engine._store.dead_letters()) == [1, 2, 3], "nothing trimmed without a checkpoint"


def test_a_checkpoint_keeps_a_letter_a_paused_query_has_yet_to_skip(target: StoreSql) -> None:
    """The late event is quarantined when the engine passes it; the paused query catches up through the log after
    a restart, skipping it by its (stream, seq): its letter, acknowledged, must outlive the checkpoints until the
    log no longer holds the event."""

    def open_engine() -> Engine:
        return Engine(target.target, start=T0, allowed_lateness=timedelta(seconds=30), synchronous="OFF")

    with open_engine() as engine:
        engine.create_stream("raw")
        engine.create_subscription("a", Query.stream("raw").scan(0, operator.add))
        engine.create_subscription("b", Query.stream("raw").scan(0, operator.add))
        engine.checkpoint()
        engine.pause("b")
        engine.append_many("raw", [(1, second(100)), (2, second(60)), (4, second(101))])
        engine.process()
        assert [o.value for o in engine.outputs("a")] == [1, 5]
        (letter,) = engine.dead_letters()
        assert (letter.id, letter.seq, letter.pos) == (1, 1, 2) and "allowed_lateness" in letter.reason
        engine.ack_dead_letters(letter.id)
        engine.checkpoint()
        assert engine.dead_letters() == []
        assert ids(engine._store.dead_letters()) == [1], "the paused query has not passed it: kept"
    with open_engine() as engine:  # b catches up from where it stood, through the log
        assert engine._store.dead_lettered() == {("raw", 1)}
        engine.process()
        assert [o.value for o in engine.outputs("b")] == [1, 5], "the quarantined event skipped, not delivered"
        engine.checkpoint()
        assert engine.streams()["raw"].retained == 0
        assert engine._store.dead_letters() == [], "passed by every query, out of the log: trimmed"
        engine.append("raw", 8, second(102))
        engine.append("raw", 16, second(10))  # late again
        engine.process()
        assert ids(engine.dead_letters()) == [2], "numbers go on after the trimmed one"


def test_a_checkpoint_trims_acknowledged_failed_elements_its_position_covers(target: StoreSql) -> None:
    with Engine(target.target, start=T0, synchronous="OFF") as engine:
        engine.create_stream("raw")
        engine.create_subscription("q", Query.stream("raw").scan(0, operator.add))
        engine.append_many("raw", [(i, second(i)) for i in range(3)])  # pos 1..3
        engine.process()
        engine._store.record_failed_elements([failure(pos=2), failure(pos=3), failure(pos=9)])
        engine.checkpoint()
        assert ids(engine.dead_letters(subscription="q")) == [1, 2, 3], "not acknowledged: kept"
        engine.ack_dead_letters(3)
        engine.checkpoint()
        assert [d.pos for d in engine._store.dead_letters()] == [9], "above the log's floor: kept"


def test_a_damaged_acknowledgement_hides_nothing_and_a_new_one_replaces_it(target: StoreSql) -> None:
    with Engine(target.target, start=T0) as engine:
        engine.create_stream("raw")
        engine._store.record_failed_elements([failure(pos=0), failure(pos=1)])
        engine.ack_dead_letters(1)
    target.execute("UPDATE reaqtive_dead_letter_acks SET id = 2")  # behind its checksum
    with Engine(target.target) as engine:
        with pytest.raises(DamagedRowError, match="dead letters' acknowledgement"):
            engine._store.acked_dead_letters()
        assert ids(engine.dead_letters()) == [1, 2], "everything is listed"
        engine.checkpoint()
        assert ids(engine._store.dead_letters()) == [1, 2], "nothing is trimmed"
        assert engine.ack_dead_letters(1) is True, "an acknowledgement replaces the damaged one"
        assert engine._store.acked_dead_letters() == 1
    with Engine(target.target) as engine:
        assert ids(engine.dead_letters()) == [2]


# -- integrity --------------------------------------------------------------------------------------------------------


ELEMENT_CHANGES = {
    "id": "id = id + 10", "subscription": "subscription = 'r'", "unit": "unit = 'q/1'", "path": "path = '0/2'",
    "pos": "pos = pos + 10", "ordinal": "ordinal = 3", "operator": "operator = 'reaqtive:filter'",
    "error_type": "error_type = 'TypeError'", "message": "message = 'edited'", "traceback": "traceback = 'edited'",
    "element": "element = 'edited'", "at": "at = at + 1", "crc": "crc = crc + 1",
}


@pytest.mark.parametrize("column", sorted(ELEMENT_CHANGES))
def test_a_changed_column_of_a_failed_element_marks_it_damaged_and_the_listing_goes_on(
    target: StoreSql, column: str
) -> None:
    store = open_engine_store(target.target, synchronous="OFF")
    try:
        store.record_failed_elements([failure(pos=1), failure(pos=2), failure(pos=3)])
    finally:
        store.close()
    target.execute(f"UPDATE reaqtive_failed_elements SET {ELEMENT_CHANGES[column]} WHERE pos = 2")
    store = open_engine_store(target.target, synchronous="OFF")
    try:
        letters = store.dead_letters()
        assert len(letters) == 3
        damaged = [d for d in letters if d.damage is not None]
        assert len(damaged) == 1 and damaged[0].pos in (2, 12) and DAMAGED in (damaged[0].damage or "")
    finally:
        store.close()


@pytest.mark.parametrize("bit", [0, 7, 13])
def test_a_flipped_bit_in_a_failed_elements_payload_is_detected(target: StoreSql, bit: int) -> None:
    store = open_engine_store(target.target, synchronous="OFF")
    try:
        store.record_failed_elements([failure(pos=1, value={"reading": 21.5})])
        ((payload,),) = target.rows("SELECT payload FROM reaqtive_failed_elements")
        raw = bytearray(payload)
        raw[bit // 8 % len(raw)] ^= 1 << (bit % 8)
        target.execute("UPDATE reaqtive_failed_elements SET payload = ?", (bytes(raw),))
        (letter,) = store.dead_letters()
        assert letter.damage is not None and letter.payload == bytes(raw)
    finally:
        store.close()


@pytest.mark.parametrize("change", ["id = id + 10", "id_crc = id_crc + 1", "seq = seq + 10"])
def test_a_changed_number_of_a_quarantined_event_is_detected(target: StoreSql, change: str) -> None:
    store = open_engine_store(target.target, synchronous="OFF")
    try:
        store.append("a", [(1, second(10**6)), (2, second(10**6))], quarantine=far_future)
        target.execute(f"UPDATE reaqtive_dead_letters SET {change} WHERE seq = 0")
        letters = store.dead_letters()
        assert sorted((d.damage is not None, d.seq) for d in letters) == [(False, 1), (True, 10 if "seq" in change
                                                                                         else 0)]
        ((*columns, crc),) = target.rows(
            "SELECT stream, seq, pos, time, payload, reason, at, crc FROM reaqtive_dead_letters WHERE seq = 1")
        if target.kind == "postgresql":
            columns[3] = msgpack.unpackb(columns[3])  # PostgreSQL keeps the msgpack of the time
        assert crc == dead_letter_checksum(*columns), "the event's own checksum is layout 4's"
    finally:
        store.close()


# -- the layout and its migration -----------------------------------------------------------------------------------

LAYOUT_4_LETTERS = (
    "CREATE TABLE reaqtive_dead_letters (stream TEXT NOT NULL, seq INTEGER NOT NULL, pos INTEGER, time, payload, "
    "reason TEXT NOT NULL, at INTEGER NOT NULL, crc INTEGER NOT NULL, PRIMARY KEY (stream, seq)) WITHOUT ROWID"
)


def fill_letters(target: Path | str) -> None:
    """Dead letters on three streams: never logged (pos NULL), logged and quarantined (pos set), one damaged."""
    store = open_engine_store(target, synchronous="OFF")
    try:
        store.append("b", [(1, second(1)), (2, second(10**6))], quarantine=far_future)  # pos 1: b#0; b#1 never logged
        store.append("a", [(3, second(3)), (4, second(4))])  # pos 2, 3: a#0, a#1
        store.append("a", [(5, second(10**6))], quarantine=far_future)  # a#2 never logged
        store.append("c", [(6, second(6))])  # pos 4: c#0
        events = store.read_ingress(0, 10)
        store.quarantine([(events[3], "poison c"), (events[2], "poison a")])  # c#0 at pos 4, a#1 at pos 3
    finally:
        store.close()


def layout_4_file(path: Path) -> None:
    """A store of the previous release: this release's file, its dead letters back in layout 4's table (no
    numbers), without the tables layout 5 added."""
    fill_letters(path)
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE reaqtive_failed_elements")
        db.execute("DROP TABLE reaqtive_dead_letter_acks")
        db.execute("ALTER TABLE reaqtive_dead_letters RENAME TO letters_5")
        db.execute(LAYOUT_4_LETTERS)
        db.execute("INSERT INTO reaqtive_dead_letters SELECT stream, seq, pos, time, payload, reason, at, crc "
                   "FROM letters_5")
        db.execute("DROP TABLE letters_5")
        db.execute("DELETE FROM reaqtive_meta WHERE key = 'dead_letter_id'")
        db.execute("UPDATE reaqtive_meta SET value = 4 WHERE key = 'engine_schema_version'")
        db.execute("UPDATE reaqtive_dead_letters SET reason = 'edited' WHERE stream = 'c'")  # damaged before
    db.close()


def layout_4_database(dsn: str) -> None:
    """The same on PostgreSQL (layout 4 was the first layout of a PostgreSQL store)."""
    fill_letters(dsn)
    target = StoreSql(dsn)
    target.execute("DROP TABLE reaqtive_failed_elements")
    target.execute("DROP TABLE reaqtive_dead_letter_acks")
    target.execute("ALTER TABLE reaqtive_dead_letters DROP COLUMN id, DROP COLUMN id_crc")
    target.execute("DELETE FROM reaqtive_meta WHERE key = 'dead_letter_id'")
    target.execute("UPDATE reaqtive_meta SET value = to_jsonb(4) WHERE key = 'engine_schema_version'")
    target.execute("UPDATE reaqtive_dead_letters SET reason = 'edited' WHERE stream = 'c'")


# (pos, stream, seq) order, never-logged events last
MIGRATED = [(1, "a", 1, 3), (2, "c", 0, 4), (3, "a", 2, None), (4, "b", 1, None)]


@pytest.fixture
def layout_4(target: StoreSql) -> StoreSql:
    if target.kind == "sqlite":
        assert isinstance(target.target, Path)
        layout_4_file(target.target)
    else:
        layout_4_database(str(target.target))
    return target


def test_a_layout_4_store_is_migrated_and_its_dead_letters_keep_their_content_with_numbers(layout_4: StoreSql) -> None:
    before = layout_4.rows("SELECT stream, seq, pos, time, payload, reason, at, crc FROM reaqtive_dead_letters "
                           "ORDER BY stream, seq")
    store = open_engine_store(layout_4.target, synchronous="OFF")
    try:
        meta = dict(layout_4.rows("SELECT key, value FROM reaqtive_meta"))
        assert meta["engine_schema_version"] == ENGINE_SCHEMA_VERSION == 5 and meta["dead_letter_id"] == 4
        after = layout_4.rows("SELECT stream, seq, pos, time, payload, reason, at, crc FROM reaqtive_dead_letters "
                              "ORDER BY stream, seq")
        assert after == before, "every column as it was, the checksum included"
        letters = store.dead_letters()
        assert [(d.id, d.stream, d.seq, d.pos) for d in letters] == MIGRATED
        assert [d.damage is not None for d in letters] == [False, True, False, False], "damaged before: still"
        assert store.dead_lettered() == {("a", 1), ("a", 2), ("b", 1), ("c", 0)}
        assert store.acked_dead_letters() == 0 and store.failed_element_counts() == {}
        assert store.record_failed_elements([failure(pos=2)]) == 1
        store.append("b", [(7, second(10**6))], quarantine=far_future)
        assert ids(store.dead_letters())[-2:] == [5, 6], "the numbers go on"
    finally:
        store.close()
    with Engine(layout_4.target) as engine:
        assert ids(engine.dead_letters("a")) == [1, 3]


def test_the_migration_from_layout_4_is_one_transaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "v4.db"
    layout_4_file(path)
    before = path.read_bytes()
    migrate = engine_store._migrate_from_4

    def failing(db: sqlite3.Connection) -> None:
        migrate(db)
        raise OSError("the disk went away")

    monkeypatch.setattr(engine_store, "_migrate_from_4", failing)
    with pytest.raises(OSError, match="the disk went away"):
        EngineStore(path)
    assert path.read_bytes() == before
    monkeypatch.undo()
    EngineStore(path).close()
    with sqlite3.connect(path) as db:
        assert dict(db.execute("SELECT key, value FROM reaqtive_meta").fetchall())["engine_schema_version"] == 5
    db.close()


def test_the_migration_of_a_postgresql_store_is_one_transaction(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout_4_database(postgres_dsn)
    target = StoreSql(postgres_dsn)
    columns = ("SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema() "
               "AND table_name LIKE 'reaqtive%%' ORDER BY 1, 2")
    before = (target.rows(columns), target.rows("SELECT key, value::text FROM reaqtive_meta ORDER BY key"),
              target.rows("SELECT * FROM reaqtive_dead_letters ORDER BY stream, seq"))
    migrate = postgres_database._migrate_from_4

    def failing(db: Any) -> None:
        migrate(db)
        raise OSError("the disk went away")

    monkeypatch.setattr(postgres_database, "_migrate_from_4", failing)
    with pytest.raises(OSError, match="the disk went away"):
        open_engine_store(postgres_dsn)
    assert (target.rows(columns), target.rows("SELECT key, value::text FROM reaqtive_meta ORDER BY key"),
            target.rows("SELECT * FROM reaqtive_dead_letters ORDER BY stream, seq")) == before
    monkeypatch.undo()
    open_engine_store(postgres_dsn).close()
    assert dict(target.rows("SELECT key, value FROM reaqtive_meta"))["engine_schema_version"] == 5


def test_layout_4_claimed_over_layout_5_tables_is_refused_untouched(target: StoreSql) -> None:
    open_engine_store(target.target).close()
    target.execute("UPDATE reaqtive_meta SET value = 4 WHERE key = 'engine_schema_version'"
                   if target.kind == "sqlite" else
                   "UPDATE reaqtive_meta SET value = to_jsonb(4) WHERE key = 'engine_schema_version'")
    with pytest.raises(StoreLayoutError, match=r"layout 4, but .* which layout 4 does not have"):
        open_engine_store(target.target)
    assert dict(target.rows("SELECT key, value FROM reaqtive_meta"))["engine_schema_version"] == 4


# -- inspect, metrics, asyncio ------------------------------------------------------------------------------------


def test_inspect_lists_both_kinds_with_their_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.db"
    store = EngineStore(path, synchronous="OFF")
    try:
        store.append("a", [(1, second(10**6))], quarantine=far_future)
        store.record_failed_elements([failure("q://hot", pos=3)])
        store.record_failed_elements([failure("q://hot", pos=4)])
        store.ack_dead_letters(1)
    finally:
        store.close()
    summary = read_store(path)
    assert summary.dead_letters_acknowledged == 1
    assert [(d.id, d.kind, d.stream, d.subscription, d.pos) for d in summary.dead_letters] == [
        (1, "event", "a", None, None), (2, "element", "", "q://hot", 3), (3, "element", "", "q://hot", 4)]
    text = format_summary(summary)
    assert ("dead letters (1 quarantined events, not delivered; 2 failed elements, skipped; acknowledged up to #1)"
            in text)
    (line,) = [line for line in text.splitlines() if line.lstrip().startswith("2 ")]
    assert "element" in line and "q://hot" in line and "KeyError: 'celsius'" in line
    assert "reaqtive:map at q://hot#0/1" in line and "{'sensor': 'k1'}" in line
    data = summary_to_json(summary)
    assert data["dead_letters_acknowledged"] == 1
    assert data["dead_letters"][1]["error_type"] == "KeyError" and data["dead_letters"][1]["id"] == 2
    code = main(["inspect", str(path), "--json"])
    out = capsys.readouterr().out
    assert code == 0
    printed = json.loads(out)
    assert [d["kind"] for d in printed["dead_letters"]] == ["event", "element", "element"]
    with sqlite3.connect(path) as db:
        db.execute("UPDATE reaqtive_failed_elements SET message = 'edited' WHERE id = 3")
    db.close()
    assert [d.damaged for d in read_store(path).dead_letters] == [False, False, True]
    assert "[DAMAGED" in format_summary(read_store(path)).splitlines()[-1]


def test_inspect_reads_the_dead_letters_of_a_layout_4_file(tmp_path: Path) -> None:
    path = tmp_path / "v4.db"
    layout_4_file(path)
    summary = read_store(path)
    assert summary.dead_letters_acknowledged is None
    assert [(d.id, d.stream, d.seq, d.damaged) for d in summary.dead_letters] == [
        (None, "a", 1, False), (None, "a", 2, False), (None, "b", 1, False), (None, "c", 0, True)]
    assert "dead letters (4 quarantined events" in format_summary(summary)


def test_the_failed_elements_of_each_subscription_are_a_gauge(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    with Engine(tmp_path / "s.db", start=T0) as engine:
        engine.create_stream("raw")
        engine.create_subscription("q", Query.stream("raw").scan(0, operator.add))
        engine.append("raw", 1, second(1))
        engine.process()
        PrometheusMetrics(engine, registry=registry, store="e")
        assert read_engine(engine).failed_elements == {}
        engine._store.record_failed_elements([failure("q", pos=1), failure("q", pos=1, ordinal=1),
                                              failure("gone", pos=1)])
        assert read_engine(engine).failed_elements == {"gone": 1, "q": 2}

        def gauge() -> dict[str, float]:
            text = generate_latest(registry).decode("utf-8")
            return {sample.labels["subscription"]: sample.value for family in text_string_to_metric_families(text)
                    for sample in family.samples if sample.name == "reaqtive_dead_letter_elements"}

        assert gauge() == {"gone": 1.0, "q": 2.0}
        engine.ack_dead_letters(2)
        engine.checkpoint()
        assert gauge() == {"gone": 1.0}, "trimmed: no longer kept"


def test_the_asyncio_face_lists_and_acknowledges(tmp_path: Path) -> None:
    far = datetime.now(UTC) + timedelta(days=400)

    async def run() -> tuple[list[int], bool, list[int]]:
        async with await AsyncEngine.open(tmp_path / "s.db", start=T0) as engine:
            await engine.call(engine.engine.create_stream, "a")
            await engine.append_many("a", [(1, far), (2, far)])
            listed = ids(await engine.dead_letters("a", limit=5))
            moved = await engine.ack_dead_letters(1)
            return listed, moved, ids(await engine.dead_letters())

    assert asyncio.run(run()) == ([1, 2], True, [2])


def test_an_event_built_by_hand_is_quarantined_with_a_number(store: EngineStore) -> None:
    assert store.quarantine([(IngressEvent(0, "b", 9, second(9), {"x": 1}), "poison")], at=second(501)) == 1
    (letter,) = store.dead_letters()
    assert (letter.id, letter.kind, letter.value, letter.at) == (1, "event", {"x": 1}, second(501))
    assert letter == DeadLetter("b", 9, 0, second(9), {"x": 1}, "poison", second(501)), "the number is not compared"
