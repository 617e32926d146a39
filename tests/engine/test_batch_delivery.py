"""Batch delivery is invisible: delivering runs of logged events through the engine's fast path gives the same
outputs, the same clock and the same checkpoint contents as delivering them one at a time (the engine's general
path, which checks and delivers each event on its own), on randomized workloads with timers, several streams,
bounded processing, checkpoints by count, and crashes.

The general path is forced by clearing ``Engine._batch_delivery`` (a switch kept for this test).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reaqtive import GroupedStream, Query
from reaqtive.engine import Engine, FunctionRegistry
from tests.engine.script_support import T0, Step, play, scripts


def add(total: int, value: int) -> int:
    return total + value


def total(values: list[int]) -> int:
    return sum(values) + 1000 * len(values)  # an empty list is visible too


def parity(x: int) -> int:
    return x % 2


def per_key_windows(group: GroupedStream[int]) -> Query[Any]:
    return group.buffer(timedelta(seconds=3)).map(total)


def ticks_until(x: int) -> Query[Any]:
    """An inner made of time: a timer per element (an inner created mid-run schedules work mid-run)."""
    return Query.timer(timedelta(milliseconds=x * 300)).map(always_x(x))


def always_x(x: int) -> Any:
    return _Const(x)


class _Const:
    def __init__(self, x: int) -> None:
        self.x = x

    def __call__(self, _: object) -> int:
        return self.x


def inner_of_b(_: int) -> Query[Any]:
    return Query.stream("b").take(2)


def inner_of_a(_: int) -> Query[Any]:
    """An inner reading the outer's own stream: it subscribes to the stream in the middle of a run."""
    return Query.stream("a").take(2)


def at_once(x: int) -> Query[Any]:
    """An inner whose timer is due at the instant it is created: work due in the middle of a run."""
    return Query.timer(timedelta(0)).map(always_x(x))


def echo_then_timer(x: int) -> Query[Any]:
    """The element at once, then its negation from a timer due at the same instant: the order of the two, and of
    the next event's, shows whether work due at an event's instant ran before the next event."""
    return Query.return_value(x).merge(Query.timer(timedelta(0)).map(always_x(-x)))


def is_odd(x: int) -> bool:
    return x % 2 == 1


def functions() -> FunctionRegistry:
    registry = FunctionRegistry()
    for function in (add, total, parity, per_key_windows, ticks_until, inner_of_b, inner_of_a, at_once,
                     echo_then_timer, is_odd):
        registry.register(function.__name__, function)
    registry.register("always_x", always_x)
    return registry


QUERIES: dict[str, Query[Any]] = {
    "sum": Query.stream("a").scan(0, add),
    "windows": Query.stream("a").buffer(timedelta(seconds=2)).map(total),
    "debounced": Query.stream("a").debounce(timedelta(milliseconds=1500)),
    "sampled": Query.stream("b").sample(timedelta(seconds=1)),
    "keyed": Query.stream("a").group_by(parity).flat_map(per_key_windows),
    "timers": Query.stream("b").filter(is_odd).flat_map(ticks_until),
    "switch": Query.stream("a").switch_latest(inner_of_b),
    "delayed": Query.stream("b").delay_subscription(timedelta(seconds=4)).scan(0, add),
    "own_stream": Query.stream("a").flat_map(inner_of_a),
    "at_once": Query.stream("b").flat_map(at_once).scan(0, add),
    "echo_then_timer": Query.stream("b").flat_map(echo_then_timer),
    # A zero debounce emits each element from a timer due at its own instant: an element is lost if the next
    # one, at the same instant, arrives before that work runs.
    "debounce_zero": Query.stream("b").debounce(timedelta(0)),
}


steps = scripts(["a", "b"], batch=30, process=40, length=25)


def open_engine(path: Path, batch: bool, every: int | None) -> Engine:
    engine = Engine(path, functions=functions(), start=T0, checkpoint_every_events=every)
    engine._batch_delivery = batch
    return engine


def run(path: Path, script: list[Step], batch: bool, every: int | None,
        chosen: tuple[str, ...] = tuple(QUERIES)) -> dict[str, Any]:
    def create(engine: Engine) -> None:
        engine.create_stream("a")
        engine.create_stream("b")
        for uri in chosen:
            engine.create_subscription(uri, QUERIES[uri])

    def observe(engine: Engine) -> dict[str, Any]:
        return {"outputs": {uri: [(o.seq, o.value) for o in engine.outputs(uri)] for uri in chosen}}

    return play(path, script, lambda: open_engine(path, batch, every), create, observe)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=steps, every=st.sampled_from([None, None, 1, 3, 7]))
def test_batch_delivery_gives_the_outputs_clock_and_checkpoints_of_event_at_a_time_delivery(
    tmp_path_factory: Any, script: list[Step], every: int | None
) -> None:
    directory = tmp_path_factory.mktemp("batch")
    one_by_one = run(directory / "one.db", script, batch=False, every=every)
    batched = run(directory / "batch.db", script, batch=True, every=every)
    assert batched["outputs"] == one_by_one["outputs"]
    assert batched["clocks"] == one_by_one["clocks"]
    assert batched["states"] == one_by_one["states"]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=steps, every=st.sampled_from([None, None, 1, 5]),
       chosen=st.lists(st.sampled_from(sorted(QUERIES)), min_size=1, max_size=2, unique=True).map(tuple))
# A timer due at the event's instant subscribes a second reader of the stream (delay_subscription): the event must
# reach both, not only the reader that was the stream's only one before the timer ran.
@example(script=[Step("append", "a", (0,)), Step("append", "b", (4000,))], every=None, chosen=("delayed", "at_once"))
def test_a_stream_with_one_reader_is_handed_whole_runs_with_the_same_results(
    tmp_path_factory: Any, script: list[Step], every: int | None, chosen: tuple[str, ...]
) -> None:
    """With one or two queries, a stream often has a single reader: the engine hands it the run (it loops over it
    itself), until a timer is due, an inner reader subscribes to the stream, or a query fails."""
    directory = tmp_path_factory.mktemp("sole")
    one_by_one = run(directory / "one.db", script, False, every, chosen)
    batched = run(directory / "batch.db", script, True, every, chosen)
    assert batched == one_by_one


def test_a_long_run_with_timers_due_inside_it_matches_event_at_a_time(tmp_path: Path) -> None:
    """One large batch spanning many window ends and debounce deadlines: the fast path must stop for each."""
    script = [Step("append", "a", tuple([0, 250, 999, 1500, 0, 4000] * 40)),
              Step("append", "b", tuple([1, 0, 1000, 0, 250] * 40)),
              Step("process", n=0), Step("checkpoint")]
    assert run(tmp_path / "one.db", script, False, None) == run(tmp_path / "batch.db", script, True, None)
    for uri in QUERIES:  # each alone: its streams' only reader
        alone = (uri,)
        assert run(tmp_path / f"one-{uri}.db", script, False, None, alone) == \
            run(tmp_path / f"batch-{uri}.db", script, True, None, alone), uri
