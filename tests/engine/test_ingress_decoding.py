"""Decoding the ingress log's rows (issue 31): a row's values in one call (``StateCodec.decode_run``), with
``decode_entries`` deciding every case the one call cannot, and its times range-checked from their differences;
the events and errors are those of before."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgpack
import pytest

from reaqtive.engine import EngineStore
from reaqtive.engine.database import ingress_checksum, pack_times, unpack_times
from reaqtive.state import StateCodec, StateFormatError
from reaqtive.state.codec import EXT_SEGMENT, Segment

T0 = datetime(2026, 1, 1, tzinfo=UTC)
MIN_MICROS = (datetime.min.replace(tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
MAX_MICROS = (datetime.max.replace(tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


class Point:
    def __init__(self, x: int, y: int) -> None:
        self.x, self.y = x, y

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)

    __hash__ = None  # type: ignore[assignment]


class Marker:
    """A registered type whose decoder returns a Segment (no writer does this; decode_entries refuses it)."""


@pytest.fixture
def codec() -> StateCodec:
    codec = StateCodec()
    codec.register(Point, "test:Point", lambda p: [p.x, p.y], lambda v: Point(*v))
    codec.register(Marker, "test:Marker", lambda m: 0, lambda v: Segment(b""))
    return codec


VALUES: list[Any] = [
    0, -1, 2**70, 1.5, "text", b"bytes", [1, [2]], (1, (2, 3)), {"k": (1,)}, {1, 2}, frozenset({3}),
    T0, T0.astimezone(), timedelta(seconds=-3), True, Point(1, 2), {"p": Point(3, 4)},
]


@pytest.mark.parametrize("count", [1, 2, 15, 16, 17, 1000, 0x10000 + 3])
def test_a_run_decodes_in_one_call_to_what_decode_entries_gives(codec: StateCodec, count: int) -> None:
    values = [VALUES[i % len(VALUES)] for i in range(count)]  # every array header size: 1, 3 and 5 bytes
    data = b"".join(codec.encode(value) for value in values)
    decoded = codec.decode_run(data, count)
    assert decoded == codec.decode_entries(data, "x") == values
    assert decoded is not None and [type(v) for v in decoded] == [type(v) for v in values]


def test_a_run_that_is_not_exactly_its_count_of_sound_values_is_left_to_decode_entries(codec: StateCodec) -> None:
    data = b"".join(codec.encode(value) for value in (1, "two", Point(3, 3)))
    segment = msgpack.packb(msgpack.ExtType(EXT_SEGMENT, b"\x01"))
    assert codec.decode_run(data, 3) == [1, "two", Point(3, 3)]
    for payload, count in (
        (data, 2),  # more values than events
        (data, 4),  # fewer
        (data[:-1], 3),  # truncated
        (data + b"\xc1", 4),  # a byte no value starts with
        (b"\xd4\x63\x00", 1),  # an unknown extension
        (segment, 1),  # a segment: decode_entries gives it as a marker, as it always did
        (codec.encode(Marker()), 1),  # a registered decoder that returns a Segment
        (data, -1), (data, 2**32),  # counts no array has
    ):
        assert codec.decode_run(payload, count) is None, (payload, count)
    (marker,) = codec.decode_entries(segment, "x")
    assert type(marker) is Segment and marker.data == b"\x01"
    with pytest.raises(StateFormatError, match="nested segment"):  # as before: the count still runs then
        codec.decode_entries(codec.encode(Marker()), "x")


def test_times_are_range_checked_in_order_and_out_of_order(codec: StateCodec) -> None:
    for micros in ([5], [1, 2, 3], [3, 3, 3], [5, 3, 3, -7], [0, MAX_MICROS, MIN_MICROS], [MIN_MICROS, MAX_MICROS],
                   [MAX_MICROS, MIN_MICROS]):
        assert unpack_times(pack_times(micros), len(micros)) == micros
    for micros in ([MAX_MICROS + 1], [0, 1, MAX_MICROS + 1], [MIN_MICROS - 1, 0], [0, MIN_MICROS - 1, 0],
                   [0, MAX_MICROS + 1, 0], [5, MIN_MICROS - 1]):
        with pytest.raises(ValueError, match="range"):
            unpack_times(pack_times(micros), len(micros))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EngineStore]:
    store = EngineStore(tmp_path / "s.db", synchronous="OFF")
    yield store
    store.close()


def put_row(store: EngineStore, pos: int, seq: int, micros: list[int], payload: bytes) -> None:
    """A row as a writer would put it (a checksum that verifies), whatever it holds."""
    count = len(micros)
    times = pack_times(micros)
    db = sqlite3.connect(store.path)
    with db:
        db.execute("INSERT INTO reaqtive_ingress VALUES (?, 'a', ?, ?, ?, ?, ?)",
                   (pos, seq, count, times, payload, ingress_checksum(pos, "a", seq, count, times, payload)))
    db.close()


def test_rows_that_verify_but_do_not_decode_are_damaged_with_the_reasons_of_before(store: EngineStore) -> None:
    encode = store.codec.encode
    segment = msgpack.packb(msgpack.ExtType(EXT_SEGMENT, b"\x01"))
    put_row(store, 1, 0, [1, 2], encode(1) + encode(2))  # sound
    put_row(store, 3, 2, [3, 4], encode(3))  # one value for two events
    put_row(store, 5, 4, [5], encode(5) + b"\xc1")  # a byte no value starts with
    put_row(store, 6, 5, [6, MAX_MICROS + 1, 7], encode(6) * 3)  # a time out of range, out of order
    put_row(store, 9, 8, [9], segment)  # a segment where a value belongs: delivered as before, a marker
    runs = store.read_ingress_runs(0, 100)
    assert [(r.pos, r.count, r.damage) for r in runs[:1]] == [(1, 2, None)] and runs[0].values == [1, 2]
    assert runs[1].damage is not None and "1 values for 2 events" in runs[1].damage
    assert runs[2].damage is not None and "cannot be decoded" in runs[2].damage
    assert runs[3].damage is not None and "range of datetime" in runs[3].damage
    assert runs[4].damage is None and type(runs[4].values[0]) is Segment
