"""The checkpoint-anywhere harness: a query must produce the same output however often, and wherever, it is
checkpointed, crashed and recovered.

Given a query factory and scripted hot inputs on virtual time, the harness

1. runs the query uninterrupted and records its output (the oracle);
2. for every tick ``t`` where something happens (or every tick you list): runs to ``t``, saves the state of the
   tree, throws the whole world away (scheduler, sources, operators: a crash), builds a fresh tree from the
   factory on new sources that carry only the messages after ``t``, loads the state, and runs on; the output
   before the crash plus the output after it must equal the oracle;
3. (``chained=True``) once more, restarting at *every* one of those ticks in a single run, with differential
   saves: a tick where no node is dirty reuses the previous blob, exactly as a store would. This catches an
   operator that changes state without setting ``state_changed``, and state that survives one restart but
   not two.

::

    from reaqtive.testing import on_next, on_completed
    from reaqtive.testing.checkpoint import assert_checkpoint_anywhere

    assert_checkpoint_anywhere(
        lambda xs: xs.scan(0, operator.add),
        [on_next(210, 1), on_next(220, 2), on_completed(300)],
    )

State goes through real bytes (``save_subscription``/``state_loader``), so every value an operator saves is
also checked to be encodable. Every world has an :class:`~reaqtive.state.environment.InnerEnvironment`, so
higher-order operators checkpoint their inner subscriptions as separate units, as under the engine.

Inputs are hot sources: a cold source replays from its start when re-subscribed,
which a recovered query does not want. The query factory must be deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reaqtive.state import (
    DEFAULT_CODEC,
    CheckpointMode,
    StateCodec,
    confirm_saved,
    save_subscription,
    state_loader,
)
from reaqtive.state.environment import InnerEnvironment
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import SubscriptionHandle
from reaqtive.testing.notifications import DISPOSED, SUBSCRIBED, Notification, Recorded
from reaqtive.testing.scheduler import TestScheduler
from reaqtive.visitors import initialize

__all__ = ["CheckpointReport", "RestartOutcome", "assert_checkpoint_anywhere", "check_checkpoint_anywhere"]

Messages = tuple[Recorded[Notification[Any]], ...]
QueryFactory = Callable[..., Subscribable[Any]]
"""Called with one :class:`~reaqtive.testing.TestableQuery` per input script; returns the query to run."""


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
) -> CheckpointReport:
    """Run ``create(*sources)`` uninterrupted and restarted at each tick, and report (see the module).

    ``inputs``: one script of ``on_next``/``on_error``/``on_completed`` messages per hot source. ``ticks``: where
    to restart (default: the subscription tick and every tick with an input message or an output, between
    ``subscribed`` and ``disposed``). ``settings``: the operator context's settings.
    """
    runner = _Runner(
        create=create,
        inputs=[tuple(script) for script in inputs],
        subscribed=subscribed,
        disposed=disposed,
        settings=settings,
        scheduler_factory=scheduler_factory,
        codec=codec,
    )
    expected = runner.run(())
    if expected.error is not None:
        raise expected.error  # the query fails without any restart: not what this harness checks
    points = sorted(
        {
            t
            for t in (ticks if ticks is not None else _active_ticks(inputs, expected.messages, subscribed))
            if subscribed <= t < disposed
        }
    )
    outcomes = [runner.run((t,)) for t in points]
    if chained and len(points) > 1:
        outcomes.append(runner.run(tuple(points), CheckpointMode.DIFFERENTIAL))
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
    )
    report.raise_on_failure()
    return report


def _active_ticks(
    inputs: Sequence[Sequence[Recorded[Notification[Any]]]], output: Messages, subscribed: int
) -> set[int]:
    """Where something happens: the subscription, every input message and every output."""
    return {subscribed} | {m.time for script in inputs for m in script} | {m.time for m in output}


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
        recovering = snapshot is not None
        if recovering:
            scheduler.advance_to(start)
        sources = [
            scheduler.create_hot_observable(*[m for m in script if not recovering or m.time > start])
            for script in self.inputs
        ]
        observer = scheduler.create_observer()
        environment = InnerEnvironment(codec=self.codec)
        context = scheduler.create_context(self.settings, environment)
        loader = None
        if snapshot is not None:
            environment.restore(snapshot.inner)
            if snapshot.main is not None:
                loader = state_loader(snapshot.main, self.codec, f"state saved at tick {start}")
        handles: list[SubscriptionHandle] = []

        def subscribe() -> None:
            handle = self.create(*sources).subscribe(observer)
            handles.append(handle)
            observer.handle = handle
            initialize(handle, context, loader)

        def dispose() -> None:
            for handle in handles:
                handle.dispose()

        scheduler.schedule_absolute(start, subscribe)
        scheduler.schedule_absolute(self.disposed, dispose)
        try:
            if stop is None:
                scheduler.advance_to(self.disposed)
                return observer.messages, snapshot
            scheduler.advance_to(stop)
            return observer.messages, self._save(handles[0], environment, snapshot, mode)
        finally:
            scheduler.dispose()  # the crash: nothing of this world runs again
            environment.dispose()

    def _save(
        self,
        handle: SubscriptionHandle,
        environment: InnerEnvironment,
        previous: _Snapshot | None,
        mode: CheckpointMode,
    ) -> _Snapshot:
        """Save the query and each inner subscription as its own unit, as a store would keep them: a
        differential save that finds a unit clean keeps that unit's previous blob."""
        main = save_subscription(handle, mode, self.codec)
        inner = dict(previous.inner) if previous is not None else {}
        removed = environment.removed_inner_ids()
        for inner_id in removed:
            inner.pop(inner_id, None)
        saved_inner = environment.inner_subscriptions()
        for inner_id, inner_handle in saved_inner.items():
            blob = save_subscription(inner_handle, mode, self.codec)
            if blob is not None:
                inner[inner_id] = blob
        # the "commit" succeeded
        confirm_saved(handle)
        for inner_handle in saved_inner.values():
            confirm_saved(inner_handle)
        environment.confirm_removed(removed)
        return _Snapshot(main if main is not None else (previous.main if previous is not None else None), inner)


@dataclass(frozen=True)
class _Snapshot:
    """A checkpoint as the harness keeps it: the query's blob and one blob per inner subscription."""

    main: bytes | None
    inner: dict[str, bytes]
