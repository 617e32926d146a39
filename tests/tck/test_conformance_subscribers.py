"""Reactive Streams conformance of the sink subscriber ``CallbackSubscriber``, whitebox and blackbox, with
batched demand and with unbounded demand."""

from __future__ import annotations

from reaqtive import CallbackSubscriber
from reaqtive.core.streams import Subscriber, Subscription
from reaqtive.tck import SubscriberBlackboxVerification, SubscriberWhiteboxVerification, WhiteboxSubscriberProbe


class ProbedCallbackSubscriber(CallbackSubscriber[int]):
    """A ``CallbackSubscriber`` whose callbacks report to the kit's probe, and which hands the kit a puppet that
    drives its own ``request``/``cancel``: the subscriber's code paths are its own, the probe only watches."""

    def __init__(self, probe: WhiteboxSubscriberProbe[int], batch_size: int | None) -> None:
        super().__init__(probe.register_on_next, probe.register_on_error, probe.register_on_complete,
                         batch_size=batch_size)
        self._probe = probe

    def on_subscribe(self, subscription: Subscription) -> None:
        super().on_subscribe(subscription)
        self._probe.register_on_subscribe(_Puppet(self))  # only the first registration counts


class _Puppet:
    def __init__(self, subscriber: CallbackSubscriber[int]) -> None:
        self._subscriber = subscriber

    def trigger_request(self, elements: int) -> None:
        self._subscriber.request(elements)

    def signal_cancel(self) -> None:
        self._subscriber.cancel()


class TestCallbackSubscriberWhiteboxBatched(SubscriberWhiteboxVerification[int]):
    def create_subscriber(self, probe: WhiteboxSubscriberProbe[int]) -> Subscriber[int]:
        return ProbedCallbackSubscriber(probe, batch_size=4)

    def create_element(self, element: int) -> int:
        return element


class TestCallbackSubscriberWhiteboxUnbounded(SubscriberWhiteboxVerification[int]):
    def create_subscriber(self, probe: WhiteboxSubscriberProbe[int]) -> Subscriber[int]:
        return ProbedCallbackSubscriber(probe, batch_size=None)

    def create_element(self, element: int) -> int:
        return element


class TestCallbackSubscriberBlackboxBatched(SubscriberBlackboxVerification[int]):
    def create_subscriber(self) -> Subscriber[int]:
        return CallbackSubscriber(lambda value: None, lambda error: None, batch_size=4)

    def create_element(self, element: int) -> int:
        return element


class TestCallbackSubscriberBlackboxUnbounded(SubscriberBlackboxVerification[int]):
    def create_subscriber(self) -> Subscriber[int]:
        return CallbackSubscriber(lambda value: None, lambda error: None)

    def create_element(self, element: int) -> int:
        return element
