"""Recovery under the policy, and subscriptions stopped while running, never at the cost of stored data.

Each test here stands for a defect of issue 14 (the item number is in its docstring): an inner state that fails to
load, a KEEP that deleted, a missing row, an unstorable output or state, an observer that raises.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from reaqtive import GroupedStream, Query
from reaqtive.core.errors import InvalidSettingError, QueryTooDeepError
from reaqtive.engine import (
    ArtifactNotFoundError,
    Engine,
    EngineStatus,
    FunctionRegistry,
    InnerRecoveryError,
    Output,
    QueryFailedError,
    RecoveryError,
    RecoveryPolicy,
    UnstorableOutputError,
    UnstorableStateError,
)
from reaqtive.operators.scan import ScanSeed
from reaqtive.state import DamagedRowError, MissingStateError, StateVersionError, StoreLockedError
from reaqtive.state.sqlite_store import row_checksum

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def add(total: int, value: int) -> int:
    return total + value


def key_of(x: int) -> int:
    return x % 3


def group_total(group: GroupedStream[int]) -> Query[Any]:
    return group.scan(0, add)


class Opaque:
    """A value the state codec cannot encode."""


def opaque_at_five(x: int) -> object:
    return Opaque() if x == 5 else x


def opaque_total(total: object, x: int) -> object:
    return Opaque() if x == 5 else x


def type_name(x: object) -> str:
    return type(x).__name__


FUNCTIONS = (add, key_of, group_total, opaque_at_five, opaque_total, type_name)


def registry() -> FunctionRegistry:
    functions = FunctionRegistry()
    for function in FUNCTIONS:
        functions.register(function.__name__, function)
    return functions


def at(i: int) -> datetime:
    return T0 + timedelta(seconds=i)


def rows(path: Path, category: str = "state") -> dict[str, bytes]:
    with sqlite3.connect(path) as db:
        return {key: bytes(value) for key, value in
                db.execute("SELECT key, value FROM reaqtive_blobs WHERE category = ?", (category,))}


def put_row(path: Path, category: str, key: str, value: bytes) -> None:
    with sqlite3.connect(path) as db:
        db.execute("INSERT OR REPLACE INTO reaqtive_blobs (category, key, value, crc) VALUES (?, ?, ?, ?)",
                   (category, key, value, row_checksum(category, key, value)))


def delete_row(path: Path, category: str, key: str) -> None:
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM reaqtive_blobs WHERE category = ? AND key = ?", (category, key))


def build(path: Path, monkeypatch: pytest.MonkeyPatch | None = None) -> None:
    """Two queries over one stream: per-key totals (three groups, each an inner unit), and a plain total."""
    with Engine(path, functions=registry(), start=T0) as engine:
        engine.create_stream("raw")
        engine.create_subscription("grouped", Query.stream("raw").group_by(key_of).flat_map(group_total))
        engine.create_subscription("total", Query.stream("raw").scan(add))  # no seed: another stage than the groups'
        engine.append_many("raw", [(i, at(i)) for i in range(6)])
        engine.process()
        engine.checkpoint()


def values(engine: Engine, uri: str) -> list[Any]:
    return [output.value for output in engine.outputs(uri)]


# -- item 4: an inner state that fails to load goes through the policy -------------------------------------------


@pytest.mark.usefixtures("general_path")  # the general path's own units
def test_an_inner_state_of_an_unknown_version_fails_recovery_naming_the_inner_unit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 4: after a deploy, the code no longer loads an inner unit's state version. Default FAIL refuses the
    open naming the inner id; KEEP keeps every byte of that query, healthy groups included."""
    path = tmp_path / "s.db"
    monkeypatch.setattr(ScanSeed, "version", (7,))  # the groups' scan state is written as version 7
    build(path)
    monkeypatch.undo()
    before = rows(path)
    inner = sorted(key for key in before if key.startswith("grouped/"))
    with pytest.raises(RecoveryError) as raised:
        Engine(path, functions=registry())
    assert raised.value.uri == "grouped" and inner[0] in str(raised.value)
    assert isinstance(raised.value.error, InnerRecoveryError)
    assert isinstance(raised.value.error.error, StateVersionError)
    assert rows(path) == before, "a refused open changes nothing"
    with Engine(path, functions=registry(), recovery_policy=RecoveryPolicy.KEEP) as engine:
        assert [f.uri for f in engine.recovery.failures] == ["grouped"] and engine.status is EngineStatus.DEGRADED
        assert engine.subscription_error("grouped") is None, "not ended: kept without running"
        engine.append("raw", 10, at(10))
        engine.process()
        engine.checkpoint(full=True)
        assert values(engine, "total")[-1] == 25, "the healthy query runs on"
    after = rows(path)
    assert {key: after[key] for key in before if key != "total"} == {
        key: value for key, value in before.items() if key != "total"
    }, "every stored byte of the failed query stays"


@pytest.mark.usefixtures("general_path")  # the general path's own units
def test_an_inner_state_malformed_behind_a_valid_checksum_fails_its_query(tmp_path: Path) -> None:
    """Item 4, the other way an inner state fails to load."""
    path = tmp_path / "s.db"
    build(path)
    inner = sorted(key for key in rows(path) if key.startswith("grouped/"))
    put_row(path, "state", inner[1], b"RQ\x01 not a state blob")
    with pytest.raises(RecoveryError, match=inner[1]):
        Engine(path, functions=registry())


# -- item 5: KEEP keeps everything ---------------------------------------------------------------------------------


def test_keep_keeps_the_state_of_a_subscription_whose_record_cannot_be_read(tmp_path: Path) -> None:
    """Item 5: an unparseable artifact record under KEEP is a failure, not an orphan to delete."""
    path = tmp_path / "s.db"
    build(path)
    put_row(path, "artifacts", "grouped", b'{"kind": "subscription", "created": 5}')
    before = rows(path)
    with Engine(path, functions=registry(), recovery_policy=RecoveryPolicy.KEEP) as engine:
        assert [f.uri for f in engine.recovery.failures] == ["grouped"]
        assert engine.recovery.orphans == []
        engine.append("raw", 10, at(10))
        engine.process()
        engine.checkpoint(full=True)
    after = rows(path)
    assert {key: after[key] for key in before if key.startswith("grouped")} == {
        key: value for key, value in before.items() if key.startswith("grouped")
    }
    assert rows(path, "artifacts")["grouped"] == b'{"kind": "subscription", "created": 5}'


def test_a_query_kept_without_running_resumes_exactly_once_it_can_be_recovered(tmp_path: Path) -> None:
    """Items 4 and 5: KEEP holds its input back and remembers where it stood, so fixing the cause (here: the
    function is registered again) resumes it with nothing lost and nothing twice, after checkpoints taken
    without it."""
    path = tmp_path / "s.db"
    build(path)
    incomplete = FunctionRegistry()
    for function in FUNCTIONS:
        if function is not group_total:
            incomplete.register(function.__name__, function)
    with Engine(path, functions=incomplete, recovery_policy=RecoveryPolicy.KEEP) as engine:
        assert [f.uri for f in engine.recovery.failures] == ["grouped"]
        engine.append_many("raw", [(i, at(i)) for i in range(6, 12)])
        engine.process()
        engine.checkpoint()
        engine.append("raw", 12, at(12))
        engine.process()
        engine.checkpoint()
    with Engine(path, functions=registry()) as engine:
        assert engine.status is EngineStatus.RUNNING
        engine.process()
        engine.checkpoint()
        engine.append("raw", 13, at(13))
        engine.process()
        totals = values(engine, "grouped")
    expected: list[int] = []
    sums = {0: 0, 1: 0, 2: 0}
    for i in range(14):
        sums[i % 3] += i
        expected.append(sums[i % 3])
    assert totals == expected


# -- item 6: missing rows are failures, never a restart from empty state ------------------------------------------


@pytest.mark.parametrize(
    ("category", "key"),
    [("state", "total"), ("state", "grouped/flat_map0/1"), ("outputs", "total"), ("templates", None)],
)
@pytest.mark.usefixtures("general_path")  # the general path's own units
def test_a_missing_row_fails_recovery_instead_of_restarting_from_empty_state(
    tmp_path: Path, category: str, key: str | None
) -> None:
    """Item 6: a deleted state row (top-level or inner), output counter or template."""
    path = tmp_path / "s.db"
    build(path)
    if key is None:
        key = next(iter(rows(path, category)))
    assert key in rows(path, category)
    delete_row(path, category, key)
    with pytest.raises(RecoveryError) as raised:
        Engine(path, functions=registry())
    assert isinstance(raised.value.error, (MissingStateError, InnerRecoveryError))


def test_a_missing_delivery_record_refuses_the_open(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    build(path)
    delete_row(path, "engine", "delivery")
    with pytest.raises(RecoveryError, match="delivery"):
        Engine(path, functions=registry(), recovery_policy=RecoveryPolicy.KEEP)


# -- item 9: an unstorable value stops only its subscription -------------------------------------------------------


def test_an_unstorable_output_stops_only_its_subscription(tmp_path: Path) -> None:
    """Item 9: a user function returns a value the store cannot hold."""
    path = tmp_path / "s.db"
    with Engine(path, functions=registry(), start=T0) as engine:
        engine.create_stream("raw")
        engine.create_subscription("odd", Query.stream("raw").map(opaque_at_five))
        engine.create_subscription("total", Query.stream("raw").scan(0, add))
        engine.append_many("raw", [(i, at(i)) for i in range(8)])
        assert engine.process() == 8
        engine.checkpoint()
        assert values(engine, "total") == [0, 1, 3, 6, 10, 15, 21, 28]
        assert values(engine, "odd") == [0, 1, 2, 3, 4], "up to the unstorable one"
        assert [f.uri for f in engine.faults] == ["odd"] and engine.status is EngineStatus.DEGRADED
        error = engine.faults[0].error
        assert isinstance(error, UnstorableOutputError) and "'odd'" in str(error) and "#5" in str(error)
    with Engine(path, functions=registry()) as engine:
        # It recovers from its last checkpoint, and stops again at the same output: nothing skipped.
        engine.process()
        assert [f.uri for f in engine.faults] == ["odd"]
        assert values(engine, "odd") == [0, 1, 2, 3, 4]


def test_an_unstorable_state_stops_only_its_subscription_and_the_checkpoint_commits(tmp_path: Path) -> None:
    """Item 9: the checkpoint used to fail for every subscription."""
    path = tmp_path / "s.db"
    with Engine(path, functions=registry(), start=T0) as engine:
        engine.create_stream("raw")
        engine.create_subscription("bad", Query.stream("raw").scan(0, opaque_total).map(type_name))
        engine.create_subscription("total", Query.stream("raw").scan(0, add))
        engine.append_many("raw", [(i, at(i)) for i in (1, 2, 3, 5)])
        engine.process()
        stored = rows(path)["bad"]
        metrics = engine.checkpoint()
        assert metrics.dirty_subscriptions == 1, "only 'total' was written"
        assert rows(path)["bad"] == stored, "its last good state stays"
        assert isinstance(engine.faults[0].error, UnstorableStateError) and "'bad'" in str(engine.faults[0].error)
        engine.append("raw", 4, at(6))
        engine.process()
        engine.checkpoint()
        assert values(engine, "total") == [1, 3, 6, 11, 15]


# -- item 10: an observer that raises ---------------------------------------------------------------------------


class FlakyObserver:
    """Raises on the given sequence numbers, ``times`` times each."""

    def __init__(self, failing: set[int], times: int) -> None:
        self.failing = {seq: times for seq in failing}
        self.received: list[tuple[int, object]] = []

    def __call__(self, output: Output) -> None:
        left = self.failing.get(output.seq, 0)
        if left:
            self.failing[output.seq] = left - 1
            raise ConnectionError(f"sink down at #{output.seq}")
        self.received.append((output.seq, output.value))


def observer_engine(path: Path, observer: FlakyObserver, retries: int = 3) -> Engine:
    functions = registry()
    functions.register("observer", observer)
    return Engine(path, functions=functions, start=T0, observer_retries=retries, observer_backoff=0)


def test_an_observer_that_raises_gets_the_output_again_nothing_is_skipped(tmp_path: Path) -> None:
    """Item 10: the output it raised on used to be lost, even across a restart."""
    path = tmp_path / "s.db"
    observer = FlakyObserver({2}, times=2)
    with observer_engine(path, observer) as engine:
        engine.create_stream("raw")
        engine.define_observer("obs://flaky", observer)
        engine.create_subscription("q", Query.stream("raw").scan(0, add), observer="obs://flaky")
        engine.append_many("raw", [(i, at(i)) for i in range(1, 6)])
        engine.process()  # delivery stops at #2 (first failure)
        assert observer.received == [(0, 1), (1, 3)]
        engine.process()  # second failure
        engine.process()  # delivered now
        assert observer.received == [(0, 1), (1, 3), (2, 6), (3, 10), (4, 15)]
        assert engine.faults == []


def test_undelivered_outputs_survive_a_restart_and_are_delivered_in_order(tmp_path: Path) -> None:
    """Item 10: across a restart. The checkpoint covers events whose outputs were not delivered yet."""
    path = tmp_path / "s.db"
    observer = FlakyObserver({1}, times=2)
    with observer_engine(path, observer) as engine:
        engine.create_stream("raw")
        engine.define_observer("obs://flaky", observer)
        engine.create_subscription("q", Query.stream("raw").scan(0, add), observer="obs://flaky")
        engine.append_many("raw", [(i, at(i)) for i in range(1, 4)])
        engine.process()
        engine.checkpoint()  # #1 failed twice: #1 and #2 wait, and are stored with the checkpoint
        assert observer.received == [(0, 1)]
    restarted = FlakyObserver(set(), times=0)
    with observer_engine(path, restarted) as engine:
        engine.append("raw", 4, at(4))
        engine.process()
        assert restarted.received == [(1, 3), (2, 6), (3, 10)]
        engine.checkpoint()
        assert engine.outputs("q") == [], "delivered outputs leave the store"


def test_an_observer_that_keeps_raising_stops_its_subscription_alone_and_keeps_its_outputs(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    observer = FlakyObserver({1}, times=100)
    with observer_engine(path, observer, retries=3) as engine:
        engine.create_stream("raw")
        engine.define_observer("obs://flaky", observer)
        engine.create_subscription("q", Query.stream("raw").scan(0, add), observer="obs://flaky")
        engine.create_subscription("total", Query.stream("raw").scan(0, add))
        engine.append_many("raw", [(i, at(i)) for i in range(1, 4)])
        for _ in range(3):
            engine.process()
        assert [f.uri for f in engine.faults] == ["q"] and "#1" in str(engine.faults[0].error)
        engine.append("raw", 4, at(4))
        engine.process()
        engine.checkpoint()
        assert values(engine, "total") == [1, 3, 6, 10]
    fixed = FlakyObserver(set(), times=0)
    with observer_engine(path, fixed) as engine:
        engine.process()
        assert fixed.received == [(1, 3), (2, 6), (3, 10)], "from the first undelivered one, nothing skipped"


# -- item 12 (engine part): settings are checked ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [("checkpoint_every_events", 2.5), ("checkpoint_every_events", 0), ("checkpoint_every_events", True),
     ("checkpoint_every_seconds", float("nan")), ("checkpoint_every_seconds", float("inf")),
     ("checkpoint_every_seconds", -1.0), ("observer_retries", 0), ("observer_backoff", float("nan"))],
)
def test_bad_settings_are_refused_with_a_typed_error_naming_them(tmp_path: Path, name: str, value: object) -> None:
    with pytest.raises(InvalidSettingError, match=name):
        Engine(tmp_path / "s.db", **{name: value})  # type: ignore[arg-type]


# -- item 8: event times out of bounds are quarantined, never delivered ---------------------------------------------


def test_an_event_dated_centuries_ahead_is_quarantined_at_append_and_never_hangs(tmp_path: Path) -> None:
    """Item 8: one event in year 2226 made a one-minute time buffer run for hours, at every restart."""
    path = tmp_path / "s.db"
    with Engine(path, functions=registry(), start=T0) as engine:
        engine.create_stream("raw")
        engine.create_subscription("per_minute", Query.stream("raw").buffer(timedelta(minutes=1)).map(len))
        far = datetime(2226, 1, 1, tzinfo=UTC)
        seqs = engine.append_many("raw", [(1, at(1)), (2, far), (3, at(61))])
        assert seqs == [0, 1, 2]
        assert engine.process() == 2, "the far one never entered the log"
        assert values(engine, "per_minute") == [1]
        (letter,) = engine.dead_letters()
        assert (letter.stream, letter.seq, letter.value, letter.time) == ("raw", 1, 2, far)
        assert "max_event_time_ahead" in letter.reason
    with Engine(path, functions=registry()) as engine:
        assert [(d.stream, d.seq) for d in engine.dead_letters("raw")] == [("raw", 1)]


def test_a_late_event_beyond_the_allowed_lateness_is_quarantined_the_same_way_after_a_replay(tmp_path: Path) -> None:
    """Item 8: the other bound. Decided by the engine's clock, so a replay after a crash decides the same."""
    path = tmp_path / "s.db"

    def open_engine() -> Engine:
        return Engine(path, functions=registry(), start=T0, allowed_lateness=timedelta(seconds=30))

    engine = open_engine()
    engine.create_stream("raw")
    engine.create_subscription("total", Query.stream("raw").scan(0, add))
    engine.checkpoint()
    engine.append_many("raw", [(1, at(100)), (2, at(80)), (4, at(60)), (8, at(101))])
    engine.process()
    assert values(engine, "total") == [1, 3, 11]
    engine.close()  # crash: replayed from the checkpoint
    with open_engine() as engine:
        engine.process()
        assert values(engine, "total") == [1, 3, 11]
        assert [(d.seq, "allowed_lateness" in d.reason) for d in engine.dead_letters()] == [(2, True)]


def test_a_damaged_log_row_is_quarantined_and_the_stream_goes_on(tmp_path: Path) -> None:
    """Item 12: a damaged ingress row raised IndexError at every process() call."""
    path = tmp_path / "s.db"
    with Engine(path, functions=registry(), start=T0) as engine:
        engine.create_stream("raw")
        engine.create_subscription("total", Query.stream("raw").scan(0, add))
        for i in (1, 2, 4):
            engine.append("raw", i, at(i))  # a row each (one append_many would write them as one row)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE reaqtive_ingress SET payload = x'c1' WHERE seq = 1")
    with Engine(path, functions=registry()) as engine:
        assert engine.process() == 3
        assert values(engine, "total") == [1, 5]
        (letter,) = engine.dead_letters()
        assert letter.seq == 1 and "checksum" in letter.reason
        assert engine.process() == 0, "nothing is left that fails again"


def test_a_lowered_output_counter_does_not_make_new_outputs_vanish_as_duplicates(tmp_path: Path) -> None:
    """Item 6: a counter forged lower (behind a valid checksum): the replayed outputs would reuse ids the sink
    holds, and INSERT OR IGNORE would drop them silently."""
    path = tmp_path / "s.db"
    with Engine(path, functions=registry(), start=T0) as engine:
        engine.create_stream("raw")
        engine.create_subscription("total", Query.stream("raw").scan(0, add))
        engine.append_many("raw", [(i, at(i)) for i in (1, 2, 3)])
        engine.process()
        engine.checkpoint()
        engine.append_many("raw", [(i, at(i)) for i in (4, 5)])
        engine.process()
        assert values(engine, "total") == [1, 3, 6, 10, 15]  # flushed, then the process dies
    assert rows(path, "outputs")["total"] == b"3"
    put_row(path, "outputs", "total", b"1")
    with Engine(path, functions=registry(), recovery_policy=RecoveryPolicy.KEEP) as engine:
        engine.process()
        assert values(engine, "total") == [1, 3, 6, 10, 15], "nothing overwritten, nothing lost"
        assert [f.uri for f in engine.faults] == ["total"], "and the divergence is reported, not swallowed"
        assert "#1" in str(engine.faults[0].error)


# -- item 11: one writer per store --------------------------------------------------------------------------------


def test_a_second_engine_on_the_same_store_is_refused_while_the_first_holds_it(tmp_path: Path) -> None:
    """Item 11: both used to run and both processed the same events."""
    path = tmp_path / "s.db"
    first = Engine(path, functions=registry(), start=T0)
    first.create_stream("raw")
    with pytest.raises(StoreLockedError, match="another engine"):
        Engine(path, functions=registry())
    first.close()
    with Engine(path, functions=registry()) as second:
        assert "raw" in second.streams()


# -- item 12: a deep query works, or is refused with a typed error ---------------------------------------------------


def increment(x: int) -> int:
    return x + 1


def test_a_chain_of_400_maps_is_created_checkpointed_and_recovered_and_a_deeper_one_refused(tmp_path: Path) -> None:
    """Item 12: a chain of 400 maps raised RecursionError at creation."""
    functions = registry()
    functions.register("increment", increment)
    path = tmp_path / "s.db"
    with Engine(path, functions=functions, start=T0) as engine:
        engine.create_stream("raw")
        query: Query[Any] = Query.stream("raw")
        for _ in range(400):
            query = query.map(increment)
        engine.create_subscription("deep", query)
        engine.append("raw", 0, at(0))
        engine.process()
        engine.checkpoint()
        for _ in range(2000):
            query = query.map(increment)
        with pytest.raises(QueryTooDeepError):
            engine.create_subscription("deeper", query)
    with Engine(path, functions=functions) as engine:
        engine.append("raw", 1, at(1))
        engine.process()
        assert values(engine, "deep") == [400, 401]
        assert [info.uri for info in engine.artifacts()] == ["deep", "raw"], "the refused one left nothing"


def test_a_damaged_template_fails_only_the_queries_that_use_it_with_a_typed_error(tmp_path: Path) -> None:
    """Item 12: a damaged template raised ValueError and refused the whole open, even under KEEP."""
    path = tmp_path / "s.db"
    build(path)
    templates = rows(path, "templates")
    assert len(templates) == 2
    with sqlite3.connect(path) as db:  # damage one template: its checksum no longer matches
        key = sorted(templates)[0]
        db.execute("UPDATE reaqtive_blobs SET value = ? WHERE category = 'templates' AND key = ?",
                   (templates[key][:-3], key))
    with pytest.raises(RecoveryError):
        Engine(path, functions=registry())
    with Engine(path, functions=registry(), recovery_policy=RecoveryPolicy.KEEP) as engine:
        (failure,) = engine.recovery.failures
        assert isinstance(failure.error, DamagedRowError) and key in str(failure.error)
        assert engine.recovery.subscriptions == 1, "the query with the other template runs"


def test_deleting_a_query_kept_without_running_deletes_all_of_it(tmp_path: Path) -> None:
    """A kept (broken) query has no live operators: deleting it must still take its state, inner states, output
    counter and outputs, and release its pin on the log."""
    path = tmp_path / "s.db"
    build(path)
    incomplete = FunctionRegistry()
    incomplete.register("add", add)
    incomplete.register("key_of", key_of)
    with Engine(path, functions=incomplete, recovery_policy=RecoveryPolicy.KEEP) as engine:
        assert [f.uri for f in engine.recovery.failures] == ["grouped"]
        assert engine.outputs("grouped") != []
        engine.delete_subscription("grouped")
        assert engine.status is EngineStatus.RUNNING
        with pytest.raises(ArtifactNotFoundError, match="'grouped'"):  # deleted, with its outputs
            engine.outputs("grouped")
        engine.append("raw", 6, at(6))
        engine.process()
        engine.checkpoint()
        assert engine.streams()["raw"].retained == 0, "no pin holds the log any more"
    assert [key for key in rows(path) if key.startswith("grouped")] == []
    assert "grouped" not in rows(path, "outputs") and "grouped" not in rows(path, "artifacts")


def explode() -> None:
    raise RuntimeError("the finally action failed")


def test_an_error_raised_in_a_query_task_stops_that_query_alone_not_process(tmp_path: Path) -> None:
    """A scheduled task that raises (here the report of a failing finally action) used to propagate out of
    process() for every query; it is the query's fault (DESIGN decision 9)."""
    functions = registry()
    functions.register("explode", explode)
    with Engine(tmp_path / "s.db", functions=functions, start=T0) as engine:
        engine.create_stream("raw")
        engine.create_subscription("once", Query.stream("raw").take(1).finally_action(explode))
        engine.create_subscription("total", Query.stream("raw").scan(0, add))
        engine.append_many("raw", [(i, at(i)) for i in (1, 2, 3)])
        assert engine.process() == 3
        assert values(engine, "total") == [1, 3, 6]
        assert values(engine, "once") == [1]
        (fault,) = engine.faults
        assert fault.uri == "once" and isinstance(fault.error, QueryFailedError)
        assert "the finally action failed" in str(fault.error)
