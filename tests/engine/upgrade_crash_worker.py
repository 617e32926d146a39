"""The worker of the update kill test (``test_upgrade_crash.py``): an engine (event clock) with one subscription whose
definition is updated at fixed log positions (``SWAPS``: a running count, then a count and a sum, then a count, a
sum and a max, then the count alone), while a producer appends and the engine processes in slices and checkpoints
every ``--every`` events. Killed at any moment and started again, it goes on from where the store stands: the
definition in force is the store's (its history's length says which swaps happened), and the next swap happens
when delivery reaches its position, so every run makes the same swaps at the same positions.

Markers on stdout: ``opening``, ``ready``, ``updating K`` (right before swap K), ``boundary K`` (swap K's
boundary checkpoint committed, its own commit not yet: the worker lingers there ``LINGER`` seconds, so that a
kill lands inside the swap), ``updated K``, ``progress N`` (log position delivered up to), ``done``.
"""

from __future__ import annotations

import argparse
import operator
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from reaqtive import Query
from reaqtive.engine import Engine, FunctionRegistry, GroupCommit

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CHUNK = 40
LINGER = 0.2
SWAPS = (3_011, 6_007, 9_001)
"""The log positions at which swap 1, 2, 3 happen (a log position counts the events delivered)."""


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def event(i: int) -> tuple[str, int, datetime]:
    return "a", i % 97, at(i // 3)


def count_one(count: int, _: Any) -> int:
    return count + 1


def larger(a: Any, b: Any) -> Any:
    return max(a, b)


def pair(*values: Any) -> tuple[Any, ...]:
    return values


def functions() -> FunctionRegistry:
    registry = FunctionRegistry()
    for function in (count_one, larger, pair):
        registry.register(function.__name__, function)
    registry.register("add", operator.add)
    return registry


def definitions() -> list[Query[Any]]:
    """The definitions in order: the first is created, each next one replaces the one before."""
    a = Query.stream("a")
    count = a.scan(0, count_one).named("count")
    total = a.scan(0, operator.add).named("sum")
    top = a.scan(0, larger).named("max")
    return [count, Query.combine_latest(count, total, selector=pair),
            Query.combine_latest(count, total, top, selector=pair), count]


def open_engine(target: str) -> Engine:
    return Engine(target, functions=functions(), start=T0, synchronous="NORMAL",
                  ingress_commit=GroupCommit(events=500, seconds=0.02))


def delivered(engine: Engine) -> int:
    return engine.log_position


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("--events", type=int, default=12_000)
    parser.add_argument("--every", type=int, default=700)
    args = parser.parse_args()
    target = args.store if "://" in args.store or "=" in args.store else str(Path(args.store))
    print("opening", flush=True)
    engine = open_engine(target)
    existing = {artifact.uri for artifact in engine.artifacts()}  # each step on its own: a kill may fall between
    if "a" not in existing:
        engine.create_stream("a")
    if "q" not in existing:
        engine.create_subscription("q", definitions()[0])
    swapping = [0]

    def at_checkpoint(metrics: object, error: BaseException | None) -> None:
        if swapping[0] and error is None:  # the swap's boundary: the update commits after this returns
            print("boundary", swapping[0], flush=True)
            time.sleep(LINGER)

    engine.add_checkpoint_listener(at_checkpoint)
    print("ready", flush=True)
    appended = engine.streams()["a"].appended
    since = 0
    while True:
        swaps = len(engine.subscription_history("q")) - 1
        position = delivered(engine)
        if swaps < len(SWAPS) and position >= SWAPS[swaps]:
            assert position == SWAPS[swaps], (position, swaps)  # a swap happens exactly at its position
            print("updating", swaps + 1, flush=True)
            swapping[0] = swaps + 1
            engine.update_subscription("q", definitions()[swaps + 1])
            swapping[0] = 0
            print("updated", swaps + 1, flush=True)
            continue
        if appended < args.events:
            for i in range(appended, min(appended + CHUNK, args.events)):
                engine.append(*event(i))
            appended = min(appended + CHUNK, args.events)
            engine.flush_ingress()
        limit = 300 if swaps >= len(SWAPS) else min(300, SWAPS[swaps] - position)
        handed = engine.process(max_events=limit)
        since += handed
        print("progress", delivered(engine), flush=True)
        if since >= args.every:
            engine.checkpoint()
            since = 0
        if appended >= args.events and not handed and swaps >= len(SWAPS):
            break
    engine.checkpoint()
    engine.close()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
