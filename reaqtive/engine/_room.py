"""The base of the engine's facade: its configuration and the parts it wires (each owns its state, see
``docs/engine.md``), and the few helpers the facade and recovery share.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

from reaqtive.core.subjects import SimpleSubject
from reaqtive.engine import store_keys
from reaqtive.engine.artifacts import ArtifactRecords
from reaqtive.engine.checkpoint_policy import CheckpointPolicy
from reaqtive.engine.database import EngineStore
from reaqtive.engine.engine_errors import EngineClosedError
from reaqtive.engine.event_times import EventTimeBounds
from reaqtive.engine.expressions import FunctionRegistry
from reaqtive.engine.failures import OnError
from reaqtive.engine.gc_policy import GcFreeze
from reaqtive.engine.handover import DELIVERY_BATCH, EngineLock
from reaqtive.engine.idle import Subscriptions
from reaqtive.engine.ingress import IngressWriter
from reaqtive.engine.model import EngineStatus, RecoveryMetrics, RecoveryPolicy
from reaqtive.engine.positions import Positions
from reaqtive.engine.quarantine import Quarantine
from reaqtive.engine.query_environment import QueryEnvironment
from reaqtive.engine.readers import Envelope
from reaqtive.engine.settings import check_seconds, check_whole
from reaqtive.engine.signals import Signal
from reaqtive.engine.sinks import Egress
from reaqtive.engine.sources import Sources
from reaqtive.engine.stopped import StoppedQueries
from reaqtive.state.host import QueryHost

if TYPE_CHECKING:  # they import this module
    from reaqtive.engine.checkpointing import Checkpointing
    from reaqtive.engine.delivery import Delivery
    from reaqtive.engine.registry import ArtifactRegistry
    from reaqtive.engine.running import Running
    from reaqtive.engine.scheduling import Scheduling

_LOG: Final = logging.getLogger("reaqtive.engine")
# The store's categories, under the names recovery imports (reaqtive.engine.store_keys).
_ARTIFACTS: Final = store_keys.ARTIFACTS
_TEMPLATES: Final = store_keys.TEMPLATES
_ENGINE: Final = store_keys.ENGINE
_DELIVERY: Final = store_keys.DELIVERY
_OUTPUTS: Final = store_keys.OUTPUTS
_OBSERVED: Final = store_keys.OBSERVED
_SOURCES: Final = store_keys.SOURCES
_DELIVERY_BATCH: Final = DELIVERY_BATCH
_check_whole = check_whole
_check_seconds = check_seconds


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


class EngineRoom:
    """The facade's configuration (set by ``Engine.__init__``) and the parts :meth:`_init_runtime` wires: each part
    owns its state and is handed what it uses (other parts, or callbacks into a part made after it)."""

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
    # Parts made by _init_runtime, and the registry made by Engine.__init__ after it.
    _scheduling: Scheduling
    _delivery: Delivery
    _running: Running
    _checkpointing: Checkpointing
    _registry: ArtifactRegistry

    def _init_runtime(self, tick: timedelta) -> None:
        """The engine's parts, empty until recovery fills them. A part made later is called through a lambda
        (looked up once it exists)."""
        # (imported here: they import this module)
        from reaqtive.engine.checkpointing import Checkpointing
        from reaqtive.engine.delivery import Delivery, root_scheduler, ticks_of_micros
        from reaqtive.engine.running import Running
        from reaqtive.engine.scheduling import Scheduling

        # Wake-ups for processing loops and output consumers (reaqtive.engine.signals), fired at batch
        # boundaries, never per event.
        self.appended = Signal("appended")
        self.produced = Signal("produced")
        # The root of the queries' schedulers, the engine's clock: its moves are the delivery's.
        self._scheduler = root_scheduler(tick, self._lock,
                                         lambda args: self._running.task_failed(args))  # noqa: PLW0108
        # Where delivery stands in the log, a part of its own (reaqtive.engine.positions).
        self._positions = Positions(self._store.stream_heads)
        # The artifacts' records and their queries' templates, a part of its own (reaqtive.engine.artifacts).
        self._records = ArtifactRecords()
        faults: list[tuple[str, Exception]] = []  # the running queries' pending faults (Running.pending)

        def fault(uri: str, error: Exception) -> None:
            self._running.fault(uri, error)

        def apply_faults() -> None:
            self._running.apply_faults()
        # The output side, a part of its own (reaqtive.engine.sinks): the durable sink's buffer, the output
        # counters, the outboxes and how far each got (its Outputs), cursors and acks, observer functions.
        self._egress = Egress(self._store, self._lock, self._records, self.functions, check_open=self._check_open,
                              fault=fault, fault_later=lambda uri, error: faults.append((uri, error)),
                              produced=self.produced.fire, appended=self.appended.fire,
                              retries=self._observer_retries, backoff=self._observer_backoff)
        self._outputs = self._egress.outputs  # (the other parts ask it through its methods)
        self._streams: dict[str, SimpleSubject[Envelope]] = {}
        # Bound, or idle until their streams have an event for them (reaqtive.engine.idle).
        self._subscriptions = Subscriptions()
        # The dead letters of delivery, a part of its own (reaqtive.engine.quarantine).
        self._quarantine = Quarantine(self._store, self._log)
        ticks = ticks_of_micros(tick)
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
            apply_faults=apply_faults, check_open=self._check_open,
            maybe_checkpoint=lambda: self._checkpointing.maybe_take(),  # noqa: PLW0108
            hand_outputs_on=self._egress.hand_outputs_on, appended=self.appended, produced=self.produced,
            log=self._log)
        self._environment = QueryEnvironment(
            delivered=self._positions.delivered_at, counters=self._outputs.counters, cursor=self._positions.cursor,
            behind=self._scheduling.behind,
            streams=self._streams, store=self._store,
            failed=lambda instance_id, error: self._running.unit_failed(instance_id, error))  # noqa: PLW0108
        self._host = QueryHost(self._scheduler, environment=self._environment, settings=self._settings,
                               logger=self._log)
        # What is kept stored without running, and where each stands: a part of its own (reaqtive.engine.stopped).
        self._stopped = StoppedQueries()
        self._legacy_caught_up: dict[str, int] = {}  # a delivery record from before log positions: its watermarks
        self._sources = Sources()  # register_source: their positions, stored with each checkpoint
        self.recovery = RecoveryMetrics()
        # Checkpoints and what the engine remembers of them, a part of its own (reaqtive.engine.checkpointing).
        self._checkpointing = Checkpointing(
            self._store, self._lock, self._scheduler, self._positions, self._outputs, self._records,
            self._subscriptions, self._stopped, self._sources, self._quarantine, self._environment, self._host,
            policy=self._checkpoint_policy, gc=self._gc, log=self._log, behind=self._scheduling.behind,
            clock_started=lambda: self._delivery.clock_started, check_open=self._check_open,
            checkpointing=self._mark_checkpointing, apply_faults=apply_faults, fault=fault)
        # The running queries: binding, error policies and faults (reaqtive.engine.running).
        self._running = Running(
            lock=self._lock, store=self._store, scheduler=self._scheduler, host=self._host,
            environment=self._environment, records=self._records, subscriptions=self._subscriptions,
            stopped=self._stopped, outputs=self._outputs, quarantine=self._quarantine, scheduling=self._scheduling,
            positions=self._positions, streams=self._streams, functions=self.functions, recovery=self.recovery,
            clock_mode=self._clock_mode, on_error=self._on_error, policy=self._policy, on_failure=self._on_failure,
            lazy_binding=self._lazy_binding, legacy_caught_up=lambda: self._legacy_caught_up,
            engine_status=lambda: self._status, check_open=self._check_open,
            expand=lambda root: self._registry.expand(root),  # noqa: PLW0108
            writer_for=self._egress.writer_for, pin_for=self._checkpointing.pin_for,
            delete_subscription=lambda uri: self._registry.delete_subscription(uri),  # noqa: PLW0108
            settle_status=self._settle_status, commit_changes=self._commit_changes, appended=self.appended,
            produced=self.produced, log=self._log, pending=faults)
        self._subscriptions.set_binder(self._running.bind_idle)

    def _settle_status(self) -> None:
        """RUNNING, or DEGRADED while something is kept in the store without running (FAILED subscriptions
        included) or a typed stream waits for its validator."""
        if self._status in (EngineStatus.RUNNING, EngineStatus.DEGRADED):
            self._status = EngineStatus.DEGRADED if self._stopped.degraded else EngineStatus.RUNNING

    def _release(self, uri: str) -> None:
        """What the running and scheduling parts keep of subscription ``uri`` goes: it was deleted, its creation
        was undone, or its definition is being replaced."""
        self._running.forget_ended(uri)
        self._running.drop_policy(uri)
        self._scheduling.forget(uri)

    def _mark_checkpointing(self, checkpointing: bool) -> None:
        """CHECKPOINTING while a checkpoint runs; then running again, or degraded."""
        if checkpointing:
            self._status = EngineStatus.CHECKPOINTING
        else:
            self._status = EngineStatus.RUNNING
            self._settle_status()

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
        store_keys.commit_changes(self._store, puts, deletes)
