"""``sample``: at each signal of a sampler stream, emit the latest element of the source (if a new one came)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, Generic, TypeVar

from reaqtive.core.arguments import ArgsRecord, require_positive_duration
from reaqtive.core.binding import register_operator
from reaqtive.core.context import OperatorContext
from reaqtive.core.expression import Expression, OperatorCall, as_expression, source_node
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.scheduler_interface import Scheduler
from reaqtive.core.streams import (
    LONG_MAX,
    Subscriber,
    Subscription,
    add_demand,
    non_positive_request_error,
    require_not_none,
)
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators._emitter import COMPLETE, IDLE, EmitterBase
from reaqtive.scheduler import ITEM_PROCESSING_PRIORITY, ActionTask

__all__ = ["Sample", "SampleArgs", "sample"]

T = TypeVar("T")

_BAD_REQUEST: Final = object()
"""What :meth:`Sample._poll` hands out for a non-positive request: an input's error, even a later one, goes first."""


def sample(sampler: Subscribable[Any] | timedelta) -> OperatorCall[Any]:
    """At each element of ``sampler`` (or every ``sampler`` period, a ``timedelta``), emit the latest element
    of this source if a new one arrived since the previous sample.

    >>> from reaqtive.testing import TestScheduler, on_next, on_completed
    >>> scheduler = TestScheduler()
    >>> xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_next(260, 3),
    ...                                      on_completed(270))
    >>> ticks = scheduler.create_hot_observable(on_next(230, "s"), on_next(250, "s"), on_next(280, "s"))
    >>> scheduler.start(lambda: xs.sample(ticks)).messages
    [OnNext(2)@230, OnNext(3)@280, OnCompleted()@280]

    The sampler's completion is a last sample. The result completes at the first sample after this source
    completed (a value that came before then is emitted first, as Rx), or when this source completes after the
    sampler did (as Rx.NET, dropping the values the sampler can no longer sample; Reaqtive would never complete
    then). ``sample(period)`` is ``sample(interval(period))``: the period starts with the query. Errors of
    either stream go downstream at once.

    **State.** The latest value, the sample waiting for demand, whether each input ended, and whether the
    result is completing.

    **Demand.** Both inputs are requested without bound (only the latest value is kept). At most one sample
    waits for downstream demand; a newer sample replaces it (the older one is dropped). Hosted, a ``request``
    that releases a waiting sample delivers it on the scheduler, in the next instant after the timers of that
    instant (so a period's sample due then comes first, also after a restart).

    Reaqtive: Sample.
    """
    if isinstance(sampler, timedelta):
        period = require_positive_duration(sampler, "sample", "period")
        return OperatorCall("sample", (source_node("interval", (period,)),))
    if not isinstance(sampler, Subscribable):
        raise TypeError(f"sample: sampler must be a query (or a timedelta period), got {type(sampler).__name__}")
    return OperatorCall("sample", (as_expression(sampler),))


@dataclass(frozen=True, slots=True)
class SampleArgs(ArgsRecord):
    """The arguments of a ``sample`` node: ``(source, sampler)``."""

    source: Subscribable[Any]
    sampler: Subscribable[Any]
    checks = ("source", "source")


@register_operator("sample", frames=6, builder=sample, args=SampleArgs)
class Sample(EmitterBase[T], Generic[T]):
    """The running stage of :func:`sample`, with two inputs: a source element replaces the latest value, a
    sampler element moves it to the waiting sample.

    The emitter (:mod:`reaqtive.operators._emitter`) signals downstream; the one waiting sample is its queue. A
    ``request`` drains on the scheduler at item-processing priority, after the timers of the same instant: a
    recovered query schedules both anew, so their order must not depend on which came first.
    """

    name = "reaqtive:sample"
    version: Version = (1,)
    state_fields = ("has_value", "value", "has_sample", "sample", "source_done", "sampler_done", "completing")

    __slots__ = (
        "_bad_request",
        "_completing",
        "_has_sample",
        "_has_value",
        "_sample",
        "_sampler",
        "_sampler_done",
        "_scheduler",
        "_source",
        "_source_done",
        "_value",
    )

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = SampleArgs.read(query)
        self._source: Subscribable[T] = args.source
        self._sampler: Subscribable[Any] = args.sampler
        self._running = True  # a sample goes out whenever it can, before the start too (see on_start)
        self._value: T | None = None
        self._has_value = False
        self._sample: T | None = None
        self._has_sample = False
        self._source_done = False
        self._sampler_done = False
        self._completing = False
        self._bad_request: int | None = None
        self._scheduler: Scheduler | None = None

    def save_state_core(self, writer: StateWriter) -> None:
        with self._lock:
            writer.write(self._has_value)
            writer.write(self._value)
            writer.write(self._has_sample)
            writer.write(self._sample)
            writer.write(self._source_done)
            writer.write(self._sampler_done)
            writer.write(self._completing)

    def load_state_core(self, reader: StateReader) -> None:
        self._has_value = reader.read_bool("has value")
        self._value = reader.read()  # the user's element
        self._has_sample = reader.read_bool("has sample")
        self._sample = reader.read()  # the user's element
        self._source_done = reader.read_bool("source done")
        self._sampler_done = reader.read_bool("sampler done")
        self._completing = reader.read_bool("completing")

    # -- lifecycle -------------------------------------------------------------------------------------------

    def subscribe_inputs(self) -> Iterable[SubscriptionHandle]:
        return (
            self._source.subscribe(_SourceObserver(self)),
            self._sampler.subscribe(_SamplerObserver(self)),
        )

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._scheduler = context.scheduler if context.has_scheduler else None

    def on_start(self) -> None:
        # Recovered about to complete: complete. A sample waiting goes out once there is demand: a recovered
        # downstream that asks again in on_subscribe has started the drain already; one that asks for nothing
        # starts it with its next request, as in a run that never stopped.
        if self._completing and not self._has_sample:
            self._work(inline=False)

    def on_dispose(self) -> None:
        with self._lock:
            self._value = self._sample = None

    # -- downstream demand -----------------------------------------------------------------------------------

    def request(self, n: int) -> None:
        with self._lock:
            if n <= 0:
                if self._bad_request is None:
                    self._bad_request = n
            else:
                self._demand = add_demand(self._demand, n)
            if not (self._has_sample or self._completing or self._bad_request is not None):
                return
        self._work(inline=False)

    # -- the inputs ------------------------------------------------------------------------------------------

    def _on_value(self, value: T) -> None:
        with self._lock:
            self._value = value
            self._has_value = True
        self._state.changed = True

    def _on_source_end(self) -> None:
        with self._lock:
            self._source_done = True
            completing = self._completing = self._sampler_done
        self._state.changed = True
        if completing:
            self._work(inline=True)

    def _on_sample(self, last: bool) -> None:
        with self._lock:
            changed = self._has_value or last or (self._source_done and not self._completing)
            if self._has_value:
                self._sample, self._has_sample = self._value, True  # replaces a sample still waiting for demand
                self._value, self._has_value = None, False
            if last:
                self._sampler_done = True
            if self._source_done:
                self._completing = True  # Rx: the result completes at the first sample after the source's end
        if changed:
            self._state.changed = True
            self._work(inline=True)

    def _on_input_error(self, error: BaseException) -> None:
        with self._lock:
            self._set_error(error)
        self._work(inline=True)

    # -- the drain: the one place that signals downstream, never two at once ---------------------------------

    def _work(self, inline: bool) -> None:
        with self._lock:
            if self._emitting:
                return  # the running drain re-reads the state before it stops
            self._emitting = True
        scheduler = self._scheduler
        if inline or scheduler is None:
            self._run_drain()
        else:
            # Queue draining runs after the timers of the same instant (a period sampler's tick): a recovered
            # query schedules both anew, so their order must not depend on which was scheduled first.
            scheduler.schedule(ActionTask(self._run_drain, priority=ITEM_PROCESSING_PRIORITY))

    def _run_drain(self) -> None:
        try:
            self._emit_loop()
        except BaseException:
            self.dispose()  # the subscriber raised out of a signal (rule 2.13): the subscription cannot go on
            raise

    def _poll(self) -> Any:
        if self._bad_request is not None:
            return _BAD_REQUEST
        if self._has_sample and self._demand:
            value, self._sample, self._has_sample = self._sample, None, False
            if self._demand != LONG_MAX:
                self._demand -= 1
            return value
        if self._completing and not self._has_sample:
            return COMPLETE
        return IDLE

    def _deliver(self, item: Any) -> None:
        if item is _BAD_REQUEST:
            bad_request = self._bad_request
            assert bad_request is not None
            self._signal_error(non_positive_request_error(bad_request))
            return
        self._state.changed = True
        self._downstream.on_next(item)


class _InputObserver(Subscriber[Any]):
    """Subscribes to one input of :class:`Sample` and requests everything from it."""

    __slots__ = ("_parent", "_subscribed")

    def __init__(self, parent: Sample[Any]) -> None:
        self._parent = parent
        self._subscribed = False

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "subscription", "2.13")
        if self._subscribed:
            subscription.cancel()  # rule 2.5
            return
        self._subscribed = True
        subscription.request(LONG_MAX)

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "error", "2.13")
        self._parent._on_input_error(error)


class _SourceObserver(_InputObserver):
    __slots__ = ()

    def on_next(self, value: Any) -> None:
        self._parent._on_value(value)

    def on_complete(self) -> None:
        self._parent._on_source_end()


class _SamplerObserver(_InputObserver):
    __slots__ = ()

    def on_next(self, value: Any) -> None:
        self._parent._on_sample(False)

    def on_complete(self) -> None:
        self._parent._on_sample(True)
