"""Runs of tuple outputs are packed by msgpack's own code under one run marker (``EXT_TUPLE_RUN``,
``StateCodec.new_tuple_run_packer``): every reader gets back exactly what was emitted, with its types, whatever the
run holds, through append, process, the sink's reads, a replay after a crash (twice), and rows written before the
marker existed still read."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from reaqtive import Query
from reaqtive.engine import DURABLE_SINK, Engine, FunctionRegistry
from reaqtive.engine.database import MEMORY, EngineStore, OutputChunks, array_entries, chunk_outputs
from reaqtive.state import DEFAULT_CODEC, StateFormatError
from reaqtive.state.codec import StateCodec, tuple_entry

T0 = datetime(2026, 1, 1, tzinfo=UTC)

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**64 - 1), st.floats(allow_nan=False),
    st.text(max_size=5), st.binary(max_size=5),
)
flat_tuples = st.lists(scalars, max_size=4).map(tuple)  # the empty tuple and tuples of one among them
values = st.recursive(
    st.one_of(scalars, st.integers(min_value=2**64, max_value=2**70),  # beyond 64 bits: an extension
              st.datetimes(timezones=st.just(UTC)).map(lambda d: d.replace(fold=0)),  # fold is not kept
              st.timedeltas()),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.lists(inner, max_size=3).map(tuple),
                            st.dictionaries(st.text(max_size=3), inner, max_size=3)),
    max_leaves=8,
)
# Runs the marker takes (flat tuples of scalars) as often as runs it must leave to the usual packer.
runs = st.one_of(st.lists(flat_tuples, max_size=20), st.lists(st.one_of(flat_tuples, values), max_size=20))
events = st.one_of(st.lists(flat_tuples, max_size=20),  # an event is never None
                   st.lists(st.one_of(flat_tuples, values.filter(lambda v: v is not None)), max_size=20))


def typed(value: Any) -> str:
    """A value's text with its types (``(1,)`` and ``[1]``, ``1`` and ``1.0`` and ``True``, differ)."""
    return repr(value)


# -- the codec ---------------------------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(run=runs)
@example(run=[(), ()])
@example(run=[(1,), (2,)])
@example(run=[(1, 2), [1, 2]])  # a list beside a tuple: the usual packer
@example(run=[(True,), (1,), (1.0,)])
@example(run=[(2**64 - 1, -(2**63))] * 17)  # an array header of 3 bytes, the widest native ints
@example(run=[(2**64, 1), (1, 1)])  # beyond 64 bits: the usual packer
def test_a_run_decodes_to_its_values_and_cuts_into_the_entries_each_value_packs_alone(run: list[Any]) -> None:
    pack = DEFAULT_CODEC.new_tuple_run_packer()
    packed = pack(run)
    flat = len(run) >= 2 and all(type(v) is tuple and all(type(x) in (type(None), bool, int, float, str, bytes)
                                                          and (type(x) is not int or x < 2**64) for x in v)
                                 for v in run)
    assert (packed is not None) == flat
    if packed is None:
        return
    decoded = DEFAULT_CODEC.decode_entries(packed, "run")
    assert typed(decoded) == typed(run)
    assert DEFAULT_CODEC.decode_run(packed, len(run)) is None  # the ingress' one-call decode leaves it alone
    pieces = chunk_outputs(("q", 3, len(run), packed))
    assert [piece for _, _, piece in pieces] == [DEFAULT_CODEC.encode(value) for value in run]


def test_tuple_entry_writes_every_extension_header_width() -> None:
    for size in (0, 1, 2, 3, 4, 8, 16, 17, 300, 70000):
        value = tuple(["x" * max(size - 2, 0)]) if size else ()
        body = DEFAULT_CODEC.encode(list(value))
        assert tuple_entry(body) == DEFAULT_CODEC.encode(value)


def test_subclasses_and_other_types_keep_the_usual_path() -> None:
    from enum import IntEnum

    class Level(IntEnum):
        LOW = 1

    codec = StateCodec()
    codec.register(Level, "test:Level", int, Level)
    pack = codec.new_tuple_run_packer()
    assert pack([(Level.LOW,), (1,)]) is None
    assert pack([(1, (2,)), (3, 4)]) is None  # nested
    assert pack([(1,)]) is None  # one value: not worth the marker
    assert pack([1, 2]) is None


@pytest.mark.parametrize("data, why", [
    (b"\xd6\x08\x00\x00\x00\x03\x91\x01\x91\x02", "does not hold its arrays"),  # covers three, two follow
    (b"\xd6\x08\x00\x00\x00\x02\x91\x01\x02", "does not hold its arrays"),  # covers an int
    (b"\x91\xd6\x08\x00\x00\x00\x00", "inside a value"),
    (b"\xd5\x08\x00\x01", "malformed run"),  # a marker of the wrong size
])
def test_a_malformed_run_marker_is_a_format_error(data: bytes, why: str) -> None:
    with pytest.raises(StateFormatError, match=why):
        DEFAULT_CODEC.decode_entries(data, "run")
    with pytest.raises(StateFormatError):
        DEFAULT_CODEC.decode_value(data[:6] if data[0] != 0x91 else data, "value")


# -- the durable sink ------------------------------------------------------------------------------------------


# A row's payload as the code before the marker (548ebdf) wrote it: one EXT_TUPLE entry per tuple, a bigint inside.
GOLDEN_PAYLOAD = bytes.fromhex("c7030192010291c0d60192a161c2d40190c70f0192c70902400000000000000000a178")
GOLDEN_VALUES: list[Any] = [(1, 2), [None], ("a", False), (), (2**70, "x")]


def test_rows_written_before_the_marker_still_read() -> None:
    store = EngineStore(MEMORY)
    try:
        store.write_outputs(OutputChunks([("q", 0, len(GOLDEN_VALUES), GOLDEN_PAYLOAD)]), encoded=True)
        assert typed([value for _, _, value in store.read_outputs("q")]) == typed(GOLDEN_VALUES)
        # and the usual packer still writes exactly those bytes for a run it packs
        assert array_entries(DEFAULT_CODEC.encode(GOLDEN_VALUES), len(GOLDEN_VALUES)) == GOLDEN_PAYLOAD
    finally:
        store.close()


@settings(max_examples=60, deadline=None)
@given(run=st.lists(flat_tuples, min_size=2, max_size=12), held=st.integers(min_value=-1, max_value=14),
       cut=st.integers(min_value=0, max_value=12))
@example(run=[(1,), (2,), (3,)], held=1, cut=1)  # a replay over part of a marked chunk
def test_marked_chunks_store_what_the_same_outputs_one_by_one_store(run: list[Any], held: int, cut: int) -> None:
    pack = DEFAULT_CODEC.new_tuple_run_packer()
    cut = min(cut, len(run))
    chunks = [("q", first, len(part), pack(part) if len(part) >= 2 else DEFAULT_CODEC.encode(part[0]))
              for first, part in ((0, run[:cut]), (cut, run[cut:])) if part]
    one_by_one, chunked = EngineStore(MEMORY), EngineStore(MEMORY)
    try:
        for store in (one_by_one, chunked):
            store.write_outputs([("q", seq, "held") for seq in range(held + 1)])
        one_by_one.write_outputs([("q", seq, value) for seq, value in enumerate(run)])
        chunked.write_outputs(OutputChunks(chunks), encoded=True)  # type: ignore[arg-type]
        assert typed(chunked.read_outputs("q")) == typed(one_by_one.read_outputs("q"))
    finally:
        one_by_one.close()
        chunked.close()


# -- the engine ------------------------------------------------------------------------------------------------


def same(value: Any) -> Any:
    return value


def functions() -> FunctionRegistry:
    registry = FunctionRegistry()
    registry.register("same", same)
    return registry


def emitted(engine: Engine) -> list[tuple[int, Any]]:
    return [(output.seq, output.value) for output in engine.outputs("q")]


@settings(max_examples=8, deadline=None)
@given(first=events, second=events, third=events)
@example(first=[(1, 2)] * 3, second=[(), (None,)], third=[[1], (1,), {"a": (1,)}])
def test_the_engine_gives_back_every_output_as_emitted_through_two_crashes(
    first: list[Any], second: list[Any], third: list[Any]
) -> None:
    """Each batch's outputs are one run (the stream's only reader, a map). After a checkpoint, two crashes each
    after the sink took outputs past it: the replays produce them again (compared with the sink, decoded from
    marked chunks) and the sink ends with every output once, as emitted."""
    expected = first + second + third
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "s.db"
        with Engine(path, functions=functions(), start=T0) as engine:
            engine.create_stream("raw")
            engine.create_subscription("q", Query.stream("raw").map(same), observer=DURABLE_SINK)
            engine.append_many("raw", [(v, T0 + timedelta(seconds=i)) for i, v in enumerate(first)])
            engine.process()
            engine.checkpoint()
            engine.append_many("raw", [(v, T0 + timedelta(seconds=100 + i)) for i, v in enumerate(second)])
            engine.process()
        for crash in range(2):  # closed without a checkpoint: the sink holds outputs the replay makes again
            with Engine(path, functions=functions()) as engine:
                engine.process()
                assert not engine.faults
                if crash:
                    engine.append_many("raw", [(v, T0 + timedelta(seconds=200 + i)) for i, v in enumerate(third)])
                    engine.process()
                assert typed(emitted(engine)) == typed(list(enumerate(expected[:len(emitted(engine))])))
        with Engine(path, functions=functions()) as engine:
            engine.process()
            assert not engine.faults
            assert typed(emitted(engine)) == typed(list(enumerate(expected)))


class Opaque:
    """A value the state codec cannot encode."""


def tagged_opaque_at_five(x: int) -> tuple[Any, ...]:
    return (Opaque(),) if x == 5 else (x, str(x))


def test_an_unstorable_tuple_in_a_run_keeps_the_tuples_before_it(tmp_path: Path) -> None:
    """A run of tuples one of which holds what the sink cannot hold is not a tuple run: it is written as any run,
    the outputs before that one kept (as tuples), the subscription stopped there, also after a restart."""
    registry = FunctionRegistry()
    registry.register("tagged_opaque_at_five", tagged_opaque_at_five)
    path = tmp_path / "s.db"
    expected = [(i, (i, str(i))) for i in range(5)]
    with Engine(path, functions=registry, start=T0) as engine:
        engine.create_stream("raw")
        engine.create_subscription("q", Query.stream("raw").map(tagged_opaque_at_five), observer=DURABLE_SINK)
        engine.append_many("raw", [(i, T0 + timedelta(seconds=i)) for i in range(20)])
        engine.process()
        engine.checkpoint()
        assert typed(emitted(engine)) == typed(expected)
        assert [fault.uri for fault in engine.faults] == ["q"]
    with Engine(path, functions=registry) as engine:
        engine.process()
        assert typed(emitted(engine)) == typed(expected)
