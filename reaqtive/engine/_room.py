"""The base of the engine's rooms: shared configuration and running state, and the helpers every room uses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from reaqtive.core.subjects import SimpleSubject
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.engine.artifacts import ArtifactRecords
from reaqtive.engine.checkpoint_policy import CheckpointPolicy
from reaqtive.engine.database import EngineStore
from reaqtive.engine.egress import Output, OutputWriter
from reaqtive.engine.engine_errors import (
    EngineClosedError,
)
from reaqtive.engine.event_times import EventTimeBounds
from reaqtive.engine.expressions import (
    FunctionRegistry,
    expression_from_json,
)
from reaqtive.engine.failures import OnError
from reaqtive.engine.gc_policy import GcFreeze
from reaqtive.engine.handover import DELIVERY_BATCH, EngineLock
from reaqtive.engine.idle import Subscriptions
from reaqtive.engine.ingress import IngressWriter
from reaqtive.engine.model import (
    DISCARD_SINK,
    DURABLE_SINK,
    CheckpointMetrics,
    EngineStatus,
    RecoveryMetrics,
    RecoveryPolicy,
)
from reaqtive.engine.outbox import ObserverFailedError, Outbox
from reaqtive.engine.outputs import EGRESS_FLUSH_OUTPUTS, Outputs
from reaqtive.engine.positions import Positions
from reaqtive.engine.quarantine import Quarantine
from reaqtive.engine.query_environment import QueryEnvironment
from reaqtive.engine.readers import Envelope
from reaqtive.engine.records import ARTIFACTS, OUTPUT_COUNTERS, Behind, record_bytes
from reaqtive.engine.settings import check_seconds, check_whole
from reaqtive.engine.signals import Signal
from reaqtive.engine.sources import Sources
from reaqtive.engine.stopped import StoppedQueries
from reaqtive.fluent.query import Query
from reaqtive.state import (
    Checkpointer,
    CheckpointMode,
    save_subscription,
)
from reaqtive.state.host import QueryHost

if TYPE_CHECKING:  # they import this module
    from reaqtive.engine.delivery import Delivery
    from reaqtive.engine.running import Running
    from reaqtive.engine.scheduling import Scheduling

_LOG: Final = logging.getLogger("reaqtive.engine")
_ARTIFACTS: Final = ARTIFACTS
_TEMPLATES: Final = "templates"
_ENGINE: Final = "engine"
_DELIVERY: Final = "delivery"
_OUTPUTS: Final = OUTPUT_COUNTERS  # per subscription, the next output sequence number (when it moved)
_OBSERVED: Final = "observed"  # per subscription with an observer function, the last output it received
_SOURCES: Final = "sources"  # per source registered with register_source, its position (opaque bytes)
_BUILTIN_OBSERVERS: Final = frozenset({DURABLE_SINK, DISCARD_SINK})
_STREAM_BUFFER: Final = 1 << 20  # a reader without demand may lag this far behind a stream before it fails
_DELIVERY_BATCH: Final = DELIVERY_BATCH
_EGRESS_FLUSH_OUTPUTS: Final = EGRESS_FLUSH_OUTPUTS  # the durable sink's buffer is written once it holds this many

CheckpointListener = Callable[[CheckpointMetrics | None, BaseException | None], None]
"""Called at the end of each checkpoint: ``(metrics, None)`` once it committed, ``(None, error)`` if it failed."""


def _owned_by(key: str, owners: set[str]) -> bool:
    """Whether state key ``key`` is one of ``owners`` or one of their inner units (``owner/...``)."""
    if key in owners:
        return True
    cut = key.find("/")
    while cut != -1:
        if key[:cut] in owners:
            return True
        cut = key.find("/", cut + 1)
    return False


def _references(expression: Any) -> set[str]:
    """The stream/definition URIs an encoded expression reads."""
    found: set[str] = set()
    stack = [expression]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "stream" in node and len(node) == 1:
                found.add(node["stream"])
            else:
                stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _full_state(handle: SubscriptionHandle) -> bytes:
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None  # a full save always returns a blob
    return blob


def _counter_bytes(value: int) -> bytes:
    return str(value).encode("ascii")


_to_bytes = record_bytes
_check_whole = check_whole
_check_seconds = check_seconds


def _from_bytes(blob: bytes, where: str) -> dict[str, Any]:
    try:
        return expression_from_json(blob)
    except Exception as error:
        raise ValueError(f"{where}: {error}") from error


def _now_text() -> str:
    return datetime.now(UTC).isoformat()


class EngineRoom:
    """What every room of the engine shares: its configuration and its running state (made by
    :meth:`_init_runtime`), the store helpers, and the methods rooms call across (each defined in the
    room named beside it)."""

    # Configuration, set by Engine.__init__.
    functions: FunctionRegistry
    _on_error: OnError
    _observer_retries: int
    _observer_backoff: float
    _event_times: EventTimeBounds
    _lock: EngineLock
    _clock_mode: str
    _settings: dict[str, object]
    _policy: RecoveryPolicy
    _on_failure: Callable[[str, BaseException], RecoveryPolicy | None] | None
    _lazy_binding: bool  # recovered idle subscriptions wait unbound (reaqtive.engine.idle)
    _checkpoint_policy: CheckpointPolicy
    _log: logging.Logger
    _status: EngineStatus
    _gc: GcFreeze
    _store: EngineStore
    _ingress: IngressWriter
    # Parts (made by _init_runtime).
    _scheduling: Scheduling
    _delivery: Delivery
    _running: Running

    def _init_runtime(self, tick: timedelta) -> None:
        """The engine's running state, empty until recovery fills it."""
        # (imported here: they import this module)
        from reaqtive.engine.delivery import Delivery, root_scheduler, ticks_of_micros
        from reaqtive.engine.running import Running
        from reaqtive.engine.scheduling import Scheduling

        # Wake-ups for processing loops and output consumers (reaqtive.engine.signals), fired at batch
        # boundaries, never per event.
        self.appended = Signal("appended")
        self.produced = Signal("produced")
        # The root of the queries' schedulers, the engine's clock: its moves are the delivery's.
        # (the lambdas call the running queries' part, made last, from the others: looked up once it exists)
        self._scheduler = root_scheduler(tick, self._lock,
                                         lambda args: self._running.task_failed(args))  # noqa: PLW0108
        # Where delivery stands in the log, a part of its own (reaqtive.engine.positions).
        self._positions = Positions(self._store.stream_heads)
        # The output side, a part of its own (reaqtive.engine.outputs): the durable sink's buffer, the output
        # counters, the outboxes and how far each got.
        self._outputs = Outputs(self._store, fault=lambda uri, error: self._running.fault(uri, error),  # noqa: PLW0108
                                fired=self.produced.fire, gave_up=self._courier_gave_up)
        self._streams: dict[str, SimpleSubject[Envelope]] = {}
        # The artifacts' records and their queries' templates, a part of its own (reaqtive.engine.artifacts).
        self._records = ArtifactRecords()
        # Bound, or idle until their streams have an event for them (reaqtive.engine.idle).
        self._subscriptions = Subscriptions()
        # The dead letters of delivery, a part of its own (reaqtive.engine.quarantine).
        self._quarantine = Quarantine(self._store, self._log)
        ticks = ticks_of_micros(tick)
        faults: list[tuple[str, Exception]] = []  # the running queries' pending faults (Running.pending)

        def apply_faults() -> None:
            self._running.apply_faults()
        # The queries behind the engine (paused, catching up) and their catch-up: reaqtive.engine.scheduling.
        self._scheduling = Scheduling(
            self._store, self._lock, self._positions, self._streams, self._quarantine, self._records,
            self._subscriptions, self._scheduler, ticks_of_micros=ticks, faults=faults,
            apply_faults=apply_faults, check_open=self._check_open,
            commit_changes=self._commit_changes, appended=self.appended, log=self._log)
        # The delivery of the log, the clock's moves and the appends: reaqtive.engine.delivery.
        self._delivery = Delivery(
            store=self._store, lock=self._lock, ingress=self._ingress, positions=self._positions,
            scheduling=self._scheduling, scheduler=self._scheduler, streams=self._streams, records=self._records,
            subscriptions=self._subscriptions, quarantine=self._quarantine, outputs=self._outputs,
            functions=self.functions, event_times=self._event_times, clock_mode=self._clock_mode,
            checkpoint_policy=self._checkpoint_policy, ticks=ticks, faults=faults,
            apply_faults=apply_faults, check_open=self._check_open, maybe_checkpoint=self._maybe_checkpoint,
            hand_outputs_on=self._hand_outputs_on, appended=self.appended, produced=self.produced, log=self._log)
        self._environment = QueryEnvironment(
            delivered=self._positions.delivered_at, counters=self._outputs.counters, cursor=self._positions.cursor,
            behind=self._scheduling.behind,
            streams=self._streams, store=self._store,
            failed=lambda instance_id, error: self._running.unit_failed(instance_id, error))  # noqa: PLW0108
        self._checkpointer = Checkpointer(self._scheduler, self._store.checkpoints)
        self._host = QueryHost(self._scheduler, environment=self._environment, settings=self._settings,
                               logger=self._log)
        # What is kept stored without running, and where each stands: a part of its own (reaqtive.engine.stopped).
        self._stopped = StoppedQueries()
        self._backfilling: set[str] = set()  # backfills no checkpoint saw joined yet (reaqtive.engine.backfill)
        self._retained: dict[str, tuple[int, int]] = {}  # per stream, events and bytes in the log (last measured)
        self._legacy_caught_up: dict[str, int] = {}  # a delivery record from before log positions: its watermarks
        self._sources = Sources()  # register_source: their positions, stored with each checkpoint
        self._stored_state_keys: set[str] = set()  # the state rows in the store (units it has seen whole)
        self.last_checkpoint: CheckpointMetrics | None = None
        self.recovery = RecoveryMetrics()
        self._checkpoint_listeners: tuple[CheckpointListener, ...] = ()  # replaced, never mutated
        # The running queries: binding, error policies and faults (reaqtive.engine.running).
        self._running = Running(
            lock=self._lock, store=self._store, scheduler=self._scheduler, host=self._host,
            environment=self._environment, records=self._records, subscriptions=self._subscriptions,
            stopped=self._stopped, outputs=self._outputs, quarantine=self._quarantine, scheduling=self._scheduling,
            positions=self._positions, streams=self._streams, functions=self.functions, recovery=self.recovery,
            clock_mode=self._clock_mode, on_error=self._on_error, policy=self._policy, on_failure=self._on_failure,
            lazy_binding=self._lazy_binding, legacy_caught_up=lambda: self._legacy_caught_up,
            engine_status=lambda: self._status, check_open=self._check_open, expand=self._expand,
            writer_for=self._writer_for, pin_for=self._pin_for, delete_subscription=self.delete_subscription,
            settle_status=self._settle_status, commit_changes=self._commit_changes, appended=self.appended,
            produced=self.produced, log=self._log, pending=faults)
        self._subscriptions.set_binder(self._running.bind_idle)

    def _settle_status(self) -> None:
        """RUNNING, or DEGRADED while something is kept in the store without running (FAILED subscriptions
        included) or a typed stream waits for its validator."""
        if self._status in (EngineStatus.RUNNING, EngineStatus.DEGRADED):
            self._status = EngineStatus.DEGRADED if self._stopped.degraded else EngineStatus.RUNNING

    def _check_open(self) -> None:
        if self._status is EngineStatus.CLOSED:
            raise EngineClosedError(f"the engine on {str(self._store.path)!r} is closed")

    def _require(self, uri: str) -> dict[str, Any]:
        return self._records.require(uri)

    def _check_kind(self, uri: str, kind: str) -> dict[str, Any]:
        return self._records.check_kind(uri, kind)

    def _commit_changes(
        self, puts: Iterable[tuple[str, str, bytes]] = (), deletes: Iterable[tuple[str, str]] = ()
    ) -> None:
        transaction = self._store.checkpoints.begin()
        try:
            for category, key, blob in puts:
                transaction.put(category, key, blob)
            for category, key in deletes:
                transaction.delete(category, key)
            transaction.commit()
        except BaseException:
            transaction.rollback()
            raise

    def add_checkpoint_listener(self, listener: CheckpointListener) -> None:
        """Call ``listener(metrics, error)`` at the end of every checkpoint: ``(CheckpointMetrics, None)`` once
        it committed, ``(None, error)`` when it failed (the error then propagates as before). It runs on the
        checkpointing thread, under the engine's lock: keep it quick. One that raises is logged and the
        checkpoint is unaffected (:class:`~reaqtive.engine.metrics.PrometheusMetrics` listens this way)."""
        with self._lock:
            self._checkpoint_listeners = (*self._checkpoint_listeners, listener)

    def remove_checkpoint_listener(self, listener: CheckpointListener) -> None:
        """Stop calling ``listener`` (added by :meth:`add_checkpoint_listener`; unknown: a no-op)."""
        with self._lock:
            self._checkpoint_listeners = tuple(known for known in self._checkpoint_listeners if known != listener)

    def _notify_checkpoint(self, metrics: CheckpointMetrics | None, error: BaseException | None) -> None:
        for listener in self._checkpoint_listeners:
            try:
                listener(metrics, error)
            except Exception as failure:  # an observer of the engine must not break it
                self._log.error("checkpoint listener %r raised: %s", listener, failure, exc_info=failure,
                                extra={"reaqtive_event": "listener_failed", "listener": repr(listener),
                                       "error_type": type(failure).__name__})

    # -- defined in other rooms ------------------------------------------------------------------------------------

    def _hand_outputs_on(self) -> None:
        raise NotImplementedError  # Egress

    def _courier_gave_up(self, outbox: Outbox, failure: ObserverFailedError) -> None:
        raise NotImplementedError  # Egress

    def _start_couriers(self) -> None:
        raise NotImplementedError  # Egress

    def _stop_couriers(self, timeout: float | None = None) -> None:
        raise NotImplementedError  # Egress

    def _delivery_bytes(
        self, extra_pins: Mapping[str, Behind] | None = None, behind: Mapping[str, Behind] | None = None
    ) -> bytes:
        raise NotImplementedError  # Checkpointing

    def _expand(self, root: Query[Any]) -> Query[Any]:
        raise NotImplementedError  # ArtifactRegistry

    def _maybe_checkpoint(self) -> bool:
        raise NotImplementedError  # Checkpointing

    def checkpoint(self, *, full: bool = False) -> CheckpointMetrics:
        raise NotImplementedError  # Checkpointing

    def _observer_function(self, uri: str, record: dict[str, Any]) -> Callable[[Output], object]:
        raise NotImplementedError  # Egress

    def _open_stream(self, uri: str) -> None:
        raise NotImplementedError  # ArtifactRegistry

    def _pin_for(self, uri: str) -> Behind:
        raise NotImplementedError  # Checkpointing

    def _writer_for(self, uri: str, observer: str) -> OutputWriter | None:
        raise NotImplementedError  # Egress

    def _first_retained_position(self) -> int:
        raise NotImplementedError  # Checkpointing

    def delete_subscription(self, uri: str) -> None:
        raise NotImplementedError  # ArtifactRegistry
