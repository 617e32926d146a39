"""What recovery checks between the checkpoint store and the durable sink, and the errors it reports (issue 29).

* **The sink's tail** (item 4): a committed output counter ``N`` means outputs up to ``#N-1`` reached the durable
  sink (or an observer's outbox) before the checkpoint committed; a hole, a missing head or a missing tail fails
  recovery under the policy. What is acknowledged and trimmed, delivered to an observer, discarded, or written
  provisionally with the wall clock is not missing.
* **One transaction per deletion** (item 5): deleting a subscription deletes its record, state, counters, sink
  rows and acknowledgement together, or nothing (a step that fails, a process killed with SIGKILL).
* **The orphan rule** (item 7): a state, an output counter, an observer cursor, sink rows or an acknowledgement
  that belongs to no subscription (a subscription's record rewritten as a stream's, with a valid checksum, say)
  goes through the recovery policy.
* **Typed errors** (item 9): text SQLite cannot decode is damage, metadata that does not match the tables is a
  :class:`StoreLayoutError`, and the errors users meet are in ``docs/engine.md``.

Every test that involves a store runs on an SQLite file and on a PostgreSQL database, damaging rows through SQL.
"""

from __future__ import annotations

import json
import operator
import os
import signal
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from reaqtive import Query
from reaqtive.engine import (
    DISCARD_SINK,
    DURABLE_SINK,
    ArtifactNotFoundError,
    Engine,
    EngineStatus,
    Output,
    RecoveryError,
    RecoveryPolicy,
)
from reaqtive.engine.database import ENGINE_SCHEMA_VERSION, EngineStore, ack_checksum, egress_checksum
from reaqtive.engine.engine_errors import OrphanedDataError
from reaqtive.engine.stores import open_engine_store
from reaqtive.state import InMemoryCheckpointStore, MissingStateError, StoreCorruptError, StoreError
from reaqtive.state.postgres_store import postgres_error
from reaqtive.state.sqlite_store import StoreLayoutError, row_checksum, store_error
from tests.engine.store_targets import STORES, StoreSql, store_sql

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 4, 1, tzinfo=UTC)


def at(i: int) -> datetime:
    return T0 + timedelta(seconds=i)


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreSql:
    return store_sql(request.param, tmp_path, request)


# -- what the store holds -------------------------------------------------------------------------------------------


def contents(store: StoreSql) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the tables recovery reads, in a stable order (bytes as bytes on both stores)."""
    tables = {
        "reaqtive_blobs": "SELECT category, key, value, crc FROM reaqtive_blobs",
        "reaqtive_egress": "SELECT subscription, seq, count, payload, crc FROM reaqtive_egress",
        "reaqtive_acks": "SELECT subscription, seq, crc FROM reaqtive_acks",
    }
    return {table: sorted(tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
                          for row in store.rows(sql)) for table, sql in tables.items()}


def under(store: StoreSql, uri: str) -> dict[str, list[tuple[Any, ...]]]:
    """What the store holds under ``uri``: its blobs (state, counter, cursor, record), sink rows, acknowledgement."""
    everything = contents(store)
    return {
        "reaqtive_blobs": [row for row in everything["reaqtive_blobs"] if row[1] == uri],
        "reaqtive_egress": [row for row in everything["reaqtive_egress"] if row[0] == uri],
        "reaqtive_acks": [row for row in everything["reaqtive_acks"] if row[0] == uri],
    }


def nothing_under(store: StoreSql, uri: str) -> bool:
    return not any(under(store, uri).values())


def put_blob(store: StoreSql, category: str, key: str, value: bytes) -> None:
    """A blob with a valid checksum, as a forger (or a bug) would write it: the checksum is no defence."""
    store.execute("DELETE FROM reaqtive_blobs WHERE category = ? AND key = ?", (category, key))
    store.execute("INSERT INTO reaqtive_blobs (category, key, value, crc) VALUES (?, ?, ?, ?)",
                  (category, key, value, row_checksum(category, key, value)))


def sink_rows(store: StoreSql, uri: str) -> list[tuple[int, int]]:
    """``(first, last)`` of each durable-sink row of ``uri``."""
    return [(int(first), int(last)) for first, last in store.rows(
        "SELECT seq - count + 1, seq FROM reaqtive_egress WHERE subscription = ? ORDER BY seq", (uri,))]


def build(store: StoreSql, outputs: int = 6, *, ack: int | None = 1) -> None:
    """Subscriptions ``q`` and ``other`` (running sums of ``raw``), ``outputs`` events processed one by one and
    each output flushed to the sink in a row of its own, ``q`` acknowledged up to ``ack``, a checkpoint."""
    with Engine(store.target) as engine:
        engine.create_stream("raw")
        engine.create_subscription("q", Query.stream("raw").scan(0, operator.add))
        engine.create_subscription("other", Query.stream("raw").scan(0, operator.add))
        for i in range(outputs):
            engine.append("raw", i + 1, at(i))
            engine.process()
            engine.outputs("q")  # flushes: one row per output
        if ack is not None:
            engine.ack("q", ack)
        engine.checkpoint()


def values(engine: Engine, uri: str) -> list[tuple[int, Any]]:
    return [(output.seq, output.value) for output in engine.outputs(uri)]


# -- item 4: the durable sink's tail --------------------------------------------------------------------------------


SINK_DAMAGE = {
    "tail": "the last two rows deleted",
    "counter": "the output counter forged ahead of the sink",
    "hole": "a row in the middle deleted",
    "head": "the first row after the acknowledgement deleted",
}


def damage_sink(store: StoreSql, damage: str) -> str:
    """Damage ``q``'s outputs; returns the missing outputs the error must name."""
    if damage == "tail":
        store.execute("DELETE FROM reaqtive_egress WHERE subscription = 'q' AND seq >= 4")
        return "#4 to #5"
    if damage == "counter":
        put_blob(store, "outputs", "q", b"9")
        return "#6 to #8"
    if damage == "hole":
        store.execute("DELETE FROM reaqtive_egress WHERE subscription = 'q' AND seq = 3")
        return "#3"
    store.execute("DELETE FROM reaqtive_egress WHERE subscription = 'q' AND seq = 2")
    return "#2"


@pytest.mark.parametrize("damage", list(SINK_DAMAGE))
def test_outputs_missing_from_the_durable_sink_fail_recovery_under_the_policy(store: StoreSql, damage: str) -> None:
    """A lost tail, or a counter ahead of the sink, must not open RUNNING with outputs gone for good and the
    numbering jumping; like a hole or a missing head, it is a recovery failure of that subscription."""
    build(store)
    missing = damage_sink(store, damage)
    before = contents(store)
    with pytest.raises(RecoveryError, match="'q'") as failure:
        Engine(store.target)
    assert isinstance(failure.value.error, MissingStateError), failure.value.error
    assert f"outputs {missing} are missing from the durable sink" in str(failure.value), failure.value
    assert contents(store) == before, "FAIL changes nothing"

    with Engine(store.target, recovery_policy=RecoveryPolicy.KEEP) as engine:
        assert [f.uri for f in engine.recovery.failures] == ["q"] and engine.status is EngineStatus.DEGRADED
        engine.append("raw", 100, at(100))
        engine.process()
        engine.checkpoint(full=True)
        assert values(engine, "other")[-1] == (6, 121), "the others run on"
    assert under(store, "q") == {table: [row for row in rows if row[0 if table != "reaqtive_blobs" else 1] == "q"]
                                 for table, rows in before.items()}, "KEEP kept every byte of it"

    with Engine(store.target, recovery_policy=RecoveryPolicy.REMOVE) as engine:
        assert [f.uri for f in engine.recovery.failures] == ["q"]
        assert "q" not in {info.uri for info in engine.artifacts()}
    assert nothing_under(store, "q"), "REMOVE deleted it with its outputs and acknowledgement"
    with Engine(store.target) as engine:
        assert engine.status is EngineStatus.RUNNING and engine.recovery.failures == []


def test_numbering_never_jumps_over_a_lost_tail(store: StoreSql) -> None:
    """The issue's symptom, as a consumer would see it: before, the store opened RUNNING and the next output after
    a lost tail was numbered past the gap."""
    build(store)
    damage_sink(store, "tail")
    with Engine(store.target, recovery_policy=RecoveryPolicy.KEEP) as engine:
        engine.append("raw", 7, at(7))
        engine.process()
        assert "q" in {f.uri for f in engine.recovery.failures}
        assert [seq for seq, _ in values(engine, "q")] == [2, 3], "nothing numbered past the gap"


FAILING = [False]
received: list[int] = []


def receive(output: Output) -> None:
    """An observer function whose consumer is down while ``FAILING[0]``."""
    if FAILING[0]:
        raise RuntimeError("the consumer is down")
    received.append(output.seq)


def observed_engine(store: StoreSql) -> Engine:
    return Engine(store.target, allow_modules=[__name__], observer_backoff=0, observer_retries=1000)


def test_a_lost_outbox_row_fails_recovery(store: StoreSql) -> None:
    """An observer's outputs that waited at a checkpoint are in the store (its outbox) with the counter past
    them: one lost is missing, as in the durable sink."""
    FAILING[0] = True
    try:
        with observed_engine(store) as engine:
            engine.create_stream("raw")
            engine.define_observer("obs", receive)
            engine.create_subscription("q", Query.stream("raw").scan(0, operator.add), "obs")
            for i in range(2):
                engine.append("raw", i, at(i))
                engine.process()
                engine.checkpoint()  # the waiting output goes to the store, a row each
        assert sink_rows(store, "q") == [(0, 0), (1, 1)]
        store.execute("DELETE FROM reaqtive_egress WHERE subscription = 'q' AND seq = 1")
        with pytest.raises(RecoveryError, match="'q'") as failure:
            observed_engine(store)
        assert "outputs #1 are missing from its outbox" in str(failure.value)
    finally:
        FAILING[0] = False


def test_outputs_the_sink_need_not_hold_open_cleanly(store: StoreSql, monkeypatch: pytest.MonkeyPatch) -> None:
    """Legitimate stores: acknowledged outputs trimmed, delivered outputs of an observer deleted (and, after a
    crash between a checkpoint's commit and that deletion, left below the cursor beside later ones), the discard
    sink, provisional outputs of the wall clock."""
    build(store, ack=None)
    with Engine(store.target) as engine:
        engine.ack("q", 5)
        engine.checkpoint()  # trims everything of q
        assert sink_rows(store, "q") == []
    with Engine(store.target) as engine:
        assert engine.status is EngineStatus.RUNNING, engine.recovery.failures
        engine.append("raw", 10, at(10))
        engine.process()
        assert values(engine, "q") == [(6, 31)], "numbering goes on from the counter"
        engine.create_subscription("dropped", Query.stream("raw").scan(0, operator.add), DISCARD_SINK)
        engine.append("raw", 1, at(11))
        engine.process()
        engine.checkpoint()
    with Engine(store.target) as engine:
        assert engine.status is EngineStatus.RUNNING, engine.recovery.failures

    received.clear()
    with observed_engine(store) as engine:
        engine.define_observer("obs", receive)
        engine.create_subscription("watched", Query.stream("raw").scan(0, operator.add), "obs")
        FAILING[0] = True
        engine.append_many("raw", [(i, at(20 + i)) for i in range(3)])
        engine.process()
        engine.checkpoint()  # #0-#2 wait: written to the store
        assert sink_rows(store, "watched") == [(0, 2)]
        FAILING[0] = False
        # A crash between the next checkpoint's commit and the deletion of what was delivered up to its cursor:
        # the rows below the cursor stay.
        monkeypatch.setattr(EngineStore, "delete_outputs", lambda *args, **kwargs: None)
        engine.append_many("raw", [(i, at(30 + i)) for i in range(3)])
        engine.process()  # #0-#5 delivered
        engine.checkpoint()  # cursor #5, nothing waits
        FAILING[0] = True
        engine.append_many("raw", [(i, at(40 + i)) for i in range(2)])
        engine.process()
        engine.checkpoint()  # #6-#7 wait
    FAILING[0] = False
    monkeypatch.undo()
    assert sink_rows(store, "watched") == [(0, 2), (6, 7)] and received == list(range(6))
    with observed_engine(store) as engine:
        assert engine.status is EngineStatus.RUNNING, engine.recovery.failures
        engine.process()
        assert received == list(range(8)), "the waiting outputs were delivered after the restart"

    with Engine(store.target, clock="wall", allow_modules=[__name__]) as engine:
        engine.checkpoint()
        engine.append_many("raw", [(i, at(50 + i)) for i in range(3)])
        engine.process()
        engine.outputs("q")  # provisional: written after the checkpoint
    with Engine(store.target, clock="wall", allow_modules=[__name__]) as engine:
        assert engine.status is EngineStatus.RUNNING, engine.recovery.failures


# -- item 5: a deletion is one transaction --------------------------------------------------------------------------


def test_a_commit_carries_the_sinks_changes_with_the_blobs_or_nothing(
    store: StoreSql, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a deletion and a creation use: the checkpoint store's commit deletes a subscription's sink rows and
    acknowledgement and writes outputs, in its own transaction."""
    engine_store = open_engine_store(store.target)
    try:
        engine_store.write_outputs([("q", seq, seq * 10) for seq in range(3)] + [("r", 0, "kept")])
        engine_store.ack("q", 1)
        with monkeypatch.context() as patched:
            def broken(*args: object) -> None:
                raise OSError("the disk went away")

            patched.setattr(engine_store, "_insert_outputs", broken)
            with pytest.raises(OSError, match="the disk went away"):
                engine_store.commit_with_outputs([("state", "q", b"new")], forget=["q"], outputs=[("q", 0, "x")])
        assert engine_store.read_outputs("q") == [("q", 0, 0), ("q", 1, 10), ("q", 2, 20)], "nothing was deleted"
        assert engine_store.acked("q") == 1 and engine_store.checkpoints.read().get("state", "q") is None
        engine_store.commit_with_outputs([("state", "q", b"new")], [("outputs", "q")], forget=["q"],
                                         outputs=[("q", 0, "x"), ("q", 1, "y")])
        assert engine_store.read_outputs() == [("q", 0, "x"), ("q", 1, "y"), ("r", 0, "kept")]
        assert engine_store.acked("q") == -1 and engine_store.checkpoints.read().get("state", "q") == b"new"
    finally:
        engine_store.close()
    assert store.rows("SELECT seq FROM reaqtive_acks") == [], "the acknowledgement went with the rows"
    with InMemoryCheckpointStore().begin() as transaction, pytest.raises(StoreError, match="cannot change other"):
        transaction.run_in_commit(lambda connection: None)


def block_sink_deletions(store: StoreSql) -> None:
    """Make deleting ``q``'s rows from the durable sink fail, as a full disk or a lost connection would."""
    if store.kind == "sqlite":
        store.execute("CREATE TRIGGER keep_q BEFORE DELETE ON reaqtive_egress WHEN old.subscription = 'q' "
                      "BEGIN SELECT RAISE(ABORT, 'the disk went away'); END")
        return
    store.execute("CREATE FUNCTION keep_q() RETURNS trigger LANGUAGE plpgsql AS "
                  "$$ BEGIN RAISE EXCEPTION 'the disk went away'; END $$")
    store.execute("CREATE TRIGGER keep_q BEFORE DELETE ON reaqtive_egress FOR EACH ROW "
                  "WHEN (old.subscription = 'q') EXECUTE FUNCTION keep_q()")


def unblock_sink_deletions(store: StoreSql) -> None:
    store.execute("DROP TRIGGER keep_q" + ("" if store.kind == "sqlite" else " ON reaqtive_egress"))


def test_a_deletion_whose_sink_step_fails_deletes_nothing(store: StoreSql) -> None:
    build(store)
    before = under(store, "q")
    block_sink_deletions(store)
    with Engine(store.target) as engine:
        outputs = values(engine, "q")
        with pytest.raises(StoreError, match="the disk went away"):
            engine.delete_subscription("q")
        assert engine.info("q").running, "the subscription is still there, and runs"
        assert values(engine, "q") == outputs
    assert under(store, "q") == before, "nothing of it was deleted"
    unblock_sink_deletions(store)
    with Engine(store.target) as engine:
        assert engine.status is EngineStatus.RUNNING, engine.recovery.failures
        assert values(engine, "q") == outputs
        engine.delete_subscription("q")
    assert nothing_under(store, "q"), "record, state, counter, sink rows and acknowledgement: all gone at once"
    with Engine(store.target) as engine:
        assert engine.status is EngineStatus.RUNNING, engine.recovery.failures


DELETER = """
import operator, sqlite3, sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from reaqtive import Query
from reaqtive.engine import Engine
from reaqtive.engine.database import EngineStore

target, moment = sys.argv[1], sys.argv[2]
deleting = [False]

def pause():
    print("pause", flush=True)
    sys.stdin.readline()  # until the test kills this process
    sys.exit("not killed")

engine = Engine(target if target.startswith("postgresql") else Path(target))
engine.create_stream("raw")
engine.create_subscription("q", Query.stream("raw").scan(0, operator.add))
engine.create_subscription("other", Query.stream("raw").scan(0, operator.add))
for i in range(4):
    engine.append("raw", i + 1, datetime(2026, 4, 1, tzinfo=UTC) + timedelta(seconds=i))
    engine.process()
    engine.outputs("q")
engine.ack("q", 1)
engine.checkpoint()
checkpoints = engine._store.checkpoints
if moment == "between":  # where the deletion's second transaction (the sink's) began, if there is one
    delete_outputs = EngineStore.delete_outputs
    def deleting_outputs(self, subscription, *, upto=None):
        if deleting[0]:
            pause()
        return delete_outputs(self, subscription, upto=upto)
    EngineStore.delete_outputs = deleting_outputs
elif isinstance(getattr(checkpoints, "_connection", None), sqlite3.Connection):  # before the first COMMIT
    checkpoints._connection.set_trace_callback(lambda sql: pause() if deleting[0] and sql == "COMMIT" else None)
else:
    import psycopg
    exit_block = psycopg.Transaction.__exit__
    def exiting(transaction, *exc):
        if deleting[0] and exc[0] is None and transaction.connection is checkpoints.connection:
            pause()
        return exit_block(transaction, *exc)
    psycopg.Transaction.__exit__ = exiting
print("ready", flush=True)
deleting[0] = True
engine.delete_subscription("q")
pause()  # it returned: kill here
"""


def end_killed_sessions(store: StoreSql) -> None:
    """On PostgreSQL, end the killed process's sessions now (the server would notice the closed sockets a moment
    later), so that its writer lock is free."""
    if store.kind == "sqlite":
        return
    store.rows("SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
               "WHERE datname = current_database() AND pid <> pg_backend_pid()")


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
@pytest.mark.parametrize("moment", ["between", "commit"])
def test_a_kill_during_a_deletion_leaves_all_of_the_subscription_or_none(store: StoreSql, moment: str) -> None:
    """SIGKILL where the deletion of the sink's rows would begin (after the record and state were deleted, when
    those were two transactions) or before the deletion's commit: after the restart the subscription is all
    there or all gone, never its outputs without it."""
    deleter = subprocess.Popen([sys.executable, "-c", DELETER, str(store.target), moment], cwd=ROOT,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert deleter.stdout is not None
        markers = [deleter.stdout.readline().strip() for _ in range(2)]
        assert markers == ["ready", "pause"], (markers, deleter.stderr.read() if deleter.stderr else "")
        deleter.send_signal(signal.SIGKILL)
        deleter.wait(timeout=30)
    finally:
        if deleter.poll() is None:
            deleter.kill()
            deleter.wait()
    end_killed_sessions(store)
    with Engine(store.target) as engine:
        assert engine.status is EngineStatus.RUNNING, engine.recovery.failures
        uris = {info.uri for info in engine.artifacts()}
        if moment == "commit":
            assert "q" in uris and values(engine, "q") == [(2, 6), (3, 10)], "the deletion never committed"
            assert sink_rows(store, "q") and store.rows("SELECT seq FROM reaqtive_acks WHERE subscription = 'q'")
        else:
            assert "q" not in uris
    if moment != "commit":
        assert nothing_under(store, "q"), f"the deleted subscription left {under(store, 'q')}"


# -- item 7: the orphan rule ----------------------------------------------------------------------------------------


def rewrite_as_stream(store: StoreSql, uri: str, *, keep_fields: bool) -> None:
    """``uri``'s record rewritten with a valid checksum: kind "stream", its other fields kept or dropped."""
    [(blob,)] = store.rows("SELECT value FROM reaqtive_blobs WHERE category = 'artifacts' AND key = ?", (uri,))
    record = json.loads(bytes(blob))
    forged = {**record, "kind": "stream"} if keep_fields else {"kind": "stream", "created": record["created"]}
    put_blob(store, "artifacts", uri, json.dumps(forged).encode())


@pytest.mark.parametrize("keep_fields", [True, False], ids=["kind-changed", "stream-record"])
def test_a_subscription_record_rewritten_as_a_stream_fails_recovery_under_the_policy(
    store: StoreSql, keep_fields: bool
) -> None:
    build(store)
    rewrite_as_stream(store, "q", keep_fields=keep_fields)
    before, kept = contents(store), under(store, "q")
    with pytest.raises(RecoveryError, match="recovering 'q' failed") as failure:
        Engine(store.target)
    expected = "holds the fields of a subscription" if keep_fields else "belongs to no subscription"
    assert expected in str(failure.value), failure.value
    assert contents(store) == before, "FAIL changes nothing"

    with Engine(store.target, recovery_policy=RecoveryPolicy.KEEP) as engine:
        assert {f.uri for f in engine.recovery.failures} == {"q"} and engine.status is EngineStatus.DEGRADED
        engine.append("raw", 100, at(100))
        engine.process()
        engine.checkpoint(full=True)
        engine.trim()
        assert values(engine, "other")[-1] == (6, 121), "the others run on"
    assert under(store, "q") == kept, "KEEP kept every byte: state, counter, sink rows, acknowledgement"

    with Engine(store.target, recovery_policy=RecoveryPolicy.REMOVE) as engine:
        assert {f.uri for f in engine.recovery.failures} == {"q"}
        engine.checkpoint()
    leftover = under(store, "q")
    if not keep_fields:  # a valid stream record: the stream stays, what belonged to the subscription goes
        assert [row[0] for row in leftover.pop("reaqtive_blobs")] == ["artifacts"]
    assert not any(leftover.values()), leftover
    with Engine(store.target) as engine:
        assert engine.status is EngineStatus.RUNNING and engine.recovery.failures == []


ORPHAN = "gone://q"


def plant(store: StoreSql, what: str) -> None:
    """Rows under ``gone://q``, which is no artifact, each with a valid checksum."""
    if what == "counter":
        put_blob(store, "outputs", ORPHAN, b"3")
    elif what == "cursor":
        put_blob(store, "observed", ORPHAN, b"2")
    if what in ("sink", "ack"):
        store.execute("INSERT INTO reaqtive_acks (subscription, seq, crc) VALUES (?, ?, ?)",
                      (ORPHAN, 1, ack_checksum(ORPHAN, 1)))
    if what == "sink":  # q's rows, copied under another name
        for seq, count, payload in store.rows("SELECT seq, count, payload FROM reaqtive_egress "
                                              "WHERE subscription = 'q'"):
            store.execute("INSERT INTO reaqtive_egress (subscription, seq, count, payload, crc) VALUES (?, ?, ?, ?, ?)",
                          (ORPHAN, seq, count, payload, egress_checksum(ORPHAN, seq, count, bytes(payload))))


@pytest.mark.parametrize("what", ["counter", "cursor", "sink", "ack"])
def test_rows_under_a_uri_that_is_no_subscription_go_through_the_recovery_policy(store: StoreSql, what: str) -> None:
    build(store)
    plant(store, what)
    before, planted = contents(store), under(store, ORPHAN)
    with pytest.raises(RecoveryError, match=ORPHAN) as failure:
        Engine(store.target)
    assert isinstance(failure.value.error, OrphanedDataError) and failure.value.error.key == ORPHAN
    assert contents(store) == before
    with Engine(store.target, recovery_policy=RecoveryPolicy.KEEP) as engine:
        assert [f.uri for f in engine.recovery.failures] == [ORPHAN] and engine.status is EngineStatus.DEGRADED
        engine.append("raw", 100, at(100))
        engine.process()
        engine.checkpoint(full=True)
        engine.trim()
    assert under(store, ORPHAN) == planted, "KEEP kept every byte (trimming included)"
    with Engine(store.target, recovery_policy=RecoveryPolicy.REMOVE) as engine:
        assert engine.recovery.orphans == [ORPHAN] and engine.status is EngineStatus.RUNNING
    assert nothing_under(store, ORPHAN)
    with Engine(store.target) as engine:
        assert engine.status is EngineStatus.RUNNING and engine.recovery.failures == []


@pytest.mark.parametrize("observer", ["durable", "function"])
def test_a_subscription_created_under_a_kept_orphan_starts_afresh(store: StoreSql, observer: str) -> None:
    """What KEEP kept under a URI is replaced by a subscription created there: its numbering starts at #0, and
    an observer function is handed its own outputs only, not the kept ones."""
    build(store)
    plant(store, "sink")
    plant(store, "counter")
    received.clear()
    with Engine(store.target, recovery_policy=RecoveryPolicy.KEEP, allow_modules=[__name__]) as engine:
        assert engine.status is EngineStatus.DEGRADED
        if observer == "function":
            engine.define_observer("obs", receive)
        engine.create_subscription(ORPHAN, Query.stream("raw").scan(0, operator.add),
                                   "obs" if observer == "function" else DURABLE_SINK)
        assert engine.status is EngineStatus.RUNNING, "what was kept under its URI is replaced"
        engine.append("raw", 1, at(50))
        engine.process()
        if observer == "function":
            assert received == [0]
        else:
            assert values(engine, ORPHAN) == [(0, 1)], "its own numbering, from #0"
    with Engine(store.target, allow_modules=[__name__]) as engine:
        assert engine.status is EngineStatus.RUNNING, engine.recovery.failures
        if observer == "durable":
            assert values(engine, ORPHAN) == [(0, 1)]


def per_key(group: Any) -> Query[Any]:
    result: Query[Any] = group.scan(0, operator.add)
    return result


def parity(x: int) -> int:
    return x % 2


@pytest.mark.usefixtures("general_path")  # inner units of their own, with states under "groups/..."
def test_stores_with_nothing_orphaned_open_cleanly(store: StoreSql) -> None:
    """What looks like an orphan and is not: a deleted subscription (its rows gone with it), one deleted and
    created again, acknowledged outputs trimmed, inner units' states under ``<uri>/...``."""
    build(store)
    with Engine(store.target, allow_modules=[__name__]) as engine:
        engine.create_subscription("groups", Query.stream("raw").group_by(parity).flat_map(per_key))
        engine.append_many("raw", [(i, at(20 + i)) for i in range(4)])
        engine.process()
        engine.ack("q", 7)
        engine.delete_subscription("other")
        engine.checkpoint()
        engine.delete_subscription("q")
        engine.create_subscription("q", Query.stream("raw").scan(0, operator.add))
        engine.append("raw", 5, at(30))
        engine.process()
    assert any(key.startswith("groups/") for (key,) in store.rows("SELECT key FROM reaqtive_blobs"))
    with Engine(store.target, allow_modules=[__name__]) as engine:
        assert engine.status is EngineStatus.RUNNING and engine.recovery.failures == []
        assert values(engine, "q") == [(0, 5)]


# -- item 9: typed errors, documented ------------------------------------------------------------------------------


def test_text_sqlite_cannot_decode_is_reported_as_damage(tmp_path: Path) -> None:
    """A damaged page can hold text that is not UTF-8 where the store reads text strictly: that is damage
    (StoreCorruptError), not a plain StoreError. (PostgreSQL checks the encoding of the text it stores; what it
    reports as damaged data is classified the same way.)"""
    path = tmp_path / "s.db"
    EngineStore(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE reaqtive_meta SET key = CAST(X'666f726d6174ff' AS TEXT) WHERE key = 'format'")
    db.close()
    with pytest.raises(StoreCorruptError, match=r"s\.db: .*damaged.*Could not decode"):
        EngineStore(path)
    decode = sqlite3.OperationalError("Could not decode to UTF-8 column 'key' with text 'x'")
    assert isinstance(store_error(decode, "x.db", "reading"), StoreCorruptError)
    assert type(postgres_error(psycopg.errors.DataCorrupted("bad page"), "db", "reading")) is StoreCorruptError


def meta_tables(path: Path) -> tuple[dict[str, object], set[str]]:
    with sqlite3.connect(path) as db:
        meta = dict(db.execute("SELECT key, value FROM reaqtive_meta").fetchall())
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    db.close()
    return meta, tables


@pytest.mark.parametrize(("claimed", "tables"), [(1, "current"), (2, "current"), (3, "current"), (4, "layout 3")])
def test_metadata_claiming_another_layout_than_the_tables_is_refused_untouched(
    tmp_path: Path, claimed: int, tables: str
) -> None:
    """The engine layout in reaqtive_meta over tables of another layout: migrating would fail halfway (layout 2's
    migration reads ``sqlite_sequence``, which only its tables have) or misread them. A specific error, and the
    file as it was."""
    path = tmp_path / "s.db"
    with Engine(path) as engine:
        engine.create_stream("raw")
        engine.create_subscription("q", Query.stream("raw").scan(0, operator.add))
    with sqlite3.connect(path) as db:
        if tables == "layout 3":
            db.execute("DROP TABLE reaqtive_acks")
        db.execute("UPDATE reaqtive_meta SET value = ? WHERE key = 'engine_schema_version'", (claimed,))
    db.close()
    before, data = meta_tables(path), path.read_bytes()
    with pytest.raises(StoreLayoutError, match=f"s\\.db: reaqtive_meta says the engine tables are of layout {claimed}"):
        Engine(path)
    assert issubclass(StoreLayoutError, StoreCorruptError)
    assert meta_tables(path) == before and path.read_bytes() == data


def test_a_checkpoint_store_claiming_schema_1_over_schema_2_rows_is_refused_untouched(tmp_path: Path) -> None:
    """Migrating from schema 1 would mark every sound row damaged: rows that carry schema 2's checksums show that
    the metadata is wrong."""
    path = tmp_path / "s.db"
    with Engine(path) as engine:
        engine.create_stream("raw")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE reaqtive_meta SET value = 1 WHERE key = 'schema_version'")
    db.close()
    data = path.read_bytes()
    with pytest.raises(StoreLayoutError, match="schema version 1, but row artifacts/raw carries the row checksum"):
        Engine(path)
    assert path.read_bytes() == data


@pytest.mark.parametrize("change", ["ALTER TABLE reaqtive_egress DROP COLUMN count", "DROP TABLE reaqtive_acks"])
def test_on_postgresql_tables_that_are_not_the_layout_are_refused_untouched(postgres_dsn: str, change: str) -> None:
    store = StoreSql(postgres_dsn)
    with Engine(store.target) as engine:
        engine.create_stream("raw")
    store.execute(change)
    columns = "SELECT table_name, column_name FROM information_schema.columns WHERE table_name LIKE 'reaqtive%%'"
    before = (sorted(store.rows(columns)), sorted(store.rows("SELECT key, value::text FROM reaqtive_meta")))
    with pytest.raises(StoreLayoutError,
                       match=f"reaqtive_meta says the engine tables are of layout {ENGINE_SCHEMA_VERSION}"):
        open_engine_store(postgres_dsn)
    assert (sorted(store.rows(columns)), sorted(store.rows("SELECT key, value::text FROM reaqtive_meta"))) == before


def test_a_record_naming_a_missing_observer_fails_recovery_with_a_documented_error(store: StoreSql) -> None:
    with Engine(store.target, allow_modules=[__name__]) as engine:
        engine.create_stream("raw")
        engine.define_observer("obs", receive)
        engine.create_subscription("q", Query.stream("raw").scan(0, operator.add), "obs")
    store.execute("DELETE FROM reaqtive_blobs WHERE category = 'artifacts' AND key = 'obs'")
    with pytest.raises(RecoveryError, match=r"'q'.*'obs'") as failure:
        Engine(store.target, allow_modules=[__name__])
    assert isinstance(failure.value.error, ArtifactNotFoundError)
    failures = section(ROOT / "docs" / "engine.md", "### When something does not recover")
    assert "`ArtifactNotFoundError`" in failures, "the recovery failure list names it"


def section(path: Path, heading: str) -> str:
    """The text under ``heading`` (a Markdown heading line) up to the next heading of the same or a higher level."""
    text = path.read_text()
    start = text.index(f"\n{heading}\n")
    level = heading.split(" ", 1)[0]
    ends = [text.find(f"\n{'#' * depth} ", start + 1) for depth in range(1, len(level) + 1)]
    ends = [end for end in ends if end >= 0]
    return text[start: min(ends) if ends else len(text)]


def test_the_engine_documentation_names_every_store_error_users_meet() -> None:
    """Errors an engine's open or recovery raises, in the tables a user reads (docs/engine.md), not only in
    docs/state-format.md."""
    # The store errors' table (docs/engine.md, "When something does not recover") and the generated reference
    # (docs/reference/state.md, docs/reference/engine.md) name them.
    text = (ROOT / "docs" / "engine.md").read_text()
    for name in ("NotAStoreError", "UnknownStoreVersionError", "UnknownEngineVersionError", "StoreLayoutError",
                 "StoreCorruptError", "OrphanedDataError"):
        assert f"`{name}`" in text, f"{name} is not in docs/engine.md"
    failures = section(ROOT / "docs" / "engine.md", "### When something does not recover")
    for name in ("NotAStoreError", "UnknownStoreVersionError", "StoreLayoutError", "OrphanedDataError",
                 "MissingStateError"):
        assert f"`{name}`" in failures, f"{name} is not in docs/engine.md's recovery failures"
