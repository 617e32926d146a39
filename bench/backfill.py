"""Backfill: how fast a new subscription processes the retained log, and what its backfill does to the latency of
another query meanwhile, with a plain Python loop measured in the same run.

Run: .venv/bin/python bench/backfill.py [--events N] [--rounds K] [--probes P]

A stream retains N events (``Retention(events=N)``), appended in chunks of 1,000 with the event clock and
processed by one live query (a running count), then checkpointed (the log keeps them for the retention).

* **throughput**: ``create_subscription("bf", count, start="earliest")``, then ``process()`` until it joined:
  events of the log it passed per second;
* **live latency**: the engine's processing thread runs (``engine.start()``); a producer appends one event at a
  time and waits until the live query produced its output (the time from the append's return to the output
  counter moving), P times with no backfill, then while a backfill over the N events runs (the probes answered
  while it was still behind); the median and the 99th percentile of both. The backfill takes turns with live
  delivery slice by slice, so a live event waits for about one slice of it.

Each figure is the median of K rounds.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from reaqtive import Query
from reaqtive.engine import Engine, FunctionRegistry, Retention

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CHUNK = 1000


def count_one(count: int, _: Any) -> int:
    return count + 1


def plain_loop(n: int) -> float:
    """A running count as a Python loop over the values: the scale of the figures."""
    values = list(range(n))
    started = time.perf_counter()
    last = None
    for count, value in enumerate(values, 1):
        last = (count, value)
    assert last is not None
    return n / (time.perf_counter() - started)


def open_engine(directory: Path, n: int) -> Engine:
    functions = FunctionRegistry()
    functions.register("count_one", count_one)
    engine = Engine(directory / "s.db", functions=functions, start=T0, synchronous="OFF")
    engine.create_stream("s", retain=Retention(events=n + 1_000_000))
    engine.create_subscription("live", Query.stream("s").scan(0, count_one))
    for start in range(0, n, CHUNK):
        engine.append_many("s", [(x, T0 + timedelta(milliseconds=x)) for x in range(start, min(n, start + CHUNK))])
    engine.process()
    engine.checkpoint()
    return engine


def throughput(engine: Engine, n: int) -> float:
    engine.create_subscription("bf", Query.stream("s").scan(0, count_one), start="earliest")
    started = time.perf_counter()
    passed = engine.process()
    elapsed = time.perf_counter() - started
    assert not engine.is_behind("bf") and passed >= n
    return n / elapsed


def latencies(engine: Engine, probes: int, first: int, *, backfill: str | None) -> list[float]:
    """Seconds from each append's return to the live query's output, ``probes`` times (a running engine); with
    ``backfill``, only those of the probes answered while the backfill was still behind."""
    if backfill is not None:
        engine.create_subscription(backfill, Query.stream("s").scan(0, count_one), start="earliest")
    seen: list[float] = []
    for i in range(probes):
        before = engine.snapshot().subscriptions["live"].produced
        value = first + i
        engine.append("s", value, T0 + timedelta(milliseconds=value))
        appended = time.perf_counter()
        while engine.snapshot().subscriptions["live"].produced == before:
            time.sleep(0.0001)
        latency = time.perf_counter() - appended
        if backfill is None or engine.is_behind(backfill):
            seen.append(latency)
        else:
            break
    return seen


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def one_round(n: int, probes: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        engine = open_engine(Path(folder), n)
        try:
            rates: dict[str, float] = {"throughput": throughput(engine, n)}
            engine.start()
            quiet = latencies(engine, probes, n, backfill=None)
            busy = latencies(engine, probes, n + probes, backfill="bf-live")
            engine.stop()
            rates |= {"quiet p50": statistics.median(quiet), "quiet p99": percentile(quiet, 0.99),
                      "busy p50": statistics.median(busy), "busy p99": percentile(busy, 0.99),
                      "busy probes": float(len(busy))}
            return rates
        finally:
            engine.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench/backfill.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000, help="retained events (default 1,000,000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; figures are medians (default 3)")
    parser.add_argument("--probes", type=int, default=200, help="live events timed per phase (default 200)")
    args = parser.parse_args(argv)
    loop = statistics.median(plain_loop(args.events) for _ in range(args.rounds))
    rounds = [one_round(args.events, args.probes) for _ in range(args.rounds)]

    def median(label: str) -> float:
        return statistics.median(round_[label] for round_ in rounds)

    rate = median("throughput")
    print(f"backfill: {args.events:,} retained events, a running count, median of {args.rounds}")
    print(f"  {'plain Python loop (running count)':44} {loop:>14,.0f} events/s")
    print(f"  {'backfill from the earliest event':44} {rate:>14,.0f} events/s  (x{loop / rate:.1f} the loop)")
    print(f"  live latency, no backfill:      p50 {median('quiet p50') * 1e3:7.2f} ms   "
          f"p99 {median('quiet p99') * 1e3:7.2f} ms")
    print(f"  live latency, during a backfill: p50 {median('busy p50') * 1e3:7.2f} ms   "
          f"p99 {median('busy p99') * 1e3:7.2f} ms   ({median('busy probes'):.0f} live events answered while it "
          "was behind)")


if __name__ == "__main__":
    main()
