"""Operator throughput: reaqtive against plain Python loops doing the same work, measured in the same run.

Run: .venv/bin/python bench/operators.py [--events N] [--repeat K]

Each workload runs three ways over N ints into a counting sink, with unbounded demand:

* ``reaqtive``: the query, bound and run standalone;
* ``loop``: a plain Python loop doing the same work inline (the floor);
* ``loop+callbacks``: a plain loop calling the same user functions the query calls (the fair comparison:
  what a hand-written callback pipeline costs).

It prints the median of K runs as events per second, and reaqtive's time as a ratio of each loop's time. When
the ``reactivex`` package (RxPY 4) happens to be installed, the same workloads also run on it, for comparison;
it is not a dependency of reaqtive (``pip install reactivex`` into the venv to see that column).
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


def _rxpy_a(n: int, sink: CountingSink) -> None:
    import reactivex
    from reactivex import operators as ops

    reactivex.from_iterable(range(n)).pipe(
        ops.map(double), ops.filter(divisible_by_3), ops.scan(operator.add, 0)
    ).subscribe(sink.on_next)


def mod_100(x: int) -> int:
    return x % 100


def increment(count: int, _: object) -> int:
    return count + 1


def running_count(group: Any) -> Any:
    return group.scan(0, increment)


def _rxpy_b(n: int, sink: CountingSink) -> None:
    import reactivex
    from reactivex import operators as ops

    reactivex.from_iterable(range(n)).pipe(
        ops.group_by(mod_100), ops.flat_map(lambda group: group.pipe(ops.scan(increment, 0)))
    ).subscribe(sink.on_next)


def _rxpy_c(n: int, sink: CountingSink) -> None:
    import reactivex
    from reactivex import operators as ops

    reactivex.from_iterable(range(n)).pipe(ops.buffer_with_count(100), ops.map(sum)).subscribe(sink.on_next)


def _rxpy_available() -> bool:
    try:
        import reactivex  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class Workload:
    key: str
    title: str
    query: Callable[[int], Query[Any]]
    loop: Callable[[int, CountingSink], None]
    loop_callbacks: Callable[[int, CountingSink], None]
    rxpy: Callable[[int, CountingSink], None]


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


def _b_query(n: int) -> Query[Any]:
    return from_iterable(range(n)).group_by(mod_100).flat_map(running_count)


def _b_loop(n: int, sink: CountingSink) -> None:
    counts = [0] * 100
    for x in range(n):
        key = x % 100
        count = counts[key] + 1
        counts[key] = count
        sink.on_next(count)


def _b_loop_callbacks(n: int, sink: CountingSink) -> None:
    counts: dict[int, int] = {}
    on_next = sink.on_next
    for x in range(n):
        key = mod_100(x)
        count = increment(counts.get(key, 0), x)
        counts[key] = count
        on_next(count)


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
    Workload("a", "map(x*2) -> filter(x%3==0) -> scan(sum)", _a_query, _a_loop, _a_loop_callbacks, _rxpy_a),
    Workload("b", "group_by(x%100) -> running count per group", _b_query, _b_loop, _b_loop_callbacks, _rxpy_b),
    Workload("c", "buffer(100) -> map(sum)", _c_query, _c_loop, _c_loop_callbacks, _rxpy_c),
]


def _interleaved_medians(runs: dict[str, Callable[[], int]], expected: int, repeat: int) -> dict[str, float]:
    """Median seconds of each run, measured round-robin so that drift of the machine hits every variant alike."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeat):
        for name, run in runs.items():
            start = time.perf_counter()
            count = run()
            times[name].append(time.perf_counter() - start)
            if count != expected:
                raise AssertionError(f"{name} produced {count} elements, expected {expected}")
    return {name: statistics.median(values) for name, values in times.items()}


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

    def run_rxpy() -> int:
        sink = CountingSink()
        workload.rxpy(events, sink)
        return sink.count

    runs: dict[str, Callable[[], int]] = {
        "reaqtive": run_query,
        "loop": run_loop,
        "loop+callbacks": run_callbacks,
    }
    if _rxpy_available():
        runs["rxpy"] = run_rxpy
    seconds = _interleaved_medians(runs, expected, repeat)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", default="", help="workload keys to run, e.g. 'ac'")
    args = parser.parse_args()
    print(f"{args.events:,} events per run, median of {args.repeat} runs, unbounded demand, counting sink")
    rxpy = _rxpy_available()
    print(f"{'workload':<44} {'reaqtive ev/s':>14} {'loop ev/s':>12} {'callbacks ev/s':>15} "
          f"{'x loop':>7} {'x callbacks':>12}" + (f" {'RxPY ev/s':>12}" if rxpy else ""))
    for workload in WORKLOADS:
        if args.only and workload.key not in args.only:
            continue
        seconds = measure(workload, args.events, args.repeat)
        rate = {name: args.events / value for name, value in seconds.items()}
        print(
            f"({workload.key}) {workload.title:<40} {rate['reaqtive']:>14,.0f} {rate['loop']:>12,.0f} "
            f"{rate['loop+callbacks']:>15,.0f} {seconds['reaqtive'] / seconds['loop']:>7.2f} "
            f"{seconds['reaqtive'] / seconds['loop+callbacks']:>12.2f}"
            + (f" {rate['rxpy']:>12,.0f}" if "rxpy" in rate else "")
        )


if __name__ == "__main__":
    main()
