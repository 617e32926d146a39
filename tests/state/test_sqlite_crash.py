"""SQLite crash safety: a process committing checkpoints is killed with SIGKILL at 50 random moments; each time
the store opens at the last committed checkpoint, every checksum verifies, and nothing is half-written."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reaqtive.state import SqliteCheckpointStore, read_blob
from tests.state.crash_writer import changes

ROOT = Path(__file__).resolve().parents[2]
KILLS = 50


def expected_after(n: int, cache: dict[int, dict[tuple[str, str], bytes]]) -> dict[tuple[str, str], bytes]:
    """What the store must hold after checkpoint ``n`` (computed incrementally)."""
    start = max((k for k in cache if k <= n), default=0)
    state = dict(cache.get(start, {}))
    for i in range(start + 1, n + 1):
        for category, key, value in changes(i):
            if value is None:
                state.pop((category, key), None)
            else:
                state[(category, key)] = value
        cache[i] = dict(state)
    return state


def start_writer(path: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("crash_writer.py")), str(path)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_at_random_moments_leaves_the_last_committed_checkpoint_intact(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    rng = random.Random(20240505)
    cache: dict[int, dict[tuple[str, str], bytes]] = {0: {}}
    recovered: list[int] = []
    for _ in range(KILLS):
        writer = start_writer(path)
        assert writer.stdout is not None
        printed = 0
        for _ in range(rng.randint(1, 4)):  # let it commit a few checkpoints, then kill it mid-flight
            line = writer.stdout.readline()
            assert line, f"the writer died on its own (exit code {writer.poll()})"
            printed = int(line)
        time.sleep(rng.uniform(0, 0.02))  # a random kill moment (not a wait for any result)
        writer.send_signal(signal.SIGKILL)
        printed = max([printed, *(int(line) for line in writer.stdout.read().split())])
        writer.wait()
        assert writer.returncode == -signal.SIGKILL

        with SqliteCheckpointStore(path) as store:
            snapshot = store.read()  # verifies every row's checksum
        n = snapshot.checkpoint_id
        assert n in (printed, printed + 1), f"committed {printed} (maybe one more), store is at {n}"
        stored = {(c, k): v for c in snapshot.categories() for k, v in snapshot.items(c)}
        assert stored == expected_after(n, cache), f"checkpoint {n} is not exactly what was committed"
        assert snapshot.get("meta", "latest") == str(n).encode()
        for (category, key), value in stored.items():
            if category == "state":
                [node] = read_blob(value, where=f"{category}/{key}")  # the blob's own checksum verifies too
                reader = node.reader()
                disposed, written_by, written_key = reader.read(), reader.read(), reader.read()
                assert (disposed, written_key) == (False, int(key.removeprefix("sub://")))
                assert written_by <= n
        recovered.append(n)
    assert recovered == sorted(recovered) and recovered[-1] >= KILLS
