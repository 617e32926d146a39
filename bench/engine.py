"""Engine costs: checkpoint pause and commit with 10,000 subscriptions, recovery time, memory per idle
subscription, and events per second through the engine against a plain Python loop in the same run.

Run: .venv/bin/python bench/engine.py [--subscriptions N] [--rounds K] [--events E] [--synchronous FULL|NORMAL]
[--keyed-events W] [--memory-only]

* **Checkpoints.** N small standing queries (``Query.stream(s).scan(0, operator.add)``) over 100 durable
  streams, each query having seen some events. Then K rounds of: one event on one stream (so ~1% of the
  subscriptions change), ``process()``, a differential checkpoint. Then a few full checkpoints. Reported: the
  pause (the time the engine stops processing: collect and serialize what changed) and the commit (the SQLite
  transaction, fsync included with ``synchronous=FULL``), as p50/p99/max, and bytes written.
* **Recovery.** Close, then open the engine on the store again: every subscription is re-bound and its state
  loaded. Reported: the engine's own ``recovery.phases`` and the wall time of ``Engine(path)``.
* **Memory.** ``tracemalloc`` around a second recovery: Python memory held by the engine once it is open, divided
  by N (the subscription objects, their operators and state, and the engine's records of them).
* **Throughput.** E events through one standing query (``map``, ``filter``, ``scan``) end to end: appended to the
  durable ingress log (one transaction per 1,000), then processed, outputs to the discard sink or to the durable
  sink. The same work as a plain Python loop over the same values gives the ratio.
* **Keyed windows and the garbage collector.** W events over W/10 keys through ``bench/spark.py``'s keyed query
  (per key: a group-by on the kind, one-minute windows, a running total), a checkpoint every 10,000 events,
  with ``gc_freeze`` on and off (the default). Reported: processing events/s and the time in checkpoints.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib.util
import operator
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _workloads import percentile  # bench/ is sys.path[0] when this runs as a script

from reaqtive import Query
from reaqtive.engine import DISCARD_SINK, DURABLE_SINK, CheckpointMetrics, Engine, FunctionRegistry

T0 = datetime(2026, 1, 1, tzinfo=UTC)
STREAMS = 100


def double(x: int) -> int:
    return x * 2


def divisible_by_3(x: int) -> bool:
    return x % 3 == 0


def stream(i: int) -> str:
    return f"bench://s{i % STREAMS:03d}"


class Clock:
    """Event times, one millisecond apart."""

    def __init__(self) -> None:
        self.tick = 0

    def __call__(self) -> datetime:
        self.tick += 1
        return T0 + timedelta(milliseconds=self.tick)


def build(path: Path, subscriptions: int, clock: Clock, say: Callable[[str], None]) -> None:
    """Create the streams and the subscriptions, and give every stream a few events."""
    started = time.perf_counter()
    with Engine(path, synchronous="OFF") as engine:  # set-up speed only; the measurements reopen the file
        engine.advance_time(T0)
        for i in range(STREAMS):
            engine.create_stream(stream(i))
        for i in range(subscriptions):
            engine.create_subscription(f"bench://q{i:05d}", Query.stream(stream(i)).scan(0, operator.add),
                                       observer=DISCARD_SINK)
        created = time.perf_counter() - started
        for i in range(STREAMS):
            engine.append_many(stream(i), [(value, clock()) for value in range(5)])
        engine.process()
        engine.checkpoint(full=True)
    say(f"set-up: {subscriptions:,} subscriptions over {STREAMS} streams created in {created:.1f} s "
        f"({subscriptions / created:,.0f}/s), {STREAMS * 5} events processed")


def checkpoints(path: Path, rounds: int, synchronous: str, clock: Clock) -> tuple[list[CheckpointMetrics],
                                                                                    list[CheckpointMetrics]]:
    """K differential checkpoints with ~1% of the subscriptions dirty, then a few full ones."""
    differential, full = [], []
    with Engine(path, synchronous=synchronous) as engine:
        for round_ in range(rounds):
            engine.append(stream(round_), round_, clock())
            engine.process()
            differential.append(engine.checkpoint())
        for _ in range(5):
            full.append(engine.checkpoint(full=True))
    return differential, full


def recovery(path: Path, synchronous: str) -> tuple[float, dict[str, float], int]:
    """Open (recover) and close; returns the wall time of opening, the phases, the subscriptions recovered."""
    gc.collect()
    started = time.perf_counter()
    engine = Engine(path, synchronous=synchronous)
    opened = time.perf_counter() - started
    phases, count = dict(engine.recovery.phases), engine.recovery.subscriptions
    engine.close()
    return opened, phases, count


def memory_per_subscription(path: Path, subscriptions: int) -> float:
    """Python memory held by an open engine with ``subscriptions`` idle subscriptions, per subscription."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        engine = Engine(path)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
        engine.close()
    finally:
        tracemalloc.stop()
    return held / subscriptions


def throughput(events: int, sink: str, scratch: Path) -> tuple[float, float, float]:
    """Seconds to append and to process ``events`` through map/filter/scan, and of the plain loop."""
    path = scratch / f"throughput-{sink.rsplit('/', 1)[-1]}.db"
    values = [(i, T0 + timedelta(microseconds=i)) for i in range(events)]
    with Engine(path, synchronous="NORMAL") as engine:
        engine.register_function("double", double)  # this file runs as __main__: no import path to persist
        engine.register_function("divisible_by_3", divisible_by_3)
        engine.advance_time(T0)
        engine.create_stream("bench://numbers")
        engine.create_subscription(
            "bench://pipeline",
            Query.stream("bench://numbers").map(double).filter(divisible_by_3).scan(0, operator.add),
            observer=sink,
        )
        started = time.perf_counter()
        for start in range(0, events, 1_000):
            engine.append_many("bench://numbers", values[start:start + 1_000])
        appended = time.perf_counter()
        assert engine.process() == events
        if sink == DURABLE_SINK:
            engine.outputs("bench://pipeline", limit=0)  # flushes the durable sink (measured), reads nothing
        processed = time.perf_counter()

    started_loop = time.perf_counter()
    outputs: list[int] = []
    total = 0
    for value, _ in values:  # the same work, inline, the output appended to a list
        doubled = double(value)
        if divisible_by_3(doubled):
            total += doubled
            outputs.append(total)
    loop = time.perf_counter() - started_loop
    return appended - started, processed - appended, loop


@functools.cache
def spark_bench() -> Any:
    """bench/spark.py as a module (its keyed query and events; importing it needs no Spark), loaded once."""
    spec = importlib.util.spec_from_file_location("bench_spark", Path(__file__).with_name("spark.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def keyed_windows(events: int, scratch: Path, gc_freeze: bool) -> tuple[float, float]:
    """Seconds processing and seconds checkpointing ``events`` events of bench/spark.py's keyed query."""
    from reaqtive.spark.embedded import embedded_query  # needs no Spark

    keyed = spark_bench()

    functions = FunctionRegistry()
    for name, function in keyed.FUNCTIONS.items():
        functions.register(name, function)
    generated = keyed.make_events(events, max(events // 10, 1))
    processing = checkpointing = 0.0
    path = scratch / f"keyed-{gc_freeze}.db"
    with Engine(path, functions=functions, start=keyed.T0, gc_freeze=gc_freeze) as engine:
        engine.create_stream(keyed.STREAM)
        engine.create_subscription("bench://keyed", embedded_query(keyed.totals_query(), functions))
        for i in range(0, events, 10_000):
            engine.append_many(keyed.STREAM, [([key, {"kind": kind, "amount": amount, "seq": seq}], when)
                                              for key, when, seq, kind, amount in generated[i:i + 10_000]])
            started = time.perf_counter()
            engine.process()
            processed = time.perf_counter()
            engine.checkpoint()
            processing += processed - started
            checkpointing += time.perf_counter() - processed
    return processing, checkpointing


def report_keyed(runs: dict[bool, tuple[float, float]], events: int, say: Callable[[str], None]) -> None:
    if not runs:
        return
    say("")
    say(f"keyed windows: {events:,} events over {max(events // 10, 1):,} keys (bench/spark.py's query), "
        "a checkpoint every 10,000 events")
    say(f"  {'':<38} {'events/s':>12} {'checkpoints':>12}")
    for freeze, (processing, checkpointing) in runs.items():
        label = "gc_freeze=True" if freeze else "gc_freeze=False (default)"
        say(f"  {label + ': process':<38} {events / processing:>12,.0f} {checkpointing:>11.2f}s")


def report_memory(path: Path, subscriptions: int, synchronous: str, say: Callable[[str], None]) -> int:
    """``--memory-only``: the recovery's time (wall and CPU: the machine may be loaded) and the memory per idle
    subscription, nothing else."""
    cpu = time.process_time()
    opened, _, recovered = recovery(path, synchronous)
    cpu = time.process_time() - cpu
    per_subscription = memory_per_subscription(path, subscriptions)
    say(f"recovery of {recovered:,} subscriptions: Engine(path) took {opened * 1e3:,.0f} ms "
        f"({cpu * 1e3:,.0f} ms CPU)")
    say(f"memory per idle subscription: {per_subscription:,.0f} bytes (tracemalloc, engine open with "
        f"{subscriptions:,})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/engine.py")
    parser.add_argument("--subscriptions", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=50, help="differential checkpoints (default 50)")
    parser.add_argument("--events", type=int, default=100_000, help="events for the throughput runs")
    parser.add_argument("--synchronous", default="FULL", choices=["FULL", "NORMAL"])
    parser.add_argument("--keyed-events", type=int, default=100_000, help="events for the keyed-windows runs (0: skip)")
    parser.add_argument("--memory-only", action="store_true",
                        help="only the set-up, the recovery time and the memory per idle subscription")
    args = parser.parse_args(argv)

    def say(line: str) -> None:
        print(line, flush=True)

    say(f"reaqtive engine benchmark: Python {sys.version.split()[0]}, SQLite synchronous={args.synchronous}")
    with tempfile.TemporaryDirectory(prefix="reaqtive-bench-") as scratch:
        path = Path(scratch) / "engine.db"
        clock = Clock()
        build(path, args.subscriptions, clock, say)
        if args.memory_only:
            return report_memory(path, args.subscriptions, args.synchronous, say)
        differential, full = checkpoints(path, args.rounds, args.synchronous, clock)
        opened, phases, recovered = recovery(path, args.synchronous)
        per_subscription = memory_per_subscription(path, args.subscriptions)
        runs = {sink: throughput(args.events, sink, Path(scratch)) for sink in (DISCARD_SINK, DURABLE_SINK)}
        file_size = path.stat().st_size
        keyed = {freeze: keyed_windows(args.keyed_events, Path(scratch), freeze)
                 for freeze in (False, True)} if args.keyed_events else {}

    n = args.subscriptions
    dirty = statistics.median(m.dirty_subscriptions for m in differential)
    say("")
    say(f"checkpoints with {n:,} subscriptions (store {file_size / 1e6:.1f} MB)")
    say(f"  {'':<38} {'p50':>9} {'p99':>9} {'max':>9}")

    def row(label: str, samples: Sequence[float], unit: str = "ms", scale: float = 1e3, digits: int = 2) -> None:
        points = [percentile(samples, 0.5), percentile(samples, 0.99), max(samples)]
        cells = [f"{point * scale:,.{digits}f}" for point in points]
        say(f"  {label:<38} " + " ".join(f"{c:>9}" for c in cells) + f" {unit}")

    row(f"differential ({len(differential)}x, {dirty:.0f} dirty): pause", [m.pause_seconds for m in differential])
    row("differential: commit", [m.commit_seconds for m in differential])
    row("differential: bytes written", [float(m.bytes_written) for m in differential], "B", 1.0, 0)
    row(f"full ({len(full)}x, {full[0].dirty_subscriptions:,} written): pause", [m.pause_seconds for m in full])
    row("full: commit", [m.commit_seconds for m in full])
    row("full: bytes written", [float(m.bytes_written) for m in full], "B", 1.0, 0)
    say("")
    say(f"recovery of {recovered:,} subscriptions: Engine(path) took {opened * 1e3:,.0f} ms")
    for phase, seconds in phases.items():
        say(f"  {phase:<38} {seconds * 1e3:>9,.1f} ms")
    say("")
    say(f"memory per idle subscription: {per_subscription:,.0f} bytes (tracemalloc, engine open with {n:,})")
    say("")
    say(f"throughput: {args.events:,} events through stream.map(double).filter(divisible_by_3).scan(0, add)")
    say(f"  {'':<38} {'events/s':>12} {'x loop time':>12}")
    for sink, (append_seconds, process_seconds, loop_seconds) in runs.items():
        name = "discard sink" if sink == DISCARD_SINK else "durable sink"
        for label, seconds in (("append (durable ingress)", append_seconds), ("process", process_seconds),
                               ("end to end", append_seconds + process_seconds)):
            say(f"  {name + ': ' + label:<38} {args.events / seconds:>12,.0f} {seconds / loop_seconds:>12.1f}")
    loop_seconds = min(run[2] for run in runs.values())
    say(f"  {'plain Python loop (same work)':<38} {args.events / loop_seconds:>12,.0f} {1.0:>12.1f}")
    report_keyed(keyed, args.keyed_events, say)
    return 0


if __name__ == "__main__":
    sys.exit(main())
