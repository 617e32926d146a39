"""The in-memory engine (``Engine(":memory:")``, ``Engine.in_memory()``): a file engine's behaviour minus durability.

The behaviours that do not need a second process run on both kinds of store (the ``engine_at`` fixture), so a
difference between them fails here."""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from reaqtive import Query
from reaqtive.engine import (
    ArtifactExistsError,
    ArtifactNotFoundError,
    Engine,
    EngineStatus,
    EngineStore,
    GroupCommit,
    SubscriptionState,
)
from reaqtive.engine.database import MEMORY

T0 = datetime(2026, 1, 1, tzinfo=UTC)

OpenEngine = Callable[..., Engine]


def double(x: int) -> int:
    return x * 2


def one_over(x: int) -> float:
    return 1 / x


def at(second: int) -> datetime:
    return T0 + timedelta(seconds=second)


def events(start: int, stop: int) -> list[tuple[int, datetime]]:
    return [(i, at(i)) for i in range(start, stop)]


@pytest.fixture(params=["file", "memory"])
def engine_at(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenEngine]:
    """Opens an engine on a file store or an in-memory one (each test runs on both); closes what it opened."""
    opened: list[Engine] = []

    def open_engine(**options: object) -> Engine:
        options.setdefault("allow_modules", [__name__])
        options.setdefault("start", T0)
        if request.param == "memory":
            engine = Engine.in_memory(**options)
        else:
            engine = Engine(tmp_path / f"s{len(opened)}.db", synchronous="OFF", **options)  # type: ignore[arg-type]
        opened.append(engine)
        return engine

    yield open_engine
    for engine in opened:
        engine.close()


def setup(engine: Engine) -> None:
    engine.create_stream("raw")
    engine.create_subscription("q://doubled", Query.stream("raw").map(double))
    engine.create_subscription("q://sum", Query.stream("raw").scan(0, operator.add))


def values(engine: Engine, uri: str) -> list[object]:
    return [output.value for output in engine.outputs(uri)]


# -- on both kinds of store -----------------------------------------------------------------------------------------


def test_standing_queries_produce_numbered_outputs(engine_at: OpenEngine) -> None:
    engine = engine_at()
    setup(engine)
    engine.append_many("raw", events(0, 5))
    assert engine.process() == 5
    assert values(engine, "q://doubled") == [0, 2, 4, 6, 8]
    assert [(o.subscription, o.seq, o.value) for o in engine.outputs("q://sum")] == [
        ("q://sum", 0, 0), ("q://sum", 1, 1), ("q://sum", 2, 3), ("q://sum", 3, 6), ("q://sum", 4, 10)]


def test_a_checkpoint_commits_state_and_truncates_the_log(engine_at: OpenEngine) -> None:
    engine = engine_at()
    setup(engine)
    engine.append_many("raw", events(0, 4))
    engine.process()
    metrics = engine.checkpoint()
    assert metrics.ingress_truncated == 4
    assert engine.streams()["raw"].retained == 0
    engine.append("raw", 10, at(10))
    engine.process()
    assert values(engine, "q://sum")[-1] == 16, "the state goes on after the checkpoint"


def test_artifacts_are_created_listed_and_deleted(engine_at: OpenEngine) -> None:
    engine = engine_at()
    setup(engine)
    with pytest.raises(ArtifactExistsError):
        engine.create_stream("raw")
    engine.delete_subscription("q://doubled")
    assert sorted(info.uri for info in engine.artifacts()) == ["q://sum", "raw"]
    engine.append("raw", 1, at(1))
    engine.process()
    with pytest.raises(ArtifactNotFoundError, match="'q://doubled'"):  # deleted, with its outputs
        engine.outputs("q://doubled")


def test_a_query_that_fails_ends_alone(engine_at: OpenEngine) -> None:
    engine = engine_at()
    setup(engine)
    engine.create_subscription("q://inverse", Query.stream("raw").map(one_over))
    engine.append_many("raw", events(0, 3))
    engine.process()
    assert values(engine, "q://inverse") == [], "1/0 at the first event ended it"
    assert values(engine, "q://sum") == [0, 1, 3], "the others run on"
    assert engine.subscription_status("q://inverse").state is SubscriptionState.FAILED
    assert engine.status is EngineStatus.DEGRADED, "a query that stopped is never silent"


def test_events_out_of_bounds_go_to_the_dead_letters(engine_at: OpenEngine) -> None:
    engine = engine_at(allowed_lateness=timedelta(seconds=10))
    setup(engine)
    engine.append("raw", 1, at(100))
    engine.process()
    engine.append("raw", 2, at(1))  # 99 s behind the clock
    engine.process()
    assert [(letter.stream, letter.seq) for letter in engine.dead_letters()] == [("raw", 1)]
    assert values(engine, "q://sum") == [1]


def test_group_commit_appends_from_threads_are_all_delivered(engine_at: OpenEngine) -> None:
    engine = engine_at(ingress_commit=GroupCommit(events=50, seconds=0.01))
    setup(engine)

    def produce() -> None:
        for i in range(100):
            engine.append("raw", 1, at(i))

    producers = [threading.Thread(target=produce) for _ in range(4)]
    for producer in producers:
        producer.start()
    while any(producer.is_alive() for producer in producers):
        engine.process()
        engine.checkpoint()  # the checkpoint's connection and the appends' connection share the database
    for producer in producers:
        producer.join()
    engine.flush_ingress()
    engine.process()
    assert values(engine, "q://sum")[-1] == 400


def test_acknowledged_outputs_are_trimmed(engine_at: OpenEngine) -> None:
    engine = engine_at()
    setup(engine)
    engine.append_many("raw", events(0, 5))
    engine.process()
    engine.ack("q://sum", 2)
    engine.checkpoint()
    assert [o.seq for o in engine.outputs("q://sum")] == [3, 4]
    assert [o.seq for o in engine.outputs("q://sum", after=3, limit=5)] == [4]


# -- in memory only -------------------------------------------------------------------------------------------------


def test_memory_is_what_engine_in_memory_opens() -> None:
    with Engine.in_memory(start=T0) as engine:
        assert engine.path == Path(MEMORY)
        assert engine.now == T0, "the options reach the engine"


def test_after_close_a_new_memory_engine_is_empty() -> None:
    with Engine(MEMORY, allow_modules=[__name__], start=T0) as engine:
        setup(engine)
        engine.append_many("raw", events(0, 3))
        engine.process()
        engine.checkpoint()
    with Engine(MEMORY, allow_modules=[__name__]) as fresh:
        assert fresh.artifacts() == []
        assert fresh.streams() == {}
        assert fresh.outputs() == []


def test_two_memory_engines_at_once_are_separate() -> None:
    with Engine.in_memory(allow_modules=[__name__], start=T0) as first, Engine.in_memory(start=T0) as second:
        setup(first)
        second.create_stream("other")
        assert sorted(info.uri for info in second.artifacts()) == ["other"]
        assert "other" not in {info.uri for info in first.artifacts()}


def test_a_memory_store_writes_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = EngineStore(MEMORY)
    try:
        assert store.in_memory and store.lock_path is None
        store.append("raw", [(1, T0)])
        assert store.stream_heads() == {"raw": 1}
    finally:
        store.close()
    assert list(tmp_path.iterdir()) == [], "no database, journal or lock file"
