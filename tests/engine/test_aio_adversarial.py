"""Adversarial tests of the engine's asyncio face (AsyncEngine), the sync processing loop (serve) and the wake-up
signals: cancellation at every await, closes racing calls, many consumers, failures, bad stores, odd cursors."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import Query
from reaqtive.engine import ArtifactNotFoundError, Engine, EngineClosedError, GroupCommit, Output
from reaqtive.engine.aio import AsyncEngine, ProcessingFailedError
from reaqtive.engine.signals import Signal
from reaqtive.state import StoreError, StoreLockedError

T0 = datetime(2026, 1, 1, tzinfo=UTC)
OPTS: dict[str, Any] = {"synchronous": "NORMAL", "allow_modules": [__name__]}
DEADLINE = 30.0  # seconds: a bound on waits that only a hang would reach


def doubled(value: int) -> int:
    return value * 2


def fails_on_three(value: int) -> int:
    if value == 3:
        raise ValueError("three is refused")
    return value


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "store.db"
    with Engine(path, start=T0, **OPTS) as engine:
        for i in range(2):
            engine.create_stream(f"s{i}")
            engine.create_subscription(f"q{i}", Query.stream(f"s{i}").map(doubled))
    yield path


def at(i: int) -> datetime:
    return T0 + timedelta(milliseconds=i)


def run(main: Callable[[], Any]) -> Any:
    """Run a coroutine function with a deadline: a hang fails the test instead of blocking the suite."""
    return asyncio.run(asyncio.wait_for(main(), DEADLINE))


async def collect(engine: AsyncEngine, uri: str, count: int, *, after: int | None = None,
                  batch: int = 500) -> list[Output]:
    seen: list[Output] = []
    if count == 0:
        return seen
    async for output in engine.stream_outputs(uri, after=after, batch=batch):
        seen.append(output)
        if len(seen) == count:
            break
    return seen


async def until(condition: Callable[[], bool]) -> None:
    """Give the loop turns until ``condition`` holds (the test's deadline bounds it)."""
    while not condition():
        await asyncio.sleep(0.001)


def stored_values(path: Path, uri: str = "q0") -> list[int]:
    """Reopen the store, deliver what is pending, and return the values of ``uri``'s outputs, in seq order."""
    with Engine(path, **OPTS) as engine:
        engine.process()
        outputs = engine.outputs(uri)
    assert [o.seq for o in outputs] == list(range(len(outputs)))  # numbered without gaps
    return [o.value for o in outputs]


class Gate:
    """Holds a sync engine method on its worker thread until released, to make a race deterministic."""

    def __init__(self, target: Any, name: str) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        real = getattr(target, name)

        def held(*args: Any, **kwargs: Any) -> Any:
            self.entered.set()
            if not self.release.wait(DEADLINE):
                raise AssertionError("the gate was never released")
            return real(*args, **kwargs)

        setattr(target, name, held)


# -- cancellation --------------------------------------------------------------------------------------------------


def test_a_cancelled_append_many_is_committed_once_and_numbered(store: Path) -> None:
    """Cancelling the awaiting task cannot stop the commit running in its thread: the events are appended, once,
    numbered among the others."""

    async def main() -> bool:
        engine = await AsyncEngine.open(store, **OPTS)
        gate = Gate(engine.engine, "append_many")
        producer = asyncio.create_task(engine.append_many("s0", [(i, at(i)) for i in range(5)]))
        await until(gate.entered.is_set)
        producer.cancel()
        await asyncio.wait({producer})
        gate.release.set()
        await engine.append("s0", 5, at(5))  # races the cancelled one to the commit: either order is fine
        await engine.aclose(drain=True)
        return producer.cancelled()

    assert run(main)
    assert sorted(stored_values(store)) == [2 * i for i in range(6)]


def test_aclose_waits_for_a_cancelled_append_still_running(store: Path) -> None:
    async def main() -> None:
        engine = await AsyncEngine.open(store, **OPTS)
        gate = Gate(engine.engine, "append_many")
        producer = asyncio.create_task(engine.append("s0", 1, at(1)))
        await until(gate.entered.is_set)
        producer.cancel()
        closing = asyncio.create_task(engine.aclose(drain=True))
        await asyncio.sleep(0.01)
        assert not closing.done()  # it waits for the append in flight
        gate.release.set()
        await closing

    run(main)
    assert stored_values(store) == [2]


def test_a_thousand_cancelled_consumers_leave_no_listener(store: Path) -> None:
    async def main() -> tuple[int, int, int]:
        async with await AsyncEngine.open(store, **OPTS) as engine:
            produced = engine.engine.produced
            before = len(produced._listeners)
            consumers = [asyncio.create_task(collect(engine, "q0", 1)) for _ in range(1000)]
            await until(lambda: len(produced._listeners) >= before + 1000)  # all are waiting
            waiting = len(produced._listeners)
            for consumer in consumers:
                consumer.cancel()
            await asyncio.wait(consumers)
            return before, waiting, len(produced._listeners)

    before, waiting, after = run(main)
    assert waiting == before + 1000
    assert after == before


def test_a_consumer_that_breaks_out_early_leaves_no_listener(store: Path) -> None:
    async def main() -> tuple[int, int]:
        async with await AsyncEngine.open(store, **OPTS) as engine:
            before = len(engine.engine.produced._listeners)
            await engine.append_many("s0", [(i, at(i)) for i in range(3)])
            for _ in range(50):
                assert len(await collect(engine, "q0", 2)) == 2
            return before, len(engine.engine.produced._listeners)

    before, after = run(main)
    assert after == before


# -- closing -------------------------------------------------------------------------------------------------------


def test_appends_racing_aclose_either_succeed_durably_or_raise_engine_closed_error(store: Path) -> None:
    async def main() -> tuple[list[int], list[BaseException]]:
        engine = await AsyncEngine.open(store, **OPTS)
        engine.start()
        appended: list[int] = []
        refused: list[BaseException] = []

        async def produce(base: int) -> None:
            for i in range(100):
                try:
                    await engine.append("s0", base + i, at(i))
                except Exception as error:
                    refused.append(error)
                    return
                appended.append(base + i)

        producers = [asyncio.create_task(produce(k * 1000)) for k in range(16)]
        await until(lambda: len(appended) >= 20)
        await engine.aclose()
        await asyncio.gather(*producers)
        return appended, refused

    appended, refused = run(main)
    assert refused and all(type(error) is EngineClosedError for error in refused), refused
    assert sorted(v // 2 for v in stored_values(store)) == sorted(appended)  # none lost, none doubled


def test_acks_and_reads_racing_aclose_raise_engine_closed_error_or_end(store: Path) -> None:
    async def main() -> list[BaseException]:
        engine = await AsyncEngine.open(store, **OPTS)
        engine.start()
        await engine.append_many("s0", [(i, at(i)) for i in range(50)])
        await collect(engine, "q0", 50)
        errors: list[BaseException] = []

        async def acker() -> None:
            try:
                for seq in range(50):
                    await engine.ack("q0", seq)
                    await engine.outputs("q0", limit=1)
            except Exception as error:
                errors.append(error)

        async def consumer() -> None:
            async for _ in engine.stream_outputs("q0", after=-1, batch=3):
                await asyncio.sleep(0)

        tasks = [asyncio.create_task(acker()) for _ in range(4)] + [asyncio.create_task(consumer())
                                                                    for _ in range(4)]
        await asyncio.sleep(0.005)
        await engine.aclose()
        await asyncio.gather(*tasks)  # the consumers ended, none raised
        return errors

    errors = run(main)
    assert all(type(error) is EngineClosedError for error in errors), errors


def test_concurrent_acloses_both_return_once_the_engine_is_closed(store: Path) -> None:
    async def main() -> list[str]:
        engine = await AsyncEngine.open(store, **OPTS)
        engine.start()
        await engine.append("s0", 1, at(1))
        states: list[str] = []

        async def close() -> None:
            await engine.aclose()
            states.append(engine.engine.status.value)

        await asyncio.gather(close(), close(), close())
        return states

    assert run(main) == ["closed"] * 3


def test_a_cancelled_aclose_still_closes_and_the_caller_is_cancelled(store: Path) -> None:
    async def main() -> tuple[bool, str]:
        engine = await AsyncEngine.open(store, **OPTS)
        engine.start()
        gate = Gate(engine.engine, "checkpoint")  # hold the final checkpoint
        closing = asyncio.create_task(engine.aclose())
        await until(gate.entered.is_set)
        closing.cancel()
        await asyncio.wait({closing})
        gate.release.set()
        await engine.aclose()  # a later call waits for the close still running
        return closing.cancelled(), engine.engine.status.value

    assert run(main) == (True, "closed")


def test_asyncio_run_ending_mid_batch_without_aclose_exits_quietly(tmp_path: Path) -> None:
    """The loop closes while the processing thread is inside a batch: no traceback, no hang at exit, and the
    processing thread ends."""
    script = textwrap.dedent(f"""
        import asyncio, sys, threading, time
        from datetime import UTC, datetime
        from reaqtive import Query
        from reaqtive.engine.aio import AsyncEngine

        entered = threading.Event()

        def slow(output):
            entered.set()
            time.sleep(0.3)

        async def main():
            engine = await AsyncEngine.open({str(tmp_path / "s.db")!r}, start=datetime(2026, 1, 1, tzinfo=UTC))
            engine.engine.register_function("slow", slow)
            engine.engine.create_stream("s")
            engine.engine.define_observer("obs", slow)
            engine.engine.create_subscription("q", Query.stream("s"), "obs")
            engine.engine.create_subscription("d", Query.stream("s"))
            engine.start()
            consumer = asyncio.create_task(engine.stream_outputs("d").__anext__())
            await engine.append("s", 1)
            while not entered.is_set():
                await asyncio.sleep(0.001)

        asyncio.run(main())
        print("ended", file=sys.stderr)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=DEADLINE,
                          check=False)
    assert (done.returncode, done.stderr.strip()) == (0, "ended")


def test_aclose_with_drain_under_group_commit_and_racing_producers_keeps_every_returned_append(store: Path) -> None:
    """Appends return before their commit (group commit); producers race the close: every append that returned
    is delivered after the close, none twice."""

    async def main() -> list[int]:
        engine = await AsyncEngine.open(store, **OPTS, ingress_commit=GroupCommit(events=1000, seconds=10))
        engine.start()
        appended: list[int] = []

        async def produce(base: int) -> None:
            with contextlib.suppress(EngineClosedError):
                for i in range(200):
                    await engine.append("s0", base + i, at(i))
                    appended.append(base + i)

        producers = [asyncio.create_task(produce(k * 1000)) for k in range(4)]
        await until(lambda: len(appended) >= 50)
        await engine.aclose(drain=True)
        await asyncio.gather(*producers)
        return appended

    appended = run(main)
    with Engine(store, **OPTS) as engine:  # no process(): the drain delivered them before the close
        values = [o.value // 2 for o in engine.outputs("q0")]
    assert sorted(values) == sorted(appended)


def test_a_wall_clock_timer_fires_with_no_further_append(tmp_path: Path) -> None:
    """The processing task wakes by itself when the queries' next timer is due (idle_seconds), not only on
    appends: a debounce's output comes with the stream quiet."""

    async def main() -> list[int]:
        async with await AsyncEngine.open(tmp_path / "wall.db", clock="wall", **OPTS) as engine:
            await engine.create_stream("s")
            await engine.create_subscription("q", Query.stream("s").debounce(timedelta(milliseconds=30)))
            await engine.append("s", 7)
            return [o.value for o in await collect(engine, "q", 1)]

    assert run(main) == [7]


def test_an_engine_left_by_one_asyncio_run_is_served_and_closed_by_the_next(store: Path) -> None:
    """The first loop ends without aclose (its processing task is cancelled with it); a second loop starts the
    engine again, gets the new outputs, and closes it."""
    engine = run(lambda: AsyncEngine.open(store, **OPTS))

    async def first() -> list[Output]:
        engine.start()
        await engine.append("s0", 1, at(1))
        return await collect(engine, "q0", 1)

    async def second() -> list[Output]:
        engine.start()
        await engine.append("s0", 2, at(2))
        outputs = await collect(engine, "q0", 1, after=0)
        await engine.aclose()
        return outputs

    assert [o.value for o in run(first) + run(second)] == [2, 4]
    assert engine.engine.status.value == "closed"


def test_aclose_in_another_loop_than_the_processing_task_still_closes(store: Path) -> None:
    engine = run(lambda: AsyncEngine.open(store, **OPTS))

    async def first() -> None:
        engine.start()
        await engine.append("s0", 1, at(1))

    async def second() -> None:
        await engine.aclose(drain=True)

    run(first)
    run(second)
    assert engine.engine.status.value == "closed"
    assert stored_values(store) == [2]


def test_the_processing_thread_ends_after_aclose(store: Path) -> None:
    before = set(threading.enumerate())

    def processing_threads() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith("reaqtive-processing")} - before

    async def main() -> None:
        async with await AsyncEngine.open(store, **OPTS) as engine:
            await engine.append("s0", 1, at(1))
            await collect(engine, "q0", 1)
            assert processing_threads()
        while processing_threads():  # shut down without waiting: it ends on its own, promptly
            await asyncio.sleep(0.001)

    run(main)


# -- many consumers, bounded demand --------------------------------------------------------------------------------


def test_a_hundred_consumers_with_small_batches_each_see_every_output_in_order(store: Path) -> None:
    total = 300

    async def main() -> list[list[int]]:
        async with await AsyncEngine.open(store, **OPTS, batch_events=16) as engine:
            consumers = [asyncio.create_task(collect(engine, "q0", total, batch=7)) for _ in range(100)]

            async def produce() -> None:
                for i in range(0, total, 10):
                    await engine.append_many("s0", [(k, at(k)) for k in range(i, i + 10)])

            await produce()
            return [[o.value for o in await consumer] for consumer in consumers]

    for values in run(main):
        assert values == [2 * i for i in range(total)]


def test_a_slow_consumer_reads_at_most_batch_outputs_at_a_time(store: Path) -> None:
    limits: list[int | None] = []

    async def main() -> list[int]:
        async with await AsyncEngine.open(store, **OPTS) as engine:
            real = engine.engine.outputs

            def counting(subscription: str | None = None, **kwargs: Any) -> list[Output]:
                limits.append(kwargs.get("limit"))
                result = real(subscription, **kwargs)
                assert len(result) <= 5
                return result

            engine.engine.outputs = counting  # type: ignore[method-assign]
            await engine.append_many("s0", [(i, at(i)) for i in range(200)])  # a flood ahead of the consumer
            seen: list[int] = []
            async for output in engine.stream_outputs("q0", batch=5):
                seen.append(output.seq)
                await asyncio.sleep(0)  # slow
                if len(seen) == 200:
                    break
            return seen

    assert run(main) == list(range(200))
    assert set(limits) == {5}


# -- failures ------------------------------------------------------------------------------------------------------


def test_a_store_failure_mid_processing_reaches_consumers_and_a_reopen_recovers_everything(store: Path) -> None:
    async def main() -> None:
        engine = await AsyncEngine.open(store, **OPTS, batch_events=8)
        real = engine.engine.process
        calls = 0

        def failing(max_events: int | None = None) -> int:
            nonlocal calls
            calls += 1
            if calls == 3:
                raise StoreError("injected: the disk went away")
            return real(max_events)

        engine.engine.process = failing  # type: ignore[method-assign]
        consumer = asyncio.create_task(collect(engine, "q0", 100))
        engine.start()
        await engine.append_many("s0", [(i, at(i)) for i in range(40)])
        with pytest.raises(ProcessingFailedError) as raised:
            await consumer
        assert isinstance(raised.value.__cause__, StoreError)
        with pytest.raises(ProcessingFailedError):
            await engine.aclose()
        with pytest.raises(EngineClosedError):
            await engine.append("s0", 99)

    run(main)
    assert stored_values(store) == [2 * i for i in range(40)]


def test_a_query_that_raises_does_not_stop_processing_of_the_others(store: Path) -> None:
    async def main() -> tuple[list[int], bool]:
        async with await AsyncEngine.open(store, **OPTS) as engine:
            await engine.create_subscription("bad", Query.stream("s1").map(fails_on_three))
            await engine.append_many("s1", [(i, at(i)) for i in range(6)])
            seen = [o.value for o in await collect(engine, "q1", 6)]
            assert engine.processor is not None
            return seen, engine.processor.done()

    seen, stopped = run(main)
    assert (seen, stopped) == ([0, 2, 4, 6, 8, 10], False)


def failing_observer(output: Output) -> None:
    raise ConnectionError("the sink is down")


def test_an_observer_that_fails_does_not_stop_processing_of_the_others(store: Path) -> None:
    async def main() -> tuple[list[int], bool]:
        async with await AsyncEngine.open(store, **OPTS, observer_retries=1, observer_backoff=0) as engine:
            engine.engine.register_function("failing_observer", failing_observer)
            engine.engine.define_observer("down", failing_observer)
            await engine.create_subscription("sent", Query.stream("s1"), "down")
            await engine.append_many("s1", [(i, at(i)) for i in range(4)])
            seen = [o.value for o in await collect(engine, "q1", 4)]
            assert engine.processor is not None
            return seen, engine.processor.done()

    assert run(main) == ([0, 2, 4, 6], False)


def test_an_engine_closed_under_the_processing_task_ends_it_and_its_consumers(store: Path) -> None:
    """engine.close() called directly (not aclose): the processing task and the consumers end, none hangs, and a
    later aclose has nothing left to do."""

    async def main() -> None:
        engine = await AsyncEngine.open(store, **OPTS)
        engine.start()
        consumer = asyncio.create_task(collect(engine, "q0", 5))
        await engine.append("s0", 1, at(1))
        await until(lambda: engine.engine.produced.generation > 0)
        await engine.call(engine.engine.close)
        assert len(await consumer) <= 1  # ended with what it had read
        assert engine.processor is not None
        await engine.processor  # ended, without an error
        await engine.aclose()

    run(main)


def test_a_cancelled_processing_task_is_a_stop_not_a_failure(store: Path) -> None:
    async def main() -> None:
        engine = await AsyncEngine.open(store, **OPTS)
        engine.start()
        await engine.append_many("s0", [(i, at(i)) for i in range(10)])
        await collect(engine, "q0", 10)
        assert engine.processor is not None
        engine.processor.cancel()
        await asyncio.wait({engine.processor})
        await engine.aclose()  # no ProcessingFailedError, and the final checkpoint is taken

    run(main)
    with Engine(store, **OPTS) as engine:
        assert engine.streams()["s0"].retained == 0


# -- opening -------------------------------------------------------------------------------------------------------


def test_open_on_a_locked_store_raises_from_open_and_leaves_no_thread(store: Path) -> None:
    async def main() -> None:
        with Engine(store, **OPTS):
            before = set(threading.enumerate())
            with pytest.raises(StoreLockedError):
                await AsyncEngine.open(store, **OPTS)
            assert {t for t in threading.enumerate() if t.name.startswith("reaqtive")} <= before

    run(main)


def test_open_on_a_bad_path_raises_from_open(tmp_path: Path) -> None:
    async def main() -> None:
        with pytest.raises(StoreError):
            await AsyncEngine.open(tmp_path / "missing-dir" / "store.db", **OPTS)
        (tmp_path / "not-a-db").write_bytes(b"this is not an SQLite file" * 100)
        with pytest.raises(StoreError):
            await AsyncEngine.open(tmp_path / "not-a-db", **OPTS)

    run(main)


def test_open_on_postgresql_streams_and_a_second_open_is_refused(postgres_dsn: str) -> None:
    async def main() -> list[Output]:
        async with await AsyncEngine.open(postgres_dsn, start=T0, **OPTS) as engine:
            await engine.create_stream("s")
            await engine.create_subscription("q", Query.stream("s").map(doubled))
            with pytest.raises(StoreLockedError):
                await AsyncEngine.open(postgres_dsn, **OPTS)
            await engine.append("s", 21, at(1))
            return await collect(engine, "q", 1)

    assert run(main) == [Output("q", 0, 42)]


# -- cursors -------------------------------------------------------------------------------------------------------


def test_stream_outputs_after_beyond_the_last_output_waits_for_later_ones(store: Path) -> None:
    async def main() -> list[int]:
        async with await AsyncEngine.open(store, **OPTS) as engine:
            await engine.append_many("s0", [(i, at(i)) for i in range(3)])
            await collect(engine, "q0", 3)
            consumer = asyncio.create_task(collect(engine, "q0", 2, after=5))
            await engine.append_many("s0", [(i, at(i)) for i in range(3, 8)])
            return [o.seq for o in await consumer]

    assert run(main) == [6, 7]


@given(after=st.integers(min_value=-(2**63), max_value=3), acked=st.integers(min_value=-1, max_value=4))
@settings(max_examples=15, deadline=None)
def test_stream_outputs_after_below_the_ack_or_negative_starts_after_the_ack(after: int, acked: int) -> None:
    async def main() -> list[int]:
        async with AsyncEngine(Engine.in_memory(start=T0)) as engine:
            await engine.create_stream("s")
            await engine.create_subscription("q", Query.stream("s"))
            await engine.append_many("s", [(i, at(i)) for i in range(6)])
            await collect(engine, "q", 6, after=-1)
            await engine.ack("q", acked)
            start = max(after, acked)
            return [o.seq for o in await collect(engine, "q", 5 - start, after=after)]

    assert run(main) == list(range(max(after, acked) + 1, 6))


def test_stream_outputs_refuses_a_cursor_that_is_not_an_int(store: Path) -> None:
    async def main() -> None:
        async with await AsyncEngine.open(store, **OPTS) as engine:
            with pytest.raises(TypeError, match="after"):
                await collect(engine, "q0", 1, after="3")  # type: ignore[arg-type]

    run(main)


def test_a_subscription_deleted_while_streaming_raises_at_the_next_wake_up(store: Path) -> None:
    async def main() -> list[int]:
        async with await AsyncEngine.open(store, **OPTS) as engine:
            await engine.append_many("s0", [(i, at(i)) for i in range(2)])
            seen: list[int] = []

            async def consume() -> None:
                async for output in engine.stream_outputs("q0"):
                    seen.append(output.seq)

            consumer = asyncio.create_task(consume())
            await until(lambda: len(seen) == 2)
            await engine.call(engine.engine.delete_subscription, "q0")
            await engine.append("s1", 1, at(1))  # any output produced wakes the consumers
            with pytest.raises(ArtifactNotFoundError, match="deleted"):
                await consumer
            return seen

    assert run(main) == [0, 1]


def test_a_subscription_deleted_and_created_again_while_streaming_raises_not_skips(store: Path) -> None:
    """The new subscription numbers its outputs from 0 again: a consumer at #4 of the old one would skip them."""

    async def main() -> list[int]:
        async with await AsyncEngine.open(store, **OPTS) as engine:
            await engine.append_many("s0", [(i, at(i)) for i in range(5)])
            seen: list[int] = []

            async def consume() -> None:
                async for output in engine.stream_outputs("q0"):
                    seen.append(output.seq)

            consumer = asyncio.create_task(consume())
            await until(lambda: len(seen) == 5)
            await engine.call(engine.engine.delete_subscription, "q0")
            await engine.create_subscription("q0", Query.stream("s1"))
            await engine.append("s1", 1, at(1))  # the new q0's output #0 wakes the consumer
            with pytest.raises(ArtifactNotFoundError, match="created again"):
                await consumer
            return seen

    assert run(main) == [0, 1, 2, 3, 4]


def test_a_subscription_deleted_while_streaming_wakes_its_idle_consumer(store: Path) -> None:
    async def main() -> None:
        async with await AsyncEngine.open(store, **OPTS) as engine:
            consumer = asyncio.create_task(collect(engine, "q0", 1))
            await asyncio.sleep(0.01)
            await engine.call(engine.engine.delete_subscription, "q0")
            with pytest.raises(ArtifactNotFoundError):
                await asyncio.wait_for(consumer, 1.0)

    run(main)


# -- serve() on a thread -------------------------------------------------------------------------------------------


def serving(engine: Engine, **kwargs: Any) -> threading.Thread:
    thread = threading.Thread(target=engine.serve, kwargs=kwargs, daemon=True)
    thread.start()
    return thread


def test_serve_with_eight_appending_threads_delivers_each_event_once_and_stops_twice_cleanly(store: Path) -> None:
    with Engine(store, **OPTS) as engine:
        server = serving(engine, batch_events=7)

        def produce(base: int) -> None:
            for i in range(0, 60, 3):
                engine.append_many("s0", [(base + i + k, at(i + k)) for k in range(3)])

        producers = [threading.Thread(target=produce, args=(k * 1000,)) for k in range(8)]
        for producer in producers:
            producer.start()
        for producer in producers:
            producer.join()
        seen = engine.produced.generation
        while len(engine.outputs("q0")) < 480:
            seen = engine.produced.wait(seen, DEADLINE)
        engine.stop_serving()
        engine.stop_serving()
        server.join(DEADLINE)
        assert not server.is_alive()
        values = sorted(o.value // 2 for o in engine.outputs("q0"))
    assert values == sorted(k * 1000 + i for k in range(8) for i in range(60))


def test_closing_while_serving_and_appending_ends_serve_and_refuses_appends_clearly(store: Path) -> None:
    engine = Engine(store, **OPTS)
    server = serving(engine, batch_events=5)
    errors: list[BaseException] = []
    started = threading.Barrier(9)

    def produce(base: int) -> None:
        started.wait()
        try:
            for i in range(10_000):
                engine.append("s0", base + i, at(i))
        except Exception as error:
            errors.append(error)

    producers = [threading.Thread(target=produce, args=(k * 100_000,)) for k in range(8)]
    for producer in producers:
        producer.start()
    started.wait()
    seen = engine.produced.generation
    while not engine.outputs("q0", limit=1):
        seen = engine.produced.wait(seen, DEADLINE)
    engine.close()
    server.join(DEADLINE)
    for producer in producers:
        producer.join(DEADLINE)
    assert not server.is_alive()
    assert len(errors) == 8
    assert all(isinstance(error, EngineClosedError | StoreError) for error in errors), errors


def test_sync_appends_racing_close_raise_engine_closed_error(store: Path) -> None:
    for _ in range(5):
        errors = appends_racing_close(store)
        assert [type(error) for error in errors] == [EngineClosedError] * 8, errors


def appends_racing_close(store: Path) -> list[BaseException]:
    """8 threads append to a sync engine until it is closed under them; returns the errors that stopped them."""
    engine = Engine(store, **OPTS)
    errors: list[BaseException] = []
    started = threading.Barrier(9)

    def produce() -> None:
        started.wait()
        try:
            while True:
                engine.append("s0", 1, at(1))
        except Exception as error:
            errors.append(error)

    producers = [threading.Thread(target=produce) for _ in range(8)]
    for producer in producers:
        producer.start()
    started.wait()
    seen = engine.appended.generation
    while engine.appended.generation < 50:  # appends in full flow
        seen = engine.appended.wait(seen, DEADLINE)
    engine.close()
    for producer in producers:
        producer.join(DEADLINE)
    return errors


def test_stop_serving_before_serve_started_is_not_lost(store: Path) -> None:
    with Engine(store, **OPTS) as engine:
        engine.stop_serving()
        server = serving(engine)
        server.join(0.5)
        try:
            assert not server.is_alive()
        finally:
            engine.close()  # a serve that missed the stop ends now
            server.join(DEADLINE)


def test_serve_after_stop_serving_and_a_second_serve_run_again(store: Path) -> None:
    with Engine(store, **OPTS) as engine:
        for round_ in range(3):
            server = serving(engine)
            engine.append("s0", round_, at(round_))
            seen = engine.produced.generation
            while len(engine.outputs("q0")) <= round_:
                seen = engine.produced.wait(seen, DEADLINE)
            engine.stop_serving()
            server.join(DEADLINE)
            assert not server.is_alive()


# -- Signal --------------------------------------------------------------------------------------------------------


@given(threads=st.integers(1, 8), fires=st.integers(0, 50))
@settings(max_examples=20, deadline=None)
def test_signal_counts_every_fire_from_many_threads(threads: int, fires: int) -> None:
    signal = Signal("test")
    calls: list[int] = []
    signal.listen(lambda: calls.append(1))
    def fire_all() -> None:
        for _ in range(fires):
            signal.fire()

    workers = [threading.Thread(target=fire_all) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert signal.generation == threads * fires
    assert len(calls) == threads * fires


@given(timeout=st.floats(min_value=0, max_value=0.02) | st.just(-1.0))
@settings(max_examples=20, deadline=None)
def test_signal_wait_without_a_fire_returns_the_same_generation_after_the_timeout(timeout: float) -> None:
    signal = Signal("test")
    signal.fire()
    assert signal.wait(1, timeout) == 1


def test_signal_wait_returns_at_once_when_it_fired_since_seen() -> None:
    signal = Signal("test")
    seen = signal.generation
    signal.fire()
    assert signal.wait(seen) == 1  # no timeout: would hang if the fire were missed


def test_signal_wakes_a_waiting_thread_and_each_waiter_sees_a_newer_generation() -> None:
    signal = Signal("test")
    results: list[int] = []
    ready = threading.Barrier(5)

    def waiter() -> None:
        seen = signal.generation
        ready.wait()
        results.append(signal.wait(seen, DEADLINE))

    threads = [threading.Thread(target=waiter) for _ in range(4)]
    for thread in threads:
        thread.start()
    ready.wait()
    signal.fire()
    for thread in threads:
        thread.join(DEADLINE)
    assert results == [1, 1, 1, 1]


def test_signal_drops_a_raising_listener_and_keeps_the_others() -> None:
    signal = Signal("test")
    calls: list[str] = []

    def broken() -> None:
        calls.append("broken")
        raise RuntimeError("Event loop is closed")

    signal.listen(broken)
    signal.listen(lambda: calls.append("good"))
    signal.fire()
    signal.fire()
    assert calls == ["broken", "good", "good"]


def test_a_listener_may_unlisten_itself_or_listen_another_during_a_fire() -> None:
    signal = Signal("test")
    calls: list[str] = []
    stops: list[Callable[[], None]] = []

    def once() -> None:
        calls.append("once")
        stops[0]()
        signal.listen(lambda: calls.append("late"))

    stops.append(signal.listen(once))
    signal.fire()
    signal.fire()
    assert calls == ["once", "late"]


def test_stopping_one_of_two_registrations_of_the_same_listener_keeps_the_other() -> None:
    signal = Signal("test")
    calls: list[int] = []

    def listener() -> None:
        calls.append(1)

    stop_first = signal.listen(listener)
    signal.listen(listener)
    stop_first()
    signal.fire()
    assert calls == [1]
