"""kill -9 during backfills (acceptance of issue 34): a worker (``backfill_crash_worker.py``) creates backfills from
the earliest retained event of a stream while a producer keeps appending and the engine processes and checkpoints;
the test kills it with SIGKILL at random moments (while the history is appended, right after a backfill was
created, while the backfills catch up, while they run live, during recovery), restarts it each time, then lets it
finish. After every recovery a backfill goes on from where the last checkpoint found it, or restarts cleanly from
its start when no checkpoint saw it; at the end every subscription's durable outputs (values and seqs) equal those
of queries created before the history and never killed: nothing lost, nothing twice. On SQLite and on PostgreSQL
(a fresh database of the throwaway server)."""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

from reaqtive.engine import Engine, EngineStatus
from tests.engine import backfill_crash_worker as worker
from tests.engine.test_crash import Run as CrashRun
from tests.engine.test_crash import describe_difference

ROOT = Path(__file__).resolve().parents[2]
SEED = 34
EVENTS = worker.HISTORY + 12_000  # the history, then live events
EVERY = 1_500
KILLS = 12


class Run(CrashRun):
    """A run of the backfill worker (markers, kill and finish as in ``test_crash``)."""

    worker = "tests.engine.backfill_crash_worker"
    events = EVENTS
    every = EVERY
    options = ()


def plan(seed: int = SEED) -> list[tuple[str, int, float]]:
    """The kills, in order: ``(marker, at least, delay in seconds)``. The first ones land while the history is
    appended and right after the backfills' creation (before any checkpoint saw them), then while they catch up,
    during recoveries, and once they run live."""
    rng = random.Random(seed)
    kills: list[tuple[str, int, float]] = [("opening", 0, rng.uniform(0.2, 0.6)), ("created", 1, 0.0),
                                           ("backfills", 0, rng.uniform(0.0, 0.02))]
    # while they catch up: at once (no checkpoint saw them yet), then after checkpoints taken during the catch-up
    kills += [("catching-up", worker.HISTORY + 20 * k, rng.uniform(0.0, 0.01)) for k in (0, 12, 30)]
    kills += [("opening", 0, rng.uniform(0.1, 0.5))]
    kills += [("progress", worker.HISTORY + k * 2_000, rng.uniform(0.0, 0.05)) for k in range(1, KILLS - 7)]
    return kills


def oracle() -> dict[str, list[tuple[int, object]]]:
    """The queries created before the history, never killed."""
    with Engine(":memory:", functions=worker.functions(), start=worker.T0) as engine:
        engine.create_stream("a")
        engine.create_stream("b")
        for uri, query in {**worker.live(), **worker.backfills()}.items():
            engine.create_subscription(uri, query)
        for i in range(EVENTS):
            engine.append(*worker.event(i))
        engine.process()
        engine.advance_time(worker.at(EVENTS))
        return {uri: [(o.seq, o.value) for o in engine.outputs(uri)] for uri in (*worker.live(), *worker.backfills())}


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_kills_during_backfills_leave_every_output_exactly_once(
    tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    target: Path | str = tmp_path / "crashed.db" if store == "sqlite" else request.getfixturevalue("postgres_dsn")
    log = tmp_path / "worker.log"
    history = []
    for marker, at_least, delay in plan():
        run = Run(target, log)
        try:
            run.wait_for(marker, at_least)
            time.sleep(delay)  # the random moment: wherever the worker is now
        finally:
            run.kill()
        assert run.process.returncode == -signal.SIGKILL, f"{marker} did not kill the worker: {run.last}"
        history.append(f"{marker}>={at_least}+{delay * 1e3:.0f}ms (last marker {run.last!r})")
    final = Run(target, log)
    assert final.finish() == 0, log.read_text()[-3000:]
    print("\n".join(history))
    with Engine(target, functions=worker.functions(), start=worker.T0) as engine:
        assert engine.status is EngineStatus.RUNNING, engine.recovery.failures
        actual = engine.outputs()
    expected = oracle()
    for uri, outputs in expected.items():
        assert len(outputs) > 10, uri
        got = [(o.seq, o.value) for o in actual if o.subscription == uri]
        assert got == outputs, f"{uri}: " + describe_difference(
            [o for o in actual if o.subscription == uri], [])
