"""Running mode: how late a wall-clock timer fires on an idle engine, and what the processing loop costs against
manual ``process()`` calls, with a plain Python loop measured in the same run.

Run: .venv/bin/python bench/running.py [--timers N] [--events E] [--rounds K]

* **Timer lateness.** An engine with ``clock="wall"`` and its processing loop running (``engine.serve()`` on a
  thread, and ``AsyncEngine``'s task), idle: N subscriptions ``Query.timer(at)`` created with due times spread
  over a few seconds. An observer function notes the wall time at which each output reaches it; lateness is that
  minus the due time. Reported: p50 / p99 / max (target: p99 within 5 ms, issue 20).
* **Throughput.** E events through ``map → filter → scan`` to the durable sink: appended in chunks of 1,000 by the
  main thread while (a) the host then calls ``process()`` itself (manual mode), (b) ``serve()`` delivers them on
  its thread as they come (running mode). Reported: events/s end to end and the ratio running/manual (target:
  within 1.2x), and the same work as a plain Python loop.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _workloads import WORKLOADS, CountingSink, percentile  # bench/ is sys.path[0] when this runs as a script

from reaqtive import Query
from reaqtive.engine import Engine, FunctionRegistry, Output
from reaqtive.engine.aio import AsyncEngine


class Arrivals:
    """The observer: the wall time at which each output arrived, by subscription."""

    def __init__(self, expected: int) -> None:
        self.at: dict[str, float] = {}
        self.expected = expected
        self.done = threading.Event()

    def __call__(self, output: Output) -> None:
        self.at.setdefault(output.subscription, time.time())
        if len(self.at) >= self.expected:
            self.done.set()


def timer_queries(engine: Engine, count: int, spread: float) -> dict[str, float]:
    """``count`` one-shot timers due over the next ``spread`` seconds (after a short lead); their due times."""
    start = time.time() + 0.5
    due: dict[str, float] = {}
    for i in range(count):
        at = start + spread * i / count
        uri = f"bench://timer{i:05d}"
        engine.create_subscription(uri, Query.timer(datetime.fromtimestamp(at, UTC)), observer="obs://arrivals")
        due[uri] = at
    return due


def lateness_serve(scratch: Path, count: int, spread: float) -> list[float]:
    arrivals = Arrivals(count)
    functions = FunctionRegistry()
    functions.register("arrivals", arrivals)
    with Engine(scratch / "timers-serve.db", clock="wall", synchronous="NORMAL", functions=functions) as engine:
        engine.define_observer("obs://arrivals", arrivals)
        loop = threading.Thread(target=engine.serve, daemon=True)
        loop.start()
        due = timer_queries(engine, count, spread)
        if not arrivals.done.wait(spread + 30):
            raise SystemExit(f"only {len(arrivals.at)} of {count} timers fired")
        engine.stop_serving()
        loop.join()
    return [(arrivals.at[uri] - at) * 1e3 for uri, at in due.items()]


def lateness_async(scratch: Path, count: int, spread: float) -> list[float]:
    arrivals = Arrivals(count)
    functions = FunctionRegistry()
    functions.register("arrivals", arrivals)

    async def main() -> dict[str, float]:
        engine = await AsyncEngine.open(scratch / "timers-async.db", clock="wall", synchronous="NORMAL",
                                        functions=functions)
        async with engine:
            engine.engine.define_observer("obs://arrivals", arrivals)
            due = await engine.call(timer_queries, engine.engine, count, spread)
            await asyncio.to_thread(arrivals.done.wait, spread + 30)
        return due

    due = asyncio.run(main())
    return [(arrivals.at[uri] - at) * 1e3 for uri, at in due.items()]


MAP_FILTER_SCAN = WORKLOADS[0]  # map(x*2) -> filter(x%3==0) -> scan(sum), shared with the other benches


def bench_functions() -> FunctionRegistry:
    functions = FunctionRegistry()
    for name, function in MAP_FILTER_SCAN.functions.items():
        functions.register(name, function)
    return functions


def setup(engine: Engine) -> None:
    engine.create_stream("bench://in")
    engine.create_subscription("bench://q", MAP_FILTER_SCAN.pipeline(Query.stream("bench://in")))


def chunks(events: int) -> list[list[tuple[int, datetime]]]:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    values = [(i, start + timedelta(microseconds=i)) for i in range(events)]
    return [values[i:i + 1000] for i in range(0, events, 1000)]


def manual(scratch: Path, events: int, run: int) -> float:
    batches = chunks(events)
    with Engine(scratch / f"manual{run}.db", synchronous="NORMAL", functions=bench_functions()) as engine:
        setup(engine)
        started = time.perf_counter()
        for batch in batches:
            engine.append_many("bench://in", batch)
            engine.process()
        engine.outputs("bench://q", after=events, limit=1)  # the sink flushed, as the running mode's reader does
        return time.perf_counter() - started


def running(scratch: Path, events: int, run: int) -> float:
    batches = chunks(events)
    with Engine(scratch / f"running{run}.db", synchronous="NORMAL", functions=bench_functions()) as engine:
        setup(engine)
        loop = threading.Thread(target=engine.serve, daemon=True)
        loop.start()
        started = time.perf_counter()
        for batch in batches:
            engine.append_many("bench://in", batch)
        expected = MAP_FILTER_SCAN.expected(events)
        seen = engine.produced.generation
        while engine.streams()["bench://in"].delivered < events - 1:
            seen = engine.produced.wait(seen, 1.0)
        elapsed = time.perf_counter() - started
        engine.stop_serving()
        loop.join()
        assert len(engine.outputs("bench://q", after=expected - 2)) == 1
        return elapsed


def plain_loop(events: int) -> float:
    started = time.perf_counter()
    MAP_FILTER_SCAN.loop(events, CountingSink())
    return time.perf_counter() - started


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timers", type=int, default=300)
    parser.add_argument("--spread", type=float, default=3.0, help="seconds over which the timers are due")
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    say: Callable[[str], None] = lambda text: print(text, flush=True)  # noqa: E731
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        for name, measure in (("serve() thread", lateness_serve), ("AsyncEngine task", lateness_async)):
            late = measure(scratch, args.timers, args.spread)
            say(f"timer lateness, {name:16} ({args.timers} timers, idle engine): p50 {percentile(late, 0.5):.2f} ms, "
                f"p99 {percentile(late, 0.99):.2f} ms, max {max(late):.2f} ms (target p99 <= 5 ms)")
        manual_s, running_s, loop_s = [], [], []
        for run in range(args.rounds):  # interleaved, best of K
            manual_s.append(manual(scratch, args.events, run))
            running_s.append(running(scratch, args.events, run))
            loop_s.append(plain_loop(args.events))
        best: dict[str, Any] = {"manual": min(manual_s), "running": min(running_s), "loop": min(loop_s)}
        for name in ("manual", "running", "loop"):
            rate = args.events / best[name]
            say(f"{name:8} map→filter→scan, {args.events:,} events appended 1,000 at a time: {rate:>12,.0f} events/s "
                f"({best[name] / best['loop']:.1f}x the plain loop)")
        ratio = best["running"] / best["manual"]
        say(f"running mode / manual mode: {ratio:.2f}x the time (target <= 1.2x); "
            f"median of {args.rounds}: {statistics.median(running_s) / statistics.median(manual_s):.2f}x")


if __name__ == "__main__":
    main()
