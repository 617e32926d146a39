"""Keyed queries at scale (issue 17): workloads (d) and (e) on a plain dict loop, reaqtive's library and engine and
Bytewax 0.21, measured in one run, one table.

Run: .venv/bin/python bench/keyed.py [--events N] [--general-events M] [--rounds R] [--only d1k,d100k,e]
[--no-subprocess] [--no-memory]

Events: ``(key, value)``, event ``i`` dated ``T0 + i ms`` (T0 = 2026-01-01, a minute boundary), keys drawn from
one fixed pseudo-random sequence (``random.Random(17).randrange(keys)``, the same prefix whatever ``N``), values
``i % 997``.

* (d) per key, the average value of each tumbling one-minute event-time window (windows aligned to the epoch),
  over 1,000 keys (``d1k``) and over 100,000 keys (``d100k``).
* (e) per key, a running count (the key's new count for every event), over 100,000 keys.

Columns (every cell checks its output count; a wrong count is marked and the run exits 1):

* ``dict floor``: a Python loop over the events calling the same user functions (key, value, increment) and a
  callback per output; (d) keeps one dict ``key -> (count, sum)`` of the current minute and flushes it when an
  event's minute starts (events are in time order).
* ``library, keyed``: (d) ``aggregate_by_key(key, Tumbling(1 min), "average", value)``, the keyed windowed
  aggregation of ``reaqtive/operators/keyed_window.py`` (a column says so when it is not there). (e) the general
  form's query, ``group_by(key).flat_map(g -> g.scan(0, increment))``, bound keyed (the default: one stage, a
  record per key; ``reaqtive/operators/keyed_groups.py``).
* ``library, general``: (d) ``group_by(key).flat_map(g -> g.window(1 min).flat_map(w -> w.aggregate(tally))
  .filter(non-empty).map(average))`` (an empty window's ``average()`` would raise, so a tally is folded and empty
  windows dropped); its windows are aligned on each group's creation, so it produces *other* windows than the
  aligned forms (its count is checked against that computation). (e) ``group_by(key).flat_map(g -> g.scan(0,
  increment))``. Both bound on the general path (``keyed_execution(False)``: a subscription tree per key; for (d)
  a window stage and a timer per group). Library (d): a ``SimpleSubject`` fed by a loop that advances a
  ``VirtualTimeScheduler`` (one tick = 1 ms) to each event's time first, as an event-time host does; the subject
  completes at the end, which flushes the open windows. Library (e): ``from_iterable(events)``.
* ``library, Rx form run keyed`` ((d) only, issue 32): the general form's query bound keyed (the default: one
  stage, a record per key, one timer queue; ``reaqtive/operators/keyed_timed.py``): the general form's windows
  and count. ``engine process(), Rx form run keyed``: the same in the engine.
* ``library, keyed, tagged`` and ``engine process(), keyed, tagged`` ((e) only, issue 32): the keyed form with a
  result selector, ``group_by(key).flat_map(g -> g.scan(0, increment), (g, n) -> (g.key, n))``, the form a stored
  query puts the key into its output with; a line after the memory compares them with the untagged keyed form.
* ``engine process()``: an :class:`~reaqtive.engine.Engine` (``synchronous="NORMAL"``) hosting the form over
  ``Query.stream("s")`` into the durable sink; the events are appended first (untimed), only ``process()`` is
  timed.
* ``engine end to end``: from an empty stream, per chunk of 1,000 events an ``extend`` and a ``process()``, a
  ``checkpoint()`` whenever 0.5 s of processing passed since the last one, and a final checkpoint, all timed. For
  (e) also ``end to end, keyed, final checkpoint only`` (the same without the periodic checkpoints: what a
  checkpoint every 0.5 s costs is the ratio of the two). Engine (d): the windows still open after the last event
  close only when the clock passes their end, so after the timed part the clock is moved two minutes on (untimed)
  before counting.
* ``Bytewax``: ``TestingSource(events, batch_size=1000)``, ``op.key_on(str(key))`` (keys must be strings), run
  with ``bytewax.testing.run_main`` (one worker). (d) ``fold_window`` with ``TumblingWindower(1 min,
  align_to=epoch)`` and ``EventClock(ts, wait 0)`` made a pure event-time clock (a frozen ``now_getter``, a
  ``to_system_utc`` returning ``None``: see :func:`frozen_system_time` and :func:`no_wake_up`), folding ``(count,
  sum)``, then ``map_value`` to the average; (e) ``stateful_map``. ``Bytewax + recovery`` ((e) only): the same
  with SQLite recovery on (one partition, an epoch, i.e. a snapshot, every 0.5 s like the engine's checkpoints).
  Over (d)'s windows at 100,000 keys it ran at ~7k events/s (100,000 events), too slow for a default run.

Measurement: R rounds (default 1: a round of the defaults takes about 7 minutes on 2 cores); in each, every
workload runs every column once, round robin (the column order rotated per round), each measurement in a fresh
process (this script with ``--child``). Cells are medians, in events/s; a summary in issue 17's layout follows.
``--general-events`` bounds the events of the general form over 100,000 keys (the ``d100k`` general columns,
library and engine), which runs at a few thousand events/s: its cells say how many events they ran. Memory, over
100,000 keys: ``tracemalloc``'s traced memory held by the live state (the query kept open), for (e) after every
event, per key seen (the dict floor and the library's keyed and general forms), for (d) after the first minute's
events, per open window (the dict floor and ``aggregate_by_key``). Recovery (with (e); ``--recovery-keys``): an
engine store holding 1,000,000 keyed running counts (one event per key, checkpointed), the seconds
``Engine(path)`` takes to open and recover it, and the store's size; one more event then checks a count.
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import importlib.util
import random
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

from _workloads import CountingSink, increment, running_count

from reaqtive import GroupedStream, InnerStream, OperatorContext, Query, SimpleSubject, from_iterable, keyed_execution
from reaqtive.engine import DURABLE_SINK, Engine, FunctionRegistry
from reaqtive.scheduler import VirtualTimeScheduler

T0 = datetime(2026, 1, 1, tzinfo=UTC)  # a minute boundary: the first window starts with the first event
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
T0_MS = (T0 - EPOCH) // timedelta(milliseconds=1)
STEP = timedelta(milliseconds=1)
WINDOW = timedelta(minutes=1)
WINDOW_MS = 60_000
SEED = 17
STREAM = "s"
SUBSCRIPTION = "q"
CHUNK = 1_000  # events per append in the end-to-end run (and Bytewax's batch size)
CHECKPOINT_SECONDS = 0.5
CLOCK: Callable[[], float] = time.perf_counter
"""What a measurement's seconds are read from: wall time, or (``--cpu-time``) the measuring process's CPU time."""
INSTALL_HINT = "not installed (pip install -e .[peers])"


# -- the events ----------------------------------------------------------------------------------------------------

@cache
def key_sequence(keys: int, n: int) -> tuple[int, ...]:
    """The first ``n`` keys of the fixed pseudo-random sequence over ``keys`` keys."""
    rng = random.Random(SEED)
    return tuple(rng.randrange(keys) for _ in range(n))


def make_events(keys: int, n: int) -> list[tuple[int, int]]:
    """Event ``i`` is ``(key, i % 997)``, dated ``T0 + i ms``."""
    return [(key, i % 997) for i, key in enumerate(key_sequence(keys, n))]


def dated(events: list[tuple[int, int]], start: int, stop: int) -> list[tuple[tuple[int, int], datetime]]:
    """Events ``start..stop-1`` with their event times, as the engine appends them."""
    return [(events[i], T0 + STEP * i) for i in range(start, stop)]


# -- the user functions (module-level: an engine registers them by name) ------------------------------------------

def key_of(event: tuple[int, int]) -> int:
    return event[0]


def value_of(event: tuple[int, int]) -> int:
    return event[1]


EMPTY_TALLY = (0, 0)


def add_to_tally(tally: tuple[int, int], event: tuple[int, int]) -> tuple[int, int]:
    return tally[0] + 1, tally[1] + value_of(event)


def nonempty_tally(tally: tuple[int, int]) -> bool:
    return tally[0] > 0


def tally_average(tally: tuple[int, int]) -> float:
    return tally[1] / tally[0]


def window_tally(window: InnerStream[tuple[int, int]]) -> Query[tuple[int, int]]:
    return window.aggregate(add_to_tally, EMPTY_TALLY)


def minute_averages(group: GroupedStream[tuple[int, int]]) -> Query[float]:
    """The general form's per-key query: the group's one-minute windows (they start when the group opens),
    non-empty ones averaged."""
    return group.window(WINDOW).flat_map(window_tally).filter(nonempty_tally).map(tally_average)


def tag_with_key(group: Any, count: int) -> tuple[object, int]:
    """(e) tagged: the result selector putting the key into each output (a stored query's way: issue 32)."""
    return (group.key, count)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "key_of": key_of, "value_of": value_of, "add_to_tally": add_to_tally, "nonempty_tally": nonempty_tally,
    "tally_average": tally_average, "window_tally": window_tally, "minute_averages": minute_averages,
    "running_count": running_count, "increment": increment, "tag_with_key": tag_with_key,
}


# -- the forms -----------------------------------------------------------------------------------------------------

def keyed_available() -> bool:
    """Whether the keyed windowed aggregation (issue 17) is there: the bench runs before it too."""
    return (importlib.util.find_spec("reaqtive.operators.keyed_window") is not None
            and hasattr(Query, "aggregate_by_key"))


def keyed_minute_averages(source: Query[tuple[int, int]]) -> Query[Any]:
    from reaqtive.operators.keyed_window import Tumbling

    return source.aggregate_by_key(key_of, Tumbling(WINDOW), "average", value_of)


def general_minute_averages(source: Query[tuple[int, int]]) -> Query[Any]:
    return source.group_by(key_of).flat_map(minute_averages)


def general_running_count(source: Query[tuple[int, int]]) -> Query[Any]:
    return source.group_by(key_of).flat_map(running_count)


def tagged_running_count(source: Query[tuple[int, int]]) -> Query[Any]:
    return source.group_by(key_of).flat_map(running_count, tag_with_key)


@dataclass(frozen=True)
class Workload:
    key: str
    title: str
    keys: int
    windowed: bool


WORKLOADS = [
    Workload("d1k", "(d) 1-min tumbling average per key, 1,000 keys", 1_000, True),
    Workload("d100k", "(d) 1-min tumbling average per key, 100,000 keys", 100_000, True),
    Workload("e", "(e) running count per key, 100,000 keys", 100_000, False),
]


def pipeline(workload: Workload, form: str) -> Callable[[Query[tuple[int, int]]], Query[Any]]:
    if not workload.windowed:
        return tagged_running_count if form == "tagged" else general_running_count
    return keyed_minute_averages if form == "keyed" else general_minute_averages


# -- what each form must produce -----------------------------------------------------------------------------------

def aligned_windows(keys: Sequence[int], n: int) -> int:
    """(key, minute) pairs with an event, minutes aligned to the epoch: the windows of the aligned forms."""
    return len({(key, (T0_MS + i) // WINDOW_MS) for i, key in enumerate(keys[:n])})


def creation_windows(keys: Sequence[int], n: int) -> int:
    """Non-empty windows of the general form: each key's windows start at its first event (its group's creation)
    and follow each other every minute."""
    first: dict[int, int] = {}
    seen = set()
    for i, key in enumerate(keys[:n]):
        opened = first.setdefault(key, i)
        seen.add((key, (i - opened) // WINDOW_MS))
    return len(seen)


def expected(workload: Workload, form: str, n: int) -> int:
    if not workload.windowed:
        return n
    keys = key_sequence(workload.keys, n)
    return creation_windows(keys, n) if form == "general" else aligned_windows(keys, n)


# -- the columns ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Variant:
    key: str
    title: str
    form: str
    """``keyed`` (the aligned forms: dict floor, keyed operator, Bytewax), ``general`` (group_by + inner) or
    ``tagged`` ((e) only: the keyed form with a result selector tagging each count with its key)."""
    kind: str
    """How it runs: floor, library, process, e2e, e2e-final, bytewax, bytewax-recovery."""
    needs: str | None = None
    keyed: bool = True
    """Bound with keyed execution (the default); ``False``: on the general path, a subscription tree per key."""

    def applies_to(self, workload: Workload) -> bool:
        if self.key.startswith(("library-rx", "process-rx")):
            return workload.windowed  # (e)'s keyed column is its Rx form already
        if self.form == "tagged":
            return not workload.windowed
        if self.kind in ("e2e-final", "bytewax-recovery"):
            # The cost of periodic checkpoints is issue 17's (e) target; Bytewax's recovery over 100,000 keys'
            # windows runs at a few hundred events/s, too slow to measure at 1,000,000 events.
            return not workload.windowed
        return True


VARIANTS = [
    Variant("floor", "dict floor", "keyed", "floor"),
    Variant("library-keyed", "library, keyed", "keyed", "library"),
    Variant("library-rx-keyed", "library, Rx form run keyed", "general", "library"),
    Variant("library-general", "library, general", "general", "library", keyed=False),
    Variant("process-keyed", "engine process(), keyed", "keyed", "process"),
    Variant("process-rx-keyed", "engine process(), Rx form run keyed", "general", "process"),
    Variant("process-general", "engine process(), general", "general", "process", keyed=False),
    Variant("e2e-keyed", "engine end to end, keyed", "keyed", "e2e"),
    Variant("e2e-general", "engine end to end, general", "general", "e2e", keyed=False),
    Variant("e2e-final", "engine end to end, keyed, final checkpoint only", "keyed", "e2e-final"),
    Variant("bytewax", "Bytewax 0.21 (batch 1000)", "keyed", "bytewax", needs="bytewax"),
    Variant("bytewax-recovery", "Bytewax 0.21 + recovery", "keyed", "bytewax-recovery", needs="bytewax"),
    Variant("library-tagged", "library, keyed, tagged", "tagged", "library"),
    Variant("process-tagged", "engine process(), keyed, tagged", "tagged", "process"),
]


def installed(package: str | None) -> bool:
    return package is None or importlib.util.find_spec(package) is not None


def floor_minute_averages(events: list[tuple[int, int]], sink: CountingSink) -> None:
    on_next = sink.on_next
    current = T0_MS // WINDOW_MS
    tallies: dict[int, tuple[int, int]] = {}
    for i, event in enumerate(events):
        minute = (T0_MS + i) // WINDOW_MS  # the event's time in ms, its epoch-aligned minute
        if minute != current:
            for key, (count, total) in tallies.items():
                on_next((key, current, total / count))
            tallies = {}
            current = minute
        key = key_of(event)
        tally = tallies.get(key)
        value = value_of(event)
        tallies[key] = (1, value) if tally is None else (tally[0] + 1, tally[1] + value)
    for key, (count, total) in tallies.items():
        on_next((key, current, total / count))


def floor_running_count(events: list[tuple[int, int]], sink: CountingSink) -> None:
    on_next = sink.on_next
    counts: dict[int, int] = {}
    for event in events:
        key = key_of(event)
        count = increment(counts.get(key, 0), event)
        counts[key] = count
        on_next(count)


def run_floor(workload: Workload, variant: Variant, n: int) -> tuple[float, int]:
    events = make_events(workload.keys, n)
    sink = CountingSink()
    loop = floor_minute_averages if workload.windowed else floor_running_count
    started = CLOCK()
    loop(events, sink)
    return CLOCK() - started, sink.count


def run_library(workload: Workload, variant: Variant, n: int) -> tuple[float, int]:
    events = make_events(workload.keys, n)
    sink = CountingSink()
    form = pipeline(workload, variant.form)
    if not workload.windowed:
        started = CLOCK()
        with keyed_execution(variant.keyed):  # (e): the same query, bound keyed or as a group per key
            form(from_iterable(events)).run(sink)
        return CLOCK() - started, sink.count
    # Event time: advance the virtual clock to each event's time, then deliver it (an event-time host's loop).
    scheduler = VirtualTimeScheduler(STEP, epoch=T0)
    subject: SimpleSubject[tuple[int, int]] = SimpleSubject()
    with keyed_execution(variant.keyed):  # the Rx form: keyed (one stage, a record per key) or a tree per key
        form(subject.as_query()).run(sink, context=OperatorContext("bench://keyed", scheduler))
    advance_to, on_next = scheduler.advance_to, subject.on_next
    started = CLOCK()
    for tick, event in enumerate(events):
        advance_to(tick)
        on_next(event)
    subject.on_complete()
    scheduler.run()
    return CLOCK() - started, sink.count


def open_engine(workload: Workload, variant: Variant, folder: Path) -> Engine:
    engine = Engine(folder / "k.db", synchronous="NORMAL", start=T0, functions=engine_functions())
    engine.create_stream(STREAM)
    with keyed_execution(variant.keyed):  # recorded with the subscription: it recovers in that form
        engine.create_subscription(SUBSCRIPTION, pipeline(workload, variant.form)(Query.stream(STREAM)),
                                   observer=DURABLE_SINK)
    return engine


def engine_outputs(engine: Engine, workload: Workload, n: int) -> int:
    """How many outputs the subscription produced; (d): after moving the clock past the last windows' end (their
    elements all arrived; the stream does not complete, so only the clock closes them)."""
    if workload.windowed:
        engine.advance_time(T0 + STEP * n + 2 * WINDOW)
    engine.checkpoint()  # the durable sink's outputs are written at a checkpoint
    return len(engine.outputs(SUBSCRIPTION))


def run_engine_process(workload: Workload, variant: Variant, n: int) -> tuple[float, int]:
    events = make_events(workload.keys, n)
    with tempfile.TemporaryDirectory(prefix="reaqtive-keyed-") as folder, \
            open_engine(workload, variant, Path(folder)) as engine:
        for start in range(0, n, 10_000):
            engine.append_many(STREAM, dated(events, start, min(n, start + 10_000)))
        started = CLOCK()
        delivered = engine.process()
        seconds = CLOCK() - started
        if delivered != n:
            raise AssertionError(f"process() delivered {delivered} events, expected {n}")
        return seconds, engine_outputs(engine, workload, n)


def run_engine_end_to_end(workload: Workload, variant: Variant, n: int) -> tuple[float, int]:
    events = make_events(workload.keys, n)
    periodic = variant.kind == "e2e"
    with tempfile.TemporaryDirectory(prefix="reaqtive-keyed-") as folder, \
            open_engine(workload, variant, Path(folder)) as engine:
        started, last_checkpoint = CLOCK(), time.perf_counter()
        for start in range(0, n, CHUNK):
            engine.extend(STREAM, dated(events, start, min(n, start + CHUNK)))
            engine.process()
            if periodic and time.perf_counter() - last_checkpoint >= CHECKPOINT_SECONDS:
                engine.checkpoint()
                last_checkpoint = time.perf_counter()  # 0.5 s of processing between checkpoints
        engine.checkpoint()
        seconds = CLOCK() - started
        return seconds, engine_outputs(engine, workload, n)


# -- Bytewax -------------------------------------------------------------------------------------------------------

def bytewax_key(event: tuple[int, int]) -> str:
    return str(key_of(event))  # Bytewax keys are strings


def bytewax_time(item: tuple[int, tuple[int, int]]) -> datetime:
    return T0 + STEP * item[0]


def bytewax_tally() -> tuple[int, int]:
    return EMPTY_TALLY


def bytewax_add(tally: tuple[int, int], item: tuple[int, tuple[int, int]]) -> tuple[int, int]:
    return add_to_tally(tally, item[1])


def bytewax_merge(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return a[0] + b[0], a[1] + b[1]


def no_wake_up(_: datetime) -> None:
    """Bytewax's ``EventClock(to_system_utc=...)``: never wake up at a system time to close windows. The default
    maps a window's close time to the same system time, which for events dated before the wall clock is always
    past, so every activation wakes every key (at 100,000 keys about 10x slower); windows then close on the key's
    next item or at the end of input, as the engine's event-time clock closes them on the next event."""
    return None


def frozen_system_time() -> datetime:
    """Bytewax's ``EventClock(now_getter=...)``: a system clock that stands still. A key's watermark is its latest
    event time plus the system time passed since; with the real clock, a key that waits long enough in wall time
    sees its next items as late and drops them (29 windows of 755,055 at 100,000 keys), so the count would depend on
    the machine's speed. Frozen, the watermark is the event time, as in the engine."""
    return EPOCH


def bytewax_average(window: tuple[int, tuple[int, int]]) -> float:
    return tally_average(window[1])


def bytewax_count_step(count: int | None, event: tuple[int, int]) -> tuple[int, int]:
    count = increment(0 if count is None else count, event)
    return count, count


def bytewax_flow(workload: Workload, events: list[tuple[int, int]], counter: list[int]) -> Any:
    """The workload as a Bytewax dataflow whose sink adds the number of outputs to ``counter[0]``."""
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.operators.windowing import EventClock, TumblingWindower, fold_window
    from bytewax.outputs import DynamicSink, StatelessSinkPartition
    from bytewax.testing import TestingSource

    class CountingPartition(StatelessSinkPartition[Any]):
        def write_batch(self, items: list[Any]) -> None:
            counter[0] += len(items)

    class CountingBytewaxSink(DynamicSink[Any]):
        def build(self, step_id: str, worker_index: int, worker_count: int) -> CountingPartition:
            return CountingPartition()

    flow = Dataflow(f"keyed_{workload.key}")
    if workload.windowed:
        # Items carry their index, from which the clock reads the event time (the engine's events carry theirs).
        source = op.input("events", flow, TestingSource(list(enumerate(events)), batch_size=CHUNK))
        keyed = op.key_on("key", source, lambda item: bytewax_key(item[1]))
        clock = EventClock(bytewax_time, wait_for_system_duration=timedelta(0), now_getter=frozen_system_time,
                           to_system_utc=no_wake_up)
        windows = fold_window("minute", keyed, clock, TumblingWindower(length=WINDOW, align_to=EPOCH),
                              bytewax_tally, bytewax_add, bytewax_merge)
        out = op.map_value("average", windows.down, bytewax_average)
    else:
        plain = op.input("events", flow, TestingSource(events, batch_size=CHUNK))
        out = op.stateful_map("running_count", op.key_on("key", plain, bytewax_key), bytewax_count_step)
    op.output("count", out, CountingBytewaxSink())
    return flow


def run_bytewax(workload: Workload, variant: Variant, n: int) -> tuple[float, int]:
    from bytewax.recovery import RecoveryConfig, init_db_dir
    from bytewax.testing import run_main

    counter = [0]
    flow = bytewax_flow(workload, make_events(workload.keys, n), counter)
    with tempfile.TemporaryDirectory(prefix="reaqtive-keyed-bytewax-") as folder:
        options: dict[str, Any] = {}
        if variant.kind == "bytewax-recovery":
            init_db_dir(Path(folder), 1)  # one partition: one worker
            options = {"epoch_interval": timedelta(seconds=CHECKPOINT_SECONDS),
                       "recovery_config": RecoveryConfig(Path(folder))}
        started = CLOCK()
        run_main(flow, **options)
        return CLOCK() - started, counter[0]


RUNNERS: dict[str, Callable[[Workload, Variant, int], tuple[float, int]]] = {
    "floor": run_floor,
    "library": run_library,
    "process": run_engine_process,
    "e2e": run_engine_end_to_end,
    "e2e-final": run_engine_end_to_end,
    "bytewax": run_bytewax,
    "bytewax-recovery": run_bytewax,
}


def measure_here(variant_key: str, workload_key: str, n: int) -> tuple[float, int]:
    workload = next(w for w in WORKLOADS if w.key == workload_key)
    variant = next(v for v in VARIANTS if v.key == variant_key)
    return RUNNERS[variant.kind](workload, variant, n)


def measure_in_child(variant_key: str, workload_key: str, n: int) -> tuple[float, int]:
    """One run in a fresh process of the same interpreter (no warm caches, no frozen gc, no leftovers)."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child", f"{variant_key}:{workload_key}",
               "--events", str(n), *(["--cpu-time"] if CLOCK is time.process_time else [])]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{variant_key} on ({workload_key}) failed (exit {done.returncode}):\n{done.stderr}")
    seconds, count = done.stdout.split()[-2:]
    return float(seconds), int(count)


# -- memory per key ------------------------------------------------------------------------------------------------

MEMORY_KINDS = {
    "floor": "(e) dict floor",
    "library": "(e) library, general (group_by + scan, a group per key)",
    "library-keyed": "(e) library, keyed (group_by + scan, run keyed)",
    "library-tagged": "(e) library, keyed, tagged (group_by + scan + result selector (g.key, n), run keyed)",
    "floor-window": "(d) dict floor, its open minute",
    "keyed-window": "(d) library, keyed (aggregate_by_key), its open windows",
    "rx-keyed": "(d) library, the Rx form run keyed (group_by ... window ... flat_map), per key after all events",
}
"""What ``--memory-child`` measures: per key of a running count, or per open window of the first minute."""


def memory_per_key(kind: str, keys: int, n: int) -> tuple[float, int]:
    """Bytes traced per key of the state live after ``n`` events over ``keys`` keys (the query kept open), and
    the keys. The ``*-window`` kinds stop within the first minute (``n`` at most 60,000), whose windows are all
    open: their bytes are per open window."""
    if kind.endswith("-window"):
        n = min(n, WINDOW_MS)
    events = make_events(keys, n)  # before tracing: the events and their key objects are nobody's state
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    holder: list[object] = []
    if kind == "floor":
        counts: dict[int, int] = {}
        for event in events:
            key = key_of(event)
            counts[key] = increment(counts.get(key, 0), event)
        holder.append(counts)
    elif kind == "floor-window":
        tallies: dict[int, tuple[int, int]] = {}
        for event in events:
            key = key_of(event)
            tally = tallies.get(key, EMPTY_TALLY)
            tallies[key] = (tally[0] + 1, tally[1] + value_of(event))
        holder.append(tallies)
    else:
        subject: SimpleSubject[tuple[int, int]] = SimpleSubject()
        if kind in ("library", "library-keyed", "library-tagged"):
            form = tagged_running_count if kind == "library-tagged" else general_running_count
            with keyed_execution(kind != "library"):
                holder.append(form(subject.as_query()).run(CountingSink()))
            for event in events:
                subject.on_next(event)
        else:
            scheduler = VirtualTimeScheduler(STEP, epoch=T0)
            form = keyed_minute_averages if kind == "keyed-window" else general_minute_averages
            with keyed_execution(True):
                holder.append(form(subject.as_query()).run(
                    CountingSink(), context=OperatorContext("bench://keyed", scheduler)))
            for tick, event in enumerate(events):
                scheduler.advance_to(tick)
                subject.on_next(event)
            holder.append(scheduler)
        holder.append(subject)
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    seen = len(set(key_sequence(keys, n)))
    return used / seen, seen


# -- the run and its report ---------------------------------------------------------------------------------------

def rotated(items: Sequence[Variant], by: int) -> Iterator[Variant]:
    for i in range(len(items)):
        yield items[(i + by) % len(items)]


def met(ok: bool) -> str:
    return "met" if ok else "NOT met"


@dataclass
class Plan:
    """What one run measures, and what it measured."""

    workloads: list[Workload]
    events: int
    general_events: int
    has_keyed: bool
    seconds: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    counts: dict[tuple[str, str], int] = field(default_factory=dict)

    @property
    def unavailable(self) -> set[str]:
        missing = {v.key for v in VARIANTS if not installed(v.needs)}
        if not self.has_keyed:
            missing |= {v.key for v in VARIANTS if v.form == "keyed" and v.kind in ("library", "process", "e2e")}
        return missing

    def runs(self, workload: Workload) -> list[Variant]:
        return [v for v in VARIANTS if v.applies_to(workload) and v.key not in self.unavailable]

    def size(self, workload: Workload, variant: Variant) -> int:
        if workload.key == "d100k" and not variant.keyed:
            return min(self.events, self.general_events)  # a few thousand events/s: see the module docstring
        return self.events

    def rate(self, workload: Workload, variant_key: str) -> float | None:
        values = self.seconds.get((workload.key, variant_key))
        if not values:
            return None
        variant = next(v for v in VARIANTS if v.key == variant_key)
        return self.size(workload, variant) / statistics.median(values)

    def wrong(self) -> list[tuple[Workload, Variant, int]]:
        """The cells whose output count is not the form's."""
        return [(w, v, self.size(w, v)) for w in self.workloads for v in self.runs(w)
                if (w.key, v.key) in self.counts
                and self.counts[w.key, v.key] != expected(w, v.form, self.size(w, v))]


def measure_all(plan: Plan, rounds: int, measure: Callable[[str, str, int], tuple[float, int]],
                say: Callable[[str], None]) -> None:
    started = time.perf_counter()
    for round_ in range(rounds):
        for w in plan.workloads:
            for v in rotated(plan.runs(w), round_):
                spent, count = measure(v.key, w.key, plan.size(w, v))
                plan.seconds.setdefault((w.key, v.key), []).append(spent)
                plan.counts[w.key, v.key] = count
        say(f"  round {round_ + 1}/{rounds} done ({time.perf_counter() - started:,.0f} s)")


def report_table(plan: Plan, say: Callable[[str], None]) -> None:
    shown = [v for v in VARIANTS if any(v.applies_to(w) for w in plan.workloads)]
    wrong = {(w.key, v.key) for w, v, _ in plan.wrong()}
    say("| workload | " + " | ".join(v.title for v in shown) + " |")
    say("|---|" + "---:|" * len(shown))
    for w in plan.workloads:
        cells = []
        for v in shown:
            rate = plan.rate(w, v.key)
            if not v.applies_to(w):
                cells.append("—")
            elif v.key in plan.unavailable:
                cells.append("not installed" if v.needs else "not built yet")
            elif rate is not None:
                n = plan.size(w, v)
                cells.append(f"{rate:,.0f}" + (f" ({n:,} ev)" if n != plan.events else "")
                             + (" WRONG COUNT" if (w.key, v.key) in wrong else ""))
        say(f"| {w.title} | " + " | ".join(cells) + " |")
    say("")
    say("events/s, median. keyed = the epoch-aligned forms (dict floor, aggregate_by_key, Bytewax); general = "
        "group_by and an inner query per key.")
    if not plan.has_keyed:
        say("keyed columns: reaqtive.operators.keyed_window.aggregate_by_key is not there yet")
    if "bytewax" in plan.unavailable:
        say(f"Bytewax: {INSTALL_HINT}")


def report_counts(plan: Plan, say: Callable[[str], None]) -> None:
    say("output counts (windows for (d), counts for (e)); aligned = per key, epoch-aligned minutes with an event, "
        "creation-aligned = each key's minutes counted from its first event:")
    for w in plan.workloads:
        parts = []
        for n in sorted({plan.size(w, v) for v in plan.runs(w)}):
            keys = key_sequence(w.keys, n)
            parts.append(f"{n:,} events: aligned {expected(w, 'keyed', n):,}"
                         + (f", creation-aligned {creation_windows(keys, n):,}" if w.windowed else ""))
        say(f"  {w.key}: expected " + "; ".join(parts))
        say("      measured: " + ", ".join(f"{v.title} {plan.counts[w.key, v.key]:,}" for v in plan.runs(w)
                                             if (w.key, v.key) in plan.counts))
    for w, v, n in plan.wrong():
        say(f"  WRONG: {v.title} on {w.key} produced {plan.counts[w.key, v.key]:,}, expected "
            f"{expected(w, v.form, n):,}")


def report_ratios(plan: Plan, say: Callable[[str], None]) -> None:
    say("ratios, reaqtive's rate / Bytewax's (issue 17 targets: library >= 3x, engine >= 2x Bytewax; (e) with a "
        "checkpoint every 0.5 s <= 1.25x the time without):")
    for w in plan.workloads:
        bytewax = plan.rate(w, "bytewax")
        if bytewax is None:
            say(f"  {w.key}: Bytewax not measured")
            continue
        parts = []
        for v in plan.runs(w):
            rate = plan.rate(w, v.key)
            if rate is not None and v.kind in ("library", "process", "e2e", "e2e-final"):
                target = 3.0 if v.kind == "library" else 2.0
                parts.append(f"{v.title} {rate / bytewax:.2f}x ({met(rate / bytewax >= target)})")
        say(f"  {w.key}: " + "; ".join(parts))
        rx = plan.rate(w, "library-rx-keyed")
        if rx is not None:
            say(f"  {w.key}: issue 32, the Rx form run keyed (library) is {rx / bytewax:.2f}x Bytewax (target >= 10x: "
                f"{met(rx / bytewax >= 10.0)})")
        periodic, final, recovery = (plan.rate(w, k) for k in ("e2e-keyed", "e2e-final", "bytewax-recovery"))
        if periodic is not None and final is not None:
            line = (f"  {w.key}: a checkpoint every 0.5 s makes the engine end to end {final / periodic:.2f}x slower "
                    f"than one final checkpoint ({met(final / periodic <= 1.25)})")
            if recovery is not None:
                line += (f"; Bytewax with recovery is {bytewax / recovery:.2f}x slower than without, and the engine "
                         f"end to end runs at {periodic / recovery:.2f}x its rate")
            say(line)


def report_summary(plan: Plan, say: Callable[[str], None]) -> None:
    """Issue 17's table: reaqtive's best form per workload (keyed where there is one) beside the floor and
    Bytewax, and the (e) row with a checkpoint every 0.5 s."""
    say("summary (issue 17's table; reaqtive's keyed form where it has one, else the general form; x = rate / "
        "Bytewax's, in the checkpoint row Bytewax's with recovery on):")
    say("| workload | dict floor | reaqtive library | engine process() | engine end to end | Bytewax 0.21 |")
    say("|---|---:|---:|---:|---:|---:|")

    def cell(w: Workload, keys: Sequence[str], bytewax: float | None) -> str:
        for key in keys:
            rate = plan.rate(w, key)
            if rate is not None:
                variant = next(v for v in VARIANTS if v.key == key)
                n = plan.size(w, variant)
                return (f"{rate:,.0f}" + (f" ({n:,} ev)" if n != plan.events else "")
                        + (f" x{rate / bytewax:.2f}" if bytewax else ""))
        return "—"

    for w in plan.workloads:
        bytewax = plan.rate(w, "bytewax")
        e2e = ("e2e-final",) if not w.windowed else ("e2e-keyed", "e2e-general")  # (e): checkpoints in the next row
        say(f"| {w.title} | {cell(w, ('floor',), None)} | {cell(w, ('library-keyed', 'library-general'), bytewax)} "
            f"| {cell(w, ('process-keyed', 'process-general'), bytewax)} | {cell(w, e2e, bytewax)} "
            f"| {cell(w, ('bytewax',), None)} |")
        if not w.windowed:
            recovery = plan.rate(w, "bytewax-recovery")
            say(f"| {w.title}, a checkpoint every 0.5 s | — | — | — | {cell(w, ('e2e-keyed',), recovery)} "
                f"| {cell(w, ('bytewax-recovery',), None)} (recovery on) |")


def report_memory(plan: Plan, in_process: bool, say: Callable[[str], None]) -> dict[str, float]:
    """Measure and print the memory per key (per window); returns it by kind."""
    kinds = []
    if any(w.key == "e" for w in plan.workloads):
        kinds += ["floor", "library-keyed", "library-tagged", "library"]
    if any(w.key == "d100k" for w in plan.workloads) and plan.has_keyed:
        kinds += ["floor-window", "keyed-window", "rx-keyed"]
    measured: dict[str, float] = {}
    if not kinds:
        return measured
    say("memory over 100,000 keys (tracemalloc, the query live; the key objects belong to the events and are not "
        "counted): (e) per key after all events, issue 17 target <= 400 B; (d) per open window in the first minute:")
    for kind in kinds:
        if in_process:
            per_key, seen = memory_per_key(kind, 100_000, plan.events)
        else:
            command = [sys.executable, str(Path(__file__).resolve()), "--memory-child", kind, "--events",
                       str(plan.events)]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            text, seen_text = done.stdout.split()[-2:]
            per_key, seen = float(text), int(seen_text)
        unit = "window" if kind.endswith("-window") else "key"
        target = " (issue 32 target <= 400 B)" if kind == "rx-keyed" else ""
        say(f"  {MEMORY_KINDS[kind]}: {per_key:,.0f} B/{unit}{target} "
            f"({seen:,} {'windows' if kind.endswith('-window') else 'keys'})")
        measured[kind] = per_key
    return measured


def report_tagged(plan: Plan, memory: dict[str, float], say: Callable[[str], None]) -> None:
    """Issue 32's target for (e) with a result selector: within 1.2x of the untagged keyed form (time), library
    and engine, and <= 400 B per key."""
    e = next((w for w in plan.workloads if w.key == "e"), None)
    if e is None:
        return
    parts = []
    for title, untagged, tagged in (("library", "library-keyed", "library-tagged"),
                                    ("engine process()", "process-keyed", "process-tagged")):
        plain, selected = plan.rate(e, untagged), plan.rate(e, tagged)
        if plain is not None and selected is not None:
            parts.append(f"{title} {selected:,.0f} vs {plain:,.0f} events/s, {plain / selected:.2f}x the time "
                         f"({met(plain / selected <= 1.2)})")
    if "library-tagged" in memory:
        per_key = memory["library-tagged"]
        parts.append(f"{per_key:,.0f} B/key ({met(per_key <= 400)}; untagged "
                     f"{memory.get('library-keyed', float('nan')):,.0f} B/key)")
    if parts:
        say("(e) tagged, with a result selector (issue 32 targets: within 1.2x of the untagged keyed form, "
            "<= 400 B/key): " + "; ".join(parts))


# -- recovery of a million keys -------------------------------------------------------------------------------------

def recovery(keys: int) -> tuple[float, float, int]:
    """An engine holding ``keys`` running counts of (e)'s query (keyed; one event per key, checkpointed, closed):
    the seconds to build it, the seconds ``Engine(path)`` takes to open and recover it, and the store's bytes.
    After the timed open, one more event of key 0 must give its count 2 (the recovered state is the real one)."""
    with tempfile.TemporaryDirectory(prefix="reaqtive-keyed-") as folder:
        path = Path(folder)
        e = next(w for w in WORKLOADS if w.key == "e")
        started = time.perf_counter()
        with open_engine(e, next(v for v in VARIANTS if v.key == "process-keyed"), path) as engine:
            for start in range(0, keys, 100_000):
                engine.append_many(STREAM, [((k, 0), T0 + STEP * k) for k in range(start, min(keys, start + 100_000))])
                engine.process()
            engine.checkpoint()
        built = time.perf_counter() - started
        size = sum(f.stat().st_size for f in path.iterdir())
        gc.collect()
        started = time.perf_counter()
        engine = Engine(path / "k.db", synchronous="NORMAL", functions=engine_functions())
        opened = time.perf_counter() - started
        with engine:
            before = len(engine.outputs(SUBSCRIPTION))
            engine.append_many(STREAM, [((0, 0), T0 + STEP * keys)])
            engine.process()
            engine.checkpoint()
            last = engine.outputs(SUBSCRIPTION)[before:]
            if [output.value for output in last] != [2]:
                raise AssertionError(f"after recovery, key 0's next count is {last!r}, not 2")
        return built, opened, size


def engine_functions() -> FunctionRegistry:
    registry = FunctionRegistry()
    for name, function in FUNCTIONS.items():
        registry.register(name, function)  # an engine names functions, never imports them
    return registry


def report_recovery(keys: int, say: Callable[[str], None]) -> None:
    built, opened, size = recovery(keys)
    say(f"recovery: an engine holding {keys:,} keyed running counts ((e)'s query, one event per key, built and "
        f"checkpointed in {built:,.1f} s): store {size / 1e6:,.1f} MB; open + recover {opened:,.2f} s (issue 17 "
        f"target <= 5 s: {met(opened <= 5.0)})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/keyed.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000, help="events per run (default 1,000,000)")
    parser.add_argument("--general-events", type=int, default=100_000,
                        help="events per run of the general form over 100,000 keys (default 100,000)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="interleaved rounds; cells are medians (default 1: a round takes ~7 minutes on 2 cores)")
    parser.add_argument("--only", default="", help="workloads to run, e.g. 'd1k,e' (default: all)")
    parser.add_argument("--no-subprocess", action="store_true",
                        help="measure in this process (a quick look: warm imports and the other columns' garbage "
                             "colour the figures)")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory per key")
    parser.add_argument("--recovery-keys", type=int, default=1_000_000,
                        help="keys of the recovery measurement, with (e) (default 1,000,000; 0 skips it)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time each measurement in CPU seconds of its process (all its threads), not wall time: "
                             "on a shared machine, other processes' load then slows it less (caches still suffer)")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # VARIANT:WORKLOAD, one run, prints seconds and count
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)  # one of MEMORY_KINDS
    args = parser.parse_args(argv)
    global CLOCK  # noqa: PLW0603  (the measurements' clock, set once from the command line)
    if args.cpu_time:
        CLOCK = time.process_time

    if args.child:
        variant_key, workload_key = args.child.split(":")
        seconds, count = measure_here(variant_key, workload_key, args.events)
        print(f"{seconds:.9f} {count}")
        return 0
    if args.memory_child:
        per_key, seen = memory_per_key(args.memory_child, 100_000, args.events)
        print(f"{per_key:.1f} {seen}")
        return 0

    def say(line: str) -> None:
        print(line, flush=True)

    wanted = {k for k in args.only.replace(" ", "").split(",") if k}
    workloads = [w for w in WORKLOADS if not wanted or w.key in wanted]
    if not workloads or wanted - {w.key for w in WORKLOADS}:
        parser.error(f"--only takes workloads among {', '.join(w.key for w in WORKLOADS)}, got {args.only!r}")
    plan = Plan(workloads, args.events, args.general_events, keyed_available())

    versions = ", ".join(f"{name} {importlib.metadata.version(name)}" for name in ("bytewax",) if installed(name))
    say(f"keyed workloads (issue 17): Python {sys.version.split()[0]}" + (f", {versions}" if versions else ""))
    say(f"{args.events:,} events per run ({min(args.events, args.general_events):,} for the general form over "
        f"100,000 keys), median of {args.rounds} interleaved rounds, "
        + ("in this process (--no-subprocess)" if args.no_subprocess else "each measurement in a fresh process")
        + (", CPU time (--cpu-time)" if args.cpu_time else ""))
    measure_all(plan, args.rounds, measure_here if args.no_subprocess else measure_in_child, say)
    say("")
    report_table(plan, say)
    say("")
    report_counts(plan, say)
    say("")
    report_ratios(plan, say)
    say("")
    report_summary(plan, say)
    memory: dict[str, float] = {}
    if not args.no_memory:
        say("")
        memory = report_memory(plan, args.no_subprocess, say)
    say("")
    report_tagged(plan, memory, say)
    if args.recovery_keys and any(w.key == "e" for w in workloads):
        say("")
        report_recovery(args.recovery_keys, say)
    return 1 if plan.wrong() else 0


if __name__ == "__main__":
    sys.exit(main())
