"""The engine end to end: streams, subscriptions, process, checkpoint, crash, recovery, outputs."""

from __future__ import annotations

import operator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from reaqtive import Query
from reaqtive.engine import Engine

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def double(x: int) -> int:
    return x * 2


def is_even(x: int) -> bool:
    return x % 2 == 0


def events(start: int, stop: int) -> list[tuple[int, datetime]]:
    return [(i, T0 + timedelta(seconds=i)) for i in range(start, stop)]


def setup(engine: Engine) -> None:
    engine.create_stream("iot://numbers")
    engine.create_subscription("q://doubled", Query.stream("iot://numbers").map(double))
    engine.create_subscription("q://running", Query.stream("iot://numbers").filter(is_even).scan(0, operator.add))


def values(engine: Engine, uri: str) -> list[object]:
    return [output.value for output in engine.outputs(uri)]


def test_outputs_of_a_standing_query(tmp_path: Path) -> None:
    with Engine(tmp_path / "store.db", allow_modules=[__name__]) as engine:
        setup(engine)
        engine.append_many("iot://numbers", events(0, 6))
        assert engine.process() == 6
        assert values(engine, "q://doubled") == [0, 2, 4, 6, 8, 10]
        assert values(engine, "q://running") == [0, 2, 6]
        assert [o.seq for o in engine.outputs("q://doubled")] == [0, 1, 2, 3, 4, 5]


def test_recovery_after_a_crash_gives_the_uncrashed_output(tmp_path: Path) -> None:
    with Engine(tmp_path / "oracle.db", allow_modules=[__name__]) as oracle:
        setup(oracle)
        oracle.append_many("iot://numbers", events(0, 20))
        oracle.process()
        expected = oracle.outputs()

    path = tmp_path / "crashing.db"
    engine = Engine(path, allow_modules=[__name__])
    setup(engine)
    engine.append_many("iot://numbers", events(0, 12))
    engine.process(max_events=5)
    engine.checkpoint()
    engine.process()  # events 5..11 processed after the checkpoint, then the process "dies"
    engine.close()

    with Engine(path, allow_modules=[__name__]) as recovered:
        recovered.append_many("iot://numbers", events(12, 20))
        recovered.process()
        assert recovered.outputs() == expected, "nothing lost, nothing twice"


def test_a_subscription_created_later_does_not_replay_older_events(tmp_path: Path) -> None:
    path = tmp_path / "late.db"
    with Engine(path, allow_modules=[__name__]) as engine:
        setup(engine)
        engine.append_many("iot://numbers", events(0, 4))
        engine.process()
        engine.checkpoint()
        engine.create_subscription("q://late", Query.stream("iot://numbers").map(double))
        engine.append_many("iot://numbers", events(4, 6))
        engine.process()
    with Engine(path, allow_modules=[__name__]) as recovered:
        recovered.process()
        assert values(recovered, "q://late") == [8, 10], "the late query starts where the stream was (no flashback)"
