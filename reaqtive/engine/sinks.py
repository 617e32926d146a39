"""Egress, a part of the engine: the output side's face. It owns the engine's :class:`~reaqtive.engine.outputs.Outputs`
(the durable sink's buffer, the output counters, the outboxes and how far each got) and does what reaches it from
outside: the durable sink's cursors (:meth:`Egress.sink_outputs`), acknowledgements and trims; where a subscription's
outputs go (:meth:`Egress.writer_for`, resolving observer functions); handing outputs to observer functions outside
the engine's lock, and their couriers on and off.

The engine makes one :class:`Egress` and hands it what it uses: the store, the engine's lock, the artifacts'
records, the function registry, and three callbacks (is the engine open, stop a subscription now, stop it once the
event at hand was delivered) and the two signals it fires. It holds no engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reaqtive.engine.artifacts import ArtifactRecords
from reaqtive.engine.database import EngineStore
from reaqtive.engine.egress import Output, OutputWriter
from reaqtive.engine.engine_errors import (
    AckError,
    ArtifactNotFoundError,
    MalformedRecordError,
)
from reaqtive.engine.expressions import (
    FunctionRegistry,
    MalformedExpressionError,
    decode_query,
)
from reaqtive.engine.handover import EngineLock
from reaqtive.engine.model import (
    DISCARD_SINK,
    DURABLE_SINK,
)
from reaqtive.engine.named_sinks import missing_sink
from reaqtive.engine.outbox import ObserverFailedError, Outbox
from reaqtive.engine.outputs import Fault, Outputs
from reaqtive.state import (
    StoreError,
)

__all__ = ["Egress"]


class Egress:
    """See the module docstring. ``fault(uri, error)`` stops a subscription now (under the engine's lock);
    ``fault_later(uri, error)`` stops it at the processing loop's next slice; ``produced`` and ``appended`` fire
    the engine's signals of the same names."""

    __slots__ = ("_appended", "_backoff", "_check_open", "_fault", "_fault_later", "_functions", "_lock",
                 "_records", "_retries", "_store", "outputs")

    def __init__(
        self, store: EngineStore, lock: EngineLock, records: ArtifactRecords, functions: FunctionRegistry, *,
        check_open: Callable[[], None], fault: Fault, fault_later: Fault, produced: Callable[[], None],
        appended: Callable[[], None], retries: int, backoff: float,
    ) -> None:
        self._store = store
        self._lock = lock
        self._records = records
        self._functions = functions
        self._check_open = check_open
        self._fault = fault
        self._fault_later = fault_later
        self._appended = appended
        self._retries = retries
        self._backoff = backoff
        self.outputs = Outputs(store, fault=fault, fired=produced, gave_up=self._courier_gave_up)
        """The output side's state (read by delivery, the registry and checkpoints through its methods)."""

    # -- the durable sink, from outside ----------------------------------------------------------------------------

    def sink_outputs(self, subscription: str | None, after: int | None, limit: int | None) -> list[Output]:
        """:meth:`Engine.outputs <reaqtive.Engine.outputs>`: the durable sink's content (flushed first), without
        what was acknowledged; read outside the engine's lock."""
        if subscription is None and (after is not None or limit is not None):
            raise ValueError("outputs(): after and limit need a subscription (each has its own sequence numbers)")
        if limit is not None and (type(limit) is not int or limit < 0):
            raise ValueError(f"outputs(): limit must be a whole number >= 0, got {limit!r}")
        if after is not None and type(after) is not int:
            raise TypeError(f"outputs(): after must be a sequence number (int), got {after!r}")
        with self._lock:
            self._check_open()
            if subscription is not None:
                self._records.check_kind(subscription, "subscription")  # a typo or a deleted one: say so, not []
            self.outputs.flush()
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
        """:meth:`Engine.ack <reaqtive.Engine.ack>`: durably at once, forward only."""
        if type(seq) is not int:
            raise TypeError(f"ack({subscription!r}): seq must be a sequence number (int), got {seq!r}")
        with self._lock:
            self._check_open()
            record = self._records.check_kind(subscription, "subscription")
            if record["observer"] != DURABLE_SINK:
                raise AckError(f"ack({subscription!r}): its outputs go to {record['observer']!r}, not to the "
                               "durable sink; only durable-sink outputs are acknowledged")
            if seq < -1:
                raise AckError(f"ack({subscription!r}, {seq}): sequence numbers start at 0 (-1: none)")
            self.outputs.flush()
            acked = self._store.acked(subscription)
            if seq <= acked:
                return
            last = max(self._store.last_output_seq(subscription), acked)
            if seq > last:
                raise AckError(f"ack({subscription!r}, {seq}): beyond its last output #{last}; nothing was "
                               "acknowledged")
            self._store.ack(subscription, seq)

    def trim(self) -> int:
        """:meth:`Engine.trim <reaqtive.Engine.trim>`: the acknowledged outputs leave the durable sink."""
        with self._lock:
            self._check_open()
            return self._store.trim_outputs()

    # -- where outputs go ------------------------------------------------------------------------------------------

    def writer_for(self, uri: str, observer: str) -> OutputWriter | None:
        """Where subscription ``uri``'s outputs go (see :meth:`Outputs.writer_for`): the durable sink, nowhere, or
        the outbox of observer definition ``observer``'s function."""
        if observer == DISCARD_SINK:
            return None
        function = None
        if observer != DURABLE_SINK:
            record = self._records.require(observer)
            if record["kind"] != "observer":
                raise ArtifactNotFoundError(f"{observer!r} is a {record['kind']}, not an observer")
            function = self.observer_function(observer, record)
        return self.outputs.writer_for(uri, observer, function, retries=self._retries, backoff=self._backoff)

    def observer_function(self, uri: str, record: dict[str, Any]) -> Callable[[Output], object]:
        """The function of observer definition ``uri`` (resolved like the functions of queries)."""
        try:
            decoded = decode_query({"op": "observer", "args": [record["function"]]}, self._functions)
        except MalformedExpressionError as error:  # a sink not passed: say how to pass it
            missing = missing_sink(uri, record["function"], self._functions)
            if missing is not None:
                raise missing from error
            raise
        function = decoded.args[0]
        if not callable(function):
            raise MalformedRecordError(f"observer definition {uri!r}: its function is not callable")
        return function

    # -- observer functions, outside the lock ----------------------------------------------------------------------

    def hand_outputs_on(self) -> None:
        """Outside the engine's lock: hand the outputs waiting in outboxes to their observer functions (see
        :meth:`Outboxes.hand_on`); the subscriptions whose observer gave up stop."""
        outboxes = self.outputs.outboxes
        failures = outboxes.hand_on()
        if failures:
            with self._lock:
                for outbox, failure in failures:
                    if outboxes.is_current(outbox):
                        self._fault(outbox.subscription, failure)

    def _courier_gave_up(self, outbox: Outbox, failure: ObserverFailedError) -> None:
        """On a courier's thread: its observer kept failing. The processing loop stops the subscription (under the
        engine's lock, at its next slice: this thread must not wait for the lock, which close() holds while it
        ends the couriers)."""
        self._fault_later(outbox.subscription, failure)
        self._appended()  # wakes an idle processing loop

    def start_couriers(self) -> None:
        """Running mode: each outbox delivers on a courier thread of its own from now on."""
        with self._lock:
            self.outputs.outboxes.start_couriers()

    def stop_couriers(self, timeout: float | None = None) -> None:
        """Back to manual mode: the couriers deliver what waits and end (outside the engine's lock)."""
        with self._lock:
            outboxes = self.outputs.outboxes.stop_couriers()
        for outbox in outboxes:
            outbox.stop_courier(timeout)
