"""The hand-over (reaqtive.engine.handover): a checkpoint, an append or a pause asked for from another thread while
the processing loop works through a large batch gets the engine within one slice, not after the batch; and what
was handed over changes nothing the queries compute."""

from __future__ import annotations

import operator
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from reaqtive import Query, Tumbling
from reaqtive.engine import CheckpointMetrics, Engine, FunctionRegistry
from reaqtive.engine.handover import SLICE_EVENTS, EngineLock
from reaqtive.operators.keyed_window import CLOSE_SLICE

T0 = datetime(2026, 1, 1, tzinfo=UTC)
EVENTS = 4000
GATE_AT = 100
DEADLINE = 30.0


@dataclass
class Gate:
    """Holds the slow query at event GATE_AT until another thread waits for the engine (when armed)."""

    engine: Engine | None = None
    reached: threading.Event = field(default_factory=threading.Event)
    seen: list[int] = field(default_factory=list)

    def reset(self, engine: Engine | None) -> None:
        """Armed for ``engine`` (``None``: never holds)."""
        self.engine = engine
        self.reached = threading.Event()
        self.seen = []


GATE = Gate()


def gated(value: int) -> int:
    if value == GATE_AT and GATE.engine is not None:
        GATE.reached.set()
        assert GATE.engine is not None
        deadline = time.monotonic() + DEADLINE
        while not GATE.engine._lock.waiting:  # a condition polled with a deadline, not a sleep for a result
            assert time.monotonic() < deadline, "nobody came to wait for the engine"
            time.sleep(0.0005)
    GATE.seen.append(value)
    return value


def registry() -> FunctionRegistry:
    functions = FunctionRegistry()
    functions.register("gated", gated)
    functions.register("add", operator.add)
    return functions


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    with Engine(tmp_path / "s.db", functions=registry(), synchronous="NORMAL", start=T0) as opened:
        GATE.reset(opened)
        opened.create_stream("s")
        yield opened


def load(engine: Engine) -> None:
    engine.append_many("s", [(i, T0 + timedelta(milliseconds=i)) for i in range(EVENTS)])


def checkpoint_when_gated(engine: Engine) -> int:
    """Wait until the slow query is at GATE_AT, take a checkpoint from this thread; how many events the slow query
    had seen when the checkpoint ran (read by a checkpoint listener, under the engine's lock)."""
    at_checkpoint: list[int] = []

    def listener(metrics: CheckpointMetrics | None, error: BaseException | None) -> None:
        at_checkpoint.append(len(GATE.seen))

    engine.add_checkpoint_listener(listener)
    assert GATE.reached.wait(DEADLINE)
    engine.checkpoint()
    engine.remove_checkpoint_listener(listener)
    (count,) = at_checkpoint
    return count


@pytest.mark.parametrize("readers", [1, 2], ids=["only reader (read_run)", "two readers"])
def test_a_checkpoint_during_a_large_batch_waits_for_one_slice_not_the_batch(engine: Engine, readers: int) -> None:
    engine.create_subscription("slow", Query.stream("s").map(gated))
    if readers == 2:
        engine.create_subscription("total", Query.stream("s").scan(0, operator.add))
    load(engine)
    loop = threading.Thread(target=engine.serve, daemon=True)
    loop.start()
    try:
        count = checkpoint_when_gated(engine)
    finally:
        engine.stop_serving()
        loop.join(DEADLINE)
    # One reader: the engine hands it a slice of SLICE_EVENTS events at a time. Several: every event is a yield point.
    bound = (GATE_AT // SLICE_EVENTS + 1) * SLICE_EVENTS if readers == 1 else GATE_AT + 1
    assert GATE_AT < count <= bound, f"the checkpoint ran after {count} events (bound {bound}, batch 4096)"
    engine.process()
    assert [output.value for output in engine.outputs("slow")] == list(range(EVENTS)), "nothing lost or doubled"
    assert GATE.seen == list(range(EVENTS))


def test_process_called_by_the_host_hands_over_too(engine: Engine) -> None:
    engine.create_subscription("slow", Query.stream("s").map(gated))
    load(engine)
    delivered: list[int] = []
    worker = threading.Thread(target=lambda: delivered.append(engine.process()), daemon=True)
    worker.start()
    count = checkpoint_when_gated(engine)
    worker.join(DEADLINE)
    assert delivered == [EVENTS], "process() goes on after the hand-over and delivers the whole batch"
    assert count <= SLICE_EVENTS
    assert [output.value for output in engine.outputs("slow")] == list(range(EVENTS))


def test_a_pause_asked_for_from_another_thread_lands_within_a_slice(engine: Engine) -> None:
    engine.create_subscription("slow", Query.stream("s").map(gated))
    engine.create_subscription("total", Query.stream("s").scan(0, operator.add))
    load(engine)
    loop = threading.Thread(target=engine.serve, daemon=True)
    loop.start()
    try:
        assert GATE.reached.wait(DEADLINE)
        engine.pause("total")
        paused_at = len(engine.outputs("total"))
        engine.resume("total")
    finally:
        engine.stop_serving()
        loop.join(DEADLINE)
    assert paused_at <= GATE_AT + 1
    engine.process()
    totals = [output.value for output in engine.outputs("total")]
    assert totals == [sum(range(n + 1)) for n in range(EVENTS)]


def test_the_lock_counts_its_waiters_and_lets_them_in() -> None:
    lock = EngineLock()
    took = threading.Event()
    with lock:
        with lock:  # re-entrant: the holder never counts as waiting
            assert lock.waiting == 0
        waiter = threading.Thread(target=lambda: (lock.acquire(), took.set(), lock.release()), daemon=True)
        waiter.start()
        deadline = time.monotonic() + DEADLINE
        while not lock.waiting:
            assert time.monotonic() < deadline
            time.sleep(0.0005)
        assert lock.waiting == 1
    lock.let_waiters_in(DEADLINE)
    assert lock.waiting == 0
    assert took.wait(DEADLINE)
    waiter.join(DEADLINE)
    assert lock.acquire(blocking=False)
    lock.release()


def values(engine: Engine, uri: str) -> list[Any]:
    return [output.value for output in engine.outputs(uri)]


def test_appends_and_checkpoints_from_other_threads_while_serving_change_nothing(tmp_path: Path) -> None:
    """Producers and a checkpointing thread hammer the engine while serve() delivers: every hand-over lands at a
    consistent point, so the totals equal those of a plain sequential run."""
    with Engine(tmp_path / "s.db", functions=registry(), synchronous="NORMAL", start=T0,
                checkpoint_every_events=777) as engine:
        engine.create_stream("s")
        engine.create_subscription("total", Query.stream("s").scan(0, operator.add))
        engine.create_subscription("twice", Query.stream("s").merge(Query.stream("s")).scan(0, operator.add))
        loop = threading.Thread(target=engine.serve, kwargs={"batch_events": 10_000}, daemon=True)
        loop.start()
        stop = threading.Event()

        def checkpoints() -> None:
            while not stop.is_set():
                engine.checkpoint()

        checkpointer = threading.Thread(target=checkpoints, daemon=True)
        checkpointer.start()
        producers = [threading.Thread(target=lambda k=k: [engine.append_many(
            "s", [(k * 100_000 + i * 50 + j, None) for j in range(50)]) for i in range(40)], daemon=True)
            for k in range(3)]
        for producer in producers:
            producer.start()
        for producer in producers:
            producer.join(DEADLINE)
        stop.set()
        checkpointer.join(DEADLINE)
        engine.stop_serving()
        loop.join(DEADLINE)
        engine.process()
        appended = [value for value in engine.outputs("total")]
        assert len(appended) == 3 * 40 * 50
        # The order of the producers' appends is the log's; both queries must have seen exactly that order.
        totals = values(engine, "total")
        increments = [b - a for a, b in zip([0, *totals], totals, strict=False)]
        assert sorted(increments) == sorted(k * 100_000 + i for k in range(3) for i in range(2000))
        assert values(engine, "twice")[-1] == 2 * totals[-1]


# -- a window closing many keys gives way between slices ------------------------------------------------------------

KEYS = 3 * 4096 + 500  # four slices of the close (CLOSE_SLICE keys each)
ROW_GATE = 100


def key_of(event: list[int]) -> int:
    return event[0]


def gated_row(row: Any) -> Any:
    """Holds the close at its ROW_GATE-th row until another thread waits for the engine."""
    GATE.seen.append(row[0])
    if len(GATE.seen) == ROW_GATE:
        gated(GATE_AT)
        GATE.seen.pop()  # gated() noted one more
    return row


def window_registry() -> FunctionRegistry:
    functions = registry()
    functions.register("key_of", key_of)
    functions.register("gated_row", gated_row)
    return functions


def run_windows(path: Path, *, checkpoint_mid_close: bool) -> tuple[list[tuple[int, Any]], int | None, Path | None]:
    """KEYS keys in one tumbling window, then an event past its end closes them all in one timer. With
    ``checkpoint_mid_close`` a thread asks for a checkpoint while the close runs; the store is copied as that
    checkpoint committed (a crash right after it). Returns the outputs, the rows emitted when the checkpoint ran,
    and the copy."""
    copy = path.with_name(path.stem + "-at-checkpoint.db")
    with Engine(path, functions=window_registry(), synchronous="NORMAL", start=T0) as engine:
        GATE.reset(engine if checkpoint_mid_close else None)
        engine.create_stream("s")
        query = Query.stream("s").aggregate_by_key(key_of, Tumbling(timedelta(seconds=10)), "count").map(gated_row)
        engine.create_subscription("windows", query)
        engine.append_many("s", [([k, 1], T0 + timedelta(seconds=1)) for k in range(KEYS)])
        engine.append("s", [0, 1], T0 + timedelta(seconds=30))
        engine.checkpoint()
        at_checkpoint: list[int] = []
        if checkpoint_mid_close:
            def listener(metrics: CheckpointMetrics | None, error: BaseException | None) -> None:
                at_checkpoint.append(len(GATE.seen))
                with sqlite3.connect(path) as source, sqlite3.connect(copy) as target:
                    source.backup(target)

            engine.add_checkpoint_listener(listener)
            worker = threading.Thread(target=engine.process, daemon=True)
            worker.start()
            assert GATE.reached.wait(DEADLINE)
            engine.checkpoint()
            worker.join(DEADLINE)
        else:
            engine.process()
        outputs = [(output.seq, output.value) for output in engine.outputs("windows")]
    return outputs, (at_checkpoint[0] if at_checkpoint else None), (copy if checkpoint_mid_close else None)


def test_a_window_closing_many_keys_gives_way_to_a_checkpoint_and_a_restart_goes_on_from_there(tmp_path: Path) -> None:
    reference, _, _ = run_windows(tmp_path / "reference.db", checkpoint_mid_close=False)
    assert len(reference) == KEYS and [row[0] for _, row in reference] == list(range(KEYS))
    outputs, rows_at_checkpoint, copy = run_windows(tmp_path / "handed.db", checkpoint_mid_close=True)
    assert outputs == reference, "the close went on after the hand-over: the same rows, in the same order"
    assert rows_at_checkpoint is not None and ROW_GATE <= rows_at_checkpoint <= CLOSE_SLICE, (
        f"the checkpoint ran after {rows_at_checkpoint} rows of {KEYS}: the close gives way after one slice")
    # A crash right after that checkpoint: the restart closes the rest of the windows, in the same order.
    assert copy is not None
    GATE.reset(None)
    with Engine(copy, functions=window_registry(), synchronous="NORMAL", start=T0) as engine:
        engine.process()
        recovered = [(output.seq, output.value) for output in engine.outputs("windows")]
    assert recovered == reference
