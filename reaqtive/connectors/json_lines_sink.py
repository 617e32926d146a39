"""A sink that appends each output to a file as one JSON line, exactly once per ``(subscription, seq)``.

>>> import tempfile, pathlib
>>> from reaqtive.engine import Output
>>> path = pathlib.Path(tempfile.mkdtemp()) / "alerts.jsonl"
>>> with JsonLinesSink(path, fsync=False) as sink:
...     sink(Output("alerts", 0, {"level": 3}))
...     sink(Output("alerts", 0, {"level": 3}))  # a repeat after a restart: skipped
>>> path.read_text()
'{"subscription":"alerts","seq":0,"value":{"level":3}}\\n'

The sink carries the name the store keeps for it (``name=``, by default the file's stem: ``"alerts"``). Pass it
to the engine in every process, before the store opens (recovery resolves the name), and attach it in one step::

    sink = JsonLinesSink("/var/lib/app/alerts.jsonl")          # named "alerts"
    engine = Engine("app.db", sinks=[sink])
    engine.create_subscription("hot", query, observer=sink)  # defines obs://alerts the first time

The engine's outbox hands the sink each output at least once, in order. The sink makes that exactly once in
the file: when it opens, it reads the file and learns the last ``seq`` written per subscription; an output at or
below it is a repeat (a replay after a crash) and is skipped. Each line is written with one ``write`` on a file
opened for appending, then flushed to disk (``fsync=True``) before the call returns, so an output the outbox
counts as delivered is on disk. The outbox hands over batches (:meth:`JsonLinesSink.write_batch`): one write and
one flush to disk per batch.

**A crash in the middle of a write** leaves the last line without its newline. Such a line belongs to a call that
never returned, so the outbox still has its output and will deliver it again; on open the sink cuts the file
back to the end of the last complete line (every complete line is kept) and the output is written again whole.
A write that fails in this process (disk full) is cut back the same way at once. A complete line that is not one
of the sink's outputs, or that repeats a ``seq``, means the file was edited: the sink refuses it
(:class:`SinkFileError` with ``path:line``) and changes nothing. The file is locked while a sink has it open
(``flock``, where the platform has it): a second sink on it is refused.

The sink does not retry inside a call: a local write either works or fails for a reason a retry a few
milliseconds later will not fix; the outbox retries with its own backoff and stops the subscription if it keeps
failing, with its outputs kept.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from reaqtive.connectors._json import JsonDefault, OutputJson
from reaqtive.connectors.errors import SinkFileError
from reaqtive.engine.egress import Output
from reaqtive.engine.named_sinks import check_sink_name

if sys.platform != "win32":
    import fcntl

__all__ = ["JsonLinesSink"]

_LOG: Final = logging.getLogger("reaqtive.connectors")
_READ_BLOCK: Final = 1 << 20


class JsonLinesSink:
    """Appends each output to ``path`` as a JSON line ``{"subscription", "seq", "value"}``, once per
    ``(subscription, seq)`` (see the module). ``fsync``: flush each line to disk before returning (off: faster,
    and an operating-system crash may lose the last lines, which the engine then no longer re-delivers).
    ``json_default``: converts values JSON cannot represent (``json.dumps``'s ``default``). ``name``: the name the
    engine's store keeps for the sink (its observer is ``obs://<name>``; default: the file's stem); pass the old
    name when the file moves to another one."""

    def __init__(self, path: str | os.PathLike[str], *, name: str | None = None, fsync: bool = True,
                 json_default: JsonDefault | None = None) -> None:
        self.path = Path(path)
        self.name = check_sink_name(self.path.stem if name is None else name, f"JsonLinesSink({str(path)!r})")
        """The name the engine's store keeps for this sink (see :mod:`reaqtive.engine.named_sinks`)."""
        self._fsync = fsync
        self._json = OutputJson(json_default)
        self._lock = threading.Lock()
        self._last: dict[str, int] = {}
        self.repeats = 0
        """Outputs skipped because the file already had them (replays after a restart)."""
        self.repaired = 0
        """Bytes of a torn last line cut off when the file was opened (0: none)."""
        self._torn = False  # a write failed and could not be cut back: cut it before the next one
        created = not self.path.exists()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            self._lock_file()
            if created and fsync:
                _fsync_directory(self.path.parent)  # the new file's name survives an operating-system crash
            self._size = self._scan()
        except BaseException:
            os.close(self._fd)
            raise

    def __call__(self, output: Output) -> None:
        """Append ``output`` unless its ``(subscription, seq)`` was already written."""
        self.write_batch((output,))

    def write_batch(self, outputs: Sequence[Output]) -> None:
        """Append the outputs not written yet, with one write and one flush to disk (the outbox hands over a
        batch this way): all of them are in the file when this returns, or none (a failed write is cut back)."""
        with self._lock:
            if self._fd < 0:
                raise SinkFileError(f"{self.path}: the sink is closed")
            last = self._last
            encode = self._json.one
            fresh: dict[str, int] = {}  # per subscription, its last seq in this batch
            lines: list[bytes] = []
            for output in outputs:
                if output.seq <= fresh.get(output.subscription, last.get(output.subscription, -1)):
                    self.repeats += 1  # the outbox delivers at least once
                    continue
                lines.append(encode(output))
                fresh[output.subscription] = output.seq
            if not lines:
                return
            lines.append(b"")
            data = b"\n".join(lines)
            if self._torn:
                self._cut(self._size)
            try:
                view = memoryview(data)
                while view:  # a regular file takes it in one write; a short write goes on where it stopped
                    view = view[os.write(self._fd, view):]
                if self._fsync:
                    os.fsync(self._fd)
            except BaseException:
                self._torn = True
                with contextlib.suppress(OSError):  # leave no torn line behind (or the next call cuts it)
                    self._cut(self._size)
                raise
            self._size += len(data)
            last.update(fresh)

    def last_seq(self, subscription: str) -> int:
        """The last ``seq`` of ``subscription`` in the file (-1: none)."""
        with self._lock:
            return self._last.get(subscription, -1)

    def close(self) -> None:
        """Close the file (and release its lock)."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> JsonLinesSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"JsonLinesSink({str(self.path)!r})"

    def _lock_file(self) -> None:
        if sys.platform == "win32":  # pragma: no cover - no flock: the file is not locked
            return
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SinkFileError(f"{self.path}: in use by another JsonLinesSink (two would interleave their "
                                "lines); one sink per file") from None

    def _scan(self) -> int:
        """Read the file: the last ``seq`` per subscription; a torn last line is cut. Returns the size kept."""
        offset = 0  # of the start of the current line
        number = 0
        pending = b""
        os.lseek(self._fd, 0, os.SEEK_SET)
        while block := os.read(self._fd, _READ_BLOCK):
            pending += block
            start = 0
            while (end := pending.find(b"\n", start)) >= 0:
                number += 1
                self._learn(pending[start:end], number)
                offset += end + 1 - start
                start = end + 1
            pending = pending[start:]
        if pending:
            self.repaired = len(pending)
            _LOG.warning("%s: cut a torn last line of %d bytes (a write interrupted by a crash; its output "
                         "will be delivered again)", self.path, len(pending),
                         extra={"reaqtive_event": "sink_repaired", "path": str(self.path), "bytes": len(pending)})
            self._cut(offset)
        return offset

    def _learn(self, raw: bytes, number: int) -> None:
        try:
            record: Any = json.loads(raw)
        except ValueError as error:
            raise SinkFileError(f"{self.path}:{number}: not a JSON line ({error}); the file was damaged or "
                                "edited, and the sink changes nothing in it") from None
        if not isinstance(record, dict) or set(record) != {"subscription", "seq", "value"}:
            raise SinkFileError(f"{self.path}:{number}: not an output line (subscription, seq, value)")
        subscription, seq = record["subscription"], record["seq"]
        if not isinstance(subscription, str) or type(seq) is not int or seq < 0:
            raise SinkFileError(f"{self.path}:{number}: subscription must be a str and seq an int >= 0, got "
                                f"{subscription!r}, {seq!r}")
        last = self._last.get(subscription, -1)
        if seq <= last:
            raise SinkFileError(f"{self.path}:{number}: {subscription}#{seq} follows #{last}: a line written twice "
                                "or out of order (the file was edited)")
        self._last[subscription] = seq

    def _cut(self, size: int) -> None:
        os.ftruncate(self._fd, size)
        if self._fsync:
            os.fsync(self._fd)
        self._torn = False


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - a platform that cannot open directories
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
