"""kill -9 during updates (acceptance of issue 34): a worker (``upgrade_crash_worker.py``) updates a subscription's
definition three times at fixed log positions while a producer appends and the engine processes and checkpoints;
the test kills it with SIGKILL at random moments (right before a swap, inside one: after its boundary
checkpoint and before its commit, right after one, while it processes, during recovery), restarts it each time,
then lets it finish. After a kill inside a swap the store holds the old definition, after one right after it the
new one, never a mix (the worker checks that each swap happens exactly at its position), and at the end its
durable outputs (values and seqs) equal those of a run never killed: nothing lost, nothing twice. On SQLite and
on PostgreSQL (a fresh database of the throwaway server)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from reaqtive.engine import Engine, EngineStatus
from tests.engine import upgrade_crash_worker as worker
from tests.engine.test_crash import Run as CrashRun

ROOT = Path(__file__).resolve().parents[2]
SEED = 3434
EVENTS = 12_000
EVERY = 700


class Run(CrashRun):
    """A run of the update worker (markers, kill and finish as in ``test_crash``)."""

    worker = "tests.engine.upgrade_crash_worker"
    events = EVENTS
    every = EVERY
    options = ()


def plan(seed: int = SEED) -> list[tuple[str, int, float]]:
    """The kills, in order: ``(marker, at least, delay in seconds)``: around each swap (at its start, a few
    milliseconds into it, right after it), while processing, and while opening (recovering)."""
    rng = random.Random(seed)
    kills: list[tuple[str, int, float]] = [("progress", 1_000, rng.uniform(0.0, 0.02))]
    for swap in range(1, len(worker.SWAPS) + 1):
        kills += [("updating", swap, 0.0), ("boundary", swap, rng.uniform(0.0, 0.1)),
                  ("updating", swap, rng.uniform(0.0, 0.004)), ("updated", swap, 0.0),
                  ("opening", 0, rng.uniform(0.05, 0.3))]
    kills += [("progress", worker.SWAPS[-1] + 1_000, rng.uniform(0.0, 0.05))]
    return kills


def oracle() -> list[tuple[int, object]]:
    """The same swaps at the same positions, never killed."""
    definitions = worker.definitions()
    with Engine(":memory:", functions=worker.functions(), start=worker.T0) as engine:
        engine.create_stream("a")
        engine.create_subscription("q", definitions[0])
        done = 0
        for swap, position in enumerate(worker.SWAPS, start=1):
            for i in range(done, position):  # the log position is the number of events delivered
                engine.append(*worker.event(i))
            engine.process()
            done = position
            engine.update_subscription("q", definitions[swap])
        for i in range(done, EVENTS):
            engine.append(*worker.event(i))
        engine.process()
        return [(o.seq, o.value) for o in engine.outputs("q")]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_kills_during_updates_leave_old_or_new_and_every_output_exactly_once(
    tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    target: Path | str = tmp_path / "crashed.db" if store == "sqlite" else request.getfixturevalue("postgres_dsn")
    log = tmp_path / "worker.log"
    history = []
    for marker, at_least, delay in plan():
        run = Run(target, log)
        try:
            try:
                run.wait_for(marker, at_least)
            except AssertionError:
                continue  # that moment passed in an earlier run (a swap done before its kill): the next one
            time.sleep(delay)  # the random moment: wherever the worker is now
        finally:
            if run.process.returncode is None:
                run.kill()
        history.append(f"{marker}>={at_least}+{delay * 1e3:.1f}ms (last marker {run.last!r})")
        if run.last.startswith(("boundary", "updated")):  # killed inside swap K, or right after it
            swap = int(run.last.split()[1])
            with Engine(target, functions=worker.functions(), start=worker.T0) as engine:
                definitions = len(engine.subscription_history("q"))
            assert definitions == (swap if run.last.startswith("boundary") else swap + 1), run.last
    final = Run(target, log)
    assert final.finish() == 0, log.read_text()[-3000:]
    print("\n".join(history))
    with Engine(target, functions=worker.functions(), start=worker.T0) as engine:
        assert engine.status is EngineStatus.RUNNING, engine.recovery.failures
        assert len(engine.subscription_history("q")) == len(worker.SWAPS) + 1
        actual = [(o.seq, o.value) for o in engine.outputs("q")]
    expected = oracle()
    assert len(expected) > EVENTS
    assert actual == expected
