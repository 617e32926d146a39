"""Prometheus metrics: each scrape's values equal what the engine did (appends, deliveries, checkpoints, observer
backlogs, faults, recovery failures), scrapes from another thread do not disturb processing, several engines share
one registry under their own labels, and a failing listener never breaks a checkpoint."""

from __future__ import annotations

import gc
import itertools
import logging
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.request import urlopen

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from reaqtive import Query
from reaqtive.engine import (
    CheckpointMetrics,
    Engine,
    FunctionRegistry,
    MetricsError,
    MetricsUnavailableError,
    Output,
    PrometheusMetrics,
    RecoveryPolicy,
    read_engine,
)
from reaqtive.state import StoreError
from reaqtive.state.sqlite_store import row_checksum

T0 = datetime(2026, 1, 1, tzinfo=UTC)
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def at(i: int) -> datetime:
    return T0 + timedelta(seconds=i)


def add(total: int, value: int) -> int:
    return total + value


_refusals: dict[str, int] = {}  # per test run of refuse_twice: how many times it still refuses


def always_refuse(output: Output) -> None:
    raise ConnectionError(f"the consumer is down (output #{output.seq})")


def refuse_twice(output: Output) -> None:
    left = _refusals.get("left", 0)
    if left:
        _refusals["left"] = left - 1
        raise ConnectionError("the consumer is down for a moment")


def functions() -> FunctionRegistry:
    registry = FunctionRegistry()
    for function in (add, always_refuse, refuse_twice):
        registry.register(function.__name__, function)
    return registry


def scrape(registry: CollectorRegistry) -> Samples:
    """Every sample of a scrape, parsed back from the text format (as Prometheus would read it)."""
    text = generate_latest(registry).decode("utf-8")
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def series(samples: Samples, name: str) -> list[dict[str, str]]:
    return [dict(labels) for (sample, labels) in samples if sample == name]


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def engine() -> Iterator[Engine]:
    with Engine.in_memory(start=T0, functions=functions()) as opened:
        yield opened


def totals(engine: Engine, uri: str = "q", observer: str | None = None) -> None:
    engine.create_stream("s")
    query = Query.stream("s").scan(0, add)
    if observer is None:
        engine.create_subscription(uri, query)
    else:
        engine.create_subscription(uri, query, observer)


# -- streams ---------------------------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(appended=st.integers(0, 40), data=st.data())
def test_stream_lag_is_what_was_appended_less_what_was_delivered(appended: int, data: st.DataObject) -> None:
    delivered = data.draw(st.integers(0, appended), label="delivered")
    registry = CollectorRegistry()
    with Engine.in_memory(start=T0, functions=functions()) as engine:
        PrometheusMetrics(engine, registry=registry, store="e")
        totals(engine)
        engine.append_many("s", [(i, at(i)) for i in range(appended)])
        engine.process(max_events=delivered)
        samples = scrape(registry)
    assert value(samples, "reaqtive_stream_appended_events_total", store="e", stream="s") == appended
    assert value(samples, "reaqtive_stream_delivered_events_total", store="e", stream="s") == delivered
    assert value(samples, "reaqtive_stream_lag_events", store="e", stream="s") == appended - delivered
    assert value(samples, "reaqtive_subscription_outputs_total", store="e", subscription="q") == delivered


def test_dead_letters_are_counted_and_are_no_backlog(engine: Engine, registry: CollectorRegistry) -> None:
    """An event dated a century ahead is numbered and kept as a dead letter, never delivered: it must not show
    as lag forever."""
    PrometheusMetrics(engine, registry=registry, store="e")
    totals(engine)
    engine.append_many("s", [(1, at(1)), (2, at(2))])
    engine.append("s", 3, datetime(2126, 1, 1, tzinfo=UTC))
    engine.process()
    samples = scrape(registry)
    assert value(samples, "reaqtive_dead_letter_events", store="e", stream="s") == 1
    assert value(samples, "reaqtive_stream_appended_events_total", store="e", stream="s") == 3
    assert value(samples, "reaqtive_stream_lag_events", store="e", stream="s") == 0


# -- checkpoints -------------------------------------------------------------------------------------------------------


def test_checkpoint_histograms_hold_exactly_the_checkpoints_figures(
    engine: Engine, registry: CollectorRegistry
) -> None:
    PrometheusMetrics(engine, registry=registry, store="e")
    totals(engine)
    taken: list[CheckpointMetrics] = []
    for round_ in range(3):
        engine.append_many("s", [(i, at(round_ * 10 + i)) for i in range(5)])
        engine.process()
        taken.append(engine.checkpoint(full=round_ == 1))
    samples = scrape(registry)
    for name, figure in (("pause", "pause_seconds"), ("serialize", "serialize_seconds"),
                         ("commit", "commit_seconds"), ("egress", "egress_seconds")):
        assert value(samples, f"reaqtive_checkpoint_{name}_seconds_count", store="e") == 3
        assert value(samples, f"reaqtive_checkpoint_{name}_seconds_sum", store="e") == pytest.approx(
            sum(getattr(metrics, figure) for metrics in taken), rel=1e-9, abs=1e-12)
    assert value(samples, "reaqtive_checkpoint_written_bytes_sum", store="e") == sum(m.bytes_written for m in taken)
    assert value(samples, "reaqtive_checkpoint_dirty_subscriptions_sum", store="e") == sum(
        m.dirty_subscriptions for m in taken)
    assert value(samples, "reaqtive_checkpoints_total", store="e", mode="full") == 1
    assert value(samples, "reaqtive_checkpoints_total", store="e", mode="differential") == 2
    assert value(samples, "reaqtive_ingress_truncated_events_total", store="e") == sum(
        m.ingress_truncated for m in taken)
    assert value(samples, "reaqtive_last_checkpoint_timestamp_seconds", store="e") == pytest.approx(
        taken[-1].at.timestamp())


def test_a_failed_checkpoint_is_counted_and_observes_no_duration(
    engine: Engine, registry: CollectorRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    PrometheusMetrics(engine, registry=registry, store="e")
    totals(engine)
    engine.append("s", 1, at(1))
    engine.process()

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise StoreError("injected: the disk is full")

    with monkeypatch.context() as patch:
        patch.setattr(engine._checkpointer, "checkpoint", refuse)
        with pytest.raises(StoreError, match="disk is full"):
            engine.checkpoint()
    samples = scrape(registry)
    assert value(samples, "reaqtive_checkpoint_failures_total", store="e") == 1
    assert value(samples, "reaqtive_checkpoint_pause_seconds_count", store="e") is None, "no observation made"
    engine.checkpoint()
    samples = scrape(registry)
    assert value(samples, "reaqtive_checkpoint_pause_seconds_count", store="e") == 1
    assert value(samples, "reaqtive_checkpoint_failures_total", store="e") == 1


def test_a_listener_that_raises_is_logged_and_the_checkpoint_and_other_listeners_go_on(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    heard: list[tuple[CheckpointMetrics | None, BaseException | None]] = []

    def broken(metrics: CheckpointMetrics | None, error: BaseException | None) -> None:
        raise RuntimeError("a bug in a monitor")

    engine.add_checkpoint_listener(broken)
    engine.add_checkpoint_listener(lambda metrics, error: heard.append((metrics, error)))
    totals(engine)
    with caplog.at_level(logging.ERROR, logger="reaqtive.engine"):
        metrics = engine.checkpoint()
    assert heard == [(metrics, None)]
    assert engine.last_checkpoint is metrics
    failures = [r for r in caplog.records if getattr(r, "reaqtive_event", None) == "listener_failed"]
    assert len(failures) == 1 and failures[0].error_type == "RuntimeError"  # type: ignore[attr-defined]
    engine.remove_checkpoint_listener(broken)
    caplog.clear()
    engine.checkpoint()
    assert not [r for r in caplog.records if getattr(r, "reaqtive_event", None) == "listener_failed"]
    assert len(heard) == 2


# -- outputs and observers ------------------------------------------------------------------------------------------


def test_acknowledged_and_unacknowledged_outputs_follow_ack(engine: Engine, registry: CollectorRegistry) -> None:
    PrometheusMetrics(engine, registry=registry, store="e")
    totals(engine)
    engine.append_many("s", [(i, at(i)) for i in range(6)])
    engine.process()
    engine.ack("q", 3)
    samples = scrape(registry)
    assert value(samples, "reaqtive_subscription_outputs_total", store="e", subscription="q") == 6
    assert value(samples, "reaqtive_subscription_acknowledged_outputs_total", store="e", subscription="q") == 4
    assert value(samples, "reaqtive_subscription_unacknowledged_outputs", store="e", subscription="q") == 2
    assert series(samples, "reaqtive_observer_pending_outputs") == [], "no observer function"


def test_a_failing_observer_shows_its_backlog_then_its_fault(registry: CollectorRegistry) -> None:
    with Engine.in_memory(start=T0, functions=functions(), observer_retries=3, observer_backoff=0) as engine:
        PrometheusMetrics(engine, registry=registry, store="e")
        engine.define_observer("down", always_refuse)
        totals(engine, observer="down")
        engine.append_many("s", [(i, at(i)) for i in range(4)])
        engine.process()  # attempt 1
        samples = scrape(registry)
        assert value(samples, "reaqtive_observer_pending_outputs", store="e", subscription="q") == 4
        assert value(samples, "reaqtive_observer_failed_attempts", store="e", subscription="q") == 1
        assert series(samples, "reaqtive_subscription_acknowledged_outputs_total") == [], "not the durable sink"
        engine.process()  # attempt 2
        assert value(scrape(registry), "reaqtive_observer_failed_attempts", store="e", subscription="q") == 2
        engine.process()  # attempt 3: the outbox gives up, the subscription stops (kept)
        samples = scrape(registry)
    assert value(samples, "reaqtive_faults_total", store="e", policy="keep") == 1
    assert value(samples, "reaqtive_faults_total", store="e", policy="remove") == 0
    assert value(samples, "reaqtive_subscriptions", store="e", state="running") == 0
    assert value(samples, "reaqtive_subscriptions", store="e", state="kept") == 1
    assert value(samples, "reaqtive_engine_status", store="e", status="degraded") == 1
    assert value(samples, "reaqtive_engine_status", store="e", status="running") == 0
    assert series(samples, "reaqtive_observer_pending_outputs") == [], "a stopped subscription has no outbox"


def test_a_fault_under_remove_is_counted_and_leaves_nothing_kept(registry: CollectorRegistry) -> None:
    with Engine.in_memory(start=T0, functions=functions(), observer_retries=1, observer_backoff=0,
                          recovery_policy=RecoveryPolicy.REMOVE) as engine:
        PrometheusMetrics(engine, registry=registry, store="e")
        engine.define_observer("down", always_refuse)
        totals(engine, observer="down")
        engine.append("s", 1, at(1))
        engine.process()
        samples = scrape(registry)
    assert value(samples, "reaqtive_faults_total", store="e", policy="remove") == 1
    assert value(samples, "reaqtive_subscriptions", store="e", state="kept") == 0
    assert value(samples, "reaqtive_engine_status", store="e", status="running") == 1


def test_an_observers_backlog_is_counted_again_after_a_restart(tmp_path: Path) -> None:
    """Outputs a checkpoint stored undelivered come back with the engine, and so does their count."""
    path = tmp_path / "s.db"
    options: dict[str, Any] = {"functions": functions(), "observer_retries": 100, "observer_backoff": 0}
    with Engine(path, start=T0, **options) as engine:
        engine.define_observer("down", always_refuse)
        totals(engine, observer="down")
        engine.append_many("s", [(i, at(i)) for i in range(4)])
        engine.process()
        engine.checkpoint()
        engine.append("s", 4, at(4))  # after the checkpoint: produced again by the replay
    registry = CollectorRegistry()
    with Engine(path, **options) as engine:
        PrometheusMetrics(engine, registry=registry, store="e")
        samples = scrape(registry)
        assert value(samples, "reaqtive_observer_pending_outputs", store="e", subscription="q") == 4
        assert value(samples, "reaqtive_stream_lag_events", store="e", stream="s") == 1
        engine.process()
        samples = scrape(registry)
    assert value(samples, "reaqtive_observer_pending_outputs", store="e", subscription="q") == 5
    assert value(samples, "reaqtive_observer_failed_attempts", store="e", subscription="q") == 1
    assert value(samples, "reaqtive_subscription_outputs_total", store="e", subscription="q") == 5


def test_an_observer_that_recovers_empties_its_backlog(registry: CollectorRegistry) -> None:
    _refusals["left"] = 2
    with Engine.in_memory(start=T0, functions=functions(), observer_retries=5, observer_backoff=0) as engine:
        PrometheusMetrics(engine, registry=registry, store="e")
        engine.define_observer("flaky", refuse_twice)
        totals(engine, observer="flaky")
        engine.append_many("s", [(i, at(i)) for i in range(3)])
        engine.process()
        engine.process()
        assert value(scrape(registry), "reaqtive_observer_pending_outputs", store="e", subscription="q") == 3
        engine.process()
        samples = scrape(registry)
    assert value(samples, "reaqtive_observer_pending_outputs", store="e", subscription="q") == 0
    assert value(samples, "reaqtive_observer_failed_attempts", store="e", subscription="q") == 0
    assert value(samples, "reaqtive_faults_total", store="e", policy="keep") == 0


# -- recovery ----------------------------------------------------------------------------------------------------------


def put_state(path: Path, key: str, blob: bytes) -> None:
    """Overwrite a state row behind a valid checksum (damage the checksum cannot see)."""
    with sqlite3.connect(path) as db:
        db.execute("INSERT OR REPLACE INTO reaqtive_blobs (category, key, value, crc) VALUES (?, ?, ?, ?)",
                   ("state", key, blob, row_checksum("state", key, blob)))


def test_a_recovery_with_a_broken_artifact_is_counted(tmp_path: Path, registry: CollectorRegistry) -> None:
    path = tmp_path / "s.db"
    with Engine(path, start=T0, functions=functions()) as engine:
        totals(engine, "q")
        engine.create_subscription("healthy", Query.stream("s").scan(0, add))
        engine.append_many("s", [(i, at(i)) for i in range(3)])
        engine.process()
        engine.checkpoint()
    put_state(path, "q", b"RQ\x01 not a state blob")
    with Engine(path, functions=functions(), recovery_policy=RecoveryPolicy.KEEP) as engine:
        PrometheusMetrics(engine, registry=registry)
        samples = scrape(registry)
        phases = dict(engine.recovery.phases)
    store = str(path)
    assert value(samples, "reaqtive_recovery_failures", store=store, kind="subscription", policy="keep") == 1
    assert value(samples, "reaqtive_recovered_artifacts", store=store, kind="subscriptions") == 1
    assert value(samples, "reaqtive_recovered_artifacts", store=store, kind="streams") == 1
    assert value(samples, "reaqtive_subscriptions", store=store, state="kept") == 1
    assert value(samples, "reaqtive_engine_status", store=store, status="degraded") == 1
    assert {labels["phase"]: value(samples, "reaqtive_recovery_phase_seconds", **labels)
            for labels in series(samples, "reaqtive_recovery_phase_seconds")} == phases
    assert value(samples, "reaqtive_stream_delivered_events_total", store=store, stream="s") == 3


# -- threads, several engines, lifetime --------------------------------------------------------------------------------


def test_scraping_from_another_thread_while_producing_and_processing_breaks_nothing(
    engine: Engine, registry: CollectorRegistry
) -> None:
    """Three threads: a producer appends, the main thread processes and checkpoints, a scraper scrapes without
    pause. Every scrape parses and is consistent; the outputs are those of a quiet run."""
    PrometheusMetrics(engine, registry=registry, store="e")
    totals(engine)
    stop = threading.Event()
    scraped: list[Samples] = []
    errors: list[BaseException] = []
    rounds, size = 20, 100

    def scraper() -> None:
        try:
            while not stop.is_set():
                scraped.append(scrape(registry))
        except BaseException as error:
            errors.append(error)

    def producer() -> None:
        try:
            for round_ in range(rounds):
                engine.append_many("s", [(i, at(round_ * size + i)) for i in range(size)])
        except BaseException as error:
            errors.append(error)

    scraping = threading.Thread(target=scraper, daemon=True)
    scraping.start()
    deadline = time.monotonic() + 30
    while not scraped and time.monotonic() < deadline:
        time.sleep(0.001)  # the scraper runs before the work starts
    producing = threading.Thread(target=producer, daemon=True)
    producing.start()
    passes = 0
    while (producing.is_alive() or engine.process() or passes == 0) and time.monotonic() < deadline:
        engine.process()
        passes += 1
        if passes % 5 == 0:
            engine.checkpoint()
    producing.join(10)
    seen = len(scraped)
    while len(scraped) == seen and time.monotonic() < deadline:
        time.sleep(0.001)  # one more scrape after the work ended
    stop.set()
    scraping.join(10)
    assert not errors, errors
    assert len(scraped) > seen > 0
    for samples in scraped:
        appended = value(samples, "reaqtive_stream_appended_events_total", store="e", stream="s") or 0
        delivered = value(samples, "reaqtive_stream_delivered_events_total", store="e", stream="s") or 0
        lag = value(samples, "reaqtive_stream_lag_events", store="e", stream="s") or 0
        assert 0 <= lag <= appended <= rounds * size and delivered <= rounds * size
    last = scraped[-1]
    assert value(last, "reaqtive_stream_delivered_events_total", store="e", stream="s") == rounds * size
    assert value(last, "reaqtive_stream_lag_events", store="e", stream="s") == 0
    # (no checkpoint yet: the histogram has no sample at all)
    assert (value(last, "reaqtive_checkpoint_pause_seconds_count", store="e") or 0) == passes // 5
    assert [o.value for o in engine.outputs("q")] == list(itertools.accumulate(
        i for _ in range(rounds) for i in range(size)))


def test_two_engines_in_one_registry_keep_their_own_series(registry: CollectorRegistry) -> None:
    with Engine.in_memory(start=T0, functions=functions()) as first, \
            Engine.in_memory(start=T0, functions=functions()) as second:
        metrics = PrometheusMetrics(first, registry=registry, store="orders")
        with pytest.raises(MetricsError, match="store="):
            metrics.watch(second, store="orders")
        metrics.watch(second, store="billing")
        for engine, count in ((first, 2), (second, 5)):
            totals(engine)
            engine.append_many("s", [(i, at(i)) for i in range(count)])
            engine.process()
        second.checkpoint()
        samples = scrape(registry)
    assert value(samples, "reaqtive_stream_delivered_events_total", store="orders", stream="s") == 2
    assert value(samples, "reaqtive_stream_delivered_events_total", store="billing", stream="s") == 5
    assert value(samples, "reaqtive_checkpoint_pause_seconds_count", store="billing") == 1
    assert value(samples, "reaqtive_checkpoint_pause_seconds_count", store="orders") is None


def test_two_in_memory_engines_without_labels_are_refused(registry: CollectorRegistry) -> None:
    with Engine.in_memory(start=T0) as first, Engine.in_memory(start=T0) as second:
        metrics = PrometheusMetrics(first, registry=registry)
        with pytest.raises(MetricsError, match=r"another engine .* pass store='\.\.\.'"):
            metrics.watch(second)
        with pytest.raises(MetricsError, match="this engine is already watched"):
            metrics.watch(first)


def test_a_second_collector_of_the_same_names_in_one_registry_is_refused(registry: CollectorRegistry) -> None:
    with Engine.in_memory(start=T0) as first, Engine.in_memory(start=T0) as second:
        PrometheusMetrics(first, registry=registry, store="a")
        with pytest.raises(MetricsError, match=r"already has metrics named reaqtive_\*"):
            PrometheusMetrics(second, registry=registry, store="b")
        PrometheusMetrics(second, registry=registry, store="b", namespace="other")
        samples = scrape(registry)
    assert value(samples, "other_engine_status", store="b", status="running") == 1
    assert value(samples, "reaqtive_engine_status", store="a", status="running") == 1
    assert series(samples, "reaqtive_engine_status") == [
        {"store": "a", "status": status} for status in
        ("recovering", "running", "checkpointing", "degraded", "closed")]


@pytest.mark.parametrize("namespace", ["", "1abc", "has space", "dash-ed"])
def test_a_namespace_that_is_no_prometheus_name_is_refused(namespace: str, registry: CollectorRegistry) -> None:
    with pytest.raises(MetricsError, match="namespace"):
        PrometheusMetrics(registry=registry, namespace=namespace)


def test_unwatch_and_a_collected_engine_drop_their_series(registry: CollectorRegistry) -> None:
    metrics = PrometheusMetrics(registry=registry)
    kept = Engine.in_memory(start=T0)
    dropped = Engine.in_memory(start=T0)
    try:
        metrics.watch(kept, store="kept").watch(dropped, store="dropped")
        kept.checkpoint()
        metrics.unwatch(kept)
        assert {labels["store"] for labels in series(scrape(registry), "reaqtive_engine_status")} == {"dropped"}
        assert value(scrape(registry), "reaqtive_checkpoint_pause_seconds_count", store="kept") is None
        kept.checkpoint()  # its listener is gone: nothing observed
        assert value(scrape(registry), "reaqtive_checkpoint_pause_seconds_count", store="kept") is None
        dropped.close()
        del dropped
        gc.collect()
        assert series(scrape(registry), "reaqtive_engine_status") == [], "a collector keeps no engine alive"
    finally:
        kept.close()
    metrics.unregister()
    assert scrape(registry) == {}


def test_a_closed_engine_reports_closed(engine: Engine, registry: CollectorRegistry) -> None:
    PrometheusMetrics(engine, registry=registry, store="e")
    totals(engine)
    engine.close()
    samples = scrape(registry)
    assert value(samples, "reaqtive_engine_status", store="e", status="closed") == 1
    assert read_engine(engine).status.value == "closed"


def test_per_subscription_series_can_be_turned_off(engine: Engine, registry: CollectorRegistry) -> None:
    PrometheusMetrics(engine, registry=registry, store="e", per_subscription=False)
    totals(engine)
    engine.append("s", 1, at(1))
    engine.process()
    samples = scrape(registry)
    assert not [name for name, _ in samples if "subscription_" in name or "observer_" in name]
    assert value(samples, "reaqtive_subscriptions", store="e", state="running") == 1


# -- the optional dependency ------------------------------------------------------------------------------------------


def test_without_prometheus_client_the_error_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # what an import sees when it is not installed
    with Engine.in_memory(start=T0) as engine:
        with pytest.raises(MetricsUnavailableError, match=r"pip install 'reaqtive\[prometheus\]'"):
            PrometheusMetrics(engine)
        assert read_engine(engine).status.value == "running", "the readings need no prometheus_client"


def test_the_engine_package_imports_without_prometheus_client() -> None:
    code = ("import sys; sys.modules['prometheus_client'] = None; import reaqtive.engine.metrics, reaqtive.engine; "
            "assert 'prometheus_client' not in [m for m in sys.modules if sys.modules[m] is not None]")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# -- the docs' example -------------------------------------------------------------------------------------------------


def test_the_docs_example_serves_metrics_over_http(tmp_path: Path) -> None:
    """docs/engine.md, "Metrics and logging": the example runs as written, on a temporary store and a free port,
    and its server answers with the engine's series; while the service "runs", the page is fetched."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "engine.md").read_text()
    section = text[text.index("\n## Metrics and logging\n"):text.index("\n## Garbage collection\n")]
    (block,) = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    running = "# ... the service runs: engine.append(...), engine.process(), engine.checkpoint() ...\n"
    assert running in block and '"service.db"' in block and "9108" in block
    store = str(tmp_path / "service.db")
    block = block.replace('"service.db"', repr(store)).replace("9108", "0").replace(
        running, "page = urlopen(f'http://127.0.0.1:{server.server_port}/metrics', timeout=30).read().decode()\n")
    namespace: dict[str, Any] = {"urlopen": urlopen}
    exec(compile(block, "docs/engine.md", "exec"), namespace)
    namespace["server"].server_close()  # its socket (a service would keep it open)
    assert f'reaqtive_engine_status{{status="running",store="{store}"}} 1.0' in namespace["page"]
    assert "reaqtive_engine_status" not in generate_latest().decode(), "unregistered from the default registry"
