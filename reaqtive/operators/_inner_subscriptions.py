"""What the higher-order stages share: where their inner subscriptions live, how an outer element is saved, and
the merging core of ``flat_map``, ``merge_all`` and ``switch_latest``.

**Where inner subscriptions live** (:class:`InnerHost`). Under a
:class:`~reaqtive.core.context.HigherOrderEnvironment` (the engine, or :class:`~reaqtive.state.InnerEnvironment` in
tests) every inner subscription is an artifact of its own, registered under ``f"{prefix}/{n}"``: ``prefix`` is
what ``allocate_id(instance_id, kind)`` gave the stage in ``set_context`` (the traversal order is deterministic,
so the same stage gets the same prefix after a restart) and ``n`` counts the outer elements, a counter the stage
saves. The environment checkpoints each inner subscription as its own unit and, after a restart, loads it from its
own saved state when the stage re-creates it. Without such an environment (standalone) the inner subscriptions live
in memory, work the same, and cannot be checkpointed while they are live.

**Outer elements in the state** (:func:`save_outer_element`). A stage re-creates a live inner subscription after
a restart from the outer element that created it: an :class:`~reaqtive.fluent.query.InnerStream` (a group of
``group_by``, a window of ``window``) is saved by :meth:`~reaqtive.fluent.query.InnerStream.reference` and re-created
with :meth:`~reaqtive.fluent.query.InnerStream.from_reference`; any other element is saved as a value, so it must be
encodable by the state codec. A plain query is not a value: a stream of queries (``xs.map(f).merge_all()``)
cannot be checkpointed while an inner is live, its selector form (``xs.flat_map(f)``) can.

**The merging core** (:class:`InnerMergeBase`). Each inner subscription has an :class:`InnerSlot`: the subscriber
of the inner source, with a bounded queue of ``MAX_QUEUE_SIZE`` elements. Elements go straight through when there
is downstream demand, nothing queued and nobody emitting (no queue, no state change); otherwise they queue, and
the queues drain in turns, one element per inner, in the order the inners first had something queued (an order
the stage saves, so a replay after a restart delivers in the same order). While downstream demand is bounded,
each inner is asked for what its queue can hold; once it is unbounded, for everything (so inner subjects take
their own fast path), and elements then queue only while another thread is delivering.

Signals are serialized by the emitter (:mod:`reaqtive.operators._emitter`), with one difference: the drainer's
flag is a *token* that the emitting thread takes (:func:`_take`: ``list.pop()`` on a one-element list is one
indivisible operation, a test-and-set that costs a third of a lock's ``acquire(False)`` + ``release()``), so under
unbounded demand an element with nothing queued goes straight through without the state lock or any lock. Every
other thread makes its change (an element queued, an error, a completion) under the state lock *before* it tries to
take the token; the emitter puts the token back *before* it looks for such changes. Under the GIL one of the two
sees the other (the emitter's fast path, see :mod:`reaqtive.operators._emitter`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar

from reaqtive.core.context import HigherOrderEnvironment, OperatorContext
from reaqtive.core.describe import shown
from reaqtive.core.errors import LimitExceededError
from reaqtive.core.expression import InnerStreamNode, inner_stream_from_reference
from reaqtive.core.operator import FieldReader, StateReader, StateWriter, Version
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
from reaqtive.core.visitors import initialize
from reaqtive.operators._emitter import (
    COMPLETE,
    DEFAULT_QUEUE_SIZE,
    IDLE,
    TERMINATED,
    Terminated,
    UnaryEmitterBase,
    queue_capacity,
    replenish_batch,
)
from reaqtive.operators.keyed_steps import KEYED_FORM, in_keyed_form, keyed_form
from reaqtive.operators.settings import MAX_QUEUE_SIZE, UNLIMITED
from reaqtive.state import OperatorStateError

__all__ = [
    "InnerHost",
    "InnerMergeBase",
    "InnerSlot",
    "needs_environment_error",
    "restore_outer_element",
    "save_outer_element",
    "selected_source",
]

R = TypeVar("R")

_VALUE = 0
_REFERENCE = 1
_REFERENCE_LENGTHS: Final = {"group": 3, "window": 2}
"""The kinds of :meth:`~reaqtive.fluent.query.InnerStream.reference`, and the length of each."""


def _take(token: list[bool]) -> bool:
    """Take the emitter token: ``True`` if this thread is now the one delivering downstream (it puts the token
    back with ``token.append(True)``), ``False`` if another call holds it (this thread, further up the stack, or
    another thread). ``list.pop`` is atomic, so two threads never both take it."""
    if not token:
        return False
    try:
        token.pop()
    except IndexError:  # taken by another thread between the look and the pop
        return False
    return True


def needs_environment_error(label: str) -> OperatorStateError:
    """The error of checkpointing (or restoring) live inner subscriptions without an environment."""
    return OperatorStateError(
        f"checkpointing {label} with live inner subscriptions needs a HigherOrderEnvironment (the engine, or "
        "reaqtive.state.InnerEnvironment); standalone, inner subscriptions live in memory only"
    )


class InnerHost:
    """Where one higher-order stage's inner subscriptions live: the environment (hosted) or memory (standalone).

    Created in the stage's ``set_context``; ``kind`` names the stage in the ids (``"flat_map"``).
    """

    __slots__ = ("_context", "_environment", "_handles", "_keyed", "_prefix")

    def __init__(self, context: OperatorContext, kind: str, *, keyed: int = KEYED_FORM) -> None:
        self._keyed = keyed  # the keyed form the stage was bound in: its inner queries are bound in it too
        environment = context.execution_environment
        self._context = context
        self._handles: dict[int, SubscriptionHandle] = {}
        if isinstance(environment, HigherOrderEnvironment):
            self._environment: HigherOrderEnvironment | None = environment
            self._prefix = environment.allocate_id(context.instance_id, kind)
        else:
            self._environment = None
            self._prefix = f"{context.instance_id}/{kind}"

    @property
    def environment(self) -> HigherOrderEnvironment | None:
        """The environment, or ``None`` standalone."""
        return self._environment

    @property
    def hosted(self) -> bool:
        """Whether inner subscriptions are artifacts of an environment (and can be checkpointed)."""
        return self._environment is not None

    @property
    def prefix(self) -> str:
        """The stage's id: inner ids are ``f"{prefix}/{n}"``."""
        return self._prefix

    def inner_id(self, number: int) -> str:
        """The id of the inner subscription created by the ``number``-th outer element."""
        return f"{self._prefix}/{number}"

    def subscribe(
        self, number: int, source: Subscribable[Any], observer: Subscriber[Any], *, restoring: bool = False
    ) -> None:
        """Subscribe ``observer`` to ``source`` as inner subscription ``number`` and start it (hosted: the
        environment also loads its saved state, if any, and registers it). Elements may flow before it returns.
        ``restoring``: re-created from the stage's restored state (its saved state must exist)."""
        with in_keyed_form(self._keyed):
            self._subscribe(number, source, observer, restoring=restoring)

    def _subscribe(
        self, number: int, source: Subscribable[Any], observer: Subscriber[Any], *, restoring: bool
    ) -> None:
        inner_id = self.inner_id(number)
        environment = self._environment
        if environment is not None:
            environment.subscribe_inner(inner_id, source, observer, self._context, restoring=restoring)
            return
        handle = source.subscribe(observer)
        self._handles[number] = handle  # before the start: the inner may end (and be deleted) while it starts
        try:
            initialize(handle, self._context.derive(inner_id))
        except BaseException:
            self._handles.pop(number, None)
            raise

    def delete(self, number: int) -> None:
        """Inner subscription ``number`` ended for good: dispose it (hosted: and drop its saved state)."""
        environment = self._environment
        if environment is not None:
            environment.delete_inner(self.inner_id(number))
            return
        handle = self._handles.pop(number, None)
        if handle is not None:
            handle.dispose()


def save_outer_element(element: object, label: str) -> list[object]:
    """What to save of the outer element that created a live inner subscription (see the module)."""
    if isinstance(element, InnerStreamNode):
        if element.stream_id is None:
            raise OperatorStateError(
                f"{label}: the inner stream {shown(element)} was created without an environment and cannot be saved"
            )
        return [_REFERENCE, element.reference()]
    if isinstance(element, Subscribable):
        raise OperatorStateError(
            f"{label}: a live inner subscription came from an outer element that is a query ({shown(element)}), which "
            "cannot be saved; only groups and windows (InnerStream) are saved by reference. Select the inner "
            "stream with a function instead (xs.flat_map(f) rather than xs.map(f).merge_all(), "
            "xs.switch_latest(f) rather than xs.map(f).switch_latest()): the element is then saved as a value"
        )
    return [_VALUE, element]


def restore_outer_element(saved: list[Any], environment: HigherOrderEnvironment | None) -> object:
    """The outer element :func:`save_outer_element` saved."""
    kind, payload = saved
    if kind == _REFERENCE:
        if environment is None:
            raise OperatorStateError("an inner stream saved by reference needs a HigherOrderEnvironment to restore")
        return inner_stream_from_reference(tuple(payload), environment)
    return payload


def _read_saved_element(record: FieldReader, done: bool) -> list[Any] | None:
    """The saved outer element of a slot (see :func:`save_outer_element`): ``None`` for an inner that ended, else
    ``[kind, payload]``, where a reference is ``("group", stream_id, key)`` or ``("window", stream_id)``."""
    saved = record.read()
    if done:
        if saved is not None:
            raise record.invalid("element", "None for an inner that ended", saved)
        return None
    if type(saved) is not list or len(saved) != 2 or type(saved[0]) is not int or saved[0] not in (_VALUE, _REFERENCE):
        raise record.invalid("element", "a saved outer element [kind, payload]", saved)
    reference = saved[1]
    if saved[0] == _REFERENCE and not (  # InnerStream.reference(): ("group", stream_id, key) or ("window", stream_id)
        type(reference) is tuple
        and len(reference) >= 2
        and _REFERENCE_LENGTHS.get(reference[0]) == len(reference)
        and type(reference[1]) is str
    ):
        raise record.invalid("element", "a reference to an inner stream: (kind, stream id[, key])", reference)
    return saved


def selected_source(label: str, source: object) -> Subscribable[Any]:
    """Check what a selector returned: the inner stream must be a query (or any subscribable)."""
    if not isinstance(source, Subscribable):
        raise TypeError(f"{label}: the selector must return a query (the inner stream), got {type(source).__name__}")
    return source


class InnerSlot(Subscriber[Any]):
    """One inner subscription of an :class:`InnerMergeBase`: its subscriber side, its queue and its demand.

    ``done``: the inner subscription ended (completed, switched away, or the stage ended); a done slot stays
    while elements it queued wait for demand. ``element``: the outer element that created it.
    """

    __slots__ = ("consumed", "done", "element", "number", "parent", "queue", "saved", "unbounded", "upstream")

    def __init__(self, parent: InnerMergeBase[Any], number: int, element: object) -> None:
        self.parent = parent
        self.number = number
        self.element = element
        self.saved: list[Any] | None = None  # the saved element of a restored slot, until it is re-created
        self.queue: deque[Any] = deque()
        self.done = False
        self.upstream: Subscription | Terminated | None = None
        self.consumed = 0  # elements delivered since the last replenishing request
        self.unbounded = False  # asked for LONG_MAX (downstream demand is unbounded)

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "subscription", "2.13")
        self.parent._slot_subscribed(self, subscription)

    def on_next(self, value: Any) -> None:
        # The per-element path, written out here to save calls (the emitter's fast path, see the module).
        parent = self.parent
        token = parent._token
        if parent._direct and token and not self.done and not parent._queued:
            # Unbounded demand, no result selector, nothing waiting, nobody emitting: straight through, without
            # any lock (taking the token is the emitter's test-and-set; see the module on how the emitter leaves).
            try:
                token.pop()
            except IndexError:
                pass  # another thread took it between the look and the pop: the general path below
            else:
                parent._downstream.on_next(value)
                token.append(True)
                if parent._queued or parent._error is not None or (parent._outer_done and not parent._slots):
                    parent._drain()
                return
        if self.done:
            return  # switched away, or the stage ended: a late element
        selector = parent._result_selector
        if selector is not None:
            try:
                result = selector(self.element, value)
                if result is None:
                    raise TypeError(f"{parent.label}: the result selector returned None (never an element)")
            except Exception as error:
                if parent._skips(error, value):
                    parent._inner_element_skipped(self)
                else:
                    parent._fail(error)
                return
            value = result
        token = parent._token
        if parent._unbounded and not parent._queued and _take(token):
            # Unbounded demand, nothing waiting, nobody emitting: straight through, without the state lock.
            parent._downstream.on_next(value)
            token.append(True)
        else:
            lock = parent._lock
            lock.acquire()
            if parent._queued or not parent._demand or not _take(token):
                parent._slot_next_queued(self, value)  # releases the lock
                return
            demand = parent._demand
            if demand != LONG_MAX:
                parent._demand = demand - 1
            lock.release()
            parent._downstream.on_next(value)
            if not self.unbounded:
                consumed = self.consumed + 1
                if consumed < parent._batch:
                    self.consumed = consumed
                else:
                    parent._replenish(self, consumed)
            token.append(True)
        if parent._queued or parent._error is not None or (parent._outer_done and not parent._slots):
            parent._drain()

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "error", "2.13")
        self.parent._slot_error(self, error)

    def on_complete(self) -> None:
        self.parent._slot_complete(self)

    def __repr__(self) -> str:
        return f"<inner {self.number}: {len(self.queue)} queued{', done' if self.done else ''}>"


class InnerMergeBase(UnaryEmitterBase[Any, R], Generic[R]):
    """The stage of an operator that merges the inner streams its outer elements select.

    The outer source is the stage's only input; inner subscriptions are not inputs (each is a checkpoint unit
    of its own, see the module). Subclasses implement :meth:`on_next` (what an outer element does), set
    ``_selector`` (the inner stream of an outer element, :meth:`select`), ``label`` and ``kind``.

    State: the number of outer elements seen (the next inner id), whether the outer completed, each slot (its
    number, whether it is done, the outer element that created it while it is live, its queued elements), the
    order in which queued slots take turns, and the outer elements requested and not yet received. A recovered
    downstream asks again only for what it still wants, which need not cover an outer request made earlier (the
    downstream's demand may since have been met by inner elements): the stage asks the outer for it again when it
    starts, so the outer element the original was waiting for still comes. State of version 1 (without that
    count) still loads, as "nothing outstanding" (the behaviour of version 1).

    Demand: see :meth:`_request_outer` (outer) and :meth:`_slot_subscribed` (inners).
    """

    label = "flat_map"
    """The operator name in messages."""
    kind = "flat_map"
    """The stage kind in inner ids (``allocate_id(instance_id, kind)``)."""

    __slots__ = (
        "_batch",
        "_bound",
        "_capacity",
        "_counter",
        "_direct",
        "_host",
        "_keyed",
        "_live",
        "_outer_done",
        "_outstanding",
        "_polled",
        "_queued",
        "_reasked",
        "_result_selector",
        "_selector",
        "_slots",
        "_source",
        "_token",
        "_turns",
        "_unbounded",
    )

    def __init__(self, source: Subscribable[Any], downstream: Subscriber[R]) -> None:
        super().__init__(downstream)
        self._source = source
        self._result_selector: Callable[[Any, Any], Any] | None = None
        self._selector: Callable[[Any], Any] | None = None  # an outer element's inner stream; None: the element
        self._slots: dict[int, InnerSlot] = {}  # by number: creation order
        self._turns: deque[InnerSlot] = deque()  # slots with queued elements, in the order they take turns
        self._counter = 0  # outer elements seen: the number of the next inner
        self._live = 0  # slots whose inner subscription is live
        self._queued = 0  # elements in all queues
        self._outstanding = 0  # outer elements requested and not yet received
        self._reasked = 0  # a loaded outstanding outer request, asked again at the start
        self._outer_done = False
        self._token = [True]  # taken (emptied) by the one thread delivering downstream (rule 1.3): see _take
        self._direct = False  # unbounded demand and no result selector: InnerSlot.on_next's shortest path
        self._unbounded = False  # downstream demand reached LONG_MAX (it stays there)
        self._polled: InnerSlot | None = None  # the slot of the element _poll handed out, for _deliver
        self._capacity = DEFAULT_QUEUE_SIZE
        self._batch = replenish_batch(DEFAULT_QUEUE_SIZE)
        self._bound = UNLIMITED  # live inners allowed at once
        self._host: InnerHost | None = None
        self._keyed = keyed_form()  # the keyed form it was bound in: its inner queries are bound the same way

    # -- what subclasses decide --------------------------------------------------------------------------------

    def select(self, element: Any) -> Subscribable[Any]:
        """The inner stream of an outer element: ``_selector(element)``, or the element (user code: may raise)."""
        selector = self._selector
        return selected_source(self.label, element if selector is None else selector(element))

    def _selected(self, element: Any) -> Subscribable[Any] | None:
        """The inner stream of an outer element, selected before the element changes anything (the outer's
        ``on_next``, outside the lock); ``None`` when the stage is failing or disposed (a late element: no selector
        call), or the selector raised (or did not return a query): the query's error policy skipped the element (as
        if it had never come) or the stage is failing."""
        if self._disposed or self._error is not None:
            return None
        try:
            return self.select(element)
        except Exception as error:
            self._user_error(error, element)
            return None

    def _element_skipped(self) -> None:
        """An outer element was skipped: it was received (it used the outer demand), and opened nothing, so the
        outer is asked again as its slots and the downstream demand allow."""
        with self._lock:
            if self._outstanding and self._outstanding != LONG_MAX:
                self._outstanding -= 1
                self._state.changed = True
        self._request_outer()

    def _inner_element_skipped(self, slot: InnerSlot) -> None:
        """An inner element was skipped (the result selector raised on it): it used one of the slot's requests and
        took no place in its queue, so the inner is asked for one more in its place (bounded demand only), as a
        filter replaces a dropped element."""
        upstream = slot.upstream
        if slot.done or slot.unbounded or upstream is None or isinstance(upstream, Terminated):
            return
        upstream.request(1)

    # -- lifecycle -----------------------------------------------------------------------------------------------

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._capacity = queue_capacity(context)
        self._batch = replenish_batch(self._capacity)
        self._host = InnerHost(context, self.kind, keyed=self._keyed)

    @property
    def hosted(self) -> bool:
        """Whether the inner subscriptions are artifacts of a higher-order environment."""
        return self._host is not None and self._host.hosted

    def save_state_core(self, writer: StateWriter) -> None:
        with self._lock:
            if self._live and not self.hosted:
                raise needs_environment_error(self.label)
            writer.write(self._counter)
            writer.write(self._outer_done)
            writer.write(
                [
                    [
                        slot.number,
                        slot.done,
                        None if slot.done else self._saved_element(slot),
                        list(slot.queue),
                    ]
                    for slot in self._slots.values()
                ]
            )
            writer.write([slot.number for slot in self._turns])
            writer.write(self._outstanding)

    def load_state_core(self, reader: StateReader) -> None:
        self._load_slots(reader)
        self._reasked = reader.read_int("outstanding")

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        # (1,): the same fields without the outstanding outer request (nothing is asked again at the start)
        self._load_slots(reader)

    def _load_slots(self, reader: StateReader) -> None:
        self._counter = counter = reader.read_int("counter")
        self._outer_done = reader.read_bool("outer done")
        self._slots = {}
        previous = -1
        for record in reader.read_records("slots", 4):
            # in creation order: numbers rise, below the counter
            previous = number = record.read_int("number", minimum=previous + 1, maximum=counter - 1)
            slot = InnerSlot(self, number, None)
            slot.done = record.read_bool("done")
            slot.saved = _read_saved_element(record, slot.done)
            slot.queue = deque(record.read_list("queue"))  # the user's elements
            if slot.done and not slot.queue:
                raise record.invalid("queue", "elements still to deliver (an ended inner is forgotten once empty)",
                                     [])
            self._slots[number] = slot
        turns = reader.read_list("turns", of=int)
        queued = sorted(number for number, slot in self._slots.items() if slot.queue)
        if sorted(turns) != queued or len(set(turns)) != len(turns):
            raise reader.invalid("turns", f"each slot with queued elements once: {queued}", turns)
        self._turns = deque(self._slots[number] for number in turns)
        self._queued = sum(len(slot.queue) for slot in self._slots.values())
        self._live = sum(1 for slot in self._slots.values() if not slot.done)
        if self._live and not self.hosted:
            raise needs_environment_error(self.label)

    def _saved_element(self, slot: InnerSlot) -> list[Any]:
        if slot.saved is not None:
            return slot.saved  # restored and not re-created yet
        return save_outer_element(slot.element, self.label)

    def on_start(self) -> None:
        # Inner subscriptions restored from a checkpoint are re-created now, not while loading: the inner
        # streams they subscribe to (groups, windows) belong to operators loaded after this one, and elements
        # must not flow before the tree is started.
        with self._lock:
            self._running = True
            restored = [slot for slot in self._slots.values() if slot.saved is not None and not slot.done]
            if self._error is not None:
                restored = []  # failing already (the outer failed while the tree was subscribed)
        for slot in restored:
            host = self._host
            assert host is not None and slot.saved is not None
            try:
                slot.element = restore_outer_element(slot.saved, host.environment)
            except Exception as error:
                self._fail(error)
                return
            slot.saved = None
            if not self._subscribe_slot(slot, restoring=True):
                return
        with self._lock:
            again, self._reasked = self._reasked, 0
            if self._outer_done or self._error is not None or self._disposed:
                again = 0
            self._outstanding = add_demand(self._outstanding, again)
        if again:
            self._request_upstream(again)  # the outer request the original had outstanding (see the class)
        self._request_outer()
        self._drain()

    def on_dispose(self) -> None:
        with self._lock:
            live = [slot for slot in self._slots.values() if not slot.done]
            for slot in live:
                slot.done = True
            self._live = 0
            self._queued = 0
            self._turns.clear()
            self._slots = {}
        self._end_slots(live)

    def _end_slots(self, slots: list[InnerSlot]) -> None:
        """Dispose (and, hosted, delete) the inner subscriptions of ``slots`` (marked done under the lock)."""
        host = self._host
        for slot in slots:
            upstream, slot.upstream = slot.upstream, TERMINATED
            if host is not None:
                host.delete(slot.number)
            if upstream is not None and not isinstance(upstream, Terminated):
                upstream.cancel()  # may not be the handle (an adapted publisher); cancelling twice is a no-op

    # -- the outer source ----------------------------------------------------------------------------------------

    def _new_slot(self, element: Any) -> InnerSlot:
        """Count an outer element and give it a live slot (lock held)."""
        number = self._counter
        self._counter = number + 1
        slot = InnerSlot(self, number, element)
        self._slots[number] = slot
        self._live += 1
        if self._outstanding and self._outstanding != LONG_MAX:
            self._outstanding -= 1
        self._state.changed = True
        return slot

    def _subscribe_slot(
        self, slot: InnerSlot, source: Subscribable[Any] | None = None, *, restoring: bool = False
    ) -> bool:
        """Subscribe to the slot's inner stream (``source``, or selected now: a restored slot); ``False`` if that
        failed (the stage is failing). ``restoring``: the slot was live at the checkpoint the stage was loaded
        from. A restored slot whose selector raises now (it did not before the checkpoint) and a failure to
        subscribe (binding the inner query, restoring its state) stop the query, whatever the error policy: the
        slot exists already."""
        host = self._host
        assert host is not None
        try:
            host.subscribe(slot.number, self.select(slot.element) if source is None else source, slot,
                           restoring=restoring)
        except Exception as error:
            self._fail(error)
            return False
        if slot.done:
            # It ended (or was switched away) while it started, possibly before the environment registered it:
            # deleting again is harmless and makes sure nothing of it stays registered.
            host.delete(slot.number)
        return True

    def on_complete(self) -> None:
        self._upstream_terminated()
        with self._lock:
            if self._outer_done:
                return
            self._outer_done = True
            self._state.changed = True
        self._drain()

    def _request_outer(self) -> None:
        """Ask the outer source for what the inner slots and the downstream demand allow.

        * unbounded downstream demand and no bound on live inners: ``LONG_MAX`` once (the fast path);
        * unbounded downstream demand and a bound: as many as there are free slots (one more each time an inner
          ends);
        * bounded downstream demand: one outer element at a time, while a slot is free and the downstream asked
          for more than is queued (an outer element may select an inner that emits nothing for a while; the
          next one is asked for only while the downstream still waits).
        """
        with self._lock:
            if self._outer_done or self._disposed or self._error is not None or not self._running:
                return
            free = self._bound - self._live
            demand = self._demand
            if free <= 0 or demand <= self._queued:
                return
            wanted = 1  # bounded demand: one outer element at a time
            if demand == LONG_MAX:
                wanted = LONG_MAX if self._bound == UNLIMITED else free
            outstanding = self._outstanding
            if outstanding >= wanted:
                return
            count = LONG_MAX if wanted == LONG_MAX else wanted - outstanding
            self._outstanding = add_demand(outstanding, count)
            self._state.changed = True
        self._request_upstream(count)  # handed over when the outer's subscription arrives

    # -- downstream demand ---------------------------------------------------------------------------------------

    def request(self, n: int) -> None:
        unbounded: list[tuple[InnerSlot, Subscription]] = []
        with self._lock:
            if n <= 0:
                if self._error is None:
                    self._error = non_positive_request_error(n)
            else:
                previous = self._demand
                self._demand = add_demand(previous, n)
                if self._demand == LONG_MAX and previous != LONG_MAX:
                    self._unbounded = True
                    self._direct = self._result_selector is None
                    # Unbounded from now on: inners are asked without bound too (their sources take the fast path).
                    for slot in self._slots.values():
                        upstream = slot.upstream
                        # (not isinstance(upstream, Subscription): a protocol check costs microseconds per slot)
                        if slot.done or slot.unbounded or upstream is None or isinstance(upstream, Terminated):
                            continue
                        slot.unbounded = True
                        unbounded.append((slot, upstream))
        for _, upstream in unbounded:
            upstream.request(LONG_MAX)
        self._drain()
        self._request_outer()

    # -- the inner slots -----------------------------------------------------------------------------------------

    def _slot_subscribed(self, slot: InnerSlot, subscription: Subscription) -> None:
        """An inner source offered its subscription: ask it for what the slot's queue can hold (or everything,
        when downstream demand is unbounded)."""
        with self._lock:
            accepted = slot.upstream is None and not slot.done and not self._disposed
            if accepted:
                slot.upstream = subscription
                slot.consumed = 0
                if self._demand == LONG_MAX:
                    slot.unbounded = True
                    wanted = LONG_MAX
                else:
                    wanted = self._capacity - len(slot.queue)
        if not accepted:
            subscription.cancel()  # rule 2.5, a switched-away inner, or after dispose
        elif wanted > 0:
            subscription.request(wanted)

    def _slot_next_queued(self, slot: InnerSlot, value: Any) -> None:
        """An element that cannot go straight through (the lock is held by the caller; released here)."""
        lock = self._lock
        try:
            if slot.done or self._disposed:
                return
            queue = slot.queue
            if not slot.unbounded and len(queue) >= self._capacity:
                if self._error is None:  # the inner sent more than it was asked for (rule 1.1)
                    self._error = LimitExceededError(self.label, MAX_QUEUE_SIZE, self._capacity)
            else:
                if not queue:
                    self._turns.append(slot)
                queue.append(value)
                self._queued += 1
                self._state.changed = True
            if not self._running or not _take(self._token):
                return  # not started yet, or the emitter will find it
        finally:
            lock.release()
        self._emit_loop()

    def _slot_error(self, slot: InnerSlot, error: BaseException) -> None:
        with self._lock:
            stale = slot.done
            slot.upstream = TERMINATED
            if not stale and self._error is None:
                self._error = error
        if not stale:  # a switched-away inner's error is ignored
            self._drain()

    def _slot_complete(self, slot: InnerSlot) -> None:
        with self._lock:
            slot.upstream = TERMINATED
            if slot.done:
                return  # switched away, or the stage ended
            slot.done = True
            self._live -= 1
            if not slot.queue:
                del self._slots[slot.number]
            self._state.changed = True
        host = self._host
        if host is not None:
            host.delete(slot.number)
        self._request_outer()
        self._drain()

    def _replenish(self, slot: InnerSlot, consumed: int) -> None:
        """``consumed`` of the slot's elements went downstream: ask its source for as many more."""
        slot.consumed = 0
        upstream = slot.upstream
        if upstream is not None and not slot.done:
            upstream.request(consumed)

    def _drop_slot(self, slot: InnerSlot) -> int:
        """Forget a slot and its queued elements (lock held); returns how many elements were dropped."""
        dropped = len(slot.queue)
        if dropped:
            slot.queue.clear()
            self._queued -= dropped
            self._turns.remove(slot)
        self._slots.pop(slot.number, None)
        return dropped

    # -- delivery, one thread at a time: the emitter, its flag a token -----------------------------------------

    def _drain(self) -> None:
        with self._lock:
            if not self._running or not _take(self._token):
                return
        self._emit_loop()

    def _leave(self) -> None:
        self._polled = None  # keeps no ended slot (and its outer element) alive between drains
        self._token.append(True)  # under the state lock: whoever changes the state next sees it

    def _poll(self) -> Any:
        if self._queued and self._demand:
            turns = self._turns
            slot = self._polled = turns.popleft()
            value = slot.queue.popleft()
            if slot.queue:
                turns.append(slot)  # round-robin: the next slot goes first next time
            elif slot.done:
                del self._slots[slot.number]  # its inner ended and its last element is out
            self._queued -= 1
            if self._demand != LONG_MAX:
                self._demand -= 1
            self._state.changed = True
            return value
        if self._outer_done and not self._slots:
            return COMPLETE
        return IDLE

    def _deliver(self, item: Any) -> None:
        slot: InnerSlot = self._polled  # type: ignore[assignment]  # set by the _poll that handed out item
        self._downstream.on_next(item)
        if not slot.done and not slot.unbounded:
            consumed = slot.consumed + 1
            if consumed < self._batch:
                slot.consumed = consumed
            else:
                self._replenish(slot, consumed)
