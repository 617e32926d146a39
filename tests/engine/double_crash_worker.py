"""The process ``test_double_crash.py`` kills: lagging and stream-reading higher-order queries, merges, time windows,
pauses, deletes and re-creates, under the event clock.

Run as ``python -m tests.engine.double_crash_worker STORE [options]`` from the repository root (``STORE``: an
SQLite file or a ``postgresql://`` URL). It is ``crash_worker.Worker`` (same markers, same pause points inside
checkpoints, same resumable producer protocol) with this workload:

* **lagging readers**: ``flat_map(..., max_concurrent=1)`` and ``max_concurrent=2`` whose inners read two or three
  ticks before they complete (``Query.stream(TICKS).take(k)``): their outer readers withhold demand, lag, pin the
  log and make every recovery replay from their own watermark;
* **stream-reading inners**: ``flat_map`` and ``switch_latest`` whose selectors return ``Query.stream(...)``: every
  outer element creates a reader of another engine stream at run time, which must start right after that element;
* a **merge** of two engine streams, and a buffer by time over another merge;
* **time-based operators**: ``buffer`` by time and ``debounce`` (the event clock: a replay cuts the same windows);
* **pauses**: :data:`PAUSES` says which query is paused while which chunks of the input are processed (from the
  middle of the chunk: half of it processed, the pauses applied, the rest processed). A pause lasts while the
  process runs; after a restart the worker pauses again what the schedule says. With the event clock a pause must
  change nothing a query computes, so the uncrashed run without pauses (``--no-pauses``) is the oracle;
* **deletes and re-creates**: once the chunk :data:`RECREATES` names is fully processed (and before the next one
  is appended), the worker deletes a subscription and creates it again under the same URI. The step is resumable:
  it first creates an empty marker stream ``dc://step-<chunk>``; after a restart, no marker means the step was not
  begun, a subscription created (``created_at``) after its marker means it was done, one created before it means
  it still has to be deleted, a missing one that it was deleted and must be created;
* periodic checkpoints every ``--every`` events.

**Markers**, as in ``crash_worker``: ``opening``, ``ready P``, ``progress P`` (after every chunk appended and
processed), ``done P``. ``--pause KIND@P`` stops at the first moment of ``KIND`` once ``P`` events were
processed, printing ``pause KIND P`` and blocking on stdin, for the test to kill it there: ``setup``, ``egress``,
``commit``, ``committed``, ``append``, ``recovered`` (see ``crash_worker``); and

* ``replay``: right after the store opened, process ``P`` events (``process(max_events=P)``: the start of the
  recovery's replay, the lagging readers' events first), then stop there;
* ``paused``: right after the schedule paused a query;
* ``marker``, ``deleted``, ``recreated``: in a delete-and-re-create step, after its marker was created, after the
  delete, after the create.

Every function is registered by name (:data:`FUNCTIONS`): the store names no module.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from reaqtive import FunctionRegistry, Query
from tests.engine import crash_worker
from tests.engine.crash_worker import _mix

T0 = datetime(2026, 10, 1, 6, 0, tzinfo=UTC)
STEP = timedelta(milliseconds=200)  # event i happens at T0 + i * STEP, plus the quiet gaps, minus lateness
QUIET_EVERY, QUIET = 40, timedelta(seconds=3)  # after every 40 events, 3 s without any
RUN = 3  # events per producer run: one stream, one append transaction
CHUNK = 60  # events appended, then processed, per loop
ORDERS, TICKS, OTHER = "dc://orders", "dc://ticks", "dc://other"
STREAMS = (ORDERS, TICKS, OTHER)


def stream_of_run(run: int) -> str:
    """A quarter of the runs are orders, half are ticks, a quarter go to the other stream."""
    h = _mix(run * 7_919 + 29) % 8
    return ORDERS if h < 2 else TICKS if h < 6 else OTHER


def event_time(i: int) -> datetime:
    """Increasing, with a quiet gap every ``QUIET_EVERY`` events and now and then a late event (1.5 s early)."""
    late = timedelta(milliseconds=1_500) if _mix(i + 5) % 53 == 0 else timedelta(0)
    return T0 + STEP * i + QUIET * (i // QUIET_EVERY) - late


def event(i: int) -> tuple[str, Any, datetime]:
    """Event ``i``: its stream, value and event time (a pure function of ``i``)."""
    stream = stream_of_run(i // RUN)
    h = _mix(i + 101)
    value = h % 50 if stream == ORDERS else (h >> 5) % 20 - 5 if stream == TICKS else (h >> 3) % 100
    return stream, value, event_time(i)


# -- the functions of the queries, registered by name --------------------------------------------------------------


def add(a: int, b: int) -> int:
    return a + b


def slow_ticks(order: int) -> Query[Any]:
    """The inner of ``q://lag1``: the running sum of the next two or three ticks (the outer waits meanwhile)."""
    return Query.stream(TICKS).take(2 + order % 2).scan(order, add)


def three_ticks(order: int) -> Query[Any]:
    """The inner of ``q://lag2`` (two at a time): the running sum of the next three ticks."""
    return Query.stream(TICKS).take(3).scan(order * 100, add)


def two_others(order: int) -> Query[Any]:
    """The inner of ``q://flat-other``: the running sum of the next two events of the other stream."""
    return Query.stream(OTHER).take(2).scan(order * 1_000, add)


def others_since(order: int) -> Query[Any]:
    """The inner of ``q://switch-other``: the running sum of the other stream since this order, until the next."""
    return Query.stream(OTHER).scan(order * 1_000, add)


def ticks_since(other: int) -> Query[Any]:
    """The inner of ``q://switch-ticks``: the ticks since this event of the other stream (a few skipped)."""
    return Query.stream(TICKS).skip(other % 3).scan(other, add)


def total(values: list[int]) -> list[int]:
    return [len(values), sum(values)]


FUNCTIONS = FunctionRegistry()
for _function in (add, slow_ticks, three_ticks, two_others, others_since, ticks_since, total):
    FUNCTIONS.register(f"dc_{_function.__name__}", _function)


def queries() -> list[tuple[str, Query[Any]]]:
    """The standing queries, in creation order."""
    orders, ticks, other = (Query.stream(uri) for uri in STREAMS)
    return [
        ("q://lag1", orders.flat_map(slow_ticks, max_concurrent=1)),
        ("q://lag2", orders.flat_map(three_ticks, max_concurrent=2)),
        ("q://flat-other", orders.flat_map(two_others)),
        ("q://switch-other", orders.switch_latest(others_since)),
        ("q://switch-ticks", other.switch_latest(ticks_since)),
        ("q://merge", orders.merge(ticks).scan(0, add)),
        ("q://merge-buffer", ticks.merge(other).buffer(timedelta(seconds=2)).map(total)),
        ("q://buffer", other.buffer(timedelta(seconds=1))),
        ("q://debounce", orders.debounce(timedelta(milliseconds=700))),
        ("q://recreated", ticks.merge(orders).scan(0, add)),
        ("q://recreated-lagging", orders.flat_map(slow_ticks, max_concurrent=1)),
    ]


PAUSES: tuple[tuple[str, int, int], ...] = (
    ("q://switch-other", 3, 6),
    ("q://buffer", 5, 9),
    ("q://lag1", 8, 13),
    ("q://debounce", 11, 14),
    ("q://merge", 15, 19),
    ("q://recreated-lagging", 20, 26),  # deleted while paused (after chunk 23), paused again once re-created
    ("q://switch-ticks", 24, 29),
    ("q://lag2", 28, 34),
    ("q://merge-buffer", 33, 36),
    ("q://flat-other", 37, 41),
    ("q://lag1", 40, 44),
    ("q://recreated", 43, 46),
    ("q://switch-other", 45, 50),
    ("q://debounce", 49, 52),
)
"""(subscription, first chunk, end chunk): paused while chunks first..end-1 are processed, from the middle of the
first one to the middle of the end one."""

RECREATES: dict[int, str] = {15: "q://recreated", 23: "q://recreated-lagging", 38: "q://recreated"}
"""After chunk ``c`` is fully processed: delete this subscription and create it again under the same URI."""


def paused_in(chunk: int) -> set[str]:
    """The subscriptions the schedule pauses from the middle of ``chunk`` on."""
    return {uri for uri, first, end in PAUSES if first <= chunk < end}


class Worker(crash_worker.Worker):
    """``crash_worker.Worker`` with this module's workload, pauses and delete-and-re-create steps."""

    def __init__(self, path: str, events: int, every: int, pause: tuple[str, int] | None, pauses: bool, *,
                 hold_at: int | None = None) -> None:
        super().__init__(path, events, every, pause)
        self.pauses = pauses
        self.hold_at = hold_at

    def hold(self) -> None:
        """Wait for the kill once ``hold_at`` events were processed: a kill at a random moment after a position
        lands within a few chunks of it, however late the test's timer is on a loaded machine (a late one let the
        worker run to its end, and the kills planned after it never came)."""
        if self.hold_at is not None and self.processed() >= self.hold_at:
            self.say(f"holding {self.processed()}")
            sys.stdin.readline()  # the test kills us here
            self.hold_at = None

    def run(self) -> None:
        self.say("opening")
        self.engine = engine = self.open(functions=FUNCTIONS, checkpoint_every_events=self.every,
                                         synchronous="NORMAL", gc_freeze=False)
        self._install_fault_points()
        self.say(f"ready {self.processed()}")
        self.maybe_pause("recovered")
        if self.pause is not None and self.pause[0] == "replay":
            engine.process(max_events=self.pause[1])  # the start of the recovery's replay
            self.say(f"pause replay {self.processed()}")
            sys.stdin.readline()  # the test kills us here
            self.pause = None
        self.setup()
        while True:
            appended = self.appended()
            if self.processed() < appended:
                self.process_chunk(appended)
                continue
            if appended % CHUNK == 0 and appended // CHUNK - 1 in RECREATES:
                self.recreate(appended // CHUNK - 1)
            if appended >= self.events:
                break
            self.produce(appended, min(self.events, (appended // CHUNK + 1) * CHUNK))
            self.process_chunk(self.appended())
            self.say(f"progress {self.processed()}")
            self.hold()
        engine.checkpoint()
        processed = self.processed()
        engine.close()
        self.say(f"done {processed}")

    def process_chunk(self, appended: int) -> None:
        """Process what was appended (the rest of chunk ``(appended - 1) // CHUNK``): half of the chunk, then the
        pauses and resumes the schedule says from its middle, then the rest."""
        chunk = (appended - 1) // CHUNK
        middle = chunk * CHUNK + CHUNK // 2
        processed = self.processed()
        if processed < middle:
            self.engine.process(max_events=middle - processed)
        self.apply_pauses(chunk)
        self.engine.process()

    def apply_pauses(self, chunk: int) -> None:
        if not self.pauses:
            return
        engine = self.engine
        # Only running subscriptions can be paused: one the engine stopped (a fault) is left alone, and the
        # comparison with the oracle shows what it missed.
        running = {info.uri for info in engine.artifacts() if info.kind == "subscription" and info.running}
        wanted = paused_in(chunk) & running
        paused = set(engine.paused())
        for uri in sorted(paused - wanted):
            engine.resume(uri)
        for uri in sorted(wanted - paused):
            engine.pause(uri)
        # The kill point: the first time from the chunk of its position on that the schedule pauses a query (also
        # when that query was stopped and is left alone; by chunk, since a replay may keep the position behind).
        pause = self.pause
        if pause is not None and pause[0] == "paused" and paused_in(chunk) - paused \
                and chunk * CHUNK + CHUNK // 2 >= pause[1]:
            self.pause = None
            self.say(f"pause paused {self.processed()}")
            sys.stdin.readline()  # the test kills us here

    def setup(self) -> None:
        engine = self.engine
        engine.advance_time(T0)
        existing = self.uris()
        for uri in STREAMS:
            if uri not in existing:
                engine.create_stream(uri)
        for uri, query in queries():
            # Created at setup only: a re-created one missing after a restart is the step's (see recreate).
            if uri not in existing and not any(step.startswith("dc://step-") for step in existing):
                engine.create_subscription(uri, query)
                self.maybe_pause("setup")

    def recreate(self, chunk: int) -> None:
        """The delete-and-re-create step after ``chunk``, resumed wherever a kill left it (see the module)."""
        engine = self.engine
        uri = RECREATES[chunk]
        marker = f"dc://step-{chunk}"
        if marker not in self.uris():
            engine.create_stream(marker)
            self.maybe_pause("marker")
        marked = engine.created_at(marker)
        created = engine.created_at(uri)
        assert marked is not None
        if created is not None and created > marked:
            return  # done before the restart
        if created is not None:
            engine.delete_subscription(uri)
            self.maybe_pause("deleted")
        engine.create_subscription(uri, dict(queries())[uri])
        self.maybe_pause("recreated")

    def produce(self, start: int, stop: int) -> None:
        """Append events ``start..stop`` (``start`` is at a run boundary), one transaction per run."""
        assert start % RUN == 0, f"the store holds a partial run: {start} events appended"
        for run_start in range(start, stop, RUN):
            batch = [event(i) for i in range(run_start, min(stop, run_start + RUN))]
            self.engine.append_many(batch[0][0], [(value, when) for _, value, when in batch])
            self.maybe_pause("append")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="double_crash_worker")
    parser.add_argument("store", help="an SQLite file or a postgresql:// URL")
    parser.add_argument("--events", type=int, default=3_600)
    parser.add_argument("--every", type=int, default=150)
    parser.add_argument("--pause", default=None, help="KIND@POSITION")
    parser.add_argument("--no-pauses", action="store_true", help="never pause a subscription (the oracle)")
    parser.add_argument("--hold-at", type=int, default=None, help="wait for the kill once this many were processed")
    args = parser.parse_args(argv)
    pause = None
    if args.pause:
        kind, _, position = args.pause.partition("@")
        pause = (kind, int(position))
    store = args.store if args.store.startswith(("postgresql://", "postgres://")) else str(Path(args.store))
    Worker(store, args.events, args.every, pause, pauses=not args.no_pauses, hold_at=args.hold_at).run()
    return 0


if __name__ == "__main__":
    from tests.engine import double_crash_worker  # noqa: PLW0406  (one module object, whatever the entry)

    sys.exit(double_crash_worker.main())
