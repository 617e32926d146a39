"""Helpers shared by the tests of the take and skip family (virtual time: one tick is one second)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from reaqtive.core.subscribable import Subscribable
from reaqtive.core.visitors import initialize
from reaqtive.scheduler import EPOCH
from reaqtive.state import save_subscription, state_loader
from reaqtive.state.codec import DEFAULT_CODEC
from reaqtive.state.framing import NodeState, read_blob
from reaqtive.testing import MockObserver, Recorded, TestableQuery, TestScheduler

Script = Sequence[Recorded[Any]]


def at(tick: int) -> datetime:
    """The aware datetime of virtual tick ``tick`` (the test scheduler's epoch is 1970-01-01 UTC)."""
    return EPOCH + timedelta(seconds=tick)


def run(
    create: Callable[..., Subscribable[Any]],
    *scripts: Script,
    observer_request: int | None = None,
    **start: Any,
) -> tuple[MockObserver[Any], list[TestableQuery[Any]]]:
    """``scheduler.start(create(*hot sources))``: the observer and the sources (for their logs)."""
    scheduler = TestScheduler()
    sources = [scheduler.create_hot_observable(*script) for script in scripts]
    observer = scheduler.create_observer(request=observer_request)
    result = scheduler.start(lambda: create(*sources), observer=observer, **start)
    return result, sources


def values(observer: MockObserver[Any]) -> list[Any]:
    return observer.values


def total_requested(source: TestableQuery[Any]) -> int:
    return sum(record.value for record in source.requests)


def save_at(create: Callable[..., Subscribable[Any]], scripts: Sequence[Script], tick: int) -> bytes:
    """Run the query from tick 200 to ``tick`` and return its saved state (a full checkpoint)."""
    scheduler = TestScheduler()
    sources = [scheduler.create_hot_observable(*script) for script in scripts]
    observer = scheduler.create_observer()
    handles: list[Any] = []

    def subscribe() -> None:
        handle = create(*sources).subscribe(observer)
        handles.append(handle)
        initialize(handle, scheduler.create_context())

    scheduler.schedule_absolute(200, subscribe)
    scheduler.advance_to(tick)
    blob = save_subscription(handles[0])
    assert blob is not None
    scheduler.dispose()
    return blob


def recover(
    create: Callable[..., Subscribable[Any]], scripts: Sequence[Script], blob: bytes, restart: int
) -> tuple[MockObserver[Any], list[TestableQuery[Any]]]:
    """A new world that subscribes at ``restart`` with the state in ``blob``; its hot sources carry only the
    messages after ``restart`` (what a durable input replays after the checkpoint, here: what is still to come)."""
    later = [[m for m in script if m.time > restart] for script in scripts]
    return run(create, *later, subscribed=restart, load_state=state_loader(blob))


def saved_nodes(blob: bytes) -> list[NodeState]:
    """The records of a blob: path, name, version and a reader per stateful node."""
    return list(read_blob(blob, DEFAULT_CODEC, "test"))


def saved_fields(record: NodeState) -> list[Any]:
    """Every value of a record, starting with the disposed flag."""
    reader = record.reader(DEFAULT_CODEC, "test")
    fields: list[Any] = []
    while True:
        found, value = reader.try_read()
        if not found:
            return fields
        fields.append(value)
