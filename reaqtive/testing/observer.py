"""The recording subscriber: every signal it receives, with the virtual time it arrived."""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

from reaqtive.core.streams import LONG_MAX, Subscriber, Subscription, require_not_none
from reaqtive.testing.notifications import Notification, OnCompleted, OnError, OnNext, Recorded

if TYPE_CHECKING:
    from reaqtive.core.subscriptions import SubscriptionHandle
    from reaqtive.testing.scheduler import TestScheduler

__all__ = ["MockObserver"]

T = TypeVar("T")


class MockObserver(Subscriber[T], Generic[T]):
    """Records ``Recorded(clock, notification)`` for each signal, and requests by a pattern.

    ``request``:

    * ``None`` (default): ``LONG_MAX`` once, in ``on_subscribe`` (unbounded demand, the fast path);
    * ``n > 0``: ``n`` in ``on_subscribe``, then ``n`` more each time ``n`` elements arrived (``1``: one at a
      time);
    * ``0``: nothing automatically; the test calls :meth:`request` (for example from
      ``scheduler.schedule_absolute(250, observer.request, 2)``).

    A second ``on_subscribe`` is cancelled (rule 2.5). ``handle`` is the subscription handle when the observer
    was subscribed by :meth:`TestScheduler.start`.
    """

    __test__ = False

    __slots__ = ("_batch", "_received", "_scheduler", "handle", "messages", "subscription")

    def __init__(self, scheduler: TestScheduler, *, request: int | None = None) -> None:
        if request is not None and (not isinstance(request, int) or request < 0):
            raise ValueError(f"request must be None or a non-negative int, got {request!r}")
        self._scheduler = scheduler
        self._batch = request
        self._received = 0
        self.messages: list[Recorded[Notification[T]]] = []
        self.subscription: Subscription | None = None
        self.handle: SubscriptionHandle | None = None

    @property
    def values(self) -> list[T]:
        """The values of the ``on_next`` signals, in order."""
        return [message.value.value for message in self.messages if isinstance(message.value, OnNext)]

    def request(self, n: int) -> None:
        """Signal demand upstream (a no-op before ``on_subscribe``)."""
        subscription = self.subscription
        if subscription is not None:
            subscription.request(n)

    def cancel(self) -> None:
        """Cancel the subscription."""
        subscription, self.subscription = self.subscription, None
        if subscription is not None:
            subscription.cancel()

    def on_subscribe(self, subscription: Subscription) -> None:
        require_not_none(subscription, "subscription", "2.13")
        if self.subscription is not None:
            subscription.cancel()
            return
        self.subscription = subscription
        batch = self._batch
        if batch is None:
            subscription.request(LONG_MAX)
        elif batch > 0:
            subscription.request(batch)

    def on_next(self, value: T) -> None:
        require_not_none(value, "value", "2.13")
        self.messages.append(Recorded(self._scheduler.clock, OnNext(value)))
        batch = self._batch
        if batch:
            self._received += 1
            if self._received == batch:
                self._received = 0
                self.request(batch)

    def on_error(self, error: BaseException) -> None:
        require_not_none(error, "error", "2.13")
        self.messages.append(Recorded(self._scheduler.clock, OnError(error)))

    def on_complete(self) -> None:
        self.messages.append(Recorded(self._scheduler.clock, OnCompleted()))

    def __repr__(self) -> str:
        return f"<MockObserver {len(self.messages)} messages>"

