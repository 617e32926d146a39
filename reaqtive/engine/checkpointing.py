"""Checkpoints, a part of the engine: the changed state of every query, the output counters and the delivery record
in one transaction, then the ingress log truncated to what it covers, and the acknowledged outputs trimmed from the
durable sink.

The engine makes one :class:`Checkpointing` and hands it the parts a checkpoint reads (the store, the lock, the
positions, the outputs, the records, the subscriptions, the stopped queries, the sources, the quarantine, the
queries' environment and host, the checkpoint policy) and callbacks for the rest (is the engine open, mark it
checkpointing, apply and raise faults, has the clock started); the queries behind the engine it reads as a mapping
it never writes. It owns what the engine remembers of the store's checkpoints: the state rows in the store, what
the log retains per stream, the backfills no checkpoint saw join yet, the last checkpoint's metrics, and the
checkpoint listeners. Each checkpoint is a :class:`CheckpointRun`, made for it and dropped after it (as Reaqtor's
``StateSaver``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from datetime import UTC, datetime
from typing import Any

from reaqtive.engine.artifacts import ArtifactRecords
from reaqtive.engine.behind import Lag
from reaqtive.engine.checkpoint_policy import CheckpointPolicy
from reaqtive.engine.counters import OutputCounter
from reaqtive.engine.database import EngineStore, to_micros
from reaqtive.engine.egress import Output
from reaqtive.engine.engine_errors import (
    UnstorableStateError,
)
from reaqtive.engine.gc_policy import GcFreeze
from reaqtive.engine.handover import EngineLock
from reaqtive.engine.idle import Subscriptions
from reaqtive.engine.model import CheckpointMetrics
from reaqtive.engine.outputs import Fault, Outputs
from reaqtive.engine.positions import Positions
from reaqtive.engine.quarantine import Quarantine
from reaqtive.engine.query_environment import QueryEnvironment
from reaqtive.engine.readers import StreamReader
from reaqtive.engine.records import Behind, DeliveryRecord, delivery_bytes
from reaqtive.engine.retention import StreamExtent, retention_cut, retention_from_record
from reaqtive.engine.sources import Sources
from reaqtive.engine.stopped import StoppedQueries
from reaqtive.engine.store_keys import (
    ARTIFACTS,
    DELIVERY,
    ENGINE,
    OBSERVED,
    OUTPUTS,
    SOURCES,
    counter_bytes,
    now_text,
    to_bytes,
)
from reaqtive.scheduler import VirtualTimeScheduler
from reaqtive.state import (
    STATE_CATEGORY,
    Checkpointer,
    CheckpointMode,
    CheckpointResult,
    CheckpointTransaction,
)
from reaqtive.state.host import QueryHost

__all__ = ["CheckpointListener", "CheckpointRun", "Checkpointing"]

CheckpointListener = Callable[[CheckpointMetrics | None, BaseException | None], None]
"""Called at the end of each checkpoint: ``(metrics, None)`` once it committed, ``(None, error)`` if it failed."""

Extents = Mapping[str, tuple[int, int, int, int, int]]
"""Per stream, what its log retains: events, bytes, the oldest event's number, the first and last log positions."""


class Checkpointing:
    """See the module docstring. ``checkpointing(True)`` marks the engine CHECKPOINTING, ``checkpointing(False)``
    running again (or degraded); ``apply_faults()`` stops the subscriptions whose faults wait; ``fault(uri,
    error)`` stops one now."""

    def __init__(  # noqa: PLR0917 (the parts a checkpoint reads, each named)
        self, store: EngineStore, lock: EngineLock, scheduler: VirtualTimeScheduler, positions: Positions,
        outputs: Outputs, records: ArtifactRecords, subscriptions: Subscriptions, stopped: StoppedQueries,
        sources: Sources, quarantine: Quarantine, environment: QueryEnvironment, host: QueryHost, *,
        policy: CheckpointPolicy, gc: GcFreeze, log: logging.Logger, behind: Mapping[str, Lag],
        clock_started: Callable[[], bool], check_open: Callable[[], None], checkpointing: Callable[[bool], None],
        apply_faults: Callable[[], None], fault: Fault, clock_moves: Sequence[tuple[int, int]] = (),
    ) -> None:
        self._store = store
        self._lock = lock
        self._scheduler = scheduler
        self._positions = positions
        self._outputs = outputs
        self._records = records
        self._subscriptions = subscriptions
        self._stopped = stopped
        self._sources = sources
        self._quarantine = quarantine
        self._environment = environment
        self._host = host
        self._policy = policy
        self._gc = gc
        self._log = log
        self._behind = behind  # (the queries behind the engine: read here, written by the scheduling room)
        self._clock_started = clock_started
        self._clock_moves = clock_moves  # (read: the clock moves a query behind replays, kept by the scheduling room)
        self._check_open = check_open
        self._checkpointing = checkpointing
        self._apply_faults = apply_faults
        self._fault = fault
        self.checkpointer = Checkpointer(scheduler, store.checkpoints)
        """The state checkpointer: saves the dirty units (reaqtive.state.checkpoint)."""
        self.last: CheckpointMetrics | None = None
        """The metrics of the last checkpoint that committed."""
        self._stored_keys: set[str] = set()  # the state rows in the store (units it has seen whole)
        self._retained: dict[str, tuple[int, int]] = {}  # per stream, events and bytes in the log (last measured)
        self._backfilling: set[str] = set()  # backfills no checkpoint saw joined yet (reaqtive.engine.backfill)
        self._listeners: tuple[CheckpointListener, ...] = ()  # replaced, never mutated

    # -- taking one ------------------------------------------------------------------------------------------------

    def checkpoint(self, full: bool = False) -> CheckpointMetrics:
        """:meth:`Engine.checkpoint <reaqtive.Engine.checkpoint>`: under the engine's lock."""
        with self._lock:
            self._check_open()
            return self.take(full)

    async def checkpoint_async(self, full: bool = False) -> CheckpointMetrics:
        """:meth:`checkpoint`, awaitable: the work runs in a worker thread."""
        import asyncio  # (here: the engine loads asyncio only when its asyncio face is used)

        return await asyncio.to_thread(self.checkpoint, full)

    def maybe_take(self) -> bool:
        """Take a checkpoint if the periodic policy says one is due (see reaqtive.engine.checkpoint_policy); under
        the engine's lock."""
        if self._policy.due():
            self.take(full=False)
            return True
        return False

    def take(self, full: bool) -> CheckpointMetrics:
        """One checkpoint, under the engine's lock, reported to the listeners whether it commits or fails."""
        self._checkpointing(True)
        try:
            metrics = self._take(full)
        except BaseException as error:
            self._notify(None, error)
            raise
        finally:
            self._checkpointing(False)
        self._notify(metrics, None)
        return metrics

    def _take(self, full: bool) -> CheckpointMetrics:
        metrics = CheckpointRun(self, full).take()
        self.last = metrics
        self._gc.after_checkpoint()
        self._policy.committed()
        self._log.info(
            "checkpoint %d: paused %.2f ms, commit %.2f ms, %d bytes, %d dirty subscriptions",
            metrics.checkpoint_id, metrics.pause_seconds * 1e3, metrics.commit_seconds * 1e3,
            metrics.bytes_written, metrics.dirty_subscriptions,
            extra={"reaqtive_event": "checkpoint", "checkpoint_id": metrics.checkpoint_id, "full": full,
                   "pause_seconds": metrics.pause_seconds, "serialize_seconds": metrics.serialize_seconds,
                   "commit_seconds": metrics.commit_seconds, "egress_seconds": metrics.egress_seconds,
                   "bytes_written": metrics.bytes_written, "dirty_subscriptions": metrics.dirty_subscriptions,
                   "ingress_truncated": metrics.ingress_truncated},
        )
        return metrics

    # -- listeners -------------------------------------------------------------------------------------------------

    def add_listener(self, listener: CheckpointListener) -> None:
        """:meth:`Engine.add_checkpoint_listener <reaqtive.Engine.add_checkpoint_listener>`."""
        with self._lock:
            self._listeners = (*self._listeners, listener)

    def remove_listener(self, listener: CheckpointListener) -> None:
        """:meth:`Engine.remove_checkpoint_listener <reaqtive.Engine.remove_checkpoint_listener>`."""
        with self._lock:
            self._listeners = tuple(known for known in self._listeners if known != listener)

    def _notify(self, metrics: CheckpointMetrics | None, error: BaseException | None) -> None:
        for listener in self._listeners:
            try:
                listener(metrics, error)
            except Exception as failure:  # an observer of the engine must not break it
                self._log.error("checkpoint listener %r raised: %s", listener, failure, exc_info=failure,
                                extra={"reaqtive_event": "listener_failed", "listener": repr(listener),
                                       "error_type": type(failure).__name__})

    # -- what the store holds --------------------------------------------------------------------------------------

    @property
    def stored_keys(self) -> Set[str]:
        """The state rows in the store (the units it has seen whole)."""
        return self._stored_keys

    def stored_under(self, uri: str) -> set[str]:
        """The state rows in the store of ``uri``'s inner units (``uri/...``)."""
        prefix = uri + "/"
        return {key for key in self._stored_keys if key.startswith(prefix)}

    def note_stored(self, saved: Iterable[str], deleted: Iterable[str] = ()) -> None:
        """A commit outside a checkpoint (a creation, an update, a deletion) wrote ``saved`` and deleted
        ``deleted``."""
        self._stored_keys.update(saved)
        self._stored_keys.difference_update(deleted)

    @property
    def retained(self) -> Mapping[str, tuple[int, int]]:
        """Per stream, the events and bytes its log retains (as last measured)."""
        return self._retained

    def measured(self, extents: Extents) -> None:
        """What the log retains per stream, measured by ``extents`` (one pass over the rows' headers)."""
        self._retained = {stream: (extent[0], extent[1]) for stream, extent in extents.items()}

    def backfill_started(self, uri: str) -> None:
        """Subscription ``uri`` is a backfill (created or rebuilt behind the engine): the checkpoint that sees it
        joined records so."""
        self._backfilling.add(uri)

    def forget(self, uri: str) -> None:
        """Subscription ``uri`` is deleted."""
        self._backfilling.discard(uri)

    # -- the log ---------------------------------------------------------------------------------------------------

    def _truncate_log(self) -> int:
        """Truncate the ingress log to what the committed checkpoint covers and the retentions let go; returns
        how many events went. What the log retains then is measured, per stream, for the metrics (one pass over
        the rows' headers)."""
        extents = self._store.ingress_extents()  # one pass over the rows' headers, for the floor and retentions
        truncated = self._store.truncate_ingress(self.covered_by_checkpoint(extents))
        deleted = self._store.last_truncation
        retained = {}
        for stream, extent in extents.items():
            events, size = deleted.get(stream, (0, 0))
            if extent[0] > events:
                retained[stream] = (extent[0] - events, max(extent[1] - size, 0))
        self._retained = retained
        return truncated

    def covered_by_checkpoint(self, extents: Extents | None = None) -> dict[str, int]:
        """Per stream, the last event the log may lose: every query has it in its committed state. One floor for
        all streams: a query behind the engine (paused, catching up, kept without running) or a reader that lags
        reads from its position on, and the inner queries its events start may read any stream from there."""
        if extents is None:
            extents = self._store.ingress_extents()
        floor = self.log_floor()
        if floor >= self._positions.cursor.pos:
            return self._within_retention(dict(self._positions.delivered), extents)
        retained = {stream: extent[2] for stream, extent in extents.items()}  # the oldest event of each
        covered: dict[str, int] = {}
        for stream, delivered in self._positions.delivered.items():
            at = self._store.seq_at_position(stream, floor)
            keep = at if at is not None else retained.get(stream, delivered + 1) - 1
            covered[stream] = min(delivered, keep)
        return self._within_retention(covered, extents)

    def _within_retention(self, covered: dict[str, int], extents: Extents) -> dict[str, int]:
        """``covered`` lowered, per stream with a retention, to what its retention lets go: the second bound on
        truncation (see reaqtive.engine.retention); it never raises what the floor allows."""
        retaining = {}
        for stream in covered:
            record = self._records.get(stream)
            retention = None if record is None else retention_from_record(stream, record)
            if retention is not None:
                retaining[stream] = retention
        if not retaining:
            return covered
        self._positions.refresh_heads()
        now = self.clock_micros()
        for stream, retention in retaining.items():
            extent = extents.get(stream)
            cut = retention_cut(self._store, stream, retention, head=self._positions.heads.get(stream, 0),
                                extent=None if extent is None else StreamExtent(*extent), now_micros=now)
            covered[stream] = min(covered[stream], cut)
        return covered

    def log_floor(self) -> int:
        """The log position up to which every query has read the log (see covered_by_checkpoint)."""
        floor = self._positions.cursor.pos
        for lag in self._behind.values():
            floor = min(floor, lag.pos, lag.cursor.pos)
        floor = self._stopped.floor(floor)
        for watermark in self._lagging_readers().values():
            floor = min(floor, watermark)
        return floor

    def _lagging_readers(self) -> dict[str, int]:
        """Per stream, the lowest watermark of a reader behind what the engine delivered of it. Only the readers
        the dirty registry watches can be (see reaqtive.engine.readers): any other has unbounded demand and was
        caught up when last asked, and every event delivered since reached it at once."""
        marks: dict[str, int] = {}
        delivered = self._positions.delivered_at
        for node, _ in self._environment.dirty.watched():
            if isinstance(node, StreamReader) and not node.is_disposed:
                uri, watermark = node.uri, node.watermark
                if watermark < delivered.get(uri, -1) and watermark < marks.get(uri, watermark + 1):
                    marks[uri] = watermark
        return marks

    def first_retained_position(self) -> int:
        """The log position of the oldest event still in the log (past the engine's position: none)."""
        runs = self._store.read_ingress_runs(-1, 1)
        return runs[0].pos if runs else self._positions.cursor.pos + 1

    # -- the delivery record ---------------------------------------------------------------------------------------

    def _behind_now(self) -> dict[str, Behind]:
        """Where each query behind the engine stands: its position, its clock, and the floor of the log for it
        (its catch-up goes on from its cursor)."""
        return {
            uri: Behind(lag.pos, to_micros(lag.scheduler.now), min(lag.pos, lag.cursor.pos))
            for uri, lag in self._behind.items()
        }

    def clock_micros(self) -> int | None:
        """The engine's clock as stored (``None``: it has not started)."""
        return to_micros(self._scheduler.now) if self._clock_started() else None

    def delivery_bytes(
        self, extra_pins: Mapping[str, Behind] | None = None, behind: Mapping[str, Behind] | None = None
    ) -> bytes:
        """The delivery record as stored: where delivery stands, the clock, the pins of what is kept without
        running (and ``extra_pins``), the queries behind the engine (``behind``)."""
        pinned = self._stopped.pinned()
        pinned.update(extra_pins or {})
        positions = self._positions
        record = DeliveryRecord(positions.cursor.pos, dict(positions.delivered), self.clock_micros(), pinned,
                                dict(positions.delivered_at), dict(behind or {}),
                                list(self._clock_moves) if behind else [])
        return to_bytes(delivery_bytes(record, now_text()))

    def pin_for(self, uri: str) -> Behind:
        """Where an artifact about to be kept without running stands (see reaqtive.engine.stopped), with the floor
        of the log as it is now."""
        return self._stopped.pin_for(uri, self._records.get(uri, {}), self.first_retained_position() - 1)


class CheckpointRun:
    """One checkpoint, made for it and dropped after it: what it found (the outboxes' snapshots, the queries
    behind the engine, the counters it wrote, the states it could not save) lives here, not on the engine.
    :meth:`take` saves the changed states, and in the same transaction the delivery record, the output counters
    that moved, how far each observer function got and the outputs still waiting for it, the sources' positions
    and the backfills that joined; then it notes what committed, truncates the log and trims the sink."""

    def __init__(self, part: Checkpointing, full: bool) -> None:
        self._part = part  # (it reads the parts the checkpointing part was given: the same module)
        self._full = full
        self._reported: set[str] = set()  # the output counters that reported a move since the last checkpoint
        self._moved: dict[str, OutputCounter] = {}  # those this checkpoint writes
        self._unsaved: dict[str, UnstorableStateError] = {}  # the subscriptions whose state cannot be saved
        self._behind: dict[str, Behind] = {}  # the queries behind the engine, where this checkpoint finds them
        self._joined: dict[str, dict[str, Any]] = {}  # the backfills that joined the engine since the last one
        self._sources: dict[str, bytes] = {}  # the sources' positions it stores
        self._observed: dict[str, int] = {}  # per outbox, the last output its observer got (as snapshot)
        self._waiting: list[Output] = []  # the outputs still waiting for an observer function
        self._idle_written = 0  # the idle subscriptions' stored states a full checkpoint wrote again, as they are

    def take(self) -> CheckpointMetrics:
        part = self._part
        part._quarantine.flush()  # before the checkpoint covers the events: the log may then drop them
        part._apply_faults()
        snapshots = part._outputs.outboxes.snapshots()  # couriers may deliver meanwhile: the stored cursors are these
        self._observed = {uri: delivered for uri, (delivered, _) in snapshots.items()}
        self._waiting = [output for _, outputs in snapshots.values() for output in outputs]
        egress_seconds = part._outputs.flush()
        handles = part._host.units()
        removed = part._environment.removed_inner_ids()
        dirty = part._environment.dirty
        try:
            result: CheckpointResult = part.checkpointer.checkpoint(
                handles, mode=CheckpointMode.FULL if self._full else CheckpointMode.DIFFERENTIAL, removed=removed,
                collect=self._collect, isolate=self._isolate, whole=handles.keys() - part._stored_keys,
                dirty=dirty,
            )
        except BaseException:
            for uri in self._reported | self._moved.keys():  # not committed: they still differ from the store
                dirty.note_moved(uri)
            raise
        self._committed(result, removed)
        truncated = part._truncate_log()
        part._store.trim_outputs()  # retention: acknowledged outputs leave the durable sink
        # Acknowledged dead letters no one needs any more.
        part._store.trim_dead_letters(part.log_floor(), part._positions.delivered)
        return CheckpointMetrics(
            checkpoint_id=result.checkpoint_id,
            full=self._full,
            pause_seconds=result.pause_seconds,
            serialize_seconds=result.serialize_seconds,
            commit_seconds=result.commit_seconds,
            egress_seconds=egress_seconds,
            bytes_written=result.bytes_written,
            dirty_subscriptions=len(result.saved) + self._idle_written,
            ingress_truncated=truncated,
            at=datetime.now(UTC),
        )

    def _isolate(self, key: str, error: Exception) -> str:
        """A state that cannot be saved stops its subscription alone (after the commit), as of its last
        checkpoint: none of its units is written now, and its pin goes into this delivery record."""
        part = self._part
        owner = key if key in part._subscriptions else (part._records.subscription_nested_with(key) or key)
        self._unsaved.setdefault(owner, UnstorableStateError(owner, key, error))
        return owner

    def _collect(self, transaction: CheckpointTransaction) -> None:
        """While paused, with the state: the delivery record, the output counters that moved, how far the
        observer functions got and what still waits for them, the sources' positions, the backfills that
        joined."""
        part, unsaved = self._part, self._unsaved
        pins = {uri: part.pin_for(uri) for uri in unsaved}
        self._behind.update(part._behind_now())
        transaction.put(ENGINE, DELIVERY, part.delivery_bytes(extra_pins=pins, behind=self._behind))
        self._put_counters(transaction)
        for uri, seq in self._observed.items():
            if uri not in unsaved and (seq != part._outputs.observed.get(uri, -1) or self._full):
                transaction.put(OBSERVED, uri, counter_bytes(seq))
        # The outputs waiting for an observer function, in this transaction: the state committed with it is past
        # them, so a restart could not produce them again; written apart, a crash before this commit left rows
        # past the committed counter (which recovery had to drop).
        part._store.outputs_in_commit(transaction, self._waiting)
        self._put_sources(transaction)
        self._put_joined(transaction)
        if self._full:
            # An idle subscription's state is its stored bytes (reaqtive.engine.idle): a full checkpoint writes
            # them again as they are, undecoded, so that it holds every state whole, as its name says.
            for uri, blob in part._subscriptions.idle_states():
                transaction.put(STATE_CATEGORY, uri, blob)
                self._idle_written += 1

    def _put_counters(self, transaction: CheckpointTransaction) -> None:
        """While paused: the output counters that moved since the last checkpoint (every one in a full
        checkpoint), found through the dirty registry, not by looking at each; ``reported`` gets those that
        reported a move, ``moved`` those written. Each is re-armed: its next move reports again."""
        part, full = self._part, self._full
        dirty = part._environment.dirty
        self._reported.update(dirty.take_moved())
        counters = part._outputs.counters
        for uri, counter in counters.items() if full else [(uri, counters.get(uri)) for uri in sorted(self._reported)]:
            if counter is None:
                continue  # deleted since
            if uri in self._unsaved:
                dirty.note_moved(uri)  # its owner is left out of this checkpoint
                continue
            if counter.next != counter.committed or full:
                counter.pending = counter.next
                transaction.put(OUTPUTS, uri, counter_bytes(counter.pending))
                self._moved[uri] = counter
            counter.rearm()  # (if the checkpoint fails, take() reports it again)

    def _put_joined(self, transaction: CheckpointTransaction) -> None:
        """While paused: the record of each backfill that caught up and joined the engine says so, in the
        checkpoint that saves its state as one in step with the engine (before it, a recovery puts it back at its
        start: its state is the one saved at its creation)."""
        part = self._part
        for uri in sorted(part._backfilling):
            record = part._records.get(uri)
            if record is None or uri in part._behind or uri in self._unsaved or uri not in part._subscriptions:
                continue
            changed = {**record, "backfill": {**record["backfill"], "joined": True}}
            transaction.put(ARTIFACTS, uri, to_bytes(changed))
            self._joined[uri] = changed

    def _put_sources(self, transaction: CheckpointTransaction) -> None:
        """While paused: each registered source's position (register_source), consistent with its stream."""
        self._sources.update(self._part._sources.read_now())
        for name, blob in self._sources.items():
            transaction.put(SOURCES, name, blob)

    def _committed(self, result: CheckpointResult, removed: Iterable[str]) -> None:
        """What the committed record says from now on: the states saved, the counters and cursors written, the
        position and clock the checkpoint was taken at, who stood behind the engine, the backfills that joined;
        then the subscriptions whose state could not be saved stop."""
        part, unsaved = self._part, self._unsaved
        part._stored_keys.update(result.saved)
        part._stored_keys.difference_update(removed)
        for counter in self._moved.values():
            counter.committed = counter.pending
        for uri, record in self._joined.items():
            part._records[uri] = record
            part._backfilling.discard(uri)
        pos = part._positions.cursor.pos
        part._stopped.checkpointed(Behind(pos, part.clock_micros(), pos), self._behind, unsaved)
        part._sources.committed(self._sources)
        part._environment.confirm_removed(removed)
        for uri, seq in self._observed.items():
            if uri not in unsaved and seq != part._outputs.observed.get(uri, -1):
                part._outputs.observed[uri] = seq
                part._store.delete_outputs(uri, upto=seq)  # delivered: the outbox's rows up to it can go
        for uri, unsaved_error in unsaved.items():
            part._fault(uri, unsaved_error)
