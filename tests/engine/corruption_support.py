"""The machinery of ``test_corruption_fuzz.py``: one real engine store, the mutations that damage a copy of it,
the run of an engine on the copy under ``RecoveryPolicy.KEEP``, and the classification of what each subscription
became. The test module holds the policy (what is in scope, what must be zero); this module holds the mechanics.

* **The store** (:func:`build_store`): four durable streams of different payloads (ints, dict records, ints read
  by inner queries, words), an observable definition, and fifteen subscriptions of different shapes (listed in
  :data:`SUBSCRIPTIONS` with the streams each one reads, inner queries included). It is fed, checkpointed, fed
  again (some of those events processed, the rest not), and closed without a checkpoint: what a crash leaves.
* **A mutation** (:class:`Mutation`) is a function from a store file to a damaged one, plus what it touched (the
  subscriptions whose stored data it changed). :func:`mutation_for_case` draws case ``i`` from its own seeded
  RNG, so any case can be run alone again by its number.
* **A run** (:func:`observe`): open an engine on the file under KEEP, process what the log holds, append
  :data:`EXTRA` and process it, read every subscription's durable outputs and status, checkpoint, close.
  :func:`classify` compares a run with the run on the undamaged store (the oracle).
"""

from __future__ import annotations

import _thread
import inspect
import json
import logging
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import msgpack

from reaqtive import FunctionRegistry, Query, keyed_execution
from reaqtive.core.errors import ReaqtiveError
from reaqtive.engine import ArtifactNotFoundError, Engine, RecoveryPolicy
from reaqtive.engine.database import pack_times, unpack_times
from reaqtive.state import sqlite_store
from reaqtive.state.codec import DEFAULT_CODEC, Segment
from reaqtive.state.framing import checksum, read_blob

# -- the workload -------------------------------------------------------------------------------------------------

T0: Final = datetime(2026, 6, 1, 6, 0, tzinfo=UTC)
STREAMS: Final = ("s://a", "s://b", "s://c", "s://d")
WORDS: Final = ("ash", "birch", "cedar", "elm", "fir", "hazel", "larch", "oak", "pine", "rowan", "yew")
BEFORE_CHECKPOINT: Final = 240  # events processed and covered by the checkpoint
AFTER_CHECKPOINT: Final = 64  # events appended after it: left in the ingress log
PROCESSED_AFTER: Final = 27  # of which the engine processed this many before the "crash"


def add(a: Any, b: Any) -> Any:
    return a + b


def total(xs: list[int]) -> int:
    return sum(xs)


def size(xs: list[Any]) -> int:
    return len(xs)


def key_of(record: dict[str, Any]) -> str:
    return str(record["k"])


def val_of(record: dict[str, Any]) -> int:
    return int(record["v"])


def is_big(record: dict[str, Any]) -> bool:
    return int(record["v"]) >= 5


def per_key(group: Any) -> Query[Any]:
    """Per key of ``q://group``: a running sum of the key's values."""
    result: Query[Any] = group.map(val_of).scan(0, add)
    return result


def per_key_pairs(group: Any) -> Query[Any]:
    """Per key of ``q://group-pairs``: the sums of consecutive pairs of the key's values."""
    result: Query[Any] = group.map(val_of).buffer(2).map(total)
    return result


def from_c(x: int) -> Query[Any]:
    """The inner of ``q://bounded``: reads the engine stream ``s://c`` at run time, a few events, then ends."""
    return Query.stream("s://c").take(2 + x % 3).scan(x, add)


def switch_c(x: int) -> Query[Any]:
    """The inner of ``q://switch``: reads ``s://c`` until the next element of ``s://a`` replaces it."""
    return Query.stream("s://c").skip(x % 2).scan(x, add)


FUNCTIONS: Final = FunctionRegistry()
for _function in (add, total, size, key_of, val_of, is_big, per_key, per_key_pairs, from_c, switch_c):
    FUNCTIONS.register(_function.__name__, _function)

DEFINITION: Final = "obs://big-b"


def _subscriptions() -> dict[str, tuple[Query[Any], frozenset[str]]]:
    a, b, c, d = (Query.stream(uri) for uri in STREAMS)
    big = Query.stream(DEFINITION)
    return {
        # identical shapes that differ only in constants (one template each pair): swapping them is an attack
        "q://sum-a": (a.scan(0, add), frozenset({"s://a"})),
        "q://sum-c": (c.scan(0, add), frozenset({"s://c"})),
        "q://buf3": (a.buffer(3).map(total), frozenset({"s://a"})),
        "q://buf5": (a.buffer(5).map(total), frozenset({"s://a"})),
        "q://skip-take-1": (c.skip(3).take(40), frozenset({"s://c"})),  # completes before the checkpoint
        "q://skip-take-2": (c.skip(5).take(400), frozenset({"s://c"})),
        # time and time-or-count buffers
        "q://buf-time": (b.map(val_of).buffer(timedelta(seconds=30)).map(size), frozenset({"s://b"})),
        "q://buf-time-count": (d.buffer(timedelta(seconds=20), 4).map(size), frozenset({"s://d"})),
        # distinct over ints and over words
        "q://distinct-c": (c.distinct(), frozenset({"s://c"})),
        "q://distinct-d": (d.distinct(), frozenset({"s://d"})),
        # keyed: inner units stored under uri/...
        "q://group": (b.group_by(key_of).flat_map(per_key), frozenset({"s://b"})),
        "q://group-pairs": (b.group_by(key_of).flat_map(per_key_pairs), frozenset({"s://b"})),
        # the same keyed chain run keyed (one stage, records in pages of keys under uri/keyed<n>/...); the two
        # above are created on the general path (GENERAL): a subscription per group
        "q://group-keyed": (b.group_by(key_of).flat_map(per_key), frozenset({"s://b"})),
        # inners that read an engine stream, created at run time; one with bounded demand (its outer lags)
        "q://switch": (a.switch_latest(switch_c), frozenset({"s://a", "s://c"})),
        "q://bounded": (a.flat_map(from_c, max_concurrent=1), frozenset({"s://a", "s://c"})),
        # an aggregate that completes after recovery, over a definition
        "q://agg": (big.map(val_of).take(45).sum(), frozenset({"s://b"})),
    }


GENERAL: Final = frozenset({"q://group", "q://group-pairs"})
"""Subscriptions created with keyed execution off (their groups are inner subscriptions)."""

SUBSCRIPTIONS: Final = _subscriptions()
READS: Final = {uri: streams for uri, (_, streams) in SUBSCRIPTIONS.items()}
INNER_READS: Final = {"q://switch": "s://c", "q://bounded": "s://c"}
"""The stream the inner queries of a subscription read (its outer reader reads the other one)."""
TIME_BASED: Final = frozenset({"q://buf-time", "q://buf-time-count"})
"""Subscriptions whose results depend on the engine's clock, which every event moves: damage to any event of the
log (its time, its place, its existence) may change them."""
ALL: Final = frozenset(SUBSCRIPTIONS)


def _events(count: int, seed: int, start: datetime) -> list[tuple[str, Any, datetime]]:
    """``count`` events over the four streams: uneven rates, bursts at one instant, payloads of four kinds."""
    rng = random.Random(seed)
    events = []
    when = start
    for _ in range(count):
        stream = rng.choices(STREAMS, weights=(30, 30, 25, 15))[0]
        if rng.random() < 0.8:  # a fifth of the events share their instant with the previous one
            when += timedelta(seconds=rng.choice((1, 2, 3, 7, 11)), microseconds=rng.randrange(1_000_000))
        value: Any
        if stream == "s://a":
            value = rng.randrange(-50, 100)
        elif stream == "s://b":
            value = {"k": rng.choice("wxyz"), "v": rng.randrange(10)}
        elif stream == "s://c":
            value = rng.randrange(50)
        else:
            value = rng.choice(WORDS)
        events.append((stream, value, when))
    return events


EVENTS: Final = _events(BEFORE_CHECKPOINT + AFTER_CHECKPOINT, 1414, T0)
EXTRA: Final = _events(48, 2414, EVENTS[-1][2] + timedelta(seconds=5))
"""The fixed batch every run appends after recovery (so that every subscription has to go on correctly)."""


def _runs(events: Iterable[tuple[str, Any, datetime]]) -> list[tuple[str, list[tuple[Any, datetime]]]]:
    """The events as runs of one stream, in order."""
    runs: list[tuple[str, list[tuple[Any, datetime]]]] = []
    for uri, value, when in events:
        if not runs or runs[-1][0] != uri:
            runs.append((uri, []))
        runs[-1][1].append((value, when))
    return runs


def _append(engine: Engine, events: Iterable[tuple[str, Any, datetime]]) -> dict[str, BaseException]:
    """Append in order, one transaction per run of one stream. A stream whose append fails gets no more events
    (the others go on); returns the errors by stream."""
    failed: dict[str, BaseException] = {}
    for stream, run in _runs(events):
        if stream not in failed:
            try:
                engine.append_many(stream, run)
            except Exception as error:
                failed[stream] = error
    return failed


QUIET: Final = logging.getLogger("tests.engine.corruption_fuzz")
"""The engines of the fuzz log here, and nowhere: a thousand damaged stores would log a thousand tracebacks."""
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False
QUIET.setLevel(logging.CRITICAL + 1)


def open_engine(path: Path) -> Engine:
    return Engine(path, functions=FUNCTIONS, recovery_policy=RecoveryPolicy.KEEP, gc_freeze=False, synchronous="OFF",
                  logger=QUIET)


def build_store(path: Path, *, crash: bool = True) -> dict[str, list[Any]] | None:
    """The store the mutations damage: created, fed, checkpointed, fed again, closed as by a crash. With
    ``crash=False`` the same engine goes on instead, as every run does after recovery (process the log, append
    :data:`EXTRA`, process), and its durable outputs by subscription are returned: what an engine that never
    stopped produces."""
    engine = Engine(path, functions=FUNCTIONS, gc_freeze=False, synchronous="OFF", logger=QUIET)
    try:
        engine.advance_time(T0)
        for uri in STREAMS:
            engine.create_stream(uri)
        engine.define_observable(DEFINITION, Query.stream("s://b").filter(is_big))
        for uri, (query, _) in SUBSCRIPTIONS.items():
            with keyed_execution(uri not in GENERAL):
                engine.create_subscription(uri, query)
        assert not _append(engine, EVENTS[:BEFORE_CHECKPOINT])
        engine.process()
        engine.checkpoint()
        assert not _append(engine, EVENTS[BEFORE_CHECKPOINT:])
        engine.process(max_events=PROCESSED_AFTER)
        if crash:
            return None
        engine.process()
        assert not _append(engine, EXTRA)
        engine.process()
        outputs: dict[str, list[Any]] = {uri: [] for uri in SUBSCRIPTIONS}
        for output in engine.outputs():
            outputs[output[0]].append(tuple(output))
        return outputs
    finally:
        engine.close()


# -- what a run observed, and what it means ------------------------------------------------------------------------

BAD: Final = ("hang", "silently-wrong", "silently-ended", "deleted-stored", "harmed-healthy", "untyped-error")
OUTCOMES: Final = ("exact", "failed-documented", "open-failed", "dead-lettered", *reversed(BAD))
_RANK: Final = {outcome: rank for rank, outcome in enumerate(OUTCOMES)}


def worst(outcomes: Iterable[str]) -> str:
    return max(outcomes, key=_RANK.__getitem__, default="exact")


def documented(error: BaseException) -> bool:
    """A documented reaqtive error: ``ReaqtiveError`` and its subclasses (``StateError``, ``StoreError``,
    ``EngineError``, ``RecoveryError``, ...). A bare ``ValueError``, ``KeyError``, ``sqlite3.Error``, ... is not."""
    return isinstance(error, ReaqtiveError)


def describe(error: BaseException | None) -> str:
    if error is None:
        return "-"
    text = str(error).replace("\n", " ")
    return f"{type(error).__module__}.{type(error).__qualname__}: {text[:160]}"


@dataclass
class SubscriptionRun:
    """One subscription at the end of a run."""

    known: bool = True  # the engine still has it (as running or as broken)
    outputs: list[Any] | None = None
    outputs_error: BaseException | None = None
    ended_with: BaseException | None = None
    running: bool | None = None
    failure: BaseException | None = None  # listed in engine.recovery.failures with this error
    fault: BaseException | None = None  # stopped while running, listed in engine.faults with this error


@dataclass
class Run:
    """What one run of an engine on a store file observed."""

    subscriptions: dict[str, SubscriptionRun] = field(default_factory=dict)
    open_error: BaseException | None = None
    run_error: BaseException | None = None  # process/checkpoint/close raised
    run_stage: str = ""
    append_errors: dict[str, BaseException] = field(default_factory=dict)  # by stream
    dead_letters: set[str] = field(default_factory=set)  # streams with events the engine quarantined
    hang: str = ""  # where the watchdog interrupted it
    stored_before: dict[str, Any] | None = None
    stored_after: dict[str, Any] | None = None
    file_changed_by_failed_open: bool = False


class HangError(Exception):
    """The watchdog interrupted a run."""


# A run that waits (on a lock, on I/O) rather than computes is a hang after this many times its CPU bound.
WALL_FACTOR: Final = 15


@contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Interrupt the main thread (KeyboardInterrupt, turned into :class:`HangError`) if the block spends more than
    ``seconds`` of the process's CPU time (a loop that never ends), or more than ``WALL_FACTOR`` times that of wall
    time (a wait that never ends). CPU time, not wall time, is the short bound: on a loaded machine (the suite's
    parallel workers) a healthy run can wait seconds for a core. Unlike ``signal.alarm`` it does not take SIGALRM
    from pytest-timeout."""
    fired = threading.Event()
    done = threading.Event()
    cpu_deadline = time.process_time() + seconds
    wall_deadline = time.monotonic() + seconds * WALL_FACTOR

    def watch() -> None:
        while not done.wait(0.02):
            if time.process_time() > cpu_deadline or time.monotonic() > wall_deadline:
                fired.set()
                _thread.interrupt_main()
                return

    timer = threading.Thread(target=watch, name="fuzz-watchdog", daemon=True)
    timer.start()
    try:
        try:
            yield
        finally:
            done.set()
            timer.join()
            if fired.is_set():
                for _ in range(10_000):  # let a pending interrupt arrive here rather than later
                    pass
    except KeyboardInterrupt:
        if not fired.is_set():
            raise
        raise HangError(f"still running after {seconds} s of CPU time (or {seconds * WALL_FACTOR} s)") from None


def stored_rows(path: Path) -> dict[str, Any] | None:
    """The rows the deletion check compares: every blob row, and the (stream, seq) pairs of the ingress log."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            blobs = {
                (row[0], row[1]): tuple(bytes(v) if isinstance(v, bytes) else v for v in row)
                for row in db.execute("SELECT * FROM reaqtive_blobs")
            }
            ingress = {(stream, seq + i) for stream, seq, count in  # a row holds a run of events
                       db.execute("SELECT stream, seq, count FROM reaqtive_ingress").fetchall()
                       if type(seq) is int and type(count) is int for i in range(min(count, 4096))}
        finally:
            db.close()
    except sqlite3.Error:
        return None
    return {"blobs": blobs, "ingress": ingress}


def observe(path: Path, timeout: float) -> Run:
    """Open an engine on ``path`` under KEEP, process, append :data:`EXTRA`, process, read every subscription,
    checkpoint, close; every step guarded by the watchdog."""
    run = Run(stored_before=stored_rows(path))
    engine: Engine | None = None
    try:
        with watchdog(timeout):
            try:
                engine = open_engine(path)
            except Exception as error:
                run.open_error = error
                run.file_changed_by_failed_open = stored_rows(path) != run.stored_before
                return run
            try:
                run.run_stage = "process"
                engine.process()
                run.run_stage = "append"
                run.append_errors = _append(engine, EXTRA)
                run.run_stage = "process"
                engine.process()
            except Exception as error:
                run.run_error = error
            try:
                everything: dict[str, list[Any]] | None = {uri: [] for uri in SUBSCRIPTIONS}
                for output in engine.outputs():
                    everything.setdefault(output[0], []).append(tuple(output))
            except Exception:  # read them one by one, to see whose outputs cannot be read
                everything = None
            try:
                running: dict[str, bool] | None = {info.uri: info.running for info in engine.artifacts()}
            except Exception:  # one record cannot be described: ask one by one
                running = None
            for uri in SUBSCRIPTIONS:
                run.subscriptions[uri] = _read_subscription(engine, uri, everything, running)
            # after reading the outputs: flushing them may stop a subscription (and list it in engine.faults)
            failures = {failure.uri: failure.error for failure in engine.recovery.failures}
            faults = {fault.uri: fault.error for fault in getattr(engine, "faults", ())}
            for uri, seen in run.subscriptions.items():
                seen.failure, seen.fault = failures.get(uri), faults.get(uri)
            with suppress(Exception):
                run.dead_letters = {letter.stream for letter in getattr(engine, "dead_letters", list)()}
            if run.run_error is None:
                try:
                    run.run_stage = "checkpoint"
                    engine.checkpoint()
                    run.run_stage = "close"
                    engine.close()
                except Exception as error:
                    run.run_error = error
    except HangError as hang:
        run.hang = f"{hang} (at {run.run_stage or 'open'})"
        engine = None  # abandoned as it is: closing would flush whatever it produced meanwhile
        return run
    finally:
        if engine is not None:
            with suppress(Exception):
                engine.close()
    run.stored_after = stored_rows(path)
    return run


def _read_subscription(
    engine: Engine, uri: str, everything: dict[str, list[Any]] | None, running: dict[str, bool] | None
) -> SubscriptionRun:
    seen = SubscriptionRun()
    if running is not None:
        seen.known = uri in running
        seen.running = running.get(uri)
    else:
        try:
            seen.running = engine.info(uri).running
        except Exception:  # unknown to the engine (or its record cannot be described)
            seen.known = False
    if everything is not None:
        seen.outputs = everything[uri]
    else:
        try:
            seen.outputs = [tuple(output) for output in engine.outputs(uri)]
        except Exception as error:
            seen.outputs_error = error
    try:
        seen.ended_with = engine.subscription_error(uri)
    except ArtifactNotFoundError:
        seen.ended_with = None  # unknown to the engine (removed by the recovery policy): nothing ended it
    return seen


@dataclass(frozen=True)
class Verdict:
    """Per subscription, the outcome and why."""

    outcomes: dict[str, str]
    details: dict[str, str]

    @property
    def worst(self) -> str:
        return worst(self.outcomes.values())


def classify(run: Run, oracle: Run, touched: frozenset[str], needs: dict[str, dict[str, int]]) -> Verdict:
    """What each subscription became, compared with the oracle (see the test module's docstring). ``needs``: per
    subscription and stream, the watermark after which a failed subscription needs the log kept."""
    outcomes: dict[str, str] = {}
    details: dict[str, str] = {}
    for uri in SUBSCRIPTIONS:
        outcome, detail = _classify_one(uri, run, oracle, uri in touched)
        outcomes[uri], details[uri] = outcome, detail
    if run.file_changed_by_failed_open:
        for uri, outcome in outcomes.items():
            outcomes[uri] = worst((outcome, "deleted-stored"))
            details[uri] += "; the failed open changed the file"
    for uri, missing in deleted_rows(run, needs, oracle).items():
        outcomes[uri] = worst((outcomes[uri], "deleted-stored"))
        details[uri] += f"; under KEEP its stored rows were deleted or changed: {missing}"
    return Verdict(outcomes, details)


def _classify_one(uri: str, run: Run, oracle: Run, touched: bool) -> tuple[str, str]:
    if run.hang:
        return "hang", run.hang
    if run.open_error is not None:
        if documented(run.open_error):
            return "open-failed", describe(run.open_error)
        return "untyped-error", f"the open raised {describe(run.open_error)}"
    seen, expected = run.subscriptions[uri], oracle.subscriptions[uri]
    if _stopped(seen) == _stopped(expected) != (None, None) and seen.outputs == expected.outputs:
        return "exact", f"stopped as in the oracle: {describe(seen.failure or seen.fault)}"
    for error, what in ((seen.failure, "failed to recover"), (seen.fault, "stopped while running (engine.faults)")):
        if error is None:
            continue
        if not touched:
            return "harmed-healthy", f"untouched, but {what}: {describe(error)}"
        if documented(error):
            return "failed-documented", f"{what}: {describe(error)}"
        return "untyped-error", f"{what}, with an error of an undocumented type: {describe(error)}"
    appending = [stream for stream in sorted(READS[uri]) if stream in run.append_errors]
    if run.run_error is not None or appending:
        if run.run_error is not None:
            error, where = run.run_error, f"{run.run_stage} raised {describe(run.run_error)}"
        else:
            error = run.append_errors[appending[0]]
            where = f"appending to {appending[0]} raised {describe(error)}"
        if not touched:
            return "harmed-healthy", f"untouched, but {where}"
        return ("failed-documented", where) if documented(error) else ("untyped-error", where)
    if seen.outputs_error is not None:
        where = f"engine.outputs raised {describe(seen.outputs_error)}"
        if not touched:
            return "harmed-healthy", f"untouched, but {where}"
        return ("failed-documented", where) if documented(seen.outputs_error) else ("untyped-error", where)
    same = (seen.known, seen.outputs, seen.running, _error_type(seen.ended_with)) == (
        expected.known, expected.outputs, expected.running, _error_type(expected.ended_with)
    )
    if same:
        return "exact", ""
    if not touched:
        return "harmed-healthy", f"untouched, but not exact: {_difference(seen, expected)}"
    if not seen.known:
        return "silently-ended", "the engine no longer knows it, and did not report a recovery failure"
    if seen.ended_with is not None and _error_type(seen.ended_with) != _error_type(expected.ended_with):
        return "silently-ended", f"ended by {describe(seen.ended_with)}; not a recovery failure"
    quarantined = sorted(run.dead_letters & READS[uri]) or (uri in TIME_BASED and sorted(run.dead_letters))
    if quarantined:
        difference = _difference(seen, expected)
        return "dead-lettered", f"events of {quarantined} quarantined (engine.dead_letters): {difference}"
    return "silently-wrong", _difference(seen, expected)


def _stopped(seen: SubscriptionRun) -> tuple[str | None, str | None]:
    """How a subscription was stopped by the engine, if it was: the types of its recovery failure and fault."""
    return _error_type(seen.failure), _error_type(seen.fault)


def _error_type(error: BaseException | None) -> str | None:
    return None if error is None else type(error).__qualname__


def _difference(seen: SubscriptionRun, expected: SubscriptionRun) -> str:
    if seen.known != expected.known:
        return "unknown to the engine"
    if seen.ended_with is not None and expected.ended_with is None:
        return f"ended by {describe(seen.ended_with)}"
    if seen.running != expected.running:
        return f"running={seen.running}, expected {expected.running}"
    got, want = seen.outputs or [], expected.outputs or []
    first = next((i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w), min(len(got), len(want)))
    mine = got[first] if first < len(got) else "(none)"
    theirs = want[first] if first < len(want) else "(none)"
    return f"{len(got)} outputs, expected {len(want)}; first difference at #{first}: {mine} instead of {theirs}"


def deleted_rows(run: Run, needs: dict[str, dict[str, int]], oracle: Run | None = None) -> dict[str, str]:
    """Under KEEP, a subscription that failed to recover (or vanished) keeps its rows: artifact, state, inner
    states, output counter, and the ingress events it has not read yet (after its readers' watermarks). One the
    oracle stopped the same way is left to the oracle's own test."""
    before, after = run.stored_before, run.stored_after
    if before is None or after is None or run.open_error is not None or run.hang:
        return {}
    kept = [uri for uri, seen in run.subscriptions.items()
            if (seen.failure is not None or seen.fault is not None or not seen.known)
            and (oracle is None or _stopped(seen) != _stopped(oracle.subscriptions[uri]))]
    problems: dict[str, str] = {}
    for uri in kept:
        missing = [
            f"{category}/{key}"
            for (category, key), row in before["blobs"].items()
            if owner_of(category, key, uri) and after["blobs"].get((category, key)) != row
        ]
        lost = sorted((stream, seq) for stream, seq in before["ingress"] - after["ingress"]
                      if stream in READS[uri] and seq > needs[uri].get(stream, -1))
        if lost:
            missing.append(f"{len(lost)} ingress events it needs ({lost[0][0]}#{lost[0][1]}...)")
        if missing:
            problems[uri] = ", ".join(missing[:4])
    return problems


def owner_of(category: str, key: str, uri: str) -> bool:
    """Whether row ``category/key`` belongs to subscription ``uri``."""
    if category == "state":
        return key == uri or key.startswith(uri + "/")
    return category in ("artifacts", "outputs") and key == uri


# -- the checksum of a blob row -------------------------------------------------------------------------------------


def row_crc(category: str, key: str, value: bytes) -> int:
    """The ``crc`` column of a ``reaqtive_blobs`` row, as the store computes it: the one place that knows. Today
    the CRC-32 of the value; if the store gains a ``row_checksum`` helper (one that also covers category and key),
    that helper."""
    helper = getattr(sqlite_store, "row_checksum", None)
    if helper is None:
        return checksum(value)
    names = list(inspect.signature(helper).parameters)
    if len(names) == 1:
        return int(helper(value))
    by_name = {"category": category, "key": key, "value": value, "blob": value, "data": value}
    if all(name in by_name for name in names):
        return int(helper(**{name: by_name[name] for name in names}))
    return int(helper(category, key, value))


# -- the stored state blob, taken apart and put together again ----------------------------------------------------


@dataclass
class Record:
    """One node's record in a state blob: its path, operator name, version, and its entries as the raw msgpack
    of each (so that what a mutation does not touch keeps its bytes: a set's order is the writer's)."""

    path: tuple[int, ...]
    name: Any
    version: Any
    entries: list[bytes]

    def values(self) -> list[Any]:
        """The entries decoded (a nested segment is a ``Segment``)."""
        return [DEFAULT_CODEC.decode_entries(entry, "fuzz")[0] for entry in self.entries]


def decode_state(blob: bytes) -> list[Record]:
    return [Record(node.path, node.name, list(node.version), split_entries(node.data)) for node in read_blob(blob)]


def split_entries(data: bytes) -> list[bytes]:
    """A segment's content cut into the raw msgpack of each entry."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, ext_hook=lambda code, data: None)
    unpacker.feed(data)
    chunks, start = [], 0
    for _ in unpacker:
        end = unpacker.tell()
        chunks.append(data[start:end])
        start = end
    return chunks


def as_segment(content: bytes) -> bytes:
    """``content`` framed as a nested segment (msgpack ext type 0)."""
    return bytes(msgpack.packb(msgpack.ExtType(0, content)))


def encode_state(records: list[Record], *, magic: bytes = b"RQ", format_byte: int = 1, body_extra: bytes = b"",
                 length_delta: int = 0) -> bytes:
    """A blob as the framing writes it (with a valid CRC), from records that may be anything but well formed."""
    body = bytearray()
    previous: tuple[int, ...] = ()
    for record in records:
        common = 0
        for x, y in zip(previous, record.path, strict=False):
            if x != y:
                break
            common += 1
        body += msgpack.packb([common, *record.path[common:]])
        body += DEFAULT_CODEC.encode(record.name) + DEFAULT_CODEC.encode(record.version)
        body += as_segment(b"".join(record.entries))
        previous = record.path
    body += body_extra
    head = magic + bytes((format_byte,)) + _varint(len(body) + length_delta)
    blob = head + bytes(body)
    return blob + checksum(blob).to_bytes(4, "big")


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | 0x80 if value else byte)
        if not value:
            return bytes(out)


# -- the pristine store, read once --------------------------------------------------------------------------------


@dataclass
class StoreMap:
    """What the mutations pick their targets from: the undamaged store's rows."""

    blobs: dict[tuple[str, str], tuple[bytes, int]]
    ingress: list[dict[str, Any]]
    egress: list[dict[str, Any]]
    heads: dict[str, int]
    size: int
    page_size: int

    @classmethod
    def read(cls, path: Path) -> StoreMap:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            blobs = {
                (category, key): (bytes(value), crc)
                for category, key, value, crc in db.execute("SELECT category, key, value, crc FROM reaqtive_blobs")
            }
            ingress = _rows(db, "reaqtive_ingress", "pos")
            egress = _rows(db, "reaqtive_egress", "subscription, seq")
            heads = dict(db.execute("SELECT stream, next_seq FROM reaqtive_stream_heads").fetchall())
            page_size = db.execute("PRAGMA page_size").fetchone()[0]
        finally:
            db.close()
        return cls(blobs, ingress, egress, heads, path.stat().st_size, page_size)

    def keys(self, category: str) -> list[str]:
        return sorted(key for c, key in self.blobs if c == category)

    def categories(self) -> list[str]:
        return sorted({c for c, _ in self.blobs})

    def record(self, uri: str) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.blobs[("artifacts", uri)][0])
        return value

    def needs(self) -> dict[str, dict[str, int]]:
        """Per subscription and stream, the lowest watermark of its readers in the checkpoint: a subscription
        kept without running needs the log's events after it."""
        delivered = json.loads(self.blobs[("engine", "delivery")][0])["delivered"]
        needs: dict[str, dict[str, int]] = {uri: {} for uri in SUBSCRIPTIONS}
        for (category, key), (value, _) in self.blobs.items():
            owner = next((uri for uri in SUBSCRIPTIONS if key == uri or key.startswith(uri + "/")), None)
            if category != "state" or owner is None:
                continue
            if key != owner:
                stream = INNER_READS.get(owner)  # the inners of group_by read groups, not streams
                if stream is None:
                    continue
            else:
                stream = min(READS[owner] - {INNER_READS.get(owner)})
            for record in decode_state(value):
                if record.name == "reaqtive:stream":
                    mark = record.values()[1]
                    watermark = delivered[stream] if mark is None else mark
                    needs[owner][stream] = min(needs[owner].get(stream, watermark), watermark)
        for uri in SUBSCRIPTIONS:
            if decode_state(self.blobs[("state", uri)][0])[0].values()[0] is True:  # finished: needs nothing more
                needs[uri] = {stream: 2**62 for stream in READS[uri]}
        return needs

    def touched_by(self, category: str, key: str) -> frozenset[str]:
        """The subscriptions whose stored data a change of row ``category/key`` touches."""
        if category in ("state", "outputs"):
            owners = [uri for uri in SUBSCRIPTIONS if key == uri or key.startswith(uri + "/")]
            return frozenset(owners)
        if category == "artifacts":
            if key in SUBSCRIPTIONS:
                return frozenset({key})
            if key in STREAMS:
                return readers_of(key) | TIME_BASED
            return frozenset(uri for uri in SUBSCRIPTIONS if key in self.record(uri).get("refs", ()))
        if category == "templates":
            return frozenset(uri for uri in SUBSCRIPTIONS if self.record(uri).get("template") == key)
        return ALL


def _rows(db: sqlite3.Connection, table: str, order: str) -> list[dict[str, Any]]:
    cursor = db.execute(f"SELECT * FROM {table} ORDER BY {order}")
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def readers_of(stream: str) -> frozenset[str]:
    return frozenset(uri for uri, streams in READS.items() if stream in streams)


# -- mutations ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mutation:
    """A damage: ``apply(db)`` changes the store through SQL (or ``apply_file(path)`` changes the file)."""

    cls: str
    what: str
    touched: frozenset[str]
    apply: Callable[[sqlite3.Connection], None] | None = None
    apply_file: Callable[[Path], None] | None = None

    def damage(self, path: Path) -> None:
        if self.apply is not None:
            db = sqlite3.connect(path, isolation_level=None)
            try:
                db.execute("PRAGMA synchronous=OFF")
                db.execute("BEGIN IMMEDIATE")
                self.apply(db)
                db.execute("COMMIT")
            finally:
                db.close()
        if self.apply_file is not None:
            self.apply_file(path)


def _set_blob(category: str, key: str, value: bytes, crc: int | None = None) -> Callable[[sqlite3.Connection], None]:
    """Replace a blob row's value; ``crc``: the new crc (``None``: leave the old one, so the damage shows)."""

    def apply(db: sqlite3.Connection) -> None:
        if crc is None:
            db.execute("UPDATE reaqtive_blobs SET value = ? WHERE category = ? AND key = ?", (value, category, key))
        else:
            db.execute("UPDATE reaqtive_blobs SET value = ?, crc = ? WHERE category = ? AND key = ?",
                       (value, crc, category, key))

    return apply


def _forge_blob(category: str, key: str, value: bytes) -> Callable[[sqlite3.Connection], None]:
    """Replace a blob row's value behind a valid checksum."""
    return _set_blob(category, key, value, row_crc(category, key, value))


def _flip_bits(data: bytes, rng: random.Random, flips: int) -> bytes:
    damaged = bytearray(data)
    for _ in range(flips):
        bit = rng.randrange(len(damaged) * 8)
        damaged[bit // 8] ^= 1 << (bit % 8)
    return bytes(damaged)


def _json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")


class Generator:
    """Draws mutations of one class from the store map with one case's RNG."""

    def __init__(self, store: StoreMap, rng: random.Random) -> None:
        self.store = store
        self.rng = rng

    # -- helpers

    def pick_key(self, category: str) -> str:
        return self.rng.choice(self.store.keys(category))

    def value(self, category: str, key: str) -> bytes:
        return self.store.blobs[(category, key)][0]

    def blob_mutation(self, cls: str, what: str, category: str, key: str,
                      apply: Callable[[sqlite3.Connection], None]) -> Mutation:
        return Mutation(cls, f"{category}/{key}: {what}", self.store.touched_by(category, key), apply)

    # -- damage behind a stale checksum

    def bitflip(self, category: str) -> Mutation:
        key = self.pick_key(category)
        flips = self.rng.choice((1, 1, 1, 2, 3, 8))
        damaged = _flip_bits(self.value(category, key), self.rng, flips)
        return self.blob_mutation(f"bitflip/{category}", f"{flips} bit(s) flipped", category, key,
                                  _set_blob(category, key, damaged))

    def crc_flip(self) -> Mutation:
        category = self.rng.choice(self.store.categories())
        key = self.pick_key(category)
        bit = self.rng.randrange(32)

        def apply_xor(db: sqlite3.Connection) -> None:
            (crc,) = db.execute("SELECT crc FROM reaqtive_blobs WHERE category = ? AND key = ?",
                                (category, key)).fetchone()
            db.execute("UPDATE reaqtive_blobs SET crc = ? WHERE category = ? AND key = ?",
                       (crc ^ (1 << bit), category, key))

        return self.blob_mutation("bitflip/crc-column", f"crc bit {bit} flipped", category, key, apply_xor)

    def truncate(self, category: str, forged: bool) -> Mutation:
        key = self.pick_key(category)
        value = self.value(category, key)
        # (a shorter number is a valid number: of a counter, only the empty one is a detectable forgery)
        cut = 0 if (forged and category == "outputs") or not value else self.rng.randrange(len(value))
        damaged = value[:cut]
        what = f"truncated to {cut} of {len(value)} bytes" + (" behind a valid crc" if forged else "")
        apply = _forge_blob(category, key, damaged) if forged else _set_blob(category, key, damaged)
        return self.blob_mutation(f"truncate{'-forged' if forged else ''}/{category}", what, category, key, apply)

    # -- rows exchanged, copied, deleted (crc moving with the value)

    def swap(self, category: str) -> Mutation:
        keys = self.store.keys(category)
        pairs = [(x, y) for i, x in enumerate(keys) for y in keys[i + 1:] if self.value(category, x) != self.value(
            category, y)]
        if category == "state":
            alike = [("q://sum-a", "q://sum-c"), ("q://buf3", "q://buf5"), ("q://skip-take-1", "q://skip-take-2"),
                     ("q://group", "q://group-pairs")]
            inner = [(x, y) for x, y in pairs if "/" in x[5:] and "/" in y[5:]]
            pool = [p for p in alike if p in pairs] * 3 + inner * 2 + pairs
        elif category == "artifacts":
            alike = [("q://sum-a", "q://sum-c"), ("q://buf3", "q://buf5"), ("q://skip-take-1", "q://skip-take-2")]
            pool = [p for p in alike if p in pairs] * 3 + pairs
        else:
            pool = pairs
        x, y = self.rng.choice(pool)
        copy = self.rng.random() < 0.25
        (vx, cx), (vy, cy) = self.store.blobs[(category, x)], self.store.blobs[(category, y)]

        def apply(db: sqlite3.Connection) -> None:
            _set_blob(category, x, vy, cy)(db)
            if not copy:
                _set_blob(category, y, vx, cx)(db)

        what = f"{category}/{x} {'given the row of' if copy else 'and its row swapped with'} {category}/{y}"
        touched = self.store.touched_by(category, x) | (frozenset() if copy else self.store.touched_by(category, y))
        return Mutation(f"swap/{category}", what, touched, apply)

    def delete(self, category: str) -> Mutation:
        key = self.pick_key(category)

        def apply(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM reaqtive_blobs WHERE category = ? AND key = ?", (category, key))

        return self.blob_mutation(f"delete/{category}", "row deleted", category, key, apply)

    # -- state blobs rewritten behind valid checksums (the blob's own and the row's)

    def state_key(self) -> tuple[str, list[Record]]:
        key = self.pick_key("state")
        return key, decode_state(self.value("state", key))

    def forge_state(self, cls: str, key: str, blob: bytes, what: str) -> Mutation:
        return self.blob_mutation(cls, what, "state", key, _forge_blob("state", key, blob))

    def state_version(self) -> Mutation:
        key, records = self.state_key()
        index = self.rng.randrange(len(records))
        record = records[index]
        old = list(record.version)
        record.version = self.rng.choice(
            ([old[0] + 1], [old[0] + 98], [0], [*old, 1], [], [-1], [str(old[0])], [float(old[0])], old[0], None)
        )
        return self.forge_state("state-version", key, encode_state(records),
                                f"record {index} ({record.name}) version {old} -> {record.version!r}")

    def state_shape(self) -> Mutation:
        key, records = self.state_key()
        rng = self.rng
        kind = rng.choice(("rename", "rename", "drop", "duplicate", "reorder", "path", "path", "drop-entry",
                           "drop-entry", "insert-entry", "segment-for-value", "wrap-segment", "format", "magic",
                           "length", "trailing", "empty"))
        index = rng.randrange(len(records))
        record = records[index]
        extra: dict[str, Any] = {}
        what = f"record {index} ({record.name}): {kind}"
        if kind == "rename":
            names = [*sorted({r.name for r in records} - {record.name}), "reaqtive:take", "reaqtive:nonexistent"]
            record.name = rng.choice([n for n in names if n != record.name])
            what += f" to {record.name!r}"
        elif kind == "drop" and len(records) > 1:
            del records[index]
        elif kind == "duplicate":
            records.insert(index, Record(record.path, record.name, list(record.version), list(record.entries)))
        elif kind == "reorder" and len(records) > 1:
            other = rng.choice([i for i in range(len(records)) if i != index])
            records[index], records[other] = records[other], records[index]
            what += f" with record {other}"
        elif kind == "path":
            record.path = rng.choice(((*record.path[:-1], record.path[-1] + 1), (*record.path, 0),
                                      record.path[:-1] or (1,)))
            what += f" to {record.path}"
        elif kind == "drop-entry" and record.entries:
            del record.entries[-1]
        elif kind == "insert-entry":
            record.entries.insert(0, DEFAULT_CODEC.encode(rng.choice((False, 0, None))))
        elif kind == "segment-for-value" and record.entries:
            at = rng.randrange(len(record.entries))
            if type(record.values()[at]) is not Segment:
                record.entries[at] = as_segment(record.entries[at])
            what += f" (entry {at})"
        elif kind == "wrap-segment":
            record.entries = [as_segment(b"".join(record.entries))]
        elif kind == "format":
            extra["format_byte"] = rng.choice((0, 2, 255))
        elif kind == "magic":
            extra["magic"] = b"RX"
        elif kind == "length":
            extra["length_delta"] = rng.choice((-1, 1, 7))
        elif kind == "trailing":
            extra["body_extra"] = rng.choice((b"\x91\x00", b"\xc0", b"\x92\x00\x00\xa1x"))
        elif kind == "empty":
            records.clear()
        else:
            records.insert(index, Record(record.path, record.name, list(record.version), list(record.entries)))
            what = f"record {index} ({record.name}): duplicate"
        return self.forge_state("state-shape", key, encode_state(records, **extra), what)

    def state_field(self, range_only: bool) -> Mutation:
        """A field whose type (or range) the operator itself defines, replaced by a value of another type (or
        an impossible value of the right type)."""
        candidates = []
        for key in self.store.keys("state"):
            records = decode_state(self.value("state", key))
            for index, record in enumerate(records):
                values = record.values()
                for pointer, kind in FIELDS.get(record.name, []) + FIELDS["*"]:
                    for concrete in _expand(values, pointer, self.rng):
                        current = _get(values, concrete)
                        if _is_kind(current, kind) and (not range_only or kind in RANGE_FORGERIES):
                            candidates.append((key, index, concrete, kind))
        key, index, pointer, kind = self.rng.choice(candidates)
        records = decode_state(self.value("state", key))
        record = records[index]
        values = record.values()
        current = _get(values, pointer)
        if range_only:
            forged = self.rng.choice(RANGE_FORGERIES[kind](current, self.store))
        else:
            forged = self.rng.choice(_wrong_types(kind, current))
        if len(pointer) == 1:
            values[pointer[0]] = forged
        else:
            _set(values, pointer, forged)
        record.entries[pointer[0]] = DEFAULT_CODEC.encode(values[pointer[0]])
        cls = "state-range" if range_only else "state-type"
        return self.forge_state(cls, key, encode_state(records),
                                f"record {index} ({record.name}) entry {list(pointer)} ({kind}) {current!r} -> "
                                f"{forged!r}")

    # -- JSON rows rewritten behind valid checksums

    def forge_artifact(self) -> Mutation:
        rng = self.rng
        key = rng.choice([k for k in self.store.keys("artifacts") if k in SUBSCRIPTIONS] * 4
                         + self.store.keys("artifacts"))
        record = json.loads(self.value("artifacts", key))
        if record.get("kind") == "subscription":
            field_name = rng.choice(("kind", "template", "template", "constants", "constants", "constants",
                                     "observer", "start", "start", "refs", "clock", "created", "whole"))
        elif record.get("kind") == "observable":
            field_name = rng.choice(("kind", "expression", "expression", "whole"))
        else:
            field_name = rng.choice(("kind", "whole"))
        value = record.get(field_name)
        forged: Any
        if field_name == "whole":
            body = rng.choice((_json([1, 2]), _json("subscription"), _json(7), b"\xff\xfe", _json(None)))
            return self.blob_mutation("forge/artifacts", f"record replaced by {body!r}", "artifacts", key,
                                      _forge_blob("artifacts", key, body))
        if field_name == "constants":
            forged = _forge_constants(value, rng)
        elif field_name == "kind":
            forged = rng.choice((5, None, "bogus", ["subscription"]))
        elif field_name == "template":
            forged = rng.choice((5, None, "0" * 64, [value]))
        elif field_name == "observer":
            forged = rng.choice((5, None, "obs://nonexistent"))
        elif field_name == "start":
            stream = next(iter(value), "s://a") if isinstance(value, dict) else "s://a"
            forged = rng.choice(([], "x", {stream: "x"}, {stream: [0]}, {stream: 10**9}, {stream: -7}))
        elif field_name == "refs":
            forged = rng.choice((5, "s://a", None))
        elif field_name == "clock":
            forged = rng.choice(("x", None, [], 10**30))
        elif field_name == "created":
            forged = rng.choice((5, None, "yesterday"))
        else:  # an observable's expression
            forged = rng.choice((5, None, {"op": "nonexistent", "args": []}, {"op": "filter", "args": "x"}))
        record[field_name] = forged
        return self.blob_mutation("forge/artifacts", f"{field_name}: {value!r} -> {forged!r}", "artifacts", key,
                                  _forge_blob("artifacts", key, _json(record)))

    def forge_template(self) -> Mutation:
        rng = self.rng
        key = self.pick_key("templates")
        template = json.loads(self.value("templates", key))
        nodes = list(_nodes(template))
        kind = rng.choice(("op", "op", "args", "fn", "fn-other", "fn-other", "param", "param", "arity", "whole"))
        node = rng.choice(nodes)
        if kind == "whole":
            body = rng.choice((_json([]), _json("x"), _json(None), b"{"))
            return self.blob_mutation("forge/templates", f"template replaced by {body!r}", "templates", key,
                                      _forge_blob("templates", key, body))
        functions = [n for n in _all_dicts(template) if "fn" in n]
        params = [n for n in _all_dicts(template) if "p" in n]
        if kind == "op":
            node["op"] = rng.choice(("nonexistent", 5, None, "map" if node["op"] != "map" else "filter"))
            what = f"op of a node -> {node['op']!r}"
        elif kind == "args":
            node["args"] = rng.choice(("x", {}, None))
            what = f"args of {node['op']!r} -> {node['args']!r}"
        elif kind in ("fn", "fn-other") and functions:
            target = rng.choice(functions)
            old = target["fn"]
            if kind == "fn":
                target["fn"] = rng.choice(("@nonexistent", 5, None, "os:system", "reaqtive.nonexistent:f"))
            else:  # another registered function: a well-formed query that is not the stored one (its id is the hash)
                target["fn"] = rng.choice([f"@{name}" for name in FUNCTIONS.names() if f"@{name}" != old])
            what = f"function {old!r} -> {target['fn']!r}"
        elif kind == "param" and params:
            target = rng.choice(params)
            old = target["p"]
            target["p"] = rng.choice((99, -1, "0", None, old + 1))
            what = f"parameter {old!r} -> {target['p']!r}"
        else:
            if node["args"]:
                node["args"] = node["args"][:-1]
            what = f"{node['op']!r} lost its last argument"
        return self.blob_mutation("forge/templates", what, "templates", key,
                                  _forge_blob("templates", key, _json(template)))

    def forge_engine(self) -> Mutation:
        rng = self.rng
        key = self.pick_key("engine")
        record = json.loads(self.value("engine", key))
        field_name = rng.choice(("pos", "pos", "delivered", "delivered", "delivered", "now", "now", "whole"))
        if field_name == "whole":
            body = rng.choice((_json([]), _json("x"), _json({}), b"\x00"))
            return self.blob_mutation("forge/engine", f"record replaced by {body!r}", "engine", key,
                                      _forge_blob("engine", key, body))
        value = record.get(field_name)
        forged: Any
        if field_name == "pos":
            forged = rng.choice(("x", None, -5, 10**30, 1.5, [value], 10**7))
        elif field_name == "delivered":
            stream = rng.choice(sorted(value)) if isinstance(value, dict) and value else "s://a"
            forged = dict(value) if isinstance(value, dict) else {}
            forged[stream] = rng.choice(("x", None, [1], 1.5, 10**9, -9))
            forged = rng.choice((forged, forged, forged, [], "x"))
        else:
            forged = rng.choice(("x", None, [], 10**30, -(10**20), 1.5))
        record[field_name] = forged
        return self.blob_mutation("forge/engine", f"{field_name}: {value!r} -> {forged!r}", "engine", key,
                                  _forge_blob("engine", key, _json(record)))

    def forge_outputs(self) -> Mutation:
        key = self.pick_key("outputs")
        body = self.rng.choice((b"abc", b"", b"-1", b"1.5", b"\xff\xfe", b"0x10", "\uff11".encode(), b"[1]"))
        return self.blob_mutation("forge/outputs", f"counter {self.value('outputs', key)!r} -> {body!r}", "outputs",
                                  key, _forge_blob("outputs", key, body))

    # -- the ingress log and the durable sink

    def ingress(self) -> Mutation:
        rng = self.rng
        rows = self.store.ingress
        row = rng.choice(rows)
        pos, stream, seq = row["pos"], row["stream"], row["seq"]
        kind = rng.choice(("flip", "flip", "flip", "truncate", "time-future", "time-past", "time-overflow",
                           "time-swap", "seq-beyond", "seq-negative", "stream-unknown", "stream-other", "delete",
                           "delete", "duplicate", "swap-payload", "swap-payload", "reorder"))
        touched = readers_of(stream) | TIME_BASED  # every event moves the clock
        what = f"ingress pos {pos} ({stream}#{seq}): {kind}"
        statements: list[tuple[str, tuple[Any, ...]]] = []
        if kind == "flip":
            payload = _flip_bits(bytes(row["payload"]), rng, rng.choice((1, 1, 2, 4)))
            statements.append(("UPDATE reaqtive_ingress SET payload = ? WHERE pos = ?", (payload, pos)))
        elif kind == "truncate":
            cut = rng.randrange(len(row["payload"]))
            statements.append(("UPDATE reaqtive_ingress SET payload = ? WHERE pos = ?", (row["payload"][:cut], pos)))
        elif kind.startswith("time-"):
            if kind == "time-future":
                micros = (datetime(2226, 6, 1, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(
                    microseconds=1)
            elif kind == "time-past":
                micros = rng.choice((-1, -(10**15)))  # 1969, 1938
            elif kind == "time-overflow":
                micros = rng.choice((2**62, -(2**62)))
            else:
                other = rng.choice(rows)
                micros = unpack_times(other["times"], other["count"])[0]
            what += f" -> {micros}"
            times = unpack_times(row["times"], row["count"])  # the row's first event gets that time
            statements.append(("UPDATE reaqtive_ingress SET times = ? WHERE pos = ?",
                               (pack_times([micros, *times[1:]]), pos)))
        elif kind == "seq-beyond":
            statements.append(("UPDATE reaqtive_ingress SET seq = ? WHERE pos = ?", (self.store.heads[stream] + 50,
                                                                                       pos)))
        elif kind == "seq-negative":
            statements.append(("UPDATE reaqtive_ingress SET seq = ? WHERE pos = ?", (-seq - 2, pos)))
        elif kind == "stream-unknown":
            statements.append(("UPDATE reaqtive_ingress SET stream = ? WHERE pos = ?", ("s://zz", pos)))
        elif kind == "stream-other":
            other = rng.choice([s for s in STREAMS if s != stream])
            taken = {r["seq"] for r in rows if r["stream"] == other}
            new_seq = seq if seq not in taken else self.store.heads[other] + 7
            statements.append(("UPDATE reaqtive_ingress SET stream = ?, seq = ? WHERE pos = ?", (other, new_seq, pos)))
            touched |= readers_of(other)
            what += f" -> {other}#{new_seq}"
        elif kind == "delete":
            statements.append(("DELETE FROM reaqtive_ingress WHERE pos = ?", (pos,)))
        elif kind == "duplicate":
            columns = [c for c in row if c != "pos"]
            copy = dict(row)
            copy["seq"] = self.store.heads[stream]  # (stream, seq) is unique: the copy comes after the head
            statements.append((f"INSERT INTO reaqtive_ingress ({', '.join(columns)}) VALUES "
                               f"({', '.join('?' for _ in columns)})", tuple(copy[c] for c in columns)))
        elif kind == "swap-payload":
            other = rng.choice([r for r in rows if r["pos"] != pos and r["payload"] != row["payload"]])
            moved = [c for c in row if c in ("payload", "crc")]
            for target, source in ((pos, other), (other["pos"], row)):
                statements.append((f"UPDATE reaqtive_ingress SET {', '.join(f'{c} = ?' for c in moved)} WHERE pos = ?",
                                   (*(source[c] for c in moved), target)))
            touched |= readers_of(other["stream"])
            what += f" with pos {other['pos']} ({other['stream']}#{other['seq']})"
        else:  # reorder: two events of one stream change places in the log
            same = [r for r in rows if r["stream"] == stream and r["pos"] != pos]
            other = rng.choice(same)
            statements += [
                ("UPDATE reaqtive_ingress SET pos = ? WHERE pos = ?", (-1, pos)),
                ("UPDATE reaqtive_ingress SET pos = ? WHERE pos = ?", (pos, other["pos"])),
                ("UPDATE reaqtive_ingress SET pos = ? WHERE pos = ?", (other["pos"], -1)),
            ]
            what += f" with pos {other['pos']}"

        def apply(db: sqlite3.Connection) -> None:
            for statement, parameters in statements:
                db.execute(statement, parameters)

        return Mutation(f"ingress/{kind.split('-')[0]}", what, touched, apply)

    def egress(self) -> Mutation:
        rng = self.rng
        rows = self.store.egress
        row = rng.choice(rows)
        uri, seq = row["subscription"], row["seq"]
        kind = rng.choice(("flip", "flip", "truncate", "delete", "delete", "swap", "reseq"))
        what = f"egress {uri}#{seq}: {kind}"
        statements: list[tuple[str, tuple[Any, ...]]] = []
        where = "WHERE subscription = ? AND seq = ?"
        if kind == "flip":
            payload = _flip_bits(bytes(row["payload"]), rng, rng.choice((1, 2)))
            statements.append((f"UPDATE reaqtive_egress SET payload = ? {where}", (payload, uri, seq)))
        elif kind == "truncate":
            statements.append((f"UPDATE reaqtive_egress SET payload = ? {where}",
                               (row["payload"][: rng.randrange(len(row["payload"]))], uri, seq)))
        elif kind == "delete":
            statements.append((f"DELETE FROM reaqtive_egress {where}", (uri, seq)))
        elif kind == "swap":
            others = [r for r in rows if r["subscription"] == uri and r["payload"] != row["payload"]]
            if others:
                other = rng.choice(others)
                moved = [c for c in row if c in ("payload", "crc")]
                for target, source in ((seq, other), (other["seq"], row)):
                    statements.append((f"UPDATE reaqtive_egress SET {', '.join(f'{c} = ?' for c in moved)} {where}",
                                       (*(source[c] for c in moved), uri, target)))
                what += f" with #{other['seq']}"
        else:
            last = max(r["seq"] for r in rows if r["subscription"] == uri)
            statements.append((f"UPDATE reaqtive_egress SET seq = ? {where}", (last + 3, uri, seq)))
            what += f" -> #{last + 3}"

        def apply(db: sqlite3.Connection) -> None:
            for statement, parameters in statements:
                db.execute(statement, parameters)

        return Mutation(f"egress/{kind}", what, frozenset({uri}) if uri in SUBSCRIPTIONS else ALL, apply)

    # -- the store's own tables and the file

    def meta(self) -> Mutation:
        rng = self.rng
        key, value = rng.choice((("schema_version", 2), ("schema_version", "1"), ("format", "other"),
                                 ("checkpoint_id", "x"), ("checkpoint_id", None), ("engine_schema_version", 99),
                                 ("engine_schema_version", "one"), ("schema_version", None)))

        def apply(db: sqlite3.Connection) -> None:
            if value is None:
                db.execute("DELETE FROM reaqtive_meta WHERE key = ?", (key,))
            else:
                db.execute("UPDATE reaqtive_meta SET value = ? WHERE key = ?", (value, key))

        return Mutation("store/meta", f"reaqtive_meta {key} -> {value!r}", ALL, apply)

    def schema(self) -> Mutation:
        table = self.rng.choice(("reaqtive_ingress", "reaqtive_egress", "reaqtive_stream_heads", "reaqtive_blobs"))

        def apply(db: sqlite3.Connection) -> None:
            db.execute(f"DROP TABLE {table}")

        return Mutation("store/table", f"table {table} dropped", ALL, apply)

    def file(self) -> Mutation:
        rng = self.rng
        page, size = self.store.page_size, self.store.size
        if rng.random() < 0.5:
            cut = rng.choice((rng.randrange(size), rng.randrange(1, size // page) * page))

            def truncate(path: Path) -> None:
                with path.open("r+b") as file:
                    file.truncate(cut)

            return Mutation("file/truncate", f"file truncated to {cut} of {size} bytes", ALL, apply_file=truncate)
        number = rng.randrange(1, size // page)  # not page 0 (the header): "not a database" is tested elsewhere

        def zero(path: Path) -> None:
            with path.open("r+b") as file:
                file.seek(number * page)
                file.write(bytes(page))

        return Mutation("file/zero-page", f"page {number} of {size // page} zeroed", ALL, apply_file=zero)


def _nodes(template: Any) -> Iterator[dict[str, Any]]:
    """The query nodes (``{"op", "args"}``) of a template."""
    for node in _all_dicts(template):
        if "op" in node and "args" in node:
            yield node


def _all_dicts(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from _all_dicts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _all_dicts(item)


def _forge_constants(constants: list[Any], rng: random.Random) -> Any:
    """Constants of a wrong type or count (a right-typed different value is a different query: out of scope)."""
    kind = rng.choice(("count-", "count+", "type", "type", "type", "whole"))
    if kind == "whole" or not constants:
        return rng.choice(("x", {}, None, 5))
    forged = list(constants)
    if kind == "count-":
        return forged[:-1]
    if kind == "count+":
        return [*forged, 1]
    index = rng.randrange(len(forged))
    value = forged[index]
    if isinstance(value, dict) and "stream" in value:
        forged[index] = rng.choice(({"stream": 5}, {"stream": "s://nonexistent"}, "s://a", {"stream": None}))
    elif isinstance(value, dict) and "td" in value:
        forged[index] = rng.choice(({"td": "x"}, {"td": [0]}, 30, {"td": [0, -30, 0]}))
    elif isinstance(value, bool) or value is None:
        forged[index] = rng.choice(("x", [], 1.5, {"td": [0, 1, 0]}))
    elif isinstance(value, int):
        forged[index] = rng.choice((str(value), float(value) + 0.5, [value], None, {"td": [0, value, 0]}, -value - 1))
    else:
        forged[index] = rng.choice((5, None, []))
    return forged


# -- typed fields of the operators' state -------------------------------------------------------------------------

# Per operator: (pointer, kind) of the entries whose type the operator itself defines (counts, flags, ids,
# watermarks, containers, deadlines). A pointer is an entry index and then indices into nested lists, "*" for
# any element. User data (accumulators, buffered elements, keys, distinct values) is not listed: its type is
# the user's.
_SLOTS: Final = [((1,), "count"), ((2,), "bool"), ((3,), "list"), ((3, "*"), "list"), ((3, "*", 0), "number"),
                 ((3, "*", 1), "bool"), ((3, "*", 3), "list"), ((4,), "list"), ((4, "*"), "number")]
_INNER_STREAMS: Final = [((1,), "count"), ((2,), "bool"), ((3,), "bool"), ((4,), "list"), ((4, "*"), "list"),
                         ((4, "*", 0), "number"), ((4, "*", 3), "bool")]
_TIME_BUFFER: Final = [((1,), "list"), ((2,), "deadline"), ((3,), "list"), ((4,), "bool")]
FIELDS: Final[dict[str, list[tuple[tuple[Any, ...], str]]]] = {
    "*": [((0,), "bool")],  # every record starts with the disposed flag
    "reaqtive:egress": [((1,), "int?")],
    "reaqtive:stream": [((1,), "watermark")],
    "reaqtive:take": [((1,), "count")],
    "reaqtive:skip": [((1,), "count")],
    "reaqtive:sum": [((1,), "bool")],
    "reaqtive:scan+seed": [],
    "reaqtive:buffer/count": [((1,), "buffer")],
    "reaqtive:buffer/time": _TIME_BUFFER,
    "reaqtive:buffer/time_or_count": _TIME_BUFFER,
    "reaqtive:distinct": [((1,), "set")],
    "reaqtive:flat_map": _SLOTS,
    "reaqtive:switch_latest": _SLOTS,
    "reaqtive:group_by": _INNER_STREAMS,
    # the chain's names, paged, page counter, page numbers, results waiting, source done, pulled
    "reaqtive:group_by+keyed": [((1,), "list"), ((2,), "bool"), ((3,), "count"), ((4,), "list"),
                                ((4, "*"), "number"), ((5,), "list"), ((6,), "bool"), ((7,), "bool")],
    "reaqtive:keyed_page": [((1,), "list"), ((2,), "list"), ((2, "*"), "list")],
}


def _expand(entries: list[Any], pointer: tuple[Any, ...], rng: random.Random) -> list[tuple[int, ...]]:
    """The concrete pointers a pattern names in these entries (one random element for each "*")."""
    concrete: list[tuple[int, ...]] = [()]
    for part in pointer:
        grown = []
        for prefix in concrete:
            try:
                container = _get(entries, prefix) if prefix else entries
            except (IndexError, TypeError, KeyError):
                continue
            if not isinstance(container, list) or not container:
                continue
            if part == "*":
                grown.append((*prefix, rng.randrange(len(container))))
            elif part < len(container):
                grown.append((*prefix, part))
        concrete = grown
    return concrete


def _get(entries: list[Any], pointer: tuple[int, ...]) -> Any:
    value: Any = entries
    for part in pointer:
        value = value[part]
    return value


def _set(entries: list[Any], pointer: tuple[int, ...], forged: Any) -> None:
    _get(entries, pointer[:-1])[pointer[-1]] = forged


def _is_kind(value: Any, kind: str) -> bool:
    if kind == "bool":
        return type(value) is bool
    if kind in ("count", "number"):
        return type(value) is int
    if kind in ("int?", "watermark"):
        return value is None or type(value) is int
    if kind in ("list", "buffer"):
        return type(value) is list
    if kind == "set":
        return type(value) is set
    if kind == "deadline":
        return type(value) is datetime
    return False


def _wrong_types(kind: str, value: Any) -> list[Any]:
    """Values of another type than ``kind`` says (same meaning where there is one: 1 for True, "7" for 7)."""
    if kind == "bool":
        return [int(value), 1 - int(value), None, "false", [], float(value)]
    if kind in ("count", "number", "int?", "watermark"):
        number = 0 if value is None else value
        forged = [str(number), float(number), [number], {"n": number}, True, 1.5]
        # A stream reader's None is a legal value ("caught up"): forging a lagging reader's watermark to it is a
        # forgery of the right type, which no checksum or check can tell from the truth (out of scope).
        return forged if value is None or kind == "watermark" else [*forged, None]
    if kind in ("list", "buffer"):
        return [{"0": value}, "abc", 7, None, {0}, b"\x00"]
    if kind == "set":
        return [sorted(value, key=repr), {str(v): v for v in value}, 7, None, "abc"]
    if kind == "deadline":
        return [int(value.timestamp() * 1e6), value.isoformat(), None, timedelta(seconds=1), [value]]
    raise AssertionError(kind)


RANGE_FORGERIES: Final[dict[str, Callable[[Any, StoreMap], list[Any]]]] = {
    # values of the right type that no real run can produce
    "count": lambda value, store: [-1, -value - 7],
    "number": lambda value, store: [-1, -value - 3],
    "watermark": lambda value, store: [-2, -1000, max(store.heads.values()) + 1000],
    "buffer": lambda value, store: [list(range(12))],  # a partial list as long as a full one (counts are 3, 5)
    "deadline": lambda value, store: [datetime(1900, 1, 1, tzinfo=UTC), datetime(2226, 1, 1, tzinfo=UTC)],
}


# What every case draws from, with weights (about the share of cases).
CLASSES: Final[list[tuple[str, int, Callable[[Generator], Mutation]]]] = [
    ("bitflip/state", 70, lambda g: g.bitflip("state")),
    ("bitflip/artifacts", 35, lambda g: g.bitflip("artifacts")),
    ("bitflip/templates", 20, lambda g: g.bitflip("templates")),
    ("bitflip/engine", 15, lambda g: g.bitflip("engine")),
    ("bitflip/outputs", 20, lambda g: g.bitflip("outputs")),
    ("bitflip/crc-column", 15, Generator.crc_flip),
    ("truncate/state", 25, lambda g: g.truncate("state", False)),
    ("truncate/artifacts", 12, lambda g: g.truncate("artifacts", False)),
    ("truncate/templates", 8, lambda g: g.truncate("templates", False)),
    ("truncate/engine", 6, lambda g: g.truncate("engine", False)),
    ("truncate/outputs", 6, lambda g: g.truncate("outputs", False)),
    ("truncate-forged/state", 20, lambda g: g.truncate("state", True)),
    ("truncate-forged/artifacts", 10, lambda g: g.truncate("artifacts", True)),
    ("truncate-forged/templates", 8, lambda g: g.truncate("templates", True)),
    ("truncate-forged/engine", 6, lambda g: g.truncate("engine", True)),
    ("truncate-forged/outputs", 4, lambda g: g.truncate("outputs", True)),
    ("swap/state", 55, lambda g: g.swap("state")),
    ("swap/artifacts", 25, lambda g: g.swap("artifacts")),
    ("swap/templates", 10, lambda g: g.swap("templates")),
    ("swap/outputs", 15, lambda g: g.swap("outputs")),
    ("delete/state", 30, lambda g: g.delete("state")),
    ("delete/artifacts", 20, lambda g: g.delete("artifacts")),
    ("delete/templates", 8, lambda g: g.delete("templates")),
    ("delete/engine", 4, lambda g: g.delete("engine")),
    ("delete/outputs", 12, lambda g: g.delete("outputs")),
    ("state-version", 45, Generator.state_version),
    ("state-shape", 75, Generator.state_shape),
    ("state-type", 90, lambda g: g.state_field(range_only=False)),
    ("state-range", 30, lambda g: g.state_field(range_only=True)),
    ("forge/artifacts", 55, Generator.forge_artifact),
    ("forge/templates", 35, Generator.forge_template),
    ("forge/engine", 25, Generator.forge_engine),
    ("forge/outputs", 15, Generator.forge_outputs),
    ("ingress", 110, Generator.ingress),
    ("egress", 50, Generator.egress),
    ("store/meta", 10, Generator.meta),
    ("store/table", 6, Generator.schema),
    ("file", 20, Generator.file),
]


def mutation_for_case(store: StoreMap, seed: int, case: int) -> Mutation:
    """Case ``case``'s mutation: its own RNG, so that it can be drawn again alone."""
    rng = random.Random(f"{seed}/{case}")
    _, _, make = rng.choices(CLASSES, weights=[weight for _, weight, _ in CLASSES])[0]
    return make(Generator(store, rng))
