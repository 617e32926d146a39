"""Running queries: binding a stored query to its stages, and stopping a query that fails while it runs (faults) under
the recovery policy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Final

from reaqtive.core.context import OperatorContext
from reaqtive.core.describe import error_text
from reaqtive.core.error_policy import ERROR_POLICY_SETTING
from reaqtive.core.operator import OperatorBase
from reaqtive.core.streams import LONG_MAX, Subscription
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.engine.artifacts import ArtifactRecords
from reaqtive.engine.backfill import behind_of as backfill_behind
from reaqtive.engine.backfill import started_clock
from reaqtive.engine.behind import Lag
from reaqtive.engine.counters import OutputCounter
from reaqtive.engine.database import EngineStore, from_micros
from reaqtive.engine.egress import Output, OutputTaker, OutputWriter
from reaqtive.engine.engine_errors import (
    ArtifactInUseError,
    InnerRecoveryError,
    MalformedRecordError,
    QueryFailedError,
    UnstorableOutputError,
)
from reaqtive.engine.expressions import (
    FunctionRegistry,
    decode_query,
    instantiate,
)
from reaqtive.engine.failures import (
    ElementFailure,
    OnError,
    SubscriptionFailedError,
    SubscriptionPolicy,
    check_on_error,
    error_name,
)
from reaqtive.engine.handover import EngineLock
from reaqtive.engine.idle import Subscriptions, idle_streams
from reaqtive.engine.model import (
    DISCARD_SINK,
    DURABLE_SINK,
    EngineStatus,
    RecoveryFailure,
    RecoveryMetrics,
    RecoveryPolicy,
    SubscriptionState,
    SubscriptionStatus,
)
from reaqtive.engine.outputs import Outputs, RunWriter
from reaqtive.engine.positions import Positions
from reaqtive.engine.quarantine import Quarantine
from reaqtive.engine.query_environment import QueryEnvironment
from reaqtive.engine.readers import (
    CAUGHT_UP_SETTING,
    LEGACY_CAUGHT_UP_SETTING,
    START_POSITION_SETTING,
    StreamReader,
)
from reaqtive.engine.records import Behind, parse_counter
from reaqtive.engine.scheduling import Scheduling, record_priority
from reaqtive.engine.signals import Signal
from reaqtive.engine.stopped import StoppedQueries
from reaqtive.engine.store_keys import ARTIFACTS, OUTPUTS, to_bytes
from reaqtive.fluent.query import Query
from reaqtive.operators.keyed_groups import noting_general_groups
from reaqtive.operators.keyed_steps import in_keyed_form, recorded_keyed_form
from reaqtive.scheduler import UnhandledExceptionArgs, VirtualTimeScheduler
from reaqtive.state import STATE_CATEGORY, MissingStateError, StateError
from reaqtive.state.host import HostedQuery, QueryHost, QueryState
from reaqtive.state.traversal import iter_nodes

_LOG: Final = logging.getLogger("reaqtive.engine")
_NO_SKIPS: Final[frozenset[tuple[str, str, int]]] = frozenset()


def _discard(seq: int, value: Any) -> None:
    """The writer of a subscription whose observer is ``discard``."""


class _Observer(OutputTaker):
    """The end of a subscription: takes everything, hands outputs to the engine's writer for its observer. An
    output the writer cannot keep (a value the store cannot encode) stops this subscription alone: the engine
    faults it once the event at hand was delivered to the others."""

    __slots__ = ("_engine", "_failed", "_subscription", "_uri", "_write", "_write_run")

    def __init__(self, engine: Running, uri: str, write: OutputWriter | None,
                 write_run: RunWriter | None = None) -> None:
        self._engine = engine
        self._uri = uri
        self._write = write
        self._write_run = write_run  # a run's outputs in one call (the durable sink's)
        self._subscription: Subscription | None = None
        self._failed = False

    def on_subscribe(self, subscription: Subscription) -> None:
        self._subscription = subscription
        subscription.request(LONG_MAX)

    def write_output(self, seq: int, value: Any) -> None:
        write = self._write
        if write is None or self._failed:
            return
        try:
            write(seq, value)
        except UnstorableOutputError as error:
            self._unstorable(error)

    def write_outputs(self, first: int, values: list[Any]) -> int:
        write = self._write
        if write is None or self._failed:
            return len(values)
        seq = first
        try:
            if self._write_run is not None:
                return self._write_run(first, values)
            for value in values:
                write(seq, value)
                seq += 1
        except UnstorableOutputError as error:
            self._unstorable(error)  # the outputs after it are dropped, as the query stops at it
            return error.seq - first + 1
        return len(values)

    def writer(self) -> OutputWriter:
        write = self._write
        return _discard if write is None else write

    def unstorable(self, error: UnstorableOutputError) -> None:
        if not self._failed:
            self._unstorable(error)

    def _unstorable(self, error: UnstorableOutputError) -> None:
        self._failed = True
        if self._subscription is not None:
            self._subscription.cancel()
        self._engine.fault_later(self._uri, error)

    def on_next(self, value: Output) -> None:
        self.write_output(value.seq, value.value)

    def on_error(self, error: BaseException) -> None:
        self._engine._subscription_ended(self._uri, error)

    def on_complete(self) -> None:
        self._engine._subscription_ended(self._uri, None)


class _PolicyHost:
    """The engine's side of its subscriptions' error policies (see reaqtive.engine.failures)."""

    __slots__ = ("_engine",)

    def __init__(self, engine: Running) -> None:
        self._engine = engine

    def position_of(self, unit: str) -> int:
        return self._engine._environment.start_position(unit)

    def path_of(self, unit: str, operator: OperatorBase[Any]) -> str:
        engine = self._engine
        hosted = engine._subscriptions.get(unit)
        handle = hosted.handle if hosted is not None else engine._environment.inner_subscriptions().get(unit)
        if handle is not None:
            for node, path in iter_nodes(handle):
                if node is operator:
                    return "/".join(map(str, path))
        return "?"

    def element_skipped(self, failure: ElementFailure) -> None:
        self._engine._element_skipped(failure)


class Running:
    """The running queries (see the module docstring): a part that binds them, applies their error policies and
    stops those that fail. It owns what that keeps: each subscription's error policy and the user errors counted,
    how each query ended, the faults waiting for the event at hand to end (``pending``) and those applied
    (``faults``). What it needs of the other parts it is given: the query host and its environment, the records,
    the bound and idle subscriptions, what is kept stopped, the output side, the queries behind the engine; and a
    few callbacks for what other rooms do (expand a query's definitions, the writer of an observer, the pin of a
    stopped query, delete a subscription, settle the engine's status, commit records)."""

    def __init__(
        self, *, lock: EngineLock, store: EngineStore, scheduler: VirtualTimeScheduler, host: QueryHost,
        environment: QueryEnvironment, records: ArtifactRecords, subscriptions: Subscriptions,
        stopped: StoppedQueries, outputs: Outputs, quarantine: Quarantine, scheduling: Scheduling,
        positions: Positions, streams: Mapping[str, Any], functions: FunctionRegistry, recovery: RecoveryMetrics,
        clock_mode: str, on_error: OnError, policy: RecoveryPolicy,
        on_failure: Callable[[str, BaseException], RecoveryPolicy | None] | None, lazy_binding: bool,
        legacy_caught_up: Callable[[], Mapping[str, int]], engine_status: Callable[[], EngineStatus],
        check_open: Callable[[], None], expand: Callable[[Query[Any]], Query[Any]],
        writer_for: Callable[[str, str], OutputWriter | None], pin_for: Callable[[str], Behind],
        delete_subscription: Callable[[str], None], settle_status: Callable[[], None],
        commit_changes: Callable[[Iterable[tuple[str, str, bytes]]], None], appended: Signal, produced: Signal,
        log: logging.Logger, pending: list[tuple[str, Exception]],
    ) -> None:
        self._lock = lock
        self._store = store
        self._scheduler = scheduler
        self._host = host
        self._environment = environment
        self._records = records
        self._subscriptions = subscriptions
        self._stopped = stopped
        self._outputs = outputs
        self._quarantine = quarantine
        self._scheduling = scheduling
        self._positions = positions
        self._streams = streams
        self.functions = functions
        self._recovery = recovery
        self._clock_mode = clock_mode
        self._on_error = on_error
        self._policy = policy
        self._on_failure = on_failure
        self._lazy_binding = lazy_binding
        self._legacy_caught_up = legacy_caught_up
        self._engine_status = engine_status
        self._check_open = check_open
        self._expand = expand
        self._writer_for = writer_for
        self._pin_for = pin_for
        self._delete_subscription = delete_subscription
        self._settle_status = settle_status
        self._commit_changes = commit_changes
        self._appended = appended
        self._produced = produced
        self._log = log
        self._policies: dict[str, SubscriptionPolicy] = {}  # each running subscription's error policy
        self._policy_host = _PolicyHost(self)
        self._user_errors: dict[tuple[str, str, str], int] = {}  # (subscription, error type, skip/stop): count
        self._ended: dict[str, BaseException | None] = {}  # how each query ended (None: completed)
        # Faults raised inside a query, applied once the event at hand was delivered to the others; the delivery
        # loops read it (emptied in place: they hold it).
        self.pending = pending
        self.faults: list[RecoveryFailure] = []  # the queries stopped while running, and why

    # -- what the others read, and the few changes they ask for -------------------------------------------------

    @property
    def user_errors(self) -> Mapping[tuple[str, str, str], int]:
        """Per (subscription, error type, "skip"/"stop"), how many user errors its policy handled."""
        return self._user_errors

    def ended(self, uri: str) -> BaseException | None:
        """How query ``uri`` ended, if it did (``None`` also while it runs or once it completed)."""
        return self._ended.get(uri)

    def forget_ended(self, uri: str) -> None:
        """Query ``uri`` is bound again, or gone: how it ended before is forgotten."""
        self._ended.pop(uri, None)

    def drop_policy(self, uri: str) -> None:
        """Subscription ``uri`` is gone or replaced: its error policy goes."""
        self._policies.pop(uri, None)

    def record_fault(self, failure: RecoveryFailure) -> None:
        """A subscription that cannot run, stopped by another part (recovery): listed with the faults."""
        self.faults.append(failure)


    def _count_user_error(self, uri: str, error_type: str, action: str) -> None:
        key = (uri, error_type, action)
        self._user_errors[key] = self._user_errors.get(key, 0) + 1

    def _element_skipped(self, failure: ElementFailure) -> None:
        """A user function raised and the subscription's policy skipped the element: a dead letter, counted."""
        self._count_user_error(failure.subscription, failure.error_type, "skip")
        self._quarantine.skipped(failure)

    def bind(self, uri: str, record: dict[str, Any], template: dict[str, Any], blob: bytes | None, *,
              behind: Behind | None = None, load: Callable[[SubscriptionHandle], None] | None = None) -> HostedQuery:
        """Bind subscription ``uri`` (its query, then the egress stamp and its observer) on the engine's query
        host, load ``blob`` if given (its inner units' blobs were handed to the environment before), start it.
        ``behind``: a new subscription starts behind the engine there (a backfill, reaqtive.engine.backfill).
        ``load``: instead of a blob, a load step of its own (an upgrade: reaqtive.engine.upgrade)."""
        expression = instantiate(template, record["constants"])
        query = self._expand(decode_query(expression, self.functions))
        with in_keyed_form(recorded_keyed_form(record)), noting_general_groups() as general:
            hosted = self._bind_in_form(uri, record, query, blob, behind, load)
        for reason in dict.fromkeys(general):  # once per reason: what a person asks first about a slow group_by
            _LOG.info("subscription %r: a group_by ... flat_map runs on the general path (a subscription per "
                      "group): %s", uri, reason,
                      extra={"reaqtive_event": "general_path", "subscription": uri, "reason": reason})
        return hosted

    def _bind_in_form(self, uri: str, record: dict[str, Any], query: Query[Any], blob: bytes | None,  # noqa: PLR0917
                      behind: Behind | None, load: Callable[[SubscriptionHandle], None] | None = None) -> HostedQuery:
        observer = _Observer(self, uri, self._writer_for(uri, record["observer"]), self._outputs.run_writer(uri))
        # Its own scheduler, a child of the engine's root: paused, prioritized and faulted alone.
        scheduler = self._scheduler.create_child(uri, priority=record_priority(uri, record))
        # Where it stood behind the engine at the checkpoint its state belongs to; kept without running since; or,
        # a backfill no checkpoint saw yet, at its start (its state is the one saved at its creation).
        stood = (self._stopped.stood(uri) or backfill_behind(record)) if blob is not None \
            else behind
        if stood is not None:
            # It stood behind the engine at the checkpoint its state belongs to (or it was kept without running
            # since): it goes on from there, on a timeline of its own at its own clock (its timers are set
            # against it), and catches up.
            scheduler.detach(None if stood.clock is None else scheduler.to_ticks(from_micros(stood.clock)))
        hosted = self._host.bind(uri, Query("egress", (query, uri)), observer, scheduler=scheduler)
        if stood is not None:
            self._scheduling.hold(Lag(uri, scheduler, stood.pos))  # before it starts: its readers are held off
        settings = self._position_settings(uri, record, stood)
        self._quarantine.restart_count(uri)  # it goes on from a checkpoint: its skips are counted anew
        entries = record.get("skipping")
        # An empty frozenset is a new object of 216 bytes each time: idle subscriptions share one.
        skipping = frozenset((entry["unit"], entry["path"], entry["pos"]) for entry in entries) if entries \
            else _NO_SKIPS
        policy = self._policies[uri] = SubscriptionPolicy(uri, self._on_error_of(uri, record), self._policy_host,
                                                          skipping)
        settings[ERROR_POLICY_SETTING] = policy
        # Bounds for the times its operators saved (deadlines): after it started, and no later than the last clock
        # its state can have been saved at (this checkpoint's, or its creation if later).
        started = from_micros(started_clock(record)) if blob is not None and "clock" in record else None
        try:
            hosted.start(None if blob is None else QueryState(blob), settings=settings, started_at=started,
                         where=f"state of {uri!r}", load=load)
        except BaseException:
            self._scheduling.drop_behind(uri)
            raise
        return hosted

    # -- idle subscriptions (reaqtive.engine.idle) ---------------------------------------------------------------

    def idle_streams(self, uri: str, record: dict[str, Any], template: dict[str, Any],
                      plans: dict[tuple[str, int], tuple[str, ...] | None]) -> tuple[str, ...] | None:
        """The streams recovered subscription ``uri`` reads, if it may wait unbound until one of them has an event
        (``None``: it binds now). Its query is decoded here, so that a function the host does not provide fails
        now, under the recovery policy, as when it binds; ``plans``: what this recovery decided per template and
        constants (10,000 subscriptions of one query decode it once). Bound now, conservatively: a query whose
        observer is a function (its outbox hands on what waits), one behind the engine or backfilling, one that
        skips elements, one whose state predates log positions, one of any operator not in
        :data:`~reaqtive.engine.idle.IDLE_OPERATORS`; every one with ``Engine(lazy_binding=False)``."""
        if (not self._lazy_binding or record["observer"] not in (DURABLE_SINK, DISCARD_SINK)
                or self._legacy_caught_up() or "skipping" in record
                or self._stopped.stood(uri) is not None or backfill_behind(record) is not None):
            return None
        key = (record["template"], id(record["constants"]))  # equal constants are one object (parse_artifact)
        if key not in plans:
            query = self._expand(decode_query(instantiate(template, record["constants"]), self.functions))
            streams = idle_streams(query)
            # A stream it reads that the engine does not have (removed at recovery) fails as it binds.
            plans[key] = streams if streams is not None and all(s in self._streams for s in streams) else None
        if "on_error" in record:
            self._on_error_of(uri, record)  # its function resolves now, as at binding
        return plans[key]

    def bind_idle(self, uri: str, blob: bytes) -> HostedQuery | None:
        """Bind idle subscription ``uri`` with its stored state, as recovery would have bound it, and record it
        bound; a lagging reader puts it behind the engine, as at recovery. A failure now (state that does not load)
        stops it as a fault would, under the failure policy (KEEP or REMOVE: nothing can be refused any more)."""
        record = self._records[uri]
        template = self._records.templates[record["template"]]
        try:
            hosted = self.bind(uri, record, template, blob)
            inner_failures = self._environment.take_load_failures(uri)
            ended = self._ended.get(uri)
            if inner_failures or isinstance(ended, StateError):
                hosted.abandon()
                self._ended.pop(uri, None)
                self._outputs.drop_buffered(uri)
                if inner_failures:
                    raise InnerRecoveryError(*min(inner_failures.items()))
                assert ended is not None
                raise ended
        except Exception as error:  # one subscription's failure must not stop the delivery to the others
            self._idle_bind_failed(uri, error)
            return None
        self._subscriptions[uri] = hosted
        delivered = self._positions.delivered_at
        if any(isinstance(node, StreamReader) and node.watermark < delivered.get(node.uri, -1)
               for node, _ in iter_nodes(hosted.handle)):
            self._scheduling.fall_behind(uri)  # its state lagged at its checkpoint: it catches up from its watermark
        return hosted

    def _idle_bind_failed(self, uri: str, error: Exception) -> None:
        """An idle subscription failed to bind: it stops under the failure policy, as a fault stops a query."""
        self._policies.pop(uri, None)
        self._scheduling.drop_behind(uri)
        policy = RecoveryPolicy.REMOVE if self._policy is RecoveryPolicy.REMOVE else RecoveryPolicy.KEEP
        if self._on_failure is not None and self._on_failure(uri, error) is RecoveryPolicy.REMOVE:
            policy = RecoveryPolicy.REMOVE
        self._log.error("binding idle subscription %r failed (%s): %s", uri, policy.value, error, exc_info=error,
                        extra={"reaqtive_event": "recovery_failed", "artifact": uri, "kind": "subscription",
                               "policy": policy.value, "error_type": type(error).__name__})
        self.faults.append(RecoveryFailure(uri, "subscription", error, policy))
        if policy is RecoveryPolicy.REMOVE:
            self._delete_subscription(uri)
        else:
            self._stopped.keep(uri, self._pin_for(uri))
        self._settle_status()

    def _position_settings(self, uri: str, record: dict[str, Any], stood: Behind | None) -> dict[str, object]:
        """Where the readers of subscription ``uri`` start (its record's start) and what "caught up" in its
        saved state means: where it stood behind the engine, or the position of the checkpoint its state belongs
        to (for state saved before log positions, the same in sequence numbers per stream)."""
        caught_up = stood.pos if stood is not None else self._stopped.committed.pos
        settings: dict[str, object] = {START_POSITION_SETTING: record.get("start_pos", -1),
                                       CAUGHT_UP_SETTING: caught_up}
        legacy = stood.legacy if stood is not None and stood.legacy is not None else self._legacy_caught_up()
        if legacy:  # the store was checkpointed before log positions: its states may be of reader version 1
            starts = record.get("start", {})
            settings[LEGACY_CAUGHT_UP_SETTING] = MappingProxyType(
                {stream: max(legacy.get(stream, -1), starts.get(stream, -1)) for stream in {*legacy, *starts}})
        return settings

    def task_failed(self, args: UnhandledExceptionArgs) -> None:
        """A scheduled task raised (a timer's work escaped its operators): if it ran on a query's scheduler, or
        is a stage's, stop that query alone. A stage's task names its unit (the query or one of its inner
        units) through the stage's context; any other task is its scheduler's query's."""
        if not isinstance(args.exception, Exception):
            return  # not an error a query may be stopped for: it propagates
        stage = getattr(getattr(args.task, "action", None), "__self__", None)
        context = getattr(stage, "_context", None)
        if isinstance(context, OperatorContext):
            unit = context.instance_id
        else:
            name = getattr(args.scheduler, "name", None)
            hosted = self._subscriptions.bound(name) if isinstance(name, str) else None
            if hosted is None or hosted.scheduler is not args.scheduler:
                return  # not a query's task: it propagates
            unit = hosted.instance_id
        args.handled = True
        self.unit_failed(unit, args.exception)

    # -- restarting a failed or stopped subscription ----------------------------------------------------------

    def restart_subscription(self, uri: str, *, skip_failed: bool = False) -> None:
        """Run subscription ``uri`` again from its last checkpoint (a failed or stopped one)."""
        with self._lock:
            self._check_open()
            record = self._records.check_kind(uri, "subscription")
            if uri in self._subscriptions:
                raise ArtifactInUseError(f"subscription {uri!r} runs: only a failed or stopped one restarts")
            failed = self._stopped.failed.get(uri)
            if skip_failed and (failed is None or failed.failure is None):
                raise ValueError(f"subscription {uri!r} did not fail on an element of a user function: there is "
                                 "none to skip")
            template = self._records.templates.get(record["template"])
            if template is None:
                raise MissingStateError(f"subscription {uri!r}: its query template is not in the store")
            snapshot = self._store.checkpoints.read(strict=False)
            prefix = uri + "/"
            inner = {key: blob for key, blob in snapshot.items(STATE_CATEGORY) if key.startswith(prefix)}
            counter = snapshot.get(OUTPUTS, uri)
            restarted = {key: value for key, value in record.items() if key != "failed"}
            if skip_failed and failed is not None and failed.failure is not None:
                # Stored with it: every replay of that element (after a crash, a later restart) skips it again.
                where = failed.failure
                restarted["skipping"] = [*record.get("skipping", []),
                                         {"unit": where.unit, "path": where.path, "pos": where.position}]
            self._environment.release_ids(uri)  # its inner units get the ids a recovery would give them
            self._environment.restore(inner)
            self._outputs.counters[uri] = OutputCounter(
                *(2 * (parse_counter(uri, counter) if counter is not None else 0,)))
            try:
                hosted = self.bind(uri, restarted, template, snapshot.get(STATE_CATEGORY, uri))
                inner_failures = self._environment.take_load_failures(uri)
                if inner_failures:
                    hosted.abandon()
                    inner_id, error = min(inner_failures.items())
                    raise InnerRecoveryError(inner_id, error)
            except BaseException:
                self._environment.discard_saved(list(inner), delete=False)
                self._outputs.counters.pop(uri, None)
                self._policies.pop(uri, None)
                raise
            if restarted != record:
                self._commit_changes([(ARTIFACTS, uri, to_bytes(restarted))])
            self._records[uri] = restarted
            self._subscriptions[uri] = hosted
            self._stopped.release(uri)
            self._ended.pop(uri, None)
            self.faults[:] = [fault for fault in self.faults if fault.uri != uri]
            if self._clock_mode == "event" and record["observer"] == DURABLE_SINK:
                highest = self._store.max_output_seqs().get(uri)
                if highest is not None:
                    self._outputs.replayed_upto[uri] = highest  # what it produces again is compared with the sink
            self._settle_status()
            self._log.info("subscription %r restarted from its last checkpoint%s", uri,
                           " (skipping the element that failed it)" if skip_failed else "",
                           extra={"reaqtive_event": "subscription_restarted", "subscription": uri})
        self._appended.fire()  # a processing loop catches it up

    # -- what each subscription is doing ----------------------------------------------------------------------

    def subscriptions(self) -> list[SubscriptionStatus]:
        """Every subscription's state, sorted by URI."""
        with self._lock:
            return [self.status_of(uri, record) for uri, record in sorted(self._records.items())
                    if record["kind"] == "subscription"]

    def stopped_error(self, uri: str) -> BaseException | None:
        """Why subscription ``uri`` does not run, if it does not."""
        with self._lock:
            self._records.check_kind(uri, "subscription")
            failed = self._stopped.failed.get(uri)
            if failed is not None:
                return failed
            if uri in self._stopped.kept:
                return next((f.error for f in reversed([*self._recovery.failures, *self.faults]) if f.uri == uri),
                            None)
            return None

    def subscription_error(self, uri: str) -> BaseException | None:
        """The error that ended subscription ``uri``'s query, if one did."""
        with self._lock:
            self._records.check_kind(uri, "subscription")
            failed = self._stopped.failed.get(uri)
            return failed.error if failed is not None else self._ended.get(uri)

    def subscription_status(self, uri: str) -> SubscriptionStatus:
        """The state of subscription ``uri``."""
        with self._lock:
            return self.status_of(uri, self._records.check_kind(uri, "subscription"))

    def status_of(self, uri: str, record: dict[str, Any]) -> SubscriptionStatus:
        stored = record.get("on_error")
        on_error = "default" if stored is None else stored if isinstance(stored, str) else "function"
        counter = self._outputs.counters.get(uri)
        outputs = counter.next if counter is not None else 0
        failed = record.get("failed")
        if failed is not None:
            return SubscriptionStatus(
                uri, SubscriptionState.FAILED, outputs, on_error, failed["error_type"], failed["message"],
                failed["pos"], datetime.fromisoformat(failed["at"]), failed.get("unit"), failed.get("operator"),
                failed.get("path"))
        if uri not in self._subscriptions:
            problem = next((f.error for f in reversed([*self._recovery.failures, *self.faults]) if f.uri == uri), None)
            return SubscriptionStatus(uri, SubscriptionState.STOPPED, outputs, on_error,
                                      None if problem is None else type(problem).__name__,
                                      None if problem is None else str(problem))
        if self._scheduling.is_held(uri):
            state = SubscriptionState.PAUSED
        elif uri in self._scheduling.behind:
            state = SubscriptionState.CATCHING_UP
        elif uri in self._ended and self._ended[uri] is None:
            state = SubscriptionState.COMPLETED
        else:
            state = SubscriptionState.RUNNING
        return SubscriptionStatus(uri, state, outputs, on_error)

    def _on_error_of(self, uri: str, record: dict[str, Any]) -> OnError:
        """The error policy of subscription ``uri``: its own (stored with it) or the engine's default."""
        stored = record.get("on_error")
        if stored is None:
            return self._on_error
        if isinstance(stored, str):
            return stored
        decoded = decode_query({"op": "observer", "args": [stored["function"]]}, self.functions)
        function = decoded.args[0]
        if not callable(function):
            raise MalformedRecordError(f"the record of {uri!r}: its on_error function is not callable")
        return check_on_error(function, f"the on_error of {uri!r}")

    def _subscription_ended(self, uri: str, error: BaseException | None) -> None:
        self._ended[uri] = error
        if error is None or self._engine_status() is EngineStatus.RECOVERING:
            return  # completed; or it failed while it recovered, which recovery reports under its policy
        policy = self._policies.get(uri)
        failure = policy.last_failure if policy is not None else None
        if failure is not None and failure.error_type != type(error).__name__:
            failure = None  # not the user error the policy stopped on
        position = self._environment.start_position(uri)
        self.fault_later(uri, SubscriptionFailedError(uri, error, failure, position))

    def unit_failed(self, instance_id: str, error: Exception) -> None:
        """A query, or one of its inner units, raised out of its operators: stop the query after this event."""
        owner = instance_id if instance_id in self._records else self._records.subscription_nested_with(instance_id)
        self.fault_later(owner or instance_id, QueryFailedError(owner or instance_id, instance_id, error))

    def fault_later(self, uri: str, error: Exception) -> None:
        """Called from inside a query (its sink failed): stop it once the event at hand was delivered."""
        self.pending.append((uri, error))

    def apply_faults(self) -> None:
        # The list is emptied in place: the delivery loop holds it.
        pending = self.pending[:]
        self.pending.clear()
        for uri, error in pending:
            self.fault(uri, error)

    def fault(self, uri: str, error: Exception) -> None:
        """Stop subscription ``uri`` because the engine cannot keep running it without losing something (an
        unstorable output or state, an observer that keeps failing), under the failure policy: REMOVE deletes
        it; otherwise (FAIL and KEEP alike: at run time nothing can be refused) it is kept stored as of its last
        checkpoint, not running, with the input it needs and its undelivered outputs, and recovers from there
        at the next open. ``engine.faults`` lists it; the engine is DEGRADED."""
        if uri not in self._subscriptions:
            return  # already stopped (or deleted)
        if isinstance(error, SubscriptionFailedError):
            self._fail(uri, error)
            return
        policy = RecoveryPolicy.REMOVE if self._policy is RecoveryPolicy.REMOVE else RecoveryPolicy.KEEP
        if self._on_failure is not None:
            chosen = self._on_failure(uri, error)
            if chosen is RecoveryPolicy.REMOVE:
                policy = chosen
        self._log.error("subscription %r stopped (%s): %s", uri, policy.value, error, exc_info=error,
                        extra={"reaqtive_event": "fault", "subscription": uri, "policy": policy.value,
                               "error_type": type(error).__name__, "observer": getattr(error, "observer", None),
                               "seq": getattr(error, "seq", None)})
        self.faults.append(RecoveryFailure(uri, "subscription", error, policy))
        if policy is RecoveryPolicy.REMOVE:
            self._delete_subscription(uri)
        else:
            self._stop_as_of_last_checkpoint(uri)
        self._settle_status()

    def _stop_as_of_last_checkpoint(self, uri: str) -> None:
        """Stop running subscription ``uri`` and keep it stored as of its last checkpoint (its state, its position
        and clock: pinned), with the input it needs and its undelivered outputs."""
        waiting = self._outputs.stop(uri)
        if waiting:
            self._store.write_outputs(waiting)  # kept for the next run to deliver
        hosted = self._subscriptions.pop(uri)
        if hosted is not None:  # (an idle one has nothing running)
            hosted.abandon()
        self._policies.pop(uri, None)
        self._scheduling.forget(uri)
        self._stopped.keep(uri, self._pin_for(uri))

    def _fail(self, uri: str, error: SubscriptionFailedError) -> None:
        """Subscription ``uri`` stopped with an error of its query (its policy said stop): it is FAILED, visibly
        (its record says so, also after a restart, until restart_subscription), stopped as of its last checkpoint."""
        failure = error.failure
        detail = {"error_type": type(error.error).__name__, "message": error_text(error.error)[:1000],
                  "pos": error.position,
                  "at": datetime.now(UTC).isoformat()}
        if failure is not None:
            detail.update(unit=failure.unit, operator=failure.operator, path=failure.path,
                          traceback=failure.traceback)
        record = {**self._records[uri], "failed": detail}
        # The outputs it produced before it failed reach the durable sink first: a crash after the record's commit
        # must not lose them (a FAILED query is not replayed at the next open).
        self._outputs.flush()
        self._commit_changes([(ARTIFACTS, uri, to_bytes(record))])
        self._records[uri] = record
        self._log.error("%s", error, exc_info=error.error,
                        extra={"reaqtive_event": "subscription_failed", "subscription": uri,
                               "error_type": detail["error_type"], "pos": error.position,
                               "unit": detail.get("unit"), "operator": detail.get("operator"),
                               "path": detail.get("path")})
        self.faults.append(RecoveryFailure(uri, "subscription", error, RecoveryPolicy.KEEP))
        self._stopped.failed[uri] = error
        self._count_user_error(uri, error_name(error.error), "stop")
        self._stop_as_of_last_checkpoint(uri)
        self._settle_status()
        self._produced.fire()  # its consumers wake up and find it failed
