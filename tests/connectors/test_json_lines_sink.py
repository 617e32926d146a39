"""The JSON-lines sink: the file holds each output of the engine exactly once, in order per subscription,
whatever crashes, torn writes and replays happen; a damaged file is refused untouched."""

from __future__ import annotations

import doctest
import errno
import math
import os
import random
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import reaqtive.connectors.json_lines_sink as module
from reaqtive.connectors import JsonLinesSink, SinkFileError, UnencodableOutputError
from reaqtive.engine import EngineStatus, Output
from tests.connectors.support import STREAM, expected, file_outputs, open_engine, value_of, when

ROOT = Path(__file__).resolve().parents[2]


def outputs_of(n: int) -> list[Output]:
    """Outputs of two subscriptions, interleaved, with values of varied shapes."""
    values: list[Any] = [1, "two", {"k": [3, None]}, 4.5, "é\n\"", [], {"nested": {"x": True}}]
    return [Output(f"q://{i % 2}", i // 2, values[i % len(values)]) for i in range(n)]


def write_all(path: Path, outputs: list[Output]) -> bytes:
    with JsonLinesSink(path, fsync=False) as sink:
        for output in outputs:
            sink(output)
    return path.read_bytes()


def test_docstring_example() -> None:
    assert doctest.testmod(module).failed == 0


def test_each_engine_output_is_written_once_across_restarts_that_replay(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    repeats = 0
    for run in range(4):  # each run: new events, a checkpoint midway, then a "crash" (close without checkpoint)
        sink = JsonLinesSink(path, fsync=False)
        engine = open_engine(tmp_path / "store.db", "file", sink)
        start = run * 30
        engine.append_many(STREAM, [(value_of(i), when(i)) for i in range(start, start + 15)])
        engine.process()
        engine.checkpoint()
        engine.append_many(STREAM, [(value_of(i), when(i)) for i in range(start + 15, start + 30)])
        engine.process()
        engine.close()
        repeats += sink.repeats
        sink.close()
    sink = JsonLinesSink(path, fsync=False)
    with open_engine(tmp_path / "store.db", "file", sink) as engine:
        engine.process()
        assert engine.status is EngineStatus.RUNNING
        assert file_outputs(path) == expected(engine)
    assert repeats + sink.repeats > 0  # the replays did re-deliver: the sink dropped them


def test_a_repeat_of_a_written_output_adds_no_line(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    data = write_all(path, outputs_of(6))
    with JsonLinesSink(path, fsync=False) as sink:
        for output in outputs_of(6):
            sink(output)
        assert sink.repeats == 6
        assert sink.last_seq("q://0") == 2 and sink.last_seq("q://1") == 2 and sink.last_seq("q://9") == -1
    assert path.read_bytes() == data


def test_a_write_torn_at_any_byte_is_cut_to_the_complete_lines_and_rewritten_once(tmp_path: Path) -> None:
    outputs = outputs_of(7)
    data = write_all(tmp_path / "whole.jsonl", outputs)
    path = tmp_path / "out.jsonl"
    for cut in range(len(data) + 1):  # a crash after every byte of the file
        path.write_bytes(data[:cut])
        complete = data[: data.rfind(b"\n", 0, cut) + 1]
        with JsonLinesSink(path, fsync=False) as sink:
            assert path.read_bytes() == complete, cut
            assert sink.repaired == cut - len(complete)
            for output in outputs:  # the outbox delivers again from some point at or before the cut
                sink(output)
        assert path.read_bytes() == data, cut


def test_a_complete_line_that_is_not_an_output_is_refused_and_the_file_left_as_it_was(tmp_path: Path) -> None:
    good = b'{"subscription":"q://a","seq":0,"value":1}\n'
    for bad in (b"not json\n", b'{"subscription":"q://a","seq":-1,"value":1}\n', b'[1, 2]\n',
                b'{"subscription":"q://a","seq":0,"value":1}\n', b'{"subscription":"q://a","seq":"1","value":1}\n',
                b'{"subscription":"q://a","seq":1}\n'):
        path = tmp_path / "out.jsonl"
        data = good + bad + b'{"subscription":"q://b","seq":0,"value":1}\n' + b'{"subscr'
        path.write_bytes(data)
        with pytest.raises(SinkFileError, match=f"{path}:2"):
            JsonLinesSink(path)
        assert path.read_bytes() == data  # not even the torn last line was cut


def fill_disk_midway(sink: JsonLinesSink, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sink's next write puts half its bytes in the file, then the disk is full (other files write as usual)."""
    real_write = os.write

    def half_then_disk_full(fd: int, chunk: Any) -> int:
        if fd == sink._fd:
            real_write(fd, bytes(chunk[: len(chunk) // 2]))
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, chunk)

    monkeypatch.setattr(os, "write", half_then_disk_full)


def test_a_write_that_fails_midway_leaves_no_torn_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "out.jsonl"
    sink = JsonLinesSink(path, fsync=False)
    sink(Output("q://a", 0, "first"))
    data = path.read_bytes()
    fill_disk_midway(sink, monkeypatch)
    with pytest.raises(OSError, match="No space"):
        sink(Output("q://a", 1, "second"))
    assert path.read_bytes() == data
    monkeypatch.undo()
    sink(Output("q://a", 1, "second"))  # the outbox's retry
    sink.close()
    assert file_lines(path) == [("q://a", 0, "first"), ("q://a", 1, "second")]


def test_a_batch_is_one_write_and_one_flush_to_disk_and_skips_what_the_file_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "out.jsonl"
    sink = JsonLinesSink(path)
    sink(Output("q://a", 0, "first"))
    syncs: list[int] = []
    writes: list[int] = []
    real_fsync, real_write = os.fsync, os.write
    monkeypatch.setattr(os, "fsync", lambda fd: (syncs.append(fd), real_fsync(fd))[1])
    monkeypatch.setattr(os, "write", lambda fd, data: (writes.append(fd), real_write(fd, data))[1])
    batch = [Output("q://a", 0, "first"), Output("q://a", 1, "x"), Output("q://b", 0, "y"), Output("q://a", 1, "x"),
             Output("q://a", 2, "z")]
    sink.write_batch(batch)
    assert len(syncs) == 1 and len(writes) == 1
    assert sink.repeats == 2  # a#0 was in the file; a#1 came twice in the batch
    sink.close()
    assert file_lines(path) == [("q://a", 0, "first"), ("q://a", 1, "x"), ("q://b", 0, "y"), ("q://a", 2, "z")]


def test_a_batch_whose_write_fails_midway_leaves_none_of_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "out.jsonl"
    sink = JsonLinesSink(path, fsync=False)
    sink(Output("q://a", 0, "first"))
    data = path.read_bytes()
    fill_disk_midway(sink, monkeypatch)
    batch = [Output("q://a", seq, f"v{seq}") for seq in range(1, 6)]
    with pytest.raises(OSError, match="No space"):
        sink.write_batch(batch)
    assert path.read_bytes() == data
    monkeypatch.undo()
    sink.write_batch(batch)  # the outbox offers the batch again
    sink.close()
    assert file_lines(path) == [("q://a", 0, "first")] + [("q://a", seq, f"v{seq}") for seq in range(1, 6)]


def test_a_failed_cut_after_a_failed_write_is_done_before_the_next_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "out.jsonl"
    sink = JsonLinesSink(path, fsync=False)
    real_write, real_truncate = os.write, os.ftruncate

    def torn_write(fd: int, chunk: Any) -> int:
        if fd != sink._fd:
            return real_write(fd, chunk)
        real_write(fd, bytes(chunk[:5]))
        raise InterruptedError("killed in the middle")

    def failing_truncate(fd: int, size: int) -> None:
        if fd != sink._fd:
            real_truncate(fd, size)
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(os, "write", torn_write)
    monkeypatch.setattr(os, "ftruncate", failing_truncate)
    with pytest.raises(InterruptedError):
        sink(Output("q://a", 0, "x"))
    assert path.read_bytes() == b'{"sub'  # torn, and the cut failed too
    monkeypatch.undo()
    sink(Output("q://a", 0, "x"))
    sink.close()
    assert file_lines(path) == [("q://a", 0, "x")]


@pytest.mark.parametrize("value", [{1, 2}, math.nan, math.inf, datetime(2026, 1, 1, tzinfo=UTC), "\ud800", b"x"])
def test_a_value_json_cannot_hold_raises_naming_the_output_and_writes_nothing(tmp_path: Path, value: Any) -> None:
    path = tmp_path / "out.jsonl"
    with JsonLinesSink(path, fsync=False) as sink:
        with pytest.raises(UnencodableOutputError, match=r"output q://a#3: its value is not JSON"):
            sink(Output("q://a", 3, value))
        assert sink.last_seq("q://a") == -1
    assert path.read_bytes() == b""


def test_json_default_converts_values(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    with JsonLinesSink(path, fsync=False, json_default=str) as sink:
        sink(Output("q://a", 0, datetime(2026, 1, 1, tzinfo=UTC)))
    assert file_lines(path) == [("q://a", 0, "2026-01-01 00:00:00+00:00")]


def test_a_second_sink_on_the_same_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    with JsonLinesSink(path, fsync=False):
        with pytest.raises(SinkFileError, match="in use by another JsonLinesSink"):
            JsonLinesSink(path)
    JsonLinesSink(path).close()  # free again once closed


def test_a_closed_sink_raises(tmp_path: Path) -> None:
    sink = JsonLinesSink(tmp_path / "out.jsonl", fsync=False)
    sink.close()
    with pytest.raises(SinkFileError, match="closed"):
        sink(Output("q://a", 0, 1))


def file_lines(path: Path) -> list[tuple[str, int, Any]]:
    import json

    return [(r["subscription"], r["seq"], r["value"]) for r in map(json.loads, path.read_bytes().splitlines())]


# -- killed processes ---------------------------------------------------------------------------------------------

EVENTS = 400


def start_worker(store: Path, file: Path, torn_at: int = 0, kill: tuple[int, float] | None = None
                 ) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tests.connectors.sink_worker", str(store), str(file), "--events", str(EVENTS)]
    if torn_at:
        command += ["--torn-at", str(torn_at)]
    if kill is not None:
        command += ["--kill-after", str(kill[0]), "--kill-delay", str(kill[1])]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.timeout(120)
def test_writers_killed_at_random_moments_and_mid_line_leave_each_output_once(tmp_path: Path) -> None:
    store, file = tmp_path / "store.db", tmp_path / "out.jsonl"
    rng = random.Random(19)
    torn = 0
    for k in range(10):
        if k in (3, 7):  # a crash in the middle of a line: the worker writes half of it and exits
            process = start_worker(store, file, torn_at=rng.randrange(5, 40))
            assert process.wait() == 9, process.stderr.read().decode() if process.stderr else ""
            torn += not file.read_bytes().endswith(b"\n")
        else:
            # The random moment: the worker SIGKILLs itself that long after the events appended, wherever it is.
            process = start_worker(store, file, kill=((k + 1) * EVENTS // 12, rng.uniform(0.0, 0.01)))
            assert process.wait() == -signal.SIGKILL, process.stderr.read().decode() if process.stderr else ""
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
    assert torn == 2  # the file was left torn twice
    final = start_worker(store, file)
    _, err = final.communicate(timeout=60)
    assert final.returncode == 0, err.decode()[-2000:]
    with JsonLinesSink(file, fsync=False) as sink, open_engine(store, "file", sink) as engine:
        assert engine.streams()[STREAM].appended == EVENTS
        want = expected(engine)
    assert sum(map(len, want.values())) > EVENTS
    assert file_outputs(file) == want
