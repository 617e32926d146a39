"""``sequence_equal``: whether two sources have equal elements in the same order, and the same number of them."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from reaqtive.core.arguments import ArgsRecord
from reaqtive.core.binding import register_operator
from reaqtive.core.context import OperatorContext
from reaqtive.core.errors import LimitExceededError
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
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
from reaqtive.operators._aggregate import optional_callable
from reaqtive.operators.settings import MAX_QUEUE_SIZE, UNLIMITED, read_limit
from reaqtive.state import StatefulOperatorBase

__all__ = ["SequenceEqual", "SequenceEqualArgs", "sequence_equal"]

T = TypeVar("T")


def sequence_equal(
    other: Subscribable[Any], comparer: Callable[[Any, Any], object] | None = None
) -> OperatorCall[bool]:
    """Whether this source and ``other`` have equal elements (``==``, or ``comparer(mine, theirs)``) in the
    same order and as many: ``False`` at the first difference (both sources are then cancelled), ``True``
    when both complete together.

    >>> from_iterable([1, 2]).sequence_equal(from_iterable([1, 2])).run(print)  # doctest: +ELLIPSIS
    True
    <...>

    The answer is ``False`` as soon as a pair differs or one source ends while the other has an element more.
    An exception from ``comparer`` (or ``==``) ends the result, or, under a skip policy, skips the element that
    arrived second: its pair waits for the next element of that source, as if the skipped one had never come.

    Queues: the elements one source delivered ahead of the other wait in a queue. With the host setting
    ``MAX_QUEUE_SIZE = q`` each source is asked for at most what its queue can still hold (``q`` at first,
    topped up as pairs match), so the faster source is slowed to the slower one's pace and the queue never
    exceeds ``q`` (a source sending more than asked gets ``LimitExceededError``); without the setting both
    are asked for everything and the queue is unbounded, as in Reaqtive.

    **State.** ``held: bool``, [``result: bool``], then for each source ``done: bool, queue: list``. Queued
    elements must be state values.

    **Demand.** Nothing before the downstream asks; a result decided without demand (two empty sources) is
    held until demanded.

    Reaqtive: SequenceEqual.
    """
    if not isinstance(other, Subscribable):
        raise TypeError(f"sequence_equal: other must be a query (a Subscribable), got {type(other).__name__}")
    optional_callable(comparer, "sequence_equal", "comparer")
    return OperatorCall("sequence_equal", (other, comparer))


class SequenceEqualArgs(ArgsRecord, source="source", other="source", comparer="optional_function"):
    """The arguments of a ``sequence_equal`` node: ``(source, other, comparer)``, the comparer ``None`` for
    ``==``."""


class _Side(Subscriber[T], Generic[T]):
    """One input: the elements it delivered that the other input has not matched yet, and its subscription.
    Every field is guarded by the operator's lock."""

    __slots__ = ("done", "index", "outstanding", "parent", "pending", "queue", "subscription", "terminated")

    def __init__(self, parent: SequenceEqual[T], index: int) -> None:
        self.parent = parent
        self.index = index
        self.queue: deque[T] = deque()
        self.done = False  # completed (state)
        self.terminated = False  # signalled on_complete/on_error to us: never cancel it (rule 2.3)
        self.subscription: Subscription | None = None
        self.pending = 0  # demand asked before the subscription arrived
        self.outstanding = 0  # requested and not yet delivered (windowed mode only)

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "subscription", "2.13")
        parent = self.parent
        with parent._lock:
            accepted = self.subscription is None and not self.done and not parent._decided and not parent._disposed
            if accepted:
                self.subscription = subscription
                pending, self.pending = self.pending, 0
        if not accepted:
            subscription.cancel()  # rule 2.5, or an input that has nothing more to say
            return
        if pending:
            subscription.request(pending)

    def on_next(self, value: T) -> None:
        self.parent._on_element(self, value)

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "error", "2.13")
        self.parent._on_side_error(self, error)

    def on_complete(self) -> None:
        self.parent._on_side_complete(self)

    def request(self, n: int) -> None:
        """Ask the input for ``n`` more (or remember it until the subscription arrives)."""
        parent = self.parent
        with parent._lock:
            subscription = self.subscription
            if subscription is None:
                self.pending = add_demand(self.pending, n)
                return
        subscription.request(n)


@register_operator("sequence_equal", frames=8, builder=sequence_equal, args=SequenceEqualArgs)
class SequenceEqual(StatefulOperatorBase[bool], Generic[T]):
    """The running stage of :func:`sequence_equal`. One lock guards both inputs' queues and the answer, since
    the two inputs may signal on different threads; nothing is signalled downstream under it.

    In windowed mode (``MAX_QUEUE_SIZE`` set) each input's ``outstanding`` (requested and not yet delivered)
    counts against its queue, so a conforming input never overfills it; top-ups wait until at least half the
    queue is free (``_refill``), so matching pairs do not cost a request each.
    """

    name = "reaqtive:sequence_equal"
    version: Version = (1,)

    __slots__ = (
        "_comparer",
        "_decided",
        "_demanded",
        "_first",
        "_held",
        "_limit",
        "_lock",
        "_refill",
        "_result",
        "_second",
        "_sides",
    )

    def __init__(self, query: Expression[Any], downstream: Subscriber[bool]) -> None:
        super().__init__(downstream)
        args = SequenceEqualArgs.read(query)
        self._first: Subscribable[T] = args.source
        self._second: Subscribable[T] = args.other
        self._comparer: Callable[[T, T], object] | None = args.comparer
        self._lock = threading.Lock()
        self._sides: tuple[_Side[T], _Side[T]] = (_Side(self, 0), _Side(self, 1))
        self._limit = UNLIMITED
        self._refill = 1
        self._demanded = False
        self._decided = False  # the answer is known (or an error was signalled): inputs are no longer heard
        self._held = False
        self._result = False

    def subscribe_inputs(self) -> Iterable[SubscriptionHandle]:
        first, second = self._sides
        return (self._first.subscribe(first), self._second.subscribe(second))

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._limit = limit = read_limit(context, MAX_QUEUE_SIZE)
        self._refill = max(1, limit // 2)

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._held)
        if self._held:
            writer.write(self._result)
        for side in self._sides:
            writer.write(side.done)
            writer.write(list(side.queue))

    def load_state_core(self, reader: StateReader) -> None:
        self._held = reader.read_bool("held")
        if self._held:
            self._result = reader.read_bool("result")
            self._decided = True
        for side in self._sides:
            side.done = reader.read_bool("done")
            side.queue = deque(reader.read_list("queue"))  # the user's elements, not yet compared
        if all(side.queue for side in self._sides):
            raise reader.invalid("queue", "empty on one side at least (elements are compared as they pair up)",
                                 [len(side.queue) for side in self._sides])

    # -- lifecycle and demand ----------------------------------------------------------------------------------

    @property
    def _windowed(self) -> bool:
        return self._limit != UNLIMITED

    def on_start(self) -> None:
        if self._decided:  # recovered holding its answer: the inputs have nothing more to say
            self._release_inputs()

    def on_dispose(self) -> None:
        self._release_inputs()

    def request(self, n: int) -> None:
        if n <= 0:
            self._fail(non_positive_request_error(n))
            return
        with self._lock:
            first = not self._demanded
            self._demanded = True
            held, self._held = self._held, False
            wanted: list[tuple[_Side[T], int]] = []
            if first and not self._decided:
                for side in self._sides:
                    if side.done:
                        continue
                    if self._windowed:
                        amount = self._limit - len(side.queue)
                        side.outstanding = amount
                    else:
                        amount = LONG_MAX
                    if amount > 0:
                        wanted.append((side, amount))
        if held:
            self._emit(self._result)
            return
        for side, amount in wanted:
            side.request(amount)

    # -- the inputs' signals -----------------------------------------------------------------------------------

    def _on_element(self, side: _Side[T], value: T) -> None:
        failure: BaseException | None = None
        result: bool | None = None  # None: still undecided
        emit = False
        refills: list[tuple[_Side[T], int]] = []
        with self._lock:
            if self._decided:
                return
            windowed = self._windowed
            if windowed:
                side.outstanding -= 1
            other = self._sides[1 - side.index]
            if other.queue:
                earlier = other.queue.popleft()
                try:
                    if side.index == 0:
                        equal = value == earlier if self._comparer is None else self._comparer(value, earlier)
                    else:
                        equal = earlier == value if self._comparer is None else self._comparer(earlier, value)
                    equal = bool(equal)  # truthiness inside the try: bool() of a result may raise
                except Exception as error:
                    if self._skips(error, value):  # (asked under the lock: the pairing must not move meanwhile)
                        other.queue.appendleft(earlier)  # it waits for this side's next element
                        if windowed:
                            self._top_up(side, refills)  # the skipped element used a request of this side
                    else:
                        failure = error
                else:
                    if not equal:
                        result = False
                    elif windowed:
                        self._top_up(side, refills)
                        self._top_up(other, refills)
            elif other.done:
                result = False  # this input has an element more than the other
            elif len(side.queue) >= self._limit:
                failure = LimitExceededError(self.name, MAX_QUEUE_SIZE, self._limit)
            else:
                side.queue.append(value)
            self._state.changed = True
            if failure is not None:
                self._decided = True
            elif result is not None:
                emit = self._decide(result)
        if failure is not None:
            self._signal_error(failure)
        elif result is not None:
            self._deliver(result, emit)
        else:
            for target, amount in refills:
                target.request(amount)

    def _on_side_complete(self, side: _Side[T]) -> None:
        result: bool | None = None
        emit = False
        with self._lock:
            side.terminated = True
            if self._decided:
                return
            side.done = True
            self._state.changed = True
            other = self._sides[1 - side.index]
            if other.done:
                result = not side.queue and not other.queue
            elif other.queue:
                result = False  # the other input has an element more than this one
            if result is not None:
                emit = self._decide(result)
        if result is not None:
            self._deliver(result, emit)

    def _on_side_error(self, side: _Side[T], error: BaseException) -> None:
        with self._lock:
            side.terminated = True
            if self._decided:
                return
            self._decided = True
        self._signal_error(error)

    # -- the answer --------------------------------------------------------------------------------------------

    def _top_up(self, side: _Side[T], refills: list[tuple[_Side[T], int]]) -> None:
        """(Under the lock.) Ask ``side`` for what its queue can still hold, once that is worth a request."""
        if side.done:
            return
        free = self._limit - len(side.queue) - side.outstanding
        if free >= self._refill:
            side.outstanding += free
            refills.append((side, free))

    def _decide(self, result: bool) -> bool:
        """(Under the lock.) The answer is known: emit it now (``True``) or hold it until the downstream asks."""
        self._decided = True
        if self._demanded:
            return True
        self._held, self._result = True, result
        return False

    def _deliver(self, result: bool, emit: bool) -> None:
        if emit:
            self._emit(result)
        else:
            self._release_inputs()

    def _emit(self, result: bool) -> None:
        self._downstream.on_next(result)
        self._signal_complete()

    def _fail(self, error: BaseException) -> None:
        with self._lock:
            if self._decided and not self._held:
                return  # the answer or an error is already on its way
            self._decided, self._held = True, False
        self._signal_error(error)

    def _release_inputs(self) -> None:
        """Stop listening to both inputs (cancelling those that did not end by themselves)."""
        cancel: list[Subscription] = []
        with self._lock:
            self._decided = True
            for side in self._sides:
                subscription, side.subscription = side.subscription, None
                if subscription is not None and not side.terminated:
                    cancel.append(subscription)
        for handle in self._inputs:
            handle.dispose()
        for subscription in cancel:
            subscription.cancel()
