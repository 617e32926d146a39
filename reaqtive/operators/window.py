"""``window`` by count: inner streams of ``count`` consecutive elements, a new one every ``skip`` elements.

One stage, :class:`WindowCount`, registered under two persisted names (they save the same fields, but a count
window and a count-and-skip window are different queries): ``reaqtive:window/count`` (``skip == count``,
consecutive windows) and ``reaqtive:window/count+skip`` (overlapping when ``skip < count``, with gaps of
dropped elements when ``skip > count``). The time-driven overloads live in :mod:`reaqtive.operators.window_time`.

**Windows open eagerly, as in Rx:** the first at the subscription, the next right after the element that
completes a multiple of ``skip`` — so ``window(n)`` over a source whose length is a multiple of ``n`` ends
with an empty window, completed with the source (``buffer(n)`` emits no empty list there; a window, unlike a
list, is already out when it is known to stay empty). When the source completes, every open window completes
(oldest first), then the output.

The shared rules (inner subjects and their ids, demand across the boundary, termination, state of the inner
streams) are in :mod:`reaqtive.operators._inner_subjects`.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.context import OperatorContext
from reaqtive.errors import LimitExceededError
from reaqtive.expression import new_inner_stream
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.operators._inner_subjects import Inner, InnerStreamOperator
from reaqtive.operators.settings import MAX_WINDOW_COUNT, UNLIMITED, read_limit
from reaqtive.streams import LONG_MAX, Subscriber, add_demand
from reaqtive.subjects import MultiSubject
from reaqtive.subscriptions import SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import InnerStream, Query

__all__ = ["WindowCount", "WindowCountSkip", "bind_window", "elements_for"]

T = TypeVar("T")


def elements_for(windows: int, count: int, skip: int, first: int) -> int:
    """How many source elements (counted from the very first) the upstream must be asked for so that window
    number ``first + windows - 1`` completes: window ``k`` opens at element index ``k * skip`` and completes
    once it holds ``count`` elements. With gaps (``skip > count``) the gap after it is included: its elements
    go to no window, and the source's end may lie in it. Capped at ``LONG_MAX`` (rule 3.17)."""
    if windows >= LONG_MAX:
        return LONG_MAX
    last = first + windows - 1
    needed = (last + 1) * skip if skip > count else last * skip + count
    return min(needed, LONG_MAX)


@register_operator("window", frames=8)
def bind_window(query: Query[Any], subscriber: Subscriber[Any]) -> SubscriptionHandle:
    """The binder of ``Query.window(count[, skip])``: arguments ``(source, count, skip)``."""
    args = arguments(query, "source", "count", "skip")  # the stages check the values
    if args.value(2) == args.value(1):
        return WindowCount(query, subscriber)
    return WindowCountSkip(query, subscriber)


class WindowCount(InnerStreamOperator[T], Generic[T]):
    """The running stage of ``Query.window(count)``: consecutive windows of ``count`` elements.

    State: as every inner-stream operator (the window counter, the open windows, the elements of windows still
    waiting for outer demand), plus the number of elements received.

    Demand: translated exactly. ``d`` windows requested ask the upstream for the elements that complete them
    (with overlap: up to the last element of the ``d``-th window; with gaps: up to the start of the window
    after it). Elements that also belong to windows not yet requested are held for them (bounded by
    ``MAX_QUEUE_SIZE``). Inside a window, the subject's per-subscriber demand and bounded buffer apply.

    Limits: ``MAX_WINDOW_COUNT`` (windows open at once: ``ceil(count / skip)``), ``MAX_QUEUE_SIZE``.
    """

    name = "reaqtive:window/count"
    version: Version = (1,)
    kind = "window"

    __slots__ = (
        "_count",
        "_demanded",
        "_first",
        "_index",
        "_max_windows",
        "_requested_to",
        "_skip",
        "_windows",
    )

    def __init__(self, query: Query[Any], downstream: Subscriber[InnerStream[Any]]) -> None:
        args = arguments(query, "source", "count", "skip")
        super().__init__(args.source(0), downstream)
        self._count = args.integer(1, minimum=1)
        self._skip = args.integer(2, minimum=1)
        # state
        self._index = 0  # elements received, ever
        self._windows: deque[Inner] = deque()  # the open windows, oldest first
        # demand (not state: a recovered subscriber requests afresh)
        self._first = 0  # the first window counted against this run's demand
        self._demanded = 0
        self._requested_to = 0  # the element index up to which the upstream has been asked
        self._max_windows = UNLIMITED

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._max_windows = read_limit(context, MAX_WINDOW_COUNT)

    def save_state_core(self, writer: StateWriter) -> None:
        with self._lock:
            self._save_inners(writer)
            writer.write(self._index)

    def load_state_core(self, reader: StateReader) -> None:
        self._load_inners(reader)
        self._index = index = reader.read_int("index")
        self._windows = deque(self._open_inners())
        # The windows follow from the index: number n opens at element n * skip and holds count elements.
        count, skip = self._count, self._skip
        if not (self._source_done or self.is_disposed):
            expected = list(range(max(0, (index - count) // skip + 1), index // skip + 1))
            numbers = [window.number for window in self._windows]
            if numbers != expected or self._next_number != index // skip + 1:
                raise reader.invalid("index", f"the count of elements that opened windows {numbers}", index)
        self._requested_to = self._index
        self._first = self._pending[0].number if self._pending else self._next_number

    # -- demand ------------------------------------------------------------------------------------------------

    def _upstream_amount(self, n: int) -> int:
        self._demanded = demanded = add_demand(self._demanded, n)
        if self._requested_to == LONG_MAX:
            return 0
        target = elements_for(demanded, self._count, self._skip, self._first)
        if target <= self._requested_to:
            return 0
        # unbounded is asked for as LONG_MAX itself, so that the upstream takes its fast path
        amount = LONG_MAX if target == LONG_MAX else target - self._requested_to
        self._requested_to = target
        return amount

    def _recovered_amount(self) -> int:
        # The windows emitted before the restart (numbers below ``first``) were requested then: ask for the
        # elements that complete them.
        target = elements_for(self._first, self._count, self._skip, 0) if self._first else 0
        if target <= self._requested_to:
            return 0
        amount, self._requested_to = target - self._requested_to, target
        return amount

    # -- windows -----------------------------------------------------------------------------------------------

    def _begin(self) -> None:
        if not self._loaded:
            self._open_window()

    def _open_window(self) -> bool:
        windows = self._windows
        if len(windows) >= self._max_windows:
            self._fail(LimitExceededError(self.name, MAX_WINDOW_COUNT, self._max_windows))
            return False
        window = self._new_inner(None)
        windows.append(window)
        return self._open(window)

    def _element(self, value: T) -> None:
        if self._terminated:
            return
        windows = self._windows
        for window in windows:
            if not self._push(window, value):
                return
        index = self._index = self._index + 1
        self._state.changed = True
        skip = self._skip
        if windows and index - windows[0].number * skip == self._count:
            self._end(windows.popleft())
            if self._terminated or self._disposed:
                return
        if index % skip == 0:
            self._open_window()

    def _close_all(self) -> None:
        windows = self._windows
        while windows and not self._terminated:
            self._end(windows.popleft())

    def _forget_all(self) -> None:
        self._windows.clear()

    def _make_stream(self, inner: Inner, subject: MultiSubject[Any, Any], stream_id: str | None) -> InnerStream[Any]:
        return new_inner_stream(subject, stream_id)


class WindowCountSkip(WindowCount[T], Generic[T]):
    """The running stage of ``Query.window(count, skip)`` with ``skip != count``: a window opens every ``skip``
    elements (the first at the subscription) and completes once it holds ``count`` elements; windows overlap
    when ``skip < count``, and elements between windows are dropped when ``skip > count``. State, demand and
    limits: see :class:`WindowCount`."""

    name = "reaqtive:window/count+skip"
    version: Version = (1,)
