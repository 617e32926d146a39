"""``start_with``: emit some values first, then the elements of the source."""

from __future__ import annotations

import threading
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import ArgsRecord
from reaqtive.core.binding import register_operator
from reaqtive.core.context import OperatorContext
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.scheduler_interface import Scheduler
from reaqtive.core.streams import LONG_MAX, Subscriber, add_demand, non_positive_request_error
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SingleAssignmentSubscription, SubscriptionHandle
from reaqtive.core.visitors import initialize, set_context_all, subscribe_all
from reaqtive.scheduler import ActionTask
from reaqtive.state import StatefulUnaryOperatorBase

__all__ = ["StartWith", "StartWithArgs", "start_with"]

T = TypeVar("T")


def start_with(*values: T) -> OperatorCall[T]:
    """Emit ``values`` first, then subscribe to this query and pass its elements.

    >>> from_iterable([3]).start_with(1, 2).run(print)  # doctest: +ELLIPSIS
    1
    2
    3
    <...>

    The source is subscribed only after the last value (as Rx's ``concat``): a hot source's elements
    during the values are not seen. With a scheduler each value is emitted by its own task, one after the
    other (under the test scheduler one tick apart, the first one tick after the start, or after the request
    that asks for it when the subscriber asked for nothing in ``on_subscribe``, as Reaqtive), and the task that
    emits the last value also subscribes to the source; with no values, the first task subscribes. Standalone,
    the values are emitted on the caller's thread.

    **State.** How many values were emitted, and whether the source is subscribed. A recovered query whose
    source was subscribed subscribes it again; one that was still emitting values continues with the next value.

    **Demand.** Values are emitted only as requested (nothing is buffered: they are parameters of the query).
    What the values did not use is handed to the source when it subscribes; from then on demand passes straight
    through.

    Reaqtive: StartWith.
    """
    for value in values:
        if value is None:
            raise TypeError("start_with: a value must not be None (None is never an element)")
    return OperatorCall("start_with", (values,))


class StartWithArgs(ArgsRecord, source="source", values="elements"):
    """The arguments of a ``start_with`` node: ``(source, values)``, ``values`` a tuple of elements."""


@register_operator("start_with", frames=16, builder=start_with, args=StartWithArgs)
class StartWith(StatefulUnaryOperatorBase[T, T], Generic[T]):
    """The running stage of :func:`start_with`. Standalone, the values are emitted from a drain loop (``_wip``,
    under ``_lock``), so that a ``request`` inside ``on_next`` adds demand instead of recursing (rule 3.3).
    A recovered stage whose source was subscribed re-subscribes while its state loads, so that the load
    traversal then finds the source and loads its state."""

    name = "reaqtive:start_with"
    version: Version = (1,)
    state_fields = ("index", "subscribed")

    __slots__ = (
        "_bad_request",
        "_demand",
        "_holder",
        "_index",
        "_lock",
        "_scheduler",
        "_source",
        "_subscribed",
        "_values",
        "_wip",
    )

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = StartWithArgs.read(query)
        self._source: Subscribable[T] = args.source
        self._values: tuple[T, ...] = args.values
        self._index = 0
        self._subscribed = False
        self._holder = SingleAssignmentSubscription()
        self._lock = threading.Lock()
        self._demand = 0  # requested while emitting values, not yet served (guarded by _lock)
        self._bad_request: int | None = None
        self._wip = True  # a drain is running or scheduled; held until on_start (guarded by _lock)
        self._scheduler: Scheduler | None = None

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._index)
        writer.write(self._subscribed)

    def load_state_core(self, reader: StateReader) -> None:
        count = len(self._values)
        self._index = reader.read_int("index", maximum=count)
        self._subscribed = reader.read_bool("subscribed")
        if self._subscribed and self._index != count:
            raise reader.invalid("subscribed", f"False while values are left to emit ({self._index} of {count})",
                                 self._subscribed)
        if self._subscribed:
            # Re-create the source's subscription now (subscribe and context only): the load traversal then
            # descends into it and loads its state, and the start traversal starts it.
            handle = self._source.subscribe(self)
            self._holder.subscription = handle
            subscribe_all(handle)
            set_context_all(handle, self.context)

    def subscribe_input(self) -> SubscriptionHandle:
        return self._holder

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._scheduler = context.scheduler if context.has_scheduler else None

    def on_start(self) -> None:
        if self._subscribed:
            return  # recovered with the source subscribed: nothing left to emit
        with self._lock:
            self._wip = False
            # A value waits for demand: no step until the downstream asks (in on_subscribe, or later), as in a
            # run that never stopped, where a step is pending only while there is demand for a value.
            idle = self._index < len(self._values) and not self._demand and self._bad_request is None
        if not idle:
            self._work()

    def request(self, n: int) -> None:
        if self._subscribed:  # once true, it stays true: no lock needed on this path
            super().request(n)
            return
        with self._lock:
            emitting_values = not self._subscribed
            if emitting_values:
                if n > 0:
                    self._demand = add_demand(self._demand, n)
                elif self._bad_request is None:
                    self._bad_request = n
        if emitting_values:
            self._work()
        else:
            super().request(n)

    def on_next(self, value: T) -> None:
        self._downstream.on_next(value)

    # -- emitting the values ----------------------------------------------------------------------------------

    def _work(self) -> None:
        with self._lock:
            if self._wip:
                return  # the running drain reads the new demand
            self._wip = True
        scheduler = self._scheduler
        if scheduler is None:
            try:
                while self._step():
                    pass
            except BaseException:
                self.dispose()  # the subscriber raised out of on_next (rule 2.13): the subscription cannot go on
                raise
        else:
            scheduler.schedule(ActionTask(self._task))

    def _task(self) -> None:
        try:
            more = self._step()
        except BaseException:
            self.dispose()
            raise
        if more:
            scheduler = self._scheduler
            assert scheduler is not None
            scheduler.schedule(ActionTask(self._task))

    def _step(self) -> bool:
        """Emit the next value if there is demand for it, or subscribe to the source after the last one.
        Returns whether to step again (hosted: in another task)."""
        if self._disposed:
            return False
        values = self._values
        with self._lock:
            index = self._index
            bad_request = self._bad_request
            if bad_request is None and index < len(values):
                if not self._demand:
                    self._wip = False  # wait: the next request starts a drain again
                    return False
                if self._demand != LONG_MAX:
                    self._demand -= 1
        if bad_request is not None:
            self._signal_error(non_positive_request_error(bad_request))
            return False
        if index < len(values):
            self._index = index + 1
            self._state.changed = True
            self._downstream.on_next(values[index])
            if index + 1 < len(values):
                with self._lock:
                    if self._demand or self._bad_request is not None:
                        return True
                    self._wip = False  # wait: the next request starts a drain again (no step pending meanwhile)
                return False
        self._subscribe_source()  # after the last value, in the same step (as Reaqtive)
        return False

    def _subscribe_source(self) -> None:
        if self._disposed:
            return
        remaining = 0
        with self._lock:
            bad_request = self._bad_request
            if bad_request is None:
                self._subscribed = True
                remaining, self._demand = self._demand, 0
        if bad_request is not None:  # arrived while the last value was emitted
            self._signal_error(non_positive_request_error(bad_request))
            return
        self._state.changed = True
        if remaining:
            super().request(remaining)  # kept until the source's on_subscribe hands it over
        try:
            handle = self._source.subscribe(self)
            self._holder.subscription = handle  # disposes the handle at once if this stage was disposed meanwhile
            if not self._disposed:
                initialize(handle, self.context)
        except Exception as error:  # binding the source (not a user function on an element): it stops the query
            self._signal_error(error)
