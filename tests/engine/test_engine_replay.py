"""Replay after crashes: positions only move forward, inner readers start where they were created, and any
sequence of appends, partial processing, checkpoints and crashes gives the outputs of a run that never crashed.

A "crash" here closes the engine without a checkpoint (the process dying after its last commit), so everything
after the last checkpoint is replayed from the ingress log on the next open. The kill -9 versions of these
scenarios are in ``test_crash_higher_order.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reaqtive import GroupedStream, Query
from reaqtive.engine import Engine, FunctionRegistry

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def add(total: int, value: int) -> int:
    return total + value


def busy_inner(_: int) -> Query[Any]:
    """An inner that reads two events of stream ``b``: while it waits, a ``max_concurrent=1`` outer lags."""
    return Query.stream("b").take(2)


def inner_of_b(_: int) -> Query[Any]:
    return Query.stream("b")


def tagged_inner(x: int) -> Query[Any]:
    return Query.stream("b").take(3).map_indexed(tag_index).filter(always)


def tag_index(value: int, index: int) -> int:
    return value * 10 + index


def always(_: object) -> bool:
    return True


def parity(x: int) -> int:
    return x % 2


def group_sum(group: GroupedStream[int]) -> Query[Any]:
    return group.scan(0, add)


def double(x: int) -> int:
    return 2 * x


def group_doubled(group: GroupedStream[int]) -> Query[Any]:
    """An inner unit without a stateful stage: a differential checkpoint must still write it once."""
    return group.map(double)


def functions() -> FunctionRegistry:
    registry = FunctionRegistry()
    for function in (add, busy_inner, inner_of_b, tagged_inner, tag_index, always, parity, group_sum, double,
                     group_doubled):
        registry.register(function.__name__, function)
    return registry


QUERIES: dict[str, Query[Any]] = {
    "sum": Query.stream("a").scan(0, add),
    "sum_b": Query.stream("b").scan(0, add),
    "one_at_a_time": Query.stream("a").flat_map(busy_inner, max_concurrent=1),
    "two_at_a_time": Query.stream("a").flat_map(tagged_inner, max_concurrent=2),
    "switch": Query.stream("a").switch_latest(inner_of_b),
    "groups": Query.stream("a").group_by(parity).flat_map(group_sum),
    "stateless_groups": Query.stream("a").group_by(parity).flat_map(group_doubled),
}


def open_engine(path: Path) -> Engine:
    return Engine(path, functions=functions(), start=T0)


def create_all(engine: Engine) -> None:
    engine.create_stream("a")
    engine.create_stream("b")
    for uri, query in QUERIES.items():
        engine.create_subscription(uri, query)


def values(engine: Engine, uri: str) -> list[Any]:
    return [output.value for output in engine.outputs(uri)]


# -- the two defects, as they were found -------------------------------------------------------------------------


def test_a_checkpoint_taken_while_replaying_for_a_lagging_reader_does_not_make_others_count_twice(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    engine = open_engine(path)
    create_all(engine)
    for i in range(1, 5):
        engine.append("a", i, T0 + timedelta(seconds=i))
    engine.process()
    engine.checkpoint()  # "one_at_a_time" lags on a: its inner waits for b
    engine.append("a", 5, T0 + timedelta(seconds=5))
    engine.process()
    engine.close()  # crash 1: the replay starts at the lagging reader's position
    engine = open_engine(path)
    engine.process(max_events=1)  # one event into the rewound replay...
    engine.checkpoint()  # ...and a checkpoint there
    engine.append("a", 6, T0 + timedelta(seconds=6))
    engine.process()
    engine.close()  # crash 2
    engine = open_engine(path)
    engine.process()
    assert values(engine, "sum") == [1, 3, 6, 10, 15, 21]
    assert engine.streams()["a"].delivered == 5, "the delivered watermark never moved back"
    engine.close()


def test_an_inner_reader_starts_where_it_was_created_not_at_the_oldest_retained_event(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    engine = open_engine(path)
    engine.create_stream("a")
    engine.create_stream("b")
    engine.create_subscription("switch", Query.stream("a").switch_latest(inner_of_b))
    for i in range(1, 9):
        engine.append("b", i, T0 + timedelta(seconds=i))
    engine.process()
    engine.append("a", 0, T0 + timedelta(seconds=9))  # the inner reader of b is created here, after b#7
    engine.process()
    engine.checkpoint()  # before the inner's first event
    engine.append_many("b", [(9, T0 + timedelta(seconds=10)), (10, T0 + timedelta(seconds=11))])
    engine.process()
    engine.close()  # crash: b 1..8 are still retained (the checkpoint did not cover what "switch" never read)
    engine = open_engine(path)
    engine.process()
    assert values(engine, "switch") == [9, 10]
    engine.close()


# -- any schedule of appends, partial processing, checkpoints and crashes ------------------------------------------


@dataclass(frozen=True)
class Step:
    kind: str  # "a", "b": append a value to that stream; "process": up to n events; "checkpoint"; "crash"
    n: int = 0


steps = st.lists(
    st.one_of(
        st.builds(Step, st.sampled_from(["a", "b"]), st.integers(1, 9)),
        st.builds(Step, st.just("process"), st.integers(1, 4)),
        st.builds(Step, st.just("checkpoint")),
        st.builds(Step, st.just("crash")),
    ),
    min_size=1,
    max_size=40,
)


def run(path: Path, script: list[Step]) -> dict[str, list[Any]]:
    engine = open_engine(path)
    create_all(engine)
    second = 0
    try:
        for step in script:
            if step.kind in ("a", "b"):
                second += 1
                engine.append(step.kind, step.n, T0 + timedelta(seconds=second))
            elif step.kind == "process":
                engine.process(max_events=step.n)
            elif step.kind == "checkpoint":
                engine.checkpoint()
            else:
                engine.close()
                engine = open_engine(path)
        engine.process()
        return {uri: values(engine, uri) for uri in QUERIES}
    finally:
        engine.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=steps)
def test_any_schedule_of_checkpoints_and_crashes_gives_the_outputs_of_an_uncrashed_run(
    tmp_path_factory: Any, script: list[Step]
) -> None:
    directory = tmp_path_factory.mktemp("replay")
    uncrashed = [step for step in script if step.kind not in ("checkpoint", "crash")]
    assert run(directory / "crashed.db", script) == run(directory / "oracle.db", uncrashed)
