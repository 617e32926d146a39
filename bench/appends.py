"""What an append to the durable ingress log costs per event, and what reading it back for delivery costs.

Run: .venv/bin/python bench/appends.py [--events N] [--chunk C] [--rounds K] [--synchronous FULL|NORMAL]
[--only dated,now,extend] [--postgres]

Each round opens a fresh engine (a new store file, one stream, one subscription into the discard sink) and:

* **append_many, times given**: N ints appended with ``engine.append_many`` in chunks of C events, each dated
  (``T0 + x`` microseconds), timed from the first call to the last return (``"call"`` mode: each chunk is one
  committed transaction).
* **append_many, times now**: the same with ``time`` ``None`` (the engine stamps them).
* **extend**: the same events through ``engine.extend`` from a generator (transactions of 10,000).
* **read_ingress_runs**: the log of the first variant read back whole with ``store.read_ingress_runs`` in batches
  of 4,096 positions (what ``process()`` reads and decodes before delivering), timed alone.

Reported per variant: the median over the rounds of events per second and microseconds per event, by the wall
clock and by the process's CPU time (steadier on a shared machine: time spent waiting for the CPU is not counted).
Nothing is processed: the figures are the log's alone (``bench/peers.py`` has append + process).

``--postgres``: the same on a PostgreSQL database instead of an SQLite file (a throwaway local server,
``reaqtive.testing.postgres``, with ``fsync`` off: the figures are the client's work and the round trips, not the
disk's), a new database per round.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from reaqtive import Query
from reaqtive.engine import DISCARD_SINK, Engine

T0 = datetime(2026, 1, 1, tzinfo=UTC)
STREAM = "bench://appends"
READ_BATCH = 4_096


Target = Callable[[Path], str | Path]
"""Where a round's store goes, given a temporary folder: a file in it, or a new PostgreSQL database."""


def sqlite_file(folder: Path) -> str | Path:
    return folder / "a.db"


def open_engine(target: str | Path, synchronous: str) -> Engine:
    engine = Engine(target, synchronous=synchronous, start=T0)
    engine.create_stream(STREAM)
    engine.create_subscription("q", Query.stream(STREAM), observer=DISCARD_SINK)
    return engine


def dated(start: int, stop: int) -> list[tuple[int, datetime | None]]:
    return [(x, T0 + timedelta(microseconds=x)) for x in range(start, stop)]


def undated(start: int, stop: int) -> list[tuple[int, datetime | None]]:
    return [(x, None) for x in range(start, stop)]


Timing = tuple[float, float]
"""Wall-clock seconds, CPU seconds."""


def clocks() -> Timing:
    return time.perf_counter(), time.process_time()


def since(start: Timing) -> Timing:
    wall, cpu = clocks()
    return wall - start[0], cpu - start[1]


def run_append_many(make: Callable[[int, int], list[tuple[int, datetime | None]]], n: int, chunk: int,
                    synchronous: str, target: Target) -> tuple[Timing, Timing]:
    """Time of the appends (the lists are built beforehand, untimed), and time to read the log back."""
    batches = [make(start, min(n, start + chunk)) for start in range(0, n, chunk)]
    with tempfile.TemporaryDirectory(prefix="reaqtive-appends-") as folder:
        engine = open_engine(target(Path(folder)), synchronous)
        try:
            append_many = engine.append_many
            started = clocks()
            for batch in batches:
                append_many(STREAM, batch)
            appended = since(started)
            return appended, read_back(engine, n)
        finally:
            engine.close()


def run_extend(n: int, synchronous: str, target: Target) -> Timing:
    def events() -> Iterator[tuple[int, datetime | None]]:
        for x in range(n):
            yield x, T0 + timedelta(microseconds=x)

    with tempfile.TemporaryDirectory(prefix="reaqtive-appends-") as folder:
        engine = open_engine(target(Path(folder)), synchronous)
        try:
            started = clocks()
            engine.extend(STREAM, events())
            return since(started)
        finally:
            engine.close()


def read_back(engine: Engine, n: int) -> Timing:
    store: Any = engine._store  # the engine's store: read as process() reads it
    after, read = 0, 0
    started = clocks()
    while True:
        runs = store.read_ingress_runs(after, READ_BATCH)
        if not runs:
            break
        for run in runs:
            read += run.count
        after = runs[-1].pos + runs[-1].count - 1
    seconds = since(started)
    if read != n:
        raise AssertionError(f"read {read} events back, expected {n}")
    return seconds


def report(name: str, n: int, timings: list[Timing]) -> None:
    wall = statistics.median(t[0] for t in timings)
    cpu = statistics.median(t[1] for t in timings)
    print(f"{name:<28} {n / wall:>12,.0f} events/s {wall / n * 1e6:>7.3f} us/event   CPU: {n / cpu:>12,.0f} "
          f"events/s {cpu / n * 1e6:>7.3f} us/event   (wall: {', '.join(f'{t[0]:.3f}' for t in timings)} s)",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--chunk", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--synchronous", default="NORMAL", choices=["FULL", "NORMAL"])
    parser.add_argument("--only", default="dated,now,extend", help="comma-separated: dated, now, extend")
    parser.add_argument("--postgres", action="store_true", help="on a throwaway PostgreSQL server, not SQLite")
    args = parser.parse_args()
    with ExitStack() as stack:
        target: Target = sqlite_file
        if args.postgres:
            from reaqtive.testing.postgres import PostgresCluster

            cluster = stack.enter_context(PostgresCluster(settings={"fsync": "off", "full_page_writes": "off"}))
            target = lambda _folder: cluster.create_database()  # noqa: E731
        run(args, target)


def run(args: argparse.Namespace, target: Target) -> None:
    only = set(args.only.split(","))
    n = args.events
    print(f"{n:,} events, chunks of {args.chunk:,}, synchronous={args.synchronous}, {args.rounds} rounds (medians)"
          f"{', PostgreSQL' if args.postgres else ''}")
    results: dict[str, list[Timing]] = {}
    for _ in range(args.rounds):
        if "dated" in only:
            appended, read = run_append_many(dated, n, args.chunk, args.synchronous, target)
            results.setdefault("append_many, times given", []).append(appended)
            results.setdefault("read_ingress_runs", []).append(read)
        if "now" in only:
            appended, _read = run_append_many(undated, n, args.chunk, args.synchronous, target)
            results.setdefault("append_many, times now", []).append(appended)
        if "extend" in only:
            results.setdefault("extend (generator)", []).append(run_extend(n, args.synchronous, target))
    for name, seconds in results.items():
        report(name, n, seconds)


if __name__ == "__main__":
    main()
