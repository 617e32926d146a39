"""The query host: bind a query, feed it, advance its clock, save and load it with its inner units.

Everything that runs a standing query does the same five things: it builds the operator tree for an observer
(**bind**), gives every operator a context — an instance id, the scheduler, the execution environment, the
settings — and starts it, loading saved state first when it recovers; it pushes events into the query's input
(**feed**) and moves the clock, firing timers (**advance**); and it **saves** the query's state as *units*, one
blob for the query and one per inner subscription its higher-order operators created, and **loads** them back. The
Spark host (one query per key), the migration from an engine to Spark and the checkpoint-anywhere test harness do
it through this one piece, and so is the engine meant to (DESIGN.md, decision 15), so that a query behaves the same
under each of them and a saved state means the same thing everywhere.

A :class:`QueryHost` owns one scheduler and one :class:`~reaqtive.state.InnerEnvironment` and hosts any number
of queries, each under its instance id (the engine: one per subscription URI; the Spark host: one per key; the
harness: one per simulated life)::

    host = QueryHost(scheduler, settings=limits)
    query = host.bind("sub://alerts", the_query, observer)   # the operator tree; nothing runs yet
    query.start(saved)                                       # context, inner states, load, start
    host.deliver(events, event, at=tick)                     # clock to the event, push it, run what it caused
    host.advance(until)                                      # fire the timers due by then
    saving = query.save(saved)                               # differential against what the store holds
    ...                                                      # commit saving.state (a store, a record), then:
    saving.confirm()                                         # the saved units are clean again

**Units.** A query's state is a :class:`QueryState`: its own blob (``main``) and one blob per inner
subscription, by id (``inner``; the ids are ``instance_id + "/..."``). :meth:`HostedQuery.save` writes, in
differential mode, only the units with a dirty node, and writes whole any unit the previous state does not hold
(the store has never seen it); units that ended (or that were restored and that no parent re-created: orphans)
are left out. The returned :class:`QuerySave` holds the new, complete state: the previous one with what changed.

**Time.** The scheduler's clock is virtual and only the host moves it (:class:`SteppedScheduler`; the engine,
Spark and the tests use a :class:`~reaqtive.scheduler.VirtualTimeScheduler` or a subclass). Times are ticks of
that scheduler, or aware datetimes.

The host is not thread-safe: its owner calls it from one thread at a time (the engine under its lock). It sits in
the state layer (it needs the core and the state traversals, and names the scheduler only through a protocol), so
the test harness, the engine and ``reaqtive.spark`` can all use it.

>>> from datetime import timedelta
>>> from reaqtive import CallbackSubscriber, Query, SimpleSubject
>>> from reaqtive.scheduler import VirtualTimeScheduler
>>> def run(saved=None, at=0):
...     host = QueryHost(VirtualTimeScheduler(timedelta(microseconds=1)))
...     host.advance(at)
...     events, seen = SimpleSubject(), []
...     query = host.bind("sums", Query.from_subscribable(events).scan(0, lambda a, x: a + x),
...                       CallbackSubscriber(seen.append))
...     query.start(saved)
...     return host, query, events, seen
>>> host, query, events, seen = run()
>>> for at, value in [(10, 1), (20, 2)]:
...     host.deliver(events, value, at)
>>> saved = query.save().state          # a restart: a fresh host loads it and continues
>>> host, query, events, seen_after = run(saved, at=20)
>>> host.deliver(events, 3, 30)
>>> seen, seen_after
([1, 3], [6])
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol, TypeVar

from reaqtive.core.context import OperatorContext
from reaqtive.core.scheduler_interface import Scheduler
from reaqtive.core.streams import Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.core.visitors import initialize
from reaqtive.state.codec import DEFAULT_CODEC, StateCodec
from reaqtive.state.environment import InnerEnvironment
from reaqtive.state.fields import SAVED_BY, STARTED_AT
from reaqtive.state.traversal import CheckpointMode, confirm_saved, save_subscription, state_loader

__all__ = ["HostedQuery", "QueryHost", "QuerySave", "QueryState", "SteppedScheduler"]

T = TypeVar("T")


class SteppedScheduler(Scheduler, Protocol):
    """A scheduler on virtual time, which only its host moves: what a :class:`QueryHost` needs of its scheduler
    (:class:`~reaqtive.scheduler.VirtualTimeScheduler` is one)."""

    @property
    def clock(self) -> int:
        """The current time in ticks."""

    @property
    def next_due(self) -> int | None:
        """The tick of the earliest queued task, or ``None``."""

    def to_ticks(self, value: timedelta | datetime) -> int:
        """A datetime as an absolute tick (rounded up)."""

    def advance_to(self, time: int | datetime) -> object:
        """Run everything due up to ``time`` (ticks or a datetime), then set the clock to it."""


@dataclass(frozen=True, slots=True)
class QueryState:
    """A hosted query's saved state, as the units a store keeps: ``main``, the blob of the query's own tree
    (``None``: never saved), and ``inner``, the blob of each of its inner subscriptions by id."""

    main: bytes | None = None
    inner: Mapping[str, bytes] = field(default_factory=dict)

    def units(self, instance_id: str) -> dict[str, bytes]:
        """Every blob by unit id, as store rows: the query's own under ``instance_id``, then its inner ones."""
        units = {} if self.main is None else {instance_id: self.main}
        units.update(self.inner)
        return units


@dataclass(frozen=True, slots=True)
class QuerySave:
    """One save of a hosted query (:meth:`HostedQuery.save`).

    ``state``: the query's complete state after it (the previous state with every unit this save wrote, without
    those it removed). ``written``: the units it wrote, by id. ``removed``: the inner units whose stored state
    goes (ended since the last confirmed save, or restored and re-created by no parent). Call :meth:`confirm`
    once ``state`` is committed, wherever it is kept.
    """

    state: QueryState
    written: tuple[str, ...]
    removed: tuple[str, ...]
    _handles: tuple[SubscriptionHandle, ...] = field(repr=False, compare=False)
    _environment: InnerEnvironment = field(repr=False, compare=False)

    def confirm(self) -> None:
        """The save is committed: the written units' nodes are clean again (``on_state_saved``; what changed
        since the save stays dirty), and the removed units are forgotten."""
        for handle in self._handles:
            confirm_saved(handle)
        self._environment.confirm_removed(self.removed)


class QueryHost:
    """Hosts queries on one scheduler and one inner environment (see the module).

    ``environment``: the :class:`~reaqtive.state.InnerEnvironment` the queries' higher-order operators register
    their inner subscriptions and subjects in (a fresh one by default; the engine passes its own, which also
    holds its streams). ``settings``: operator settings (limits) every hosted query's context carries.
    ``logger``: the operators' logger (:data:`~reaqtive.core.context.DEFAULT_LOGGER` by default). ``codec``: the
    state codec for saving and loading.
    """

    __slots__ = ("_codec", "_environment", "_logger", "_queries", "_scheduler", "_settings")

    def __init__(
        self,
        scheduler: SteppedScheduler,
        *,
        environment: InnerEnvironment | None = None,
        settings: Mapping[str, object] | None = None,
        logger: logging.Logger | None = None,
        codec: StateCodec = DEFAULT_CODEC,
    ) -> None:
        self._scheduler = scheduler
        self._environment = environment if environment is not None else InnerEnvironment(codec=codec)
        self._settings: dict[str, object] = dict(settings or {})
        self._logger = logger
        self._codec = codec
        self._queries: dict[str, HostedQuery] = {}

    @property
    def scheduler(self) -> SteppedScheduler:
        """The scheduler: the hosted queries' only clock."""
        return self._scheduler

    @property
    def environment(self) -> InnerEnvironment:
        """Where the hosted queries' inner subscriptions and subjects live."""
        return self._environment

    @property
    def settings(self) -> Mapping[str, object]:
        """The settings every hosted query's context carries (a query may add its own at :meth:`~HostedQuery.start`)."""
        return self._settings

    @property
    def logger(self) -> logging.Logger | None:
        """The operators' logger (``None``: the default)."""
        return self._logger

    @property
    def codec(self) -> StateCodec:
        """The codec of the saved states."""
        return self._codec

    @property
    def queries(self) -> dict[str, HostedQuery]:
        """The hosted queries by instance id (a snapshot): bound, and not deleted, abandoned or failed to start."""
        return dict(self._queries)

    # -- binding -------------------------------------------------------------------------------------------------

    def bind(
        self, instance_id: str, query: Subscribable[T], observer: Subscriber[T], *, scheduler: Scheduler | None = None
    ) -> HostedQuery:
        """Build ``query``'s operator tree for ``observer`` as the hosted query ``instance_id``. Nothing runs
        until :meth:`HostedQuery.start`. An instance id already hosted is a :class:`ValueError`.

        ``scheduler``: the query's own scheduler (a child of the host's, sharing its clock: the engine gives each
        query one, to pause, prioritize and fault it alone); its operators and inner subscriptions run on it, and
        it is disposed with the query. By default the query runs on the host's scheduler."""
        if instance_id in self._queries:
            raise ValueError(f"a query {instance_id!r} is already hosted here")
        hosted = HostedQuery(self, instance_id, query.subscribe(observer), scheduler)
        self._queries[instance_id] = hosted
        return hosted

    def units(self) -> dict[str, SubscriptionHandle]:
        """Every unit of every hosted query by id (the queries first, then the inner subscriptions): what a
        checkpoint of all of them saves, e.g. with :class:`~reaqtive.state.Checkpointer`."""
        units = {instance_id: hosted.handle for instance_id, hosted in self._queries.items()}
        units.update(self._environment.inner_subscriptions())
        return units

    def _forget(self, hosted: HostedQuery) -> None:
        if self._queries.get(hosted.instance_id) is hosted:
            del self._queries[hosted.instance_id]

    # -- time ------------------------------------------------------------------------------------------------------

    def advance(self, to: int | datetime) -> None:
        """Move the clock forward to ``to`` (ticks, or a datetime), firing the timers due until then; a time
        not after the clock changes nothing (time never goes back)."""
        scheduler = self._scheduler
        ticks = to if isinstance(to, int) else scheduler.to_ticks(to)
        if ticks > scheduler.clock:
            scheduler.advance_to(ticks)

    def settle(self) -> None:
        """Run the work due at the current instant (what a delivery just triggered)."""
        scheduler = self._scheduler
        scheduler.advance_to(scheduler.clock)

    def deliver(self, subject: Subscriber[T], value: T, at: int | datetime | None = None) -> None:
        """Deliver one event the way every host does: the clock moves to the event's time ``at`` first (the
        timers due before it fire first; an event older than the clock is delivered at the clock), then
        ``subject`` gets it, then the work it triggered for this instant runs."""
        if at is not None:
            self.advance(at)
        subject.on_next(value)
        self.settle()

    # -- the end -----------------------------------------------------------------------------------------------

    def dispose(self) -> None:
        """The owner is done: dispose every hosted query, then the inner subscriptions and subjects, then the
        scheduler. (Throwing a host away without disposing it, as the Spark host does between batches, runs no
        ``finally`` action: unloading is not disposing.)"""
        queries, self._queries = list(self._queries.values()), {}
        for hosted in queries:
            hosted.handle.dispose()
        self._environment.dispose()
        self._scheduler.dispose()


class HostedQuery:
    """One query of a :class:`QueryHost`, under its instance id: its tree (``handle``), and what starts,
    saves and ends it with its inner units. Made by :meth:`QueryHost.bind`."""

    __slots__ = ("_host", "_prefix", "_scheduler", "_started", "handle", "instance_id")

    def __init__(
        self, host: QueryHost, instance_id: str, handle: SubscriptionHandle, scheduler: Scheduler | None = None
    ) -> None:
        self._host = host
        self.instance_id = instance_id
        self.handle = handle
        self._scheduler = scheduler  # its own (see QueryHost.bind), or None: the host's
        self._prefix = instance_id + "/"
        self._started = False

    @property
    def scheduler(self) -> Scheduler:
        """The scheduler its operators run on: its own, or the host's."""
        return self._scheduler if self._scheduler is not None else self._host.scheduler

    def __repr__(self) -> str:
        return f"<HostedQuery {self.instance_id!r}>"

    # -- starting (and loading) ----------------------------------------------------------------------------------

    def start(
        self,
        state: QueryState | None = None,
        *,
        settings: Mapping[str, object] | None = None,
        started_at: datetime | None = None,
        where: str | None = None,
        load: Callable[[SubscriptionHandle], None] | None = None,
    ) -> None:
        """Give every operator its context, load ``state`` if given, and start the query.

        The context carries the host's settings plus ``settings``; with ``started_at`` (when the query first
        started), also the bounds of the times its saved state may hold (:data:`~reaqtive.state.fields.STARTED_AT`,
        and :data:`~reaqtive.state.fields.SAVED_BY`: the clock now, or ``started_at`` if later). ``state.inner``
        goes to the environment first, so each inner subscription loads its own blob when its parent
        re-creates it while starting; ``state.main`` is loaded into the tree (``where`` names it in errors,
        ``"state of <instance id>"`` by default). If this raises, the query is no longer hosted (a failure before
        the operators started also disposed the tree); its inner units stay as they are, for the owner to
        :meth:`abandon` or :meth:`delete`. Inner units that failed to load are in :meth:`load_failures`.
        ``load``: a load step of the caller's instead of loading ``state.main`` (an upgrade loads the state of
        another definition node by node, :mod:`reaqtive.engine.upgrade`).
        """
        if self._started:
            raise RuntimeError(f"the hosted query {self.instance_id!r} was already started")
        self._started = True
        host = self._host
        merged = dict(host.settings)
        if settings:
            merged.update(settings)
        if started_at is not None:
            merged[STARTED_AT] = started_at
            merged[SAVED_BY] = max(host.scheduler.now, started_at)
        context = OperatorContext(
            self.instance_id,
            self.scheduler,
            logger=host.logger,
            execution_environment=host.environment,
            settings=merged,
        )
        loader = None
        if state is not None:
            if state.inner:
                host.environment.restore(state.inner)
            if state.main is not None:
                where = where if where is not None else f"state of {self.instance_id!r}"
                loader = state_loader(state.main, host.codec, where)
        if load is not None:
            loader = load
        try:
            initialize(self.handle, context, loader)
        except BaseException:
            host._forget(self)
            self._dispose_scheduler()
            raise

    def _dispose_scheduler(self) -> None:
        """Its own scheduler ends with it: its timers are dropped, later work on it is ignored."""
        if self._scheduler is not None:
            dispose = getattr(self._scheduler, "dispose", None)
            if dispose is not None:
                dispose()

    def load_failures(self) -> dict[str, Exception]:
        """The inner units whose saved state failed to load (or was missing) since the last call, by id: the
        parent turned each into its own ``on_error``, but for a host it is a recovery failure of the query."""
        return self._host.environment.take_load_failures(self.instance_id)

    def unclaimed(self) -> list[str]:
        """Restored inner states of this query that no parent re-created (after :meth:`start`: orphans)."""
        prefix = self._prefix
        return [key for key in self._host.environment.unclaimed_inner_ids() if key.startswith(prefix)]

    # -- units and saving --------------------------------------------------------------------------------------

    def inner_units(self) -> dict[str, SubscriptionHandle]:
        """The live inner subscriptions of this query by id, in creation order."""
        prefix = self._prefix
        return {key: handle for key, handle in self._host.environment.inner_subscriptions().items()
                if key.startswith(prefix)}

    def units(self) -> dict[str, SubscriptionHandle]:
        """The query and its live inner subscriptions, by id: the units its state is saved in."""
        units = {self.instance_id: self.handle}
        units.update(self.inner_units())
        return units

    def save(
        self, previous: QueryState | None = None, mode: CheckpointMode = CheckpointMode.DIFFERENTIAL
    ) -> QuerySave:
        """Save the query's units against ``previous`` (the state the store holds; ``None``: nothing).

        In ``mode`` (differential by default: only units with a dirty node), except that a unit ``previous``
        does not hold is written whole, dirty or not (a window's subscription without stateful operators has no
        dirty node, but its parent's state says it is live, so its unit must exist). A unit this save does not
        write keeps its previous blob; the inner
        units that ended, and restored ones no parent re-created, are dropped. Nothing is confirmed: call
        :meth:`QuerySave.confirm` once the state is committed. An operator that cannot save its state raises
        (:class:`~reaqtive.state.OperatorStateError`, :class:`~reaqtive.state.StateEncodeError`).
        """
        host = self._host
        environment, codec, prefix = host.environment, host.codec, self._prefix
        stored = previous if previous is not None else QueryState()
        written: list[str] = []
        handles: list[SubscriptionHandle] = []
        main_mode = mode if stored.main is not None else CheckpointMode.FULL
        main = save_subscription(self.handle, main_mode, codec)
        if main is not None:
            written.append(self.instance_id)
            handles.append(self.handle)
        removed = sorted({key for key in (*environment.removed_inner_ids(), *environment.unclaimed_inner_ids())
                          if key.startswith(prefix)})
        inner = dict(stored.inner)
        for inner_id in removed:
            inner.pop(inner_id, None)
        for inner_id, handle in self.inner_units().items():
            blob = save_subscription(handle, mode if inner_id in inner else CheckpointMode.FULL, codec)
            if blob is not None:
                inner[inner_id] = blob
                written.append(inner_id)
                handles.append(handle)
        state = QueryState(main if main is not None else stored.main, inner)
        return QuerySave(state, tuple(written), tuple(removed), tuple(handles), environment)

    # -- ending ------------------------------------------------------------------------------------------------

    def delete(self) -> None:
        """The query ends for good: dispose its tree, delete every inner subscription still registered under it
        (:meth:`QuerySave.removed` lists them at the next save), and release its ids, so that a query bound
        again under the same instance id allocates the same inner ids as it would after a recovery."""
        host = self._host
        host._forget(self)
        self.handle.dispose()
        self._dispose_scheduler()
        environment = host.environment
        for inner_id in self.inner_units():
            environment.delete_inner(inner_id)
        environment.release_ids(self.instance_id)

    def abandon(self) -> None:
        """Stop running the query but keep its stored state as it is: dispose its tree and drop its inner
        subscriptions and subjects from memory without marking them removed (a query kept stored, not
        running, e.g. after it failed to recover)."""
        host = self._host
        host._forget(self)
        self.handle.dispose()
        self._dispose_scheduler()
        host.environment.abandon(self.instance_id)
