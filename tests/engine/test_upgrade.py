"""Upgrading a running query in place (issue 34, parts 3 and 4): ``update_subscription`` moves the state of matched
operators across at one checkpoint boundary, the output numbering goes on, consumers see the old definition's values
then the new one's, a crash at any step leaves the old definition or the new one (never a mix), the history is kept
and ``rollback_subscription`` goes back; a dry run changes nothing and refuses what cannot be done."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reaqtive import Query
from reaqtive.engine import (
    ArtifactNotFoundError,
    Engine,
    FunctionRegistry,
    Retention,
    UnpersistableQueryError,
    UpdateError,
)
from reaqtive.operators.keyed_window import Tumbling

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def count_one(count: int, _: Any) -> int:
    return count + 1


def add(total: Any, value: Any) -> Any:
    return total + value


def pair(*values: Any) -> tuple[Any, ...]:
    return values


def key_of(event: Any) -> Any:
    return event[0]


def value_of(event: Any) -> Any:
    return event[1]


def tag_avg(row: Any) -> Any:
    return ("avg", *row)


def tag_max(row: Any) -> Any:
    return ("max", *row)


SEEN: list[tuple[int, Any]] = []


def observe(output: Any) -> None:
    SEEN.append((output.seq, output.value))


def functions() -> FunctionRegistry:
    registry = FunctionRegistry()
    for function in (count_one, add, pair, key_of, value_of, tag_avg, tag_max, observe):
        registry.register(function.__name__, function)
    return registry


FUNCTIONS = functions()
A = Query.stream("a")


def open_engine(target: Path | str = ":memory:") -> Engine:
    return Engine(target, functions=FUNCTIONS, start=T0, synchronous="NORMAL")


def outputs_of(engine: Engine, uri: str) -> list[tuple[int, Any]]:
    return [(output.seq, output.value) for output in engine.outputs(uri)]


def feed(engine: Engine, values: range, process: bool = True) -> None:
    for value in values:
        engine.append("a", value, at(value))
    if process:
        engine.process()


COUNT = A.scan(0, count_one).named("count")
COUNT_AND_SUM = Query.combine_latest(A.scan(0, count_one).named("count"), A.scan(0, add).named("sum"),
                                     selector=pair)


def expected_count_then_count_and_sum(before: int, after: int) -> list[tuple[int, Any]]:
    """The outputs of a count over ``before`` events, then of count-and-sum over ``after`` more (events 0, 1, ...):
    the count goes on, the sum starts at the swap; combine_latest emits once per side per event."""
    out: list[Any] = list(range(1, before + 1))
    total = 0
    for value in range(before, before + after):
        count = value + 1
        if value == before:  # the first event after the swap: the count side, then the sum side completes a pair
            total = value
            out.append((count, total))
            continue
        out.append((count, total))
        total += value
        out.append((count, total))
    return list(enumerate(out))


# -- the acceptance cases -----------------------------------------------------------------------------------------


def test_a_running_count_upgraded_to_a_count_and_a_sum_keeps_its_count_and_its_numbering() -> None:
    with open_engine() as engine:
        engine.create_stream("a")
        engine.create_subscription("q", COUNT)
        feed(engine, range(5))
        plan = engine.update_subscription("q", COUNT_AND_SUM)
        assert [(c.operator, c.name) for c in plan.of("moved")] == [
            ("reaqtive:egress", None), ("reaqtive:scan+seed", "count"), ("reaqtive:stream", "count")]
        assert {c.operator for c in plan.of("reset")} == {"reaqtive:combine_latest", "reaqtive:scan+seed",
                                                            "reaqtive:stream"}
        feed(engine, range(5, 9))
        assert outputs_of(engine, "q") == expected_count_then_count_and_sum(5, 4)


def windows_old() -> Query[Any]:
    return A.aggregate_by_key(key_of, Tumbling(timedelta(seconds=10)), "average", value_of).named("avg").map(tag_avg)


def windows_new() -> Query[Any]:
    average = A.aggregate_by_key(key_of, Tumbling(timedelta(seconds=10)), "average", value_of).named("avg")
    largest = A.aggregate_by_key(key_of, Tumbling(timedelta(seconds=10)), "max", value_of).named("max")
    return Query.merge(average.map(tag_avg), largest.map(tag_max))


def keyed_events(first: int, count: int) -> list[tuple[tuple[str, int], datetime]]:
    return [((("k1", "k2", "k3")[i % 3], i * 7 % 11), at(i * 1.5)) for i in range(first, first + count)]


def run_windows(swap_after: int | None, total: int, crash: Path | None = None) -> list[Any]:
    """The rows of a per-key 10 s average, upgraded to an average and a max after ``swap_after`` events."""
    target: Path | str = crash if crash is not None else ":memory:"
    engine = open_engine(target)
    engine.create_stream("a")
    engine.create_subscription("w", windows_old() if swap_after is not None else windows_new())
    events = keyed_events(0, total)
    cut = swap_after if swap_after is not None else total
    for value, time in events[:cut]:
        engine.append("a", value, time)
    engine.process()
    if swap_after is not None:
        engine.update_subscription("w", windows_new(), require_state=False)
        if crash is not None:
            engine.close()
            engine = open_engine(target)
    for value, time in events[cut:]:
        engine.append("a", value, time)
    engine.process()
    engine.advance_time(at(total * 1.5 + 60))
    rows = [value for _, value in outputs_of(engine, "w")]
    engine.close()
    return rows


@pytest.mark.parametrize("crash", [False, True])
def test_a_per_key_window_average_upgraded_to_an_average_and_a_max_keeps_its_open_windows(
    tmp_path: Path, crash: bool
) -> None:
    swap = 20  # after the event at 28.5 s: the windows [20, 30) of every key are open
    rows = run_windows(swap, 60, tmp_path / "w.db" if crash else None)
    twin = run_windows(None, 60)
    first_after = at(swap * 1.5)  # the first event after the swap, at 30 s
    # Every average is the one a query that ran all along computes: the open windows kept their elements.
    assert [row for row in rows if row[0] == "avg"] == [row for row in twin if row[0] == "avg"]
    # The max starts at the swap: the windows open then saw no element of it since, so have no row; those that
    # opened after it are the twin's.
    assert [row for row in rows if row[0] == "max"] == [row for row in twin if row[0] == "max"
                                                        and row[2] >= first_after]


# -- consumers -----------------------------------------------------------------------------------------------------


def test_an_observer_function_sees_the_old_values_then_the_new_ones_none_lost_or_doubled() -> None:
    SEEN.clear()
    with open_engine() as engine:
        engine.create_stream("a")
        engine.define_observer("obs", observe)
        engine.create_subscription("q", COUNT, observer="obs")
        feed(engine, range(5))
        engine.update_subscription("q", COUNT_AND_SUM)
        feed(engine, range(5, 9))
        engine.checkpoint()
    assert expected_count_then_count_and_sum(5, 4) == SEEN


def test_outputs_the_old_definition_produced_before_the_swap_stay_and_the_cursor_goes_on() -> None:
    with open_engine() as engine:
        engine.create_stream("a")
        engine.create_subscription("q", COUNT)
        feed(engine, range(3))
        last = engine.outputs("q")[-1].seq
        engine.update_subscription("q", COUNT_AND_SUM)
        feed(engine, range(3, 5))
        assert [o.seq for o in engine.outputs("q", after=last)] == list(range(last + 1, last + 4))


# -- crashes -------------------------------------------------------------------------------------------------------


class Kill(BaseException):
    """A crash at a chosen moment (a BaseException, as a kill: nothing catches it)."""


def crash(engine: Engine, target: Path) -> Engine:
    engine._outputs.buffer.clear()  # a kill loses the outputs not written to the sink yet
    engine.close()
    return open_engine(target)


@pytest.mark.parametrize("moment", ["before the boundary", "after the boundary", "at the commit", "after the commit"])
@pytest.mark.parametrize("twice", [False, True])
def test_a_crash_at_each_step_of_an_update_leaves_the_old_definition_or_the_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moment: str, twice: bool
) -> None:
    target = tmp_path / "s.db"
    engine = open_engine(target)
    engine.create_stream("a")
    engine.create_subscription("q", COUNT)
    feed(engine, range(5))
    store = engine._store
    if moment == "before the boundary":
        monkeypatch.setattr(engine, "checkpoint", lambda **_: (_ for _ in ()).throw(Kill()))
    elif moment == "after the boundary":
        monkeypatch.setattr(store.checkpoints, "read", lambda **_: (_ for _ in ()).throw(Kill()))
    elif moment == "at the commit":
        monkeypatch.setattr(store, "commit_with_outputs", lambda *a, **k: (_ for _ in ()).throw(Kill()))
    if moment == "after the commit":
        engine.update_subscription("q", COUNT_AND_SUM)
    else:
        with pytest.raises(Kill):
            engine.update_subscription("q", COUNT_AND_SUM)
    monkeypatch.undo()
    engine = crash(engine, target)
    if twice:
        engine.process()
        engine = crash(engine, target)
    updated = moment == "after the commit"
    assert len(engine.subscription_history("q")) == (2 if updated else 1)
    feed(engine, range(5, 9))
    expected = expected_count_then_count_and_sum(5, 4) if updated else list(enumerate(range(1, 10)))
    assert outputs_of(engine, "q") == expected
    engine.close()


def test_a_failed_commit_leaves_the_old_definition_running_as_if_nothing_happened(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with open_engine() as engine:
        engine.create_stream("a")
        engine.create_subscription("q", COUNT)
        feed(engine, range(5))

        def refuse(*args: Any, **kwargs: Any) -> int:
            raise OSError("disk full")

        monkeypatch.setattr(engine._store, "commit_with_outputs", refuse)
        with pytest.raises(OSError, match="disk full"):
            engine.update_subscription("q", COUNT_AND_SUM)
        monkeypatch.undo()
        feed(engine, range(5, 8))
        assert outputs_of(engine, "q") == list(enumerate(range(1, 9)))
        assert len(engine.subscription_history("q")) == 1


def test_an_update_survives_a_restart_with_its_history(tmp_path: Path) -> None:
    target = tmp_path / "s.db"
    with open_engine(target) as engine:
        engine.create_stream("a")
        engine.create_subscription("q", COUNT)
        feed(engine, range(5))
        engine.update_subscription("q", COUNT_AND_SUM)
        feed(engine, range(5, 7))
        engine.checkpoint()
    with open_engine(target) as engine:
        history = engine.subscription_history("q")
        assert [entry["until"] is None for entry in history] == [False, True]
        assert history[0]["expression"]["op"] == "named"
        assert history[1]["expression"]["op"] == "combine_latest"
        feed(engine, range(7, 9))
        assert outputs_of(engine, "q") == expected_count_then_count_and_sum(5, 4)


# -- rollback ------------------------------------------------------------------------------------------------------


def test_a_rollback_goes_back_to_the_previous_definition_with_the_shared_state_current() -> None:
    with open_engine() as engine:
        engine.create_stream("a")
        engine.create_subscription("q", COUNT)
        feed(engine, range(5))
        engine.update_subscription("q", COUNT_AND_SUM)
        feed(engine, range(5, 7))
        plan = engine.rollback_subscription("q")
        assert {c.operator for c in plan.of("dropped")} == {"reaqtive:combine_latest", "reaqtive:scan+seed",
                                                              "reaqtive:stream"}
        feed(engine, range(7, 9))
        values = [value for _, value in outputs_of(engine, "q")]
        assert values[-2:] == [8, 9]  # the count went on through both definitions
        history = engine.subscription_history("q")
        assert [entry["expression"]["op"] for entry in history] == ["combine_latest", "named"]
        engine.rollback_subscription("q")  # forward again
        assert engine.subscription_history("q")[-1]["expression"]["op"] == "combine_latest"


def test_a_rollback_to_the_kept_state_resumes_from_the_swap() -> None:
    with open_engine() as engine:
        engine.create_stream("a")
        engine.create_subscription("q", A.scan(0, count_one))
        feed(engine, range(5))
        engine.update_subscription("q", A.scan(0, add))  # the same path and operator: its state moves
        feed(engine, range(5, 7))
        plan = engine.rollback_subscription("q", state="kept", dry_run=True)
        assert [c.operator for c in plan.of("moved")] == ["reaqtive:egress", "reaqtive:scan+seed", "reaqtive:stream"]
        assert all(c.reason.startswith("state kept at the swap moves") for c in plan.changes)
        engine.rollback_subscription("q", state="kept")
        feed(engine, range(7, 8))
        assert [value for _, value in outputs_of(engine, "q")] == [1, 2, 3, 4, 5, 5 + 5, 10 + 6, 6]


def test_there_is_nothing_to_roll_back_before_an_update() -> None:
    with open_engine() as engine:
        engine.create_stream("a")
        engine.create_subscription("q", COUNT)
        with pytest.raises(UpdateError, match="no previous definition"):
            engine.rollback_subscription("q")


# -- dry run and refusals ------------------------------------------------------------------------------------------


def dump(path: Path) -> list[str]:
    with closing(sqlite3.connect(path)) as db:
        return list(db.iterdump())


def test_a_dry_run_says_what_would_happen_and_changes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "s.db"
    with open_engine(target) as engine:
        engine.create_stream("a")
        engine.create_subscription("q", COUNT)
        feed(engine, range(5))
        engine.checkpoint()
        before = dump(target)
        plan = engine.update_subscription("q", COUNT_AND_SUM, dry_run=True)
        assert dump(target) == before
        text = plan.describe()
        assert "3 matched, 3 reset, 0 dropped" in text
        assert "moved    reaqtive:scan+seed at 0/0/0 (named 'count')" in text
        feed(engine, range(5, 7))
        assert outputs_of(engine, "q") == list(enumerate(range(1, 8)))
        assert len(engine.subscription_history("q")) == 1


def test_require_state_refuses_an_update_that_would_start_something_empty() -> None:
    with open_engine() as engine:
        engine.create_stream("a")
        engine.create_subscription("q", COUNT)
        feed(engine, range(3))
        for dry_run in (True, False):
            with pytest.raises(UpdateError, match=r"not every state moves:\n  reset    reaqtive:combine_latest"):
                engine.update_subscription("q", COUNT_AND_SUM, require_state=True, dry_run=dry_run)
        assert engine.update_subscription("q", A.scan(0, add).named("count"), require_state=True).of("moved")
        feed(engine, range(3, 4))
        assert outputs_of(engine, "q")[-1] == (3, 3 + 3)  # the count 3 went on as a total: its state moved


def test_updates_that_cannot_be_done_are_refused_naming_why() -> None:
    with open_engine() as engine:
        engine.create_stream("a")
        engine.create_subscription("q", COUNT)
        with pytest.raises(ArtifactNotFoundError):
            engine.update_subscription("nothing", COUNT)
        with pytest.raises(ArtifactNotFoundError, match="'b'"):
            engine.update_subscription("q", Query.stream("b").scan(0, count_one))
        with pytest.raises(UnpersistableQueryError):
            engine.update_subscription("q", A.map(lambda x: x))
        with pytest.raises(ValueError, match="unmatched must be one of"):
            engine.update_subscription("q", COUNT, unmatched="ignore")
        with pytest.raises(UpdateError, match="start= is for unmatched='backfill'"):
            engine.update_subscription("q", COUNT, start="earliest")
        engine.pause("q")
        with pytest.raises(UpdateError, match="paused or catching up"):
            engine.update_subscription("q", COUNT_AND_SUM)
        assert len(engine.subscription_history("q")) == 1


def test_names_do_not_change_what_a_query_computes() -> None:
    with open_engine() as engine:
        engine.create_stream("a")
        engine.create_subscription("plain", A.scan(0, add).map(str))
        engine.create_subscription("named", A.scan(0, add).named("x").map(str).named("y"))
        feed(engine, range(6))
        assert outputs_of(engine, "plain") == outputs_of(engine, "named")
    with pytest.raises(ValueError, match="a name must be"):
        A.named("has space")


# -- backfill -------------------------------------------------------------------------------------------------------


def test_unmatched_backfill_rebuilds_the_new_definition_from_the_retained_log() -> None:
    with open_engine() as engine:
        engine.create_stream("a", retain=Retention(events=1000))
        engine.create_subscription("q", COUNT)
        feed(engine, range(5))
        engine.checkpoint()
        plan = engine.update_subscription("q", A.scan(0, add), unmatched="backfill", dry_run=True)
        assert "rebuilt by a backfill from start='earliest'" in plan.describe()
        engine.update_subscription("q", A.scan(0, add), unmatched="backfill")
        feed(engine, range(5, 7))
        values = [value for _, value in outputs_of(engine, "q")]
        # The count's five outputs, then the running sum over the whole retained log, each once.
        assert values == [1, 2, 3, 4, 5, 0, 1, 3, 6, 10, 15, 21]
        assert [seq for seq, _ in outputs_of(engine, "q")] == list(range(12))


def test_deleting_an_updated_subscription_deletes_its_history_and_kept_state(tmp_path: Path) -> None:
    target = tmp_path / "s.db"
    with open_engine(target) as engine:
        engine.create_stream("a")
        engine.create_subscription("q", COUNT)
        feed(engine, range(3))
        engine.update_subscription("q", COUNT_AND_SUM)
        engine.delete_subscription("q")
        engine.create_subscription("q", COUNT)
        assert len(engine.subscription_history("q")) == 1
    with closing(sqlite3.connect(target)) as db:
        assert db.execute("SELECT count(*) FROM reaqtive_blobs WHERE category = 'previous_states'").fetchone() == (0,)


def test_the_async_engine_updates_rolls_back_and_tells_the_history() -> None:
    import asyncio

    from reaqtive.engine import AsyncEngine

    async def main() -> list[tuple[int, Any]]:
        async with AsyncEngine(open_engine()) as engine:
            await engine.create_stream("a")
            await engine.create_subscription("q", COUNT)
            for value in range(3):
                await engine.append("a", value, at(value))
            await engine.process()
            plan = await engine.update_subscription("q", COUNT_AND_SUM, dry_run=True)
            assert plan.of("reset")
            await engine.update_subscription("q", COUNT_AND_SUM)
            assert len(await engine.subscription_history("q")) == 2
            await engine.rollback_subscription("q")
            await engine.append("a", 3, at(3))
            await engine.process()
            return [(o.seq, o.value) for o in await engine.outputs("q")]

    assert asyncio.run(main()) == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_an_operator_that_refuses_the_old_state_starts_empty_and_the_dry_run_says_so() -> None:
    count = A.scan(0, count_one).named("count")
    total = A.scan(0, add).named("sum")
    three = Query.combine_latest(count, total, A.scan(0, count_one).named("other"), selector=pair)
    with open_engine() as engine:
        engine.create_stream("a")
        engine.create_subscription("q", Query.combine_latest(count, total, selector=pair))
        feed(engine, range(4))
        plan = engine.update_subscription("q", three, dry_run=True)
        [refused] = [c for c in plan.of("reset") if c.operator == "reaqtive:combine_latest"]
        assert "does not fit" in refused.reason and "combines 3" in refused.reason
        with pytest.raises(UpdateError, match="combine_latest at 0/0: its old state does not fit it"):
            engine.update_subscription("q", three, require_state=True)
        assert len(engine.subscription_history("q")) == 1
        done = engine.update_subscription("q", three)  # found as it binds (no trial): the same plan
        assert [(c.action, c.operator) for c in done.changes if "does not fit" in c.reason] == [
            ("reset", "reaqtive:combine_latest"), ("dropped", "reaqtive:combine_latest")]
        assert sorted(map(str, done.changes)) == sorted(map(str, plan.changes))
        feed(engine, range(4, 5))
        # combine_latest starts empty: it emits once each source has a value again; count and sum went on.
        assert outputs_of(engine, "q")[-1][1] == (5, 10, 1)


# -- higher-order state: per-key groups -----------------------------------------------------------------------------


def key_mod(value: Any) -> Any:
    return value % 3


def per_key_count(group: Any) -> Query[Any]:
    return group.scan(0, count_one).map(KeyTag(group))


class KeyTag:
    def __init__(self, group: Any) -> None:
        self.group = group

    def __call__(self, count: int) -> tuple[Any, int]:
        return (self.group.key, count)


@pytest.mark.parametrize("keyed", [True, False])
def test_a_per_key_count_keeps_every_keys_count_across_an_update_in_either_form(
    tmp_path: Path, keyed: bool
) -> None:
    from reaqtive import keyed_execution

    registry = functions()
    for function in (key_mod, per_key_count):
        registry.register(function.__name__, function)
    per_key = A.group_by(key_mod).flat_map(per_key_count).named("per_key")
    target = tmp_path / "s.db"
    with Engine(target, functions=registry, start=T0) as engine:
        engine.create_stream("a")
        with keyed_execution(keyed):
            engine.create_subscription("q", per_key)
        feed(engine, range(9))  # three of each key
        plan = engine.update_subscription("q", Query.merge(per_key, A.scan(0, count_one).map(str)),
                                          require_state=False)
        assert all(change.action == "moved" for change in plan.changes if change.name == "per_key")
        assert engine.subscription_history("q")[-1]["keyed"] is keyed
    with Engine(target, functions=registry, start=T0) as engine:  # recovered from the swap's state
        feed(engine, range(9, 12))
        values = [value for _, value in outputs_of(engine, "q")]
    assert values[9:] == [(0, 4), "1", (1, 4), "2", (2, 4), "3"]


# -- any sequence of updates, rollbacks, checkpoints and crashes equals the same sequence never crashed -------------


def definitions() -> list[Query[Any]]:
    count = A.scan(0, count_one).named("count")
    total = A.scan(0, add).named("sum")
    return [
        count,
        Query.combine_latest(count, total, selector=pair),
        Query.combine_latest(count, total, A.scan(0, count_one), selector=pair),  # refuses the 2-source state
        A.scan(0, add),  # unnamed: matched by path with the scan of an unnamed definition only
        A.aggregate_by_key(key_of_value, Tumbling(timedelta(seconds=4)), "sum").named("windows"),
    ]


def key_of_value(value: Any) -> Any:
    return value % 2


FUNCTIONS.register("key_of_value", key_of_value)

STEPS = st.one_of(
    st.tuples(st.just("feed"), st.integers(1, 12)),
    st.tuples(st.just("update"), st.integers(0, 4)),
    st.tuples(st.just("backfill"), st.integers(0, 4)),
    st.tuples(st.just("rollback"), st.sampled_from(["current", "kept"])),
    st.tuples(st.just("checkpoint"), st.just(0)),
    st.tuples(st.just("crash"), st.just(0)),
    st.tuples(st.just("crash twice"), st.just(0)),
)


def play(target: Path | str, steps: list[tuple[str, Any]], *, crashes: bool) -> list[tuple[int, Any]]:
    engine = open_engine(target)
    engine.create_stream("a", retain=Retention(events=1_000))
    engine.create_subscription("q", definitions()[0])
    fed = 0
    for kind, argument in steps:
        if kind == "feed":
            feed(engine, range(fed, fed + argument))
            fed += argument
        elif kind == "update":
            engine.update_subscription("q", definitions()[argument])
        elif kind == "backfill":  # the whole new definition rebuilt from the log, caught up at once
            engine.update_subscription("q", definitions()[argument], unmatched="backfill")
            engine.process()
        elif kind == "rollback":
            if len(engine.subscription_history("q")) > 1:
                engine.rollback_subscription("q", state=argument)
        elif kind == "checkpoint":
            engine.checkpoint()
        elif crashes:  # a crash, and the replay of the log after the last checkpoint
            for _ in range(2 if kind == "crash twice" else 1):
                engine = crash(engine, Path(target))
                engine.process()
    engine.advance_time(at(fed + 60))
    outputs = outputs_of(engine, "q")
    engine.close()
    return outputs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEPS, min_size=1, max_size=12))
@example(steps=[("feed", 5), ("update", 1), ("crash", 0), ("feed", 3), ("rollback", "kept"), ("crash twice", 0),
                ("feed", 2)])
@example(steps=[("feed", 5), ("update", 4), ("feed", 3), ("update", 2), ("checkpoint", 0), ("feed", 3),
                ("crash", 0), ("rollback", "current"), ("feed", 3)])
@example(steps=[("feed", 6), ("checkpoint", 0), ("backfill", 4), ("crash", 0), ("feed", 2), ("backfill", 1),
                ("crash twice", 0), ("rollback", "current"), ("feed", 2)])
def test_updates_rollbacks_and_crashes_in_any_order_equal_the_same_run_never_crashed(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, Any]]
) -> None:
    target = tmp_path_factory.mktemp("u") / "s.db"
    assert play(target, steps, crashes=True) == play(":memory:", steps, crashes=False)


def test_a_rollback_that_would_mix_inner_units_of_both_definitions_is_refused_and_kept_works() -> None:
    window = Tumbling(timedelta(seconds=100))
    average = A.aggregate_by_key(key_of_value, window, "average").named("avg")
    largest = A.aggregate_by_key(key_of_value, window, "max").named("max")
    with open_engine() as engine:
        engine.create_stream("a")
        engine.create_subscription("q", average)
        feed(engine, range(4))
        engine.update_subscription("q", largest)  # the average's pages kept; the max's take the same inner ids
        feed(engine, range(4, 6))
        with pytest.raises(UpdateError, match="state='kept'"):
            engine.rollback_subscription("q")
        engine.rollback_subscription("q", state="kept")
        engine.advance_time(at(200))
        # The average as it was at the swap (0 and 2 for key 0, 1 and 3 for key 1): the events since are not replayed.
        assert [row[3] for _, row in outputs_of(engine, "q")] == [1.0, 2.0]


def test_naming_a_part_only_now_keeps_the_state_of_the_operator_at_its_old_place() -> None:
    with open_engine() as engine:
        engine.create_stream("a")
        engine.create_subscription("q", A.scan(0, count_one))  # v1 named nothing
        feed(engine, range(3))
        plan = engine.update_subscription("q", A.scan(0, count_one).named("count"))
        assert [(c.action, c.name) for c in plan.changes] == [("moved", None), ("moved", "count"), ("moved", "count")]
        # Another name is another part, even at the same place: it starts empty.
        plan = engine.update_subscription("q", A.scan(0, count_one).named("other"), dry_run=True)
        assert [c.action for c in plan.changes] == ["moved", "reset", "reset", "dropped", "dropped"]
        feed(engine, range(3, 4))
        assert outputs_of(engine, "q")[-1] == (3, 4)  # the count went on through the naming


def test_a_new_definition_that_fails_to_start_leaves_the_old_one_running(monkeypatch: pytest.MonkeyPatch) -> None:
    from reaqtive.engine import upgrading

    def failing_loader(*args: Any, **kwargs: Any) -> Any:
        def load(handle: Any) -> None:
            raise RuntimeError("the new definition cannot start")

        return load

    with open_engine() as engine:
        engine.create_stream("a")
        engine.create_subscription("q", COUNT)
        feed(engine, range(5))
        monkeypatch.setattr(upgrading, "migrating_loader", failing_loader)
        with pytest.raises(RuntimeError, match="cannot start"):
            engine.update_subscription("q", COUNT_AND_SUM)
        monkeypatch.undo()
        assert engine.subscription_status("q").state.name == "RUNNING"
        feed(engine, range(5, 8))
        assert outputs_of(engine, "q") == list(enumerate(range(1, 9)))
        engine.update_subscription("q", COUNT_AND_SUM)  # and it can be updated afterwards
        feed(engine, range(8, 9))
        assert outputs_of(engine, "q")[-1] == (8, (9, 8))  # numbered on; the count went on


def fails_on_three(value: Any) -> Any:
    if value == 3:
        raise ValueError("three")
    return value


FUNCTIONS.register("fails_on_three", fails_on_three)


def test_a_failed_subscription_is_refused_until_it_is_restarted() -> None:
    with open_engine() as engine:
        engine.create_stream("a")
        engine.create_subscription("q", A.map(fails_on_three).scan(0, count_one))
        feed(engine, range(5))
        assert engine.subscription_status("q").state.name == "FAILED"
        for call in (lambda: engine.update_subscription("q", COUNT, dry_run=True),
                     lambda: engine.rollback_subscription("q")):
            with pytest.raises(UpdateError, match="restart_subscription first"):
                call()
        engine.restart_subscription("q", skip_failed=True)
        engine.process()
        engine.update_subscription("q", A.map(fails_on_three).scan(0, count_one).named("count"))
        feed(engine, range(5, 6))
        assert outputs_of(engine, "q")[-1] == (4, 5)  # 0, 1, 2, 4 counted before; 5 now: the count went on


def test_a_name_given_to_two_parts_is_refused() -> None:
    with open_engine() as engine:
        engine.create_stream("a")
        engine.create_subscription("q", COUNT)
        feed(engine, range(2))
        with pytest.raises(UpdateError, match="the name 'count' is given to two parts"):
            engine.update_subscription("q", Query.combine_latest(COUNT, COUNT, selector=pair), dry_run=True)
        with pytest.raises(UpdateError, match="the name 'count' is given to two parts"):
            engine.update_subscription("q", Query.combine_latest(COUNT, COUNT, selector=pair))
        feed(engine, range(2, 3))
        assert outputs_of(engine, "q") == [(0, 1), (1, 2), (2, 3)]
