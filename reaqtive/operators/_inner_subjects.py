"""What ``group_by`` and ``window`` share: operators whose output elements are *inner streams* (a group, a
window), each backed by an inner subject that the operator feeds.

**Inner subjects.** Hosted (the context's execution environment is a
:class:`~reaqtive.core.context.HigherOrderEnvironment`), the operator takes an id prefix in ``set_context``
(``env.allocate_id(instance_id, "group_by")``) and the n-th inner stream it ever opens is the subject
``f"{prefix}/{n}"`` of the environment (``get_or_create_subject``); ``n`` is a counter in the operator's state,
so a replay after recovery derives the same ids (never random, never a hash of the key). When the stream ends
the subject is completed, then deleted (``delete_subject``). Standalone, each inner stream is a local
:class:`~reaqtive.core.subjects.SimpleSubject`. Downstream receives an :class:`~reaqtive.fluent.query.InnerStream` (or a
:class:`~reaqtive.fluent.query.GroupedStream`) over the subject, whose ``stream_id`` is the subject id (``None``
standalone): a consumer saves ``stream.reference()`` and re-creates the stream after a restart with
``InnerStream.from_reference(ref, env)``.

**Consumers subscribe during ``on_next``.** The subject is created, the stream is emitted downstream, and only
then is the element that opened it pushed into it: a consumer that subscribes synchronously (``flat_map``
does) sees every element. A subject is hot: elements pushed while a stream has no subscriber are not kept.

**Demand across the boundary.** *Outer*: an inner stream is emitted only when downstream demand allows it.
One that opens without demand waits, with the elements that arrive for it, in a queue; waiting streams and the
elements held for them count together against ``MAX_QUEUE_SIZE`` (:data:`DEFAULT_MAX_WAITING` when the host
sets none), and one more fails the operator with :class:`~reaqtive.core.errors.LimitExceededError`. *Inner*: each
subscriber of an inner subject has its own demand and a bounded buffer with the subject's overflow policy
(:class:`~reaqtive.core.subjects.SimpleSubject`: 1024 elements, then ``BufferOverflowError`` to that subscriber).
What each operator asks its upstream for is stated by the operator.

**Termination.** The source's completion ends every open inner stream (completed, then the outer stream
completes once the streams still waiting for demand went out); its error, a user function's error (unless the
query's error policy skips the element), a limit or a rule 3.9 request goes to every emitted inner stream, then
downstream (streams still waiting are dropped).
**Disposing the output ends the inner streams**: the upstream is cancelled and every open inner stream is
completed and deleted. (Rx and Reaqtive keep the source alive while groups have subscribers, by reference
counting; here a group's subscribers are restored on their own after a restart, by reference through the
environment, and a subject reports no "last subscriber left", so a reference count could neither survive a
restart nor release the source reliably when a whole query is torn down.)

**Serialized signals.** ``on_next``/``on_complete``/``on_error`` from upstream, ``request`` from downstream and
timers may run on different threads. Every change runs as an *action* through :meth:`_serialize`: the thread
that finds nobody running runs it, and then whatever other threads queued meanwhile; nobody holds a lock while
calling out. (A mailbox of actions rather than the emitter of :mod:`reaqtive.operators._emitter`, which stops at
dispose and delivers one error downstream: here the disposal's own action still ends the inner streams, and an
error goes to every emitted inner stream first.) ``group_by`` adds a lock-free path for elements of groups
already emitted, taken only while nothing else can change (unbounded demand, nothing waiting, no expiry timer).

**State** (written by :meth:`InnerStreamOperator._save_inners`): the counter of inner streams, whether the
source completed, whether the upstream was asked for everything (demand is not state, but a recovered
downstream does not ask again for what the streams it already holds need, so the operator asks the upstream
for it again when it starts), and one record ``[number, key, held, closed]`` per inner stream that has not ended yet:
``held`` is ``None`` once the stream was emitted, else the elements waiting with it; ``closed`` says it ended
while still waiting. On load, the subjects of emitted streams are re-created (``get_or_create_subject``) so the
consumers' restored subscriptions find them; streams already emitted are not emitted again.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar, Final, Generic, TypeVar

from reaqtive.core.context import HigherOrderEnvironment, OperatorContext
from reaqtive.core.errors import LimitExceededError
from reaqtive.core.operator import StateReader, StateWriter, UnaryOperatorBase
from reaqtive.core.streams import LONG_MAX, Subscriber, add_demand, non_positive_request_error
from reaqtive.core.subjects import MultiSubject, SimpleSubject
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators._emitter import DEFAULT_QUEUE_SIZE, TERMINATED, queue_capacity
from reaqtive.operators.settings import MAX_QUEUE_SIZE
from reaqtive.state import StatefulUnaryOperatorBase

if TYPE_CHECKING:
    from reaqtive.core.expression import InnerStreamNode

__all__ = ["DEFAULT_MAX_WAITING", "Inner", "InnerStreamOperator", "input_of"]

T = TypeVar("T")

DEFAULT_MAX_WAITING: Final = DEFAULT_QUEUE_SIZE
"""Inner streams and their elements that may wait for outer demand when the host sets no ``MAX_QUEUE_SIZE``."""

Action = Callable[[Any], None]


def input_of(subject: MultiSubject[Any, Any]) -> Subscriber[Any]:
    """Where to push a subject's elements: the subject itself when it is a subscriber (a
    :class:`~reaqtive.core.subjects.SimpleSubject`), else a new input observer of it."""
    # The concrete class first: an isinstance check against the Subscriber protocol costs microseconds, and a
    # group_by opens one subject per key.
    if isinstance(subject, (SimpleSubject, Subscriber)):
        return subject
    observer = subject.create_observer()
    observer.on_subscribe(TERMINATED)  # (a subscription that does nothing: the operator pushes, never needs asking)
    return observer


class Inner:
    """One inner stream (a group, a window) from the moment it opens until it ended and went out.

    ``subject`` (and ``sink``, where its elements are pushed) are set when the stream is emitted downstream;
    until then ``held`` keeps the elements that arrived for it. ``closed``: it ended while waiting (it
    completes right after it is emitted). ``last``: the time of its latest element (group expiry only).
    """

    __slots__ = ("closed", "held", "key", "last", "number", "sink", "subject")

    def __init__(self, number: int, key: object) -> None:
        self.number = number
        self.key = key
        self.subject: MultiSubject[Any, Any] | None = None
        self.sink: Subscriber[Any] | None = None
        self.held: list[Any] | None = []
        self.closed = False
        self.last: Any = None

    def __repr__(self) -> str:
        where = "emitted" if self.held is None else f"waiting with {len(self.held)}"
        return f"<inner {self.number} key={self.key!r} {where}{' closed' if self.closed else ''}>"


class InnerStreamOperator(StatefulUnaryOperatorBase[T, "InnerStreamNode[Any]"], Generic[T]):
    """The base of ``group_by`` and the ``window`` stages (see the module docstring for the shared rules).

    Subclasses implement :meth:`_element` (an action: one element from upstream), :meth:`_close_all` (the
    source completed: end every open stream), :meth:`_forget_all` (drop their own bookkeeping of open
    streams), :meth:`_make_stream` and the state of their own fields; optionally :meth:`_begin` (the first
    action after the start: open the first window, schedule timers), :meth:`_upstream_amount` (what to ask the
    upstream for when the downstream asks for ``n`` streams; everything once by default) and
    :meth:`_fast_allowed`.
    """

    kind: ClassVar[str] = "inner"
    """The ``kind`` passed to ``allocate_id`` (``"group_by"``, ``"window"``)."""

    __slots__ = (
        "_actions",
        "_demand",
        "_environment",
        "_fast",
        "_held",
        "_inners",
        "_loaded",
        "_lock",
        "_max_waiting",
        "_next_number",
        "_pending",
        "_prefix",
        "_pulled",
        "_ready",
        "_source",
        "_source_done",
        "_terminated",
        "_upstream_owed",
        "_wip",
    )

    def __init__(self, source: Subscribable[T], downstream: Subscriber[InnerStreamNode[Any]]) -> None:
        super().__init__(downstream)
        self._source = source
        self._lock = threading.Lock()
        self._wip = False
        self._actions: deque[tuple[Action, Any]] = deque()
        self._fast = False
        # state
        self._next_number = 0
        self._source_done = False
        self._inners: dict[int, Inner] = {}  # every stream not ended-and-emitted yet, by number (= opening order)
        self._pulled = False  # the upstream was asked for everything (the default demand policy)
        # derived from the state
        self._pending: deque[Inner] = deque()  # streams waiting for outer demand, oldest first
        self._held = 0  # waiting streams + the elements held for them
        # not state
        self._environment: HigherOrderEnvironment | None = None
        self._prefix: str | None = None
        self._max_waiting = DEFAULT_MAX_WAITING
        self._demand = 0
        self._upstream_owed = 0  # upstream demand to signal once no action runs (see request)
        self._loaded = False
        self._ready = False
        self._terminated = False

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        environment = context.execution_environment
        if isinstance(environment, HigherOrderEnvironment):
            self._environment = environment
            self._prefix = environment.allocate_id(context.instance_id, self.kind)
        self._max_waiting = queue_capacity(context)

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def on_start(self) -> None:
        if self._source_done:  # recovered while the last streams wait for demand: the source is done
            # A source that offered its subscription at subscribe time (a hot subject) is let go.
            upstream = self._upstream
            self._upstream_terminated()
            if upstream is not None:
                upstream.cancel()
        elif self._loaded:
            # Demand is not state: a recovered downstream asks afresh for what it still wants, which does not
            # include what the streams it already holds need. Ask the upstream for that again.
            with self._lock:
                amount = self._recovered_amount()
            if amount > 0:
                UnaryOperatorBase.request(self, amount)
        self._ready = True
        self._serialize(self._start_action, None)

    def _start_action(self, _: object) -> None:
        if not self._terminated:
            self._begin()
            if self._source_done and not self._terminated:
                # The source completed before the start (a subject that had completed completes its
                # subscribers at once): what the start opened (the first window) ends at once.
                self._close_all()
            self._drain(None)

    def on_dispose(self) -> None:
        # Disposing the output ends every open inner stream (see the module docstring).
        self._serialize(self._end_all, None)
        if self._loaded and self._environment is not None and self._prefix is not None:
            self._environment.note_ended_subjects(self._prefix, None)

    def _has_ended(self, number: int) -> bool:
        """Whether the inner stream ``number`` was opened and has ended (for a recovered consumer's lookup)."""
        return number < self._next_number and number not in self._inners

    # -- subclass hooks ----------------------------------------------------------------------------------------

    def _begin(self) -> None:
        """The first action after the start (open the first window, schedule timers)."""

    def _element(self, value: Any) -> None:
        """One element from upstream (an action)."""
        raise NotImplementedError

    def _close_all(self) -> None:
        """The source completed: end every open stream (through :meth:`_end`)."""
        raise NotImplementedError

    def _forget_all(self) -> None:
        """Drop the subclass's own bookkeeping of open streams (they were ended or failed)."""
        raise NotImplementedError

    def _make_stream(
        self, inner: Inner, subject: MultiSubject[Any, Any], stream_id: str | None
    ) -> InnerStreamNode[Any]:
        """What goes downstream for ``inner``."""
        raise NotImplementedError

    def _upstream_amount(self, n: int) -> int:
        """What to ask the upstream for when the downstream asks for ``n`` more streams (lock held): everything,
        once the downstream has asked for anything."""
        if self._pulled:
            return 0
        self._pulled = True
        self._state.changed = True
        return LONG_MAX

    def _recovered_amount(self) -> int:
        """What to ask the upstream for when the operator starts from saved state (lock held): everything again
        if it had done so before."""
        return LONG_MAX if self._pulled else 0

    def _fast_allowed(self) -> bool:
        """Whether elements may take a lock-free path once the running action ends (lock held)."""
        return False

    def _set_fast(self, fast: bool) -> None:
        self._fast = fast

    # -- serialized actions ------------------------------------------------------------------------------------

    def _serialize(self, action: Action, argument: Any) -> None:
        """Run ``action(argument)`` now if nobody runs an action, else queue it for the thread that does.

        The thread that ran the actions then signals the upstream demand they caused: a ``request`` made during
        an action must not reach a synchronous upstream there, since its elements would only queue up behind
        the running action, without bound."""
        lock = self._lock
        lock.acquire()
        if self._wip:
            self._actions.append((action, argument))
            lock.release()
            return
        self._wip = True
        lock.release()
        actions = self._actions
        try:
            while True:
                action(argument)
                lock.acquire()
                if not actions:
                    self._wip = False
                    self._set_fast(self._fast_allowed())
                    owed, self._upstream_owed = self._upstream_owed, 0
                    lock.release()
                    if owed:
                        UnaryOperatorBase.request(self, owed)
                    return
                action, argument = actions.popleft()
                lock.release()
        except BaseException:
            with lock:
                self._wip = False
                actions.clear()
            raise

    # -- opening, feeding, ending inner streams (inside actions) ---------------------------------------------

    def _new_inner(self, key: object) -> Inner:
        """Open the next inner stream (number from the counter) and register it."""
        number = self._next_number
        self._next_number = number + 1
        inner = Inner(number, key)
        self._inners[number] = inner
        self._state.changed = True
        return inner

    def _open(self, inner: Inner) -> bool:
        """Emit a stream that just opened, or let it wait for demand. ``False`` if the operator failed."""
        if not self._pending and self._demand and self._ready:
            self._emit(inner)
        else:
            self._pending.append(inner)
            self._held += 1
            self._set_fast(False)
            if self._held > self._max_waiting:
                self._fail(LimitExceededError(self.name, MAX_QUEUE_SIZE, self._max_waiting))
                return False
        # Disposed meanwhile (the consumer of the stream just emitted ended the output): the element that
        # opened the stream still goes into it before the disposal's action completes it.
        return not self._terminated

    def _subject_id(self, number: int) -> str | None:
        prefix = self._prefix
        return None if prefix is None else f"{prefix}/{number}"

    def _subject_for(self, number: int) -> MultiSubject[Any, Any]:
        environment = self._environment
        if environment is None:
            return SimpleSubject(name=f"{self.kind} {number}")
        return environment.get_or_create_subject(f"{self._prefix}/{number}")

    def _emit(self, inner: Inner) -> None:
        """Create the subject, send the stream downstream, then push the elements held for it (consumers
        subscribe during ``on_next``)."""
        subject = self._subject_for(inner.number)
        inner.subject = subject
        inner.sink = sink = input_of(subject)
        held, inner.held = inner.held, None
        with self._lock:
            if self._demand != LONG_MAX:
                self._demand -= 1
        self._state.changed = True
        self._downstream.on_next(self._make_stream(inner, subject, self._subject_id(inner.number)))
        if held:
            for value in held:
                if self._ended():
                    return
                sink.on_next(value)
        if inner.closed and not self._terminated:
            self._finish(inner)

    def _push(self, inner: Inner, value: Any) -> bool:
        """One element into an open stream. ``False`` if the operator failed or ended meanwhile."""
        held = inner.held
        if held is None:
            sink = inner.sink
            assert sink is not None
            sink.on_next(value)
        else:
            held.append(value)
            self._held += 1
            self._state.changed = True
            if self._held > self._max_waiting:
                self._fail(LimitExceededError(self.name, MAX_QUEUE_SIZE, self._max_waiting))
                return False
        return not self._ended()

    def _ended(self) -> bool:
        """Whether the operator terminated or was disposed (it may happen during any call out)."""
        return self._terminated or self._disposed

    def _end(self, inner: Inner) -> None:
        """An open stream ends: an emitted one completes now, a waiting one right after it is emitted."""
        self._state.changed = True
        if inner.held is None:
            self._finish(inner)
        else:
            inner.closed = True

    def _finish(self, inner: Inner) -> None:
        """Complete an emitted stream and forget it."""
        del self._inners[inner.number]
        sink = inner.sink
        assert sink is not None
        sink.on_complete()
        self._delete_subject(inner.number)

    def _delete_subject(self, number: int) -> None:
        environment = self._environment
        if environment is not None:
            environment.delete_subject(f"{self._prefix}/{number}")

    # -- demand ------------------------------------------------------------------------------------------------

    def request(self, n: int) -> None:
        if n <= 0:
            self._serialize(self._fail, non_positive_request_error(n))
            return
        with self._lock:
            self._demand = add_demand(self._demand, n)
            amount = self._upstream_amount(n)
            if amount > 0 and self._wip:  # an action runs (maybe below us on this stack): it asks when done
                self._upstream_owed = add_demand(self._upstream_owed, amount)
                amount = 0
        self._serialize(self._drain, None)
        if amount > 0:
            UnaryOperatorBase.request(self, amount)

    def _drain(self, _: object) -> None:
        """Emit waiting streams while there is demand; complete once the source is done and none waits."""
        if not self._ready or self._terminated:
            return
        pending = self._pending
        while pending and self._demand and not self._disposed:
            inner = pending.popleft()
            assert inner.held is not None
            self._held -= 1 + len(inner.held)
            self._emit(inner)
            if self._ended():
                return
        if self._source_done and not pending and not self._disposed:
            self._terminated = True
            self._signal_complete()

    # -- from upstream -----------------------------------------------------------------------------------------

    def on_next(self, value: T) -> None:
        self._serialize(self._element, value)

    def on_error(self, error: BaseException) -> None:
        self._upstream_terminated()
        self._serialize(self._fail, error)

    def on_complete(self) -> None:
        self._upstream_terminated()
        self._serialize(self._complete_source, None)

    def _complete_source(self, _: object) -> None:
        if self._terminated or self._source_done:
            return
        self._close_all()
        self._source_done = True
        self._state.changed = True
        self._drain(None)

    # -- termination -------------------------------------------------------------------------------------------

    def _take_all(self) -> list[Inner]:
        """Forget every stream (the operator ends); returns the ones that were emitted and are still open."""
        self._terminated = True
        self._set_fast(False)
        emitted = [inner for inner in self._inners.values() if inner.held is None]
        self._inners.clear()
        self._pending.clear()
        self._held = 0
        self._forget_all()
        return emitted

    def _fail(self, error: BaseException) -> None:
        """An action: ``error`` goes to every emitted open stream, then downstream."""
        if self._terminated:
            return
        for inner in self._take_all():
            sink = inner.sink
            assert sink is not None
            sink.on_error(error)
            self._delete_subject(inner.number)
        self._signal_error(error)

    def _end_all(self, _: object) -> None:
        """An action, after the output was disposed: complete every emitted open stream and forget them all."""
        if self._terminated:
            return
        for inner in self._take_all():
            sink = inner.sink
            assert sink is not None
            sink.on_complete()
            self._delete_subject(inner.number)

    def _stop_on_user_error(self, error: Exception) -> None:
        """A user function raised (called outside an action) and the query stops: serialized, as every signal.
        Inside an action, a stage asks ``_skips`` and calls :meth:`_fail` itself."""
        self._serialize(self._fail, error)

    def _element_skipped(self) -> None:
        """Nothing owed: the one of these stages with user functions (``group_by``) asks its upstream for
        everything."""

    # -- state -------------------------------------------------------------------------------------------------

    def _save_inners(self, writer: StateWriter) -> None:
        writer.write(self._next_number)
        writer.write(self._source_done)
        writer.write(self._pulled)
        writer.write(
            [
                [inner.number, inner.key, None if inner.held is None else list(inner.held), inner.closed]
                for inner in self._inners.values()
            ]
        )

    def _load_inners(self, reader: StateReader) -> None:
        self._loaded = True
        self._next_number = next_number = reader.read_int("next number")
        self._source_done = reader.read_bool("source done")
        self._pulled = reader.read_bool("pulled")
        self._inners = {}
        self._pending = deque()
        self._held = 0
        previous = -1
        for record in reader.read_records("inners", 4):
            # in opening order: numbers rise, below the counter
            number = record.read_int("number", minimum=previous + 1, maximum=next_number - 1)
            key = record.read()  # the user's key (a group's), None for a window
            held = record.read()  # the user's elements waiting with the stream, None once it was emitted
            if held is not None and type(held) is not list:
                raise record.invalid("held", "None (emitted) or a list (waiting)", held)
            closed = record.read_bool("closed")
            if closed and held is None:
                raise record.invalid("closed", "False for an emitted stream (it is forgotten when it ends)", closed)
            if self._source_done and not closed:
                raise record.invalid("closed", "True once the source completed (every stream ended)", closed)
            previous = number
            inner = Inner(number, key)
            inner.closed = closed
            if held is None:
                inner.held = None
                inner.subject = subject = self._subject_for(number)  # the consumers' restored subscriptions find it
                inner.sink = input_of(subject)
            else:
                inner.held = list(held)
                self._pending.append(inner)
                self._held += 1 + len(inner.held)
            self._inners[number] = inner
        if self._environment is not None and self._prefix is not None:
            self._environment.note_ended_subjects(self._prefix, self._has_ended)

    def _open_inners(self) -> Iterable[Inner]:
        """The streams that have not ended (emitted or waiting), in opening order (after a load)."""
        return (inner for inner in self._inners.values() if not inner.closed)
