"""The crash test (acceptance of issue 8): kill -9 an engine 30 times, and its durable sink still equals that of a
run that was never killed: nothing missing, nothing twice.

A worker process (``crash_worker.py``) runs an engine with 20 standing queries over a durable input of 100,000
events that it produces itself, checkpointing every 1,000 events. The test kills it with SIGKILL at 30 moments
drawn from a seeded RNG, restarting it after each, then lets it finish. Meanwhile a second worker does the same
work without being killed (the oracle). The kill moments are of two sorts:

* **random**: once the worker reports having processed a drawn number of events, after a random delay of a few
  milliseconds (wherever the worker is then: delivering, appending, serializing, committing); or a few
  milliseconds after it started opening the store (during recovery);
* **at a point**: the worker stops at a named moment and the test kills it there, so that the narrow windows
  are hit on every run: inside the checkpoint's SQLite transaction before ``COMMIT``; after the durable sink
  was written but before the state; after the commit but before the ingress log was truncated; between two
  appends of the producer; between two subscription creations; right after a subscription was created at run
  time (before a checkpoint covers it); right after recovery.

The markers the worker prints choose the moments; the only sleeps are the random few milliseconds before a
random kill, which is the point.

The same test runs on a PostgreSQL store (a fresh database of the throwaway server): the same kills, the same
windows (``commit`` pauses in the checkpoint's PostgreSQL transaction before psycopg sends ``COMMIT``), and its
durable sink must equal that of the uncrashed run on SQLite: nothing lost, nothing twice, and no difference
between the stores.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from reaqtive.engine import Engine, EngineStatus, Output
from tests.engine import crash_worker

ROOT = Path(__file__).resolve().parents[2]
SEED = 8
KILLS = 30
# 30 kills over 50,000 events, a checkpoint every 500 (100 checkpoints): the kills land in the same kinds of
# places as over 100,000 events and 1,000 (the run's length only set how many events each segment processed).
EVENTS = 50_000
EVERY = 500
SPAN = EVENTS * 97 // 100  # the kills' positions spread over this many events
LATE_AT = 20_000  # the run-time subscription is created once this many events were processed
POINTS = ("commit", "commit", "commit", "commit", "egress", "egress", "egress", "committed", "committed",
          "committed", "append", "append", "recovered")
CHECKPOINT_POINTS = ("commit", "egress", "committed")


@dataclass(frozen=True)
class Kill:
    """One planned kill: ``kind`` is ``random``, ``recovering`` or a pause point of the worker; ``position``: the
    events processed before it may happen; ``delay``: seconds to wait after the marker (random kinds)."""

    kind: str
    position: int
    delay: float = 0.0


def plan(seed: int = SEED) -> list[Kill]:
    """30 kills in order of position: the first during setup, the 13th right after the run-time subscription
    was created, the rest drawn among random moments and the worker's pause points."""
    rng = random.Random(seed)
    kinds = [*POINTS, "recovering", "recovering"]
    kinds += ["random"] * (KILLS - 2 - len(kinds))
    rng.shuffle(kinds)
    created = LATE_AT * KILLS // SPAN  # the kill whose segment starts at LATE_AT
    # The kill before it must stop at an exact position before LATE_AT, so that the late query is created (and
    # the worker paused) in the next run: make it a checkpoint point.
    swap = next(i for i, kind in enumerate(kinds) if kind in CHECKPOINT_POINTS)
    kinds[swap], kinds[created - 2] = kinds[created - 2], kinds[swap]
    kinds = ["setup", *kinds[: created - 1], "created", *kinds[created - 1 :]]
    assert len(kinds) == KILLS and kinds[created - 1] in CHECKPOINT_POINTS
    kills = []
    for k, kind in enumerate(kinds):
        base = k * SPAN // KILLS
        position = base + rng.randrange(SPAN // 485, SPAN // 37)
        if kind in ("setup", "recovered"):
            position = 0  # whatever the recovered position is
        elif kind == "created":
            position = LATE_AT
        delay = rng.uniform(0.0, 0.02) if kind == "random" else rng.uniform(0.0, 0.04) if kind == "recovering" else 0
        kills.append(Kill(kind, position, delay))
    return kills


class Run:
    """One worker process, with its stdout read line by line (markers) and its stderr kept for diagnostics. Other
    crash tests run their own worker module with their own sizes (the class attributes)."""

    worker = "tests.engine.crash_worker"
    events = EVENTS
    every = EVERY
    options: tuple[str, ...] = ("--late-at", str(LATE_AT))

    def __init__(self, store: Path | str, log: Path, pause: str | None = None) -> None:
        command = [sys.executable, "-m", self.worker, str(store), "--events", str(self.events),
                   "--every", str(self.every), *self.options]
        if pause is not None:
            command += ["--pause", pause]
        self._stderr: IO[bytes] = log.open("ab")
        self.process = subprocess.Popen(
            command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.log = log
        self.last = ""

    def wait_for(self, predicate: str, at_least: int = 0) -> str:
        """Read markers until one starts with ``predicate`` (and its number is ``>= at_least``); fail on EOF."""
        stdout = self.process.stdout
        assert stdout is not None
        while True:
            line = stdout.readline().decode().strip()
            if not line:
                self.process.wait()
                raise AssertionError(
                    f"the worker ended (exit {self.process.returncode}) before {predicate!r} >= {at_least}; "
                    f"last marker {self.last!r}; stderr:\n{self.log.read_text()[-3000:]}"
                )
            self.last = line
            word, _, number = line.partition(" ")
            if line.startswith(predicate) and (not number.split() or int(number.split()[-1]) >= at_least):
                return line
            if word == "done":
                raise AssertionError(f"the worker finished before {predicate!r} >= {at_least}")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self.close()

    def finish(self) -> int:
        """Wait for ``done`` and the exit."""
        self.wait_for("done")
        code = self.process.wait()
        self.close()
        return code

    def close(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        self._stderr.close()


def crash_and_recover(store: Path | str, log: Path, kills: list[Kill]) -> list[str]:
    """Run the worker through every planned kill, then to the end; returns what happened, for the report."""
    history = []
    for kill in kills:
        if kill.kind in ("random", "recovering"):
            run = Run(store, log)
            try:
                if kill.kind == "recovering":
                    run.wait_for("opening")
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
        history.append(f"{kill.kind}@{kill.position} (last marker {run.last!r})")
    final = Run(store, log)
    assert final.finish() == 0, final.log.read_text()[-3000:]
    return history


def outputs(store: Path | str) -> tuple[list[Output], dict[str, int]]:
    with Engine(store, allow_modules=[crash_worker.ALLOWED]) as engine:
        assert engine.status is EngineStatus.RUNNING, engine.recovery.failures
        streams = {uri: status.delivered + 1 for uri, status in engine.streams().items()}
        return engine.outputs(), streams


def describe_difference(actual: list[Output], expected: list[Output]) -> str:
    """What differs, by subscription: outputs missing, outputs twice or extra, outputs with another value."""
    counts = Counter((o.subscription, o.seq) for o in actual)
    got = {(o.subscription, o.seq): o.value for o in actual}
    want = {(o.subscription, o.seq): o.value for o in expected}
    missing = sorted(want.keys() - got.keys())
    extra = sorted(got.keys() - want.keys()) + sorted(key for key, n in counts.items() if n > 1)
    wrong = sorted(key for key in want.keys() & got.keys() if want[key] != got[key])
    return (f"missing {len(missing)} {missing[:5]}; extra or twice {len(extra)} {extra[:5]}; "
            f"different {len(wrong)} {[(key, want[key], got[key]) for key in wrong[:3]]}")


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_thirty_kills_leave_the_durable_sink_equal_to_an_uncrashed_run(
    tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    kills = plan()
    crashed: Path | str = tmp_path / "crashed.db" if store == "sqlite" else request.getfixturevalue("postgres_dsn")
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
    assert expected_streams == actual_streams and sum(actual_streams.values()) == EVENTS, "every event was processed"
    per_query = Counter(o.subscription for o in expected)
    assert len(per_query) == 20, f"every query produced outputs: {sorted(per_query)}"
    for uri in per_query:
        assert [o.seq for o in expected if o.subscription == uri] == list(range(per_query[uri]))
    assert actual == expected, describe_difference(actual, expected)


def test_the_kill_plan_covers_every_kind_of_moment() -> None:
    kills = plan()
    kinds = Counter(kill.kind for kill in kills)
    assert len(kills) == KILLS
    assert {"setup", "created", "recovered", "recovering", "random", "commit", "egress", "committed",
            "append"} <= set(kinds)
    assert kinds["commit"] + kinds["egress"] + kinds["committed"] >= 9, "a third of the kills hit a checkpoint"
    positions = [kill.position for kill in kills]
    assert positions[-1] < EVENTS - 2 * crash_worker.CHUNK
    moving = [kill.position for kill in kills if kill.kind not in ("setup", "recovered")]
    assert moving == sorted(moving)
    created = next(i for i, kill in enumerate(kills) if kill.kind == "created")
    assert kills[created - 1].position < LATE_AT - crash_worker.CHUNK

