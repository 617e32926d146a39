"""Operator throughput: reaqtive against plain Python loops doing the same work, measured in the same run.

Run: .venv/bin/python bench/operators.py [--events N] [--repeat K]

Each workload (defined in ``bench/_workloads.py``, shared with ``bench/peers.py``) runs three ways over N ints
into a counting sink, with unbounded demand:

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
import statistics
import time
from collections.abc import Callable

from _workloads import WORKLOADS, CountingSink, Workload  # bench/ is sys.path[0] when this runs as a script


def _rxpy_available() -> bool:
    try:
        import reactivex  # noqa: F401
    except ImportError:
        return False
    return True


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
