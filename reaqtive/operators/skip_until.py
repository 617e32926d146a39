"""``skip_until``: drop elements until another stream signals, or until an absolute time; then pass them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import ArgsRecord
from reaqtive.core.binding import register_operator
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.streams import Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.operators._take_skip import AtATime, GateStage, OpenAtDeadline, UntilArgs, UntilStage, other_or_time
from reaqtive.scheduler import ActionTask

__all__ = ["SkipUntil", "SkipUntilArgs", "SkipUntilTime", "SkipUntilTimeArgs", "skip_until"]

T = TypeVar("T")


def skip_until(other: Subscribable[Any] | datetime, /) -> OperatorCall[Any]:
    """Drop elements until ``other`` emits its first element, or until the aware ``datetime``
    ``start_time``; then pass every element.

    >>> source, start = SimpleSubject(), SimpleSubject()
    >>> handle = source.as_query().skip_until(start.as_query()).run(print)
    >>> source.on_next(1); start.on_next("go"); source.on_next(2); source.on_next(3)
    2
    3

    With a stream, as in Rx: ``other`` is subscribed before the source, so one that signals at once opens the
    gate before the source emits; its first element opens the gate for good and unsubscribes it; its error
    (before its first element) is the result's error; ``other`` completing without an element keeps the gate
    shut; the source's error passes at any time, and its completion once the gate is open: the source
    completing while the gate is shut is dropped like its elements, so the result does not complete (``other``
    may still fail it). With a time, completion and errors pass at any time, and a ``start_time`` in the past
    drops nothing; a time needs a scheduler.

    **State.** Stream: ``open``, ``other_done`` (``other`` ended: it signalled or completed) and
    ``source_done`` (the source completed while the gate was shut); a recovered query does not listen again to
    the inputs that had ended. Time: ``open`` and when it subscribed (its timer's place in line after a restart).

    **Demand.** Each dropped element is replaced by ``request(1)`` upstream, unless demand is unbounded;
    ``other`` is asked for one element.

    Reaqtive: SkipUntil (its time form is composed with Timer).
    """
    return other_or_time(other, "skip_until")


SkipUntilArgs = UntilArgs  # ``(source, other)``, as ``take_until``'s


@dataclass(frozen=True, slots=True)
class SkipUntilTimeArgs(ArgsRecord):
    """The arguments of a ``skip_until_time`` node: ``(source, start_time)``."""

    source: Subscribable[Any]
    start_time: datetime
    checks = ("source", "time")


@register_operator("skip_until", builder=skip_until, args=SkipUntilArgs)
class SkipUntil(GateStage[T], UntilStage[T], Generic[T]):
    """The running stage of :func:`skip_until` with a stream (two inputs: :class:`UntilStage`). Only terminal
    signals can race (the other never emits an element downstream), so only they take the lock.
    """

    name = "reaqtive:skip_until"
    version: Version = (1,)

    __slots__ = ("_lock", "_other", "_other_done", "_other_observer", "_source", "_source_done")

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = SkipUntilArgs.read(query)
        self._init_until(args.source, args.other)
        self._source_done = False

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._open)
        writer.write(self._other_done)
        writer.write(self._source_done)

    def load_state_core(self, reader: StateReader) -> None:
        self._open = reader.read_bool("open")
        self._other_done = reader.read_bool("other done")
        self._source_done = reader.read_bool("source done")

    def on_start(self) -> None:
        # Restored: inputs that had ended before the checkpoint are not listened to again.
        self._forget_ended_other()
        if self._source_done:
            self._upstream_terminated()
            self._inputs[1].dispose()

    # -- the source ----------------------------------------------------------------------------------------------

    def on_complete(self) -> None:
        with self._lock:
            self._upstream_terminated()
            if self._open:
                self._signal_complete()
            elif not self._disposed:
                self._source_done = True
                self._state.changed = True

    # -- the other -----------------------------------------------------------------------------------------------

    def _on_other_next(self) -> None:
        with self._lock:
            if self._disposed:
                return
            self._open = self._other_done = True  # (after the source completed: Rx stays silent, so do we)
            self._state.changed = True
        self._other_observer.cancel()
        self._inputs[0].dispose()  # from inside the other's on_next: allowed (rule 3.5)


@register_operator("skip_until_time", frames=2, builder=skip_until, args=SkipUntilTimeArgs)
class SkipUntilTime(OpenAtDeadline[T], AtATime[T], Generic[T]):
    """The running stage of :func:`skip_until` with a time: the timer only opens the gate (see
    :class:`OpenAtDeadline`), so it needs no lock. State: whether the gate is open, then when it subscribed
    (:class:`AtATime`; version 1 saved only the first)."""

    name = "reaqtive:skip_until+time"
    version: Version = (2,)
    operator_label = "skip_until(start_time)"
    state_fields = ("open", "subscribed_at", "timer_number")

    __slots__ = ("_number", "_source", "_subscribed_at", "_time", "_timer_task")

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        self._timer_task: ActionTask | None = None
        self._number: int | None = None
        args = SkipUntilTimeArgs.read(query)
        self._source: Subscribable[T] = args.source
        self._time = args.start_time
        self._subscribed_at: datetime | None = None

    def _save_fields(self, writer: StateWriter) -> None:
        writer.write(self._open)

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        self._open = reader.read_bool("open")

    def deadline(self, now: datetime) -> datetime | None:
        time = super().deadline(now)
        return None if self._open else time
