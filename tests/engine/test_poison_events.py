"""Poison events across kill -9 (acceptance of issue 30): malformed events under each error policy, the failures
visible everywhere within one processing batch, and restarts after a fix.

A worker process (``poison_worker.py``) runs an engine (event clock, a checkpoint every ``EVERY`` events) whose
producer appends well-formed events and, at random (seeded), malformed ones: a field missing, a field of the wrong
type, a divisor of zero; and a few events dated in the year 2300 (quarantined at ``append``: the other kind of
dead letter). Seven queries whose user functions raise on them (a ``map`` reading a field, a ``filter`` with
arithmetic, a ``scan`` whose accumulator divides, a ``group_by`` whose key selector reads a field with a per-group
``map`` on the general path and the same in keyed execution, a keyed aggregate, a ``flat_map`` whose selector
raises) run under ``"skip"``, under ``"stop"`` (twice) and under a decision function registered by name (skip
missing fields and wrong types, stop on a division by zero). The test kills the worker at seeded moments (inside
checkpoints, between appends, right after a query failed, while it opens, in the recovery's replay, twice in a row)
and lets it finish. Then, against an **oracle** computed here in plain Python from the same input (an element is
dropped at the operator whose function raised, and only there):

* under ``"skip"``: each query's outputs (values and seqs) equal the oracle's over the elements its functions did
  not fail on, and each element that failed is exactly one dead letter (``engine.dead_letters(subscription=...)``)
  with its reason: the error type, the operator (its name, path and unit) and the log position of its event;
  the quarantined events are dead letters of their streams, once each; a cursor pages through both kinds;
* under ``"stop"`` (and the decision function's stops): the query's outputs are exactly the oracle's up to the
  first element it stopped on, and the failure shows in every place of issue 30's item 2, in the batch that
  processed that element (the worker checks them after each batch and says what it did not find):
  ``subscription_status``/``subscriptions()`` FAILED with the error type and the log position, ``engine.status``
  DEGRADED, ``engine.faults``, ``stopped_error``, ``read_engine(engine).failed``, the Prometheus families
  ``reaqtive_subscriptions{state="failed"}``, ``reaqtive_failed_subscription`` and
  ``reaqtive_subscription_user_errors_total``, the ``subscription_failed`` ERROR line with its ``extra=`` fields;
  after every kill and at the end it is still FAILED, ``reaqtive inspect --json`` shows it (SQLite: inspect reads
  files only), and ``AsyncEngine.stream_outputs`` hands out its outputs and raises ``SubscriptionFailedError``;
* ``restart_subscription`` after the engine was opened with the ``stop`` group's functions fixed (the same
  registered names) goes on with outputs equal to an oracle that never failed; ``restart_subscription(uri,
  skip_failed=True)`` with the unfixed functions gives the oracle minus the skipped element (a dead letter), and
  stops again at the next bad element (twice, with a close between).

Every difference found is collected and printed together, per subscription.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Collection
from contextlib import redirect_stdout
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import pytest

from reaqtive import FunctionRegistry, Query
from reaqtive.engine import Engine, Output, SubscriptionFailedError, SubscriptionState
from reaqtive.engine.aio import AsyncEngine
from reaqtive.engine.metrics import PrometheusMetrics
from reaqtive.scheduler.clock import EPOCH
from tests.engine import poison_worker as worker
from tests.engine.store_targets import STORES, store_sql
from tests.engine.test_crash import Kill, describe_difference

ROOT = Path(__file__).resolve().parents[2]
SEED = 30
SINGLES = (["commit"] * 3 + ["egress"] * 2 + ["committed"] * 2 + ["append"] * 2 + ["random"] * 2
           + ["recovering"] * 2 + ["recovered"])
DOUBLE = ("replay", "replay")
"""Killed twice in a row in the recovery's replay, after a kill that leaves events to replay."""
STREAK = ("recovered", "recovering", "replay")
RANDOM_KINDS = ("random", "recovering")


# -- the oracle: plain Python over the same input ---------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """An event as the log holds it: its index in the input, stream, value, time and log position."""

    i: int
    stream: str
    value: dict[str, Any]
    time: datetime
    pos: int


@dataclass(frozen=True, order=True)
class Letter:
    """A failed element, as a dead letter or a FAILED status must say it."""

    pos: int
    error_type: str
    operator: str
    unit: str
    path: str
    i: int
    """The index in the input of the event that carried the element (the element says it)."""


@dataclass
class Expected:
    """What one subscription must hold: its outputs, the elements it skipped (dead letters), and the element that
    stopped it (``None``: it did not stop)."""

    outputs: list[Any] = field(default_factory=list)
    letters: list[Letter] = field(default_factory=list)
    failure: Letter | None = None


class _StoppedError(Exception):
    pass


def logged_events() -> list[Event]:
    """The input as the log holds it: the events not quarantined at append, at log positions 1, 2, ..."""
    events, pos = [], 0
    for i in range(worker.EVENTS):
        if worker.flaw(i) == "far":
            continue  # quarantined at append: no log position
        pos += 1
        stream, value, when = worker.event(i)
        events.append(Event(i, stream, value, when, pos))
    return events


def quarantined() -> list[tuple[str, int]]:
    """The (stream, seq) of the events quarantined at append (dated in the year 2300)."""
    seqs: Counter[str] = Counter()
    found = []
    for i in range(worker.EVENTS):
        stream = worker.event(i)[0]
        if worker.flaw(i) == "far":
            found.append((stream, seqs[stream]))
        seqs[stream] += 1
    return found


LOG = logged_events()
FIXED = {name: worker.fixed(name) for name in worker.BASE}


def simulate(shape: str, uri: str, functions: dict[str, Callable[..., Any]], decide: Callable[[Exception], str],
             skip_once: Collection[int] = ()) -> Expected:
    """What subscription ``uri`` of ``shape`` computes over :data:`LOG` with ``functions`` when ``decide``
    says, per error, ``"skip"`` or ``"stop"``; the failures at the log positions in ``skip_once`` are skipped once
    whatever it says (``restart_subscription(skip_failed=True)``)."""
    expected = Expected()
    once = set(skip_once)

    def failed(error: Exception, event: Event, operator: str, unit: str = uri, path: str = "0/0") -> None:
        letter = Letter(event.pos, type(error).__name__, operator, unit, path, event.i)
        if event.pos in once:
            once.discard(event.pos)
        elif decide(error) != "skip":
            expected.failure = letter
            raise _StoppedError
        expected.letters.append(letter)

    out = expected.outputs
    f = functions
    try:
        if shape == "agg":
            _simulate_agg(uri, f, failed, out)
            return expected
        state: Any = worker.SCAN_SEED
        groups: dict[Any, list[Any]] = {}
        for event in LOG:
            value = event.value
            if shape == "flat":
                if event.stream != worker.ORDERS:
                    continue
                try:
                    items = f["copies"](value)
                except worker.USER_ERRORS as error:
                    failed(error, event, "reaqtive:flat_map")
                    continue
                out.extend(items)
                continue
            if event.stream != worker.READINGS:
                continue
            try:
                if shape == "map":
                    out.append(f["cel"](value))
                elif shape == "filter":
                    if f["heavy"](value):
                        out.append(value)
                elif shape == "scan":
                    state = f["acc"](state, value)
                    out.append(state)
                else:  # group, keyed: the key selector, then the group's own map and scan
                    key = f["sensor_of"](value)
                    group = groups.setdefault(key, [len(groups), worker.STATS_SEED])
                    unit = f"{uri}/flat_map0/{group[0]}"
                    try:
                        pair = f["pair"](value)
                    except worker.USER_ERRORS as error:
                        failed(error, event, "reaqtive:map", unit)
                        continue
                    group[1] = f["stats"](group[1], pair)
                    out.append(group[1])
            except worker.USER_ERRORS as error:
                operator = {"map": "reaqtive:map", "filter": "reaqtive:filter", "scan": "reaqtive:scan+seed"}.get(
                    shape, "reaqtive:group_by")
                failed(error, event, operator, uri, "0/0/0" if shape in ("group", "keyed") else "0/0")
    except _StoppedError:
        pass
    return expected


def _simulate_agg(uri: str, f: dict[str, Callable[..., Any]], failed: Callable[..., None], out: list[Any]) -> None:
    """``aggregate_by_key(zone, Tumbling(WINDOW), Fold(AGG_SEED, load))`` under the event clock: before each event
    (of any stream) the windows ending at or before its time close, ends in order, the windows of one end in the
    order they opened; at the end the clock goes to ``END``."""
    windows: dict[tuple[Any, datetime], Any] = {}  # in the order they opened

    def close(now: datetime) -> None:
        due = sorted((start + worker.WINDOW, n, key, start) for n, (key, start) in enumerate(windows)
                     if start + worker.WINDOW <= now)
        for end, _, key, start in due:
            out.append([key, start, end, windows.pop((key, start))])

    for event in LOG:
        close(event.time)
        if event.stream != worker.READINGS:
            continue
        try:
            key = f["zone"](event.value)
            start = EPOCH + (event.time - EPOCH) // worker.WINDOW * worker.WINDOW
            windows[(key, start)] = f["load"](windows.get((key, start), worker.AGG_SEED), event.value)
        except worker.USER_ERRORS as error:
            failed(error, event, "reaqtive:aggregate_by_key")
    close(worker.END)


def stop(error: Exception) -> str:
    return "stop"


def skip(error: Exception) -> str:
    return "skip"


def oracle(group: str, shape: str) -> Expected:
    """What subscription ``uri(group, shape)`` holds at the end of the worker's run."""
    decide = {"skip": skip, "stop": stop, "redo": stop, "decide": worker.decision}[group]
    return simulate(shape, worker.uri(group, shape), worker.BASE, decide)


def plain(value: Any) -> Any:
    """A value as compared: tuples as lists (the codec may give either)."""
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value


# -- the runs ---------------------------------------------------------------------------------------------------


class Run:
    """One worker process, its stdout read line by line (every marker kept), its stderr in a log file."""

    def __init__(self, store: Path | str, log: Path, pause: str | None = None) -> None:
        command = [sys.executable, "-m", "tests.engine.poison_worker", str(store)]
        if pause is not None:
            command += ["--pause", pause]
        self._stderr: IO[bytes] = log.open("ab")
        self.process = subprocess.Popen(
            command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.log = log
        self.lines: list[str] = []

    @property
    def last(self) -> str:
        return self.lines[-1] if self.lines else ""

    def wait_for(self, prefix: str, at_least: int = 0) -> str:
        """Read markers until one starts with ``prefix`` and its last number is ``>= at_least``."""
        stdout = self.process.stdout
        assert stdout is not None
        while True:
            line = stdout.readline().decode().strip()
            if not line:
                self.process.wait()
                raise AssertionError(f"the worker ended (exit {self.process.returncode}) before {prefix!r} >= "
                                     f"{at_least}; last marker {self.last!r}; stderr:\n{self.log.read_text()[-3000:]}")
            self.lines.append(line)
            last = line.split()[-1]
            if line.startswith(prefix) and (not last.isdigit() or int(last) >= at_least):
                return line
            if line.startswith("done"):
                raise AssertionError(f"the worker finished before {prefix!r} >= {at_least}")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self._drain()

    def finish(self) -> int:
        self.wait_for("done")
        code = self.process.wait()
        self._drain()
        return code

    def _drain(self) -> None:
        """Keep the markers printed before the end, then close the pipes."""
        if self.process.stdout is not None:
            self.lines += [line for line in self.process.stdout.read().decode().splitlines() if line.strip()]
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        self._stderr.close()


def failure_positions() -> list[int]:
    """The log positions where the subscriptions under ``"stop"`` and the decision function stop (sorted)."""
    return sorted({f.pos for g in ("stop", "decide") for s in worker.SHAPES if (f := oracle(g, s).failure)})


def plan(seed: int = SEED) -> list[Kill]:
    """``setup@k`` first (killed between two subscription creations); then the single kills at seeded positions
    over the input, and a kill right after the first ``"stop"`` failure and after the first failure of the
    decision function (``failed``), in order of position; a double crash in the replay after two of the kills
    that leave a tail of the log to replay, and a streak ``recovered``, ``recovering``, ``replay`` after a third."""
    rng = random.Random(seed)
    last = LOG[-1].pos - 2 * worker.CHUNK
    stops = failure_positions()
    first_decide = min(f.pos for s in worker.SHAPES if (f := oracle("decide", s).failure))
    failing = (stops[0], first_decide)
    # A kill before a ``failed`` one must stop the worker before that failure: its next run then meets it fresh.
    free = [p for p in range(worker.CLEAN // 4, last)
            if not any(at - worker.EVERY - 2 * worker.CHUNK <= p <= at + worker.BATCH for at in failing)]
    singles = list(SINGLES)
    rng.shuffle(singles)
    size = len(free) // len(singles)
    kills = []
    for n, kind in enumerate(singles):
        position = free[n * size + rng.randrange(size // 10, size - size // 10)]
        delay = rng.uniform(0.0, 0.02) if kind == "random" else rng.uniform(0.0, 0.08) if kind == "recovering" else 0
        kills.append(Kill(kind, position, delay))
    kills += [Kill("failed", at) for at in failing]
    kills.sort(key=lambda kill: kill.position)
    tails = [n for n, kill in enumerate(kills) if kill.kind in ("commit", "random", "append", "failed")]
    chosen = rng.sample(tails, 3)
    planned = [Kill("setup", rng.randrange(3, 25))]
    for n, kill in enumerate(kills):
        planned.append(kill)
        extra = DOUBLE if n in chosen[:2] else STREAK if n == chosen[2] else ()
        for kind in extra:
            position = rng.randrange(1, 60) if kind == "replay" else 0
            planned.append(Kill(kind, position, rng.uniform(0.0, 0.08) if kind == "recovering" else 0.0))
    return planned


def crash_and_recover(store: Path | str, log: Path, kills: list[Kill]) -> tuple[list[Run], list[str], list[str]]:
    """Run the worker through every planned kill, then to the end: the runs (their markers), what happened (for
    the report), and the kills that did not happen (the worker got past their moment first)."""
    runs, history, missed = [], [], []
    for kill in kills:
        if kill.kind in RANDOM_KINDS:
            run = Run(store, log)
            try:
                if kill.kind == "recovering":
                    run.wait_for("opening")
                else:
                    run.wait_for("batch", kill.position)
                time.sleep(kill.delay)  # the random moment: wherever the worker is now
            except AssertionError as error:
                if run.process.poll() not in (None, 0):
                    raise
                missed.append(f"{kill}: {error}")
            finally:
                run.kill()
        else:
            # recovered: right after the open, wherever the store stands (the position only orders the plan)
            run = Run(store, log, pause=f"{kill.kind}@{0 if kill.kind == 'recovered' else kill.position}")
            try:
                run.wait_for(f"pause {kill.kind}")
            except AssertionError as error:
                if run.process.poll() not in (None, 0):
                    raise
                missed.append(f"{kill}: {error}")
            finally:
                run.kill()
        killed = run.process.returncode == -signal.SIGKILL
        assert killed or missed, f"{kill} did not kill the worker: {run.last}"
        runs.append(run)
        history.append(f"{kill.kind}@{kill.position} (last marker {run.last[:60]!r})"
                       + ("" if killed else " DID NOT HAPPEN"))
    final = Run(store, log)
    assert final.finish() == 0, final.log.read_text()[-3000:]
    runs.append(final)
    return runs, history, missed


# -- what the runs said: the failures, in the batch that processed them, visible everywhere ---------------------


def check_markers(runs: list[Run]) -> list[str]:
    """Each ``failed`` marker: nothing missing; what it says equals the oracle's failure; a fresh one right after
    the batch that processed its event; once reported, reported again at the open of every later run."""
    problems = []
    failures = {worker.uri(g, s): oracle(g, s).failure for g in worker.GROUPS for s in worker.SHAPES}
    known: set[str] = set()
    for number, run in enumerate(runs):
        batch: tuple[int, int] | None = None
        before = set(known)
        for line in run.lines:
            word, _, rest = line.partition(" ")
            if word == "opened":
                at_open = {json.loads(m[7:])["uri"] for m in run.lines if m.startswith("failed ")
                           and not json.loads(m[7:])["fresh"]}
                for uri in sorted(before - at_open):
                    problems.append(f"run {number}: {uri} was FAILED in an earlier run and is not FAILED at the open")
            elif word == "batch":
                first, last = map(int, rest.split())
                batch = (first, last)
            elif word == "failed":
                marker = json.loads(rest)
                uri = marker["uri"]
                where = f"run {number}: {uri}"
                if marker["missing"]:
                    problems.append(f"{where} FAILED ({'fresh' if marker['fresh'] else 'at open'}) but not shown "
                                    f"by: {'; '.join(marker['missing'])}")
                expected = failures.get(uri)
                said = (marker["pos"], marker["error_type"], marker["operator"], marker["unit"], marker["path"])
                if expected is None:
                    problems.append(f"{where} FAILED {said}, which the oracle never stops")
                elif said != (expected.pos, expected.error_type, expected.operator, expected.unit, expected.path):
                    problems.append(f"{where} FAILED {said}, expected {expected}")
                if marker["fresh"]:
                    if uri in known:
                        problems.append(f"{where} failed again (fresh) after an earlier run had reported it FAILED")
                    if batch is None or not batch[0] < marker["pos"] <= batch[1]:
                        problems.append(f"{where} failed at position {marker['pos']}, reported after the batch "
                                        f"{batch}, not the one that processed it")
                known.add(uri)
    for uri, failure in sorted(failures.items()):
        if failure is not None and uri not in known:
            problems.append(f"{uri}: no run reported it FAILED (expected at position {failure.pos})")
    return problems


def summary(runs: list[Run]) -> str:
    """How many failures the runs saw fresh (right after their batch) and at an open."""
    markers = [json.loads(line[7:]) for run in runs for line in run.lines if line.startswith("failed ")]
    fresh = sum(marker["fresh"] for marker in markers)
    return (f"{len(runs)} runs; FAILED reported {fresh} times right after the batch that failed, "
            f"{len(markers) - fresh} times at an open")


# -- the store at the end ---------------------------------------------------------------------------------------


def open_engine(target: Path | str, fixed: Collection[str] = ()) -> tuple[Engine, worker.Records]:
    """An engine on the store, with the ``fixed`` groups' functions fixed, and what it logs."""
    registry, _ = worker.functions(fixed)
    logger, records = worker.engine_logger()
    return Engine(target, functions=registry, logger=logger, synchronous="NORMAL"), records


def compare_outputs(engine: Engine, uri: str, expected: list[Any], what: str) -> list[str]:
    actual = [Output(o.subscription, o.seq, plain(o.value)) for o in engine.outputs(uri)]
    wanted = [Output(uri, seq, plain(value)) for seq, value in enumerate(expected)]
    if actual == wanted:
        return []
    return [f"{uri} ({what}): {len(actual)} outputs, expected {len(wanted)}: {describe_difference(actual, wanted)}"
            + _first_difference(actual, wanted)]


def _first_difference(actual: list[Output], expected: list[Output]) -> str:
    for n, (mine, theirs) in enumerate(zip(actual, expected, strict=False)):
        if mine != theirs:
            return f"; first at #{n}: got {mine.seq}={mine.value!r:.120}, expected {theirs.seq}={theirs.value!r:.120}"
    return ""


def letters_of(engine: Engine, uri: str) -> tuple[list[Letter], list[str]]:
    """The failed elements of subscription ``uri`` as :class:`Letter` s (``i``: the index its element carries),
    and what is wrong with the rest of each letter (its kind, stream, reason, traceback, element)."""
    found, wrong = [], []
    for letter in engine.dead_letters(subscription=uri):
        value = letter.value if isinstance(letter.value, dict) else {}
        found.append(Letter(letter.pos if letter.pos is not None else -1, str(letter.error_type),
                            str(letter.operator), str(letter.unit), str(letter.path), int(value.get("i", -1))))
        said = (letter.kind, letter.stream, letter.seq, letter.subscription, letter.damage)
        if said != ("element", "", -1, uri, None):
            wrong.append(f"dead letter #{letter.id}: (kind, stream, seq, subscription, damage) {said}")
        if letter.reason != f"{letter.error_type}: {letter.message}" or not letter.message:
            wrong.append(f"dead letter #{letter.id}: reason {letter.reason!r}, message {letter.message!r}")
        if not letter.traceback or str(letter.error_type) not in letter.traceback:
            wrong.append(f"dead letter #{letter.id}: traceback {letter.traceback!r:.100}")
        if not value or letter.element is None or f"'i': {value.get('i')}" not in letter.element:
            wrong.append(f"dead letter #{letter.id}: element {letter.element!r:.100}, value {letter.value!r:.100}")
    return found, wrong


def compare_letters(engine: Engine, uri: str, expected: list[Letter], what: str) -> list[str]:
    actual, wrong = letters_of(engine, uri)
    if wrong:
        return [f"{uri} ({what}): {len(wrong)} dead letters hold something else: {'; '.join(wrong[:3])}"]
    if actual == expected:
        return []
    twice = sorted(letter for letter, n in Counter(actual).items() if n > 1)
    missing = sorted(set(expected) - set(actual))
    extra = sorted(set(actual) - set(expected))
    return [f"{uri} ({what}): {len(actual)} dead letters, expected {len(expected)}: missing {len(missing)} "
            f"{missing[:3]}; twice {len(twice)} {twice[:3]}; extra {len(extra)} {extra[:3]}"
            + ("; same letters in another order" if not (missing or extra or twice) else "")]


def check_status(engine: Engine, uri: str, failure: Letter | None) -> list[str]:
    status = engine.subscription_status(uri)
    if failure is None:
        if status.state is not SubscriptionState.RUNNING:
            return [f"{uri}: {status.state.name} ({status.error_type} at {status.position}), expected RUNNING"]
        return []
    said = (status.state, status.position, status.error_type, status.operator, status.unit, status.path)
    wanted = (SubscriptionState.FAILED, failure.pos, failure.error_type, failure.operator, failure.unit, failure.path)
    return [] if said == wanted else [f"{uri}: status {said}, expected {wanted}"]


def check_store(target: Path | str) -> list[str]:
    """The outputs, dead letters and states of every subscription, the quarantined events, a cursor over both
    kinds, and what a FAILED subscription shows after the last open."""
    from prometheus_client import CollectorRegistry

    problems = []
    engine, records = open_engine(target)
    with engine:
        metrics = CollectorRegistry()
        PrometheusMetrics(engine, registry=metrics, store=worker.STORE_LABEL)
        for group in worker.GROUPS:
            for shape in worker.SHAPES:
                uri, expected = worker.uri(group, shape), oracle(group, shape)
                problems += compare_outputs(engine, uri, expected.outputs, f"under {group}")
                problems += compare_letters(engine, uri, expected.letters, f"under {group}")
                problems += check_status(engine, uri, expected.failure)
                if expected.failure is not None:
                    missing = worker.invisible(engine, uri, metrics, records, fresh=False)
                    problems += [f"{uri}: FAILED after the last open, but not shown by: {'; '.join(missing)}"
                                 ] if missing else []
                elif expected.letters:
                    shown = metrics.get_sample_value("reaqtive_dead_letter_elements",
                                                     {"store": worker.STORE_LABEL, "subscription": uri})
                    if shown != len(expected.letters):
                        problems.append(f"{uri}: reaqtive_dead_letter_elements {shown}, expected "
                                        f"{len(expected.letters)}")
        events = [(d.stream, d.seq) for d in engine.dead_letters() if d.kind == "event"]
        if sorted(events) != sorted(quarantined()):
            problems.append(f"quarantined events {sorted(events)}, expected {sorted(quarantined())} (once each)")
        everything = engine.dead_letters()
        paged, after = [], None
        while page := engine.dead_letters(after=after, limit=17):
            paged += page
            after = page[-1].id
        if [d.id for d in paged] != [d.id for d in everything] or len({d.id for d in everything}) != len(everything):
            problems.append("a cursor (after=, limit=17) does not page through the dead letters as one listing does")
        if {d.kind for d in everything} != {"event", "element"}:
            problems.append(f"the dead letters are of kinds {sorted({d.kind for d in everything})}, expected both")
    return problems


def check_inspect(path: Path) -> list[str]:
    """``reaqtive inspect --json`` and its text: every FAILED subscription with its error and position."""
    from reaqtive.cli.main import main as cli

    problems = []
    text, as_json = io.StringIO(), io.StringIO()
    with redirect_stdout(as_json):
        cli(["inspect", "--json", str(path)])
    with redirect_stdout(text):
        cli(["inspect", str(path)])
    artifacts = {a["uri"]: a for a in json.loads(as_json.getvalue())["artifacts"]}
    for group in worker.GROUPS:
        for shape in worker.SHAPES:
            uri, failure = worker.uri(group, shape), oracle(group, shape).failure
            failed = artifacts.get(uri, {}).get("failed")
            if failure is None and failed is not None:
                problems.append(f"inspect --json: {uri} failed {failed}, expected not")
            elif failure is not None and (failed is None or (failed.get("pos"), failed.get("error_type"))
                                          != (failure.pos, failure.error_type)):
                problems.append(f"inspect --json: {uri} failed {failed}, expected {failure}")
            elif failure is not None and f"  {uri}: {failure.error_type}" not in text.getvalue():
                problems.append(f"inspect (text): no line for the FAILED {uri}")
    return problems


def check_stream_outputs(target: Path | str) -> list[str]:
    """``AsyncEngine.stream_outputs`` of each FAILED subscription: its outputs, then ``SubscriptionFailedError``."""
    registry, _ = worker.functions()
    failed = {worker.uri(g, s): e for g in worker.GROUPS for s in worker.SHAPES if (e := oracle(g, s)).failure}
    problems = []

    async def main() -> None:
        async with await AsyncEngine.open(target, functions=registry, synchronous="NORMAL") as engine:
            for uri, expected in sorted(failed.items()):
                seen: list[Any] = []

                async def consume(uri: str = uri, seen: list[Any] = seen) -> None:
                    async for output in engine.stream_outputs(uri, after=-1):
                        seen.append(plain(output.value))

                try:
                    await asyncio.wait_for(consume(), 20)
                    problems.append(f"stream_outputs({uri!r}) ended without raising")
                except TimeoutError:
                    problems.append(f"stream_outputs({uri!r}) still waits after 20 s instead of raising")
                except SubscriptionFailedError as error:
                    if error.position != expected.failure.pos:  # type: ignore[union-attr]
                        problems.append(f"stream_outputs({uri!r}) raised for position {error.position}, expected "
                                        f"{expected.failure}")
                if seen != plain(expected.outputs):
                    problems.append(f"stream_outputs({uri!r}) handed out {len(seen)} outputs before it raised, "
                                    f"expected {len(expected.outputs)}")

    asyncio.run(asyncio.wait_for(main(), 120))
    return problems


def check_restarts(target: Path | str) -> list[str]:
    """Restart the ``stop`` group with its functions fixed (an oracle that never failed), and the ``redo`` and
    ``decide`` groups' FAILED subscriptions with ``skip_failed`` and the unfixed functions, twice (closed in
    between: still FAILED at the second open)."""
    problems = []
    fixed = {shape: simulate(shape, worker.uri("stop", shape), FIXED, stop) for shape in worker.SHAPES}
    skipping = [(g, s) for g in ("redo", "decide") for s in worker.SHAPES if oracle(g, s).failure is not None]
    skipped: dict[tuple[str, str], list[int]] = {key: [] for key in skipping}
    for round_ in (1, 2):
        engine, _ = open_engine(target, fixed={"stop"})
        with engine:
            if round_ == 1:
                for shape in worker.SHAPES:
                    engine.restart_subscription(worker.uri("stop", shape))
            for group, shape in skipping:
                uri = worker.uri(group, shape)
                decide = stop if group == "redo" else worker.decision
                before = simulate(shape, uri, worker.BASE, decide, skipped[(group, shape)])
                problems += check_status(engine, uri, before.failure)  # still FAILED after the close
                if before.failure is None:
                    continue
                skipped[(group, shape)].append(before.failure.pos)
                engine.restart_subscription(uri, skip_failed=True)
            engine.process()
            for shape in worker.SHAPES:
                uri = worker.uri("stop", shape)
                problems += compare_outputs(engine, uri, fixed[shape].outputs, "restarted with the fixed functions")
                problems += check_status(engine, uri, None)
                problems += compare_letters(engine, uri, [], "restarted with the fixed functions")
            for group, shape in skipping:
                uri = worker.uri(group, shape)
                decide = stop if group == "redo" else worker.decision
                after = simulate(shape, uri, worker.BASE, decide, skipped[(group, shape)])
                what = f"restarted with skip_failed, {round_} skipped"
                problems += compare_outputs(engine, uri, after.outputs, what)
                problems += compare_letters(engine, uri, after.letters, what)
                problems += check_status(engine, uri, after.failure)
            engine.checkpoint()
    return problems


def meaningful_restarts() -> list[str]:
    """The data must make the restart checks meaningful: between the element a ``skip_failed`` restart skips and
    the next failure, the query produces outputs; a fixed function changes what follows the first failure."""
    problems = []
    for shape in worker.SHAPES:
        uri = worker.uri("redo", shape)
        first = simulate(shape, uri, worker.BASE, stop)
        assert first.failure is not None, f"{uri} never fails"
        second = simulate(shape, uri, worker.BASE, stop, [first.failure.pos])
        third = simulate(shape, uri, worker.BASE, stop, [first.failure.pos, second.failure.pos]
                         if second.failure else [first.failure.pos])
        if second.failure is None or third.failure is None:
            problems.append(f"{uri}: fewer than three failures")
        elif not len(first.outputs) < len(second.outputs) < len(third.outputs):
            problems.append(f"{uri}: no outputs between its failures ({len(first.outputs)}, {len(second.outputs)}, "
                            f"{len(third.outputs)})")
        never = simulate(shape, uri, FIXED, stop)
        if never.failure is not None or len(never.outputs) <= len(second.outputs):
            problems.append(f"{uri}: the fixed functions fail or produce too little")
    return problems


def verify(target: Path | str, runs: list[Run]) -> list[str]:
    problems = check_markers(runs)
    problems += check_store(target)
    if isinstance(target, Path):
        problems += check_inspect(target)
    problems += check_stream_outputs(target)
    problems += check_restarts(target)
    return problems


# -- the tests --------------------------------------------------------------------------------------------------


def test_the_input_and_the_oracle_make_every_check_meaningful() -> None:
    assert not meaningful_restarts()
    flaws = Counter(worker.flaw(i) for i in range(worker.EVENTS))
    assert {"far", "zero_weight", "zero_pack", *worker.READING_FLAWS, *worker.ORDER_FLAWS} <= set(flaws)
    for shape in worker.SHAPES:
        skipped = oracle("skip", shape)
        assert skipped.failure is None and len(skipped.letters) >= 10 and len(skipped.outputs) >= 50, shape
        assert oracle("stop", shape).failure is not None, shape
        assert {letter.error_type for letter in skipped.letters} >= {"KeyError", "TypeError"} or shape == "group"
    assert {shape for shape in worker.SHAPES if oracle("decide", shape).failure} == {"filter", "scan", "agg", "flat"}
    assert all(f.error_type == "ZeroDivisionError" for s in worker.SHAPES if (f := oracle("decide", s).failure))
    units = {letter.unit for letter in oracle("skip", "group").letters}
    assert worker.uri("skip", "group") in units and len(units) > 2, "key selector and inner units both fail"


def test_the_kill_plan_covers_every_kind_of_moment() -> None:
    kills = plan()
    kinds = Counter(kill.kind for kill in kills)
    assert {"setup", "commit", "egress", "committed", "append", "random", "recovering", "recovered", "replay",
            "failed"} <= set(kinds)
    moving = [kill.position for kill in kills if kill.kind not in ("setup", "recovered", "recovering", "replay")]
    assert moving == sorted(moving) and moving[-1] < LOG[-1].pos - worker.CHUNK
    assert {kill.position for kill in kills if kill.kind == "failed"} <= set(failure_positions())
    twice = [n for n in range(1, len(kills)) if kills[n].kind == "replay" and kills[n - 1].kind == "replay"]
    assert twice, "killed twice in a row in the replay"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("store", STORES)
def test_poison_events_without_kills(tmp_path: Path, store: str, request: pytest.FixtureRequest) -> None:
    """The whole check on one run that is never killed (the crash test's baseline: if this fails, the kills are
    not the cause)."""
    target = store_sql(store, tmp_path, request, "plain.db").target
    run = Run(target, tmp_path / "plain.log")
    assert run.finish() == 0, run.log.read_text()[-3000:]
    problems = verify(target, [run])
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", STORES)
def test_poison_events_across_kills(tmp_path: Path, store: str, request: pytest.FixtureRequest) -> None:
    kills = plan()
    target = store_sql(store, tmp_path, request, "crashed.db").target
    runs, history, missed = crash_and_recover(target, tmp_path / "crashed.log", kills)
    print("\n".join(history))
    print(summary(runs))
    problems = verify(target, runs)
    if missed:
        problems += ["kills that did not happen (the worker got past their moment first):", *missed]
    assert not problems, f"{len(problems)} problems after {len(kills)} kills:\n" + "\n".join(problems)


# -- the smallest forms of what the test finds, in process -------------------------------------------------------


def _celsius(reading: dict[str, Any]) -> Any:
    return reading["celsius"]


def _minimal(target: Path | str, start: datetime | None = None) -> Engine:
    registry = FunctionRegistry()
    registry.register("pz_celsius", _celsius)
    return Engine(target, functions=registry, start=start, synchronous="NORMAL")


def _values(engine: Engine) -> list[Any]:
    return [output.value for output in engine.outputs("q")]


def _state(engine: Engine) -> tuple[str, int | None, list[Any], list[int | None]]:
    status = engine.subscription_status("q")
    return status.state.name, status.position, _values(engine), [d.pos for d in engine.dead_letters(subscription="q")]


@pytest.mark.parametrize("store", STORES)
def test_a_failed_subscription_keeps_the_outputs_it_produced_before_it_failed_across_a_kill(
    tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    """``"stop"``: the outputs produced between the last checkpoint and the failure are in the egress buffer when
    the FAILED record is committed; a kill then loses them, and nothing produces them again while it is FAILED."""
    target = store_sql(store, tmp_path, request).target
    with _minimal(target, worker.T0) as engine:
        engine.create_stream("r")
        engine.create_subscription("q", Query.stream("r").map(_celsius))
        engine.append_many("r", [({"celsius": 1}, worker.T0), ({"celsius": 2}, worker.T0)])
        engine.process()
        engine.checkpoint()
        engine.append_many("r", [({"celsius": c}, worker.T0) for c in (3, 4)] + [({}, worker.T0)])
        engine.process()
        status = engine.subscription_status("q")  # (not outputs(): it would write the sink)
        assert (status.state, status.position) == (SubscriptionState.FAILED, 5)
        engine._outputs.buffer.clear()  # a kill -9: what the sink had not written is lost
    with _minimal(target) as engine:
        assert _state(engine) == ("FAILED", 5, [1, 2, 3, 4], [])


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("between", ["nothing", "a close", "a kill"])
def test_an_element_a_restart_skipped_stays_skipped_when_the_query_is_replayed(
    tmp_path: Path, store: str, request: pytest.FixtureRequest, between: str
) -> None:
    """``restart_subscription(uri, skip_failed=True)`` skips the element once; the query's last checkpoint is
    before it, so the next replay of the query (the next restart, a recovery after a kill) meets it again and,
    under ``"stop"``, fails on it again, although it is a dead letter."""
    target = store_sql(store, tmp_path, request).target
    engine = _minimal(target, worker.T0)
    try:
        engine.create_stream("r")
        engine.create_subscription("q", Query.stream("r").map(_celsius))
        readings = [{"celsius": 1}, {}, {"celsius": 3}] + ([{}, {"celsius": 5}] if between != "a kill" else [])
        engine.append_many("r", [(reading, worker.T0) for reading in readings])
        engine.process()
        assert _state(engine) == ("FAILED", 2, [1], [])
        engine.restart_subscription("q", skip_failed=True)
        engine.process()
        if between == "a kill":
            status = engine.subscription_status("q")
            assert (status.state, [d.pos for d in engine.dead_letters(subscription="q")]) == (
                SubscriptionState.RUNNING, [2])
            engine._outputs.buffer.clear()  # a kill -9 before a checkpoint covers the skipped element
            engine.close()
            engine = _minimal(target)
            engine.process()
            assert _state(engine) == ("RUNNING", None, [1, 3], [2])
            return
        assert _state(engine) == ("FAILED", 4, [1, 3], [2])
        if between == "a close":
            engine.checkpoint()
            engine.close()
            engine = _minimal(target)
        engine.restart_subscription("q", skip_failed=True)
        engine.process()
        assert _state(engine) == ("RUNNING", None, [1, 3, 5], [2, 4])
    finally:
        engine.close()
