"""``buffer`` by count: lists of ``count`` consecutive elements, non-overlapping or every ``skip`` elements.

Two stages, chosen by the binder from the query's arguments ``(source, count, skip)``:

* :class:`BufferCount` (``skip == count``): consecutive, non-overlapping lists. The per-element path is an
  append and a length check.
* :class:`BufferCountSkip` (``skip != count``): a list opens every ``skip`` elements and closes when it holds
  ``count``; lists overlap when ``skip < count`` and leave gaps (dropped elements) when ``skip > count``.

The time-driven overloads live in :mod:`reaqtive.operators.buffer_time`.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.context import OperatorContext
from reaqtive.errors import LimitExceededError
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.operators.settings import MAX_BUFFER_COUNT, MAX_BUFFER_SIZE, UNLIMITED, read_limit
from reaqtive.state import DirtyState, StatefulUnaryOperatorBase
from reaqtive.streams import LONG_MAX, Subscriber, add_demand, non_positive_request_error
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["BufferCount", "BufferCountSkip", "bind_buffer"]

T = TypeVar("T")


def _elements_for(buffers: int, count: int, skip: int, first: int) -> int:
    """How many source elements (counted from the very first) the upstream must be asked for so that buffer
    number ``first + buffers - 1`` closes: buffer ``k`` opens at element index ``k * skip`` and closes once it
    holds ``count`` elements. With gaps (``skip > count``) the gap after it is included too: its elements are
    dropped without needing demand, and the source's end may lie in it. Capped at ``LONG_MAX`` (effectively
    unbounded, rule 3.17)."""
    if buffers >= LONG_MAX:
        return LONG_MAX
    last = first + buffers - 1
    needed = (last + 1) * skip if skip > count else last * skip + count
    return min(needed, LONG_MAX)


def _closed_before(received: int, count: int, skip: int) -> int:
    """How many buffers have closed by count after ``received`` elements."""
    return 0 if received < count else (received - count) // skip + 1


@register_operator("buffer")
def bind_buffer(query: Query[Any], subscriber: Subscriber[Any]) -> SubscriptionHandle:
    """The binder of ``Query.buffer(count[, skip])``: arguments ``(source, count, skip)``."""
    args = arguments(query, "source", "count", "skip")  # the stages check the values
    if args.value(2) == args.value(1):
        return BufferCount(query, subscriber)
    return BufferCountSkip(query, subscriber)


class BufferCount(StatefulUnaryOperatorBase[T, list[T]], Generic[T]):
    """The running stage of ``Query.buffer(count)``: consecutive lists of ``count`` elements; the last, shorter
    one (if not empty) when the source completes. An error drops the partial list.

    State: the partial list.

    Demand: ``request(n)`` asks the upstream for ``n * count`` elements (``LONG_MAX`` stays unbounded), minus
    the elements of a partial list restored from a checkpoint, so the upstream is never asked for more than
    the requested lists need and a partial list at completion always has demand. No per-element accounting.

    Limit: ``MAX_BUFFER_SIZE`` (``count`` larger than it fails at the element that would exceed it).
    """

    name = "reaqtive:buffer/count"
    version: Version = (1,)

    __slots__ = (
        "_buffer",
        "_count",
        "_credit",
        "_limit",
        "_overflow",
        "_saved_buffer",
        "_saved_length",
        "_source",
        "_threshold",
    )

    def __init__(self, query: Query[Any], downstream: Subscriber[list[T]]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "count", "skip")
        self._source: Subscribable[T] = args.source(0)
        self._count = count = args.integer(1, minimum=1)
        args.integer(2, minimum=1)
        self._buffer: list[T] = []
        self._limit = UNLIMITED
        self._threshold = count  # the length at which on_next acts: close the list, or fail the size limit
        self._overflow = False  # count > MAX_BUFFER_SIZE: the threshold is the limit + 1, an error
        self._credit = 0  # elements of a restored partial list, not to be requested again
        self._saved_buffer: list[T] | None = None  # the list as last saved or loaded (see state_changed)
        self._saved_length = 0

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._limit = limit = read_limit(context, MAX_BUFFER_SIZE)
        self._overflow = self._count > limit
        self._threshold = limit + 1 if self._overflow else self._count

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._buffer)
        self._saved_buffer, self._saved_length = self._buffer, len(self._buffer)

    def load_state_core(self, reader: StateReader) -> None:
        self._buffer = reader.read_list("buffer")  # the user's elements
        if len(self._buffer) >= self._count and not self.is_disposed:  # (a failed stage may hold a full one)
            raise reader.invalid("buffer", f"a partial list: fewer than {self._count} elements", self._buffer)
        self._credit = len(self._buffer)
        self._saved_buffer, self._saved_length = self._buffer, len(self._buffer)

    # Dirty tracking without a store per element (the benchmark path is an append and a length check): the
    # partial list only grows until it is emitted and replaced by a new one, so "changed since the last save" is
    # "another list object, or another length", found out when the checkpoint asks.

    def _note_changes(self) -> None:
        buffer = self._buffer
        if buffer is not self._saved_buffer or len(buffer) != self._saved_length:
            self._state.changed = True

    @property
    def state_changed(self) -> bool:
        self._note_changes()
        return self._state.state_changed

    @state_changed.setter
    def state_changed(self, value: bool) -> None:
        self._state.changed = value

    @property
    def state_status(self) -> DirtyState:
        self._note_changes()
        return self._state.status

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def request(self, n: int) -> None:
        if n > 0:
            count = self._count
            if n >= LONG_MAX // count:
                n = LONG_MAX
            else:
                n, self._credit = n * count - self._credit, 0
        super().request(n)

    def on_next(self, value: T) -> None:
        buffer = self._buffer
        buffer.append(value)  # no state_changed here: see _note_changes
        if len(buffer) == self._threshold:
            if self._overflow:
                self._signal_error(LimitExceededError(self.name, MAX_BUFFER_SIZE, self._limit))
                return
            self._buffer = []
            self._downstream.on_next(buffer)

    def on_complete(self) -> None:
        self._upstream_terminated()
        buffer = self._buffer
        if buffer:
            self._buffer = []
            self._downstream.on_next(buffer)
        self._signal_complete()


class BufferCountSkip(StatefulUnaryOperatorBase[T, list[T]], Generic[T]):
    """The running stage of ``Query.buffer(count, skip)`` with ``skip != count``: a list opens at every
    ``skip``-th element (the first at the first element) and is emitted once it holds ``count`` elements. When
    the source completes, the lists still open are emitted (oldest first), then completion. An error drops them.

    State: the number of elements received, the open lists, and whether the source has completed (the open
    lists are then waiting for demand).

    Demand: translated exactly. To close ``d`` more lists the stage needs the elements up to the end of the
    ``d``-th list (with gaps: up to the start of the list after it, so that a source ending in a gap completes),
    and asks the upstream for just those (``LONG_MAX`` stays unbounded). The lists left open at completion
    wait for demand.

    Limits: ``MAX_BUFFER_SIZE`` (elements in one list) and ``MAX_BUFFER_COUNT`` (lists open at once, at most
    ``ceil(count / skip)``).
    """

    name = "reaqtive:buffer/count+skip"
    version: Version = (1,)

    __slots__ = (
        "_buffers",
        "_closed_at_start",
        "_count",
        "_demanded",
        "_emitted",
        "_emitting",
        "_error",
        "_index",
        "_lock",
        "_max_buffers",
        "_max_size",
        "_overflow",
        "_requested_to",
        "_skip",
        "_source",
        "_source_done",
        "_threshold",
    )

    def __init__(self, query: Query[Any], downstream: Subscriber[list[T]]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "count", "skip")
        self._source: Subscribable[T] = args.source(0)
        self._count = count = args.integer(1, minimum=1)
        self._skip = args.integer(2, minimum=1)
        # state
        self._index = 0  # elements received, ever
        self._buffers: deque[list[T]] = deque()
        self._source_done = False
        # limits
        self._max_size = UNLIMITED
        self._max_buffers = UNLIMITED
        self._threshold = count
        self._overflow = False
        # demand (not state: a recovered subscriber requests afresh)
        self._lock = threading.Lock()
        self._closed_at_start = 0  # lists closed before this run started (recovery)
        self._requested_to = 0  # the element index up to which the upstream has been asked
        self._demanded = 0  # lists requested by the downstream in this run (LONG_MAX: unbounded)
        self._emitted = 0  # lists emitted in this run
        self._emitting = False
        self._error: BaseException | None = None

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._max_size = read_limit(context, MAX_BUFFER_SIZE)
        self._max_buffers = read_limit(context, MAX_BUFFER_COUNT)
        self._overflow = self._count > self._max_size
        self._threshold = self._max_size + 1 if self._overflow else self._count

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._index)
        writer.write(list(self._buffers))
        writer.write(self._source_done)

    def load_state_core(self, reader: StateReader) -> None:
        self._index = index = reader.read_int("index")
        self._buffers = deque(reader.read_list("buffers", of=list))  # lists of the user's elements
        self._source_done = reader.read_bool("source done")
        # The lists open at `index` follow from it: one opened at every multiple of skip, not yet full. A failed
        # stage may hold a full one; a completed one has emitted the oldest.
        count, skip = self._count, self._skip
        opened = range(max(0, (index - count) // skip + 1) * skip, index, skip)
        expected = [index - start for start in opened]
        lengths = [len(buffer) for buffer in self._buffers]
        if not self.is_disposed and (
            lengths != expected[len(expected) - len(lengths) :] if self._source_done else lengths != expected
        ):
            raise reader.invalid("buffers", f"the lists open after {index} elements, of lengths {expected}", lengths)
        self._closed_at_start = _closed_before(self._index, self._count, self._skip)
        self._requested_to = self._index

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_start(self) -> None:
        if self._source_done:  # recovered while emitting the lists left open at completion
            # A source that offered its subscription at subscribe time (a hot subject) is let go.
            upstream = self._upstream
            self._upstream_terminated()
            if upstream is not None:
                upstream.cancel()
            self._drain()

    # -- demand ------------------------------------------------------------------------------------------------

    def request(self, n: int) -> None:
        if n <= 0:
            # The upstream signals the rule 3.9 error (serialized with its elements); once it has completed,
            # this stage does.
            if self._source_done:
                self._fail(non_positive_request_error(n))
            else:
                super().request(n)
            return
        with self._lock:
            self._demanded = demanded = add_demand(self._demanded, n)
            if self._source_done or self._requested_to == LONG_MAX:
                amount = 0
            else:
                target = _elements_for(demanded, self._count, self._skip, self._closed_at_start)
                # unbounded is asked for as LONG_MAX itself, so that the upstream takes its fast path
                amount = LONG_MAX if target == LONG_MAX else target - self._requested_to
                self._requested_to = target
        if amount > 0:
            super().request(amount)
        self._drain()

    # -- elements ----------------------------------------------------------------------------------------------

    def on_next(self, value: T) -> None:
        index = self._index
        buffers = self._buffers
        if index % self._skip == 0:
            if len(buffers) >= self._max_buffers:
                self._fail(LimitExceededError(self.name, MAX_BUFFER_COUNT, self._max_buffers))
                return
            buffers.append([])
        for buffer in buffers:
            buffer.append(value)
        self._index = index + 1
        self._state.changed = True
        if buffers and len(buffers[0]) == self._threshold:
            if self._overflow:
                self._fail(LimitExceededError(self.name, MAX_BUFFER_SIZE, self._max_size))
                return
            self._emitted += 1
            self._downstream.on_next(buffers.popleft())

    def on_error(self, error: BaseException) -> None:
        self._upstream_terminated()
        self._fail(error)

    def on_complete(self) -> None:
        self._upstream_terminated()
        with self._lock:
            self._source_done = True
            self._state.changed = True
        self._drain()

    # -- emitting the lists open at completion, and terminal signals, one thread at a time --------------------

    def _fail(self, error: BaseException) -> None:
        with self._lock:
            if self._error is None:
                self._error = error
        self._drain()

    def _drain(self) -> None:
        with self._lock:
            if self._emitting:
                return
            self._emitting = True
        while True:
            with self._lock:
                error = self._error
                buffer = None
                complete = False
                if error is None and self._source_done:
                    buffers = self._buffers
                    if not buffers:
                        complete = True
                    elif self._demanded == LONG_MAX or self._emitted < self._demanded:
                        buffer = buffers.popleft()
                        self._emitted += 1
                        self._state.changed = True
                if error is None and buffer is None and not complete:
                    self._emitting = False
                    return
            if error is not None:
                self._signal_error(error)
                return
            if complete:
                self._signal_complete()
                return
            assert buffer is not None
            self._downstream.on_next(buffer)

