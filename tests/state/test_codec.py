"""Values round-trip through the state encoding with their exact types; anything else is refused clearly."""

from __future__ import annotations

import enum
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive.state import (
    DEFAULT_CODEC,
    SegmentReader,
    StateCodec,
    StateEncodeError,
    StateFormatError,
    register_state_type,
)
from reaqtive.state.codec import EXT_DATETIME, EXT_TUPLE
from reaqtive.state.framing import SegmentWriter
from tests.state.strategies import VALUES, assert_same
from tests.support import stable_id


def round_trip(values: list[Any], codec: StateCodec = DEFAULT_CODEC) -> list[Any]:
    writer = SegmentWriter(codec.packer(), "test:node")
    for value in values:
        writer.write(value)
    reader = SegmentReader(writer.render(), "test", codec)
    result = [reader.read() for _ in values]
    assert reader.remaining == 0
    return result


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_every_supported_value_round_trips_with_its_exact_type(value: Any) -> None:
    [back] = round_trip([value])
    assert_same(value, back)


@settings(max_examples=200, deadline=None)
@given(VALUES)
def test_decode_value_reads_one_encoded_value_with_its_exact_type(value: Any) -> None:
    assert_same(value, DEFAULT_CODEC.decode_value(DEFAULT_CODEC.encode(value), "test"))


def test_decode_value_refuses_trailing_bytes_segments_and_garbage() -> None:
    data = DEFAULT_CODEC.encode([1, (2, 3)])
    with pytest.raises(StateFormatError, match="record x: malformed state data"):
        DEFAULT_CODEC.decode_value(data + b"\x01", "record x")
    with pytest.raises(StateFormatError, match="malformed"):
        DEFAULT_CODEC.decode_value(data[:-1], "record x")
    with pytest.raises(StateFormatError, match="nested segment"):
        DEFAULT_CODEC.decode_value(b"\x91\xd4\x00\x00", "record x")  # [ExtType(0, b"\x00")]


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -1,
        2**63 - 1,
        2**64 - 1,
        2**64,
        -(2**63),
        -(2**63) - 1,
        10**100,
        -(10**100),
        1.5,
        float("inf"),
        -0.0,
        "",
        "héllo ✓",
        b"",
        b"\x00\xff",
        [],
        (),
        [1, (2, [3])],
        ((),),
        {"a": 1, 2: "b", (1, 2): [3]},
        {frozenset({1}): {2}},
        set(),
        frozenset(),
        {1, "x", (2, 3)},
        timedelta(0),
        timedelta(days=-3, microseconds=7),
        timedelta.max,
        timedelta.min,
        datetime(2024, 5, 6, 7, 8, 9, 123456),
        datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC),
        datetime(2024, 5, 6, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
        datetime.min,
        datetime.max.replace(tzinfo=timezone(timedelta(hours=23))),
        datetime.min.replace(tzinfo=timezone(timedelta(hours=-23))),
    ],
    ids=stable_id,
)
def test_edge_values_round_trip(value: Any) -> None:
    [back] = round_trip([value])
    assert_same(value, back)


def test_tuples_and_lists_stay_distinct() -> None:
    assert round_trip([(1, 2), [1, 2], [(1,), [1]]]) == [(1, 2), [1, 2], [(1,), [1]]]
    assert [type(v) for v in round_trip([(1, 2), [1, 2]])] == [tuple, list]


def test_utc_datetimes_come_back_with_the_utc_singleton() -> None:
    [back] = round_trip([datetime(2024, 1, 1, tzinfo=UTC)])
    assert back.tzinfo is UTC


def test_zoneinfo_datetimes_keep_the_instant_and_offset_but_not_the_zone_name() -> None:
    paris = datetime(2024, 7, 1, 12, 0, tzinfo=ZoneInfo("Europe/Paris"))
    [back] = round_trip([paris])
    assert back == paris and back.utcoffset() == timedelta(hours=2)
    assert back.tzinfo == timezone(timedelta(hours=2))


class Color(enum.IntEnum):
    RED = 1


class Pair(NamedTuple):
    a: int
    b: int


@pytest.mark.parametrize(
    "value",
    [object(), Color.RED, Pair(1, 2), defaultdict(list), 1j, [1, object()], {"k": {1: object()}}],
    ids=stable_id,
)
def test_unsupported_values_are_refused_when_written_naming_the_type(value: Any) -> None:
    writer = SegmentWriter(DEFAULT_CODEC.packer(), "test:node", (0, 1))
    with pytest.raises(StateEncodeError, match=r"operator 'test:node' at path 0/1: .*type") as raised:
        writer.write(value)
    assert "register_state_type" in str(raised.value) or "cannot save" in str(raised.value)
    writer.write(1)  # the writer is still usable: the failed value left nothing behind
    assert SegmentReader(writer.render(), "t").read() == 1


def test_bytearray_and_memoryview_are_saved_as_bytes() -> None:
    assert round_trip([bytearray(b"ab"), memoryview(b"cd")]) == [b"ab", b"cd"]
    assert [type(v) for v in round_trip([bytearray(b"ab")])] == [bytes]


def test_strings_that_cannot_be_utf8_encoded_are_refused() -> None:
    writer = SegmentWriter(DEFAULT_CODEC.packer(), "test:node")
    with pytest.raises(StateEncodeError):
        writer.write("\ud800")


def test_too_deep_nesting_is_refused_not_crashing() -> None:
    value: Any = []
    for _ in range(2000):
        value = [value]
    writer = SegmentWriter(DEFAULT_CODEC.packer(), "test:node")
    with pytest.raises(StateEncodeError):
        writer.write(value)


@dataclass(frozen=True)
class Point:
    x: int
    y: int


def test_registered_types_round_trip_inside_containers() -> None:
    codec = StateCodec()
    codec.register(Point, "test:Point", lambda p: (p.x, p.y), lambda v: Point(*v))
    codec.register(Color, "test:Color", int, Color)
    values = [Point(1, 2), [Point(3, 4), {Point(5, 6): Color.RED}], (Color.RED,)]
    back = round_trip(values, codec)
    assert back == values
    assert type(back[2][0]) is Color


def test_registered_types_are_refused_by_a_codec_that_does_not_know_them() -> None:
    codec = StateCodec()
    codec.register(Point, "test:Point", lambda p: (p.x, p.y), lambda v: Point(*v))
    writer = SegmentWriter(codec.packer(), "test:node")
    writer.write(Point(1, 2))
    with pytest.raises(StateFormatError, match=r"'test:Point'.*not registered"):
        SegmentReader(writer.render(), "where", StateCodec())


def test_a_failing_decoder_is_a_format_error_naming_the_tag() -> None:
    codec = StateCodec()
    codec.register(Point, "test:Point", lambda p: (p.x, p.y), lambda v: Point(*v))
    writer = SegmentWriter(codec.packer(), "test:node")
    writer.write(Point(1, 2))
    strict = StateCodec()
    strict.register(Point, "test:Point", lambda p: (p.x, p.y), lambda v: Point(*v, 3))  # type: ignore[call-arg]
    with pytest.raises(StateFormatError, match="test:Point"):
        SegmentReader(writer.render(), "where", strict)


def test_a_failing_encoder_is_an_encode_error_naming_the_tag() -> None:
    codec = StateCodec()
    codec.register(Point, "test:Point", lambda p: 1 / 0, lambda v: Point(*v))
    writer = SegmentWriter(codec.packer(), "test:node")
    with pytest.raises(StateEncodeError, match="test:Point"):
        writer.write(Point(1, 2))


def test_registration_rules() -> None:
    codec = StateCodec()
    codec.register(Point, "test:Point", lambda p: (p.x, p.y), lambda v: Point(*v))
    codec.register(Point, "test:Point", lambda p: [p.x, p.y], lambda v: Point(*v))  # same pair again: replaced
    with pytest.raises(ValueError, match="already registered"):
        codec.register(Pair, "test:Point", tuple, lambda v: Pair(*v))
    with pytest.raises(ValueError, match="already registered"):
        codec.register(Point, "test:Other", tuple, lambda v: Point(*v))
    with pytest.raises(ValueError, match="natively"):
        codec.register(tuple, "test:tuple", list, tuple)
    with pytest.raises(TypeError):
        codec.register(Point, "", tuple, Point)
    assert codec.registered_tags() == ["test:Point"]


def test_register_state_type_uses_the_default_codec() -> None:
    class Local:
        def __init__(self, v: int) -> None:
            self.v = v

    register_state_type(Local, "tests.state:Local", lambda o: o.v, Local)
    [back] = round_trip([Local(7)])
    assert isinstance(back, Local) and back.v == 7


# -- the encoder's fast paths write the same bytes as the plain construction -------------------------------------

def _reference_default(value: object) -> object:
    """The encoding as first written: a fresh packer per nested value, datetime fields by arithmetic."""

    def nested(inner: object) -> bytes:
        return msgpack.packb(inner, default=_reference_default, strict_types=True, use_bin_type=True)  # type: ignore[no-any-return]

    kind = type(value)
    if kind is tuple:
        return msgpack.ExtType(EXT_TUPLE, nested(list(value)))  # type: ignore[call-overload]
    if kind is datetime:
        moment: datetime = value  # type: ignore[assignment]
        wall = moment.replace(tzinfo=None) - datetime(1970, 1, 1)
        offset = moment.utcoffset()
        offset_us = None if offset is None else offset // timedelta(microseconds=1)
        return msgpack.ExtType(EXT_DATETIME, nested([wall.days, wall.seconds, wall.microseconds, offset_us]))
    raise TypeError(kind)



_moments = st.datetimes(
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=-5, minutes=-30)), ZoneInfo("Europe/Paris")])
)
_naive = st.datetimes()
_nested_values = st.recursive(
    st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=5), _moments, _naive, st.none()),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.lists(inner, max_size=4).map(tuple)),
    max_leaves=12,
)


@settings(max_examples=400)
@given(_nested_values)
def test_nested_tuples_and_datetimes_encode_to_the_same_bytes_as_the_plain_construction(value: Any) -> None:
    expected = msgpack.packb(value, default=_reference_default, strict_types=True, use_bin_type=True)
    assert DEFAULT_CODEC.encode(value) == expected  # so stored state and outputs are unchanged


def test_a_failed_nested_encode_leaves_the_encoder_sound() -> None:
    class Unsupported:
        pass

    for _ in range(3):
        with pytest.raises(StateEncodeError):
            DEFAULT_CODEC.encode((1, (2, [Unsupported()])))
        assert round_trip([(1, (2, [3]))]) == [(1, (2, [3]))]


@settings(max_examples=100)
@given(st.lists(_nested_values, max_size=6))
def test_an_owners_packer_writes_what_encode_writes_and_stays_sound_after_a_failure(values: list[Any]) -> None:
    class Unsupported:
        pass

    pack = DEFAULT_CODEC.new_packer()  # (the engine's output writers: tuples packed without the thread-local)
    assert pack(values) == DEFAULT_CODEC.encode(values)
    with pytest.raises(StateEncodeError):
        pack([(1, (2, [Unsupported()]))])
    assert pack(values) == DEFAULT_CODEC.encode(values)
