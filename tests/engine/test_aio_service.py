"""Acceptance of the asyncio face (issue 19): an asyncio service with concurrent producers, a processing task woken
by appends and async consumers that acknowledge; kill -9 at random moments, restart, and the consumers have seen
every output exactly once, by (subscription, seq), with the values of a run that was never killed.

The worker is ``aio_service_worker.py``. Kills come at seeded moments: some right after the worker is ready (during
recovery's aftermath, while producers start), the others once the consumers reported a drawn number of outputs,
after a random delay of a few milliseconds (wherever the service is then: appending, processing, checkpointing,
writing the consumer log, acknowledging).
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

from tests.engine import aio_service_worker as worker

ROOT = Path(__file__).resolve().parents[2]
KILLS = 12
SEED = 19


class Service:
    """One run of the worker, its stdout read marker by marker."""

    def __init__(self, store: Path, log: Path, stderr: Path) -> None:
        self._stderr: IO[bytes] = stderr.open("ab")
        self.stderr = stderr
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.engine.aio_service_worker", str(store), str(log)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=self._stderr, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )

    def wait_for(self, word: str, at_least: int = 0) -> bool:
        """Read markers until ``word`` (with a count >= ``at_least``); False if the worker finished first."""
        stdout = self.process.stdout
        assert stdout is not None
        while True:
            line = stdout.readline().decode().strip()
            if not line:
                code = self.process.wait()
                raise AssertionError(f"the worker ended (exit {code}) before {word!r}:\n"
                                     f"{self.stderr.read_text()[-3000:]}")
            if line == "done":
                return False
            name, _, count = line.partition(" ")
            if name == word and (not count or int(count) >= at_least):
                return True

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self._close()

    def finish(self) -> int:
        if self.wait_for("never"):  # reads to "done"
            raise AssertionError("unreachable")
        code = self.process.wait(60)
        self._close()
        return code

    def _close(self) -> None:
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._stderr.close()


def test_kill_9_mid_run_and_every_output_is_consumed_exactly_once(tmp_path: Path) -> None:
    store, log, stderr = tmp_path / "service.db", tmp_path / "consumed.jsonl", tmp_path / "stderr.txt"
    rng = random.Random(SEED)
    kills = 0
    for _ in range(KILLS):
        service = Service(store, log, stderr)
        if rng.random() < 0.25:
            reached = service.wait_for("ready")
        else:
            reached = service.wait_for("consumed", rng.choice((20, 40, 60, 80)))
        if not reached:  # finished before the moment came
            assert service.process.wait(60) == 0
            break
        time.sleep(rng.uniform(0.0, 0.03))  # the random moment is the point of the test
        service.kill()
        kills += 1
    assert kills >= 8, f"only {kills} kills landed before the work was done: the test lost its point"
    assert Service(store, log, stderr).finish() == 0

    consumed = list(worker.read_log(log))
    ids = Counter((uri, seq) for uri, seq, _ in consumed)
    assert [key for key, n in ids.items() if n > 1] == [], "an output was consumed twice"
    expected = worker.oracle()
    for uri, outputs in expected.items():
        got = sorted((seq, value) for u, seq, value in consumed if u == uri)
        assert len(outputs) == worker.expected_counts()[uri]
        assert got == [(seq, value) for seq, value in outputs], f"{uri}: outputs missing or different"
