"""Crash test with double crashes (acceptance of issue 29): kill -9 an engine again and again, a second time while
the recovery replays the log for lagging readers, while queries are paused, deleted and re-created; the durable
sink still equals that of a run that was never killed and never paused.

The worker (``double_crash_worker.py``) runs, with the event clock, ``flat_map(..., max_concurrent=1 or 2)`` with
slow inners reading another engine stream (lagging outer readers: every recovery replays from their watermark),
``flat_map`` and ``switch_latest`` whose inners read engine streams, a ``merge`` of two streams, a buffer by time
over a merge, a ``buffer`` by time and a ``debounce``; it pauses and resumes queries on a schedule (a pause must
change nothing with the event clock), deletes and re-creates subscriptions at fixed points of its input (resuming
the step after a kill from ``created_at``), and checkpoints every ``EVERY`` events.

The kill moments (``plan``, seeded):

* **double crashes during the replay**: right after a kill that leaves events to replay, a run that opens the
  store, processes the first few events of the recovery's replay (``replay@k``: ``process(max_events=k)``, the
  lagging readers' events first) and is killed there, then another; and a streak that kills right after the
  recovery (``recovered``), then a few milliseconds into the replay (``replaying``), then at ``replay@k``;
* **inside checkpoints**: in the checkpoint's transaction before ``COMMIT`` (``commit``), after the sink was written
  (``egress``), after the commit before the log's truncation (``committed``);
* **between appends** of the producer (``append``), right after the schedule paused a query (``paused``), in the
  delete-and-re-create steps (after the marker, after the delete, after the create);
* **random**: a few milliseconds after a drawn position, or after the worker started opening the store.

The test then lets the worker finish and compares every subscription's durable outputs (values and seqs; for a
re-created subscription, its last incarnation's) with those of the **oracle**, a run never killed and never
paused. A third run, never killed but paused on the schedule, is compared with the oracle too: it tells a
difference the pauses make from one the kills make. The same test runs with the killed store on PostgreSQL (a
fresh database of the throwaway server), compared with the oracle on SQLite.

The only sleeps are the random delays before a kill.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import IO

import pytest

from reaqtive import FunctionRegistry, Query
from reaqtive.engine import Engine, EngineStatus, Output, RecoveryPolicy
from tests.engine import double_crash_worker as worker
from tests.engine.store_targets import STORES, store_sql
from tests.engine.test_crash import Kill
from tests.engine.test_crash import Run as CrashRun
from tests.engine.test_crash_higher_order import checkpoint_id, differences

ROOT = Path(__file__).resolve().parents[2]
SEED = 29
EVENTS = 3_600
EVERY = 150
SINGLES = (["commit"] * 4 + ["egress"] * 2 + ["committed"] * 3 + ["append"] * 2 + ["random"] * 4
           + ["recovering"] * 2 + ["paused"] * 2)
STEP_KILLS = (("marker", 15), ("deleted", 23), ("recreated", 38))
"""A kill in each delete-and-re-create step (the kind of pause and the chunk after which the step runs)."""
DOUBLE = ("replay", "replay")
"""A double crash in the replay, after a kill that leaves events to replay."""
STREAK = ("recovered", "replaying", "replay")
RANDOM_KINDS = ("random", "recovering", "replaying")


class Run(CrashRun):
    """A run of the double-crash worker (markers, kill and finish as in ``test_crash``)."""

    def __init__(self, store: Path | str, log: Path, pause: str | None = None, *, pauses: bool = True,
                 hold_at: int | None = None) -> None:
        command = [sys.executable, "-m", "tests.engine.double_crash_worker", str(store), "--events", str(EVENTS),
                   "--every", str(EVERY)]
        if pause is not None:
            command += ["--pause", pause]
        if hold_at is not None:
            command += ["--hold-at", str(hold_at)]
        if not pauses:
            command.append("--no-pauses")
        self._stderr: IO[bytes] = log.open("ab")
        self.process = subprocess.Popen(
            command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.log = log
        self.last = ""


def _free(position: int) -> bool:
    """Whether a kill drawn at ``position`` surely happens before the next delete-and-re-create step (so that the
    step's own kill still finds it undone) and after the previous one."""
    for _, chunk in STEP_KILLS:
        boundary = (chunk + 1) * worker.CHUNK
        if boundary - EVERY - 3 * worker.CHUNK <= position <= boundary + worker.CHUNK:
            return False
    return True


def plan(seed: int = SEED) -> list[Kill]:
    """``setup`` first; the single kills spread over the input at seeded positions (``paused`` ones where the
    schedule pauses a query) and a kill in each delete-and-re-create step, in order of position; a double crash in
    the replay after two of the kills that leave a tail of the log to replay, and a streak ``recovered``,
    ``replaying``, ``replay`` after a third."""
    rng = random.Random(seed)
    free = [p for p in range(2 * worker.CHUNK, EVENTS - 4 * worker.CHUNK) if _free(p)]
    singles = [kind for kind in SINGLES if kind != "paused"]
    rng.shuffle(singles)
    kills: list[Kill] = []
    size = len(free) // len(singles)
    for i, kind in enumerate(singles):
        position = free[i * size + rng.randrange(size // 10, size - size // 10)]
        delay = rng.uniform(0.0, 0.02) if kind == "random" else rng.uniform(0.0, 0.04) if kind == "recovering" else 0
        kills.append(Kill(kind, position, delay))
    pause_starts = [first * worker.CHUNK + worker.CHUNK // 2 for _, first, _ in worker.PAUSES]
    for position in rng.sample([p for p in pause_starts if p in free], SINGLES.count("paused")):
        kills.append(Kill("paused", position))
    kills += [Kill(kind, (chunk + 1) * worker.CHUNK) for kind, chunk in STEP_KILLS]
    kills.sort(key=lambda kill: kill.position)
    tails = [i for i, kill in enumerate(kills) if kill.kind in ("commit", "random", "append")]
    chosen = rng.sample(tails, 3)
    doubles, streak = set(chosen[:2]), chosen[2]
    planned = [Kill("setup", 0)]
    for i, kill in enumerate(kills):
        planned.append(kill)
        for kind in DOUBLE if i in doubles else STREAK if i == streak else ():
            position = rng.randrange(1, 40) if kind == "replay" else 0
            planned.append(Kill(kind, position, rng.uniform(0.0, 0.015) if kind == "replaying" else 0.0))
    return planned


def crash_and_recover(store: Path | str, log: Path, kills: list[Kill]) -> tuple[list[str], list[str]]:
    """Run the worker through every planned kill, then to the end; returns what happened, for the report, and the
    kills that did not happen (the worker finished first: on an engine that stopped queries, a moment may never
    come; the comparison then says why)."""
    history, missed = [], []
    for kill in kills:
        if kill.kind in RANDOM_KINDS:
            # a random moment after the position, within two chunks of it (the worker waits there for the kill)
            run = Run(store, log, hold_at=kill.position + 2 * worker.CHUNK if kill.kind == "random" else None)
            try:
                if kill.kind == "recovering":
                    run.wait_for("opening")
                elif kill.kind == "replaying":
                    run.wait_for("ready")
                else:
                    run.wait_for("progress", kill.position)
                time.sleep(kill.delay)  # the random moment: wherever the worker is now
            except AssertionError as error:
                if run.process.poll() not in (None, 0):
                    raise
                missed.append(f"{kill}: {error}")
            finally:
                run.kill()
        else:
            run = Run(store, log, pause=f"{kill.kind}@{kill.position}")
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
        history.append(f"{kill.kind}@{kill.position} (last marker {run.last!r}, checkpoint {checkpoint_id(store)})"
                       + ("" if killed else " DID NOT HAPPEN"))
    final = Run(store, log)
    assert final.finish() == 0, final.log.read_text()[-3000:]
    return history, missed


def outputs(store: Path | str) -> tuple[list[Output], dict[str, int], list[str]]:
    """The store's outputs, how many events of each stream it delivered, and what is wrong with it (failures of
    the recovery, faults of its queries, or its status if not RUNNING: empty when all is well)."""
    with Engine(store, functions=worker.FUNCTIONS, recovery_policy=RecoveryPolicy.KEEP) as engine:
        streams = {uri: status.delivered + 1 for uri, status in engine.streams().items()}
        found = engine.outputs()  # after a flush: a replayed output is checked against the sink's then
        wrong = [f"recovery of {failure.uri}: {failure.error}" for failure in engine.recovery.failures]
        wrong += [f"fault of {fault.uri}: {fault.error}" for fault in engine.faults]
        if engine.status is not EngineStatus.RUNNING and not wrong:
            wrong.append(f"engine {engine.status.name}")
        return found, streams, wrong


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", STORES)
def test_double_crashes_during_replays_pauses_and_recreates_leave_the_sink_equal_to_an_uncrashed_run(
    tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    kills = plan()
    crashed = store_sql(store, tmp_path, request, "crashed.db").target
    # The oracles run on the other core meanwhile: never killed, without pauses and with them.
    oracle = Run(tmp_path / "oracle.db", tmp_path / "oracle.log", pauses=False)
    paused = Run(tmp_path / "paused.db", tmp_path / "paused.log")
    try:
        history, missed = crash_and_recover(crashed, tmp_path / "crashed.log", kills)
        for run in (oracle, paused):
            assert run.finish() == 0, run.log.read_text()[-3000:]
    finally:
        for run in (oracle, paused):
            if run.process.returncode is None:
                run.kill()
    print("\n".join(history))

    expected, expected_streams, wrong = outputs(tmp_path / "oracle.db")
    assert not wrong, f"the oracle: {wrong}"
    assert sum(expected_streams.values()) == EVENTS, expected_streams
    per_query = Counter(o.subscription for o in expected)
    assert sorted(per_query) == sorted(uri for uri, _ in worker.queries()), "every query produced outputs"
    for uri, count in per_query.items():
        assert [o.seq for o in expected if o.subscription == uri] == list(range(count)), uri
    actual, actual_streams, crashed_wrong = outputs(crashed)
    uncrashed, _, paused_wrong = outputs(tmp_path / "paused.db")
    stopped = sorted({line for line in (tmp_path / "crashed.log").read_text().splitlines() if " stopped (" in line})
    report = []
    if actual != expected or crashed_wrong:
        report.append(f"killed {len(kills)} times, paused on the schedule, against the oracle:")
        report += [f"  {line}" for line in crashed_wrong]
        report += [f"  {line}" for line in differences(actual, expected).splitlines()]
        report += [f"  log: {line}" for line in stopped[:5]]
    if uncrashed != expected or paused_wrong:
        report.append("never killed, paused on the schedule, against the oracle:")
        report += [f"  {line}" for line in paused_wrong]
        report += [f"  {line}" for line in differences(uncrashed, expected).splitlines()]
    assert actual_streams == expected_streams, f"every event was processed: {actual_streams}\n" + "\n".join(report)
    if missed:
        report.append("kills that did not happen (the worker finished first):")
        report += [f"  {line}" for line in missed]
    assert not report, "\n".join(report)


# -- the smallest form of what the crash test finds, in process ----------------------------------------------------


def _plus(a: int, b: int) -> int:
    return a + b


def _two_ticks(order: int) -> Query[int]:
    return Query.stream("ticks").take(2).scan(order * 100, _plus)


def _reopened_with_a_lagging_reader(target: Path | str) -> list[object]:
    """``flat`` (``orders.flat_map(two ticks)``) beside ``lagging`` (the same with ``max_concurrent=1``): orders 1
    and 2, processed; reopen; tick 3, order 4, processed in one go; reopen: the outputs of ``flat``."""
    functions = FunctionRegistry()
    functions.register("plus", _plus)
    functions.register("two_ticks", _two_ticks)

    def open_engine() -> Engine:
        return Engine(target, functions=functions, start=worker.T0, synchronous="NORMAL")

    engine = open_engine()
    try:
        engine.create_stream("orders")
        engine.create_stream("ticks")
        engine.create_subscription("flat", Query.stream("orders").flat_map(_two_ticks))
        engine.create_subscription("lagging", Query.stream("orders").flat_map(_two_ticks, max_concurrent=1))
        engine.append_many("orders", [(1, worker.T0), (2, worker.T0)])
        engine.process()  # the inner of order 1 waits for ticks: "lagging" holds order 2 back in the log
        engine.checkpoint()
        engine.close()
        engine = open_engine()  # the recovery replays from the lagging reader's watermark
        engine.append("ticks", 3, worker.T0)
        engine.append("orders", 4, worker.T0)
        engine.process()  # the replay, then tick 3 and order 4, new, in the same batch
        engine.checkpoint()
        engine.close()
        engine = open_engine()
        engine.process()
        return [output.value for output in engine.outputs("flat")]
    finally:
        engine.close()


@pytest.mark.parametrize("store", STORES)
def test_an_inner_reader_created_in_a_batch_that_began_with_a_replay_never_reads_events_before_it(
    tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    """No pause, no crash: a lagging reader (``max_concurrent=1``) is enough for a reopen to replay, and an inner
    reader created in the batch that began with that replay started where the replay had begun: order 4's inner
    read tick 3, appended before order 4, after the next reopen (``[103, 203, 403]`` instead of ``[103, 203]``)."""
    assert _reopened_with_a_lagging_reader(store_sql(store, tmp_path, request).target) == [103, 203]


def _three_ticks(order: int) -> Query[int]:
    return Query.stream("ticks").take(3).scan(order * 100, _plus)


def _ticks_since(order: int) -> Query[int]:
    return Query.stream("ticks").scan(order * 100, _plus)


def _crashed_twice_during_the_replay(target: Path | str) -> dict[str, list[object]]:
    """Issue 29 defect 1 in its smallest form: ``lag`` (``orders.flat_map(three ticks, max_concurrent=2)``) beside
    ``switch`` (``orders.switch_latest(ticks since)``, which never lags), checkpoints every 3 events. Orders 0, 1, 2
    processed and checkpointed (order 2 waits: ``lag`` holds it back in the log); tick 3 and order 4 appended; a
    crash; the recovery replays from order 2 and is stopped by a second crash after 3 events (a periodic checkpoint
    taken among them); the next recovery runs to the end."""
    functions = FunctionRegistry()
    for name, function in (("plus", _plus), ("three_ticks", _three_ticks), ("ticks_since", _ticks_since)):
        functions.register(name, function)

    def open_engine() -> Engine:
        return Engine(target, functions=functions, start=worker.T0, synchronous="NORMAL", checkpoint_every_events=3)

    engine = open_engine()
    try:
        engine.create_stream("orders")
        engine.create_stream("ticks")
        engine.create_subscription("lag", Query.stream("orders").flat_map(_three_ticks, max_concurrent=2))
        engine.create_subscription("switch", Query.stream("orders").switch_latest(_ticks_since))
        engine.append_many("orders", [(0, worker.T0), (1, worker.T0), (2, worker.T0)])
        engine.process()
        engine.checkpoint()
        engine.append("ticks", 3, worker.T0)
        engine.append("orders", 4, worker.T0)
        engine.close()  # the first crash: no checkpoint
        engine = open_engine()
        engine.process(max_events=3)  # the start of the replay: order 2 (for lag), then tick 3 and order 4
        engine.close()  # the second crash, during the replay
        engine = open_engine()
        engine.process()
        found = {uri: [output.value for output in engine.outputs(uri)] for uri in ("lag", "switch")}
        assert engine.status is EngineStatus.RUNNING, [f"{fault.uri}: {fault.error}" for fault in engine.faults]
        return found
    finally:
        engine.close()


@pytest.mark.parametrize("store", STORES)
def test_defect_1_a_second_crash_during_the_replay_hands_no_inner_reader_an_event_from_before_it(
    tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    """Issue 29 defect 1. Uncrashed: ``lag`` [3, 103] (order 0's inner reads tick 3; orders 1 and 2 read nothing
    after it), ``switch`` [203] (order 2's inner reads tick 3; order 4's reads nothing). On the current engine
    ``switch`` also has 403: order 4's inner, created in the replay's batch with a start from before tick 3, read
    it after the second recovery."""
    found = _crashed_twice_during_the_replay(store_sql(store, tmp_path, request).target)
    assert found == {"lag": [3, 103], "switch": [203]}


def test_the_kill_plan_has_double_crashes_in_the_replay_and_every_kind_of_moment() -> None:
    kills = plan()
    kinds = Counter(kill.kind for kill in kills)
    assert kills[0].kind == "setup" and len(kills) >= 25
    assert {"commit", "egress", "committed", "append", "random", "recovering", "recovered", "replaying", "replay",
            "paused", "marker", "deleted", "recreated"} <= set(kinds)
    moving = [kill.position for kill in kills if kill.kind not in ("setup", "recovered", "replaying", "replay")]
    assert moving == sorted(moving) and moving[-1] < EVENTS - 2 * worker.CHUNK
    doubles = [i for i in range(1, len(kills) - 1) if [k.kind for k in kills[i : i + 2]] == list(DOUBLE)]
    assert len(doubles) >= 2 and all(kills[i - 1].kind in ("commit", "random", "append") for i in doubles)
    assert any([k.kind for k in kills[i : i + 3]] == list(STREAK) for i in range(len(kills) - 2))
    for kind, chunk in STEP_KILLS:
        step = next(i for i, kill in enumerate(kills) if kill.kind == kind)
        before = max(kill.position for kill in kills[:step] if kill.kind not in ("recovered", "replaying", "replay"))
        assert before < (chunk + 1) * worker.CHUNK - EVERY - 2 * worker.CHUNK, f"{kind}: the kill before it"
    paused_at = {first * worker.CHUNK + worker.CHUNK // 2 for _, first, _ in worker.PAUSES}
    assert all(kill.position in paused_at for kill in kills if kill.kind == "paused")
