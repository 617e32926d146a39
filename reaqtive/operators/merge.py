"""``merge``: the elements of several sources, interleaved as they arrive."""

from __future__ import annotations

from collections import deque
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import ArgsRecord
from reaqtive.core.binding import register_operator
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.streams import LONG_MAX, Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.operators._emitter import COMPLETE, IDLE, EmitterInput, MultiInputEmitter, input_source
from reaqtive.state import StateShapeError

__all__ = ["Merge", "MergeArgs", "merge"]

T = TypeVar("T")


def merge(*others: Subscribable[T]) -> OperatorCall[T]:
    """The elements of this source and of ``others``, interleaved as they arrive (Rx ``Merge``).

    >>> from_iterable([1, 2]).merge(from_iterable([10, 20])).run(print)  # doctest: +ELLIPSIS
    1
    2
    10
    20
    <...>
    >>> Query.merge(from_iterable("a"), from_iterable("b"), from_iterable("c")).run(print)  # doctest: +ELLIPSIS
    a
    b
    c
    <...>

    Completes when every source has completed; an error from any source is delivered at once (queued
    elements are dropped) and unsubscribes the others. A single source (``xs.merge()``) is allowed: it passes
    its elements through. (The merge of a stream of streams is ``flat_map``'s business.)

    **State.** Per source, whether it completed and the elements queued for lack of demand; the round-robin
    cursor (the source whose queue drains next), so a recovered merge delivers its queues in the original order.

    **Demand.** Each source has a bounded queue of ``MAX_QUEUE_SIZE`` elements (256 when the host sets none) and
    is asked for no more than its queue can hold, then for more as its elements go downstream (in batches of
    three quarters of the queue). Elements go straight through when there is demand and nothing queued; queues
    drain round-robin, one element per source in turn, so one fast source cannot starve the others. Unbounded
    downstream demand keeps the queues empty except while another source's element is being delivered.

    Reaqtive: Merge.
    """
    return OperatorCall("merge", tuple(input_source(other, "merge", i) for i, other in enumerate(others, 1)))


class MergeArgs(ArgsRecord, source="source", others="sources"):
    """The arguments of a ``merge`` node: ``(source, *others)``."""


class _MergeInput(EmitterInput, Generic[T]):
    """The subscriber of one source, with its queue."""

    __slots__ = ("queue",)

    parent: Merge[T]

    def __init__(self, parent: Merge[T], index: int) -> None:
        super().__init__(parent, index)
        self.queue: deque[T] = deque()

    def backlog(self) -> int:
        return len(self.queue)

    def on_next(self, value: T) -> None:
        # The per-element path, written out here to save a call: the fast path of reaqtive.operators._emitter.
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

    def __repr__(self) -> str:
        return f"<merge input {self.index}: {len(self.queue)} queued{', done' if self.done else ''}>"


@register_operator("merge", frames=6, builder=merge, args=MergeArgs)
class Merge(MultiInputEmitter[T], Generic[T]):
    """The running stage of :func:`merge`: one input per source, each with its own queue (so the state always
    has the same shape), drained round-robin by the serialized emitter of :mod:`reaqtive.operators._emitter`.
    Version 1 of the state (without the cursor) still loads, with the cursor at the first input.
    """

    name = "reaqtive:merge"
    version: Version = (2,)
    older_versions = frozenset({(1,)})

    __slots__ = ("_cursor", "_from", "_merge_inputs", "_queued")

    def __init__(self, query: Expression[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        args = MergeArgs.read(query)
        sources = (args.source, *args.others)
        self._merge_inputs = tuple(_MergeInput(self, index) for index in range(len(sources)))
        self._init_inputs(sources, self._merge_inputs)
        self._queued = 0  # elements in all queues
        self._cursor = 0  # the input whose queue drains next
        self._from = self._merge_inputs[0]  # the input of the element being delivered

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

    def _input_next_queued(self, merge_input: _MergeInput[T], value: T) -> None:
        """An element that cannot go straight through (``_MergeInput.on_next`` holds the lock; released here):
        queue it, and deliver if nobody else is emitting."""
        try:
            queue = merge_input.queue
            if len(queue) >= self._capacity:
                self._queue_overflow(self._capacity)
            else:
                queue.append(value)
                self._queued += 1
                self._state.changed = True
            if self._emitting or not self._running:
                return
            self._emitting = True
        finally:
            self._lock.release()
        self._emit_loop()

    def _poll(self) -> Any:
        if self._queued and self._demand:
            inputs = self._merge_inputs
            count = self._count
            cursor = self._cursor
            while not inputs[cursor].queue:
                cursor = (cursor + 1) % count
            source = self._from = inputs[cursor]
            self._cursor = (cursor + 1) % count  # round-robin: the next input goes first next time
            self._queued -= 1
            if self._demand != LONG_MAX:
                self._demand -= 1
            self._state.changed = True
            return source.queue.popleft()
        if not self._queued and self._done == self._count:
            return COMPLETE
        return IDLE

    def _deliver(self, item: Any) -> None:
        self._downstream.on_next(item)
        source = self._from
        consumed = source.consumed + 1
        if consumed < self._batch:
            source.consumed = consumed
        else:
            self._replenish(source, consumed)

