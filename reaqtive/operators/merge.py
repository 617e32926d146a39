"""``merge``: the elements of several sources, interleaved as they arrive.

Each source is an input of its own: a :class:`_MergeInput` subscribes to it, and the input handles the sources
return are this operator's ``inputs`` (so visitors, state and disposal reach every source, in order). The
number of inputs never changes, so the saved state always has the same shape.

Demand and queues. Each input has a bounded queue of ``MAX_QUEUE_SIZE`` elements (:data:`DEFAULT_QUEUE_SIZE`
when the host sets none) and asks its source for no more than the queue can hold: ``request(capacity)`` at the
start, then more as its elements leave (in batches of three quarters of the capacity). An element that finds
downstream demand, nothing queued and nobody emitting goes straight through (the fast path: no queue, no state
change); otherwise it is queued. Queues drain round-robin, one element per input in turn, so a fast source
cannot starve a slow one. Unbounded downstream demand keeps the queues empty except while another input is
emitting.

Signals are serialized by one lock and an ``emitting`` flag: whichever thread finds nobody emitting delivers,
the others leave their element in the queue for it. An error from any input is delivered at once (ahead of
queued elements, which are dropped); completion once every input has completed and the queues are empty.

How the emitter leaves the fast path without taking the lock again: every other thread makes its change (an
element queued, an error, a completion) under the lock *before* it reads ``emitting``; the emitter clears
``emitting`` *before* it reads those fields. Under the GIL attribute reads and writes are sequentially
consistent, so at least one of the two sees the other: the emitter finds the work, or the other thread finds
nobody emitting; if both do, the lock decides who emits. This saves one lock round trip per element.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from reaqtive.arguments import variadic_arguments
from reaqtive.binding import register_operator
from reaqtive.context import OperatorContext
from reaqtive.errors import LimitExceededError
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.operators.settings import MAX_QUEUE_SIZE, UNLIMITED, read_limit
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

__all__ = ["DEFAULT_QUEUE_SIZE", "Merge", "queue_capacity", "replenish_batch"]

T = TypeVar("T")

DEFAULT_QUEUE_SIZE: Final = 256
"""The per-input queue of multi-input operators when the host sets no ``MAX_QUEUE_SIZE``."""


def queue_capacity(context: OperatorContext) -> int:
    """The per-input queue capacity of a multi-input operator: ``MAX_QUEUE_SIZE``, or the default."""
    limit = read_limit(context, MAX_QUEUE_SIZE)
    return DEFAULT_QUEUE_SIZE if limit == UNLIMITED else limit


def replenish_batch(capacity: int) -> int:
    """After how many consumed elements an input asks its source for that many more."""
    return max(1, capacity - capacity // 4)


class _Terminated:
    """The upstream slot of an input whose source ended the subscription itself (it must not be cancelled from
    inside its own terminal signal, rule 2.3)."""

    __slots__ = ()

    def request(self, n: int) -> None:
        pass

    def cancel(self) -> None:
        pass


_TERMINATED: Final = _Terminated()


class _MergeInput(Subscriber[T], Generic[T]):
    """The subscriber of one source: its queue, its done flag and its demand towards the source."""

    __slots__ = ("consumed", "done", "index", "parent", "queue", "upstream")

    def __init__(self, parent: Merge[T], index: int) -> None:
        self.parent = parent
        self.index = index
        self.queue: deque[T] = deque()
        self.done = False
        self.upstream: Subscription | _Terminated | None = None
        self.consumed = 0  # elements taken since the last replenishing request

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "subscription", "2.13")
        self.parent._input_subscribed(self, subscription)

    def on_next(self, value: T) -> None:
        # The per-element path, written out here to save a call; the protocol is in the module docstring.
        # acquire/release rather than ``with``: a third of the cost on CPython 3.11, and nothing between them
        # can raise.
        parent = self.parent
        lock = parent._lock
        lock.acquire()
        if parent._emitting or parent._queued or not parent._demand:
            parent._input_next_queued(self, value)  # releases the lock
            return
        # the fast path: straight through, no queue, no state change
        parent._emitting = True
        demand = parent._demand
        if demand != LONG_MAX:
            parent._demand = demand - 1
        lock.release()
        parent._downstream.on_next(value)
        consumed = self.consumed + 1
        if consumed < parent._batch:
            self.consumed = consumed
        else:
            parent._replenish(self, consumed)
        # Leave without the lock: first clear the flag, then look for work that arrived meanwhile.
        parent._emitting = False
        if parent._queued or parent._error is not None or parent._done == parent._count:
            parent._drain()

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "error", "2.13")
        self.parent._input_error(self, error)

    def on_complete(self) -> None:
        self.parent._input_complete(self)

    def __repr__(self) -> str:
        return f"<merge input {self.index}: {len(self.queue)} queued{', done' if self.done else ''}>"


@register_operator("merge", frames=6)
class Merge(StatefulOperatorBase[T], Generic[T]):
    """The running stage of ``Query.merge``.

    State: per input, whether it completed and the elements queued for lack of demand; the round-robin cursor
    (the input whose queue drains next), so a recovered merge delivers its queues in the original order.
    Version 1 (without the cursor) still loads, with the cursor at the first input.
    Demand: bounded queues per input, ``request`` upstream only what they can hold (see the module).
    """

    name = "reaqtive:merge"
    version: Version = (2,)
    older_versions = frozenset({(1,)})

    __slots__ = (
        "_batch",
        "_capacity",
        "_count",
        "_cursor",
        "_demand",
        "_done",
        "_emitting",
        "_error",
        "_lock",
        "_merge_inputs",
        "_queued",
        "_ready",
        "_sources",
    )

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = variadic_arguments(query, "source")
        sources = args.sources(0, len(args))
        self._sources: tuple[Subscribable[T], ...] = tuple(sources)
        self._merge_inputs = tuple(_MergeInput(self, index) for index in range(len(sources)))
        self._count = len(sources)
        self._lock = threading.Lock()
        self._capacity = DEFAULT_QUEUE_SIZE
        self._batch = replenish_batch(DEFAULT_QUEUE_SIZE)
        self._demand = 0  # outstanding downstream demand; LONG_MAX is unbounded
        self._queued = 0  # elements in all queues
        self._done = 0  # inputs that completed
        self._cursor = 0  # the input whose queue drains next
        self._emitting = False
        self._ready = False
        self._error: BaseException | None = None

    def subscribe_inputs(self) -> Iterable[SubscriptionHandle]:
        return [
            source.subscribe(merge_input) for source, merge_input in zip(self._sources, self._merge_inputs, strict=True)
        ]

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._capacity = queue_capacity(context)
        self._batch = replenish_batch(self._capacity)

    def save_state_core(self, writer: StateWriter) -> None:
        with self._lock:
            writer.write(len(self._merge_inputs))
            writer.write([merge_input.done for merge_input in self._merge_inputs])
            writer.write([list(merge_input.queue) for merge_input in self._merge_inputs])
            writer.write(self._cursor)

    def load_state_core(self, reader: StateReader) -> None:
        self._load_inputs(reader)
        self._cursor = reader.read_int("cursor", maximum=self._count - 1)  # the input whose queue drains next

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        # (1,): the same fields without the cursor, which starts at the first input
        self._load_inputs(reader)

    def _load_inputs(self, reader: StateReader) -> None:
        count = reader.read_int("count")
        if count != len(self._merge_inputs):
            raise StateShapeError(
                f"operator {self.name!r}: the state is of a merge of {count} sources, the query merges "
                f"{len(self._merge_inputs)}"
            )
        dones = reader.read_list("dones", length=count, of=bool)
        queues = reader.read_list("queues", length=count, of=list)  # lists of the user's elements
        for merge_input, done, queue in zip(self._merge_inputs, dones, queues, strict=True):
            merge_input.done = done
            merge_input.queue = deque(queue)
        self._done = sum(1 for merge_input in self._merge_inputs if merge_input.done)
        self._queued = sum(len(merge_input.queue) for merge_input in self._merge_inputs)

    def on_start(self) -> None:
        # Sources that offered their subscription before the start (a hot subject does so at subscribe time,
        # before the settings and the state are known) are asked for elements now, or let go if they completed.
        with self._lock:
            self._ready = True
            early = [each for each in self._merge_inputs if each.upstream is not None]
        for each in early:
            self._prime(each)
        self._drain()

    def on_dispose(self) -> None:
        for merge_input in self._merge_inputs:
            upstream, merge_input.upstream = merge_input.upstream, _TERMINATED
            if upstream is not None:
                upstream.cancel()  # the subscription may not be the input handle (an adapted publisher)

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

    def _input_subscribed(self, merge_input: _MergeInput[T], subscription: Subscription) -> None:
        with self._lock:
            accepted = merge_input.upstream is None and not merge_input.done and not self._disposed
            if accepted:
                merge_input.upstream = subscription
                ready = self._ready
        if not accepted:
            subscription.cancel()  # a second subscription (rule 2.5), a completed input, or after dispose
        elif ready:
            self._prime(merge_input)

    def _prime(self, merge_input: _MergeInput[T]) -> None:
        """The first request to an input's source: what its queue can hold (or cancel it if it completed)."""
        with self._lock:
            upstream = merge_input.upstream
            if merge_input.done:
                merge_input.upstream = _TERMINATED
            merge_input.consumed = 0  # what went out before counts in what the queue can take now
            wanted = self._capacity - len(merge_input.queue)
        if upstream is None or isinstance(upstream, _Terminated):
            return
        if merge_input.done:
            upstream.cancel()
        elif wanted > 0:
            upstream.request(wanted)

    def _input_next_queued(self, merge_input: _MergeInput[T], value: T) -> None:
        """An element that cannot go straight through (``_MergeInput.on_next`` found the lock taken by it held):
        queue it, and deliver if nobody else is emitting."""
        try:
            self._enqueue(merge_input, value)
            if self._emitting or not self._ready:
                return
            self._emitting = True
        finally:
            self._lock.release()
        self._emit_loop()

    def _enqueue(self, merge_input: _MergeInput[T], value: T) -> None:
        """Queue an element that cannot go straight through (lock held)."""
        queue = merge_input.queue
        if len(queue) >= self._capacity:
            if self._error is None:  # the source sent more than it was asked for (rule 1.1)
                self._error = LimitExceededError(self.name, MAX_QUEUE_SIZE, self._capacity)
            return
        queue.append(value)
        self._queued += 1
        self._state.changed = True

    def _input_error(self, merge_input: _MergeInput[T], error: BaseException) -> None:
        with self._lock:
            merge_input.upstream = _TERMINATED
            if self._error is None:
                self._error = error
        self._drain()

    def _input_complete(self, merge_input: _MergeInput[T]) -> None:
        with self._lock:
            merge_input.upstream = _TERMINATED
            if not merge_input.done:
                merge_input.done = True
                self._done += 1
                self._state.changed = True
        self._drain()

    def _replenish(self, merge_input: _MergeInput[T], consumed: int) -> None:
        """``consumed`` of ``merge_input``'s elements went downstream: ask its source for as many more."""
        merge_input.consumed = 0
        upstream = merge_input.upstream
        if upstream is not None:
            upstream.request(consumed)

    # -- delivery, one thread at a time ------------------------------------------------------------------------

    def _drain(self) -> None:
        with self._lock:
            if self._emitting or not self._ready:
                return
            self._emitting = True
        self._emit_loop()

    def _emit_loop(self) -> None:
        """Deliver queued elements and terminal signals while there is something to do (``emitting`` held)."""
        inputs = self._merge_inputs
        count = self._count
        while True:
            with self._lock:
                if self._disposed:
                    return
                error = self._error
                source: _MergeInput[T] | None = None
                if error is None:
                    if self._queued and self._demand:
                        cursor = self._cursor
                        while not inputs[cursor].queue:
                            cursor = (cursor + 1) % count
                        source = inputs[cursor]
                        value = source.queue.popleft()
                        self._cursor = (cursor + 1) % count  # round-robin: the next input goes first next time
                        self._queued -= 1
                        if self._demand != LONG_MAX:
                            self._demand -= 1
                        self._state.changed = True
                    elif not self._queued and self._done == count:
                        pass  # complete, below
                    else:
                        self._emitting = False
                        return
            if error is not None:
                self._signal_error(error)
                return
            if source is None:
                self._signal_complete()
                return
            self._downstream.on_next(value)
            consumed = source.consumed + 1
            if consumed < self._batch:
                source.consumed = consumed
            else:
                self._replenish(source, consumed)
