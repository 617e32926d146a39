"""Appending to the durable ingress log: events are encoded by the caller, numbered, and committed in groups.

A commit (an SQLite transaction made durable on disk) costs far more than writing an event, so the log is written
in groups, in one of two modes chosen by ``Engine(path, ingress_commit=...)``:

* ``"call"`` (the default): **every append is durable when it returns**. Appends from several threads share
  commits: the first caller to find no commit running becomes the leader and commits everything queued by then
  in one transaction, while the others wait; when it is done, each of them returns (or one of them leads the
  next commit, taking everything queued meanwhile). One thread appending alone commits once per call, so write
  many events per call (:meth:`~reaqtive.engine.Engine.append_many`, :meth:`~reaqtive.engine.Engine.extend`)
  where you can.
* :class:`GroupCommit(events=N, seconds=T) <GroupCommit>`: **appends return at once**, with their sequence
  numbers; the events are committed by a background thread once ``N`` are waiting or the oldest has waited
  ``T`` seconds, and by :meth:`~reaqtive.engine.Engine.flush_ingress`, :meth:`~reaqtive.engine.Engine.process`,
  :meth:`~reaqtive.engine.Engine.checkpoint` and :meth:`~reaqtive.engine.Engine.close`. **A crash loses the
  events not committed yet**: at most the last ``N`` (more while a commit is slow: an append waits only when
  ``2 N`` are waiting) or the last ``T`` seconds of them. Use it for inputs that can be produced again, or where
  throughput matters more than the last fraction of a second. If a background commit fails, its events stay
  waiting (in order) and are tried again; the next append and every flush raise the error until a commit
  succeeds.

Either way the order of the log is the order in which appends were accepted (for one thread: its call order),
sequence numbers of a stream are contiguous, and no event is written twice. Example::

    engine = Engine("app.db", ingress_commit=GroupCommit(events=10_000, seconds=0.05))
    for reading in sensor:
        engine.append("iot://temperature", reading.celsius, reading.time)  # returns at once
    engine.flush_ingress()  # everything above is durable now
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any, Final, TypeAlias

from reaqtive.core.errors import InvalidSettingError
from reaqtive.engine.database import (
    ROW_EVENTS,
    EngineStore,
    IngressBatch,
    PackedEntries,
    array_entries,
    from_micros,
    require_aware,
)
from reaqtive.engine.event_times import EventTimeBounds
from reaqtive.engine.schemas import Schema
from reaqtive.state import StateCodec, StoreError

__all__ = ["EXTEND_CHUNK", "GroupCommit", "IngressCommit", "IngressWriter", "chunks"]

EXTEND_CHUNK: Final = 10_000
"""Events per transaction of :meth:`~reaqtive.engine.Engine.extend`."""

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)
_LOG: Final = logging.getLogger("reaqtive.engine.ingress")


@dataclass(frozen=True, slots=True)
class GroupCommit:
    """Appends return at once; their events are committed every ``events`` events or ``seconds`` seconds (see
    the module: a crash loses what was not committed yet)."""

    events: int = 10_000
    seconds: float = 0.05

    def __post_init__(self) -> None:
        if type(self.events) is not int or self.events < 1:
            raise InvalidSettingError(f"GroupCommit events must be an int >= 1, got {self.events!r}")
        if type(self.seconds) not in (int, float) or not math.isfinite(self.seconds) or self.seconds <= 0:
            raise InvalidSettingError(f"GroupCommit seconds must be a number > 0, got {self.seconds!r}")


IngressCommit: TypeAlias = str | GroupCommit
"""``"call"`` or a :class:`GroupCommit`."""


class _Pending:
    """An append waiting for its commit (``"call"`` mode: its caller waits for ``done``)."""

    __slots__ = ("batch", "done", "error", "first")

    def __init__(self, batch: IngressBatch) -> None:
        self.batch = batch
        self.done = False
        self.first = -1
        self.error: BaseException | None = None


class IngressWriter:
    """Numbers and commits the engine's appends (see the module). Thread-safe: any thread may append.

    ``commit``: ``"call"`` or a :class:`GroupCommit`. ``commits``: how many transactions it committed. The
    writer registers itself with the store, which has it write what is waiting before it truncates the log or
    closes.
    """

    def __init__(self, store: EngineStore, commit: IngressCommit = "call", *,
                 logger: logging.Logger | None = None) -> None:
        if commit != "call" and not isinstance(commit, GroupCommit):
            raise InvalidSettingError(f"ingress_commit must be 'call' or a GroupCommit, got {commit!r}")
        self._store = store
        self._group = commit if isinstance(commit, GroupCommit) else None
        self._log = logger or _LOG
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[_Pending] = []
        self._waiting = 0  # events in the queue
        self._oldest = 0.0  # when the oldest of them was queued (time.monotonic)
        self._committing = False  # a thread is committing (the leader, the flusher, a flush)
        self._callers = 0  # threads in append() ("call" mode): more than one, a leader waits for the others
        self._heads: dict[str, int] = {}  # GroupCommit: each stream's next number, queued events included
        self._error: BaseException | None = None  # GroupCommit: the last failed commit, until one succeeds
        self._flusher: threading.Thread | None = None
        self._closed = False
        # the max_event_time_ahead bound in micros: until when it holds (monotonic), the bound, for which setting
        self._ahead: tuple[float, int, timedelta | None] = (0.0, 0, None)
        self.commits = 0
        store.set_pending_ingress(self._write_pending if self._group is not None else None)

    @property
    def mode(self) -> IngressCommit:
        """``"call"`` or the :class:`GroupCommit`."""
        return self._group if self._group is not None else "call"

    # -- preparing a batch (in the caller's thread) ------------------------------------------------------------

    def prepare(
        self, stream: str, events: Iterable[tuple[Any, datetime | None]], bounds: EventTimeBounds, clock: datetime,
        schema: Schema | None = None,
    ) -> IngressBatch:
        """Check and encode ``(value, time)`` events (``time`` ``None``: now), and decide which go to the dead
        letters: those dated more than ``bounds.max_ahead`` after the later of now and ``clock`` (the engine's).
        ``schema``: a typed stream's validator; every value is validated first and the validated form is what
        is encoded. Raises ``TypeError`` for a ``None`` value, ``ValueError`` for a naive time,
        :class:`~reaqtive.engine.engine_errors.SchemaValidationError` for a value the schema refuses, the codec's
        error for a value it cannot save: nothing is appended then. Runs in the caller's thread, without the
        engine's lock."""
        events = events if isinstance(events, list) else list(events)
        if schema is not None:  # every event before any is encoded: the first refused one names its index
            events = schema.validate_events(stream, events)
        payloads, micros = _encode(events, self._store.codec)
        return IngressBatch(stream, payloads, micros, self._too_far_ahead(events, micros, bounds, clock))

    def _too_far_ahead(
        self, events: list[tuple[Any, datetime | None]], micros: list[int], bounds: EventTimeBounds, clock: datetime
    ) -> list[str | None] | None:
        """Per event, why it is dated too far ahead (``None``: it is not), or ``None`` if none is: one comparison
        of integers per event, the reason written only for those refused. The bound is kept for a second: it only
        grows with the clocks, so an event below it is below the current one (and delivery checks again)."""
        if bounds.max_ahead is None or not micros:
            return None
        latest = max(micros)
        valid_until, limit, ahead = self._ahead
        if latest <= limit and ahead == bounds.max_ahead and time.monotonic() < valid_until:
            return None
        reference = max(datetime.now(UTC), clock)  # after the events were stamped: a "now" stamp is never ahead
        try:
            limit = (reference + bounds.max_ahead - _EPOCH) // _MICROSECOND
        except OverflowError:
            return None  # the bound lies past datetime.max: nothing is beyond it
        self._ahead = (time.monotonic() + 1.0, limit, bounds.max_ahead)
        if latest <= limit:
            return None
        return [bounds.ahead(when if when is not None else from_micros(stamp), reference) if stamp > limit else None
                for (_, when), stamp in zip(events, micros, strict=True)]

    # -- appending ---------------------------------------------------------------------------------------------

    def append(self, batch: IngressBatch) -> int:
        """Append a batch; returns the sequence number of its first event (the rest follow). ``"call"``: once it
        is committed; :class:`GroupCommit`: at once."""
        if self._group is not None:
            return self._queue_batch(batch, self._group)
        pending = _Pending(batch)
        cond = self._cond
        with cond:
            self._check_open()
            self._queue.append(pending)
            self._callers += 1
            while self._committing and not pending.done:
                cond.wait()  # another caller is committing; it takes this batch too, or the next leader does
            if not pending.done:
                self._committing = True
            others = self._callers > 1
            self._callers -= 1
        if not pending.done:
            try:
                if others:
                    # Let the callers just woken by the last commit queue their appends: one commit more. Not
                    # for a lone producer: giving up the interpreter to a busy processing thread costs it a
                    # switch interval (5 ms) for nothing.
                    time.sleep(0)
                with cond:
                    taken, self._queue = self._queue, []
                self._commit_call(taken)
            finally:
                with cond:
                    self._committing = False
                    cond.notify_all()
        if pending.error is not None:
            raise pending.error
        return pending.first

    def _commit_call(self, taken: list[_Pending]) -> None:
        """Commit the appends of waiting callers in one transaction; if that fails, each alone, so that one
        stream's trouble (a damaged head) fails only its own appends."""
        try:
            firsts = self._store.write_ingress([pending.batch for pending in taken])
        except Exception as error:
            if len(taken) == 1:
                taken[0].error = error
            else:
                for pending in taken:
                    try:
                        (pending.first,) = self._store.write_ingress([pending.batch])
                        self.commits += 1
                    except Exception as alone:
                        pending.error = alone
        except BaseException as error:  # interrupted: the transaction was rolled back
            for pending in taken:
                pending.error = StoreError(f"{self._store.path}: the append was interrupted ({error!r}) and not "
                                           "written")
            raise
        else:
            self.commits += 1
            for pending, first in zip(taken, firsts, strict=True):
                pending.first = first
        finally:
            for pending in taken:
                pending.done = True

    def _queue_batch(self, batch: IngressBatch, group: GroupCommit) -> int:
        count = len(batch.payloads)
        with self._cond:
            self._check_open()
            if self._error is not None:
                raise StoreError(f"{self._store.path}: a commit of the ingress log failed ({self._error}); the "
                                 "events appended before are still waiting") from self._error
            first = self._heads.get(batch.stream)
            if first is None:
                first = self._store.stream_head(batch.stream)
            batch.first = first
            self._heads[batch.stream] = first + count
            if not self._queue:
                self._oldest = time.monotonic()
            self._queue.append(_Pending(batch))
            self._waiting += count
            if self._waiting >= group.events:
                self._cond.notify_all()  # the flusher commits now
            if self._flusher is None:
                self._flusher = threading.Thread(target=self._flush_in_background, name="reaqtive-ingress",
                                                 daemon=True)
                self._flusher.start()
            behind = self._waiting >= 2 * group.events
        if behind:  # commits do not keep up: this caller commits too (and waits for it)
            self.flush()
        return first

    def flush(self) -> None:
        """Commit every waiting event (:class:`GroupCommit`; nothing to do in ``"call"`` mode); returns when they
        are durable. If the commit fails, they stay waiting, in order, and the error is raised."""
        if self._group is None:
            return
        cond = self._cond
        with cond:
            while self._committing:
                cond.wait()
            if not self._queue:
                return
            self._committing = True
            taken, self._queue, waiting = self._queue, [], self._waiting
            self._waiting = 0
        try:
            self._store.write_ingress([pending.batch for pending in taken])
        except BaseException as error:
            with cond:
                self._queue[:0] = taken
                self._waiting += waiting
                self._oldest = time.monotonic()  # try again in `seconds`, not at once
                self._error = error
            raise
        else:
            with cond:
                self.commits += 1
                self._error = None
        finally:
            with cond:
                self._committing = False
                cond.notify_all()

    def _flush_in_background(self) -> None:
        """The flusher: commits when ``events`` are waiting or the oldest waited ``seconds``; ends when nothing
        waits (the next append starts another), so an idle or abandoned engine holds no thread."""
        group = self._group
        assert group is not None
        cond = self._cond
        while True:
            with cond:
                while True:
                    if self._closed or not self._queue:
                        self._flusher = None
                        return
                    wait = self._oldest + group.seconds - time.monotonic()
                    if (self._waiting >= group.events and self._error is None) or wait <= 0:
                        break
                    cond.wait(wait)
            try:
                self.flush()
            except Exception as error:
                self._log.error("committing %d waiting ingress events failed (tried again in %s s): %s",
                                self._waiting, group.seconds, error,
                                extra={"reaqtive_event": "ingress_commit_failed", "events": self._waiting,
                                       "retry_seconds": group.seconds, "error_type": type(error).__name__})

    # -- lifetime ----------------------------------------------------------------------------------------------

    def _write_pending(self, closing: bool) -> None:
        """The store's hook: before a truncation, commit what waits; before the store closes, close."""
        if closing:
            self.close()
        else:
            self.flush()

    def close(self) -> None:
        """Commit what is waiting, stop the flusher, refuse further appends. Raises if the last commit fails
        (its events are then lost: the store is closing)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
            flusher = self._flusher
        if flusher is not None and flusher is not threading.current_thread():
            flusher.join()
        self.flush()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self._store.path}: the ingress log is closed")


def _encode(events: list[tuple[Any, datetime | None]], codec: StateCodec) -> tuple[Sequence[bytes], list[int]]:
    """The events' payloads and times (integer microseconds since the epoch), or the error of the first event
    refused, as if each event were checked and encoded in turn: ``None`` (``TypeError``), a naive time
    (``ValueError``), a value the codec cannot save (its error, naming the type).

    The values are packed a row's worth per packer call (:class:`PackedEntries`): one call per event cost about
    30 ns an event more. A time ``None`` is now, ``time_ns() // 1000``: the microsecond ``datetime.now(UTC)``
    reads (the same clock, rounded down), without making a datetime and subtracting the epoch from it (a third
    of the cost of an event stamped now)."""
    values: list[Any] = []
    micros: list[int] = []
    add_value, add_micros = values.append, micros.append
    now = time.time_ns
    base, base_micros = _time_base(events)
    try:
        for value, when in events:
            if value is None:
                raise TypeError("None is never a stream element")
            try:
                if when is None:
                    add_micros(now() // 1000)
                else:
                    # From a time near the batch's: the parts of the difference are small numbers, cheaper to
                    # add up than a timedelta's floor division (which makes each operand an integer first).
                    after = when - base
                    add_micros(base_micros + after.microseconds + after.seconds * 1_000_000
                               + after.days * 86_400_000_000)
            except TypeError:
                if isinstance(when, datetime) and when.tzinfo is None:
                    raise ValueError(f"event times must be timezone-aware, got {when}") from None
                require_aware(when, f"the time of event #{len(micros)} (counted from 0 in this call)")
                raise
            add_value(value)
    except Exception:
        _pack_each(values, codec)  # an event before this one whose value cannot be saved was refused first
        raise
    pack = codec.packer()
    try:
        # A list packs as an array: its header, then each value's entry as pack(value) writes it.
        chunks = [(len(part), array_entries(pack(part), len(part)))
                  for part in (values[start:start + ROW_EVENTS] for start in range(0, len(values), ROW_EVENTS))]
    except Exception:
        # A value the codec cannot save (this raises its error), or a list it cannot pack whose values it can
        # (values nested to its limit): one entry per value then.
        return _pack_each(values, codec), micros
    return PackedEntries(chunks), micros


def _time_base(events: list[tuple[Any, datetime | None]]) -> tuple[datetime, int]:
    """A time to count a batch's times from, and its microseconds since the epoch: its first event's time when
    that is an aware datetime (times close to it differ by small numbers), else the epoch. It is in UTC, as
    the epoch is: a difference between two times of one zone object is their wall clocks' (Python ignores
    the zone then), which is not the time between them across a change of a zone's offset, and UTC has none."""
    try:
        when = events[0][1]
        if isinstance(when, datetime) and when.utcoffset() is not None:
            base = when.astimezone(UTC)
            return base, (base - _EPOCH) // _MICROSECOND
    except Exception:  # no first event, not a pair, a time out of range: the loop says what is wrong
        return _EPOCH, 0
    return _EPOCH, 0


def _pack_each(values: list[Any], codec: StateCodec) -> list[bytes]:
    """Each value's entry; the codec's error for the first value it cannot save."""
    pack = codec.packer()
    payloads: list[bytes] = []
    for value in values:
        try:
            payloads.append(pack(value))
        except Exception:
            codec.encode(value)  # raises the codec's error, which names the value's type
            raise
    return payloads


def chunks(events: Iterable[tuple[Any, datetime | None]], size: int = EXTEND_CHUNK,
           ) -> Iterator[list[tuple[Any, datetime | None]]]:
    """``events`` in lists of ``size`` (the last one shorter), read as they are needed."""
    iterator = iter(events)
    while chunk := list(islice(iterator, size)):
        yield chunk
