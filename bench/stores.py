"""The engine on its two stores: an SQLite file and a PostgreSQL database, the same work on each, with a plain
Python loop measured in the same run.

Run: .venv/bin/python bench/stores.py [--events E] [--subscriptions N] [--fsync on|off]

PostgreSQL is a throwaway local server started for the run (``reaqtive.testing.postgres``; its binaries come from
the OS's ``postgresql`` package), with ``fsync`` on by default so that its commits cost what SQLite's
``synchronous=FULL`` ones do. Reported per store:

* appends in batches of 1,000 and single appends (events/s; each append is one durable transaction);
* ``process()`` of those events through ``map → filter → scan`` to the durable sink (events/s);
* a full checkpoint with N subscriptions, and a differential one with 1% of them changed (seconds);
* recovery: opening the store again with N subscriptions (seconds).
"""

from __future__ import annotations

import argparse
import operator
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _workloads import WORKLOADS, CountingSink  # bench/ is sys.path[0] when this runs as a script

from reaqtive import Query
from reaqtive.engine import DISCARD_SINK, Engine, FunctionRegistry
from reaqtive.testing.postgres import PostgresCluster

T0 = datetime(2026, 1, 1, tzinfo=UTC)


MAP_FILTER_SCAN = WORKLOADS[0]  # map(x*2) -> filter(x%3==0) -> scan(sum), shared with the other benches


def functions() -> FunctionRegistry:
    registry = FunctionRegistry()
    for name, function in MAP_FILTER_SCAN.functions.items():
        registry.register(name, function)
    return registry


def measure(target: str, events: int, subscriptions: int, say: Callable[[str], None], label: str) -> None:
    values = [(i, T0 + timedelta(microseconds=i)) for i in range(events)]
    with Engine(target, functions=functions(), start=T0) as engine:
        engine.create_stream("in")
        engine.create_subscription("q", MAP_FILTER_SCAN.pipeline(Query.stream("in")))
        started = time.perf_counter()
        for i in range(0, events, 1000):
            engine.append_many("in", values[i:i + 1000])
        batched = events / (time.perf_counter() - started)
        single = 500
        started = time.perf_counter()
        for i in range(single):
            engine.append("in", i, T0 + timedelta(seconds=1, microseconds=i))
        singles = single / (time.perf_counter() - started)
        started = time.perf_counter()
        processed = engine.process()
        engine.outputs("q", after=processed, limit=1)  # the sink flushed
        process_rate = processed / (time.perf_counter() - started)
    say(f"{label:10} appends (1,000 a batch) {batched:>10,.0f}/s | single appends {singles:>7,.0f}/s | "
        f"process() {process_rate:>10,.0f} events/s")
    checkpoints(target, subscriptions, say, label)


def checkpoints(target: str, subscriptions: int, say: Callable[[str], None], label: str) -> None:
    """N subscriptions over 10 streams: a full checkpoint, a differential one with 1% changed, and recovery."""
    with Engine(target, functions=functions(), start=T0, synchronous="FULL") as engine:
        for i in range(10):
            engine.create_stream(f"in{i}")
        for i in range(subscriptions):
            engine.create_subscription(f"s{i:05d}", Query.stream(f"in{i % 10}").scan(0, operator.add),
                                       observer=DISCARD_SINK)
        for i in range(10):
            engine.append_many(f"in{i}", [(v, T0 + timedelta(seconds=v)) for v in range(3)])
        engine.process()
        fulls = [engine.checkpoint(full=True) for _ in range(3)]
        full = min(m.pause_seconds + m.commit_seconds for m in fulls)
        engine.append("in0", 1, T0 + timedelta(seconds=10))  # one stream of ten: 10% of the queries change
        engine.process()
        diff = engine.checkpoint()
    started = time.perf_counter()
    Engine(target, functions=functions()).close()
    recovery = time.perf_counter() - started
    say(f"{label:10} {subscriptions:,} subscriptions: full checkpoint {full * 1e3:,.0f} ms (pause + commit) | "
        f"differential ({diff.dirty_subscriptions} changed) {(diff.pause_seconds + diff.commit_seconds) * 1e3:,.1f} "
        f"ms | recovery {recovery:,.2f} s")


def plain_loop(events: int) -> float:
    started = time.perf_counter()
    MAP_FILTER_SCAN.loop(events, CountingSink())
    return events / (time.perf_counter() - started)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--subscriptions", type=int, default=2_000)
    parser.add_argument("--fsync", choices=("on", "off"), default="on", help="the PostgreSQL server's fsync")
    args = parser.parse_args(argv)
    say: Callable[[str], None] = lambda text: print(text, flush=True)  # noqa: E731
    say(f"plain loop (same work): {plain_loop(args.events):,.0f} events/s")
    settings = {"fsync": args.fsync, "full_page_writes": args.fsync}
    with tempfile.TemporaryDirectory() as folder, PostgresCluster(settings=settings) as cluster:
        for run in range(2):  # interleaved
            measure(str(Path(folder) / f"sqlite{run}.db"), args.events, args.subscriptions, say, "SQLite")
            measure(cluster.create_database(f"bench{run}"), args.events, args.subscriptions, say, "PostgreSQL")


if __name__ == "__main__":
    main()
