"""Stages that take a run of logged events in one call right below the stream's reader (a count buffer's
``on_next_run``, group_by's per-key steps), also when a timeless stage sits between them and the egress: the same
outputs, dead letters, clock and saved states as the engine's general path, which hands every event on its own
(``Engine._batch_delivery`` cleared), on randomized scripts with bounded processing, checkpoints by count and
crashes."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reaqtive import GroupedStream, Query
from reaqtive.engine import Engine, FunctionRegistry
from reaqtive.operators.buffer import BufferCount
from tests.engine.script_support import T0, Step, create_queries, play, scripts


def add(total: int, value: int) -> int:
    return total + value


def total(values: list[int]) -> int:
    return sum(values) + 1000 * len(values)


def parity(x: int) -> int:
    return x % 2


def double(x: int) -> int:
    return 2 * x


def running_sum(group: GroupedStream[int]) -> Query[int]:
    return group.scan(0, add)


def fails_on_5s(x: int) -> int:
    if x % 5 == 0:
        raise ValueError(f"no multiples of 5: {x}")
    return x


def functions() -> FunctionRegistry:
    registry = FunctionRegistry()
    for function in (add, total, parity, double, running_sum, fails_on_5s):
        registry.register(function.__name__, function)
    return registry


QUERIES: dict[str, tuple[Query[Any], str | None]] = {
    "lists": (Query.stream("a").buffer(3), None),
    "totals": (Query.stream("a").buffer(4).map(total).scan(0, add), None),
    "taken": (Query.stream("a").buffer(2).map(total).take(5), None),  # the source disposed in a run
    "failing": (Query.stream("a").buffer(2).map(total).map(fails_on_5s), "skip"),
    "keyed_mapped": (Query.stream("a").group_by(parity).flat_map(running_sum).map(double), None),
    "fused": (Query.stream("a").map(double).scan(0, add), None),
    # Another stream's timers, due inside a run of stream a: they fire before its later events.
    "debounced": (Query.stream("b").debounce(timedelta(milliseconds=1500)), None),
}

steps = scripts(["a"], batch=40, process=60, length=16)


def run(path: Path, script: list[Step], batch: bool, every: int | None, *chosen: str) -> dict[str, Any]:
    def open_engine() -> Engine:
        engine = Engine(path, functions=functions(), start=T0, checkpoint_every_events=every)
        engine._batch_delivery = batch
        return engine

    def create(engine: Engine) -> None:
        create_queries(engine, ("a", "b"), QUERIES, chosen)

    def observe(engine: Engine) -> dict[str, Any]:
        return {
            "outputs": {uri: [(o.seq, o.value) for o in engine.outputs(uri)] for uri in chosen},
            "letters": [(d.pos, d.error_type, d.value) for d in engine.dead_letters()],
            "states": [engine.subscription_status(uri).state.name for uri in chosen],
        }

    return play(path, script, open_engine, create, observe)


LONG = [Step("append", "a", tuple([0, 1, 250, 999] * 60)), Step("process", n=101), Step("checkpoint"),
        Step("crash"), Step("append", "a", tuple([1] * 33)), Step("process", n=0)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=steps, every=st.sampled_from([None, None, 1, 7]), chosen=st.sampled_from(sorted(QUERIES)))
@example(script=LONG, every=None, chosen="totals")
@example(script=LONG, every=7, chosen="taken")
@example(script=LONG, every=None, chosen="failing")
def test_a_run_taken_by_a_stage_below_the_reader_matches_event_at_a_time(
    tmp_path_factory: Any, script: list[Step], every: int | None, chosen: str
) -> None:
    directory = tmp_path_factory.mktemp("stages")
    assert run(directory / "runs.db", script, True, every, chosen) == \
        run(directory / "events.db", script, False, every, chosen)


# Times that go back as well as forward (dated by their producers, out of order): the latest of a run is not its
# last, which the run path must not assume.
unordered = st.lists(
    st.builds(Step, st.just("append"), st.sampled_from(["a", "a", "b"]),
              st.lists(st.sampled_from([-2500, -1000, -1, 0, 1, 999, 1500, 4000]), min_size=1, max_size=40)
              .map(tuple))
    | st.builds(Step, st.just("process"), n=st.integers(0, 60)) | st.builds(Step, st.just("checkpoint"))
    | st.builds(Step, st.just("crash")),
    min_size=1, max_size=12,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=unordered, chosen=st.sampled_from(["lists", "totals", "fused", "keyed_mapped"]))
@example(script=[Step("append", "a", (0, 1500, -2500, 1500, 1500)), Step("append", "b", (-1000, 0, 4000)),
                 Step("append", "a", (-1000, 1, 1))], chosen="fused")
def test_times_out_of_order_give_the_same_results_with_another_streams_timers(
    tmp_path_factory: Any, script: list[Step], chosen: str
) -> None:
    directory = tmp_path_factory.mktemp("unordered")
    assert run(directory / "runs.db", script, True, None, chosen, "debounced") == \
        run(directory / "events.db", script, False, None, chosen, "debounced")


def test_a_count_buffer_takes_a_long_run_in_few_calls(tmp_path: Path) -> None:
    """The run path is taken: the buffer's ``on_next`` is not called per event, and the lists are the same."""
    calls = {"on_next": 0, "on_next_run": 0}
    one, many = BufferCount.on_next, BufferCount.on_next_run

    def on_next(stage: Any, value: Any) -> None:
        calls["on_next"] += 1
        one(stage, value)

    def on_next_run(stage: Any, *args: Any) -> int:
        calls["on_next_run"] += 1
        return many(stage, *args)

    script = [Step("append", "a", tuple([1] * 1000)), Step("process", n=0), Step("checkpoint")]
    BufferCount.on_next, BufferCount.on_next_run = on_next, on_next_run  # type: ignore[method-assign]
    try:
        runs = run(tmp_path / "runs.db", script, True, None, "totals")
    finally:
        BufferCount.on_next, BufferCount.on_next_run = one, many  # type: ignore[method-assign]
    assert calls["on_next"] == 0
    assert 0 < calls["on_next_run"] <= 20
    assert runs == run(tmp_path / "events.db", script, False, None, "totals")
