"""A checkpoint writes the outputs still waiting for an observer function just before it commits. Killed between
the two, the store holds outbox rows numbered past the committed counter: provisional. The replay produces them
again; the recovery drops the provisional rows, so that the outbox queues every output of the replay and the next
checkpoint commits a counter with every output below it stored (found by the random-kill test of the JSON-lines
sink: a later recovery refused the store, outputs #0 to #39 missing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reaqtive.engine import Output
from tests.connectors.support import STREAM, open_engine, value_of, when


def test_outbox_rows_of_a_checkpoint_that_did_not_commit_are_dropped_and_the_replay_queues_them(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store.db"
    got: list[tuple[int, Any]] = []

    def observer(output: Output) -> None:
        if output.subscription == "q://double":
            got.append((output.seq, output.value))

    engine = open_engine(store, "file", observer)
    engine.append_many(STREAM, [(value_of(i), when(i)) for i in range(10)])
    engine.process()
    engine.checkpoint()  # committed: q://double's counter is 10, its observer got #0 to #9
    engine.append_many(STREAM, [(value_of(i), when(i)) for i in range(10, 20)])
    # What a checkpoint's write of the waiting outputs leaves when the process dies before the commit: rows
    # #15 to #19 (outputs #10 to #14 had reached the observer then), the counter still 10 in the store.
    engine._store.write_outputs([("q://double", seq, 2 * value_of(seq)) for seq in range(15, 20)])
    engine.close()  # no checkpoint

    got.clear()
    engine = open_engine(store, "file", observer)  # recovers: the replay produces #10 to #19 again
    try:
        engine.process()
        engine.checkpoint()
        assert got == [(seq, 2 * value_of(seq)) for seq in range(10, 20)]
    finally:
        engine.close()
    engine = open_engine(store, "file", observer)  # the store holds what the committed counter needs
    engine.close()
