"""Operators: the running stages of a query, and the lifecycle they all share.

Every operator instance is three things at once:

* a **subscription handle** (:class:`~reaqtive.core.subscriptions.SubscriptionHandle`): what ``subscribe`` returns;
  disposing it tears the stage and its inputs down, and visitors walk through it;
* a **Reactive Streams processing stage**: it receives ``on_subscribe``/``on_next``/``on_error``/``on_complete``
  from upstream and offers the specification's :class:`~reaqtive.core.streams.Subscription` (``request``/``cancel``)
  to its downstream, so demand flows from the sink to the source;
* a node of the **Reaqtive lifecycle**: ``subscribe()`` creates its inputs, ``set_context(ctx)`` hands it the
  host's scheduler and settings, state may then be loaded, and ``start()`` starts the flow, at most once.

:class:`OperatorBase` and :class:`UnaryOperatorBase` implement that lifecycle once, so an operator module only
writes what is particular to it (usually ``subscribe_input`` and ``on_next``).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Final, Generic, Protocol, TypeAlias, TypeVar

from reaqtive.core.error_policy import ERROR_POLICY_SETTING, NO_ELEMENT, ErrorPolicy
from reaqtive.core.streams import (
    Subscriber,
    Subscription,
    add_demand,
    non_positive_request_error,
    require_not_none,
)
from reaqtive.core.subscribers import NOP_SUBSCRIBER
from reaqtive.core.subscriptions import NOP_SUBSCRIPTION, HandleVisitor, SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.core.context import OperatorContext

__all__ = [
    "FieldReader",
    "Operator",
    "OperatorBase",
    "StateReader",
    "StateWriter",
    "StatefulOperator",
    "UnaryOperator",
    "UnaryOperatorBase",
    "UnloadableOperator",
    "Version",
    "Versioned",
]

S = TypeVar("S")
R = TypeVar("R")

Version: TypeAlias = tuple[int, ...]
"""An operator's state version, e.g. ``(1, 0)``; compared as a tuple."""


# --------------------------------------------------------------------------------------------------------------
# Interfaces
# --------------------------------------------------------------------------------------------------------------


class Operator(SubscriptionHandle):
    """A node of a running query. Lifecycle: ``subscribe() -> set_context(ctx) -> [load state] -> start()``,
    and ``dispose()`` at any point."""

    __slots__ = ()

    @property
    @abstractmethod
    def inputs(self) -> Sequence[SubscriptionHandle]:
        """The upstream subscriptions; the edges visitors follow. Empty until :meth:`subscribe`."""

    @abstractmethod
    def subscribe(self) -> None:
        """Create the input subscriptions (subscribe to the upstream sources). Nothing flows yet."""

    @abstractmethod
    def set_context(self, context: OperatorContext) -> None:
        """Receive the host's scheduler, logger, environment and settings."""

    @abstractmethod
    def start(self) -> None:
        """Start the flow of events. Runs at most once."""

    def accept(self, visitor: HandleVisitor) -> None:
        visitor.visit(self)


class UnaryOperator(Operator):
    """An operator with a single input."""

    __slots__ = ()

    @property
    @abstractmethod
    def input(self) -> SubscriptionHandle:
        """The single upstream subscription (the no-op handle before :meth:`subscribe`)."""


class Versioned(ABC):
    """Something whose saved state is tagged with a stable name and a version.

    ``state_fields`` names the values ``save_state_core`` writes at the current version, in order, for
    ``reaqtive inspect --state`` (writes are unnamed). A name starting with ``?`` is a value written only
    sometimes (an aggregate's result once it has one). The stateful base's ``disposed`` flag, written before,
    is named by ``inspect`` itself. Read only from the class that sets ``name``: a subclass
    with a name of its own declares its own fields. Empty: not declared, the values are shown unnamed."""

    __slots__ = ()

    state_fields: ClassVar[tuple[str, ...]] = ()

    @property
    @abstractmethod
    def name(self) -> str:
        """The persisted name, e.g. ``"reaqtive:take"``. Never changes once released."""

    @property
    @abstractmethod
    def version(self) -> Version:
        """The version of the state layout, e.g. ``(1, 0)``."""


class StateWriter(Protocol):
    """Writes one node's state: values in order, and nested child segments."""

    def write(self, value: object) -> None:
        """Append one value."""
        ...

    def create_child(self) -> StateWriter:
        """Open a nested segment (for inner parts that save their own state)."""
        ...


class FieldReader(Protocol):
    """Reads values back in the order they were written: unchecked (:meth:`read`, for the user's values), or
    checked for the type and range of a field the operator itself defines (a count, a flag, a deadline, the
    shape of a record), raising ``StateFormatError`` naming the operator, the field and what was found
    (:mod:`reaqtive.state.fields`). Defaults: ``minimum=0``, ``maximum=2**63 - 1``, no bounds on times."""

    def read(self) -> Any:
        """The next value, unchecked."""
        ...

    def read_int(self, field: str, minimum: int = ..., maximum: int = ...) -> int:
        """An ``int`` (not a ``bool``) from ``minimum`` to ``maximum``."""
        ...

    def read_optional_int(self, field: str, minimum: int = ..., maximum: int = ...) -> int | None:
        """``None`` or an ``int`` from ``minimum`` to ``maximum``."""
        ...

    def read_bool(self, field: str) -> bool:
        """A ``bool``."""
        ...

    def read_datetime(self, field: str, earliest: datetime | None = ..., latest: datetime | None = ...) -> datetime:
        """An aware ``datetime`` from ``earliest`` to ``latest`` (when given)."""
        ...

    def read_optional_datetime(
        self, field: str, earliest: datetime | None = ..., latest: datetime | None = ...
    ) -> datetime | None:
        """``None`` or an aware ``datetime`` from ``earliest`` to ``latest`` (when given)."""
        ...

    def read_list(self, field: str, length: int | None = ..., of: type | None = ...) -> list[Any]:
        """A ``list`` (of ``length`` items, each of type ``of``, when given)."""
        ...

    def read_set(self, field: str) -> set[Any]:
        """A ``set``."""
        ...

    def read_records(self, field: str, length: int) -> Sequence[FieldReader]:
        """A ``list`` of records of ``length`` items each, as readers of their items."""
        ...

    def invalid(self, field: str, expected: str, found: object) -> Exception:
        """The error to raise when ``field`` is not ``expected`` (a check of several fields together)."""
        ...


class StateReader(FieldReader, Protocol):
    """Reads one node's state back, in the order it was written, never past the node's own segment."""

    def try_read(self) -> tuple[bool, Any]:
        """``(True, value)``, or ``(False, None)`` when no state is available."""
        ...

    def reset(self) -> None:
        """Rewind to the start of the segment."""
        ...

    def create_child(self) -> StateReader:
        """Open the nested segment at the current position."""
        ...


class StatefulOperator(Operator, Versioned):
    """An operator that saves and loads its state.

    Checkpoint: ``save_state(writer, version)`` then, once the store confirmed the commit, ``on_state_saved()``.
    Recovery: ``set_context(ctx)``, ``load_state(reader, version)``, then ``start()``. ``state_changed`` tells
    whether there is anything new to save (see :mod:`reaqtive.state` for the three-state dirty tracking).
    """

    __slots__ = ()

    @abstractmethod
    def save_state(self, writer: StateWriter, version: Version) -> None:
        """Write the state in the layout of ``version``."""

    @abstractmethod
    def load_state(self, reader: StateReader, version: Version) -> None:
        """Read state saved in the layout of ``version``."""

    @property
    @abstractmethod
    def state_changed(self) -> bool:
        """Whether the state changed since the last confirmed save."""

    @abstractmethod
    def on_state_saved(self) -> None:
        """The save was committed: clear what did not change since."""


class UnloadableOperator(Operator):
    """An operator holding resources to release when the host unloads it without disposing the query."""

    __slots__ = ()

    @abstractmethod
    def unload(self) -> None:
        """Release resources; the subscription stays alive in the store."""


# --------------------------------------------------------------------------------------------------------------
# Base classes
# --------------------------------------------------------------------------------------------------------------

# Guards the hand-over of demand requested before the upstream subscription arrived. The race it prevents only
# exists while a query starts, so one lock for all operators costs no memory per operator and is uncontended.
_HANDOFF_LOCK: Final = threading.Lock()


class _CancelledSubscription(Subscription):
    """Marks an operator's upstream slot after dispose: later requests are no-ops (rule 3.6)."""

    __slots__ = ()

    def request(self, n: int) -> None:
        pass

    def cancel(self) -> None:
        pass


_CANCELLED: Final = _CancelledSubscription()


class _Teardown(threading.local):
    """Per thread: how deeply disposals are nested right now, and the releases deferred past the nesting bound."""

    depth = 0
    deferred: list[Callable[[], object]] | None = None


_TEARDOWN: Final = _Teardown()
_TEARDOWN_NESTING: Final = 8
"""Disposing a stage disposes its inputs, which dispose theirs: nested calls, as deep as the query. Past this
many nested disposals the rest is deferred to the outermost one, which runs it in a loop, so a query of any
depth tears down without reaching the recursion limit."""


def _release(actions: Iterable[Callable[[], object]]) -> None:
    """Run ``actions`` (the disposal of inputs, the cancellation of an upstream) now, or, nested more than
    :data:`_TEARDOWN_NESTING` disposals deep, after the outermost disposal on this thread finished its own work.
    Only a deep query's deepest stages see the difference: their ``on_dispose`` may run before their inputs
    are disposed. Every action runs even if another raised; the first error is raised at the end."""
    teardown = _TEARDOWN
    depth = teardown.depth
    if depth >= _TEARDOWN_NESTING:
        later = teardown.deferred
        assert later is not None  # set by the outermost disposal, which is running
        later.extend(actions)
        return
    outermost = depth == 0
    deferred: list[Callable[[], object]] = []
    if outermost:
        teardown.deferred = deferred
    teardown.depth = depth + 1
    error: BaseException | None = None
    try:
        for action in actions:
            try:
                action()
            except BaseException as raised:  # re-raised below, after the other actions ran
                error = error or raised
        if outermost:
            done = 0
            while done < len(deferred):  # in the order they were deferred; running them may defer more
                action = deferred[done]
                done += 1
                try:
                    action()
                except BaseException as raised:
                    error = error or raised
    finally:
        teardown.depth = depth
        if outermost:
            teardown.deferred = None
    if error is not None:
        raise error


class OperatorBase(Operator, Subscription, Generic[R]):
    """The operator lifecycle, implemented once.

    * ``start`` runs at most once. It first offers this operator to the downstream subscriber as its
      Reactive Streams subscription (``on_subscribe``), then calls :meth:`on_start`. An operator that is already
      disposed (for example because its state was restored as disposed) disposes instead of starting.
    * ``dispose`` is idempotent: it swaps the downstream for a no-op subscriber (output after dispose is dropped
      and the subscriber is released, rule 3.13), disposes every input, then calls :meth:`on_dispose`.
    * ``cancel`` (the Reactive Streams side) is ``dispose``.
    * Terminal signals: :meth:`_signal_error` and :meth:`_signal_complete` forward downstream, then dispose.

    Subclasses implement :meth:`request` (their demand policy) and usually override :meth:`subscribe_inputs`,
    :meth:`on_start` and :meth:`on_dispose`.
    """

    __slots__ = ("_context", "_disposed", "_downstream", "_inputs", "_started")

    timeless: ClassVar[bool] = False
    """Whether handling an element neither reads the clock nor schedules work nor subscribes anything (a
    ``map``, a count-based ``buffer``, a group of per-key steps): a host may then hand a run of elements to it
    without moving its clock per element (see :meth:`reaqtive.engine.readers.StreamReader.read_run`)."""

    def __init__(self, downstream: Subscriber[R]) -> None:
        self._downstream: Subscriber[R] = require_not_none(downstream, "subscriber", "1.9")
        self._inputs: tuple[SubscriptionHandle, ...] = ()
        self._context: OperatorContext | None = None
        self._started = False
        self._disposed = False

    # -- lifecycle -------------------------------------------------------------------------------------------

    @property
    def inputs(self) -> Sequence[SubscriptionHandle]:
        return self._inputs

    @property
    def output(self) -> Subscriber[R]:
        """The downstream subscriber; a no-op subscriber once disposed."""
        return self._downstream

    @property
    def context(self) -> OperatorContext:
        """The context given by :meth:`set_context`; raises :class:`RuntimeError` before that."""
        context = self._context
        if context is None:
            raise RuntimeError(f"{type(self).__name__}: set_context() has not been called yet")
        return context

    @property
    def is_started(self) -> bool:
        """Whether :meth:`start` has run."""
        return self._started

    @property
    def is_disposed(self) -> bool:
        """Whether the operator is disposed (stateful subclasses also report a disposed restored state)."""
        return self._disposed

    def subscribe(self) -> None:
        if self._disposed:
            return  # inputs created now would never be disposed
        self._inputs = tuple(self.subscribe_inputs())

    def subscribe_inputs(self) -> Iterable[SubscriptionHandle]:
        """Subscribe to the upstream sources and return the handles (none by default: a source)."""
        return ()

    def set_context(self, context: OperatorContext) -> None:
        self._context = context

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        if self.is_disposed:
            self.dispose()
            return
        self._downstream.on_subscribe(self)
        if not self._disposed:  # the subscriber may have cancelled inside on_subscribe
            self.on_start()

    def on_start(self) -> None:
        """Start producing (sources) or start timers. Called once, after ``on_subscribe`` went downstream."""

    def dispose(self) -> None:
        if self._disposed:
            return
        self._disposed = True
        self._downstream = NOP_SUBSCRIBER
        inputs = self._inputs
        if inputs:
            _release([handle.dispose for handle in inputs])
        self.on_dispose()

    def on_dispose(self) -> None:
        """Release what the operator holds. Called once, after its inputs were disposed."""

    # -- Reactive Streams subscription offered downstream ------------------------------------------------------

    @abstractmethod
    def request(self, n: int) -> None:
        """Demand from downstream: the operator's demand policy."""

    def cancel(self) -> None:
        self.dispose()

    # -- user errors -------------------------------------------------------------------------------------------

    def _user_error(self, error: Exception, element: object = NO_ELEMENT) -> bool:
        """A user function of this operator raised ``error`` on ``element`` (the element the operator received;
        :data:`~reaqtive.core.error_policy.NO_ELEMENT` for a function that runs without one): the query's error policy
        (see :mod:`reaqtive.core.error_policy`) decides. Skipped (``True``), the element is dropped here
        (:meth:`_element_skipped`) and the caller goes on as if it had never arrived; otherwise (``False``) the
        query stops (:meth:`_stop_on_user_error`: ``on_error`` downstream, the Reactive Streams default).

        Call it for every error of a user function (a selector, a predicate, an accumulator, a comparison or
        arithmetic on the user's elements, a ``None`` returned where an element was expected, a key that cannot
        be hashed), never for the operator's own errors (a limit, a rule 3.9 request, an upstream error), which
        stop the query whatever the policy. A stage that must decide under its lock calls :meth:`_skips` and
        stops or skips itself."""
        if self._skips(error, element):
            self._element_skipped()
            return True
        self._stop_on_user_error(error)
        return False

    def _skips(self, error: Exception, element: object = NO_ELEMENT) -> bool:
        """Whether the query's error policy skips ``element`` after a user function raised ``error`` on it
        (``False`` without a policy, and once the operator is disposed). Only asks: the caller drops the element
        or stops. A policy that raises is taken as "stop": the query stops with ``error``, the policy's own error
        chained to it (as ``raise error from policy_error``; kept in a note when ``error`` had a cause already)."""
        context = self._context
        if context is None or self._disposed:
            return False
        policy = context.get_setting(ERROR_POLICY_SETTING)
        if policy is None or not isinstance(policy, ErrorPolicy):
            return False
        try:
            return bool(policy.skips(self, error, element))
        except Exception as policy_error:
            if policy_error.__context__ is error:
                policy_error.__context__ = None  # (asked while ``error`` was handled: no cycle in the chain)
            error.add_note(f"the query's error policy raised {policy_error!r} deciding on this error: it stops")
            if error.__cause__ is None:
                error.__cause__ = policy_error
            return False

    def _stop_on_user_error(self, error: Exception) -> None:
        """The query stops on a user error: ``on_error`` downstream (a stage that must serialize its signals
        overrides this)."""
        self._signal_error(error)

    def _element_skipped(self) -> None:
        """An element was dropped here because its user function raised and the policy skips it. Nothing by
        default (a stage whose output is not one element per input element owes nothing for it)."""

    # -- terminal signals --------------------------------------------------------------------------------------

    def _signal_error(self, error: BaseException) -> None:
        """Send ``on_error`` downstream, then dispose. A no-op once disposed."""
        downstream = self._downstream
        try:
            downstream.on_error(error)
        finally:
            self.dispose()

    def _signal_complete(self) -> None:
        """Send ``on_complete`` downstream, then dispose. A no-op once disposed."""
        downstream = self._downstream
        try:
            downstream.on_complete()
        finally:
            self.dispose()

    def __repr__(self) -> str:
        state = "disposed" if self._disposed else "started" if self._started else "new"
        return f"<{type(self).__name__} {state}>"


class UnaryOperatorBase(OperatorBase[R], UnaryOperator, Subscriber[S], Generic[S, R]):
    """A stage with one input: it subscribes to one upstream source and passes demand straight through.

    Demand requested downstream before the upstream's ``on_subscribe`` arrived is accumulated and handed over
    when it does. After that, ``request(n)`` goes to the upstream unchanged, including non-positive ``n`` (the
    upstream signals the rule 3.9 error). Stages that change the number of elements (filters, buffers) override
    :meth:`request` or request more upstream themselves.

    Subclasses implement :meth:`subscribe_input` and :meth:`on_next`; ``on_error``/``on_complete`` forward and
    dispose by default.
    """

    __slots__ = ("_pending_demand", "_upstream")

    def __init__(self, downstream: Subscriber[R]) -> None:
        super().__init__(downstream)
        self._upstream: Subscription | None = None
        self._pending_demand = 0

    @property
    def input(self) -> SubscriptionHandle:
        return self._inputs[0] if self._inputs else NOP_SUBSCRIPTION

    def subscribe_inputs(self) -> Iterable[SubscriptionHandle]:
        return (self.subscribe_input(),)

    @abstractmethod
    def subscribe_input(self) -> SubscriptionHandle:
        """Subscribe to the upstream source with ``self`` as its subscriber and return the handle."""

    # -- Reactive Streams subscriber side (from upstream) ------------------------------------------------------

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "subscription", "2.13")
        with _HANDOFF_LOCK:
            accepted = self._upstream is None and not self._disposed
            if accepted:
                self._upstream = subscription
                pending, self._pending_demand = self._pending_demand, 0
        if not accepted:
            subscription.cancel()  # rule 2.5: a second subscription, or one arriving after dispose
            return
        if pending:
            subscription.request(pending)

    @abstractmethod
    def on_next(self, value: S) -> None:
        """One element from upstream.

        Stages trust their upstream stage: sources, subjects, sinks and adapters enforce rule 2.13 (``None`` is
        never an element) at the boundary, so a stage does not re-check its input on the per-element path. It
        must check what user functions return, since those are the other way a ``None`` could enter.
        """

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "error", "2.13")
        self._upstream_terminated()
        self._signal_error(error)

    def on_complete(self) -> None:
        self._upstream_terminated()
        self._signal_complete()

    def _element_skipped(self) -> None:
        """A skipped element is one fewer passed on: ask the upstream for another in its place, as a filter does
        for an element it drops (harmless under unbounded demand, which stays unbounded)."""
        upstream = self._upstream
        if upstream is not None and upstream is not _CANCELLED:
            upstream.request(1)

    def _upstream_terminated(self) -> None:
        """The upstream ended the subscription itself (rule 2.4): the teardown that follows must not cancel it,
        since that call would come from inside its on_complete/on_error (rule 2.3). Overrides of ``on_error`` /
        ``on_complete`` that end the stage call this first."""
        self._upstream = _CANCELLED

    # -- Reactive Streams subscription side (to downstream) ----------------------------------------------------

    def request(self, n: int) -> None:
        upstream = self._upstream
        if upstream is None:
            with _HANDOFF_LOCK:
                upstream = self._upstream
                if upstream is None and n > 0:
                    self._pending_demand = add_demand(self._pending_demand, n)
                    return
            if upstream is None:
                self._signal_error(non_positive_request_error(n))
                return
        upstream.request(n)

    def dispose(self) -> None:
        if self._disposed:
            return
        upstream, self._upstream = self._upstream, _CANCELLED
        super().dispose()
        if upstream is not None:
            _release((upstream.cancel,))  # the upstream may not be one of our inputs (an adapted Publisher)
