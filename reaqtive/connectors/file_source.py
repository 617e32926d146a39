"""A source that tails a JSON-lines or CSV file and appends its records to an engine stream, each exactly once
across crashes.

>>> import tempfile, pathlib
>>> from reaqtive.engine import Engine
>>> path = pathlib.Path(tempfile.mkdtemp()) / "orders.csv"
>>> _ = path.write_text('id,item\\n1,"tea, green"\\n2,coffee\\n3,cake')   # the last line is still being written
>>> engine = Engine.in_memory()
>>> engine.create_stream("orders")
>>> source = FileSource(engine, "orders", path, format="csv")
>>> source.poll()                        # two complete records; the third waits for its newline
2
>>> with path.open("a") as f:
...     _ = f.write("\\n")
>>> source.poll()
1
>>> engine.close()

**How it keeps its place.** Each :meth:`FileSource.poll` reads the complete records after its offset and appends
them in chunks (``engine.append_many``, one transaction each, then ``flush_ingress``), and after each chunk it
holds the pair (byte offset after the chunk, the stream's head after it). The engine stores that pair with every
checkpoint (``engine.register_source``), in the checkpoint's transaction. After a crash the source reads the
pair back (``engine.source_state``) and the stream's head now: the events appended after the checkpoint are
exactly the records right after the stored offset (appends are atomic and in order), so it skips that many
records and goes on. Nothing is appended twice and nothing is lost, whenever the crash happens; the pair needs
no update in the same transaction as the events. Before any checkpoint holds a pair, it is (offset 0, head 0).

This needs the source to be the **only writer of its stream**, from the stream's first event on. It detects
what it can: the first event of each chunk must get the sequence number the source expects, and after a restart
the file must hold at least as many records as the stream gained (:class:`SourceConflictError`).

**The file.** A record ends with a newline; a last line without one is left for a later poll (the writer is in
the middle of it). For CSV, a newline inside a quoted field does not end the record, and the first record is the
header (or pass ``fieldnames=``); each record becomes a ``dict`` of strings. For JSON lines each line is one JSON
value (``null`` is refused: the engine has no null events); blank lines are skipped. The file must keep growing in
place: one that was replaced (another inode), shrunk below the offset, or rewritten before it raises
:class:`SourceFileChangedError` (to start over on a new file, use a new stream or a new source ``name``).
Rotation is not followed.

**Event time**: ``time_field=`` names a field of each record holding an ISO 8601 time with a zone, or seconds
since the epoch (a number, or a CSV string of one); without it events get the engine's ``now`` when appended.

**A malformed record** (not JSON, a CSV row of another width, a bad or missing time): with
``on_malformed="raise"`` (the default) the records before it are appended and :class:`MalformedLineError`
names ``file:line``; the source stays before it, so every later poll raises again until the file is fixed. With
``"skip"`` it is logged (WARNING), counted in ``skipped`` and passed over. Malformed records are not events, so
the restart count above does not include them.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
import math
import os
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from reaqtive.connectors.errors import (
    MalformedLineError,
    SourceConflictError,
    SourceError,
    SourceFileChangedError,
    SourceStateError,
)
from reaqtive.engine.engine_errors import ArtifactNotFoundError, MalformedRecordError

if TYPE_CHECKING:
    import asyncio

    from reaqtive.engine.engine import Engine

__all__ = ["FileSource"]

_LOG: Final = logging.getLogger("reaqtive.connectors")
_STATE_VERSION: Final = 1
_MARK_BYTES: Final = 64  # the bytes before the offset whose checksum shows the file was not rewritten
_STATE_FIELDS: Final = frozenset({"v", "offset", "head", "line", "mark", "dev", "ino"})


@dataclass(frozen=True)
class _Position:
    """Where the source stands: replaced whole (never changed in place), so a checkpoint reads a consistent one
    without a lock. ``offset`` bytes of the file were read; ``head``: the stream's head after appending them;
    ``line``: the lines before ``offset``; ``mark``: CRC-32 of the bytes just before ``offset``."""

    offset: int
    head: int
    line: int
    mark: int


@dataclass(frozen=True)
class _Record:
    end: int  # byte offset after the record
    line: int  # its first line (1-based)
    lines: int  # how many lines it spans
    text: str | None  # None: undecodable bytes
    tail: bytes  # up to _MARK_BYTES bytes ending at ``end``


class FileSource:
    """Tails ``path`` into stream ``stream`` of ``engine`` (see the module). ``format``: ``"jsonl"`` or
    ``"csv"``. ``name``: under which the engine stores the position (default: the stream's URI).
    ``time_field``: the field holding each event's time (default: none, the engine's now). ``on_malformed``:
    ``"raise"`` or ``"skip"``. ``fieldnames``, ``delimiter``: CSV options. ``batch``: records per append
    transaction. ``read_size``: bytes read at a time. ``max_record_bytes``: a longer record (a line that never
    ends) raises :class:`MalformedLineError` rather than filling memory.

    Opening it resumes where the last checkpoint left it (a skipped count of records, see the module), so open it
    after the engine recovered and before anything else appends to the stream."""

    def __init__(
        self,
        engine: Engine,
        stream: str,
        path: str | os.PathLike[str],
        *,
        format: Literal["jsonl", "csv"] = "jsonl",
        name: str | None = None,
        time_field: str | None = None,
        on_malformed: Literal["raise", "skip"] = "raise",
        fieldnames: list[str] | None = None,
        delimiter: str = ",",
        encoding: str = "utf-8",
        batch: int = 1000,
        read_size: int = 1 << 20,
        max_record_bytes: int = 16 << 20,
    ) -> None:
        if format not in ("jsonl", "csv"):
            raise ValueError(f"FileSource: format must be 'jsonl' or 'csv', got {format!r}")
        if on_malformed not in ("raise", "skip"):
            raise ValueError(f"FileSource: on_malformed must be 'raise' or 'skip', got {on_malformed!r}")
        for option, number in (("batch", batch), ("read_size", read_size), ("max_record_bytes", max_record_bytes)):
            if type(number) is not int or number < 1:
                raise ValueError(f"FileSource: {option} must be a whole number >= 1, got {number!r}")
        if len(delimiter) != 1 or delimiter in '"\r\n':
            raise ValueError(f"FileSource: delimiter must be one character other than a quote or newline, got "
                             f"{delimiter!r}")
        self.engine = engine
        self.stream = stream
        self.path = Path(path)
        self.name = name if name is not None else stream
        self._csv = format == "csv"
        self._time_field = time_field
        self._skip = on_malformed == "skip"
        self._fieldnames = list(fieldnames) if fieldnames is not None else None
        self._delimiter = delimiter
        self._encoding = encoding
        self._batch = batch
        self._read_size = read_size
        self._max_record = max_record_bytes
        self.skipped = 0
        """Malformed records passed over (``on_malformed="skip"``), since this source was opened."""
        self.resumed_skipping = 0
        """Records the stream already had when this source opened (appended after the stored position)."""
        self._poll_lock = threading.Lock()  # one poll at a time; a checkpoint never takes it (see _Position)
        self._buffer = b""  # bytes read after the offset, not yet a complete record
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._error: BaseException | None = None
        self._closed = False
        heads = engine.streams()
        if stream not in heads:
            raise ArtifactNotFoundError(f"FileSource: no stream {stream!r} (create it first)")
        self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            info = os.fstat(self._fd)
            self._identity = (info.st_dev, info.st_ino)
            self._position = _Position(0, 0, 0, 0)
            self._resume(heads[stream].appended)
            engine.register_source(self.name, self._state)
        except BaseException:
            os.close(self._fd)
            raise

    # -- the position in the engine's checkpoint --------------------------------------------------------------

    def _state(self) -> bytes:
        """Called by the engine's checkpoint, under its lock: the position, as data (JSON)."""
        position = self._position
        return json.dumps({"v": _STATE_VERSION, "offset": position.offset, "head": position.head,
                           "line": position.line, "mark": position.mark, "dev": self._identity[0],
                           "ino": self._identity[1]}, separators=(",", ":")).encode("ascii")

    def _load(self) -> tuple[_Position, tuple[int, int]] | None:
        """The stored position and file identity; every field checked (the bytes are data, never code)."""
        where = f"source {self.name!r} ({self.path})"
        try:
            blob = self.engine.source_state(self.name)
        except MalformedRecordError as error:
            raise SourceStateError(f"{where}: {error}") from error
        if blob is None:
            return None
        try:
            record = json.loads(blob)
        except ValueError as error:
            raise SourceStateError(f"{where}: its stored position is not JSON ({error})") from None
        if not isinstance(record, dict) or set(record) != _STATE_FIELDS:
            found = sorted(record) if isinstance(record, dict) else type(record).__name__
            raise SourceStateError(f"{where}: its stored position has fields {found}, expected "
                                   f"{sorted(_STATE_FIELDS)}")
        if record["v"] != _STATE_VERSION:
            raise SourceStateError(f"{where}: its stored position is of version {record['v']!r}; this code reads "
                                   f"version {_STATE_VERSION}")
        for key in _STATE_FIELDS - {"v"}:
            value = record[key]
            if type(value) is not int or value < 0 or (key == "mark" and value > 0xFFFFFFFF):
                raise SourceStateError(f"{where}: its stored {key} is {value!r}, not a whole number in range")
        if record["line"] > record["offset"]:
            raise SourceStateError(f"{where}: its stored position says {record['line']} lines in "
                                   f"{record['offset']} bytes")
        position = _Position(record["offset"], record["head"], record["line"], record["mark"])
        return position, (record["dev"], record["ino"])

    def _resume(self, head_now: int) -> None:
        """Start at the stored position, then skip the records appended after it (see the module)."""
        loaded = self._load()
        if loaded is not None:
            position, identity = loaded
            if identity != self._identity:
                raise SourceFileChangedError(
                    f"source {self.name!r}: {self.path} is another file than the one it read (device/inode "
                    f"{identity} then, {self._identity} now): it was replaced; nothing was appended")
            self._check_unchanged(position)
            self._position = position
        position = self._position
        gained = head_now - position.head
        if gained < 0:
            raise SourceStateError(
                f"source {self.name!r}: stream {self.stream!r} has {head_now} events, fewer than the {position.head} "
                "its stored position counts (the stream was recreated, or the store is older than the checkpoint)")
        self._read_header()
        skipped = 0
        while skipped < gained:
            records = self._complete_records(min(gained - skipped, self._batch))
            if not records:
                raise SourceConflictError(
                    f"source {self.name!r}: stream {self.stream!r} gained {gained} events after the stored "
                    f"position, but {self.path} has only {skipped} complete records after byte {position.offset}: "
                    "another writer appended to the stream")
            passed: list[tuple[_Record, bool]] = []
            for record in records:
                is_event = self._parse(record) is not None
                passed.append((record, is_event))
                skipped += is_event
                if skipped == gained:
                    break
            self._advance(passed)
        self.resumed_skipping = gained
        if gained:
            _LOG.info("source %r: resumed at %s:%d, skipping %d records appended after the last checkpoint",
                      self.name, self.path, self._position.line + 1, gained,
                      extra={"reaqtive_event": "source_resumed", "source": self.name, "skipped": gained})

    # -- polling --------------------------------------------------------------------------------------------------

    def poll(self) -> int:
        """Append the complete records added to the file since the last poll; returns how many were appended.
        Raises :class:`MalformedLineError` (after appending the records before it), :class:`SourceFileChangedError`
        or :class:`SourceConflictError`."""
        with self._poll_lock:
            if self._closed:
                raise SourceError(f"source {self.name!r} is closed")
            self._check_unchanged(self._position)
            self._read_header()
            appended = 0
            while records := self._complete_records(self._batch):
                events: list[tuple[Any, datetime | None]] = []
                done: list[tuple[_Record, bool]] = []
                failure: MalformedLineError | None = None
                for record in records:
                    try:
                        event = self._parse_or_raise(record)
                    except MalformedLineError as error:
                        if not self._skip:
                            failure = error
                            break
                        self.skipped += 1
                        _LOG.warning("source %r: skipped %s", self.name, error,
                                     extra={"reaqtive_event": "source_skipped", "source": self.name,
                                            "path": str(self.path), "line": error.line})
                        done.append((record, False))
                        continue
                    if event is not None:
                        events.append(event)
                    done.append((record, event is not None))
                appended += self._append(events, done)
                if failure is not None:
                    raise failure
            return appended

    def _append(self, events: list[tuple[Any, datetime | None]], done: list[tuple[_Record, bool]]) -> int:
        """Append one chunk in one transaction, make it durable, then move the position past it."""
        expected = self._position.head
        seqs = self.engine.append_many(self.stream, events) if events else []
        if seqs:
            self.engine.flush_ingress()  # the position may only count durable events (GroupCommit)
        self._advance(done)
        if seqs and seqs[0] != expected:
            raise SourceConflictError(
                f"source {self.name!r}: its events from {self.path} got #{seqs[0]}-#{seqs[-1]} of stream "
                f"{self.stream!r}, but #{expected} was next: another writer appended to the stream")
        return len(seqs)

    def _advance(self, records: list[tuple[_Record, bool]]) -> None:
        """Move the position past ``records`` (the first ones of the buffer), each an event or not."""
        if not records:
            return
        position, last = self._position, records[-1][0]
        self._buffer = self._buffer[last.end - position.offset:]
        tail = last.tail if len(last.tail) >= min(last.end, _MARK_BYTES) else self._pread(
            max(0, last.end - _MARK_BYTES), last.end)
        self._position = _Position(last.end, position.head + sum(is_event for _, is_event in records),
                                   position.line + sum(record.lines for record, _ in records), zlib.crc32(tail))

    # -- reading the file -----------------------------------------------------------------------------------------

    def _check_unchanged(self, position: _Position) -> None:
        """The file at ``path`` is still ours, not shorter than the offset, and unchanged before it."""
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            raise SourceFileChangedError(f"source {self.name!r}: {self.path} was removed") from None
        if (now.st_dev, now.st_ino) != self._identity:
            raise SourceFileChangedError(f"source {self.name!r}: {self.path} was replaced by another file "
                                         "(another inode); rotation is not followed")
        size = os.fstat(self._fd).st_size
        if size < position.offset:
            raise SourceFileChangedError(f"source {self.name!r}: {self.path} shrank to {size} bytes, below the "
                                         f"{position.offset} already read (truncated or rewritten)")
        start = max(0, position.offset - _MARK_BYTES)
        if zlib.crc32(self._pread(start, position.offset)) != position.mark:
            raise SourceFileChangedError(f"source {self.name!r}: the bytes of {self.path} before offset "
                                         f"{position.offset} changed (the file was rewritten)")

    def _pread(self, start: int, end: int) -> bytes:
        chunks = []
        while start < end:
            chunk = os.pread(self._fd, end - start, start)
            if not chunk:
                break
            chunks.append(chunk)
            start += len(chunk)
        return b"".join(chunks)

    def _complete_records(self, limit: int) -> list[_Record]:
        """Up to ``limit`` complete records after the position (reading more of the file as needed)."""
        records: list[_Record] = []
        while True:
            records = list(self._split(limit))
            if len(records) >= limit:
                return records
            if not records and len(self._buffer) > self._max_record:  # memory stays bounded
                raise MalformedLineError(str(self.path), self._position.line + 1,
                                         f"a record longer than max_record_bytes={self._max_record} (no newline)")
            more = os.pread(self._fd, self._read_size, self._position.offset + len(self._buffer))
            if not more:
                return records
            self._buffer += more

    def _split(self, limit: int) -> Iterator[_Record]:
        """The complete records at the start of the buffer (a CSV record ends at a newline outside quotes)."""
        buffer, position = self._buffer, self._position
        start, line, count = 0, position.line, 0
        while count < limit:
            end = buffer.find(b"\n", start)
            lines = 1
            if self._csv:
                while end >= 0 and buffer.count(b'"', start, end) % 2:  # inside a quoted field: not the end
                    end = buffer.find(b"\n", end + 1)
                    lines += 1
            if end < 0:
                return
            raw = buffer[start:end]
            try:
                text: str | None = raw.decode(self._encoding).removesuffix("\r")
            except UnicodeDecodeError:
                text = None
            absolute = position.offset + end + 1
            tail = buffer[max(0, end + 1 - _MARK_BYTES):end + 1]
            yield _Record(absolute, line + 1, lines, text, tail)
            count += 1
            line += lines
            start = end + 1

    def _read_header(self) -> None:
        """CSV: the field names from the first record (read once, from the start of the file)."""
        if not self._csv or self._fieldnames is not None:
            return
        if self._position.offset > 0:  # resumed past it: read it again from the start
            with open(self.path, "rb") as file:
                first = file.readline()
                while first.count(b'"') % 2 and (more := file.readline()):
                    first += more
            self._fieldnames = self._header_of(first.rstrip(b"\r\n"))
            return
        records = self._complete_records(1)
        if records:
            self._fieldnames = self._header_of(self._pread(0, records[0].end).rstrip(b"\r\n"))
            self._advance([(records[0], False)])

    def _header_of(self, raw: bytes) -> list[str]:
        try:
            rows = list(csv.reader(io.StringIO(raw.decode(self._encoding)), delimiter=self._delimiter, strict=True))
        except (UnicodeDecodeError, csv.Error) as error:
            raise MalformedLineError(str(self.path), 1, f"the CSV header cannot be read: {error}") from None
        if len(rows) != 1 or not rows[0] or len(set(rows[0])) != len(rows[0]):
            raise MalformedLineError(str(self.path), 1, "the CSV header must be one row of distinct field names")
        return rows[0]

    # -- records to events ----------------------------------------------------------------------------------------

    def _parse(self, record: _Record) -> tuple[Any, datetime | None] | None:
        """The event of a record; ``None`` for a blank line or one skipped as malformed (a malformed one under
        ``"raise"`` raises)."""
        try:
            return self._parse_or_raise(record)
        except MalformedLineError:
            if self._skip:
                return None
            raise

    def _parse_or_raise(self, record: _Record) -> tuple[Any, datetime | None] | None:
        where = str(self.path)
        if record.text is None:
            raise MalformedLineError(where, record.line, f"not {self._encoding} text")
        if not record.text.strip():
            return None  # a blank line is no record
        value: Any
        if self._csv:
            try:
                rows = list(csv.reader(io.StringIO(record.text), delimiter=self._delimiter, strict=True))
            except csv.Error as error:
                raise MalformedLineError(where, record.line, f"not a CSV row: {error}") from None
            names = self._fieldnames or []
            if len(rows) != 1 or len(rows[0]) != len(names):
                width = len(rows[0]) if len(rows) == 1 else f"{len(rows)} rows"
                raise MalformedLineError(where, record.line, f"a CSV row of {width} fields; the header has "
                                                            f"{len(names)}")
            value = dict(zip(names, rows[0], strict=True))
        else:
            try:
                value = json.loads(record.text)
            except ValueError as error:
                raise MalformedLineError(where, record.line, f"not JSON: {error}") from None
            if value is None:
                raise MalformedLineError(where, record.line, "null is not an event")
        return value, self._time_of(value, record)

    def _time_of(self, value: Any, record: _Record) -> datetime | None:
        field = self._time_field
        if field is None:
            return None
        if not isinstance(value, dict) or field not in value:
            raise MalformedLineError(str(self.path), record.line, f"no time field {field!r}")
        raw = value[field]
        try:
            if isinstance(raw, str):
                try:
                    raw = float(raw)
                except ValueError:
                    when = datetime.fromisoformat(raw)
                    if when.tzinfo is None:
                        raise ValueError(f"{value[field]!r} has no time zone") from None
                    return when
            if isinstance(raw, (int, float)) and not isinstance(raw, bool) and math.isfinite(raw):
                return datetime.fromtimestamp(raw, UTC)
            raise ValueError(f"{raw!r} is neither an ISO 8601 time nor seconds since the epoch")
        except (ValueError, OverflowError, OSError) as error:
            raise MalformedLineError(str(self.path), record.line, f"time field {field!r}: {error}") from None

    # -- running --------------------------------------------------------------------------------------------------

    async def run(self, interval: float = 0.5, stop: asyncio.Event | None = None) -> None:
        """Poll (in a worker thread) until ``stop`` is set (or the task is cancelled); when a poll finds nothing,
        wait ``interval`` seconds. A poll's error ends the loop and is raised."""
        import asyncio  # only a source run this way needs it

        stop = stop if stop is not None else asyncio.Event()
        while not stop.is_set():
            if await asyncio.to_thread(self.poll) == 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), interval)

    def start(self, interval: float = 0.5) -> FileSource:
        """Poll in a daemon thread until :meth:`stop`; an error stops the thread and is raised by :meth:`stop`."""
        if self._thread is not None:
            raise RuntimeError(f"source {self.name!r} is already running")
        self._stopping.clear()

        def loop() -> None:
            try:
                while not self._stopping.is_set():
                    if self.poll() == 0:
                        self._stopping.wait(interval)
            except BaseException as error:
                self._error = error

        self._thread = threading.Thread(target=loop, name=f"FileSource {self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop the thread of :meth:`start` (after its current poll); raise the error that stopped it, if any."""
        thread, self._thread = self._thread, None
        self._stopping.set()
        if thread is not None:
            thread.join(timeout)
        error, self._error = self._error, None
        if error is not None:
            raise error

    def close(self) -> None:
        """Stop polling, stop storing the position (the last stored one stays) and close the file."""
        try:
            self.stop()
        finally:
            with self._poll_lock:
                if not self._closed:
                    self._closed = True
                    self.engine.unregister_source(self.name)
                    os.close(self._fd)

    def __enter__(self) -> FileSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FileSource({self.stream!r} <- {str(self.path)!r})"
