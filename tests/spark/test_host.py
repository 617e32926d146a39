"""The per-bucket host without Spark: per-key semantics, timers, state blobs, errors, the embedded equivalent and
the migration of an engine's state (Spark only moves bytes and calls these)."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from datetime import timedelta
from operator import add
from pathlib import Path
from typing import Any

import pytest

from reaqtive import Query
from reaqtive.engine import Engine
from reaqtive.engine.database import to_micros
from reaqtive.engine.expressions import FunctionRegistry, UnpersistableQueryError
from reaqtive.spark.embedded import embedded_query, final_watermark, per_key_outputs
from reaqtive.spark.host import (
    BucketHost,
    BucketState,
    BucketStateError,
    KeyedQuery,
    KeyRecord,
    OutputRow,
    QueryMismatchError,
    run_key,
)
from reaqtive.spark.migration import MigrationError, export_engine_state, pack_buckets
from tests.spark import queries

SECOND = 1_000_000  # µs


def fail_on_13(value: int) -> int:
    if value == 13:
        raise ValueError("13 is unlucky")
    return value


def running_sum() -> Query[int]:
    return Query.stream("s").scan(0, add)


def timed_counts() -> Query[Any]:
    """Per key: how many events fell in each 10-second window (a timer per window)."""
    return Query.stream("s").window(timedelta(seconds=10)).flat_map(count_window)


def count_window(window: Query[Any]) -> Query[int]:
    return window.count()


def bucket_of(key: str, buckets: int) -> int:
    return zlib.crc32(key.encode()) % buckets


def run_batches(query: KeyedQuery, batches: Sequence[Sequence[tuple[str, int, Any]]], buckets: int,
                final: int | None = None) -> list[OutputRow]:
    """Run ``(key, time µs, payload)`` batches through ``buckets`` hosts, the watermark at each batch's end."""
    blobs: dict[int, bytes] = {}
    rows: list[OutputRow] = []
    watermark: int | None = None
    for batch in [*batches, []]:
        per_bucket: dict[int, dict[str, list[tuple[int, Any, Any]]]] = {}
        for order, (key, when, payload) in enumerate(batch):
            per_bucket.setdefault(bucket_of(key, buckets), {}).setdefault(key, []).append((when, order, payload))
        for bucket in range(buckets):
            host = BucketHost(query, buckets, bucket, blobs.get(bucket))
            rows += host.process(per_bucket.get(bucket, {}), watermark)
            blobs[bucket] = host.encode()
        if batch:
            watermark = max(when for _, when, _ in batch)
        if final is not None and not batch:
            watermark = final
    return rows


def by_key(rows: Sequence[OutputRow]) -> list[tuple[Any, int, Any]]:
    return sorted((row.key, row.seq, row.value) for row in rows)


# -- per-key semantics -------------------------------------------------------------------------------------------


def test_each_key_runs_its_own_query_numbering_its_outputs() -> None:
    events = [("a", 1 * SECOND, 1), ("b", 2 * SECOND, 10), ("a", 3 * SECOND, 2), ("b", 4 * SECOND, 20)]
    rows = run_batches(KeyedQuery.of(running_sum()), [events], buckets=2)
    assert by_key(rows) == [("a", 0, 1), ("a", 1, 3), ("b", 0, 10), ("b", 1, 30)]
    assert {row.key: row.time for row in rows if row.seq == 1} == {"a": 3 * SECOND, "b": 4 * SECOND}


def test_outputs_do_not_depend_on_batches_or_buckets() -> None:
    events = [(f"k{i % 7}", i * SECOND // 2, i) for i in range(200)]
    query = KeyedQuery.of(timed_counts())
    one_batch = by_key(run_batches(query, [events], buckets=1, final=events[-1][1]))
    many = by_key(run_batches(query, [events[i:i + 23] for i in range(0, 200, 23)], buckets=5, final=events[-1][1]))
    assert one_batch == many
    assert len(one_batch) > 7  # every key closed several windows


def test_a_due_timer_fires_when_the_watermark_passes_it_without_events() -> None:
    query = KeyedQuery.of(timed_counts())
    host = BucketHost(query, 1, 0, None)
    assert list(host.process({"k": [(0, 0, "x"), (SECOND, 1, "y")]}, None)) == []
    assert host.next_due() == 10 * SECOND
    blob = host.encode()
    later = BucketHost(query, 1, 0, blob)
    assert later.due_keys(9 * SECOND) == []
    rows = list(later.process({}, 25 * SECOND))
    assert [(row.value, row.time) for row in rows] == [(2, 10 * SECOND), (0, 20 * SECOND)]
    assert later.next_due() == 30 * SECOND


def test_events_are_fed_in_time_then_order_whatever_their_arrival() -> None:
    host = BucketHost(KeyedQuery.of(running_sum()), 1, 0, None)
    rows = list(host.process({"k": [(2 * SECOND, 0, 100), (SECOND, 5, 2), (SECOND, 1, 1)]}, None))
    assert [row.value for row in rows] == [1, 3, 103]


def test_a_failing_key_ends_with_an_error_row_and_the_others_continue() -> None:
    query = KeyedQuery.of(Query.stream("s").map(fail_on_13).scan(0, add))
    host = BucketHost(query, 1, 0, None)
    rows = list(host.process({"a": [(1, 0, 1), (2, 1, 13), (3, 2, 5)], "b": [(1, 0, 13 + 1)]}, None))
    assert [(row.key, row.seq, row.value, row.error) for row in rows] == [
        ("a", 0, 1, None), ("a", 1, None, "ValueError: 13 is unlucky"), ("b", 0, 14, None)]
    again = BucketHost(query, 1, 0, host.encode())
    assert [row.key for row in again.process({"a": [(9, 0, 1)], "b": [(9, 0, 1)]}, None)] == ["b"]
    status = again.status("a")
    assert status is not None and status.ended == "error: ValueError: 13 is unlucky"


def test_complete_ends_the_stream_so_whole_stream_aggregates_emit() -> None:
    query = KeyedQuery.of(Query.stream("s").count())
    record, rows = run_key(query, "k", None, [(1, "x"), (2, "y")], None, where="test", complete=True)
    assert [row.value for row in rows] == [2]
    assert record is not None and record.ended == "completed"


# -- state ---------------------------------------------------------------------------------------------------------


def test_bucket_state_round_trips_and_detects_damage() -> None:
    host = BucketHost(KeyedQuery.of(running_sum()), 3, 1, None, table=False)
    list(host.process({"k": [(1, 0, 5)]}, None))
    blob = host.encode()
    state = BucketState.decode(blob)
    record = state.record("k", "test")
    assert record is not None and (record.clock, record.events, record.outputs) == (1, 1, 1)
    damaged = blob[:-6] + bytes([blob[-6] ^ 1]) + blob[-5:]
    with pytest.raises(BucketStateError, match="checksum mismatch"):
        BucketState.decode(damaged, "bucket 1")
    with pytest.raises(BucketStateError, match="not a reaqtive bucket state"):
        BucketState.decode(b"garbage")
    with pytest.raises(BucketStateError, match="not a key record"):
        KeyRecord.unpack(b"\xc1")


def test_a_checkpoint_is_refused_for_another_bucket_count_or_query() -> None:
    query = KeyedQuery.of(running_sum())
    host = BucketHost(query, 4, 0, None)
    list(host.process({"k": [(1, 0, 5)]}, None))
    with pytest.raises(QueryMismatchError, match="created with 4 buckets, this run asks for 8"):
        BucketHost(query, 8, 0, host.encode())
    with pytest.raises(QueryMismatchError, match="state of another query"):
        BucketHost(KeyedQuery.of(Query.stream("s").count()), 4, 0, host.encode())


def test_a_quiet_key_keeps_its_state_bytes() -> None:
    query = KeyedQuery.of(queries.totals_query())
    host = BucketHost(query, 1, 0, None)
    payload = {"kind": "a", "amount": 1, "seq": 0}
    list(host.process({"k": [(0, 0, payload)], "j": [(0, 1, payload)]}, None))
    before = host.state.keys["j"]
    host = BucketHost(query, 1, 0, host.encode())
    list(host.process({"k": [(SECOND, 2, payload)]}, None))
    assert host.state.keys["j"] is before or host.state.keys["j"] == before
    record = host.state.record("k", "test")
    assert record is not None and record.inner  # the group and its window are inner subscriptions


def test_keyed_queries_read_exactly_one_stream_and_must_persist() -> None:
    with pytest.raises(ValueError, match="exactly one stream"):
        KeyedQuery.of(Query.stream("a").merge(Query.stream("b")))
    with pytest.raises(UnpersistableQueryError):
        KeyedQuery.of(Query.stream("a").map(lambda x: x))
    assert KeyedQuery.of(running_sum()).fingerprint == KeyedQuery.of(running_sum()).fingerprint


def test_the_fingerprint_is_computed_once_per_query_object(monkeypatch: pytest.MonkeyPatch) -> None:
    import pickle

    import reaqtive.spark.host as host_module

    query = KeyedQuery.of(running_sum())
    calls: list[object] = []
    real = host_module.expression_to_json

    def counting(expression: Any) -> str:
        calls.append(expression)
        return real(expression)

    monkeypatch.setattr(host_module, "expression_to_json", counting)
    events = [(f"k{i}", i * SECOND, i) for i in range(20)]
    run_batches(query, [events[:10], events[10:]], buckets=3)
    assert len(calls) == 1, "one hash for every key of every batch and bucket"
    shipped = pickle.loads(pickle.dumps(query))  # as Spark ships it to a worker
    assert shipped == query and shipped.fingerprint == query.fingerprint
    assert query.table() is not None
    assert "_table" not in pickle.loads(pickle.dumps(query)).__dict__  # bound steps are made again on the worker


def test_queries_with_one_expression_but_other_closures_do_not_share_their_decoded_form() -> None:
    def keeping(threshold: int) -> KeyedQuery:
        return KeyedQuery.of(Query.stream("s").filter(keep := (lambda x: x > threshold)), {"keep": keep})

    low, high = keeping(1), keeping(5)
    assert low.fingerprint == high.fingerprint  # the same expression: filter(@keep)
    events = [(1, 0, 3)]
    for table in (True, False):
        assert [r.value for r in BucketHost(low, 1, 0, None, table=table).process({"k": events}, None)] == [3]
        assert [r.value for r in BucketHost(high, 1, 0, None, table=table).process({"k": events}, None)] == []


# -- the embedded engine -------------------------------------------------------------------------------------------


def test_the_host_equals_the_embedded_engine(tmp_path: Path) -> None:
    events = queries.events(3000, 40, spacing=timedelta(milliseconds=200))
    functions = FunctionRegistry()
    with Engine(tmp_path / "e.db", functions=functions, start=queries.T0) as engine:
        engine.create_stream(queries.STREAM)
        engine.create_subscription("sub", embedded_query(queries.totals_query(), functions))
        engine.append_many(queries.STREAM, [([key, payload], when) for key, when, _, payload in events])
        engine.process()
        engine.advance_time(events[-1][1])
        expected = sorted(per_key_outputs(engine.outputs("sub")))
    batches = [[(key, to_micros(when), payload) for key, when, _, payload in events[i:i + 700]]
               for i in range(0, len(events), 700)]
    rows = run_batches(KeyedQuery.of(queries.totals_query()), batches, buckets=3)
    assert by_key(rows) == expected
    assert len(expected) > 1000


def test_an_engine_checkpoint_moves_to_the_host_and_continues(tmp_path: Path) -> None:
    events = queries.events(4000, 60)
    half = 2000

    def engine_run(path: Path, part: Sequence[queries.Event], end: Any) -> list[Any]:
        functions = FunctionRegistry()
        with Engine(path, functions=functions, start=queries.T0) as engine:
            engine.create_stream(queries.STREAM)
            engine.create_subscription("sub", embedded_query(queries.totals_query(), functions))
            engine.append_many(queries.STREAM, [([key, payload], when) for key, when, _, payload in part])
            engine.process()
            if end is not None:
                engine.advance_time(end)
            engine.checkpoint()
            return per_key_outputs(engine.outputs("sub"))

    expected = sorted(engine_run(tmp_path / "full.db", events, events[-1][1]))
    before = engine_run(tmp_path / "half.db", events[:half], None)
    export = export_engine_state(tmp_path / "half.db", "sub", queries.totals_query())
    assert export.delivered == half - 1 and export.clock == events[half - 1][1]
    assert len(export.records) == 60
    query, buckets = export.query, 2
    blobs = {}
    for bucket in range(buckets):
        keys = [key for key in export.records if bucket_of(key, buckets) == bucket]
        blobs[bucket] = pack_buckets(query, buckets, keys, [export.records[key].pack() for key in keys])
    rows: list[OutputRow] = []
    rest = [(key, to_micros(when), payload) for key, when, _, payload in events[half:]]
    for watermark, batch in ((None, rest), (to_micros(events[-1][1]), [])):
        per_bucket: dict[int, dict[str, list[tuple[int, Any, Any]]]] = {}
        for order, (key, when, payload) in enumerate(batch):
            per_bucket.setdefault(bucket_of(key, buckets), {}).setdefault(key, []).append((when, order, payload))
        for bucket in range(buckets):
            host = BucketHost(query, buckets, bucket, blobs[bucket])
            rows += host.process(per_bucket.get(bucket, {}), watermark)
            blobs[bucket] = host.encode()
    assert sorted(before + by_key(rows)) == expected


def test_migration_refuses_another_query(tmp_path: Path) -> None:
    functions = FunctionRegistry()
    with Engine(tmp_path / "e.db", functions=functions, start=queries.T0) as engine:
        engine.create_stream(queries.STREAM)
        engine.create_subscription("sub", embedded_query(queries.totals_query(), functions))
        engine.checkpoint()
    with pytest.raises(MigrationError, match="does not run this keyed query"):
        export_engine_state(tmp_path / "e.db", "sub", Query.stream(queries.STREAM).count())
    with pytest.raises(MigrationError, match="no subscription 'other'"):
        export_engine_state(tmp_path / "e.db", "other", queries.totals_query())


def test_migration_refuses_a_sink_trimmed_after_acknowledgement(tmp_path: Path) -> None:
    functions = FunctionRegistry()
    events = queries.events(2000, 20)
    with Engine(tmp_path / "e.db", functions=functions, start=queries.T0) as engine:
        engine.create_stream(queries.STREAM)
        engine.create_subscription("sub", embedded_query(queries.totals_query(), functions))
        engine.append_many(queries.STREAM, [([key, payload], when) for key, when, _, payload in events])
        engine.process()
        engine.checkpoint()
        outputs = engine.outputs("sub")
    assert len(outputs) > 3
    assert export_engine_state(tmp_path / "e.db", "sub", queries.totals_query()).records  # nothing trimmed
    with Engine(tmp_path / "e.db", functions=functions, start=queries.T0) as engine:
        engine.ack("sub", outputs[2].seq)
        engine.checkpoint()  # a row of outputs is trimmed once all its outputs are acknowledged: none yet
    assert export_engine_state(tmp_path / "e.db", "sub", queries.totals_query()).records
    with Engine(tmp_path / "e.db", functions=functions, start=queries.T0) as engine:
        engine.ack("sub", outputs[-1].seq)
        engine.checkpoint()  # trims them all
    with pytest.raises(MigrationError, match="trimmed after acknowledgement"):
        export_engine_state(tmp_path / "e.db", "sub", queries.totals_query())


def test_final_watermark_is_the_last_event_time_in_whole_milliseconds_less_lateness() -> None:
    last = queries.T0 + timedelta(seconds=179, microseconds=999_820)
    assert final_watermark(last) == queries.T0 + timedelta(seconds=179, milliseconds=999)
    assert final_watermark(last, timedelta(seconds=5)) == queries.T0 + timedelta(seconds=174, milliseconds=999)
    assert final_watermark(queries.T0 + timedelta(milliseconds=36)) == queries.T0 + timedelta(milliseconds=36)


# -- keyed forms across releases ----------------------------------------------------------------------------------


def parity(value: int) -> int:
    return value % 2


def windowed_counts(group: Query[int]) -> Query[int]:
    return group.window(timedelta(seconds=10)).flat_map(count_window)


def grouped_windows() -> Query[int]:
    """Per key, a group_by whose groups count 10-second windows: the general path before issue 32, keyed now."""
    return Query.stream("s").group_by(parity).flat_map(windowed_counts)


def test_a_key_record_of_the_previous_release_goes_on_in_the_form_its_state_was_written_in() -> None:
    import msgpack

    from reaqtive.operators.keyed_steps import FORM_BEFORE_SELECTORS, KEYED_FORM, in_keyed_form

    query = KeyedQuery.of(grouped_windows())
    first = [(i * SECOND, i) for i in range(0, 12)]
    later = [(i * SECOND, i) for i in range(12, 30)]
    _, all_rows = run_key(query, "k", None, first + later, 40 * SECOND, where="twin")
    with in_keyed_form(FORM_BEFORE_SELECTORS):  # the previous release: windows inside groups ran general
        old, first_rows = run_key(query, "k", None, first, 12 * SECOND, where="old")
    assert old is not None and old.form == FORM_BEFORE_SELECTORS
    fresh, _ = run_key(query, "k", None, first, 12 * SECOND, where="new")
    assert fresh is not None and fresh.form == KEYED_FORM
    assert fresh.subscription != old.subscription, "the two forms save different states"
    # The record as the previous release wrote it: format 1, no form.
    stored = msgpack.packb([1, old.clock, old.due, old.events, old.outputs, old.ended, old.instance,
                            old.subscription, old.inner], use_bin_type=True)
    record = KeyRecord.unpack(stored)
    assert record.form == FORM_BEFORE_SELECTORS
    record, later_rows = run_key(query, "k", record, later, 40 * SECOND, where="upgraded")
    assert record is not None and record.form == FORM_BEFORE_SELECTORS
    assert KeyRecord.unpack(record.pack()) == record
    assert [row.value for row in first_rows + later_rows] == [row.value for row in all_rows]
    with pytest.raises(BucketStateError, match="keyed form 9"):
        KeyRecord.unpack(msgpack.packb([2, 0, None, 0, 0, None, "key", None, {}, 9]))
