"""Scheduler benchmark: task throughput against a plain loop, and pause latency while busy.

Run from the repository root::

    .venv/bin/python bench/scheduler.py            # default sizes, about 15 s
    .venv/bin/python bench/scheduler.py --quick    # smaller sizes, a smoke run

Throughput: the same callable called N times by a plain ``for`` loop and through a logical scheduler as N
``ActionTask``s, measured in the same run, median of several repetitions. Two callables: ``list.append`` (the
scheduler's whole overhead shows) and a function doing about a microsecond of work. "schedule+run" times
scheduling from the main thread while the workers run; "dispatch only" pre-queues the tasks on a paused
scheduler and times the workers draining them after ``resume()``.

Pause latency: from ``pause()`` until its future completes ("completed", stamped by the completing thread) and
until the caller sees it ("observed"), while two yieldable tasks of the paused scheduler process batches (the
token is polled between batches of about 20 µs); alone, with another scheduler keeping the workers busy, and the
same with a shorter GIL switch interval. p50 and p99 over many pause/resume cycles.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# Imported after the path set-up, so the script runs from a checkout.
from reaqtive.core.scheduler_interface import YieldToken
from reaqtive.scheduler import (
    ActionTask,
    LogicalScheduler,
    PhysicalScheduler,
    YieldableActionTask,
)

WAIT = 60.0


def _median_rate(runs: int, count: int, once: Callable[[], float]) -> float:
    """Median of ``count / seconds`` over ``runs`` repetitions of ``once`` (which returns seconds)."""
    return statistics.median(count / once() for _ in range(runs))


def _small_work(sink: list[int]) -> Callable[[int], None]:
    """A callable doing about a microsecond of Python work, like a short operator chain."""

    def work(value: int) -> None:
        total = 0
        for step in range(20):
            total += value ^ step
        sink.append(total)

    return work


CALLABLES: dict[str, Callable[[list[int]], Callable[[int], object]]] = {
    "list.append": lambda sink: sink.append,
    "~1 us function": _small_work,
}


def plain_loop(make: Callable[[list[int]], Callable[[int], object]], count: int) -> float:
    sink: list[int] = []
    work = make(sink)
    start = time.perf_counter()
    for index in range(count):
        work(index)
    return time.perf_counter() - start


def _drained(scheduler: LogicalScheduler) -> None:
    """Wait until everything queued before now ran: a last-priority barrier, then a pause (nothing running)."""
    done = threading.Event()
    scheduler.schedule(ActionTask(done.set, priority=1_000))
    if not done.wait(WAIT):
        raise RuntimeError("the scheduler did not drain")
    scheduler.pause().result(WAIT)
    scheduler.resume()


def through_scheduler(
    physical: PhysicalScheduler, make: Callable[[list[int]], Callable[[int], object]], count: int
) -> float:
    """Schedule ``count`` tasks from this thread while the workers run them; time until all ran."""
    scheduler = LogicalScheduler(physical)
    sink: list[int] = []
    work = make(sink)
    schedule = scheduler.schedule
    start = time.perf_counter()
    for index in range(count):
        schedule(ActionTask(work, index))
    _drained(scheduler)
    elapsed = time.perf_counter() - start
    assert len(sink) == count
    scheduler.dispose()
    return elapsed


def dispatch_only(
    physical: PhysicalScheduler, make: Callable[[list[int]], Callable[[int], object]], count: int
) -> float:
    """Queue ``count`` tasks on a paused scheduler; time the workers draining them after resume()."""
    scheduler = LogicalScheduler(physical)
    sink: list[int] = []
    work = make(sink)
    scheduler.pause().result(WAIT)
    for index in range(count):
        scheduler.schedule(ActionTask(work, index))
    start = time.perf_counter()
    scheduler.resume()
    _drained(scheduler)
    elapsed = time.perf_counter() - start
    assert len(sink) == count
    scheduler.dispose()
    return elapsed


def _batch() -> int:
    """About 20 µs of Python work."""
    return sum(range(300))


def pause_latencies(cycles: int, *, other_busy: bool) -> tuple[list[float], list[float]]:
    """Seconds from pause() to its completion (stamped by the completing thread) and to the caller seeing it,
    while the paused scheduler's two yieldable tasks run batches."""
    with PhysicalScheduler(workers=2, name="bench-pause") as physical:
        scheduler = LogicalScheduler(physical)
        busy = LogicalScheduler(physical)
        stop = threading.Event()
        running = [threading.Event(), threading.Event()]

        def worker(index: int, token: YieldToken) -> bool:
            running[index].set()
            while not token.is_yield_requested:
                if stop.is_set():
                    return True
                _batch()
            return False

        def spin() -> None:
            _batch()
            if not stop.is_set():
                busy.schedule(ActionTask(spin))

        if other_busy:
            for _ in range(2):
                busy.schedule(ActionTask(spin))
        for index in range(2):
            scheduler.schedule(YieldableActionTask(worker, index))
        completed: list[float] = []
        observed: list[float] = []
        for _ in range(cycles):
            for event in running:
                if not event.wait(WAIT):
                    raise RuntimeError("the paused tasks did not run again after resume")
                event.clear()
            stamp: list[float] = []
            start = time.perf_counter()
            pause = scheduler.pause()
            pause.add_done_callback(lambda _, stamp=stamp: stamp.append(time.perf_counter()))
            pause.result(WAIT)
            observed.append(time.perf_counter() - start)
            completed.append(stamp[0] - start)
            scheduler.resume()
        stop.set()
        return completed, observed


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    options = parser.parse_args()
    count = 20_000 if options.quick else 200_000
    runs = 3 if options.quick else 5
    cycles = 50 if options.quick else 300
    cpus = os.cpu_count() or 1

    print(f"reaqtive scheduler benchmark: Python {sys.version.split()[0]}, {cpus} CPUs, N={count:,}, median of {runs}")
    print()
    names = list(CALLABLES)
    print(f"{'throughput, calls/s (x plain loop)':<40}" + "".join(f"{name:>26}" for name in names))
    table: dict[str, list[str]] = {}
    plain = {name: _median_rate(runs, count, lambda make=CALLABLES[name]: plain_loop(make, count)) for name in names}
    table["plain loop"] = [f"{plain[name]:>14,.0f} (1.000x)" for name in names]
    for workers in sorted({1, cpus}):
        with PhysicalScheduler(workers=workers) as physical:
            through_scheduler(physical, CALLABLES[names[0]], count // 10)  # warm-up
            for label, measure in [("schedule+run", through_scheduler), ("dispatch only", dispatch_only)]:
                cells = []
                for name in names:
                    make = CALLABLES[name]
                    rate = _median_rate(runs, count, lambda: measure(physical, make, count))  # noqa: B023
                    cells.append(f"{rate:>14,.0f} ({rate / plain[name]:.3f}x)")
                table[f"{workers} worker(s), {label}"] = cells
    for label, cells in table.items():
        print(f"{label:<40}" + "".join(f"{cell:>26}" for cell in cells))

    print()
    title = f"pause latency, ms (2 workers, {cycles} cycles)"
    print(f"{title:<48}{'completed p50/p99':>20}{'observed p50/p99':>20}")
    interval = sys.getswitchinterval()
    scenarios = [
        ("only the paused scheduler busy", False, interval),
        ("another scheduler busy too", True, interval),
        ("another busy, sys.setswitchinterval(0.0005)", True, 0.0005),
    ]
    for label, other_busy, switch in scenarios:
        sys.setswitchinterval(switch)
        try:
            completed, observed = pause_latencies(cycles, other_busy=other_busy)
        finally:
            sys.setswitchinterval(interval)
        cells = [
            f"{_percentile(values, 0.50) * 1e3:.3f} / {_percentile(values, 0.99) * 1e3:.3f}"
            for values in (completed, observed)
        ]
        print(f"{label:<48}{cells[0]:>20}{cells[1]:>20}")


if __name__ == "__main__":
    main()
