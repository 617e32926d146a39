"""The base of the engine's rooms: shared configuration and running state, and the helpers every room uses.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Protocol

from reaqtive.core.errors import InvalidSettingError
from reaqtive.core.subjects import SimpleSubject
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.engine import store_keys
from reaqtive.engine.artifacts import ArtifactRecords
from reaqtive.engine.behind import Lag
from reaqtive.engine.checkpoint_policy import CheckpointPolicy
from reaqtive.engine.database import EngineStore, IngressEvent
from reaqtive.engine.engine_errors import (
    EngineClosedError,
)
from reaqtive.engine.event_times import EventTimeBounds
from reaqtive.engine.expressions import (
    FunctionRegistry,
)
from reaqtive.engine.failures import OnError, PolicyHost, SubscriptionPolicy
from reaqtive.engine.gc_policy import GcFreeze
from reaqtive.engine.handover import EngineLock
from reaqtive.engine.idle import Subscriptions
from reaqtive.engine.ingress import IngressWriter
from reaqtive.engine.model import (
    EngineStatus,
    RecoveryFailure,
    RecoveryMetrics,
    RecoveryPolicy,
    SubscriptionStatus,
)
from reaqtive.engine.positions import Positions
from reaqtive.engine.quarantine import Quarantine
from reaqtive.engine.query_environment import QueryEnvironment
from reaqtive.engine.readers import Envelope
from reaqtive.engine.records import Behind
from reaqtive.engine.signals import Signal
from reaqtive.engine.sinks import Egress
from reaqtive.engine.sources import Sources
from reaqtive.engine.stopped import StoppedQueries
from reaqtive.fluent.query import Query
from reaqtive.scheduler import UnhandledExceptionArgs, VirtualTimeScheduler
from reaqtive.state.host import HostedQuery, QueryHost

if TYPE_CHECKING:
    from reaqtive.engine.checkpointing import Checkpointing

_LOG: Final = logging.getLogger("reaqtive.engine")
# The store's categories and byte helpers, under the names the rooms import (reaqtive.engine.store_keys).
_ARTIFACTS: Final = store_keys.ARTIFACTS
_TEMPLATES: Final = store_keys.TEMPLATES
_ENGINE: Final = store_keys.ENGINE
_DELIVERY: Final = store_keys.DELIVERY
_OUTPUTS: Final = store_keys.OUTPUTS
_OBSERVED: Final = store_keys.OBSERVED
_SOURCES: Final = store_keys.SOURCES
_counter_bytes: Final = store_keys.counter_bytes
_to_bytes: Final = store_keys.to_bytes
_from_bytes: Final = store_keys.from_bytes
_now_text: Final = store_keys.now_text
_DELIVERY_BATCH: Final = 4096
_EGRESS_FLUSH_OUTPUTS: Final = 65536  # the durable sink's buffer is written once it holds this many outputs



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


def _check_whole(name: str, value: object, *, minimum: int, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidSettingError(f"{name} must be a whole number >= {minimum}, got {value!r}")


def _check_seconds(name: str, value: object, *, positive: bool, optional: bool = False) -> None:
    if value is None and optional:
        return
    if (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value)
            or value < 0 or (positive and value == 0)):
        wanted = "a finite number of seconds > 0" if positive else "a finite number of seconds >= 0"
        raise InvalidSettingError(f"{name} must be {wanted}, got {value!r}")


class RegistryCalls(Protocol):
    """What the rooms ask of the artifact registry (:class:`reaqtive.engine.registry.ArtifactRegistry`)."""

    def expand(self, root: Query[Any]) -> Query[Any]:
        """``root`` with the observable definitions it reads replaced by their queries."""
        ...

    def delete_subscription(self, uri: str) -> None:
        """Stop and delete subscription ``uri`` with its state."""
        ...

    def open_stream(self, uri: str) -> None:
        """Make stream ``uri``'s subject (recovery)."""
        ...

    def stored_state_of(self, uri: str) -> list[tuple[str, str]]:
        """The state rows of ``uri`` and its inner units that may be in the store."""
        ...


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
    # Parts made by Engine.__init__ once the running state is (reaqtive.engine.checkpointing, .registry).
    _checkpointing: Checkpointing
    _registry: RegistryCalls

    def _init_runtime(self, tick: timedelta) -> None:
        """The engine's running state, empty until recovery fills it."""
        self._init_running_mode()
        self._scheduler = self._root_scheduler(tick)
        # Where delivery stands in the log, a part of its own (reaqtive.engine.positions).
        self._positions = Positions(self._store.stream_heads)
        self._behind: dict[str, Lag] = {}  # queries behind the engine: paused or catching up (reaqtive.engine.behind)
        # The artifacts' records and their queries' templates, a part of its own (reaqtive.engine.artifacts).
        self._records = ArtifactRecords()
        self._faults_pending: list[tuple[str, Exception]] = []
        pending = self._faults_pending
        # The output side, a part of its own (reaqtive.engine.sinks): the durable sink's buffer, the output
        # counters, the outboxes and how far each got (its Outputs), cursors and acks, observer functions.
        self._egress = Egress(self._store, self._lock, self._records, self.functions, check_open=self._check_open,
                              fault=self._fault, fault_later=lambda uri, error: pending.append((uri, error)),
                              produced=self.produced.fire, appended=self.appended.fire,
                              retries=self._observer_retries, backoff=self._observer_backoff)
        self._outputs = self._egress.outputs  # (the other rooms ask it through its methods)
        self._streams: dict[str, SimpleSubject[Envelope]] = {}
        self._environment = QueryEnvironment(
            delivered=self._positions.delivered_at, counters=self._outputs.counters, cursor=self._positions.cursor,
            behind=self._behind,
            streams=self._streams, store=self._store, failed=self._unit_failed)
        self._host = QueryHost(self._scheduler, environment=self._environment, settings=self._settings,
                               logger=self._log)
        # Bound, or idle until their streams have an event for them (reaqtive.engine.idle).
        self._subscriptions = Subscriptions()
        self._subscriptions.set_binder(self._bind_idle)
        # What is kept stored without running, and where each stands: a part of its own (reaqtive.engine.stopped).
        self._stopped = StoppedQueries()
        self._legacy_caught_up: dict[str, int] = {}  # a delivery record from before log positions: its watermarks
        self._sources = Sources()  # register_source: their positions, stored with each checkpoint
        # The dead letters of delivery, a part of its own (reaqtive.engine.quarantine).
        self._quarantine = Quarantine(self._store, self._log)
        self._batch_delivery = True  # the fast path of _deliver_run (tests clear it to compare with the general one)
        tick_micros = tick // timedelta(microseconds=1)
        # Engine ticks are microseconds since the Unix epoch unless another tick was chosen: then rounded up, as
        # the scheduler rounds a datetime.
        self._ticks_of_micros: Callable[[int], int] | None = (
            None if tick == timedelta(microseconds=1) else lambda micros: -(-micros // tick_micros)
        )
        self.faults: list[RecoveryFailure] = []
        self._ended: dict[str, BaseException | None] = {}
        self.recovery = RecoveryMetrics()
        self._clock_started = False
        self._init_error_policies()

    def _init_error_policies(self) -> None:
        """What the subscriptions' error policies keep (see reaqtive.engine.failures)."""
        self._policies: dict[str, SubscriptionPolicy] = {}  # each running subscription's error policy
        self._policy_host = self._make_policy_host()
        self._user_errors: dict[tuple[str, str, str], int] = {}  # (subscription, error type, skip/stop): count

    def _init_running_mode(self) -> None:
        """What the processing loops, the pauses of queries and the processing thread of start() keep."""
        # Wake-ups for processing loops and output consumers (reaqtive.engine.signals), fired at batch
        # boundaries, never per event.
        self.appended = Signal("appended")
        self.produced = Signal("produced")
        self._stop_serving = False  # set by stop_serving(), cleared when serve() returns
        self._driver: threading.Thread | None = None  # the processing thread of start()
        self._driver_error: BaseException | None = None  # what stopped it, for stop()
        self._paused: set[str] = set()  # subscriptions paused by pause(uri) (see reaqtive.engine.scheduling)
        self._live_turn = False  # whether live delivery takes the next slice while queries catch up (delivery.py)

    def _root_scheduler(self, tick: timedelta) -> VirtualTimeScheduler:
        """The root of the queries' schedulers (each query runs on a child, see reaqtive.engine.scheduling)."""
        scheduler = VirtualTimeScheduler(tick, name="engine")
        scheduler.unhandled_exception.add(self._task_failed)
        # A thread waiting for the engine asks long work to give way (reaqtive.engine.handover).
        lock = self._lock
        scheduler.yield_source = lock.wants_turn
        return scheduler

    def _settle_status(self) -> None:
        """RUNNING, or DEGRADED while something is kept in the store without running (FAILED subscriptions
        included) or a typed stream waits for its validator."""
        if self._status in (EngineStatus.RUNNING, EngineStatus.DEGRADED):
            self._status = EngineStatus.DEGRADED if self._stopped.degraded else EngineStatus.RUNNING

    def _release(self, uri: str) -> None:
        """What the running and scheduling rooms keep of subscription ``uri`` goes: it was deleted, its creation
        was undone, or its definition is being replaced."""
        self._ended.pop(uri, None)
        self._policies.pop(uri, None)
        self._paused.discard(uri)
        self._behind.pop(uri, None)

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

    # -- defined in other rooms ------------------------------------------------------------------------------------

    def _apply_faults(self) -> None:
        raise NotImplementedError  # Running

    def _make_policy_host(self) -> PolicyHost:
        raise NotImplementedError  # Running

    def _status_of(self, uri: str, record: dict[str, Any]) -> SubscriptionStatus:
        raise NotImplementedError  # Running

    def _bind(self, uri: str, record: dict[str, Any], template: dict[str, Any], blob: bytes | None, *,
              behind: Behind | None = None, load: Callable[[SubscriptionHandle], None] | None = None) -> HostedQuery:
        raise NotImplementedError  # Running

    def _fault(self, uri: str, error: Exception) -> None:
        raise NotImplementedError  # Running

    def _follow_wall_clock(self) -> None:
        raise NotImplementedError  # Delivery

    def _misplaced(self, event: IngressEvent) -> str | None:
        raise NotImplementedError  # Delivery


    def _catch_up(self, budget: int | None) -> int:
        raise NotImplementedError  # Scheduling

    def _start_clock(self, at: datetime) -> None:
        raise NotImplementedError  # Delivery

    def _bind_idle(self, uri: str, blob: bytes) -> HostedQuery | None:
        raise NotImplementedError  # Running

    def _fall_behind(self, uri: str, pos: int | None = None) -> Lag:
        raise NotImplementedError  # Scheduling

    def _task_failed(self, args: UnhandledExceptionArgs) -> None:
        raise NotImplementedError  # Running

    def _unit_failed(self, instance_id: str, error: Exception) -> None:
        raise NotImplementedError  # Running
