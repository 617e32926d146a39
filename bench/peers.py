"""reaqtive beside its peers (issue 15): the three workloads of ``bench/operators.py`` on a plain callback loop, on
reaqtive's library and engine, on Bytewax 0.21 and on RxPY, measured in one run, one table.

Run: .venv/bin/python bench/peers.py [--events N] [--engine-events E] [--rounds K] [--only a,b] [--no-subprocess]
[--bytewax-recovery] [--cpu-time] [--against DIR]

The peers are optional (``pip install -e .[peers]``), never dependencies of reaqtive: a column whose package is
missing says so. Workloads (``bench/_workloads.py``): (a) ``map(x*2) -> filter(x%3==0) -> scan(sum)``,
(b) ``group_by(x%100) -> running count per group``, (c) ``buffer(100) -> map(sum)``, over the ints ``0..n-1``.

Columns (each checks its output count against the workload's, so a wrong result never passes as fast):

* ``loop + callbacks``: a plain loop calling the same user functions (``bench/operators.py``'s fair reference).
* ``reaqtive library run()``: ``workload.query(n).run(CountingSink())``, standalone, unbounded demand.
* ``reaqtive engine process()``: an :class:`~reaqtive.engine.Engine` (``synchronous="NORMAL"``) hosting the same
  pipeline over ``Query.stream("s")`` into the durable sink, its functions registered by name. All events are
  appended first (untimed); only ``engine.process()`` is timed. The durable sink's outputs are buffered by
  ``process()`` and written at the next checkpoint, so their write is outside this column (it is in the next).
* ``reaqtive engine end to end``: the same engine from an empty stream: per chunk of 1,000 events an append
  (``engine.extend`` when the engine has it, else ``append_many``) and a ``process()``, a ``checkpoint()``
  whenever 0.5 s passed since the last one, and a final checkpoint, all timed (opening the engine, creating
  the subscription and building the dated events are not: Bytewax too is handed its input ready-made).
* ``Bytewax 0.21 (batch 1000)``: ``TestingSource(range(n), batch_size=1000)`` into a counting sink, run with
  ``bytewax.testing.run_main`` (one worker, no recovery). The closest faithful forms: (a) ``op.map``,
  ``op.filter``, then ``op.key_on`` one constant key and ``op.stateful_map`` for the running sum (Bytewax keeps
  state only per key); (b) ``op.key_on(str(x % 100))`` (keys must be strings) and ``op.stateful_map`` for the
  running count; (c) ``op.key_on`` one constant key, ``op.collect(max_size=100, timeout=1 h)`` (a count-or-time
  buffer that reads the clock per item; it flushes the rest at the end of input) and ``op.map_value(sum)``. With
  ``--bytewax-recovery`` an extra column runs the same flows with SQLite recovery on (``init_db_dir``, one
  partition, an epoch, i.e. a snapshot, every 0.5 s like the engine's checkpoints).
* ``RxPY``: ``bench/operators.py``'s ``reactivex`` pipelines (no state to save: the fast and forgetful floor).

Measurement (wall time, or with ``--cpu-time`` each measuring process's CPU time: on a shared machine other
processes' load then slows a column less, caches still suffer): K rounds; in each, every workload runs every
variant once, round robin (the variant order rotated per round) so that drift of the machine hits all alike; each
measurement in a fresh process (this script, run by the same interpreter with ``--child``, printing its seconds).
Cells are the median. The engine columns run ``--engine-events`` events (default 200,000: 1,000,000 events x 5
rounds x 3 workloads of the end-to-end column would take many minutes; the default run takes 3-5 minutes on 2
cores); rates compare as events per second.

``--against DIR`` (another checkout, e.g. a worktree of main) measures the reaqtive columns of that checkout too,
with its own ``bench/peers.py`` and ``PYTHONPATH=DIR``, each run right beside this checkout's (which of the two
goes first alternates per round), and prints its rates and the targets of both, with the load average: a
before/after from one run on a shared machine.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _workloads import WORKLOADS, CountingSink, Workload, divisible_by_3, double, increment, mod_100

from reaqtive import Query
from reaqtive.engine import DURABLE_SINK, Engine, FunctionRegistry

T0 = datetime(2026, 1, 1, tzinfo=UTC)
STREAM = "s"
SUBSCRIPTION = "q"
CHUNK = 1_000  # events per append in the end-to-end run (and Bytewax's batch size)
CHECKPOINT_SECONDS = 0.5
CLOCK: Callable[[], float] = time.perf_counter
"""What a measurement's seconds are read from: wall time, or (``--cpu-time``) the measuring process's CPU time."""
INSTALL_HINT = "not installed (pip install -e .[peers])"


@dataclass(frozen=True)
class Variant:
    key: str
    title: str
    engine: bool = False
    """Runs ``--engine-events`` events instead of ``--events``."""
    needs: str | None = None
    """The importable package it needs, if any."""


VARIANTS = [
    Variant("callbacks", "loop + callbacks"),
    Variant("library", "reaqtive library `run()`"),
    Variant("process", "reaqtive engine `process()`", engine=True),
    Variant("e2e", "reaqtive engine end to end", engine=True),
    Variant("bytewax", "Bytewax 0.21 (batch 1000)", needs="bytewax"),
    Variant("bytewax-recovery", "Bytewax 0.21 + recovery", needs="bytewax"),
    Variant("rxpy", "RxPY", needs="reactivex"),
]


def installed(package: str | None) -> bool:
    return package is None or importlib.util.find_spec(package) is not None


# -- the reaqtive variants -----------------------------------------------------------------------------------------

def run_callbacks(workload: Workload, n: int) -> tuple[float, int]:
    sink = CountingSink()
    started = CLOCK()
    workload.loop_callbacks(n, sink)
    return CLOCK() - started, sink.count


def run_library(workload: Workload, n: int) -> tuple[float, int]:
    sink = CountingSink()
    started = CLOCK()
    workload.query(n).run(sink)
    return CLOCK() - started, sink.count


def open_engine(workload: Workload, folder: Path) -> Engine:
    """An engine on a new store with the workload's query subscribed to stream ``s``, into the durable sink."""
    registry = FunctionRegistry()
    for name, function in workload.functions.items():
        registry.register(name, function)  # an engine names functions, never imports them: register by name
    engine = Engine(folder / "s.db", synchronous="NORMAL", start=T0, functions=registry)
    engine.create_stream(STREAM)
    engine.create_subscription(SUBSCRIPTION, workload.pipeline(Query.stream(STREAM)), observer=DURABLE_SINK)
    return engine


def events(start: int, stop: int) -> list[tuple[int, datetime]]:
    """The ints ``start..stop-1``, each dated ``x`` microseconds after T0."""
    return [(x, T0 + timedelta(microseconds=x)) for x in range(start, stop)]


def run_engine_process(workload: Workload, n: int) -> tuple[float, int]:
    with tempfile.TemporaryDirectory(prefix="reaqtive-peers-") as folder, open_engine(workload, Path(folder)) as engine:
        for start in range(0, n, 10_000):
            engine.append_many(STREAM, events(start, min(n, start + 10_000)))
        started = CLOCK()
        delivered = engine.process()
        seconds = CLOCK() - started
        if delivered != n:
            raise AssertionError(f"process() delivered {delivered} events, expected {n}")
        return seconds, len(engine.outputs(SUBSCRIPTION))


def run_engine_end_to_end(workload: Workload, n: int) -> tuple[float, int]:
    with tempfile.TemporaryDirectory(prefix="reaqtive-peers-") as folder, open_engine(workload, Path(folder)) as engine:
        extend: Callable[[str, Any], object] = getattr(engine, "extend", None) or engine.append_many
        # The input exists before the clock starts, as Bytewax's range(n) does: building a datetime per event is
        # the bench's work, not the engine's.
        chunks = [events(start, min(n, start + CHUNK)) for start in range(0, n, CHUNK)]
        started = last_checkpoint = CLOCK()
        for chunk in chunks:
            extend(STREAM, chunk)
            engine.process()
            if CLOCK() - last_checkpoint >= CHECKPOINT_SECONDS:
                engine.checkpoint()
                last_checkpoint = CLOCK()  # 0.5 s of processing between checkpoints, not of wall time
        engine.checkpoint()
        seconds = CLOCK() - started
        return seconds, len(engine.outputs(SUBSCRIPTION))


# -- the peers -----------------------------------------------------------------------------------------------------

def run_rxpy(workload: Workload, n: int) -> tuple[float, int]:
    import reactivex  # noqa: F401  imported before the clock starts

    sink = CountingSink()
    started = CLOCK()
    workload.rxpy(n, sink)
    return CLOCK() - started, sink.count


ONE_KEY = "all"


def one_key(_: object) -> str:
    return ONE_KEY


def key_mod_100(x: int) -> str:
    return str(mod_100(x))  # Bytewax keys are strings


def sum_step(total: int | None, y: int) -> tuple[int, int]:
    """scan(0, add) as a Bytewax ``stateful_map`` mapper: (new state, output)."""
    total = y if total is None else total + y
    return total, total


def count_step(count: int | None, x: int) -> tuple[int, int]:
    """scan(0, increment) as a Bytewax ``stateful_map`` mapper."""
    count = increment(0 if count is None else count, x)
    return count, count


def bytewax_flow(workload: Workload, n: int, counter: list[int]) -> Any:
    """The workload as a Bytewax dataflow whose sink adds the number of outputs to ``counter[0]``."""
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.outputs import DynamicSink, StatelessSinkPartition
    from bytewax.testing import TestingSource

    class CountingPartition(StatelessSinkPartition[Any]):
        def write_batch(self, items: list[Any]) -> None:
            counter[0] += len(items)

    class CountingBytewaxSink(DynamicSink[Any]):
        def build(self, step_id: str, worker_index: int, worker_count: int) -> CountingPartition:
            return CountingPartition()

    flow = Dataflow(f"peers_{workload.key}")
    source = op.input("range", flow, TestingSource(range(n), batch_size=CHUNK))
    if workload.key == "a":
        kept = op.filter("divisible_by_3", op.map("double", source, double), divisible_by_3)
        out = op.stateful_map("scan_sum", op.key_on("one_key", kept, one_key), sum_step)
    elif workload.key == "b":
        out = op.stateful_map("running_count", op.key_on("mod_100", source, key_mod_100), count_step)
    elif workload.key == "c":
        buffers = op.collect("buffer_100", op.key_on("one_key", source, one_key), timedelta(hours=1), 100)
        out = op.map_value("sum", buffers, sum)
    else:
        raise ValueError(f"no Bytewax form of workload {workload.key!r}")
    op.output("count", out, CountingBytewaxSink())
    return flow


def run_bytewax(workload: Workload, n: int, recovery: bool = False) -> tuple[float, int]:
    from bytewax.recovery import RecoveryConfig, init_db_dir
    from bytewax.testing import run_main

    counter = [0]
    flow = bytewax_flow(workload, n, counter)
    with tempfile.TemporaryDirectory(prefix="reaqtive-peers-bytewax-") as folder:
        options: dict[str, Any] = {}
        if recovery:
            init_db_dir(Path(folder), 1)  # one partition: one worker
            options = {"epoch_interval": timedelta(seconds=CHECKPOINT_SECONDS),
                       "recovery_config": RecoveryConfig(Path(folder))}
        started = CLOCK()
        run_main(flow, **options)
        return CLOCK() - started, counter[0]


RUNNERS: dict[str, Callable[[Workload, int], tuple[float, int]]] = {
    "callbacks": run_callbacks,
    "library": run_library,
    "process": run_engine_process,
    "e2e": run_engine_end_to_end,
    "bytewax": run_bytewax,
    "bytewax-recovery": lambda workload, n: run_bytewax(workload, n, recovery=True),
    "rxpy": run_rxpy,
}


def measure_here(variant: str, workload_key: str, n: int) -> float:
    """Seconds of one run of ``variant`` on ``workload_key`` in this process; raises if its output count is wrong."""
    workload = next(w for w in WORKLOADS if w.key == workload_key)
    seconds, count = RUNNERS[variant](workload, n)
    if count != workload.expected(n):
        raise AssertionError(f"{variant} on ({workload_key}) produced {count:,} elements, "
                             f"expected {workload.expected(n):,}")
    return seconds


def measure_in_child(variant: str, workload_key: str, n: int, tree: Path | None = None) -> float:
    """Seconds of one run in a fresh process of the same interpreter (no warm caches, no frozen gc, no leftovers
    of the other variants); ``tree``: in that checkout (its bench script, ``PYTHONPATH`` set to it)."""
    script = Path(__file__).resolve() if tree is None else tree / "bench" / "peers.py"
    command = [sys.executable, str(script), "--child", f"{variant}:{workload_key}",
               "--events", str(n), *(["--cpu-time"] if CLOCK is time.process_time else [])]
    env = None if tree is None else {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env, cwd=tree)
    if done.returncode != 0:
        where = "" if tree is None else f" in {tree}"
        raise SystemExit(f"{variant} on ({workload_key}){where} failed (exit {done.returncode}):\n{done.stderr}")
    return float(done.stdout.split()[-1])


REAQTIVE_VARIANTS = frozenset({"library", "process", "e2e"})
"""The columns that run reaqtive (measured in both checkouts with ``--against``)."""


# -- the report ----------------------------------------------------------------------------------------------------

def rotated(items: Sequence[Variant], by: int) -> Iterator[Variant]:
    for i in range(len(items)):
        yield items[(i + by) % len(items)]


def met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def report_against(against: Path, workloads: list[Workload], rates: dict[tuple[str, str], float],
                   theirs: dict[tuple[str, str], float], say: Callable[[str], None]) -> None:
    """The reaqtive columns of the other checkout and the targets of both, side by side."""
    say("")
    say(f"against {against} (measured beside each run of this checkout):")
    say("| workload | checkout | library `run()` | engine `process()` | engine end to end | process() x library "
        "| end to end x Bytewax |")
    say("|---|---|---:|---:|---:|---:|---:|")
    for w in workloads:
        for label, table in (("against", theirs), ("this", rates)):
            lib, proc, e2e = (table[w.key, k] for k in ("library", "process", "e2e"))
            bytewax = rates.get((w.key, "bytewax"))
            versus = "n/a" if bytewax is None else f"{e2e / bytewax:.2f}x"
            say(f"| ({w.key}) | {label} | {lib:,.0f} | {proc:,.0f} | {e2e:,.0f} | x{lib / proc:.2f} | {versus} |")


def report(workloads: list[Workload], variants: list[Variant], missing: list[Variant],
           rates: dict[tuple[str, str], float], say: Callable[[str], None]) -> None:
    titles = [v.title for v in variants] + [v.title for v in missing]
    say("| workload | " + " | ".join(titles) + " |")
    say("|---|" + "---:|" * len(titles))
    for w in workloads:
        cells = [f"{rates[w.key, v.key]:,.0f}" for v in variants] + ["not installed" for _ in missing]
        say(f"| ({w.key}) {w.title} | " + " | ".join(cells) + " |")
    say("")
    say("events/s, median; ratios below compare events/s (rate of the reference / rate of the column: "
        "x2.0 = half as fast as the reference).")
    for v in {v.needs: v for v in missing}.values():
        say(f"{v.title}: {INSTALL_HINT}")

    say("")
    say("| workload | library x callbacks | process() x library | process() x callbacks "
        "| end to end x library | end to end x callbacks |")
    say("|---|---:|---:|---:|---:|---:|")
    for w in workloads:
        cb, lib, proc, e2e = (rates[w.key, k] for k in ("callbacks", "library", "process", "e2e"))
        say(f"| ({w.key}) | x{cb / lib:.2f} | x{lib / proc:.2f} | x{cb / proc:.2f} | x{lib / e2e:.2f} "
            f"| x{cb / e2e:.2f} |")

    say("")
    say("targets (issues 15, 31): process() within 1.5x of library run(); end to end >= 2x Bytewax; "
        "library (a) within 1.5x of loop + callbacks")
    has_bytewax = any(v.key == "bytewax" for v in variants)
    for w in workloads:
        lib, proc, e2e = (rates[w.key, k] for k in ("library", "process", "e2e"))
        parts = [f"process() x{lib / proc:.2f} of library ({met(lib / proc <= 1.5)})"]
        if has_bytewax:
            bytewax = rates[w.key, "bytewax"]
            parts.append(f"end to end {e2e / bytewax:.2f}x Bytewax's rate ({met(e2e / bytewax >= 2.0)})")
        else:
            parts.append(f"end to end vs Bytewax: {INSTALL_HINT}")
        if (w.key, "bytewax-recovery") in rates:
            parts.append(f"{e2e / rates[w.key, 'bytewax-recovery']:.2f}x Bytewax + recovery")
        if w.key == "a":
            cb = rates[w.key, "callbacks"]
            parts.append(f"library x{cb / lib:.2f} of loop + callbacks ({met(cb / lib <= 1.5)})")
        say(f"  ({w.key}) " + "; ".join(parts))


Seconds = dict[tuple[str, str], list[float]]


def measure_rounds(  # noqa: PLR0917  (the run's configuration)
    rounds: int, workloads: list[Workload], variants: list[Variant], size: dict[str, int],
    measure: Callable[[str, str, int], float], against: Path | None, say: Callable[[str], None],
) -> tuple[Seconds, Seconds]:
    """Every variant on every workload, ``rounds`` times, round robin; the seconds of this checkout and of
    ``against`` (its reaqtive columns, each run beside this checkout's, the first of the two alternating)."""
    seconds: Seconds = {(w.key, v.key): [] for w in workloads for v in variants}
    other: Seconds = {}
    started = time.perf_counter()
    for round_ in range(rounds):
        for w in workloads:
            for v in rotated(variants, round_):
                n = size[v.key]
                if against is None or v.key not in REAQTIVE_VARIANTS:
                    seconds[w.key, v.key].append(measure(v.key, w.key, n))
                    continue
                for mine in ((True, False) if round_ % 2 == 0 else (False, True)):
                    if mine:
                        seconds[w.key, v.key].append(measure(v.key, w.key, n))
                    else:
                        other.setdefault((w.key, v.key), []).append(measure_in_child(v.key, w.key, n, against))
        say(f"  round {round_ + 1}/{rounds} done ({time.perf_counter() - started:,.0f} s)")
    return seconds, other


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/peers.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000, help="ints per run (default 1,000,000)")
    parser.add_argument("--engine-events", type=int, default=200_000,
                        help="ints per run of the two engine columns (default 200,000)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; cells are medians (default 5)")
    parser.add_argument("--only", default="", help="workloads to run, e.g. 'a,b' (default: all)")
    parser.add_argument("--no-subprocess", action="store_true",
                        help="measure in this process (a quick look: warm imports, the engine's process-wide gc "
                             "freeze and the other variants' garbage then colour the figures)")
    parser.add_argument("--bytewax-recovery", action="store_true",
                        help="also run Bytewax with SQLite recovery on (a snapshot every 0.5 s)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="measure each run's CPU time instead of wall time (on a shared machine, other processes' "
                             "load then slows it less)")
    parser.add_argument("--against", type=Path, metavar="DIR",
                        help="also measure the reaqtive columns of the checkout DIR (e.g. a worktree of main), each "
                             "run beside this checkout's, and print both")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # VARIANT:WORKLOAD, one run, prints its seconds
    args = parser.parse_args(argv)
    global CLOCK  # noqa: PLW0603  (the measurements' clock, set once from the command line)
    if args.cpu_time:
        CLOCK = time.process_time

    if args.child:
        variant, workload_key = args.child.split(":")
        print(f"{measure_here(variant, workload_key, args.events):.9f}")
        return 0

    def say(line: str) -> None:
        print(line, flush=True)

    keys = set(args.only.replace(",", "").replace(" ", ""))
    workloads = [w for w in WORKLOADS if not keys or w.key in keys]
    if not workloads or keys - {w.key for w in WORKLOADS}:
        parser.error(f"--only takes workload keys among {', '.join(w.key for w in WORKLOADS)}, got {args.only!r}")
    wanted = [v for v in VARIANTS if v.key != "bytewax-recovery" or args.bytewax_recovery]
    variants = [v for v in wanted if installed(v.needs)]
    missing = [v for v in wanted if not installed(v.needs)]
    measure = measure_here if args.no_subprocess else measure_in_child
    against: Path | None = args.against
    if against is not None and (args.no_subprocess or not (against / "bench" / "peers.py").is_file()):
        parser.error("--against takes a checkout with bench/peers.py, measured in subprocesses (not --no-subprocess)")

    versions = ", ".join(f"{name} {importlib.metadata.version(name)}" for name in ("bytewax", "reactivex")
                         if installed(name))
    say(f"reaqtive beside its peers: Python {sys.version.split()[0]}" + (f", {versions}" if versions else ""))
    say(f"{args.events:,} ints per run ({args.engine_events:,} for the two engine columns; rates compare as "
        f"events/s), median of {args.rounds} interleaved rounds, "
        + ("in this process (--no-subprocess)" if args.no_subprocess else "each measurement in a fresh process")
        + (", CPU time (--cpu-time)" if args.cpu_time else ""))

    size = {v.key: args.engine_events if v.engine else args.events for v in variants}
    load = os.getloadavg()[0]
    seconds, other = measure_rounds(args.rounds, workloads, variants, size, measure, against, say)
    rates = {(w, v): size[v] / statistics.median(values) for (w, v), values in seconds.items()}
    say(f"load average (1 min): {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    say("")
    report(workloads, variants, missing, rates, say)
    if against is not None:
        theirs = {(w, v): size[v] / statistics.median(values) for (w, v), values in other.items()}
        report_against(against, workloads, rates, theirs, say)
    return 0


if __name__ == "__main__":
    sys.exit(main())
