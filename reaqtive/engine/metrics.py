"""Metrics: what an engine is doing, read on demand, exported to Prometheus; and the fields of its log lines.

Two parts. :func:`read_engine` copies, under the engine's lock, what a monitor wants to know (status, per stream
how far appends and delivery got, per subscription its outputs, acknowledgements and observer backlog, dead
letters, faults, the last recovery) into an :class:`EngineReadings`; it needs nothing beyond the standard library.
:class:`PrometheusMetrics` (the ``prometheus`` extra: ``pip install 'reaqtive[prometheus]'``) is a Prometheus
collector over one or more engines: it calls :func:`read_engine` when it is scraped, so nothing runs on the
engine's hot path, and it listens to each checkpoint (:meth:`Engine.add_checkpoint_listener
<reaqtive.engine.Engine.add_checkpoint_listener>`) to fill histograms of their durations and sizes, which a scrape
every so often could not see.

Example::

    from prometheus_client import start_http_server
    from reaqtive.engine import Engine, PrometheusMetrics

    engine = Engine("service.db")
    PrometheusMetrics(engine)          # into prometheus_client's default registry, labelled store="service.db"
    start_http_server(9108)            # GET :9108/metrics

Why a collector object, not an ``engine.export_metrics()`` method: Prometheus wants each metric family once per
registry, so several engines in one process must share one collector (:meth:`PrometheusMetrics.watch` adds an
engine under its own ``store`` label), and the engine stays free of any monitoring library.

:data:`LOG_FIELDS` lists the ``extra=`` fields the engine puts on its log records (``reaqtive_event`` names the
line); a handler or a JSON formatter reads them as record attributes (``record.checkpoint_id``).
"""

from __future__ import annotations

import contextlib
import re
import threading
import weakref
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from reaqtive.engine.engine_errors import EngineError
from reaqtive.engine.model import (
    CheckpointMetrics,
    EngineReadings,
    EngineStatus,
    RecoveryPolicy,
    StreamReading,
    SubscriptionReading,
)

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from reaqtive.engine.engine import Engine

__all__ = [
    "LOG_FIELDS",
    "EngineReadings",
    "MetricsError",
    "MetricsUnavailableError",
    "PrometheusMetrics",
    "StreamReading",
    "SubscriptionReading",
    "read_engine",
]

LOG_FIELDS: Final[Mapping[str, str]] = MappingProxyType({
    "reaqtive_event": "what the line reports: checkpoint, recovery, recovery_failed, fault, "
                      "quarantine, events_missing, ingress_commit_failed, listener_failed, paused, resumed, "
                      "provisional_outputs_dropped, ingress_duplicate, subscription_failed, element_skipped, "
                      "subscription_restarted, general_path",
    "checkpoint_id": "checkpoint: the id of the committed checkpoint",
    "full": "checkpoint: whether it was a full checkpoint (else differential)",
    "pause_seconds": "checkpoint: how long processing was paused",
    "serialize_seconds": "checkpoint: time spent serializing state",
    "commit_seconds": "checkpoint: time spent committing to the store",
    "egress_seconds": "checkpoint: time spent writing the durable sink first",
    "bytes_written": "checkpoint: bytes of state written",
    "dirty_subscriptions": "checkpoint: units (subscriptions and inner units) whose state was written",
    "ingress_truncated": "checkpoint: events removed from the ingress log",
    "streams": "recovery: streams recovered",
    "definitions": "recovery: observable and observer definitions recovered",
    "subscriptions": "recovery: subscriptions recovered",
    "inner_subscriptions": "recovery: inner subscriptions recovered",
    "failures": "recovery: artifacts that failed to recover (kept or removed by the policy)",
    "orphans": "recovery: stored states of no artifact that the policy removed",
    "duration_seconds": "recovery: its total time",
    "artifact": "recovery_failed: the URI of the artifact (or stored state) that failed",
    "kind": "recovery_failed: its kind (stream, observable, observer, subscription, state, unknown)",
    "policy": "recovery_failed, fault: what was done (keep, remove; fail raises)",
    "subscription": "fault, subscription_failed, element_skipped, subscription_restarted, paused, resumed, "
                    "provisional_outputs_dropped, general_path: the subscription URI",
    "observer": "fault: the observer definition that kept failing (None for other faults)",
    "stream": "quarantine, events_missing, ingress_duplicate: the stream URI",
    "seq": "quarantine: the event's sequence number; events_missing: the first missing one; fault: the output "
           "it stopped on, when known (else None); provisional_outputs_dropped: the first output dropped; "
           "ingress_duplicate: the number the altered row claims",
    "pos": "ingress_duplicate: the log position of the row that claims an event delivered already; "
           "subscription_failed, element_skipped: the log position of the event the failing element came from",
    "unit": "subscription_failed, element_skipped: the unit the user function raised in (the subscription, or "
            "one of its inner units)",
    "operator": "subscription_failed, element_skipped: the persisted name of the operator whose function raised",
    "path": "subscription_failed, element_skipped: that operator's path in the unit's tree",
    "reason": "quarantine: why the event was not delivered; general_path: why a group_by ... flat_map of the "
              "subscription binds on the general path (a subscription per group), as explain() says it",
    "events": "events_missing: how many; ingress_commit_failed: how many wait for the next try",
    "outputs": "provisional_outputs_dropped: how many outputs the durable sink dropped at recovery",
    "retry_seconds": "ingress_commit_failed: when the commit is tried again",
    "error_type": "the class name of the error, on every error line",
    "listener": "listener_failed: the checkpoint listener that raised (its repr)",
})
"""The ``extra=`` fields of the engine's log records, and what each holds (see the module docstring)."""

_PROMETHEUS_MISSING: Final = (
    "PrometheusMetrics needs the prometheus_client package: pip install 'reaqtive[prometheus]'"
)
_NAME: Final = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_DURATION_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                            30.0)
_BYTE_BUCKETS: Final = tuple(float(1 << shift) for shift in range(10, 32, 2))  # 1 KiB .. 1 GiB, by 4
_COUNT_BUCKETS: Final = (1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, 10000.0, 100000.0)
_FAULT_POLICIES: Final = (RecoveryPolicy.KEEP, RecoveryPolicy.REMOVE)  # a running query is never refused (FAIL)


class MetricsError(EngineError, ValueError):
    """A metrics export that cannot be set up as asked (a clashing ``store`` label, a bad namespace)."""


class MetricsUnavailableError(EngineError, ImportError):
    """:class:`PrometheusMetrics` was asked for without the ``prometheus`` extra installed."""


def read_engine(engine: Engine) -> EngineReadings:
    """What a monitor wants to know from ``engine``: :meth:`Engine.snapshot <reaqtive.engine.Engine.snapshot>`
    (see :class:`EngineReadings`).

    Example: ``lag = read_engine(engine).streams["orders"].lag``
    """
    return engine.snapshot()


def _prometheus() -> Any:
    """The prometheus_client module, or the error that says how to install it."""
    try:
        import prometheus_client
    except ImportError as error:
        raise MetricsUnavailableError(_PROMETHEUS_MISSING) from error
    return prometheus_client


class _Watched:
    """One engine a collector reads: a weak reference (a collector never keeps an engine alive) and its
    checkpoint listener."""

    __slots__ = ("engine", "listener")

    def __init__(self, engine: Engine, listener: Any) -> None:
        self.engine: weakref.ref[Engine] = weakref.ref(engine)
        self.listener = listener


class PrometheusMetrics:
    """A Prometheus collector over engines (see the module docstring and ``docs/engine.md``, "Metrics and
    logging", for the metric names). ``engine``: the first engine to watch (or none: :meth:`watch` them);
    ``registry``: where to register (prometheus_client's default registry when ``None``); ``namespace``: the
    metric names' prefix; ``store``: the first engine's label (default: its store path); ``per_subscription``:
    whether to export the per-subscription series (one series per subscription: turn it off for engines with
    very many subscriptions).

    Example: ``metrics = PrometheusMetrics(orders, registry=registry); metrics.watch(billing, store="billing")``
    """

    def __init__(
        self,
        engine: Engine | None = None,
        *,
        registry: CollectorRegistry | None = None,
        namespace: str = "reaqtive",
        store: str | None = None,
        per_subscription: bool = True,
    ) -> None:
        prometheus = _prometheus()
        if not isinstance(namespace, str) or not _NAME.match(namespace):
            raise MetricsError(f"PrometheusMetrics: namespace must be a Prometheus name ([a-zA-Z_][a-zA-Z0-9_]*), "
                               f"got {namespace!r}")
        self._prometheus = prometheus
        self._namespace = namespace
        self._per_subscription = per_subscription
        self._watched: dict[str, _Watched] = {}
        self._lock = threading.Lock()  # watch/unwatch against a scrape's walk over the engines
        histogram, counter = prometheus.Histogram, prometheus.Counter
        labels = ("store",)

        def seconds(name: str, what: str) -> Any:
            return histogram(f"checkpoint_{name}_seconds", what, labels, namespace=namespace, registry=None,
                             buckets=_DURATION_BUCKETS)

        self._pause = seconds("pause", "How long each checkpoint paused processing.")
        self._serialize = seconds("serialize", "Time each checkpoint spent serializing state.")
        self._commit = seconds("commit", "Time each checkpoint spent committing to the store.")
        self._egress = seconds("egress", "Time each checkpoint spent writing the durable sink first.")
        self._bytes = histogram("checkpoint_written_bytes", "Bytes of state each checkpoint wrote.", labels,
                                namespace=namespace, registry=None, buckets=_BYTE_BUCKETS)
        self._dirty = histogram("checkpoint_dirty_subscriptions",
                                "Units (subscriptions and inner units) whose state each checkpoint wrote.", labels,
                                namespace=namespace, registry=None, buckets=_COUNT_BUCKETS)
        self._checkpoints = counter("checkpoints", "Checkpoints committed.", ("store", "mode"),
                                    namespace=namespace, registry=None)
        self._failures = counter("checkpoint_failures", "Checkpoints that failed (nothing was committed).", labels,
                                 namespace=namespace, registry=None)
        self._truncated = counter("ingress_truncated_events", "Events removed from the ingress log by checkpoints.",
                                  labels, namespace=namespace, registry=None)
        self._observed: tuple[Any, ...] = (self._pause, self._serialize, self._commit, self._egress, self._bytes,
                                           self._dirty, self._checkpoints, self._failures, self._truncated)
        self._registry: CollectorRegistry = prometheus.REGISTRY if registry is None else registry
        try:
            self._registry.register(self)
        except ValueError as error:  # prometheus_client's DuplicateTimeseries
            raise MetricsError(
                f"PrometheusMetrics: this registry already has metrics named {namespace}_* ({error}); watch "
                "several engines with one PrometheusMetrics (.watch(engine, store=...)), or use another namespace"
            ) from error
        if engine is not None:
            try:
                self.watch(engine, store=store)
            except BaseException:
                self._registry.unregister(self)
                raise

    # -- engines ---------------------------------------------------------------------------------------------------

    def watch(self, engine: Engine, *, store: str | None = None) -> PrometheusMetrics:
        """Export ``engine``'s metrics too, labelled ``store`` (default: its store path; two in-memory engines
        need labels of their own). Raises :class:`MetricsError` if the label is taken. Returns ``self``."""
        label = str(engine.path) if store is None else store
        if not isinstance(label, str) or not label:
            raise MetricsError(f"PrometheusMetrics.watch: store must be a non-empty label, got {store!r}")
        observe = self._observe

        def listener(metrics: CheckpointMetrics | None, error: BaseException | None) -> None:
            observe(label, metrics, error)

        with self._lock:
            self._prune()
            known = self._watched.get(label)
            if known is not None:
                same = known.engine() is engine
                raise MetricsError(
                    f"PrometheusMetrics.watch: {'this engine is' if same else 'another engine is'} already watched "
                    f"under store={label!r}" + ("" if same else "; pass store='...' to tell them apart")
                )
            self._watched[label] = _Watched(engine, listener)
        engine.add_checkpoint_listener(listener)
        return self

    def unwatch(self, engine: Engine) -> None:
        """Stop exporting ``engine``'s metrics (its series disappear, histograms included)."""
        with self._lock:
            labels = [label for label, watched in self._watched.items() if watched.engine() is engine]
            for label in labels:
                self._forget(label)

    def unregister(self) -> None:
        """Leave the registry and stop listening to every engine."""
        with self._lock:
            for label in list(self._watched):
                self._forget(label)
        self._registry.unregister(self)

    def _forget(self, label: str) -> None:
        watched = self._watched.pop(label)
        engine = watched.engine()
        if engine is not None:
            engine.remove_checkpoint_listener(watched.listener)
        for metric in self._observed:
            if metric is self._checkpoints:
                for mode in ("full", "differential"):
                    self._remove(metric, label, mode)
            else:
                self._remove(metric, label)

    @staticmethod
    def _remove(metric: Any, *labels: str) -> None:
        with contextlib.suppress(KeyError):  # that series was never created
            metric.remove(*labels)

    def _prune(self) -> None:
        """Forget the engines that were garbage-collected."""
        for label in [label for label, watched in self._watched.items() if watched.engine() is None]:
            self._forget(label)

    # -- the checkpoint listener -----------------------------------------------------------------------------------

    def _observe(self, label: str, metrics: CheckpointMetrics | None, error: BaseException | None) -> None:
        if metrics is None:
            self._failures.labels(label).inc()
            return
        self._pause.labels(label).observe(metrics.pause_seconds)
        self._serialize.labels(label).observe(metrics.serialize_seconds)
        self._commit.labels(label).observe(metrics.commit_seconds)
        self._egress.labels(label).observe(metrics.egress_seconds)
        self._bytes.labels(label).observe(metrics.bytes_written)
        self._dirty.labels(label).observe(metrics.dirty_subscriptions)
        self._checkpoints.labels(label, "full" if metrics.full else "differential").inc()
        self._truncated.labels(label).inc(metrics.ingress_truncated)

    # -- the collector -----------------------------------------------------------------------------------------------

    def describe(self) -> list[Any]:
        """Every metric family, without samples (the registry checks names against other collectors with it)."""
        families = list(self._families().values())
        for metric in self._observed:
            families.extend(metric.describe())
        return families

    def collect(self) -> Iterator[Any]:
        """Read every watched engine (:func:`read_engine`) and yield the metric families (called by a scrape,
        from the scraping thread)."""
        with self._lock:
            self._prune()
            engines = [(label, watched.engine()) for label, watched in sorted(self._watched.items())]
        families = self._families()
        for label, engine in engines:
            if engine is not None:
                self._fill(families, label, read_engine(engine))
        yield from families.values()
        for metric in self._observed:
            yield from metric.collect()

    def _families(self) -> dict[str, Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        gauge, counter = GaugeMetricFamily, CounterMetricFamily
        prefix = self._namespace + "_"
        specs: list[tuple[Any, str, str, tuple[str, ...]]] = [
            (gauge, "engine_status", "The engine's status: 1 for the current one, 0 for the others.", ("status",)),
            (gauge, "last_checkpoint_timestamp_seconds", "When the last checkpoint committed (Unix time).", ()),
            (counter, "stream_appended_events", "Events appended to the stream (its next sequence number).",
             ("stream",)),
            (counter, "stream_delivered_events", "Events of the stream delivered to the queries.", ("stream",)),
            (gauge, "stream_lag_events", "Events appended to the stream and not delivered yet.", ("stream",)),
            (gauge, "stream_retained_events", "Events in the stream's ingress log as of the last checkpoint (what its "
                                              "readers need and what its retention keeps).", ("stream",)),
            (gauge, "stream_retained_bytes", "Stored bytes (payload and times) of those events.", ("stream",)),
            (gauge, "dead_letter_events", "Events of the stream taken out of delivery (quarantined or missing).",
             ("stream",)),
            (gauge, "dead_letter_elements",
             "Elements the subscription skipped because a user function raised on them, kept as dead letters.",
             ("subscription",)),
            (gauge, "subscriptions", "Subscriptions running; FAILED (a user error stopped them); artifacts kept in "
                                     "the store without running (a fault, a recovery failure).", ("state",)),
            (gauge, "failed_subscription", "1 for each FAILED subscription (a user error stopped it; "
                                           "restart_subscription runs it again), with the error's type.",
             ("subscription", "error_type")),
            (counter, "subscription_user_errors", "User functions that raised in the subscription's query since the "
                                                  "engine opened, by error type and what was done (skip, stop).",
             ("subscription", "error_type", "action")),
            (gauge, "egress_buffered_outputs", "Outputs for the durable sink not written to the store yet.", ()),
            (counter, "faults", "Subscriptions stopped while running, by what was done with them.", ("policy",)),
            (gauge, "recovery_phase_seconds", "The last recovery's time per phase.", ("phase",)),
            (gauge, "recovered_artifacts", "What the last recovery brought back, by kind.", ("kind",)),
            (gauge, "recovery_failures", "Artifacts that failed the last recovery, by kind and policy.",
             ("kind", "policy")),
            (gauge, "recovery_removed_orphans", "Stored states of no artifact the last recovery removed.", ()),
        ]
        if self._per_subscription:
            specs += [
                (counter, "subscription_outputs", "Outputs the subscription produced.", ("subscription",)),
                (counter, "subscription_acknowledged_outputs",
                 "Outputs of the subscription its consumers acknowledged (durable sink only).", ("subscription",)),
                (gauge, "subscription_unacknowledged_outputs",
                 "Outputs of the subscription not acknowledged yet (durable sink only).", ("subscription",)),
                (gauge, "observer_pending_outputs", "Outputs waiting for the subscription's observer function.",
                 ("subscription",)),
                (gauge, "observer_failed_attempts",
                 "Failed attempts in a row of the subscription's observer function.", ("subscription",)),
            ]
        return {name: kind(prefix + name, doc, labels=("store", *labels)) for kind, name, doc, labels in specs}

    @staticmethod
    def _fill(families: Mapping[str, Any], label: str, readings: EngineReadings) -> None:
        def add(name: str, value: float, *labels: str) -> None:
            families[name].add_metric((label, *labels), value)

        for status in EngineStatus:
            add("engine_status", 1.0 if status is readings.status else 0.0, status.value)
        if readings.last_checkpoint is not None:
            add("last_checkpoint_timestamp_seconds", readings.last_checkpoint.at.timestamp())
        for uri, stream in readings.streams.items():
            add("stream_appended_events", stream.appended, uri)
            add("stream_delivered_events", stream.delivered, uri)
            add("stream_lag_events", stream.lag, uri)
            add("stream_retained_events", stream.retained_events, uri)
            add("stream_retained_bytes", stream.retained_bytes, uri)
            add("dead_letter_events", stream.dead_letters, uri)
        for uri, count in sorted(readings.failed_elements.items()):
            add("dead_letter_elements", count, uri)
        add("subscriptions", len(readings.subscriptions), "running")
        add("subscriptions", len(readings.failed), "failed")
        add("subscriptions", readings.kept_subscriptions, "kept")
        for uri, error_type in sorted(readings.failed.items()):
            add("failed_subscription", 1.0, uri, error_type)
        for (uri, error_type, action), count in sorted(readings.user_errors.items()):
            add("subscription_user_errors", count, uri, error_type, action)
        add("egress_buffered_outputs", readings.egress_buffered)
        for fault_policy, count in readings.faults.items():
            add("faults", count, fault_policy.value)
        recovery = readings.recovery
        for phase, seconds in recovery.phases.items():
            add("recovery_phase_seconds", seconds, phase)
        for kind, count in (("streams", recovery.streams), ("definitions", recovery.definitions),
                            ("subscriptions", recovery.subscriptions),
                            ("inner_subscriptions", recovery.inner_subscriptions)):
            add("recovered_artifacts", count, kind)
        failures: dict[tuple[str, str], int] = {}
        for failure in recovery.failures:
            key = (failure.kind, failure.policy.value)
            failures[key] = failures.get(key, 0) + 1
        for (kind, policy), count in sorted(failures.items()):
            add("recovery_failures", count, kind, policy)
        add("recovery_removed_orphans", len(recovery.orphans))
        if "subscription_outputs" not in families:
            return
        for uri, subscription in readings.subscriptions.items():
            add("subscription_outputs", subscription.produced, uri)
            if subscription.acknowledged is not None:
                add("subscription_acknowledged_outputs", subscription.acknowledged, uri)
                add("subscription_unacknowledged_outputs", subscription.produced - subscription.acknowledged, uri)
            if subscription.pending is not None:
                add("observer_pending_outputs", subscription.pending, uri)
            if subscription.failed_attempts is not None:
                add("observer_failed_attempts", subscription.failed_attempts, uri)
