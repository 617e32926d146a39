"""The engine's garbage collector policy: what lives at a checkpoint is frozen out of the collector's full passes;
cyclic garbage among it waits at most ``full_every`` checkpoints, or until the engine closes."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from datetime import UTC, datetime
from operator import add
from pathlib import Path

import pytest

from reaqtive import Query
from reaqtive.engine import Engine
from reaqtive.engine.gc_policy import GcFreeze

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def cyclic_garbage_to_be() -> tuple[list[Node], weakref.ref[Node]]:
    """A reference cycle, held by the returned list; a weak reference tells when the collector freed it."""
    first, second = Node(), Node()
    first.other, second.other = second, first
    return [first], weakref.ref(first)


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    """Every test starts and ends with nothing frozen, so the rest of the test run sees the collector as usual."""
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_cyclic_garbage_from_before_a_checkpoint_waits_until_the_engine_closes(tmp_path: Path) -> None:
    with Engine(tmp_path / "s.db", start=T0, gc_freeze=True) as engine:
        engine.create_stream("raw")
        engine.create_subscription("q", Query.stream("raw").scan(0, add))
        holder, alive = cyclic_garbage_to_be()
        engine.append("raw", 1, T0)
        engine.process()
        engine.checkpoint()
        holder.clear()  # the cycle is garbage now, but it was frozen by the checkpoint
        gc.collect()
        assert alive() is not None, "frozen at the checkpoint: the collector's passes skip it"
    gc.collect()
    assert alive() is None, "closing the engine hands frozen objects back to the collector"


def test_without_gc_freeze_the_collector_is_left_alone(tmp_path: Path) -> None:
    with Engine(tmp_path / "s.db", start=T0, gc_freeze=False) as engine:
        engine.create_stream("raw")
        engine.create_subscription("q", Query.stream("raw").scan(0, add))
        holder, alive = cyclic_garbage_to_be()
        engine.checkpoint()
        holder.clear()
        gc.collect()
        assert alive() is None
        assert gc.get_freeze_count() == 0


def test_every_full_every_checkpoints_everything_is_collected() -> None:
    policy = GcFreeze(enabled=True, full_every=3)
    holder, alive = cyclic_garbage_to_be()
    policy.after_checkpoint()  # 1: frozen
    holder.clear()
    policy.after_checkpoint()  # 2: still frozen
    gc.collect()
    assert alive() is not None
    policy.after_checkpoint()  # 3: unfreeze, collect, freeze again
    assert alive() is None
    assert gc.get_freeze_count() > 0, "what lives is frozen again"


def test_the_collector_is_left_alone_by_default(tmp_path: Path) -> None:
    with Engine(tmp_path / "s.db", start=T0) as engine:
        engine.create_stream("raw")
        engine.create_subscription("q", Query.stream("raw").scan(0, add))
        engine.checkpoint()
        assert gc.get_freeze_count() == 0, "gc_freeze is opt-in: the host's collector is not touched"


def test_a_disabled_policy_does_nothing_and_a_bad_period_is_refused() -> None:
    policy = GcFreeze()
    policy.after_checkpoint()
    assert not policy.enabled and gc.get_freeze_count() == 0
    with pytest.raises(ValueError, match="full_every must be at least 1, got 0"):
        GcFreeze(full_every=0)
