"""Crash test with higher-order queries (acceptance of issue 14): kill -9 an engine 32 times while inner queries
read engine streams and a bounded reader lags; the durable sink still equals that of a run never killed.

The worker (``crash_higher_order_worker.py``, ``crash_worker.Worker`` with another workload) runs
``switch_latest`` and ``flat_map`` whose inners read ``Query.stream("hx://ticks")`` (readers created at run
time), ``flat_map(..., max_concurrent=1)`` with a busy inner (its outer reader withholds demand and lags),
``group_by`` with inner aggregates, and plain running sums, over three interleaved streams it produces itself,
checkpointing every ``EVERY`` events. A second worker does the same uncrashed (the oracle), on the other core.

The kill moments (``plan``):

* **at a point** of the checkpoint: inside its SQLite transaction with every row written, before ``COMMIT``
  (``commit``); as ``COMMIT`` starts, without waiting (``commit-go``: the kill lands during the commit or just
  after it); after the commit, before the log is truncated (``committed``); after the durable sink was written,
  before the state transaction (``egress``); between two appends of the producer (``append``); between two
  subscription creations in the first run (``setup``);
* **during recovery**: a few milliseconds after the worker starts opening the store (``recovering``), and a few
  milliseconds after it opened, while it replays the log (``replaying``);
* **several in a row without a checkpoint between them**: twice, right after recovery twice over
  (``recovered``), then during the replay; the history printed at the end shows the store's checkpoint id after
  every kill, so the streaks are visible;
* **random**: after a drawn number of processed events and a random delay of a few milliseconds.

The only sleeps are those random delays before a kill.

The same test runs on a PostgreSQL store (a fresh database of the throwaway server; ``commit`` pauses inside the
checkpoint's PostgreSQL transaction before psycopg sends ``COMMIT``, ``commit-go`` lets it go), compared with the
uncrashed run on SQLite.
"""

from __future__ import annotations

import random
import signal
import sqlite3
import time
from collections import Counter
from pathlib import Path

import pytest

from reaqtive import FunctionRegistry, Query
from reaqtive.engine import Engine, EngineStatus, Output
from tests.engine import crash_higher_order_worker as worker
from tests.engine.store_targets import STORES, StoreSql, store_sql
from tests.engine.test_crash import Kill, describe_difference
from tests.engine.test_crash import Run as CrashRun

ROOT = Path(__file__).resolve().parents[2]
SEED = 14
EVENTS = 20_000  # 80 checkpoints, as 40,000 events at 500 gave: the kills land in the same places
EVERY = 250
SINGLES = (["commit"] * 5 + ["commit-go"] * 4 + ["egress"] * 3 + ["committed"] * 3 + ["append"] * 2
           + ["recovering"] * 3 + ["random"] * 5)
STREAK = ("recovered", "recovered", "replaying")
KILLS = 1 + len(SINGLES) + 2 * len(STREAK)


class Run(CrashRun):
    """A run of the higher-order worker (markers, kill and finish as in ``test_crash``)."""

    worker = "tests.engine.crash_higher_order_worker"
    events = EVENTS
    every = EVERY
    options = ()


def plan(seed: int = SEED) -> list[Kill]:
    """32 kills: ``setup`` first, then the single kills in a seeded order with increasing positions, and two
    streaks of kills with no checkpoint between them, each after a kill inside a checkpoint."""
    rng = random.Random(seed)
    singles = list(SINGLES)
    rng.shuffle(singles)
    span = (EVENTS - 4 * worker.CHUNK) // len(singles)
    kills = [Kill("setup", 0)]
    streaks_after = set(rng.sample([i for i, kind in enumerate(singles) if kind in ("commit", "committed")], 2))
    for i, kind in enumerate(singles):
        position = i * span + rng.randrange(span // 10, span - span // 10)
        delay = rng.uniform(0.0, 0.02) if kind == "random" else rng.uniform(0.0, 0.04) if kind == "recovering" else 0
        kills.append(Kill(kind, position, delay))
        if i in streaks_after:
            kills += [Kill(streak, 0, rng.uniform(0.0, 0.015) if streak == "replaying" else 0.0) for streak in STREAK]
    assert len(kills) == KILLS
    return kills


def checkpoint_id(store: Path | str) -> int | None:
    """The store's checkpoint id (read-only), to show which kills had no checkpoint between them."""
    if isinstance(store, str):
        rows = StoreSql(store).rows("SELECT value FROM reaqtive_meta WHERE key = 'checkpoint_id'")
        return int(rows[0][0]) if rows else None
    try:
        db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
        try:
            row = db.execute("SELECT value FROM reaqtive_meta WHERE key = 'checkpoint_id'").fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return None
    return None if row is None else int(row[0])


def crash_and_recover(store: Path | str, log: Path, kills: list[Kill]) -> list[str]:
    """Run the worker through every planned kill, then to the end; returns what happened, for the report."""
    history = []
    for kill in kills:
        if kill.kind in ("random", "recovering", "replaying"):
            run = Run(store, log)
            try:
                if kill.kind == "recovering":
                    run.wait_for("opening")
                elif kill.kind == "replaying":
                    run.wait_for("ready")
                else:
                    run.wait_for("progress", kill.position)
                time.sleep(kill.delay)  # the random moment: wherever the worker is now
            finally:
                run.kill()
        else:
            run = Run(store, log, pause=f"{kill.kind}@{kill.position}")
            try:
                run.wait_for(f"pause {kill.kind}")
            finally:
                run.kill()
        assert run.process.returncode == -signal.SIGKILL, f"{kill} did not kill the worker: {run.last}"
        history.append(f"{kill.kind}@{kill.position} (last marker {run.last!r}, checkpoint {checkpoint_id(store)})")
    final = Run(store, log)
    assert final.finish() == 0, final.log.read_text()[-3000:]
    return history


def outputs(store: Path | str) -> tuple[list[Output], dict[str, int]]:
    with Engine(store, functions=worker.FUNCTIONS) as engine:
        assert engine.status is EngineStatus.RUNNING, engine.recovery.failures
        streams = {uri: status.delivered + 1 for uri, status in engine.streams().items()}
        return engine.outputs(), streams


def differences(actual: list[Output], expected: list[Output]) -> str:
    """Per subscription that differs: what differs (``test_crash.describe_difference``)."""
    lines = []
    for uri in sorted({o.subscription for o in expected} | {o.subscription for o in actual}):
        mine = [o for o in actual if o.subscription == uri]
        theirs = [o for o in expected if o.subscription == uri]
        if mine != theirs:
            lines.append(f"{uri}: {len(mine)} outputs, expected {len(theirs)}: {describe_difference(mine, theirs)}")
    return "\n".join(lines)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", STORES)
def test_thirty_two_kills_of_higher_order_queries_leave_the_durable_sink_equal_to_an_uncrashed_run(
    tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    kills = plan()
    crashed = store_sql(store, tmp_path, request, "crashed.db").target
    oracle = Run(tmp_path / "oracle.db", tmp_path / "oracle.log")  # runs on the other core meanwhile
    try:
        history = crash_and_recover(crashed, tmp_path / "crashed.log", kills)
        assert oracle.finish() == 0, oracle.log.read_text()[-3000:]
    finally:
        if oracle.process.returncode is None:
            oracle.kill()
    print("\n".join(history))

    expected, expected_streams = outputs(tmp_path / "oracle.db")
    actual, actual_streams = outputs(crashed)
    assert sum(expected_streams.values()) == EVENTS, expected_streams
    per_query = Counter(o.subscription for o in expected)
    assert len(per_query) == len(worker.queries()), f"every query produced outputs: {sorted(per_query)}"
    assert actual_streams == expected_streams, "every event was processed"
    stopped = sorted({line for line in (tmp_path / "crashed.log").read_text().splitlines() if " stopped (" in line})
    assert actual == expected, differences(actual, expected) + "".join(f"\n  log: {line}" for line in stopped[:3])


def _plus(a: int, b: int) -> int:
    return a + b


def _two_ticks(order: int) -> Query[int]:
    return Query.stream("ticks").take(2).scan(order, _plus)


def _orders_then_ticks(path: Path, crash_after: int | None) -> tuple[list[object], list[str]]:
    """orders.flat_map(two ticks, max_concurrent=1) over 10 events, processed one by one, a checkpoint after
    the 4th; with ``crash_after`` the engine stops (no checkpoint) after that event and a new one recovers."""
    functions = FunctionRegistry()
    functions.register("plus", _plus)
    functions.register("two_ticks", _two_ticks)
    events = [("orders", 100), ("orders", 200), ("ticks", 1), ("ticks", 2), ("ticks", 3), ("ticks", 4),
              ("orders", 300), ("ticks", 5), ("ticks", 6), ("ticks", 7)]
    engine = Engine(path, functions=functions, gc_freeze=False)
    engine.advance_time(worker.T0)
    engine.create_stream("orders")
    engine.create_stream("ticks")
    engine.create_subscription("q", Query.stream("orders").flat_map(_two_ticks, max_concurrent=1))
    for i, (stream, value) in enumerate(events):
        engine.append(stream, value, worker.T0 + worker.STEP * i)
        engine.process()
        if i == 3:
            engine.checkpoint()
        if i == crash_after:
            engine.close()
            engine = Engine(path, functions=functions, gc_freeze=False)
    engine.process()
    values = [output.value for output in engine.outputs("q")]
    faults = [f"{fault.uri}: {fault.error}" for fault in getattr(engine, "faults", ())]
    engine.close()
    return values, faults


@pytest.mark.parametrize("crash_after", [3, 4])
def test_an_inner_reader_created_while_its_stream_delivers_an_event_never_reads_that_event(
    tmp_path: Path, crash_after: int
) -> None:
    """The smallest form of what the crash test finds in ``q://bounded``. Order 100's inner reads ticks 1 and 2
    and completes *while tick 2 is delivered*; the flat_map then takes order 200 and creates its inner reader of
    ``ticks`` inside that delivery. That reader must start after tick 2 (uncrashed, it reads 3 and 4: 203, 207).
    After a checkpoint taken then, and a recovery, it must not read tick 2 again (202)."""
    expected, _ = _orders_then_ticks(tmp_path / "uncrashed.db", None)
    assert expected == [101, 103, 203, 207, 305, 311]
    assert _orders_then_ticks(tmp_path / "crashed.db", crash_after) == (expected, [])


def test_the_kill_plan_has_every_kind_of_moment_and_two_streaks() -> None:
    kills = plan()
    kinds = Counter(kill.kind for kill in kills)
    assert len(kills) == KILLS >= 30
    assert {"setup", "commit", "commit-go", "committed", "egress", "append", "recovering", "recovered",
            "replaying", "random"} <= set(kinds)
    assert kinds["commit"] + kinds["commit-go"] + kinds["committed"] + kinds["egress"] >= 12
    moving = [kill.position for kill in kills if kill.kind not in ("setup", "recovered", "replaying")]
    assert moving == sorted(moving) and moving[-1] < EVENTS - 2 * worker.CHUNK
    streaks = [i for i in range(len(kills) - 2) if [k.kind for k in kills[i : i + 3]] == list(STREAK)]
    assert len(streaks) == 2 and all(kills[i - 1].kind in ("commit", "committed") for i in streaks)
