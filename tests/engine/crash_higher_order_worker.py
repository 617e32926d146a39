"""The process ``test_crash_higher_order.py`` kills: higher-order queries whose inners read engine streams.

Run as ``python -m tests.engine.crash_higher_order_worker STORE [options]`` from the repository root (``STORE``:
an SQLite file or a ``postgresql://`` URL). It is
``crash_worker.Worker`` (same markers, same pause points, same resumable producer protocol) with another
workload, chosen to be hard to recover:

* ``switch_latest`` and ``flat_map`` whose selectors return ``Query.stream("hx://ticks")...``: every outer
  element creates a **reader of another engine stream at run time**, which must start where it was created and
  never move backwards;
* ``flat_map(..., max_concurrent=1)`` with a busy inner (it reads a few ticks before it completes): the outer
  reader **withholds demand**, lags behind what the engine delivered, pins the log and makes recovery replay from
  its own watermark, while the other readers skip what they had;
* ``group_by`` with inner aggregates (a running sum per key, and a per-key ``take(4).sum()`` whose inners
  complete), each keyed (one stage, a record per key) and on the general path (a subscription per group);
* ``aggregate_by_key`` over tumbling and session windows: per-key records in pages of keys (inner units), rows
  waiting in the state, timers at window ends;
* plain running sums beside them, on each stream;
* three streams interleaved in short runs of events.

All the functions are registered by name (:data:`FUNCTIONS`): the store names no module.

**Markers**, as in ``crash_worker``: ``opening``, ``ready P``, ``progress P`` (after every ``CHUNK`` events
appended and processed), ``done P``. ``--pause KIND@P`` stops at the first moment of ``KIND`` once ``P`` events
were processed (``egress``, ``commit``, ``committed``, ``append``, ``recovered``: see ``crash_worker``), printing
``pause KIND P`` and blocking on stdin, so the test can kill the process there. One more kind, ``commit-go``:
print ``pause commit-go P`` when the checkpoint's ``COMMIT`` is about to run and **go on without blocking**, so
that a kill sent at once lands during the commit or just after it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from reaqtive import FunctionRegistry, Query, Session, Tumbling, keyed_execution
from tests.engine import crash_worker
from tests.engine.crash_worker import _mix

T0 = datetime(2026, 9, 1, 7, 0, tzinfo=UTC)
STEP = timedelta(milliseconds=40)  # event i happens at T0 + i * STEP
RUN = 4  # events per producer run: one stream, one append transaction
CHUNK = 100  # events appended, then processed, per loop
ORDERS, TICKS, KEYS = "hx://orders", "hx://ticks", "hx://keys"
STREAMS = (ORDERS, TICKS, KEYS)


def stream_of_run(run: int) -> str:
    """A quarter of the runs are orders, half are ticks, a quarter are keyed records."""
    h = _mix(run * 104_729 + 3) % 4
    return ORDERS if h == 0 else KEYS if h == 1 else TICKS


def event(i: int) -> tuple[str, Any, datetime]:
    """Event ``i``: its stream, value and event time (a pure function of ``i``)."""
    stream = stream_of_run(i // RUN)
    h = _mix(i + 17)
    value: Any
    if stream == ORDERS:
        value = h % 97
    elif stream == TICKS:
        value = (h >> 5) % 50 - 10
    else:
        value = {"key": "kmnpqrst"[h % 8], "amount": (h >> 7) % 20}
    return stream, value, T0 + STEP * i


# -- the functions of the queries, registered by name --------------------------------------------------------------


def add(a: int, b: int) -> int:
    return a + b


def key_of(record: dict[str, Any]) -> str:
    return str(record["key"])


def amount_of(record: dict[str, Any]) -> int:
    return int(record["amount"])


def ticks_since(order: int) -> Query[Any]:
    """The inner of ``q://switch``: the running sum of the ticks since this order, until the next order."""
    return Query.stream(TICKS).skip(order % 2).scan(order, add)


def next_three_ticks(order: int) -> Query[Any]:
    """The inner of ``q://flat``: the sum of the three ticks after this order (several live at once)."""
    return Query.stream(TICKS).take(3).sum(order)


def busy(order: int) -> Query[Any]:
    """The inner of ``q://bounded``: it reads one or two ticks; meanwhile the outer waits (max_concurrent=1)."""
    return Query.stream(TICKS).take(1 + order % 2).scan(order, add)


def running_amount(group: Any) -> Query[Any]:
    """Per key of ``q://group-sum``: a running sum of the key's amounts."""
    result: Query[Any] = group.map(amount_of).scan(0, add)
    return result


def first_four(group: Any) -> Query[Any]:
    """Per key of ``q://group-first4``: the sum of the key's first four amounts (the inner then completes)."""
    result: Query[Any] = group.map(amount_of).take(4).sum()
    return result


FUNCTIONS = FunctionRegistry()
for _function in (add, key_of, amount_of, ticks_since, next_three_ticks, busy, running_amount, first_four):
    FUNCTIONS.register(f"hx_{_function.__name__}", _function)


GENERAL = frozenset({"q://group-sum-general", "q://group-first4-general"})
"""Queries created with keyed execution off: their groups are inner subscriptions (the others' keyed chains run as
one stage with a record per key)."""


def queries() -> list[tuple[str, Query[Any]]]:
    """The standing queries, in creation order."""
    orders, ticks, keys = (Query.stream(uri) for uri in STREAMS)
    return [
        ("q://switch", orders.switch_latest(ticks_since)),
        ("q://flat", orders.flat_map(next_three_ticks)),
        ("q://bounded", orders.flat_map(busy, max_concurrent=1)),
        ("q://group-sum", keys.group_by(key_of).flat_map(running_amount)),
        ("q://group-first4", keys.group_by(key_of).flat_map(first_four)),
        # the same two on the general path (a subscription per group: see GENERAL)
        ("q://group-sum-general", keys.group_by(key_of).flat_map(running_amount)),
        ("q://group-first4-general", keys.group_by(key_of).flat_map(first_four)),
        ("q://sum-orders", orders.scan(0, add)),
        ("q://sum-ticks", ticks.scan(0, add)),
        ("q://sum-amounts", keys.map(amount_of).scan(0, add)),
        # keyed windows: records in pages of keys, rows waiting in the state, timers at window ends
        ("q://keyed-tumbling", keys.aggregate_by_key(key_of, Tumbling(STEP * 40), "sum", amount_of)),
        ("q://keyed-session", keys.aggregate_by_key(key_of, Session(STEP * 25), "count")),
    ]


class Worker(crash_worker.Worker):
    """``crash_worker.Worker`` with this module's workload (and the ``commit-go`` pause)."""

    def __init__(self, path: str, events: int, every: int, pause: tuple[str, int] | None) -> None:
        self.go = pause is not None and pause[0] == "commit-go"
        if self.go:
            assert pause is not None
            pause = ("commit", pause[1])  # the hooks of the commit pause, without the blocking
        super().__init__(path, events, every, pause)

    def maybe_pause(self, kind: str) -> None:
        if self.go and kind == "commit" and self.pause is not None and self.processed() >= self.pause[1]:
            self.pause = None
            self.say(f"pause commit-go {self.processed()}")  # and go on: the kill comes during or after COMMIT
            return
        super().maybe_pause(kind)

    def run(self) -> None:
        self.say("opening")
        self.engine = engine = self.open(functions=FUNCTIONS, checkpoint_every_events=self.every,
                                         synchronous="NORMAL", gc_freeze=False)
        self._install_fault_points()
        self.say(f"ready {self.processed()}")
        self.maybe_pause("recovered")
        self.setup()
        while True:
            appended = self.appended()
            if appended < self.events:
                self.produce(appended, min(self.events, appended + CHUNK))
            if not engine.process():
                break
            self.say(f"progress {self.processed()}")
        engine.checkpoint()
        processed = self.processed()
        engine.close()
        self.say(f"done {processed}")

    def setup(self) -> None:
        engine = self.engine
        engine.advance_time(T0)
        existing = self.uris()
        for uri in STREAMS:
            if uri not in existing:
                engine.create_stream(uri)
        for uri, query in queries():
            if uri not in existing:
                with keyed_execution(uri not in GENERAL):
                    engine.create_subscription(uri, query)
                self.maybe_pause("setup")

    def produce(self, start: int, stop: int) -> None:
        """Append events ``start..stop`` (``start`` is at a run boundary), one transaction per run."""
        assert start % RUN == 0, f"the store holds a partial run: {start} events appended"
        for run_start in range(start, stop, RUN):
            batch = [event(i) for i in range(run_start, min(stop, run_start + RUN))]
            self.engine.append_many(batch[0][0], [(value, when) for _, value, when in batch])
            self.maybe_pause("append")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="crash_higher_order_worker")
    parser.add_argument("store", help="an SQLite file or a postgresql:// URL")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--every", type=int, default=500)
    parser.add_argument("--pause", default=None, help="KIND@POSITION")
    args = parser.parse_args(argv)
    pause = None
    if args.pause:
        kind, _, position = args.pause.partition("@")
        pause = (kind, int(position))
    store = args.store if args.store.startswith(("postgresql://", "postgres://")) else str(Path(args.store))
    Worker(store, args.events, args.every, pause).run()
    return 0


if __name__ == "__main__":
    from tests.engine import crash_higher_order_worker  # noqa: PLW0406  (one module object, whatever the entry)

    sys.exit(crash_higher_order_worker.main())
