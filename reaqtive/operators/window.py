"""``window``: split a stream into inner streams (windows) by count, by time, or by whichever comes first.

The count form runs here; the time forms (``window_time``, ``window_time_or_count``) in
:mod:`reaqtive.operators.window_time`.
"""

from __future__ import annotations

from collections import deque
from datetime import timedelta
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import args_record
from reaqtive.core.binding import register_operator
from reaqtive.core.context import OperatorContext
from reaqtive.core.errors import LimitExceededError
from reaqtive.core.expression import Expression, InnerStreamNode, OperatorCall, new_inner_stream
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.streams import LONG_MAX, Subscriber, add_demand
from reaqtive.core.subjects import MultiSubject
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators._inner_subjects import Inner, InnerStreamOperator
from reaqtive.operators._timing import span_arguments
from reaqtive.operators.settings import MAX_WINDOW_COUNT, UNLIMITED, read_limit

__all__ = ["WindowArgs", "WindowCount", "WindowsStage", "WindowCountSkip", "bind_window", "elements_for", "window"]

T = TypeVar("T")


def window(first: int | timedelta, second: int | timedelta | None = None, /) -> OperatorCall[Any]:
    """Split the elements into inner streams (windows) by count, by time, or by whichever comes first: the
    inner-stream cousin of ``buffer``. Each window is an :class:`~reaqtive.fluent.query.InnerStream` (a query).

    * ``window(count)``: consecutive windows of ``count`` elements;
    * ``window(count, skip)``: a window opens every ``skip`` elements and completes at ``count`` (windows
      overlap when ``skip < count``; elements between windows are dropped when ``skip > count``);
    * ``window(duration)``: a window every ``duration``;
    * ``window(duration, shift)``: a window opens every ``shift`` and completes ``duration`` after it
      opened (a completion before an opening at the same instant);
    * ``window(duration, count)``: a window completes at ``count`` elements or ``duration`` after it
      opened, whichever comes first; a completion by count restarts the timer.

    As in Rx, windows open eagerly (the first at the subscription, the next as soon as the previous one
    completes or its time comes) and are emitted even if they stay empty, so ``window(n)`` over a multiple
    of ``n`` elements ends with an empty window (``buffer(n)`` emits no empty list there: a window, unlike a
    list, is already out when it is known to stay empty):

    >>> from_iterable(range(5)).window(2).flat_map(lambda w: w.to_list()).run(print)  # doctest: +ELLIPSIS
    [0, 1]
    [2, 3]
    [4]
    <...>
    >>> from_iterable(range(4)).window(2).flat_map(lambda w: w.to_list()).run(print)  # doctest: +ELLIPSIS
    [0, 1]
    [2, 3]
    []
    <...>

    Subscribe to a window while it is being emitted (``flat_map`` does). The source's completion completes
    the open windows (oldest first), then the result; an error goes to every window, then to the result.
    Disposing the result completes the open windows. The time forms need a scheduler; an element that arrives
    at the very instant a window closes is still in that window (on virtual time, sources run before timers at
    equal times).

    **State.** The window counter, the open windows (by number; under an environment the subject of window
    ``n`` is ``<prefix>/<n>``), the windows waiting for demand with their elements; by count also the
    elements received, by time the absolute time of the next close/open (a recovered window closes when it
    would have, and missed closes are caught up); ``window(duration, count)`` also the elements in the open
    window, the elements requested upstream and not yet received, and the windows requested and not yet
    received.

    **Demand.** By count, translated: ``n`` windows ask the upstream for the elements that complete them (with
    overlap, up to the last element of the ``n``-th window; with gaps, up to the start of the window after it).
    By time, windows open on the clock: everything upstream once the result was asked for anything
    (``window(duration, count)``: ``n * count`` elements per ``n`` windows). A window goes out only on
    demand; until then it waits with its elements (at most ``MAX_QUEUE_SIZE`` in all, then
    ``LimitExceededError``; so do elements of windows not yet requested). Inside a window, each subscriber has
    its own demand and the bounded buffer of the window's subject. A recovered query asks the upstream again
    for what it had asked for and not received, and nothing more for the windows the recovered downstream asks
    for again.

    Limits: ``MAX_WINDOW_COUNT`` (windows open at once, with ``skip``/``shift``), ``MAX_QUEUE_SIZE``.

    Reaqtive: Window.
    """
    name, args = span_arguments("window", first, second)
    return OperatorCall(name, args)


WindowArgs = args_record("WindowArgs", source="source", count="positive_count", skip="positive_count")


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


class WindowsStage(InnerStreamOperator[T], Generic[T]):
    """What the window stages share (by count here, by time in :mod:`reaqtive.operators.window_time`): the
    open windows, oldest first, at most ``MAX_WINDOW_COUNT`` of them, each an inner stream."""

    kind = "window"

    __slots__ = ("_max_windows", "_windows")

    def __init__(self, source: Subscribable[T], downstream: Subscriber[InnerStreamNode[Any]]) -> None:
        super().__init__(source, downstream)
        self._windows: deque[Inner] = deque()  # the open windows, oldest first
        self._max_windows = UNLIMITED

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._max_windows = read_limit(context, MAX_WINDOW_COUNT)

    def _open_window(self) -> bool:
        windows = self._windows
        if len(windows) >= self._max_windows:
            self._fail(LimitExceededError(self.name, MAX_WINDOW_COUNT, self._max_windows))
            return False
        window = self._new_inner(None)
        windows.append(window)
        return self._open(window)

    def _close_all(self) -> None:
        windows = self._windows
        while windows and not self._terminated:
            self._end(windows.popleft())

    def _forget_all(self) -> None:
        self._windows.clear()

    def _make_stream(
        self, inner: Inner, subject: MultiSubject[Any, Any], stream_id: str | None
    ) -> InnerStreamNode[Any]:
        return new_inner_stream(subject, stream_id)


@register_operator("window", frames=8, builder=window, args=WindowArgs)
def bind_window(query: Expression[Any], subscriber: Subscriber[Any]) -> SubscriptionHandle:
    """The binder of :func:`window` by count: :class:`WindowCount`, or :class:`WindowCountSkip` with a skip."""
    args = WindowArgs.read(query)
    if args.skip == args.count:
        return WindowCount(query, subscriber)
    return WindowCountSkip(query, subscriber)


class WindowCount(WindowsStage[T], Generic[T]):
    """The running stage of :func:`window` by count, consecutive windows (``skip == count``); the shared rules of
    inner subjects (their ids, demand across the boundary, termination, their state) are in
    :mod:`reaqtive.operators._inner_subjects`.

    The open windows follow from the number of elements received (window ``n`` opens at element ``n * skip``),
    which is all it saves beyond the inner streams, and downstream demand translates exactly into upstream
    demand (:func:`elements_for`); that demand is not state, a recovered subscriber requests afresh.
    """

    name = "reaqtive:window/count"
    version: Version = (1,)

    __slots__ = ("_count", "_demanded", "_first", "_index", "_requested_to", "_skip")

    def __init__(self, query: Expression[Any], downstream: Subscriber[InnerStreamNode[Any]]) -> None:
        args = WindowArgs.read(query)
        super().__init__(args.source, downstream)
        self._count = args.count
        self._skip = args.skip
        # state
        self._index = 0  # elements received, ever
        # demand (not state: a recovered subscriber requests afresh)
        self._first = 0  # the first window counted against this run's demand
        self._demanded = 0
        self._requested_to = 0  # the element index up to which the upstream has been asked

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



class WindowCountSkip(WindowCount[T], Generic[T]):
    """The running stage of :func:`window` by count with ``skip != count``: :class:`WindowCount` under its own
    persisted name, since a count window and a count-and-skip window are different queries."""

    name = "reaqtive:window/count+skip"
    version: Version = (1,)
