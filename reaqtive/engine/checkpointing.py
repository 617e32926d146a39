"""Checkpoints: the changed state of every query, the output counters and the delivery record in one transaction, then
the ingress log truncated to what it covers, and the acknowledged outputs trimmed from the durable sink.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from reaqtive.engine._room import (
    _ARTIFACTS,
    _DELIVERY,
    _ENGINE,
    _OBSERVED,
    _OUTPUTS,
    _SOURCES,
    EngineRoom,
    _counter_bytes,
    _now_text,
    _to_bytes,
)
from reaqtive.engine.counters import OutputCounter
from reaqtive.engine.database import to_micros
from reaqtive.engine.egress import Output
from reaqtive.engine.engine_errors import (
    UnstorableStateError,
)
from reaqtive.engine.model import (
    CheckpointMetrics,
    EngineStatus,
)
from reaqtive.engine.readers import StreamReader
from reaqtive.engine.records import Behind, DeliveryRecord, delivery_bytes
from reaqtive.engine.retention import StreamExtent, retention_cut, retention_from_record
from reaqtive.state import (
    STATE_CATEGORY,
    CheckpointMode,
    CheckpointResult,
    CheckpointTransaction,
)


class Checkpointing(EngineRoom):
    """See the module docstring."""

    def checkpoint(self, *, full: bool = False) -> CheckpointMetrics:
        """Take a checkpoint (differential by default): durable sink first, then every changed subscription's
        state in one transaction, then the ingress log is truncated up to what the commit covers."""
        with self._lock:
            self._check_open()
            return self._checkpoint_reporting(full)

    async def checkpoint_async(self, *, full: bool = False) -> CheckpointMetrics:
        """:meth:`checkpoint`, awaitable: the work runs in a worker thread."""
        import asyncio

        return await asyncio.to_thread(self.checkpoint, full=full)

    def _checkpoint_reporting(self, full: bool) -> CheckpointMetrics:
        self._status = EngineStatus.CHECKPOINTING
        try:
            metrics = self._checkpoint(full)
        except BaseException as error:
            self._notify_checkpoint(None, error)
            raise
        finally:
            self._status = EngineStatus.RUNNING
            self._settle_status()
        self._notify_checkpoint(metrics, None)
        return metrics

    def _checkpoint(self, full: bool) -> CheckpointMetrics:
        metrics = CheckpointRun(self, full).take()
        self.last_checkpoint = metrics
        self._gc.after_checkpoint()
        self._checkpoint_policy.committed()
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

    def _truncate_log(self) -> int:
        """Truncate the ingress log to what the committed checkpoint covers and the retentions let go; returns
        how many events went. What the log retains then is measured, per stream, for the metrics (one pass over
        the rows' headers)."""
        extents = self._store.ingress_extents()  # one pass over the rows' headers, for the floor and retentions
        truncated = self._store.truncate_ingress(self._covered_by_checkpoint(extents))
        deleted = self._store.last_truncation
        retained = {}
        for stream, extent in extents.items():
            events, size = deleted.get(stream, (0, 0))
            if extent[0] > events:
                retained[stream] = (extent[0] - events, max(extent[1] - size, 0))
        self._retained = retained
        return truncated

    def _maybe_checkpoint(self) -> bool:
        """Take a checkpoint if the periodic policy says one is due (see reaqtive.engine.checkpoint_policy)."""
        if self._checkpoint_policy.due():
            self._checkpoint_reporting(full=False)
            return True
        return False

    def _covered_by_checkpoint(
        self, extents: Mapping[str, tuple[int, int, int, int, int]] | None = None
    ) -> dict[str, int]:
        """Per stream, the last event the log may lose: every query has it in its committed state. One floor for
        all streams: a query behind the engine (paused, catching up, kept without running) or a reader that lags
        reads from its position on, and the inner queries its events start may read any stream from there."""
        if extents is None:
            extents = self._store.ingress_extents()
        floor = self._log_floor()
        if floor >= self._positions.cursor.pos:
            return self._within_retention(dict(self._positions.delivered), extents)
        retained = {stream: extent[2] for stream, extent in extents.items()}  # the oldest event of each
        covered: dict[str, int] = {}
        for stream, delivered in self._positions.delivered.items():
            at = self._store.seq_at_position(stream, floor)
            keep = at if at is not None else retained.get(stream, delivered + 1) - 1
            covered[stream] = min(delivered, keep)
        return self._within_retention(covered, extents)

    def _within_retention(
        self, covered: dict[str, int], extents: Mapping[str, tuple[int, int, int, int, int]]
    ) -> dict[str, int]:
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
        now = self._clock_micros()
        for stream, retention in retaining.items():
            extent = extents.get(stream)
            cut = retention_cut(self._store, stream, retention, head=self._positions.heads.get(stream, 0),
                                extent=None if extent is None else StreamExtent(*extent), now_micros=now)
            covered[stream] = min(covered[stream], cut)
        return covered

    def _log_floor(self) -> int:
        """The log position up to which every query has read the log (see _covered_by_checkpoint)."""
        floor = self._positions.cursor.pos
        for lag in self._scheduling.behind.values():
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

    def _behind_now(self) -> dict[str, Behind]:
        """Where each query behind the engine stands: its position, its clock, and the floor of the log for it
        (its catch-up goes on from its cursor)."""
        return {
            uri: Behind(lag.pos, to_micros(lag.scheduler.now), min(lag.pos, lag.cursor.pos))
            for uri, lag in self._scheduling.behind.items()
        }

    def _clock_micros(self) -> int | None:
        return to_micros(self._scheduler.now) if self._delivery.clock_started else None

    def _delivery_bytes(
        self, extra_pins: Mapping[str, Behind] | None = None, behind: Mapping[str, Behind] | None = None
    ) -> bytes:
        pinned = self._stopped.pinned()
        pinned.update(extra_pins or {})
        positions = self._positions
        record = DeliveryRecord(positions.cursor.pos, dict(positions.delivered), self._clock_micros(), pinned,
                                dict(positions.delivered_at), dict(behind or {}))
        return _to_bytes(delivery_bytes(record, _now_text()))

    def _pin_for(self, uri: str) -> Behind:
        """Where an artifact about to be kept without running stands (see reaqtive.engine.stopped), with the floor
        of the log as it is now."""
        return self._stopped.pin_for(uri, self._records.get(uri, {}), self._first_retained_position() - 1)

    def _first_retained_position(self) -> int:
        """The log position of the oldest event still in the log (past the engine's position: none)."""
        runs = self._store.read_ingress_runs(-1, 1)
        return runs[0].pos if runs else self._positions.cursor.pos + 1


class CheckpointRun:
    """One checkpoint, made for it and dropped after it: what it found (the outboxes' snapshots, the queries
    behind the engine, the counters it wrote, the states it could not save) lives here, not on the engine.
    :meth:`take` saves the changed states, and in the same transaction the delivery record, the output counters
    that moved, how far each observer function got and the outputs still waiting for it, the sources' positions
    and the backfills that joined; then it notes what committed, truncates the log and trims the sink."""

    def __init__(self, engine: Checkpointing, full: bool) -> None:
        self._engine = engine
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
        engine = self._engine
        engine._quarantine.flush()  # before the checkpoint covers the events: the log may then drop them
        engine._running.apply_faults()
        snapshots = engine._outputs.outboxes.snapshots()  # couriers may deliver meanwhile: the stored cursors are these
        self._observed = {uri: delivered for uri, (delivered, _) in snapshots.items()}
        self._waiting = [output for _, outputs in snapshots.values() for output in outputs]
        egress_seconds = engine._outputs.flush()
        handles = engine._host.units()
        removed = engine._environment.removed_inner_ids()
        dirty = engine._environment.dirty
        try:
            result: CheckpointResult = engine._checkpointer.checkpoint(
                handles, mode=CheckpointMode.FULL if self._full else CheckpointMode.DIFFERENTIAL, removed=removed,
                collect=self._collect, isolate=self._isolate, whole=handles.keys() - engine._stored_state_keys,
                dirty=dirty,
            )
        except BaseException:
            for uri in self._reported | self._moved.keys():  # not committed: they still differ from the store
                dirty.note_moved(uri)
            raise
        self._committed(result, removed)
        truncated = engine._truncate_log()
        engine._store.trim_outputs()  # retention: acknowledged outputs leave the durable sink
        # Acknowledged dead letters no one needs any more.
        engine._store.trim_dead_letters(engine._log_floor(), engine._positions.delivered)
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
        engine = self._engine
        owner = key if key in engine._subscriptions else (engine._records.subscription_nested_with(key) or key)
        self._unsaved.setdefault(owner, UnstorableStateError(owner, key, error))
        return owner

    def _collect(self, transaction: CheckpointTransaction) -> None:
        """While paused, with the state: the delivery record, the output counters that moved, how far the
        observer functions got and what still waits for them, the sources' positions, the backfills that
        joined."""
        engine, unsaved = self._engine, self._unsaved
        pins = {uri: engine._pin_for(uri) for uri in unsaved}
        self._behind.update(engine._behind_now())
        transaction.put(_ENGINE, _DELIVERY, engine._delivery_bytes(extra_pins=pins, behind=self._behind))
        self._put_counters(transaction)
        for uri, seq in self._observed.items():
            if uri not in unsaved and (seq != engine._outputs.observed.get(uri, -1) or self._full):
                transaction.put(_OBSERVED, uri, _counter_bytes(seq))
        # The outputs waiting for an observer function, in this transaction: the state committed with it is past
        # them, so a restart could not produce them again; written apart, a crash before this commit left rows
        # past the committed counter (which recovery had to drop).
        engine._store.outputs_in_commit(transaction, self._waiting)
        self._put_sources(transaction)
        self._put_joined(transaction)
        if self._full:
            # An idle subscription's state is its stored bytes (reaqtive.engine.idle): a full checkpoint writes
            # them again as they are, undecoded, so that it holds every state whole, as its name says.
            for uri, blob in engine._subscriptions.idle_states():
                transaction.put(STATE_CATEGORY, uri, blob)
                self._idle_written += 1

    def _put_counters(self, transaction: CheckpointTransaction) -> None:
        """While paused: the output counters that moved since the last checkpoint (every one in a full
        checkpoint), found through the dirty registry, not by looking at each; ``reported`` gets those that
        reported a move, ``moved`` those written. Each is re-armed: its next move reports again."""
        engine, full = self._engine, self._full
        dirty = engine._environment.dirty
        self._reported.update(dirty.take_moved())
        counters = engine._outputs.counters
        for uri, counter in counters.items() if full else [(uri, counters.get(uri)) for uri in sorted(self._reported)]:
            if counter is None:
                continue  # deleted since
            if uri in self._unsaved:
                dirty.note_moved(uri)  # its owner is left out of this checkpoint
                continue
            if counter.next != counter.committed or full:
                counter.pending = counter.next
                transaction.put(_OUTPUTS, uri, _counter_bytes(counter.pending))
                self._moved[uri] = counter
            counter.rearm()  # (if the checkpoint fails, take() reports it again)

    def _put_joined(self, transaction: CheckpointTransaction) -> None:
        """While paused: the record of each backfill that caught up and joined the engine says so, in the
        checkpoint that saves its state as one in step with the engine (before it, a recovery puts it back at its
        start: its state is the one saved at its creation)."""
        engine = self._engine
        for uri in sorted(engine._backfilling):
            record = engine._records.get(uri)
            if (record is None or uri in engine._scheduling.behind or uri in self._unsaved
                    or uri not in engine._subscriptions):
                continue
            changed = {**record, "backfill": {**record["backfill"], "joined": True}}
            transaction.put(_ARTIFACTS, uri, _to_bytes(changed))
            self._joined[uri] = changed

    def _put_sources(self, transaction: CheckpointTransaction) -> None:
        """While paused: each registered source's position (register_source), consistent with its stream."""
        self._sources.update(self._engine._sources.read_now())
        for name, blob in self._sources.items():
            transaction.put(_SOURCES, name, blob)

    def _committed(self, result: CheckpointResult, removed: Iterable[str]) -> None:
        """What the committed record says from now on: the states saved, the counters and cursors written, the
        position and clock the checkpoint was taken at, who stood behind the engine, the backfills that joined;
        then the subscriptions whose state could not be saved stop."""
        engine, unsaved = self._engine, self._unsaved
        engine._stored_state_keys.update(result.saved)
        engine._stored_state_keys.difference_update(removed)
        for counter in self._moved.values():
            counter.committed = counter.pending
        for uri, record in self._joined.items():
            engine._records[uri] = record
            engine._backfilling.discard(uri)
        pos = engine._positions.cursor.pos
        engine._stopped.checkpointed(Behind(pos, engine._clock_micros(), pos), self._behind, unsaved)
        engine._sources.committed(self._sources)
        engine._environment.confirm_removed(removed)
        for uri, seq in self._observed.items():
            if uri not in unsaved and seq != engine._outputs.observed.get(uri, -1):
                engine._outputs.observed[uri] = seq
                engine._store.delete_outputs(uri, upto=seq)  # delivered: the outbox's rows up to it can go
        for uri, unsaved_error in unsaved.items():
            engine._running.fault(uri, unsaved_error)
