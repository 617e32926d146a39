"""The worker of the backfill kill test (``test_backfill_crash.py``): an engine (event clock) over a retained stream
of ``HISTORY`` events, on which two backfills are created from the earliest event (a running count and a buffer by
event time), while a producer goes on appending live events and the engine processes them in slices and
checkpoints every ``--every`` events. Killed at any moment and started again, it goes on from where the store
stands: the producer from the stream's head (each append is durable when it returns), the backfills are created
once (after a kill they are recovered, going on with their backfill or restarting it cleanly).

Markers on stdout: ``opening``, ``ready`` (history in place), ``created N`` (after each backfill's creation),
``backfills N`` (how many this run created), ``progress N`` (events delivered),
``done``.
"""

from __future__ import annotations

import argparse
import operator
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from reaqtive import Query
from reaqtive.engine import Engine, FunctionRegistry, GroupCommit, Retention

T0 = datetime(2026, 1, 1, tzinfo=UTC)
HISTORY = 30_000  # 59 catch-up slices of 512: room for kills early, midway and late in a catch-up
CHUNK = 40


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def event(i: int) -> tuple[str, int, datetime]:
    """Event ``i`` of the run: its stream, value and time (times in order, some equal)."""
    return ("a" if i % 5 else "b"), i, at(i // 2)


def count_one(count: int, _: Any) -> int:
    return count + 1


def functions() -> FunctionRegistry:
    registry = FunctionRegistry()
    registry.register("count_one", count_one)
    registry.register("add", operator.add)
    return registry


def backfills() -> dict[str, Query[Any]]:
    a, b = Query.stream("a"), Query.stream("b")
    return {
        "count": a.scan(0, count_one),
        "window": a.merge(b).buffer(timedelta(seconds=7)),
        "sum": b.scan(0, operator.add),
    }


def live() -> dict[str, Query[Any]]:
    return {"live": Query.stream("a").scan(0, count_one)}


def open_engine(target: str) -> Engine:
    return Engine(target, functions=functions(), start=T0, synchronous="NORMAL",
                  ingress_commit=GroupCommit(events=2_000, seconds=0.02))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("--events", type=int, default=12_000)
    parser.add_argument("--every", type=int, default=700)
    args = parser.parse_args()
    target = args.store if "://" in args.store or "=" in args.store else str(Path(args.store))
    print("opening", flush=True)
    engine = open_engine(target)
    # Each step of the set-up on its own: a kill between two of them (the first kill lands there on a slow
    # store) leaves the ones done, and the next run makes the rest.
    existing = {artifact.uri for artifact in engine.artifacts()}
    for stream in ("a", "b"):
        if stream not in existing:
            engine.create_stream(stream, retain=Retention(events=1_000_000))
    for uri, query in live().items():
        if uri not in existing:
            engine.create_subscription(uri, query)
    if not existing & set(backfills()):  # the history phase, until the first backfill exists
        head = sum(status.appended for status in engine.streams().values())
        for i in range(head, HISTORY):  # group committed: a kill loses the tail not committed, and the next
            engine.append(*event(i))     # run goes on from the stream's durable head
        engine.flush_ingress()
        engine.process()
        engine.checkpoint()  # the history is covered (the retention keeps it): the backfills read it from the log
    print("ready", flush=True)
    created = 0
    for uri, query in backfills().items():
        if uri not in existing:
            engine.create_subscription(uri, query, start="earliest")
            created += 1
            print("created", created, flush=True)  # each is committed with its record when this prints
    print("backfills", created, flush=True)
    appended = sum(status.appended for status in engine.streams().values())
    since = 0
    while True:
        if appended < args.events:
            for i in range(appended, min(appended + CHUNK, args.events)):
                stream, value, time = event(i)
                engine.append(stream, value, time)
            appended = min(appended + CHUNK, args.events)
        handed = engine.process(max_events=300)
        since += handed
        delivered = sum(status.delivered + 1 for status in engine.streams().values())
        print("progress", delivered, flush=True)
        if any(engine.is_behind(uri) for uri in backfills()):
            print("catching-up", delivered, flush=True)
        if since >= args.every:
            engine.checkpoint()
            since = 0
        if appended >= args.events and not handed and not any(engine.is_behind(uri) for uri in backfills()):
            break
    engine.advance_time(at(args.events))
    engine.checkpoint()
    engine.close()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
