"""The process that ``test_running_crash.py`` kills: an engine in running mode (``clock="wall"``, ``serve()`` on a
thread) with standing queries whose time-based outputs fire on the wall clock, over a durable input it produces.

Run as ``python -m tests.engine.running_crash_worker STORE --start MICROS [options]`` from the repository root.
Every run opens the engine on ``STORE`` (recovering whatever is there), creates what is missing, starts
``engine.serve()`` on a thread (the host never calls ``process()``) and then, on the main thread, appends the
input in **bursts** (one ``append_many`` each, so a burst is in the log whole or not at all) with a pause after
each one, short or long (``gap``), during which no event arrives and the time-based queries fire by themselves.
It resumes at the number of events the store says were appended, so the input is the same whatever the kills:
event ``i`` is ``[i, wall time of its append in µs]`` (the count-exact query reads only ``i``).

The queries, all to the durable sink:

* ``q://exact``: ``map(index).scan(0, add)``: output ``k`` is ``0 + 1 + ... + k``, whatever the clock;
* ``q://timer``: ``Query.timer(start, PERIOD)`` (``start`` absolute, from ``--start``, so tick ``k`` is due at
  ``start + k * PERIOD`` in every run), each tick stamped ``[k, wall time it went out in µs]``;
* ``q://debounce``: ``debounce(DEBOUNCE)`` stamped ``[i, appended µs, wall time it went out in µs]``;
* ``q://buffer``: ``map(index).buffer(WINDOW)`` (a list every ``WINDOW`` of wall time, empty ones included),
  stamped ``[indices, wall time it went out in µs]``.

The functions that stamp read the wall clock when the output is produced, which is what the test checks against
the due times. After the last burst the run waits ``TAIL`` seconds (the last debounce and window fire with no
event), stops serving, checkpoints and closes.

**Markers** (one line each on stdout, flushed at once; ``T``: wall time in µs): ``opening T`` before the engine
opens, ``serving T`` once it opened and right before the serving thread starts (recovered timers and the
replay run from here), ``progress N T`` after each burst (``N``: events appended), ``stopping T`` before the
serving thread is stopped at the end, ``done N`` once the final checkpoint is taken and the engine closed.
``--pause egress`` prints ``pause egress N`` once a periodic checkpoint has written to the durable sink a window
holding an event its committed state does not cover yet, before its state transaction, then blocks (the test
kills it there: the narrowest window of a checkpoint). With ``--trace``, ``flushing T`` before each write to the
durable sink and ``committed T`` after each checkpoint's state transaction show whether a random kill left the
sink ahead of the committed state.

All the functions the queries use are module-level, so they are persisted by import path; the module re-imports
itself under its package name when run with ``-m`` so that path is ``tests.engine.running_crash_worker:...``.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from reaqtive import Query
from reaqtive.engine import Engine, EngineStatus

ALLOWED = "tests.engine.running_crash_worker"  # the module whose functions the queries name
STREAM = "s://events"
BURST = 20  # events per append (one transaction)
BURSTS = 48
EVENTS = BURST * BURSTS
SHORT_GAP = 0.02  # seconds between bursts, shorter than DEBOUNCE: the debounce holds on
LONG_GAP = 0.3  # after every LONG_EVERY-th burst: longer than the tested bound, so a timer that waited for an
LONG_EVERY = 4  # event (instead of the wall clock) would be caught late
PERIOD = timedelta(milliseconds=100)  # the timer's period
DEBOUNCE = timedelta(milliseconds=60)
WINDOW = timedelta(milliseconds=250)
TAIL = 0.6  # seconds after the last burst: the last debounce and window fire with no event
CHECKPOINT_SECONDS = 0.25  # also how often an idle loop wakes anyway: above the tested bound


def now_micros() -> int:
    """The wall clock in µs since the epoch."""
    return time.time_ns() // 1_000


def gap_after(burst: int) -> float:
    """The pause after burst ``burst`` (a function of its number, the same in every run)."""
    return LONG_GAP if burst % LONG_EVERY == LONG_EVERY - 1 else SHORT_GAP


# -- the functions the queries use (module level: persisted by import path) -----------------------------------


def index(event: list[int]) -> int:
    return int(event[0])


def add(a: int, b: int) -> int:
    return a + b


def stamp_tick(k: int) -> list[int]:
    return [k, now_micros()]


def stamp_event(event: list[int]) -> list[int]:
    return [int(event[0]), int(event[1]), now_micros()]


_closed = [-1]  # the highest event index in a window closed in this process (for the egress pause)


def stamp_list(indices: list[int]) -> list[Any]:
    if indices:
        _closed[0] = max(_closed[0], *indices)
    return [list(indices), now_micros()]


def queries(start: datetime) -> list[tuple[str, Query[Any]]]:
    """The standing queries, in creation order."""
    events: Query[Any] = Query.stream(STREAM)
    return [
        ("q://exact", events.map(index).scan(0, add)),
        ("q://timer", Query.timer(start, PERIOD).map(stamp_tick)),
        ("q://debounce", events.debounce(DEBOUNCE).map(stamp_event)),
        ("q://buffer", events.map(index).buffer(WINDOW).map(stamp_list)),
    ]


# -- the run ------------------------------------------------------------------------------------------------------


class Worker:
    """One run of the worker on one store."""

    def __init__(self, path: str, start: datetime, pause: str | None, trace: bool) -> None:
        self.path = path
        self.start = start
        self.pause = pause
        self.trace = trace

    def say(self, line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def run(self) -> None:
        self.say(f"opening {now_micros()}")
        engine = Engine(self.path, clock="wall", allow_modules=[ALLOWED], checkpoint_every_seconds=CHECKPOINT_SECONDS,
                        synchronous="NORMAL")
        self.engine = engine
        self._install_markers()
        existing = {info.uri for info in engine.artifacts()}
        if STREAM not in existing:
            engine.create_stream(STREAM)
        for uri, query in queries(self.start):
            if uri not in existing:
                engine.create_subscription(uri, query)
        self.say(f"serving {now_micros()}")
        loop = threading.Thread(target=engine.serve, name="serve", daemon=True)
        loop.start()
        appended = engine.streams()[STREAM].appended
        assert appended % BURST == 0, f"the log holds a partial burst: {appended} events appended"
        for burst in range(appended // BURST, BURSTS):
            first = burst * BURST
            stamp = now_micros()
            engine.append_many(STREAM, [([i, stamp], None) for i in range(first, first + BURST)])
            self.say(f"progress {first + BURST} {now_micros()}")
            time.sleep(gap_after(burst))  # wall time passes with no event: the time-based queries fire alone
        time.sleep(TAIL)
        self.say(f"stopping {now_micros()}")
        engine.stop_serving()
        loop.join()
        engine.checkpoint()
        processed = engine.streams()[STREAM].delivered + 1
        engine.close()
        self.say(f"done {processed}")

    def _install_markers(self) -> None:
        """Hooks into the engine's store (test only): the ``flushing``/``committed`` markers, and the ``egress``
        pause between the two."""
        if self.pause is None and not self.trace:
            return
        engine = self.engine
        store = engine._store
        write_outputs, truncate = store.write_outputs, store.truncate_ingress
        status = engine.streams().get(STREAM)
        committed = [status.delivered if status is not None else -1]  # the last event the committed state covers

        def writing_outputs(outputs: Sequence[tuple[str, int, Any]], *, encoded: bool = False) -> None:
            if self.trace:  # before the write: a kill after this marker may leave the sink ahead of the state
                self.say(f"flushing {now_micros()}")
            write_outputs(outputs, encoded=encoded)
            # Pause where it matters: the sink now holds a window with events the committed state has not seen.
            if self.pause == "egress" and engine.status is EngineStatus.CHECKPOINTING and _closed[0] > committed[0]:
                self.pause = None
                self.say(f"pause egress {engine.streams()[STREAM].delivered + 1}")
                sys.stdin.readline()  # the test kills us here

        def truncating(covered: dict[str, int]) -> int:
            committed[0] = engine.streams()[STREAM].delivered
            if self.trace:
                self.say(f"committed {now_micros()}")
            return truncate(covered)

        store.write_outputs = writing_outputs  # type: ignore[method-assign]
        store.truncate_ingress = truncating  # type: ignore[method-assign]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="running_crash_worker")
    parser.add_argument("store", help="an SQLite file")
    parser.add_argument("--start", type=int, required=True, help="the timer's first due time, µs since the epoch")
    parser.add_argument("--pause", default=None, choices=["egress"])
    parser.add_argument("--trace", action="store_true", help="print the checkpoint markers")
    args = parser.parse_args(argv)
    start = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=args.start)
    Worker(str(Path(args.store)), start, args.pause, args.trace).run()
    return 0


if __name__ == "__main__":
    from tests.engine import running_crash_worker  # noqa: PLW0406  (functions must be persisted under the real name)

    sys.exit(running_crash_worker.main())
