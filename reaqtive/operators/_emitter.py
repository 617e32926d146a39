"""The serialized emitter: the one drain loop, bounded input queues and terminal delivery of the stages that
merge or buffer (``merge``, ``combine_latest``, the buffers, ``debounce``, ``sample``, the higher-order stages).

**One drainer at a time.** Timers, several sources and ``request`` may call a stage on different threads, but
its signals must never overlap (rule 1.3). The stage keeps everything it has to deliver in fields guarded by
``_lock``; whichever thread finds ``_emitting`` clear (and the stage ``_running``) sets it and becomes the
*drainer*; every other thread makes its change under the lock (an element queued, an error, a completion, more
demand) and leaves it to the drainer, which re-reads the fields under the lock before it stops. So nothing is
lost and nothing overlaps, and a signal sent from inside ``on_next`` (a ``request``) only adds work: the stack
stays bounded (rule 3.3).

**The loop** (:meth:`Emitter._emit_loop`). Each round, under the lock: stop if the stage is disposed (leaving
``_emitting`` set, so nobody emits after dispose); take ``_error`` if one is set (an error goes ahead of queued
elements, which are dropped); else ask :meth:`Emitter._poll` for the next thing to deliver: an item (it took the
item out of its queue and the demand for it), :data:`COMPLETE` (nothing is left to deliver and the end is known:
completion comes after every queued element) or :data:`IDLE` (nothing to do: the loop clears ``_emitting`` with
:meth:`Emitter._leave` in the same locked block and returns). Then, without the lock: ``on_error`` or
``on_complete`` (and the loop ends), or :meth:`Emitter._deliver` (``on_next``, plus what the stage does per
element). The lock is taken with ``acquire``/``release`` (a third of the cost of ``with`` on CPython 3.11),
which pays for the two hook calls: the loop costs no more per element than the hand-written loops it replaced.

**A fast path** (an element that finds demand, nothing queued and nobody emitting goes straight through, as in
``merge``) may take the drainer role under the lock (``_emitting = True``, demand taken), deliver without it,
and leave without taking the lock again: it first clears ``_emitting``, then looks for work that arrived
meanwhile (queued elements, an error, the end) and calls :meth:`Emitter._drain` if there is any. Every other
thread makes its change under the lock *before* it reads ``_emitting``; under the GIL attribute reads and
writes are sequentially consistent, so at least one of the two sees the other: the fast path finds the work,
or the other thread finds nobody emitting; if both do, the lock decides who drains.

**Demand.** ``_demand`` is the downstream's outstanding demand (``LONG_MAX``: unbounded, never decremented);
:meth:`Emitter.request` adds to it, or records the rule 3.9 error for a non-positive ``n`` (delivered like any
error), then drains. ``_poll`` decrements it for each element it hands out.

**Errors.** The first error wins (:meth:`Emitter._set_error`, lock held; :meth:`Emitter._fail` takes the lock
and drains). A queue that outgrows its bound is an error too (:meth:`Emitter._queue_overflow`:
:class:`~reaqtive.core.errors.LimitExceededError` for ``MAX_QUEUE_SIZE``). A user function's error goes through the
query's error policy: ``_user_error`` outside the lock (stopping is :meth:`Emitter._fail`), or, under the lock,
``_skips`` and then :meth:`Emitter._set_error` unless the element is skipped.

**Bases.** :class:`EmitterBase` (several inputs or none) and :class:`UnaryEmitterBase` (one input; its
``request`` is the downstream's, and :meth:`UnaryEmitterBase._request_upstream` asks the source) declare the
fields. :class:`MultiInputEmitter` adds inputs that each ask their source for no more than their queue holds
(:data:`DEFAULT_QUEUE_SIZE` unless the host sets ``MAX_QUEUE_SIZE``), replenished in batches
(:func:`replenish_batch`) as their elements leave.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections import deque
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from reaqtive.core.errors import LimitExceededError
from reaqtive.core.expression import Expression, as_expression
from reaqtive.core.operator import OperatorBase, UnaryOperatorBase
from reaqtive.core.streams import (
    LONG_MAX,
    Subscriber,
    Subscription,
    add_demand,
    non_positive_request_error,
    require_not_none,
)
from reaqtive.core.subscribable import Subscribable
from reaqtive.operators.settings import MAX_QUEUE_SIZE, UNLIMITED, read_limit
from reaqtive.state import StatefulOperatorBase, StatefulUnaryOperatorBase

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from reaqtive.core.context import OperatorContext
    from reaqtive.core.subscriptions import SubscriptionHandle

__all__ = [
    "COMPLETE",
    "DEFAULT_QUEUE_SIZE",
    "IDLE",
    "TERMINATED",
    "Emitter",
    "EmitterBase",
    "EmitterInput",
    "MultiInputEmitter",
    "PullingEmitterBase",
    "Terminated",
    "UnaryEmitterBase",
    "input_source",
    "queue_capacity",
    "replenish_batch",
]

R = TypeVar("R")
S = TypeVar("S")

DEFAULT_QUEUE_SIZE: Final = 256
"""The queue bound of merging and buffering stages (per input, or of waiting lists or streams) when the host sets
no ``MAX_QUEUE_SIZE``."""

IDLE: Final = object()
""":meth:`Emitter._poll`: nothing to deliver now."""

COMPLETE: Final = object()
""":meth:`Emitter._poll`: nothing is left to deliver and the end is known: complete."""


def queue_capacity(context: OperatorContext) -> int:
    """The queue bound of a stage: ``MAX_QUEUE_SIZE``, or :data:`DEFAULT_QUEUE_SIZE`."""
    limit = read_limit(context, MAX_QUEUE_SIZE)
    return DEFAULT_QUEUE_SIZE if limit == UNLIMITED else limit


def replenish_batch(capacity: int) -> int:
    """After how many consumed elements an input asks its source for that many more."""
    return max(1, capacity - capacity // 4)


def input_source(source: object, op: str, position: int) -> Expression[Any]:
    """A source argument of a multi-input operator's builder as a node: a query as it is, another subscribable
    (a subject, a test source) wrapped."""
    if not isinstance(source, Subscribable):
        raise TypeError(f"{op}: source {position} must be a query or a subscribable, got {type(source).__name__}")
    return as_expression(source)


class Terminated:
    """The upstream slot of an input whose source ended the subscription itself (it must not be cancelled from
    inside its own terminal signal, rule 2.3), or of a stage that was disposed; also the subscription of an
    inner subject's input observer (:func:`~reaqtive.operators._inner_subjects.input_of`), which is pushed to and
    never asked: a subscription that does nothing."""

    __slots__ = ()

    def request(self, n: int) -> None:
        pass

    def cancel(self) -> None:
        pass


TERMINATED: Final = Terminated()


class Emitter(OperatorBase[R], Generic[R]):
    """The serialized drain (see the module). Subclass :class:`EmitterBase` or :class:`UnaryEmitterBase`, which
    declare the fields, and implement :meth:`_poll` (and :meth:`_deliver` when an element needs more than
    ``on_next``)."""

    # The fields are slots of the two bases below (a slotted mixin could not combine with both lifecycle bases),
    # hence the ignores on the assignments here.
    __slots__ = ()

    _lock: threading.Lock
    _emitting: bool  # a thread is the drainer
    _running: bool  # started: signals may go downstream
    _error: BaseException | None  # the first error, delivered ahead of anything queued
    _demand: int  # outstanding downstream demand; LONG_MAX is unbounded

    if TYPE_CHECKING:  # the stages' persisted name (reaqtive.core.operator.Versioned), in messages

        @property
        def name(self) -> str: ...

    def _init_emitter(self) -> None:
        self._lock = threading.Lock()  # type: ignore[misc]
        self._emitting = False  # type: ignore[misc]
        self._running = False  # type: ignore[misc]
        self._error = None  # type: ignore[misc]
        self._demand = 0  # type: ignore[misc]

    # -- what a stage implements -------------------------------------------------------------------------------

    @abstractmethod
    def _poll(self) -> Any:
        """The next thing to deliver (lock held; called only while there is no error): an item, taken out of
        its queue together with the demand it uses, :data:`COMPLETE` or :data:`IDLE`."""

    def _deliver(self, item: Any) -> None:
        """Deliver an item :meth:`_poll` handed out (lock not held). A stage that terminates here is disposed,
        which ends the loop."""
        self._downstream.on_next(item)

    def _leave(self) -> None:
        """Give up the drainer role (lock held)."""
        self._emitting = False  # type: ignore[misc]

    # -- demand and errors -------------------------------------------------------------------------------------

    def request(self, n: int) -> None:
        """Demand from downstream: ``n`` more elements (a non-positive ``n`` is the rule 3.9 error)."""
        with self._lock:
            if n <= 0:
                if self._error is None:
                    self._error = non_positive_request_error(n)  # type: ignore[misc]
            else:
                self._demand = add_demand(self._demand, n)  # type: ignore[misc]
        self._drain()

    def _set_error(self, error: BaseException) -> None:
        """Fail the stage with ``error`` unless it failed already (lock held); the drainer delivers it."""
        if self._error is None:
            self._error = error  # type: ignore[misc]

    def _queue_overflow(self, limit: int) -> None:
        """A queue outgrew its bound ``limit`` (lock held): a source sent more than it was asked for (rule 1.1),
        or a clock outran the downstream."""
        self._set_error(LimitExceededError(self.name, MAX_QUEUE_SIZE, limit))

    def _fail(self, error: BaseException) -> None:
        """Fail the stage with ``error`` (the first error wins) and drain."""
        with self._lock:
            self._set_error(error)
        self._drain()

    def _stop_on_user_error(self, error: Exception) -> None:
        """A user function raised (outside the lock) and the query stops: the error goes out through the drain,
        as every signal. A stage that decides under its lock calls ``_skips`` and :meth:`_set_error` instead."""
        self._fail(error)

    def _element_skipped(self) -> None:
        """Nothing owed by default: the emitting stages with user functions ask their source for everything (a
        stage that asks by its own accounting, ``flat_map``'s outer, overrides this)."""

    # -- the drain ---------------------------------------------------------------------------------------------

    def _drain(self) -> None:
        """Deliver what there is to deliver, unless another thread does (it will find the work)."""
        lock = self._lock
        lock.acquire()
        if self._emitting or not self._running:
            lock.release()
            return
        self._emitting = True  # type: ignore[misc]
        lock.release()
        self._emit_loop()

    def _emit_loop(self) -> None:
        """Deliver while there is something to deliver (the caller is the drainer: it set ``_emitting``)."""
        lock = self._lock
        poll = self._poll
        deliver = self._deliver
        idle = IDLE
        while True:
            lock.acquire()
            try:
                if self._disposed:
                    return
                error = self._error
                if error is None:
                    item = poll()
                    if item is idle:
                        self._leave()
                        return
            finally:
                lock.release()
            if error is not None:
                self._signal_error(error)
                return
            if item is COMPLETE:
                self._signal_complete()
                return
            deliver(item)


class EmitterBase(Emitter[R], StatefulOperatorBase[R], Generic[R]):
    """A stateful stage with a serialized drain and any number of inputs (none: a source)."""

    __slots__ = ("_demand", "_emitting", "_error", "_lock", "_running")

    def __init__(self, downstream: Subscriber[R]) -> None:
        super().__init__(downstream)
        self._init_emitter()


class UnaryEmitterBase(Emitter[R], StatefulUnaryOperatorBase[S, R], Generic[S, R]):
    """A stateful stage with a serialized drain and one input. ``request`` is the downstream's demand (the
    emitter's); :meth:`_request_upstream` asks the source; the source's error fails the stage through the drain."""

    __slots__ = ("_demand", "_emitting", "_error", "_lock", "_running")

    def __init__(self, downstream: Subscriber[R]) -> None:
        super().__init__(downstream)
        self._init_emitter()

    def _request_upstream(self, n: int) -> None:
        """Ask the source for ``n`` (handed over when its subscription arrives)."""
        UnaryOperatorBase.request(self, n)

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "error", "2.13")
        self._upstream_terminated()
        self._fail(error)  # (the first error wins, delivered by the drain)


class PullingEmitterBase(UnaryEmitterBase[S, R], Generic[S, R]):
    """A one-input stage whose results wait in ``_pending`` (a deque, saved by the stage) for demand, and which
    completes once ``_source_done`` and nothing is pending (keyed windows, keyed groups, buffers by time). At most
    ``_max_pending`` results may wait beyond the outstanding demand (``MAX_QUEUE_SIZE``): the stage checks it when
    it adds results (:meth:`Emitter._queue_overflow`).

    It asks its source for everything once the downstream asks for anything, or for what
    :meth:`_upstream_demand` translates the downstream's demand into. Whether it asked (``_pulled``) is state: the
    stage saves it; a stage loaded with it set asks its new source again when it starts (``_reasked``,
    :meth:`_ask_again`)."""

    __slots__ = ("_max_pending", "_pending", "_pulled", "_reasked", "_source_done")

    def __init__(self, downstream: Subscriber[R]) -> None:
        super().__init__(downstream)
        self._pending: deque[R] = deque()  # results waiting for demand (state)
        self._source_done = False  # the source completed: the pending results are the last ones (state)
        self._max_pending = DEFAULT_QUEUE_SIZE
        self._pulled = False  # the source was asked for everything (state)
        self._reasked = 0  # a loaded upstream request, asked again at the start

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._max_pending = queue_capacity(context)

    def _queue(self, results: list[R]) -> bool:
        """Queue ``results`` for demand (lock held); ``False``: the queue overflowed (more than ``_max_pending``
        beyond the demand: the stage failed)."""
        pending = self._pending
        demand = self._demand
        if demand != LONG_MAX and len(pending) + len(results) - demand > self._max_pending:
            self._queue_overflow(self._max_pending)
            return False
        if results:
            pending.extend(results)
            self._state.changed = True
        return True

    def _poll(self) -> Any:
        pending = self._pending
        if pending and self._demand:
            if self._demand != LONG_MAX:
                self._demand -= 1
            self._state.changed = True
            return pending.popleft()
        if not pending and self._source_done:
            return COMPLETE
        return IDLE

    def request(self, n: int) -> None:
        if n <= 0:
            self._fail(non_positive_request_error(n))
            return
        with self._lock:
            self._demand = add_demand(self._demand, n)
            upstream = self._upstream_demand(n)
        if upstream:
            self._request_upstream(upstream)
        self._drain()

    def _upstream_demand(self, n: int) -> int:
        """What to ask the upstream for when the downstream asks for ``n`` more (lock held): everything, once."""
        if self._pulled:
            return 0
        self._pulled = True
        self._state.changed = True
        return LONG_MAX

    def _load_pulled(self, pulled: bool) -> None:
        """The saved ``_pulled`` (from the stage's ``load_state_core``)."""
        self._pulled = pulled
        self._reasked = LONG_MAX if pulled else 0

    def _ask_again(self) -> None:
        """At the start: a recovered stage asks its new source for what the old one had been asked for."""
        again, self._reasked = self._reasked, 0
        if again:
            self._request_upstream(again)


class EmitterInput(Subscriber[Any]):
    """The subscriber of one source of a :class:`MultiInputEmitter`: its done flag and its demand towards the
    source. Subclasses implement ``on_next`` and :meth:`backlog`."""

    __slots__ = ("consumed", "done", "index", "parent", "upstream")

    def __init__(self, parent: MultiInputEmitter[Any], index: int) -> None:
        self.parent = parent
        self.index = index
        self.done = False
        self.upstream: Subscription | Terminated | None = None
        self.consumed = 0  # elements taken since the last replenishing request

    def backlog(self) -> int:
        """Elements of this input waiting in the stage (they count against its queue bound)."""
        raise NotImplementedError

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "subscription", "2.13")
        self.parent._input_subscribed(self, subscription)

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "error", "2.13")
        self.parent._input_error(self, error)

    def on_complete(self) -> None:
        self.parent._input_complete(self)


class MultiInputEmitter(EmitterBase[R], Generic[R]):
    """A stage with several sources, each subscribed by an :class:`EmitterInput` with a bounded queue (see the
    module). The sources' handles are the stage's ``inputs`` (visitors, state and disposal reach every source,
    in order).

    Each input asks its source for what its queue can hold at the start (sources that offered their subscription
    before it, as a hot subject does at subscribe time, are asked then, or let go if they completed), then for
    as many as left, in batches of :func:`replenish_batch`. Subclasses call :meth:`_init_inputs` from their
    constructor and implement :meth:`_poll` (and, if need be, :meth:`_deliver` and :meth:`_input_done`).
    """

    __slots__ = ("_batch", "_capacity", "_count", "_done", "_input_subscribers", "_sources")

    def __init__(self, downstream: Subscriber[R]) -> None:
        super().__init__(downstream)
        self._sources: tuple[Subscribable[Any], ...] = ()
        self._input_subscribers: Sequence[EmitterInput] = ()
        self._count = 0
        self._done = 0  # inputs that completed
        self._capacity = DEFAULT_QUEUE_SIZE
        self._batch = replenish_batch(DEFAULT_QUEUE_SIZE)

    def _init_inputs(self, sources: Sequence[Subscribable[Any]], subscribers: Sequence[EmitterInput]) -> None:
        """The sources, and their subscribers in the same order."""
        self._sources = tuple(sources)
        self._input_subscribers = subscribers
        self._count = len(subscribers)

    def subscribe_inputs(self) -> Iterable[SubscriptionHandle]:
        return [source.subscribe(each) for source, each in zip(self._sources, self._input_subscribers, strict=True)]

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._capacity = queue_capacity(context)
        self._batch = replenish_batch(self._capacity)

    def on_start(self) -> None:
        with self._lock:
            self._running = True
            early = [each for each in self._input_subscribers if each.upstream is not None]
        for each in early:
            self._prime(each)
        self._drain()

    def on_dispose(self) -> None:
        for each in self._input_subscribers:
            upstream, each.upstream = each.upstream, TERMINATED
            if upstream is not None:
                upstream.cancel()  # the subscription may not be the input handle (an adapted publisher)

    def _input_subscribed(self, each: EmitterInput, subscription: Subscription) -> None:
        with self._lock:
            accepted = each.upstream is None and not each.done and not self._disposed
            if accepted:
                each.upstream = subscription
                running = self._running
        if not accepted:
            subscription.cancel()  # a second subscription (rule 2.5), a completed input, or after dispose
        elif running:
            self._prime(each)

    def _prime(self, each: EmitterInput) -> None:
        """The first request to an input's source: what its queue can hold (or cancel it if it completed)."""
        with self._lock:
            upstream = each.upstream
            if each.done:
                each.upstream = TERMINATED
            each.consumed = 0  # what went out before counts in what the queue can take now
            wanted = self._capacity - each.backlog()
        if upstream is None or isinstance(upstream, Terminated):
            return
        if each.done:
            upstream.cancel()
        elif wanted > 0:
            upstream.request(wanted)

    def _input_error(self, each: EmitterInput, error: BaseException) -> None:
        with self._lock:
            each.upstream = TERMINATED
            self._set_error(error)
        self._drain()

    def _input_complete(self, each: EmitterInput) -> None:
        with self._lock:
            each.upstream = TERMINATED
            if not each.done:
                each.done = True
                self._done += 1
                self._state.changed = True
                self._input_done(each)
        self._drain()

    def _input_done(self, each: EmitterInput) -> None:
        """An input completed (lock held; after ``done`` and the count were updated)."""

    def _replenish(self, each: EmitterInput, consumed: int) -> None:
        """``consumed`` of an input's elements left the stage: ask its source for as many more."""
        each.consumed = 0
        upstream = each.upstream
        if upstream is not None:
            upstream.request(consumed)
