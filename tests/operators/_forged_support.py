"""The machinery of ``test_forged_state.py``: run a query to a tick, save its state (the query and each inner
subscription as its own unit, as a store keeps them), then run it again from a state in which one saved value
was replaced, and say what happened.

Blobs are taken apart and put together again with the fuzz's helpers (``tests/engine/corruption_support.py``:
``decode_state``/``encode_state`` re-encode untouched entries byte for byte), so a forged blob differs from the
real one in one value only, behind a valid checksum.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.core.visitors import initialize
from reaqtive.state import CheckpointMode, StateFormatError, save_subscription, state_loader
from reaqtive.state.codec import DEFAULT_CODEC, Segment
from reaqtive.state.environment import InnerEnvironment
from reaqtive.state.fields import SAVED_BY, STARTED_AT
from reaqtive.testing import Notification, OnError, Recorded, TestScheduler
from reaqtive.testing.observer import MockObserver
from reaqtive.testing.sources import HotSource, TestableQuery
from tests.engine.corruption_support import decode_state, encode_state
from tests.operators.test_checkpoint_bounded_demand import Case

START: Final = 200  # the query subscribes
END: Final = 400  # it is disposed
ROOT: Final = "test"  # the instance id of TestScheduler.create_context: inner ids start with "test/"

Blobs = dict[str, bytes]
"""A checkpoint: the query's blob under ``""``, each inner subscription's under its id."""

Pointer = tuple[int, ...]
"""An entry of a node's record, then indices into the lists and tuples inside it."""


Demand = tuple[tuple[int, int], ...] | None
"""The subscriber's demand: unbounded (``None``), or ``n`` more at each ``(tick, n)`` (so that stages queue and
hold what it did not ask for)."""


def _observer(scheduler: TestScheduler, demand: Demand, after: int) -> MockObserver[Any]:
    observer = scheduler.create_observer(None if demand is None else 0)
    for tick, n in demand or ():
        if tick > after:
            scheduler.schedule_absolute(tick, observer.request, n)
    return observer


def save_at(case: Case, stop: int, demand: Demand = None) -> Blobs:
    """Run ``case`` from :data:`START` to ``stop`` and save every unit."""
    scheduler = TestScheduler()
    sources = [TestableQuery(HotSource(scheduler, script)) for script in case.inputs]
    environment = InnerEnvironment()
    context = scheduler.create_context(None, environment)
    handles: list[SubscriptionHandle] = []
    observer = _observer(scheduler, demand, START)

    def subscribe() -> None:
        handles.append(case.create(*sources).subscribe(observer))
        initialize(handles[0], context)

    scheduler.schedule_absolute(START, subscribe)
    scheduler.advance_to(stop)
    blobs: Blobs = {}
    for key, handle in [("", handles[0]), *environment.inner_subscriptions().items()]:
        blob = save_subscription(handle, CheckpointMode.FULL)
        if blob is not None:
            blobs[key] = blob
    scheduler.dispose()
    environment.dispose()
    return blobs


@dataclass
class Outcome:
    """What a run from saved state did: its output after the restart, or the error that loading raised (at
    once, or as the load failure of an inner subscription)."""

    messages: list[Recorded[Notification[Any]]]
    error: BaseException | None = None

    def rejected_by(self, operator: str) -> bool:
        """Loading raised a ``StateFormatError`` whose message names ``operator``."""
        error = self.error
        if error is None:  # an inner subscription's failure reaches the output as an error
            error = next((m.value.error for m in self.messages if isinstance(m.value, OnError)), None)
        return isinstance(error, StateFormatError) and repr(operator) in str(error)


def run_from(case: Case, stop: int, blobs: Blobs, demand: Demand = None) -> Outcome:
    """Recover ``case`` at ``stop`` from ``blobs`` (with the clock hints a host gives) and run it to the end,
    with a subscriber that asks as ``demand`` says after ``stop`` (what it had outstanding is not asked again,
    and the sources do not replay what the crashed subscriptions held: the runs compared are recovered alike)."""
    scheduler = TestScheduler()
    scheduler.advance_to(stop)
    scripts = [[m for m in script if m.time > stop] for script in case.inputs]
    sources = [TestableQuery(HotSource(scheduler, script)) for script in scripts]
    observer = _observer(scheduler, demand, stop)
    environment = InnerEnvironment()
    environment.restore({key: blob for key, blob in blobs.items() if key})
    settings = {STARTED_AT: scheduler.to_datetime(START), SAVED_BY: scheduler.now}
    context = scheduler.create_context(settings, environment)
    loader = state_loader(blobs[""], where=f"state saved at tick {stop}") if "" in blobs else None
    handles: list[SubscriptionHandle] = []
    errors: list[BaseException] = []

    def subscribe() -> None:
        handles.append(case.create(*sources).subscribe(observer))
        try:
            initialize(handles[0], context, loader)
        except Exception as error:
            errors.append(error)

    def dispose() -> None:
        for handle in handles:
            handle.dispose()

    scheduler.schedule_absolute(stop, subscribe)
    scheduler.schedule_absolute(END, dispose)
    try:
        scheduler.advance_to(END)
    except Exception as escaped:  # escaped the operators: a finding of its own
        errors.append(escaped)
    failures = environment.take_load_failures(ROOT)
    scheduler.dispose()
    environment.dispose()
    return Outcome(list(observer.messages), errors[0] if errors else next(iter(failures.values()), None))


def pointers(values: list[Any], width: int = 2, depth: int = 5) -> Iterator[Pointer]:
    """Every entry of a record (but nested segments), and inside lists and tuples the first ``width`` items,
    down to ``depth`` levels."""
    def walk(value: Any, pointer: Pointer) -> Iterator[Pointer]:
        yield pointer
        if len(pointer) < depth and type(value) in (list, tuple):
            for index, item in enumerate(value[:width]):
                yield from walk(item, (*pointer, index))

    for index, value in enumerate(values):
        if not isinstance(value, Segment):
            yield from walk(value, (index,))


def value_at(values: list[Any], pointer: Pointer) -> Any:
    value: Any = values
    for part in pointer:
        value = value[part]
    return value


def forge(blob: bytes, record_index: int, pointer: Pointer, forged: Any) -> bytes:
    """``blob`` with the value at ``pointer`` of its ``record_index``-th record replaced by ``forged`` (the
    containers on the way keep their types: a tuple stays a tuple)."""
    records = decode_state(blob)
    record = records[record_index]
    values = record.values()
    values[pointer[0]] = _replaced(values[pointer[0]], pointer[1:], forged)
    record.entries[pointer[0]] = DEFAULT_CODEC.encode(values[pointer[0]])
    return encode_state(records)


def _replaced(container: Any, pointer: Pointer, forged: Any) -> Any:
    if not pointer:
        return forged
    items = list(container)
    items[pointer[0]] = _replaced(items[pointer[0]], pointer[1:], forged)
    return tuple(items) if type(container) is tuple else items
