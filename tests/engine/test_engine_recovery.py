"""Recovery: failures isolated per artifact, stored data never destroyed, differential checkpoints by size.

Every test runs on both stores, an SQLite file and a PostgreSQL database, damaging rows the same way through SQL."""

from __future__ import annotations

import operator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from reaqtive import GroupedStream, Query
from reaqtive.engine import Engine, EngineStatus, RecoveryError, RecoveryPolicy
from reaqtive.state import StateError
from reaqtive.state.sqlite_store import row_checksum
from tests.engine.store_targets import STORES, StoreSql, store_sql

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreSql:
    return store_sql(request.param, tmp_path, request)


def build(store: StoreSql, count: int) -> None:
    with Engine(store.target, allow_modules=[__name__]) as engine:
        engine.create_stream("raw")
        for i in range(count):
            engine.create_subscription(f"q://{i}", Query.stream("raw").scan(0, operator.add))
        engine.append_many("raw", [(i + 1, T0 + timedelta(seconds=i)) for i in range(3)])
        engine.process()
        engine.checkpoint()


def corrupt_state(store: StoreSql, key: str) -> bytes:
    [(blob,)] = store.rows("SELECT value FROM reaqtive_blobs WHERE category = 'state' AND key = ?", (key,))
    damaged = bytes(blob[:-5]) + b"\x00\x01\x02\x03\x04"
    store.execute("UPDATE reaqtive_blobs SET value = ? WHERE category = 'state' AND key = ?", (damaged, key))
    return damaged


def stored_state(store: StoreSql, key: str) -> bytes:
    [(value,)] = store.rows("SELECT value FROM reaqtive_blobs WHERE category = 'state' AND key = ?", (key,))
    return bytes(value)


def test_a_corrupt_state_blob_fails_only_its_subscription_and_its_bytes_stay(store: StoreSql) -> None:
    build(store, 3)
    damaged = corrupt_state(store, "q://1")
    failures: list[str] = []

    def report(uri: str, error: BaseException) -> RecoveryPolicy:
        failures.append(uri)
        return RecoveryPolicy.KEEP

    with Engine(store.target, allow_modules=[__name__], on_recovery_failure=report) as engine:
        assert failures == ["q://1"]
        assert engine.status is EngineStatus.DEGRADED
        assert [f.uri for f in engine.recovery.failures] == ["q://1"]
        assert "q://1" in str(engine.recovery.failures[0].error)
        engine.append("raw", 10, T0 + timedelta(seconds=10))
        engine.process()
        engine.checkpoint(full=True)
        assert [o.value for o in engine.outputs("q://0")][-1] == 16, "the others recovered and run on"
        assert not engine.info("q://1").running
    assert stored_state(store, "q://1") == damaged, "the broken subscription's bytes are still in the store"


def test_the_default_policy_fails_the_recovery_and_changes_nothing(store: StoreSql) -> None:
    build(store, 2)
    damaged = corrupt_state(store, "q://0")
    with pytest.raises(RecoveryError, match="q://0"):
        Engine(store.target, allow_modules=[__name__])
    assert stored_state(store, "q://0") == damaged


def test_the_remove_policy_deletes_the_broken_artifact(store: StoreSql) -> None:
    build(store, 2)
    corrupt_state(store, "q://0")
    with Engine(store.target, allow_modules=[__name__], recovery_policy=RecoveryPolicy.REMOVE) as engine:
        assert {info.uri for info in engine.artifacts()} == {"raw", "q://1"}
    with Engine(store.target, allow_modules=[__name__]) as engine:
        assert engine.status is EngineStatus.RUNNING


def test_a_differential_checkpoint_writes_only_what_changed(store: StoreSql) -> None:
    with Engine(store.target, allow_modules=[__name__]) as engine:
        for i in range(1000):
            engine.create_stream(f"s://{i}")
            engine.create_subscription(f"q://{i}", Query.stream(f"s://{i}").scan(0, operator.add))
        full = engine.checkpoint(full=True)
        engine.append("s://7", 5, T0)
        engine.process()
        differential = engine.checkpoint()
        assert differential.dirty_subscriptions == 1
        assert differential.bytes_written * 100 < full.bytes_written, (differential, full)


def test_the_periodic_policy_checkpoints_every_n_events(store: StoreSql) -> None:
    with Engine(store.target, allow_modules=[__name__], checkpoint_every_events=10) as engine:
        engine.create_stream("raw")
        engine.create_subscription("q", Query.stream("raw").scan(0, operator.add))
        for start in range(0, 25, 5):  # log rows of 5 events: a row goes once a checkpoint covers all of it
            engine.append_many("raw", [(1, T0 + timedelta(seconds=i)) for i in range(start, start + 5)])
        engine.process()
        assert engine.last_checkpoint is not None
        assert sum(engine._store.ingress_counts().values()) == 5, "events covered by the last checkpoint are gone"


def key_of(x: int) -> int:
    return x % 3


def running_count(group: GroupedStream[int]) -> Query[int]:
    return group.scan(0, lambda_free_increment)


def lambda_free_increment(count: int, _: object) -> int:
    return count + 1


def build_grouped(store: StoreSql) -> dict[str, bytes]:
    with Engine(store.target, allow_modules=[__name__]) as engine:
        engine.create_stream("raw")
        engine.create_subscription("grouped", Query.stream("raw").group_by(key_of).flat_map(running_count))
        engine.create_subscription("sum", Query.stream("raw").scan(0, operator.add))
        engine.append_many("raw", [(i, T0) for i in range(6)])
        engine.process()
        engine.checkpoint()
    return state_rows(store)


@pytest.mark.usefixtures("general_path")  # the general path's own units
@pytest.mark.parametrize("damage", ["checksum", "shape"])
def test_a_broken_inner_state_fails_its_query_and_every_stored_byte_of_it_stays(store: StoreSql, damage: str) -> None:
    stored = build_grouped(store)
    inner = sorted(key for key in stored if key.startswith("grouped/"))
    assert len(inner) == 3
    if damage == "checksum":
        corrupt_state(store, inner[1])
    else:  # a valid blob of another query: the load finds the wrong operators
        store.execute("UPDATE reaqtive_blobs SET value = ? WHERE category = 'state' AND key = ?",
                      (stored["sum"], inner[1]))
    before = state_rows(store)
    with Engine(store.target, allow_modules=[__name__], recovery_policy=RecoveryPolicy.KEEP) as engine:
        assert [f.uri for f in engine.recovery.failures] == ["grouped"]
        assert inner[1] in str(engine.recovery.failures[0].error)
        engine.append("raw", 100, T0)
        engine.process()
        engine.checkpoint(full=True)
        assert [o.value for o in engine.outputs("sum")][-1] == 115
    after = state_rows(store)
    assert {k: v for k, v in after.items() if k.startswith("grouped")} == {
        k: v for k, v in before.items() if k.startswith("grouped")
    }, "nothing of the broken query was deleted or rewritten"


def test_the_remove_policy_deletes_a_broken_query_with_its_inner_states(store: StoreSql) -> None:
    stored = build_grouped(store)
    inner = sorted(key for key in stored if key.startswith("grouped/"))
    corrupt_state(store, inner[0])
    with Engine(store.target, allow_modules=[__name__], recovery_policy=RecoveryPolicy.REMOVE) as engine:
        assert [f.uri for f in engine.recovery.failures] == ["grouped"]
        engine.checkpoint()
    assert list(state_rows(store)) == ["sum"]


def plant_orphan(store: StoreSql, orphan: str) -> bytes:
    """A state row no artifact owns, with a valid checksum (as damage, or a bug, could leave behind)."""
    value = stored_state(store, "sum")
    store.execute("INSERT INTO reaqtive_blobs (category, key, value, crc) VALUES ('state', ?, ?, ?)",
                  (orphan, value, row_checksum("state", orphan, value)))
    return value


def state_rows(store: StoreSql) -> dict[str, bytes]:
    """The state rows, in the order of their keys' bytes on both stores."""
    rows = store.rows("SELECT key, value FROM reaqtive_blobs WHERE category = 'state'")
    return {key: bytes(value) for key, value in sorted(rows, key=lambda row: row[0].encode())}


@pytest.mark.parametrize("orphan", ["grouped/group_by0/99", "gone://query"])
def test_a_state_no_recovered_query_claims_goes_through_the_recovery_policy(store: StoreSql, orphan: str) -> None:
    stored = build_grouped(store)
    blob = plant_orphan(store, orphan)
    with pytest.raises(RecoveryError, match=orphan):
        Engine(store.target, allow_modules=[__name__])
    with Engine(store.target, allow_modules=[__name__], recovery_policy=RecoveryPolicy.KEEP) as engine:
        assert [f.uri for f in engine.recovery.failures] == [orphan] and engine.status is EngineStatus.DEGRADED
        assert engine.recovery.subscriptions == 2, "the queries themselves recovered and run"
        engine.checkpoint(full=True)
    assert state_rows(store)[orphan] == blob, "KEEP kept it, byte for byte"
    with Engine(store.target, allow_modules=[__name__], recovery_policy=RecoveryPolicy.REMOVE) as engine:
        assert engine.recovery.orphans == [orphan] and engine.status is EngineStatus.RUNNING
        engine.checkpoint()
    assert set(state_rows(store)) == set(stored), "REMOVE deleted the orphan; everything else stayed"


def terminate_sessions(store: StoreSql) -> int:
    """End every session on the store's database, as a server restart or a network failure would."""
    server, name = str(store.target).rsplit("/", 1)
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        row = admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s",
                            (name,)).fetchone()
    return int(row[0]) if row else 0


def test_on_postgresql_lost_connections_fail_each_operation_with_a_store_error_and_lose_nothing_committed(
    postgres_dsn: str,
) -> None:
    store = StoreSql(postgres_dsn)
    engine = Engine(store.target, allow_modules=[__name__])
    try:
        engine.create_stream("raw")
        engine.create_subscription("q", Query.stream("raw").scan(0, operator.add))
        engine.append_many("raw", [(i, T0 + timedelta(seconds=i)) for i in range(5)])
        engine.process()
        engine.checkpoint()
        assert terminate_sessions(store) >= 1
        steps = {"append": lambda: engine.append("raw", 99, T0), "process": engine.process,
                 "checkpoint": engine.checkpoint, "outputs": lambda: engine.outputs("q")}
        for step, call in steps.items():
            with pytest.raises(StateError, match=r"postgresql://.*failed"):  # a StoreError, or a CheckpointError
                call()
                pytest.fail(f"{step} worked without its connection")
    finally:
        engine.close()
    with Engine(store.target, allow_modules=[__name__]) as engine:
        assert engine.status is EngineStatus.RUNNING
        engine.append("raw", 5, T0 + timedelta(seconds=5))
        engine.process()
        assert [o.value for o in engine.outputs("q")] == [0, 1, 3, 6, 10, 15], "the failed append left nothing"
