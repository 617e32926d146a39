"""Idle subscriptions bound lazily (reaqtive.engine.idle): a recovered subscription whose streams have nothing new for
it keeps only its record and stored state until its stream's first event, or until something needs its operators.

The oracle is the same engine binding every recovered subscription at once: every script of appends, processing,
checkpoints, crashes (twice in a row too), pauses, deletes, updates and look-ups gives the same outputs, numbered the
same, the same statuses and the same stored states either way.
"""

from __future__ import annotations

import operator
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reaqtive import Query
from reaqtive.engine import Engine, EngineStatus, FunctionRegistry, RecoveryPolicy
from reaqtive.engine.idle import IDLE_OPERATORS, Subscriptions, idle_streams
from reaqtive.engine.readers import StreamReader
from reaqtive.state import STATE_CATEGORY, CheckpointMode
from reaqtive.state.traversal import save_subscription
from tests.engine.test_log_fields import put_state
from tests.support import memory_held_while_open

T0 = datetime(2026, 1, 1, tzinfo=UTC)
STREAMS = ("a", "b", "c")


def at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def double(x: int) -> int:
    return x * 2


def is_even(x: int) -> bool:
    return x % 2 == 0


def inverse(x: int) -> int:
    return 100 // x  # raises on 0


def functions() -> FunctionRegistry:
    registry = FunctionRegistry()
    registry.register("add", operator.add)
    registry.register("double", double)
    registry.register("is_even", is_even)
    registry.register("inverse", inverse)
    return registry


# Idle-able queries (several of one template, as a store of many small queries has), and queries that must bind at
# recovery: one that emits on start, one with a timer per element, one that completes.
QUERIES: dict[str, Query[Any]] = {
    **{f"sum-{s}{i}": Query.stream(s).scan(0, operator.add) for s in STREAMS for i in range(2)},
    "merged": Query.stream("a").merge(Query.stream("b")).map(double),
    "pairs": Query.stream("c").filter(is_even).buffer(2),
    "started": Query.stream("b").start_with(-1).scan(0, operator.add),
    "timed": Query.stream("a").buffer(timedelta(milliseconds=5)),
    "taken": Query.stream("c").take(2),
    # User functions that raise on 0: skipped (a dead letter) or stopping the query (FAILED, kept).
    "skipping": Query.stream("b").map(inverse),
    "stopping": Query.stream("c").map(inverse),
}
ON_ERROR = {"skipping": "skip", "stopping": "stop"}
IDLE = [uri for uri in QUERIES if uri not in ("started", "timed", "taken")]
UPDATED = Query.stream("a").scan(0, operator.add).map(double)


class Run:
    """One engine on a file store, crashing as a kill leaves it (the outputs not yet in the sink are lost)."""

    def __init__(self, path: Path, *, lazy: bool = True) -> None:
        self.path = path
        self.options: dict[str, Any] = {"functions": functions(), "start": T0, "synchronous": "OFF",
                                        "lazy_binding": lazy}
        self.engine = Engine(path, **self.options)
        self.clock = 0
        self.idle_seen = 0  # subscriptions recovered idle, over all recoveries
        for stream in STREAMS:
            self.engine.create_stream(stream)
        for uri, query in QUERIES.items():
            self.engine.create_subscription(uri, query, on_error=ON_ERROR.get(uri))
        self.engine.checkpoint()

    def crash(self) -> None:
        self.engine._outputs.buffer.clear()
        self.engine.close()
        self.engine = Engine(self.path, **self.options)
        self.idle_seen += self.engine.recovery.idle_subscriptions

    def step(self, step: tuple[Any, ...]) -> None:
        engine, kind = self.engine, step[0]
        live = [uri for uri in QUERIES if engine.created_at(uri) is not None]
        if kind == "append":
            self.clock += 1
            engine.append(step[1], step[2], at(self.clock))
        elif kind == "process":
            engine.process()
        elif kind == "checkpoint":
            engine.checkpoint(full=step[1])
        elif kind == "crash":
            self.crash()
        elif kind == "advance":
            self.clock += step[1]
            engine.advance_time(at(self.clock))
        elif live:
            uri = live[step[1] % len(live)]
            self._on(uri, kind)

    def _on(self, uri: str, kind: str) -> None:
        engine = self.engine
        if kind == "pause":
            engine.pause(uri)
        elif kind == "resume":
            engine.resume(uri)
        elif kind == "delete":
            engine.delete_subscription(uri)
        elif kind == "update" and not engine.is_paused(uri) and uri.startswith("sum-a"):
            engine.update_subscription(uri, UPDATED)
        elif kind == "look":
            engine.info(uri)
            engine.subscription_status(uri)
            engine.snapshot()
            engine.artifacts()

    def finish(self) -> dict[str, Any]:
        engine = self.engine
        for uri in engine.paused():
            engine.resume(uri)
        engine.process()
        engine.advance_time(at(self.clock + 100))
        engine.checkpoint(full=True)
        found = {uri: ([(o.seq, o.value) for o in engine.outputs(uri)], engine.subscription_status(uri).state,
                       engine.info(uri).state_bytes)
                 for uri in QUERIES if engine.created_at(uri) is not None}
        states = engine._store.checkpoints.read(strict=False)
        found["states"] = dict(states.items(STATE_CATEGORY))
        found["engine"] = (engine.status, sorted((f.uri, type(f.error).__name__) for f in engine.faults))
        found["dead letters"] = [(d.subscription, d.pos, d.value, d.path, d.reason) for d in engine.dead_letters()]
        engine.close()
        return found


def play(steps: list[tuple[Any, ...]], *, lazy: bool) -> tuple[dict[str, Any], int]:
    with tempfile.TemporaryDirectory(prefix="reaqtive-idle-") as scratch:
        run = Run(Path(scratch) / "s.db", lazy=lazy)
        for step in steps:
            run.step(step)
        return run.finish(), run.idle_seen


def compare(steps: list[tuple[Any, ...]]) -> int:
    """Play ``steps`` lazily and eagerly; returns how many subscriptions the lazy run recovered idle."""
    expected, eager_idle = play(steps, lazy=False)  # the oracle: every recovered subscription binds at once
    found, idle = play(steps, lazy=True)
    assert eager_idle == 0
    assert found == expected
    return idle


_STEP = st.one_of(
    st.tuples(st.just("append"), st.sampled_from(STREAMS), st.integers(0, 9)),
    st.tuples(st.just("process")),
    st.tuples(st.just("checkpoint"), st.booleans()),
    st.tuples(st.just("crash")),
    st.tuples(st.just("advance"), st.integers(1, 8)),
    st.tuples(st.sampled_from(["pause", "resume", "delete", "update", "look"]), st.integers(0, 20)),
)


SCRIPTS = st.lists(_STEP, max_size=24)


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SCRIPTS)
# (Operations on a subscription pick it by index among the live ones, in QUERIES' order: 1 is sum-a1, 3 sum-b1...)
@example([("append", "c", 2), ("process",), ("checkpoint", False), ("crash",), ("pause", 3), ("append", "b", 5),
          ("process",), ("crash",), ("crash",), ("resume", 3), ("append", "b", 2), ("process",)])
@example([("checkpoint", True), ("crash",), ("update", 1), ("delete", 2), ("look", 5), ("append", "a", 1),
          ("append", "b", 3), ("append", "c", 4), ("process",), ("checkpoint", True), ("crash",), ("append", "a", 6)])
@example([("append", "a", 1), ("advance", 3), ("process",), ("checkpoint", False), ("crash",), ("advance", 8),
          ("append", "a", 2), ("append", "b", 2), ("process",), ("crash",), ("advance", 8), ("process",)])
@example([("checkpoint", True), ("crash",), ("append", "b", 0), ("append", "c", 0), ("process",), ("crash",),
          ("crash",), ("append", "b", 4), ("append", "c", 5), ("process",), ("checkpoint", False), ("crash",)])
def test_lazy_binding_gives_the_outputs_statuses_and_states_of_eager_binding(steps: list[tuple[Any, ...]]) -> None:
    compare(steps)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SCRIPTS)
@example([("append", "a", 1), ("process",), ("checkpoint", False), ("crash",), ("crash",), ("append", "b", 2),
          ("process",), ("crash",), ("append", "a", 3), ("append", "c", 4), ("process",)])
@example([("append", "a", 1), ("process",), ("crash",), ("pause", 1), ("append", "b", 5), ("process",),
          ("checkpoint", True), ("crash",), ("resume", 1), ("append", "b", 2), ("process",)])
@example([("crash",), ("look", 3), ("delete", 4), ("update", 0), ("append", "a", 7), ("checkpoint", True),
          ("crash",), ("crash",), ("append", "c", 2), ("append", "c", 4), ("process",)])
def test_lazy_binding_equals_eager_binding_over_many_scripts(steps: list[tuple[Any, ...]]) -> None:
    compare(steps)


def test_the_scripts_reach_idle_subscriptions() -> None:
    """The comparison is not vacuous: a crash after a checkpoint leaves subscriptions idle, and events bind them."""
    idle = compare([("append", "a", 1), ("process",), ("checkpoint", False), ("crash",), ("crash",),
                    ("append", "b", 2), ("append", "c", 3), ("process",), ("look", 2), ("crash",)])
    assert idle >= 8


def test_a_recovered_store_of_idle_subscriptions_binds_only_what_its_events_reach(tmp_path: Path) -> None:
    run = Run(tmp_path / "s.db")
    run.engine.append("a", 1, at(1))
    run.engine.process()
    run.crash()
    engine = run.engine
    # The first of each template (the sums, merged, pairs, the maps) binds: the others' states are checked against
    # its shape.
    idle = {uri for uri in QUERIES if engine._subscriptions.is_idle(uri)}
    assert idle == set(IDLE) - {"sum-a0", "merged", "pairs", "skipping"}
    assert engine.recovery.idle_subscriptions == len(idle)
    assert all(engine.subscription_status(uri).state.value == "running" for uri in idle)
    assert all(engine.info(uri).running for uri in idle)
    stored = dict(engine._store.checkpoints.read(strict=False).items(STATE_CATEGORY))
    # A full checkpoint writes every state, the idle ones as they are stored, and leaves them idle.
    assert engine.checkpoint(full=True).dirty_subscriptions == len(QUERIES)
    assert {uri for uri in QUERIES if engine._subscriptions.is_idle(uri)} == idle
    rewritten = dict(engine._store.checkpoints.read(strict=False).items(STATE_CATEGORY))
    assert all(rewritten[uri] == stored[uri] for uri in idle)
    engine.append("c", 2, at(2))
    engine.process()
    # Those reading c were bound before its event, and counted it; those of a and b still wait.
    # (a's event came again in the replay: no checkpoint covered it.)
    assert {uri for uri in QUERIES if engine._subscriptions.is_idle(uri)} == {"sum-b0", "sum-b1"}
    assert [o.value for o in engine.outputs("sum-c1")] == [2]
    assert [o.value for o in engine.outputs("sum-a1")] == [1]
    engine.close()


def test_queries_that_emit_or_schedule_at_start_bind_at_recovery() -> None:
    assert idle_streams(Query.stream("b").merge(Query.stream("a")).scan(0, operator.add)) == ("a", "b")
    for query in (QUERIES["started"], QUERIES["timed"], QUERIES["taken"], Query.timer(timedelta(seconds=1)),
                  Query.stream("a").group_by(is_even).flat_map(lambda g: g)):
        assert idle_streams(query) is None
    assert "start_with" not in IDLE_OPERATORS and "timer" not in IDLE_OPERATORS


def test_a_state_that_fails_to_load_when_bound_late_stops_its_subscription_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blob whose framing and shape are sound but whose reader's field is not (found only when its operators
    load it) stops its subscription under the failure policy, visibly, when it binds; the others go on; the store
    keeps the state as it was."""
    run = Run(tmp_path / "s.db")
    run.engine.append("b", 1, at(1))
    run.engine.process()
    run.engine.checkpoint(full=True)
    with monkeypatch.context() as patched:  # sum-b1's state, its reader's watermark not a position (a forged row)
        patched.setattr(StreamReader, "_mark", lambda self: "not a position")
        forged = save_subscription(run.engine._subscriptions["sum-b1"].handle, CheckpointMode.FULL)
    assert forged is not None
    run.engine.close()
    put_state(tmp_path / "s.db", "sum-b1", forged)
    engine = Engine(tmp_path / "s.db", functions=functions(), start=T0, recovery_policy=RecoveryPolicy.KEEP)
    assert engine._subscriptions.is_idle("sum-b1") and engine.status is EngineStatus.RUNNING
    engine.append("b", 2, at(2))
    engine.process()
    assert [f.uri for f in engine.faults] == ["sum-b1"]
    assert "not a position" in str(engine.faults[0].error)
    assert engine.subscription_status("sum-b1").state.value == "stopped"
    assert engine.status is EngineStatus.DEGRADED
    assert [o.value for o in engine.outputs("sum-b0")] == [1, 3]
    engine.checkpoint()
    engine.close()
    reopened = Engine(tmp_path / "s.db", functions=functions(), start=T0, recovery_policy=RecoveryPolicy.KEEP)
    assert dict(reopened._store.checkpoints.read(strict=False).items(STATE_CATEGORY))["sum-b1"] == forged
    reopened.close()


def test_subscriptions_mapping_binds_on_need_and_forgets_without_binding() -> None:
    bound: list[str] = []
    subscriptions = Subscriptions()

    def binder(uri: str, blob: bytes) -> None:
        bound.append(uri)

    subscriptions.set_binder(binder)  # type: ignore[arg-type]
    subscriptions.wait("x", b"state", ("a", "b"))
    subscriptions.wait("y", b"state", ("b",))
    assert "x" in subscriptions and len(subscriptions) == 2 and subscriptions.idle == 2
    assert subscriptions.bound("x") is None and bound == []
    assert subscriptions.pop("y") is None and "y" not in subscriptions  # deleted idle: nothing was bound
    assert subscriptions.waiting_on("b")
    subscriptions.bind_waiting_on("b")
    assert bound == ["x"] and not subscriptions.waiting_on("b")
    with pytest.raises(KeyError):
        subscriptions["x"]  # the binder failed to record it bound (its failure stopped it)


def _held_after_recovery(path: Path, count: int) -> int:
    """Python memory held by an engine opened on a store of ``count`` idle subscriptions (as bench/engine.py)."""
    with Engine(path, start=T0, synchronous="OFF") as engine:
        engine.create_stream("s")
        for i in range(count):
            engine.create_subscription(f"q{i:04d}", Query.stream("s").scan(0, operator.add))
        engine.append("s", 1, at(1))
        engine.process()
        engine.checkpoint()
    def look(engine: Engine) -> None:
        assert engine.recovery.idle_subscriptions == count - 1

    held = memory_held_while_open(lambda: Engine(path, start=T0), look)
    return held


def test_an_idle_subscription_holds_less_than_two_kilobytes(tmp_path: Path) -> None:
    """Issue 31's target, as a bound on what each further idle subscription adds (the engine's fixed costs, such
    as its packers' buffers, cancel out)."""
    small, large = _held_after_recovery(tmp_path / "small.db", 20), _held_after_recovery(tmp_path / "large.db", 120)
    assert (large - small) / 100 < 2048, f"{(large - small) / 100:,.0f} bytes per idle subscription"
