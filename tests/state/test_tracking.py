"""Three-state dirty tracking, exactly per the truth table (reaqtive-core.md §2.3)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from reaqtive.state import BlobWriter, DirtyState, SegmentReader, StateChangedTracker, read_blob
from tests.state.support import Box

# (sequence of steps, expected state_changed, expected status)
TRUTH_TABLE: list[tuple[list[str], bool, DirtyState]] = [
    ([], True, DirtyState.NEVER_SAVED),
    (["load"], False, DirtyState.CLEAN),
    (["load", "change"], True, DirtyState.CHANGED),
    (["save"], True, DirtyState.UNCONFIRMED),
    (["save", "confirm"], False, DirtyState.CLEAN),
    (["save", "change", "confirm"], True, DirtyState.CHANGED),
    (["save"], True, DirtyState.UNCONFIRMED),  # the commit failed: no confirm ever comes
    (["save", "save"], True, DirtyState.UNCONFIRMED),  # failed, retried, still pending
    (["save", "save", "confirm"], False, DirtyState.CLEAN),
    (["save", "confirm", "save"], True, DirtyState.UNCONFIRMED),
    (["save", "confirm", "change"], True, DirtyState.CHANGED),
    (["save", "confirm", "change", "save", "confirm"], False, DirtyState.CLEAN),
    (["change", "save", "confirm"], False, DirtyState.CLEAN),
    (["confirm"], True, DirtyState.NEVER_SAVED),  # a confirm without a save confirms nothing
]


def tracker_steps(tracker: StateChangedTracker) -> dict[str, Callable[[], None]]:
    def change() -> None:
        tracker.changed = True

    return {"load": tracker.loaded, "save": tracker.saved, "confirm": tracker.confirmed, "change": change}


@pytest.mark.parametrize(
    ("steps", "changed", "status"), TRUTH_TABLE, ids=lambda v: ",".join(v) if isinstance(v, list) else None
)
def test_tracker_truth_table(steps: list[str], changed: bool, status: DirtyState) -> None:
    tracker = StateChangedTracker()
    actions = tracker_steps(tracker)
    for step in steps:
        actions[step]()
    assert tracker.state_changed is changed
    assert tracker.status is status


def operator_steps(box: Box) -> dict[str, Callable[[], None]]:
    def save() -> None:
        writer = BlobWriter()
        writer.write_node((0,), box.name, box.version, box.save_state)
        saved.append(writer.finish())

    def load() -> None:
        blob = saved[-1] if saved else fresh
        node = read_blob(blob)[0]
        box.load_state(SegmentReader(node.data, "t"), node.version)

    saved: list[bytes] = []
    writer = BlobWriter()
    writer.write_node((0,), "test:box", (1,), Box("test:box").save_state)
    fresh = writer.finish()
    return {"load": load, "save": save, "confirm": box.on_state_saved, "change": lambda: box.touch(1)}


@pytest.mark.parametrize(
    ("steps", "changed", "status"), TRUTH_TABLE, ids=lambda v: ",".join(v) if isinstance(v, list) else None
)
def test_stateful_operator_truth_table(steps: list[str], changed: bool, status: DirtyState) -> None:
    box = Box("test:box")
    actions = operator_steps(box)
    for step in steps:
        actions[step]()
    assert box.state_changed is changed
    assert box.state_status is status
