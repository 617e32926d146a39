"""Egress: the durable sink's buffer and its writes, the replayed-output check after a recovery, observer functions and
their outboxes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reaqtive.engine._room import (
    EngineRoom,
)
from reaqtive.engine.egress import Output, OutputWriter
from reaqtive.engine.engine_errors import (
    AckError,
    ArtifactNotFoundError,
    MalformedRecordError,
)
from reaqtive.engine.expressions import (
    MalformedExpressionError,
    decode_query,
)
from reaqtive.engine.model import (
    DISCARD_SINK,
    DURABLE_SINK,
)
from reaqtive.engine.named_sinks import missing_sink
from reaqtive.engine.outbox import ObserverFailedError, Outbox
from reaqtive.state import (
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

        Raises :class:`ArtifactNotFoundError` for a subscription that does not exist (never created, or deleted:
        its outputs went with it), as every call naming a subscription does.

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
            if subscription is not None:
                self._check_kind(subscription, "subscription")  # a typo or a deleted one: say so, not []
            self._outputs.flush()
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
            self._outputs.flush()
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

    def _writer_for(self, uri: str, observer: str) -> OutputWriter | None:
        """Where subscription ``uri``'s outputs go (see :meth:`Outputs.writer_for`): the durable sink, nowhere, or
        the outbox of observer definition ``observer``'s function."""
        if observer == DISCARD_SINK:
            return None
        function = None
        if observer != DURABLE_SINK:
            record = self._require(observer)
            if record["kind"] != "observer":
                raise ArtifactNotFoundError(f"{observer!r} is a {record['kind']}, not an observer")
            function = self._observer_function(observer, record)
        return self._outputs.writer_for(uri, observer, function, retries=self._observer_retries,
                                        backoff=self._observer_backoff)

    def _observer_function(self, uri: str, record: dict[str, Any]) -> Callable[[Output], object]:
        """The function of observer definition ``uri`` (resolved like the functions of queries)."""
        try:
            decoded = decode_query({"op": "observer", "args": [record["function"]]}, self.functions)
        except MalformedExpressionError as error:  # a sink not passed: say how to pass it
            missing = missing_sink(uri, record["function"], self.functions)
            if missing is not None:
                raise missing from error
            raise
        function = decoded.args[0]
        if not callable(function):
            raise MalformedRecordError(f"observer definition {uri!r}: its function is not callable")
        return function

    def _hand_outputs_on(self) -> None:
        """Outside the engine's lock: hand the outputs waiting in outboxes to their observer functions (see
        :meth:`Outboxes.hand_on`); the subscriptions whose observer gave up stop."""
        failures = self._outputs.outboxes.hand_on()
        if failures:
            with self._lock:
                for outbox, failure in failures:
                    if self._outputs.outboxes.is_current(outbox):
                        self._running.fault(outbox.subscription, failure)

    def _courier_gave_up(self, outbox: Outbox, failure: ObserverFailedError) -> None:
        """On a courier's thread: its observer kept failing. The processing loop stops the subscription (under the
        engine's lock, at its next slice: this thread must not wait for the lock, which close() holds while it
        ends the couriers)."""
        self._running.fault_later(outbox.subscription, failure)
        self.appended.fire()  # wakes an idle processing loop

    def _start_couriers(self) -> None:
        """Running mode: each outbox delivers on a courier thread of its own from now on."""
        with self._lock:
            self._outputs.outboxes.start_couriers()

    def _stop_couriers(self, timeout: float | None = None) -> None:
        """Back to manual mode: the couriers deliver what waits and end (outside the engine's lock)."""
        with self._lock:
            outboxes = self._outputs.outboxes.stop_couriers()
        for outbox in outboxes:
            outbox.stop_courier(timeout)


