"""Keyed execution of chains with a time-based step (``g.window(duration).flat_map(...)``, ``g.buffer(duration)``):
the keyed stage of :mod:`reaqtive.operators.keyed_groups` with one shared timer queue.

On the general path each group of ``group_by(k).flat_map(lambda g: g.window(d).flat_map(avg))`` has a window
stage of its own, with a timer of its own that fires every ``d`` for as long as the group lives, aligned on the
group's creation (its first element, Rx's alignment). Keyed, the chain's time-based step (a
:class:`TimedStep`) keeps, in the key's field, the time its key next needs the clock (a window's end); the stage
keeps one index of those times, ``time -> keys`` (a heap of distinct times), and **one** scheduled task, at the
earliest. When it runs it ticks every key due then, in the order the keys were indexed (the order the general
path's per-group timers were scheduled in), feeds what each tick puts out through the steps after it, and
indexes the key again at its next time. A tick that runs late (after a pause, or a restart after downtime)
catches up with every period it missed, as a window stage's timer does.

**Time** is integer microseconds from the Unix epoch inside (exact, cheap to compare); a time past
``datetime.max`` never comes. An element is never dated: only a new key reads the clock (its windows open when
its group does), so a known key's element costs what it costs on the untimed stage.

**State.** As :class:`~reaqtive.operators.keyed_groups.KeyedGroups` (the records hold the times); the index is not
saved: it is rebuilt from the records (grouped by time, in the table's order), and a recovered stage arms the
timer at the earliest time. Persisted as ``reaqtive:group_by+keyed+timed``: a store holding the general path's
state (or the untimed keyed stage's) never loads into it.

What keeps the general path: two timed steps in one chain, a timed step inside a window's inner query, and
``group_by(..., expire_after=)`` with a timed chain (see ``docs/higher-order.md``).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from reaqtive.core.context import OperatorContext
from reaqtive.core.operator import StateReader, Version
from reaqtive.core.scheduler_interface import Scheduler
from reaqtive.core.streams import Subscriber
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators.group_by import GroupByArgs
from reaqtive.operators.keyed_groups import KeyedGroups, _Outputs, _stop_error
from reaqtive.operators.keyed_steps import KeyedStep, Several
from reaqtive.scheduler import ActionTask
from reaqtive.scheduler.clock import EPOCH

__all__ = ["KeyedGroupsTimed", "TimedStep", "at", "bind_keyed_timed", "general_reason", "micros"]

US: Final = timedelta(microseconds=1)


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
      ``seq``) and what goes on to the next step (a :class:`~reaqtive.operators.keyed_steps.Several`, maybe
      empty, maybe ending in a failure);
    * ``next`` never changes the field's time nor its number (only ticks move them).
    """

    __slots__ = ()

    timed = True

    def open(self, now: int, seq: int) -> Any:
        """The field of a key whose group opens at ``now``."""
        raise NotImplementedError

    def tick(self, field: Any, now: int, seq: int) -> tuple[Any, Several]:
        """The key's time came (``now`` >= it): the new field and what goes on."""
        raise NotImplementedError


def general_reason(steps: Sequence[KeyedStep], group_args: GroupByArgs) -> str | None:
    """Why a chain with a timed step keeps the general path, or ``None`` when it runs keyed (the one place these
    rules are written; :func:`bind_keyed_timed` asks it)."""
    if sum(1 for step in steps if step.timed) > 1:
        return "more than one time-based operator in the inner query"
    if group_args.expire_after is not None:
        return "group_by's expire_after with a time-based inner operator"
    return None


def bind_keyed_timed(
    group_args: GroupByArgs,
    steps: Sequence[KeyedStep],
    chain: Sequence[str],
    probe: Any,
    subscriber: Subscriber[Any],
) -> SubscriptionHandle | None:
    """The timed keyed stage for a chain with a timed step, or ``None`` when it keeps the general path."""
    if general_reason(steps, group_args) is not None:
        return None
    return KeyedGroupsTimed(group_args, steps, chain, probe, subscriber)


class KeyedGroupsTimed(KeyedGroups):
    """The running stage of a keyed ``group_by ... flat_map`` whose chain has a timed step (see the module)."""

    timeless = False
    name = "reaqtive:group_by+keyed+timed"
    version: Version = (1,)

    __slots__ = ("_due_keys", "_dues", "_scheduler", "_seq", "_timed", "_timed_step", "_timer_due")

    def __init__(
        self,
        group_args: GroupByArgs,
        steps: Sequence[KeyedStep],
        chain: Sequence[str],
        probe: Any,
        downstream: Subscriber[Any],
    ) -> None:
        super().__init__(group_args, steps, chain, probe, downstream)
        self._timed = next(index for index, step in enumerate(steps) if step.timed)
        step = steps[self._timed]
        assert isinstance(step, TimedStep)
        self._timed_step: TimedStep = step
        # not state (rebuilt from the records)
        self._dues: list[int] = []  # the distinct pending times, a heap
        self._due_keys: dict[int, list[Any]] = {}  # time -> the keys due then, in the order they were indexed
        self._timer_due: int | None = None  # the time of the outstanding timer
        self._seq = 0  # the next sequence number (one more than the records' largest)
        self._scheduler: Scheduler | None = None

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._scheduler = context.scheduler  # MissingSchedulerError without one: time needs a clock

    # -- the index and the timer (lock held) -------------------------------------------------------------------

    def _opened(self, key: Any) -> tuple[Any, ...]:
        scheduler = self._scheduler
        assert scheduler is not None
        fields = list(self._initial)
        field = self._timed_step.open(micros(scheduler.now), self._next_seq())
        fields[self._timed] = field
        self._index_key(key, field[0])
        return tuple(fields)

    def _next_seq(self) -> int:
        """A sequence number: the keys due at one time are ticked in the order they were indexed, which a
        recovered stage gets back from the numbers (the general path's timers run in the order they were
        scheduled)."""
        seq = self._seq
        self._seq = seq + 1
        return seq

    def _index_key(self, key: Any, due: int) -> None:
        keys = self._due_keys.get(due)
        if keys is not None:
            keys.append(key)
            return
        self._due_keys[due] = [key]
        heapq.heappush(self._dues, due)
        self._arm()

    def _arm(self) -> None:
        """Schedule the timer at the earliest time unless an outstanding one runs at or before it."""
        dues = self._dues
        if not dues or self._error is not None or self._source_done:
            return
        first = dues[0]
        if self._timer_due is not None and self._timer_due <= first:
            return
        when = at(first)
        if when is None:
            return  # past datetime.max: it never comes
        self._timer_due = first
        scheduler = self._scheduler
        assert scheduler is not None
        scheduler.schedule(ActionTask(self._on_timer, first), due=when)

    def _on_timer(self, due: int) -> None:
        if self._disposed:
            return  # a disposed operator's timer may still run
        scheduler = self._scheduler
        assert scheduler is not None
        with self._lock:
            if self._timer_due == due:
                self._timer_due = None  # this task was the outstanding one
            if self._error is None and not self._source_done:
                self._tick_until(micros(scheduler.now))
                self._arm()
        self._drain()

    def _tick_until(self, now: int) -> None:
        """Tick every key due by ``now``, times in order (lock held)."""
        dues, due_keys = self._dues, self._due_keys
        while dues and dues[0] <= now and self._error is None:
            due = heapq.heappop(dues)
            for key in due_keys.pop(due):
                if not self._tick_key(key, due, now):
                    return

    def _tick_key(self, key: Any, due: int, now: int) -> bool:
        """Tick ``key``, indexed at ``due`` (lock held); ``False``: the stage failed."""
        table = self._table
        record = table.get(key)
        index = self._timed
        if not record or record[index][0] != due:
            return True  # its chain ended, or it moved on since (an index entry left behind)
        self._probe._key = key
        outputs = _Outputs()
        try:
            field, values = self._timed_step.tick(record[index], now, self._next_seq())
        except Exception as error:
            self._set_error(_stop_error(error))
            return False
        fields = list(record)
        fields[index] = field
        ended = False
        try:
            ended = self._feed_several(fields, index + 1, values, outputs)
        except Exception as error:
            if outputs:
                self._queue(outputs)
            self._set_error(_stop_error(error))
            return False
        finally:
            table.put(key, () if ended else tuple(fields))
        if ended:
            self._live -= 1
        else:
            self._index_key(key, field[0])
        return not outputs or self._queue(outputs)

    def _clear(self) -> None:
        super()._clear()
        self._dues.clear()
        self._due_keys.clear()

    # -- lifecycle and state -------------------------------------------------------------------------------------

    def on_start(self) -> None:
        if not self._source_done:
            with self._lock:
                self._timer_due = None
                self._arm()
        super().on_start()

    def load_state_core(self, reader: StateReader) -> None:
        super().load_state_core(reader)
        index = self._timed
        indexed: list[tuple[int, int, Any]] = []
        for key, record in self._table.items():
            if record:
                field = record[index]
                indexed.append((field[0], field[1], key))
        indexed.sort(key=lambda entry: entry[:2])
        dues: list[int] = []
        due_keys: dict[int, list[Any]] = {}
        for due, _, key in indexed:
            keys = due_keys.get(due)
            if keys is None:
                due_keys[due] = [key]
                dues.append(due)  # in order: a heap already
            else:
                keys.append(key)
        self._dues, self._due_keys = dues, due_keys
        self._seq = max((seq for _, seq, _ in indexed), default=-1) + 1
