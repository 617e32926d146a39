"""Observer functions get their outputs in batches, outside the engine's lock: in manual mode after each slice of
``process()``, in running mode on a courier thread per outbox. A slow observer holds up neither appends nor the
processing of events; one that fails is retried batch by batch, then output by output, and finally stops its
subscription alone with its outputs kept; a checkpoint taken while a courier delivers, then a crash, loses none.

The tests wait on events (``threading.Event``, the engine's ``produced`` signal), never on sleeps."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from reaqtive import Query
from reaqtive.engine import Engine, FunctionRegistry, ObserverFailedError, Output

T0 = datetime(2026, 3, 1, tzinfo=UTC)
MODULE = "tests.engine.test_observer_batches"
WAIT = 30.0


def double(x: int) -> int:
    return x * 2


def at(i: int) -> datetime:
    return T0 + timedelta(seconds=i)


class BatchRecorder:
    """An observer with a batch method: records each call's outputs; ``gate`` (when given) holds every call
    until it is set; ``refuse`` makes it raise on outputs of those values."""

    def __init__(self, *, gate: threading.Event | None = None, refuse: frozenset[int] = frozenset()) -> None:
        self.batches: list[list[Output]] = []
        self.singles: list[Output] = []
        self.gate = gate
        self.entered = threading.Event()
        self.refuse = refuse
        self.threads: set[str] = set()

    def __call__(self, output: Output) -> None:
        self.write_batch((output,))
        self.singles.append(output)

    def write_batch(self, outputs: Sequence[Output]) -> None:
        self.threads.add(threading.current_thread().name)
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(WAIT)
        if any(output.value in self.refuse for output in outputs):
            raise ValueError("refused")
        self.batches.append(list(outputs))

    def received(self) -> list[tuple[int, Any]]:
        """Every output received, once, by seq (a batch offered again is deduplicated, as a sink would)."""
        seen: dict[int, Any] = {}
        for batch in self.batches:
            for output in batch:
                seen.setdefault(output.seq, output.value)
        return sorted(seen.items())


def open_engine(path: Path, observer: object, **options: Any) -> Engine:
    functions = FunctionRegistry()
    functions.register("recorder", observer)  # type: ignore[arg-type]
    settings: dict[str, Any] = {"observer_backoff": 0, "synchronous": "NORMAL", **options}
    engine = Engine(path, functions=functions, allow_modules=[MODULE], start=T0, **settings)
    if "s" not in {info.uri for info in engine.artifacts()}:
        engine.create_stream("s")
        engine.define_observer("obs://recorder", observer)  # type: ignore[arg-type]
        engine.create_subscription("q", Query.stream("s").map(double), observer="obs://recorder")
        engine.create_subscription("oracle", Query.stream("s").map(double))
    return engine


@pytest.fixture
def path(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "store.db"


def test_a_batch_observer_gets_its_outputs_in_batches_in_order(path: Path) -> None:
    recorder = BatchRecorder()
    with open_engine(path, recorder) as engine:
        engine.append_many("s", [(i, at(i)) for i in range(12_000)])
        engine.process()
        assert recorder.received() == [(i, 2 * i) for i in range(12_000)]
        assert len(recorder.batches) <= 4  # batches (one per slice of process()), not an output per call
        assert recorder.singles == []


def test_in_manual_mode_an_observer_runs_outside_the_engines_lock(path: Path) -> None:
    appended: list[int] = []

    def observer(output: Output) -> None:
        # Another thread appends while this call runs: under the engine's lock it would wait for process().
        producer = threading.Thread(target=lambda: appended.append(engine.append("s", 99, at(99))))
        producer.start()
        producer.join(WAIT)
        assert not producer.is_alive(), "an append waited for the observer: it ran under the engine's lock"

    with open_engine(path, observer) as engine:
        engine.append("s", 1, at(1))
        engine.process(1)
        assert appended


def test_in_running_mode_a_slow_observer_holds_up_neither_appends_nor_processing(path: Path) -> None:
    gate = threading.Event()
    recorder = BatchRecorder(gate=gate)
    engine = open_engine(path, recorder)
    try:
        engine.start()
        engine.append("s", 0, at(0))
        assert recorder.entered.wait(WAIT)  # the courier holds its first batch; the observer does not answer
        engine.append_many("s", [(i, at(i)) for i in range(1, 3000)])
        seen = engine.produced.generation
        while len(engine.outputs("oracle")) < 3000:  # processing goes on while the observer waits
            seen = engine.produced.wait(seen, WAIT)
        assert recorder.batches == []
        assert "reaqtive-engine" not in recorder.threads  # the courier calls it, not the processing thread
        gate.set()
        engine.stop()  # the couriers deliver what waits before the final checkpoint
        assert recorder.received() == [(i, 2 * i) for i in range(3000)]
        assert len(recorder.batches) <= 5  # what piled up while it waited came in a few batches
    finally:
        gate.set()
        engine.close()


def test_a_failed_batch_is_offered_output_by_output_and_the_failure_names_the_output(path: Path) -> None:
    recorder = BatchRecorder(refuse=frozenset({2 * 7}))
    with open_engine(path, recorder, observer_retries=3) as engine:
        engine.append_many("s", [(i, at(i)) for i in range(10)])
        engine.process()  # the batch of ten fails
        engine.process()  # then one at a time: 0..6 get through, 7 fails
        engine.process()
        assert recorder.received() == [(i, 2 * i) for i in range(7)]
        [fault] = engine.faults
        assert fault.uri == "q" and isinstance(fault.error, ObserverFailedError) and fault.error.seq == 7
    # Its undelivered outputs were kept: the next run delivers them once the observer takes them.
    recorder.refuse = frozenset()
    with open_engine(path, recorder) as engine:
        engine.process()
        assert recorder.received() == [(i, 2 * i) for i in range(10)]


class RefuseEachOnce(BatchRecorder):
    """Refuses every batch or output holding a value in ``refuse`` once, then takes it."""

    def write_batch(self, outputs: Sequence[Output]) -> None:
        refused = {output.value for output in outputs} & self.refuse
        if refused:
            self.refuse = self.refuse - refused
            raise ValueError("refused once")
        self.batches.append(list(outputs))


def test_failures_in_a_row_restart_once_the_output_that_failed_got_through(path: Path) -> None:
    # Each of three batches is refused once, with everything before it delivered in between: never two
    # failures in a row, so observer_retries=2 never stops the subscription.
    recorder = RefuseEachOnce(refuse=frozenset({2 * 3, 2 * 13, 2 * 23}))
    with open_engine(path, recorder, observer_retries=2) as engine:
        for first in (0, 10, 20):
            engine.append_many("s", [(i, at(i)) for i in range(first, first + 10)])
            engine.process()
            engine.process()
        assert engine.faults == []
        assert recorder.received() == [(i, 2 * i) for i in range(30)]


def test_in_running_mode_an_observer_that_keeps_failing_stops_its_subscription_alone(path: Path) -> None:
    recorder = BatchRecorder(refuse=frozenset({2 * 3}))
    engine = open_engine(path, recorder, observer_retries=2)
    try:
        engine.start()
        seen = engine.produced.generation
        engine.append_many("s", [(i, at(i)) for i in range(6)])
        while not engine.faults:
            seen = engine.produced.wait(seen, WAIT)
            engine.append("s", 100, at(100))  # any append wakes the loop that stops it
        assert engine.faults[0].uri == "q"
        assert recorder.received() == [(i, 2 * i) for i in range(3)]
        engine.stop()
    finally:
        engine.close()
    recorder.refuse = frozenset()
    with open_engine(path, recorder) as engine:
        engine.process()
        assert recorder.received() == [(output.seq, output.value) for output in engine.outputs("oracle")]


def test_a_checkpoint_while_a_courier_delivers_then_a_crash_loses_no_output(path: Path) -> None:
    gate = threading.Event()
    recorder = BatchRecorder(gate=gate)
    engine = open_engine(path, recorder)
    try:
        engine.start()
        engine.append_many("s", [(i, at(i)) for i in range(500)])
        assert recorder.entered.wait(WAIT)  # a batch is in flight
        engine.append_many("s", [(i, at(i)) for i in range(500, 800)])
        seen = engine.produced.generation
        while len(engine.outputs("oracle")) < 800:
            seen = engine.produced.wait(seen, WAIT)
        engine.checkpoint()  # stores what waits, and how far delivery got (the batch in flight is not done)
        gate.set()
    finally:
        gate.set()
        engine.close()  # no final checkpoint: a crash after the one above
    crashed = BatchRecorder()
    with open_engine(path, crashed) as engine:
        engine.process()
    received = dict(recorder.received())
    received.update(crashed.received())
    assert sorted(received.items()) == [(i, 2 * i) for i in range(800)]  # at least once, none lost
    seqs = [output.seq for batch in crashed.batches for output in batch]
    assert seqs == sorted(seqs)  # in order after the restart too


def test_an_outbox_past_its_high_water_mark_makes_processing_wait_for_its_courier(path: Path) -> None:
    largest: list[int] = []
    engines: list[Engine] = []

    class Measuring(BatchRecorder):
        def write_batch(self, outputs: Sequence[Output]) -> None:
            outbox = engines[0]._outputs.outboxes.get("q")
            assert outbox is not None
            largest.append(len(outbox.pending))
            super().write_batch(outputs)

    recorder = Measuring()
    engine = open_engine(path, recorder)
    engines.append(engine)
    try:
        engine._outputs.outboxes.high_water = 100
        engine.start(batch_events=50)
        engine.append_many("s", [(i, at(i)) for i in range(5000)])
        seen = engine.produced.generation
        while len(engine.outputs("oracle")) < 5000:
            seen = engine.produced.wait(seen, WAIT)
        engine.stop()
        assert recorder.received() == [(i, 2 * i) for i in range(5000)]
        assert max(largest) <= 100 + 50  # the high-water mark, plus at most one slice's outputs
    finally:
        engine.close()


def test_a_subscription_created_in_running_mode_gets_a_courier_and_one_deleted_stops_its_courier(path: Path) -> None:
    gate = threading.Event()
    recorder = BatchRecorder(gate=gate)
    functions = FunctionRegistry()
    functions.register("recorder", recorder)
    engine = Engine(path, functions=functions, allow_modules=[MODULE], start=T0, observer_backoff=0,
                    synchronous="NORMAL")
    try:
        engine.create_stream("s")
        engine.define_observer("obs://recorder", recorder)
        engine.start()
        engine.create_subscription("late", Query.stream("s").map(double), observer="obs://recorder")
        engine.append_many("s", [(i, at(i)) for i in range(10)])
        assert recorder.entered.wait(WAIT)  # its courier holds the first batch
        [courier] = [thread for thread in threading.enumerate() if thread.name == "reaqtive-courier:late"]
        assert courier.name in recorder.threads
        engine.delete_subscription("late")
        gate.set()  # the batch in flight ends; nothing of the deleted subscription comes after it
        courier.join(WAIT)
        assert not courier.is_alive()
        engine.append_many("s", [(i, at(i)) for i in range(10, 20)])
        engine.stop()
        assert all(output.seq < 10 for batch in recorder.batches for output in batch)
    finally:
        gate.set()
        engine.close()
