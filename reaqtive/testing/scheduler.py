"""The virtual-time test scheduler: :class:`~reaqtive.scheduler.VirtualTimeScheduler` plus what tests need
(contexts, recording observers, hot and cold test sources, ``start``).

The rules of virtual time (tick length, rounding, the +1 tick of immediate work, the order at equal times,
pause and errors) are those of :mod:`reaqtive.scheduler.virtual`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeVar

from reaqtive.core.context import ExecutionEnvironment, OperatorContext
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.core.visitors import initialize
from reaqtive.scheduler.virtual import VirtualTimeScheduler

if TYPE_CHECKING:
    import logging

    from reaqtive.testing.notifications import Notification, Recorded
    from reaqtive.testing.observer import MockObserver
    from reaqtive.testing.sources import TestableQuery

__all__ = ["DEFAULT_INSTANCE_ID", "TestScheduler"]

T = TypeVar("T")

DEFAULT_INSTANCE_ID: Final = "reaqtive://test"
"""The instance id of contexts made by :meth:`TestScheduler.create_context`."""


class TestScheduler(VirtualTimeScheduler):
    """A virtual-time scheduler for deterministic tests.

    >>> from reaqtive.testing import on_next, on_completed, subscribe
    >>> scheduler = TestScheduler()
    >>> xs = scheduler.create_hot_observable(on_next(150, 1), on_next(210, 2), on_completed(300))
    >>> result = scheduler.start(lambda: xs.map(lambda x: x * 10))
    >>> result.messages
    [OnNext(20)@210, OnCompleted()@300]
    >>> xs.subscriptions
    [Subscribe(200, 300)]
    """

    __test__ = False  # not a pytest test class

    # -- the test harness --------------------------------------------------------------------------------------

    def create_context(
        self,
        settings: Mapping[str, object] | None = None,
        environment: ExecutionEnvironment | None = None,
        *,
        instance_id: str = DEFAULT_INSTANCE_ID,
        logger: logging.Logger | None = None,
    ) -> OperatorContext:
        """An operator context whose scheduler is this test scheduler."""
        return OperatorContext(
            instance_id, self, settings=settings, execution_environment=environment, logger=logger
        )

    def create_observer(self, request: int | None = None) -> MockObserver[Any]:
        """A recording subscriber on this clock; ``request`` as in :class:`MockObserver`."""
        from reaqtive.testing.observer import MockObserver

        return MockObserver(self, request=request)

    def create_hot_observable(self, *messages: Recorded[Notification[T]]) -> TestableQuery[T]:
        """A hot source: each message is scheduled at its absolute tick now (harness priority) and reaches the
        subscribers attached at that time, as their demand allows (see :class:`HotSource`)."""
        from reaqtive.testing.sources import HotSource, TestableQuery

        return TestableQuery(HotSource(self, messages))

    def create_cold_observable(self, *messages: Recorded[Notification[T]]) -> TestableQuery[T]:
        """A cold source: each subscription replays the messages at their ticks *relative to its start*
        (see :class:`ColdSource`)."""
        from reaqtive.testing.sources import ColdSource, TestableQuery

        return TestableQuery(ColdSource(self, messages))

    def start(
        self,
        create: Callable[[], Subscribable[T]],
        created: int = 100,
        subscribed: int = 200,
        disposed: int = 1000,
        *,
        context: OperatorContext | None = None,
        observer: MockObserver[T] | None = None,
        load_state: Callable[[SubscriptionHandle], object] | None = None,
    ) -> MockObserver[T]:
        """Run a query through its life on virtual time and return what it emitted.

        At tick ``created`` call ``create()``; at ``subscribed`` subscribe ``observer`` (a new
        :class:`MockObserver` by default) and :func:`~reaqtive.core.visitors.initialize` the handle with ``context``
        (default :meth:`create_context`) and ``load_state`` (a hook for recovery: it receives the handle after
        ``set_context`` and before ``start``); at ``disposed`` dispose the handle. All three are harness actions
        (priority 0). Then :meth:`run` until nothing is queued. The handle is in ``observer.handle``.
        """
        if observer is None:
            observer = self.create_observer()
        run_context = context if context is not None else self.create_context()
        recorder = observer
        sources: list[Subscribable[T]] = []

        def do_create() -> None:
            sources.append(create())

        def do_subscribe() -> None:
            handle = sources[0].subscribe(recorder)
            recorder.handle = handle
            initialize(handle, run_context, load_state)

        def do_dispose() -> None:
            if recorder.handle is not None:
                recorder.handle.dispose()

        self.schedule_absolute(created, do_create)
        self.schedule_absolute(subscribed, do_subscribe)
        self.schedule_absolute(disposed, do_dispose)
        self.run()
        return observer

    def __repr__(self) -> str:
        return f"<TestScheduler {self._name!r} clock={self._core.clock} {self._status.name.lower()}>"
