"""A query behind the engine replays the engine's clock moves that came without an event (``advance_time``) at
the same place in the log: with ``clock="event"`` a paused query computes what it would have computed never paused,
even when a late event (delivered at the clock's time) follows such a move. Pinned from a hypothesis failure of
test_adversarial_restarts, with variants: two pauses, several moves, a crash between the move and the resume with
and without a checkpoint, lazy binding or not."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from reaqtive import Query
from reaqtive.engine import Engine
from tests.engine.test_adversarial_restarts import QUERIES, T0, at, compare

BUFFER = list(QUERIES).index("buffer-overlap")  # b.buffer(6 ms, 2 ms)
SUMS = list(QUERIES).index("window-sum")  # c.window(5 ms, 3 ms), summed


# The shrunk case: the clock moves to 2 ms without an event while the buffer is paused, then a late event of b.
SHRUNK: list[tuple[Any, ...]] = [("advance", 1), ("pause", BUFFER), ("append", "a", 0, 1, 0), ("advance", 1),
                                 ("append", "b", 0, 0, 2)]


@pytest.mark.parametrize("lazy", [True, False])
def test_a_paused_query_replays_a_clock_move_before_a_late_event(tmp_path: Path, lazy: bool) -> None:
    compare(tmp_path, SHRUNK, lazy)


@pytest.mark.parametrize("tail", [
    [("crash", False)],  # the advance checkpointed: the move is in the checkpoint
    [("crash", True)],  # twice
    [("checkpoint", True), ("crash", False)],
    [("resume", BUFFER), ("process", 1), ("crash", False)],  # crashed in the middle of the catch-up
], ids=["crash", "crash-twice", "full-checkpoint-crash", "crash-catching-up"])
def test_the_clock_moves_survive_a_crash_with_their_checkpoint(tmp_path: Path, tail: list[tuple[Any, ...]]) -> None:
    compare(tmp_path, [*SHRUNK, *tail], lazy=True)


def test_several_moves_and_two_paused_queries(tmp_path: Path) -> None:
    steps: list[tuple[Any, ...]] = [
        ("append", "c", 3, 1, 0), ("pause", SUMS), ("advance", 2), ("append", "a", 1, 0, 0), ("advance", 3),
        ("pause", BUFFER), ("append", "b", 2, 0, 4), ("advance", 1), ("append", "c", 1, 0, 5), ("advance", 4),
        ("resume", SUMS), ("process", 1), ("append", "b", 5, 0, 3), ("crash", False), ("advance", 2),
        ("append", "c", 2, 0, 6)]
    compare(tmp_path, steps, lazy=False)


@pytest.mark.parametrize("checkpointed", [True, False])
def test_a_move_is_kept_with_the_checkpoint_that_records_the_query_behind(tmp_path: Path, checkpointed: bool) -> None:
    """A move without an event is saved with the checkpoint that records where the paused query stands; a kill
    before that checkpoint forgets it, as the recovered engine's clock does."""
    path = tmp_path / "s.db"
    engine = Engine(path, start=T0)
    engine.create_stream("b")
    engine.create_subscription("q", Query.stream("b").buffer(timedelta(milliseconds=6), timedelta(milliseconds=2)))
    engine.advance_time(at(1))
    engine.pause("q")
    engine.checkpoint()
    engine.advance_time(at(2))
    if checkpointed:
        engine.checkpoint()
    engine.close()  # (close does not checkpoint: a kill)
    engine = Engine(path, start=T0)
    try:
        assert engine.is_behind("q")
        moves = engine._scheduling.clock_moves
        two_ms = int(T0.timestamp()) * 1_000_000 + 2_000
        assert moves == ([(engine._positions.cursor.pos, two_ms)] if checkpointed else [])
        assert engine.now == (at(2) if checkpointed else at(1))
    finally:
        engine.close()
