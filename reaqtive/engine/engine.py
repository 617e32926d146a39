"""The query engine: standing queries by URI over durable streams, checkpoints into SQLite, recovery.

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

import enum
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from sortedcontainers import SortedList

from reaqtive.context import OperatorContext
from reaqtive.engine.egress import Output, OutputCounter
from reaqtive.engine.errors import (
    ArtifactExistsError,
    ArtifactInUseError,
    ArtifactNotFoundError,
    EngineClosedError,
    InnerRecoveryError,
    MalformedRecordError,
    OutputDivergenceError,
    QueryFailedError,
    RecoveryError,
    UnstorableOutputError,
    UnstorableStateError,
)
from reaqtive.engine.event_times import DEFAULT_MAX_EVENT_TIME_AHEAD, EventTimeBounds
from reaqtive.engine.expressions import (
    FunctionRegistry,
    decode_query,
    encode_query,
    expression_from_json,
    expression_to_json,
    instantiate,
    template_id,
    templatize,
)
from reaqtive.engine.gc_policy import GcFreeze
from reaqtive.engine.ingress import IngressCommit, IngressWriter, chunks
from reaqtive.engine.outbox import DEFAULT_OBSERVER_BACKOFF, DEFAULT_OBSERVER_RETRIES, Outbox
from reaqtive.engine.records import (
    DeliveryRecord,
    Pin,
    delivery_bytes,
    parse_artifact,
    parse_counter,
    parse_delivery,
    parse_template,
)
from reaqtive.engine.store import DeadLetter, EngineStore, IngressEvent, IngressRun, from_micros, to_micros
from reaqtive.engine.streams import PINNED_WATERMARK_SETTING, START_WATERMARK_SETTING, Envelope, StreamReader
from reaqtive.errors import InvalidSettingError
from reaqtive.query import Query
from reaqtive.scheduler import UnhandledExceptionArgs, VirtualTimeScheduler
from reaqtive.state import (
    DEFAULT_CODEC,
    STATE_CATEGORY,
    Checkpointer,
    CheckpointMode,
    CheckpointResult,
    CheckpointSnapshot,
    CheckpointTransaction,
    DamagedRowError,
    InnerEnvironment,
    MissingStateError,
    StateEncodeError,
    StateError,
    confirm_saved,
    save_subscription,
)
from reaqtive.state.host import HostedQuery, QueryHost, QueryState
from reaqtive.streams import LONG_MAX, Subscription
from reaqtive.subjects import OverflowPolicy, SimpleSubject
from reaqtive.subscriptions import SubscriptionHandle

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

_LOG: Final = logging.getLogger("reaqtive.engine")

DURABLE_SINK: Final = "reaqtive://sinks/durable"
"""The built-in observer that writes outputs to the store's egress table (effectively-once)."""
DISCARD_SINK: Final = "reaqtive://sinks/discard"
"""The built-in observer that drops outputs."""

_ARTIFACTS: Final = "artifacts"
_TEMPLATES: Final = "templates"
_ENGINE: Final = "engine"
_DELIVERY: Final = "delivery"
_OUTPUTS: Final = "outputs"  # per subscription, the next output sequence number (when it moved)
_OBSERVED: Final = "observed"  # per subscription with an observer function, the last output it received
_BUILTIN_OBSERVERS: Final = frozenset({DURABLE_SINK, DISCARD_SINK})
_STREAM_BUFFER: Final = 1 << 20  # a reader without demand may lag this far behind a stream before it fails
_DELIVERY_BATCH: Final = 4096
_NO_WATERMARKS: Final[Mapping[str, int]] = MappingProxyType({})
_EGRESS_FLUSH_OUTPUTS: Final = 65536  # the durable sink's buffer is written once it holds this many outputs


class EngineStatus(enum.Enum):
    """What the engine is doing."""

    RECOVERING = "recovering"
    RUNNING = "running"
    CHECKPOINTING = "checkpointing"
    DEGRADED = "degraded"
    """Running, but some artifacts failed to recover and are kept in the store without running."""
    CLOSED = "closed"


class RecoveryPolicy(enum.Enum):
    """What to do with an artifact that fails to recover."""

    FAIL = "fail"
    """Stop: opening the engine raises :class:`~reaqtive.engine.errors.RecoveryError`; the store is untouched."""
    KEEP = "keep"
    """Keep the artifact (and its state) in the store without running it; the engine runs degraded and reports it."""
    REMOVE = "remove"
    """Delete the artifact and its state from the store."""


@dataclass(frozen=True)
class RecoveryFailure:
    """An artifact that did not recover: its URI, its kind, the error, and what was done about it."""

    uri: str
    kind: str
    error: BaseException
    policy: RecoveryPolicy


@dataclass(frozen=True)
class ArtifactInfo:
    """What the engine knows about one artifact."""

    uri: str
    kind: str
    created: datetime
    expression: dict[str, Any] | None
    observer: str | None
    references: tuple[str, ...]
    state_bytes: int
    running: bool


@dataclass(frozen=True)
class StreamStatus:
    """One durable stream: how far producers and the engine got, and what the ingress log still holds."""

    uri: str
    appended: int
    """Events appended so far (the next event's sequence number)."""
    delivered: int
    """The sequence number of the last event delivered to the queries (-1: none yet)."""
    retained: int
    """Events still in the ingress log (not yet covered by a committed checkpoint)."""


@dataclass(frozen=True)
class CheckpointMetrics:
    """One checkpoint: how long the engine paused, how long the commit took, what it wrote."""

    checkpoint_id: int
    full: bool
    pause_seconds: float
    serialize_seconds: float
    commit_seconds: float
    egress_seconds: float
    bytes_written: int
    dirty_subscriptions: int
    ingress_truncated: int
    at: datetime


@dataclass
class RecoveryMetrics:
    """One recovery: the time per phase, what was recovered, what failed."""

    phases: dict[str, float] = field(default_factory=dict)
    streams: int = 0
    definitions: int = 0
    subscriptions: int = 0
    inner_subscriptions: int = 0
    failures: list[RecoveryFailure] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    """Stored states no artifact claimed that the policy REMOVE deleted (at the next checkpoint). Under FAIL and
    KEEP such a state is a failure like any other (see ``failures``)."""


class _Observer:
    """The end of a subscription: takes everything, hands outputs to the engine's sink for its observer. An
    output the sink cannot keep (a value the store cannot encode) stops this subscription alone: the engine
    faults it once the event at hand was delivered to the others."""

    __slots__ = ("_engine", "_failed", "_sink", "_subscription", "_uri")

    def __init__(self, engine: Engine, uri: str, sink: Callable[[Output], object] | None) -> None:
        self._engine = engine
        self._uri = uri
        self._sink = sink
        self._subscription: Subscription | None = None
        self._failed = False

    def on_subscribe(self, subscription: Subscription) -> None:
        self._subscription = subscription
        subscription.request(LONG_MAX)

    def on_next(self, value: Output) -> None:
        if self._sink is None or self._failed:
            return
        try:
            self._sink(value)
        except UnstorableOutputError as error:
            self._failed = True
            if self._subscription is not None:
                self._subscription.cancel()
            self._engine._fault_later(self._uri, error)

    def on_error(self, error: BaseException) -> None:
        self._engine._subscription_ended(self._uri, error)

    def on_complete(self) -> None:
        self._engine._subscription_ended(self._uri, None)


class _EngineEnvironment(InnerEnvironment):
    """The engine's execution environment: its streams, plus inner subscriptions and subjects, plus what its
    stream readers and egress stamps ask of the engine."""

    def __init__(
        self,
        delivered: dict[str, int],
        counters: dict[str, OutputCounter],
        heads: dict[str, int],
        failed: Callable[[str, Exception], None],
    ) -> None:
        super().__init__()
        self._delivered_by_stream = delivered
        self._output_counters = counters
        self._heads = heads
        self._failed = failed

    def delivered_watermark(self, uri: str) -> int:
        """The sequence number of the last event of stream ``uri`` the engine delivered (-1: none)."""
        return self._delivered_by_stream.get(uri, -1)

    def appended_watermark(self, uri: str) -> int:
        """The sequence number of the last event appended to stream ``uri`` (-1: none): no reader can be past it."""
        return self._heads.get(uri, 0) - 1

    def reader_failed(self, instance_id: str, error: Exception) -> None:
        """An exception escaped the operators of a query while a reader delivered an event to them (a bug, or
        state that loaded but cannot work): the engine stops that query alone."""
        self._failed(instance_id, error)

    def output_counter(self, uri: str) -> OutputCounter:
        """The output counter of subscription ``uri``."""
        counter = self._output_counters.get(uri)
        if counter is None:
            counter = self._output_counters[uri] = OutputCounter()
        return counter


class Engine:
    """An embedded query engine on a SQLite file (created if missing). See the module docstring.

    ``clock``: ``"event"`` (default; the clock follows event times, so replays are exact) or ``"wall"``.
    ``checkpoint_every_events`` / ``checkpoint_every_seconds``: a periodic checkpoint policy applied by
    :meth:`process`. ``recovery_policy`` and ``on_recovery_failure(uri, error) -> RecoveryPolicy | None``: what to
    do with an artifact that fails to recover. ``settings``: operator settings (limits) for every query.
    ``functions`` and ``allow_modules``: what stored queries may name (a store is data, never code): functions
    registered by name, and functions defined in these modules (added to ``functions``; see
    :class:`~reaqtive.engine.expressions.FunctionRegistry`); a stored reference to anything else fails recovery.
    ``synchronous``: SQLite durability (``"FULL"``, or ``"NORMAL"``: survives a process crash, faster).
    ``start``: where the clock of a new store starts (a recovered engine resumes its own clock). Without it the
    clock starts at the first of: :meth:`advance_time`, the first event delivered, or the first subscription
    created (then at the wall clock's time). To run time-based queries over older events in event time, pass
    the time of the first event. ``gc_freeze``: after each checkpoint and after recovery, move what lives into
    the garbage collector's permanent generation, so that its full passes skip the queries' long-lived state
    (see :mod:`reaqtive.engine.gc_policy`; process-wide). ``observer_retries`` / ``observer_backoff``: how often
    and how patiently an observer function that raises is tried again before its subscription stops (see
    :mod:`reaqtive.engine.outbox`). ``max_event_time_ahead`` / ``allowed_lateness``: the bounds on event times
    outside which events are quarantined (see :mod:`reaqtive.engine.event_times`). ``ingress_commit``: when
    appended events are committed: ``"call"`` (default: each append is durable when it returns; concurrent
    appends share a commit) or :class:`~reaqtive.engine.ingress.GroupCommit` ``(events=N, seconds=T)`` (appends
    return at once; events are committed every N events or T seconds and by :meth:`flush_ingress`,
    :meth:`process`, :meth:`checkpoint` and :meth:`close`; a crash loses those not committed yet; see
    :mod:`reaqtive.engine.ingress`). One engine per store file: a second one is refused with
    :class:`~reaqtive.state.StoreLockedError`.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        clock: str = "event",
        functions: FunctionRegistry | None = None,
        allow_modules: Iterable[str] | str = (),
        settings: Mapping[str, object] | None = None,
        recovery_policy: RecoveryPolicy = RecoveryPolicy.FAIL,
        on_recovery_failure: Callable[[str, BaseException], RecoveryPolicy | None] | None = None,
        checkpoint_every_events: int | None = None,
        checkpoint_every_seconds: float | None = None,
        synchronous: str = "FULL",
        start: datetime | None = None,
        tick: timedelta = timedelta(microseconds=1),
        logger: logging.Logger | None = None,
        gc_freeze: bool = True,
        observer_retries: int = DEFAULT_OBSERVER_RETRIES,
        observer_backoff: float = DEFAULT_OBSERVER_BACKOFF,
        max_event_time_ahead: timedelta | None = DEFAULT_MAX_EVENT_TIME_AHEAD,
        allowed_lateness: timedelta | None = None,
        ingress_commit: IngressCommit = "call",
    ) -> None:
        if clock not in ("event", "wall"):
            raise ValueError(f"clock must be 'event' or 'wall', got {clock!r}")
        _check_whole("checkpoint_every_events", checkpoint_every_events, minimum=1, optional=True)
        _check_seconds("checkpoint_every_seconds", checkpoint_every_seconds, positive=True, optional=True)
        _check_whole("observer_retries", observer_retries, minimum=1)
        _check_seconds("observer_backoff", observer_backoff, positive=False)
        self._observer_retries = observer_retries
        self._observer_backoff = float(observer_backoff)
        self._event_times = EventTimeBounds(max_event_time_ahead, allowed_lateness)
        self._lock = threading.RLock()
        self._clock_mode = clock
        self.functions = (functions if functions is not None else FunctionRegistry()).allowing(allow_modules)
        self._settings = dict(settings or {})
        self._policy = recovery_policy
        self._on_failure = on_recovery_failure
        self._every_events = checkpoint_every_events
        self._every_seconds = checkpoint_every_seconds
        if start is not None and start.tzinfo is None:
            raise ValueError(f"start must be timezone-aware, got {start}")
        self._log = logger or _LOG
        self._status = EngineStatus.RECOVERING
        self._gc = GcFreeze(gc_freeze)
        self._store = EngineStore(path, synchronous=synchronous)
        try:
            self._ingress = IngressWriter(self._store, ingress_commit, logger=self._log)
            self._init_runtime(tick)
            self._recover()
            if not self._clock_started and start is not None:
                self._start_clock(start)
            self._gc.after_checkpoint()  # the recovered state is long-lived, as after a checkpoint
        except BaseException:
            self._store.close()
            raise

    def _init_runtime(self, tick: timedelta) -> None:
        """The engine's running state, empty until recovery fills it."""
        self._scheduler = VirtualTimeScheduler(tick, name="engine")
        self._scheduler.unhandled_exception.add(self._task_failed)
        self._delivered: dict[str, int] = {}
        self._counters: dict[str, OutputCounter] = {}
        self._heads: dict[str, int] = {}
        self._expected: dict[str, int] = {}  # per stream, the next event the log must hold (see _deliver_checked)
        self._environment = _EngineEnvironment(self._delivered, self._counters, self._heads, self._unit_failed)
        self._checkpointer = Checkpointer(self._scheduler, self._store.checkpoints)
        self._records = _Records()
        self._templates: dict[str, dict[str, Any]] = {}
        self._streams: dict[str, SimpleSubject[Envelope]] = {}
        self._host = QueryHost(self._scheduler, environment=self._environment, settings=self._settings,
                               logger=self._log)
        self._subscriptions: dict[str, HostedQuery] = {}
        self._broken: set[str] = set()  # artifacts kept stored without running (their state stays)
        self._kept_orphans: set[str] = set()  # stored states of no artifact, kept (recovery policy KEEP)
        self._removed_at_recovery: set[str] = set()  # artifacts the policy REMOVE deleted while recovering
        self._pins: dict[str, Pin] = {}  # see _pin_broken
        self._committed_delivered: dict[str, int] = {}  # the delivered watermarks of the last checkpoint
        self._outboxes: dict[str, Outbox] = {}
        self._observed: dict[str, int] = {}  # the delivery cursors of the outboxes in the store
        self._faults_pending: list[tuple[str, Exception]] = []
        self._quarantine: list[tuple[IngressEvent, str]] = []
        self._replayed_upto: dict[str, int] = {}  # per durable-sink subscription, the sink's highest id
        self._dead: set[tuple[str, int]] = self._store.dead_lettered()
        self._batch_delivery = True  # the fast path of _deliver_run (tests clear it to compare with the general one)
        self._dead_index: dict[str, SortedList] = {}  # see _any_dead
        self._dead_index_size = 0
        tick_micros = tick // timedelta(microseconds=1)
        # Engine ticks are microseconds since the Unix epoch unless another tick was chosen: then rounded up, as
        # the scheduler rounds a datetime.
        self._ticks_of_micros: Callable[[int], int] | None = (
            None if tick == timedelta(microseconds=1) else lambda micros: -(-micros // tick_micros)
        )
        self.faults: list[RecoveryFailure] = []
        self._stored_state_keys: set[str] = set()  # the state rows in the store (units it has seen whole)
        self._counter_errors: dict[str, Exception] = {}
        self._output_extents: dict[str, tuple[int, int, int]] = {}
        self._ended: dict[str, BaseException | None] = {}
        self._egress: list[tuple[str, int, bytes]] = []  # the durable sink's new outputs, encoded
        self._position = 0
        self._since_checkpoint = 0
        self._last_checkpoint_time = time.monotonic()
        self.last_checkpoint: CheckpointMetrics | None = None
        self.recovery = RecoveryMetrics()
        self._clock_started = False

    # -- properties --------------------------------------------------------------------------------------------

    @property
    def status(self) -> EngineStatus:
        """Recovering, running, checkpointing, degraded or closed."""
        return self._status

    @property
    def path(self) -> Path:
        """The store file."""
        return self._store.path

    @property
    def now(self) -> datetime:
        """The engine's clock."""
        return self._scheduler.now

    @property
    def scheduler(self) -> VirtualTimeScheduler:
        """The engine's scheduler (its clock); operators get it from their context."""
        return self._scheduler

    # -- functions ---------------------------------------------------------------------------------------------

    def register_function(self, name: str, function: Callable[..., Any]) -> None:
        """Make ``function`` usable in persisted queries as ``@name`` (register it again before recovery)."""
        self.functions.register(name, function)

    # -- streams -----------------------------------------------------------------------------------------------

    def create_stream(self, uri: str) -> None:
        """Create the durable stream ``uri``."""
        with self._lock:
            self._check_new(uri)
            record = {"kind": "stream", "created": _now_text()}
            self._commit_record(uri, record)
            self._open_stream(uri)

    def delete_stream(self, uri: str) -> None:
        """Delete the stream ``uri``; refused while a query reads it."""
        with self._lock:
            self._check_kind(uri, "stream")
            self._check_unused(uri)
            self._commit_changes(deletes=[(_ARTIFACTS, uri)])
            del self._records[uri]
            subject = self._streams.pop(uri)
            subject.dispose()

    def append(self, stream: str, value: Any, time: datetime | None = None) -> int:
        """Append one event to ``stream``; returns its sequence number. ``time``: its event time (aware; default
        now). Durable when this returns (``ingress_commit="call"``: appends from several threads share one
        commit), or, with :class:`~reaqtive.engine.ingress.GroupCommit`, once the next group is committed."""
        return self.append_many(stream, [(value, time)])[0]

    def append_many(self, stream: str, events: Iterable[tuple[Any, datetime | None]]) -> list[int]:
        """Append several ``(value, time)`` events in one transaction (``time`` ``None``: now); returns their
        sequence numbers. Nothing is appended if one of them is refused (``None``, a naive time, a value the
        codec cannot save); those dated too far ahead go to the dead letters, numbered (see :meth:`append` for
        when they are durable)."""
        with self._lock:
            self._check_open()
            self._check_kind(stream, "stream")
        batch = self._ingress.prepare(stream, events, self._event_times, self._scheduler.now)
        first = self._ingress.append(batch)
        count = len(batch.payloads)
        if count:
            # A lower bound of the stream's head (a concurrent append may set it lower; delivery then reads
            # the store's): the delivery checks that no event is numbered past it.
            self._heads[stream] = max(self._heads.get(stream, 0), first + count)
        if batch.reasons is not None:
            with self._lock:  # the delivery must know these numbers are taken, not missing
                self._dead.update((stream, first + i) for i, reason in enumerate(batch.reasons)
                                  if reason is not None)
        return list(range(first, first + count))

    def extend(self, stream: str, events: Iterable[tuple[Any, datetime | None]]) -> int:
        """Append ``(value, time)`` events from any iterable (a generator, a file being read), in transactions
        of 10,000 events (``ingress.EXTEND_CHUNK``), so that memory stays bounded; returns how many were appended.
        Not atomic as a whole: if one chunk is refused (see :meth:`append_many`), the chunks before it stay."""
        return sum(len(self.append_many(stream, chunk)) for chunk in chunks(events))

    def flush_ingress(self) -> None:
        """Commit the appended events still waiting (with :class:`~reaqtive.engine.ingress.GroupCommit`; with
        ``"call"`` every append is committed when it returns): when this returns they are durable."""
        self._ingress.flush()

    def dead_letters(self, stream: str | None = None) -> list[DeadLetter]:
        """The quarantined events (of ``stream``, or all): dated out of bounds, or damaged in the log; each with
        its reason (see :mod:`reaqtive.engine.event_times`). They are kept, never delivered."""
        with self._lock:
            self._check_open()
            self._flush_quarantine()
            return self._store.dead_letters(stream)

    def streams(self) -> dict[str, StreamStatus]:
        """Every stream with its ingress watermarks."""
        with self._lock:
            self._check_open()
            heads, retained = self._store.stream_heads(), self._store.ingress_counts()
            return {
                uri: StreamStatus(uri, heads.get(uri, 0), self._delivered.get(uri, -1), retained.get(uri, 0))
                for uri in sorted(self._streams)
            }

    # -- definitions -------------------------------------------------------------------------------------------

    def define_observable(self, uri: str, query: Query[Any]) -> None:
        """Name a query: other queries read it with ``Query.stream(uri)`` (it is expanded where it is used)."""
        with self._lock:
            self._check_new(uri)
            expression = encode_query(query, self.functions)
            references = sorted(_references(expression))
            self._check_references(uri, references)
            record = {"kind": "observable", "created": _now_text(), "expression": expression, "refs": references}
            self._commit_record(uri, record)

    def define_observer(self, uri: str, function: Callable[[Output], object]) -> None:
        """Name a function that receives the outputs of subscriptions (at least once, with their ids). It is
        persisted by reference: a module-level function, or one registered with :meth:`register_function`."""
        with self._lock:
            self._check_new(uri)
            encoded = encode_query(Query("observer", (function,)), self.functions)
            record = {"kind": "observer", "created": _now_text(), "function": encoded["args"][0]}
            self._commit_record(uri, record)

    def undefine(self, uri: str) -> None:
        """Remove an observable or observer definition; refused while an artifact uses it."""
        with self._lock:
            record = self._require(uri)
            if record["kind"] not in ("observable", "observer"):
                raise ArtifactNotFoundError(f"{uri!r} is a {record['kind']}, not a definition")
            self._check_unused(uri)
            self._commit_changes(deletes=[(_ARTIFACTS, uri)])
            del self._records[uri]

    # -- subscriptions -----------------------------------------------------------------------------------------

    def create_subscription(self, uri: str, query: Query[Any], observer: str = DURABLE_SINK) -> None:
        """Start the standing query ``query`` as ``uri``, its outputs going to the observer ``observer``.

        Fails (changing nothing) if the query cannot be persisted (the message names the argument), reads an
        unknown stream or definition, or the URI exists.
        """
        with self._lock:
            self._check_open()
            self._check_new(uri)
            self._check_not_nested(uri)
            if not self._clock_started:
                # A fresh store's clock is at the epoch: a query's timers would fire for every period since 1970.
                self._start_clock(datetime.now(UTC))
            expression = encode_query(query, self.functions)
            references = sorted(_references(expression) | {observer} - _BUILTIN_OBSERVERS)
            self._check_references(uri, references)
            template, constants = templatize(expression)
            tid = template_id(template)
            streams = self._streams_read_by(expression)
            record = {
                "kind": "subscription",
                "created": _now_text(),
                "template": tid,
                "constants": constants,
                "observer": observer,
                "refs": references,
                "start": {stream: self._delivered.get(stream, -1) for stream in streams},
                "clock": to_micros(self._scheduler.now),
            }
            puts = [(_ARTIFACTS, uri, _to_bytes(record))]
            if tid not in self._templates:
                puts.append((_TEMPLATES, tid, _to_bytes(template)))
            self._store.delete_outputs(uri)  # a crash may have left a deleted namesake's outputs behind
            handle = self._bind(uri, record, template, None)  # bind first: a query that cannot run is not stored
            try:
                # Its state at creation is committed with its record, so a recovery before the next checkpoint
                # re-creates it as it was then (windows aligned on its creation time, not on the recovery's),
                # and the outputs it produced on start reach the durable sink first, as in a checkpoint.
                units = handle.units()
                puts += [(STATE_CATEGORY, key, _full_state(unit)) for key, unit in units.items()]
                counter = self._environment.output_counter(uri)
                puts.append((_OUTPUTS, uri, _counter_bytes(counter.next)))
                self._flush_egress()
                self._commit_changes(puts=puts)
            except BaseException:
                self._discard(uri, handle)
                raise
            for unit in units.values():
                confirm_saved(unit)
            self._stored_state_keys.update(units)
            counter.committed = counter.next
            self._templates.setdefault(tid, template)
            self._records[uri] = record
            self._subscriptions[uri] = handle

    def delete_subscription(self, uri: str) -> None:
        """Stop and delete the subscription ``uri`` with its state (and its template when no one else uses it)."""
        with self._lock:
            record = self._check_kind(uri, "subscription")
            # Every state row it may have: also those of inner units that ended since the last checkpoint, and
            # those of a query kept without running (not live, so not in the environment).
            state_rows = self._stored_state_of(uri)
            deletes = [(_ARTIFACTS, uri), (_OUTPUTS, uri), (_OBSERVED, uri), *state_rows]
            inner = [key for _, key in state_rows if key != uri]
            tid = record["template"]
            if not any(r.get("template") == tid for u, r in self._records.items() if u != uri):
                deletes.append((_TEMPLATES, tid))
            self._commit_changes(deletes=deletes)
            del self._records[uri]
            handle = self._subscriptions.pop(uri, None)
            if handle is not None:
                self._discard(uri, handle)
            else:  # kept without running (failed to recover, or stopped by a fault): its outputs go too
                self._environment.release_ids(uri)
                self._counters.pop(uri, None)
                self._outboxes.pop(uri, None)
                self._observed.pop(uri, None)
                self._store.delete_outputs(uri)
            self._environment.confirm_removed(inner)
            if (_TEMPLATES, tid) in deletes:
                self._templates.pop(tid, None)
            self._ended.pop(uri, None)
            self._broken.discard(uri)
            self._pins.pop(uri, None)
            self._stored_state_keys.difference_update(key for _, key in state_rows)
            self._settle_status()

    def _discard(self, uri: str, hosted: HostedQuery) -> None:
        """Stop a subscription and forget its inner subscriptions and its outputs (durable and pending)."""
        hosted.delete()
        self._egress[:] = [row for row in self._egress if row[0] != uri]
        self._counters.pop(uri, None)
        self._outboxes.pop(uri, None)
        self._observed.pop(uri, None)
        self._store.delete_outputs(uri)

    # -- processing --------------------------------------------------------------------------------------------

    def process(self, max_events: int | None = None) -> int:
        """Deliver pending ingress events (all, or up to ``max_events``) in append order, applying the checkpoint
        policy as it goes; returns how many were delivered."""
        self.flush_ingress()  # events appended under group commit are delivered once durable, not before
        delivered = 0
        attempted = False  # handed waiting outputs to observer functions (once per batch)
        while max_events is None or delivered < max_events:
            with self._lock:
                self._check_open()
                limit = _DELIVERY_BATCH if max_events is None else min(_DELIVERY_BATCH, max_events - delivered)
                runs = self._read_runs(limit)
                if not runs:
                    self._advance_wall_clock()
                    self._maybe_checkpoint(force_time=True)
                    break
                wall = datetime.now(UTC)  # the wall clock of this batch (the engine's own clock is read per event)
                for run in runs:
                    budget = None if max_events is None else max_events - delivered
                    if budget == 0:
                        break
                    delivered += self._deliver_run(run, wall, budget)
                self._flush_quarantine()
                if len(self._egress) >= _EGRESS_FLUSH_OUTPUTS:
                    self._flush_egress()  # bounded memory between checkpoints (the sink keeps the first copy)
                self._deliver_outboxes()
                attempted = True
        if not attempted:
            with self._lock:
                self._check_open()
                self._deliver_outboxes()
        return delivered

    def _read_runs(self, limit: int) -> list[IngressRun]:
        return self._store.read_ingress_runs(self._position, limit)

    def _deliver_run(self, run: IngressRun, wall: datetime, budget: int | None) -> int:
        """Deliver a run of logged events of one stream (up to ``budget``); returns how many were taken."""
        count: int = run.count if budget is None else min(run.count, budget)
        if not self._plain(run, wall, count):
            return self._deliver_one_by_one(run, wall, count)
        taken = 0
        while taken < count:
            upto = count
            every = self._every_events
            if every is not None:  # the checkpoint positions of event-at-a-time delivery
                upto = min(upto, taken + max(every - self._since_checkpoint, 1))
            self._deliver_plain(run, taken, upto)
            self._since_checkpoint += upto - taken
            taken = upto
            self._maybe_checkpoint()
        return count

    def _plain(self, run: IngressRun, wall: datetime, count: int) -> bool:
        """Whether a run can take the fast path: sound, the next events of a stream the engine has, none of them
        among the dead letters, none dated out of bounds, delivered for the first time, on the event clock."""
        stream, seq = run.stream, run.seq
        if not self._batch_delivery or run.damage is not None or self._clock_mode != "event" \
                or stream not in self._streams:
            return False
        if seq != self._expected.get(stream, 0) or seq <= self._delivered.get(stream, -1):
            return False
        last = seq + count - 1
        if last >= self._heads.get(stream, 0):
            self._heads.update(self._store.stream_heads())
            if last >= self._heads.get(stream, 0):
                return False
        if self._dead and self._any_dead(stream, seq, last):
            return False
        bounds = self._event_times
        if bounds.allowed_lateness is not None:
            return False
        return not (bounds.max_ahead is not None and max(run.micros[:count]) > to_micros(wall))

    def _any_dead(self, stream: str, first: int, last: int) -> bool:
        """Whether an event from ``first`` to ``last`` of ``stream`` is among the dead letters (an index per
        stream, rebuilt when the set grew)."""
        if self._dead_index_size != len(self._dead):
            index: dict[str, SortedList] = {}
            for name, number in self._dead:
                index.setdefault(name, SortedList()).add(number)
            self._dead_index, self._dead_index_size = index, len(self._dead)
        numbers = self._dead_index.get(stream)
        if not numbers:
            return False
        at: int = numbers.bisect_left(first)
        return at < len(numbers) and bool(numbers[at] <= last)

    def _deliver_one_by_one(self, run: IngressRun, wall: datetime, count: int) -> int:
        for event in run.events()[:count]:
            self._deliver_checked(event, wall)
            self._position = event.pos
            self._since_checkpoint += 1
            if self._faults_pending:
                self._apply_faults()
            self._maybe_checkpoint()
        return count

    def _deliver_plain(self, run: IngressRun, start: int, end: int) -> None:
        """The per-event loop of the fast path: the clock moves to each event's time (running the timers due
        before it first), the stream's delivered watermark moves before the delivery, the work the delivery
        triggered for its instant runs after it, a query that failed is stopped before the next event."""
        stream, seq0, values, micros = run.stream, run.seq, run.values, run.micros
        scheduler = self._scheduler
        timeline = scheduler.timeline
        queue = timeline.queue
        subject = self._streams[stream]
        delivered = self._delivered
        faults = self._faults_pending
        to_ticks = self._ticks_of_micros
        self._clock_started = True
        self._expected[stream] = seq0 + end
        for i in range(start, end):
            ticks = to_ticks(micros[i]) if to_ticks is not None else micros[i]
            if ticks > timeline.clock:
                if queue.next_due <= ticks:
                    scheduler.advance_to(ticks)
                else:
                    timeline.clock = ticks
            seq = seq0 + i
            delivered[stream] = seq
            subject.on_next(Envelope(seq, values[i]))
            if queue.next_due <= ticks:
                scheduler.advance_to(timeline.clock)  # work the delivery triggered for this instant
            if faults:
                self._position = run.pos + i
                self._apply_faults()
        self._position = run.pos + end - 1

    def advance_time(self, to: datetime) -> None:
        """Move the engine's clock forward to ``to`` (aware), firing the timers due until then."""
        with self._lock:
            self._check_open()
            self._clock_started = True
            if to > self._scheduler.now:
                self._scheduler.advance_to(to)
            self._apply_faults()

    def _start_clock(self, at: datetime) -> None:
        """Set the clock of a store that never had one (it is at the Unix epoch until then)."""
        if at > self._scheduler.now:
            self._scheduler.advance_to(at)
        self._clock_started = True

    def _deliver_checked(self, event: IngressEvent, wall: datetime) -> None:
        """Deliver one logged event, or quarantine it: damaged, misplaced, or dated out of bounds (decided once:
        a replay finds it among the dead letters)."""
        key = (event.stream, event.seq)
        stream, seq = key
        expected = self._expected.get(stream, 0)
        if seq >= expected:
            self._expected[stream] = seq + 1
        if key in self._dead:
            return
        reason = event.damage or self._misplaced(event)
        if reason is None and seq > expected:
            self._note_missing(stream, expected, seq)
        if reason is None:
            reason = self._out_of_bounds(event.time, wall)
        if reason is not None:
            self._dead.add(key)
            self._quarantine.append((event, reason))
            self._log.warning("event %s#%d quarantined: %s", event.stream, event.seq, reason)
            return
        self._deliver(event.stream, event.seq, event.value, event.time)

    def _out_of_bounds(self, time: datetime, wall: datetime) -> str | None:
        bounds = self._event_times
        if bounds.max_ahead is not None and time > wall:  # the common case (an event not ahead) stops here
            reason = bounds.ahead(time, max(wall, self._scheduler.now))
            if reason is not None:
                return reason
        if bounds.allowed_lateness is not None and self._clock_mode == "event" and self._clock_started:
            return bounds.late(time, self._scheduler.now)
        return None

    def _misplaced(self, event: IngressEvent) -> str | None:
        """Why a sound-looking log row cannot be an event of its stream (its stream or number was altered)."""
        if event.stream not in self._streams:
            return f"there is no stream {event.stream!r} (deleted, or the row was altered)"
        if event.seq >= self._heads.get(event.stream, 0):
            self._heads.update(self._store.stream_heads())
            if event.seq >= self._heads.get(event.stream, 0):
                return f"#{event.seq} is beyond what was appended to {event.stream!r} (the row was altered)"
        return None

    def _note_missing(self, stream: str, first: int, seq: int) -> None:
        """Events ``first`` to ``seq - 1`` of ``stream`` are neither in the log nor among the dead letters: rows
        deleted or lost from the file. Nothing can bring them back; each is recorded as a dead letter without
        content, so that the loss is visible (``dead_letters()``, ``reaqtive inspect``) rather than silent."""
        missing = [number for number in range(first, seq) if (stream, number) not in self._dead]
        for number in missing:
            self._dead.add((stream, number))
            gap = IngressEvent(-1, stream, number, from_micros(0), None, damage="missing", payload=None, micros=None)
            self._quarantine.append((gap, "missing from the log: its row was deleted or lost"))
        if missing:
            self._log.error("stream %r: %d event(s) missing from the log before #%d", stream, len(missing), seq)

    def _flush_quarantine(self) -> None:
        if self._quarantine:
            pending, self._quarantine = self._quarantine, []
            self._store.quarantine(pending)

    def _deliver(self, stream: str, seq: int, value: Any, when: datetime) -> None:
        scheduler = self._scheduler
        self._clock_started = True
        target = when if self._clock_mode == "event" else max(when, datetime.now(UTC))
        if target > scheduler.now:
            scheduler.advance_to(target)
        if seq > self._delivered.get(stream, -1):
            # Before the delivery: a reader created while this event is delivered (an inner query it starts)
            # starts after it. And never back: a replay rewound for a lagging reader re-delivers older events,
            # and the stream's delivered watermark is what "caught up" means in every reader's saved state.
            self._delivered[stream] = seq
        subject = self._streams.get(stream)
        if subject is not None:
            subject.on_next(Envelope(seq, value))
        scheduler.advance_to(scheduler.now)  # work the delivery triggered for this instant

    def _advance_wall_clock(self) -> None:
        if self._clock_mode == "wall":
            wall = datetime.now(UTC)
            if wall > self._scheduler.now:
                self._scheduler.advance_to(wall)

    # -- outputs -----------------------------------------------------------------------------------------------

    def outputs(self, subscription: str | None = None) -> list[Output]:
        """The durable sink's content (flushed first), in subscription and sequence order."""
        with self._lock:
            self._flush_egress()
        return [Output(*row) for row in self._store.read_outputs(subscription)]

    def _flush_egress(self, *, with_outboxes: bool = False) -> float:
        """Write the durable sink's new outputs; at a checkpoint also the outputs still waiting for an observer
        function (the checkpoint's state is past them, so a restart could not produce them again)."""
        started = time.perf_counter()
        if self._egress:
            if self._replayed_upto:
                self._check_replayed_outputs()
            # The sinks of running subscriptions hold this list's bound ``append``: empty it, never replace it.
            self._store.write_outputs(self._egress, encoded=True)
            self._egress.clear()
        if with_outboxes:
            waiting = [output for outbox in self._outboxes.values() for output in outbox.pending]
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

    # -- checkpoints -------------------------------------------------------------------------------------------

    def checkpoint(self, *, full: bool = False) -> CheckpointMetrics:
        """Take a checkpoint (differential by default): durable sink first, then every changed subscription's
        state in one transaction, then the ingress log is truncated up to what the commit covers."""
        with self._lock:
            self._check_open()
            return self._checkpoint_reporting(full)

    def _checkpoint_reporting(self, full: bool) -> CheckpointMetrics:
        self._status = EngineStatus.CHECKPOINTING
        try:
            return self._checkpoint(full)
        finally:
            self._status = EngineStatus.RUNNING
            self._settle_status()

    def _settle_status(self) -> None:
        """RUNNING, or DEGRADED while something is kept in the store without running."""
        if self._status in (EngineStatus.RUNNING, EngineStatus.DEGRADED):
            degraded = bool(self._broken or self._kept_orphans)
            self._status = EngineStatus.DEGRADED if degraded else EngineStatus.RUNNING

    async def checkpoint_async(self, *, full: bool = False) -> CheckpointMetrics:
        """:meth:`checkpoint`, awaitable: the work runs in a worker thread."""
        import asyncio

        return await asyncio.to_thread(self.checkpoint, full=full)

    def _checkpoint(self, full: bool) -> CheckpointMetrics:
        self._flush_quarantine()  # before the checkpoint covers the events: the log may then drop them
        self._apply_faults()
        self._deliver_outboxes()
        egress_seconds = self._flush_egress(with_outboxes=True)
        handles = self._host.units()
        removed = self._environment.removed_inner_ids()
        mode = CheckpointMode.FULL if full else CheckpointMode.DIFFERENTIAL
        moved: dict[str, OutputCounter] = {}
        reported: set[str] = set()  # the output counters that reported a move since the last checkpoint
        dirty = self._environment.dirty
        unsaved: dict[str, UnstorableStateError] = {}
        observed = {uri: outbox.delivered for uri, outbox in self._outboxes.items()}

        def isolate(key: str, error: Exception) -> str:
            # A state that cannot be saved stops its subscription alone (after the commit), as of its last
            # checkpoint: none of its units is written now, and its pin goes into this delivery record.
            owner = key if key in self._subscriptions else (self._records.subscription_nested_with(key) or key)
            unsaved.setdefault(owner, UnstorableStateError(owner, key, error))
            return owner

        def collect(transaction: CheckpointTransaction) -> None:
            # While paused, with the state: the delivery record, the output counters that moved, how far the
            # observer functions got.
            pins = {uri: self._pin_for(uri) for uri in unsaved}
            transaction.put(_ENGINE, _DELIVERY, self._delivery_bytes(extra_pins=pins))
            self._put_counters(transaction, full, unsaved, reported, moved)
            for uri, seq in observed.items():
                if uri not in unsaved and (seq != self._observed.get(uri, -1) or full):
                    transaction.put(_OBSERVED, uri, _counter_bytes(seq))

        try:
            result: CheckpointResult = self._checkpointer.checkpoint(
                handles, mode=mode, removed=removed, collect=collect, isolate=isolate,
                whole=handles.keys() - self._stored_state_keys, dirty=dirty,
            )
        except BaseException:
            for uri in reported | moved.keys():  # not committed: they still differ from the store
                dirty.note_moved(uri)
            raise
        self._stored_state_keys.update(result.saved)
        self._stored_state_keys.difference_update(removed)
        for counter in moved.values():
            counter.committed = counter.pending
        kept = self._broken | self._kept_orphans
        for uri in [uri for uri in self._pins if uri not in kept and uri not in unsaved]:
            del self._pins[uri]  # recovered since: this checkpoint's record says where its state stands
        self._committed_delivered = dict(self._delivered)
        self._environment.confirm_removed(removed)
        for uri, seq in observed.items():
            if uri not in unsaved and seq != self._observed.get(uri, -1):
                self._observed[uri] = seq
                self._store.delete_outputs(uri, upto=seq)  # delivered: the outbox's rows up to it can go
        for uri, unsaved_error in unsaved.items():
            self._fault(uri, unsaved_error)
        truncated = self._store.truncate_ingress(self._covered_by_checkpoint())
        metrics = CheckpointMetrics(
            checkpoint_id=result.checkpoint_id,
            full=full,
            pause_seconds=result.pause_seconds,
            serialize_seconds=result.serialize_seconds,
            commit_seconds=result.commit_seconds,
            egress_seconds=egress_seconds,
            bytes_written=result.bytes_written,
            dirty_subscriptions=len(result.saved),
            ingress_truncated=truncated,
            at=datetime.now(UTC),
        )
        self.last_checkpoint = metrics
        self._gc.after_checkpoint()
        self._since_checkpoint = 0
        self._last_checkpoint_time = time.monotonic()
        self._log.info(
            "checkpoint %d: paused %.2f ms, commit %.2f ms, %d bytes, %d dirty subscriptions",
            metrics.checkpoint_id, metrics.pause_seconds * 1e3, metrics.commit_seconds * 1e3,
            metrics.bytes_written, metrics.dirty_subscriptions,
        )
        return metrics

    def _put_counters(
        self,
        transaction: CheckpointTransaction,
        full: bool,
        unsaved: Mapping[str, Exception],
        reported: set[str],
        moved: dict[str, OutputCounter],
    ) -> None:
        """While paused: the output counters that moved since the last checkpoint (every one in a full
        checkpoint), found through the dirty registry, not by looking at each; ``reported`` gets those that
        reported a move, ``moved`` those written. Each is re-armed: its next move reports again."""
        dirty = self._environment.dirty
        reported.update(dirty.take_moved())
        counters = self._counters
        for uri, counter in counters.items() if full else [(uri, counters.get(uri)) for uri in sorted(reported)]:
            if counter is None:
                continue  # deleted since
            if uri in unsaved:
                dirty.note_moved(uri)  # its owner is left out of this checkpoint
                continue
            if counter.next != counter.committed or full:
                counter.pending = counter.next
                transaction.put(_OUTPUTS, uri, _counter_bytes(counter.pending))
                moved[uri] = counter
            counter.rearm()  # (if the checkpoint fails, _checkpoint reports it again)

    def _maybe_checkpoint(self, force_time: bool = False) -> bool:
        due = (self._every_events is not None and self._since_checkpoint >= self._every_events) or (
            self._every_seconds is not None
            and (self._since_checkpoint or force_time)
            and time.monotonic() - self._last_checkpoint_time >= self._every_seconds
        )
        if due and self._since_checkpoint:
            self._checkpoint_reporting(full=False)
            return True
        return False

    def _covered_by_checkpoint(self) -> dict[str, int]:
        """Per stream, the last event every reader has processed (all are in the committed state now)."""
        covered = dict(self._delivered)
        for stream, watermark in self._reader_watermarks().items():
            covered[stream] = min(covered.get(stream, watermark), watermark)
        for pin in self._pins.values():  # an artifact kept without running may need the events above its floor
            for stream, floor in pin.floor.items():
                covered[stream] = min(covered.get(stream, floor), floor)
        return covered

    def _streams_read_by_record(self, record: dict[str, Any]) -> set[str]:
        """The streams a stored subscription reads, directly or through definitions (from its references)."""
        return self._streams_read_by({"refs": [{"stream": ref} for ref in record.get("refs", ())]})

    def _reader_watermarks(self) -> dict[str, int]:
        """Per stream, the lowest watermark of a reader that may be behind. Only the readers the dirty registry
        watches can be (see reaqtive.engine.streams): any other has unbounded demand and was caught up when
        last asked, and every event delivered since reached it at once, so its watermark is the stream's."""
        marks: dict[str, int] = {}
        for node, _ in self._environment.dirty.watched():
            if isinstance(node, StreamReader) and not node.is_disposed:
                uri, watermark = node.uri, node.watermark
                if watermark < marks.get(uri, watermark + 1):
                    marks[uri] = watermark
        return marks

    # -- metadata ----------------------------------------------------------------------------------------------

    def artifacts(self) -> list[ArtifactInfo]:
        """Every artifact, by URI."""
        with self._lock:
            snapshot = self._store.checkpoints.read(strict=False)
            sizes = {key: len(blob) for key, blob in snapshot.items(STATE_CATEGORY)}
            return [self._info(uri, record, sizes) for uri, record in sorted(self._records.items())]

    def info(self, uri: str) -> ArtifactInfo:
        """What the engine knows about ``uri``."""
        with self._lock:
            record = self._require(uri)
            snapshot = self._store.checkpoints.read(strict=False)
            sizes = {key: len(blob) for key, blob in snapshot.items(STATE_CATEGORY)}
            return self._info(uri, record, sizes)

    def _info(self, uri: str, record: dict[str, Any], sizes: dict[str, int]) -> ArtifactInfo:
        kind = record["kind"]
        expression: dict[str, Any] | None = record.get("expression")
        if kind == "subscription":
            expression = instantiate(self._templates.get(record["template"], {"op": "?", "args": []}),
                                     record["constants"]) if record["template"] in self._templates else None
        state = sizes.get(uri, 0) + sum(size for key, size in sizes.items() if key.startswith(uri + "/"))
        return ArtifactInfo(
            uri=uri,
            kind=kind,
            created=datetime.fromisoformat(record["created"]),
            expression=expression,
            observer=record.get("observer"),
            references=tuple(record.get("refs", ())),
            state_bytes=state,
            running=uri in self._subscriptions or kind != "subscription",
        )

    def subscription_error(self, uri: str) -> BaseException | None:
        """The error that ended subscription ``uri`` (``None`` if it is running or completed normally)."""
        return self._ended.get(uri)

    # -- lifetime ----------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Flush the durable sink, dispose every query and close the store (no checkpoint is taken)."""
        with self._lock:
            if self._status is EngineStatus.CLOSED:
                return
            try:
                self._flush_egress()
            finally:
                self._host.dispose()  # the queries, then the inner units, then the scheduler
                self._store.close()
                self._gc.release()
                self._status = EngineStatus.CLOSED

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- recovery ----------------------------------------------------------------------------------------------

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
        """The durable sink keeps every output of a subscription from #0 (an observer's outbox, those after its
        cursor): a hole below what was committed means rows were deleted or lost, which must not go unnoticed."""
        extent = self._output_extents.get(uri)
        if record["observer"] == DISCARD_SINK:
            return
        first = 0 if record["observer"] == DURABLE_SINK else self._observed.get(uri, -1) + 1
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

    def _delivery_bytes(self, extra_pins: Mapping[str, Pin] | None = None) -> bytes:
        now = to_micros(self._scheduler.now) if self._clock_started else None
        pinned = {uri: pin for uri, pin in self._pins.items() if uri in self._broken or uri in self._kept_orphans}
        pinned.update(extra_pins or {})
        return _to_bytes(delivery_bytes(self._position, self._delivered, now, pinned, _now_text()))

    def _pin_for(self, uri: str) -> Pin:
        """Where an artifact about to be kept without running stands (see _pin_broken), over every stream (its
        inner queries may read any): "caught up" as of the last committed checkpoint, or its start if it was
        created after it; and the floor of the log as it is now, which holds everything its readers still need
        (a lagging one included: the last truncation respected it)."""
        record = self._records.get(uri, {})
        start = record.get("start", {})
        retained = self._store.first_retained()
        streams = set(self._streams) | set(self._delivered) | set(retained)
        caught_up = {stream: max(start.get(stream, -1), self._committed_delivered.get(stream, -1))
                     for stream in streams}
        floor = {stream: retained[stream] - 1 if stream in retained else self._delivered.get(stream, -1)
                 for stream in streams}
        return Pin(caught_up, floor)

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

    def _rewind_for_lagging_readers(self) -> None:
        """A reader that lagged behind at the checkpoint (its query withheld demand) needs the events after its
        own watermark: start the replay there (the other readers skip what they had, by their watermarks)."""
        # The replay must find every event of a stream after the first one it needs: a hole is a lost row.
        self._expected = {stream: seq + 1 for stream, seq in self._delivered.items()}
        for stream, watermark in self._reader_watermarks().items():
            if watermark < self._delivered.get(stream, -1):
                self._expected[stream] = watermark + 1
                first = self._store.position_after(stream, watermark)
                if first is not None:
                    self._position = min(self._position, first - 1)

    def _recovery_failed(self, uri: str, kind: str, error: Exception, *, orphan: bool = False) -> RecoveryPolicy:
        """Apply the recovery policy to an artifact (or an orphaned state) that failed to recover. Under KEEP
        nothing of it is deleted, ever: it stays stored, not running, with the input it may need."""
        policy = self._policy
        if self._on_failure is not None:
            chosen = self._on_failure(uri, error)
            policy = chosen if chosen is not None else policy
        self._log.error("recovering %r failed (%s): %s", uri, policy.value, error, exc_info=error)
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

    # -- binding -----------------------------------------------------------------------------------------------

    def _bind(self, uri: str, record: dict[str, Any], template: dict[str, Any], blob: bytes | None) -> HostedQuery:
        """Bind subscription ``uri`` (its query, then the egress stamp and its observer) on the engine's query
        host, load ``blob`` if given (its inner units' blobs were handed to the environment before), start it."""
        expression = instantiate(template, record["constants"])
        query = self._expand(decode_query(expression, self.functions))
        observer = _Observer(self, uri, self._sink_for(uri, record["observer"]))
        hosted = self._host.bind(uri, Query("egress", (query, uri)), observer)
        pin = self._pins.get(uri)
        settings = {
            START_WATERMARK_SETTING: MappingProxyType(record.get("start", _NO_WATERMARKS)),
            PINNED_WATERMARK_SETTING: MappingProxyType(pin.caught_up) if pin is not None else _NO_WATERMARKS,
        }
        # Bounds for the times its operators saved (deadlines): after it started, and no later than the last clock
        # its state can have been saved at (this checkpoint's, or its creation if later).
        started = from_micros(record["clock"]) if blob is not None and "clock" in record else None
        hosted.start(None if blob is None else QueryState(blob), settings=settings, started_at=started,
                     where=f"state of {uri!r}")
        return hosted

    def _task_failed(self, args: UnhandledExceptionArgs) -> None:
        """A scheduled task raised (a timer's work escaped its operators): if it is a stage's, stop that stage's
        query alone. Tasks run an operator's own method, whose context names the query (or its inner unit)."""
        stage = getattr(getattr(args.task, "action", None), "__self__", None)
        context = getattr(stage, "_context", None)
        if not isinstance(context, OperatorContext) or not isinstance(args.exception, Exception):
            return  # not a query's task, or not an error a query may be stopped for: it propagates
        args.handled = True
        self._unit_failed(context.instance_id, args.exception)

    def _expand(self, root: Query[Any]) -> Query[Any]:
        """Replace references to observable definitions by the queries they name. Iterative: a stored query
        may be thousands of operators deep."""
        built: list[Query[Any]] = []  # each visited node leaves exactly one query here
        tasks: list[tuple[Query[Any], frozenset[str], int]] = [(root, frozenset(), -1)]  # -1: visit; n: build
        while tasks:
            query, seen, children = tasks.pop()
            if children >= 0:
                rebuilt = iter(built[len(built) - children:])
                del built[len(built) - children:]
                built.append(Query(query.op, tuple(next(rebuilt) if isinstance(arg, Query) else arg
                                                   for arg in query.args)))
                continue
            if query.op == "stream":
                uri = query.args[0]
                record = self._records.get(uri) if isinstance(uri, str) else None
                if record is not None and isinstance(uri, str) and record["kind"] == "observable":
                    if uri in seen:
                        raise MalformedRecordError(f"observable definition {uri!r} refers to itself")
                    tasks.append((decode_query(record["expression"], self.functions), seen | {uri}, -1))
                else:
                    built.append(query)
                continue
            sources = [arg for arg in query.args if isinstance(arg, Query)]
            tasks.append((query, seen, len(sources)))
            tasks.extend((source, seen, -1) for source in reversed(sources))
        return built[0]

    def _sink_for(self, uri: str, observer: str) -> Callable[[Output], object] | None:
        """Where subscription ``uri``'s outputs go: the egress table, nowhere, or the outbox of an observer
        function. Every kept output must be storable (the egress table and a checkpoint of an outbox hold it)."""
        if observer == DISCARD_SINK:
            return None
        encode = DEFAULT_CODEC.encode
        if observer == DURABLE_SINK:
            # Encoded once, here: an output the sink cannot hold stops this subscription at once, alone.
            append = self._egress.append

            def durable(output: Output) -> None:
                try:
                    payload = encode(output.value)
                except StateEncodeError as error:
                    raise UnstorableOutputError(uri, output.seq, error) from error
                append((uri, output.seq, payload))

            return durable
        record = self._require(observer)
        if record["kind"] != "observer":
            raise ArtifactNotFoundError(f"{observer!r} is a {record['kind']}, not an observer")
        outbox = Outbox(uri, observer, self._observer_function(observer, record),
                        retries=self._observer_retries, backoff=self._observer_backoff,
                        delivered=self._observed.get(uri, -1))
        outbox.restore(Output(*row) for row in self._store.read_outputs(uri))
        self._outboxes[uri] = outbox
        keep = outbox.add

        def sink(output: Output) -> None:
            try:
                encode(output.value)  # a checkpoint may have to store it while it waits
            except StateEncodeError as error:
                raise UnstorableOutputError(uri, output.seq, error) from error
            keep(output)

        return sink

    def _observer_function(self, uri: str, record: dict[str, Any]) -> Callable[[Output], object]:
        """The function of observer definition ``uri`` (resolved like the functions of queries)."""
        decoded = decode_query({"op": "observer", "args": [record["function"]]}, self.functions)
        function = decoded.args[0]
        if not callable(function):
            raise MalformedRecordError(f"observer definition {uri!r}: its function is not callable")
        return function

    def _streams_read_by(self, expression: dict[str, Any]) -> set[str]:
        streams: set[str] = set()
        pending = set(_references(expression))
        seen: set[str] = set()
        while pending:
            uri = pending.pop()
            seen.add(uri)
            record = self._records.get(uri)
            if record is None:
                continue
            if record["kind"] == "stream":
                streams.add(uri)
            elif record["kind"] == "observable":
                pending |= _references(record["expression"]) - seen
        return streams

    def _subscription_ended(self, uri: str, error: BaseException | None) -> None:
        self._ended[uri] = error
        if error is not None:
            self._log.error("subscription %r ended with an error: %s", uri, error, exc_info=error)

    # -- faults: a subscription the engine must stop while it runs ------------------------------------------------

    def _unit_failed(self, instance_id: str, error: Exception) -> None:
        """A query, or one of its inner units, raised out of its operators: stop the query after this event."""
        owner = instance_id if instance_id in self._records else self._records.subscription_nested_with(instance_id)
        self._fault_later(owner or instance_id, QueryFailedError(owner or instance_id, instance_id, error))

    def _fault_later(self, uri: str, error: Exception) -> None:
        """Called from inside a query (its sink failed): stop it once the event at hand was delivered."""
        self._faults_pending.append((uri, error))

    def _apply_faults(self) -> None:
        # The list is emptied in place: the delivery loop holds it.
        pending = self._faults_pending[:]
        self._faults_pending.clear()
        for uri, error in pending:
            self._fault(uri, error)

    def _deliver_outboxes(self) -> None:
        """Hand waiting outputs to their observer functions; stop the subscriptions whose observer gave up."""
        for uri, outbox in list(self._outboxes.items()):
            if outbox.waiting:
                failure = outbox.deliver()
                if failure is not None:
                    self._fault(uri, failure)

    def _fault(self, uri: str, error: Exception) -> None:
        """Stop subscription ``uri`` because the engine cannot keep running it without losing something (an
        unstorable output or state, an observer that keeps failing), under the failure policy: REMOVE deletes
        it; otherwise (FAIL and KEEP alike: at run time nothing can be refused) it is kept stored as of its last
        checkpoint, not running, with the input it needs and its undelivered outputs, and recovers from there
        at the next open. ``engine.faults`` lists it; the engine is DEGRADED."""
        if uri not in self._subscriptions:
            return  # already stopped (or deleted)
        policy = RecoveryPolicy.REMOVE if self._policy is RecoveryPolicy.REMOVE else RecoveryPolicy.KEEP
        if self._on_failure is not None:
            chosen = self._on_failure(uri, error)
            if chosen is RecoveryPolicy.REMOVE:
                policy = chosen
        self._log.error("subscription %r stopped (%s): %s", uri, policy.value, error, exc_info=error)
        self.faults.append(RecoveryFailure(uri, "subscription", error, policy))
        if policy is RecoveryPolicy.REMOVE:
            self.delete_subscription(uri)
        else:
            outbox = self._outboxes.get(uri)
            if outbox is not None and outbox.pending:
                self._store.write_outputs(list(outbox.pending))  # kept for the next open to deliver
            self._subscriptions.pop(uri).abandon()
            # Its outputs so far stay on their way to the durable sink: the replay after the next open produces
            # them again with the same ids, and the sink keeps one copy.
            self._counters.pop(uri, None)
            self._outboxes.pop(uri, None)
            self._broken.add(uri)
            self._pins.setdefault(uri, self._pin_for(uri))
        self._settle_status()

    # -- registry helpers --------------------------------------------------------------------------------------

    def _open_stream(self, uri: str) -> None:
        self._streams[uri] = SimpleSubject(buffer_size=_STREAM_BUFFER, overflow=OverflowPolicy.ERROR, name=uri)
        self._environment.add_stream(uri, self._streams[uri])

    def _check_open(self) -> None:
        if self._status is EngineStatus.CLOSED:
            raise EngineClosedError(f"the engine on {str(self._store.path)!r} is closed")

    def _check_new(self, uri: str) -> None:
        self._check_open()
        if not isinstance(uri, str) or not uri:
            raise TypeError(f"an artifact URI must be a non-empty str, got {uri!r}")
        if uri in self._records or uri in _BUILTIN_OBSERVERS:
            kind = self._records[uri]["kind"] if uri in self._records else "built-in observer"
            raise ArtifactExistsError(f"{uri!r} already exists (a {kind})")

    def _check_not_nested(self, uri: str) -> None:
        """A subscription's inner states are stored under ``uri/...``: a subscription URI may neither start with
        another's ``uri/`` nor be the ``uri/`` of another, or deleting one would take the other's state."""
        nested = self._records.subscription_nested_with(uri)
        if nested is not None:
            raise ArtifactExistsError(
                f"subscription {uri!r} would nest with subscription {nested!r}: the inner state of a subscription "
                f"is stored under its URI followed by '/', so one subscription URI must not start with another "
                f"followed by '/'"
            )

    def _require(self, uri: str) -> dict[str, Any]:
        record = self._records.get(uri)
        if record is None:
            raise ArtifactNotFoundError(f"no artifact {uri!r}")
        return record

    def _check_kind(self, uri: str, kind: str) -> dict[str, Any]:
        record = self._require(uri)
        if record["kind"] != kind:
            raise ArtifactNotFoundError(f"{uri!r} is a {record['kind']}, not a {kind}")
        return record

    def _check_references(self, uri: str, references: Iterable[str]) -> None:
        missing = [ref for ref in references if ref not in self._records]
        if missing:
            raise ArtifactNotFoundError(f"{uri!r} refers to {', '.join(map(repr, missing))}, which do(es) not exist")

    def _check_unused(self, uri: str) -> None:
        users = sorted(other for other, record in self._records.items() if uri in record.get("refs", ()))
        if users:
            raise ArtifactInUseError(f"{uri!r} is used by {', '.join(map(repr, users))}; delete those first")

    def _commit_record(self, uri: str, record: dict[str, Any]) -> None:
        self._commit_changes(puts=[(_ARTIFACTS, uri, _to_bytes(record))])
        self._records[uri] = record

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


def _same_value(stored: object, produced: object) -> bool:
    """Whether a replayed output equals the stored one (NaN equals NaN here: the same computation)."""
    if stored == produced:
        return True
    return isinstance(stored, float) and isinstance(produced, float) and math.isnan(stored) and math.isnan(produced)


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


def _to_bytes(record: Mapping[str, Any]) -> bytes:
    return expression_to_json(record).encode("utf-8")


def _from_bytes(blob: bytes, where: str) -> dict[str, Any]:
    try:
        return expression_from_json(blob)
    except Exception as error:
        raise ValueError(f"{where}: {error}") from error


def _now_text() -> str:
    return datetime.now(UTC).isoformat()


class _Records(dict[str, dict[str, Any]]):
    """The artifacts' records by URI, with the subscription URIs kept sorted, so that a URI nested with a
    subscription's (``a`` and ``a/b``) is found without scanning them all."""

    def __init__(self) -> None:
        super().__init__()
        self._subscriptions: SortedList = SortedList()

    def __setitem__(self, uri: str, record: dict[str, Any]) -> None:
        if uri in self:
            self._forget(uri)
        super().__setitem__(uri, record)
        if record.get("kind") == "subscription":
            self._subscriptions.add(uri)

    def __delitem__(self, uri: str) -> None:
        self._forget(uri)
        super().__delitem__(uri)

    def pop(self, uri: str, *default: Any) -> Any:
        if uri in self:
            self._forget(uri)
        return super().pop(uri, *default)

    def _forget(self, uri: str) -> None:
        if self[uri].get("kind") == "subscription":
            self._subscriptions.discard(uri)

    def subscription_nested_with(self, uri: str) -> str | None:
        """A subscription URI that ``uri`` starts with, followed by ``/``, or one that starts with ``uri/``."""
        for cut in range(len(uri) - 1, 0, -1):
            if uri[cut] == "/" and self._is_subscription(uri[:cut]):
                return uri[:cut]
        prefix = uri + "/"
        index = self._subscriptions.bisect_left(prefix)
        if index < len(self._subscriptions) and self._subscriptions[index].startswith(prefix):
            return str(self._subscriptions[index])
        return None

    def _is_subscription(self, uri: str) -> bool:
        record = self.get(uri)
        return record is not None and record.get("kind") == "subscription"
