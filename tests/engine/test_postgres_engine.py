"""The engine on PostgreSQL (``Engine("postgresql://...")``): the same behaviour as on an SQLite file — a
differential test runs random workloads on both and compares what they show — plus the rules of a store that
lives in a server: one writer per schema (released when the holder closes or is killed), layouts it does not know
refused untouched, rows changed behind its back reported as in the file, reads through the indexes, two
connections, clear errors for a bad DSN or an unreachable server."""

from __future__ import annotations

import itertools
import operator
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reaqtive import Query
from reaqtive.engine import AckError, Engine, EngineStore, PostgresEngineStore, UnknownEngineVersionError
from reaqtive.engine import database as engine_database
from reaqtive.engine.database import MEMORY, ingress_checksum, outputs_query
from reaqtive.engine.ingress import GroupCommit, IngressCommit
from reaqtive.engine.postgres_database import postgres_sql
from reaqtive.engine.stores import open_engine_store
from reaqtive.state import DEFAULT_CODEC, DamagedRowError, StoreConnectionError, StoreError, StoreLockedError
from reaqtive.state.postgres_store import InvalidDsnError

T0 = datetime(2026, 1, 1, tzinfo=UTC)
FAR_AHEAD = T0 + timedelta(days=1000)  # beyond max_event_time_ahead: quarantined when appended
_SCHEMAS = itertools.count()


def double(x: int) -> int:
    return x * 2


@pytest.fixture
def db(postgres_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection of the test's own to the database, behind the engine's back."""
    with psycopg.connect(postgres_dsn, autocommit=True) as connection:
        yield connection


def fresh_schema(dsn: str, admin: psycopg.Connection[Any]) -> str:
    """The DSN of a new, empty schema of the database (cheaper than a database per hypothesis example)."""
    name = f"w{next(_SCHEMAS)}"
    admin.execute(f"CREATE SCHEMA {name}")
    return f"{dsn}?options=-csearch_path%3D{name}"


def open_engine(target: str | Path, **options: Any) -> Engine:
    options.setdefault("start", T0)
    options.setdefault("allow_modules", [__name__])
    return Engine(target, synchronous="OFF", **options)


def setup(engine: Engine) -> None:
    engine.create_stream("a")
    engine.create_stream("b")
    engine.create_subscription("q://sum", Query.stream("a").scan(0, operator.add))
    engine.create_subscription("q://doubled", Query.stream("b").map(double))


# -- the same workload on both stores -------------------------------------------------------------------------------

Op = tuple[Any, ...]
OPS = st.one_of(
    st.tuples(st.just("append"), st.sampled_from(["a", "b"]), st.lists(st.integers(-10**6, 10**6), max_size=40),
              st.booleans()),
    st.tuples(st.just("process"), st.sampled_from([None, 1, 7])),
    st.tuples(st.just("checkpoint")),
    st.tuples(st.just("reopen")),
    st.tuples(st.just("ack"), st.sampled_from(["q://sum", "q://doubled"]), st.integers(-1, 60)),
    st.tuples(st.just("trim")),
    st.tuples(st.just("cursor"), st.sampled_from(["q://sum", "q://doubled"]), st.integers(-1, 60),
              st.sampled_from([None, 1, 5])),
)


def run(target: str | Path, ops: list[Op], commit: IngressCommit) -> list[object]:
    """Run ``ops`` on a new engine at ``target``; what every step showed, and what the store holds at the end."""
    seen: list[object] = []
    clock = itertools.count(1)
    engine = open_engine(target, ingress_commit=commit)
    try:
        setup(engine)
        for op in ops:
            kind = op[0]
            try:
                if kind == "append":
                    _, stream, values, late = op
                    events = [(v, T0 + timedelta(seconds=next(clock))) for v in values]
                    if late and events:
                        events[len(events) // 2] = (events[len(events) // 2][0], FAR_AHEAD)
                    seen.append(engine.append_many(stream, events))
                elif kind == "process":
                    seen.append(engine.process(op[1]))
                elif kind == "checkpoint":
                    engine.checkpoint()
                elif kind == "reopen":
                    engine.close()
                    engine = open_engine(target, ingress_commit=commit)
                elif kind == "ack":
                    engine.ack(op[1], op[2])
                elif kind == "trim":
                    seen.append(engine.trim())
                else:
                    _, uri, after, limit = op
                    seen.append([(o.seq, o.value) for o in engine.outputs(uri, after=after, limit=limit)])
            except AckError as error:
                seen.append(("AckError", type(error).__name__))
        engine.process()
        store = engine._store
        seen.append({uri: [(o.seq, o.value) for o in engine.outputs(uri)] for uri in ("q://sum", "q://doubled")})
        seen.append([(d.stream, d.seq, d.pos, d.time, d.value, d.reason.split(" after ")[0], d.damage)
                     for d in store.dead_letters()])  # (the reason ends with the wall clock)
        seen.append((store.stream_heads(), store.ingress_counts(), store.first_retained(), store.last_position()))
        seen.append((store.acks(), store.output_extents(), store.max_output_seqs()))
        seen.append(store.read_outputs())
        snapshot = store.checkpoints.read()
        seen.append((snapshot.checkpoint_id, {c: snapshot.keys(c) for c in snapshot.categories()}))
    finally:
        engine.close()
    return seen


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OPS, max_size=14), commit=st.sampled_from(["call", GroupCommit(events=7, seconds=3600)]))
def test_a_random_workload_shows_the_same_on_postgres_as_on_sqlite(
    postgres_dsn: str, db: psycopg.Connection[Any], ops: list[Op], commit: IngressCommit
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        expected = run(Path(directory) / "s.db", ops, commit)
    assert run(fresh_schema(postgres_dsn, db), ops, commit) == expected


# -- one writer -----------------------------------------------------------------------------------------------------


def test_a_second_engine_is_refused_naming_the_database_and_the_holder(postgres_dsn: str) -> None:
    with open_engine(postgres_dsn) as first:
        with pytest.raises(StoreLockedError, match=f"pid {os.getpid()}") as caught:
            open_engine(postgres_dsn)
        assert caught.value.pid == os.getpid() and caught.value.path == first.path
        assert str(first.path).startswith("postgresql://postgres@127.0.0.1:")


def advisory_locks(db: psycopg.Connection[Any]) -> int:
    (count,) = db.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted").fetchone()
    return int(count)


def test_the_lock_is_released_when_the_engine_closes(postgres_dsn: str, db: psycopg.Connection[Any]) -> None:
    engine = open_engine(postgres_dsn)
    assert advisory_locks(db) == 1
    engine.close()
    assert advisory_locks(db) == 0
    with open_engine(postgres_dsn) as again:
        assert isinstance(again._store, PostgresEngineStore)


def test_engines_on_two_schemas_of_one_database_do_not_block_each_other(
    postgres_dsn: str, db: psycopg.Connection[Any]
) -> None:
    with open_engine(fresh_schema(postgres_dsn, db)), open_engine(fresh_schema(postgres_dsn, db)):
        pass


_HOLDER = """
import sys
from reaqtive.engine import Engine
engine = Engine(sys.argv[1])
print("ready", flush=True)
sys.stdin.read()
"""


def test_a_killed_engines_lock_goes_with_its_connection(postgres_dsn: str) -> None:
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, postgres_dsn], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
        with pytest.raises(StoreLockedError) as caught:
            open_engine(postgres_dsn)
        assert caught.value.pid == holder.pid
    finally:
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + 30  # the server notices the closed connection at once; allow a slow machine
    while True:
        try:
            engine = open_engine(postgres_dsn)
        except StoreLockedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
            continue
        engine.close()
        break


# -- layouts --------------------------------------------------------------------------------------------------------


def test_an_unknown_engine_layout_is_refused_and_left_untouched(postgres_dsn: str, db: psycopg.Connection[Any]) -> None:
    four_sums(postgres_dsn)
    db.execute("UPDATE reaqtive_meta SET value = '99' WHERE key = 'engine_schema_version'")
    before = db.execute("SELECT key, value FROM reaqtive_meta ORDER BY key").fetchall()
    with pytest.raises(UnknownEngineVersionError, match=r"layout version 99.*left untouched"):
        open_engine(postgres_dsn)
    assert db.execute("SELECT key, value FROM reaqtive_meta ORDER BY key").fetchall() == before
    assert advisory_locks(db) == 0, "a refused open holds no lock"


def test_a_new_store_is_created_whole_in_one_transaction(postgres_dsn: str, db: psycopg.Connection[Any]) -> None:
    db.execute("CREATE SEQUENCE reaqtive_acks")  # in the way of the last engine table: creating it fails
    with pytest.raises(StoreError, match=r"opening the checkpoint store failed and was rolled back.*reaqtive_acks"):
        open_engine(postgres_dsn)
    rows = db.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'").fetchall()
    assert rows == [], "nothing was created"


# -- integrity ------------------------------------------------------------------------------------------------------


def forge_ingress_payload(execute: Callable[[str, tuple[object, ...]], list[tuple[Any, ...]]], pos: int) -> None:
    """Give the ingress row at ``pos`` other bytes (its checksum no longer matches)."""
    execute("UPDATE reaqtive_ingress SET payload = ? WHERE pos = ?", (DEFAULT_CODEC.encode("forged"), pos))


def test_a_forged_ingress_row_is_quarantined_as_in_the_sqlite_file(
    postgres_dsn: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    def sqlite_execute(sql: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
        import sqlite3

        with sqlite3.connect(tmp_path / "s.db") as connection:
            return connection.execute(sql, params).fetchall()

    def postgres_execute(sql: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
        cursor = db.execute(postgres_sql(sql), params)
        return cursor.fetchall() if cursor.description else []

    shown = []
    for target, execute in ((tmp_path / "s.db", sqlite_execute), (postgres_dsn, postgres_execute)):
        with open_engine(target) as engine:
            setup(engine)
            for i in range(3):
                engine.append_many("a", [(i, T0 + timedelta(seconds=i))])  # a row each, pos 1..3
        forge_ingress_payload(execute, 2)
        with open_engine(target) as engine:
            engine.process()
            letters = engine.dead_letters()
            shown.append(([(o.seq, o.value) for o in engine.outputs("q://sum")],
                          [(d.stream, d.seq, d.pos, d.value, d.reason[:40]) for d in letters]))
    assert shown[0] == shown[1]
    assert shown[1][0] == [(0, 0), (1, 2)] and [letter[:3] for letter in shown[1][1]] == [("a", 1, 2)]


def four_sums(dsn: str, *, acked: int | None = None) -> None:
    """An engine at ``dsn`` whose q://sum produced outputs 0..3 (one row), acknowledged up to ``acked``."""
    with open_engine(dsn) as engine:
        setup(engine)
        engine.append_many("a", [(i, T0 + timedelta(seconds=i)) for i in range(4)])
        engine.process()
        if acked is not None:
            engine.ack("q://sum", acked)


def test_a_forged_output_is_a_damaged_row_naming_it(postgres_dsn: str, db: psycopg.Connection[Any]) -> None:
    four_sums(postgres_dsn)
    db.execute("UPDATE reaqtive_egress SET payload = %s", (DEFAULT_CODEC.encode(7) * 4,))
    with open_engine(postgres_dsn) as engine, pytest.raises(DamagedRowError, match=r"q://sum#0-3") as caught:
        engine.outputs("q://sum")
    assert caught.value.table == "reaqtive_egress"


def test_a_forged_acknowledgement_keeps_its_outputs(postgres_dsn: str, db: psycopg.Connection[Any]) -> None:
    four_sums(postgres_dsn, acked=1)
    db.execute("UPDATE reaqtive_acks SET seq = 3")
    store = open_engine_store(postgres_dsn)
    try:
        with pytest.raises(DamagedRowError, match="acknowledgement of 'q://sum'"):
            store.acked("q://sum")
        assert store.trim_outputs() == 0
        assert [seq for (_, seq, _) in store.read_outputs("q://sum")] == [0, 1, 2, 3]
    finally:
        store.close()


def test_a_dead_letter_keeps_a_damaged_rows_times_bytes(postgres_dsn: str) -> None:
    store = open_engine_store(postgres_dsn, synchronous="OFF")
    try:
        store.append("a", [(1, T0), (2, T0 + timedelta(seconds=1))])
        with store._transaction("test") as connection:  # times that cannot be read, under a matching checksum
            times, payload = b"\xc1", DEFAULT_CODEC.encode(1) + DEFAULT_CODEC.encode(2)
            connection.execute("UPDATE reaqtive_ingress SET times = %s, crc = %s WHERE pos = 1",
                               (times, ingress_checksum(1, "a", 0, 2, times, payload)))
        (run,) = store.read_ingress_runs(0, 10)
        assert run.damage is not None and run.micros == []
        assert store.quarantine([(event, "test") for event in run.events()]) == 2
        assert store.quarantine([(event, "test") for event in run.events()]) == 0, "already there"
        letters = store.dead_letters()
        assert [(d.seq, d.time, d.damage, d.payload) for d in letters] == [
            (0, None, None, DEFAULT_CODEC.encode(1)), (1, None, None, DEFAULT_CODEC.encode(2))]
    finally:
        store.close()


def test_an_append_the_server_refuses_writes_nothing_and_the_store_goes_on(
    postgres_dsn: str, db: psycopg.Connection[Any]
) -> None:
    store = open_engine_store(postgres_dsn, synchronous="OFF")
    try:
        assert store.append("a", [(1, T0)]) == [0]
        db.execute("UPDATE reaqtive_stream_heads SET next_seq = 0")  # the next append collides with (a, 0)
        with pytest.raises(StoreError, match=r"appending to stream 'a' failed and was rolled back: duplicate key"):
            store.append("a", [(2, T0), (3, T0)])
        assert store.last_position() == 1 and store.read_ingress(0, 10)[0].value == 1
        with pytest.raises(StoreError, match="NUL"):  # refused by the driver, before the server
            store.append("a\x00b", [(2, T0)])
        db.execute("UPDATE reaqtive_stream_heads SET next_seq = 1")
        assert store.append("a", [(2, T0)]) == [1]
        assert [event.value for event in store.read_ingress(0, 10)] == [1, 2]
    finally:
        store.close()


# -- reads and connections ------------------------------------------------------------------------------------------


def test_an_output_cursor_seeks_the_primary_key(
    postgres_dsn: str, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_database, "EGRESS_ROW_OUTPUTS", 1)  # a row per output: a consumer polling often
    store = open_engine_store(postgres_dsn, synchronous="OFF")
    try:
        store.write_outputs([("q://sum", i, i) for i in range(20_000)])
        store.write_outputs([("q://other", i, i) for i in range(1_000)])
    finally:
        store.close()
    db.execute("ANALYZE")
    for limit in (None, 100):
        sql, params = outputs_query("q://sum", 19_990, None, limit)
        plan = " | ".join(row[0] for row in db.execute(f"EXPLAIN {postgres_sql(sql)}", params).fetchall())
        assert "reaqtive_egress_pkey" in plan, plan
        assert "Seq Scan" not in plan and "Sort" not in plan, plan


def test_an_engine_holds_two_connections(postgres_dsn: str, db: psycopg.Connection[Any]) -> None:
    with open_engine(postgres_dsn) as engine:
        setup(engine)
        engine.append_many("a", [(1, T0)])
        engine.process()
        engine.checkpoint()
        (count,) = db.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                              "AND application_name LIKE 'reaqtive %%'").fetchone()
    assert count == 2


def test_the_store_is_chosen_by_the_target() -> None:
    assert type(open_engine_store(MEMORY)) is EngineStore
    with pytest.raises(InvalidDsnError):
        open_engine_store("postgresql://app@db/events?nosuchoption=1")


def test_an_unreachable_server_is_a_clear_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(StoreConnectionError, match=f"postgresql://app@127.0.0.1:{port}/events: cannot connect"):
        Engine(f"postgresql://app:pw@127.0.0.1:{port}/events")


def test_without_psycopg_the_sqlite_engine_works_and_a_postgres_url_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # an import of it now raises ImportError
    with open_engine(tmp_path / "s.db") as engine:
        setup(engine)
    with pytest.raises(StoreError, match=r"psycopg 3, which is not installed: pip install 'reaqtive\[postgres\]'"):
        Engine("postgresql://app@localhost/events")


def test_a_table_locked_by_another_session_fails_the_append_after_the_lock_timeout(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As SQLite's busy timeout bounds a wait for a locked file, lock_timeout bounds a wait for a locked table:
    the append fails with a StoreError saying so, the log is unchanged, and the engine carries on."""
    from reaqtive.state import postgres_store

    monkeypatch.setattr(postgres_store, "LOCK_TIMEOUT_SECONDS", 0.3)
    with open_engine(postgres_dsn) as engine:
        engine.create_stream("raw")
        engine.append("raw", 1, T0)
        with psycopg.connect(postgres_dsn) as holder:
            holder.execute("LOCK TABLE reaqtive_ingress IN ACCESS EXCLUSIVE MODE")
            started = time.monotonic()
            with pytest.raises(StoreError, match="held a lock"):
                engine.append("raw", 2, T0)
            assert time.monotonic() - started < 10
            holder.rollback()
        assert engine.append("raw", 3, T0) == 1  # the refused append took no number
        assert engine.streams()["raw"].appended == 2
