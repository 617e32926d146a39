"""Operator throughput: reaqtive against plain Python loops doing the same work, measured in the same run.

Run: .venv/bin/python bench/operators.py [--events N] [--repeat K]

Each workload runs three ways over N ints into a counting sink, with unbounded demand:

* ``reaqtive``: the query, bound and run standalone;
* ``loop``: a plain Python loop doing the same work inline (the floor);
* ``loop+callbacks``: a plain loop calling the same user functions the query calls (the fair comparison:
  what a hand-written callback pipeline costs).

It prints the median of K runs as events per second, and reaqtive's time as a ratio of each loop's time.
"""

from __future__ import annotations

import argparse
import operator
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reaqtive import LONG_MAX, Query, Subscription, from_iterable


class CountingSink:
    """A subscriber that counts elements: the cheapest possible end of a query."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def on_subscribe(self, subscription: Subscription) -> None:
        subscription.request(LONG_MAX)

    def on_next(self, value: object) -> None:
        self.count += 1

    def on_error(self, error: BaseException) -> None:
        raise error

    def on_complete(self) -> None:
        pass


def double(x: int) -> int:
    return x * 2


def divisible_by_3(x: int) -> bool:
    return x % 3 == 0


@dataclass(frozen=True)
class Workload:
    key: str
    title: str
    query: Callable[[int], Query[Any]]
    loop: Callable[[int, CountingSink], None]
    loop_callbacks: Callable[[int, CountingSink], None]


def _a_query(n: int) -> Query[Any]:
    return from_iterable(range(n)).map(double).filter(divisible_by_3).scan(0, operator.add)


def _a_loop(n: int, sink: CountingSink) -> None:
    total = 0
    for x in range(n):
        y = x * 2
        if y % 3 == 0:
            total += y
            sink.on_next(total)


def _a_loop_callbacks(n: int, sink: CountingSink) -> None:
    total = 0
    add = operator.add
    on_next = sink.on_next
    for x in range(n):
        y = double(x)
        if divisible_by_3(y):
            total = add(total, y)
            on_next(total)


def _c_query(n: int) -> Query[Any]:
    return from_iterable(range(n)).buffer(100).map(sum)


def _c_loop(n: int, sink: CountingSink) -> None:
    buffer: list[int] = []
    for x in range(n):
        buffer.append(x)
        if len(buffer) == 100:
            sink.on_next(sum(buffer))
            buffer = []
    if buffer:
        sink.on_next(sum(buffer))


def _c_loop_callbacks(n: int, sink: CountingSink) -> None:
    buffer: list[int] = []
    on_next = sink.on_next
    for x in range(n):
        buffer.append(x)
        if len(buffer) == 100:
            on_next(sum(buffer))
            buffer = []
    if buffer:
        on_next(sum(buffer))


WORKLOADS = [
    Workload("a", "map(x*2) -> filter(x%3==0) -> scan(sum)", _a_query, _a_loop, _a_loop_callbacks),
    Workload("c", "buffer(100) -> map(sum)", _c_query, _c_loop, _c_loop_callbacks),
]


def _median_seconds(run: Callable[[], int], expected: int, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        count = run()
        times.append(time.perf_counter() - start)
        if count != expected:
            raise AssertionError(f"produced {count} elements, expected {expected}")
    return statistics.median(times)


def measure(workload: Workload, events: int, repeat: int) -> dict[str, float]:
    """Median seconds of each way of running ``workload``."""
    reference = CountingSink()
    workload.loop(events, reference)
    expected = reference.count

    def run_query() -> int:
        sink = CountingSink()
        workload.query(events).run(sink)
        return sink.count

    def run_loop() -> int:
        sink = CountingSink()
        workload.loop(events, sink)
        return sink.count

    def run_callbacks() -> int:
        sink = CountingSink()
        workload.loop_callbacks(events, sink)
        return sink.count

    return {
        "reaqtive": _median_seconds(run_query, expected, repeat),
        "loop": _median_seconds(run_loop, expected, repeat),
        "loop+callbacks": _median_seconds(run_callbacks, expected, repeat),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", default="", help="workload keys to run, e.g. 'ac'")
    args = parser.parse_args()
    print(f"{args.events:,} events per run, median of {args.repeat} runs, unbounded demand, counting sink")
    print(f"{'workload':<44} {'reaqtive ev/s':>14} {'loop ev/s':>12} {'callbacks ev/s':>15} "
          f"{'x loop':>7} {'x callbacks':>12}")
    for workload in WORKLOADS:
        if args.only and workload.key not in args.only:
            continue
        seconds = measure(workload, args.events, args.repeat)
        rate = {name: args.events / value for name, value in seconds.items()}
        print(
            f"({workload.key}) {workload.title:<40} {rate['reaqtive']:>14,.0f} {rate['loop']:>12,.0f} "
            f"{rate['loop+callbacks']:>15,.0f} {seconds['reaqtive'] / seconds['loop']:>7.2f} "
            f"{seconds['reaqtive'] / seconds['loop+callbacks']:>12.2f}"
        )


if __name__ == "__main__":
    main()
