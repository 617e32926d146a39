"""Checkpoint pauses under load in running mode (issue 20): how long a checkpoint waits to get in and how long
processing stops, with 10,000 subscriptions while events are being processed; and how long a window closing
100,000 keys holds the engine.

Run: .venv/bin/python bench/pause.py [--subscriptions N] [--seconds S] [--keys K] [--rounds R]
[--synchronous FULL|NORMAL] [--switch-interval MS] [--quick]   (``--quick``: small sizes, a few seconds; for the
test)

* **Checkpoints under load.** N small standing queries (``Query.stream(s).scan(0, operator.add)`` over 100
  streams, as in ``bench/engine.py``), ``engine.serve()`` on a thread, a producer thread appending continuously
  (``append_many`` under ``ingress_commit=GroupCommit(5,000 events, 10 ms)``, so that appending outruns the
  queries; it keeps a backlog of about 20,000 events, so the loop always has a full batch to deliver).
  Two event mixes: *hot* (every event on one stream: 1% of the subscriptions change between two checkpoints)
  and *all* (5 events on each stream in turn: all of them change). For each mix, S seconds of:
  - *baseline*: no checkpoint (events/s, the producer's ``append_many`` wait);
  - *requested*: ``engine.checkpoint()`` called from the main thread every 100-200 ms (random);
  - *periodic*: ``checkpoint_every_seconds=0.15``, taken by the processing thread itself.
  Per checkpoint: **wait** = call -> the checkpoint starts (for a periodic one: due -> starts), **pause** =
  ``CheckpointMetrics.pause_seconds`` (the queries' state captured, the scheduler paused), **held** = how long
  the engine's lock was held by the checkpoint, i.e. processing stopped (flush of the sink, pause, commit,
  truncation of the log), **total** = call -> return; and the subscriptions written per checkpoint
  (``dirty_subscriptions``). The start is found through the public API: a registered source's ``state()`` is
  called inside the checkpoint after the state was serialized, so start = that moment - ``serialize_seconds``
  - ``egress_seconds`` (a fraction of a millisecond off at most); the end is the checkpoint listener's call.
  Target: pause p99 <= 10 ms (issue 20).
* **A window closing K keys.** One subscription ``aggregate_by_key(key, Tumbling(1 min), "count")`` (then a
  ``map`` that notes when rows pass) over K keys in one window, served by ``serve()``; then one event after the
  window's end: the window's close runs as one timer task. Reported: the close (the closing event appended ->
  its last row) and its rows (first -> last), and the wait of a checkpoint requested from another thread as soon
  as the first row passed (its call -> its start), with that checkpoint's pause. R rounds, one window each.
"""

from __future__ import annotations

import argparse
import operator
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _workloads import percentile  # bench/ is sys.path[0] when this runs as a script

from reaqtive import Query
from reaqtive.engine import DISCARD_SINK, CheckpointMetrics, Engine, FunctionRegistry
from reaqtive.engine.ingress import GroupCommit
from reaqtive.operators.keyed_window import Tumbling

T0 = datetime(2026, 1, 1, tzinfo=UTC)  # aligned to the minute: window k is [T0 + k min, T0 + (k+1) min)
STREAMS = 100
BACKLOG = 20_000
"""Events the producer keeps ahead of the processing loop (about five delivery batches of 4,096)."""
PERIOD = 0.15
"""``checkpoint_every_seconds`` of the periodic runs."""
PROBE = "bench://probe"
GROUP_COMMIT = GroupCommit(events=5_000, seconds=0.01)
"""How the load runs commit appends: an ``append_many`` returns at once, a background thread commits."""


def stream(i: int) -> str:
    return f"bench://s{i % STREAMS:03d}"


class EventTimes:
    """Event times one microsecond apart from T0 (the event clock moves with them), shared by the threads that
    append (one at a time)."""

    def __init__(self) -> None:
        self.next = 0

    def take(self, count: int) -> list[datetime]:
        first, self.next = self.next, self.next + count
        return [T0 + timedelta(microseconds=first + i) for i in range(count)]


# -- what a checkpoint looks like from outside ----------------------------------------------------------------------


@dataclass
class Seen:
    """One checkpoint as the probe saw it: its metrics, when it started and ended (``perf_counter``)."""

    metrics: CheckpointMetrics
    started: float
    ended: float

    @property
    def held(self) -> float:
        return self.ended - self.started


class Probe:
    """A registered source (called inside each checkpoint, after the state was serialized) and a checkpoint
    listener (called at its end): together they date each checkpoint's start and end."""

    def __init__(self) -> None:
        self.inside = 0.0
        self.seen: list[Seen] = []

    def state(self) -> bytes:
        self.inside = time.perf_counter()
        return b"probe"

    def listener(self, metrics: CheckpointMetrics | None, error: BaseException | None) -> None:
        ended = time.perf_counter()
        if metrics is not None:
            started = self.inside - metrics.serialize_seconds - metrics.egress_seconds
            self.seen.append(Seen(metrics, started, ended))

    def attach(self, engine: Engine) -> None:
        engine.register_source(PROBE, self.state)
        engine.add_checkpoint_listener(self.listener)


# -- checkpoints under load -----------------------------------------------------------------------------------------


def build(path: Path, subscriptions: int, times: EventTimes, say: Callable[[str], None]) -> None:
    """Create the streams and the subscriptions, and give every stream a few events."""
    started = time.perf_counter()
    with Engine(path, synchronous="OFF", start=T0) as engine:  # set-up speed only; the runs reopen the file
        for i in range(STREAMS):
            engine.create_stream(stream(i))
        for i in range(subscriptions):
            engine.create_subscription(f"bench://q{i:05d}", Query.stream(stream(i)).scan(0, operator.add),
                                       observer=DISCARD_SINK)
        for i in range(STREAMS):
            engine.append_many(stream(i), list(zip(range(5), times.take(5), strict=True)))
        engine.process()
        engine.checkpoint(full=True)
    say(f"set-up: {subscriptions:,} subscriptions over {STREAMS} streams in {time.perf_counter() - started:.1f} s")


def delivered(engine: Engine) -> int:
    """Events delivered so far, over the bench's streams (takes the engine's lock)."""
    return sum(status.delivered + 1 for uri, status in engine.streams().items() if uri.startswith("bench://s"))


class Producer(threading.Thread):
    """Appends without pause, ``per_append`` events per ``append_many`` on the mix's streams in turn, keeping at
    most about :data:`BACKLOG` events ahead of delivery; notes how long each ``append_many`` took."""

    def __init__(self, engine: Engine, mix: str, times: EventTimes, already: int) -> None:
        super().__init__(daemon=True)
        self.engine = engine
        self.streams = [stream(0)] if mix == "hot" else [stream(i) for i in range(STREAMS)]
        self.per_append = 500 if mix == "hot" else 5  # "all": every stream has events in any 500
        self.times = times
        self.appended = already
        self.known_delivered = already
        self.waits: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        turn = 0
        values = list(range(self.per_append))
        while not self.stop.is_set():
            if self.appended - self.known_delivered > BACKLOG:
                self.known_delivered = delivered(self.engine)
                if self.appended - self.known_delivered > BACKLOG:
                    # A load generator's pacing. Not more often: each look takes the engine's lock, which makes the
                    # processing loop hand it over (and read its batch again).
                    self.stop.wait(0.02)
                    continue
            batch = list(zip(values, self.times.take(self.per_append), strict=True))
            started = time.perf_counter()
            self.engine.append_many(self.streams[turn % len(self.streams)], batch)
            self.waits.append(time.perf_counter() - started)
            self.appended += self.per_append
            turn += 1


@dataclass
class LoadRun:
    """What one run measured."""

    mix: str
    mode: str
    seconds: float
    events: int
    append_waits: list[float]
    waits: list[float] = field(default_factory=list)
    totals: list[float] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.events / self.seconds


def load_run(path: Path, mix: str, mode: str, *, seconds: float, synchronous: str, times: EventTimes,
             rng: random.Random) -> LoadRun:
    """One run: serve() on a thread, the producer, and checkpoints as ``mode`` says (baseline: none)."""
    probe = Probe()
    every = PERIOD if mode == "periodic" else None
    with Engine(path, synchronous=synchronous, checkpoint_every_seconds=every, ingress_commit=GROUP_COMMIT) as engine:
        engine.checkpoint()  # what the last run left behind is not this run's
        probe.attach(engine)
        producer = Producer(engine, mix, times, delivered(engine))
        serving = threading.Thread(target=engine.serve, daemon=True)
        serving.start()
        producer.start()
        warm_up = time.perf_counter() + 0.5
        while producer.appended - producer.known_delivered < BACKLOG // 2 and time.perf_counter() < warm_up:
            time.sleep(0.01)  # until the loop has a backlog (bounded)
        first, started = delivered(engine), time.perf_counter()
        waits_before = len(producer.waits)
        run = LoadRun(mix, mode, 0.0, 0, [])
        deadline = started + seconds
        if mode == "requested":
            while time.perf_counter() < deadline:
                time.sleep(rng.uniform(0.1, 0.2))  # the requests' schedule
                called = time.perf_counter()
                engine.checkpoint()
                returned = time.perf_counter()
                seen = probe.seen[-1]
                run.seen.append(seen)
                run.waits.append(seen.started - called)
                run.totals.append(returned - called)
        else:
            time.sleep(seconds)  # the periodic checkpoints (if any) are the processing loop's
        ended = time.perf_counter()
        last = delivered(engine)
        producer.stop.set()
        producer.join()
        engine.flush_ingress()
        # The backlog is delivered before the next run, whose events must not queue behind this run's.
        wait_for(lambda: delivered(engine) >= producer.appended, 600, "the backlog's delivery")
        engine.stop_serving()
        serving.join()
        engine.checkpoint()  # close() takes none: without it the next run would replay this one's events first
        run.seconds, run.events = ended - started, last - first
        run.append_waits = producer.waits[waits_before:]
        if mode == "periodic":
            # Between two periodic checkpoints: due PERIOD after the last one ended; late by its start minus that.
            for before, seen in zip(probe.seen, probe.seen[1:], strict=False):
                if started <= seen.started and seen.ended <= ended:
                    run.seen.append(seen)
                    run.waits.append(max(seen.started - (before.ended + PERIOD), 0.0))
                    run.totals.append(seen.held)
    return run


# -- a window closing K keys ------------------------------------------------------------------------------------------


def key_of(value: int) -> int:
    return value


class RowProbe:
    """The ``map`` after the window: dates the first and the last row of a close (``expected`` rows)."""

    def __init__(self) -> None:
        self.expected = 0
        self.rows = 0
        self.first = self.last = 0.0
        self.started = threading.Event()
        self.done = threading.Event()

    def arm(self, expected: int) -> None:
        self.expected, self.rows = expected, 0
        self.started.clear()
        self.done.clear()

    def __call__(self, row: Any) -> Any:
        now = time.perf_counter()
        self.rows += 1
        if self.rows == 1:
            self.first = now
            self.started.set()
        if self.rows == self.expected:
            self.last = now
            self.done.set()
        return row


@dataclass
class Close:
    """One window's close."""

    keys: int
    close: float
    rows: float
    wait: float
    checkpoint: CheckpointMetrics


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` (every 20 ms: a look at the engine takes its lock, and the processing loop hands it over)
    until it holds, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)


def window_closes(scratch: Path, keys: int, rounds: int, synchronous: str) -> list[Close]:
    """R windows of ``keys`` keys each, closed one after the other while ``serve()`` runs."""
    rows = RowProbe()
    functions = FunctionRegistry()
    functions.register("key_of", key_of)
    functions.register("rows", rows)
    probe = Probe()
    closes: list[Close] = []
    uri = "bench://keys"
    with Engine(scratch / "window.db", synchronous=synchronous, functions=functions, start=T0) as engine:
        engine.create_stream(uri)
        engine.create_subscription("bench://window",
                                   Query.stream(uri).aggregate_by_key(key_of, Tumbling(timedelta(minutes=1)),
                                                                      "count").map(rows),
                                   observer=DISCARD_SINK)
        probe.attach(engine)
        serving = threading.Thread(target=engine.serve, daemon=True)
        serving.start()
        for k in range(rounds):
            opened = T0 + timedelta(minutes=k)
            # the closing event of the last window opened this one (its key is -1): one row more
            expected = keys + (1 if k else 0)
            step = timedelta(microseconds=60_000_000 // (keys + 2))  # floored: the last key stays in the window
            rows.arm(expected)
            engine.extend(uri, ((key, opened + step * (key + 1)) for key in range(keys)))
            wait_for(lambda: engine.streams()[uri].delivered >= engine.streams()[uri].appended - 1, 300,
                     "the window's events")
            if rows.rows:
                raise SystemExit(f"window {k} closed before its closing event came")
            engine.checkpoint()  # the window's keys are saved: the next checkpoint is the close's own
            appended = time.perf_counter()
            engine.append(uri, -1, opened + timedelta(minutes=1))  # in the next window: closes this one
            if not rows.started.wait(300):
                raise SystemExit("the window did not close")
            called = time.perf_counter()
            metrics = engine.checkpoint()
            seen = probe.seen[-1]
            if not rows.done.wait(300):
                raise SystemExit(f"the close emitted {rows.rows} of {expected} rows")
            closes.append(Close(expected, rows.last - appended, rows.last - rows.first, seen.started - called,
                                metrics))
        engine.stop_serving()
        serving.join()
    return closes


# -- the report -------------------------------------------------------------------------------------------------------

Say = Callable[[str], None]


def row(say: Say, label: str, samples: Sequence[float]) -> None:
    """p50, p99 and max of ``samples`` (seconds), in milliseconds."""
    if not samples:
        say(f"  {label:<44} (no samples)")
        return
    points = [percentile(samples, 0.5), percentile(samples, 0.99), max(samples)]
    say(f"  {label:<44} " + " ".join(f"{point * 1e3:>9,.2f}" for point in points) + " ms")


def header(say: Say) -> None:
    say(f"  {'':<44} {'p50':>9} {'p99':>9} {'max':>9}")


def report_mix(say: Say, runs: Sequence[LoadRun], mix: str) -> None:
    baseline = next(run for run in runs if run.mix == mix and run.mode == "baseline")
    say("")
    say(f"mix {mix!r}: " + ("every event on one stream" if mix == "hot" else "5 events on each stream in turn")
        + f"; baseline (no checkpoint): {baseline.rate:,.0f} events/s")
    header(say)
    row(say, "baseline: append_many (producer)", baseline.append_waits)
    for run in runs:
        if run.mix != mix or run.mode == "baseline":
            continue
        dirty = [seen.metrics.dirty_subscriptions for seen in run.seen]
        spread = f"{statistics.median(dirty):,.0f} dirty ({min(dirty):,}-{max(dirty):,})" if dirty else "none"
        name = "requested" if run.mode == "requested" else f"periodic {PERIOD:g} s"
        say(f"  {name}: {len(run.seen)} checkpoints, {spread}; {run.rate:,.0f} events/s "
            f"({run.rate / baseline.rate:.2f}x the baseline)")
        row(say, f"{name}: wait", run.waits)
        row(say, f"{name}: pause", [seen.metrics.pause_seconds for seen in run.seen])
        row(say, f"{name}: commit", [seen.metrics.commit_seconds for seen in run.seen])
        row(say, f"{name}: held (processing stopped)", [seen.held for seen in run.seen])
        if run.mode == "requested":  # a periodic checkpoint's total is its held time
            row(say, f"{name}: total (call -> return)", run.totals)
        row(say, f"{name}: append_many (producer)", run.append_waits)


def report_closes(say: Say, closes: Sequence[Close], keys: int) -> None:
    say("")
    say(f"a window closing {keys:,} keys: aggregate_by_key(Tumbling(1 min), count) under serve(), "
        f"{len(closes)} round(s)")
    header(say)
    row(say, "close: closing event appended -> last row", [close.close for close in closes])
    row(say, "close: first row -> last row", [close.rows for close in closes])
    row(say, "checkpoint requested at the first row: wait", [close.wait for close in closes])
    row(say, "that checkpoint: pause", [close.checkpoint.pause_seconds for close in closes])
    say(f"  that checkpoint wrote {statistics.median(c.checkpoint.bytes_written for c in closes):,.0f} bytes "
        f"({statistics.median(c.checkpoint.dirty_subscriptions for c in closes):,.0f} units)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/pause.py", description=__doc__.splitlines()[0])
    parser.add_argument("--subscriptions", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=15.0, help="seconds per run (6 runs)")
    parser.add_argument("--keys", type=int, default=100_000, help="keys in the closing window")
    parser.add_argument("--rounds", type=int, default=3, help="windows closed")
    parser.add_argument("--synchronous", default="FULL", choices=["FULL", "NORMAL"])
    parser.add_argument("--quick", action="store_true", help="small sizes (500 subscriptions, 1.5 s runs, 2,000 keys)")
    parser.add_argument("--switch-interval", type=float, default=None, metavar="MS",
                        help="sys.setswitchinterval for the run, in ms (default: Python's, 5 ms): how long a thread "
                             "that wants the GIL may wait for a busy one")
    args = parser.parse_args(argv)
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval / 1000)
    if args.quick:
        args.subscriptions, args.seconds, args.keys, args.rounds = 500, 1.5, 2_000, 1

    def say(line: str) -> None:
        print(line, flush=True)

    say(f"reaqtive checkpoint pauses under load, running mode: Python {sys.version.split()[0]}, "
        f"SQLite synchronous={args.synchronous}, GIL switch interval {sys.getswitchinterval() * 1000:g} ms")
    say(f"  {args.subscriptions:,} subscriptions scan(0, add) over {STREAMS} streams; serve() on a thread; a producer "
        f"thread appending (backlog ~{BACKLOG:,} events)")
    say("  wait:  call -> the checkpoint starts (periodic: due -> starts); what a hand-over at bounded slices cuts")
    say("  pause: CheckpointMetrics.pause_seconds (state captured, scheduler paused); target p99 <= 10 ms")
    say("  held:  the engine's lock held by the checkpoint = processing stopped (sink flush, pause, commit, log trim)")
    say("  total: call -> return, as the caller sees it; append_many: the producer's call, lock wait included")
    rng = random.Random(20)
    times = EventTimes()
    with tempfile.TemporaryDirectory(prefix="reaqtive-bench-pause-") as folder:
        scratch = Path(folder)
        path = scratch / "engine.db"
        build(path, args.subscriptions, times, say)
        for mix in ("hot", "all"):
            runs = [load_run(path, mix, mode, seconds=args.seconds, synchronous=args.synchronous, times=times,
                             rng=rng) for mode in ("baseline", "requested", "periodic")]
            report_mix(say, runs, mix)
        report_closes(say, window_closes(scratch, args.keys, args.rounds, args.synchronous), args.keys)
    return 0


if __name__ == "__main__":
    sys.exit(main())
