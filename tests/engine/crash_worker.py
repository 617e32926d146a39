"""The process that ``test_crash.py`` kills: an engine with 20 standing queries over a durable input it produces.

Run as ``python -m tests.engine.crash_worker STORE [options]`` from the repository root; ``STORE`` is an SQLite
file or a ``postgresql://`` URL. Every run opens the engine on ``STORE`` (recovering whatever is there), creates
what is missing, and then loops: append the next chunk of the input (a deterministic function of the event's
index), process it, repeat, until ``--events`` events were appended and processed. The engine checkpoints every
``--every`` events on its own.

The run is the same whether it starts fresh or after any number of kills, so the durable sink of a run that was
killed 30 times must equal that of a run that never was:

* the input is a function of the event index, and the producer resumes at the number of events the store says
  were appended (appends are atomic per run of one stream, and runs are appended in order);
* the queries are created when missing, in a fixed order; one of them (``q://20-late-hot``) is created at run
  time, once the engine has processed ``LATE_AT`` events, as a service would create one on request;
* the clock is event time, so time-based operators close the same windows when the log is replayed.

**Markers** (one line each on stdout, flushed at once): ``opening`` before the engine opens (and recovers),
``ready P`` after it opened, ``progress P``
after each processed chunk, ``done P`` at the end (``P``: events processed). ``--pause KIND@P`` makes the worker
print ``pause KIND P`` at the first moment of kind ``KIND`` once ``P`` events were processed, then block reading
stdin, so the test can kill it exactly there:

* ``setup``: between two subscription creations (only in the first run);
* ``egress``: a checkpoint flushed the durable sink, its state transaction has not begun;
* ``commit``: inside the checkpoint's transaction (SQLite or PostgreSQL), every row written, ``COMMIT`` not yet
  sent;
* ``committed``: the checkpoint committed, the ingress log is not truncated yet;
* ``append``: between two appends of one producer chunk;
* ``created``: right after the run-time subscription was created (before any checkpoint covers it);
* ``recovered``: right after the engine opened (recovered), before anything else.

All the functions the queries use are module-level, so they are persisted by import path; the module re-imports
itself under its package name when run with ``-m`` so that path is ``tests.engine.crash_worker:...``.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from reaqtive import Query
from reaqtive.engine import Engine, EngineStatus
from reaqtive.state import StoreLockedError

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
STEP = timedelta(milliseconds=50)  # event i happens at T0 + i * STEP
RUN = 50  # events per producer run: one stream, one append transaction
CHUNK = 500  # events appended, then processed, per loop
LATE_AT = 40_000  # the run-time subscription is created once this many events were processed (--late-at)
STREAMS = ("iot://readings", "iot://numbers", "iot://words")
WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu")
SENSORS = 6
LOCK_WAIT = 10.0  # seconds a run waits for a killed run's PostgreSQL session to end
ALLOWED = "tests.engine.crash_worker"  # the module whose functions the queries name (also when run with -m)

# -- the input: a pure function of the event index ---------------------------------------------------------------


def _mix(i: int) -> int:
    """A cheap, well-spread 32-bit hash of ``i``."""
    h = (i * 0x9E3779B1 + 0x7F4A7C15) & 0xFFFFFFFF
    h ^= h >> 15
    h = (h * 0x2C1B3C6D) & 0xFFFFFFFF
    h ^= h >> 12
    return h


def stream_of_run(run: int) -> str:
    """Which stream run ``run`` goes to (about half readings, a third numbers, the rest words)."""
    h = _mix(run * 7919) % 12
    return STREAMS[0] if h < 6 else STREAMS[1] if h < 10 else STREAMS[2]


def event(i: int) -> tuple[str, Any, datetime]:
    """Event ``i``: its stream, value and event time."""
    stream = stream_of_run(i // RUN)
    h = _mix(i)
    when = T0 + STEP * i
    if stream == STREAMS[0]:
        sensor = h % SENSORS
        return stream, {"sensor": sensor, "value": round(15 + sensor * 2 + (h >> 8) % 200 / 10, 1)}, when
    if stream == STREAMS[1]:
        return stream, (h >> 4) % 1000, when
    return stream, WORDS[(h >> 3) % len(WORDS)], when


# -- the functions the queries use (module level: persisted by import path) -----------------------------------


def double(x: int) -> int:
    return x * 2


def is_even(x: int) -> bool:
    return x % 2 == 0


def add(a: int, b: int) -> int:
    return a + b


def total(xs: list[int]) -> int:
    return sum(xs)


def biggest(xs: list[int]) -> int:
    return max(xs)


def value_of(reading: dict[str, Any]) -> float:
    return float(reading["value"])


def sensor_of(reading: dict[str, Any]) -> int:
    return int(reading["sensor"])


def count_and_mean(xs: list[float]) -> list[Any]:
    return [len(xs), round(sum(xs) / len(xs), 3) if xs else None]


def size(xs: list[Any]) -> int:
    return len(xs)


def over_990(x: int) -> bool:
    return x > 990


def under_900(x: int) -> bool:
    return x < 900


def is_hot(reading: dict[str, Any]) -> bool:
    return float(reading["value"]) > 33.0


def word_length(word: str) -> int:
    return len(word)


def count_words(counts: dict[str, int], word: str) -> dict[str, int]:
    updated = dict(counts)
    updated[word] = updated.get(word, 0) + 1
    return updated


def every_50th(_: object, index: int) -> bool:
    return index % 50 == 49


def pair(a: object, b: object) -> list[object]:
    return [a, b]


def number_divisible_by_97(pair_: list[Any]) -> bool:
    return int(pair_[0]) % 97 == 0


def nonempty(xs: list[Any]) -> bool:
    return bool(xs)


def sensor_minute(readings: list[dict[str, Any]]) -> list[Any]:
    values = [float(r["value"]) for r in readings]
    return [readings[0]["sensor"], len(values), round(sum(values) / len(values), 3)]


def above_threshold(summary: list[Any]) -> bool:
    return float(summary[2]) > 30.0


def per_sensor_minute(group: Any) -> Query[Any]:
    """The per-group query of ``q://12-sensor-minute``: each sensor's 1-minute averages above 30."""
    result: Query[Any] = group.buffer(timedelta(minutes=1)).filter(nonempty).map(sensor_minute).filter(
        above_threshold
    )
    return result


def window_sum(window: Any) -> Query[Any]:
    """The per-window query of ``q://19-window-sums``."""
    result: Query[Any] = window.sum()
    return result


def queries() -> list[tuple[str, Query[Any]]]:
    """The standing queries created at setup, in creation order (19 of the 20; see :func:`late_query`)."""
    readings, numbers, words = (Query.stream(uri) for uri in STREAMS)
    return [
        ("q://01-map", numbers.map(double)),
        ("q://02-filter", numbers.filter(is_even).map(double)),
        ("q://03-scan", numbers.scan(0, add)),
        ("q://04-buffer-count", numbers.buffer(7).map(total)),
        ("q://05-buffer-sliding", numbers.buffer(5, 3).map(biggest)),
        ("q://06-buffer-time", readings.map(value_of).buffer(timedelta(seconds=30)).map(count_and_mean)),
        ("q://07-take-until-time", readings.take_until(T0 + timedelta(minutes=20)).count()),
        ("q://08-distinct-until-changed", words.distinct_until_changed()),
        ("q://09-take-sum", numbers.take(5000).sum()),
        ("q://10-first", numbers.first(over_990)),
        ("q://11-average", readings.map(value_of).take(2000).average()),
        ("q://12-sensor-minute", readings.group_by(sensor_of).flat_map(per_sensor_minute)),
        ("q://13-merge", numbers.merge(words.map(word_length)).buffer(100).map(total)),
        ("q://14-combine-latest",
         Query.combine_latest(numbers, readings.map(value_of), pair).filter(number_divisible_by_97)),
        ("q://15-word-counts", words.scan({}, count_words).filter_indexed(every_50th)),
        ("q://16-buffer-time-or-count", readings.buffer(timedelta(seconds=20), 50).map(size)),
        ("q://17-skip-take-while", numbers.skip_while(under_900).take(300).to_list().map(size)),
        ("q://18-distinct", words.distinct()),
        ("q://19-window-sums", numbers.window(100).flat_map(window_sum)),
    ]


def late_query() -> tuple[str, Query[Any]]:
    """The 20th query, created at run time: hot readings per 2 minutes of event time."""
    return "q://20-late-hot", Query.stream(STREAMS[0]).filter(is_hot).buffer(timedelta(minutes=2)).map(size)


# -- the run ------------------------------------------------------------------------------------------------------


class Worker:
    """One run of the worker on one store."""

    def __init__(self, path: str, events: int, every: int, pause: tuple[str, int] | None,
                 late_at: int = LATE_AT) -> None:
        self.path = path
        self.events = events
        self.every = every
        self.pause = pause
        self.late_at = late_at

    def say(self, line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def maybe_pause(self, kind: str) -> None:
        pause = self.pause
        if pause is None or pause[0] != kind:
            return
        position = self.processed()
        if position < pause[1]:
            return
        self.pause = None
        self.say(f"pause {kind} {position}")
        sys.stdin.readline()  # the test kills us here (or closes stdin, which lets us go on)

    def processed(self) -> int:
        return sum(status.delivered + 1 for status in self.engine.streams().values())

    def appended(self) -> int:
        return sum(status.appended for status in self.engine.streams().values())

    def run(self) -> None:
        self.say("opening")
        self.engine = engine = self.open(allow_modules=[ALLOWED], checkpoint_every_events=self.every,
                                         synchronous="NORMAL")
        self._install_fault_points()
        self.say(f"ready {self.processed()}")
        self.maybe_pause("recovered")
        self.setup()
        while True:
            self.create_late_query()
            appended = self.appended()
            if appended < self.events:
                self.produce(appended, min(self.events, appended + CHUNK))
            late_uri, _ = late_query()
            before_late = self.processed() < self.late_at and late_uri not in self.uris()
            if not engine.process(max_events=self.late_at - self.processed() if before_late else None):
                break
            self.say(f"progress {self.processed()}")
        engine.checkpoint()
        processed = self.processed()
        engine.close()
        self.say(f"done {processed}")

    def open(self, **options: Any) -> Engine:
        """Open (and recover) the engine with ``options``. On PostgreSQL the writer lock of a killed run is the
        session of its connection, which the server ends when it sees the socket closed: a moment after the kill,
        so the next run may find it held for that moment, and waits for it as a restarted service would."""
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            try:
                return Engine(self.path, **options)
            except StoreLockedError as error:
                if not self.path.startswith("postgres") or time.monotonic() > deadline:
                    raise
                sys.stderr.write(f"waiting: {error}\n")
                time.sleep(0.01)  # polling the server for the dead session's end, bounded by LOCK_WAIT

    def setup(self) -> None:
        engine = self.engine
        engine.advance_time(T0)  # a fresh engine's clock is at 1970: time windows must start at the input's start
        existing = self.uris()
        for uri in STREAMS:
            if uri not in existing:
                engine.create_stream(uri)
        for uri, query in queries():
            if uri not in existing:
                engine.create_subscription(uri, query)
                self.maybe_pause("setup")

    def uris(self) -> set[str]:
        return {info.uri for info in self.engine.artifacts()}

    def create_late_query(self) -> None:
        """Create the 20th query when exactly ``late_at`` events were processed (the run stops there for it)."""
        uri, query = late_query()
        if self.processed() == self.late_at and uri not in self.uris():
            self.engine.create_subscription(uri, query)
            self.maybe_pause("created")

    def produce(self, start: int, stop: int) -> None:
        """Append events ``start..stop`` (``start`` is at a run boundary), one transaction per run."""
        assert start % RUN == 0, f"the store holds a partial run: {start} events appended"
        for run_start in range(start, stop, RUN):
            batch = [event(i) for i in range(run_start, min(stop, run_start + RUN))]
            self.engine.append_many(batch[0][0], [(value, when) for _, value, when in batch])
            self.maybe_pause("append")

    def _install_fault_points(self) -> None:
        """Hooks into the engine's store for the ``egress``, ``commit`` and ``committed`` pauses (test only)."""
        if self.pause is None or self.pause[0] not in ("egress", "commit", "committed"):
            return
        engine = self.engine
        store = engine._store
        checkpointing: Callable[[], bool] = lambda: engine.status is EngineStatus.CHECKPOINTING  # noqa: E731
        write_outputs, truncate = store.write_outputs, store.truncate_ingress

        def writing_outputs(outputs: Sequence[tuple[str, int, Any]], *, encoded: bool = False) -> None:
            write_outputs(outputs, encoded=encoded)
            if checkpointing():
                self.maybe_pause("egress")

        def truncating(covered: dict[str, int]) -> int:
            self.maybe_pause("committed")
            return truncate(covered)

        def tracing(statement: str) -> None:
            if statement == "COMMIT" and checkpointing():
                self.maybe_pause("commit")

        store.write_outputs = writing_outputs  # type: ignore[method-assign]
        store.truncate_ingress = truncating  # type: ignore[method-assign]
        connection = getattr(store.checkpoints, "_connection", None)
        if isinstance(connection, sqlite3.Connection):
            connection.set_trace_callback(tracing)
        else:
            self._pause_before_postgres_commit(checkpointing)

    def _pause_before_postgres_commit(self, checkpointing: Callable[[], bool]) -> None:
        """The ``commit`` pause on PostgreSQL: psycopg sends ``COMMIT`` when the checkpoint store's transaction
        block exits; pause just before, once the checkpoint's rows are written (its ``_apply`` is running)."""
        import psycopg

        checkpoints: Any = self.engine._store.checkpoints
        connection = checkpoints._connection
        apply, exit_block = checkpoints._apply, psycopg.Transaction.__exit__
        applying = [False]

        def applying_changes(changes: Any) -> int:
            applying[0] = True
            try:
                return int(apply(changes))
            finally:
                applying[0] = False

        def exiting(transaction: psycopg.Transaction, *exc: Any) -> bool:
            if (exc[0] is None and applying[0] and checkpointing() and transaction.connection is connection
                    and not transaction.savepoint_name):
                in_transaction = connection.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
                assert in_transaction, "the commit pause must be inside the open transaction"
                self.maybe_pause("commit")
            return exit_block(transaction, *exc)

        checkpoints._apply = applying_changes
        psycopg.Transaction.__exit__ = exiting  # type: ignore[method-assign]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="crash_worker")
    parser.add_argument("store", help="an SQLite file or a postgresql:// URL")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--every", type=int, default=1_000)
    parser.add_argument("--pause", default=None, help="KIND@POSITION")
    parser.add_argument("--late-at", type=int, default=LATE_AT, help="events processed when the 20th query is created")
    args = parser.parse_args(argv)
    pause = None
    if args.pause:
        kind, _, position = args.pause.partition("@")
        pause = (kind, int(position))
    store = args.store if args.store.startswith(("postgresql://", "postgres://")) else str(Path(args.store))
    Worker(store, args.events, args.every, pause, args.late_at).run()
    return 0


if __name__ == "__main__":
    from tests.engine import crash_worker  # noqa: PLW0406  (functions must be persisted under the real name)

    sys.exit(crash_worker.main())
