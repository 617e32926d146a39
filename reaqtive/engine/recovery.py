"""Recovery: records, templates and state read back, every artifact re-bound under the recovery policy, delivery
positions restored, the log replayed from there.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final

from reaqtive.engine.backfill import behind_of as backfill_behind
from reaqtive.engine.counters import OutputCounter
from reaqtive.engine.database import from_micros
from reaqtive.engine.engine_errors import (
    InnerRecoveryError,
    MalformedRecordError,
    OrphanedDataError,
    RecoveryError,
    UnknownSchemaError,
)
from reaqtive.engine.expressions import (
    decode_query,
)
from reaqtive.engine.failures import ElementFailure, RecordedError, SubscriptionFailedError
from reaqtive.engine.model import (
    DISCARD_SINK,
    DURABLE_SINK,
    EngineStatus,
    RecoveryFailure,
    RecoveryMetrics,
    RecoveryPolicy,
)
from reaqtive.engine.readers import StreamReader
from reaqtive.engine.records import (
    Behind,
    DeliveryRecord,
    parse_artifact,
    parse_counter,
    parse_delivery,
    parse_template,
)
from reaqtive.engine.store_keys import ARTIFACTS, DELIVERY, ENGINE, OBSERVED, OUTPUTS, SOURCES, TEMPLATES, owned_by
from reaqtive.state import (
    STATE_CATEGORY,
    CheckpointSnapshot,
    MissingStateError,
    StateError,
)
from reaqtive.state.framing import read_blob
from reaqtive.state.host import HostedQuery

if TYPE_CHECKING:
    from reaqtive.engine.engine import Engine


class Recovery:
    """One recovery of an engine, made for it and dropped after it (see the module docstring): :meth:`load` fills
    the engine's parts from its store, and returns the metrics of what it loaded. What only recovery needs (the
    damaged counters, the durable sink's extents, the artifacts removed by the policy) lives here, not on the
    engine."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        # The parts it fills (owned by the engine, handed over here once).
        self._store = engine._store
        self._outputs = engine._outputs
        self._environment = engine._environment
        self._positions = engine._positions
        self._stopped = engine._stopped
        self._log = engine._log
        self._functions = engine.functions
        self._metrics = engine.recovery
        self._removed_at_recovery: set[str] = set()  # artifacts the policy REMOVE deleted while recovering
        self._counter_errors: dict[str, Exception] = {}  # per subscription, why its counter or cursor is unreadable
        self._output_extents: dict[str, tuple[int, int, int]] = {}  # the durable sink's rows per subscription
        # Per template and constants, the streams its subscriptions wait on idle (None: they bind now).
        self._plans: dict[tuple[str, int], tuple[str, ...] | None] = {}
        # Per template, the shape (path, operator, version per node) of a state that loaded into its tree.
        self._shapes: dict[str, list[tuple[Any, ...]]] = {}

    def load(self) -> RecoveryMetrics:
        """Read the store back into the engine; the metrics of what was recovered (also ``engine.recovery``)."""
        self._recover()
        return self._metrics

    def _recover(self) -> None:
        phases = self._metrics.phases
        started = time.perf_counter()
        snapshot = self._store.checkpoints.read(strict=False)
        state = dict(snapshot.items(STATE_CATEGORY))
        damaged: dict[str, dict[str, Exception]] = {
            category: {} for category in (ARTIFACTS, TEMPLATES, STATE_CATEGORY, OUTPUTS, OBSERVED, ENGINE)
        }
        for (category, key), error in snapshot.damaged.items():
            damaged.setdefault(category, {})[key] = error
        self._engine._checkpointing.note_stored(set(state) | set(damaged[STATE_CATEGORY]))
        # The sources' positions, read back by each source (register_source); a damaged one raises there.
        self._engine._sources.committed({**dict(snapshot.items(SOURCES)), **damaged.get(SOURCES, {})})
        records = self._read_records(snapshot, damaged[ARTIFACTS])
        template_errors = self._read_templates(snapshot, damaged[TEMPLATES])
        phases["read"] = time.perf_counter() - started

        mark = time.perf_counter()
        self._recover_definitions(records)
        phases["definitions_and_streams"] = time.perf_counter() - mark

        mark = time.perf_counter()
        self._environment.restore({key: blob for key, blob in state.items()
                                   if key not in records and not owned_by(key, self._removed_at_recovery)})
        self._restore_delivery(snapshot, records, damaged[ENGINE], {**damaged[OUTPUTS], **damaged[OBSERVED]})
        self._output_extents = self._store.output_extents()
        for uri, record in sorted(records.items()):
            if record["kind"] != "subscription":
                continue
            self._engine._records[uri] = record
            if backfill_behind(record) is not None:
                self._engine._checkpointing.backfill_started(uri)
            if "failed" in record:
                self._keep_failed(uri, record)
                continue
            try:
                hosted = self._recover_subscription(uri, record, state.get(uri), damaged[STATE_CATEGORY],
                                                    template_errors)
                if hosted is not None:  # (else it waits idle: reaqtive.engine.idle)
                    self._engine._subscriptions[uri] = hosted
                self._metrics.subscriptions += 1
            except Exception as error:  # one artifact's failure must not stop the others
                self._recovery_failed(uri, record["kind"], error)
        self._metrics.inner_subscriptions = len(self._environment.inner_subscriptions())
        self._recover_orphans(damaged[STATE_CATEGORY])
        self._pin_broken()
        self._fall_behind_where_readers_lag()
        extents = self._store.ingress_extents()
        self._engine._checkpointing.measured(extents)
        if self._engine._clock_mode == "event":  # with the wall clock, a replay may legitimately differ
            highest = self._store.max_output_seqs()
            self._outputs.replayed_upto = {
                uri: highest[uri] for uri, record in records.items()
                if uri in self._engine._subscriptions and record["observer"] == DURABLE_SINK and uri in highest
            }
        else:
            self._drop_provisional_outputs(records)
        phases["subscriptions"] = time.perf_counter() - mark

        phases["total"] = time.perf_counter() - started
        self._engine._status = EngineStatus.RUNNING
        self._engine._settle_status()
        if records:
            self._log.info(
                "recovered %d streams, %d definitions, %d subscriptions (%d inner) in %.1f ms; %d failed",
                self._metrics.streams, self._metrics.definitions, self._metrics.subscriptions,
                self._metrics.inner_subscriptions, phases["total"] * 1e3, len(self._metrics.failures),
                extra={"reaqtive_event": "recovery", "streams": self._metrics.streams,
                       "definitions": self._metrics.definitions, "subscriptions": self._metrics.subscriptions,
                       "inner_subscriptions": self._metrics.inner_subscriptions,
                       "failures": len(self._metrics.failures), "orphans": len(self._metrics.orphans),
                       "duration_seconds": phases["total"]},
            )

    def _read_records(self, snapshot: CheckpointSnapshot, damaged: dict[str, Exception]) -> dict[str, dict[str, Any]]:
        """Every artifact record that parses; each one that does not goes through the policy (kind unknown), and
        so does one of a kind that holds another kind's fields (a subscription's record rewritten as a stream's
        would otherwise open as a stream, its state and outputs belonging to nothing)."""
        records: dict[str, dict[str, Any]] = {}
        for key, error in damaged.items():
            self._recovery_failed(key, "unknown", error)
        shared: dict[str, Any] = {}  # equal parts of records are one object (see parse_artifact)
        for key, blob in snapshot.items(ARTIFACTS):
            try:
                record = parse_artifact(key, blob, shared)
                _check_kind_fields(key, record)
            except MalformedRecordError as error:
                self._recovery_failed(key, "unknown", error)
                continue
            records[key] = record
        return records

    def _read_templates(self, snapshot: CheckpointSnapshot, damaged: dict[str, Exception]) -> dict[str, Exception]:
        """The stored query templates; returns why each unreadable one is unreadable (its queries fail)."""
        errors: dict[str, Exception] = dict(damaged)
        self._engine._records.templates.clear()
        for key, blob in snapshot.items(TEMPLATES):
            try:
                self._engine._records.templates[key] = parse_template(key, blob)
            except MalformedRecordError as error:
                errors[key] = error
        return errors

    def _recover_definitions(self, records: dict[str, dict[str, Any]]) -> None:
        """Streams, then the observable and observer definitions (decoded now, so that a definition naming a
        function the host does not provide fails here, under the policy, before any query uses it).

        A typed stream whose validator the host did not register fails under the policy too. KEEP keeps it open,
        unlike other artifacts: its queries read it and its log is delivered (nothing is pinned), only appends to
        it are refused until the host registers the validator, and the engine is DEGRADED meanwhile (the failure
        is in ``recovery.failures`` and the log). REMOVE deletes the stream (then its queries fail to bind)."""
        for uri, record in records.items():
            kind = record["kind"]
            if kind == "stream":
                name = record.get("schema")
                if name is not None:
                    problem: Exception | None = None
                    if not isinstance(name, str) or not name:
                        problem = MalformedRecordError(f"the record of stream {uri!r}: its schema is {name!r}, not "
                                                       "a validator's name (the row was altered)")
                    elif self._functions.schema(name) is None:
                        problem = UnknownSchemaError(
                            f"stream {uri!r} is validated by schema {name!r}, which is not registered (register "
                            f"it before the engine opens: Engine(schemas={{{name!r}: validator}}) or "
                            "FunctionRegistry.register_schema)", stream=uri, schema=name)
                    if problem is not None:
                        if self._recovery_failed(uri, kind, problem) is RecoveryPolicy.REMOVE:
                            continue
                        self._stopped.kept.discard(uri)  # KEEP: open and delivered, not pinned (see above)
                        self._stopped.schemas_missing.add(uri)  # DEGRADED until its validator is registered
                self._engine._records[uri] = record
                self._engine._registry.open_stream(uri)
                self._metrics.streams += 1
        for uri, record in records.items():
            kind = record["kind"]
            if kind not in ("observable", "observer"):
                continue
            self._engine._records[uri] = record
            try:
                if kind == "observable":
                    decode_query(record["expression"], self._functions)
                else:
                    self._engine._egress.observer_function(uri, record)
                self._metrics.definitions += 1
            except Exception as error:
                self._recovery_failed(uri, kind, error)

    def _recover_subscription(
        self,
        uri: str,
        record: dict[str, Any],
        blob: bytes | None,
        damaged_state: dict[str, Exception],
        template_errors: dict[str, Exception],
    ) -> HostedQuery | None:
        """Bind one stored subscription with its state, or leave it idle until its streams have an event for it
        (``None``: see reaqtive.engine.idle); raises why it cannot recover, for the policy."""
        prefix = uri + "/"
        for key, error in sorted(damaged_state.items()):  # its own blob, or one of its inner units' blobs
            if key == uri:
                raise error
            if key.startswith(prefix):
                raise InnerRecoveryError(key, error)
        template_id = record["template"]
        if template_id in template_errors:
            raise template_errors[template_id]
        template = self._engine._records.templates.get(template_id)
        if template is None:
            raise MissingStateError(f"subscription {uri!r}: its query template {template_id} is not in the store")
        if blob is None:  # saved when it was created, in the transaction that stored its record
            raise MissingStateError(f"subscription {uri!r}: its state is not in the store")
        counter_error = self._counter_errors.get(uri)
        if counter_error is not None:
            raise counter_error
        if uri not in self._outputs.counters:
            raise MissingStateError(f"subscription {uri!r}: its output counter is not in the store")
        self._check_outputs_kept(uri, record)
        self._drop_provisional_outbox(uri, record)
        for stream, seq in record.get("start", {}).items():
            if seq >= self._positions.heads.get(stream, 0):
                raise MalformedRecordError(f"the record of {uri!r} starts after #{seq} of {stream!r}, but only "
                                           f"{self._positions.heads.get(stream, 0)} events were ever appended to it")
        if not self._environment.is_given_position(record.get("start_pos", -1)):
            raise MalformedRecordError(f"the record of {uri!r} starts after log position {record['start_pos']}, "
                                       f"past the last one ever given ({self._store.last_position()})")
        streams = self._engine._running.idle_streams(uri, record, template, self._plans)
        shape = None if streams is None else _shape(blob, f"state of {uri!r}")  # a malformed blob fails now
        if streams is not None and shape is not None and self._shapes.get(template_id) == shape:
            self._engine._subscriptions.wait(uri, blob, streams)
            self._metrics.idle_subscriptions += 1
            return None
        handle = self._engine._running.bind(uri, record, template, blob)
        inner_failures = self._environment.take_load_failures(uri)
        ended = self._engine._running.ended(uri)
        if inner_failures or isinstance(ended, StateError):
            # An inner unit failed to load while the query started: the query turned it into its own on_error,
            # but it is a recovery failure of the query, for the policy (never a silent end).
            handle.abandon()
            self._engine._running.forget_ended(uri)
            self._outputs.drop_buffered(uri)
            if inner_failures:
                inner_id, error = min(inner_failures.items())
                raise InnerRecoveryError(inner_id, error)
            assert ended is not None
            raise ended
        if shape is not None:
            # Its state loaded into this template's tree: the next ones of the same shape may wait idle, their
            # blobs checked against it (framing, checksum, operators, versions) without a tree of their own.
            self._shapes.setdefault(template_id, shape)
        return handle

    def _check_outputs_kept(self, uri: str, record: dict[str, Any]) -> None:
        """The store keeps every output of a subscription its consumers may still need: in the durable sink from
        the first one not acknowledged on (for an observer function, in its outbox there, from the first one it
        did not receive). That is every output up to the committed counter's (#counter-1: the sink got each one
        before the checkpoint that produced it committed) and, for the durable sink with the event clock, every
        later one it holds (a replay never writes below the sink's highest output, so it cannot fill a hole).
        A hole, a missing head or a missing tail means rows were deleted or lost, or the counter is ahead of the
        sink: it must not go unnoticed. (A damaged acknowledgement raises: the policy decides.)"""
        observer = record["observer"]
        if observer == DISCARD_SINK:
            return
        durable = observer == DURABLE_SINK
        first = (self._store.acked(uri) if durable else self._outputs.observed.get(uri, -1)) + 1
        committed = self._outputs.counters[uri].next
        # Beyond the counter the sink holds provisional outputs: with the wall clock recovery drops them, and an
        # outbox gets only what still waits at a checkpoint (outputs delivered in between are never written).
        whole = durable and self._engine._clock_mode == "event"
        extent = self._output_extents.get(uri)
        runs: list[tuple[int, int]] = []
        if extent is not None:
            count, low, high = extent
            runs = [(low, high)] if count == high - low + 1 else self._store.output_runs(uri, after=first - 1)
        gaps = _missing_outputs(runs, first, committed, whole)
        if gaps:
            where = "the durable sink" if durable else f"its outbox in the store (for observer {observer!r})"
            since = "acknowledged" if durable else "received by its observer"
            missing = ", ".join(f"#{low}" if low == high else f"#{low} to #{high}" for low, high in gaps)
            raise MissingStateError(
                f"subscription {uri!r}: outputs {missing} are missing from {where}, which must hold every output "
                f"from #{first} (the first not {since}) up to #{committed - 1} (its committed output counter is "
                f"{committed}){' and every later one it got' if whole else ''}: rows were deleted or lost, or the "
                "counter is ahead of the sink"
            )

    def _recover_orphans(self, damaged_state: dict[str, Exception]) -> None:
        """Stored data that belongs to no subscription (an orphan): a state no recovered query re-created and no
        subscription owns (also one stored under a stream's or a definition's URI), and an output counter, an
        observer cursor, durable-sink rows or an acknowledgement under a URI that is no subscription's. A sign of
        damage (a record lost or rewritten as another kind) or of a deletion that did not complete, so each key
        goes through the policy: FAIL refuses the open, KEEP keeps every byte (the engine is DEGRADED), REMOVE
        deletes it. What belongs to an artifact kept without running stays as it is, and no query created later
        under its ids may load it."""
        owners = {uri for uri, record in self._engine._records.items() if record["kind"] == "subscription"}
        owners |= self._stopped.kept | self._removed_at_recovery
        for uri in self._removed_at_recovery:  # deleted from the store: a checkpoint must not write them back
            self._outputs.counters.pop(uri, None)
            self._outputs.observed.pop(uri, None)
            self._counter_errors.pop(uri, None)
        restored = self._environment.unclaimed_inner_ids()
        self._environment.discard_saved([key for key in restored if self._owned_by_broken(key)], delete=False)
        found: dict[str, list[str]] = {}
        for key in restored:
            if not self._owned_by_broken(key):
                found.setdefault(key, []).append("a state")
        for key in sorted(self._engine._checkpointing.stored_keys | set(damaged_state)):
            if not owned_by(key, owners) and key not in found:
                found.setdefault(key, []).append("a damaged state" if key in damaged_state else "a state")
        states = set(found)  # keys with a stored state (the rest: rows of the durable sink's side only)
        outputs = self._outputs
        for what, keys in (("an output counter", outputs.counters), ("an observer cursor", outputs.observed),
                           ("a damaged output counter or observer cursor", self._counter_errors),
                           ("an acknowledgement", self._store.acknowledged())):
            for key in sorted(keys):
                if key not in owners:
                    found.setdefault(key, []).append(what)
        for key, (count, low, high) in sorted(self._output_extents.items()):
            if key not in owners:
                found.setdefault(key, []).append(f"{count} output(s) in the durable sink (#{low} to #{high})")
        orphans: list[str] = []
        rows_removed: list[str] = []
        for key in sorted(found):
            rows = len(found[key]) > (1 if key in states else 0)  # more than its state
            policy = self._recovery_failed(key, "orphan" if rows else "state", OrphanedDataError(key, found[key]),
                                           orphan=True)
            remove = policy is RecoveryPolicy.REMOVE
            if key in states:  # REMOVE deletes it at the next checkpoint; otherwise it stays stored
                self._environment.discard_saved([key], delete=remove)
            if rows:
                # Out of the engine's memory whatever the policy: a subscription created later under this URI
                # starts its own (numbering at #0), and trimming leaves the kept rows as they are.
                self._outputs.counters.pop(key, None)
                self._outputs.observed.pop(key, None)
                self._counter_errors.pop(key, None)
                self._store.keep_outputs(key)
                if remove:
                    rows_removed.append(key)
            if remove:
                orphans.append(key)
        if rows_removed:  # one transaction: the counters and cursors with the sink's rows and acknowledgements
            self._store.commit_with_outputs(
                deletes=[(category, key) for key in rows_removed for category in (OUTPUTS, OBSERVED)],
                forget=rows_removed,
            )
        self._metrics.orphans = orphans

    def _restore_delivery(
        self,
        snapshot: CheckpointSnapshot,
        records: dict[str, dict[str, Any]],
        damaged_engine: dict[str, Exception],
        damaged_counters: dict[str, Exception],
    ) -> None:
        """The delivery record (replay position, watermarks, clock) and the output counters. The delivery record
        concerns every query, so a damaged or missing one refuses the open, whatever the policy."""
        if DELIVERY in damaged_engine:
            raise RecoveryError(f"{ENGINE}/{DELIVERY}", damaged_engine[DELIVERY])
        blob = snapshot.get(ENGINE, DELIVERY)
        has_queries = any(record["kind"] == "subscription" for record in records.values())
        if blob is None:
            if has_queries or snapshot.keys(STATE_CATEGORY):
                raise RecoveryError(f"{ENGINE}/{DELIVERY}", MissingStateError(
                    "the delivery record is missing from a store that holds queries: their replay position is "
                    "unknown"))
            delivery = DeliveryRecord(delivered_at={})
            self._engine._commit_changes(puts=[(ENGINE, DELIVERY, self._engine._checkpointing.delivery_bytes())])
        else:
            try:
                delivery = parse_delivery(blob)
            except MalformedRecordError as error:
                raise RecoveryError(f"{ENGINE}/{DELIVERY}", error) from error
        self._positions.refresh_heads()
        self._check_delivery(delivery)
        self._positions.restore(delivery.pos, delivery.delivered, delivery.delivered_at)
        if delivery.delivered_at is None:
            self._restore_legacy_delivery(delivery)
        self._stopped.committed = Behind(delivery.pos, delivery.now, delivery.pos)
        self._stopped.stood_behind = {uri: self._legacy_behind(entry) for uri, entry in delivery.behind.items()}
        self._stopped.pins.update({uri: self._legacy_behind(entry) for uri, entry in delivery.pinned.items()})
        self._counter_errors = dict(damaged_counters)
        for key, counter_blob in snapshot.items(OUTPUTS):
            try:
                committed = parse_counter(key, counter_blob)
            except MalformedRecordError as error:
                self._counter_errors[key] = error
                continue
            self._outputs.counters[key] = OutputCounter(committed, committed)
        for key, cursor_blob in snapshot.items(OBSERVED):
            try:
                self._outputs.observed[key] = parse_counter(key, cursor_blob, what="observer cursor", minimum=-1)
            except MalformedRecordError as error:
                self._counter_errors[key] = error
        if delivery.now is not None:  # before any query is bound: timers and windows resume on the checkpoint's clock
            self._engine._delivery.start_clock(from_micros(delivery.now))
            # The moves without an event the queries that stood behind replay as they catch up.
            self._engine._scheduling.restore_clock_moves(delivery.clock_moves)
        else:  # no checkpoint yet: the clock of the earliest query's creation (its state was saved then)
            clocks = [int(r["clock"]) for r in records.values() if r.get("kind") == "subscription" and "clock" in r]
            if clocks:
                self._engine._delivery.start_clock(from_micros(min(clocks)))

    def _check_delivery(self, delivery: DeliveryRecord) -> None:
        """The delivery record cannot be past what was appended (a forged or damaged one would make every
        query skip events)."""
        for stream, seq in delivery.delivered.items():
            if seq >= self._positions.heads.get(stream, 0):
                raise RecoveryError(f"{ENGINE}/{DELIVERY}", MalformedRecordError(
                    f"the delivery record says #{seq} of {stream!r} was delivered, but only "
                    f"{self._positions.heads.get(stream, 0)} events were ever appended to it"))
        if delivery.pos > self._store.last_position():
            raise RecoveryError(f"{ENGINE}/{DELIVERY}", MalformedRecordError(
                f"the delivery record's log position {delivery.pos} is past the last event ever appended"))
        # Nothing stands past the engine's position, nor runs on a clock ahead of its own: a position forged
        # ahead would make a query skip the events up to it.
        for stream, pos in (delivery.delivered_at or {}).items():
            if pos > delivery.pos:
                raise RecoveryError(f"{ENGINE}/{DELIVERY}", MalformedRecordError(
                    f"the delivery record says the last event of {stream!r} delivered is at log position {pos}, "
                    f"past the position delivered up to, {delivery.pos}"))
        for uri, entry in [*delivery.behind.items(), *delivery.pinned.items()]:
            if entry.pos > delivery.pos or entry.floor > delivery.pos or (
                    entry.clock is not None and delivery.now is not None and entry.clock > delivery.now):
                raise RecoveryError(f"{ENGINE}/{DELIVERY}", MalformedRecordError(
                    f"the delivery record says {uri!r} stands at log position {entry.pos} (floor {entry.floor}, "
                    f"clock {entry.clock}), ahead of the engine (position {delivery.pos}, clock {delivery.now})"))

    def _pin_broken(self) -> None:
        """Pin each artifact kept without running. Its stored state says "caught up" relative to the checkpoint it
        was saved in, and later checkpoints move the delivered watermarks on without it; the pin goes into every
        delivery record while it is kept, holds the ingress log back for it, and tells its readers where to
        resume once it recovers."""
        for uri in self._stopped.kept | self._stopped.orphans:
            if uri not in self._stopped.pins:
                self._stopped.pins[uri] = self._engine._checkpointing.pin_for(uri)

    def _owned_by_broken(self, key: str) -> bool:
        """Whether a state key belongs to an artifact kept without running (its state must stay)."""
        return owned_by(key, self._stopped.kept)

    def _drop_provisional_outbox(self, uri: str, record: dict[str, Any]) -> None:
        """An outbox's rows numbered from the committed counter on were written by a checkpoint that never
        committed (its outputs are written just before its commit): provisional. The replay produces them again,
        with the same numbers, and the outbox queues them again; restored beside the replay they would stand in
        for outputs the replay must queue (the outbox keeps numbers above the highest it holds), and the next
        checkpoint would commit a counter over a hole."""
        if record["observer"] in (DURABLE_SINK, DISCARD_SINK) or self._stopped.stood(uri) is not None:
            return  # a query stopped or behind at that checkpoint keeps what it stored beside its pinned counter
        committed = self._outputs.counters[uri].next
        dropped = self._store.drop_provisional_outputs(uri, committed)
        if dropped:
            self._log.info("subscription %r: %d provisional output(s) from #%d dropped from its outbox (written by "
                           "a checkpoint that did not commit; the replay produces them again)", uri, dropped,
                           committed, extra={"reaqtive_event": "provisional_outputs_dropped", "subscription": uri,
                                             "outputs": dropped, "seq": committed})

    def _drop_provisional_outputs(self, records: dict[str, dict[str, Any]]) -> None:
        """With the wall clock, outputs the durable sink got after the last checkpoint are provisional: the
        replay cuts time windows at the recovery's time, so it may compute them otherwise, and keeping the first
        version beside the replay's would count an event in two windows. The sink drops them and takes the
        replay's (same ids from the checkpoint's counter on): it always holds what the committed state produced."""
        for uri, record in records.items():
            counter = self._outputs.counters.get(uri)
            if uri not in self._engine._subscriptions or record["observer"] != DURABLE_SINK or counter is None:
                continue
            dropped = self._store.drop_provisional_outputs(uri, counter.next)
            if dropped:
                self._log.info("subscription %r: %d provisional output(s) after #%d dropped (wall clock: the "
                               "replay computes them again)", uri, dropped, counter.next - 1,
                               extra={"reaqtive_event": "provisional_outputs_dropped", "subscription": uri,
                                      "outputs": dropped, "seq": counter.next})

    def _keep_failed(self, uri: str, record: dict[str, Any]) -> None:
        """A subscription that FAILED (its error policy stopped it) stays failed across restarts, visibly, until
        restart_subscription: kept stored without running, pinned where its last checkpoint left it."""
        detail = record["failed"]
        error = RecordedError(detail["error_type"], detail["message"])
        failure = None
        if detail.get("unit") is not None:
            failure = ElementFailure(uri, detail["unit"], detail.get("operator") or "?", detail.get("path") or "?",
                                     detail["pos"], detail["error_type"], detail["message"],
                                     detail.get("traceback") or "")
        failed = SubscriptionFailedError(uri, error, failure, detail["pos"])
        self._stopped.failed[uri] = failed
        self._stopped.kept.add(uri)
        self._engine._running.record_fault(RecoveryFailure(uri, "subscription", failed, RecoveryPolicy.KEEP))
        self._log.error("%s; FAILED since %s, until restart_subscription", failed, detail["at"],
                        extra={"reaqtive_event": "subscription_failed", "subscription": uri,
                               "error_type": detail["error_type"], "pos": detail["pos"], "unit": detail.get("unit"),
                               "operator": detail.get("operator"), "path": detail.get("path")})

    def _restore_legacy_delivery(self, delivery: DeliveryRecord) -> None:
        """A delivery record written before log positions: the position of each stream's last delivered event
        from the log (one the log lost is below every reader, since truncation respected them all), and what
        "caught up" meant in sequence numbers, for the readers' state of that time."""
        delivered_at = self._positions.delivered_at
        for stream, seq in delivery.delivered.items():
            at = self._store.position_after(stream, seq - 1)
            delivered_at[stream] = at if at is not None and self._store.seq_at_position(stream, at) == seq else -1
        self._engine._legacy_caught_up = dict(delivery.delivered)
        # A checkpoint taken while an older release replayed the log for a lagging reader stood before what was
        # delivered: the engine goes on from there, and the lagging reader catches up on its own.
        self._positions.cursor.pos = max([self._positions.cursor.pos, *self._positions.delivered_at.values()])

    def _legacy_behind(self, entry: Behind) -> Behind:
        """A pin written before log positions (its position unknown): its readers' state says where they stand in
        sequence numbers (``legacy``); it catches up from the oldest event retained, and holds the log from there."""
        if entry.pos >= 0:
            return entry
        first = self._engine._checkpointing.first_retained_position() - 1
        return Behind(first, entry.clock, first, entry.legacy)

    def _fall_behind_where_readers_lag(self) -> None:
        """A query with a reader that lagged behind its stream at the checkpoint (its query withheld demand) is
        behind the engine: it catches up from that reader's watermark, on its own timeline (at the engine's clock:
        those events had reached it, in its stream's buffer, before the checkpoint), while the others go on. The
        engine's own position never moves back."""
        lagging: set[str] = set()
        delivered = self._positions.delivered_at
        for node, _ in self._environment.dirty.watched():
            if isinstance(node, StreamReader) and not node.is_disposed and node.watermark < delivered.get(node.uri, -1):
                owner = self._environment.lag_of(node.context.instance_id)
                if owner is None:
                    uri = node.context.instance_id
                    running = uri in self._engine._subscriptions
                    lagging.add(uri if running else self._engine._records.subscription_nested_with(uri) or uri)
        for uri in sorted(lagging):
            if uri in self._engine._subscriptions:
                self._engine._scheduling.fall_behind(uri)
        for lag in self._engine._scheduling.behind.values():
            lag.rewind_for_lagging(delivered)

    def _recovery_failed(self, uri: str, kind: str, error: Exception, *, orphan: bool = False) -> RecoveryPolicy:
        """Apply the recovery policy to an artifact (or an orphan) that failed to recover. Under KEEP nothing of
        it is deleted, ever: it stays stored, not running, with the input it may need. (What an orphan's REMOVE
        deletes is its caller's, _recover_orphans.)"""
        policy = self._engine._policy
        if self._engine._on_failure is not None:
            chosen = self._engine._on_failure(uri, error)
            policy = chosen if chosen is not None else policy
        if policy is RecoveryPolicy.FAIL:
            raise RecoveryError(uri, error) from error  # raised, not logged: the caller has it
        self._log.error("recovering %r failed (%s): %s", uri, policy.value, error, exc_info=error,
                        extra={"reaqtive_event": "recovery_failed", "artifact": uri, "kind": kind,
                               "policy": policy.value, "error_type": type(error).__name__})
        self._metrics.failures.append(RecoveryFailure(uri, kind, error, policy))
        if orphan:
            if policy is not RecoveryPolicy.REMOVE:
                self._stopped.orphans.add(uri)  # pinned like a kept artifact: it may be a query's, restored later
            return policy
        self._environment.abandon(uri)
        self._engine._scheduling.drop_behind(uri)  # bound behind the engine, then refused: it does not catch up
        if policy is RecoveryPolicy.REMOVE:
            self._removed_at_recovery.add(uri)
            self._environment.discard_saved(
                [key for key in self._environment.unclaimed_inner_ids() if owned_by(key, {uri})], delete=False
            )
            # With its outputs and acknowledgement, in one transaction: none of it may be left behind as orphans.
            self._store.commit_with_outputs(
                deletes=[(ARTIFACTS, uri), (OUTPUTS, uri), (OBSERVED, uri),
                         *self._engine._registry.stored_state_of(uri)],
                forget=[uri],
            )
            self._engine._records.pop(uri, None)
            self._outputs.counters.pop(uri, None)
            self._outputs.observed.pop(uri, None)
        else:
            self._stopped.kept.add(uri)
        return policy



def _shape(blob: bytes, where: str) -> list[tuple[Any, ...]]:
    """What loading ``blob`` checks before the operators read their fields: its framing and checksum (raised as
    binding raises them), and per node its path, operator and version."""
    return [(node.path, node.name, node.version) for node in read_blob(blob, where=where)]


# Fields only one kind of artifact record has: a record of another kind that holds them was rewritten.
_KIND_FIELDS: Final = {"subscription": ("template", "constants", "observer"), "observable": ("expression",),
                       "observer": ("function",)}


def _check_kind_fields(uri: str, record: dict[str, Any]) -> None:
    kind = record["kind"]
    for other, fields in _KIND_FIELDS.items():
        held = [name for name in fields if name in record]
        if other != kind and held:
            raise MalformedRecordError(
                f"the record of artifact {uri!r} says it is a {kind} but holds the fields of a {other} "
                f"({', '.join(held)}): it was damaged or rewritten"
            )


def _missing_outputs(runs: list[tuple[int, int]], first: int, committed: int, whole: bool) -> list[tuple[int, int]]:
    """The ranges of output numbers missing from ``runs`` (the ``(first, last)`` of each stored row, in order)
    that must be there: from ``first`` up to ``committed - 1``, and with ``whole`` up to the highest stored."""
    last = committed - 1
    if whole and runs:
        last = max(last, runs[-1][1])  # runs are in order
    gaps: list[tuple[int, int]] = []
    expected = first
    for low, high in runs:
        if high < expected:
            continue
        if low > last:
            break
        if low > expected:
            gaps.append((expected, low - 1))
        expected = high + 1
    if expected <= last:
        gaps.append((expected, last))
    return gaps
