"""``take_until``: pass elements until another stream signals, or until an absolute time; then complete."""

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
from reaqtive.operators._take_skip import AtATime, TakeUntilDeadline, UntilArgs, UntilStage, other_or_time
from reaqtive.scheduler import ActionTask

__all__ = ["TakeUntil", "TakeUntilArgs", "TakeUntilTime", "TakeUntilTimeArgs", "take_until"]

T = TypeVar("T")


def take_until(other: Subscribable[Any] | datetime, /) -> OperatorCall[Any]:
    """Pass elements until ``other`` emits its first element, or until the aware ``datetime`` ``end_time``;
    then complete and unsubscribe.

    >>> source, stop = SimpleSubject(), SimpleSubject()
    >>> handle = source.as_query().take_until(stop.as_query()).run(print, on_complete=lambda: print("done"))
    >>> source.on_next(1); source.on_next(2); stop.on_next("stop"); source.on_next(3)
    1
    2
    done

    ``other``'s error is the result's error; ``other`` completing without an element lets every element
    pass (as in Rx). ``other`` is subscribed before the source, so one that signals at once ends the result
    before the source emits (as in Rx.NET). The source's elements, completion and error pass through. An
    ``end_time`` in the past completes at once; a time needs a scheduler.

    **State.** Stream: ``other_done``, whether ``other`` completed without an element (a recovered query
    does not listen to it again). Time: when it subscribed (its timer's place in line after a restart; the time
    is part of the query, and a stage past it has completed).

    **Demand.** Passed upstream unchanged; ``other`` is asked for one element.

    Reaqtive: TakeUntil (its time form is composed with Timer).
    """
    return other_or_time(other, "take_until")


TakeUntilArgs = UntilArgs  # ``(source, other)``, as ``skip_until``'s


@dataclass(frozen=True, slots=True)
class TakeUntilTimeArgs(ArgsRecord):
    """The arguments of a ``take_until_time`` node: ``(source, end_time)``."""

    source: Subscribable[Any]
    end_time: datetime
    checks = ("source", "time")


@register_operator("take_until", frames=2, builder=take_until, args=TakeUntilArgs)
class TakeUntil(UntilStage[T], Generic[T]):
    """The running stage of :func:`take_until` with a stream (two inputs: :class:`UntilStage`).

    A lock serializes the two inputs' signals downstream (rule 1.3) for as long as the other can still end the
    result; after ``other_done`` elements pass without it. A recovered stage with ``other_done`` set disposes
    its other input at start.
    """

    name = "reaqtive:take_until"
    version: Version = (1,)

    __slots__ = ("_lock", "_other", "_other_done", "_other_observer", "_source")

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = TakeUntilArgs.read(query)
        self._init_until(args.source, args.other)

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._other_done)

    def load_state_core(self, reader: StateReader) -> None:
        self._other_done = reader.read_bool("other done")

    def on_start(self) -> None:
        self._forget_ended_other()

    # -- the source ----------------------------------------------------------------------------------------------

    def on_next(self, value: T) -> None:
        if self._other_done:  # the other can no longer signal: nothing to serialize with
            self._downstream.on_next(value)
            return
        with self._lock:
            self._downstream.on_next(value)  # a no-op subscriber once the stage ended

    # -- the other -----------------------------------------------------------------------------------------------

    def _on_other_next(self) -> None:
        with self._lock:
            if not self._disposed:
                self._signal_complete()


@register_operator("take_until_time", frames=2, builder=take_until, args=TakeUntilTimeArgs)
class TakeUntilTime(TakeUntilDeadline[T], AtATime[T], Generic[T]):
    """The running stage of :func:`take_until` with a time: a lock (of :class:`TakeUntilDeadline`) serializes
    the timer's completion with the elements. State: when it subscribed (:class:`AtATime`; version 1 saved
    nothing)."""

    name = "reaqtive:take_until+time"
    version: Version = (2,)
    operator_label = "take_until(end_time)"
    state_fields = ("subscribed_at", "timer_number")

    __slots__ = ("_number", "_source", "_subscribed_at", "_time", "_timer_task")

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        self._timer_task: ActionTask | None = None
        self._number: int | None = None
        args = TakeUntilTimeArgs.read(query)
        self._source: Subscribable[T] = args.source
        self._time = args.end_time
        self._subscribed_at: datetime | None = None
