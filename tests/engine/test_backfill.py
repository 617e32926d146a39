"""Backfill of a new subscription (issue 34, part 2): ``create_subscription(uri, query, start=...)`` from the earliest
retained event, a log position or an event time processes the retained history behind the engine, in slices, then
joins live input with no gap and no duplicate; with ``clock="event"`` it computes what a **twin** created before
that history computed, time-based operators included; checkpoints and crashes (twice in a row) during the backfill
leave it going on, or restarting cleanly, with its outputs exactly once; bad starts are refused with what the log
retains."""

from __future__ import annotations

import asyncio
import operator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reaqtive import Query
from reaqtive.engine import (
    AsyncEngine,
    Engine,
    FunctionRegistry,
    Retention,
    StartBeyondLogError,
    StartError,
    StartNotRetainedError,
)
from tests.engine.store_targets import STORES, store_sql

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def count_one(count: int, _: Any) -> int:
    return count + 1


def is_even(value: Any) -> bool:
    return int(value) % 2 == 0


def two_of_b(outer: Any) -> Query[Any]:
    """An inner reading another stream, created at run time: the next two events of ``b``."""
    return Query.stream("b").take(2).map(str)


def inverse(value: Any) -> float:
    """Raises on 0 and on multiples of 97: the user function that fails in the middle of the history."""
    if int(value) % 97 == 0:
        raise ZeroDivisionError(f"no inverse for {value}")
    return 1 / int(value)


def functions() -> FunctionRegistry:
    registry = FunctionRegistry()
    for function in (count_one, is_even, two_of_b, inverse):
        registry.register(function.__name__, function)
    return registry


FUNCTIONS = functions()


def queries() -> dict[str, Query[Any]]:
    a, b = Query.stream("a"), Query.stream("b")
    return {
        "count": a.scan(0, count_one),
        "window": a.buffer(timedelta(seconds=10)),  # timers at window ends: the event clock decides them
        "debounce": b.debounce(timedelta(seconds=3)),
        "merged": a.merge(b).filter(is_even).scan(0, operator.add),
        "inner": a.flat_map(two_of_b),  # inner readers created while the backfill reads
        "bounded": a.flat_map(two_of_b, max_concurrent=1),  # a lagging outer reader (it withholds demand)
    }


QUERIES = tuple(queries())


def outputs_of(engine: Engine, uri: str) -> list[tuple[int, Any]]:
    return [(output.seq, output.value) for output in engine.outputs(uri)]


def events(count: int, seed: int = 0, first: int = 0) -> list[tuple[str, int, datetime]]:
    """``count`` events over ``a`` and ``b``, about one a second (some at the same instant), times in order."""
    out = []
    for i in range(first, first + count):
        stream = "a" if (i * 7 + seed) % 3 else "b"
        out.append((stream, i, at(i - (i % 4 == 1))))
    return out


def open_engine(target: Path | str = ":memory:", **options: Any) -> Engine:
    return Engine(target, functions=FUNCTIONS, start=T0, synchronous="NORMAL", **options)


KEEP_ALL = Retention(events=1_000_000)


def make_streams(engine: Engine, retain: Retention | None = KEEP_ALL) -> None:
    engine.create_stream("a", retain=retain)
    engine.create_stream("b", retain=retain)


def append(engine: Engine, batch: list[tuple[str, int, datetime]]) -> None:
    for stream, value, time in batch:
        engine.append(stream, value, time)


def twins(history: list[tuple[str, int, datetime]], live: list[tuple[str, int, datetime]],
          end: float) -> dict[str, list[tuple[int, Any]]]:
    """The outputs of the queries created before ``history`` and run through ``history`` then ``live``."""
    with open_engine() as engine:
        make_streams(engine)
        for uri, query in queries().items():
            engine.create_subscription(uri, query)
        append(engine, history + live)
        engine.process()
        engine.advance_time(at(end))
        return {uri: outputs_of(engine, uri) for uri in QUERIES}


# -- equal to a twin created before the history -----------------------------------------------------------------------


@pytest.mark.parametrize("start", ["earliest", -1, T0])
def test_a_backfill_from_the_start_equals_queries_that_ran_all_along(start: object) -> None:
    history, live = events(300), events(50, first=300)
    with open_engine() as engine:
        make_streams(engine)
        engine.create_subscription("other", Query.stream("a").scan(0, count_one))  # the log is checkpointed past
        append(engine, history)
        engine.process()
        engine.checkpoint()
        for uri, query in queries().items():
            engine.create_subscription(uri, query, start=start)
            assert engine.is_behind(uri)
        append(engine, live)
        engine.process()
        assert not any(engine.is_behind(uri) for uri in QUERIES)
        engine.advance_time(at(400))
        assert {uri: outputs_of(engine, uri) for uri in QUERIES} == twins(history, live, 400)


def test_a_backfill_from_a_log_position_equals_a_twin_created_when_the_engine_stood_there() -> None:
    before, history, live = events(100), events(200, first=100), events(50, first=300)
    with open_engine() as engine:
        make_streams(engine)
        append(engine, before)
        engine.process()
        position = engine.log_position
        for uri, query in queries().items():
            engine.create_subscription(f"twin/{uri}".replace("/", "-"), query)
        append(engine, history)
        engine.process()
        for uri, query in queries().items():
            engine.create_subscription(uri, query, start=position)
        append(engine, live)
        engine.process()
        engine.advance_time(at(400))
        for uri in QUERIES:
            assert outputs_of(engine, uri) == outputs_of(engine, f"twin-{uri}"), uri


def test_a_backfill_from_an_event_time_equals_a_twin_created_at_that_time() -> None:
    with open_engine() as engine:
        make_streams(engine)
        append(engine, events(100))
        engine.process()
        engine.advance_time(at(150))  # the twins are created at 150 s; the events after them start at 150 s
        for uri, query in queries().items():
            engine.create_subscription(f"twin-{uri}", query)
        append(engine, events(200, first=151))
        engine.process()
        for uri, query in queries().items():
            engine.create_subscription(uri, query, start=at(150))
        append(engine, events(30, first=351))
        engine.process()
        engine.advance_time(at(500))
        for uri in QUERIES:
            assert outputs_of(engine, uri) == outputs_of(engine, f"twin-{uri}"), uri


def test_a_backfill_through_a_definition_reads_the_streams_the_definition_reads() -> None:
    with open_engine() as engine:
        engine.create_stream("a", retain=Retention(events=100))
        engine.create_stream("b")
        engine.define_observable("evens", Query.stream("a").filter(is_even))
        engine.create_subscription("reader", Query.stream("a").merge(Query.stream("b")).scan(0, count_one))
        append(engine, events(300))
        engine.process()
        engine.checkpoint()
        engine.create_subscription("count-evens", Query.stream("evens").scan(0, count_one), start="earliest")
        engine.process()
        retained = [value for stream, value, _ in events(300) if stream == "a"][-100:]
        assert outputs_of(engine, "count-evens")[-1][1] == sum(1 for value in retained if value % 2 == 0)


def test_earliest_is_bounded_by_the_stream_the_query_reads_that_kept_least() -> None:
    with open_engine() as engine:
        engine.create_stream("a", retain=Retention(events=100))
        engine.create_stream("b", retain=Retention(events=10))
        engine.create_subscription("reader", Query.stream("a").merge(Query.stream("b")).scan(0, count_one))
        append(engine, events(300))
        engine.process()
        engine.checkpoint()
        streams = engine.streams()
        engine.create_subscription("both", Query.stream("a").merge(Query.stream("b")).scan(0, count_one),
                                   start="earliest")
        engine.create_subscription("a-only", Query.stream("a").scan(0, count_one), start="earliest")
        engine.process()
        assert streams["a"].retained_positions is not None and streams["b"].retained_positions is not None
        b_first = streams["b"].retained_positions[0]
        a_after = sum(1 for s, v, _ in events(300) if s == "a" and v + 1 >= b_first)  # positions are values + 1
        assert outputs_of(engine, "both")[-1][1] == 10 + a_after
        assert outputs_of(engine, "a-only")[-1][1] == 100


# -- joining live input, in slices -------------------------------------------------------------------------------------


def test_live_events_arriving_during_a_backfill_are_processed_once_with_no_gap() -> None:
    history = events(10_000)
    with open_engine() as engine:
        make_streams(engine)
        engine.create_subscription("live", Query.stream("a").scan(0, count_one))
        append(engine, history)
        engine.process()
        engine.create_subscription("backfill", Query.stream("a").scan(0, count_one), start="earliest")
        live_seen = []
        next_value = 10_000
        while engine.is_behind("backfill"):
            batch = events(7, first=next_value)
            next_value += 7
            append(engine, batch)
            engine.process(max_events=1_000)
            live_seen.append((engine.is_behind("backfill"), outputs_of(engine, "live")[-1][1]))
        engine.process()
        assert outputs_of(engine, "backfill") == outputs_of(engine, "live")
        # The live query kept up while the backfill ran: it saw the new events before the backfill finished.
        behind_counts = [count for behind, count in live_seen if behind]
        assert len(set(behind_counts)) > 1


def test_a_checkpoint_and_other_queries_wait_for_a_slice_not_for_the_backfill() -> None:
    with open_engine() as engine:
        make_streams(engine)
        engine.create_subscription("live", Query.stream("a").scan(0, count_one))
        append(engine, events(12_000))
        engine.process()
        engine.create_subscription("backfill", Query.stream("a").scan(0, count_one), start="earliest")
        append(engine, events(1, first=12_000, seed=1))  # one live event of "a"
        handed = engine.process(max_events=8_192)  # two slices: the live one goes first
        assert engine.is_behind("backfill") and handed <= 8_192
        assert outputs_of(engine, "live")[-1][1] == sum(1 for s, _, _ in events(12_000) if s == "a") + 1
        engine.checkpoint()  # during the backfill: it stands where it got to
        engine.process()
        assert outputs_of(engine, "backfill") == outputs_of(engine, "live")


def test_a_backfill_with_the_wall_clock_loses_and_repeats_no_event(tmp_path: Path) -> None:
    with open_engine(tmp_path / "s.db", clock="wall") as engine:
        engine.create_stream("a", retain=Retention(events=10_000))
        engine.create_subscription("live", Query.stream("a").scan(0, count_one))
        for i in range(500):
            engine.append("a", i)
        engine.process()
        engine.create_subscription("backfill", Query.stream("a").scan(0, count_one), start="earliest")
        for i in range(100):
            engine.append("a", i)
            engine.process(max_events=100)
        engine.process()
        assert outputs_of(engine, "backfill") == outputs_of(engine, "live")


def test_the_async_engine_creates_retained_streams_and_backfills() -> None:
    async def run() -> tuple[list[Any], list[Any], int]:
        async with AsyncEngine(open_engine()) as engine:
            await engine.create_stream("a", retain=timedelta(days=1))
            await engine.create_subscription("live", Query.stream("a").scan(0, count_one))
            for i in range(100):
                await engine.append("a", i, at(i))
            await engine.process()
            await engine.create_subscription("backfill", Query.stream("a").scan(0, count_one), start="earliest")
            await engine.process()
            streams = await engine.streams()
            assert engine.log_position == 100
            await engine.checkpoint()
            sync = engine.engine
            return outputs_of(sync, "live"), outputs_of(sync, "backfill"), streams["a"].retained

    live, backfill, retained = asyncio.run(run())
    assert live == backfill and retained == 100


# -- checkpoints and crashes during a backfill -------------------------------------------------------------------------


class Crashing:
    """An engine on a store that crashes as a kill leaves it: what the durable sink had not written is lost."""

    def __init__(self, target: Path | str) -> None:
        self.target = target
        self.engine = open_engine(target)

    def crash(self) -> None:
        self.engine._outputs.buffer.clear()  # a kill loses the outputs not written to the sink yet
        self.engine.close()
        self.engine = open_engine(self.target)


@pytest.fixture(params=STORES)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    return store_sql(request.param, tmp_path, request).target


STEP = st.one_of(st.tuples(st.just("process"), st.integers(1, 3_000)), st.just(("checkpoint", 0)),
                 st.just(("crash", 0)), st.just(("crash twice", 0)), st.tuples(st.just("append"), st.integers(1, 60)),
                 st.just(("pause", 0)), st.just(("resume", 0)))


HISTORY = 1_000  # events retained before the backfills are created: two catch-up slices of 512


def run_steps(target: Path | str, steps: list[tuple[str, int]], history: int) -> dict[str, list[tuple[int, Any]]]:
    run = Crashing(target)
    make_streams(run.engine)
    append(run.engine, events(history))
    run.engine.process()
    run.engine.checkpoint()
    for uri, query in queries().items():
        run.engine.create_subscription(uri, query, start="earliest")
    appended = history
    for kind, amount in steps:
        engine = run.engine
        if kind == "process":
            engine.process(max_events=amount)
        elif kind == "checkpoint":
            engine.checkpoint()
        elif kind == "crash":
            run.crash()
        elif kind == "crash twice":
            run.crash()
            run.engine.process(max_events=50)
            run.crash()
        elif kind == "append":
            append(engine, events(amount, first=appended))
            appended += amount
        elif kind == "pause":
            engine.pause("window")
        else:
            engine.resume("window")
    run.engine.resume("window")
    run.engine.process()
    run.engine.advance_time(at(appended + 100))
    result = {uri: outputs_of(run.engine, uri) for uri in QUERIES}
    run.engine.close()
    expected = twins(events(history), events(appended - history, first=history), appended + 100)
    assert result == expected
    return result


PINNED: list[list[tuple[str, int]]] = [
    [("crash", 0)],  # before any checkpoint saw it: back to its start, from its creation state
    [("process", 100), ("checkpoint", 0), ("crash", 0)],  # where the checkpoint found it
    [("process", 3_000), ("crash", 0)],  # joined, no checkpoint since: behind again, from the last one
    [("process", 3_000), ("checkpoint", 0), ("crash twice", 0)],  # joined and checkpointed
    [("process", 100), ("crash twice", 0), ("checkpoint", 0), ("crash", 0)],
    [("pause", 0), ("checkpoint", 0), ("crash", 0), ("append", 30), ("resume", 0), ("process", 200), ("crash", 0)],
]


@pytest.mark.parametrize("steps", PINNED)
def test_a_backfill_recovered_at_the_moments_that_matter_keeps_its_outputs_exactly_once(
    tmp_path: Path, steps: list[tuple[str, int]]
) -> None:
    run_steps(tmp_path / "s.db", steps, HISTORY)


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEP, min_size=1, max_size=10))
@example(steps=PINNED[0])
def test_checkpoints_and_crashes_during_a_backfill_leave_outputs_exactly_once(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int]]
) -> None:
    run_steps(tmp_path_factory.mktemp("bf") / "s.db", steps, HISTORY)


def test_crashes_during_a_backfill_on_both_stores(target: Path | str) -> None:
    run_steps(target, [("process", 700), ("checkpoint", 0), ("append", 20), ("crash twice", 0), ("process", 500),
                       ("crash", 0), ("process", 3_000), ("crash", 0), ("checkpoint", 0), ("crash", 0)], HISTORY)


# -- refused starts --------------------------------------------------------------------------------------------------


@pytest.fixture
def truncated() -> Engine:
    engine = open_engine()
    engine.create_stream("a", retain=Retention(events=50))
    engine.create_stream("b")
    engine.create_subscription("reader", Query.stream("a").merge(Query.stream("b")).scan(0, count_one))
    for i in range(100):
        engine.append("a", i, at(i))
    engine.process()
    engine.checkpoint()
    return engine


def test_a_start_before_what_the_log_retains_says_what_it_retains(truncated: Engine) -> None:
    with truncated as engine:
        first = engine.streams()["a"].retained_positions
        assert first is not None
        with pytest.raises(StartNotRetainedError, match=r"stream 'a': it retains #50 on, from log position 51") \
                as raised:
            engine.create_subscription("x", Query.stream("a").scan(0, count_one), start=10)
        assert (raised.value.stream, raised.value.earliest) == ("a", first[0] - 1)
        with pytest.raises(StartNotRetainedError, match=r"time 2026-01-01T00:00:50\+00:00"):
            engine.create_subscription("x", Query.stream("a").scan(0, count_one), start=at(10))
        engine.create_subscription("x", Query.stream("a").scan(0, count_one), start=at(50))  # the oldest retained
        engine.process()
        assert outputs_of(engine, "x")[-1][1] == 50


def test_a_start_past_the_log_or_the_clock_is_refused(truncated: Engine) -> None:
    with truncated as engine:
        with pytest.raises(StartBeyondLogError, match="past the log position the engine delivered up to"):
            engine.create_subscription("x", Query.stream("a").scan(0, count_one), start=engine.log_position + 1)
        with pytest.raises(StartBeyondLogError, match="after the engine's clock"):
            engine.create_subscription("x", Query.stream("a").scan(0, count_one), start=at(1_000))
        assert "x" not in {info.uri for info in engine.artifacts()}


@pytest.mark.parametrize(("start", "message"), [
    (datetime(2026, 1, 1), "naive datetime"),
    ("yesterday", "start must be None"),
    (1.5, "start must be None"),
    (True, "start must be None"),
    (-2, "not a log position"),
])
def test_a_start_that_is_no_start_is_refused_naming_it(truncated: Engine, start: object, message: str) -> None:
    with truncated as engine:
        with pytest.raises(StartError, match=message):
            engine.create_subscription("x", Query.stream("a").scan(0, count_one), start=start)  # type: ignore[arg-type]
        assert "x" not in {info.uri for info in engine.artifacts()}


def test_a_start_at_the_engines_position_is_no_backfill(truncated: Engine) -> None:
    with truncated as engine:
        engine.create_subscription("x", Query.stream("a").scan(0, count_one), start=engine.log_position)
        assert not engine.is_behind("x")
        assert "backfill" not in (engine.info("x").expression or {})


def test_a_query_backfilled_over_a_week_of_retained_events_equals_one_that_ran_all_week(tmp_path: Path) -> None:
    """The acceptance of issue 34: streams retain a week; checkpoints every day truncate what is older; queries
    created at the end of the week from its start equal their twins that ran all week, outputs and numbers."""
    day = timedelta(days=1)
    week_start = at(0) + 3 * day
    with open_engine(tmp_path / "s.db") as engine:
        engine.create_stream("a", retain=7 * day)
        engine.create_stream("b", retain=7 * day)
        week = {"hourly": Query.stream("a").buffer(timedelta(hours=1)),
                "count": Query.stream("a").merge(Query.stream("b")).scan(0, count_one)}
        for d in range(10):
            if at(0) + d * day == week_start:
                engine.advance_time(week_start)
                for uri, query in week.items():
                    engine.create_subscription(f"all-week-{uri}", query)
            for i in range(0, 24 * 60, 3):  # an event every 3 minutes
                engine.append("a" if i % 2 else "b", d * 10_000 + i, at(0) + d * day + timedelta(minutes=i))
            engine.process()
            engine.checkpoint()
        retained = engine.streams()["a"].retained_since
        assert retained is not None and week_start - day < retained <= week_start  # the days before were dropped
        with pytest.raises(StartNotRetainedError, match="before what the log retains"):
            engine.create_subscription("too-early", week["count"], start=week_start - 2 * day)
        for uri, query in week.items():
            engine.create_subscription(f"backfilled-{uri}", query, start=week_start)
        engine.process()
        engine.advance_time(engine.now + timedelta(hours=2))
        for uri in week:
            assert outputs_of(engine, f"backfilled-{uri}") == outputs_of(engine, f"all-week-{uri}"), uri
        assert len(outputs_of(engine, "all-week-hourly")) >= 7 * 24  # an hour each, and the one the end closed


def test_a_backfill_whose_function_raises_follows_its_error_policy_and_restarts_from_where_it_failed() -> None:
    with open_engine() as engine:
        make_streams(engine)
        inverses = Query.stream("a").map(inverse).scan(0.0, operator.add)
        engine.create_subscription("twin", inverses, on_error="skip")
        append(engine, events(400))
        engine.process()
        engine.checkpoint()
        engine.create_subscription("skipping", inverses, on_error="skip", start="earliest")
        engine.create_subscription("stopping", inverses, start="earliest")
        engine.process()
        assert outputs_of(engine, "skipping") == outputs_of(engine, "twin")
        assert engine.stopped_error("stopping") is not None  # FAILED on its first bad element, in the history
        engine.checkpoint()
        for _ in range(3):  # each restart skips the element that failed it and goes on to the next one
            if engine.stopped_error("stopping") is None:
                break
            engine.restart_subscription("stopping", skip_failed=True)
            engine.process()
        append(engine, events(10, first=400))
        engine.process()
        assert engine.stopped_error("stopping") is None and not engine.is_behind("stopping")
        assert outputs_of(engine, "stopping") == outputs_of(engine, "twin")
