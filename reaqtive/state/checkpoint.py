"""The checkpoint protocol, in one reusable piece: short on the scheduler, atomic in the store.

::

    pause the scheduler ──► serialize the dirty subscriptions into a store transaction (memory only)
                        ──► resume ──► commit (I/O, while events flow again) ──► on_state_saved

* While paused, nothing runs, so the saved states of all operators are one consistent cut. Only serialization
  happens in the pause; the commit's I/O runs after the scheduler resumed.
* If anything fails before the commit returns, the transaction is rolled back and no node is confirmed: every
  saved node stays dirty (three-state tracking) and the next checkpoint saves it again. A commit that
  returned is never rolled back, and only then are the saved subscriptions confirmed; changes made during the
  commit stay dirty.
* Each checkpoint reports how long the scheduler was paused and how long the commit took
  (:class:`CheckpointResult`), for metrics.
* With a :class:`~reaqtive.state.dirty.DirtyRegistry` (``dirty=``), a differential checkpoint visits only the
  subscriptions that reported a change since the last checkpoint (and those in ``whole``), so its pause grows
  with what changed, not with how many subscriptions exist. What it saved but could not commit goes back into
  the registry. The subscriptions' keys must be their operators' context ids (``instance_id``): that is what the
  operators report.

It works with any :class:`~reaqtive.core.scheduler_interface.PausableScheduler` (the engine's logical scheduler, the
virtual-time test scheduler) and any :class:`~reaqtive.state.CheckpointStore`. Call :meth:`Checkpointer.checkpoint`
from a thread that is not one of the scheduler's (it waits for the pause), or use
:meth:`Checkpointer.checkpoint_async` from asyncio.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable, Collection, Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias, TypedDict, Unpack

from reaqtive.core.scheduler_interface import PausableScheduler
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.state.codec import DEFAULT_CODEC, StateCodec
from reaqtive.state.dirty import DirtyRegistry
from reaqtive.state.state_errors import CheckpointError, CheckpointInProgressError
from reaqtive.state.store import CheckpointStore, CheckpointTransaction
from reaqtive.state.traversal import CheckpointMode, confirm_saved, save_subscription

__all__ = ["STATE_CATEGORY", "CheckpointOptions", "CheckpointResult", "Checkpointer", "Isolate", "Subscriptions"]

STATE_CATEGORY = "state"
"""The store category under which subscription state blobs are kept (key: the subscription's id)."""

Subscriptions: TypeAlias = Mapping[str, SubscriptionHandle] | Callable[[], Mapping[str, SubscriptionHandle]]
"""The subscriptions to checkpoint by id, or a function returning them (called while the scheduler is paused)."""

Isolate: TypeAlias = Callable[[str, Exception], str]
"""``isolate(key, error) -> owner``: a subscription's state could not be saved; leave its owner out (see
:meth:`Checkpointer.checkpoint`)."""


class CheckpointOptions(TypedDict, total=False):
    """The options of :meth:`Checkpointer.checkpoint` (each optional; see there)."""

    mode: CheckpointMode
    removed: Iterable[str]
    collect: Callable[[CheckpointTransaction], object] | None
    isolate: Isolate | None
    whole: Collection[str]
    dirty: DirtyRegistry | None


_PAUSE: Final = None
"""What the protocol's steps yield when the scheduler must be paused (see ``Checkpointer._steps``)."""


@dataclass(frozen=True, slots=True)
class CheckpointResult:
    """What one successful checkpoint did and what it cost. Durations are wall-clock seconds."""

    checkpoint_id: int
    """The store's id of the committed checkpoint."""
    mode: CheckpointMode
    saved: tuple[str, ...]
    """Ids of the subscriptions whose state was written (in differential mode: those with a dirty node)."""
    deleted: tuple[str, ...]
    """Ids of the subscriptions whose state was removed."""
    bytes_written: int
    """Total size of the blobs put in the transaction."""
    pause_seconds: float
    """How long the scheduler was paused: waiting for it to quiesce plus serialization."""
    serialize_seconds: float
    """The part of the pause spent serializing state."""
    commit_seconds: float
    """How long the store commit took (the scheduler was running again)."""


class Checkpointer:
    """Takes checkpoints of a set of subscriptions into a store; never two at once.

    ``category``: the store category for state blobs. ``clock``: the time source for the reported durations.
    ``pause_timeout``: seconds to wait for the scheduler to quiesce before failing the checkpoint (``None``:
    wait as long as it takes).
    """

    def __init__(
        self,
        scheduler: PausableScheduler,
        store: CheckpointStore,
        *,
        category: str = STATE_CATEGORY,
        codec: StateCodec = DEFAULT_CODEC,
        clock: Callable[[], float] = time.perf_counter,
        pause_timeout: float | None = None,
    ) -> None:
        self._scheduler = scheduler
        self._store = store
        self._category = category
        self._codec = codec
        self._clock = clock
        self._pause_timeout = pause_timeout
        self._busy = threading.Lock()

    @property
    def store(self) -> CheckpointStore:
        """The store checkpoints are committed to."""
        return self._store

    def checkpoint(self, subscriptions: Subscriptions, **options: Unpack[CheckpointOptions]) -> CheckpointResult:
        """Take one checkpoint (blocking).

        Options (:class:`CheckpointOptions`): ``mode`` (differential by default). ``removed``: ids of
        subscriptions whose stored state must go. ``collect(transaction)`` runs while the scheduler is paused,
        after the state was serialized, so the host can add what must commit atomically with it (registry changes,
        ingress watermarks). ``isolate(key, error)``: without it, a subscription whose state cannot be saved fails
        the whole checkpoint; with it, it is called (before ``collect``) and returns the owner of ``key``, and every
        subscription of that owner (``isolate(k, ...)`` of its other keys is not called: an owner is the key
        itself or a prefix ``owner + "/"``) is left out of this checkpoint while the others commit. ``whole``: keys
        to write in full whatever the mode (units the store has never seen: a differential save of a unit without
        a dirty node writes nothing). ``dirty``: the registry the operators report to; a differential checkpoint
        then visits only the keys it names (plus ``whole``), and a full one resets it. Raises
        :class:`CheckpointError` (with ``phase``) when the checkpoint failed; :class:`CheckpointInProgressError` if
        one is already running.
        """
        steps = self._steps(subscriptions, options)
        need = next(steps)
        try:
            while True:
                if need is _PAUSE:
                    try:
                        self._scheduler.pause().result(timeout=self._pause_timeout)
                    except Exception as error:
                        need = steps.throw(error)
                        continue
                    need = steps.send(None)
                else:
                    need = steps.send(self._commit(need))
        except StopIteration as finished:
            result: CheckpointResult = finished.value
            return result
        finally:
            steps.close()  # a commit that raised: the steps' own cleanup (the lock) runs now

    async def checkpoint_async(
        self, subscriptions: Subscriptions, **options: Unpack[CheckpointOptions]
    ) -> CheckpointResult:
        """:meth:`checkpoint` for asyncio: awaits the pause, and runs the commit in a worker thread."""
        import asyncio  # imported by its first user: ``import reaqtive`` does not load asyncio

        steps = self._steps(subscriptions, options)
        need = next(steps)
        try:
            while True:
                if need is _PAUSE:
                    try:
                        await asyncio.wait_for(_awaited(self._scheduler.pause_async()), self._pause_timeout)
                    except Exception as error:
                        need = steps.throw(error)
                        continue
                    need = steps.send(None)
                else:
                    need = steps.send(await asyncio.to_thread(self._commit, need))
        except StopIteration as finished:
            result: CheckpointResult = finished.value
            return result
        finally:
            steps.close()  # a commit that raised: the steps' own cleanup (the lock) runs now

    def _steps(self, subscriptions: Subscriptions, options: CheckpointOptions
               ) -> Generator[_Capture | None, Any, CheckpointResult]:
        """The protocol written once for both faces: it yields ``_PAUSE`` for the scheduler to be paused (an error
        of the pause is thrown back in) and a capture to commit (sent back: ``(checkpoint id, commit seconds)``);
        the two faces differ only in how they wait for those."""
        if not self._busy.acquire(blocking=False):
            raise CheckpointInProgressError()
        try:
            mode = options.get("mode", CheckpointMode.DIFFERENTIAL)
            started = self._clock()
            try:
                try:
                    yield _PAUSE
                except Exception as error:
                    raise CheckpointError(f"pausing the scheduler failed: {error!r}", "pause") from error
                capture = self._serialize(
                    subscriptions, mode, removed=options.get("removed", ()), collect=options.get("collect"),
                    isolate=options.get("isolate"), whole=options.get("whole", ()), dirty=options.get("dirty"),
                )
            finally:
                self._scheduler.resume()  # also after a failed or timed-out pause: it cancels the pause
            pause_seconds = self._clock() - started
            checkpoint_id, commit_seconds = yield capture
            return self._confirm(capture, checkpoint_id, mode, pause_seconds, commit_seconds)
        finally:
            self._busy.release()

    # -- the phases --------------------------------------------------------------------------------------------

    def _serialize(
        self,
        subscriptions: Subscriptions,
        mode: CheckpointMode,
        *,
        removed: Iterable[str],
        collect: Callable[[CheckpointTransaction], object] | None,
        isolate: Isolate | None,
        whole: Collection[str],
        dirty: DirtyRegistry | None,
    ) -> _Capture:
        """Runs while paused: every blob goes into a fresh transaction (memory only)."""
        started = self._clock()
        transaction = self._store.begin()
        visited: Collection[str] = ()
        try:
            handles = subscriptions() if callable(subscriptions) else subscriptions
            deleted = tuple(removed)
            for key in deleted:
                transaction.delete(self._category, key)
            whole = whole if isinstance(whole, (set, frozenset, dict)) else set(whole)
            if dirty is None:
                visited = handles = dict(handles)
            else:
                visited = dirty.take().union(whole)  # a full checkpoint takes them too: it saves everything
                if mode is CheckpointMode.FULL:
                    visited = handles = dict(handles)
                else:
                    handles = {key: handles[key] for key in sorted(visited) if key in handles}
            blobs, unsaved = self._save_all(handles, mode, isolate, whole)
            saved: dict[str, SubscriptionHandle] = {}
            for key, blob in blobs.items():
                transaction.put(self._category, key, blob)
                saved[key] = handles[key]
            if collect is not None:
                collect(transaction)
        except Exception as error:
            transaction.rollback()
            if dirty is not None:
                dirty.note_all(visited)  # some may have been saved: dirty until a commit
            raise CheckpointError(f"serializing the checkpoint failed: {error}", "serialize") from error
        except BaseException:
            transaction.rollback()
            if dirty is not None:
                dirty.note_all(visited)
            raise
        if dirty is not None and unsaved:
            dirty.note_all(unsaved)  # left out (isolated): their nodes may be half saved, and they changed
        return _Capture(transaction, saved, deleted, self._clock() - started, dirty)

    def _save_all(
        self,
        handles: Mapping[str, SubscriptionHandle],
        mode: CheckpointMode,
        isolate: Isolate | None,
        whole: Collection[str],
    ) -> tuple[dict[str, bytes], list[str]]:
        """The blob of every subscription to write, and the keys left out; with ``isolate``, the owners of those
        that cannot be saved are left out whole (their stored state stays as it was: never a part of an owner's
        units from one checkpoint and the rest from another)."""
        blobs: dict[str, bytes] = {}
        failed: list[str] = []
        failed_owners: list[str] = []
        for key, handle in handles.items():
            try:
                blob = save_subscription(handle, CheckpointMode.FULL if key in whole else mode, self._codec)
            except Exception as error:
                if isolate is None:
                    raise
                failed.append(key)
                failed_owners.append(isolate(key, error))
                continue
            if blob is not None:
                blobs[key] = blob
        for owner in failed_owners:
            prefix = owner + "/"
            for key in [key for key in blobs if key == owner or key.startswith(prefix)]:
                del blobs[key]
                failed.append(key)
        return blobs, failed

    def _commit(self, capture: _Capture) -> tuple[int, float]:
        started = self._clock()
        transaction = capture.transaction
        try:
            checkpoint_id = transaction.commit()
        except Exception as error:
            transaction.rollback()  # a failed commit applied nothing; this only drops the buffered changes
            if capture.dirty is not None:
                capture.dirty.note_all(capture.saved)  # saved, not committed: dirty until a commit
            raise CheckpointError(f"committing the checkpoint failed: {error}", "commit") from error
        except BaseException:
            if capture.dirty is not None:
                capture.dirty.note_all(capture.saved)
            raise
        return checkpoint_id, self._clock() - started

    def _confirm(
        self,
        capture: _Capture,
        checkpoint_id: int,
        mode: CheckpointMode,
        pause_seconds: float,
        commit_seconds: float,
    ) -> CheckpointResult:
        """The commit is durable: confirm every saved subscription, even if one of them raises."""
        result = CheckpointResult(
            checkpoint_id=checkpoint_id,
            mode=mode,
            saved=tuple(capture.saved),
            deleted=capture.deleted,
            bytes_written=capture.transaction.changes.bytes_written,
            pause_seconds=pause_seconds,
            serialize_seconds=capture.serialize_seconds,
            commit_seconds=commit_seconds,
        )
        failures: list[tuple[str, Exception]] = []
        for saved_key, handle in capture.saved.items():
            try:
                confirm_saved(handle)
            except Exception as confirm_error:
                failures.append((saved_key, confirm_error))
        if failures:
            if capture.dirty is not None:
                capture.dirty.note_all(key for key, _ in failures)  # some nodes may not have been confirmed
            key, error = failures[0]
            raise CheckpointError(
                f"checkpoint {checkpoint_id} was committed, but on_state_saved failed for {len(failures)} "
                f"subscription(s), first {key!r}: {error!r}",
                "confirm",
                committed=True,
                result=result,
            ) from error
        return result


async def _awaited(awaitable: Awaitable[None]) -> None:
    await awaitable


@dataclass(slots=True)
class _Capture:
    transaction: CheckpointTransaction
    saved: dict[str, SubscriptionHandle]
    deleted: tuple[str, ...]
    serialize_seconds: float
    dirty: DirtyRegistry | None
