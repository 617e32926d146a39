"""The file source: the stream's events equal the file's records exactly once, whatever the writer's pieces
(partial lines, CSV quoting across lines), the crashes (SIGKILL of the process at random moments, a crash
between an append and the position's update) and the restarts; a changed file, a damaged position, another
writer and malformed records are reported, naming where."""

from __future__ import annotations

import asyncio
import csv
import doctest
import io
import json
import os
import random
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reaqtive.connectors.file_source as module
from reaqtive import Query
from reaqtive.connectors import (
    FileSource,
    MalformedLineError,
    SourceConflictError,
    SourceError,
    SourceFileChangedError,
    SourceStateError,
)
from reaqtive.engine import Engine
from tests.connectors.source_worker import STREAM
from tests.connectors.support import T0

ROOT = Path(__file__).resolve().parents[2]


def open_engine(store: Path | str) -> Engine:
    """An engine whose subscription ``q://all`` keeps every event of the stream in the durable sink."""
    engine = Engine(store, start=T0, synchronous="NORMAL")
    if STREAM not in engine.streams():
        engine.create_stream(STREAM)
        engine.create_subscription("q://all", Query.stream(STREAM))
    return engine


def events(engine: Engine) -> list[Any]:
    engine.process()
    return [output.value for output in engine.outputs("q://all")]


def jsonl(records: list[Any]) -> bytes:
    return b"".join(json.dumps(record).encode() + b"\n" for record in records)


def csv_bytes(header: list[str], rows: list[list[str]]) -> bytes:
    text = io.StringIO()
    writer = csv.writer(text)  # lines end with \r\n; a field holding \r or \n is quoted
    writer.writerow(header)
    writer.writerows(rows)
    return text.getvalue().encode()


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as file:
        file.write(data)


@pytest.fixture
def engine() -> Iterator[Engine]:
    with open_engine(":memory:") as made:
        yield made


def test_docstring_example() -> None:
    assert doctest.testmod(module).failed == 0


# -- records, pieces and partial lines ----------------------------------------------------------------------------

Text = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
Cell = st.one_of(Text, st.sampled_from(['a,b', 'say "hi"', 'two\nlines', '"', '', ' x ', 'x\r\ny']))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.lists(Cell, min_size=3, max_size=3), max_size=12), cuts=st.lists(st.integers(0, 10_000)),
       batch=st.integers(1, 5), read_size=st.integers(1, 64))
def test_csv_records_cut_anywhere_become_events_once_each(
        tmp_path_factory: pytest.TempPathFactory, rows: list[list[str]], cuts: list[int], batch: int,
        read_size: int) -> None:
    data = csv_bytes(["id", "name", "note"], rows)
    expected = [dict(zip(["id", "name", "note"], row, strict=True)) for row in rows]
    assert feed_in_pieces(tmp_path_factory.mktemp("csv") / "in.csv", data, cuts, "csv", batch=batch,
                          read_size=read_size) == expected


@settings(max_examples=60, deadline=None)
@given(records=st.lists(st.one_of(st.integers(), Text, st.dictionaries(Text, st.integers(), max_size=3),
                                  st.lists(st.booleans(), max_size=3)), max_size=12),
       cuts=st.lists(st.integers(0, 10_000)), batch=st.integers(1, 5), read_size=st.integers(1, 64))
def test_json_lines_cut_anywhere_become_events_once_each(
        tmp_path_factory: pytest.TempPathFactory, records: list[Any], cuts: list[int], batch: int,
        read_size: int) -> None:
    path = tmp_path_factory.mktemp("jsonl") / "in.jsonl"
    assert feed_in_pieces(path, jsonl(records), cuts, "jsonl", batch=batch, read_size=read_size) == records


def feed_in_pieces(path: Path, data: bytes, cuts: list[int], format: Any, *, batch: int, read_size: int) -> list[Any]:
    """Write ``data`` in pieces cut at ``cuts``, polling after each; the events the stream got."""
    path.write_bytes(b"")
    with open_engine(":memory:") as engine:
        source = FileSource(engine, STREAM, path, format=format, batch=batch, read_size=read_size)
        start = 0
        for cut in sorted({cut % (len(data) + 1) for cut in cuts} | {len(data)}):
            append(path, data[start:cut])
            start = cut
            source.poll()
            complete = data[: data.rfind(b"\n", 0, cut) + 1]  # (for CSV, a quoted newline may still be open)
            assert source._position.offset <= len(complete)
        return events(engine)


def test_a_partial_last_line_waits_for_its_newline(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": ')
    source = FileSource(engine, STREAM, path)
    assert source.poll() == 1
    assert source.poll() == 0
    append(path, b"2}")
    assert source.poll() == 0
    append(path, b"\n\n  \n")  # blank lines are no records
    assert source.poll() == 1
    assert events(engine) == [{"a": 1}, {"a": 2}]


def test_crlf_lines_and_a_csv_header_given_by_fieldnames(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(b'1;"x;y"\r\n2;z\r\n')
    FileSource(engine, STREAM, path, format="csv", fieldnames=["n", "s"], delimiter=";").poll()
    assert events(engine) == [{"n": "1", "s": "x;y"}, {"n": "2", "s": "z"}]


# -- restarts -----------------------------------------------------------------------------------------------------


def test_a_restart_skips_what_was_appended_after_the_checkpoint(tmp_path: Path) -> None:
    path, store = tmp_path / "in.jsonl", tmp_path / "store.db"
    path.write_bytes(jsonl(list(range(10))))
    engine = open_engine(store)
    source = FileSource(engine, STREAM, path, batch=3)
    source.poll()
    engine.process()
    engine.checkpoint()
    append(path, jsonl(list(range(10, 17))))
    source.poll()  # appended (durable) after the checkpoint: the stored position is behind
    engine.close()  # a crash: no checkpoint
    append(path, jsonl(list(range(17, 20))))
    engine = open_engine(store)
    source = FileSource(engine, STREAM, path, batch=3)
    assert source.poll() == 3
    assert events(engine) == list(range(20))
    engine.close()


def test_a_crash_between_an_append_and_the_positions_update_loses_and_repeats_nothing(tmp_path: Path) -> None:
    path, store = tmp_path / "in.csv", tmp_path / "store.db"
    rows = [[str(i), f"v{i}"] for i in range(30)]
    path.write_bytes(csv_bytes(["id", "v"], rows))
    want = [{"id": r[0], "v": r[1]} for r in rows]
    rng = random.Random(3)
    for run in range(30):  # each run dies right after its n-th append was committed, before the position moved
        engine = open_engine(store)
        source = FileSource(engine, STREAM, path, format="csv", batch=4)
        crash_after, real_flush, calls = rng.randint(1, 3), engine.flush_ingress, [0]

        def dying_flush(calls: list[int] = calls, crash_after: int = crash_after, real_flush: Any = real_flush) -> None:
            real_flush()
            calls[0] += 1
            if calls[0] == crash_after:
                raise SystemExit("killed after the append, before the position moved")

        engine.flush_ingress = dying_flush  # type: ignore[method-assign]
        try:
            source.poll()
            finished = True
        except SystemExit:
            finished = False
        if run % 2:
            engine.process()
            engine.checkpoint()  # sometimes a checkpoint holds a position, sometimes not
        engine.close()
        with open_engine(store) as check:
            assert events(check) == want[: check.streams()[STREAM].appended]
        if finished:
            break
    assert finished and run > 3
    with open_engine(store) as engine:
        assert events(engine) == want


def test_skipped_malformed_records_are_not_counted_when_a_restart_skips(tmp_path: Path) -> None:
    path, store = tmp_path / "in.jsonl", tmp_path / "store.db"
    path.write_bytes(b"1\n2\n")
    engine = open_engine(store)
    skipping = FileSource(engine, STREAM, path, on_malformed="skip")
    skipping.poll()
    engine.process()
    engine.checkpoint()
    append(path, b"3\nnot json\nnull\n4\n")
    assert skipping.poll() == 2 and skipping.skipped == 2
    engine.close()  # crash: the position in the store is before "3"
    append(path, b"5\n")
    engine = open_engine(store)
    assert FileSource(engine, STREAM, path, on_malformed="skip").poll() == 1
    assert events(engine) == [1, 2, 3, 4, 5]
    engine.close()


# -- SIGKILL at random moments ------------------------------------------------------------------------------------


def start_worker(store: Path, path: Path, format: str, total: int, time_field: str | None) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tests.connectors.source_worker", str(store), str(path), "--format", format,
               "--total", str(total)]
    if time_field:
        command += ["--time-field", time_field]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def read_marker(process: subprocess.Popen[bytes]) -> tuple[str, int, int]:
    assert process.stdout is not None and process.stderr is not None
    line = process.stdout.readline().decode().strip()
    if not line:
        process.wait()
        raise AssertionError(f"worker ended ({process.returncode}): {process.stderr.read().decode()[-2000:]}")
    word, *numbers = line.split()
    return word, int(numbers[0]), int(numbers[1]) if len(numbers) > 1 else 0


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("format", "kills"), [("csv", 10), ("jsonl", 5)])
def test_sigkill_at_random_moments_while_the_file_grows_leaves_each_record_once(
        tmp_path: Path, format: str, kills: int) -> None:
    rng = random.Random(f"{format}-19")
    total = 300
    if format == "csv":
        rows = [[str(i), rng.choice(['plain', 'a,b', 'say "hi"', 'two\nlines', '']), (T0 + timedelta(seconds=i))
                 .isoformat()] for i in range(total)]
        data = csv_bytes(["id", "note", "at"], rows)
        want: list[Any] = [dict(zip(["id", "note", "at"], row, strict=True)) for row in rows]
    else:
        want = [{"id": i, "at": (T0 + timedelta(seconds=i)).timestamp(), "tags": ["x"] * (i % 3)}
                for i in range(total)]
        data = jsonl(want)
    cuts = sorted(rng.sample(range(1, len(data)), 3 * kills))
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    store, path = tmp_path / "store.db", tmp_path / f"in.{format}"
    path.write_bytes(b"")
    skipped_at_restart = 0  # records a restart found appended after the checkpoint's position
    for _ in range(kills):
        append(path, pieces.pop(0))
        process = start_worker(store, path, format, total, "at")
        try:
            word, _, resumed = read_marker(process)
            assert word == "ready"
            skipped_at_restart += resumed
            append(path, pieces.pop(0))  # lines written while it runs, cut anywhere
            append(path, pieces.pop(0))
            time.sleep(rng.uniform(0.0, 0.05))  # the random moment: wherever the worker is now
        finally:
            process.kill()
            process.wait()
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    stream.close()
    append(path, b"".join(pieces))
    final = start_worker(store, path, format, total, "at")
    _, err = final.communicate(timeout=60)
    assert final.returncode == 0, err.decode()[-2000:]
    assert skipped_at_restart > 0
    with open_engine(store) as engine:
        assert events(engine) == want
        assert engine.now == T0 + timedelta(seconds=total - 1)  # the event times came from the field


# -- event time ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "when"), [
    ('"2026-03-01T08:00:05Z"', T0 + timedelta(seconds=5)),
    ('"2026-03-01T09:00:05+01:00"', T0 + timedelta(seconds=5)),
    (str((T0 + timedelta(seconds=7)).timestamp()), T0 + timedelta(seconds=7)),
    (str(int((T0 + timedelta(seconds=9)).timestamp())), T0 + timedelta(seconds=9)),
    (f'"{(T0 + timedelta(seconds=3)).timestamp()}"', T0 + timedelta(seconds=3)),
])
def test_the_event_time_comes_from_the_time_field(tmp_path: Path, engine: Engine, raw: str, when: datetime) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(f'{{"t": {raw}, "v": 1}}\n')
    FileSource(engine, STREAM, path, time_field="t").poll()
    engine.process()
    assert engine.now == when


@pytest.mark.parametrize(("line", "reason"), [
    ('{"v": 1}', "no time field 't'"),
    ('[1]', "no time field 't'"),
    ('{"t": "2026-03-01T08:00:05"}', "has no time zone"),
    ('{"t": "yesterday"}', "Invalid isoformat"),
    ('{"t": true}', "neither an ISO 8601 time nor seconds"),
    ('{"t": 1e300}', "time field 't'"),
    ('{"t": NaN}', "neither an ISO 8601 time nor seconds"),
])
def test_a_bad_event_time_is_a_malformed_record(tmp_path: Path, engine: Engine, line: str, reason: str) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('{"t": 0}\n' + line + "\n")
    source = FileSource(engine, STREAM, path, time_field="t")
    with pytest.raises(MalformedLineError, match=f"{path}:2: .*{reason}"):
        source.poll()
    assert events(engine) == [{"t": 0}]


# -- malformed records --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("format", "data", "line", "reason"), [
    ("jsonl", b'1\n{"a": \n3\n', 2, "not JSON"),
    ("jsonl", b"1\nnull\n3\n", 2, "null is not an event"),
    ("jsonl", b"1\n\xff\xfe\n3\n", 2, "not utf-8 text"),
    ("csv", b'a,b\n1,2\n1,2,3\n4,5\n', 3, "a CSV row of 3 fields; the header has 2"),
    ("csv", b'a,b\n1,2\n"x"y,2\n4,5\n', 3, "not a CSV row"),
    ("csv", b'a,b\n1,2\n"two\nlines",2,9\n4,5\n', 3, "a CSV row of 3 fields"),
])
def test_a_malformed_record_stops_the_source_before_it_naming_file_and_line(  # noqa: PLR0917 - parametrized
        tmp_path: Path, engine: Engine, format: Any, data: bytes, line: int, reason: str) -> None:
    path = tmp_path / "in.data"
    path.write_bytes(data)
    source = FileSource(engine, STREAM, path, format=format)
    for _ in range(2):  # it stays before it: every poll raises again
        with pytest.raises(MalformedLineError, match=f"{path}:{line}: {reason}") as caught:
            source.poll()
        assert caught.value.line == line
    assert len(events(engine)) == 1


def test_a_line_longer_than_the_limit_is_reported_not_buffered_forever(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"1\n" + b"7" * 100)
    source = FileSource(engine, STREAM, path, max_record_bytes=64, read_size=16)
    with pytest.raises(MalformedLineError, match=f"{path}:2: a record longer than max_record_bytes=64"):
        source.poll()
    assert events(engine) == [1]


def test_a_bad_csv_header_is_reported(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(b"a,a\n1,2\n")
    with pytest.raises(MalformedLineError, match=f"{path}:1: the CSV header must be one row of distinct"):
        FileSource(engine, STREAM, path, format="csv").poll()


def test_skip_passes_over_malformed_records(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'1\nnope\n2\nnull\n3\n')
    source = FileSource(engine, STREAM, path, on_malformed="skip")
    assert source.poll() == 3 and source.skipped == 2
    assert events(engine) == [1, 2, 3]


# -- the file changed ---------------------------------------------------------------------------------------------


def test_a_replaced_file_is_refused_while_running_and_after_a_restart(tmp_path: Path) -> None:
    path, store = tmp_path / "in.jsonl", tmp_path / "store.db"
    path.write_bytes(b"1\n2\n")
    engine = open_engine(store)
    source = FileSource(engine, STREAM, path)
    source.poll()
    engine.checkpoint()
    replacement = tmp_path / "new.jsonl"
    replacement.write_bytes(b"1\n2\n3\n")
    os.replace(replacement, path)
    with pytest.raises(SourceFileChangedError, match="replaced by another file"):
        source.poll()
    source.close()
    engine.close()
    engine = open_engine(store)
    with pytest.raises(SourceFileChangedError, match="is another file than the one it read"):
        FileSource(engine, STREAM, path)
    engine.close()


@pytest.mark.parametrize("change", ["shrink", "rewrite"])
def test_a_file_shrunk_or_rewritten_before_the_offset_is_refused(tmp_path: Path, engine: Engine, change: str) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"10\n20\n")
    source = FileSource(engine, STREAM, path)
    source.poll()
    with path.open("r+b") as file:  # the same inode
        if change == "shrink":
            file.truncate(3)
        else:
            file.write(b"11\n21\n30\n")
    with pytest.raises(SourceFileChangedError, match="shrank" if change == "shrink" else "changed"):
        source.poll()
    assert events(engine) == [10, 20]


def test_a_removed_file_is_reported(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"1\n")
    source = FileSource(engine, STREAM, path)
    path.unlink()
    with pytest.raises(SourceFileChangedError, match="was removed"):
        source.poll()


# -- the position in the checkpoint -------------------------------------------------------------------------------


@pytest.mark.parametrize(("blob", "message"), [
    (b"\x80garbage", "not JSON"),
    (b"[1, 2]", "has fields list"),
    (b'{"v": 1, "offset": 0}', "has fields"),
    (b'{"v": 2, "offset": 0, "head": 0, "line": 0, "mark": 0, "dev": 0, "ino": 0}', "of version 2"),
    (b'{"v": 1, "offset": -4, "head": 0, "line": 0, "mark": 0, "dev": 0, "ino": 0}', "offset is -4"),
    (b'{"v": 1, "offset": 4, "head": 0, "line": 9, "mark": 0, "dev": 0, "ino": 0}', "9 lines in 4 bytes"),
    (b'{"v": 1, "offset": 0, "head": true, "line": 0, "mark": 0, "dev": 0, "ino": 0}', "head is True"),
])
def test_a_forged_position_is_refused_naming_the_source(tmp_path: Path, blob: bytes, message: str) -> None:
    path, store = tmp_path / "in.jsonl", tmp_path / "store.db"
    path.write_bytes(b"1\n")
    with open_engine(store) as engine:
        engine.register_source("orders", lambda: blob)
        engine.checkpoint()
    with open_engine(store) as engine:
        with pytest.raises(SourceStateError, match=f"source 'orders' \\({path}\\): .*{message}"):
            FileSource(engine, STREAM, path, name="orders")


def test_a_damaged_position_row_is_refused_naming_the_source(tmp_path: Path) -> None:
    path, store = tmp_path / "in.jsonl", tmp_path / "store.db"
    path.write_bytes(b"1\n")
    with open_engine(store) as engine:
        FileSource(engine, STREAM, path).poll()
        engine.checkpoint()
    with sqlite3.connect(store) as db:
        assert db.execute("UPDATE reaqtive_blobs SET value = value || x'00' WHERE category = 'sources'").rowcount
    with open_engine(store) as engine:
        with pytest.raises(SourceStateError, match=f"source '{STREAM}'.*damaged"):
            FileSource(engine, STREAM, path)


def test_a_position_counting_more_events_than_the_stream_has_is_refused(tmp_path: Path) -> None:
    path, store = tmp_path / "in.jsonl", tmp_path / "store.db"
    path.write_bytes(b"1\n2\n")
    info = os.stat(path)
    forged = json.dumps({"v": 1, "offset": 0, "head": 5, "line": 0, "mark": 0, "dev": info.st_dev,
                         "ino": info.st_ino}).encode()
    with open_engine(store) as engine:
        engine.register_source("orders", lambda: forged)
        engine.checkpoint()
    with open_engine(store) as engine:  # (or a store restored from a backup older than the checkpoint)
        with pytest.raises(SourceStateError, match="has 0 events, fewer than the 5"):
            FileSource(engine, STREAM, path, name="orders")


def test_another_writer_of_the_stream_is_detected(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"1\n")
    source = FileSource(engine, STREAM, path)
    source.poll()
    engine.append(STREAM, 99)
    append(path, b"2\n")
    with pytest.raises(SourceConflictError, match="got #2-#2 of stream 'in://file', but #1 was next"):
        source.poll()


def test_a_stream_with_more_events_than_the_file_has_records_is_refused(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"1\n2\n")
    engine.append_many(STREAM, [(i, None) for i in range(5)])  # someone else wrote it, before any position
    with pytest.raises(SourceConflictError, match=r"gained 5 events .* only 2 complete records"):
        FileSource(engine, STREAM, path)


def test_a_source_name_is_registered_once(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"")
    FileSource(engine, STREAM, path)
    with pytest.raises(ValueError, match="not a new non-empty name"):
        FileSource(engine, STREAM, path)


def test_a_closed_source_stops_storing_its_position_and_refuses_to_poll(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"1\n")
    source = FileSource(engine, STREAM, path)
    source.poll()
    engine.checkpoint()
    source.close()
    append(path, b"2\n")
    with pytest.raises(SourceError, match="closed"):
        source.poll()
    reopened = FileSource(engine, STREAM, path)  # the name is free again; resumes from the stored position
    assert reopened.poll() == 1
    assert events(engine) == [1, 2]


@pytest.mark.parametrize(("options", "message"), [
    ({"format": "xml"}, "format must be"),
    ({"on_malformed": "ignore"}, "on_malformed must be"),
    ({"batch": 0}, "batch must be"),
    ({"max_record_bytes": 0}, "max_record_bytes must be"),
    ({"delimiter": '"'}, "delimiter must be"),
])
def test_bad_options_are_refused(tmp_path: Path, engine: Engine, options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FileSource(engine, STREAM, tmp_path / "in.jsonl", **options)


# -- running ------------------------------------------------------------------------------------------------------


def wait_until(condition: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def test_start_polls_in_a_thread_until_stopped(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"1\n")
    source = FileSource(engine, STREAM, path).start(interval=0.01)
    try:
        wait_until(lambda: engine.streams()[STREAM].appended == 1)
        append(path, b"2\n3\n")
        wait_until(lambda: engine.streams()[STREAM].appended == 3)
    finally:
        source.stop()
    assert events(engine) == [1, 2, 3]


def test_an_error_stops_the_thread_and_is_raised_by_stop(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"1\nbad\n")
    source = FileSource(engine, STREAM, path).start(interval=0.01)
    wait_until(lambda: source._thread is not None and not source._thread.is_alive())
    with pytest.raises(MalformedLineError, match=":2: not JSON"):
        source.stop()


def test_run_polls_on_the_event_loop_until_stop_is_set(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"1\n")
    source = FileSource(engine, STREAM, path)

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(source.run(interval=0.01, stop=stop))
        while engine.streams()[STREAM].appended < 1:
            await asyncio.sleep(0.005)
        append(path, b"2\n")
        while engine.streams()[STREAM].appended < 2:
            await asyncio.sleep(0.005)
        stop.set()
        await asyncio.wait_for(task, 5)

    asyncio.run(main())
    assert events(engine) == [1, 2]


def test_the_state_is_read_without_the_poll_lock(tmp_path: Path, engine: Engine) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"1\n")
    source = FileSource(engine, STREAM, path)
    with source._poll_lock:  # a poll in progress must not block a checkpoint (which holds the engine's lock)
        engine.checkpoint()
    assert json.loads(engine.source_state(STREAM) or b"")["offset"] == 0
    source.poll()
    engine.checkpoint()
    assert json.loads(engine.source_state(STREAM) or b"")["offset"] == 2

