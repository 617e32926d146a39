"""Slow sinks attached: appends and outputs in running mode with a JSON-lines file synced to disk per batch and a
webhook whose receiver answers each request after 50 ms (issue 31's target: appends keep >= 100,000 events/s and the
outputs keep up).

Run: .venv/bin/python bench/sinks.py [--events N] [--latency SECONDS] [--rounds K]

The engine runs in running mode (``start()``). Two standing queries over one stream, an output per event each
(``map``): one into a :class:`JsonLinesSink` (``fsync=True``: one flush to disk per batch), one into a
:class:`WebhookSink` (``batch=True``) posting to a receiver in another process that waits ``--latency`` seconds
before each answer. A producer appends N events in chunks of 1,000 (``append_many``). Reported, medians of K rounds:

* **appends**: events/s while the producer appends (it never waits for a sink);
* **end to end**: events/s from the first append until both sinks hold every output (the outputs keep up when
  this is close to the append rate);
* the requests and flushes the sinks made, and a plain Python loop's events/s over the same values as the scale.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from reaqtive import Query
from reaqtive.connectors import JsonLinesSink, WebhookSink
from reaqtive.engine import Engine, FunctionRegistry

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CHUNK = 1000
RECEIVER = Path(__file__).with_name("_slow_receiver.py")


def double(x: int) -> int:
    return x * 2


def plain_loop(n: int) -> float:
    started = time.perf_counter()
    out = []
    for x in range(n):
        out.append(x * 2)
    return n / (time.perf_counter() - started)


def start_receiver(latency: float) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen([sys.executable, str(RECEIVER), str(latency)], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    port = int(process.stdout.readline())
    return process, f"http://127.0.0.1:{port}/hook"


def received(url: str) -> int:
    """How many outputs the receiver holds (it answers a GET with the count)."""
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as response:
        return int(response.read())


def one_round(directory: Path, n: int, url: str) -> tuple[float, float, int, int]:
    lines = JsonLinesSink(directory / "out.jsonl", fsync=True)
    hook = WebhookSink(url, batch=True, timeout=10, deadline=30)
    functions = FunctionRegistry()
    functions.register("file", lines)
    functions.register("hook", hook)
    functions.register("double", double)
    syncs = [0]
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        syncs[0] += 1
        real_fsync(fd)

    os.fsync = counting_fsync  # type: ignore[assignment]
    engine = Engine(directory / "s.db", functions=functions, start=T0, synchronous="NORMAL")
    try:
        engine.create_stream("s")
        engine.define_observer("obs://file", lines)
        engine.define_observer("obs://hook", hook)
        engine.create_subscription("to-file", Query.stream("s").map(double), observer="obs://file")
        engine.create_subscription("to-hook", Query.stream("s").map(double), observer="obs://hook")
        engine.start()
        started = time.perf_counter()
        for first in range(0, n, CHUNK):
            engine.append_many("s", [(x, T0 + timedelta(milliseconds=x)) for x in range(first, min(n, first + CHUNK))])
        appended = time.perf_counter() - started
        while lines.last_seq("to-file") < n - 1 or received(url) < n:
            time.sleep(0.005)  # a benchmark polls the sinks' progress; tests wait on events
        done = time.perf_counter() - started
        engine.stop()
        requests = hook.attempts
    finally:
        os.fsync = real_fsync  # type: ignore[assignment]
        engine.close()
        lines.close()
    return n / appended, n / done, requests, syncs[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    appends, ends, requests, syncs, loops = [], [], [], [], []
    for _ in range(args.rounds):
        receiver, url = start_receiver(args.latency)
        try:
            with tempfile.TemporaryDirectory() as directory:
                rate, end, made, flushed = one_round(Path(directory), args.events, url)
        finally:
            receiver.terminate()
            receiver.wait()
        appends.append(rate)
        ends.append(end)
        requests.append(made)
        syncs.append(flushed)
        loops.append(plain_loop(args.events))
    loop = statistics.median(loops)
    print(f"{args.events:,} events, running mode, JSON-lines sink (fsync per batch) + webhook (batch=True, "
          f"{args.latency * 1000:.0f} ms per answer), medians of {args.rounds}")
    print(f"  appends       {statistics.median(appends):>12,.0f} ev/s   (target >= 100,000)")
    print(f"  end to end    {statistics.median(ends):>12,.0f} ev/s   (both sinks hold every output)")
    print(f"  webhook requests {statistics.median(requests):,.0f}, file flushes {statistics.median(syncs):,.0f}")
    print(f"  plain loop    {loop:>12,.0f} ev/s   (appends at {statistics.median(appends) / loop:.3f}x of it)")


if __name__ == "__main__":
    main()
