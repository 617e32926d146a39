"""The query engine: standing queries by URI over durable streams, checkpoints into SQLite or PostgreSQL, recovery.

See ``docs/engine.md`` for the model. In short:

* Artifacts are addressed by URI: **streams** (``create_stream``), **observable definitions** (named queries,
  ``define_observable``), **observer definitions** (where outputs go, ``define_observer``) and **subscriptions**
  (``create_subscription(uri, query, observer)``). Each create or delete is committed to the store at once.
* Producers **append** events to streams; the events go to the durable ingress log first, and the engine delivers
  them, in append order, when :meth:`Engine.process` runs.
* The engine's clock is **event time** by default: before delivering an event the engine advances its virtual
  clock to the event's time, so time-based operators see the same times when the log is replayed after a crash.
  With ``clock="wall"`` the clock also follows the wall clock.
* :meth:`Engine.checkpoint` saves the state of every changed subscription (and inner subscription) atomically;
  after a restart, opening the engine on the same file recovers every artifact, loads its state, and replays the
  ingress log after each query's watermark: nothing is lost, and the durable sink holds no duplicates.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from reaqtive.core.subjects import SimpleSubject
from reaqtive.engine import store_keys
from reaqtive.engine.artifacts import ArtifactRecords
from reaqtive.engine.behind import Lag
from reaqtive.engine.checkpoint_policy import CheckpointPolicy
from reaqtive.engine.checkpointing import Checkpointing, CheckpointListener
from reaqtive.engine.database import MEMORY, DeadLetter, require_aware
from reaqtive.engine.delivery import Delivery, root_scheduler, ticks_of_micros
from reaqtive.engine.egress import Output
from reaqtive.engine.engine_errors import EngineClosedError
from reaqtive.engine.event_times import DEFAULT_MAX_EVENT_TIME_AHEAD, EventTimeBounds
from reaqtive.engine.expressions import (
    FunctionRegistry,
)
from reaqtive.engine.failures import OnError, check_on_error, error_name
from reaqtive.engine.gc_policy import GcFreeze
from reaqtive.engine.handover import DELIVERY_BATCH, EngineLock
from reaqtive.engine.idle import Subscriptions
from reaqtive.engine.ingress import IngressCommit, IngressWriter
from reaqtive.engine.model import (
    DISCARD_SINK,
    DURABLE_SINK,
    ArtifactInfo,
    CheckpointMetrics,
    EngineReadings,
    EngineStatus,
    RecoveryFailure,
    RecoveryMetrics,
    RecoveryPolicy,
    StreamReading,
    StreamStatus,
    SubscriptionReading,
    SubscriptionStatus,
)
from reaqtive.engine.named_sinks import SinkNameError, observer_uri, register_sink, sink_name, sink_reference
from reaqtive.engine.outbox import DEFAULT_OBSERVER_BACKOFF, DEFAULT_OBSERVER_RETRIES
from reaqtive.engine.positions import Positions
from reaqtive.engine.processing import Processing
from reaqtive.engine.quarantine import Quarantine
from reaqtive.engine.query_environment import QueryEnvironment
from reaqtive.engine.readers import Envelope
from reaqtive.engine.recovery import Recovery
from reaqtive.engine.registry import ArtifactRegistry
from reaqtive.engine.retention import Retention
from reaqtive.engine.running import Running
from reaqtive.engine.scheduling import Scheduling
from reaqtive.engine.settings import check_seconds, check_whole, engine_arguments
from reaqtive.engine.signals import Signal
from reaqtive.engine.sinks import Egress
from reaqtive.engine.sources import Sources
from reaqtive.engine.stopped import StoppedQueries
from reaqtive.engine.stores import open_engine_store
from reaqtive.engine.upgrade import UpdatePlan
from reaqtive.engine.upgrading import DefinitionEntry, Upgrading
from reaqtive.fluent.query import Query
from reaqtive.scheduler import VirtualTimeScheduler
from reaqtive.state import Checkpointer
from reaqtive.state.host import QueryHost

_LOG: Final = logging.getLogger("reaqtive.engine")
_CLOSE_COURIERS_SECONDS: Final = 5.0  # close() waits this long, in all, for observer batches in flight

__all__ = [
    "DISCARD_SINK",
    "DURABLE_SINK",
    "ArtifactInfo",
    "CheckpointMetrics",
    "Engine",
    "EngineStatus",
    "RecoveryFailure",
    "RecoveryMetrics",
    "RecoveryPolicy",
    "StreamStatus",
]


class Engine:
    """An embedded query engine on a SQLite file (created if missing), or on a PostgreSQL database given by its URL
    (``"postgresql://user@host/db"``, extra ``postgres``; see ``docs/engine.md``). See the module docstring.

    ``clock``: ``"event"`` (default; the clock follows event times, so replays are exact) or ``"wall"``.
    ``checkpoint_every_events`` / ``checkpoint_every_seconds``: a periodic checkpoint policy applied by
    :meth:`process`. ``recovery_policy`` and ``on_recovery_failure(uri, error) -> RecoveryPolicy | None``: what to
    do with an artifact that fails to recover. ``settings``: operator settings (limits) for every query.
    ``functions`` and ``allow_modules``: what stored queries may name (a store is data, never code): functions
    registered by name, and functions defined in these modules (added to ``functions``; see
    :class:`~reaqtive.engine.expressions.FunctionRegistry`); a stored reference to anything else fails recovery.
    ``schemas``: the validators of typed streams by name (``{"reading": Reading}``; added to ``functions``, see
    :meth:`register_schema` and ``docs/engine.md``, "Typed streams"); a stream naming one that is missing fails
    recovery.
    ``sinks``: the sinks stored observer definitions name, each carrying its name (``JsonLinesSink(path,
    name="alerts")``; see :mod:`reaqtive.engine.named_sinks`): registered before recovery, which resolves them by
    name. Pass the same sinks in every process that opens the store; ``create_subscription(..., observer=sink)``
    attaches one in a single step.
    ``synchronous``: SQLite durability (``"FULL"``, or ``"NORMAL"``: survives a process crash, faster).
    ``start``: where the clock of a new store starts (a recovered engine resumes its own clock). Without it the
    clock starts at the first of: :meth:`advance_time`, the first event delivered, or the first subscription
    created (then at the wall clock's time). To run time-based queries over older events in event time, pass
    the time of the first event. ``gc_freeze`` (off by default): after each checkpoint and after recovery, move
    what lives into the garbage collector's permanent generation, so that its full passes skip the queries'
    long-lived state. It is process-wide: the host program's objects are frozen too, and cyclic garbage among
    them waits for a full collection (see :mod:`reaqtive.engine.gc_policy`); turn it on in a process that is
    mostly the engine. ``observer_retries`` / ``observer_backoff``: how often
    and how patiently an observer function that raises is tried again before its subscription stops (see
    :mod:`reaqtive.engine.outbox`). ``max_event_time_ahead`` / ``allowed_lateness``: the bounds on event times
    outside which events are quarantined (see :mod:`reaqtive.engine.event_times`). ``ingress_commit``: when
    appended events are committed: ``"call"`` (default: each append is durable when it returns; concurrent
    appends share a commit) or :class:`~reaqtive.engine.ingress.GroupCommit` ``(events=N, seconds=T)`` (appends
    return at once; events are committed every N events or T seconds and by :meth:`flush_ingress`,
    :meth:`process`, :meth:`checkpoint` and :meth:`close`; a crash loses those not committed yet; see
    :mod:`reaqtive.engine.ingress`). ``on_error``: the error policy of the subscriptions created without one of
    their own (``"stop"``, ``"skip"`` or a function ``(error, context) -> "skip" | "stop"``; see
    :mod:`reaqtive.engine.failures`). ``lazy_binding`` (on by default): a recovered subscription with nothing to
    do until its stream has an event for it stays idle, unbound, until then (about 0.7 KB instead of 3 KB; see
    :mod:`reaqtive.engine.idle`); off, recovery binds every one and loads every state at once (what
    ``reaqtive checkpoint`` does, to check a store whole). One engine per store file: a second one is refused with
    :class:`~reaqtive.state.StoreLockedError`.

    ``path`` ``":memory:"`` (or :meth:`in_memory`): a new, empty engine in memory, for tests and notebooks. It
    behaves as a file engine does (checkpoints, the durable sink, cursors and acknowledgements, the same checks),
    but nothing outlives :meth:`close`: there is nothing to recover from.
    """


    _registry: ArtifactRegistry  # (the rooms know it by what they ask of it: RegistryCalls)

    def __init__(
        self,
        path: str | Path,
        *,
        clock: str = "event",
        functions: FunctionRegistry | None = None,
        allow_modules: Iterable[str] | str = (),
        schemas: Mapping[str, object] | None = None,
        sinks: Iterable[Callable[[Output], object]] = (),
        settings: Mapping[str, object] | None = None,
        recovery_policy: RecoveryPolicy = RecoveryPolicy.FAIL,
        on_recovery_failure: Callable[[str, BaseException], RecoveryPolicy | None] | None = None,
        checkpoint_every_events: int | None = None,
        checkpoint_every_seconds: float | None = None,
        synchronous: str = "FULL",
        start: datetime | None = None,
        tick: timedelta = timedelta(microseconds=1),
        logger: logging.Logger | None = None,
        gc_freeze: bool = False,
        observer_retries: int = DEFAULT_OBSERVER_RETRIES,
        observer_backoff: float = DEFAULT_OBSERVER_BACKOFF,
        max_event_time_ahead: timedelta | None = DEFAULT_MAX_EVENT_TIME_AHEAD,
        allowed_lateness: timedelta | None = None,
        ingress_commit: IngressCommit = "call",
        on_error: OnError = "stop",
        lazy_binding: bool = True,
    ) -> None:
        if clock not in ("event", "wall"):
            raise ValueError(f"clock must be 'event' or 'wall', got {clock!r}")
        self._on_error = check_on_error(on_error)
        check_whole("checkpoint_every_events", checkpoint_every_events, minimum=1, optional=True)
        check_seconds("checkpoint_every_seconds", checkpoint_every_seconds, positive=True, optional=True)
        check_whole("observer_retries", observer_retries, minimum=1)
        check_seconds("observer_backoff", observer_backoff, positive=False)
        self._observer_retries = observer_retries
        self._observer_backoff = float(observer_backoff)
        self._event_times = EventTimeBounds(max_event_time_ahead, allowed_lateness)
        self._lock = EngineLock()
        self._clock_mode = clock
        self.functions = (functions if functions is not None else FunctionRegistry()).allowing(allow_modules)
        for name, validator in (schemas or {}).items():  # before recovery: it checks each typed stream's validator
            self.functions.register_schema(name, validator)
        for sink in sinks:  # before recovery too: it resolves stored observer definitions by the sinks' names
            register_sink(self.functions, sink)
        self._settings = dict(settings or {})
        self._policy = recovery_policy
        self._on_failure = on_recovery_failure
        self._lazy_binding = bool(lazy_binding)
        self._checkpoint_policy = CheckpointPolicy(checkpoint_every_events, checkpoint_every_seconds)
        if start is not None:
            require_aware(start, "Engine(start=...)")
        self._log = logger or _LOG
        self._status = EngineStatus.RECOVERING
        self._gc = GcFreeze(gc_freeze)
        self._store = open_engine_store(path, synchronous=synchronous)
        try:
            self._ingress = IngressWriter(self._store, ingress_commit, logger=self._log)
            self._init_runtime(tick)
            # The artifacts by URI, a part of its own (reaqtive.engine.registry).
            running, delivery, scheduling = self._running, self._delivery, self._scheduling
            self._registry = ArtifactRegistry(
                self._store, self._lock, self.functions, self._records, self._streams, self._subscriptions,
                self._positions, self._outputs, self._environment, self._stopped, self._sources,
                self._checkpointing, self._scheduler, check_open=self._check_open, bind=running.bind,
                status_of=running.status_of, clock_started=lambda: delivery.clock_started,
                start_clock=delivery.start_clock, follow_wall_clock=delivery.follow_wall_clock,
                settle_status=self._settle_status, release=self._release, produced=self.produced.fire,
                appended=self.appended.fire)
            # Updates and rollbacks of running subscriptions, beside it (reaqtive.engine.upgrading).
            self._upgrades = Upgrading(
                self._store, self._lock, self.functions, self._records, self._subscriptions, self._positions,
                self._outputs, self._environment, self._checkpointing, self._scheduler, settings=self._settings,
                log=self._log, behind=scheduling.behind, check_open=self._check_open,
                boundary=lambda: self.checkpoint(),  # noqa: PLW0108 (late bound: a test stands in for it)
                bind=running.bind, expand=self._registry.expand, forget_policy=running.drop_policy,
                forget_ended=running.forget_ended, forget_behind=scheduling.drop_behind,
                produced=self.produced.fire, appended=self.appended.fire)
            # The processing thread of start() and the loop of serve() (reaqtive.engine.processing); process,
            # idle_seconds and checkpoint are looked up at each call: a host, or a test, may wrap the engine's.
            self._processing = Processing(
                lock=self._lock, where=str(self._store.path), check_open=self._check_open,
                process=lambda events: self.process(events),  # noqa: PLW0108
                idle_seconds=lambda: self.idle_seconds(),  # noqa: PLW0108
                checkpoint=lambda: self.checkpoint(),  # noqa: PLW0108
                appended=self.appended, start_couriers=self._egress.start_couriers,
                stop_couriers=self._egress.stop_couriers, log=self._log)
            Recovery(self).load()
            if not self._delivery.clock_started and start is not None:
                self._delivery.start_clock(start)
            self._gc.after_checkpoint()  # the recovered state is long-lived, as after a checkpoint
        except BaseException:
            self._store.close()
            raise

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **options: Any) -> Engine:
        """An engine configured by the ``REAQTIVE_*`` variables of ``environ`` (``os.environ`` by default; the list:
        :class:`~reaqtive.engine.settings.EngineSettings`, ``docs/deploying.md``). ``options`` override them
        (``store=``, ``clock=``, ...) and add what is code (``functions``, ``schemas``, ``sinks``). A bad value
        raises :class:`~reaqtive.engine.settings.EnvironmentSettingError` naming the variable, before anything
        opens.

        Example: ``engine = Engine.from_env(functions=registry, sinks=[alerts])``
        """
        store, arguments = engine_arguments(environ, options)
        return cls(store, **arguments)

    @classmethod
    def in_memory(cls, **options: Any) -> Engine:
        """A new engine on an in-memory store (``Engine(":memory:", **options)``): the same behaviour minus
        durability; what it holds is gone when it closes.

        Example: ``with Engine.in_memory(start=T0) as engine: ...``
        """
        return cls(MEMORY, **options)

    def register_sink(self, sink: Callable[[Output], object]) -> str:
        """Make ``sink`` known by its name, as ``Engine(sinks=[sink])`` does, and return its observer URI
        (``obs://<name>``). A store that already names the sink needs it before it opens: pass it to the
        constructor. :class:`~reaqtive.engine.named_sinks.SinkNameError` if another object has the name."""
        with self._lock:
            return observer_uri(register_sink(self.functions, sink))

    def attach_sink(self, sink: Callable[[Output], object]) -> str:
        """Register ``sink`` and define its observer ``obs://<name>`` unless it is defined already; return the URI
        (what ``create_subscription(..., observer=sink)`` does first). Attaching the same sink again changes
        nothing; a name that another sink, function or definition has is refused with
        :class:`~reaqtive.engine.named_sinks.SinkNameError` (nothing changed)."""
        with self._lock:
            self._check_open()
            name = sink_name(sink, self.functions)
            uri = observer_uri(name)
            record = self._records.get(uri)
            if record is not None and (record["kind"] != "observer" or record.get("function") != sink_reference(name)):
                what = (f"the observer of {record.get('function')!r}" if record["kind"] == "observer"
                        else f"a {record['kind']}")
                raise SinkNameError(f"cannot attach the sink {sink!r} as {uri!r}: that URI is already {what}; give "
                                    "the sink another name (name=...)")
            register_sink(self.functions, sink)
            if record is None:
                self.define_observer(uri, sink)
            return uri

    def create_subscription(
        self,
        uri: str,
        query: Query[Any],
        observer: str | Callable[[Output], object] = DURABLE_SINK,
        *,
        priority: int = 0,
        on_error: OnError | None = None,
        start: int | datetime | str | None = None,
    ) -> None:
        """Start the standing query ``query`` as ``uri``, its outputs going to ``observer``: an observer URI
        (``DURABLE_SINK``, the default; ``DISCARD_SINK``; an ``obs://...`` definition), or a sink object, which
        is attached in the same step (:meth:`attach_sink`: ``observer=JsonLinesSink("alerts.jsonl")`` defines
        ``obs://alerts`` on first use). A sink's definition stays if the subscription is refused (attaching it
        again is a no-op).

        ``priority``: where its work goes among other queries' work due at the same instant, lower first (see
        :meth:`set_priority`). ``on_error``: what happens when a user function in the query raises (``"stop"``:
        the query stops, FAILED; ``"skip"``: the element is dropped there and kept as a dead letter; or a function
        ``(error, context) -> "skip" | "stop"``, persisted by reference like the query's functions); ``None``: the
        engine's default (see :mod:`reaqtive.engine.failures`). ``start``: ``None``, the events appended from
        now on; or a **backfill** over the retained log: ``"earliest"`` (the oldest event retained for the
        streams it reads), a log position (as if created when the engine stood there: :attr:`log_position`) or
        an aware ``datetime`` (as if created then): it processes that history behind the engine, in slices, then
        joins live input with no gap and no duplicate (see :mod:`reaqtive.engine.backfill`). Fails (changing
        nothing) if the query cannot be persisted (the message names the argument), reads an unknown stream or
        definition, the URI exists, or ``start`` is not retained (:class:`~reaqtive.engine.StartNotRetainedError`),
        is past the log (:class:`~reaqtive.engine.StartBeyondLogError`) or not a start
        (:class:`~reaqtive.engine.StartError`).
        """
        with self._lock:
            if not isinstance(observer, str):
                observer = self.attach_sink(observer)
            self._registry.create_subscription(uri, query, observer, priority=priority, on_error=on_error,
                                               start=start)

    # -- the artifacts by URI (reaqtive.engine.registry) ---------------------------------------------------------

    def register_function(self, name: str, function: Callable[..., Any]) -> None:
        """Make ``function`` usable in persisted queries as ``@name`` (register it again before recovery)."""
        self._registry.register_function(name, function)

    def register_source(self, name: str, state: Callable[[], bytes]) -> None:
        """Store ``state()`` under ``name`` with every checkpoint, in its transaction (an input source's position:
        see :mod:`reaqtive.connectors.file_source`); read it back after a restart with :meth:`source_state`.
        ``state`` is called under the engine's lock: it must be quick and must not call the engine."""
        self._registry.register_source(name, state)

    def unregister_source(self, name: str) -> None:
        """Stop storing source ``name``'s state (its last stored state stays; unknown: a no-op)."""
        self._registry.unregister_source(name)

    def source_state(self, name: str) -> bytes | None:
        """The state of source ``name`` in the last checkpoint (``None``: none stored). Data, never code: the
        source decodes it with checks. A damaged row raises :class:`MalformedRecordError`."""
        return self._registry.source_state(name)

    def create_stream(
        self, uri: str, schema: str | None = None, *, retain: Retention | timedelta | None = None
    ) -> None:
        """Create the durable stream ``uri``.

        ``schema``: the name of a validator registered with :meth:`register_schema` (or ``Engine(schemas=...)``):
        every event appended to the stream must pass it, and is stored in its validated form (see
        ``docs/engine.md``, "Typed streams"). The record stores the name; every process that opens the store
        must register it again. ``retain``: how much of its log to keep beyond what its readers need, so that a
        new subscription can backfill over it (``create_subscription(..., start=...)``): a
        :class:`~reaqtive.engine.retention.Retention` by age, events or bytes, or a ``timedelta`` (an age);
        ``None``: only what its readers need (see ``docs/engine.md``, "Log retention"); change it with
        :meth:`set_retention`. Refused (changing nothing): a name not registered (:class:`UnknownSchemaError`),
        a retention not valid (:class:`~reaqtive.engine.RetentionError`), a URI that exists
        (:class:`ArtifactExistsError`; a stream's schema is fixed when it is created).
        """
        self._registry.create_stream(uri, schema, retain=retain)

    def set_retention(self, uri: str, retain: Retention | timedelta | None) -> None:
        """Change how much of stream ``uri``'s log is kept (see :meth:`create_stream`); committed when this
        returns, applied from the next checkpoint on. Lowering it lets the next checkpoint truncate what the new
        retention and the readers do not need (history dropped cannot be backfilled over any more)."""
        self._registry.set_retention(uri, retain)

    def delete_stream(self, uri: str) -> None:
        """Delete the stream ``uri``; refused while a query reads it."""
        self._registry.delete_stream(uri)

    def streams(self) -> dict[str, StreamStatus]:
        """Every stream with its ingress watermarks, its retention and what its log retains (events, bytes, the
        oldest event's number and time, the log positions of the oldest and newest)."""
        return self._registry.streams()

    def define_observable(self, uri: str, query: Query[Any]) -> None:
        """Name a query: other queries read it with ``Query.stream(uri)`` (it is expanded where it is used)."""
        self._registry.define_observable(uri, query)

    def define_observer(self, uri: str, function: Callable[[Output], object]) -> None:
        """Name a function that receives the outputs of subscriptions (at least once, with their ids). It is
        persisted by reference: a module-level function, or one registered with :meth:`register_function`."""
        self._registry.define_observer(uri, function)

    def undefine(self, uri: str) -> None:
        """Remove an observable or observer definition; refused while an artifact uses it."""
        self._registry.undefine(uri)

    def delete_subscription(self, uri: str) -> None:
        """Stop and delete the subscription ``uri`` with its state (and its template when no one else uses it)."""
        self._registry.delete_subscription(uri)

    def artifacts(self) -> list[ArtifactInfo]:
        """Every artifact, by URI."""
        return self._registry.artifacts()

    def created_at(self, uri: str) -> datetime | None:
        """When the artifact ``uri`` was created (``None``: there is none); cheap, from memory. A URI deleted and
        created again has a new time: a consumer can tell it from the one it was reading."""
        return self._registry.created_at(uri)

    def info(self, uri: str) -> ArtifactInfo:
        """What the engine knows about ``uri``."""
        return self._registry.info(uri)

    def register_schema(self, name: str, validator: object) -> None:
        """Register ``validator`` as the schema ``name`` of typed streams (``create_stream(uri, schema=name)``):
        a pydantic model class, a pydantic ``TypeAdapter``, a msgspec ``Struct`` type, or a callable
        ``event -> value`` that raises on a bad event (see :mod:`reaqtive.engine.schemas`). Register it again
        in every process that opens the store, before it opens (``Engine(schemas=...)``), as the functions of
        stored queries: recovery fails a stream whose validator is missing, under the recovery policy. A stream
        kept by ``RecoveryPolicy.KEEP`` without its validator accepts appends again once it is registered (and the
        engine is no longer DEGRADED for it)."""
        self._registry.register_schema(name, validator)

    # -- updates of running subscriptions (reaqtive.engine.upgrading) --------------------------------------------

    def update_subscription(
        self,
        uri: str,
        query: Query[Any],
        *,
        unmatched: str = "empty",
        require_state: bool = False,
        dry_run: bool = False,
        start: int | datetime | str | None = None,
    ) -> UpdatePlan:
        """Replace the definition of running subscription ``uri`` by ``query`` at one checkpoint boundary, keeping
        the state of the operators it shares with the old one (see :mod:`reaqtive.engine.upgrade` for what is
        matched: ``.named(...)`` parts by name, the rest by path and operator; a state moves when its version
        is one the new operator loads). Outputs before the boundary come from the old definition, after it from
        the new, numbered on. Returns the :class:`~reaqtive.engine.upgrade.UpdatePlan` of what was done.

        ``unmatched``: ``"empty"`` (operators without a state to move start empty) or ``"backfill"`` (the whole
        new definition is rebuilt from the retained log from ``start``, ``"earliest"`` by default, and catches
        up behind the engine; no state moves). ``require_state``: refuse the update if any operator of the new
        definition would start empty or any operator of the old one would be dropped. ``dry_run``: compute and
        return the plan only, changing nothing (the refusals below apply).

        Refused with nothing changed: no such subscription (:class:`~reaqtive.engine.ArtifactNotFoundError`), a
        query that cannot be persisted or reads what does not exist (as ``create_subscription``), and, as
        :class:`~reaqtive.engine.UpdateError`: a subscription that does not run (failed or stopped: restart it
        first), is paused or catching up, a required state that cannot move, a new definition that fails to
        start from the state it is given, ``start`` given without ``unmatched="backfill"``.
        """
        return self._upgrades.update_subscription(uri, query, unmatched=unmatched, require_state=require_state,
                                                  dry_run=dry_run, start=start)

    def rollback_subscription(self, uri: str, *, state: str = "current", dry_run: bool = False) -> UpdatePlan:
        """Go back to subscription ``uri``'s previous definition (its history's last), at one checkpoint boundary
        as an update. ``state="current"`` (default): the operators both definitions share go on from the current
        state (they saw every event since the swap); the others take the state they had at the swap, kept in the
        store. ``state="kept"``: the previous definition resumes from its state at the swap, as it was (the
        events since are not replayed to it). The current definition becomes the history's last entry, so a
        second rollback goes forward again. Refused (:class:`~reaqtive.engine.UpdateError`, nothing changed)
        when there is no previous definition, or as :meth:`update_subscription`."""
        return self._upgrades.rollback_subscription(uri, state=state, dry_run=dry_run)

    def subscription_history(self, uri: str) -> list[DefinitionEntry]:
        """Every definition subscription ``uri`` had, oldest first, the current one last: each with its
        ``expression``, ``observer``, ``from`` (when it took effect) and ``until`` (when it was replaced;
        ``None`` for the current one) and ``pos`` (the log position of that swap)."""
        return self._upgrades.subscription_history(uri)

    # -- checkpoints (reaqtive.engine.checkpointing) ------------------------------------------------------------

    def checkpoint(self, *, full: bool = False) -> CheckpointMetrics:
        """Take a checkpoint (differential by default): durable sink first, then every changed subscription's
        state in one transaction, then the ingress log is truncated up to what the commit covers."""
        return self._checkpointing.checkpoint(full)

    async def checkpoint_async(self, *, full: bool = False) -> CheckpointMetrics:
        """:meth:`checkpoint`, awaitable: the work runs in a worker thread."""
        return await self._checkpointing.checkpoint_async(full)

    @property
    def last_checkpoint(self) -> CheckpointMetrics | None:
        """The metrics of the last checkpoint that committed (``None``: none since the engine opened)."""
        return self._checkpointing.last

    def add_checkpoint_listener(self, listener: CheckpointListener) -> None:
        """Call ``listener(metrics, error)`` at the end of every checkpoint: ``(CheckpointMetrics, None)`` once
        it committed, ``(None, error)`` when it failed (the error then propagates as before). It runs on the
        checkpointing thread, under the engine's lock: keep it quick. One that raises is logged and the
        checkpoint is unaffected (:class:`~reaqtive.engine.metrics.PrometheusMetrics` listens this way)."""
        self._checkpointing.add_listener(listener)

    def remove_checkpoint_listener(self, listener: CheckpointListener) -> None:
        """Stop calling ``listener`` (added by :meth:`add_checkpoint_listener`; unknown: a no-op)."""
        self._checkpointing.remove_listener(listener)

    @property
    def _checkpointer(self) -> Checkpointer:
        """The state checkpointer (tests spy on it)."""
        return self._checkpointing.checkpointer

    def _covered_by_checkpoint(self) -> dict[str, int]:
        """Per stream, the last event the log may lose (tests compare it)."""
        return self._checkpointing.covered_by_checkpoint()

    # -- the output side (reaqtive.engine.sinks) ----------------------------------------------------------------

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
        return self._egress.sink_outputs(subscription, after, limit)

    def ack(self, subscription: str, seq: int) -> None:
        """Record, durably at once, that the consumers of ``subscription`` have every output up to ``seq``:
        :meth:`outputs` no longer returns them, and the next :meth:`trim` (every checkpoint runs one) deletes
        them from the durable sink. Only for a subscription whose observer is the durable sink.

        Acknowledgements only move forward: one at or below the current one is a no-op (a consumer may repeat
        it after a restart). One beyond the last output produced raises :class:`AckError` (nothing is recorded):
        a consumer cannot have an output that does not exist yet.
        """
        self._egress.ack(subscription, seq)

    def trim(self) -> int:
        """Delete the acknowledged outputs from the durable sink, in one transaction (a row of the sink that
        also holds unacknowledged outputs stays until they are acknowledged too). Returns how many outputs
        were deleted. Every checkpoint ends with one; call it to reclaim space between checkpoints."""
        return self._egress.trim()

    # -- appends and delivery (reaqtive.engine.delivery), the processing thread (reaqtive.engine.processing) --

    def append(self, stream: str, value: Any, time: datetime | None = None) -> int:
        """Append one event to ``stream``; returns its sequence number. ``time``: its event time (aware; default
        now). Durable when this returns (``ingress_commit="call"``: appends from several threads share one
        commit), or, with :class:`~reaqtive.engine.ingress.GroupCommit`, once the next group is committed."""
        return self._delivery.append_events(stream, [(value, time)])[0]

    def append_many(self, stream: str, events: Iterable[tuple[Any, datetime | None]]) -> list[int]:
        """Append several ``(value, time)`` events in one transaction (``time`` ``None``: now); returns their
        sequence numbers. Nothing is appended if one of them is refused (``None``, a naive time, a value the
        codec cannot save, or, on a typed stream, a value its validator refuses:
        :class:`~reaqtive.engine.engine_errors.SchemaValidationError` naming the event's index and the fields);
        those dated too far ahead go to the dead letters, numbered (see :meth:`append` for when they are
        durable). On a typed stream the validated form of each value is what is stored."""
        first, count = self._delivery.append_events(stream, events)
        return list(range(first, first + count))

    def extend(self, stream: str, events: Iterable[tuple[Any, datetime | None]]) -> int:
        """Append ``(value, time)`` events from any iterable (a generator, a file being read), in transactions
        of 10,000 events (``ingress.EXTEND_CHUNK``), so that memory stays bounded; returns how many were appended.
        Not atomic as a whole: if one chunk is refused (see :meth:`append_many`), the chunks before it stay (a
        :class:`~reaqtive.engine.engine_errors.SchemaValidationError` gives the event's index in this call and
        how many events were appended before its chunk)."""
        return self._delivery.extend(stream, events)

    def flush_ingress(self) -> None:
        """Commit the appended events still waiting (with :class:`~reaqtive.engine.ingress.GroupCommit`; with
        ``"call"`` every append is committed when it returns): when this returns they are durable."""
        self._ingress.flush()

    def dead_letters(
        self, stream: str | None = None, *, subscription: str | None = None, after: int | None = None,
        limit: int | None = None,
    ) -> list[DeadLetter]:
        """The dead letters not acknowledged yet (:meth:`ack_dead_letters`), in the order of their numbers, of both
        kinds (:class:`~reaqtive.engine.DeadLetter` says what each holds): events quarantined (dated out of
        bounds, damaged or missing in the log; see :mod:`reaqtive.engine.event_times`), kept and never delivered,
        and elements a user function raised on that a subscription skipped under its error policy ``"skip"``.

        ``stream``: only the quarantined events of that stream; ``subscription``: only the failed elements of that
        subscription (not both). A cursor: ``after``, a dead letter's number (below the acknowledgement: from the
        acknowledgement on), and ``limit``, at most that many. A damaged row is listed with ``damage`` set.

        Example: ``batch = engine.dead_letters(after=last_seen, limit=100)``
        """
        return self._delivery.dead_letters(stream, subscription=subscription, after=after, limit=limit)

    def ack_dead_letters(self, upto_id: int) -> bool:
        """Record, durably when this returns, that the consumers have handled every dead letter (of both kinds)
        numbered up to ``upto_id``: :meth:`dead_letters` no longer lists them, and the checkpoints delete them
        from the store once nothing needs them (see ``docs/engine.md``, "Event times out of bounds, and dead
        letters"). Returns whether the acknowledgement moved.

        Acknowledgements only move forward: one at or below the current one is a no-op (a consumer may repeat it
        after a restart); ``0`` acknowledges nothing. One above the last number given raises
        :class:`~reaqtive.engine.AckError` and records nothing: a consumer cannot have handled a dead letter that
        does not exist yet.

        Example: ``letters = engine.dead_letters(); ...; engine.ack_dead_letters(letters[-1].id)``
        """
        return self._delivery.ack_dead_letters(upto_id)

    def process(self, max_events: int | None = None) -> int:
        """Deliver pending ingress events (all, or up to ``max_events``) in append order, applying the checkpoint
        policy as it goes; returns how many were delivered. After each slice, once it let go of the engine, the
        outputs waiting for observer functions are handed on (see :mod:`reaqtive.engine.outbox`)."""
        return self._delivery.process(max_events)

    def serve(self, *, batch_events: int = DELIVERY_BATCH, idle_seconds: float | None = None) -> None:
        """Process appended events as they come, on the calling thread, until :meth:`stop_serving` is called or
        the engine closes. Appends wake it (no polling); between batches of ``batch_events`` it releases the
        engine, so that other threads' calls get their turn. When idle it also wakes every ``idle_seconds``
        (default: :meth:`idle_seconds`) for the periodic checkpoint and the wall clock's timers.

        Example: ``threading.Thread(target=engine.serve, daemon=True).start()``, then ``engine.stop_serving()``.
        """
        self._processing.serve(batch_events=batch_events, idle_seconds=idle_seconds)

    def start(self, *, batch_events: int = DELIVERY_BATCH) -> None:
        """Run the engine in **running mode** on a processing thread of its own (named ``reaqtive-engine``):
        appended events are delivered as they come and, with ``clock="wall"``, timers fire at their time, with no
        call from the host. :meth:`stop` ends it with a final checkpoint; :meth:`close` ends it too (without one).
        The other methods stay callable from any thread: each waits for at most one slice of the processing
        (``docs/engine.md``, "Pauses and slices"). Raises :class:`EngineRunningError` if it already runs."""
        self._processing.start(batch_events=batch_events)

    @property
    def running(self) -> bool:
        """Whether the processing thread of :meth:`start` runs."""
        return self._processing.running

    def stop(self, *, checkpoint: bool = True, timeout: float | None = 60.0) -> None:
        """Stop the processing thread of :meth:`start` once the batch at hand is delivered, then take a final
        checkpoint (``checkpoint=False``: none). Re-raises the error that stopped the thread, if one did (as
        :class:`ProcessingStoppedError`). Without a thread it only takes the checkpoint."""
        self._processing.stop(checkpoint=checkpoint, timeout=timeout)

    def stop_serving(self) -> None:
        """Make :meth:`serve` return once the batch at hand is delivered (from any thread); called before the
        serving thread reached :meth:`serve`, it makes that call return at once."""
        self._processing.stop_serving()

    def idle_seconds(self) -> float | None:
        """How long a processing loop may wait for appends before it calls :meth:`process` anyway, asked before
        each wait: under ``clock="wall"``, until the next timer of the queries is due by the wall clock (so a
        ``debounce``, a ``timer`` or the last window of a quiet stream fires on time with no event and no call
        from the host); with ``checkpoint_every_seconds``, until the periodic checkpoint is due; otherwise
        ``None``: only appends wake it."""
        return self._delivery.idle_seconds()

    def advance_time(self, to: datetime) -> None:
        """Move the engine's clock forward to ``to`` (aware), firing the timers due until then."""
        self._delivery.advance_time(to)

    # -- pauses and priorities (reaqtive.engine.scheduling) -------------------------------------------------

    def pause(self, uri: str) -> None:
        """Pause subscription ``uri`` where it stands in the log: its timers wait and the events appended to the
        streams it reads wait in the durable log, until :meth:`resume`. Other queries go on. Pausing a paused
        subscription does nothing.

        The events wait in the log, not in memory: a pause can last any time (the log grows by what is appended
        meanwhile; it is not truncated past what the paused query has not read). After :meth:`resume` the query
        catches up through the log with its timers interleaved as without the pause (with the event clock, its
        outputs are those of a query never paused). A store reopened while a query was paused runs it, and it
        catches up from where it stood. Raises :class:`ArtifactNotFoundError` for a URI that is not a running
        subscription.
        """
        self._scheduling.pause(uri)

    def resume(self, uri: str) -> None:
        """Resume subscription ``uri`` (paused by :meth:`pause`): the processing loop catches it up (the events
        it has not read, in order, its timers in between, on its own clock), then it goes on with the others.
        Resuming a running subscription does nothing."""
        self._scheduling.resume(uri)

    def is_paused(self, uri: str) -> bool:
        """Whether subscription ``uri`` is paused (:class:`ArtifactNotFoundError` if there is none)."""
        return self._scheduling.is_paused(uri)

    def paused(self) -> list[str]:
        """The paused subscriptions, sorted."""
        return self._scheduling.paused()

    def is_behind(self, uri: str) -> bool:
        """Whether subscription ``uri`` is behind the engine: paused, or resumed (or recovered) and not caught up
        yet (the next :meth:`~reaqtive.engine.Engine.process` catches it up); :class:`ArtifactNotFoundError` if
        there is none."""
        return self._scheduling.is_behind(uri)

    def priority(self, uri: str) -> int:
        """The priority of subscription ``uri`` (see :meth:`set_priority`)."""
        return self._scheduling.priority(uri)

    def set_priority(self, uri: str, priority: int) -> None:
        """Set the priority of subscription ``uri``: among the work of several queries due at the same instant
        (timers, the work an event triggered), a lower priority runs first (0 by default; an alert at -1 runs
        ahead of reports at 0). Stored with the subscription (committed when this returns); exact replay keeps
        it, since the order of work is part of what a replay must repeat."""
        self._scheduling.set_priority(uri, priority)

    # -- the running queries (reaqtive.engine.running) ----------------------------------------------------------

    @property
    def faults(self) -> list[RecoveryFailure]:
        """The subscriptions stopped while the engine ran (a fault, or a failure under their error policy), and
        why, in order."""
        return self._running.faults

    def restart_subscription(self, uri: str, *, skip_failed: bool = False) -> None:
        """Run subscription ``uri`` again from its last checkpoint: a FAILED one (after the host registered a
        fixed function, for instance) or one STOPPED by a fault or a recovery failure. It catches up through the
        log from where its last checkpoint left it, on its own clock, and its outputs go on exactly once (those
        the sink holds already are produced again with the same ids and compared). ``skip_failed``: skip the
        element that failed it (kept as a dead letter) when it fails again. Raises
        :class:`~reaqtive.engine.ArtifactInUseError` for a subscription that runs; if it cannot start (its
        function still missing...), it stays as it was and the error is raised."""
        self._running.restart_subscription(uri, skip_failed=skip_failed)

    def subscriptions(self) -> list[SubscriptionStatus]:
        """Every subscription's state (running, paused, catching up, completed, failed, stopped), sorted by URI;
        a failed or stopped one with what stopped it (see :class:`~reaqtive.engine.model.SubscriptionStatus`)."""
        return self._running.subscriptions()

    def stopped_error(self, uri: str) -> BaseException | None:
        """Why subscription ``uri`` does not run, if it does not (a FAILED one: its
        :class:`~reaqtive.engine.failures.SubscriptionFailedError`; one stopped by a fault or a recovery failure:
        that error); ``None`` while it runs, is paused or catching up, or once it completed;
        :class:`ArtifactNotFoundError` if there is none."""
        return self._running.stopped_error(uri)

    def subscription_error(self, uri: str) -> BaseException | None:
        """The error that ended subscription ``uri``'s query: for a FAILED one the error its query raised (after a
        restart of the process, a :class:`~reaqtive.engine.failures.RecordedError` with its type's name and its
        message); ``None`` while it runs, once it completed, or when something else stopped it (a fault, a
        recovery failure: see :meth:`stopped_error` and :meth:`subscription_status`); :class:`ArtifactNotFoundError`
        if there is none."""
        return self._running.subscription_error(uri)

    def subscription_status(self, uri: str) -> SubscriptionStatus:
        """The state of subscription ``uri`` (see :meth:`subscriptions`)."""
        return self._running.subscription_status(uri)

    # -- private names the tests read (and one they set), kept on the facade ------------------------------------

    @property
    def _behind(self) -> Mapping[str, Lag]:
        return self._scheduling.behind

    @property
    def _driver(self) -> threading.Thread | None:
        return self._processing.driver

    @property
    def _batch_delivery(self) -> bool:
        return self._delivery.batch_delivery

    @_batch_delivery.setter
    def _batch_delivery(self, value: bool) -> None:
        self._delivery.batch_delivery = value

    @property
    def log_position(self) -> int:
        """The log position the engine delivered up to: a subscription created now reads the events after it, and
        ``create_subscription(..., start=p)`` later starts as one created when the engine stood at ``p`` (while
        the log retains what follows ``p``)."""
        return self._positions.cursor.pos

    @property
    def status(self) -> EngineStatus:
        """Recovering, running, checkpointing, degraded or closed."""
        return self._status

    @property
    def path(self) -> Path | str:
        """The store file (``Path(":memory:")`` for an in-memory engine); for an engine on PostgreSQL, the
        database's URL without its password (a ``str``)."""
        return self._store.path

    @property
    def now(self) -> datetime:
        """The engine's clock."""
        return self._scheduler.now

    @property
    def scheduler(self) -> VirtualTimeScheduler:
        """The engine's scheduler (its clock); operators get it from their context."""
        return self._scheduler

    def snapshot(self) -> EngineReadings:
        """What a monitor wants to know, copied at one moment (see :class:`~reaqtive.engine.model.EngineReadings`):
        status, per stream appended/delivered/lag, per subscription its outputs and observer backlog, faults,
        failures, user errors. Metrics (:mod:`reaqtive.engine.metrics`) and services read this. Safe from any
        thread: it holds the engine's lock while it copies (a batch of :meth:`process` or a checkpoint in
        progress delays it), and reads nothing from the store. A closed engine reports its status, and what it
        held last.

        Example: ``lag = engine.snapshot().streams["orders"].lag``
        """
        with self._lock:
            status = self._status
            heads = dict(self._positions.heads)  # appends update it without the lock: one C-level copy, atomic
            delivered = dict(self._positions.delivered)
            dead, dead_ahead = self._quarantine.per_stream(delivered)  # those ahead are no backlog
            streams: dict[str, StreamReading] = {}
            retained = self._checkpointing.retained
            for uri in sorted(self._streams):
                appended, done = heads.get(uri, 0), delivered.get(uri, -1) + 1
                lag = max(appended - done - dead_ahead.get(uri, 0), 0)
                streams[uri] = StreamReading(appended, done, dead.get(uri, 0), lag, *retained.get(uri, (0, 0)))
            acks = self._store.acks() if status is not EngineStatus.CLOSED else {}
            # (the store keeps these counts in memory: no read of the database under the engine's lock)
            failed_elements = self._store.failed_element_counts() if status is not EngineStatus.CLOSED else {}
            subscriptions: dict[str, SubscriptionReading] = {}
            for uri in sorted(self._subscriptions):
                observer = self._records.get(uri, {}).get("observer", DISCARD_SINK)
                counter = self._outputs.counters.get(uri)
                outbox = self._outputs.outboxes.get(uri)
                subscriptions[uri] = SubscriptionReading(
                    observer=observer,
                    produced=counter.next if counter is not None else 0,
                    acknowledged=acks.get(uri, -1) + 1 if observer == DURABLE_SINK else None,
                    pending=len(outbox.pending) if outbox is not None else None,
                    failed_attempts=outbox.attempts if outbox is not None else None,
                )
            faults = {policy: 0 for policy in (RecoveryPolicy.KEEP, RecoveryPolicy.REMOVE)}  # never FAIL while running
            for failure in self.faults:
                faults[failure.policy] = faults.get(failure.policy, 0) + 1
            recovery = self.recovery
            return EngineReadings(
                status=status,
                streams=MappingProxyType(streams),
                subscriptions=MappingProxyType(subscriptions),
                kept_subscriptions=self._stopped.kept_subscriptions,
                faults=MappingProxyType(faults),
                egress_buffered=len(self._outputs.buffer),
                recovery=RecoveryMetrics(dict(recovery.phases), recovery.streams, recovery.definitions,
                                         recovery.subscriptions, recovery.inner_subscriptions,
                                         list(recovery.failures), list(recovery.orphans)),
                last_checkpoint=self.last_checkpoint,
                failed_elements=MappingProxyType(failed_elements),
                failed=MappingProxyType({uri: error_name(why.error) for uri, why in self._stopped.failed.items()}),
                user_errors=MappingProxyType(dict(self._running.user_errors)),
            )

    def close(self) -> None:
        """Flush the durable sink, dispose every query and close the store (no checkpoint is taken)."""
        with self._lock:
            if self._status is EngineStatus.CLOSED:
                return
            try:
                self._outputs.flush()
            finally:
                self._outputs.outboxes.close(_CLOSE_COURIERS_SECONDS)
                self._host.dispose()  # the queries, then the inner units, then the scheduler
                self._store.close()
                self._gc.release()
                self._status = EngineStatus.CLOSED
                self.appended.fire()  # every waiter wakes up and finds the engine closed
                self.produced.fire()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the parts, wired ------------------------------------------------------------------------------------------

    def _init_runtime(self, tick: timedelta) -> None:
        """The engine's parts, empty until recovery fills them. A part made later is called through a lambda
        (looked up once it exists)."""
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
            checkpointing=self._mark_checkpointing, apply_faults=apply_faults, fault=fault,
            clock_moves=self._scheduling.clock_moves)
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
