"""Framing: segments, nested segments, the blob's checksum, and what damaged bytes do (always a state error)."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reaqtive.state import (
    DEFAULT_CODEC,
    BlobWriter,
    SegmentReader,
    StateChecksumError,
    StateError,
    StateFormatError,
    load_subscription,
    read_blob,
    save_subscription,
)
from reaqtive.state.framing import MAGIC, SegmentWriter, _varint, checksum
from tests.state.strategies import VALUES, assert_same
from tests.state.trees import Tree

# -- segments -------------------------------------------------------------------------------------------------

# A segment's content as a nested list: ("v", value) entries and ("child", [...]) entries.
ENTRIES = st.recursive(
    st.lists(st.tuples(st.just("v"), VALUES), max_size=4),
    lambda inner: st.lists(st.one_of(st.tuples(st.just("v"), VALUES), st.tuples(st.just("child"), inner)), max_size=4),
    max_leaves=12,
)


def write_entries(writer: SegmentWriter, entries: list[tuple[str, Any]]) -> None:
    for kind, payload in entries:
        if kind == "v":
            writer.write(payload)
        else:
            write_entries(writer.create_child(), payload)


def check_entries(reader: SegmentReader, entries: list[tuple[str, Any]]) -> None:
    for kind, payload in entries:
        if kind == "v":
            assert_same(payload, reader.read())
        else:
            check_entries(reader.create_child(), payload)
    assert reader.remaining == 0


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ENTRIES)
def test_nested_child_segments_round_trip(entries: list[tuple[str, Any]]) -> None:
    writer = SegmentWriter(DEFAULT_CODEC.packer(), "test:node")
    write_entries(writer, entries)
    check_entries(SegmentReader(writer.render(), "test"), entries)


def test_a_child_can_be_written_after_later_parent_values() -> None:
    writer = SegmentWriter(DEFAULT_CODEC.packer(), "test:node")
    writer.write(1)
    child = writer.create_child()
    writer.write(3)
    child.write(2)  # children are framed when the node's save returns, so the order of calls is free
    reader = SegmentReader(writer.render(), "test")
    assert reader.read() == 1
    assert reader.create_child().read() == 2
    assert reader.read() == 3


def reader_of(*values: Any, child_at: int | None = None) -> SegmentReader:
    writer = SegmentWriter(DEFAULT_CODEC.packer(), "test:node")
    for index, value in enumerate(values):
        if index == child_at:
            writer.create_child().write("inner")
        writer.write(value)
    return SegmentReader(writer.render(), "operator 'test:node' at path 0/1")


def test_reading_past_the_end_of_a_segment_is_a_format_error_naming_the_node() -> None:
    reader = reader_of(1, 2)
    assert (reader.read(), reader.read()) == (1, 2)
    with pytest.raises(StateFormatError, match=r"'test:node' at path 0/1: read past the end of its state"):
        reader.read()
    with pytest.raises(StateFormatError, match="read past the end"):
        reader.create_child()


def test_reading_past_a_child_segment_does_not_reach_the_parent() -> None:
    writer = SegmentWriter(DEFAULT_CODEC.packer(), "test:node")
    writer.create_child().write("inner")
    writer.write("parent value")
    reader = SegmentReader(writer.render(), "test")
    child = reader.create_child()
    assert child.read() == "inner"
    with pytest.raises(StateFormatError, match=r"nested segment.*read past the end"):
        child.read()
    assert reader.read() == "parent value"


def test_values_and_nested_segments_are_not_confused() -> None:
    reader = reader_of(1, 2, child_at=1)
    assert reader.read() == 1
    with pytest.raises(StateFormatError, match="nested segment, not a value"):
        reader.read()
    reader.create_child()
    with pytest.raises(StateFormatError, match="a value, not a nested segment"):
        reader.create_child()


def test_try_read_probes_without_moving_and_reset_rewinds() -> None:
    reader = reader_of(1, 2, child_at=1)
    assert reader.try_read() == (True, 1)
    assert reader.try_read() == (False, None)  # a nested segment is next: no value here
    reader.create_child()
    assert reader.try_read() == (True, 2)
    assert reader.try_read() == (False, None)
    assert reader.try_read() == (False, None)
    reader.reset()
    assert reader.read() == 1 and reader.remaining == 2


def test_a_writer_is_closed_once_its_node_is_saved() -> None:
    blob = BlobWriter()
    kept: list[SegmentWriter] = []
    blob.write_node((0,), "test:node", (1,), lambda writer, version: kept.append(writer))
    with pytest.raises(StateError, match="closed"):
        kept[0].write(1)
    with pytest.raises(StateError, match="closed"):
        kept[0].create_child()


def test_bad_names_and_versions_are_refused_at_save() -> None:
    for name, version in [("", (1,)), ("x", ()), ("x", (1, -1)), ("x", [1]), ("x", (1.0,)), (3, (1,))]:
        with pytest.raises(StateError, match=r"name|version"):
            BlobWriter().write_node((0,), name, version, lambda writer, v: None)  # type: ignore[arg-type]


# -- blobs ----------------------------------------------------------------------------------------------------


def test_blob_layout_and_per_node_overhead() -> None:
    writer = BlobWriter()
    writer.write_node((0,), "test:sum", (1,), lambda w, v: (w.write(False), w.write(5)))
    blob = writer.finish()
    # "RQ", format 1, body length, then: path [0, 0], "test:sum", [1], ext(0, len 2) holding False and 5; CRC.
    body = b"\x92\x00\x00" + b"\xa8test:sum" + b"\x91\x01" + b"\xd5\x00" + b"\xc2\x05"
    assert blob == MAGIC + b"\x01" + bytes([len(body)]) + body + checksum(
        MAGIC + b"\x01" + bytes([len(body)]) + body
    ).to_bytes(4, "big")
    overhead = len(body) - len("test:sum") - 1  # the 1: the operator's own field (5)
    assert overhead <= 9, "path 3 + name header 1 + version 2 + segment header 2 + disposed flag 1"
    [node] = read_blob(blob)
    assert (node.path, node.name, node.version) == ((0,), "test:sum", (1,))


def test_paths_are_delta_encoded_so_deep_trees_stay_small() -> None:
    writer = BlobWriter()
    depth = 200
    for level in range(depth):
        writer.write_node((0,) * (level + 1), "n", (1,), lambda w, v: w.write(False))
    blob = writer.finish()
    assert len(blob) < depth * 12, "each record repeats only what differs from the previous path"
    nodes = read_blob(blob)
    assert [node.path for node in nodes] == [(0,) * (level + 1) for level in range(depth)]


def test_a_blob_that_is_not_one_is_a_format_error() -> None:
    with pytest.raises(StateFormatError, match="not a reaqtive state blob"):
        read_blob(b"hello world, this is not state")
    with pytest.raises(StateFormatError, match="not a reaqtive state blob"):
        read_blob(b"")


def test_an_unknown_blob_format_is_named() -> None:
    blob = bytearray(save_subscription(Tree().a) or b"")
    blob[2] = 9
    with pytest.raises(StateFormatError, match="format 9 is not supported"):
        read_blob(bytes(blob))


def test_state_round_trips_through_a_tree() -> None:
    source = Tree([[1, "x"], [(2, 3)], [], [{"k": [None]}]])
    blob = save_subscription(source.a)
    assert blob is not None
    target = Tree()
    load_subscription(target.a, blob)
    assert target.fields == source.fields


# -- damage ---------------------------------------------------------------------------------------------------


def saved_blob(fields: list[list[Any]]) -> bytes:
    blob = save_subscription(Tree(fields).a)
    assert blob is not None
    return blob


# The damage is what hypothesis explores; the content comes from a fixed, varied pool so that 1,000 cases per
# test stay fast and every run is the same.
SAMPLE_BLOBS = [
    saved_blob([[], [], [], []]),
    saved_blob([[1], [2**70, -1.5], ["x" * 300], [b"\x00" * 70000]]),  # 1-, 2- and 4-byte segment lengths
    saved_blob([[None, True, False], [0, -1, 2**64], [float("inf"), -0.0], ["", "héllo ✓"]]),
    saved_blob([[[1, [2, [3]]]], [(1, (2,))], [{"a": {"b": [None]}}], [{1, 2}, frozenset({"x"})]]),
    saved_blob([[datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC)], [timedelta(days=-1)], [datetime(1, 1, 1)], []]),
    saved_blob([[{(1, 2): [3.5]}], [b"\xff" * 40], [-(2**200)], [[[]] * 20]]),
    saved_blob([list(range(50)), [str(i) for i in range(30)], [{i: i} for i in range(10)], [(i,) for i in range(10)]]),
]
BLOBS = st.sampled_from(SAMPLE_BLOBS)


def load_into_fresh_tree(blob: bytes) -> Tree:
    target = Tree()
    load_subscription(target.a, blob, where="state/sub://x")
    return target


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(BLOBS, st.data())
def test_a_flipped_bit_is_always_detected(blob: bytes, data: st.DataObject) -> None:
    bit = data.draw(st.integers(0, len(blob) * 8 - 1), label="bit")
    damaged = bytearray(blob)
    damaged[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(StateFormatError, match="state/sub://x"):
        load_into_fresh_tree(bytes(damaged))


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(BLOBS, st.data())
def test_a_truncated_blob_is_always_detected(blob: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(blob) - 1), label="length kept")
    with pytest.raises(StateFormatError):
        load_into_fresh_tree(blob[:cut])


DAMAGE = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(1, 8)),
    st.tuples(st.just("overwrite"), st.integers(0, 10**6), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("delete"), st.integers(0, 10**6), st.integers(1, 8)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6), st.just(0)),
)


def damage(blob: bytes, how: tuple[str, int, Any]) -> bytes:
    kind, at, arg = how
    out = bytearray(blob)
    if not out:
        return blob
    at %= len(out)
    if kind == "flip":
        for bit in range(arg):  # a burst of `arg` adjacent flipped bits
            position = at * 8 + bit
            if position < len(out) * 8:
                out[position // 8] ^= 1 << (position % 8)
    elif kind == "overwrite":
        out[at : at + len(arg)] = arg
    elif kind == "insert":
        out[at:at] = arg
    elif kind == "delete":
        del out[at : at + arg]
    else:
        del out[at:]
    return bytes(out)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(BLOBS, st.lists(DAMAGE, min_size=1, max_size=3))
def test_any_damage_is_a_format_or_checksum_error_never_a_wrong_value(
    blob: bytes, hows: list[tuple[str, int, Any]]
) -> None:
    damaged = blob
    for how in hows:
        damaged = damage(damaged, how)
    if damaged == blob:
        return  # e.g. an overwrite with the same bytes: not damage
    with pytest.raises(StateFormatError):
        load_into_fresh_tree(damaged)


def reframe(body: bytes) -> bytes:
    """A blob around ``body`` with a *valid* length and checksum: damage the checksum cannot see."""
    head = MAGIC + b"\x01" + _varint(len(body)) + body
    return head + checksum(head).to_bytes(4, "big")


def body_of(blob: bytes) -> bytes:
    start = 4 if blob[3] < 0x80 else 5
    return blob[start:-4]


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(BLOBS, st.lists(DAMAGE, min_size=1, max_size=3))
def test_malformed_bodies_with_valid_checksums_raise_only_state_errors(
    blob: bytes, hows: list[tuple[str, int, Any]]
) -> None:
    body = body_of(blob)
    for how in hows:
        body = damage(body, how)
    with contextlib.suppress(StateError):  # any other exception type fails the test
        load_into_fresh_tree(reframe(body))


def test_checksum_errors_are_format_errors_with_both_checksums() -> None:
    blob = bytearray(saved_blob([[1], [2], [3], [4]]))
    blob[-6] ^= 0x10
    with pytest.raises(StateChecksumError, match=r"checksum mismatch \(stored [0-9a-f]{8}, computed [0-9a-f]{8}\)"):
        read_blob(bytes(blob))


def test_a_nested_segment_smuggled_inside_a_value_is_refused() -> None:
    # [1, ext(0, b"")] as a single value: a segment marker must never surface inside a value.
    body = b"\x92\x00\x00\xa1n\x91\x01" + b"\xc7\x06\x00" + b"\xc2" + b"\x92\x01\xc7\x00\x00"
    with pytest.raises(StateFormatError, match="nested segment inside a value"):
        read_blob(reframe(body))[0].reader()
