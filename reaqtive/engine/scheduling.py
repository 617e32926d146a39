"""The engine's scheduler hierarchy: a logical scheduler per subscription, to pause, resume and prioritize one query.

The engine's root scheduler (one clock: the event clock or the wall clock) has a child per running subscription,
named by its URI; the query's operators and its inner subscriptions run on that child. So:

* a checkpoint quiesces everything at once (it takes the engine's lock at a yield point of the delivery loop, see
  :mod:`reaqtive.engine.handover`, where no task of any query runs);
* :meth:`Scheduling.pause` stops one query: its timers wait (parked in its scheduler) and the events appended
  meanwhile pass its stream readers by; the durable log keeps them (its readers lag, so the log is not truncated
  past them, and a checkpoint saves where they stand). :meth:`Scheduling.resume` runs the timers that came due, and
  the engine replays the log to the query's readers from where they stopped: nothing is lost or delivered twice;
* a query's priority orders its work among the work of other queries due at the same instant (lower first);
* a task of a query that raises stops that query alone (see ``Running._task_failed``).

A pause lasts while the engine runs: a store reopened runs every query (and replays what a paused one had not
read). A priority is stored with the subscription.
"""

from __future__ import annotations

from typing import Any

from reaqtive.engine._room import _ARTIFACTS, EngineRoom, _to_bytes
from reaqtive.engine.engine_errors import ArtifactNotFoundError, MalformedRecordError
from reaqtive.engine.readers import StreamReader
from reaqtive.scheduler.virtual import MAX_PRIORITY, VirtualTimeScheduler, is_priority

__all__ = ["Scheduling", "record_priority"]


def record_priority(uri: str, record: dict[str, Any]) -> int:
    """The priority stored in a subscription's record (0 when absent); a malformed one is a damaged record."""
    priority = record.get("priority", 0)
    if not is_priority(priority):
        raise MalformedRecordError(f"the record of {uri!r} has priority {priority!r:.40}; a priority is a whole "
                                   f"number from {-MAX_PRIORITY} to {MAX_PRIORITY}")
    return priority


def check_priority(priority: object) -> int:
    """A priority given by a caller: a whole number within the scheduler's bounds."""
    if not is_priority(priority):
        raise ValueError(f"priority must be a whole number from {-MAX_PRIORITY} to {MAX_PRIORITY} (lower runs "
                         f"first), got {priority!r}")
    return priority


class Scheduling(EngineRoom):
    """See the module docstring."""

    def pause(self, uri: str) -> None:
        """Pause subscription ``uri``: its timers wait and the events appended to the streams it reads wait in the
        durable log, until :meth:`resume`. Other queries go on. Pausing a paused subscription does nothing.

        The events wait in the log, not in memory: a pause can last any time (the log grows by what is appended
        meanwhile; it is not truncated past what the paused query has not read). A store reopened while a query
        was paused runs it, and it reads what it had not. Raises :class:`ArtifactNotFoundError` for a URI that is
        not a running subscription.
        """
        with self._lock:
            self._check_open()
            scheduler = self._running(uri)
            if uri in self._paused:
                return
            self._paused.add(uri)
            scheduler.pause()
            held = self._readers_of(uri)
            for subscription, reader in held:
                subscription.detach()  # the events it misses stay in the log: replayed on resume
                reader.pause()
            self._held[uri] = held
            self._log.info("subscription %r paused", uri, extra={"reaqtive_event": "paused", "subscription": uri})

    def resume(self, uri: str) -> None:
        """Resume subscription ``uri`` (paused by :meth:`pause`): the timers that came due meanwhile run at once,
        then the processing loop delivers the events it had not read, in order, then the new ones. Resuming a
        running subscription does nothing."""
        with self._lock:
            self._check_open()
            scheduler = self._running(uri)
            if uri not in self._paused:
                return
            self._paused.discard(uri)
            held = [(subscription, reader) for subscription, reader in self._held.pop(uri, [])
                    if not reader.is_disposed]
            for subscription, reader in held:
                reader.resume()
                subscription.reattach()
            self._rewind_for([reader for _, reader in held])
            scheduler.resume()
            self._scheduler.advance_to(self._scheduler.clock)  # its timers that came due while it was paused
            self._apply_faults()
            self._log.info("subscription %r resumed", uri, extra={"reaqtive_event": "resumed", "subscription": uri})
        self.appended.fire()  # a processing loop looks again: there is input to replay
        if self._egress:
            self.produced.fire()

    def is_paused(self, uri: str) -> bool:
        """Whether subscription ``uri`` is paused."""
        with self._lock:
            return uri in self._paused

    def paused(self) -> list[str]:
        """The paused subscriptions, sorted."""
        with self._lock:
            return sorted(self._paused)

    def priority(self, uri: str) -> int:
        """The priority of subscription ``uri`` (see :meth:`set_priority`)."""
        with self._lock:
            return record_priority(uri, self._check_kind(uri, "subscription"))

    def set_priority(self, uri: str, priority: int) -> None:
        """Set the priority of subscription ``uri``: among the work of several queries due at the same instant
        (timers, the work an event triggered), a lower priority runs first (0 by default; an alert at -1 runs
        ahead of reports at 0). Stored with the subscription (committed when this returns); exact replay keeps
        it, since the order of work is part of what a replay must repeat."""
        check_priority(priority)
        with self._lock:
            self._check_open()
            record = self._check_kind(uri, "subscription")
            if record_priority(uri, record) == priority:
                return
            changed = {key: value for key, value in record.items() if key != "priority"}
            if priority:
                changed["priority"] = priority
            self._commit_changes(puts=[(_ARTIFACTS, uri, _to_bytes(changed))])
            self._records[uri] = changed
            hosted = self._subscriptions.get(uri)
            if hosted is not None:
                scheduler = hosted.scheduler
                assert isinstance(scheduler, VirtualTimeScheduler)
                scheduler.priority = priority

    # -- helpers ---------------------------------------------------------------------------------------------------

    def _running(self, uri: str) -> VirtualTimeScheduler:
        """The scheduler of running subscription ``uri``."""
        self._check_kind(uri, "subscription")
        hosted = self._subscriptions.get(uri)
        if hosted is None:
            raise ArtifactNotFoundError(f"subscription {uri!r} is not running (it failed, see engine.faults)")
        scheduler = hosted.scheduler
        assert isinstance(scheduler, VirtualTimeScheduler)  # the engine binds every query on a child of its root
        return scheduler

    def _readers_of(self, uri: str) -> list[tuple[Any, StreamReader[Any]]]:
        """The live stream readers of subscription ``uri`` and of its inner subscriptions, with their subscriptions
        to their streams."""
        prefix = uri + "/"
        readers: list[tuple[Any, StreamReader[Any]]] = []
        for subject in self._streams.values():
            for subscription in subject._subscriptions:
                reader = subscription._downstream
                if isinstance(reader, StreamReader) and not reader.is_disposed:
                    owner = reader.context.instance_id
                    if owner == uri or owner.startswith(prefix):
                        readers.append((subscription, reader))
        return readers

    def _rewind_for(self, readers: list[StreamReader[Any]]) -> None:
        """Make the delivery replay the log from the first event a resumed reader has not read (the others skip
        what they had, by their watermarks, as after a recovery)."""
        before = self._position
        for reader in readers:
            stream, watermark = reader.uri, reader.watermark
            if watermark >= self._delivered.get(stream, -1):
                continue
            self._expected[stream] = min(self._expected.get(stream, watermark + 1), watermark + 1)
            first = self._store.position_after(stream, watermark)
            if first is not None:
                self._position = min(self._position, first - 1)
        if self._position < before:
            self._start_replay(before)

    def _start_replay(self, upto: int) -> None:
        """While the log is replayed up to position ``upto``, a reader created by the replay (an inner query that
        a replayed event starts) starts where its stream stood at the replayed event, not at the stream's end:
        the environment's delivered watermarks follow the replay (see ``_EngineEnvironment``)."""
        marks = dict(self._replay_marks or {})
        for stream in self._streams:
            if stream in marks:
                continue
            seq = self._store.seq_at_position(stream, self._position)
            if seq is None:  # none retained up to there: before its first retained event, or its last delivered
                first = self._store.first_retained().get(stream)
                seq = first - 1 if first is not None else self._delivered.get(stream, -1)
            marks[stream] = min(seq, self._delivered.get(stream, -1))
        self._replay_marks = marks
        self._replay_upto = max(self._replay_upto, upto)

