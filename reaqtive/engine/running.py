"""Running queries: binding a stored query to its stages, and stopping a query that fails while it runs (faults) under
the recovery policy.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from reaqtive.context import OperatorContext
from reaqtive.engine._room import EngineRoom
from reaqtive.engine.behind import Lag
from reaqtive.engine.database import from_micros
from reaqtive.engine.egress import Output
from reaqtive.engine.engine_errors import (
    QueryFailedError,
    UnstorableOutputError,
)
from reaqtive.engine.expressions import (
    decode_query,
    instantiate,
)
from reaqtive.engine.model import (
    RecoveryFailure,
    RecoveryPolicy,
)
from reaqtive.engine.readers import CAUGHT_UP_SETTING, LEGACY_CAUGHT_UP_SETTING, START_POSITION_SETTING
from reaqtive.engine.records import Behind
from reaqtive.engine.scheduling import record_priority
from reaqtive.operators.keyed_groups import keyed_execution
from reaqtive.query import Query
from reaqtive.scheduler import UnhandledExceptionArgs
from reaqtive.state.host import HostedQuery, QueryState
from reaqtive.streams import LONG_MAX, Subscription


class _Observer:
    """The end of a subscription: takes everything, hands outputs to the engine's sink for its observer. An
    output the sink cannot keep (a value the store cannot encode) stops this subscription alone: the engine
    faults it once the event at hand was delivered to the others."""

    __slots__ = ("_engine", "_failed", "_sink", "_subscription", "_uri")

    def __init__(self, engine: Running, uri: str, sink: Callable[[Output], object] | None) -> None:
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


class Running(EngineRoom):
    """See the module docstring."""

    def _bind(self, uri: str, record: dict[str, Any], template: dict[str, Any], blob: bytes | None) -> HostedQuery:
        """Bind subscription ``uri`` (its query, then the egress stamp and its observer) on the engine's query
        host, load ``blob`` if given (its inner units' blobs were handed to the environment before), start it."""
        expression = instantiate(template, record["constants"])
        query = self._expand(decode_query(expression, self.functions))
        with keyed_execution(record.get("keyed", False)):
            return self._bind_in_form(uri, record, query, blob)

    def _bind_in_form(self, uri: str, record: dict[str, Any], query: Query[Any], blob: bytes | None) -> HostedQuery:
        observer = _Observer(self, uri, self._sink_for(uri, record["observer"]))
        # Its own scheduler, a child of the engine's root: paused, prioritized and faulted alone.
        scheduler = self._scheduler.create_child(uri, priority=record_priority(uri, record))
        stood = (self._stood_behind.get(uri) or self._pins.get(uri)) if blob is not None else None
        if stood is not None:
            # It stood behind the engine at the checkpoint its state belongs to (or it was kept without running
            # since): it goes on from there, on a timeline of its own at its own clock (its timers are set
            # against it), and catches up.
            scheduler.detach(None if stood.clock is None else scheduler.to_ticks(from_micros(stood.clock)))
        hosted = self._host.bind(uri, Query("egress", (query, uri)), observer, scheduler=scheduler)
        if stood is not None:
            self._behind[uri] = Lag(uri, scheduler, stood.pos)  # before it starts: its readers are held off
        settings = self._position_settings(uri, record, stood)
        # Bounds for the times its operators saved (deadlines): after it started, and no later than the last clock
        # its state can have been saved at (this checkpoint's, or its creation if later).
        started = from_micros(record["clock"]) if blob is not None and "clock" in record else None
        try:
            hosted.start(None if blob is None else QueryState(blob), settings=settings, started_at=started,
                         where=f"state of {uri!r}")
        except BaseException:
            self._behind.pop(uri, None)
            raise
        return hosted

    def _position_settings(self, uri: str, record: dict[str, Any], stood: Behind | None) -> dict[str, object]:
        """Where the readers of subscription ``uri`` start (its record's start) and what "caught up" in its
        saved state means: where it stood behind the engine, or the position of the checkpoint its state belongs
        to (for state saved before log positions, the same in sequence numbers per stream)."""
        caught_up = stood.pos if stood is not None else self._committed.pos
        settings: dict[str, object] = {START_POSITION_SETTING: record.get("start_pos", -1),
                                       CAUGHT_UP_SETTING: caught_up}
        legacy = stood.legacy if stood is not None and stood.legacy is not None else self._legacy_caught_up
        if legacy:  # the store was checkpointed before log positions: its states may be of reader version 1
            starts = record.get("start", {})
            settings[LEGACY_CAUGHT_UP_SETTING] = MappingProxyType(
                {stream: max(legacy.get(stream, -1), starts.get(stream, -1)) for stream in {*legacy, *starts}})
        return settings

    def _task_failed(self, args: UnhandledExceptionArgs) -> None:
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
            hosted = self._subscriptions.get(name) if isinstance(name, str) else None
            if hosted is None or hosted.scheduler is not args.scheduler:
                return  # not a query's task: it propagates
            unit = hosted.instance_id
        args.handled = True
        self._unit_failed(unit, args.exception)

    def _subscription_ended(self, uri: str, error: BaseException | None) -> None:
        self._ended[uri] = error
        if error is not None:
            self._log.error("subscription %r ended with an error: %s", uri, error, exc_info=error,
                            extra={"reaqtive_event": "subscription_error", "subscription": uri,
                                   "error_type": type(error).__name__})

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
        self._log.error("subscription %r stopped (%s): %s", uri, policy.value, error, exc_info=error,
                        extra={"reaqtive_event": "fault", "subscription": uri, "policy": policy.value,
                               "error_type": type(error).__name__, "observer": getattr(error, "observer", None),
                               "seq": getattr(error, "seq", None)})
        self.faults.append(RecoveryFailure(uri, "subscription", error, policy))
        if policy is RecoveryPolicy.REMOVE:
            self.delete_subscription(uri)
        else:
            outbox = self._outboxes.get(uri)
            if outbox is not None and outbox.pending:
                self._store.write_outputs(list(outbox.pending))  # kept for the next open to deliver
            self._subscriptions.pop(uri).abandon()
            self._paused.discard(uri)
            self._behind.pop(uri, None)
            # Its outputs so far stay on their way to the durable sink: the replay after the next open produces
            # them again with the same ids, and the sink keeps one copy.
            self._counters.pop(uri, None)
            self._outboxes.pop(uri, None)
            self._broken.add(uri)
            self._pins.setdefault(uri, self._pin_for(uri))
        self._settle_status()
