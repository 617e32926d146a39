"""Keyed execution of chains with a time-based step (``g.window(duration).flat_map(...)``, ``g.buffer(duration)``):
the keyed stage of :mod:`reaqtive.operators.keyed_groups` with one shared timer queue.

On the general path each group of ``group_by(k).flat_map(lambda g: g.window(d).flat_map(avg))`` has a window
stage of its own, with a timer of its own that fires every ``d`` for as long as the group lives, aligned on the
group's creation (its first element, Rx's alignment). Keyed, the chain's time-based step (a
:class:`TimedStep`) keeps, in the key's field, the time its key next needs the clock (a window's end) and a
sequence number; the stage keeps the keys in one queue in that order (see :class:`KeyedGroupsTimed`) and **one**
scheduled task, at the earliest time. When it runs it ticks every key due then, in the order they were queued
(the order the general path's per-group timers were scheduled in), feeds what each tick puts out through the
steps after it, and queues the key again at its next time. A tick that runs late (after a pause, or a restart
after downtime) catches up with every period the key missed, as a window stage's timer does. On the
virtual-time scheduler the task moves itself to the next time (``run_again_at_us``) instead of scheduling a new
one per window end. An idle key whose empty window puts nothing out of the chain for any key (learnt once, see
:meth:`KeyedGroupsTimed._quiet_ticks`) only has its time and number moved (:meth:`TimedStep.quiet_tick`): the
records and outputs are those of the full tick.

**Time** is integer microseconds from the Unix epoch inside (exact, cheap to compare); a time past
``datetime.max`` never comes. An element is never dated: only a new key reads the clock (its windows open when
its group does), so a known key's element costs what it costs on the untimed stage.

**State.** As :class:`~reaqtive.operators.keyed_groups.KeyedGroups` (the records hold the times and sequence
numbers); the queue is not saved: it is rebuilt from the records (sorted by time and number, so that keys due at
one instant tick in the same order after a restart). Version 2 also saves the outstanding timer, its due, when
it was armed and its number in that tick: a recovered stage arms it there, in its place in line among the other
timers of its instant (see ``docs/scheduler.md``); a version 1 state arms it at the earliest time, at the restart's
tick.
A time outside the checkpoint's clock bounds fails the load naming the key. Persisted as
``reaqtive:group_by+keyed+timed``: a store holding the general path's state (or the untimed keyed stage's) never
loads into it.

What keeps the general path: two timed steps in one chain, a timed step inside a window's inner query, and
``group_by(..., expire_after=)`` with a timed chain (see ``docs/higher-order.md``).
"""

from __future__ import annotations

import heapq
from collections import deque
from datetime import datetime, timedelta
from typing import Any, Final

from reaqtive.core.context import OperatorContext
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.scheduler_interface import Scheduler, YieldableSchedulerTask, YieldToken
from reaqtive.core.streams import LONG_MAX, Subscriber
from reaqtive.operators.keyed_groups import KeyedBinding, KeyedGroups
from reaqtive.operators.keyed_steps import SKIP, KeyedStep, Several, stopping_error
from reaqtive.scheduler import ACTION_PRIORITY
from reaqtive.scheduler.clock import EPOCH
from reaqtive.state.fields import RecordReader, time_bounds
from reaqtive.state.keyed import KeyedPage

__all__ = ["TICK_SLICE", "KeyedGroupsTimed", "TimedStep", "at", "general_reason", "micros"]

US: Final = timedelta(microseconds=1)
TICK_SLICE: Final = 4096
"""The most keys a timer ticks before it may give way to the host (see ``KeyedGroupsTimed._on_timer``)."""

_NO_VALUES: Final[list[Any]] = []  # (never appended to)
_TICKING: Final = -(2**63)
"""``_timer_due`` while the outstanding timer ticks: nothing else arms one, it arms the next when done."""


def micros(when: datetime) -> int:
    """``when`` in microseconds from the Unix epoch."""
    return (when - EPOCH) // US


def at(us: int) -> datetime | None:
    """The time ``us`` microseconds from the epoch; ``None`` past the representable times (it never comes)."""
    try:
        return EPOCH + timedelta(microseconds=us)
    except OverflowError:
        return None


class TimedStep(KeyedStep):
    """A keyed step that needs the clock. Its field is a tuple whose first item is the time (microseconds from
    the epoch) its key next needs a tick and whose second is a sequence number the stage gives it (the key's
    place among the keys due at that time); the timed stage indexes the key there.

    * ``open(now, seq)``: the field of a new key, whose group opens at ``now``;
    * ``tick(field, now, seq)``: everything due by ``now`` (``now`` >= the field's time): the new field (with
      ``seq``) and what goes on to the next step, in a list (maybe empty; a
      :class:`~reaqtive.operators.keyed_steps.Several` when a failure follows them);
    * ``next`` never changes the field's time nor its number (only ticks move them).
    """

    __slots__ = ()

    timed = True

    @property
    def ahead(self) -> int:
        """How far ahead of the clock a field's time may be (microseconds): its period."""
        raise NotImplementedError

    def open(self, now: int, seq: int) -> Any:
        """The field of a key whose group opens at ``now``."""
        raise NotImplementedError

    def tick(self, field: Any, now: int, seq: int) -> tuple[Any, list[Any]]:
        """The key's time came (``now`` >= it): the new field and what goes on (a
        :class:`~reaqtive.operators.keyed_steps.Several` when a failure follows them)."""
        raise NotImplementedError

    def empty_outputs(self) -> list[Any] | None:
        """What a key's tick puts out for a period in which nothing reached its field (an idle key's empty
        window), the same for every key; ``None`` when that is not known without ticking (the default)."""
        return None

    def quiet_tick(self, field: Any, now: int, seq: int) -> Any:
        """When nothing reached ``field`` since its time was set (an idle key): the new field of
        :meth:`tick`, whose outputs are :meth:`empty_outputs` for each period; else ``None`` (the default)."""
        return None

    def loaded(self, field: Any) -> Any:
        """A field read from a store (after :meth:`check`), in the form this step keeps it in (the default: as
        read)."""
        return field

    def bind_stage(self, binding: Any, subscriber: Any) -> KeyedGroupsTimed:
        return KeyedGroupsTimed(binding, subscriber)

    def general_reason(self, binding: Any) -> str | None:
        return general_reason(binding)


def general_reason(binding: KeyedBinding) -> str | None:
    """Why a chain with a timed step keeps the general path, or ``None`` when it runs keyed (the one place these
    rules are written; the keyed decision, ``plan_keyed_groups``, asks it through the step)."""
    if sum(1 for step in binding.steps if step.timed) > 1:
        return "more than one time-based operator in the inner query (each would need a timer queue of its own)"
    if binding.group_args.expire_after is not None:
        return "group_by's expire_after with a time-based inner operator (two clocks in one stage: not written yet)"
    if binding.max_concurrent is not None:
        return "flat_map's max_concurrent with a time-based inner operator (not written yet)"
    return None


class _Timer(YieldableSchedulerTask):
    """The stage's timer task, due at ``due`` (microseconds from the epoch). On a scheduler that can move a
    running task (``run_again_at_us``, the virtual-time one), the stage moves this one to its next time when it
    is done ticking, instead of scheduling a new task per window end."""

    __slots__ = ("_stage", "armed", "arrival", "due")

    priority = ACTION_PRIORITY
    is_runnable = True

    def __init__(self, stage: KeyedGroupsTimed, due: int, armed: datetime | None = None,
                 arrival: int | None = None) -> None:
        self._stage = stage
        self.due = due
        # a recovered timer's place in line: when it was armed and its number in that tick (the virtual scheduler
        # tells ``arrival`` when it queues the task; see reaqtive.scheduler.ActionTask)
        self.armed = armed
        self.arrival = arrival

    def execute(self, scheduler: Any, yield_token: YieldToken = YieldToken.NONE) -> bool:
        return self._stage._on_timer(self, yield_token)

    def __repr__(self) -> str:
        return f"<keyed timer of {self._stage.name!r} due at {self.due} us>"


class KeyedGroupsTimed(KeyedGroups):
    """The running stage of a keyed ``group_by ... flat_map`` whose chain has a timed step (see the module).

    **The timer queue.** Keys wait for their time in a deque, in ``(time, sequence number)`` order: a new key's
    time is ``now + duration`` and a ticked key's next time is at most that, so appending keeps the order, and the
    deque holds just the keys (the times are in their records). A key whose next time would go before the deque's last
    (a tick that ran late and caught up) waits in a small heap of ``(time, number, key)`` instead; the queue's
    head is the earlier of the two heads. Every live key is in the queue exactly once; a key whose chain ended
    leaves it when it comes up.
    """

    timeless = False
    name = "reaqtive:group_by+keyed+timed"
    version: Version = (2,)
    older_versions = frozenset({(1,)})  # without the timer's due and arming time: re-armed at the restart's tick

    __slots__ = (
        "_armed",
        "_dues",
        "_first",
        "_last",
        "_late",
        "_order",
        "_plain_after",
        "_quiet",
        "_recovered",
        "_scheduler",
        "_seq",
        "_timed",
        "_timed_step",
        "_timer",
        "_timer_due",
        "_unfinished",
        "_virtual",
    )

    def __init__(self, binding: KeyedBinding, downstream: Subscriber[Any]) -> None:
        super().__init__(binding, downstream)
        steps = binding.steps
        self._timed = next(index for index, step in enumerate(steps) if step.timed)
        step = steps[self._timed]
        assert isinstance(step, TimedStep)
        self._timed_step: TimedStep = step
        # not state (rebuilt from the records)
        self._order: deque[Any] = deque()  # the keys, in (time, number) order
        self._dues: deque[int] = deque()  # their times (the records' own int objects): the head's, without a lookup
        self._late: list[tuple[int, int, Any]] = []  # the keys that would go before the deque's last, a heap
        self._timer_due: int | None = None  # the time of the outstanding timer
        self._timer: _Timer | None = None  # the outstanding timer
        # state: when the outstanding timer was scheduled (or moved, or gave way), microseconds: where it stands in
        # line among the timers of its instant, which a recovered timer keeps (see on_start)
        self._armed: int | None = None
        self._recovered: tuple[int, int, int | None] | None = None  # the loaded timer, until on_start arms it
        self._virtual = False  # whether the scheduler has now_us and run_again_at_us (the virtual-time one)
        self._quiet: bool | None = None  # whether an idle key's tick puts nothing out (None: not asked yet)
        # The steps after the timed one when a tick's results may go through them without the general feed
        self._plain_after = self._plain_steps_after() if self._result_selector is None else None
        # The timed step is the chain's last and its results leave as they are
        self._last = self._timed == len(steps) - 1 and self._result_selector is None
        # The timed step comes first and sees the element itself: on_next's inlined path
        self._first = self._timed == 0 and self._element_selector is None
        self._seq = 0  # the next sequence number (one more than the records' largest)
        self._unfinished: int | None = None  # the time a timer that gave way had keys due at
        self._scheduler: Scheduler | None = None

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._scheduler = context.scheduler  # MissingSchedulerError without one: time needs a clock
        kind = type(self._scheduler)
        self._virtual = hasattr(kind, "now_us") and hasattr(kind, "run_again_at_us")

    def _now(self) -> int:
        """The clock in microseconds from the epoch."""
        scheduler: Any = self._scheduler
        return scheduler.now_us if self._virtual else micros(scheduler.now)

    # -- the queue and the timer (lock held) -------------------------------------------------------------------

    def _opened(self, key: Any) -> tuple[Any, ...]:
        scheduler = self._scheduler
        assert scheduler is not None
        fields = list(self._initial)
        seq = self._seq
        self._seq = seq + 1
        field = self._timed_step.open(self._now(), seq)
        fields[self._timed] = field
        self._enqueue(key, field[0], seq)
        return tuple(fields)

    def _enqueue(self, key: Any, due: int, seq: int) -> None:
        """``key`` waits for ``due`` (its sequence number ``seq``, the largest given so far: a key due with the
        deque's last goes after it)."""
        dues = self._dues
        if not dues or due >= dues[-1]:
            self._order.append(key)
            dues.append(due)
        else:
            heapq.heappush(self._late, (due, seq, key))
        timer = self._timer_due
        if timer is None or due < timer:
            self._arm(due)

    def _earliest(self) -> int | None:
        """The time of the earliest waiting key, or ``None``; keys whose chain ended leave on the way."""
        order, get, index = self._order, self._table.get, self._timed
        due: int | None = None
        while order:
            record = get(order[0])
            if record:
                due = record[index][0]
                break
            order.popleft()  # its chain ended
            self._dues.popleft()
        late = self._late
        if late and (due is None or late[0][0] < due):
            due = late[0][0]
        return due

    def _arm(self, due: int, armed: int | None = None, number: int | None = None) -> None:
        """Schedule the timer at ``due`` (earlier than the outstanding one, if any); ``armed`` and ``number``: when
        a recovered timer was armed and its number in that tick (else now, and a new number)."""
        if self._error is not None or self._source_done:
            return
        when = at(due)
        if when is None:
            return  # past datetime.max: it never comes
        self._timer_due = due
        self._armed = self._now() if armed is None else armed
        self._state.changed = True
        scheduler = self._scheduler
        assert scheduler is not None
        timer = self._timer = _Timer(self, due, None if armed is None else at(armed), number)
        scheduler.schedule(timer, due=when)

    def _rearm(self, timer: _Timer, due: int, now: int) -> bool:
        """Move the running ``timer`` to ``due`` (the scheduler runs it again then; ``now``: the clock), if the
        scheduler can; else ``False``, and :meth:`_arm` schedules a new one."""
        if not self._virtual or self._error is not None or self._source_done:
            return False
        scheduler: Any = self._scheduler
        if not scheduler.run_again_at_us(due):
            return False
        timer.due = due
        self._timer_due = due
        self._timer = timer
        self._armed = now  # it goes back in line now (the virtual scheduler's run_again_at_us)
        self._state.changed = True
        return True

    def _on_timer(self, timer: _Timer, token: YieldToken = YieldToken.NONE) -> bool:
        """Tick the keys due, a slice of :data:`TICK_SLICE` keys at a time, each slice's results emitted before
        the next; between slices it gives way when the host asks (``False``: run again at the same tick), so that
        a time at which 100,000 keys are due does not hold a checkpoint for all of them (the keys not ticked yet
        wait in the queue, in order, with their records as they were)."""
        if self._disposed:
            return True  # a disposed operator's timer may still run
        scheduler: Any = self._scheduler
        now = scheduler.now_us if self._virtual else micros(scheduler.now)
        due = timer.due
        while True:
            again = False  # whether this task was moved to the next time (it then returns False: run again)
            direct = False  # whether the results go out at once (the drainer role taken: see _deliver_ticked)
            lock = self._lock
            lock.acquire()  # acquire/release: a third of the cost of ``with``
            try:
                outstanding = self._timer is timer  # else an earlier timer took its place: this one only ticks
                if outstanding:
                    self._timer_due = _TICKING  # keys queued again while ticking arm nothing: this task arms next
                earliest = None
                if self._error is None and not self._source_done and self._deferred_error is None:
                    earliest = self._tick_until(now, TICK_SLICE)
                more = earliest is not None and earliest <= now and self._deferred_error is None
                self._unfinished = now if more else None
                if outstanding:
                    if more:
                        self._timer_due = due  # still this task's: it runs again, back in line now
                        self._armed = now
                        self._state.changed = True
                    else:
                        self._timer_due = self._timer = self._armed = None
                        self._state.changed = True
                        if earliest is not None:
                            again = self._rearm(timer, earliest, now)
                            if not again:
                                self._arm(earliest)
                if self._pending and self._demand == LONG_MAX and not self._emitting and self._running \
                        and self._error is None:
                    direct = self._emitting = True  # the drainer role (see _emitter)
                    self._state.changed = True
            finally:
                lock.release()
            if direct:
                self._deliver_ticked()
            elif self._pending or self._error is not None:
                self._emit_ticked()
            if self._deferred_error is not None:
                # A tick failed: the results ticked before it (this key's and earlier keys') go out first, as on the
                # general path, where each group's timer delivers its own before the next one fails.
                deferred, self._deferred_error = self._deferred_error, None
                self._fail(deferred)
                return not again
            if not more:
                return not again
            if token.is_yield_requested:
                return False

    def _keyed(self, key: Any, value: Any) -> None:
        """:meth:`KeyedGroups._keyed` (``on_next`` and the engine's runs) with the common case inlined: a known key
        whose chain starts with the timed step and is live, whose element the step takes in (it fills the key's
        window); its results, if any, are queued and drained."""
        if not self._first or self._unfinished is not None:
            super()._keyed(key, value)
            return
        lock = self._lock
        lock.acquire()
        try:
            page = self._index.get(key) if self._error is None and not self._source_done else None
        except TypeError:
            page = None  # an unhashable key: the general element path fails the stage
        record: tuple[Any, ...] = () if page is None else page.records[key]
        if not record or page is None:  # a new key, a key whose chain ended, or the stage is done: the general path
            lock.release()
            super()._keyed(key, value)
            return
        self._probe._key = key
        field = record[0]
        try:
            state, output = self._timed_step.next(field, value)
        except Exception as error:
            self._step_failed(error, value)  # skipped: the key's record stays as it was
        else:
            if output is SKIP:
                if state is not field:
                    page.records[key] = (state, *record[1:])
                    page.tracker.changed = True
                elif self._in_place:
                    page.tracker.changed = True  # its field changed in place: its page is saved
            else:  # results: through the steps after it, then queued and drained (in order, as _keyed does)
                fields = list(record)
                fields[0] = state
                ended, outputs = self._feed_record(
                    key, fields, 1, output if type(output) is Several else Several((output,)))
                if ended is not None and outputs:
                    self._queue(outputs)
        lock.release()
        if self._pending or self._error is not None or self._deferred_error is not None:
            self._settle(direct=False)

    def _plain_steps_after(self) -> tuple[KeyedStep, ...] | None:
        """The steps after the timed one when they are all ``map`` s and ``filter`` s (no field: a tick's results
        go through them without touching the key's record); else ``None``."""
        from reaqtive.operators.filter import FilterStep
        from reaqtive.operators.map import MapStep

        after = self._steps[self._timed + 1:]
        if not all(type(step) in (FilterStep, MapStep) for step in after):
            return None
        return after

    def _quiet_ticks(self) -> bool:
        """Whether an idle key's tick (an empty window) puts nothing out of the chain, for every key: each of the
        timed step's :meth:`~TimedStep.empty_outputs` is dropped by a ``filter`` after nothing but ``map`` s and
        ``filter`` s (steps with no field: the same for every key), whose functions do not read the key. Asked
        once (the functions are called once on those values: a query's functions are deterministic, as a replay
        needs), so that an idle key's tick then only moves its time (:meth:`~TimedStep.quiet_tick`)."""
        probe: Any = self._probe
        probe._selecting, probe._key_read = True, False  # a function that reads the key: not the same for every key
        try:
            values = self._timed_step.empty_outputs()
            if values is None:
                return False
            after = self._plain_steps_after()
            if after is None:
                return not values and not probe._key_read  # (else results a step with a field may see)
            for empty in values:
                value = empty
                for step in after:
                    try:
                        _, value = step.next(None, value)
                    except Exception:
                        return False  # (its error goes through the policy on the ticking path)
                    if value is SKIP:
                        break
                else:
                    return False  # it leaves the chain
            return not probe._key_read
        finally:
            probe._selecting = False

    def _emit_ticked(self) -> None:
        """Deliver what the ticks queued: :meth:`_deliver_ticked` with unbounded demand, otherwise the emitter's
        drain."""
        lock = self._lock
        lock.acquire()
        if self._emitting or not self._running or self._demand != LONG_MAX or self._error is not None:
            lock.release()
            self._drain()
            return
        self._emitting = True  # the drainer role (see _emitter)
        self._state.changed = True
        lock.release()
        self._deliver_ticked()

    def _deliver_ticked(self) -> None:
        """The drainer (it set ``_emitting``) under unbounded demand: what the ticks queued goes out in one loop,
        with no lock nor demand accounting per result (each stays queued, saved, until it goes out; an error or a
        disposal stops the loop as it stops the emitter's), then what is left: an error, the completion, or
        nothing (it gives up the role)."""
        pending = self._pending
        while pending and self._error is None and not self._disposed:
            self._downstream.on_next(pending.popleft())
        lock = self._lock
        lock.acquire()
        if not pending and self._error is None and not self._source_done and not self._disposed:
            self._emitting = False  # nothing left (the emitter loop's idle case, without its calls)
            lock.release()
            return
        lock.release()
        self._emit_loop()

    def _tick_until(self, now: int, budget: int) -> int | None:  # noqa: PLR0915  (the per-key tick, inlined on purpose)
        """Tick the keys due by ``now``, in ``(time, number)`` order, at most ``budget`` of them (lock held); the
        time of the next key due (``None``: none waits, or the stage failed)."""
        order, late, pages = self._order, self._late, self._index
        index, step, probe = self._timed, self._timed_step, self._probe
        last = self._last
        quiet = self._quiet
        if quiet is None:
            quiet = self._quiet = self._quiet_ticks()
        quiet_tick = step.quiet_tick if quiet else None
        plain = self._plain_after
        dues = self._dues
        while budget > 0:
            budget -= 1
            # The head: the deque's first key, or the late heap's first when it comes before it.
            record: tuple[Any, ...] = ()
            key: Any = None
            page: Any = None
            if order and not late:  # the common case: the deque's head, its time known without a lookup
                if dues[0] > now:
                    return dues[0]  # (its chain may have ended: the timer then finds the next one)
                key = order.popleft()
                dues.popleft()
                page = pages.get(key)
                record = page.records[key]
                if not record:
                    continue  # its chain ended
            else:
                while order:
                    key = order[0]
                    page = pages.get(key)
                    record = page.records[key]
                    if record:
                        break
                    order.popleft()  # its chain ended
                    dues.popleft()
                if late and (not record or late[0][:2] < record[index][:2]):
                    head = self._pop_late(now)
                    if head is None:
                        continue  # its chain ended
                    if isinstance(head, int):
                        return head
                    key, page, record = head
                elif not record:
                    return None
                elif record[index][0] > now:
                    return int(record[index][0])
                else:
                    order.popleft()
                    dues.popleft()
            seq = self._seq
            self._seq = seq + 1
            values: list[Any] = _NO_VALUES
            field = None if quiet_tick is None else quiet_tick(record[index], now, seq)  # an idle key: a move
            if field is None:
                probe._key = key
                try:
                    field, values = step.tick(record[index], now, seq)
                except Exception as error:
                    self._deferred_error = stopping_error(error)  # (after the results ticked before it: _on_timer)
                    return None
                if type(values) is Several:  # a failure after these results: the stage fails
                    self._tick_on(key, record, field, values, seq)
                    return None
                if values and not last:
                    if plain is None:
                        if not self._tick_on(key, record, field, values, seq):
                            return None  # the stage failed
                        continue
                    through = self._through(plain, values)  # (those steps have no field)
                    if through is None:
                        if field is not record[index]:
                            page.records[key] = (*record[:index], field, *record[index + 1:])
                        page.tracker.changed = True
                        return None  # a step failed: the stage fails after the results before it
                    values = through
            if field is not record[index]:  # (else it changed in place)
                page.records[key] = (*record[:index], field, *record[index + 1:])
            page.tracker.changed = True
            due = field[0]  # the key waits for its next time (_enqueue, inlined)
            if not dues or due >= dues[-1]:
                order.append(key)
                dues.append(due)
            else:
                heapq.heappush(late, (due, seq, key))
            timer_due = self._timer_due
            if timer_due is None or due < timer_due:
                self._arm(due)
            if values and not self._queue(values):
                return None
        return now  # the budget is spent: some may be due still (the caller runs again)

    def _through(self, steps: tuple[KeyedStep, ...], values: list[Any]) -> list[Any] | None:
        """A tick's ``values`` through ``steps`` (maps and filters, see :meth:`_plain_steps_after`; lock held): what
        leaves the chain, as :meth:`_tick_on` queues it; ``None`` when a step's error stops the query (the results
        before it are queued, the error deferred until they went out)."""
        outputs: list[Any] = []
        for result in values:
            value = result
            for step in steps:
                try:
                    _, value = step.next(None, value)
                except Exception as error:
                    if self._user_skips(error, value):
                        value = SKIP  # dropped at this step
                        break
                    if outputs:
                        self._queue(outputs)
                    self._deferred_error = stopping_error(error)
                    return None
                if value is SKIP:
                    break
            else:
                outputs.append(value)
        return outputs

    def _finish_ticks(self) -> bool:
        """Tick the keys a timer that gave way left due (lock held): they come before an element or the
        completion that arrives meanwhile, as their timer came first. ``False``: a tick failed."""
        now, self._unfinished = self._unfinished, None
        if now is not None and self._error is None:
            self._tick_until(now, 2**62)
        return self._deferred_error is None

    def _element(self, key: Any, value: Any) -> Any:
        """:meth:`KeyedGroups._element`, after the keys a timer that gave way left due ticked (the common case, a
        known key's element, is :meth:`on_next`'s inlined path)."""
        if self._unfinished is not None and not self._finish_ticks():
            return SKIP  # (the failure goes out after the results ticked before it)
        return super()._element(key, value)

    def _pop_late(self, now: int) -> tuple[Any, Any, tuple[Any, ...]] | int | None:
        """The late heap's first key, when it comes first: ``(key, page, record)`` taken off the heap if due by
        ``now``, else its time; ``None`` when its chain ended (taken off)."""
        key = self._late[0][2]
        page = self._index[key]
        record: tuple[Any, ...] = page.records[key]
        if record and record[self._timed][0] > now:
            due: int = record[self._timed][0]
            return due
        heapq.heappop(self._late)
        return (key, page, record) if record else None

    def _tick_on(self, key: Any, record: tuple[Any, ...], field: Any, values: list[Any], seq: int) -> bool:
        """What a tick put out (``values``; a :class:`Several` whose failure stops the stage after them) goes
        through the steps after the timed one, the key's record is saved and the key waits for its next time
        unless its chain ended; what left the chain is queued (lock held). ``False``: the stage failed."""
        index = self._timed
        fields = list(record)
        fields[index] = field
        several = values if type(values) is Several else Several(values)
        ended, outputs = self._feed_record(key, fields, index + 1, several)
        if ended is None:
            return False
        if not ended:
            self._enqueue(key, field[0], seq)
        return not outputs or self._queue(outputs)

    def on_complete(self) -> None:
        if self._unfinished is not None:  # a timer gave way with keys due: they tick first
            with self._lock:
                self._finish_ticks()
            if self._deferred_error is not None:
                self._drain()
                deferred, self._deferred_error = self._deferred_error, None
                self._fail(deferred)
        super().on_complete()

    def _clear(self) -> None:
        super()._clear()
        self._order.clear()
        self._dues.clear()
        self._late.clear()

    # -- lifecycle and state -------------------------------------------------------------------------------------

    def on_start(self) -> None:
        if not self._source_done:
            with self._lock:
                self._timer_due = self._timer = None
                earliest = self._earliest()
                recovered, self._recovered = self._recovered, None
                if recovered is not None and (earliest is None or recovered[0] <= earliest):
                    # the timer as it stood: at its due (a key due then may have ended since: it then finds the
                    # next, as it would have; with no key left it arms the next key's timer when it runs, as
                    # live), in line where it was armed
                    self._arm(*recovered)
                elif earliest is not None:
                    self._arm(earliest)
        super().on_start()

    def save_state_core(self, writer: StateWriter) -> None:
        super().save_state_core(writer)
        due = self._timer_due
        timer = self._timer
        if due is None or due == _TICKING or self._armed is None or timer is None:
            writer.write(None)
        else:
            writer.write([due, self._armed, timer.arrival])  # (its number: read here, never per element)

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        self.load_state_core(reader, timer=False)  # (1,): no timer: it is re-armed at the restart's tick

    def load_state_core(self, reader: StateReader, *, timer: bool = True) -> None:
        super().load_state_core(reader)
        self._recovered = self._read_timer(reader) if timer else None
        index = self._timed
        # A key's time is a deadline its step computed from the clock: within the host's bounds (a forged time far
        # in the past would make its first tick catch up for ever).
        earliest, latest = time_bounds(self.context, timedelta(microseconds=self._timed_step.ahead))
        low = None if earliest is None else micros(earliest)
        high = None if latest is None else micros(latest)
        where = getattr(reader, "where", f"operator {self.name!r}")
        waiting: list[tuple[int, int, Any]] = []
        loaded = self._timed_step.loaded
        for key, record in self._table.items():
            if record:
                field = loaded(record[index])
                if field is not record[index]:  # (an older store's form of the field)
                    self._table.put(key, (*record[:index], field, *record[index + 1:]))
                if (low is not None and field[0] < low) or (high is not None and field[0] > high):
                    context = f"{where}: the record of key {key!r:.60} (a {KeyedPage.name!r} unit)"
                    raise RecordReader(record, context).invalid(
                        f"field {index} ({self._chain[index]})", "a time within the checkpoint's bounds", field[0]
                    )
                waiting.append((field[0], field[1], key))
        waiting.sort(key=lambda entry: entry[:2])
        self._order = deque(key for _, _, key in waiting)
        self._dues = deque(due for due, _, _ in waiting)
        self._late = []
        self._seq = max((seq for _, seq, _ in waiting), default=-1) + 1

    @staticmethod
    def _read_timer(reader: StateReader) -> tuple[int, int, int | None] | None:
        """The saved timer: ``(due, armed, number)``, times in microseconds (when it is due, when it was scheduled),
        its number in the armed tick or ``None`` (a scheduler that tells none)."""
        saved = reader.read()
        if saved is None:
            return None
        if not (isinstance(saved, (list, tuple)) and len(saved) == 3 and type(saved[0]) is int
                and type(saved[1]) is int and (saved[2] is None or (type(saved[2]) is int and saved[2] >= 0))):
            raise reader.invalid("timer", "None or [due, armed, number] (microseconds, a number or None)", saved)
        return saved[0], saved[1], saved[2]
