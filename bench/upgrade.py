"""Upgrading a running query in place: what ``update_subscription`` costs, against a checkpoint of the same state
and a plain Python loop over the same keys measured in the same run.

Run: .venv/bin/python bench/upgrade.py [--keys N] [--rounds K]

An engine (SQLite, event clock) runs a per-key 10-second window average (``aggregate_by_key``, its records in a
keyed table: N keys, N/1,024 pages), named ``avg``, fed one event per key (every window open). Then:

* **checkpoint**: a full checkpoint of that state (every page written), the scale of an update;
* **dry run**: ``update_subscription(..., dry_run=True)`` to an average and a max (``merge`` of the named
  average and a new ``aggregate_by_key``): the plan, with its trial load of the last checkpoint's state;
* **update**: the update itself: the boundary checkpoint (nothing dirty: the full one just ran), the new tree
  bound and loaded from the old state (the pages reclaimed), its full save and the one commit;
* **events/s after**: N more events (one per key) through the upgraded query, as a check that it runs on.

Each figure is the median of K rounds; ``ratio`` is the plain loop's time over the same N keys (a dict update per
key) against the update's: how many "Python steps per key" the update costs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from reaqtive import Query, Tumbling
from reaqtive.engine import Engine, FunctionRegistry

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CHUNK = 1000


def key_of(event: Any) -> Any:
    return event[0]


def value_of(event: Any) -> Any:
    return event[1]


def definitions() -> tuple[Query[Any], Query[Any]]:
    stream = Query.stream("s")
    window = Tumbling(timedelta(seconds=10))
    average = stream.aggregate_by_key(key_of, window, "average", value_of).named("avg")
    largest = stream.aggregate_by_key(key_of, window, "max", value_of).named("max")
    return average, Query.merge(average, largest)


def plain_loop(n: int) -> float:
    """Seconds for a dict update per key: the scale of the per-key figures."""
    table: dict[int, tuple[int, int]] = {}
    started = time.perf_counter()
    for key in range(n):
        count, total = table.get(key, (0, 0))
        table[key] = (count + 1, total + key)
    return time.perf_counter() - started


def feed(engine: Engine, n: int, at: float) -> float:
    started = time.perf_counter()
    for start in range(0, n, CHUNK):
        engine.append_many("s", [((key, key % 97), T0 + timedelta(seconds=at)) for key in
                                 range(start, min(n, start + CHUNK))])
    engine.process()
    return time.perf_counter() - started


def one_round(directory: Path, n: int) -> dict[str, float]:
    functions = FunctionRegistry()
    for function in (key_of, value_of):
        functions.register(function.__name__, function)
    old, new = definitions()
    with Engine(directory / "s.db", functions=functions, start=T0, synchronous="OFF") as engine:
        engine.create_stream("s")
        engine.create_subscription("q", old)
        feed(engine, n, 1)
        started = time.perf_counter()
        engine.checkpoint(full=True)
        checkpoint = time.perf_counter() - started
        started = time.perf_counter()
        plan = engine.update_subscription("q", new, dry_run=True)
        dry_run = time.perf_counter() - started
        assert [c.action for c in plan.changes if c.name == "avg"] == ["moved", "moved"], plan.describe()
        started = time.perf_counter()
        engine.update_subscription("q", new)
        update = time.perf_counter() - started
        after = feed(engine, n, 2)
    return {"checkpoint": checkpoint, "dry run": dry_run, "update": update, "events/s after": n / after,
            "plain": plain_loop(n)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rounds = []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as directory:
            rounds.append(one_round(Path(directory), args.keys))
    median = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    print(f"{args.keys:,} keys (open windows), median of {args.rounds} rounds")
    for key in ("checkpoint", "dry run", "update"):
        print(f"  {key:<14} {median[key] * 1e3:9.1f} ms   {median[key] / args.keys * 1e6:6.2f} us/key   "
              f"ratio to a plain loop {median[key] / median['plain']:6.0f}x")
    print(f"  {'events/s after':<14} {median['events/s after']:9,.0f}   (plain loop "
          f"{args.keys / median['plain']:,.0f} keys/s)")


if __name__ == "__main__":
    main()
