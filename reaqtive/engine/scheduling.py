"""The engine's scheduler hierarchy: a logical scheduler per subscription, to pause, resume and prioritize one query,
and the catch-up of a query behind the engine.

The engine's root scheduler (one clock: the event clock or the wall clock) has a child per running subscription,
named by its URI; the query's operators and its inner subscriptions run on that child. So:

* a checkpoint quiesces everything at once (it takes the engine's lock at a yield point of the delivery loop, see
  :mod:`reaqtive.engine.handover`, where no task of any query runs);
* :meth:`Scheduling.pause` stops one query where it stands in the log: its scheduler gets a timeline of its own
  (its clock stops; its timers wait) and its stream readers are detached from their streams, while the durable log
  keeps what they have not read (see :mod:`reaqtive.engine.behind`). After :meth:`Scheduling.resume` the processing
  loop **catches it up**: the log after its position, in order, with its own clock following the events and its
  timers running in between, exactly as if it had never been paused (with the event clock), then it rejoins;
* a query's priority orders its work among the work of other queries due at the same instant (lower first);
* a task of a query that raises stops that query alone (see ``Running.task_failed``).

A pause lasts while the engine runs: a store reopened runs every query, and one that was paused catches up from
where it stood (the checkpoint keeps its position and clock). A priority is stored with the subscription.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from reaqtive.engine.artifacts import ArtifactRecords
from reaqtive.engine.behind import Lag
from reaqtive.engine.database import EngineStore, IngressRun
from reaqtive.engine.delivery import HeldFeed, hand_run
from reaqtive.engine.engine_errors import ArtifactNotFoundError, MalformedRecordError
from reaqtive.engine.handover import DELIVERY_BATCH, EngineLock
from reaqtive.engine.idle import Subscriptions
from reaqtive.engine.positions import Positions, misplaced
from reaqtive.engine.quarantine import Quarantine
from reaqtive.engine.readers import Envelope, StreamReader
from reaqtive.engine.signals import Signal
from reaqtive.engine.store_keys import ARTIFACTS, to_bytes
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


class Scheduling:
    """The pauses of queries and the queries behind the engine (see the module docstring): a part that owns them
    (``behind``: each query behind the engine and where it stands; the paused ones), hands the log to those behind
    (:meth:`catch_up`) and rejoins them with the engine. It reads the engine's positions, streams and dead letters;
    the engine's root scheduler is the timeline a query rejoins."""

    def __init__(  # noqa: PLR0917 (what it reads of the engine, named)
        self, store: EngineStore, lock: EngineLock, positions: Positions, streams: Mapping[str, Any],
        quarantine: Quarantine, records: ArtifactRecords, subscriptions: Subscriptions, scheduler: VirtualTimeScheduler,
        *, ticks_of_micros: Callable[[int], int] | None, faults: list[tuple[str, Exception]],
        apply_faults: Callable[[], None], check_open: Callable[[], None],
        commit_changes: Callable[[Iterable[tuple[str, str, bytes]]], None], appended: Signal, log: logging.Logger,
    ) -> None:
        self._store = store
        self._lock = lock
        self._positions = positions
        self._streams = streams
        self._quarantine = quarantine
        self._records = records
        self._subscriptions = subscriptions
        self._scheduler = scheduler
        self._ticks_of_micros = ticks_of_micros
        self._faults_pending = faults  # read (its owner empties it in place): a fault stops a query between events
        self._apply_faults = apply_faults
        self._check_open = check_open
        self._commit_changes = commit_changes
        self._appended = appended
        self._log = log
        self._behind: dict[str, Lag] = {}  # queries behind the engine: paused or catching up (reaqtive.engine.behind)
        self._paused: set[str] = set()  # subscriptions paused by pause(uri)
        # The engine's clock moves that came without an event, while some query is behind: (the engine's log
        # position when it moved, the new clock in microseconds). A catch-up replays each at the same place in the
        # log; a checkpoint saves them beside the positions of the queries behind (changed in place only).
        self._clock_moves: list[tuple[int, int]] = []

    # -- what the others read, and the few changes they ask for -------------------------------------------------

    @property
    def behind(self) -> Mapping[str, Lag]:
        """The queries behind the engine (paused or catching up), each with where it stands."""
        return self._behind

    def is_held(self, uri: str) -> bool:
        """Whether subscription ``uri`` is paused (no lock, no check: for the engine's other parts)."""
        return uri in self._paused

    def note_clock_move(self, pos: int, clock: int) -> None:
        """The engine's clock moved to ``clock`` (microseconds) without an event, the log delivered up to ``pos``: a
        query behind the engine replays the move there (nothing is kept while none is behind)."""
        if not self._behind:
            return
        moves = self._clock_moves
        if moves and moves[-1][0] == pos:
            moves[-1] = (pos, max(clock, moves[-1][1]))
        else:
            moves.append((pos, clock))

    @property
    def clock_moves(self) -> list[tuple[int, int]]:
        """The clock moves a query behind the engine still has to replay (see :meth:`note_clock_move`)."""
        return self._clock_moves

    def restore_clock_moves(self, moves: Iterable[tuple[int, int]]) -> None:
        """The clock moves the checkpoint a recovery starts from saved (before the queries behind it bind)."""
        self._clock_moves[:] = moves

    def hold(self, lag: Lag) -> None:
        """A query bound behind the engine (recovered or backfilled there): it catches up from ``lag``."""
        self._behind[lag.uri] = lag

    def drop_behind(self, uri: str) -> None:
        """Query ``uri`` is no longer behind the engine (it did not start, or it was replaced)."""
        self._behind.pop(uri, None)

    def forget(self, uri: str) -> None:
        """Query ``uri`` stopped or was deleted: neither paused nor behind."""
        self._paused.discard(uri)
        self._behind.pop(uri, None)

    # -- pauses and priorities ------------------------------------------------------------------------------------

    def pause(self, uri: str) -> None:
        """:meth:`Engine.pause <reaqtive.Engine.pause>`: under the engine's lock."""
        with self._lock:
            self._check_open()
            self._running(uri)
            if uri in self._paused:
                return
            self._paused.add(uri)
            if uri not in self._behind:
                self.fall_behind(uri)
            self._log.info("subscription %r paused", uri, extra={"reaqtive_event": "paused", "subscription": uri})

    def resume(self, uri: str) -> None:
        """:meth:`Engine.resume <reaqtive.Engine.resume>`: under the engine's lock."""
        with self._lock:
            self._check_open()
            self._running(uri)
            if uri not in self._paused:
                return
            self._paused.discard(uri)
            self._log.info("subscription %r resumed", uri, extra={"reaqtive_event": "resumed", "subscription": uri})
        self._appended.fire()  # a processing loop looks again: there is a catch-up to run

    def is_paused(self, uri: str) -> bool:
        """Whether subscription ``uri`` is paused (:class:`ArtifactNotFoundError` if there is none)."""
        with self._lock:
            self._records.check_kind(uri, "subscription")
            return uri in self._paused

    def paused(self) -> list[str]:
        """The paused subscriptions, sorted."""
        with self._lock:
            return sorted(self._paused)

    def is_behind(self, uri: str) -> bool:
        """:meth:`Engine.is_behind <reaqtive.Engine.is_behind>`."""
        with self._lock:
            self._records.check_kind(uri, "subscription")
            return uri in self._behind

    def priority(self, uri: str) -> int:
        """The priority of subscription ``uri`` (see :meth:`set_priority`)."""
        with self._lock:
            return record_priority(uri, self._records.check_kind(uri, "subscription"))

    def set_priority(self, uri: str, priority: int) -> None:
        """:meth:`Engine.set_priority <reaqtive.Engine.set_priority>`: under the engine's lock."""
        check_priority(priority)
        with self._lock:
            self._check_open()
            record = self._records.check_kind(uri, "subscription")
            if record_priority(uri, record) == priority:
                return
            changed = {key: value for key, value in record.items() if key != "priority"}
            if priority:
                changed["priority"] = priority
            self._commit_changes([(ARTIFACTS, uri, to_bytes(changed))])
            self._records[uri] = changed
            hosted = self._subscriptions.bound(uri)  # an idle one binds with its record's priority
            if hosted is not None:
                scheduler = hosted.scheduler
                assert isinstance(scheduler, VirtualTimeScheduler)
                scheduler.priority = priority

    # -- falling behind and catching up ----------------------------------------------------------------------

    def fall_behind(self, uri: str, pos: int | None = None) -> Lag:
        """Take running subscription ``uri`` out of step with the engine at log position ``pos`` (default: the
        engine's): its scheduler gets a timeline of its own, its readers leave their streams. A reader that
        lagged (its buffered events go with its detachment) is handed the events after its watermark again."""
        scheduler = self._running(uri)
        scheduler.detach()
        lag = Lag(uri, scheduler, self._positions.cursor.pos if pos is None else pos)
        for subscription, reader in self._readers_of(uri):
            lag.hold(subscription, reader)
        lag.rewind_for_lagging(self._positions.delivered_at)
        self._behind[uri] = lag
        return lag

    def catch_up(self, budget: int | None) -> int:
        """Hand the log to every query behind the engine that is not paused, each on its own timeline, until it
        reaches the engine's position and rejoins (or ``budget`` events were handed in all). Returns how many
        events it handed."""
        handed = 0
        for uri in [uri for uri in self._behind if uri not in self._paused]:
            lag = self._behind.get(uri)
            if lag is not None:
                handed += self._catch_up_query(lag, None if budget is None else budget - handed)
            if budget is not None and handed >= budget:
                break
        self.drop_clock_moves()
        return handed

    def _catch_up_query(self, lag: Lag, budget: int | None) -> int:
        handed = 0
        lock = self._lock
        uri = lag.uri
        while self._behind.get(uri) is lag and uri not in self._paused:
            target = self._positions.cursor.pos
            if lag.cursor.pos >= target:
                self._rejoin(lag)
                break
            if budget is not None and handed >= budget:
                break
            target = self._replay_clock_moves(lag, target)
            if lag.cursor.pos >= target:
                continue
            limit = min(DELIVERY_BATCH, target - lag.cursor.pos)
            runs = self._store.read_ingress_runs(lag.cursor.pos, limit)
            if not runs:
                lag.cursor.pos = target  # nothing of the log is left up to the engine's position
                continue
            for run in runs:
                handed += self._catch_up_run(lag, run, target)
                if self._behind.get(uri) is not lag or lag.cursor.pos >= target:
                    break
                if lock.waiting and lock.hand_over():  # a yield point between runs
                    self._check_open()
                    break
        return handed

    def _replay_clock_moves(self, lag: Lag, target: int) -> int:
        """Move the query's clock as the engine's moved without an event at the log position its catch-up reached
        (running its timers due until then, as the live engine did); returns how far it may go before the next
        such move (``target`` when none is left before it)."""
        clock = None
        limit = target
        for pos, moved_to in self._clock_moves:
            if pos > lag.cursor.pos:
                limit = min(target, pos)
                break
            clock = moved_to if self._ticks_of_micros is None else self._ticks_of_micros(moved_to)
        if clock is not None and clock > lag.scheduler.clock:
            lag.scheduler.advance_to(clock)
            if self._faults_pending:
                self._apply_faults()
        return limit

    def drop_clock_moves(self) -> None:
        """Forget the clock moves no query behind the engine still has to replay (below the lowest catch-up)."""
        if not self._behind:
            self._clock_moves.clear()
            return
        lowest = min(lag.cursor.pos for lag in self._behind.values())
        moves = self._clock_moves
        keep = 0
        while keep < len(moves) and moves[keep][0] < lowest:
            keep += 1
        if keep:
            del moves[:keep]

    def _catch_up_run(self, lag: Lag, run: IngressRun, target: int) -> int:
        """Hand the events of ``run`` up to log position ``target`` to the query's readers of its stream, each at
        its time on the query's own clock, exactly as the engine's loop does (the timers due before an event run
        first, the work it triggered at its instant after it). What the engine would not deliver is skipped as it
        was: quarantined events; and what the log shows now that it did not then (damage, a row moved or deleted
        while the store was closed) is quarantined or noted missing as the engine's loop does. Returns how many
        events it passed."""
        cursor = lag.cursor
        first = max(0, cursor.pos + 1 - run.pos)
        end = min(run.count, target - run.pos + 1)
        if first >= end:
            return 0
        stream, seq0 = run.stream, run.seq
        expected = lag.expected.get(stream)
        if expected is None:
            before = self._store.seq_at_position(stream, run.pos + first - 1)
            expected = seq0 + first if before is None else before + 1
        if run.damage is not None or stream not in self._streams or seq0 + end > self._positions.heads.get(stream, 0):
            return self._catch_up_checked(lag, run, first, end, expected)
        quarantine = self._quarantine
        if expected == seq0 + first and not (quarantine and quarantine.any_in(stream, seq0 + first, seq0 + end - 1)):
            return self._catch_up_clean(lag, run, first, end)
        for i in range(first, end):
            seq = seq0 + i
            if seq < expected:  # a row that claims an event handed already (it was altered): ignored, as the engine did
                cursor.pos = run.pos + i
                continue
            if seq > expected:
                self._quarantine.note_missing(stream, expected, seq)
            expected = seq + 1
            if quarantine and quarantine.holds(stream, seq):  # quarantined when the engine first passed it
                cursor.pos = run.pos + i
                continue
            self._catch_up_event(lag, stream, run.pos + i, run.micros[i], run.values[i])
            if self._behind.get(lag.uri) is not lag:
                return i + 1 - first
        lag.expected[stream] = expected
        return end - first

    def _catch_up_clean(self, lag: Lag, run: IngressRun, first: int, end: int) -> int:
        """Events ``first`` to ``end - 1`` of a run with nothing to skip (the numbers the catch-up expects, none
        quarantined): handed through the engine's per-event loop (:func:`~reaqtive.engine.delivery.hand_run`) on
        the query's own timeline, to the readers it holds, a stream's only reader above timeless stages taking
        the events up to the next timer of the query's clock in one call."""
        reached = hand_run(run, first, end, lag.scheduler, lag.cursor, HeldFeed(lag, run.stream),
                           self._ticks_of_micros, self._faults_pending, self._apply_faults, lag=lag,
                           behind=self._behind)
        if reached == end:
            lag.expected[run.stream] = run.seq + end
        return reached - first

    def _catch_up_checked(self, lag: Lag, run: IngressRun, first: int, end: int, expected: int) -> int:
        """The events of a run the log shows damaged or misplaced now, one by one (see _catch_up_run)."""
        for event in run.events()[first:end]:
            if event.seq < expected and event.damage is None:
                lag.cursor.pos = event.pos
                continue
            dead = self._quarantine.holds(event.stream, event.seq)
            reason = None if dead else event.damage or misplaced(event, self._streams, self._positions)
            if reason is None and not dead:
                if event.seq > expected:
                    self._quarantine.note_missing(event.stream, expected, event.seq)
                expected = max(expected, event.seq + 1)
                assert event.micros is not None  # a sound event has its time
                self._catch_up_event(lag, event.stream, event.pos, event.micros, event.value)
                if self._behind.get(lag.uri) is not lag:
                    break
                continue
            if reason is not None:
                self._quarantine.take_out(event, reason)
            lag.cursor.pos = event.pos
        if run.damage is None and run.stream in self._streams:
            lag.expected[run.stream] = expected
        self._quarantine.flush()
        return end - first

    def _catch_up_event(self, lag: Lag, stream: str, pos: int, micros: int, value: object) -> None:
        """Hand one event to the query behind the engine: its clock moves to the event's time (its timers due
        before it run first), the readers of the stream get it, the work it triggered at its instant runs."""
        scheduler = lag.scheduler
        timeline = scheduler.timeline
        queue = timeline.queue
        ticks = micros if self._ticks_of_micros is None else self._ticks_of_micros(micros)
        if ticks > timeline.clock:
            if queue.next_due <= ticks:
                scheduler.advance_to(ticks)  # its timers due before the event
            else:
                timeline.clock = ticks
        elif queue.next_due <= timeline.clock:
            scheduler.advance_to(timeline.clock)  # work left at its instant (it was paused in the middle of one)
        lag.cursor.pos = pos
        lag.pos = max(lag.pos, pos)
        held = lag.readers.get(stream)
        if held:
            envelope = Envelope(pos, value)
            ended = False
            for subscription, reader in tuple(held):  # a reader created meanwhile starts after this event
                if reader.is_disposed:
                    ended = True
                else:
                    subscription.push(envelope)
            if ended:
                lag.readers_of(stream)  # forgets the readers that ended
            if queue.next_due <= timeline.clock:
                scheduler.advance_to(timeline.clock)  # the work the event triggered at its instant
        if self._faults_pending:
            self._apply_faults()

    def _rejoin(self, lag: Lag) -> None:
        """The query caught up with the engine's position: its clock goes to the engine's (running its timers due
        until then), its timeline joins the engine's, its readers their streams."""
        scheduler = lag.scheduler
        scheduler.advance_to(max(self._scheduler.clock, scheduler.clock))
        if self._faults_pending:
            self._apply_faults()
            if self._behind.get(lag.uri) is not lag:
                return
        scheduler.attach()
        for subscription, reader in lag.all_readers():
            reader.rejoin()
            subscription.reattach()
        del self._behind[lag.uri]

    # -- helpers ---------------------------------------------------------------------------------------------------

    def _running(self, uri: str) -> VirtualTimeScheduler:
        """The scheduler of running subscription ``uri``."""
        self._records.check_kind(uri, "subscription")
        hosted = self._subscriptions.get(uri)
        if hosted is None:
            raise ArtifactNotFoundError(f"subscription {uri!r} is not running (it failed, see engine.faults)")
        scheduler = hosted.scheduler
        assert isinstance(scheduler, VirtualTimeScheduler)  # the engine binds every query on a child of its root
        return scheduler

    def _readers_of(self, uri: str) -> list[tuple[Any, StreamReader[Any]]]:
        """The live stream readers of subscription ``uri`` and of its inner subscriptions, with their subscriptions
        to their streams, in the order each stream hands them an event."""
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
