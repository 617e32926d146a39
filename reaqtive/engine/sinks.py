"""Egress: the durable sink's buffer and its writes, the replayed-output check after a recovery, observer functions and
their outboxes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from reaqtive.engine._room import (
    EngineRoom,
    _same_value,
)
from reaqtive.engine.egress import Output, OutputWriter
from reaqtive.engine.engine_errors import (
    AckError,
    ArtifactNotFoundError,
    MalformedRecordError,
    OutputDivergenceError,
    UnstorableOutputError,
)
from reaqtive.engine.expressions import (
    decode_query,
)
from reaqtive.engine.model import (
    DISCARD_SINK,
    DURABLE_SINK,
)
from reaqtive.engine.outbox import ObserverFailedError, Outbox
from reaqtive.state import (
    DEFAULT_CODEC,
    DamagedRowError,
    StateEncodeError,
    StoreError,
)


class Egress(EngineRoom):
    """See the module docstring."""

    def outputs(self, subscription: str | None = None, *, after: int | None = None,
                limit: int | None = None) -> list[Output]:
        """The durable sink's content (flushed first), in subscription and sequence order, without what was
        acknowledged (:meth:`ack`).

        A cursor: ``outputs(uri, after=seq, limit=n)`` gives at most ``n`` outputs of ``uri`` with ``seq`` above
        ``after``, read through the sink's primary key (the cost is what is returned, not the table). ``after``
        below the acknowledgement starts after the acknowledgement. ``after`` and ``limit`` need a subscription.

        Example: ``batch = engine.outputs("alerts", after=last_seen, limit=500)``
        """
        if subscription is None and (after is not None or limit is not None):
            raise ValueError("outputs(): after and limit need a subscription (each has its own sequence numbers)")
        if limit is not None and (type(limit) is not int or limit < 0):
            raise ValueError(f"outputs(): limit must be a whole number >= 0, got {limit!r}")
        if after is not None and type(after) is not int:
            raise TypeError(f"outputs(): after must be a sequence number (int), got {after!r}")
        with self._lock:
            self._check_open()
            self._flush_egress()
            acks = self._store.acks()
            start = None if subscription is None else max(-1 if after is None else after,
                                                          self._store.acked(subscription))
        try:  # outside the engine's lock: a reader does not hold up processing
            if subscription is not None:
                return [Output(*row) for row in self._store.read_outputs(subscription, after=start, limit=limit)]
            return [Output(*row) for row in self._store.read_outputs() if row[1] > acks.get(row[0], -1)]
        except StoreError:
            self._check_open()  # closed while it read: say so, not "cannot operate on a closed database"
            raise

    def ack(self, subscription: str, seq: int) -> None:
        """Record, durably at once, that the consumers of ``subscription`` have every output up to ``seq``:
        :meth:`outputs` no longer returns them, and the next :meth:`trim` (every checkpoint runs one) deletes
        them from the durable sink. Only for a subscription whose observer is the durable sink.

        Acknowledgements only move forward: one at or below the current one is a no-op (a consumer may repeat
        it after a restart). One beyond the last output produced raises :class:`AckError` (nothing is recorded):
        a consumer cannot have an output that does not exist yet.
        """
        if type(seq) is not int:
            raise TypeError(f"ack({subscription!r}): seq must be a sequence number (int), got {seq!r}")
        with self._lock:
            self._check_open()
            record = self._check_kind(subscription, "subscription")
            if record["observer"] != DURABLE_SINK:
                raise AckError(f"ack({subscription!r}): its outputs go to {record['observer']!r}, not to the "
                               "durable sink; only durable-sink outputs are acknowledged")
            if seq < -1:
                raise AckError(f"ack({subscription!r}, {seq}): sequence numbers start at 0 (-1: none)")
            self._flush_egress()
            acked = self._store.acked(subscription)
            if seq <= acked:
                return
            last = max(self._store.last_output_seq(subscription), acked)
            if seq > last:
                raise AckError(f"ack({subscription!r}, {seq}): beyond its last output #{last}; nothing was "
                               "acknowledged")
            self._store.ack(subscription, seq)

    def trim(self) -> int:
        """Delete the acknowledged outputs from the durable sink, in one transaction (a row of the sink that
        also holds unacknowledged outputs stays until they are acknowledged too). Returns how many outputs
        were deleted. Every checkpoint ends with one; call it to reclaim space between checkpoints."""
        with self._lock:
            self._check_open()
            return self._store.trim_outputs()

    def _flush_egress(self, *, outboxes: Mapping[str, tuple[int, list[Output]]] | None = None) -> float:
        """Write the durable sink's new outputs; at a checkpoint also the outputs still waiting for an observer
        function (``outboxes``: their snapshots; the checkpoint's state is past them, so a restart could not
        produce them again)."""
        started = time.perf_counter()
        if self._egress:
            if self._replayed_upto:
                self._check_replayed_outputs()
            # The sinks of running subscriptions hold this list's bound ``append``: empty it, never replace it.
            self._store.write_outputs(self._egress, encoded=True)
            self._egress.clear()
            # Consumers wait on it: a checkpoint inside process() may write a batch's outputs before the batch's
            # end looks at the buffer, which is then empty.
            self.produced.fire()
        if outboxes:  # a checkpoint's snapshots of the outboxes: what still waits is stored with it
            waiting = [output for _, outputs in outboxes.values() for output in outputs]
            if waiting:
                self._store.write_outputs(waiting)
        return time.perf_counter() - started

    def _check_replayed_outputs(self) -> None:
        """After a recovery, a replay produces again the outputs the durable sink got after the checkpoint, with
        the same ids, and the sink keeps the first copy. That is only right if they are the same outputs: a
        query whose replay diverges (it is not deterministic, or its stored output counter was damaged, which
        would make new outputs vanish as "duplicates") is stopped instead, under the failure policy."""
        by_subscription: dict[str, list[Output]] = {}
        decode = DEFAULT_CODEC.decode_entries
        for uri, seq, payload in self._egress:
            upto = self._replayed_upto.get(uri)
            if upto is not None and seq <= upto:
                by_subscription.setdefault(uri, []).append(Output(uri, seq, decode(payload, "an output")[0]))
        for uri, outputs in by_subscription.items():
            try:
                stored = {seq: value for _, seq, value in
                          self._store.read_outputs(uri, after=outputs[0].seq - 1, upto=outputs[-1].seq)}
            except DamagedRowError as error:  # its sink rows are damaged: that subscription, not the others
                self._egress[:] = [row for row in self._egress if row[0] != uri]
                self._fault(uri, error)
                continue
            for output in outputs:
                if output.seq in stored and not _same_value(stored[output.seq], output.value):
                    self._egress[:] = [row for row in self._egress if row[0] != uri]
                    self._fault(uri, OutputDivergenceError(uri, output.seq, stored[output.seq], output.value))
                    break
        for uri, upto in list(self._replayed_upto.items()):
            counter = self._counters.get(uri)
            if counter is None or counter.next > upto:
                del self._replayed_upto[uri]  # past what the sink held: nothing left to compare

    def _sink_for(self, uri: str, observer: str) -> OutputWriter | None:
        """Where subscription ``uri``'s outputs go, as ``write(seq, value)``: the egress table, nowhere, or the
        outbox of an observer function. Every kept output must be storable (the egress table and a checkpoint of
        an outbox hold it): one that is not raises :class:`UnstorableOutputError`."""
        if observer == DISCARD_SINK:
            return None
        # A packer of this subscription's own: outputs are written under the engine's lock, one thread at a time,
        # so it needs neither the codec's per-thread lookup nor a lock.
        pack = DEFAULT_CODEC.new_packer()
        if observer == DURABLE_SINK:
            # Encoded once, here (the value is frozen as it was produced): an output the sink cannot hold stops
            # this subscription at once, alone.
            append = self._egress.append

            def durable(seq: int, value: Any) -> None:
                try:
                    payload = pack(value)
                except Exception as error:
                    raise _unstorable(uri, seq, value, error) from error
                append((uri, seq, payload))

            return durable
        record = self._require(observer)
        if record["kind"] != "observer":
            raise ArtifactNotFoundError(f"{observer!r} is a {record['kind']}, not an observer")
        outbox = Outbox(uri, observer, self._observer_function(observer, record),
                        retries=self._observer_retries, backoff=self._observer_backoff,
                        delivered=self._observed.get(uri, -1))
        outbox.restore(Output(*row) for row in self._store.read_outputs(uri))
        self._outboxes.add(outbox)
        keep = outbox.add

        def sink(seq: int, value: Any) -> None:
            try:
                pack(value)  # a checkpoint may have to store it while it waits
            except Exception as error:
                raise _unstorable(uri, seq, value, error) from error
            keep(Output(uri, seq, value))

        return sink

    def _observer_function(self, uri: str, record: dict[str, Any]) -> Callable[[Output], object]:
        """The function of observer definition ``uri`` (resolved like the functions of queries)."""
        decoded = decode_query({"op": "observer", "args": [record["function"]]}, self.functions)
        function = decoded.args[0]
        if not callable(function):
            raise MalformedRecordError(f"observer definition {uri!r}: its function is not callable")
        return function

    def _hand_outputs_on(self) -> None:
        """Outside the engine's lock: hand the outputs waiting in outboxes to their observer functions (see
        :meth:`Outboxes.hand_on`); the subscriptions whose observer gave up stop."""
        failures = self._outboxes.hand_on()
        if failures:
            with self._lock:
                for outbox, failure in failures:
                    if self._outboxes.is_current(outbox):
                        self._fault(outbox.subscription, failure)

    def _courier_gave_up(self, outbox: Outbox, failure: ObserverFailedError) -> None:
        """On a courier's thread: its observer kept failing. The processing loop stops the subscription (under the
        engine's lock, at its next slice: this thread must not wait for the lock, which close() holds while it
        ends the couriers)."""
        self._faults_pending.append((outbox.subscription, failure))
        self.appended.fire()  # wakes an idle processing loop

    def _start_couriers(self) -> None:
        """Running mode: each outbox delivers on a courier thread of its own from now on."""
        with self._lock:
            self._outboxes.start_couriers()

    def _stop_couriers(self, timeout: float | None = None) -> None:
        """Back to manual mode: the couriers deliver what waits and end (outside the engine's lock)."""
        self._outboxes.stop_couriers(timeout)

    def _outbox_snapshots(self) -> dict[str, tuple[int, list[Output]]]:
        """Per outbox, how far delivery got and what still waits, each read as one."""
        return self._outboxes.snapshots()


def _unstorable(uri: str, seq: int, value: object, error: Exception) -> UnstorableOutputError:
    """The error of an output the store cannot hold, with the codec's own message (naming the type)."""
    try:
        DEFAULT_CODEC.encode(value)
    except StateEncodeError as encode_error:
        return UnstorableOutputError(uri, seq, encode_error)
    return UnstorableOutputError(uri, seq, StateEncodeError(f"cannot save {type(value).__name__}: {error}"))
