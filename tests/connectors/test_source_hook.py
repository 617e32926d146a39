"""The engine's hook for input sources: each registered source's bytes go into every checkpoint's transaction
and come back after a restart; a bad state function fails the checkpoint without committing it."""

from __future__ import annotations

from pathlib import Path

import pytest

from reaqtive.engine import Engine, MalformedRecordError
from reaqtive.state import CheckpointError
from tests.connectors.support import T0


def test_the_bytes_of_the_last_checkpoint_come_back_after_a_restart(tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    position = [b"one"]
    with Engine(store, start=T0) as engine:
        engine.register_source("orders", lambda: position[0])
        assert engine.source_state("orders") is None  # nothing stored yet
        engine.checkpoint()
        position[0] = b"two"
        assert engine.source_state("orders") == b"one"  # what the store holds, not what the source holds now
        engine.checkpoint()
        position[0] = b"three"  # not checkpointed: a crash loses it
    with Engine(store, start=T0) as engine:
        assert engine.source_state("orders") == b"two"
        assert engine.source_state("other") is None


def test_an_unregistered_source_keeps_its_last_stored_bytes(tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    with Engine(store, start=T0) as engine:
        engine.register_source("orders", lambda: b"kept")
        engine.checkpoint()
        engine.unregister_source("orders")
        engine.unregister_source("never-registered")  # a no-op
        engine.checkpoint()
    with Engine(store, start=T0) as engine:
        assert engine.source_state("orders") == b"kept"


def test_a_state_that_is_not_bytes_fails_the_checkpoint_and_commits_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    with Engine(store, start=T0) as engine:
        engine.register_source("good", lambda: b"first")
        engine.checkpoint()
        engine.unregister_source("good")
        engine.register_source("good", lambda: b"second")
        engine.register_source("bad", lambda: "text")  # type: ignore[arg-type, return-value]
        with pytest.raises(CheckpointError, match="source 'bad': its state is a str, not bytes"):
            engine.checkpoint()
        assert engine.source_state("good") == b"first"
        engine.unregister_source("bad")
        engine.checkpoint()
        assert engine.source_state("good") == b"second"
    with Engine(store, start=T0) as engine:
        assert engine.source_state("good") == b"second" and engine.source_state("bad") is None


@pytest.mark.parametrize("name", ["", None, "taken"])
def test_a_source_name_must_be_new_and_non_empty(name: object) -> None:
    with Engine.in_memory(start=T0) as engine:
        engine.register_source("taken", lambda: b"")
        with pytest.raises(ValueError, match="not a new non-empty name"):
            engine.register_source(name, lambda: b"")  # type: ignore[arg-type]


def test_a_damaged_row_raises_naming_the_source(tmp_path: Path) -> None:
    import sqlite3

    store = tmp_path / "store.db"
    with Engine(store, start=T0) as engine:
        engine.register_source("orders", lambda: b"position")
        engine.checkpoint()
    with sqlite3.connect(store) as db:
        db.execute("UPDATE reaqtive_blobs SET value = x'00' WHERE category = 'sources'")
    with Engine(store, start=T0) as engine:  # the engine itself recovers: the row concerns the source alone
        with pytest.raises(MalformedRecordError, match="the stored state of source 'orders' is damaged"):
            engine.source_state("orders")
