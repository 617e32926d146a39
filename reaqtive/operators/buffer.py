"""``buffer``: lists of elements, closed by count (here) or on the clock (:mod:`reaqtive.operators.buffer_time`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import args_record
from reaqtive.core.binding import register_operator
from reaqtive.core.context import OperatorContext
from reaqtive.core.errors import LimitExceededError
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import OperatorBase, StateReader, StateWriter, Version
from reaqtive.core.streams import LONG_MAX, Subscriber, add_demand, non_positive_request_error
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators._emitter import COMPLETE, IDLE, UnaryEmitterBase
from reaqtive.operators._fusion import run_one_by_one
from reaqtive.operators._timing import span_arguments
from reaqtive.operators.keyed_steps import SKIP, KeyedStep, StepOperatorError, register_keyed_step
from reaqtive.operators.settings import MAX_BUFFER_COUNT, MAX_BUFFER_SIZE, UNLIMITED, read_limit
from reaqtive.operators.window import elements_for
from reaqtive.state import DirtyState, StatefulUnaryOperatorBase

__all__ = ["BufferArgs", "BufferCount", "BufferCountSkip", "bind_buffer", "buffer"]

T = TypeVar("T")


def buffer(first: int | timedelta, second: int | timedelta | None = None, /) -> OperatorCall[list[Any]]:
    """Collect elements into lists, by count, by time, or by whichever of the two comes first.

    * ``buffer(count)``: consecutive lists of ``count`` elements; at completion the last, shorter list
      (if not empty).
    * ``buffer(count, skip)``: a list opens every ``skip`` elements and closes at ``count`` elements: they
      overlap when ``skip < count`` and leave out elements when ``skip > count``. At completion the open
      lists are emitted.
    * ``buffer(duration)``: a list every ``duration``, from the subscription on, **empty lists included**
      (as in Rx); at completion the current list, even if empty.
    * ``buffer(duration, shift)``: a list opens every ``shift`` and closes ``duration`` after it opened;
      when a close and an open fall on the same instant, the close comes first.
    * ``buffer(duration, count)``: a list closes when it holds ``count`` elements or ``duration`` after it
      opened, whichever comes first; a close by count restarts the timer (Rx's ``Buffer(timeSpan, count)``).

    >>> from_iterable(range(7)).buffer(3).run(print)  # doctest: +ELLIPSIS
    [0, 1, 2]
    [3, 4, 5]
    [6]
    <...>
    >>> from_iterable(range(5)).buffer(3, 2).run(print)  # doctest: +ELLIPSIS
    [0, 1, 2]
    [2, 3, 4]
    [4]
    <...>

    On virtual time (one tick is a second), a list every 50 seconds from the subscription at 200:

    >>> from datetime import timedelta
    >>> from reaqtive.testing import TestScheduler, on_next, on_completed
    >>> scheduler = TestScheduler()
    >>> xs = scheduler.create_hot_observable(on_next(210, 1), on_next(240, 2), on_next(280, 3), on_completed(320))
    >>> scheduler.start(lambda: xs.buffer(timedelta(seconds=50))).messages
    [OnNext([1, 2])@250, OnNext([3])@300, OnNext([])@320, OnCompleted()@320]

    An element that arrives at the very instant a list closes is still in that list (sources run before
    timers at equal times). An error from the source drops the open lists. The time-driven forms need a
    scheduler in the operator context.

    **State.** The open list(s); by count also the number of elements received (with ``skip``), and whether the
    source completed (the lists open then wait for demand); by time also the absolute time of the next
    close/open (a recovered buffer closes when it would have, and catches up on closes it missed while the
    process was down), the closed lists waiting for demand, whether the source completed, and the upstream
    demand (below). Inside a keyed ``group_by``, by count, one field per key: its open list(s) (with ``skip``,
    after its element count).

    **Demand.** By count, translated: ``n`` lists ask the upstream for ``n * count`` elements (``LONG_MAX``
    stays unbounded), minus the elements of a partial list restored from a checkpoint, so a partial list at
    completion always has demand; with ``skip``, exactly the elements that close ``n`` more lists, and the gap
    after them (so a source that ends in a gap completes); the lists open at completion wait for demand. By
    time, lists close on the clock whatever the demand: the upstream is asked for everything (``LONG_MAX``)
    once the downstream has asked for anything (how many elements fit in a time span is not the buffer's to
    know), closed lists wait for demand in a queue of at most ``MAX_QUEUE_SIZE`` lists beyond the outstanding
    demand (256 when the host sets none) and one more fails the query with ``LimitExceededError`` (the
    specification's "buffer up to a bound, then error"). Duration-or-count asks the upstream for ``n * count``
    elements per ``n`` lists (a list closed by time takes one list of demand too), and queues as the time
    forms do. A recovered downstream asks again only for the lists it had requested and not received, so the
    time forms save their upstream demand (whether everything was asked for; for duration-or-count the
    elements requested and not received and the downstream's outstanding lists), ask the upstream for it again
    when they start, and take the first lists the recovered downstream asks for as the ones already translated.

    **Limits.** ``MAX_BUFFER_SIZE`` (elements in one list; a ``count`` above it fails at the element that
    exceeds it), ``MAX_BUFFER_COUNT`` (lists open at once, with ``skip``/``shift``: at most
    ``ceil(count / skip)``, ``ceil(duration / shift)``); exceeding one is a ``LimitExceededError`` through
    ``on_error``.

    Reaqtive: Buffer.
    """
    name, args = span_arguments("buffer", first, second)
    return OperatorCall(name, args)


BufferArgs = args_record("BufferArgs", source="source", count="positive_count", skip="positive_count")


def _open_lengths(index: int, count: int, skip: int) -> list[int]:
    """The lengths of the lists open after ``index`` elements, oldest first: one opened at every multiple of
    ``skip``, not yet full."""
    opened = range(max(0, (index - count) // skip + 1) * skip, index, skip)
    return [index - start for start in opened]


def _size_threshold(context: OperatorContext, count: int) -> tuple[int, bool, int]:
    """``(MAX_BUFFER_SIZE, whether count exceeds it, the length at which a list closes or fails)``: a count
    above the limit fails at the element that exceeds it."""
    limit = read_limit(context, MAX_BUFFER_SIZE)
    return limit, count > limit, min(count, limit + 1)


def _closed_before(received: int, count: int, skip: int) -> int:
    """How many buffers have closed by count after ``received`` elements."""
    return 0 if received < count else (received - count) // skip + 1


@register_operator("buffer", builder=buffer, args=BufferArgs)
def bind_buffer(query: Expression[Any], subscriber: Subscriber[Any]) -> SubscriptionHandle:
    """The binder of :func:`buffer` by count: :class:`BufferCount` when ``skip == count``, else
    :class:`BufferCountSkip`."""
    args = BufferArgs.read(query)
    if args.skip == args.count:
        return BufferCount(query, subscriber)
    return BufferCountSkip(query, subscriber)


class BufferCount(StatefulUnaryOperatorBase[T, list[T]], Generic[T]):
    """The running stage of :func:`buffer` by count with ``skip == count``: consecutive lists. The per-element
    path is an append and a length check: demand is translated in ``request``, with no per-element accounting,
    and the list's dirtiness is found out when a checkpoint asks (see ``_note_changes``)."""

    timeless = True
    name = "reaqtive:buffer/count"
    version: Version = (1,)
    state_fields = ("buffer",)

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

    def __init__(self, query: Expression[Any], downstream: Subscriber[list[T]]) -> None:
        super().__init__(downstream)
        args = BufferArgs.read(query)
        self._source: Subscribable[T] = args.source
        self._count = count = args.count
        self._buffer: list[T] = []
        self._limit = UNLIMITED
        self._threshold = count  # the length at which on_next acts: close the list, or fail the size limit
        self._overflow = False  # count > MAX_BUFFER_SIZE: the threshold is the limit + 1, an error
        self._credit = 0  # elements of a restored partial list, not to be requested again
        self._saved_buffer: list[T] | None = None  # the list as last saved or loaded (see state_changed)
        self._saved_length = 0

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._limit, self._overflow, self._threshold = _size_threshold(context, self._count)

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

    def on_next_run(  # noqa: PLR0917  (the run's state, as every run reader takes it)
        self, values: Sequence[T], start: int, end: int, cursor: Any, pos0: int, source: OperatorBase[Any],
        emit: Callable[[list[T]], object],
    ) -> int:
        """Elements ``values[start:end]`` from the engine's stream reader reading a run of logged events, as
        :meth:`on_next` takes them one by one (the contract of
        :meth:`~reaqtive.operators._fusion.FusedEntry.on_next_run`): a slice at a time up to the element that
        closes a list, ``cursor.pos`` standing at that element when the list goes to ``emit``, and at the last
        element at the end. Returns the index of the first element not taken (less than ``end`` once ``source``
        was disposed, checked before the first element and after each list)."""
        if self._overflow:  # the list fails at the limit: element by element
            return run_one_by_one(values, start, end, cursor, pos0, source, self.on_next)
        threshold = self._threshold
        i = start
        while True:
            if source._disposed:
                return i
            buffer = self._buffer
            closing = i + threshold - len(buffer)
            if closing > end:  # the list stays open past the run
                buffer += values[i:end]
                break
            buffer += values[i:closing]
            i = closing
            cursor.pos = pos0 + i - 1
            self._buffer = []
            emit(buffer)
        if end > start:
            cursor.pos = pos0 + end - 1
        return end

    def on_complete(self) -> None:
        self._upstream_terminated()
        buffer = self._buffer
        if buffer:
            self._buffer = []
            self._downstream.on_next(buffer)
        self._signal_complete()


class BufferCountSkip(UnaryEmitterBase[T, list[T]], Generic[T]):
    """The running stage of :func:`buffer` by count with ``skip != count``: a list opens at every ``skip``-th
    element (the first at the first element) and is emitted once it holds ``count`` elements. Per element it runs
    its keyed step (:class:`BufferCountSkipStep`) on its field ``[index, *open lists]``, saved as ``index``, the
    open lists (oldest first), then whether the source completed.

    While the source runs, a list is emitted from ``on_next``: the upstream was asked for exactly the elements
    that close the lists the downstream requested (``elements_for``), so a full list always has demand. Once
    the source completed, the lists still open go out (oldest first) through the serialized emitter of
    :mod:`reaqtive.operators._emitter` as demand comes, then completion. ``_demanded`` (lists requested in this
    run, cumulative: the upstream target follows from it) and ``_emitted`` take the place of the emitter's
    ``_demand``.
    """

    timeless = True
    name = "reaqtive:buffer/count+skip"
    version: Version = (1,)
    state_fields = ("index", "buffers", "source_done")

    __slots__ = (
        "_closed_at_start",
        "_count",
        "_demanded",
        "_emitted",
        "_field",
        "_requested_to",
        "_skip",
        "_source",
        "_source_done",
        "_step",
    )

    def __init__(self, query: Expression[Any], downstream: Subscriber[list[T]]) -> None:
        super().__init__(downstream)
        args = BufferArgs.read(query)
        self._source: Subscribable[T] = args.source
        self._count = args.count
        self._skip = args.skip
        self._step = BufferCountSkipStep(args.count, args.skip)
        # state
        self._field: list[Any] = [0]  # elements received, ever, then the open lists, oldest first
        self._source_done = False
        # demand (not state: a recovered subscriber requests afresh)
        self._running = True  # the emitter has work only once the source completed: no need to wait for the start
        self._closed_at_start = 0  # lists closed before this run started (recovery)
        self._requested_to = 0  # the element index up to which the upstream has been asked
        self._demanded = 0  # lists requested by the downstream in this run (LONG_MAX: unbounded)
        self._emitted = 0  # lists emitted in this run

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._step.set_context(context)  # (the limits)

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._field[0])
        writer.write(self._field[1:])
        writer.write(self._source_done)

    def load_state_core(self, reader: StateReader) -> None:
        index = reader.read_int("index")
        buffers = reader.read_list("buffers", of=list)  # lists of the user's elements
        self._source_done = reader.read_bool("source done")
        self._field = [index, *buffers]
        # The lists open at `index` follow from it (a failed stage may hold a full one; a completed one has
        # emitted the oldest).
        expected = _open_lengths(index, self._count, self._skip)
        lengths = [len(buffer) for buffer in buffers]
        if not self.is_disposed and (
            lengths != expected[len(expected) - len(lengths) :] if self._source_done else lengths != expected
        ):
            raise reader.invalid("buffers", f"the lists open after {index} elements, of lengths {expected}", lengths)
        self._closed_at_start = _closed_before(index, self._count, self._skip)
        self._requested_to = index

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
                self._request_upstream(n)
            return
        with self._lock:
            self._demanded = demanded = add_demand(self._demanded, n)
            if self._source_done or self._requested_to == LONG_MAX:
                amount = 0
            else:
                target = elements_for(demanded, self._count, self._skip, self._closed_at_start)
                # unbounded is asked for as LONG_MAX itself, so that the upstream takes its fast path
                amount = LONG_MAX if target == LONG_MAX else target - self._requested_to
                self._requested_to = target
        if amount > 0:
            self._request_upstream(amount)
        self._drain()

    # -- elements ----------------------------------------------------------------------------------------------

    def on_next(self, value: T) -> None:
        try:
            self._field, output = self._step.next(self._field, value)
        except StepOperatorError as error:  # a limit
            self._fail(error.error)
            return
        self._state.changed = True
        if output is not SKIP:
            self._emitted += 1
            self._downstream.on_next(output)

    def on_complete(self) -> None:
        self._upstream_terminated()
        with self._lock:
            self._source_done = True
            self._state.changed = True
        self._drain()

    # -- emitting the lists open at completion, and terminal signals ---------------------------------------------

    def _poll(self) -> Any:
        if not self._source_done:
            return IDLE  # on_next emits while the source runs
        field = self._field
        if len(field) == 1:
            return COMPLETE
        if self._demanded == LONG_MAX or self._emitted < self._demanded:
            self._emitted += 1
            self._state.changed = True
            return field.pop(1)
        return IDLE


class BufferCountStep(KeyedStep):
    """:class:`BufferCount` for one key of a keyed chain: the field is the partial list (the key's own, appended
    to in place), ``None`` when empty."""

    __slots__ = ("_count", "_limit", "_overflow", "_threshold")

    in_place = True

    def __init__(self, count: int) -> None:
        self._count = self._threshold = count
        self._limit = UNLIMITED
        self._overflow = False

    def set_context(self, context: OperatorContext) -> None:
        self._limit, self._overflow, self._threshold = _size_threshold(context, self._count)

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        if state is None:
            buffer = [value]
        else:
            buffer = state
            buffer.append(value)
        if len(buffer) == self._threshold:
            if self._overflow:
                raise StepOperatorError(LimitExceededError(BufferCount.name, MAX_BUFFER_SIZE, self._limit))
            return None, buffer
        return buffer, SKIP

    def complete(self, state: Any) -> tuple[Any, ...]:
        return () if state is None else (state,)

    def check(self, state: Any) -> bool:
        return state is None or (type(state) is list and 0 < len(state) < self._count)


class BufferCountSkipStep(KeyedStep):
    """:class:`BufferCountSkip` for one key of a keyed chain: the field is ``[index, *open lists]`` (elements
    received, then the lists open, oldest first; the key's own, changed in place), ``None`` before the first
    element. Lists open every ``skip`` elements and close at ``count``, so at most one closes per element."""

    __slots__ = ("_count", "_max_buffers", "_max_size", "_overflow", "_skip", "_threshold")

    in_place = True

    def __init__(self, count: int, skip: int) -> None:
        self._count = self._threshold = count
        self._skip = skip
        self._max_size = UNLIMITED
        self._max_buffers = UNLIMITED
        self._overflow = False

    def set_context(self, context: OperatorContext) -> None:
        self._max_size, self._overflow, self._threshold = _size_threshold(context, self._count)
        self._max_buffers = read_limit(context, MAX_BUFFER_COUNT)

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        field: list[Any] = [0] if state is None else state
        index = field[0]
        if index % self._skip == 0:
            if len(field) - 1 >= self._max_buffers:
                raise StepOperatorError(LimitExceededError(BufferCountSkip.name, MAX_BUFFER_COUNT, self._max_buffers))
            field.append([])
        for position in range(1, len(field)):
            field[position].append(value)
        field[0] = index + 1
        if len(field) > 1 and len(field[1]) == self._threshold:
            if self._overflow:
                raise StepOperatorError(LimitExceededError(BufferCountSkip.name, MAX_BUFFER_SIZE, self._max_size))
            return field, field.pop(1)
        return field, SKIP

    def complete(self, state: Any) -> tuple[Any, ...]:
        return () if state is None else tuple(state[1:])

    def check(self, state: Any) -> bool:
        if state is None:
            return True
        if type(state) is not list or not state or type(state[0]) is not int or state[0] < 1:
            return False
        buffers = state[1:]
        if not all(type(buffer) is list for buffer in buffers):
            return False
        return [len(buffer) for buffer in buffers] == _open_lengths(state[0], self._count, self._skip)


@register_keyed_step("buffer")
def buffer_step(query: Expression[Any]) -> KeyedStep:
    """The keyed step of a ``buffer`` node by count (the time forms are other operators and keep the general
    path)."""
    args = BufferArgs.read(query)
    if args.skip == args.count:
        return BufferCountStep(args.count)
    return BufferCountSkipStep(args.count, args.skip)
