"""Typed streams (issue 30, item 4): ``create_stream(uri, schema=name)`` with a validator registered by name (a
pydantic model, a msgspec ``Struct``, a callable); an append that does not validate names the stream, the event's
index and the field, and appends nothing of its call (``extend``: nothing of its chunk); what is stored, and what
queries see, is the validated plain form; recovery with the validator registered, and without it under each
policy, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, TypeAdapter

from reaqtive import Query
from reaqtive.engine import (
    ArtifactExistsError,
    Engine,
    EngineStatus,
    FunctionRegistry,
    RecoveryError,
    RecoveryPolicy,
    SchemaValidationError,
    UnknownSchemaError,
)
from reaqtive.engine.aio import AsyncEngine
from reaqtive.engine.ingress import EXTEND_CHUNK, GroupCommit
from reaqtive.engine.inspection import format_summary, read_store, summary_to_json
from reaqtive.state.sqlite_store import row_checksum
from tests.engine.store_targets import STORES, StoreSql, store_sql

T0 = datetime(2026, 3, 1, tzinfo=UTC)


class Reading(BaseModel):
    sensor: str
    celsius: float
    at: datetime | None = None


class Batch(BaseModel):
    site: str
    readings: list[Reading]


def positive(value: Any) -> dict[str, int]:
    """A callable validator: a dict with an int ``n`` above 0, normalized to ``{"n": int}``."""
    n = int(value["n"])
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    return {"n": n}


def engine_on(target: Path | str, **options: Any) -> Engine:
    options.setdefault("schemas", {"reading": Reading, "batch": Batch, "positive": positive})
    return Engine(target, start=T0, **options)


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreSql:
    return store_sql(request.param, tmp_path, request)


def logged(store: StoreSql, stream: str) -> int:
    """Events of ``stream`` in the ingress log (each row holds a run of ``count`` events)."""
    ((count,),) = store.rows("SELECT COALESCE(SUM(count), 0) FROM reaqtive_ingress WHERE stream = ?", (stream,))
    return int(count)


def values(engine: Engine, subscription: str) -> list[Any]:
    engine.process()
    return [output.value for output in engine.outputs(subscription)]


# -- what is stored, what queries see -------------------------------------------------------------------------


def test_a_pydantic_stream_stores_the_validated_json_form_and_queries_see_it() -> None:
    with engine_on(":memory:") as engine:
        engine.create_stream("readings", schema="reading")
        engine.create_subscription("all", Query.stream("readings"))
        engine.append_many("readings", [
            ({"sensor": "k1", "celsius": "21.5"}, T0),  # lax mode: the text becomes a float
            (Reading(sensor="k2", celsius=30, at=T0), T0),  # a model instance: stored as its JSON form
            ({"sensor": "k3", "celsius": 1, "extra": "dropped"}, T0),
        ])
        assert values(engine, "all") == [
            {"sensor": "k1", "celsius": 21.5, "at": None},
            {"sensor": "k2", "celsius": 30.0, "at": "2026-03-01T00:00:00Z"},
            {"sensor": "k3", "celsius": 1.0, "at": None},
        ]


def test_a_nested_pydantic_model_names_the_nested_field() -> None:
    with engine_on(":memory:") as engine:
        engine.create_stream("batches", schema="batch")
        good = {"site": "a", "readings": [{"sensor": "k", "celsius": 1}]}
        bad = {"site": "a", "readings": [{"sensor": "k", "celsius": 1}, {"sensor": "k"}]}
        with pytest.raises(SchemaValidationError) as refused:
            engine.append_many("batches", [(good, T0), (good, T0), (bad, T0)])
        assert refused.value.index == 2
        assert refused.value.fields == ("readings.1.celsius",)
        assert "field 'readings.1.celsius': Field required" in str(refused.value)


def test_a_callable_validator_normalizes_and_its_errors_are_named() -> None:
    with engine_on(":memory:") as engine:
        engine.create_stream("numbers", schema="positive")
        engine.create_subscription("all", Query.stream("numbers"))
        engine.append_many("numbers", [({"n": "3", "other": 1}, T0), ({"n": 4}, T0)])
        assert values(engine, "all") == [{"n": 3}, {"n": 4}]
        with pytest.raises(SchemaValidationError, match=r"event #1 of the call .*the event: ValueError: n must be "
                                                         r"positive, got -1") as refused:
            engine.append_many("numbers", [({"n": 5}, T0), ({"n": -1}, T0)])
        assert refused.value.fields == () and isinstance(refused.value.__cause__, ValueError)
        with pytest.raises(SchemaValidationError, match=r"field 'n': KeyError") as missing:
            engine.append("numbers", {"m": 1}, T0)
        assert missing.value.index == 0 and missing.value.fields == ("n",)
        assert engine.streams()["numbers"].appended == 2


def test_a_msgspec_struct_validates_and_is_stored_as_builtins() -> None:
    msgspec = pytest.importorskip("msgspec")

    class Point(msgspec.Struct):
        sensor: str
        celsius: float
        at: datetime | None = None

    with engine_on(":memory:", schemas={"point": Point}) as engine:
        engine.create_stream("points", schema="point")
        engine.create_subscription("all", Query.stream("points"))
        engine.append_many("points", [({"sensor": "a", "celsius": 1}, T0), (Point("b", 2.5, T0), T0)])
        assert values(engine, "all") == [{"sensor": "a", "celsius": 1.0, "at": None},
                                         {"sensor": "b", "celsius": 2.5, "at": "2026-03-01T00:00:00Z"}]
        with pytest.raises(SchemaValidationError) as wrong:
            engine.append_many("points", [({"sensor": "c", "celsius": 1}, T0), ({"sensor": "c", "celsius": "x"}, T0)])
        assert (wrong.value.index, wrong.value.fields) == (1, ("celsius",))
        assert "Expected `float`, got `str`" in str(wrong.value)
        with pytest.raises(SchemaValidationError) as missing:
            engine.append("points", {"sensor": "c"}, T0)
        assert missing.value.fields == ("celsius",) and "missing required field" in str(missing.value)
        assert engine.streams()["points"].appended == 2


def test_a_pydantic_type_adapter_is_a_validator_too() -> None:
    with engine_on(":memory:", schemas={"pair": TypeAdapter(tuple[int, int])}) as engine:
        engine.create_stream("pairs", schema="pair")
        engine.create_subscription("all", Query.stream("pairs"))
        engine.append("pairs", ["1", 2], T0)
        assert values(engine, "all") == [[1, 2]]
        with pytest.raises(SchemaValidationError, match=r"field '1'"):
            engine.append("pairs", [1, "x"], T0)


# -- refusals: the message, and nothing appended ---------------------------------------------------------------


@pytest.mark.parametrize(("bad", "field", "says"), [
    ({"sensor": "k9"}, "celsius", "Field required"),
    ({"sensor": "k9", "celsius": "hot"}, "celsius", "valid number"),
    ({"sensor": 7, "celsius": 1.0}, "sensor", "valid string"),
])
def test_a_refused_append_names_the_stream_the_index_and_the_field_and_appends_nothing(
    store: StoreSql, bad: dict[str, Any], field: str, says: str
) -> None:
    with engine_on(store.target) as engine:
        engine.create_stream("readings", schema="reading")
        engine.append("readings", {"sensor": "k0", "celsius": 20.0}, T0)
        good = [({"sensor": f"k{i}", "celsius": 20.0 + i}, T0) for i in range(5)]
        with pytest.raises(SchemaValidationError) as refused:
            engine.append_many("readings", [*good[:3], (bad, T0), *good[3:]])
        error = refused.value
        assert (error.stream, error.schema, error.index, error.fields, error.appended) == (
            "readings", "reading", 3, (field,), 0)
        assert isinstance(error, ValueError)
        text = str(error)
        assert text.startswith("stream 'readings' (schema 'reading'): event #3 of the call does not validate: "
                               f"field '{field}': ")
        assert says in text and text.endswith("nothing of the call was appended")
        status = engine.streams()["readings"]
        assert (status.appended, status.retained) == (1, 1)
        assert engine.append("readings", {"sensor": "k1", "celsius": 1.0}, T0) == 1  # numbering goes on
    assert logged(store, "readings") == 2


def test_several_problems_of_one_event_are_all_listed() -> None:
    with engine_on(":memory:") as engine:
        engine.create_stream("readings", schema="reading")
        with pytest.raises(SchemaValidationError) as refused:
            engine.append("readings", {"celsius": "x"}, T0)
        assert refused.value.fields == ("sensor", "celsius")
        assert "field 'sensor': Field required; field 'celsius': " in str(refused.value)


def test_none_and_naive_times_are_refused_as_on_any_stream_and_a_validator_returning_none_too() -> None:
    with engine_on(":memory:", schemas={"reading": Reading, "nothing": lambda value: None}) as engine:
        engine.create_stream("readings", schema="reading")
        with pytest.raises(TypeError, match="None is never a stream element"):
            engine.append_many("readings", [({"sensor": "a", "celsius": 1}, T0), (None, T0)])
        with pytest.raises(ValueError, match="timezone-aware"):
            engine.append("readings", {"sensor": "a", "celsius": 1}, datetime(2026, 3, 1))
        engine.create_stream("void", schema="nothing")
        with pytest.raises(SchemaValidationError, match="the validator returned None"):
            engine.append("void", 1, T0)
        assert engine.streams()["readings"].appended == 0 and engine.streams()["void"].appended == 0


def test_extend_refuses_the_chunk_with_the_bad_event_and_keeps_the_chunks_before_it(store: StoreSql) -> None:
    bad_at = 2 * EXTEND_CHUNK + 345

    def events() -> Any:
        for i in range(3 * EXTEND_CHUNK):
            yield ({"n": 0 if i == bad_at else i + 1}, T0)

    with engine_on(store.target) as engine:
        engine.create_stream("numbers", schema="positive")
        with pytest.raises(SchemaValidationError) as refused:
            engine.extend("numbers", events())
        error = refused.value
        assert (error.index, error.appended) == (bad_at, 2 * EXTEND_CHUNK)
        assert f"event #{bad_at} of the call" in str(error)
        assert f"nothing of its chunk was appended (the {2 * EXTEND_CHUNK:,} events before it were)" in str(error)
        assert isinstance(error.__cause__, ValueError)
        assert engine.streams()["numbers"].appended == 2 * EXTEND_CHUNK
        with pytest.raises(SchemaValidationError) as first_chunk:  # in the first chunk: nothing at all
            engine.extend("numbers", [({"n": 1}, T0), ({"n": -5}, T0)])
        assert (first_chunk.value.index, first_chunk.value.appended) == (1, 0)
        assert engine.extend("numbers", [({"n": 1}, T0)] * 3) == 3
        assert engine.streams()["numbers"].appended == 2 * EXTEND_CHUNK + 3
    assert logged(store, "numbers") == 2 * EXTEND_CHUNK + 3


def test_under_group_commit_a_refused_append_queues_nothing() -> None:
    with engine_on(":memory:", ingress_commit=GroupCommit(events=1000, seconds=60)) as engine:
        engine.create_stream("readings", schema="reading")
        engine.append("readings", {"sensor": "a", "celsius": 1}, T0)
        with pytest.raises(SchemaValidationError):
            engine.append_many("readings", [({"sensor": "b", "celsius": 2}, T0), ({"sensor": "b"}, T0)])
        assert engine.append("readings", {"sensor": "c", "celsius": 3}, T0) == 1
        engine.flush_ingress()
        assert engine.streams()["readings"].appended == 2


def test_validation_runs_in_the_producers_thread_without_the_engines_lock() -> None:
    seen: list[tuple[str, bool]] = []

    with engine_on(":memory:") as engine, ThreadPoolExecutor(1) as other:
        def checking(value: Any) -> Any:
            # Another thread gets the engine (its lock) while this validator runs: the append does not hold it.
            reached = other.submit(engine.streams).result(timeout=10)
            seen.append((threading.current_thread().name, "checked" in reached))
            return value

        engine.register_schema("checking", checking)
        engine.create_stream("checked", schema="checking")
        producer = threading.Thread(target=engine.append, args=("checked", 1, T0), name="producer")
        producer.start()
        producer.join(30)
        assert seen == [("producer", True)]
        assert engine.streams()["checked"].appended == 1


# -- creating typed streams -------------------------------------------------------------------------------------


def test_create_stream_refuses_a_schema_not_registered_and_creates_nothing() -> None:
    with engine_on(":memory:") as engine:
        with pytest.raises(UnknownSchemaError, match=r"create_stream\('s'\): schema 'nope' is not registered"):
            engine.create_stream("s", schema="nope")
        assert "s" not in engine.streams()
        with pytest.raises(TypeError, match="schema must be the name"):
            engine.create_stream("s", schema=Reading)  # type: ignore[arg-type]
        assert "s" not in engine.streams()


def test_an_existing_stream_cannot_be_created_again_with_another_schema() -> None:
    with engine_on(":memory:") as engine:
        engine.create_stream("typed", schema="reading")
        engine.create_stream("plain")
        with pytest.raises(ArtifactExistsError, match=r"stream 'typed' already exists, with schema 'reading': "
                                                      r"create_stream\(schema='positive'\) cannot change it"):
            engine.create_stream("typed", schema="positive")
        with pytest.raises(ArtifactExistsError, match="with no schema"):
            engine.create_stream("plain", schema="reading")
        with pytest.raises(ArtifactExistsError, match=r"with schema 'reading'"):
            engine.create_stream("typed")
        with pytest.raises(ArtifactExistsError, match="already exists"):  # the same schema: exists, as ever
            engine.create_stream("typed", schema="reading")
        assert {uri: s.schema for uri, s in engine.streams().items()} == {"plain": None, "typed": "reading"}
        assert engine.info("typed").schema == "reading" and engine.info("plain").schema is None


def test_registering_schemas() -> None:
    registry = FunctionRegistry()
    registry.register_schema("reading", Reading)
    registry.register_schema("reading", Reading)  # again, the same: a no-op
    with pytest.raises(ValueError, match="already registered"):
        registry.register_schema("reading", Batch)
    with pytest.raises(ValueError, match="non-empty str without ':'"):
        registry.register_schema("a:b", Reading)
    with pytest.raises(TypeError, match="needs a pydantic model class, a pydantic TypeAdapter, a msgspec Struct"):
        registry.register_schema("number", 42)
    registry.register_schema("positive", positive)
    assert registry.schema_names() == ["positive", "reading"]
    schema = registry.schema("reading")
    assert schema is not None and schema.kind == "pydantic" and registry.schema("positive").kind == "callable"  # type: ignore[union-attr]
    with engine_on(":memory:", functions=registry, schemas={}) as engine:  # a registry given: its schemas count
        engine.create_stream("readings", schema="reading")
        assert engine.streams()["readings"].schema == "reading"


def test_the_async_engine_creates_typed_streams() -> None:
    async def run() -> tuple[str | None, int, list[int]]:
        async with await AsyncEngine.open(":memory:", start=T0, schemas={"reading": Reading}) as engine:
            await engine.create_stream("readings", schema="reading")
            with pytest.raises(SchemaValidationError, match="event #1 of the call"):
                await engine.append_many("readings", [({"sensor": "a", "celsius": 1}, T0), ({"sensor": "b"}, T0)])
            seqs = await engine.append_many("readings", [({"sensor": "a", "celsius": 1}, T0)])
            status = engine.engine.streams()["readings"]
            return status.schema, status.appended, seqs

    assert asyncio.run(run()) == ("reading", 1, [0])


# -- recovery ----------------------------------------------------------------------------------------------------


def build(store: StoreSql) -> None:
    """A typed stream with a query over it, two events delivered and checkpointed, one more appended after."""
    with engine_on(store.target) as engine:
        engine.create_stream("readings", schema="reading")
        engine.create_stream("plain")
        engine.create_subscription("all", Query.stream("readings"))
        engine.append_many("readings", [({"sensor": "a", "celsius": "1"}, T0), ({"sensor": "b", "celsius": 2}, T0)])
        engine.process()
        engine.checkpoint()
        engine.append("readings", {"sensor": "c", "celsius": 3}, T0 + timedelta(seconds=1))


def test_a_typed_stream_recovers_with_its_validator_registered_again(store: StoreSql) -> None:
    build(store)
    with engine_on(store.target) as engine:
        assert engine.status is EngineStatus.RUNNING and engine.recovery.failures == []
        assert engine.streams()["readings"].schema == "reading" and engine.streams()["plain"].schema is None
        with pytest.raises(SchemaValidationError, match="field 'celsius'"):
            engine.append("readings", {"sensor": "d"}, T0)
        engine.append("readings", {"sensor": "d", "celsius": "4"}, T0 + timedelta(seconds=2))
        assert [v["celsius"] for v in values(engine, "all")] == [1.0, 2.0, 3.0, 4.0]


def test_without_its_validator_the_default_policy_fails_naming_the_stream_and_the_schema(store: StoreSql) -> None:
    build(store)
    with pytest.raises(RecoveryError) as failed:
        engine_on(store.target, schemas={"positive": positive})
    assert failed.value.uri == "readings" and isinstance(failed.value.error, UnknownSchemaError)
    assert "stream 'readings' is validated by schema 'reading', which is not registered" in str(failed.value)
    with engine_on(store.target) as engine:  # nothing was changed: with the validator it recovers
        assert [v["sensor"] for v in values(engine, "all")] == ["a", "b", "c"]


def test_under_keep_the_stream_is_read_but_appends_wait_for_the_validator(store: StoreSql) -> None:
    build(store)
    with engine_on(store.target, schemas={}, recovery_policy=RecoveryPolicy.KEEP) as engine:
        (failure,) = engine.recovery.failures
        assert (failure.uri, failure.kind, failure.policy) == ("readings", "stream", RecoveryPolicy.KEEP)
        assert engine.status is EngineStatus.DEGRADED, "appends to it are refused until its validator comes"
        assert engine.streams()["readings"].schema == "reading"
        assert [v["sensor"] for v in values(engine, "all")] == ["a", "b", "c"]  # its query reads it
        with pytest.raises(UnknownSchemaError, match=r"stream 'readings' is validated by schema 'reading', which is "
                                                     r"not registered in this process: appends to it are refused"):
            engine.append("readings", {"sensor": "d", "celsius": 4}, T0)
        assert engine.streams()["readings"].appended == 3
        engine.register_schema("reading", Reading)  # registered: appends are validated and accepted again
        assert engine.status is EngineStatus.RUNNING
        with pytest.raises(SchemaValidationError):
            engine.append("readings", {"sensor": "d"}, T0)
        engine.append("readings", {"sensor": "d", "celsius": "4"}, T0 + timedelta(seconds=2))
        assert [v["celsius"] for v in values(engine, "all")] == [1.0, 2.0, 3.0, 4.0]
        engine.checkpoint()
        assert engine.streams()["readings"].retained == 0  # not pinned: its log is truncated as any other
    assert logged(store, "readings") == 0


def test_under_remove_the_stream_and_its_queries_are_deleted(tmp_path: Path) -> None:
    store = StoreSql(tmp_path / "s.db")
    build(store)
    with engine_on(store.target, schemas={}, recovery_policy=RecoveryPolicy.REMOVE) as engine:
        assert {(f.uri, f.kind) for f in engine.recovery.failures} == {("readings", "stream"), ("all", "subscription")}
        assert set(engine.streams()) == {"plain"}
        assert [a.uri for a in engine.artifacts()] == ["plain"]
    with engine_on(store.target) as engine:
        assert engine.recovery.failures == [] and set(engine.streams()) == {"plain"}


def test_a_forged_schema_in_a_stream_record_fails_recovery(store: StoreSql) -> None:
    build(store)
    ((blob,),) = store.rows("SELECT value FROM reaqtive_blobs WHERE category = 'artifacts' AND key = 'readings'")
    forged = bytes(blob).replace(b'"schema":"reading"', b'"schema":["reading"]')
    assert forged != bytes(blob)
    store.execute("UPDATE reaqtive_blobs SET value = ?, crc = ? WHERE category = 'artifacts' AND key = 'readings'",
                  (forged, row_checksum("artifacts", "readings", forged)))  # a valid checksum is no defence
    with pytest.raises(RecoveryError, match=r"the record of stream 'readings': its schema is \['reading'\]"):
        engine_on(store.target)


def test_the_inspector_shows_each_streams_schema(tmp_path: Path) -> None:
    store = StoreSql(tmp_path / "s.db")
    build(store)
    summary = read_store(tmp_path / "s.db")
    assert {s.uri: s.schema for s in summary.streams} == {"plain": None, "readings": "reading"}
    assert {a.uri: a.schema for a in summary.artifacts} == {"all": None, "plain": None, "readings": "reading"}
    assert {s["uri"]: s["schema"] for s in summary_to_json(summary)["streams"]} == {"plain": None,
                                                                                  "readings": "reading"}
    text = format_summary(summary)
    header = next(line for line in text.splitlines() if line.lstrip().startswith("STREAM"))
    assert header.split() == ["STREAM", "APPENDED", "DELIVERED", "RETAINED", "SCHEMA"]
    row = next(line for line in text.splitlines() if line.lstrip().startswith("readings"))
    assert row.split()[-1] == "reading"
