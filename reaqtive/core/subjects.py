"""Subjects: hot multi-input, multi-output streams.

A subject *has* input observers (``create_observer()``; producers push into them) and *is* a subscribable. The
engine's streams are subjects; inner streams of higher-order operators are subjects too.

A hot source cannot slow its producers down, so each subscription of :class:`SimpleSubject` follows a stated
policy (DESIGN decision 1): with unbounded demand, elements go straight through (the fast path); otherwise up
to ``buffer_size`` elements wait for demand, and beyond that the :class:`OverflowPolicy` applies: signal
:class:`~reaqtive.core.errors.BufferOverflowError` (the default: nothing is dropped silently), or drop the newest or
the oldest element.
"""

from __future__ import annotations

import enum
import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar

from reaqtive.core.errors import BufferOverflowError, ObjectDisposedError
from reaqtive.core.streams import (
    LONG_MAX,
    Subscriber,
    Subscription,
    add_demand,
    non_positive_request_error,
    require_not_none,
)
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscribers import NOP_SUBSCRIBER
from reaqtive.core.subscriptions import HandleVisitor, SubscriptionHandle

__all__ = [
    "DEFAULT_SUBJECT_BUFFER_SIZE",
    "MultiSubject",
    "OverflowPolicy",
    "SimpleSubject",
    "UntypedMultiSubject",
    "to_typed",
    "use_query_maker",
]

T = TypeVar("T")
TIn = TypeVar("TIn")
TOut = TypeVar("TOut")

DEFAULT_SUBJECT_BUFFER_SIZE: Final = 1024
"""Elements a subject holds per subscriber that has no demand, before its overflow policy applies."""


class MultiSubject(Subscribable[TOut], Generic[TIn, TOut]):
    """A typed subject: producers push ``TIn`` into observers from :meth:`create_observer`; subscribers
    receive ``TOut``."""

    __slots__ = ()

    @abstractmethod
    def create_observer(self) -> Subscriber[TIn]:
        """An input observer; everything pushed into it goes to the subject's subscribers."""

    @abstractmethod
    def dispose(self) -> None:
        """Release the subject; later use raises :class:`~reaqtive.core.errors.ObjectDisposedError`."""


class UntypedMultiSubject(ABC):
    """A subject whose element types are chosen where it is bound (so event schemas can be versioned)."""

    __slots__ = ()

    @abstractmethod
    def get_observer(self, element_type: type[T]) -> Subscriber[T]:
        """An input observer for elements of ``element_type``."""

    @abstractmethod
    def get_observable(self, element_type: type[T]) -> Subscribable[T]:
        """The output side, seen as a source of ``element_type``."""

    @abstractmethod
    def dispose(self) -> None:
        """Release the subject."""


class _TypedView(MultiSubject[TIn, TOut]):
    __slots__ = ("_in", "_inner", "_out")

    def __init__(self, inner: UntypedMultiSubject, in_type: type[TIn], out_type: type[TOut]) -> None:
        self._inner = inner
        self._in = in_type
        self._out = out_type

    def create_observer(self) -> Subscriber[TIn]:
        return self._inner.get_observer(self._in)

    def subscribe_core(self, observer: Subscriber[TOut]) -> SubscriptionHandle:
        return self._inner.get_observable(self._out).subscribe(observer)

    def dispose(self) -> None:
        self._inner.dispose()


def to_typed(subject: UntypedMultiSubject, in_type: type[TIn], out_type: type[TOut]) -> MultiSubject[TIn, TOut]:
    """View an untyped subject as a typed one; disposing the view disposes the subject."""
    return _TypedView(subject, in_type, out_type)


class OverflowPolicy(enum.Enum):
    """What a hot source does when a subscriber without demand has a full buffer."""

    ERROR = "error"
    """Signal :class:`~reaqtive.core.errors.BufferOverflowError` to that subscriber and cancel it."""
    DROP_NEWEST = "drop_newest"
    """Discard the element that does not fit."""
    DROP_OLDEST = "drop_oldest"
    """Discard the oldest buffered element to make room."""


class _Completed:
    __slots__ = ()


_COMPLETED: Final = _Completed()


class _Input(Subscriber[T]):
    """One producer's input into a subject: accepts one upstream subscription and requests everything."""

    __slots__ = ("_subject", "_subscription")

    def __init__(self, subject: SimpleSubject[T]) -> None:
        self._subject = subject
        self._subscription: Subscription | None = None

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "subscription", "2.13")
        if self._subscription is not None:
            subscription.cancel()  # rule 2.5
            return
        self._subscription = subscription
        subscription.request(LONG_MAX)  # a hot subject takes all; subscribers' buffers apply the policy

    def on_next(self, value: T) -> None:
        self._subject.on_next(value)

    def on_error(self, error: BaseException) -> None:
        self._subject.on_error(error)

    def on_complete(self) -> None:
        self._subject.on_complete()


class SimpleSubject(MultiSubject[T, T], UntypedMultiSubject, Subscriber[T], Generic[T]):
    """An in-memory hot subject that fans elements out to its current subscribers.

    >>> from reaqtive import CallbackSubscriber
    >>> subject = SimpleSubject[int]()
    >>> seen = []
    >>> subject.as_query().map(lambda x: x * 10).run(CallbackSubscriber(seen.append))  # doctest: +ELLIPSIS
    <...>
    >>> subject.on_next(1); subject.on_next(2); subject.on_complete()
    >>> seen
    [10, 20]

    Pushing (``on_next``/``on_error``/``on_complete`` on the subject or on an input observer) must be serial,
    as the specification requires of any publisher (rule 1.3). A subscriber that arrives after the subject
    terminated receives the terminal signal at once. Completion reaches a subscriber after its buffered
    elements; an error cuts ahead of them. Each subscriber's demand is honoured; see the module
    docstring for the buffer and overflow policy.
    """

    __slots__ = (
        "_buffer_size",
        "_disposed",
        "_lock",
        "_name",
        "_overflow",
        "_own_input",
        "_subscriptions",
        "_terminal",
    )

    def __init__(
        self,
        *,
        buffer_size: int = DEFAULT_SUBJECT_BUFFER_SIZE,
        overflow: OverflowPolicy = OverflowPolicy.ERROR,
        name: str = "subject",
    ) -> None:
        if not isinstance(buffer_size, int) or buffer_size <= 0:
            raise ValueError(f"buffer_size must be a positive int, got {buffer_size!r}")
        if not isinstance(overflow, OverflowPolicy):
            raise TypeError(f"overflow must be an OverflowPolicy, got {overflow!r}")
        self._buffer_size = buffer_size
        self._overflow = overflow
        self._name = name
        self._subscriptions: tuple[_SubjectSubscription[T], ...] = ()
        self._terminal: BaseException | _Completed | None = None
        self._own_input: _Input[T] | None = None
        self._disposed = False
        self._lock = threading.Lock()

    @property
    def subscriber_count(self) -> int:
        """How many subscribers are attached."""
        return len(self._subscriptions)

    @property
    def buffer_size(self) -> int:
        """The per-subscriber bound."""
        return self._buffer_size

    @property
    def overflow(self) -> OverflowPolicy:
        """The policy applied when a subscriber's buffer is full."""
        return self._overflow

    # -- output side -------------------------------------------------------------------------------------------

    def subscribe_core(self, observer: Subscriber[T]) -> SubscriptionHandle:
        if self._terminal is None:  # (a subject released after it ended still tells a late subscriber the end)
            self._check_not_disposed()
        subscription = _SubjectSubscription(self, observer)
        with self._lock:
            terminal = self._terminal
            if terminal is None:
                self._subscriptions = (*self._subscriptions, subscription)
        observer.on_subscribe(subscription)
        if terminal is not None:
            subscription.terminate(terminal)
        return subscription

    def _remove(self, subscription: _SubjectSubscription[T]) -> None:
        with self._lock:
            self._subscriptions = tuple(s for s in self._subscriptions if s is not subscription)

    def as_query(self) -> Any:
        """This subject as the source of a query (see :class:`reaqtive.fluent.query.Query`)."""
        make = _QueryMaker.make
        if make is None:  # pragma: no cover - importing reaqtive loads the expression layer
            raise RuntimeError("as_query needs the expression layer (reaqtive.core.expression): import reaqtive")
        return make(self)

    # -- input side --------------------------------------------------------------------------------------------

    def create_observer(self) -> Subscriber[T]:
        self._check_not_disposed()
        return _Input(self)

    def get_observer(self, element_type: type[Any]) -> Subscriber[Any]:
        return self.create_observer()

    def get_observable(self, element_type: type[Any]) -> Subscribable[Any]:
        self._check_not_disposed()
        return self

    def on_subscribe(self, subscription: Subscription) -> None:
        """Used as a subscriber itself, the subject takes everything its (single) upstream offers; a second
        subscription is cancelled (rule 2.5). Use :meth:`create_observer` for several producers."""
        with self._lock:
            if self._own_input is None:
                self._own_input = _Input(self)
            own_input = self._own_input
        own_input.on_subscribe(subscription)

    def on_next(self, value: T) -> None:
        """Push one element to every current subscriber."""
        if value is None:
            raise TypeError("rule 2.13: value must not be None")
        if self._disposed:
            raise ObjectDisposedError(f"subject {self._name!r}")
        if self._terminal is not None:
            return
        for subscription in self._subscriptions:
            # Inlined fast path of push() (a subscriber with unbounded demand and nothing queued): this is the
            # per-element path of every group_by group and engine stream.
            if subscription._fast:
                subscription._downstream.on_next(value)
            else:
                subscription.push(value)

    def on_error(self, error: BaseException) -> None:
        """Terminate every subscriber with ``error``; later subscribers receive it at once."""
        require_not_none(error, "error", "2.13")
        self._terminate(error)

    def on_complete(self) -> None:
        """Complete every subscriber; later subscribers complete at once."""
        self._terminate(_COMPLETED)

    def _terminate(self, terminal: BaseException | _Completed) -> None:
        self._check_not_disposed()
        with self._lock:
            if self._terminal is not None:
                return
            self._terminal = terminal
            subscriptions, self._subscriptions = self._subscriptions, ()
        for subscription in subscriptions:
            subscription.terminate(terminal)

    def dispose(self) -> None:
        """Release the subject: subscribers are detached (without a signal) and later use raises."""
        with self._lock:
            if self._disposed:
                return
            self._disposed = True
            subscriptions, self._subscriptions = self._subscriptions, ()
        for subscription in subscriptions:
            subscription.cancel()

    def _check_not_disposed(self) -> None:
        if self._disposed:
            raise ObjectDisposedError(f"subject {self._name!r}")

    def __repr__(self) -> str:
        return f"<SimpleSubject {self._name!r} subscribers={len(self._subscriptions)}>"


class _QueryMaker:
    """How a subscribable becomes a query node (``Query.from_subscribable``): handed over by the expression layer
    when it loads (:func:`use_query_maker`), because that layer is built on subjects and this module imports
    nothing of it."""

    make: Callable[[Subscribable[Any]], Any] | None = None


def use_query_maker(make: Callable[[Subscribable[Any]], Any]) -> None:
    """Make :meth:`SimpleSubject.as_query` build its node with ``make`` (called by
    :mod:`reaqtive.core.expression` when it loads)."""
    _QueryMaker.make = make


class _SubjectSubscription(SubscriptionHandle, Subscription, Generic[T]):
    """One subscriber of a :class:`SimpleSubject`: its demand, its bounded buffer and its serial drain loop.

    Fast path: once demand is unbounded and the buffer is empty, ``push`` calls the subscriber directly.
    Otherwise elements go through the buffer and a drain loop that never runs twice at once (rule 1.3) and never
    recurses into itself (rule 3.3).
    """

    __slots__ = (
        "_cancelled",
        "_demand",
        "_downstream",
        "_fast",
        "_lock",
        "_missed",
        "_queue",
        "_subject",
        "_terminal",
        "_wip",
    )

    def __init__(self, subject: SimpleSubject[T], downstream: Subscriber[T]) -> None:
        self._subject: SimpleSubject[T] | None = subject
        self._downstream: Subscriber[T] = downstream
        self._demand = 0
        self._queue: deque[T] | None = None  # made on the first buffered element: most subscribers never buffer
        self._terminal: BaseException | _Completed | None = None
        self._fast = False
        self._wip = False
        self._missed = False
        self._cancelled = False
        self._lock = threading.Lock()

    # -- from the subject --------------------------------------------------------------------------------------

    def push(self, value: T) -> None:
        if self._fast:
            self._downstream.on_next(value)
            return
        with self._lock:
            if self._cancelled or self._terminal is not None:
                return
            queue = self._queue
            if queue is None:
                queue = self._queue = deque()
            if len(queue) >= self._subject_buffer_size():
                if not self._overflow(value):
                    return
            else:
                queue.append(value)
        self._drain()

    def _subject_buffer_size(self) -> int:
        subject = self._subject
        return subject.buffer_size if subject is not None else 0

    def _overflow(self, value: T) -> bool:
        """Apply the overflow policy (lock held). Returns whether the drain loop has something new to do."""
        subject = self._subject
        policy = subject.overflow if subject is not None else OverflowPolicy.DROP_NEWEST
        if policy is OverflowPolicy.DROP_NEWEST:
            return False
        if policy is OverflowPolicy.DROP_OLDEST:
            queue = self._queue
            assert queue is not None  # full, so made
            queue.popleft()
            queue.append(value)
            return True
        self._queue = None
        self._terminal = BufferOverflowError(
            f"subject {subject._name if subject is not None else '?'!r}: a subscriber without demand "
            f"let {self._subject_buffer_size()} elements accumulate (overflow policy ERROR); "
            "request more, or choose OverflowPolicy.DROP_OLDEST/DROP_NEWEST"
        )
        return True

    def terminate(self, terminal: BaseException | _Completed) -> None:
        with self._lock:
            if self._cancelled or self._terminal is not None:
                return
            self._terminal = terminal
            self._fast = False
            if not isinstance(terminal, _Completed):
                self._queue = None  # an error cuts ahead of buffered elements (rule 1.4); completion waits
        self._drain()

    # -- Reactive Streams subscription -------------------------------------------------------------------------

    def request(self, n: int) -> None:
        with self._lock:
            if self._cancelled:
                return
            if n <= 0:
                # rule 3.9: an error signal, serialized through the drain loop; buffered elements are dropped
                self._queue = None
                self._terminal = non_positive_request_error(n)
                self._fast = False
            else:
                self._demand = add_demand(self._demand, n)
        self._drain()

    def cancel(self) -> None:
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            self._fast = False
            self._queue = None
            subject, self._subject = self._subject, None
        self._downstream = NOP_SUBSCRIBER  # rule 3.13: drop the reference to the subscriber
        if subject is not None:
            subject._remove(self)

    # -- detaching (a host pausing a subscriber whose elements it can replay) -----------------------------------

    def detach(self) -> None:
        """Stop receiving the subject's elements until :meth:`reattach`, dropping those buffered; the demand is
        kept. For a host that can hand the subscriber what it missed again (the engine replays its log to a
        paused query's readers)."""
        with self._lock:
            self._queue = None
            subject = self._subject
        if subject is not None:
            subject._remove(self)

    def reattach(self) -> None:
        """Receive the subject's elements again (after :meth:`detach`), unless cancelled meanwhile."""
        subject = self._subject
        if subject is None or self._cancelled:
            return
        with subject._lock:
            if subject._terminal is None and self not in subject._subscriptions:
                subject._subscriptions = (*subject._subscriptions, self)

    # -- handle ------------------------------------------------------------------------------------------------

    def dispose(self) -> None:
        self.cancel()

    def accept(self, visitor: HandleVisitor) -> None:
        # A subject's subscriptions are not part of the operator tree: the host saves subjects separately.
        pass

    # -- drain loop --------------------------------------------------------------------------------------------

    def _drain(self) -> None:
        with self._lock:
            if self._wip:
                self._missed = True
                return
            self._wip = True
        while True:
            with self._lock:
                self._missed = False
                if self._cancelled:
                    self._wip = False
                    return
                batch = self._take_batch()
                terminal = self._terminal if not self._queue else None
            downstream = self._downstream
            for value in batch:
                downstream.on_next(value)
            if terminal is not None:
                self._deliver_terminal(terminal)
                return
            with self._lock:
                if self._missed and not self._cancelled:
                    continue
                if self._demand == LONG_MAX and not self._queue and self._terminal is None:
                    self._fast = True
                self._wip = False
                return

    def _take_batch(self) -> list[T]:
        """Take what the demand allows from the buffer (lock held)."""
        queue = self._queue
        if not queue:
            return []
        demand = self._demand
        if demand == LONG_MAX:
            batch = list(queue)
            queue.clear()
            return batch
        count = min(demand, len(queue))
        self._demand = demand - count
        return [queue.popleft() for _ in range(count)]

    def _deliver_terminal(self, terminal: BaseException | _Completed) -> None:
        downstream = self._downstream
        with self._lock:
            self._cancelled = True
            subject, self._subject = self._subject, None
        self._downstream = NOP_SUBSCRIBER
        if subject is not None:
            subject._remove(self)
        if isinstance(terminal, _Completed):
            downstream.on_complete()
        else:
            downstream.on_error(terminal)
