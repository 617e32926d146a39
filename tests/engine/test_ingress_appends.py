"""Cheaper appends (issue 31): an append packs its values a row's worth per packer call and stamps "now" from
``time_ns``; what it stores and what it refuses are those of the event-by-event encoding it replaced (kept below
as the reference), byte for byte and error for error."""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from reaqtive.engine import Engine
from reaqtive.engine.database import ROW_EVENTS, PackedEntries, require_aware
from reaqtive.engine.ingress import GroupCommit, _encode
from reaqtive.state import DEFAULT_CODEC, StateCodec, StateEncodeError

T0 = datetime(2026, 1, 1, tzinfo=UTC)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
UNIT = timedelta(microseconds=1)


def reference(events: list[tuple[Any, datetime | None]], codec: StateCodec = DEFAULT_CODEC,
              ) -> tuple[list[bytes], list[int]]:
    """The encoding of the previous release (IngressWriter.prepare), event by event: dated events only (a time
    of None was now, which differs from call to call)."""
    pack = codec.packer()
    payloads: list[bytes] = []
    micros: list[int] = []
    for value, when in events:
        if value is None:
            raise TypeError("None is never a stream element")
        try:
            micros.append((when - EPOCH) // UNIT)  # type: ignore[operator]
        except TypeError:
            if isinstance(when, datetime) and when.tzinfo is None:
                raise ValueError(f"event times must be timezone-aware, got {when}") from None
            require_aware(when, f"the time of event #{len(micros)} (counted from 0 in this call)")  # names it
            raise
        try:
            payloads.append(pack(value))
        except Exception:
            codec.encode(value)
            raise
    return payloads, micros


def outcome(function: Any, events: list[tuple[Any, Any]]) -> tuple[str, Any]:
    try:
        payloads, micros = function(events)
    except Exception as error:
        return "raised", (type(error), str(error))
    return "encoded", (list(payloads), micros)


VALUES: list[Any] = [
    0, -1, 2**70, 1.5, "text", b"bytes", [1, [2]], (1, (2, 3)), {"k": (1,)}, {1, 2}, frozenset({3}), T0,
    T0.astimezone(timezone(timedelta(hours=5))), timedelta(seconds=-3), True, "é" * 40,
]
REFUSED: list[tuple[Any, Any]] = [
    (None, T0),  # None
    (1, datetime(2026, 1, 1)),  # a naive time
    (object(), T0),  # a value the codec cannot save
    (1, "2026-01-01"),  # a time that is not one
    (1, 5),
]


@pytest.mark.parametrize("seed", range(40))
def test_an_append_stores_and_refuses_what_encoding_event_by_event_did(seed: int) -> None:
    rng = random.Random(seed)
    count = rng.choice([0, 1, 2, 15, 16, 17, 300, ROW_EVENTS - 1, ROW_EVENTS, ROW_EVENTS + 1, 2 * ROW_EVENTS + 5])
    events: list[tuple[Any, Any]] = [
        (rng.choice(VALUES), T0 + timedelta(microseconds=rng.randrange(-10**12, 10**12))) for _ in range(count)]
    if count and seed % 2:  # refused events at random places: the first one's error, whatever follows
        for _ in range(rng.randrange(1, 3)):
            events[rng.randrange(count)] = rng.choice(REFUSED)
    expected = outcome(reference, events)
    assert outcome(lambda e: _encode(e, DEFAULT_CODEC), events) == expected
    if expected[0] == "encoded":
        payloads, _ = _encode(events, DEFAULT_CODEC)
        assert isinstance(payloads, PackedEntries) and len(payloads) == count
        assert [n for n, _ in payloads.chunks] == [min(ROW_EVENTS, count - start)
                                                   for start in range(0, count, ROW_EVENTS)]
        assert b"".join(data for _, data in payloads.chunks) == b"".join(expected[1][0])
        assert payloads[1:3] == expected[1][0][1:3] and list(payloads) == expected[1][0]


def test_a_value_refused_before_a_bad_time_or_a_none_is_the_error_and_events_are_read_once() -> None:
    # The loop checks None and times first and packs afterwards: an earlier value the codec refuses still wins.
    for events in ([(1, T0), (object(), T0), (None, T0)], [(object(), T0), (1, datetime(2026, 1, 1))],
                   [(1, T0), (None, T0), (object(), T0)], [(object(), T0), (1, T0), ("x", 3, 4)]):
        assert outcome(lambda e: _encode(e, DEFAULT_CODEC), events) == outcome(reference, events), events

    def pairs() -> Iterator[tuple[Any, Any]]:  # events that are iterators: each is unpacked once, as before
        yield from [iter((1, T0)), iter((None, T0))]

    with pytest.raises(TypeError, match="None is never"):
        _encode(list(pairs()), DEFAULT_CODEC)  # type: ignore[arg-type]
    payloads, micros = _encode([iter((1, T0)), iter((2, T0))], DEFAULT_CODEC)  # type: ignore[list-item]
    assert list(payloads) == [DEFAULT_CODEC.encode(1), DEFAULT_CODEC.encode(2)] and len(micros) == 2


def test_values_nested_to_the_packers_limit_are_saved_one_by_one() -> None:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 5000))
    try:
        deep: Any = 1
        while True:  # the deepest list the codec packs alone: inside the append's list it is one level too deep
            deeper = [deep]
            try:
                DEFAULT_CODEC.encode(deeper)
            except StateEncodeError:
                break
            deep = deeper
        with pytest.raises(StateEncodeError):
            DEFAULT_CODEC.encode([deep])
        payloads, _ = _encode([(deep, T0), (2, T0)], DEFAULT_CODEC)
        assert list(payloads) == [DEFAULT_CODEC.encode(deep), DEFAULT_CODEC.encode(2)]
    finally:
        sys.setrecursionlimit(limit)


def test_registered_types_are_encoded_by_the_codec_of_the_store() -> None:
    class Point:
        def __init__(self, x: int) -> None:
            self.x = x

    codec = StateCodec()
    codec.register(Point, "test:Point", lambda p: p.x, Point)
    events: list[tuple[Any, Any]] = [(Point(i), T0) for i in range(20)]
    payloads, _ = _encode(events, codec)
    assert list(payloads) == [codec.encode(value) for value, _ in events]
    with pytest.raises(StateEncodeError, match="Point"):
        _encode(events, DEFAULT_CODEC)


# -- through the engine: rows, quarantines, group commit ---------------------------------------------------------------


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = Engine(tmp_path / "s.db", start=T0, gc_freeze=False)
    engine.create_stream("s://0")
    yield engine
    engine.close()


def logged(engine: Engine) -> list[tuple[int, int, int, Any]]:
    """(pos, seq, micros, value) of every event of the log, and every row sound."""
    events = []
    after = 0
    while runs := engine._store.read_ingress_runs(after, 4096):
        for run in runs:
            assert run.damage is None, run.damage
            events += [(run.pos + i, run.seq + i, run.micros[i], run.values[i]) for i in range(run.count)]
        after = runs[-1].pos + runs[-1].count - 1
    return events


def row_counts(engine: Engine) -> list[int]:
    return [count for (count,) in engine._store._db.execute("SELECT count FROM reaqtive_ingress ORDER BY pos")]


def test_appends_read_back_exactly_and_rows_take_whole_chunks(engine: Engine) -> None:
    sizes = [1, 1000, 1000, 5000, 3, ROW_EVENTS, 7]
    expected: list[Any] = []
    for size in sizes:
        values = [len(expected) + i for i in range(size)]
        engine.append_many("s://0", [(v, T0 + timedelta(microseconds=v)) for v in values])
        expected += values
    assert logged(engine) == [(i + 1, i, (T0 - EPOCH) // UNIT + i, i) for i in range(len(expected))]
    assert row_counts(engine) == [1, 1000, 1000, 1024, 1024, 1024, 1024, 904, 3, 1024, 7]
    assert max(row_counts(engine)) <= ROW_EVENTS


def test_large_values_are_cut_into_rows_of_about_a_megabyte(engine: Engine) -> None:
    values = [str(i) * 10_000 for i in range(1, 121)]  # 10-30 kB each
    engine.append_many("s://0", [(v, T0) for v in values])
    assert [value for *_, value in logged(engine)] == values
    counts = row_counts(engine)
    assert sum(counts) == 120 and len(counts) > 1 and max(counts) < 120


def test_events_dated_too_far_ahead_are_cut_out_of_a_packed_append(tmp_path: Path) -> None:
    with Engine(tmp_path / "s.db", start=T0, gc_freeze=False, max_event_time_ahead=timedelta(days=1)) as engine:
        engine.create_stream("s://0")
        far = datetime.now(UTC) + timedelta(days=3)
        events = [(i, far if i % 300 == 7 else T0) for i in range(2000)]
        assert engine.append_many("s://0", events) == list(range(2000))
        kept = [i for i in range(2000) if i % 300 != 7]
        assert [(seq, value) for _, seq, _, value in logged(engine)] == [(i, i) for i in kept]
        letters = engine.dead_letters()
        assert [(letter.seq, letter.value) for letter in letters] == [(i, i) for i in range(2000) if i % 300 == 7]
        assert [letter.payload for letter in letters] == [DEFAULT_CODEC.encode(letter.seq) for letter in letters]


def test_group_commit_puts_queued_appends_of_a_stream_in_shared_rows(tmp_path: Path) -> None:
    with Engine(tmp_path / "s.db", start=T0, gc_freeze=False,
                ingress_commit=GroupCommit(events=10**6, seconds=60)) as engine:
        engine.create_stream("s://0")
        for i in range(300):
            engine.append("s://0", i, T0)
        engine.append_many("s://0", [(i, T0) for i in range(300, 1300)])
        engine.append_many("s://0", [(i, T0) for i in range(1300, 1310)])
        engine.flush_ingress()
        assert [value for *_, value in logged(engine)] == list(range(1310))
        assert row_counts(engine) == [300, 1010], "a chunk that does not fit starts a row; the next one joins it"


ZONES = [UTC, timezone(timedelta(hours=5)), timezone(timedelta(hours=-3, minutes=-30)), timezone(timedelta(0)),
         ZoneInfo("Europe/Paris"), ZoneInfo("America/New_York"), ZoneInfo("Australia/Lord_Howe")]


def dated(base: datetime, offsets: list[int], zones: list[int]) -> list[tuple[Any, Any]]:
    return [(i, (base + timedelta(microseconds=offset)).astimezone(ZONES[zone]))
            for i, (offset, zone) in enumerate(zip(offsets, zones, strict=False))]


@settings(max_examples=150, deadline=None)
@example(base=datetime(2026, 3, 29, 0, 30, tzinfo=UTC), offsets=[0, 2 * 3600 * 10**6], zones=[4, 4])
@example(base=datetime(2026, 10, 25, 0, 30, tzinfo=UTC), offsets=[0, 3600 * 10**6, 2 * 3600 * 10**6],
         zones=[4, 4, 4])
@example(base=datetime.max.replace(tzinfo=UTC) - timedelta(hours=1), offsets=[0, 10], zones=[0, 1])
@example(base=datetime.min.replace(tzinfo=UTC) + timedelta(hours=6), offsets=[0, -10], zones=[1, 0])
@given(
    base=st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)),
    offsets=st.lists(st.integers(-10**14, 10**14), min_size=1, max_size=40),
    zones=st.lists(st.integers(0, len(ZONES) - 1), min_size=40, max_size=40),
)
def test_times_in_any_zone_are_the_microseconds_the_event_by_event_encoding_gave(
    base: datetime, offsets: list[int], zones: list[int],
) -> None:
    """An append counts its times from its first one (in UTC): across a zone's change of offset (a difference
    between two times of one zone object is their wall clocks'), far apart, near the ends of datetime's range,
    and with the first time naive or missing, it stores and refuses what the reference does."""
    try:
        events = dated(base, offsets, zones)
    except OverflowError:
        return  # a time past datetime's range: not an event anyone can make
    assert outcome(lambda e: _encode(e, DEFAULT_CODEC), events) == outcome(reference, events)
    naive_first = [(0, events[0][1].replace(tzinfo=None)), *events[1:]]
    assert outcome(lambda e: _encode(e, DEFAULT_CODEC), naive_first) == outcome(reference, naive_first)
    stamped_first = [(0, None), *events[1:]]
    expected = outcome(reference, events[1:])
    got = outcome(lambda e: _encode(e, DEFAULT_CODEC), stamped_first)
    assert got[0] == expected[0] == "encoded" and got[1][1][1:] == expected[1][1]
