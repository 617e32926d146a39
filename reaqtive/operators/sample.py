"""``sample``: at each signal of a sampler stream, emit the latest element of the source (if a new one came)."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.context import OperatorContext
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.scheduler import ITEM_PROCESSING_PRIORITY, ActionTask
from reaqtive.scheduler_interface import Scheduler
from reaqtive.state import StatefulOperatorBase
from reaqtive.streams import (
    LONG_MAX,
    Subscriber,
    Subscription,
    add_demand,
    non_positive_request_error,
    require_not_none,
)
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["Sample"]

T = TypeVar("T")


@register_operator("sample", frames=6)
class Sample(StatefulOperatorBase[T], Generic[T]):
    """The running stage of ``Query.sample``. Two inputs: the source and the sampler.

    * A source element replaces the latest value. A sampler element is a *sample moment*: the latest value, if
      a new one came since the previous moment, becomes the sample, which goes downstream as soon as there is
      demand. The sampler's completion is a last sample moment.
    * The result completes at the first sample moment after the source completed (a value that came before
      then is emitted first), or when the source completes after the sampler did (as Rx.NET; values the
      sampler can no longer sample are dropped). An error of either input goes downstream at once.

    State: the latest value (and whether there is one), the sample waiting for demand (and whether there is
    one), whether the source and the sampler ended, and whether the result is completing.

    Demand: both inputs are requested without bound (sampling consumes the source continuously and keeps only
    the latest value). Downstream, at most one sample waits for demand; a sample moment that finds the previous
    sample still undelivered replaces it with the newer one (latest wins: the older sample is dropped). Hosted,
    a ``request`` that releases a waiting sample delivers it on the scheduler, in the next instant after the
    timers of that instant (so a period's sample moment due then comes first, also after a restart).
    """

    name = "reaqtive:sample"
    version: Version = (1,)

    __slots__ = (
        "_bad_request",
        "_completing",
        "_error",
        "_has_sample",
        "_has_value",
        "_lock",
        "_requested",
        "_sample",
        "_sampler",
        "_sampler_done",
        "_scheduler",
        "_source",
        "_source_done",
        "_value",
        "_wip",
    )

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "sampler")
        self._source: Subscribable[T] = args.source(0)
        self._sampler: Subscribable[Any] = args.source(1)
        self._lock = threading.Lock()
        self._value: T | None = None
        self._has_value = False
        self._sample: T | None = None
        self._has_sample = False
        self._source_done = False
        self._sampler_done = False
        self._completing = False
        self._error: BaseException | None = None
        self._requested = 0
        self._bad_request: int | None = None
        self._wip = False
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
                self._requested = add_demand(self._requested, n)
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
            if self._error is None:
                self._error = error
        self._work(inline=True)

    # -- the drain: the one place that signals downstream, never two at once ---------------------------------

    def _work(self, inline: bool) -> None:
        with self._lock:
            if self._wip:
                return  # the running drain re-reads the state before it stops
            self._wip = True
        scheduler = self._scheduler
        if inline or scheduler is None:
            self._drain()
        else:
            # Queue draining runs after the timers of the same instant (a period sampler's tick): a recovered
            # query schedules both anew, so their order must not depend on which was scheduled first.
            scheduler.schedule(ActionTask(self._drain, priority=ITEM_PROCESSING_PRIORITY))

    def _drain(self) -> None:
        """Each round reads the whole state under the lock and stops in that same locked block when there is
        nothing to do, so a change made by another thread is either seen by this drain or starts a new one."""
        try:
            while True:
                error: BaseException | None = None
                emit = complete = False
                value: Any = None
                with self._lock:
                    if self._disposed:
                        return
                    if self._error is not None:
                        error = self._error
                    elif self._bad_request is not None:
                        error = non_positive_request_error(self._bad_request)
                    elif self._has_sample and self._requested:
                        value, self._sample, self._has_sample = self._sample, None, False
                        if self._requested != LONG_MAX:
                            self._requested -= 1
                        emit = True
                    elif self._completing and not self._has_sample:
                        complete = True
                    else:
                        self._wip = False
                        return
                if error is not None:
                    self._signal_error(error)
                    return
                if complete:
                    self._signal_complete()
                    return
                if emit:
                    self._state.changed = True
                    self._downstream.on_next(value)
        except BaseException:
            self.dispose()  # the subscriber raised out of a signal (rule 2.13): the subscription cannot go on
            raise


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
