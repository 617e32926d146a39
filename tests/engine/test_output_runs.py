"""The durable sink takes a run's outputs as one encoded chunk (reaqtive.engine.outputs, ``Outputs.run_writer``):
the sink's content is the same as with one output at a time, whatever the chunks' cut, a replay's overlap or a
value the sink cannot hold in the middle of a run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reaqtive import Query
from reaqtive.engine import DURABLE_SINK, Engine, FunctionRegistry, UnstorableOutputError
from reaqtive.engine import database as engine_store
from reaqtive.engine.database import MEMORY, EngineStore, OutputChunk, OutputChunks, array_entries, chunk_outputs
from reaqtive.state import DEFAULT_CODEC

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def chunk(subscription: str, first: int, values: list[Any]) -> OutputChunk:
    return (subscription, first, len(values), array_entries(DEFAULT_CODEC.encode(values), len(values)))


def test_a_chunk_is_its_outputs_one_by_one() -> None:
    values = ["a", 1, (2, 3), {"k": [4.5]}, None]
    outputs = chunk_outputs(chunk("q", 7, values))
    assert [(s, seq) for s, seq, _ in outputs] == [("q", seq) for seq in range(7, 12)]
    assert [DEFAULT_CODEC.decode_entries(entry, "t")[0] for _, _, entry in outputs] == values


cuts = st.lists(st.tuples(st.sampled_from(["q", "p"]), st.integers(min_value=-3, max_value=30),
                          st.integers(min_value=1, max_value=12)), min_size=1, max_size=12)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=cuts, held=st.integers(min_value=-1, max_value=20), row=st.integers(min_value=1, max_value=9))
@example(pieces=[("q", 0, 5), ("q", 5, 5)], held=-1, row=4)  # a chunk larger than a row is cut
@example(pieces=[("q", 3, 4), ("q", 0, 6)], held=-1, row=9)  # a restarted subscription's outputs, buffered again
@example(pieces=[("q", 0, 6)], held=2, row=9)  # a replay over what the sink holds
def test_chunks_store_what_the_same_outputs_one_by_one_store(
    pieces: list[tuple[str, int, int]], held: int, row: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the chunks (in order or not, overlapping each other or what the sink holds, larger than a row),
    the sink ends up with what writing their outputs one by one gives: the first copy of each number above what
    it held."""
    monkeypatch.setattr(engine_store, "EGRESS_ROW_OUTPUTS", row)
    pieces = [(s, max(first, 0), count) for s, first, count in pieces]
    singles = [(s, seq, [s, seq, n]) for n, (s, first, count) in enumerate(pieces)
               for seq in range(first, first + count)]
    chunks = [chunk(s, first, [[s, seq, n] for seq in range(first, first + count)])
              for n, (s, first, count) in enumerate(pieces)]
    one_by_one, chunked = EngineStore(MEMORY), EngineStore(MEMORY)
    try:
        for store in (one_by_one, chunked):
            store.write_outputs([(s, seq, "held") for s in ("q", "p") for seq in range(held + 1)])
        one_by_one.write_outputs(singles)
        chunked.write_outputs(OutputChunks(chunks), encoded=True)
        for subscription in ("q", "p"):
            assert chunked.read_outputs(subscription) == one_by_one.read_outputs(subscription)
            assert chunked.read_outputs(subscription, after=held + 2, limit=3) == \
                one_by_one.read_outputs(subscription, after=held + 2, limit=3)
    finally:
        one_by_one.close()
        chunked.close()


class Opaque:
    """A value the state codec cannot encode."""


def opaque_at_five(x: int) -> object:
    return Opaque() if x == 5 else x


def odd(x: int) -> bool:
    return x % 2 == 1


def registry() -> FunctionRegistry:
    functions = FunctionRegistry()
    for function in (opaque_at_five, odd):
        functions.register(function.__name__, function)
    return functions


@pytest.mark.parametrize("fused", [False, True], ids=["map", "map-filter"])
def test_an_unstorable_output_in_a_run_keeps_the_outputs_before_it(tmp_path: Path, fused: bool) -> None:
    """The stream's only reader takes the events as one run (a fused run into the durable sink): the output the
    sink cannot hold stops the subscription there, the outputs before it are kept and numbered without holes,
    nothing after it is written, also after a restart."""
    path = tmp_path / "s.db"
    query = Query.stream("raw").map(opaque_at_five)
    if fused:
        query = Query.stream("raw").filter(odd).map(opaque_at_five)
    expected = [1, 3] if fused else [0, 1, 2, 3, 4]
    with Engine(path, functions=registry(), start=T0) as engine:
        engine.create_stream("raw")
        engine.create_subscription("q", query, observer=DURABLE_SINK)
        engine.append_many("raw", [(i, T0 + timedelta(seconds=i)) for i in range(40)])
        assert engine.process() == 40
        engine.checkpoint()
        assert [(o.seq, o.value) for o in engine.outputs("q")] == list(enumerate(expected))
        assert [f.uri for f in engine.faults] == ["q"]
        error = engine.faults[0].error
        assert isinstance(error, UnstorableOutputError) and f"#{len(expected)}" in str(error)
    with Engine(path, functions=registry()) as engine:
        engine.process()
        assert [f.uri for f in engine.faults] == ["q"]
        assert [(o.seq, o.value) for o in engine.outputs("q")] == list(enumerate(expected))
