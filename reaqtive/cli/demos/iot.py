"""The IoT demo behind ``reaqtive demo``: sensors, standing queries, a ``kill -9`` and a recovery that loses nothing.

Ten temperature sensors report (every two seconds on average) into a durable stream of an
:class:`~reaqtive.engine.Engine`. Four standing queries read it (see :func:`queries`): each sensor's one-minute
average when it is above a threshold (``group_by`` + a time ``buffer`` per sensor), the readings per sensor in
five-minute windows (``window`` + ``aggregate``), an alert per critical reading, and the fleet's peak per ten
minutes. The engine's clock is event time, so the time windows close at the same instants whenever the input is
replayed.

The demo runs the engine in a **child process** (``python -m reaqtive.cli.demos.iot worker STORE``), twice:

1. a reference run that is never disturbed;
2. a run that the demo kills with ``SIGKILL`` partway (after some periodic checkpoints, while events flow), then
   restarts: the new process opens the same store, recovers every query with its checkpointed state, replays the
   durable input after the checkpoint and finishes.

It then compares the two durable sinks (the engine's egress table) output by output and exits with 0 only if they
are equal. The worker is deterministic: reading ``i`` is a pure function of ``i``, and a restarted worker resumes
producing at the count of readings the store says were appended.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence, Sized
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any, Final

from reaqtive.engine import Engine, EngineStore
from reaqtive.fluent.query import InnerStream, Query

__all__ = [
    "DemoConfig", "DemoError", "DemoReport", "RunStats", "durable_outputs", "main", "queries", "reading",
    "report_lines", "run_demo",
]

T0: Final = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
SENSORS: Final = 10
STEP: Final = timedelta(milliseconds=200)  # one reading every 200 ms: each sensor every 2 s
STREAM: Final = "iot://readings"
THRESHOLD: Final = 30.0  # a one-minute average above this is reported
CRITICAL: Final = 45.0  # a single reading above this raises an alert
BATCH: Final = 250  # at most this many readings per append (one transaction) and per processing step

# -- the input: reading i is a pure function of i ----------------------------------------------------------------


def _mix(i: int) -> int:
    """A cheap, well-spread 32-bit hash of ``i``."""
    h = (i * 0x9E3779B1 + 0x632BE5AB) & 0xFFFFFFFF
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    return h


def reading(i: int) -> tuple[dict[str, Any], datetime]:
    """Reading ``i`` and its event time: one reading every :data:`STEP` from a sensor picked at random (each sensor
    reports every 2 s on average); ``s03`` heats up for 25 minutes of every 90 and ``s07`` has rare spikes, so that
    every query has something to say."""
    h = _mix(i)
    sensor = (h >> 24) % SENSORS
    when = T0 + STEP * i
    phase = (when - T0) / timedelta(minutes=1) % 90
    temperature = 19.0 + sensor * 0.7 + ((h & 0xFF) - 128) / 40  # about ±3.2 of noise
    if sensor == 3 and 20 <= phase < 45:
        temperature += 16.0 * (1 - abs(phase - 32.5) / 12.5)  # a slow excursion to about +16, every 90 minutes
    if sensor == 7 and (h >> 8) % 97 == 0:
        temperature += 30.0  # a spike
    return {"sensor": f"s{sensor:02d}", "celsius": round(temperature, 2)}, when


# -- the functions the queries use (module level: persisted by import path) ------------------------------------


def sensor_of(reading: dict[str, Any]) -> str:
    """The sensor id of a reading (the group key)."""
    return str(reading["sensor"])


def celsius_of(reading: dict[str, Any]) -> float:
    """The temperature of a reading."""
    return float(reading["celsius"])


def nonempty(items: Sized) -> bool:
    """A time buffer or a window's tally that received something."""
    return bool(items)


def minute_summary(readings: list[dict[str, Any]]) -> dict[str, Any]:
    """One sensor's minute: its id, how many readings, their average."""
    values = [celsius_of(r) for r in readings]
    return {"sensor": sensor_of(readings[0]), "readings": len(values), "average": round(sum(values) / len(values), 2)}


def above_threshold(summary: dict[str, Any]) -> bool:
    """A minute whose average is above :data:`THRESHOLD`."""
    return float(summary["average"]) > THRESHOLD


def hot_minutes(group: InnerStream[dict[str, Any]]) -> Query[dict[str, Any]]:
    """The per-sensor query of ``iot://hot-minutes``: the sensor's one-minute averages above the threshold (its
    minutes start at its first reading, when ``group_by`` opens its group)."""
    return group.buffer(timedelta(minutes=1)).filter(nonempty).map(minute_summary).filter(above_threshold)


def tally(counts: dict[str, int], reading: dict[str, Any]) -> dict[str, int]:
    """Count one more reading of its sensor (a new dict: accumulators must not mutate what was saved)."""
    updated = dict(counts)
    key = sensor_of(reading)
    updated[key] = updated.get(key, 0) + 1
    return updated


def by_sensor(counts: dict[str, int]) -> dict[str, int]:
    """The tally in sensor order."""
    return dict(sorted(counts.items()))


def readings_per_sensor(window: InnerStream[dict[str, Any]]) -> Query[dict[str, int]]:
    """The per-window query of ``iot://counts``: readings per sensor when the window closes (if it had any)."""
    empty: dict[str, int] = {}
    return window.aggregate(tally, empty, by_sensor).filter(nonempty)


def is_critical(reading: dict[str, Any]) -> bool:
    """A single reading above :data:`CRITICAL`."""
    return celsius_of(reading) > CRITICAL


def alert(reading: dict[str, Any]) -> str:
    """The alert text of a critical reading."""
    return f"ALERT {sensor_of(reading)} at {celsius_of(reading):.1f} C"


def peak(values: list[float]) -> float:
    """The highest value of a (non-empty) buffer."""
    return max(values)


def queries() -> list[tuple[str, str, Query[Any]]]:
    """The standing queries: ``(uri, description, query)``, in creation order."""
    readings: Query[dict[str, Any]] = Query.stream(STREAM)
    return [
        ("iot://hot-minutes", f"per sensor, 1-minute average above {THRESHOLD:g} C (group_by + time buffer)",
         readings.group_by(sensor_of).flat_map(hot_minutes)),
        ("iot://counts", "readings per sensor per 5 minutes (time window + aggregate)",
         readings.window(timedelta(minutes=5)).flat_map(readings_per_sensor)),
        ("iot://alerts", f"an alert per reading above {CRITICAL:g} C (filter + map)",
         readings.filter(is_critical).map(alert)),
        ("iot://fleet-peak", "the fleet's peak per 10 minutes (map + time buffer)",
         readings.map(celsius_of).buffer(timedelta(minutes=10)).filter(nonempty).map(peak)),
    ]


# -- the worker: one engine process ----------------------------------------------------------------------------


class Worker:
    """One run of the engine process on ``store``: recover (or set up), then produce and process ``events``
    readings, reporting progress as JSON lines on ``out``."""

    def __init__(self, store: Path, events: int, every: int, out: IO[str]) -> None:
        self.store = store
        self.events = events
        self.every = every
        self.out = out
        # Appended and processed in steps that divide the checkpoint interval, so that every periodic checkpoint
        # falls at the end of a step and the count reported with it is the count it covers.
        self.batch = math.gcd(every, BATCH)

    def say(self, kind: str, **fields: Any) -> None:
        """One JSON line for the parent."""
        self.out.write(json.dumps({"kind": kind, **fields}) + "\n")
        self.out.flush()

    def run(self) -> None:
        """Open (recovering), set up what is missing, produce and process to the end, close."""
        opened = time.perf_counter()
        # The queries name this module's functions by import path: the engine must allow the module to load them.
        engine = Engine(self.store, allow_modules=["reaqtive.cli.demos.iot"], checkpoint_every_events=self.every,
                        synchronous="NORMAL")
        try:
            uris = {info.uri for info in engine.artifacts()}
            recovered = bool(uris)
            self.say(
                "opened",
                recovered=recovered,
                seconds=time.perf_counter() - opened,
                recovery_seconds=engine.recovery.phases.get("total", 0.0),
                subscriptions=engine.recovery.subscriptions,
                inner=engine.recovery.inner_subscriptions,
                processed=_processed(engine),
                appended=_appended(engine),
                failures=[f.uri for f in engine.recovery.failures],
            )
            self._setup(engine, uris)
            self._loop(engine)
            engine.advance_time(T0 + STEP * self.events + timedelta(minutes=10))  # close the last windows
            self.say("done", processed=_processed(engine))
        finally:
            engine.close()

    def _setup(self, engine: Engine, uris: set[str]) -> None:
        # A fresh engine's clock starts at the epoch: move it to the input's start so that the time windows the
        # queries open at creation are aligned on it (a no-op after a recovery, whose clock is restored).
        engine.advance_time(T0)
        if STREAM not in uris:
            engine.create_stream(STREAM)
        for uri, _, query in queries():
            if uri not in uris:
                engine.create_subscription(uri, query)

    def _loop(self, engine: Engine) -> None:
        last = engine.last_checkpoint
        while True:
            appended = _appended(engine)
            if appended < self.events:
                stop = min(self.events, appended + self.batch)
                engine.append_many(STREAM, [reading(i) for i in range(appended, stop)])
            if not engine.process(max_events=self.batch):
                return
            metrics = engine.last_checkpoint
            if metrics is not None and metrics is not last:
                last = metrics
                self.say("checkpoint", id=metrics.checkpoint_id, processed=_processed(engine),
                         pause_ms=metrics.pause_seconds * 1e3, commit_ms=metrics.commit_seconds * 1e3,
                         bytes=metrics.bytes_written, dirty=metrics.dirty_subscriptions)
            self.say("progress", processed=_processed(engine))


def _processed(engine: Engine) -> int:
    return sum(status.delivered + 1 for status in engine.streams().values())


def _appended(engine: Engine) -> int:
    return sum(status.appended for status in engine.streams().values())


# -- the demo: the parent process ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DemoConfig:
    """What the demo runs: ``events`` readings, a checkpoint every ``every`` events, the kill once a fraction
    ``crash_at`` of the events was processed (and at least two checkpoints were taken; ``None``: a random fraction
    between 0.4 and 0.7); the stores go to ``store_dir`` (a temporary directory, removed at the end, if ``None``)."""

    events: int = 100_000
    every: int = 2_000
    crash_at: float | None = None
    store_dir: Path | None = None


@dataclass
class RunStats:
    """What one worker process reported."""

    processed: int = 0
    checkpoints: int = 0
    covered: int = 0
    """Events the last checkpoint covered."""
    pause_ms: list[float] = field(default_factory=list)
    commit_ms: list[float] = field(default_factory=list)


@dataclass
class DemoReport:
    """What the demo found."""

    events: int = 0
    reference: RunStats = field(default_factory=RunStats)
    before_crash: RunStats = field(default_factory=RunStats)
    after_restart: RunStats = field(default_factory=RunStats)
    killed_at: int = 0
    """Events processed when the demo sent the kill (the process went on a little until the signal landed)."""
    resumed_at: int = 0
    """Events the recovered state covered (the last committed checkpoint)."""
    replayed: int = 0
    """Events the restarted engine found in the durable log after its watermark."""
    recovery_seconds: float = 0.0
    open_seconds: float = 0.0
    recovered_subscriptions: int = 0
    recovered_inner: int = 0
    reference_outputs: dict[str, int] = field(default_factory=dict)
    recovered_outputs: dict[str, int] = field(default_factory=dict)
    differences: list[str] = field(default_factory=list)
    seconds: float = 0.0
    kept: Path | None = None
    """Where the stores were kept (``DemoConfig.store_dir``); ``None``: they were in a removed directory."""

    @property
    def equal(self) -> bool:
        """The recovered run's durable sink equals the reference run's, output for output."""
        return not self.differences


class DemoError(RuntimeError):
    """A worker process failed (the message holds its exit code and the end of its error output)."""


Say = Callable[[str], object]


@contextmanager
def _worker(store: Path, config: DemoConfig) -> Iterator[subprocess.Popen[str]]:
    """A worker process on ``store`` (killed if it still runs when the block ends)."""
    command = [sys.executable, "-m", "reaqtive.cli.demos.iot", "worker", str(store),
               "--events", str(config.events), "--every", str(config.every)]
    # stderr goes to a file, not a pipe: a worker that logs a lot must never block on a pipe nobody reads
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True, bufsize=1)
        try:
            yield process
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()
        if process.returncode not in (0, -signal.SIGKILL):
            errors.seek(0)
            tail = "\n".join(errors.read().strip().splitlines()[-15:])
            raise DemoError(f"a worker on {store.name} exited with code {process.returncode}:\n{tail}")


def _watch(
    process: subprocess.Popen[str],
    label: str,
    config: DemoConfig,
    say: Say,
    stats: RunStats,
    *,
    on_message: Callable[[dict[str, Any]], bool] | None = None,
) -> None:
    """Read the worker's messages, keep ``stats`` and print a progress line every quarter of the input;
    ``on_message`` returns ``True`` to stop reading (it killed the worker)."""
    step = max(config.events // 4, 1)
    next_line = step
    finished = False
    assert process.stdout is not None
    for line in process.stdout:
        message = json.loads(line)
        kind = message["kind"]
        finished = finished or kind == "done"
        if kind == "checkpoint":
            stats.checkpoints += 1
            stats.covered = message["processed"]
            stats.pause_ms.append(message["pause_ms"])
            stats.commit_ms.append(message["commit_ms"])
        elif kind in ("opened", "progress"):
            stats.processed = message["processed"]
            if kind == "opened":
                next_line = (stats.processed // step + 1) * step
            elif stats.processed >= next_line:
                next_line = (stats.processed // step + 1) * step
                last = (f" (last: paused {stats.pause_ms[-1]:.1f} ms, committed in {stats.commit_ms[-1]:.1f} ms)"
                        if stats.pause_ms else "")
                say(f"  [{label}] {stats.processed:>9,} / {config.events:,} events, "
                    f"{stats.checkpoints} checkpoints{last}")
        if on_message is not None and on_message(message):
            return
    if process.wait() == 0 and not finished:
        raise DemoError(f"the {label} worker stopped before processing its input")
    # a worker that failed is reported, with its error output, when its ``_worker`` block ends


def _crash_run(store: Path, config: DemoConfig, report: DemoReport, say: Say) -> None:
    """Run a worker, kill it partway, run another on the same store to the end."""
    fraction = config.crash_at if config.crash_at is not None else random.uniform(0.4, 0.7)
    # Mid-way between two checkpoints, so that the restarted engine has events to replay from the durable log.
    crash_after = int(config.events * fraction) // config.every * config.every + config.every // 2
    stats = report.before_crash

    def maybe_kill(message: dict[str, Any]) -> bool:
        if message["kind"] != "progress" or stats.processed < crash_after or stats.checkpoints < 2:
            return False
        # The worker goes on while this line travels to us: the signal lands wherever the engine happens to be
        # (delivering, checkpointing, committing, appending).
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        report.killed_at = stats.processed
        say(f"  [crash run] kill -9 (SIGKILL) the engine process after ~{stats.processed:,} events; "
            f"its last checkpoint covered {stats.covered:,}")
        return True

    with _worker(store, config) as process:
        _watch(process, "crash run", config, say, stats, on_message=maybe_kill)
    if report.killed_at == 0:
        raise DemoError("the crash run ended before the demo could kill it: give it more events")

    def opened(message: dict[str, Any]) -> bool:
        if message["kind"] == "opened":
            report.resumed_at = message["processed"]
            report.replayed = message["appended"] - message["processed"]
            report.recovery_seconds = message["recovery_seconds"]
            report.open_seconds = message["seconds"]
            report.recovered_subscriptions = message["subscriptions"]
            report.recovered_inner = message["inner"]
            failed = f"; FAILED to recover: {', '.join(message['failures'])}" if message["failures"] else ""
            say(f"  [restarted] recovered {message['subscriptions']} subscriptions ({message['inner']} inner ones) "
                f"in {message['recovery_seconds'] * 1e3:.0f} ms; their state covers {message['processed']:,} "
                f"events, {report.replayed:,} more are replayed from the durable log{failed}")
        return False

    with _worker(store, config) as process:
        _watch(process, "restarted", config, say, report.after_restart, on_message=opened)


def durable_outputs(store: Path) -> dict[str, list[tuple[int, Any]]]:
    """The durable sink of a demo store: ``(seq, value)`` per subscription, in sequence order."""
    engine_store = EngineStore(store)
    try:
        rows = engine_store.read_outputs()
    finally:
        engine_store.close()
    outputs: dict[str, list[tuple[int, Any]]] = {uri: [] for uri, _, _ in queries()}
    for subscription, seq, value in rows:
        outputs.setdefault(subscription, []).append((seq, value))
    return outputs


def _compare(reference: dict[str, list[tuple[int, Any]]], recovered: dict[str, list[tuple[int, Any]]],
             report: DemoReport) -> None:
    for uri in sorted(set(reference) | set(recovered)):
        want, got = reference.get(uri, []), recovered.get(uri, [])
        report.reference_outputs[uri] = len(want)
        report.recovered_outputs[uri] = len(got)
        if want != got:
            wanted, have = {repr(o) for o in want}, {repr(o) for o in got}
            report.differences.append(
                f"{uri}: {len(want)} outputs in the reference run, {len(got)} in the crashed one "
                f"({len(wanted - have)} missing, {len(have - wanted)} unexpected)"
            )


def run_demo(config: DemoConfig | None = None, say: Say = print) -> DemoReport:
    """Run the demo (see the module docstring), printing progress through ``say``; return the report."""
    config = config or DemoConfig()
    if config.events < 4 * config.every:
        raise ValueError(f"the demo needs at least 4 checkpoints' worth of events ({4 * config.every:,})")
    started = time.perf_counter()
    report = DemoReport(events=config.events)
    with tempfile.TemporaryDirectory(prefix="reaqtive-demo-") as scratch:
        where = Path(scratch) if config.store_dir is None else config.store_dir
        where.mkdir(parents=True, exist_ok=True)
        reference, crashed = where / "reference.db", where / "crashed.db"
        for path in (reference, crashed):  # start from scratch, also in a --store directory used before
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        minutes = STEP * config.events / timedelta(minutes=1)
        say(f"reaqtive demo: {SENSORS} sensors, {config.events:,} readings ({minutes:,.0f} minutes of event time) "
            f"into the durable stream {STREAM}; {len(queries())} standing queries; "
            f"a checkpoint every {config.every:,} events")
        for uri, description, _ in queries():
            say(f"  {uri:<18} {description}")
        say(f"stores: {where}")
        say("1. reference run, never disturbed")
        with _worker(reference, config) as process:
            _watch(process, "reference", config, say, report.reference)
        say("2. crash run: the engine process is killed partway, restarted, recovers and finishes")
        _crash_run(crashed, config, report, say)
        say("3. compare the two durable sinks")
        _compare(durable_outputs(reference), durable_outputs(crashed), report)
        report.seconds = time.perf_counter() - started
        report.kept = config.store_dir
    for line in report_lines(report):
        say(line)
    return report


def report_lines(report: DemoReport) -> list[str]:
    """The closing report."""
    pauses = sorted(report.reference.pause_ms)
    commits = sorted(report.reference.commit_ms)
    lines = [
        "",
        "report",
        f"  events             {report.events:,} sensor readings",
        f"  standing queries   {len(report.reference_outputs)}",
        f"  checkpoints        reference run {report.reference.checkpoints}; crash run "
        f"{report.before_crash.checkpoints} before the kill, {report.after_restart.checkpoints} after the restart",
    ]
    if pauses:
        lines.append(f"  checkpoint cost    pause median {pauses[len(pauses) // 2]:.1f} ms (max {pauses[-1]:.1f}), "
                     f"commit median {commits[len(commits) // 2]:.1f} ms (reference run)")
    lines += [
        f"  crash              SIGKILL after ~{report.killed_at:,} events; state recovered as of "
        f"{report.resumed_at:,}, {report.replayed:,} events replayed from the durable log",
        f"  recovery           {report.recovered_subscriptions} subscriptions + {report.recovered_inner} inner "
        f"in {report.recovery_seconds * 1e3:.0f} ms (engine open {report.open_seconds * 1e3:.0f} ms)",
        "  outputs per query  reference run / crashed and recovered run",
    ]
    lines += [f"    {uri:<18} {count:>7,} / {report.recovered_outputs.get(uri, 0):,}"
              for uri, count in report.reference_outputs.items()]
    lines.append(f"  time               {report.seconds:.1f} s")
    lines += [f"  DIFFERENT          {difference}" for difference in report.differences]
    if report.kept is not None:
        lines += ["", f"the stores are kept in {report.kept}; look inside the recovered one:",
                  *(f"  {command}" for command in inspect_commands(report.kept / "crashed.db")), ""]
    lines.append(
        "recovered results EQUAL the uncrashed run: nothing lost, nothing twice" if report.equal
        else "recovered results DIFFER from the uncrashed run"
    )
    return lines


def inspect_commands(store: Path) -> list[str]:
    """The ``reaqtive inspect`` commands that show a demo store: the summary, then one query's outputs, state
    and graph."""
    where = shlex.quote(str(store))
    uri = shlex.quote(queries()[0][0])
    options = ("--outputs", "--state", "--graph")
    return [f"reaqtive inspect {where}", *(f"reaqtive inspect {where} {option} {uri}" for option in options)]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m reaqtive.cli.demos.iot worker STORE [--events N] [--every N]``: one engine process of the demo."""
    parser = argparse.ArgumentParser(prog="python -m reaqtive.cli.demos.iot")
    commands = parser.add_subparsers(dest="command", required=True)
    worker = commands.add_parser("worker", help="run one engine process on STORE (the demo starts these)")
    worker.add_argument("store", type=Path)
    worker.add_argument("--events", type=int, default=DemoConfig.events)
    worker.add_argument("--every", type=int, default=DemoConfig.every)
    args = parser.parse_args(argv)
    Worker(args.store, args.events, args.every, sys.stdout).run()
    return 0


if __name__ == "__main__":
    # Run with ``-m``, this module is ``__main__``: re-import it under its package name, so that the functions
    # the queries use are persisted as ``reaqtive.cli.demos.iot:...``, the path a restarted process imports.
    from reaqtive.cli.demos import iot  # noqa: PLW0406

    sys.exit(iot.main())
