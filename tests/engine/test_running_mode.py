"""Running mode with the wall clock: the processing loop (``serve()`` on a thread, or ``AsyncEngine``'s task) wakes
when the queries' next timer is due, so a timer, a debounce and the last time window of a quiet stream fire on
time with no further event and no call from the host. The tests wait on the engine's ``produced`` signal (an
event), never sleep for a result; the timers themselves are short real-time ones, which is what is tested."""

from __future__ import annotations

import asyncio
import operator
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from reaqtive import Query
from reaqtive.engine import (
    Engine,
    EngineRunningError,
    FunctionRegistry,
    Output,
    ProcessingStoppedError,
    QueryFailedError,
)
from reaqtive.engine.aio import AsyncEngine

SHORT = timedelta(milliseconds=60)
OPTS: dict[str, Any] = {"clock": "wall", "synchronous": "NORMAL"}


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    with Engine(tmp_path / "store.db", **OPTS) as opened:
        opened.create_stream("s")
        yield opened


@pytest.fixture
def served(engine: Engine) -> Iterator[tuple[Engine, list[int | None]]]:
    """The engine with ``serve()`` running on a thread; the list records every process() call (only the loop's)."""
    calls: list[int | None] = []
    real = engine.process

    def counting(max_events: int | None = None) -> int:
        calls.append(max_events)
        return real(max_events)

    engine.process = counting  # type: ignore[method-assign]
    loop = threading.Thread(target=engine.serve, daemon=True)
    loop.start()
    yield engine, calls
    engine.stop_serving()
    loop.join(30)
    assert not loop.is_alive()


def wait_for(engine: Engine, uri: str, count: int, timeout: float = 30.0) -> list[Output]:
    """Until ``uri`` has ``count`` outputs (woken by the produced signal), or fail at the deadline."""
    deadline = datetime.now(UTC) + timedelta(seconds=timeout)
    seen = engine.produced.generation
    while True:
        outputs = engine.outputs(uri)
        if len(outputs) >= count:
            return outputs
        left = (deadline - datetime.now(UTC)).total_seconds()
        if left <= 0:
            raise AssertionError(f"{uri}: {len(outputs)} of {count} outputs after {timeout} s")
        seen = engine.produced.wait(seen, left)


def test_a_timer_fires_with_no_event_and_no_host_call(served: tuple[Engine, list[int | None]]) -> None:
    engine, calls = served
    created = datetime.now(UTC)
    engine.create_subscription("q://timer", Query.timer(timedelta(milliseconds=300)))
    (output,) = wait_for(engine, "q://timer", 1)
    assert output.value == 0
    assert datetime.now(UTC) - created >= timedelta(milliseconds=300)  # not before it was due
    # Woken for it, not polling: the first batch, the look after the subscription was created, the timer.
    assert len(calls) <= 4, calls


def test_a_debounce_fires_after_the_last_event_with_no_further_event(
    served: tuple[Engine, list[int | None]],
) -> None:
    engine, _ = served
    engine.create_subscription("q://quiet", Query.stream("s").debounce(SHORT))
    engine.append_many("s", [(1, None), (2, None), (3, None)])
    assert [o.value for o in wait_for(engine, "q://quiet", 1)] == [3]


def test_the_last_window_of_a_quiet_stream_closes_on_time(served: tuple[Engine, list[int | None]]) -> None:
    engine, _ = served
    engine.create_subscription("q://windows", Query.stream("s").buffer(SHORT).filter(bool))
    engine.append_many("s", [(10, None), (20, None)])
    assert [o.value for o in wait_for(engine, "q://windows", 1)] == [[10, 20]]


def test_an_interval_keeps_ticking_on_an_idle_engine(served: tuple[Engine, list[int | None]]) -> None:
    engine, calls = served
    engine.create_subscription("q://ticks", Query.interval(timedelta(milliseconds=20)).take(5))
    assert [o.value for o in wait_for(engine, "q://ticks", 5)] == [0, 1, 2, 3, 4]
    assert len(calls) >= 5  # the loop woke for each tick by itself


def test_with_no_timer_pending_the_loop_waits_for_appends_only(engine: Engine, tmp_path: Path) -> None:
    assert engine.idle_seconds() is None
    with Engine(tmp_path / "event.db") as event_clock:  # event time: timers follow events, never the wall
        event_clock.create_subscription("q://later", Query.timer(timedelta(seconds=30)))
        assert event_clock.idle_seconds() is None


def test_idle_seconds_follows_the_next_timer(engine: Engine) -> None:
    engine.create_subscription("q://later", Query.timer(timedelta(seconds=30)))
    idle = engine.idle_seconds()
    assert idle is not None and 25 < idle <= 30


def test_idle_seconds_is_bounded_by_the_periodic_checkpoint(tmp_path: Path) -> None:
    with Engine(tmp_path / "e.db", checkpoint_every_seconds=2.0) as engine:
        idle = engine.idle_seconds()
        assert idle is not None and 0 < idle <= 2.0


def test_the_async_face_fires_timers_on_time_too(tmp_path: Path) -> None:
    async def main() -> list[Output]:
        async with await AsyncEngine.open(tmp_path / "a.db", **OPTS) as engine:
            await engine.create_stream("s")
            await engine.create_subscription("q://quiet", Query.stream("s").debounce(SHORT))
            await engine.append("s", 7)
            got: list[Output] = []
            async for output in engine.stream_outputs("q://quiet"):
                got.append(output)
                break
            return got

    assert [o.value for o in asyncio.run(asyncio.wait_for(main(), 60))] == [7]


# -- start() and stop(): the engine's own processing thread ----------------------------------------------------------


def test_start_runs_the_engine_on_its_own_thread_and_stop_takes_a_final_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "own.db"
    with Engine(path, **OPTS) as engine:
        engine.create_stream("s")
        engine.create_subscription("q://sum", Query.stream("s").scan(0, operator.add))
        engine.create_subscription("q://late", Query.timer(timedelta(milliseconds=50)))
        engine.start()
        assert engine.running
        with pytest.raises(EngineRunningError, match="already runs"):
            engine.start()
        engine.append_many("s", [(i, None) for i in range(1, 101)])
        assert wait_for(engine, "q://sum", 100)[-1].value == 5050  # no process() call from the host
        assert [o.value for o in wait_for(engine, "q://late", 1)] == [0]
        before = engine.last_checkpoint
        engine.stop()
        assert not engine.running
        assert engine.last_checkpoint is not before, "stop() took the final checkpoint"
        assert engine.process() == 0, "everything appended was delivered before the checkpoint"
    with Engine(path, **OPTS) as engine:
        assert engine.outputs("q://sum")[-1].value == 5050


def test_start_and_close_without_stop_end_the_thread(tmp_path: Path) -> None:
    engine = Engine(tmp_path / "closed.db", **OPTS)
    engine.create_stream("s")
    engine.start()
    driver = engine._driver
    assert driver is not None
    engine.close()
    driver.join(30)
    assert not driver.is_alive() and not engine.running


def test_an_error_that_stops_the_processing_thread_is_raised_by_stop(tmp_path: Path) -> None:
    with Engine(tmp_path / "broken.db", **OPTS) as engine:
        engine.create_stream("s")

        def broken(max_events: int | None = None) -> int:
            raise OSError("the disk went away")

        engine.process = broken  # type: ignore[method-assign]
        engine.start()
        driver = engine._driver
        assert driver is not None
        driver.join(30)
        assert not engine.running
        with pytest.raises(ProcessingStoppedError, match="the disk went away"):
            engine.stop(checkpoint=False)
        engine.stop(checkpoint=False)  # reported once



def explode() -> None:
    raise RuntimeError("the finally action of a query failed")


def test_in_running_mode_a_query_whose_task_raises_stops_alone(tmp_path: Path) -> None:
    functions = FunctionRegistry()
    functions.register("explode", explode)
    with Engine(tmp_path / "faults.db", functions=functions, **OPTS) as engine:
        engine.create_stream("s")
        # The finally action's failure is reported by a task on the query's scheduler, out of its operators.
        engine.create_subscription("q://doomed", Query.stream("s").take(3).finally_action(explode))
        engine.create_subscription("q://sum", Query.stream("s").scan(0, operator.add))
        engine.start()
        try:
            engine.append_many("s", [(i, None) for i in range(1, 6)])
            assert wait_for(engine, "q://sum", 5)[-1].value == 15
            deadline = datetime.now(UTC) + timedelta(seconds=30)
            seen = engine.produced.generation
            while not engine.faults:
                assert datetime.now(UTC) < deadline, "the failing query was not stopped"
                seen = engine.produced.wait(seen, 0.05)
            engine.append_many("s", [(10, None)])
            assert wait_for(engine, "q://sum", 6)[-1].value == 25, "the other query goes on"
            assert engine.running, "the engine's processing thread goes on"
        finally:
            engine.stop()
        (fault,) = engine.faults
        assert fault.uri == "q://doomed" and isinstance(fault.error, QueryFailedError)
