"""A stream's only reader hands a fused run ending at the egress whole runs of events (one call per run, its
outputs stamped and written in one call): invisible next to the same queries bound unfused, which take every
event through one ``on_next`` per stage. Compared on randomized scripts with user functions that raise under both
error policies, outputs the store cannot keep, other queries' timers due inside a run, bounded processing,
checkpoints by count, and crashes: the outputs, the dead letters (their log positions), the subscriptions' states
and faults, the engine's clock and the saved state must be the same.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reaqtive import GroupedStream, Query
from reaqtive.engine import Engine, FunctionRegistry
from reaqtive.operators._fusion import stage_fusion
from tests.engine.script_support import T0, Step, create_queries, play, scripts


def add(total: int, value: int) -> int:
    return total + value


def double(x: int) -> int:
    return 2 * x


def not_div_by_3(x: int) -> bool:
    return x % 3 != 0


def fails_on_7s(x: int) -> int:
    if x % 7 == 0:
        raise ValueError(f"no sevens: {x}")
    return x + 1


def key_fails_on_7s(x: int) -> int:
    if x % 7 == 0:
        raise ValueError(f"no key for sevens: {x}")
    return x % 3


def running_sum(group: GroupedStream[int]) -> Query[int]:
    return group.scan(0, add)


def add_but_not_7s(total: int, value: int) -> int:
    if value % 7 == 0:
        raise ValueError(f"no sevens: {value}")
    return total + value


def checked_sum(group: GroupedStream[int]) -> Query[int]:
    return group.scan(0, add_but_not_7s)


def first_three(group: GroupedStream[int]) -> Query[int]:
    return group.take(3)


def total(values: list[int]) -> int:
    return sum(values) + 1000 * len(values)


def unstorable_on_11s(x: int) -> Any:
    return object() if x % 11 == 0 else x  # the store's codec cannot keep an object()


def functions() -> FunctionRegistry:
    registry = FunctionRegistry()
    for function in (add, double, not_div_by_3, fails_on_7s, unstorable_on_11s, key_fails_on_7s, running_sum,
                     total, add_but_not_7s, checked_sum, first_three):
        registry.register(function.__name__, function)
    return registry


QUERIES: dict[str, tuple[Query[Any], str | None]] = {
    "plain": (Query.stream("a").map(double).filter(not_div_by_3).scan(0, add), None),
    "scan_only": (Query.stream("a").scan(0, add), None),
    "skip": (Query.stream("a").map(fails_on_7s).filter(not_div_by_3).scan(0, add), "skip"),
    "stop": (Query.stream("a").map(fails_on_7s).scan(0, add), "stop"),
    "unstorable": (Query.stream("a").map(double).map(unstorable_on_11s), None),
    # Timeless stages that are not fused: per-key steps (group_by's keyed form), a count-based buffer.
    "keyed": (Query.stream("a").group_by(key_fails_on_7s).flat_map(running_sum), "skip"),
    "keyed_stop": (Query.stream("a").group_by(not_div_by_3).flat_map(checked_sum), "stop"),
    "keyed_skip": (Query.stream("a").group_by(not_div_by_3).flat_map(checked_sum), "skip"),
    "keyed_ending": (Query.stream("a").group_by(not_div_by_3).flat_map(first_three), None),
    "buffered": (Query.stream("a").map(fails_on_7s).buffer(3).map(total).scan(0, add), "stop"),
    "buffered_skip": (Query.stream("a").buffer(4, 3).map(total), None),
    # Other streams' queries with timers: due inside a run of stream a, they must fire before its later events.
    "debounced": (Query.stream("b").debounce(timedelta(milliseconds=1500)), None),
    "windows": (Query.stream("b").buffer(timedelta(seconds=2)).map(len), None),
}


steps = scripts(["a", "a", "b"], batch=40, process=60, length=20)


def open_engine(path: Path, every: int | None) -> Engine:
    registry = functions()
    registry.register("len", len)
    return Engine(path, functions=registry, start=T0, checkpoint_every_events=every)


def observe(engine: Engine, chosen: tuple[str, ...]) -> dict[str, Any]:
    return {
        "outputs": {uri: [(o.seq, o.value) for o in engine.outputs(uri)] for uri in chosen},
        "letters": [(d.subscription, d.unit, d.path, d.pos, d.ordinal, d.error_type, d.value)
                    for d in engine.dead_letters()],
        "states": {uri: engine.subscription_status(uri).state.name for uri in chosen},
        "faults": sorted(fault.uri for fault in engine.faults),
    }


def run(path: Path, script: list[Step], fused: bool, every: int | None, chosen: tuple[str, ...]) -> dict[str, Any]:
    def create(engine: Engine) -> None:
        create_queries(engine, ("a", "b"), QUERIES, chosen)

    with stage_fusion(fused):
        return play(path, script, lambda: open_engine(path, every), create, lambda engine: observe(engine, chosen))


ALONE = [(uri,) for uri in ("plain", "scan_only", "skip", "stop", "unstorable", "keyed", "keyed_stop", "keyed_skip",
                                 "keyed_ending", "buffered", "buffered_skip")]
WITH_TIMERS = [(uri, timed) for (uri,) in ALONE for timed in ("debounced", "windows")]

LONG = [Step("append", "a", tuple([0, 1, 250, 999, 1500, 0, 4000] * 30)),
        Step("append", "b", tuple([1, 0, 1000, 0, 250] * 30)),
        Step("append", "a", tuple([1] * 200)),
        Step("process", n=0), Step("checkpoint")]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=steps, every=st.sampled_from([None, None, 1, 7]), chosen=st.sampled_from(ALONE + WITH_TIMERS))
@example(script=LONG, every=None, chosen=("skip", "debounced"))
@example(script=LONG, every=7, chosen=("unstorable", "windows"))
def test_reading_whole_runs_into_a_fused_run_matches_event_at_a_time(
    tmp_path_factory: Any, script: list[Step], every: int | None, chosen: tuple[str, ...]
) -> None:
    directory = tmp_path_factory.mktemp("runs")
    unfused = run(directory / "unfused.db", script, False, every, chosen)
    fused = run(directory / "fused.db", script, True, every, chosen)
    assert fused == unfused


def test_a_long_run_reaches_the_fused_run_in_few_calls_and_gives_the_same_results(tmp_path: Path) -> None:
    """The run path is taken (the stage's ``on_next`` is not called per event) and changes nothing."""
    from reaqtive.operators._fusion import FusedEntry

    calls = {"on_next": 0, "on_next_run": 0}
    original = FusedEntry.__init__

    def counting(self: FusedEntry, stages: Any) -> None:
        original(self, stages)
        cls = type(self)
        if not getattr(cls, "_counted", False):
            one, many, collect = cls.on_next, cls.on_next_run, cls.collect_run

            def on_next(entry: Any, value: Any) -> None:
                calls["on_next"] += 1
                one(entry, value)

            def on_next_run(entry: Any, *args: Any) -> int:
                calls["on_next_run"] += 1
                return int(many(entry, *args))

            def collect_run(entry: Any, *args: Any) -> int:  # the run's outputs into the egress's list
                calls["on_next_run"] += 1
                return int(collect(entry, *args))

            cls.on_next, cls.on_next_run, cls.collect_run = on_next, on_next_run, collect_run  # type: ignore[method-assign]
            cls._counted = True  # type: ignore[attr-defined]

    script = [Step("append", "a", tuple([1] * 1000)), Step("process", n=0), Step("checkpoint")]
    FusedEntry.__init__ = counting  # type: ignore[method-assign]
    try:
        fused = run(tmp_path / "fused.db", script, True, None, ("skip",))
    finally:
        FusedEntry.__init__ = original  # type: ignore[method-assign]
    assert calls["on_next"] == 0
    assert 0 < calls["on_next_run"] <= 20
    assert fused == run(tmp_path / "unfused.db", script, False, None, ("skip",))
    # Each skipped element is recorded at the log position of its own event (values 1..1000 at positions 1..1000
    # here: stream a is the only one written).
    assert [(letter[3], letter[6]) for letter in fused["letters"]] == [(x, x) for x in range(7, 1001, 7)]
