"""The checkpoint-anywhere harness: a query must produce the same output however often, and wherever, it is
checkpointed, crashed and recovered, whatever its consumer asks for and when.

Given a query factory, scripted hot inputs on virtual time and a consumer's demand, the harness

1. runs the query uninterrupted and records its output (the oracle);
2. for every tick ``t`` where something happens (or every tick you list): runs to ``t``, saves the state of the
   tree, throws the whole world away (scheduler, sources, operators, consumer: a crash), builds a fresh tree
   from the factory on new sources, loads the state, and runs on; the output before the crash plus the output
   after it must equal the oracle;
3. (``chained=True``) once more, restarting at *every* one of those ticks in a single run, with differential
   saves: a tick where no node is dirty reuses the previous blob, exactly as a store would. This catches an
   operator that changes state without setting ``state_changed``, and state that survives one restart but
   not two; ``runs`` adds runs with restarts at the ticks you choose (several restarts each, differential).

::

    from reaqtive.testing import Demand, assert_checkpoint_anywhere, on_completed, on_next

    assert_checkpoint_anywhere(
        lambda xs: xs.scan(0, operator.add),
        [on_next(210, 1), on_next(220, 2), on_completed(300)],
    )
    # the same, for a consumer that asks for one element at 205 and two more at 260
    assert_checkpoint_anywhere(
        lambda xs: xs.scan(0, operator.add),
        [on_next(210, 1), on_next(220, 2), on_completed(300)],
        demand=Demand(requests=((205, 1), (260, 2))),
    )

**The consumer.** Without ``demand`` it requests ``LONG_MAX`` on subscription (unbounded). With a
:class:`Demand` it is a bounded, possibly slow subscriber: it requests ``initial`` on subscription, ``n`` at each
scripted ``(tick, n)`` (whatever it received meanwhile, so several requests may be outstanding, or none for a
while) and, with ``batch``, ``batch`` more each time ``batch`` elements arrived. It is restartable, as the
engine's observer is: its state is its outstanding demand (requested and not yet received) and how far it is
into a batch; a recovered consumer asks for that outstanding demand again in ``on_subscribe``, and nothing it
had already received. It never asks again for what arrived before the crash, so an operator must itself save
whatever upstream demand it had signalled beyond what its downstream's re-request translates to. The consumer
also checks rule 1.1: an element that arrives without demand fails the run.

**What "same output" means.** The elements, errors and completion the consumer receives, each at the same
virtual tick and in the same order as in the uninterrupted run (the scripted requests happen at the same ticks
in every run, so the timing of the output under bounded demand is part of what is compared).

**Inputs** are hot sources (:class:`~reaqtive.testing.HotSource`): a cold source replays from its start when
re-subscribed, which a recovered query does not want. A recovered world's source carries the messages after
``t`` and, first, what each subscription of the crashed world still held for lack of demand (elements the source
had emitted but the subscriber had not asked for yet: the subject's per-subscriber buffer), like a durable
stream that replays the events after a reader's position. Backlogs go to the new world's subscriptions of that
source in subscription order. The query factory must be deterministic.

**Upgrades** (``recover_with``): every recovered world is built by another factory, so a run starts on one
release of an operator and recovers on the next. ``create`` writes the query with the old stage (the stage as
released, kept in the tests under a test-only operator name, with the same persisted ``name`` and its old
``version``), ``recover_with`` with the new one; the new stage must load every state the old one saved, at every
tick, and go on to the same output. The oracle is ``create``'s uninterrupted run.

Every world is a :class:`~reaqtive.state.host.QueryHost`, the piece the engine and the Spark host run their
queries with: it binds, starts and loads the query, and saves it as units, so higher-order operators checkpoint
their inner subscriptions as separate units, as under the engine. State goes through real bytes, so every value
an operator saves is also checked to be encodable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reaqtive.core.streams import LONG_MAX, Subscriber, Subscription, add_demand, require_not_none
from reaqtive.core.subscribable import Subscribable
from reaqtive.state import DEFAULT_CODEC, CheckpointMode, StateCodec
from reaqtive.state.host import HostedQuery, QueryHost, QueryState
from reaqtive.testing.notifications import (
    DISPOSED,
    SUBSCRIBED,
    Notification,
    OnCompleted,
    OnError,
    OnNext,
    Recorded,
)
from reaqtive.testing.scheduler import DEFAULT_INSTANCE_ID, TestScheduler
from reaqtive.testing.sources import HotSource, TestableQuery

__all__ = [
    "CheckpointReport",
    "Demand",
    "RestartOutcome",
    "assert_checkpoint_anywhere",
    "check_checkpoint_anywhere",
]

Messages = tuple[Recorded[Notification[Any]], ...]
QueryFactory = Callable[..., Subscribable[Any]]
"""Called with one :class:`~reaqtive.testing.TestableQuery` per input script; returns the query to run."""


@dataclass(frozen=True)
class Demand:
    """What the harness's consumer asks for, and when (see the module): a bounded, possibly slow subscriber.

    ``initial``: requested in ``on_subscribe``. ``requests``: ``(tick, n)`` pairs, ``request(n)`` at that tick
    (a harness action, after the input messages of the same tick), whatever arrived meanwhile. ``batch``: each
    time ``batch`` elements arrived, ``request(batch)`` (``0``: never). ``Demand(initial=1, batch=1)`` asks for
    one element at a time; ``Demand(requests=((250, 2), (400, 3)))`` asks for nothing until 250, then for 2,
    then for 3 more at 400.
    """

    initial: int = 0
    requests: tuple[tuple[int, int], ...] = ()
    batch: int = 0

    def __post_init__(self) -> None:
        if self.initial < 0 or self.batch < 0 or any(n <= 0 for _, n in self.requests):
            raise ValueError(f"demand must be positive (initial and batch may be 0): {self!r}")


@dataclass(frozen=True)
class RestartOutcome:
    """One run with restarts: where it was crashed and recovered, and what it emitted (or what it raised)."""

    restarts: tuple[int, ...]
    messages: Messages
    error: BaseException | None = None

    def describe(self, expected: Messages) -> str:
        """A short account of how this run differs from ``expected``."""
        where = (
            f"restart at tick {self.restarts[0]}"
            if len(self.restarts) == 1
            else (f"chained restarts at ticks {list(self.restarts)}")
        )
        if self.error is not None:
            return f"{where}: raised {type(self.error).__name__}: {self.error}"
        index = next(
            (i for i, (e, a) in enumerate(zip(expected, self.messages, strict=False)) if e != a),
            min(len(expected), len(self.messages)),
        )
        return (
            f"{where}: output differs from the uninterrupted run at message {index}:\n"
            f"    expected {list(expected[index : index + 3])}\n"
            f"    actual   {list(self.messages[index : index + 3])}"
        )


@dataclass(frozen=True)
class CheckpointReport:
    """The oracle and every restarted run. ``failures`` are the runs whose output differs or that raised."""

    expected: Messages
    outcomes: tuple[RestartOutcome, ...]
    failures: tuple[RestartOutcome, ...] = field(init=False)

    def __post_init__(self) -> None:
        failures = tuple(o for o in self.outcomes if o.error is not None or o.messages != self.expected)
        object.__setattr__(self, "failures", failures)

    @property
    def ticks(self) -> tuple[int, ...]:
        """The ticks at which a single restart was checked."""
        return tuple(o.restarts[0] for o in self.outcomes if len(o.restarts) == 1)

    def raise_on_failure(self, limit: int = 5) -> None:
        """Raise :class:`AssertionError` describing the first ``limit`` failures (the first error is the cause)."""
        if not self.failures:
            return
        lines = [
            f"checkpoint-anywhere: {len(self.failures)} of {len(self.outcomes)} restarted runs differ from the "
            f"uninterrupted run {list(self.expected)}"
        ]
        lines += [failure.describe(self.expected) for failure in self.failures[:limit]]
        cause = next((f.error for f in self.failures if f.error is not None), None)
        raise AssertionError("\n".join(lines)) from cause


def check_checkpoint_anywhere(
    create: QueryFactory,
    *inputs: Sequence[Recorded[Notification[Any]]],
    ticks: Iterable[int] | None = None,
    subscribed: int = SUBSCRIBED,
    disposed: int = DISPOSED,
    chained: bool = True,
    settings: Mapping[str, object] | None = None,
    scheduler_factory: Callable[[], TestScheduler] = TestScheduler,
    codec: StateCodec = DEFAULT_CODEC,
    demand: Demand | None = None,
    runs: Iterable[Sequence[int]] = (),
    recover_with: QueryFactory | None = None,
) -> CheckpointReport:
    """Run ``create(*sources)`` uninterrupted and restarted at each tick, and report (see the module).

    ``inputs``: one script of ``on_next``/``on_error``/``on_completed`` messages per hot source. ``ticks``: where
    to restart (default: the subscription tick and every tick with an input message, a scripted request or an
    output, between ``subscribed`` and ``disposed``). ``settings``: the operator context's settings.
    ``demand``: the consumer's (default: unbounded). ``runs``: more runs, each restarted at every tick of its
    sequence (with differential saves). ``recover_with``: the factory of every recovered world (default:
    ``create``), to check that a new release of an operator loads what the old one saved (see the module).
    """
    if demand is not None and any(t < subscribed for t, _ in demand.requests):
        raise ValueError(f"scripted requests must come at or after the subscription (tick {subscribed}): {demand}")
    runner = _Runner(
        create=create,
        inputs=[tuple(script) for script in inputs],
        subscribed=subscribed,
        disposed=disposed,
        settings=settings,
        scheduler_factory=scheduler_factory,
        codec=codec,
        demand=demand,
        recover=create if recover_with is None else recover_with,
    )
    expected = runner.run(())
    if expected.error is not None:
        raise expected.error  # the query fails without any restart: not what this harness checks

    def within(points: Iterable[int]) -> tuple[int, ...]:
        return tuple(sorted({t for t in points if subscribed <= t < disposed}))

    points = within(ticks if ticks is not None else _active_ticks(inputs, expected.messages, subscribed, demand))
    outcomes = [runner.run((t,)) for t in points]
    if chained and len(points) > 1:
        outcomes.append(runner.run(points, CheckpointMode.DIFFERENTIAL))
    for run in runs:
        restarts = within(run)
        if restarts:
            outcomes.append(runner.run(restarts, CheckpointMode.DIFFERENTIAL))
    return CheckpointReport(expected.messages, tuple(outcomes))


def assert_checkpoint_anywhere(
    create: QueryFactory,
    *inputs: Sequence[Recorded[Notification[Any]]],
    ticks: Iterable[int] | None = None,
    subscribed: int = SUBSCRIBED,
    disposed: int = DISPOSED,
    chained: bool = True,
    settings: Mapping[str, object] | None = None,
    scheduler_factory: Callable[[], TestScheduler] = TestScheduler,
    codec: StateCodec = DEFAULT_CODEC,
    demand: Demand | None = None,
    runs: Iterable[Sequence[int]] = (),
    recover_with: QueryFactory | None = None,
) -> CheckpointReport:
    """:func:`check_checkpoint_anywhere`, raising :class:`AssertionError` if any restarted run differs."""
    report = check_checkpoint_anywhere(
        create,
        *inputs,
        ticks=ticks,
        subscribed=subscribed,
        disposed=disposed,
        chained=chained,
        settings=settings,
        scheduler_factory=scheduler_factory,
        codec=codec,
        demand=demand,
        runs=runs,
        recover_with=recover_with,
    )
    report.raise_on_failure()
    return report


def _active_ticks(
    inputs: Sequence[Sequence[Recorded[Notification[Any]]]], output: Messages, subscribed: int, demand: Demand | None
) -> set[int]:
    """Where something happens: the subscription, every input message, every scripted request and every output."""
    requests = {t for t, _ in demand.requests} if demand is not None else set()
    return {subscribed} | {m.time for script in inputs for m in script} | {m.time for m in output} | requests


@dataclass(frozen=True)
class _Runner:
    """Runs the query in a sequence of worlds: each restart crashes the current one and recovers in the next."""

    create: QueryFactory
    inputs: list[Messages]
    subscribed: int
    disposed: int
    settings: Mapping[str, object] | None
    scheduler_factory: Callable[[], TestScheduler]
    codec: StateCodec
    demand: Demand | None
    recover: QueryFactory

    def run(self, restarts: tuple[int, ...], mode: CheckpointMode = CheckpointMode.FULL) -> RestartOutcome:
        messages: list[Recorded[Notification[Any]]] = []
        snapshot: _Snapshot | None = None
        start = self.subscribed
        try:
            for stop in (*restarts, None):
                world_messages, snapshot = self._world(start, stop, snapshot, mode)
                messages += world_messages
                if stop is not None:
                    start = stop
        except Exception as error:  # a failing save or load is a finding, not a crash of the harness
            error.add_note(f"checkpoint-anywhere: while restarting at ticks {list(restarts)}")
            return RestartOutcome(restarts, tuple(messages), error)
        return RestartOutcome(restarts, tuple(messages))

    def _world(
        self, start: int, stop: int | None, snapshot: _Snapshot | None, mode: CheckpointMode
    ) -> tuple[list[Recorded[Notification[Any]]], _Snapshot | None]:
        """One life of the query: subscribe at ``start`` (loading ``snapshot``), run to ``stop`` and save (or to
        the end), then abandon everything. Returns what it emitted and the snapshot to recover from."""
        scheduler = self.scheduler_factory()
        if snapshot is not None:
            scheduler.advance_to(start)
            hot = [
                HotSource(scheduler, [m for m in script if m.time > start], backlog=backlog)
                for script, backlog in zip(self.inputs, snapshot.backlogs, strict=True)
            ]
        else:
            hot = [HotSource(scheduler, script) for script in self.inputs]
        sources = [TestableQuery(source) for source in hot]
        observer = _Consumer(scheduler, self.demand, None if snapshot is None else snapshot.consumer)
        host = QueryHost(scheduler, settings=self.settings, codec=self.codec)
        queries: list[HostedQuery] = []
        create = self.create if snapshot is None else self.recover

        def subscribe() -> None:
            query = host.bind(DEFAULT_INSTANCE_ID, create(*sources), observer)
            queries.append(query)
            if snapshot is None:
                query.start()
            else:  # as a host would say: when the query first started (its state was saved by now)
                query.start(snapshot.state, started_at=scheduler.to_datetime(self.subscribed),
                            where=f"state saved at tick {start}")

        def dispose() -> None:
            for query in queries:
                query.handle.dispose()

        scheduler.schedule_absolute(start, subscribe)
        if self.demand is not None:  # after the subscription and the input messages of the same tick
            for tick, n in self.demand.requests:
                if tick > start or (snapshot is None and tick == start):  # the crashed world made the others
                    scheduler.schedule_absolute(tick, observer.request, n)
        scheduler.schedule_absolute(self.disposed, dispose)
        try:
            if stop is None:
                scheduler.advance_to(self.disposed)
                observer.check()
                return observer.messages, snapshot
            scheduler.advance_to(stop)
            observer.check()
            # Each inner subscription is its own unit, as a store keeps them: a differential save that finds a
            # unit clean keeps its previous blob, a unit the store has never seen is written whole.
            saving = queries[0].save(None if snapshot is None else snapshot.state, mode)
            saving.confirm()  # the "commit" succeeded
            backlogs = tuple(source.held() for source in hot)
            return observer.messages, _Snapshot(saving.state, observer.saved(), backlogs)
        finally:
            scheduler.dispose()  # the crash: nothing of this world runs again
            host.environment.dispose()


@dataclass(frozen=True)
class _Snapshot:
    """A checkpoint as the harness keeps it: the query's units (its blob and one blob per inner subscription);
    what the consumer had outstanding (its own state); per source, what each live subscription held for lack
    of demand (what the source replays to the recovered query)."""

    state: QueryState
    consumer: tuple[int, int] = (0, 0)
    backlogs: tuple[tuple[tuple[Notification[Any], ...], ...], ...] = ()


class _Consumer(Subscriber[Any]):
    """The harness's subscriber: records every signal with its tick, requests as its :class:`Demand` says (or
    ``LONG_MAX``), and restarts from ``(outstanding, progress)``: a recovered consumer asks again for the demand
    it had outstanding at the checkpoint, in ``on_subscribe``, as the engine's observer does."""

    __slots__ = ("_batch", "_first", "_scheduler", "messages", "outstanding", "progress", "subscription", "violation")

    def __init__(self, scheduler: TestScheduler, demand: Demand | None, restored: tuple[int, int] | None) -> None:
        self._scheduler = scheduler
        self._batch = 0 if demand is None else demand.batch
        self.messages: list[Recorded[Notification[Any]]] = []
        self.subscription: Subscription | None = None
        self.violation: str | None = None
        if restored is not None:
            self.outstanding, self.progress = restored
            self._first = 0
        else:
            self.outstanding, self.progress = 0, 0
            self._first = LONG_MAX if demand is None else demand.initial

    def saved(self) -> tuple[int, int]:
        """The consumer's state: outstanding demand, elements received into the current batch."""
        return self.outstanding, self.progress

    def check(self) -> None:
        """Raise if the query broke the demand contract (rule 1.1)."""
        if self.violation is not None:
            raise AssertionError(self.violation)

    def request(self, n: int) -> None:
        self.outstanding = add_demand(self.outstanding, n)
        if self.subscription is not None:
            self.subscription.request(n)

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "subscription", "2.13")
        if self.subscription is not None:
            subscription.cancel()
            return
        self.subscription = subscription
        if self.outstanding:  # recovered: what was asked for and had not arrived yet
            subscription.request(self.outstanding)
        if self._first:
            self.request(self._first)

    def on_next(self, value: Any) -> None:
        self.messages.append(Recorded(self._scheduler.clock, OnNext(value)))
        outstanding = self.outstanding
        if outstanding == LONG_MAX:
            return
        if outstanding == 0:
            if self.violation is None:
                self.violation = f"rule 1.1: {value!r} arrived at tick {self._scheduler.clock} without demand"
            return
        self.outstanding = outstanding - 1
        batch = self._batch
        if batch:
            self.progress += 1
            if self.progress == batch:
                self.progress = 0
                self.request(batch)

    def on_error(self, error: BaseException) -> None:
        self.messages.append(Recorded(self._scheduler.clock, OnError(error)))

    def on_complete(self) -> None:
        self.messages.append(Recorded(self._scheduler.clock, OnCompleted()))
