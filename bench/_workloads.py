"""The three operator workloads the benchmarks share (``bench/operators.py``, ``bench/peers.py``).

Not a benchmark: running this file does nothing (``make bench`` runs every ``bench/*.py``). The scripts import it
as ``_workloads`` (their folder is ``sys.path[0]`` when they run as scripts).

Each workload is defined once as a *pipeline* over a source query, so the standalone query (over
``from_iterable(range(n))``) and the engine's standing query (over ``Query.stream(uri)``) are the same operators
with the same functions. The functions are module-level so that an engine can register them by name
(:data:`Workload.functions`); ``operator.add`` and ``sum`` are among the engine's standard functions.

(a) ``map(x*2) -> filter(x%3==0) -> scan(sum)``; (b) ``group_by(x%100) -> running count per group``;
(c) ``buffer(100) -> map(sum)``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reaqtive import LONG_MAX, GroupedStream, Query, Subscription, from_iterable

__all__ = ["WORKLOADS", "CountingSink", "Workload", "divisible_by_3", "double", "increment", "mod_100",
           "running_count"]


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


# -- the user functions (module-level: an engine registers them by name) ------------------------------------------

def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (the benches' p50 and p99)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered) + 0.5) - 1))]


def double(x: int) -> int:
    return x * 2


def divisible_by_3(x: int) -> bool:
    return x % 3 == 0


def mod_100(x: int) -> int:
    return x % 100


def increment(count: int, _: object) -> int:
    return count + 1


def running_count(group: GroupedStream[int]) -> Query[Any]:
    return group.scan(0, increment)


# -- (a) map -> filter -> scan -------------------------------------------------------------------------------------

def _a_pipeline(source: Query[int]) -> Query[Any]:
    return source.map(double).filter(divisible_by_3).scan(0, operator.add)


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


def _a_rxpy(n: int, sink: CountingSink) -> None:
    import reactivex
    from reactivex import operators as ops

    reactivex.from_iterable(range(n)).pipe(
        ops.map(double), ops.filter(divisible_by_3), ops.scan(operator.add, 0)
    ).subscribe(sink.on_next)


# -- (b) group_by -> running count per group -----------------------------------------------------------------------

def _b_pipeline(source: Query[int]) -> Query[Any]:
    return source.group_by(mod_100).flat_map(running_count)


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


def _b_rxpy(n: int, sink: CountingSink) -> None:
    import reactivex
    from reactivex import operators as ops

    reactivex.from_iterable(range(n)).pipe(
        ops.group_by(mod_100), ops.flat_map(lambda group: group.pipe(ops.scan(increment, 0)))
    ).subscribe(sink.on_next)


# -- (c) buffer -> sum ---------------------------------------------------------------------------------------------

def _c_pipeline(source: Query[int]) -> Query[Any]:
    return source.buffer(100).map(sum)


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


def _c_rxpy(n: int, sink: CountingSink) -> None:
    import reactivex
    from reactivex import operators as ops

    reactivex.from_iterable(range(n)).pipe(ops.buffer_with_count(100), ops.map(sum)).subscribe(sink.on_next)


@dataclass(frozen=True)
class Workload:
    key: str
    title: str
    pipeline: Callable[[Query[int]], Query[Any]]
    """The operators, applied to a source of the ints ``0..n-1``."""
    loop: Callable[[int, CountingSink], None]
    loop_callbacks: Callable[[int, CountingSink], None]
    rxpy: Callable[[int, CountingSink], None]
    functions: Mapping[str, Callable[..., Any]]
    """What an engine must register to host ``pipeline`` (by name; the standard functions need nothing)."""
    expected: Callable[[int], int]
    """How many elements the workload emits for ``n`` ints (checked against every variant)."""

    def query(self, n: int) -> Query[Any]:
        """The standalone query over ``range(n)``."""
        return self.pipeline(from_iterable(range(n)))


WORKLOADS = [
    Workload("a", "map(x*2) -> filter(x%3==0) -> scan(sum)", _a_pipeline, _a_loop, _a_loop_callbacks, _a_rxpy,
             {"double": double, "divisible_by_3": divisible_by_3}, lambda n: (n + 2) // 3),
    Workload("b", "group_by(x%100) -> running count per group", _b_pipeline, _b_loop, _b_loop_callbacks, _b_rxpy,
             {"mod_100": mod_100, "running_count": running_count, "increment": increment}, lambda n: n),
    Workload("c", "buffer(100) -> map(sum)", _c_pipeline, _c_loop, _c_loop_callbacks, _c_rxpy,
             {}, lambda n: (n + 99) // 100),
]

