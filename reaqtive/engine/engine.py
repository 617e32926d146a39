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

from reaqtive.engine._room import (
    _DELIVERY_BATCH,
    _LOG,
    EngineRoom,
    _check_seconds,
    _check_whole,
)
from reaqtive.engine.behind import Lag
from reaqtive.engine.checkpoint_policy import CheckpointPolicy
from reaqtive.engine.checkpointing import Checkpointing
from reaqtive.engine.database import MEMORY, DeadLetter, require_aware
from reaqtive.engine.egress import Output
from reaqtive.engine.event_times import DEFAULT_MAX_EVENT_TIME_AHEAD, EventTimeBounds
from reaqtive.engine.expressions import (
    FunctionRegistry,
)
from reaqtive.engine.failures import OnError, check_on_error, error_name
from reaqtive.engine.gc_policy import GcFreeze
from reaqtive.engine.handover import EngineLock
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
from reaqtive.engine.processing import Processing
from reaqtive.engine.recovery import Recovery
from reaqtive.engine.registry import ArtifactRegistry
from reaqtive.engine.settings import engine_arguments
from reaqtive.engine.sinks import Egress
from reaqtive.engine.stores import open_engine_store
from reaqtive.engine.upgrading import Upgrading
from reaqtive.fluent.query import Query
from reaqtive.scheduler import VirtualTimeScheduler

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


class Engine(ArtifactRegistry, Upgrading, Egress, Checkpointing, EngineRoom):
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
        _check_whole("checkpoint_every_events", checkpoint_every_events, minimum=1, optional=True)
        _check_seconds("checkpoint_every_seconds", checkpoint_every_seconds, positive=True, optional=True)
        _check_whole("observer_retries", observer_retries, minimum=1)
        _check_seconds("observer_backoff", observer_backoff, positive=False)
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
            # The processing thread of start() and the loop of serve() (reaqtive.engine.processing); process,
            # idle_seconds and checkpoint are looked up at each call: a host, or a test, may wrap the engine's.
            self._processing = Processing(
                lock=self._lock, where=str(self._store.path), check_open=self._check_open,
                process=lambda events: self.process(events),  # noqa: PLW0108
                idle_seconds=lambda: self.idle_seconds(),  # noqa: PLW0108
                checkpoint=lambda: self.checkpoint(),  # noqa: PLW0108
                appended=self.appended, start_couriers=self._start_couriers, stop_couriers=self._stop_couriers,
                log=self._log)
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
        ``obs://alerts`` on first use). See :meth:`ArtifactRegistry.create_subscription
        <reaqtive.engine.registry.ArtifactRegistry.create_subscription>` for ``priority``, ``on_error``, ``start``
        (a backfill over the retained log: ``"earliest"``, a log position, an aware ``datetime``) and what is
        refused. A sink's definition stays if the subscription is refused (attaching it again is a no-op)."""
        with self._lock:
            if not isinstance(observer, str):
                observer = self.attach_sink(observer)
            super().create_subscription(uri, query, observer, priority=priority, on_error=on_error, start=start)

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

    def serve(self, *, batch_events: int = _DELIVERY_BATCH, idle_seconds: float | None = None) -> None:
        """Process appended events as they come, on the calling thread, until :meth:`stop_serving` is called or
        the engine closes. Appends wake it (no polling); between batches of ``batch_events`` it releases the
        engine, so that other threads' calls get their turn. When idle it also wakes every ``idle_seconds``
        (default: :meth:`idle_seconds`) for the periodic checkpoint and the wall clock's timers.

        Example: ``threading.Thread(target=engine.serve, daemon=True).start()``, then ``engine.stop_serving()``.
        """
        self._processing.serve(batch_events=batch_events, idle_seconds=idle_seconds)

    def start(self, *, batch_events: int = _DELIVERY_BATCH) -> None:
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
            for uri in sorted(self._streams):
                appended, done = heads.get(uri, 0), delivered.get(uri, -1) + 1
                lag = max(appended - done - dead_ahead.get(uri, 0), 0)
                streams[uri] = StreamReading(appended, done, dead.get(uri, 0), lag, *self._retained.get(uri, (0, 0)))
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
