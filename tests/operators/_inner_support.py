"""Helpers for the tests of the higher-order operators with inner subscriptions (flat_map, merge_all,
switch_latest, debounce by a duration selector).

:func:`run_restarted` crashes and recovers a query once, like the checkpoint-anywhere harness, with any request
pattern of the subscriber, so the state that only exists under backpressure (queued elements) goes through a
restart too. (The harness now does the same with ``demand=Demand(...)``, and restarts its subscriber with the
demand it had outstanding; this helper's subscriber asks for nothing again, so restart it where no requested
element is missing.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from reaqtive import OperatorBase, Query, Subscribable, Subscriber, SubscriptionHandle
from reaqtive.core.visitors import initialize
from reaqtive.state import CheckpointMode, InnerEnvironment, save_subscription, state_loader
from reaqtive.testing import Notification, Recorded, TestScheduler

Script = Sequence[Recorded[Notification[Any]]]


def run_restarted(
    create: Callable[..., Subscribable[Any]],
    scripts: Sequence[Script],
    restart_at: int | None,
    *,
    request: int | None = None,
    requests: Mapping[int, int] | None = None,
    settings: Mapping[str, object] | None = None,
    subscribed: int = 200,
    end: int = 1000,
) -> list[Recorded[Notification[Any]]]:
    """Run ``create(*hot sources)`` hosted (an :class:`InnerEnvironment`) with a subscriber that requests
    ``request`` at a time, or ``requests[t]`` at each tick ``t`` (then nothing by itself); if ``restart_at`` is
    set, save everything there (the query and each inner subscription), throw the world away and continue in a
    fresh one from the saved state. Returns the output. (Demand the subscriber signalled before the crash is
    not state: a recovered query's subscriber asks again; so restart where no requested element is missing.)"""
    messages: list[Recorded[Notification[Any]]] = []
    saved: tuple[bytes | None, dict[str, bytes]] | None = None
    start = subscribed
    for stop in (restart_at, None) if restart_at is not None else (None,):
        scheduler = TestScheduler()
        if saved is not None:
            scheduler.advance_to(start)
        sources = [
            scheduler.create_hot_observable(*[m for m in script if saved is None or m.time > start])
            for script in scripts
        ]
        environment = InnerEnvironment()
        context = scheduler.create_context(settings, environment, instance_id="sub://q")
        observer = scheduler.create_observer(request=0 if requests else request)
        for tick, n in (requests or {}).items():
            if (saved is None or tick > start) and (stop is None or tick <= stop):
                scheduler.schedule_absolute(tick, observer.request, n)
        handles: list[SubscriptionHandle] = []
        loader = None
        if saved is not None:
            main, inner = saved
            environment.restore(inner)
            assert main is not None
            loader = state_loader(main)

        def subscribe(
            sources: list[Any] = sources,
            observer: Any = observer,
            context: Any = context,
            loader: Any = loader,
            handles: list[SubscriptionHandle] = handles,
        ) -> None:
            handle = create(*sources).subscribe(observer)
            handles.append(handle)
            initialize(handle, context, loader)

        scheduler.schedule_absolute(start, subscribe)
        scheduler.schedule_absolute(end, lambda handles=handles: [h.dispose() for h in handles])
        scheduler.advance_to(stop if stop is not None else end)
        messages += observer.messages
        if stop is not None:
            main_blob = save_subscription(handles[0], CheckpointMode.FULL)
            inner_blobs = {
                inner_id: blob
                for inner_id, handle in environment.inner_subscriptions().items()
                if (blob := save_subscription(handle, CheckpointMode.FULL)) is not None
            }
            saved = (main_blob, inner_blobs)
            start = stop
        scheduler.dispose()
        environment.dispose()
    return messages


def assert_restarts_agree(
    create: Callable[..., Subscribable[Any]],
    scripts: Sequence[Script],
    ticks: Sequence[int],
    **options: Any,
) -> list[Recorded[Notification[Any]]]:
    """A restart at each of ``ticks`` gives the output of the uninterrupted run; returns that output."""
    expected = run_restarted(create, scripts, None, **options)
    for tick in ticks:
        assert run_restarted(create, scripts, tick, **options) == expected, f"restart at {tick}"
    return expected


class Flood(Subscribable[int]):
    """A broken source that emits ``values`` at its start whatever was requested (it breaks rule 1.1)."""

    def __init__(self, *values: int) -> None:
        self.values = values

    def subscribe_core(self, observer: Subscriber[int]) -> SubscriptionHandle:
        return _FloodStage(self.values, observer)


class _FloodStage(OperatorBase[int]):
    def __init__(self, values: tuple[int, ...], downstream: Subscriber[int]) -> None:
        super().__init__(downstream)
        self._values = values

    def request(self, n: int) -> None:
        pass

    def on_start(self) -> None:
        for value in self._values:
            self._downstream.on_next(value)


def flood(*values: int) -> Query[int]:
    return Query.from_subscribable(Flood(*values))
