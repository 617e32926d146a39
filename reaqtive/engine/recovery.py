"""Recovery: records, templates and state read back, every artifact re-bound under the recovery policy, delivery
positions restored, the log replayed from there.
"""

from __future__ import annotations

import time
from typing import Any

from reaqtive.engine._room import (
    _ARTIFACTS,
    _DELIVERY,
    _ENGINE,
    _OBSERVED,
    _OUTPUTS,
    _SOURCES,
    _TEMPLATES,
    EngineRoom,
    _owned_by,
)
from reaqtive.engine.database import from_micros
from reaqtive.engine.egress import OutputCounter
from reaqtive.engine.engine_errors import (
    InnerRecoveryError,
    MalformedRecordError,
    RecoveryError,
)
from reaqtive.engine.expressions import (
    decode_query,
)
from reaqtive.engine.model import (
    DISCARD_SINK,
    DURABLE_SINK,
    EngineStatus,
    RecoveryFailure,
    RecoveryPolicy,
)
from reaqtive.engine.records import (
    DeliveryRecord,
    parse_artifact,
    parse_counter,
    parse_delivery,
    parse_template,
)
from reaqtive.state import (
    STATE_CATEGORY,
    CheckpointSnapshot,
    MissingStateError,
    StateError,
)
from reaqtive.state.host import HostedQuery


class Recovery(EngineRoom):
    """See the module docstring."""

    def _recover(self) -> None:
        phases = self.recovery.phases
        started = time.perf_counter()
        snapshot = self._store.checkpoints.read(strict=False)
        state = dict(snapshot.items(STATE_CATEGORY))
        damaged: dict[str, dict[str, Exception]] = {
            category: {} for category in (_ARTIFACTS, _TEMPLATES, STATE_CATEGORY, _OUTPUTS, _OBSERVED, _ENGINE)
        }
        for (category, key), error in snapshot.damaged.items():
            damaged.setdefault(category, {})[key] = error
        self._stored_state_keys = set(state) | set(damaged[STATE_CATEGORY])
        # The sources' positions, read back by each source (register_source); a damaged one raises there.
        self._source_states = {**dict(snapshot.items(_SOURCES)), **damaged.get(_SOURCES, {})}
        records = self._read_records(snapshot, damaged[_ARTIFACTS])
        template_errors = self._read_templates(snapshot, damaged[_TEMPLATES])
        phases["read"] = time.perf_counter() - started

        mark = time.perf_counter()
        self._recover_definitions(records)
        phases["definitions_and_streams"] = time.perf_counter() - mark

        mark = time.perf_counter()
        self._environment.restore({key: blob for key, blob in state.items()
                                   if key not in records and not _owned_by(key, self._removed_at_recovery)})
        self._restore_delivery(snapshot, records, damaged[_ENGINE], {**damaged[_OUTPUTS], **damaged[_OBSERVED]})
        self._output_extents = self._store.output_extents()
        for uri, record in sorted(records.items()):
            if record["kind"] != "subscription":
                continue
            self._records[uri] = record
            try:
                self._subscriptions[uri] = self._recover_subscription(
                    uri, record, state.get(uri), damaged[STATE_CATEGORY], template_errors
                )
                self.recovery.subscriptions += 1
            except Exception as error:  # one artifact's failure must not stop the others
                self._recovery_failed(uri, record["kind"], error)
        self.recovery.inner_subscriptions = len(self._environment.inner_subscriptions())
        self._recover_orphans(damaged[STATE_CATEGORY])
        self._pin_broken()
        if self._clock_mode == "event":  # with the wall clock, a replay may legitimately differ
            highest = self._store.max_output_seqs()
            self._replayed_upto = {
                uri: highest[uri] for uri, record in records.items()
                if uri in self._subscriptions and record["observer"] == DURABLE_SINK and uri in highest
            }
        else:
            self._drop_provisional_outputs(records)
        self._rewind_for_lagging_readers()
        phases["subscriptions"] = time.perf_counter() - mark

        phases["total"] = time.perf_counter() - started
        self._status = EngineStatus.RUNNING
        self._settle_status()
        if records:
            self._log.info(
                "recovered %d streams, %d definitions, %d subscriptions (%d inner) in %.1f ms; %d failed",
                self.recovery.streams, self.recovery.definitions, self.recovery.subscriptions,
                self.recovery.inner_subscriptions, phases["total"] * 1e3, len(self.recovery.failures),
                extra={"reaqtive_event": "recovery", "streams": self.recovery.streams,
                       "definitions": self.recovery.definitions, "subscriptions": self.recovery.subscriptions,
                       "inner_subscriptions": self.recovery.inner_subscriptions,
                       "failures": len(self.recovery.failures), "orphans": len(self.recovery.orphans),
                       "duration_seconds": phases["total"]},
            )

    def _read_records(self, snapshot: CheckpointSnapshot, damaged: dict[str, Exception]) -> dict[str, dict[str, Any]]:
        """Every artifact record that parses; each one that does not goes through the policy (kind unknown)."""
        records: dict[str, dict[str, Any]] = {}
        for key, error in damaged.items():
            self._recovery_failed(key, "unknown", error)
        for key, blob in snapshot.items(_ARTIFACTS):
            try:
                records[key] = parse_artifact(key, blob)
            except MalformedRecordError as error:
                self._recovery_failed(key, "unknown", error)
        return records

    def _read_templates(self, snapshot: CheckpointSnapshot, damaged: dict[str, Exception]) -> dict[str, Exception]:
        """The stored query templates; returns why each unreadable one is unreadable (its queries fail)."""
        errors: dict[str, Exception] = dict(damaged)
        self._templates = {}
        for key, blob in snapshot.items(_TEMPLATES):
            try:
                self._templates[key] = parse_template(key, blob)
            except MalformedRecordError as error:
                errors[key] = error
        return errors

    def _recover_definitions(self, records: dict[str, dict[str, Any]]) -> None:
        """Streams, then the observable and observer definitions (decoded now, so that a definition naming a
        function the host does not provide fails here, under the policy, before any query uses it)."""
        for uri, record in records.items():
            kind = record["kind"]
            if kind == "stream":
                self._records[uri] = record
                self._open_stream(uri)
                self.recovery.streams += 1
        for uri, record in records.items():
            kind = record["kind"]
            if kind not in ("observable", "observer"):
                continue
            self._records[uri] = record
            try:
                if kind == "observable":
                    decode_query(record["expression"], self.functions)
                else:
                    self._observer_function(uri, record)
                self.recovery.definitions += 1
            except Exception as error:
                self._recovery_failed(uri, kind, error)

    def _recover_subscription(
        self,
        uri: str,
        record: dict[str, Any],
        blob: bytes | None,
        damaged_state: dict[str, Exception],
        template_errors: dict[str, Exception],
    ) -> HostedQuery:
        """Bind one stored subscription with its state; raises why it cannot recover, for the policy."""
        prefix = uri + "/"
        for key, error in sorted(damaged_state.items()):  # its own blob, or one of its inner units' blobs
            if key == uri:
                raise error
            if key.startswith(prefix):
                raise InnerRecoveryError(key, error)
        template_id = record["template"]
        if template_id in template_errors:
            raise template_errors[template_id]
        template = self._templates.get(template_id)
        if template is None:
            raise MissingStateError(f"subscription {uri!r}: its query template {template_id} is not in the store")
        if blob is None:  # saved when it was created, in the transaction that stored its record
            raise MissingStateError(f"subscription {uri!r}: its state is not in the store")
        counter_error = self._counter_errors.get(uri)
        if counter_error is not None:
            raise counter_error
        if uri not in self._counters:
            raise MissingStateError(f"subscription {uri!r}: its output counter is not in the store")
        self._check_outputs_kept(uri, record)
        for stream, seq in record.get("start", {}).items():
            if seq >= self._heads.get(stream, 0):
                raise MalformedRecordError(f"the record of {uri!r} starts after #{seq} of {stream!r}, but only "
                                           f"{self._heads.get(stream, 0)} events were ever appended to it")
        handle = self._bind(uri, record, template, blob)
        inner_failures = self._environment.take_load_failures(uri)
        ended = self._ended.get(uri)
        if inner_failures or isinstance(ended, StateError):
            # An inner unit failed to load while the query started: the query turned it into its own on_error,
            # but it is a recovery failure of the query, for the policy (never a silent end).
            handle.abandon()
            self._ended.pop(uri, None)
            self._egress[:] = [row for row in self._egress if row[0] != uri]
            if inner_failures:
                inner_id, error = min(inner_failures.items())
                raise InnerRecoveryError(inner_id, error)
            assert ended is not None
            raise ended
        return handle

    def _check_outputs_kept(self, uri: str, record: dict[str, Any]) -> None:
        """The durable sink keeps every output of a subscription from #0, or from its acknowledgement on (an
        observer's outbox, those after its cursor): a hole below what was committed means rows were deleted or
        lost, which must not go unnoticed. (A damaged acknowledgement raises: the policy decides.)"""
        extent = self._output_extents.get(uri)
        if record["observer"] == DISCARD_SINK:
            return
        durable = record["observer"] == DURABLE_SINK
        first = (self._store.acked(uri) if durable else self._observed.get(uri, -1)) + 1
        committed = self._counters[uri].next
        if extent is None:
            if committed > first:
                raise MissingStateError(f"subscription {uri!r}: the durable sink holds none of its committed "
                                        f"outputs #{first} to #{committed - 1}")
            return
        count, low, high = extent
        if count != high - low + 1 or (low > first and committed > first):
            raise MissingStateError(
                f"subscription {uri!r}: outputs are missing from the durable sink between #{first} and #{high} "
                f"({count} rows; rows were deleted or lost)"
            )

    def _recover_orphans(self, damaged_state: dict[str, Exception]) -> None:
        """Stored states that belong to no artifact (no record claims them, no recovered query re-created
        them): a sign of damage, so they go through the policy too; only REMOVE deletes them. The states of
        artifacts kept without running stay stored, and no query created later under their ids may load them."""
        restored = self._environment.unclaimed_inner_ids()
        self._environment.discard_saved([key for key in restored if self._owned_by_broken(key)], delete=False)
        unclaimed = [key for key in restored if not self._owned_by_broken(key)]
        unclaimed += [key for key in damaged_state if key not in self._records and not self._owned_by_broken(key)
                      and not _owned_by(key, self._removed_at_recovery)
                      and not any(key.startswith(uri + "/") for uri in self._records)]
        orphans: list[str] = []
        for key in sorted(set(unclaimed)):
            error = MissingStateError(f"state {key!r} belongs to no artifact and no recovered query claimed it")
            policy = self._recovery_failed(key, "state", error, orphan=True)
            if policy is RecoveryPolicy.REMOVE:
                orphans.append(key)
        self.recovery.orphans = orphans

    def _restore_delivery(
        self,
        snapshot: CheckpointSnapshot,
        records: dict[str, dict[str, Any]],
        damaged_engine: dict[str, Exception],
        damaged_counters: dict[str, Exception],
    ) -> None:
        """The delivery record (replay position, watermarks, clock) and the output counters. The delivery record
        concerns every query, so a damaged or missing one refuses the open, whatever the policy."""
        if _DELIVERY in damaged_engine:
            raise RecoveryError(f"{_ENGINE}/{_DELIVERY}", damaged_engine[_DELIVERY])
        blob = snapshot.get(_ENGINE, _DELIVERY)
        has_queries = any(record["kind"] == "subscription" for record in records.values())
        if blob is None:
            if has_queries or snapshot.keys(STATE_CATEGORY):
                raise RecoveryError(f"{_ENGINE}/{_DELIVERY}", MissingStateError(
                    "the delivery record is missing from a store that holds queries: their replay position is "
                    "unknown"))
            delivery = DeliveryRecord()
            self._commit_changes(puts=[(_ENGINE, _DELIVERY, self._delivery_bytes())])
        else:
            try:
                delivery = parse_delivery(blob)
            except MalformedRecordError as error:
                raise RecoveryError(f"{_ENGINE}/{_DELIVERY}", error) from error
        self._heads.update(self._store.stream_heads())
        self._check_delivery(delivery)
        self._position = delivery.pos
        self._delivered.update(delivery.delivered)
        self._committed_delivered = dict(delivery.delivered)
        self._pins.update(delivery.pinned)
        self._counter_errors = dict(damaged_counters)
        for key, counter_blob in snapshot.items(_OUTPUTS):
            try:
                committed = parse_counter(key, counter_blob)
            except MalformedRecordError as error:
                self._counter_errors[key] = error
                continue
            self._counters[key] = OutputCounter(committed, committed)
        for key, cursor_blob in snapshot.items(_OBSERVED):
            try:
                self._observed[key] = parse_counter(key, cursor_blob, what="observer cursor", minimum=-1)
            except MalformedRecordError as error:
                self._counter_errors[key] = error
        if delivery.now is not None:  # before any query is bound: timers and windows resume on the checkpoint's clock
            self._start_clock(from_micros(delivery.now))
        else:  # no checkpoint yet: the clock of the earliest query's creation (its state was saved then)
            clocks = [int(r["clock"]) for r in records.values() if r.get("kind") == "subscription" and "clock" in r]
            if clocks:
                self._start_clock(from_micros(min(clocks)))

    def _check_delivery(self, delivery: DeliveryRecord) -> None:
        """The delivery record cannot be past what was appended (a forged or damaged one would make every
        query skip events)."""
        for stream, seq in delivery.delivered.items():
            if seq >= self._heads.get(stream, 0):
                raise RecoveryError(f"{_ENGINE}/{_DELIVERY}", MalformedRecordError(
                    f"the delivery record says #{seq} of {stream!r} was delivered, but only "
                    f"{self._heads.get(stream, 0)} events were ever appended to it"))
        if delivery.pos > self._store.last_position():
            raise RecoveryError(f"{_ENGINE}/{_DELIVERY}", MalformedRecordError(
                f"the delivery record's log position {delivery.pos} is past the last event ever appended"))

    def _pin_broken(self) -> None:
        """Pin each artifact kept without running. Its stored state says "caught up" relative to the checkpoint it
        was saved in, and later checkpoints move the delivered watermarks on without it; the pin goes into every
        delivery record while it is kept, holds the ingress log back for it, and tells its readers where to
        resume once it recovers."""
        for uri in self._broken | self._kept_orphans:
            if uri not in self._pins:
                self._pins[uri] = self._pin_for(uri)

    def _owned_by_broken(self, key: str) -> bool:
        """Whether a state key belongs to an artifact kept without running (its state must stay)."""
        return _owned_by(key, self._broken)

    def _drop_provisional_outputs(self, records: dict[str, dict[str, Any]]) -> None:
        """With the wall clock, outputs the durable sink got after the last checkpoint are provisional: the
        replay cuts time windows at the recovery's time, so it may compute them otherwise, and keeping the first
        version beside the replay's would count an event in two windows. The sink drops them and takes the
        replay's (same ids from the checkpoint's counter on): it always holds what the committed state produced."""
        for uri, record in records.items():
            counter = self._counters.get(uri)
            if uri not in self._subscriptions or record["observer"] != DURABLE_SINK or counter is None:
                continue
            dropped = self._store.drop_provisional_outputs(uri, counter.next)
            if dropped:
                self._log.info("subscription %r: %d provisional output(s) after #%d dropped (wall clock: the "
                               "replay computes them again)", uri, dropped, counter.next - 1,
                               extra={"reaqtive_event": "provisional_outputs_dropped", "subscription": uri,
                                      "outputs": dropped, "seq": counter.next})

    def _rewind_for_lagging_readers(self) -> None:
        """A reader that lagged behind at the checkpoint (its query withheld demand) needs the events after its
        own watermark: start the replay there (the other readers skip what they had, by their watermarks)."""
        # The replay must find every event of a stream after the first one it needs: a hole is a lost row.
        self._expected = {stream: seq + 1 for stream, seq in self._delivered.items()}
        lagging = False
        for stream, watermark in self._reader_watermarks().items():
            if watermark < self._delivered.get(stream, -1):
                lagging = True
                self._expected[stream] = watermark + 1
                first = self._store.position_after(stream, watermark)
                if first is not None:
                    self._position = min(self._position, first - 1)
        if lagging:
            # Up to the last event delivered: an inner reader a replayed event creates reads from there, not from
            # the stream's end (the checkpoint may have been taken while such a replay was pending).
            ends = (self._store.position_after(stream, seq - 1) for stream, seq in self._delivered.items())
            self._start_replay(max((end for end in ends if end is not None), default=self._position))

    def _recovery_failed(self, uri: str, kind: str, error: Exception, *, orphan: bool = False) -> RecoveryPolicy:
        """Apply the recovery policy to an artifact (or an orphaned state) that failed to recover. Under KEEP
        nothing of it is deleted, ever: it stays stored, not running, with the input it may need."""
        policy = self._policy
        if self._on_failure is not None:
            chosen = self._on_failure(uri, error)
            policy = chosen if chosen is not None else policy
        self._log.error("recovering %r failed (%s): %s", uri, policy.value, error, exc_info=error,
                        extra={"reaqtive_event": "recovery_failed", "artifact": uri, "kind": kind,
                               "policy": policy.value, "error_type": type(error).__name__})
        if policy is RecoveryPolicy.FAIL:
            raise RecoveryError(uri, error) from error
        self.recovery.failures.append(RecoveryFailure(uri, kind, error, policy))
        if orphan:
            # REMOVE deletes it at the next checkpoint; otherwise it stays stored, and no inner unit created
            # later under the same id may load it.
            self._environment.discard_saved([uri], delete=policy is RecoveryPolicy.REMOVE)
            if policy is not RecoveryPolicy.REMOVE:
                self._kept_orphans.add(uri)  # pinned like a kept artifact: it may be a query's, restored later
            return policy
        self._environment.abandon(uri)
        if policy is RecoveryPolicy.REMOVE:
            self._removed_at_recovery.add(uri)
            self._environment.discard_saved(
                [key for key in self._environment.unclaimed_inner_ids() if _owned_by(key, {uri})], delete=False
            )
            self._commit_changes(
                deletes=[(_ARTIFACTS, uri), (_OUTPUTS, uri), (_OBSERVED, uri), *self._stored_state_of(uri)]
            )
            self._records.pop(uri, None)
        else:
            self._broken.add(uri)
        return policy

    def _stored_state_of(self, uri: str) -> list[tuple[str, str]]:
        """The state rows of ``uri`` and of its inner units that may be in the store: those there at recovery,
        those of the live inner units, and those of inner units removed since the last checkpoint."""
        prefix = uri + "/"
        keys = {key for key in self._stored_state_keys if key.startswith(prefix)}
        keys |= {key for key in self._environment.inner_subscriptions() if key.startswith(prefix)}
        keys |= {key for key in self._environment.removed_inner_ids() if key.startswith(prefix)}
        return [(STATE_CATEGORY, uri)] + [(STATE_CATEGORY, key) for key in sorted(keys)]
