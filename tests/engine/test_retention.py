"""Log retention per stream (issue 34, part 1): ``create_stream(uri, retain=...)`` by age, by events or by bytes,
enforced at checkpoints as a second bound on truncation (never below what a reader or a query behind the engine
needs), shown in ``streams()``, ``inspect`` and the metrics, and checked on input."""

from __future__ import annotations

import operator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reaqtive import Query
from reaqtive.engine import (
    Engine,
    MalformedRecordError,
    RecoveryError,
    Retention,
    RetentionError,
)
from reaqtive.engine.inspection import format_summary, read_store
from tests.engine.store_targets import STORES, StoreSql, store_sql

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def fill(engine: Engine, count: int, first: int = 0, stream: str = "s") -> None:
    """``count`` events, one a second, each its own row of the log (one append each)."""
    for i in range(first, first + count):
        engine.append(stream, i, at(i))


@pytest.fixture(params=STORES)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    return store_sql(request.param, tmp_path, request).target


def engine_with(target: Path | str | None = None, **streams: Any) -> Engine:
    engine = Engine(":memory:" if target is None else target, start=T0, synchronous="NORMAL")
    for uri, retain in streams.items():
        engine.create_stream(uri, retain=retain)
    return engine


# -- each form, enforced at checkpoints --------------------------------------------------------------------------------


def test_without_retention_a_checkpoint_truncates_what_every_reader_has() -> None:
    with engine_with(s=None) as engine:
        engine.create_subscription("sum", Query.stream("s").scan(0, operator.add))
        fill(engine, 100)
        engine.process()
        engine.checkpoint()
        status = engine.streams()["s"]
        assert (status.retained, status.retention, status.retained_from) == (0, None, None)


def test_retention_by_events_keeps_the_newest_events_on_both_stores(target: Path | str) -> None:
    with engine_with(target, s=Retention(events=30)) as engine:
        engine.create_subscription("sum", Query.stream("s").scan(0, operator.add))
        fill(engine, 100)
        engine.process()
        engine.checkpoint()
        status = engine.streams()["s"]
        assert (status.retained, status.retained_from) == (30, 70)
        assert status.retained_positions is not None
        assert status.retained_positions[1] - status.retained_positions[0] == 29
        assert status.retained_since == at(70)
        fill(engine, 10, first=100)
        engine.process()
        engine.checkpoint()
        assert (engine.streams()["s"].retained, engine.streams()["s"].retained_from) == (30, 80)


def test_retention_by_age_keeps_the_events_younger_than_it_by_the_engines_clock(target: Path | str) -> None:
    with engine_with(target, s=timedelta(seconds=25)) as engine:
        engine.create_subscription("sum", Query.stream("s").scan(0, operator.add))
        fill(engine, 100)  # the event clock stands at 99 s after delivery
        engine.process()
        engine.checkpoint()
        status = engine.streams()["s"]
        assert status.retention == Retention(age=timedelta(seconds=25))
        assert (status.retained_from, status.retained_since) == (74, at(74))  # 99 - 25: the first one young enough
        engine.advance_time(at(200))
        engine.checkpoint()
        assert engine.streams()["s"].retained == 0  # all older than 25 s now


def test_an_age_keeps_the_events_after_the_first_young_one_whatever_their_times() -> None:
    with engine_with(s=timedelta(seconds=10)) as engine:
        engine.create_subscription("sum", Query.stream("s").scan(0, operator.add))
        for i, seconds in enumerate([0, 1, 50, 2, 3, 60]):
            engine.append("s", i, at(seconds))
        engine.process()
        engine.checkpoint()  # clock 60: cutoff 50 — #2 (at 50) is young enough, and #3, #4 after it stay
        assert engine.streams()["s"].retained_from == 2


def test_retention_by_bytes_keeps_the_newest_rows_holding_at_least_that_many_bytes(target: Path | str) -> None:
    with engine_with(target, s=Retention(bytes=2_000)) as engine:
        engine.create_subscription("none", Query.stream("s").filter(operator.not_))
        for i in range(100):
            engine.append("s", "x" * 90, at(i))
        engine.process()
        engine.checkpoint()
        status = engine.streams()["s"]
        row = status.retained_bytes // status.retained  # rows of one event of the same size
        assert 2_000 <= status.retained_bytes < 2_000 + row
        assert engine.snapshot().streams["s"].retained_bytes == status.retained_bytes
        assert engine.snapshot().streams["s"].retained_events == status.retained


def test_several_forms_keep_what_any_of_them_keeps() -> None:
    with engine_with(s=Retention(age=timedelta(seconds=5), events=20)) as engine:
        engine.create_subscription("sum", Query.stream("s").scan(0, operator.add))
        fill(engine, 100)
        engine.process()
        engine.checkpoint()
        assert engine.streams()["s"].retained_from == 80  # events keeps more than the age here


def test_retention_is_per_stream() -> None:
    with engine_with(kept=Retention(events=50), plain=None) as engine:
        engine.create_subscription("merged", Query.stream("kept").merge(Query.stream("plain")).scan(0, operator.add))
        fill(engine, 100, stream="kept")
        fill(engine, 100, stream="plain")
        engine.process()
        engine.checkpoint()
        streams = engine.streams()
        assert (streams["kept"].retained, streams["plain"].retained) == (50, 0)


# -- never below what a reader needs -----------------------------------------------------------------------------------


def test_retention_never_truncates_what_a_paused_query_still_needs() -> None:
    with engine_with(s=Retention(events=5)) as engine:
        engine.create_subscription("paused", Query.stream("s").scan(0, operator.add))
        engine.create_subscription("twin", Query.stream("s").scan(0, operator.add))
        fill(engine, 10)
        engine.process()
        engine.pause("paused")
        fill(engine, 90, first=10)
        engine.process()
        engine.checkpoint()
        assert engine.streams()["s"].retained_from == 10  # the paused query's next event, more than 5 kept
        engine.resume("paused")
        engine.process()
        engine.checkpoint()
        assert [o.value for o in engine.outputs("paused")] == [o.value for o in engine.outputs("twin")]
        assert engine.streams()["s"].retained == 5


def test_a_backfill_behind_the_engine_holds_the_log_below_its_retention() -> None:
    with engine_with(s=Retention(events=100)) as engine:
        engine.create_subscription("sum", Query.stream("s").scan(0, operator.add))
        fill(engine, 100)
        engine.process()
        engine.create_subscription("backfill", Query.stream("s").scan(0, operator.add), start="earliest")
        engine.pause("backfill")  # it stands at its start
        fill(engine, 100, first=100)
        engine.process()
        engine.checkpoint()
        assert engine.streams()["s"].retained_from == 0  # retention alone would keep 100..199


# -- changing it, and its record ---------------------------------------------------------------------------------------


def test_set_retention_applies_from_the_next_checkpoint_and_create_stream_cannot_change_it(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with engine_with(path, s=Retention(events=50)) as engine:
        engine.create_subscription("sum", Query.stream("s").scan(0, operator.add))
        fill(engine, 100)
        engine.process()
        engine.checkpoint()
        with pytest.raises(RetentionError, match="cannot change it"):
            engine.create_stream("s", retain=Retention(events=10))
        engine.set_retention("s", Retention(events=10))
        assert engine.streams()["s"].retained == 50  # not before a checkpoint
        engine.checkpoint()
        assert engine.streams()["s"].retained == 10
    with Engine(path, start=T0) as reopened:  # stored with the stream
        assert reopened.streams()["s"].retention == Retention(events=10)
        reopened.set_retention("s", None)
        reopened.checkpoint()
        assert reopened.streams()["s"].retained == 0


def test_a_store_without_retentions_opens_and_a_forged_retention_is_refused_at_open(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Engine(path, start=T0) as engine:
        engine.create_stream("s")  # a record without "retain": as every store before retention
        fill(engine, 3)
    sql = StoreSql(path)
    record = sql.rows("SELECT value FROM reaqtive_blobs WHERE category = 'artifacts' AND key = 's'")[0][0]
    assert b"retain" not in record
    with Engine(path, start=T0) as engine:
        assert engine.streams()["s"].retention is None
        engine.set_retention("s", Retention(events=2))
    forged = sql.rows("SELECT value FROM reaqtive_blobs WHERE category = 'artifacts' AND key = 's'")[0][0]
    forged = forged.replace(b'"events":2', b'"events":-2')
    from reaqtive.state.sqlite_store import row_checksum

    sql.execute("UPDATE reaqtive_blobs SET value = ?, crc = ? WHERE category = 'artifacts' AND key = 's'",
                (forged, row_checksum("artifacts", "s", forged)))
    with pytest.raises(RecoveryError) as raised:
        Engine(path, start=T0)
    assert isinstance(raised.value.__cause__, MalformedRecordError)
    assert "retention" in str(raised.value.__cause__)


BAD_RETENTIONS: list[tuple[Any, str]] = [
    (Retention, "needs age=, events= or bytes="),
    (lambda: Retention(events=-1), "whole number > 0"),
    (lambda: Retention(events=0), "whole number > 0"),
    (lambda: Retention(bytes=1.5), "whole number > 0"),
    (lambda: Retention(events=True), "whole number > 0"),
    (lambda: Retention(age=timedelta(seconds=-1)), "positive timedelta"),
    (lambda: Retention(age=7), "positive timedelta"),
]


@pytest.mark.parametrize(("make", "message"), BAD_RETENTIONS)
def test_a_retention_out_of_range_is_refused_with_what_was_wrong(make: Any, message: str) -> None:
    with pytest.raises(RetentionError, match=message):
        make()


@pytest.mark.parametrize("retain", [7, "7d", -timedelta(days=1), timedelta(0), {"events": 3}])
def test_create_stream_refuses_an_unknown_or_negative_retain_and_creates_nothing(retain: Any) -> None:
    with Engine(":memory:", start=T0) as engine:
        with pytest.raises(RetentionError, match=r"create_stream\('s'\): retain must be"):
            engine.create_stream("s", retain=retain)
        assert "s" not in engine.streams()


# -- shown where people look -------------------------------------------------------------------------------------------


def test_inspect_and_the_metrics_show_retention_and_what_is_retained(target: Path | str) -> None:
    path = target
    with engine_with(path, s=Retention(events=40), plain=None) as engine:
        engine.create_subscription("sum", Query.stream("s").scan(0, operator.add))
        fill(engine, 100)
        engine.process()
        engine.checkpoint()
        readings = engine.snapshot().streams
        assert (readings["s"].retained_events, readings["plain"].retained_events) == (40, 0)
        assert readings["s"].retained_bytes == engine.streams()["s"].retained_bytes > 0
        prometheus = pytest.importorskip("prometheus_client")
        from reaqtive.engine.metrics import PrometheusMetrics

        registry = prometheus.CollectorRegistry()
        PrometheusMetrics(registry=registry).watch(engine, store="main")
        assert registry.get_sample_value("reaqtive_stream_retained_events", {"store": "main", "stream": "s"}) == 40
        assert registry.get_sample_value("reaqtive_stream_retained_bytes", {"store": "main", "stream": "s"}) \
            == readings["s"].retained_bytes
    summary = read_store(path)
    stream = next(s for s in summary.streams if s.uri == "s")
    assert (stream.retention, stream.retained, stream.retained_from) == ("40 events", 40, 60)
    text = format_summary(summary)
    assert "retention" in text and "40 events" in text


# -- a property: what a retention keeps, whatever the order of appends and checkpoints ---------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=st.one_of(st.none(), st.integers(1, 40)),
    age=st.one_of(st.none(), st.integers(1, 40)),
    steps=st.lists(st.integers(0, 25), min_size=1, max_size=8),
)
def test_a_checkpoint_keeps_at_least_what_the_retention_says_and_no_reader_loses_an_event(
    events: int | None, age: int | None, steps: list[int],
) -> None:
    retain = None if events is None and age is None else Retention(
        age=None if age is None else timedelta(seconds=age), events=events)
    with engine_with(s=retain) as engine:
        engine.create_subscription("sum", Query.stream("s").scan(0, operator.add))
        appended = 0
        for count in steps:
            fill(engine, count, first=appended)
            appended += count
            engine.process()
            engine.checkpoint()
            status = engine.streams()["s"]
            first = appended if status.retained_from is None else status.retained_from
            assert status.retained == appended - first  # a suffix of the stream, whole
            keep = appended
            if events is not None:
                keep = min(keep, appended - events)
            if age is not None and appended:
                keep = min(keep, max(0, appended - 1 - age))  # event i at i s; the clock at the last one
            assert first == (max(keep, 0) if retain is not None else appended)
        assert [o.value for o in engine.outputs("sum")][-1:] == ([sum(range(appended))] if appended else [])
