"""Group-committed appends (issue 15, item 2): concurrent single appends share commits and each returns only when
durable; ``GroupCommit`` returns at once and commits by count, by time, on flush, checkpoint and close; a kill -9
loses no event whose append returned ("call") and nothing but a tail of unflushed ones (``GroupCommit``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from reaqtive import Query
from reaqtive.core.errors import InvalidSettingError
from reaqtive.engine import Engine, EngineStore
from reaqtive.engine.database import from_micros
from reaqtive.engine.ingress import GroupCommit
from reaqtive.state import StateEncodeError, StoreError

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def second(i: int) -> datetime:
    return T0 + timedelta(seconds=i)


def logged(store: EngineStore) -> dict[tuple[str, int], Any]:
    """Every sound event of the log, by (stream, seq)."""
    events: dict[tuple[str, int], Any] = {}
    after = 0
    while runs := store.read_ingress_runs(after, 4096):
        for run in runs:
            assert run.damage is None, run.damage
            events.update(((run.stream, run.seq + i), value) for i, value in enumerate(run.values))
        after = runs[-1].pos + runs[-1].count - 1
    return events


class Commits:
    """Counts the COMMITs on the engine store's connection (the statements SQLite runs)."""

    def __init__(self, engine: Engine) -> None:
        self.count = 0
        engine._store._db.set_trace_callback(self._trace)

    def _trace(self, statement: str) -> None:
        if statement == "COMMIT":
            self.count += 1


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = Engine(tmp_path / "s.db", start=T0, gc_freeze=False)
    engine.create_stream("s://0")
    engine.create_stream("s://1")
    yield engine
    engine.close()


# -- "call": durable when it returns, concurrent calls share commits ------------------------------------------------


def test_single_appends_from_eight_threads_share_commits_and_every_returned_number_is_readable(engine: Engine) -> None:
    threads, each = 8, 500
    commits = Commits(engine)
    returned: dict[int, list[tuple[str, int, list[int]]]] = defaultdict(list)
    barrier = threading.Barrier(threads)
    failures: list[BaseException] = []

    def work(k: int) -> None:
        try:
            barrier.wait()
            for i in range(each):
                stream = f"s://{(k + i) % 2}"
                value = [k, i]
                returned[k].append((stream, engine.append(stream, value, second(i)), value))
        except BaseException as error:
            failures.append(error)

    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not failures, failures
    log = logged(engine._store)
    per_stream: dict[str, list[int]] = defaultdict(list)
    for k, appended in returned.items():
        for stream, seq, value in appended:
            assert log[(stream, seq)] == value, f"thread {k}: {stream}#{seq}"
            per_stream[stream].append(seq)
        for stream in ("s://0", "s://1"):
            mine = [seq for s, seq, _ in appended if s == stream]
            assert mine == sorted(mine), "one thread's appends are in its call order"
    assert {stream: sorted(seqs) for stream, seqs in per_stream.items()} == {
        stream: list(range(len(seqs))) for stream, seqs in per_stream.items()}, "unique and contiguous"
    assert len(log) == threads * each
    assert engine._ingress.commits == commits.count < threads * each // 2, (commits.count, "commits")
    assert engine.streams()["s://0"].appended + engine.streams()["s://1"].appended == threads * each


def test_append_many_is_one_commit_and_extend_commits_every_ten_thousand(engine: Engine) -> None:
    commits = Commits(engine)
    assert engine.append_many("s://0", [(i, second(i)) for i in range(3000)]) == list(range(3000))
    assert commits.count == 1
    generated = ((i, None) for i in range(25_000))  # any iterable; no time: now
    assert engine.extend("s://1", generated) == 25_000
    assert commits.count == 4
    log = logged(engine._store)
    assert [log[("s://1", i)] for i in range(25_000)] == list(range(25_000))
    assert engine.extend("s://1", []) == 0


def test_a_refused_event_refuses_its_whole_append(engine: Engine) -> None:
    with pytest.raises(TypeError, match="None is never a stream element"):
        engine.append_many("s://0", [(1, T0), (None, T0)])
    with pytest.raises(ValueError, match="timezone-aware"):
        engine.append_many("s://0", [(1, T0), (2, datetime(2026, 1, 1))])
    with pytest.raises(StateEncodeError, match="object"):
        engine.append_many("s://0", [(1, T0), (object(), T0)])
    assert engine.streams()["s://0"].appended == 0 and logged(engine._store) == {}


def test_an_event_without_a_time_is_stamped_with_the_wall_clock_at_its_append(engine: Engine) -> None:
    before = datetime.now(UTC)
    engine.append_many("s://0", [(i, None) for i in range(2000)])
    after = datetime.now(UTC)
    (run,) = (run for run in engine._store.read_ingress_runs(0, 10_000) if run.seq == 0)
    stamps = [from_micros(micros) for micros in run.micros]
    assert before <= stamps[0] and stamps[-1] <= after
    assert stamps == sorted(stamps), "stamped in append order, each from the clock"


def test_an_event_dated_too_far_ahead_is_numbered_and_quarantined_without_a_position(engine: Engine) -> None:
    far = datetime.now(UTC) + timedelta(days=3)
    assert engine.append_many("s://0", [(1, T0), (2, far), (3, None)]) == [0, 1, 2]
    runs = engine._store.read_ingress_runs(0, 10)
    assert [(r.pos, r.seq, r.values) for r in runs] == [(1, 0, [1]), (2, 2, [3])]
    (letter,) = engine.dead_letters()
    assert (letter.seq, letter.pos, letter.time) == (1, None, far) and "max_event_time_ahead" in letter.reason
    assert engine._quarantine.holds("s://0", 1)


def test_an_unknown_commit_mode_is_refused_and_releases_the_store(tmp_path: Path) -> None:
    with pytest.raises(InvalidSettingError, match="ingress_commit"):
        Engine(tmp_path / "s.db", ingress_commit="batch")
    Engine(tmp_path / "s.db").close()
    for events, seconds in ((0, 1.0), (10, 0.0), (10, float("nan")), (1.5, 1.0)):
        with pytest.raises(InvalidSettingError):
            GroupCommit(events=events, seconds=seconds)  # type: ignore[arg-type]


# -- GroupCommit: at once, then by count, time, flush, checkpoint, close ---------------------------------------------


def group_engine(path: Path, commit: GroupCommit) -> Engine:
    engine = Engine(path, start=T0, gc_freeze=False, ingress_commit=commit)
    if "s://0" not in engine.streams():
        engine.create_stream("s://0")
    return engine


def test_group_commit_returns_at_once_and_the_events_are_visible_after_flush(tmp_path: Path) -> None:
    with group_engine(tmp_path / "s.db", GroupCommit(events=10**6, seconds=60)) as engine:
        assert [engine.append("s://0", i, second(i)) for i in range(5)] == [0, 1, 2, 3, 4]
        assert engine.append_many("s://0", [(i, second(i)) for i in range(5, 8)]) == [5, 6, 7]
        assert logged(engine._store) == {}, "nothing committed yet"
        engine.flush_ingress()
        assert logged(engine._store) == {("s://0", i): i for i in range(8)}
        assert len(engine._store.read_ingress_runs(0, 100)) == 1, "queued appends of one stream share a row"
        engine.flush_ingress()  # nothing waits: nothing to do


def test_group_commit_commits_by_count_and_by_time_in_the_background(tmp_path: Path) -> None:
    with group_engine(tmp_path / "s.db", GroupCommit(events=100, seconds=60)) as engine:
        for i in range(150):
            engine.append("s://0", i, second(i))
        deadline = time.monotonic() + 10
        while len(logged(engine._store)) < 100 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(logged(engine._store)) >= 100, "committed once 100 were waiting"
    with group_engine(tmp_path / "t.db", GroupCommit(events=10**6, seconds=0.05)) as engine:
        started = time.monotonic()
        engine.append("s://0", 1, T0)
        while not logged(engine._store) and time.monotonic() - started < 10:
            time.sleep(0.01)
        assert logged(engine._store) == {("s://0", 0): 1}, "committed after `seconds`"


def test_group_commit_writes_on_checkpoint_and_close(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with group_engine(path, GroupCommit(events=10**6, seconds=60)) as engine:
        engine.append("s://0", 1, T0)
        engine.checkpoint()
        assert logged(engine._store) == {("s://0", 0): 1}
        engine.append("s://0", 2, T0)
    with Engine(path) as engine:
        assert logged(engine._store) == {("s://0", 0): 1, ("s://0", 1): 2}
        assert engine.streams()["s://0"].appended == 2


def test_process_after_flush_delivers_group_committed_events(tmp_path: Path) -> None:
    with group_engine(tmp_path / "s.db", GroupCommit(events=10**6, seconds=60)) as engine:
        engine.create_subscription("q", Query.stream("s://0"))
        engine.append_many("s://0", [(i, second(i)) for i in range(3)])
        engine.flush_ingress()
        assert engine.process() == 3
        assert [o.value for o in engine.outputs("q")] == [0, 1, 2]


def test_process_sees_group_committed_events_without_a_flush(tmp_path: Path) -> None:
    with group_engine(tmp_path / "s.db", GroupCommit(events=10**6, seconds=60)) as engine:
        engine.append("s://0", 1, T0)
        assert engine.process() == 1


def test_a_failed_group_commit_keeps_the_events_waiting_and_reports_until_one_succeeds(tmp_path: Path) -> None:
    with group_engine(tmp_path / "s.db", GroupCommit(events=10**6, seconds=60)) as engine:
        store = engine._store
        engine.append_many("s://0", [(i, T0) for i in range(3)])
        write = store.write_ingress

        def failing(batches: Any) -> list[int]:
            raise StoreError("the disk is full")

        store.write_ingress = failing  # type: ignore[method-assign]
        with pytest.raises(StoreError, match="the disk is full"):
            engine.flush_ingress()
        with pytest.raises(StoreError, match="a commit of the ingress log failed"):
            engine.append("s://0", 3, T0)
        store.write_ingress = write  # type: ignore[method-assign]
        engine.flush_ingress()
        assert engine.append("s://0", 3, T0) == 3
        engine.flush_ingress()
        assert logged(store) == {("s://0", i): i for i in range(4)}


# -- kill -9 ----------------------------------------------------------------------------------------------------------

PRODUCER = """
import sys, threading
from datetime import UTC, datetime
from reaqtive.engine import Engine
from reaqtive.engine.database import from_micros
from reaqtive.engine.ingress import GroupCommit

path, mode = sys.argv[1], sys.argv[2]
commit = "call" if mode == "call" else GroupCommit(events=200, seconds=0.02)
engine = Engine(path, synchronous="NORMAL", gc_freeze=False, ingress_commit=commit)
for stream in ("s://0", "s://1"):
    engine.create_stream(stream)
print("ready", flush=True)
printing = threading.Lock()
T0 = datetime(2026, 1, 1, tzinfo=UTC)

def work(k):
    i = 0
    while True:
        stream = f"s://{(k + i) % 2}"
        seq = engine.append(stream, [k, i], T0)
        with printing:
            print(f"{k} {i} {stream} {seq}", flush=True)
        i += 1
        if mode != "call" and i % 500 == 0:
            engine.flush_ingress()
            with printing:
                print(f"flushed {k} {i}", flush=True)

for k in range(4):
    threading.Thread(target=work, args=(k,), daemon=True).start()
threading.Event().wait()
"""


def kill_producer(path: Path, mode: str, lines: int) -> list[str]:
    """Run the producer until it printed ``lines`` lines, kill it with SIGKILL, return what it printed."""
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER, str(path), mode], stdout=subprocess.PIPE,
                                text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    printed: list[str] = []
    try:
        assert producer.stdout is not None and producer.stdout.readline().strip() == "ready"
        while len(printed) < lines:
            line = producer.stdout.readline()
            assert line, "the producer ended"
            printed.append(line.strip())
        producer.send_signal(signal.SIGKILL)
        producer.wait(timeout=30)
        assert producer.returncode == -signal.SIGKILL
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()
    return printed


def contiguous(log: dict[tuple[str, int], Any]) -> None:
    for stream in ("s://0", "s://1"):
        seqs = sorted(seq for s, seq in log if s == stream)
        assert seqs == list(range(len(seqs))), f"{stream}: the log holds a gap"


def logged_after_kill(path: Path, mode: str, events: int) -> tuple[list[str], dict[tuple[str, int], Any]]:
    """Kill a producer appending in ``mode``; what it printed, and the log the store holds after (no gap)."""
    printed = kill_producer(path, mode, events)
    store = EngineStore(path)
    try:
        log = logged(store)
    finally:
        store.close()
    contiguous(log)
    return printed, log


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_kill_during_single_appends_loses_no_event_whose_append_returned(tmp_path: Path) -> None:
    printed, log = logged_after_kill(tmp_path / "s.db", "call", 3000)
    for line in printed:  # each printed after its append returned
        k, i, stream, seq = line.split()
        assert log[(stream, int(seq))] == [int(k), int(i)], line


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_kill_with_group_commit_loses_only_events_not_flushed(tmp_path: Path) -> None:
    printed, log = logged_after_kill(tmp_path / "s.db", "group", 6000)
    flushed: dict[int, int] = {}
    appended: dict[tuple[str, int], list[int]] = {}
    for line in printed:
        words = line.split()
        if words[0] == "flushed":
            flushed[int(words[1])] = int(words[2])
        else:
            k, i, stream, seq = int(words[0]), int(words[1]), words[2], int(words[3])
            appended[(stream, seq)] = [k, i]
    assert flushed, "some flushes happened before the kill"
    for (stream, seq), value in appended.items():
        if value[1] < flushed.get(value[0], 0):
            assert log[(stream, seq)] == value, "a flushed event is in the log"
    assert all(appended.get(key, value) == value for key, value in log.items())
