"""The checkpoint protocol with the real pausable schedulers: the virtual-time TestScheduler and the
LogicalScheduler on worker threads (where the pause is what makes each checkpoint a consistent cut)."""

from __future__ import annotations

import threading
from typing import Any

from reaqtive import OperatorContext, SimpleSubject
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.scheduler_interface import YieldToken
from reaqtive.core.streams import LONG_MAX, Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.core.visitors import initialize
from reaqtive.scheduler import LogicalScheduler, PhysicalScheduler, YieldableActionTask
from reaqtive.state import (
    STATE_CATEGORY,
    Checkpointer,
    CheckpointMode,
    DirtyState,
    InMemoryCheckpointStore,
    StatefulUnaryOperatorBase,
    read_blob,
)
from reaqtive.testing import TestScheduler, on_next
from tests.state.support import RunningSum
from tests.support import Recorder


class Twin(StatefulUnaryOperatorBase[int, int]):
    """Keeps two counters that are equal between events; a checkpoint taken mid-event would see them differ."""

    name = "test:twin"
    version: Version = (1,)

    def __init__(self, source: Subscribable[int], downstream: Subscriber[int]) -> None:
        super().__init__(downstream)
        self._source = source
        self.first = 0
        self.second = 0

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self.first)
        writer.write(self.second)

    def load_state_core(self, reader: StateReader) -> None:
        self.first, self.second = reader.read(), reader.read()

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_next(self, value: int) -> None:
        self.first += value
        sum(range(50))  # widen the window between the two updates
        self.second += value
        self.state_changed = True


class Query(Subscribable[int]):
    def __init__(self, source: Subscribable[int], stage: type[Any]) -> None:
        self._source, self._stage = source, stage

    def subscribe_core(self, observer: Subscriber[int]) -> SubscriptionHandle:
        return self._stage(self._source, observer)  # type: ignore[no-any-return]


def test_checkpoints_between_virtual_ticks_with_the_test_scheduler() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_next(230, 3))
    observer = scheduler.create_observer()
    handle = Query(xs, RunningSum).subscribe(observer)
    scheduler.schedule_absolute(200, initialize, handle, scheduler.create_context())
    checkpointer = Checkpointer(scheduler, InMemoryCheckpointStore())

    scheduler.advance_to(215)
    assert checkpointer.checkpoint({"sub": handle}).saved == ("sub",)
    scheduler.advance_to(218)
    assert checkpointer.checkpoint({"sub": handle}).saved == (), "nothing happened since"
    scheduler.advance_to(300)
    result = checkpointer.checkpoint({"sub": handle})
    assert result.checkpoint_id == 3 and observer.values == [1, 3, 6]
    node = read_blob(checkpointer.store.read().get(STATE_CATEGORY, "sub") or b"")[0].reader()
    assert [node.read(), node.read(), node.read()] == [False, 6, 3]


def test_checkpoints_of_a_running_logical_scheduler_are_consistent_cuts() -> None:
    events = 20_000
    with PhysicalScheduler(workers=2) as physical:
        scheduler = LogicalScheduler(physical)
        subject = SimpleSubject[int]()
        twin = Twin(subject, Recorder(initial=LONG_MAX))
        initialize(twin, OperatorContext("test://twin", scheduler))
        done = threading.Event()
        pushed = [0]

        def produce(token: YieldToken) -> bool:
            while pushed[0] < events:
                if token.is_yield_requested:
                    return False  # the checkpoint is pausing us: yield, resume later
                subject.on_next(1)
                pushed[0] += 1
            done.set()
            return True

        scheduler.schedule(YieldableActionTask(produce))
        store = InMemoryCheckpointStore()
        checkpointer = Checkpointer(scheduler, store, pause_timeout=10)
        cuts: list[tuple[int, int]] = []
        for _ in range(1_000_000):  # a bound, so a producer that died cannot hang the test
            finished = done.is_set()
            checkpointer.checkpoint({"twin": twin}, mode=CheckpointMode.FULL)
            reader = read_blob(store.read().get(STATE_CATEGORY, "twin") or b"")[0].reader()
            reader.read()
            cuts.append((reader.read(), reader.read()))
            if finished:
                break
        assert done.wait(10)
    assert all(first == second for first, second in cuts), "every checkpoint is a consistent cut"
    assert cuts[-1] == (events, events)
    assert twin.state_status is DirtyState.CLEAN
