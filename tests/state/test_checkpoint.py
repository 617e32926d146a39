"""The checkpoint protocol: pause → serialize → resume → commit → on_state_saved, and every way it can fail."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from reaqtive import OperatorContext, SimpleSubject
from reaqtive.core.operator import StateWriter
from reaqtive.core.scheduler_interface import PausableScheduler, Scheduler, SchedulerTask
from reaqtive.core.visitors import initialize
from reaqtive.state import (
    STATE_CATEGORY,
    Checkpointer,
    CheckpointError,
    CheckpointInProgressError,
    CheckpointMode,
    CheckpointTransaction,
    DirtyState,
    InMemoryCheckpointStore,
    StoreChanges,
    state_loader,
)
from tests.state.support import RunningSum
from tests.support import Recorder

CONTEXT = OperatorContext("test://checkpoint")


class FakeScheduler:
    """A pausable scheduler that only records pause/resume (the protocol needs nothing else)."""

    def __init__(self) -> None:
        self.paused = False
        self.log: list[str] = []
        self.pause_error: BaseException | None = None

    @property
    def now(self) -> datetime:
        return datetime(2024, 1, 1, tzinfo=UTC)

    def pause(self) -> Future[None]:
        self.log.append("pause")
        future: Future[None] = Future()
        if self.pause_error is not None:
            future.set_exception(self.pause_error)
        else:
            self.paused = True
            future.set_result(None)
        return future

    def pause_async(self) -> Awaitable[None]:
        return asyncio.wrap_future(self.pause())

    def resume(self) -> None:
        self.paused = False
        self.log.append("resume")

    def create_child(self) -> Scheduler:
        return self

    def schedule(self, task: SchedulerTask, due: timedelta | datetime | None = None) -> None:
        raise NotImplementedError

    def recalculate_priority(self) -> None:
        pass

    def check_access(self) -> bool:
        return True

    def verify_access(self) -> None:
        pass

    def dispose(self) -> None:
        pass


class ObservedStore(InMemoryCheckpointStore):
    """Logs each commit (and whether the scheduler was paused then); can run something during the commit."""

    def __init__(self, scheduler: FakeScheduler) -> None:
        super().__init__()
        self.scheduler = scheduler
        self.during_commit: Callable[[], None] | None = None

    def _apply(self, changes: StoreChanges) -> int:
        self.scheduler.log.append(f"commit(paused={self.scheduler.paused})")
        if self.during_commit is not None:
            self.during_commit()
        return super()._apply(changes)


class LoggingSum(RunningSum):
    """Records whether the scheduler was paused while it serialized."""

    scheduler: FakeScheduler

    def save_state_core(self, writer: StateWriter) -> None:
        self.scheduler.log.append(f"save(paused={self.scheduler.paused})")
        super().save_state_core(writer)


class Rig:
    """Subscriptions ``sub://0..n-1``: running sums, each over its own subject."""

    def __init__(self, count: int = 3) -> None:
        self.scheduler = FakeScheduler()
        self.store = ObservedStore(self.scheduler)
        self.checkpointer = Checkpointer(self.scheduler, self.store)
        self.subjects = [SimpleSubject[int]() for _ in range(count)]
        self.sums: list[LoggingSum] = []
        for subject in self.subjects:
            operator = LoggingSum(subject, Recorder(initial=1000))
            operator.scheduler = self.scheduler
            initialize(operator, CONTEXT)
            self.sums.append(operator)

    @property
    def subscriptions(self) -> dict[str, Any]:
        return {f"sub://{i}": operator for i, operator in enumerate(self.sums)}

    def checkpoint(self, **kwargs: Any) -> Any:
        return self.checkpointer.checkpoint(self.subscriptions, **kwargs)

    def statuses(self) -> list[DirtyState]:
        return [operator.state_status for operator in self.sums]


def test_the_fake_is_a_pausable_scheduler() -> None:
    assert isinstance(FakeScheduler(), PausableScheduler)


def test_a_checkpoint_serializes_while_paused_and_commits_after_resuming() -> None:
    rig = Rig(count=2)
    rig.subjects[0].on_next(5)
    result = rig.checkpoint()
    assert rig.scheduler.log == ["pause", "save(paused=True)", "save(paused=True)", "resume", "commit(paused=False)"]
    assert rig.statuses() == [DirtyState.CLEAN, DirtyState.CLEAN]
    assert result.checkpoint_id == 1 and result.saved == ("sub://0", "sub://1") and result.deleted == ()
    stored = rig.store.read()
    assert result.bytes_written == sum(len(blob) for _, blob in stored.items(STATE_CATEGORY)) > 0
    assert result.pause_seconds >= result.serialize_seconds >= 0 and result.commit_seconds >= 0


def test_recovery_from_the_store_continues_where_the_checkpoint_was() -> None:
    rig = Rig(count=1)
    for value in (1, 2, 3):
        rig.subjects[0].on_next(value)
    rig.checkpoint()
    blob = rig.store.read().get(STATE_CATEGORY, "sub://0")
    assert blob is not None
    subject, recorder = SimpleSubject[int](), Recorder(initial=10)
    initialize(RunningSum(subject, recorder), CONTEXT, load_state=state_loader(blob, where="state/sub://0"))
    subject.on_next(4)
    assert recorder.values == [10]


def test_a_failed_commit_rolls_back_and_leaves_everything_dirty() -> None:
    rig = Rig()
    rig.checkpoint()
    rig.subjects[1].on_next(7)
    rig.store.fail_commits()
    with pytest.raises(CheckpointError, match="committing the checkpoint failed") as raised:
        rig.checkpoint()
    assert raised.value.phase == "commit" and not raised.value.committed
    assert rig.scheduler.log[-2:] == ["resume", "commit(paused=False)"]
    assert rig.store.read().checkpoint_id == 1, "the store is still at the previous checkpoint"
    assert rig.statuses() == [DirtyState.CLEAN, DirtyState.UNCONFIRMED, DirtyState.CLEAN]

    result = rig.checkpoint()  # the next differential checkpoint saves it again
    assert result.saved == ("sub://1",)
    assert rig.statuses() == [DirtyState.CLEAN] * 3


def test_an_ambiguous_commit_failure_is_safe_the_state_is_saved_again() -> None:
    rig = Rig(count=1)
    rig.store.fail_commits(after_apply=True)
    with pytest.raises(CheckpointError):
        rig.checkpoint()
    assert rig.statuses() == [DirtyState.UNCONFIRMED]
    assert rig.checkpoint().saved == ("sub://0",)


def test_a_failed_put_rolls_back_and_resumes() -> None:
    rig = Rig()
    rig.store.fail_puts(key="sub://1")
    with pytest.raises(CheckpointError, match="serializing") as raised:
        rig.checkpoint()
    assert raised.value.phase == "serialize"
    assert rig.scheduler.log[-1] == "resume" and not rig.scheduler.paused
    assert rig.store.read().checkpoint_id == 0 and rig.store.commits == 0
    assert all(status is not DirtyState.CLEAN for status in rig.statuses())


def test_an_operator_failing_to_serialize_fails_the_checkpoint_and_resumes() -> None:
    rig = Rig(count=1)

    def explode(writer: StateWriter) -> None:
        raise RuntimeError("cannot save")

    rig.sums[0].save_state_core = explode  # type: ignore[method-assign]
    with pytest.raises(CheckpointError, match=r"test:running_sum.*cannot save") as raised:
        rig.checkpoint()
    assert raised.value.phase == "serialize" and rig.scheduler.log[-1] == "resume"


def test_a_change_made_while_the_commit_is_in_flight_stays_dirty() -> None:
    rig = Rig(count=1)
    rig.store.during_commit = lambda: rig.subjects[0].on_next(1)  # events flow again during the commit
    rig.checkpoint()
    assert rig.statuses() == [DirtyState.CHANGED]
    rig.store.during_commit = None
    assert rig.checkpoint().saved == ("sub://0",)
    assert rig.statuses() == [DirtyState.CLEAN]
    stored = rig.store.read().get(STATE_CATEGORY, "sub://0")
    fresh = RunningSum(SimpleSubject[int](), Recorder())
    initialize(fresh, CONTEXT, load_state=state_loader(stored or b""))
    assert fresh.total == 1


def test_differential_checkpoints_write_only_subscriptions_with_a_dirty_node() -> None:
    rig = Rig(count=50)
    first = rig.checkpoint()
    assert len(first.saved) == 50
    assert rig.checkpoint().saved == (), "nothing changed: nothing written"
    assert rig.store.last_changes is not None and rig.store.last_changes.writes == {}
    rig.subjects[7].on_next(1)
    rig.subjects[30].on_next(2)
    result = rig.checkpoint()
    assert result.saved == ("sub://7", "sub://30")
    assert set(rig.store.last_changes.writes) == {(STATE_CATEGORY, "sub://7"), (STATE_CATEGORY, "sub://30")}
    assert result.bytes_written * 20 < first.bytes_written, "bytes proportional to what changed"


def test_full_checkpoints_write_everything() -> None:
    rig = Rig(count=4)
    rig.checkpoint()
    assert len(rig.checkpoint(mode=CheckpointMode.FULL).saved) == 4


def test_removed_subscriptions_are_deleted_in_the_same_commit() -> None:
    rig = Rig(count=2)
    rig.checkpoint()
    gone = rig.sums.pop()
    gone.dispose()
    result = rig.checkpoint(removed=["sub://1"])
    assert result.deleted == ("sub://1",)
    assert rig.store.read().keys(STATE_CATEGORY) == ["sub://0"]


def test_collect_adds_host_records_while_paused_to_the_same_transaction() -> None:
    rig = Rig(count=1)
    seen: list[bool] = []

    def collect(transaction: CheckpointTransaction) -> None:
        seen.append(rig.scheduler.paused)
        transaction.put("watermarks", "ingress://a", b"42")

    rig.checkpoint(collect=collect)
    assert seen == [True]
    snapshot = rig.store.read()
    assert snapshot.get("watermarks", "ingress://a") == b"42" and snapshot.keys(STATE_CATEGORY) == ["sub://0"]


def test_subscriptions_can_be_listed_while_paused() -> None:
    rig = Rig(count=2)
    paused: list[bool] = []

    def listing() -> dict[str, Any]:
        paused.append(rig.scheduler.paused)
        return rig.subscriptions

    assert len(rig.checkpointer.checkpoint(listing).saved) == 2 and paused == [True]


def test_a_failed_pause_fails_the_checkpoint_and_still_resumes() -> None:
    rig = Rig(count=1)
    rig.scheduler.pause_error = RuntimeError("scheduler disposed")
    with pytest.raises(CheckpointError, match="pausing the scheduler failed") as raised:
        rig.checkpoint()
    assert raised.value.phase == "pause" and rig.scheduler.log == ["pause", "resume"]
    assert rig.store.commits == 0 and rig.statuses() == [DirtyState.NEVER_SAVED]


def test_checkpoints_never_overlap() -> None:
    rig = Rig(count=1)
    nested: list[BaseException] = []

    def collect(transaction: CheckpointTransaction) -> None:
        try:
            rig.checkpoint()
        except CheckpointInProgressError as error:
            nested.append(error)

    rig.checkpoint(collect=collect)
    assert len(nested) == 1
    assert rig.checkpoint(mode=CheckpointMode.FULL).checkpoint_id == 2, "the lock was released"


def test_a_failing_confirmation_reports_the_committed_checkpoint_and_confirms_the_others() -> None:
    rig = Rig(count=3)

    def explode() -> None:
        raise RuntimeError("ack failed")

    rig.sums[0].on_state_saved = explode  # type: ignore[method-assign]
    with pytest.raises(CheckpointError, match="was committed, but on_state_saved failed") as raised:
        rig.checkpoint()
    assert raised.value.phase == "confirm" and raised.value.committed
    assert raised.value.result is not None and raised.value.result.checkpoint_id == 1
    assert rig.statuses()[1:] == [DirtyState.CLEAN, DirtyState.CLEAN]
    assert rig.store.read().checkpoint_id == 1


def test_checkpoint_async_follows_the_same_protocol() -> None:
    rig = Rig(count=2)
    rig.subjects[0].on_next(3)
    result = asyncio.run(rig.checkpointer.checkpoint_async(rig.subscriptions))
    assert rig.scheduler.log == ["pause", "save(paused=True)", "save(paused=True)", "resume", "commit(paused=False)"]
    assert result.saved == ("sub://0", "sub://1") and rig.statuses() == [DirtyState.CLEAN] * 2

    rig.store.fail_commits()
    rig.subjects[1].on_next(1)
    with pytest.raises(CheckpointError) as raised:
        asyncio.run(rig.checkpointer.checkpoint_async(rig.subscriptions))
    assert raised.value.phase == "commit" and rig.statuses()[1] is DirtyState.UNCONFIRMED


class NeverQuiet(FakeScheduler):
    """A scheduler whose running work never yields: the pause never completes."""

    def pause(self) -> Future[None]:
        self.log.append("pause")
        return Future()


def test_a_pause_that_does_not_complete_in_time_fails_the_checkpoint_and_is_cancelled() -> None:
    scheduler = NeverQuiet()
    store = InMemoryCheckpointStore()
    checkpointer = Checkpointer(scheduler, store, pause_timeout=0.01)
    with pytest.raises(CheckpointError, match="pausing the scheduler failed: TimeoutError") as raised:
        checkpointer.checkpoint({})
    assert raised.value.phase == "pause" and scheduler.log == ["pause", "resume"] and store.commits == 0
    with pytest.raises(CheckpointError, match="pausing the scheduler failed: TimeoutError"):
        asyncio.run(checkpointer.checkpoint_async({}))
    assert scheduler.log[-1] == "resume"
