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
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from sortedcontainers import SortedList

from reaqtive.context import OperatorContext
from reaqtive.engine.egress import Output, OutputCounter
from reaqtive.engine.errors import (
    ArtifactExistsError,
    ArtifactInUseError,
    ArtifactNotFoundError,
    EngineClosedError,
    RecoveryError,
)
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
from reaqtive.engine.store import EngineStore, from_micros, to_micros
from reaqtive.engine.streams import START_WATERMARK_SETTING, Envelope, StreamReader
from reaqtive.query import Query
from reaqtive.scheduler import VirtualTimeScheduler
from reaqtive.state import (
    STATE_CATEGORY,
    Checkpointer,
    CheckpointMode,
    CheckpointResult,
    CheckpointSnapshot,
    CheckpointTransaction,
    InnerEnvironment,
    confirm_saved,
    save_subscription,
    state_loader,
)
from reaqtive.streams import LONG_MAX, Subscription
from reaqtive.subjects import OverflowPolicy, SimpleSubject
from reaqtive.subscriptions import SubscriptionHandle
from reaqtive.visitors import initialize

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
_BUILTIN_OBSERVERS: Final = frozenset({DURABLE_SINK, DISCARD_SINK})
_STREAM_BUFFER: Final = 1 << 20  # a reader without demand may lag this far behind a stream before it fails
_DELIVERY_BATCH: Final = 4096


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
    """Inner states no recovered query claimed; deleted by the next checkpoint."""


class _Observer:
    """The end of a subscription: takes everything, hands outputs to the engine's sink for its observer."""

    __slots__ = ("_engine", "_sink", "_subscription", "_uri")

    def __init__(self, engine: Engine, uri: str, sink: Callable[[Output], object] | None) -> None:
        self._engine = engine
        self._uri = uri
        self._sink = sink
        self._subscription: Subscription | None = None

    def on_subscribe(self, subscription: Subscription) -> None:
        self._subscription = subscription
        subscription.request(LONG_MAX)

    def on_next(self, value: Output) -> None:
        if self._sink is not None:
            self._sink(value)

    def on_error(self, error: BaseException) -> None:
        self._engine._subscription_ended(self._uri, error)

    def on_complete(self) -> None:
        self._engine._subscription_ended(self._uri, None)


class _EngineEnvironment(InnerEnvironment):
    """The engine's execution environment: its streams, plus inner subscriptions and subjects, plus what its
    stream readers and egress stamps ask of the engine."""

    def __init__(self, delivered: dict[str, int], counters: dict[str, OutputCounter]) -> None:
        super().__init__()
        self._delivered_by_stream = delivered
        self._output_counters = counters
        self.readers: list[StreamReader[Any]] = []

    def register_reader(self, reader: StreamReader[Any]) -> None:
        """A stream reader of a query (top-level or inner) was bound."""
        self.readers.append(reader)

    def delivered_watermark(self, uri: str) -> int:
        """The sequence number of the last event of stream ``uri`` the engine delivered (-1: none)."""
        return self._delivered_by_stream.get(uri, -1)

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
    ``synchronous``: SQLite durability (``"FULL"``, or ``"NORMAL"``: survives a process crash, faster).
    ``start``: where the clock of a new store starts (a recovered engine resumes its own clock). Without it the
    clock starts at the first of: :meth:`advance_time`, the first event delivered, or the first subscription
    created (then at the wall clock's time). To run time-based queries over older events in event time, pass
    the time of the first event. ``gc_freeze``: after each checkpoint and after recovery, move what lives into
    the garbage collector's permanent generation, so that its full passes skip the queries' long-lived state
    (see :mod:`reaqtive.engine.gc_policy`; process-wide).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        clock: str = "event",
        functions: FunctionRegistry | None = None,
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
    ) -> None:
        if clock not in ("event", "wall"):
            raise ValueError(f"clock must be 'event' or 'wall', got {clock!r}")
        for name, value in (("checkpoint_every_events", checkpoint_every_events),
                            ("checkpoint_every_seconds", checkpoint_every_seconds)):
            if value is not None and (not isinstance(value, (int, float)) or value <= 0):
                raise ValueError(f"{name} must be positive, got {value!r}")
        self._lock = threading.RLock()
        self._clock_mode = clock
        self.functions = functions if functions is not None else FunctionRegistry()
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
            self._scheduler = VirtualTimeScheduler(tick, name="engine")
            self._delivered: dict[str, int] = {}
            self._counters: dict[str, OutputCounter] = {}
            self._environment = _EngineEnvironment(self._delivered, self._counters)
            self._checkpointer = Checkpointer(self._scheduler, self._store.checkpoints)
            self._records = _Records()
            self._templates: dict[str, dict[str, Any]] = {}
            self._streams: dict[str, SimpleSubject[Envelope]] = {}
            self._subscriptions: dict[str, SubscriptionHandle] = {}
            self._broken: set[str] = set()
            self._stored_state_keys: set[str] = set()
            self._ended: dict[str, BaseException | None] = {}
            self._egress: list[tuple[str, int, Any]] = []
            self._position = 0
            self._since_checkpoint = 0
            self._last_checkpoint_time = time.monotonic()
            self.last_checkpoint: CheckpointMetrics | None = None
            self.recovery = RecoveryMetrics()
            self._clock_started = False
            self._recover()
            if not self._clock_started and start is not None:
                self._start_clock(start)
            self._gc.after_checkpoint()  # the recovered state is long-lived, as after a checkpoint
        except BaseException:
            self._store.close()
            raise

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
        """Append one event to ``stream`` (durable when this returns); returns its sequence number. ``time``: its
        event time (aware; default now)."""
        return self.append_many(stream, [(value, time)])[0]

    def append_many(self, stream: str, events: Iterable[tuple[Any, datetime | None]]) -> list[int]:
        """Append several ``(value, time)`` events in one transaction; returns their sequence numbers."""
        with self._lock:
            self._check_open()
            self._check_kind(stream, "stream")
        batch = []
        for value, when in events:
            if value is None:
                raise TypeError("None is never a stream element")
            stamp = when if when is not None else datetime.now(UTC)
            if stamp.tzinfo is None:
                raise ValueError(f"event times must be timezone-aware, got {stamp}")
            batch.append((value, stamp))
        return self._store.append(stream, batch)

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
                units = self._units_of(uri, handle)
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
            counter.committed = counter.next
            self._templates.setdefault(tid, template)
            self._records[uri] = record
            self._subscriptions[uri] = handle

    def delete_subscription(self, uri: str) -> None:
        """Stop and delete the subscription ``uri`` with its state (and its template when no one else uses it)."""
        with self._lock:
            record = self._check_kind(uri, "subscription")
            deletes = [(_ARTIFACTS, uri), (STATE_CATEGORY, uri), (_OUTPUTS, uri)]
            inner = [key for key in self._environment.inner_subscriptions() if key.startswith(uri + "/")]
            deletes += [(STATE_CATEGORY, key) for key in inner]
            tid = record["template"]
            if not any(r.get("template") == tid for u, r in self._records.items() if u != uri):
                deletes.append((_TEMPLATES, tid))
            self._commit_changes(deletes=deletes)
            del self._records[uri]
            handle = self._subscriptions.pop(uri, None)
            if handle is not None:
                self._discard(uri, handle)
            self._environment.confirm_removed(inner)
            if (_TEMPLATES, tid) in deletes:
                self._templates.pop(tid, None)
            self._ended.pop(uri, None)
            self._broken.discard(uri)

    def _units_of(self, uri: str, handle: SubscriptionHandle) -> dict[str, SubscriptionHandle]:
        """A subscription and its inner subscriptions: the units its state is saved in."""
        units = {key: unit for key, unit in self._environment.inner_subscriptions().items()
                 if key.startswith(uri + "/")}
        units[uri] = handle
        return units

    def _discard(self, uri: str, handle: SubscriptionHandle) -> None:
        """Stop a subscription and forget its inner subscriptions and its outputs (durable and pending)."""
        handle.dispose()
        for key in self._environment.inner_subscriptions():
            if key.startswith(uri + "/"):
                self._environment.delete_inner(key)
        self._environment.release_ids(uri)
        self._egress[:] = [row for row in self._egress if row[0] != uri]
        self._counters.pop(uri, None)
        self._store.delete_outputs(uri)

    # -- processing --------------------------------------------------------------------------------------------

    def process(self, max_events: int | None = None) -> int:
        """Deliver pending ingress events (all, or up to ``max_events``) in append order, applying the checkpoint
        policy as it goes; returns how many were delivered."""
        delivered = 0
        while max_events is None or delivered < max_events:
            with self._lock:
                self._check_open()
                limit = _DELIVERY_BATCH if max_events is None else min(_DELIVERY_BATCH, max_events - delivered)
                events = self._store.read_ingress(self._position, limit)
                if not events:
                    self._advance_wall_clock()
                    self._maybe_checkpoint(force_time=True)
                    break
                for event in events:
                    self._deliver(event.stream, event.seq, event.value, event.time)
                    self._position = event.pos
                    delivered += 1
                    self._since_checkpoint += 1
                    if self._maybe_checkpoint():
                        pass
        return delivered

    def advance_time(self, to: datetime) -> None:
        """Move the engine's clock forward to ``to`` (aware), firing the timers due until then."""
        with self._lock:
            self._check_open()
            self._clock_started = True
            if to > self._scheduler.now:
                self._scheduler.advance_to(to)

    def _start_clock(self, at: datetime) -> None:
        """Set the clock of a store that never had one (it is at the Unix epoch until then)."""
        if at > self._scheduler.now:
            self._scheduler.advance_to(at)
        self._clock_started = True

    def _deliver(self, stream: str, seq: int, value: Any, when: datetime) -> None:
        scheduler = self._scheduler
        self._clock_started = True
        target = when if self._clock_mode == "event" else max(when, datetime.now(UTC))
        if target > scheduler.now:
            scheduler.advance_to(target)
        subject = self._streams.get(stream)
        if subject is not None:
            subject.on_next(Envelope(seq, value))
        self._delivered[stream] = seq
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

    def _flush_egress(self) -> float:
        started = time.perf_counter()
        if self._egress:
            # The sinks of running subscriptions hold this list's bound ``append``: empty it, never replace it.
            self._store.write_outputs(self._egress)
            self._egress.clear()
        return time.perf_counter() - started

    # -- checkpoints -------------------------------------------------------------------------------------------

    def checkpoint(self, *, full: bool = False) -> CheckpointMetrics:
        """Take a checkpoint (differential by default): durable sink first, then every changed subscription's
        state in one transaction, then the ingress log is truncated up to what the commit covers."""
        with self._lock:
            self._check_open()
            return self._checkpoint_reporting(full)

    def _checkpoint_reporting(self, full: bool) -> CheckpointMetrics:
        previous = self._status
        self._status = EngineStatus.CHECKPOINTING
        try:
            return self._checkpoint(full)
        finally:
            self._status = previous

    async def checkpoint_async(self, *, full: bool = False) -> CheckpointMetrics:
        """:meth:`checkpoint`, awaitable: the work runs in a worker thread."""
        import asyncio

        return await asyncio.to_thread(self.checkpoint, full=full)

    def _checkpoint(self, full: bool) -> CheckpointMetrics:
        egress_seconds = self._flush_egress()
        handles: dict[str, SubscriptionHandle] = dict(self._subscriptions)
        handles.update(self._environment.inner_subscriptions())
        removed = self._environment.removed_inner_ids()
        mode = CheckpointMode.FULL if full else CheckpointMode.DIFFERENTIAL
        delivery = _to_bytes(
            {"pos": self._position, "delivered": self._delivered, "now": to_micros(self._scheduler.now),
             "at": _now_text()}
        )
        moved: list[OutputCounter] = []

        def collect(transaction: CheckpointTransaction) -> None:
            # While paused, with the state: the delivery record and the output counters that moved.
            transaction.put(_ENGINE, _DELIVERY, delivery)
            for uri, counter in self._counters.items():
                if counter.next != counter.committed or full:
                    counter.pending = counter.next
                    transaction.put(_OUTPUTS, uri, _counter_bytes(counter.pending))
                    moved.append(counter)

        result: CheckpointResult = self._checkpointer.checkpoint(
            handles, mode=mode, removed=removed, collect=collect
        )
        for counter in moved:
            counter.committed = counter.pending
        self._environment.confirm_removed(removed)
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
        for uri in self._broken:  # a subscription kept without running may still need its streams' events
            for stream in self._streams_read_by_record(self._records.get(uri, {})):
                covered.pop(stream, None)
        return covered

    def _streams_read_by_record(self, record: dict[str, Any]) -> set[str]:
        """The streams a stored subscription reads, directly or through definitions (from its references)."""
        return self._streams_read_by({"refs": [{"stream": ref} for ref in record.get("refs", ())]})

    def _reader_watermarks(self) -> dict[str, int]:
        marks: dict[str, int] = {}
        live = [reader for reader in self._environment.readers if not reader.is_disposed]
        self._environment.readers[:] = live  # forget the readers of deleted or finished queries
        for reader in live:
            uri, watermark = reader.uri, reader.watermark
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
                for handle in self._subscriptions.values():
                    handle.dispose()
                self._environment.dispose()
                self._scheduler.dispose()
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
        records: dict[str, dict[str, Any]] = {}
        for key, blob in snapshot.items(_ARTIFACTS):
            try:
                records[key] = _from_bytes(blob, f"artifact {key!r}")
            except ValueError as error:
                self._recovery_failed(key, {"kind": "unknown"}, error, stored=False)
        self._templates = {
            key: _from_bytes(blob, f"template {key!r}") for key, blob in snapshot.items(_TEMPLATES)
        }
        state = dict(snapshot.items(STATE_CATEGORY))
        self._stored_state_keys = set(state) | {key for category, key in snapshot.damaged if category == STATE_CATEGORY}
        damaged_state = {key: err for (category, key), err in snapshot.damaged.items() if category == STATE_CATEGORY}
        for (category, key), damage in snapshot.damaged.items():
            if category == _ARTIFACTS:
                self._recovery_failed(key, {"kind": "unknown"}, damage, stored=False)
        phases["read"] = time.perf_counter() - started

        mark = time.perf_counter()
        for uri, record in records.items():
            if record["kind"] in ("stream", "observable", "observer"):
                self._records[uri] = record
                if record["kind"] == "stream":
                    self._open_stream(uri)
                    self.recovery.streams += 1
                else:
                    self.recovery.definitions += 1
        phases["definitions_and_streams"] = time.perf_counter() - mark

        mark = time.perf_counter()
        self._environment.restore({key: blob for key, blob in state.items() if key not in records})
        self._restore_delivery(snapshot, records)
        for uri, record in sorted(records.items()):
            if record["kind"] != "subscription":
                continue
            self._records[uri] = record
            try:
                damaged = damaged_state.get(uri) or next(
                    (error for key, error in damaged_state.items() if key.startswith(uri + "/")), None
                )
                if damaged is not None:  # its own blob or one of its inner subscriptions' blobs
                    raise damaged
                template = self._templates[record["template"]]
                self._subscriptions[uri] = self._bind(uri, record, template, state.get(uri))
                self.recovery.subscriptions += 1
            except Exception as error:  # one artifact's failure must not stop the others
                self._recovery_failed(uri, record, error)
        self.recovery.inner_subscriptions = len(self._environment.inner_subscriptions())
        self.recovery.orphans = self._environment.collect_orphans(keep=self._owned_by_broken)
        if self.recovery.orphans:
            self._log.warning("%d inner states no query re-created will be deleted at the next checkpoint: %s",
                              len(self.recovery.orphans), ", ".join(self.recovery.orphans[:5]))
        self._rewind_for_lagging_readers()
        phases["subscriptions"] = time.perf_counter() - mark

        phases["total"] = time.perf_counter() - started
        self._status = EngineStatus.DEGRADED if self.recovery.failures else EngineStatus.RUNNING
        if records:
            self._log.info(
                "recovered %d streams, %d definitions, %d subscriptions (%d inner) in %.1f ms; %d failed",
                self.recovery.streams, self.recovery.definitions, self.recovery.subscriptions,
                self.recovery.inner_subscriptions, phases["total"] * 1e3, len(self.recovery.failures),
            )

    def _restore_delivery(self, snapshot: CheckpointSnapshot, records: dict[str, dict[str, Any]]) -> None:
        """The delivery record (replay position, watermarks, clock) and the output counters."""
        delivery_blob = snapshot.get(_ENGINE, _DELIVERY)
        delivery = _from_bytes(delivery_blob, "delivery record") if delivery_blob is not None else {}
        self._position = int(delivery.get("pos", 0))
        self._delivered.update({str(k): int(v) for k, v in delivery.get("delivered", {}).items()})
        for key, blob in snapshot.items(_OUTPUTS):
            committed = int(blob.decode("ascii"))
            self._counters[key] = OutputCounter(committed, committed)
        if "now" in delivery:  # before any query is bound: timers and windows resume on the checkpoint's clock
            self._start_clock(from_micros(int(delivery["now"])))
        else:  # no checkpoint yet: the clock of the earliest query's creation (its state was saved then)
            clocks = [int(r["clock"]) for r in records.values() if r.get("kind") == "subscription" and "clock" in r]
            if clocks:
                self._start_clock(from_micros(min(clocks)))

    def _owned_by_broken(self, inner_id: str) -> bool:
        """Whether an inner id belongs to a subscription kept without running (its state must stay)."""
        return any(inner_id.startswith(uri + "/") for uri in self._broken)

    def _rewind_for_lagging_readers(self) -> None:
        """A reader that lagged behind at the checkpoint (its query withheld demand) needs the events after its
        own watermark: start the replay there (the other readers skip what they had, by their watermarks)."""
        for stream, watermark in self._reader_watermarks().items():
            if watermark < self._delivered.get(stream, -1):
                first = self._store.position_after(stream, watermark)
                if first is not None:
                    self._position = min(self._position, first - 1)

    def _recovery_failed(self, uri: str, record: dict[str, Any], error: Exception, stored: bool = True) -> None:
        policy = self._policy
        if self._on_failure is not None:
            chosen = self._on_failure(uri, error)
            policy = chosen if chosen is not None else policy
        self._log.error("recovering %r failed (%s): %s", uri, policy.value, error, exc_info=error)
        if policy is RecoveryPolicy.FAIL:
            raise RecoveryError(uri, error) from error
        self.recovery.failures.append(RecoveryFailure(uri, record["kind"], error, policy))
        if policy is RecoveryPolicy.REMOVE:
            self._environment.abandon(uri)
            inner = [(STATE_CATEGORY, key) for key in self._stored_state_keys if key.startswith(uri + "/")]
            self._commit_changes(deletes=[(_ARTIFACTS, uri), (STATE_CATEGORY, uri), (_OUTPUTS, uri), *inner])
            self._records.pop(uri, None)
        elif stored:
            self._broken.add(uri)
            self._environment.abandon(uri)

    # -- binding -----------------------------------------------------------------------------------------------

    def _bind(
        self, uri: str, record: dict[str, Any], template: dict[str, Any], blob: bytes | None
    ) -> SubscriptionHandle:
        expression = instantiate(template, record["constants"])
        query = self._expand(decode_query(expression, self.functions), set())
        observer = _Observer(self, uri, self._sink_for(record["observer"]))
        handle = Query("egress", (query, uri)).subscribe(observer)
        settings = dict(self._settings)
        settings[START_WATERMARK_SETTING] = dict(record.get("start", {}))
        context = OperatorContext(uri, self._scheduler, execution_environment=self._environment, settings=settings,
                                  logger=self._log)
        loader = None if blob is None else state_loader(blob, where=f"state of {uri!r}")
        initialize(handle, context, loader)
        return handle

    def _expand(self, query: Query[Any], seen: set[str]) -> Query[Any]:
        """Replace references to observable definitions by the queries they name."""
        if query.op == "stream":
            uri = query.args[0]
            record = self._records.get(uri) if isinstance(uri, str) else None
            if record is not None and isinstance(uri, str) and record["kind"] == "observable":
                if uri in seen:
                    raise ValueError(f"observable definition {uri!r} refers to itself")
                inner = decode_query(record["expression"], self.functions)
                return self._expand(inner, seen | {uri})
            return query
        args = tuple(self._expand(arg, seen) if isinstance(arg, Query) else arg for arg in query.args)
        return Query(query.op, args)

    def _sink_for(self, observer: str) -> Callable[[Output], object] | None:
        if observer == DURABLE_SINK:
            return self._egress.append
        if observer == DISCARD_SINK:
            return None
        record = self._require(observer)
        if record["kind"] != "observer":
            raise ArtifactNotFoundError(f"{observer!r} is a {record['kind']}, not an observer")
        decoded = decode_query({"op": "observer", "args": [record["function"]]}, self.functions)
        function = decoded.args[0]
        assert callable(function)
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
