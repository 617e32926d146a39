"""An asyncio service for the kill -9 acceptance test of the async face (tests/engine/test_aio_service.py).

Run: python -m tests.engine.aio_service_worker STORE CONSUMER_LOG

Concurrent producer tasks append deterministic events to three streams (each resumes where its stream's log
ends: the log is durable, so what was appended before a kill stays appended); the processing task is woken by
the appends; one consumer task per subscription reads ``stream_outputs`` from after the last output it recorded
and writes each output as a line of CONSUMER_LOG (written through to the OS before the next one: a SIGKILL loses
nothing written), acknowledging every few outputs. Stdout markers let the test choose when to kill:
``ready``, ``consumed N`` (every 20 outputs), ``done``.
"""

from __future__ import annotations

import asyncio
import json
import operator
import os
import random
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

from reaqtive import FunctionRegistry, Query
from reaqtive.engine import Engine, Output
from reaqtive.engine.aio import AsyncEngine

T0 = datetime(2026, 3, 1, tzinfo=UTC)
EVENTS = 800  # per stream
STREAMS = ("svc://a", "svc://b", "svc://c")
ACK_EVERY = 7


def double(value: int) -> int:
    return value * 2


def residue(value: int) -> int:
    return value % 5


def value_of(stream: str, i: int) -> int:
    """The i-th event of a stream: the same in every run."""
    return (i * 7919 + STREAMS.index(stream) * 104729) % 1000


def queries() -> dict[str, Query[Any]]:
    """One subscription per stream, so that each one's outputs do not depend on how producers interleave."""
    return {
        "q://doubled": Query.stream("svc://a").map(double),
        "q://running-sum": Query.stream("svc://b").scan(0, operator.add),
        "q://pairs": Query.stream("svc://c").map(residue).buffer(2),
    }


def expected_counts() -> dict[str, int]:
    return {"q://doubled": EVENTS, "q://running-sum": EVENTS, "q://pairs": EVENTS // 2}


def functions() -> FunctionRegistry:
    """By name: this module runs as ``__main__`` in the worker and is imported by the test."""
    registry = FunctionRegistry()
    registry.register("double", double)
    registry.register("residue", residue)
    registry.register("add", operator.add)
    return registry


def options() -> dict[str, Any]:
    return {"start": T0, "synchronous": "NORMAL", "functions": functions(), "checkpoint_every_events": 50}


def prepare(engine: Engine) -> None:
    """Create what is missing (a restart finds it all)."""
    existing = {info.uri for info in engine.artifacts()}
    for stream in STREAMS:
        if stream not in existing:
            engine.create_stream(stream)
    for uri, query in queries().items():
        if uri not in existing:
            engine.create_subscription(uri, query)


def read_log(path: Path) -> Iterator[tuple[str, int, Any]]:
    """The consumer log's complete lines (a line cut by a kill has no newline: it was never recorded)."""
    if not path.exists():
        return
    with path.open("rb") as log:
        for line in log:
            if line.endswith(b"\n"):
                record = json.loads(line)
                yield record[0], record[1], record[2]


def consumed_upto(path: Path) -> dict[str, int]:
    last: dict[str, int] = {}
    for uri, seq, _ in read_log(path):
        last[uri] = max(last.get(uri, -1), seq)
    return last


def repair(path: Path) -> None:
    """Cut a torn last line (the worker was killed while writing it); complete lines stay."""
    if not path.exists():
        return
    data = path.read_bytes()
    keep = data.rfind(b"\n") + 1
    if keep != len(data):
        with path.open("r+b") as log:
            log.truncate(keep)


async def produce(engine: AsyncEngine, stream: str, rng: random.Random) -> None:
    start = engine.engine.streams()[stream].appended  # resume where the durable log ends
    i = start
    while i < EVENTS:
        chunk = min(rng.randint(1, 9), EVENTS - i)
        await engine.append_many(stream, [(value_of(stream, i + k), T0 + timedelta(seconds=i + k))
                                          for k in range(chunk)])
        i += chunk
        await asyncio.sleep(0)


async def consume(engine: AsyncEngine, uri: str, after: int, log: IO[bytes], progress: list[int]) -> None:
    target = expected_counts()[uri] - 1
    if after >= target:
        return
    async for output in engine.stream_outputs(uri, after=after):
        write(log, output)
        progress[0] += 1
        if progress[0] % 20 == 0:
            print(f"consumed {progress[0]}", flush=True)
        if output.seq % ACK_EVERY == 0:
            await engine.ack(uri, output.seq)
        if output.seq >= target:
            return


def write(log: IO[bytes], output: Output) -> None:
    log.write(json.dumps([output.subscription, output.seq, output.value]).encode() + b"\n")
    log.flush()  # through to the OS: a SIGKILL of this process cannot lose it


async def main(store: Path, log_path: Path) -> None:
    repair(log_path)
    after = consumed_upto(log_path)
    engine = await AsyncEngine.open(store, batch_events=32, **options())
    prepare(engine.engine)
    print("ready", flush=True)
    rng = random.Random(os.getpid())
    progress = [0]
    with log_path.open("ab") as log:
        async with engine:
            await asyncio.gather(
                *(produce(engine, stream, rng) for stream in STREAMS),
                *(consume(engine, uri, after.get(uri, -1), log, progress) for uri in queries()),
            )
    print("done", flush=True)


def oracle() -> dict[str, list[tuple[int, Any]]]:
    """The outputs of a run never killed, in one process, stream after stream."""
    with Engine.in_memory(**{k: v for k, v in options().items() if k != "synchronous"}) as engine:
        prepare(engine)
        for stream in STREAMS:
            engine.append_many(stream, [(value_of(stream, i), T0 + timedelta(seconds=i)) for i in range(EVENTS)])
        engine.process()
        return {uri: [(o.seq, o.value) for o in engine.outputs(uri)] for uri in queries()}


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2])))
