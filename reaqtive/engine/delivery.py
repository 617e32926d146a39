"""Ingress and delivery: appends go to the durable log; process() reads it in runs and delivers them in order, moving
the clock, quarantining what cannot be delivered.

:class:`Delivery` is a part of the engine that owns the delivery: the log positions it moves
(:class:`~reaqtive.engine.positions.Positions`), the clock (whether it started, how event times become ticks), the
per-event loops and the slices that take turns with the queries behind the engine (their catch-up is
:class:`~reaqtive.engine.scheduling.Scheduling`'s). It calls out through a few callbacks: the engine's open check,
the checkpoint policy's checkpoint, the hand-on of outputs to observers, and the faults of queries that failed.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol

from reaqtive.engine.artifacts import ArtifactRecords
from reaqtive.engine.behind import Lag
from reaqtive.engine.checkpoint_policy import CheckpointPolicy
from reaqtive.engine.database import (
    DeadLetter,
    EngineStore,
    IngressEvent,
    IngressRun,
    check_dead_letter_query,
    require_aware,
    to_micros,
)
from reaqtive.engine.engine_errors import (
    SchemaValidationError,
    UnknownSchemaError,
)
from reaqtive.engine.event_times import EventTimeBounds
from reaqtive.engine.expressions import FunctionRegistry
from reaqtive.engine.handover import DELIVERY_BATCH, SLICE_EVENTS, EngineLock
from reaqtive.engine.idle import Subscriptions
from reaqtive.engine.ingress import IngressWriter, chunks
from reaqtive.engine.outputs import EGRESS_FLUSH_OUTPUTS, Outputs
from reaqtive.engine.positions import Positions, misplaced
from reaqtive.engine.quarantine import Quarantine
from reaqtive.engine.readers import Envelope, LogCursor, LogRun, StreamReader
from reaqtive.engine.signals import Signal
from reaqtive.scheduler import UnhandledExceptionArgs, VirtualTimeScheduler
from reaqtive.state import StoreError

__all__ = [
    "MIN_WAKE_SECONDS",
    "CatchUp",
    "Delivery",
    "HeldFeed",
    "StreamFeed",
    "hand_run",
    "root_scheduler",
    "ticks_of_micros",
]

MIN_WAKE_SECONDS: Final = 0.001
"""The shortest wait of an idle processing loop (see :meth:`Delivery.idle_seconds`)."""


def root_scheduler(tick: timedelta, lock: EngineLock,
                   task_failed: Callable[[UnhandledExceptionArgs], None]) -> VirtualTimeScheduler:
    """The root of the queries' schedulers, the engine's clock (each query runs on a child, see
    reaqtive.engine.scheduling); a task that raises goes to ``task_failed``."""
    scheduler = VirtualTimeScheduler(tick, name="engine")
    scheduler.unhandled_exception.add(task_failed)
    # A thread waiting for the engine asks long work to give way (reaqtive.engine.handover).
    scheduler.yield_source = lock.wants_turn
    return scheduler


def ticks_of_micros(tick: timedelta) -> Callable[[int], int] | None:
    """How an event's time (microseconds since the Unix epoch) becomes the clock's ticks: ``None`` when they are
    the same (the default tick); otherwise rounded up, as the scheduler rounds a datetime."""
    if tick == timedelta(microseconds=1):
        return None
    tick_micros = tick // timedelta(microseconds=1)
    return lambda micros: -(-micros // tick_micros)


class CatchUp(Protocol):
    """What delivery asks of the queries behind the engine (:class:`~reaqtive.engine.scheduling.Scheduling`,
    which runs this module's loop for them): whether there are any, and a slice of their catch-up."""

    @property
    def behind(self) -> Mapping[str, Lag]: ...

    def catch_up(self, budget: int | None) -> int: ...

    def note_clock_move(self, pos: int, clock: int) -> None: ...


def _sole_reader(subscriptions: tuple[Any, ...]) -> StreamReader[Any] | None:
    """The reader of a stream's only subscription, which the loop hands events directly while its demand is
    unbounded (its subscription on the subject's fast path: the subject has nothing to count)."""
    if len(subscriptions) != 1 or not subscriptions[0]._fast:
        return None
    reader = subscriptions[0]._downstream
    return reader if isinstance(reader, StreamReader) else None


class StreamFeed:
    """Where :func:`hand_run` hands the events of a stream in the engine's own delivery: the stream's subject, or,
    while it has one subscription on its fast path (demand unbounded), that subscription's reader directly, which
    also takes runs (:attr:`sole`)."""

    __slots__ = ("_known", "_subject", "hand", "sole")

    def __init__(self, subject: Any) -> None:
        self._subject = subject
        self._known: tuple[Any, ...] = ()
        self.sole: StreamReader[Any] | None = None
        self.hand: Callable[[Envelope], None] = subject.on_next

    def refresh(self) -> StreamReader[Any] | None:
        """Look again (the subscriber set is replaced, never changed in place; a demand may become bounded)."""
        known = self._subject._subscriptions
        if known is not self._known or (self.sole is not None and not known[0]._fast):
            self._known = known
            sole = self.sole = _sole_reader(known)
            self.hand = self._subject.on_next if sole is None else sole.on_next
        return self.sole


class HeldFeed:
    """Where :func:`hand_run` hands the events of a stream to a query behind the engine (its catch-up): the
    readers of the stream it holds off the stream; the only one, taking everything, also takes runs."""

    __slots__ = ("_lag", "_stream", "sole")

    def __init__(self, lag: Lag, stream: str) -> None:
        self._lag = lag
        self._stream = stream
        self.sole: StreamReader[Any] | None = None

    def refresh(self) -> StreamReader[Any] | None:
        """Look again: the readers that ended are forgotten."""
        held = self._lag.readers_of(self._stream)
        self.sole = None
        if len(held) == 1:
            subscription, reader = held[0]
            if subscription._fast:
                self.sole = reader
        return self.sole

    def hand(self, envelope: Envelope) -> None:
        """Each live reader held gets the event (one created meanwhile starts after it)."""
        held = self._lag.readers.get(self._stream)
        if not held:
            return
        ended = False
        for subscription, reader in tuple(held):
            if reader.is_disposed:
                ended = True
            else:
                subscription.push(envelope)
        if ended:
            self._lag.readers_of(self._stream)  # forgets the readers that ended


def hand_run(  # noqa: PLR0917 (the per-event loop, inlined; its state bound once per run)
    run: IngressRun, start: int, end: int, scheduler: VirtualTimeScheduler, cursor: LogCursor,
    feed: StreamFeed | HeldFeed, to_ticks: Callable[[int], int] | None, faults: list[tuple[str, Exception]],
    apply_faults: Callable[[], None], lock: EngineLock | None = None, lag: Lag | None = None,
    behind: Mapping[str, Lag] | None = None,
) -> int:
    """The per-event loop, one for the engine's delivery (``lock``: it gives way where a thread waits) and for the
    catch-up of a query behind the engine (``lag``, still in ``behind``: it stops once the query left it).

    For each event of ``run`` from ``start``: the clock of ``scheduler`` moves to its time (running the timers due
    before it first), ``cursor`` moves to it before it is handed (a reader created meanwhile starts after it), the
    feed hands it on, the work it triggered at its instant runs, a query that failed is stopped before the next
    event. While the feed has one reader taking everything above timeless stages, that reader takes the events up
    to the next timer in one call (:meth:`~reaqtive.engine.readers.StreamReader.read_run`, given a
    :class:`~reaqtive.engine.readers.LogRun`: the values, their ticks, the positions, the timeline and the cursor).
    Returns the index of the first event not handed: ``end``, or less at a yield point (the engine's delivery) or
    once the query left the catch-up.
    """
    values, pos0 = run.values, run.pos
    micros: list[int] | None = None  # the times as a list, made once an event goes down one by one
    timeline = scheduler.timeline
    queue = timeline.queue
    live = lag is None
    whole = None if to_ticks is not None else LogRun(values, run.ticks, pos0, end, timeline, cursor,
                                                      ordered=run.ordered)
    i = start
    while i < end:
        sole = feed.refresh()
        # (a query caught up in the middle of an instant finishes it first, event by event)
        if sole is not None and whole is not None and (live or queue.next_due > timeline.clock):
            # Timeless stages below the only reader take the events up to the next timer in one call.
            taken = sole.read_run(whole, i)
            if taken > i:
                i = taken
                if lag is not None:
                    lag.pos = max(lag.pos, pos0 + taken - 1)
                if faults:
                    apply_faults()
                if lag is not None and behind is not None and behind.get(lag.uri) is not lag:
                    break
                continue
        if micros is None:
            micros = run.micros
        ticks = to_ticks(micros[i]) if to_ticks is not None else micros[i]
        if ticks > timeline.clock:
            if queue.next_due <= ticks:
                if not scheduler.advance_to(ticks, yielding=live):
                    end = i  # a timer due before this event gave way
                    break
            else:
                timeline.clock = ticks
        elif not live and queue.next_due <= timeline.clock:
            scheduler.advance_to(timeline.clock)  # work left at its instant (it was paused in the middle of one)
        pos = pos0 + i
        cursor.pos = pos
        if lag is not None:
            lag.pos = max(lag.pos, pos)
        if live:  # the timers that ran before it may have subscribed or ended a reader, or bounded a demand
            feed.refresh()  # (a query's held readers are looked at as it hands the event)
        feed.hand(Envelope(pos, values[i]))
        # Work the delivery triggered for this instant (what gave way is finished before the next event).
        finished = queue.next_due > (ticks if live else timeline.clock) \
            or scheduler.advance_to(timeline.clock, yielding=live)
        if faults:
            apply_faults()
        i += 1
        if lock is not None:
            if (lock.waiting or not finished) and i < end:
                end = i
        elif lag is not None and behind is not None and behind.get(lag.uri) is not lag:
            break
    return min(i, end)


class Delivery:
    """The engine's delivery (see the module docstring)."""

    def __init__(
        self, *, store: EngineStore, lock: EngineLock, ingress: IngressWriter, positions: Positions,
        scheduling: CatchUp, scheduler: VirtualTimeScheduler, streams: Mapping[str, Any], records: ArtifactRecords,
        subscriptions: Subscriptions, quarantine: Quarantine, outputs: Outputs, functions: FunctionRegistry,
        event_times: EventTimeBounds, clock_mode: str, checkpoint_policy: CheckpointPolicy,
        ticks: Callable[[int], int] | None, faults: list[tuple[str, Exception]], apply_faults: Callable[[], None],
        check_open: Callable[[], None], maybe_checkpoint: Callable[[], bool], hand_outputs_on: Callable[[], None],
        appended: Signal, produced: Signal, log: logging.Logger,
    ) -> None:
        self._store = store
        self._lock = lock
        self._ingress = ingress
        self._positions = positions
        self._scheduling = scheduling
        self._scheduler = scheduler
        self._streams = streams
        self._records = records
        self._subscriptions = subscriptions
        self._quarantine = quarantine
        self._outputs = outputs
        self.functions = functions
        self._event_times = event_times
        self._clock_mode = clock_mode
        self._checkpoint_policy = checkpoint_policy
        self._ticks_of_micros = ticks
        self._faults_pending = faults  # read (its owner empties it in place): a fault stops a query between events
        self._apply_faults = apply_faults
        self._check_open = check_open
        self._maybe_checkpoint = maybe_checkpoint
        self._hand_outputs_on = hand_outputs_on
        self._appended = appended
        self._produced = produced
        self._log = log
        self._clock_started = False
        self.batch_delivery = True  # the fast path of _deliver_run (tests clear it to compare with the general one)
        self._live_turn = False  # whether live delivery takes the next slice while queries catch up

    @property
    def clock_started(self) -> bool:
        """Whether the clock was set (by an event, a subscription, advance_time, a start or a recovery)."""
        return self._clock_started

    def append_events(self, stream: str, events: Iterable[tuple[Any, datetime | None]]) -> tuple[int, int]:
        """:meth:`append_many`: the first sequence number given and how many events were appended."""
        # Without the engine's lock: reading the stream's record is one dict lookup (records are replaced, never
        # changed in place), and the commit ran outside the lock before too, so a delete between the check and the
        # commit was possible either way (its events are then dead letters). Waiting for the processing slice at
        # hand here paced a producer by the engine's slices.
        self._check_open()
        name = self._records.check_kind(stream, "stream").get("schema")
        schema = None
        if name is not None:  # a typed stream: its validator runs below, in this thread, outside the lock
            schema = self.functions.schema(name) if isinstance(name, str) else None
            if schema is None:
                raise UnknownSchemaError(
                    f"stream {stream!r} is validated by schema {name!r}, which is not registered in this process: "
                    f"appends to it are refused until the host registers it (engine.register_schema({name!r}, "
                    "validator))", stream=stream, schema=name)
        batch = self._ingress.prepare(stream, events, self._event_times, self._scheduler.now, schema)
        try:
            first = self._ingress.append(batch)
        except StoreError:
            with self._lock:
                self._check_open()  # closed while it committed: say so, not "cannot operate on a closed database"
            raise
        count = len(batch.payloads)
        if count:
            self._appended.fire()
            # A lower bound of the stream's head (a concurrent append may set it lower; delivery then reads
            # the store's): the delivery checks that no event is numbered past it.
            self._positions.note_appended(stream, first + count)
        if batch.reasons is not None:
            with self._lock:  # the delivery must know these numbers are taken, not missing
                self._quarantine.add_appended(stream, first, batch.reasons)
        return first, count

    def extend(self, stream: str, events: Iterable[tuple[Any, datetime | None]]) -> int:
        """Append ``(value, time)`` events from any iterable in chunks; returns how many were appended."""
        appended = 0
        for chunk in chunks(events):
            try:
                appended += self.append_events(stream, chunk)[1]
            except SchemaValidationError as error:
                if not appended:
                    raise
                raise error.after(appended) from error.__cause__
        return appended

    def dead_letters(
        self, stream: str | None = None, *, subscription: str | None = None, after: int | None = None,
        limit: int | None = None,
    ) -> list[DeadLetter]:
        """The dead letters not acknowledged yet (see :meth:`reaqtive.engine.Engine.dead_letters`)."""
        from reaqtive.state import DamagedRowError

        check_dead_letter_query(stream, subscription, after, limit)
        with self._lock:
            self._check_open()
            self._quarantine.flush()
            try:
                acked = self._store.acked_dead_letters()
            except DamagedRowError:
                acked = 0  # a damaged acknowledgement hides nothing (ack_dead_letters replaces it)
            start = None if after is None and not acked else max(after or 0, acked)
            return self._store.dead_letters(stream, subscription=subscription, after=start, limit=limit)

    def ack_dead_letters(self, upto_id: int) -> bool:
        """Acknowledge the dead letters up to ``upto_id`` (see :meth:`reaqtive.engine.Engine.ack_dead_letters`)."""
        from reaqtive.engine.engine_errors import AckError
        from reaqtive.state import DamagedRowError

        if type(upto_id) is not int:
            raise TypeError(f"ack_dead_letters(): upto_id must be a dead letter's number (int), got {upto_id!r}")
        with self._lock:
            self._check_open()
            if upto_id < 0:
                raise AckError(f"ack_dead_letters({upto_id}): dead letters are numbered from 1 (0: none)")
            self._quarantine.flush()
            try:
                acked = self._store.acked_dead_letters()
            except DamagedRowError:
                acked = -1  # damaged: any acknowledgement replaces it
            if upto_id <= acked:
                return False
            last = self._store.last_dead_letter_id()
            if upto_id > last:
                raise AckError(f"ack_dead_letters({upto_id}): beyond the last dead letter #{last}; nothing was "
                               "acknowledged")
            return self._store.ack_dead_letters(upto_id)

    def process(self, max_events: int | None = None) -> int:
        """Deliver pending events (all, or up to ``max_events``) in append order, slice by slice; returns how many."""
        self._ingress.flush()  # events appended under group commit are delivered once durable, not before
        delivered = 0
        handed = False  # outputs were handed on after a slice of this call (once per slice, and at least once)
        lock = self._lock
        while True:
            with lock:
                self._check_open()
                taken = None if max_events == 0 else self._process_slice(
                    None if max_events is None else max_events - delivered)
            if taken is not None or not handed:
                self._hand_outputs_on()
                handed = True
            if taken is None:
                return delivered
            delivered += taken
            if max_events is not None and delivered >= max_events:
                return delivered

    def _process_slice(self, budget: int | None) -> int | None:
        """Under the engine's lock: deliver one slice of events (at most ``budget``); ``None``: nothing was left
        (the wall clock advanced and the periodic checkpoint had its chance)."""
        if self._faults_pending:
            self._apply_faults()  # an observer's courier gave up
        limit = DELIVERY_BATCH if budget is None else min(DELIVERY_BATCH, budget)
        runs = None
        if self._scheduling.behind:
            # Queries behind the engine (a resumed query, one behind after a recovery, a backfill) catch up in
            # slices that take turns with live delivery, when both have work: a long catch-up holds up neither the
            # queries in step with the engine nor a checkpoint (it waits for one slice).
            self._live_turn = not self._live_turn
            if self._live_turn:
                runs = self._read_runs(limit)
            if not runs:
                caught = self._scheduling.catch_up(limit)
                if caught:
                    if len(self._outputs.buffer) >= EGRESS_FLUSH_OUTPUTS:
                        self._outputs.flush()  # bounded memory during a long catch-up (a backfill) too
                    if self._outputs.buffer:
                        self._produced.fire()
                    return caught
        if runs is None:
            runs = self._read_runs(limit)
        if not runs:
            self._advance_wall_clock()
            self._maybe_checkpoint()
            if self._outputs.buffer:
                self._produced.fire()  # timers the wall clock fired
            return None
        delivered = self._deliver_batch(runs, budget)
        self._quarantine.flush()
        if len(self._outputs.buffer) >= EGRESS_FLUSH_OUTPUTS:
            self._outputs.flush()  # bounded memory between checkpoints (the sink keeps the first copy)
        if self._outputs.buffer:
            self._produced.fire()  # a consumer's outputs() flushes the buffer to the sink
        return delivered

    def _deliver_batch(self, runs: list[IngressRun], budget: int | None) -> int:
        """Deliver the runs read (up to ``budget`` events); returns how many were delivered. At each yield point
        where a thread waits for the engine it hands the lock over (reaqtive.engine.handover) and goes on with the
        runs already read, unless the log's position moved meanwhile (another delivery, a resumed query's
        rewind): then the caller reads again."""
        lock = self._lock
        pending = deque(runs)
        delivered = 0
        wall = datetime.now(UTC)  # the wall clock of this batch (the engine's own clock is read per event)
        while pending and (budget is None or delivered < budget):
            run = pending[0]
            taken = self._deliver_run(run, wall, None if budget is None else budget - delivered)
            delivered += taken
            if taken >= run.count:
                pending.popleft()
            else:
                rest = run.after(taken)
                if rest is None:
                    break  # a damaged run is read again whole
                pending[0] = rest
            if lock.waiting and pending:
                position = self._positions.cursor.pos
                if lock.hand_over():
                    self._check_open()
                    if self._positions.cursor.pos != position:
                        break  # another thread delivered meanwhile: read the log again
                    wall = datetime.now(UTC)
        return delivered

    def idle_seconds(self) -> float | None:
        """How long a processing loop may wait for appends before it processes anyway (``None``: until one)."""
        waits: list[float] = []
        until_checkpoint = self._checkpoint_policy.seconds_left()
        if until_checkpoint is not None:
            waits.append(until_checkpoint)
        if self._clock_mode == "wall":
            with self._lock:
                due = self._scheduler.next_due
                at = None if due is None else self._scheduler.to_datetime(due)
            if at is not None:
                waits.append((at - datetime.now(UTC)).total_seconds())
        # At least a millisecond: a task due but held back (a paused query) must not make the loop spin.
        return max(min(waits), MIN_WAKE_SECONDS) if waits else None

    def _read_runs(self, limit: int) -> list[IngressRun]:
        return self._store.read_ingress_runs(self._positions.cursor.pos, limit)

    def _finish_instant(self) -> bool:
        """Run the work left at the clock's instant by a task that gave way at a yield point (see
        reaqtive.engine.handover): the next event must come after it. ``False``: it gave way again."""
        scheduler = self._scheduler
        timeline = scheduler.timeline
        if timeline.queue.next_due <= timeline.clock:
            return scheduler.advance_to(timeline.clock, yielding=True)
        return True

    def _deliver_run(self, run: IngressRun, wall: datetime, budget: int | None) -> int:
        """Deliver a run of logged events of one stream (up to ``budget``); returns how many were taken (fewer at
        a yield point)."""
        if not self._finish_instant():
            return 0
        if self._subscriptions.waiting_on(run.stream):  # idle ones bind before its first event (engine/idle.py)
            self._subscriptions.bind_waiting_on(run.stream)
        count: int = run.count if budget is None else min(run.count, budget)
        if not self._plain(run, wall, count):
            return self._deliver_one_by_one(run, wall, count)
        taken = 0
        lock = self._lock
        while taken < count:
            if taken and lock.waiting:
                break  # a yield point, after a slice at least: the rest goes on after the hand-over
            upto = min(count, taken + SLICE_EVENTS)
            left = self._checkpoint_policy.events_left()
            if left is not None:  # the checkpoint positions of event-at-a-time delivery
                upto = min(upto, taken + left)
            reached = self._deliver_plain(run, taken, upto)
            if reached == taken:
                break  # a task due before the next event gave way: the hand-over comes first
            self._checkpoint_policy.delivered(reached - taken)
            taken = reached
            self._maybe_checkpoint()
        return taken

    def _plain(self, run: IngressRun, wall: datetime, count: int) -> bool:
        """Whether a run can take the fast path: sound, the next events of a stream the engine has, none of them
        among the dead letters, none dated out of bounds, delivered for the first time, on the event clock."""
        stream, seq = run.stream, run.seq
        if not self.batch_delivery or run.damage is not None or self._clock_mode != "event" \
                or stream not in self._streams:
            return False
        positions = self._positions
        if seq != positions.expected.get(stream, 0) or positions.was_delivered(stream, seq):
            return False
        last = seq + count - 1
        if not positions.appended(stream, last):
            return False
        if self._quarantine and self._quarantine.any_in(stream, seq, last):
            return False
        bounds = self._event_times
        if bounds.allowed_lateness is not None:
            return False
        if bounds.max_ahead is None:
            return True
        latest = run.ticks[count - 1] if run.ordered else max(run.ticks[:count])
        return latest <= to_micros(wall)

    def _deliver_one_by_one(self, run: IngressRun, wall: datetime, count: int) -> int:
        lock = self._lock
        taken = 0
        for event in run.events()[:count]:
            if (taken and lock.waiting) or not self._deliver_checked(event, wall):
                return taken  # a yield point (or a task due before the event gave way: the event comes after it)
            taken += 1
            self._positions.cursor.pos = max(self._positions.cursor.pos, event.pos)
            self._checkpoint_policy.delivered(1)
            if self._faults_pending:
                self._apply_faults()
            self._maybe_checkpoint()
        return taken

    def _deliver_plain(self, run: IngressRun, start: int, end: int) -> int:
        """Deliver events ``start`` to ``end - 1`` of a run that needs no check (see :meth:`_plain`) through the
        per-event loop (:func:`hand_run`); returns the index of the first event not delivered. The stream's
        delivered marks move once, after the loop (the cursor moves per event)."""
        stream, seq0, pos0 = run.stream, run.seq, run.pos
        self._clock_started = True
        end = hand_run(run, start, end, self._scheduler, self._positions.cursor, StreamFeed(self._streams[stream]),
                       self._ticks_of_micros, self._faults_pending, self._apply_faults, lock=self._lock)
        self._positions.expected[stream] = seq0 + end
        if end > start:
            self._positions.note_delivered(stream, seq0 + end - 1, pos0 + end - 1)
        return end

    def advance_time(self, to: datetime) -> None:
        """Move the clock forward to ``to`` (aware), firing the timers due until then."""
        require_aware(to, "advance_time(to)")
        with self._lock:
            self._check_open()
            self._clock_started = True
            if to > self._scheduler.now:
                self._scheduler.advance_to(to)
                self._moved_without_event()
            self._apply_faults()
            if self._outputs.buffer:
                self._produced.fire()

    def _advance_before(self, when: datetime) -> bool:
        """Run the timers due before an event of time ``when`` is delivered (as ``_deliver`` does first), giving
        way at a yield point (``False``)."""
        scheduler = self._scheduler
        target = when if self._clock_mode == "event" else max(when, datetime.now(UTC))
        if target > scheduler.now:
            return scheduler.advance_to(target, yielding=True)
        return True

    def start_clock(self, at: datetime) -> None:
        """Set the clock of a store that never had one (it is at the Unix epoch until then)."""
        if at > self._scheduler.now:
            self._scheduler.advance_to(at)
            self._moved_without_event()
        self._clock_started = True

    def _moved_without_event(self) -> None:
        """A query behind the engine replays this move of the clock at the same place in the log (its catch-up
        otherwise moves its clock only to the events' times)."""
        if self._scheduling.behind:
            self._scheduling.note_clock_move(self._positions.cursor.pos, to_micros(self._scheduler.now))

    def _deliver_checked(self, event: IngressEvent, wall: datetime) -> bool:
        """Deliver one logged event, or quarantine it: damaged, misplaced, or dated out of bounds (decided once:
        a replay finds it among the dead letters). The timers due before it may give way (see
        reaqtive.engine.handover): then nothing is delivered and this returns ``False`` (asked again later, the
        checks come to the same)."""
        key = (event.stream, event.seq)
        stream, seq = key
        expected = self._positions.expected.get(stream, 0)
        if seq >= expected:
            self._positions.expected[stream] = seq + 1
        if self._quarantine.holds(stream, seq):
            return True
        reason = event.damage or misplaced(event, self._streams, self._positions)
        if reason is None and seq <= self._positions.delivered.get(stream, -1):
            # The engine's position never moves back, so an event it delivered cannot come again: this row claims
            # the number of another (it was altered). Its number is that event's, so it is no dead letter of its own.
            self._log.error("the log row at position %d claims %s#%d, delivered already: ignored (the row was "
                            "altered)", event.pos, stream, seq,
                            extra={"reaqtive_event": "ingress_duplicate", "stream": stream, "seq": seq,
                                   "pos": event.pos})
            return True
        if reason is None and seq > expected:
            self._quarantine.note_missing(stream, expected, seq)
        if reason is None:
            reason = self._out_of_bounds(event.time, wall)
        if reason is not None:
            self._quarantine.take_out(event, reason)
            return True
        if not self._advance_before(event.time):
            return False
        self._deliver(event.stream, event.seq, event.pos, event.value, event.time)
        return True

    def _out_of_bounds(self, time: datetime, wall: datetime) -> str | None:
        bounds = self._event_times
        if bounds.max_ahead is not None and time > wall:  # the common case (an event not ahead) stops here
            reason = bounds.ahead(time, max(wall, self._scheduler.now))
            if reason is not None:
                return reason
        if bounds.allowed_lateness is not None and self._clock_mode == "event" and self._clock_started:
            return bounds.late(time, self._scheduler.now)
        return None

    def _deliver(self, stream: str, seq: int, pos: int, value: Any, when: datetime) -> None:
        scheduler = self._scheduler
        self._clock_started = True
        target = when if self._clock_mode == "event" else max(when, datetime.now(UTC))
        if target > scheduler.now:
            scheduler.advance_to(target)
        # Before the delivery: a reader created while this event is delivered (an inner query it starts) starts
        # after it. A store written before log positions may hand an event again (seq at or below the stream's
        # delivered one): its readers skip it by their watermarks.
        self._positions.note_delivered(stream, seq, pos)
        subject = self._streams.get(stream)
        if subject is not None:
            subject.on_next(Envelope(pos, value))
        scheduler.advance_to(scheduler.now)  # work the delivery triggered for this instant

    def follow_wall_clock(self) -> None:
        """With the wall clock, move the clock to now (running the timers due until then) before something outside
        the processing loop counts a delay from it: an idle engine's clock stands where it last moved, and a
        relative timer counted from there would fire early."""
        if self._clock_mode != "wall":
            return
        wall = datetime.now(UTC)
        if wall > self._scheduler.now:
            self._scheduler.advance_to(wall)
            self._apply_faults()

    def _advance_wall_clock(self) -> None:
        if self._clock_mode == "wall" and self._finish_instant():
            wall = datetime.now(UTC)
            if wall > self._scheduler.now:
                self._scheduler.advance_to(wall, yielding=True)  # the rest after the hand-over, if it gave way
