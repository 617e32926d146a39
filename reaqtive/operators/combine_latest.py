"""``combine_latest``: whenever any source emits, combine the latest element of every source.

Rx semantics: nothing is emitted until every source has produced an element; from then on each element, from
any source, emits ``selector(latest_1, ..., latest_n)`` (a tuple without a selector). The result completes when
every source has completed, or at once when a source completes without ever having produced an element (no
combination can ever be made; the original Reaqtive waited for the next element of another source instead).
An error from any source, or from the selector, is delivered at once.

Like :mod:`reaqtive.operators.merge`, each source has an input subscriber of its own, and the sources' handles
are the operator's ``inputs``. Elements that cannot be processed at once (no downstream demand, or another
thread is emitting) wait in one queue in arrival order, so the combinations are those of the arrival order;
each input asks its source for at most ``MAX_QUEUE_SIZE`` elements beyond what left the queue (default
:data:`~reaqtive.operators.merge.DEFAULT_QUEUE_SIZE`). Elements that cannot make a combination yet (some source
has none) are processed without demand, and more are requested for them.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import variadic_arguments
from reaqtive.binding import register_operator
from reaqtive.context import OperatorContext
from reaqtive.errors import LimitExceededError
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.operators.merge import _TERMINATED, DEFAULT_QUEUE_SIZE, _Terminated, queue_capacity, replenish_batch
from reaqtive.operators.settings import MAX_QUEUE_SIZE
from reaqtive.state import StatefulOperatorBase, StateShapeError
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
    from collections.abc import Iterable

    from reaqtive.query import Query

__all__ = ["CombineLatest"]

R = TypeVar("R")


class _CombineInput(Subscriber[Any]):
    """The subscriber of one source: its done flag, its queued count and its demand towards the source."""

    __slots__ = ("consumed", "done", "index", "parent", "queued", "received", "upstream")

    def __init__(self, parent: CombineLatest[Any], index: int) -> None:
        self.parent = parent
        self.index = index
        self.done = False
        self.received = False  # an element arrived (processed or queued)
        self.queued = 0  # entries of this input in the shared queue
        self.consumed = 0  # elements processed since the last replenishing request
        self.upstream: Subscription | _Terminated | None = None

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "subscription", "2.13")
        self.parent._input_subscribed(self, subscription)

    def on_next(self, value: Any) -> None:
        self.parent._input_next(self, value)

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "error", "2.13")
        self.parent._input_error(self, error)

    def on_complete(self) -> None:
        self.parent._input_complete(self)

    def __repr__(self) -> str:
        return f"<combine_latest input {self.index}: {self.queued} queued{', done' if self.done else ''}>"


@register_operator("combine_latest", frames=6)
class CombineLatest(StatefulOperatorBase[R], Generic[R]):
    """The running stage of ``Query.combine_latest``; arguments ``(*sources, selector_or_None)``.

    State: per source, whether it completed and its latest element (``None``: none yet), and the elements
    queued for lack of demand (with the index of their source).
    Demand: one combination per processed element once every source has one; bounded per-input queues.
    """

    name = "reaqtive:combine_latest"
    version: Version = (1,)

    __slots__ = (
        "_batch",
        "_capacity",
        "_combine_inputs",
        "_complete_now",
        "_count",
        "_demand",
        "_done",
        "_emitting",
        "_error",
        "_latest",
        "_lock",
        "_missing",
        "_queue",
        "_ready",
        "_selector",
        "_sources",
    )

    def __init__(self, query: Query[Any], downstream: Subscriber[R]) -> None:
        super().__init__(downstream)
        args = variadic_arguments(query, "source", minimum=2, trailing=("selector",))
        sources = args.sources(0, len(args) - 1)
        self._sources: tuple[Subscribable[Any], ...] = tuple(sources)
        self._selector: Callable[..., R] | None = args.optional_function(len(args) - 1)
        self._count = count = len(sources)
        self._combine_inputs = tuple(_CombineInput(self, index) for index in range(count))
        self._lock = threading.Lock()
        self._capacity = DEFAULT_QUEUE_SIZE
        self._batch = replenish_batch(DEFAULT_QUEUE_SIZE)
        # state
        self._latest: list[Any] = [None] * count  # None: no element yet (None is never an element)
        self._missing = count  # sources without an element yet
        self._queue: deque[tuple[int, Any]] = deque()
        # not state
        self._demand = 0
        self._done = 0
        self._emitting = False
        self._ready = False
        self._complete_now = False
        self._error: BaseException | None = None

    def subscribe_inputs(self) -> Iterable[SubscriptionHandle]:
        return [source.subscribe(each) for source, each in zip(self._sources, self._combine_inputs, strict=True)]

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._capacity = queue_capacity(context)
        self._batch = replenish_batch(self._capacity)

    def save_state_core(self, writer: StateWriter) -> None:
        with self._lock:
            writer.write(len(self._combine_inputs))
            writer.write([each.done for each in self._combine_inputs])
            writer.write(self._latest)
            writer.write([[index, value] for index, value in self._queue])

    def load_state_core(self, reader: StateReader) -> None:
        count = reader.read_int("count")
        if count != len(self._combine_inputs):
            raise StateShapeError(
                f"operator {self.name!r}: the state is of a combination of {count} sources, the query combines "
                f"{len(self._combine_inputs)}"
            )
        dones = reader.read_list("dones", length=count, of=bool)
        self._latest = reader.read_list("latest", length=count)  # the user's elements (None: none yet)
        self._queue = deque()
        for record in reader.read_records("queue", 2):
            index = record.read_int("index", maximum=count - 1)
            value = record.read()  # the user's element
            if value is None:
                raise record.invalid("element", "an element (never None)", value)
            self._queue.append((index, value))
        self._missing = sum(1 for value in self._latest if value is None)
        inputs = self._combine_inputs
        for each, done, latest in zip(inputs, dones, self._latest, strict=True):
            each.done = done
            each.received = latest is not None
        for index, _ in self._queue:
            inputs[index].queued += 1
            inputs[index].received = True
        self._done = sum(1 for each in inputs if each.done)
        # A source that completed without an element ends the combination (the emitter had not got to it).
        self._complete_now = any(each.done and not each.received for each in inputs)

    def on_start(self) -> None:
        # Sources that offered their subscription before the start (a hot subject does so at subscribe time,
        # before the settings and the state are known) are asked for elements now, or let go if they completed.
        with self._lock:
            self._ready = True
            early = [each for each in self._combine_inputs if each.upstream is not None]
        for each in early:
            self._prime(each)
        self._drain()

    def on_dispose(self) -> None:
        for each in self._combine_inputs:
            upstream, each.upstream = each.upstream, _TERMINATED
            if upstream is not None:
                upstream.cancel()

    # -- demand from downstream --------------------------------------------------------------------------------

    def request(self, n: int) -> None:
        with self._lock:
            if n <= 0:
                if self._error is None:
                    self._error = non_positive_request_error(n)
            else:
                self._demand = add_demand(self._demand, n)
        self._drain()

    # -- the inputs' signals -----------------------------------------------------------------------------------

    def _input_subscribed(self, each: _CombineInput, subscription: Subscription) -> None:
        with self._lock:
            accepted = each.upstream is None and not each.done and not self._disposed
            if accepted:
                each.upstream = subscription
                ready = self._ready
        if not accepted:
            subscription.cancel()  # a second subscription (rule 2.5), a completed input, or after dispose
        elif ready:
            self._prime(each)

    def _prime(self, each: _CombineInput) -> None:
        """The first request to an input's source: what the queue can hold of it (or cancel it if it completed)."""
        with self._lock:
            upstream = each.upstream
            if each.done:
                each.upstream = _TERMINATED
            each.consumed = 0  # what was processed before counts in what the queue can take now
            wanted = self._capacity - each.queued
        if upstream is None or isinstance(upstream, _Terminated):
            return
        if each.done:
            upstream.cancel()
        elif wanted > 0:
            upstream.request(wanted)

    def _makes_combination(self, index: int) -> bool:
        """Whether an element of input ``index`` produces output (only the emitter changes what this reads)."""
        missing = self._missing
        return missing == 0 or (missing == 1 and self._latest[index] is None)

    def _input_next(self, each: _CombineInput, value: Any) -> None:
        # The per-element path: acquire/release rather than ``with`` (a third of the cost on CPython 3.11;
        # nothing between them can raise), and the lock-free exit of the emitter described in
        # :mod:`reaqtive.operators.merge`.
        index = each.index
        lock = self._lock
        lock.acquire()
        each.received = True
        if (
            self._emitting
            or self._queue
            or not self._ready
            or (not self._demand and self._makes_combination(index))
        ):
            try:
                if each.queued >= self._capacity:
                    if self._error is None:  # the source sent more than it was asked for (rule 1.1)
                        self._error = LimitExceededError(self.name, MAX_QUEUE_SIZE, self._capacity)
                else:
                    self._queue.append((index, value))
                    each.queued += 1
                    self._state.changed = True
                if self._emitting or not self._ready:
                    return
                self._emitting = True
            finally:
                lock.release()
            self._emit_loop()
            return
        # the fast path: processed at once, no queue
        self._emitting = True
        emit = self._makes_combination(index)
        if emit:
            demand = self._demand
            if demand != LONG_MAX:
                self._demand = demand - 1
        lock.release()
        if not self._process(each, value, emit):
            return
        # Leave without the lock: first clear the flag, then look for work that arrived meanwhile.
        self._emitting = False
        if self._queue or self._error is not None or self._complete_now or self._done == self._count:
            self._drain()

    def _input_error(self, each: _CombineInput, error: BaseException) -> None:
        with self._lock:
            each.upstream = _TERMINATED
            if self._error is None:
                self._error = error
        self._drain()

    def _input_complete(self, each: _CombineInput) -> None:
        with self._lock:
            each.upstream = _TERMINATED
            if each.done:
                return
            each.done = True
            self._done += 1
            self._state.changed = True
            if not each.received:
                self._complete_now = True  # it can never have an element: no combination is possible
        self._drain()

    # -- processing, one thread at a time ----------------------------------------------------------------------

    def _process(self, each: _CombineInput, value: Any, emit: bool) -> bool:
        """Take ``value`` as the latest of its input and emit the combination if ``emit``. ``False`` if the
        selector failed (the stage is then terminated)."""
        latest = self._latest
        index = each.index
        if latest[index] is None:
            self._missing -= 1
        latest[index] = value
        self._state.changed = True
        each.consumed += 1
        if each.consumed >= self._batch:
            amount, each.consumed = each.consumed, 0
            upstream = each.upstream
            if upstream is not None:
                upstream.request(amount)
        if not emit:
            return True
        selector = self._selector
        if selector is None:
            result: Any = tuple(latest)
        else:
            try:
                result = selector(*latest)
            except Exception as error:
                self._signal_error(error)
                return False
            if result is None:
                self._signal_error(
                    TypeError("combine_latest: the selector returned None; None is never an element")
                )
                return False
        self._downstream.on_next(result)
        return True

    def _drain(self) -> None:
        with self._lock:
            if self._emitting or not self._ready:
                return
            self._emitting = True
        self._emit_loop()

    def _emit_loop(self) -> None:
        inputs = self._combine_inputs
        queue = self._queue
        while True:
            with self._lock:
                if self._disposed:
                    return
                error = self._error
                complete = self._complete_now
                each: _CombineInput | None = None
                if error is None and not complete:
                    if queue:
                        index, value = queue[0]
                        emit = self._makes_combination(index)
                        if emit and not self._demand:
                            self._emitting = False
                            return
                        queue.popleft()
                        each = inputs[index]
                        each.queued -= 1
                        if emit and self._demand != LONG_MAX:
                            self._demand -= 1
                    elif self._done == len(inputs):
                        complete = True
                    else:
                        self._emitting = False
                        return
            if error is not None:
                self._signal_error(error)
                return
            if complete:
                self._signal_complete()
                return
            assert each is not None
            if not self._process(each, value, emit):
                return
