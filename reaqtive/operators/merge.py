"""``merge`` and ``combine_latest``: the elements of several sources, interleaved as they arrive, or combined (the
latest of every source) whenever one emits."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import ArgsRecord, require_callable
from reaqtive.core.binding import register_operator
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.streams import LONG_MAX, Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.operators._emitter import COMPLETE, IDLE, EmitterInput, MultiInputEmitter, input_source
from reaqtive.state import StateShapeError

__all__ = ["CombineLatest", "CombineLatestArgs", "Merge", "MergeArgs", "combine_latest", "merge"]

T = TypeVar("T")
R = TypeVar("R")


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


def combine_latest(
    *others_and_selector: Subscribable[Any] | Callable[..., R], selector: Callable[..., R] | None = None
) -> OperatorCall[Any]:
    """Whenever any source emits, the combination of the latest element of every source (Rx
    ``CombineLatest``): ``xs.combine_latest(ys, selector)``, ``Query.combine_latest(xs, ys, zs, selector)``.

    The selector, the last positional argument or ``selector=``, receives one argument per source, in order;
    without one the combination is a tuple.

    >>> xs, ys = from_iterable([1, 2]), from_iterable([10, 20])
    >>> xs.combine_latest(ys, lambda x, y: x + y).run(print)  # doctest: +ELLIPSIS
    12
    22
    <...>
    >>> Query.combine_latest(from_iterable("a"), from_iterable("xy")).run(print)  # doctest: +ELLIPSIS
    ('a', 'x')
    ('a', 'y')
    <...>

    (Standalone, each source runs to its end as it starts, so ``1`` is gone before ``10`` arrives.) Nothing
    is emitted until every source has an element. Completes when every source has completed, or **at once**
    when a source completes without ever having produced an element (as Rx does; the original Reaqtive waited
    for the next element of another source). An error from a source or from the selector is delivered at
    once and unsubscribes every source. A selector returning ``None`` is a ``TypeError``. Under a skip policy, an
    element on which the selector raised (or returned ``None``) is dropped: its source's latest element stays
    the one before, as if it had never come.

    **State.** Per source, whether it completed and its latest element, and the elements queued for lack of
    demand (with the index of their source).

    **Demand.** One combination per element once every source has one; elements that cannot combine yet are
    taken without demand, and more are requested for them. Elements waiting for demand (or for another thread
    that is emitting) queue in arrival order, so the combinations are those of the arrival order; at most
    ``MAX_QUEUE_SIZE`` per source (256 when the host sets none), and each source is asked for no more than that
    beyond what left the queue.

    Reaqtive: CombineLatest.
    """
    items = list(others_and_selector)
    if selector is None and items and callable(items[-1]) and not isinstance(items[-1], Subscribable):
        selector = items.pop()  # type: ignore[assignment]
    if selector is not None:
        require_callable(selector, "combine_latest", "selector")
    if not items:
        raise ValueError("combine_latest: needs at least one other source (2 to N sources in all)")
    sources = tuple(input_source(source, "combine_latest", i) for i, source in enumerate(items, 1))
    return OperatorCall("combine_latest", (*sources, selector))


class CombineLatestArgs(ArgsRecord, source="source", others="sources", selector="optional_function"):
    """The arguments of a ``combine_latest`` node: ``(source, *others, selector_or_None)``."""

    least_sources = 2


class _CombineInput(EmitterInput):
    """The subscriber of one source: whether it produced an element, and its entries in the shared queue."""

    __slots__ = ("queued", "received")

    parent: CombineLatest[Any]

    def __init__(self, parent: CombineLatest[Any], index: int) -> None:
        super().__init__(parent, index)
        self.received = False  # an element arrived (processed or queued)
        self.queued = 0  # entries of this input in the shared queue

    def backlog(self) -> int:
        return self.queued

    def on_next(self, value: Any) -> None:
        self.parent._input_next(self, value)

    def __repr__(self) -> str:
        return f"<combine_latest input {self.index}: {self.queued} queued{', done' if self.done else ''}>"


@register_operator("combine_latest", frames=6, builder=combine_latest, args=CombineLatestArgs)
class CombineLatest(MultiInputEmitter[R], Generic[R]):
    """The running stage of :func:`combine_latest`: one input per source, one queue shared by all in arrival
    order, emptied by the serialized emitter of :mod:`reaqtive.operators._emitter`. An element is *processed*
    (it becomes its source's latest, and makes a combination once every source has one) only by the emitter, so
    ``_latest`` and ``_missing`` need no lock on the emitting thread.
    """

    name = "reaqtive:combine_latest"
    version: Version = (1,)

    __slots__ = ("_combine_inputs", "_complete_now", "_emit_now", "_latest", "_missing", "_queue", "_selector")

    def __init__(self, query: Expression[Any], downstream: Subscriber[R]) -> None:
        super().__init__(downstream)
        args = CombineLatestArgs.read(query)
        sources = (args.source, *args.others)
        self._selector: Callable[..., R] | None = args.selector
        count = len(sources)
        self._combine_inputs = tuple(_CombineInput(self, index) for index in range(count))
        self._init_inputs(sources, self._combine_inputs)
        # state
        self._latest: list[Any] = [None] * count  # None: no element yet (None is never an element)
        self._missing = count  # sources without an element yet
        self._queue: deque[tuple[int, Any]] = deque()
        # not state
        self._complete_now = False  # a source completed without an element: no combination can ever be made
        self._emit_now = False  # whether the queued element being delivered makes a combination

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

    def _input_done(self, each: EmitterInput) -> None:
        if not self._combine_inputs[each.index].received:
            self._complete_now = True  # it can never have an element: no combination is possible

    def _makes_combination(self, index: int) -> bool:
        """Whether an element of input ``index`` produces output (only the emitter changes what this reads)."""
        missing = self._missing
        return missing == 0 or (missing == 1 and self._latest[index] is None)

    def _input_next(self, each: _CombineInput, value: Any) -> None:
        # The per-element path: acquire/release rather than ``with`` (a third of the cost on CPython 3.11;
        # nothing between them can raise), and the fast path of reaqtive.operators._emitter.
        index = each.index
        lock = self._lock
        lock.acquire()
        each.received = True
        if (
            self._emitting
            or self._queue
            or not self._running
            or (not self._demand and self._makes_combination(index))
        ):
            try:
                if each.queued >= self._capacity:
                    self._queue_overflow(self._capacity)
                else:
                    self._queue.append((index, value))
                    each.queued += 1
                    self._state.changed = True
                if self._emitting or not self._running:
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

    def _process(self, each: _CombineInput, value: Any, emit: bool) -> bool:
        """Take ``value`` as the latest of its input and emit the combination if ``emit``. ``False`` if the
        selector failed (the stage is then terminated). An element the error policy skips is not taken (its
        input's latest stays) and gives back the demand its combination had taken."""
        latest = self._latest
        index = each.index
        previous = latest[index]
        if previous is None:
            self._missing -= 1
        latest[index] = value
        self._state.changed = True
        each.consumed += 1
        if each.consumed >= self._batch:
            self._replenish(each, each.consumed)
        if not emit:
            return True
        selector = self._selector
        if selector is None:
            result: Any = tuple(latest)
        else:
            try:
                result = selector(*latest)
                if result is None:
                    raise TypeError("combine_latest: the selector returned None; None is never an element")
            except Exception as error:
                if not self._skips(error, value):
                    self._signal_error(error)  # (the drainer: at once, as every terminal signal it sends)
                    return False
                latest[index] = previous
                if previous is None:
                    self._missing += 1
                with self._lock:
                    if self._demand != LONG_MAX:
                        self._demand += 1  # the combination's, unused
                return True
        self._downstream.on_next(result)
        return True

    def _poll(self) -> Any:
        if self._complete_now:
            return COMPLETE
        queue = self._queue
        if queue:
            entry = queue[0]
            index = entry[0]
            emit = self._makes_combination(index)
            if emit and not self._demand:
                return IDLE
            queue.popleft()
            self._combine_inputs[index].queued -= 1
            if emit and self._demand != LONG_MAX:
                self._demand -= 1
            self._emit_now = emit
            return entry
        if self._done == self._count:
            return COMPLETE
        return IDLE

    def _deliver(self, item: Any) -> None:
        index, value = item
        self._process(self._combine_inputs[index], value, self._emit_now)
