"""A checkpoint writes the outputs still waiting for an observer function in its own transaction, with the state
that is past them and the counter that covers them: a checkpoint that fails writes none of them (before, they were
written just ahead of its commit, and a crash there left rows past the committed counter for recovery to drop), and
a crash after it, or after a later one, loses none. The tests wait on events, never on sleeps."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reaqtive.engine import Engine
from reaqtive.state import CheckpointError, CheckpointTransaction
from tests.engine.test_observer_batches import WAIT, BatchRecorder, at, open_engine


class CommitRefusedError(RuntimeError):
    """The checkpoint store refused a commit (a full disk, say)."""


@pytest.fixture
def path(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "store.db"


def refuse_commits(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every transaction the checkpoint store begins from now on fails at its commit (after what a checkpoint
    collects into it), and rolls back."""
    store = engine._store.checkpoints
    begin = store.begin

    def failing_begin() -> CheckpointTransaction:
        transaction = begin()

        def commit() -> int:
            transaction.rollback()
            raise CommitRefusedError("refused")

        monkeypatch.setattr(transaction, "commit", commit)
        return transaction

    monkeypatch.setattr(store, "begin", failing_begin)


def waiting_outputs(engine: Engine, gate: threading.Event, recorder: BatchRecorder, count: int) -> None:
    """Running mode, its courier held in its first batch: ``count`` outputs produced, most waiting (the
    processing thread runs on: the checkpoints below are taken beside it, as a host's would be)."""
    engine.start()
    engine.append_many("s", [(i, at(i)) for i in range(count)])
    assert recorder.entered.wait(WAIT)
    seen = engine.produced.generation
    while len(engine.outputs("oracle")) < count:
        seen = engine.produced.wait(seen, WAIT)


def test_a_failed_checkpoint_writes_none_of_the_waiting_outputs_and_a_crash_after_it_loses_none(
    path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    gate = threading.Event()
    recorder = BatchRecorder(gate=gate)
    engine = open_engine(path, recorder)
    try:
        engine.checkpoint()
        waiting_outputs(engine, gate, recorder, 300)
        with monkeypatch.context() as patch:
            refuse_commits(engine, patch)
            with pytest.raises(CheckpointError, match="refused"):
                engine.checkpoint()
        assert engine._store.read_outputs("q") == [], "nothing of the failed checkpoint is in the store"
    finally:
        gate.set()
        engine.close()  # a crash: no checkpoint after the failed one
    crashed = BatchRecorder()
    with caplog.at_level(logging.INFO, logger="reaqtive.engine"), open_engine(path, crashed) as engine:
        engine.process()
    assert not [r for r in caplog.records if getattr(r, "reaqtive_event", None) == "provisional_outputs_dropped"]
    received = dict(recorder.received())
    received.update(crashed.received())
    assert sorted(received.items()) == [(i, 2 * i) for i in range(300)]


def test_the_waiting_outputs_commit_with_the_checkpoint_and_a_crash_twice_loses_none(path: Path) -> None:
    gate = threading.Event()
    recorder = BatchRecorder(gate=gate)
    engine = open_engine(path, recorder)
    try:
        waiting_outputs(engine, gate, recorder, 200)
        engine.checkpoint()
        stored = [seq for _, seq, _ in engine._store.read_outputs("q")]
        assert stored, "the outputs still waiting are in the store, with the checkpoint"
        assert max(stored) < engine.snapshot().subscriptions["q"].produced, "none past the committed counter"
    finally:
        gate.set()
        engine.close()
    received: dict[int, Any] = dict(recorder.received())
    for start in (200, 210):  # recover, take in more events, crash again before any checkpoint
        again = BatchRecorder()
        with open_engine(path, again) as engine:
            engine.process()
            engine.append_many("s", [(i, at(i)) for i in range(start, start + 10)])
            engine.process()
        received.update(again.received())
    final = BatchRecorder()
    with open_engine(path, final) as engine:
        engine.process()
    received.update(final.received())
    assert sorted(received.items()) == [(i, 2 * i) for i in range(220)], "every output at least once, none lost"
