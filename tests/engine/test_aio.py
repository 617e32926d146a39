"""The engine's asyncio face (AsyncEngine) and the sync processing loop (serve): woken by appends, never polling;
cursors that resume; a graceful stop with a final checkpoint; failures that reach the consumers."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from reaqtive import Query
from reaqtive.engine import Engine, EngineClosedError, Output
from reaqtive.engine.aio import AsyncEngine, ProcessingFailedError

T0 = datetime(2026, 1, 1, tzinfo=UTC)
OPTS: dict[str, object] = {"synchronous": "NORMAL", "allow_modules": [__name__]}


def doubled(value: int) -> int:
    return value * 2


def setup(engine: Engine, streams: int = 1) -> None:
    for i in range(streams):
        engine.create_stream(f"s{i}")
        engine.create_subscription(f"q{i}", Query.stream(f"s{i}").map(doubled))


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
def prepared(store: Path) -> Iterator[Path]:
    with Engine(store, start=T0, **OPTS) as engine:
        setup(engine, 4)
    yield store


def at(i: int) -> datetime:
    return T0 + timedelta(milliseconds=i)


async def collect(engine: AsyncEngine, uri: str, count: int, after: int | None = None) -> list[Output]:
    seen: list[Output] = []
    async for output in engine.stream_outputs(uri, after=after):
        seen.append(output)
        if len(seen) == count:
            break
    return seen


def test_appends_wake_the_processing_task_and_outputs_reach_the_consumer(prepared: Path) -> None:
    async def main() -> list[Output]:
        async with await AsyncEngine.open(prepared, **OPTS) as engine:
            consumer = asyncio.create_task(collect(engine, "q0", 3))
            for i in range(3):
                await engine.append("s0", i, at(i))
            return await asyncio.wait_for(consumer, 30)

    assert asyncio.run(main()) == [Output("q0", i, i * 2) for i in range(3)]


def test_an_idle_processing_task_does_not_poll(prepared: Path) -> None:
    calls: list[int | None] = []

    async def main() -> tuple[int, int]:
        async with await AsyncEngine.open(prepared, **OPTS) as engine:
            real = engine.engine.process

            def counting(max_events: int | None = None) -> int:
                calls.append(max_events)
                return real(max_events)

            engine.engine.process = counting  # type: ignore[method-assign]
            await engine.append("s0", 1, at(1))
            await asyncio.wait_for(collect(engine, "q0", 1), 30)
            await asyncio.sleep(0.1)  # an append during the first batch earns one more (empty) batch: let it end
            settled = len(calls)
            await asyncio.sleep(0.3)  # absence of polling takes time to show: nothing may call process meanwhile
            idle = len(calls)
            await engine.append("s0", 2, at(2))
            await asyncio.wait_for(collect(engine, "q0", 1, after=0), 30)
            return settled, idle

    settled, idle = asyncio.run(main())
    assert idle == settled
    assert len(calls) > idle  # the second append woke it


def test_concurrent_producers_each_output_exactly_once_in_order(prepared: Path) -> None:
    producers, per_producer = 8, 150

    async def produce(engine: AsyncEngine, stream: str, base: int) -> None:
        for i in range(per_producer):
            if i % 10 == 0:
                await engine.append_many(stream, [(base + i + k, at(base + i + k)) for k in range(10)])
            await asyncio.sleep(0)

    async def main() -> dict[str, list[Output]]:
        async with await AsyncEngine.open(prepared, **OPTS, batch_events=64) as engine:
            consumers = {f"q{i}": asyncio.create_task(collect(engine, f"q{i}", 2 * per_producer))
                         for i in range(4)}
            await asyncio.gather(*(produce(engine, f"s{p % 4}", p * 1000) for p in range(producers)))
            return {uri: await asyncio.wait_for(task, 60) for uri, task in consumers.items()}

    results = asyncio.run(main())
    for uri, outputs in results.items():
        assert [o.seq for o in outputs] == list(range(2 * per_producer)), uri
        values = sorted(o.value // 2 for o in outputs)
        stream = int(uri[1:])
        expected = sorted(p * 1000 + i for p in range(producers) if p % 4 == stream for i in range(per_producer))
        assert values == expected


def test_the_loop_stays_free_while_a_batch_runs(store: Path) -> None:
    """An observer function blocks the processing thread until the loop releases it: only possible if the loop
    is not blocked by processing."""
    release = threading.Event()
    entered = threading.Event()

    def slow_observer(output: Output) -> None:
        entered.set()
        if not release.wait(30):
            raise AssertionError("the loop never released the observer")

    async def main() -> None:
        engine = await AsyncEngine.open(store, start=T0, **OPTS)
        engine.engine.register_function("slow", slow_observer)
        engine.engine.create_stream("s")
        engine.engine.define_observer("obs", slow_observer)
        engine.engine.create_subscription("q", Query.stream("s").map(doubled), "obs")
        engine.start()
        await engine.append("s", 1, at(1))
        while not entered.is_set():  # the loop runs while the observer blocks the processing thread
            await asyncio.sleep(0.001)
        release.set()
        await engine.aclose()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_stream_outputs_resumes_after_a_cursor_and_after_the_acknowledgement(prepared: Path) -> None:
    async def main() -> tuple[list[int], list[int], list[int]]:
        async with await AsyncEngine.open(prepared, **OPTS) as engine:
            await engine.append_many("s0", [(i, at(i)) for i in range(10)])
            first = [o.seq for o in await asyncio.wait_for(collect(engine, "q0", 4), 30)]
            resumed = [o.seq for o in await asyncio.wait_for(collect(engine, "q0", 3, after=first[-1]), 30)]
            await engine.ack("q0", 6)
            after_ack = [o.seq for o in await asyncio.wait_for(collect(engine, "q0", 3), 30)]
            return first, resumed, after_ack

    assert asyncio.run(main()) == ([0, 1, 2, 3], [4, 5, 6], [7, 8, 9])


def test_stream_outputs_ends_when_the_engine_closes(prepared: Path) -> None:
    async def main() -> list[Output]:
        engine = await AsyncEngine.open(prepared, **OPTS)
        engine.start()
        await engine.append("s0", 5, at(5))
        seen: list[Output] = []

        async def consume() -> None:
            async for output in engine.stream_outputs("q0"):
                seen.append(output)

        consumer = asyncio.create_task(consume())
        while not seen:
            await asyncio.sleep(0.001)
        await engine.aclose()
        await asyncio.wait_for(consumer, 30)  # ended, not hanging
        return seen

    assert asyncio.run(main()) == [Output("q0", 0, 10)]


def test_aclose_takes_a_final_checkpoint(prepared: Path) -> None:
    async def main() -> None:
        async with await AsyncEngine.open(prepared, **OPTS) as engine:
            await engine.append_many("s0", [(i, at(i)) for i in range(20)])
            await asyncio.wait_for(collect(engine, "q0", 20), 30)

    asyncio.run(main())
    with Engine(prepared, **OPTS) as engine:
        status = engine.streams()["s0"]
        assert (status.appended, status.retained) == (20, 0)  # the final checkpoint covered every event


def test_aclose_with_drain_delivers_what_was_appended(prepared: Path) -> None:
    async def main() -> None:
        engine = await AsyncEngine.open(prepared, **OPTS)  # no processing task: appends only
        await engine.append_many("s0", [(i, at(i)) for i in range(7)])
        await engine.aclose(drain=True)

    asyncio.run(main())
    with Engine(prepared, **OPTS) as engine:
        assert [o.seq for o in engine.outputs("q0")] == list(range(7))
        assert engine.streams()["s0"].retained == 0


def test_a_failing_processing_task_reaches_consumers_and_aclose(prepared: Path) -> None:
    async def main() -> None:
        engine = await AsyncEngine.open(prepared, **OPTS)

        def broken(max_events: int | None = None) -> int:
            raise OSError("disk gone")

        engine.engine.process = broken  # type: ignore[method-assign]
        engine.start()
        consumer = asyncio.create_task(collect(engine, "q0", 1))
        await engine.append("s0", 1, at(1))
        with pytest.raises(ProcessingFailedError) as raised:
            await asyncio.wait_for(consumer, 30)
        assert isinstance(raised.value.__cause__, OSError)
        with pytest.raises(ProcessingFailedError):
            await engine.aclose()
        assert engine.engine.status.value == "closed"

    asyncio.run(main())


def test_bad_arguments_and_a_closed_engine_are_refused(prepared: Path) -> None:
    async def main() -> None:
        engine = await AsyncEngine.open(prepared, **OPTS)
        with pytest.raises(ValueError, match="batch"):
            async for _ in engine.stream_outputs("q0", batch=0):
                pass
        with pytest.raises(ValueError, match="durable sink"):
            async for _ in engine.stream_outputs("s0"):
                pass
        await engine.aclose()
        await engine.aclose()  # twice is fine
        with pytest.raises(EngineClosedError):
            await engine.append("s0", 1)
    with pytest.raises(ValueError, match="batch_events"):
        AsyncEngine(Engine.in_memory(), batch_events=0)
    asyncio.run(main())


# -- the sync face: serve() on a thread ---------------------------------------------------------------------------


def wait_for_outputs(engine: Engine, uri: str, count: int) -> list[Output]:
    seen = engine.produced.generation
    while True:
        outputs = engine.outputs(uri)
        if len(outputs) >= count:
            return outputs
        seen = engine.produced.wait(seen, 30)


def test_serve_is_woken_by_appends_from_other_threads(prepared: Path) -> None:
    with Engine(prepared, **OPTS) as engine:
        server = threading.Thread(target=engine.serve, kwargs={"batch_events": 16}, daemon=True)
        server.start()
        producers = [threading.Thread(target=lambda base=base: [engine.append("s1", base + i, at(base + i))
                                                                 for i in range(25)]) for base in (0, 100, 200)]
        for producer in producers:
            producer.start()
        for producer in producers:
            producer.join()
        outputs = wait_for_outputs(engine, "q1", 75)
        engine.stop_serving()
        server.join(30)
        assert not server.is_alive()
    assert sorted(o.value // 2 for o in outputs) == sorted(b + i for b in (0, 100, 200) for i in range(25))


def test_serve_returns_when_the_engine_closes(prepared: Path) -> None:
    engine = Engine(prepared, **OPTS)
    server = threading.Thread(target=engine.serve, daemon=True)
    server.start()
    engine.append("s0", 1, at(1))
    wait_for_outputs(engine, "q0", 1)
    engine.close()
    server.join(30)
    assert not server.is_alive()


def test_serve_refuses_a_bad_batch(prepared: Path) -> None:
    with Engine(prepared, **OPTS) as engine, pytest.raises(ValueError, match="batch_events"):
        engine.serve(batch_events=0)


def test_outputs_a_checkpoint_writes_during_processing_still_wake_consumers(store: Path) -> None:
    """A checkpoint inside process() writes the batch's outputs to the sink before the batch ends: the produced
    signal must fire then too, or a waiting consumer sleeps through its last outputs."""
    with Engine(store, start=T0, checkpoint_every_events=1, **OPTS) as engine:
        setup(engine)
        seen = engine.produced.generation
        engine.append("s0", 1, at(1))
        engine.process()
        assert engine.produced.generation != seen
        assert [o.value for o in engine.outputs("q0")] == [2]
