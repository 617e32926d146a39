"""Catching up: what a query behind the engine (paused, then resumed; or behind after a recovery) costs to bring back
in step, against the engine delivering the same log to queries in step, with a plain Python loop measured in the
same run.

Run: .venv/bin/python bench/catch_up.py [--events N] [--queries Q] [--rounds K]

Workload (a) of ``bench/_workloads.py`` (``map -> filter -> scan``) over one stream, Q standing queries, N events
appended in chunks of 1,000, with the event clock:

* **in step**: every query runs; ``process()`` delivers the log once to all of them;
* **catch-up**: one query is paused while the others process the log, then resumed; the ``process()`` after
  ``resume`` reads the log again for it alone, on its own timeline (its clock following the events), until it
  rejoins. Reported: events/s of that catch-up (log events it passed), and of a time-based twin
  (``buffer(10 s)``), whose timers fire between the events.

The same computation as a plain loop gives the scale. Each figure is the median of K rounds.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _workloads import WORKLOADS  # bench/ is sys.path[0] when this runs as a script

from reaqtive import Query
from reaqtive.engine import DISCARD_SINK, Engine, FunctionRegistry

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CHUNK = 1000


def plain_loop(n: int) -> float:
    """Workload (a) as a Python loop: the scale of the figures."""
    started = time.perf_counter()
    total = 0
    for x in range(n):
        doubled = x * 2
        if doubled % 3 == 0:
            total += doubled
    return n / (time.perf_counter() - started)


def open_engine(directory: Path, queries: int, functions: FunctionRegistry) -> Engine:
    engine = Engine(directory / "s.db", functions=functions, start=T0, synchronous="OFF")
    engine.create_stream("s")
    pipeline = WORKLOADS[0].pipeline
    for i in range(queries):
        engine.create_subscription(f"q{i}", pipeline(Query.stream("s")), observer=DISCARD_SINK)
    engine.create_subscription("timed", Query.stream("s").buffer(timedelta(seconds=10)), observer=DISCARD_SINK)
    return engine


def append(engine: Engine, n: int) -> None:
    for start in range(0, n, CHUNK):
        engine.append_many("s", [(x, T0 + timedelta(milliseconds=x)) for x in range(start, min(n, start + CHUNK))])


def one_round(n: int, queries: int, functions: FunctionRegistry) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        engine = open_engine(Path(folder), queries, functions)
        try:
            engine.pause("q0")
            engine.pause("timed")
            append(engine, n)
            started = time.perf_counter()
            engine.process()
            in_step = time.perf_counter() - started
            rates: dict[str, float] = {"in step (events x queries)/s": n * (queries - 1) / in_step}
            for uri, label in (("q0", "catch-up of (a), log events/s"), ("timed", "catch-up of buffer(10 s)")):
                engine.resume(uri)
                started = time.perf_counter()
                passed = engine.process()
                rates[label] = passed / (time.perf_counter() - started)
                assert not engine.is_behind(uri)
            return rates
        finally:
            engine.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench/catch_up.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200_000, help="events appended (default 200,000)")
    parser.add_argument("--queries", type=int, default=10, help="standing queries of workload (a) (default 10)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; figures are medians (default 3)")
    args = parser.parse_args(argv)
    functions = FunctionRegistry()
    for name, function in WORKLOADS[0].functions.items():
        functions.register(name, function)
    loop = statistics.median(plain_loop(args.events) for _ in range(args.rounds))
    rounds = [one_round(args.events, args.queries, functions) for _ in range(args.rounds)]
    print(f"catch-up: {args.events:,} events, {args.queries} queries of workload (a), median of {args.rounds}")
    print(f"  {'plain Python loop (a)':40} {loop:>14,.0f} events/s")
    for label in rounds[0]:
        rate = statistics.median(round_[label] for round_ in rounds)
        print(f"  {label:40} {rate:>14,.0f} events/s  (x{loop / rate:.1f} the loop)")


if __name__ == "__main__":
    main()
