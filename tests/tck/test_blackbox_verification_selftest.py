"""Self-tests of ``SubscriberBlackboxVerification``: broken subscribers must be caught by the test named for the
rule they break; correct ones must pass. A port of the JVM kit's ``SubscriberBlackboxVerificationTest``, plus a
check of the rule 2.1 test this kit fixes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reaqtive.core.streams import Subscriber, Subscription
from reaqtive.tck import SubscriberBlackboxVerification
from tests.tck.reference import OneByOneSubscriber
from tests.tck.support import require_test_failure, require_test_pass


class CustomBlackboxVerification(SubscriberBlackboxVerification[int]):
    """Runs the kit against subscribers made by ``factory`` (not a pytest class)."""

    def __init__(self, factory: Callable[[], Subscriber[int]], trigger: Callable[[Any], None] | None = None) -> None:
        self._factory = factory
        self._trigger = trigger
        self.created: list[Subscriber[int]] = []

    def create_subscriber(self) -> Subscriber[int]:
        subscriber = self._factory()
        self.created.append(subscriber)
        return subscriber

    def create_element(self, element: int) -> int:
        return element

    def trigger_request(self, subscriber: Subscriber[int]) -> None:
        if self._trigger is not None:
            self._trigger(subscriber)


class NoopSubscriber:
    """Accepts everything, requests nothing, checks nothing."""

    def on_subscribe(self, subscription: Subscription) -> None:
        pass

    def on_next(self, element: int) -> None:
        pass

    def on_error(self, error: BaseException) -> None:
        pass

    def on_complete(self) -> None:
        pass


def noop() -> CustomBlackboxVerification:
    return CustomBlackboxVerification(NoopSubscriber)


def simple() -> CustomBlackboxVerification:
    return CustomBlackboxVerification(OneByOneSubscriber)


# -- rule 2.1 ------------------------------------------------------------------------------------------------------

SPEC201 = "required_spec201_blackbox_mustSignalDemandViaSubscriptionRequest"


def test_spec201_shouldFailIfRequestNotCalled() -> None:
    require_test_failure(noop(), SPEC201, "Did not receive expected `request` call within")


def test_spec201_shouldPass_forSubscriberRequestingOneByOne() -> None:
    require_test_pass(simple(), SPEC201)


class _CountingSubscriber(OneByOneSubscriber[int]):
    """Requests three elements at once."""

    def on_subscribe(self, subscription: Subscription) -> None:
        self._subscription = subscription
        subscription.request(3)

    def on_next(self, element: int) -> None:
        self.received.append(element)


def test_spec201_sendsTheRequestedElements() -> None:
    """JVM defect fixed: the JVM kit's loop condition is inverted and sends no element to a live subscriber."""
    verification = CustomBlackboxVerification(_CountingSubscriber)
    require_test_pass(verification, SPEC201)
    subscriber = verification.created[0]
    assert isinstance(subscriber, _CountingSubscriber)
    assert subscriber.received == [0, 1, 2]
    assert subscriber.done.is_set()


def test_spec201_shouldPass_withTriggeredDemand() -> None:
    verification = CustomBlackboxVerification(lambda: OneByOneSubscriber(request_on_subscribe=False),
                                              trigger=lambda s: s.start())
    require_test_pass(verification, SPEC201)


# -- rule 2.3 ------------------------------------------------------------------------------------------------------

IN_ON_COMPLETE = "required_spec203_blackbox_mustNotCallMethodsOnSubscriptionOrPublisherInOnComplete"
IN_ON_ERROR = "required_spec203_blackbox_mustNotCallMethodsOnSubscriptionOrPublisherInOnError"


class _KeepsSubscription(NoopSubscriber):
    def on_subscribe(self, subscription: Subscription) -> None:
        self.subscription = subscription


class _RequestsInOnComplete(_KeepsSubscription):
    def on_complete(self) -> None:
        self.subscription.request(1)


class _CancelsInOnComplete(_KeepsSubscription):
    def on_complete(self) -> None:
        self.subscription.cancel()


class _RequestsInOnError(_KeepsSubscription):
    def on_error(self, error: BaseException) -> None:
        self.subscription.request(1)


class _CancelsInOnError(_KeepsSubscription):
    def on_error(self, error: BaseException) -> None:
        self.subscription.cancel()


def test_spec203_shouldFail_onRequestFromOnComplete() -> None:
    require_test_failure(CustomBlackboxVerification(_RequestsInOnComplete), IN_ON_COMPLETE,
                         "Subscription.request MUST NOT be called from Subscriber.on_complete (Rule 2.3)!")


def test_spec203_shouldFail_onCancelFromOnComplete() -> None:
    require_test_failure(CustomBlackboxVerification(_CancelsInOnComplete), IN_ON_COMPLETE,
                         "Subscription.cancel MUST NOT be called from Subscriber.on_complete (Rule 2.3)!")


def test_spec203_shouldFail_onRequestFromOnError() -> None:
    require_test_failure(CustomBlackboxVerification(_RequestsInOnError), IN_ON_ERROR,
                         "Subscription.request MUST NOT be called from Subscriber.on_error (Rule 2.3)!")


def test_spec203_shouldFail_onCancelFromOnError() -> None:
    require_test_failure(CustomBlackboxVerification(_CancelsInOnError), IN_ON_ERROR,
                         "Subscription.cancel MUST NOT be called from Subscriber.on_error (Rule 2.3)!")


class _UnrelatedTerminalNames:
    """Has methods named like terminal signals that use the subscription; it is not the subscriber."""

    def __init__(self, subscription: Subscription) -> None:
        self._subscription = subscription

    def on_complete(self) -> None:
        self._subscription.request(1)

    def on_error(self) -> None:
        self._subscription.cancel()


def _calls_unrelated(method: str) -> Callable[[], Subscriber[int]]:
    class UsesUnrelated(NoopSubscriber):
        def on_subscribe(self, subscription: Subscription) -> None:
            getattr(_UnrelatedTerminalNames(subscription), method)()

    return UsesUnrelated


def test_spec203_shouldPass_unrelatedCallsFromMethodsNamedLikeTerminalSignals() -> None:
    for name in (IN_ON_COMPLETE, IN_ON_ERROR):
        for method in ("on_complete", "on_error"):
            require_test_pass(CustomBlackboxVerification(_calls_unrelated(method)), name)


# -- rules 2.5, 2.9, 2.10, 2.13 ------------------------------------------------------------------------------------

SPEC205 = ("required_spec205_blackbox_mustCallSubscriptionCancelIfItAlreadyHasAnSubscriptionAndReceivesAnotherOnSubscr"
           "ibeSignal")


class _RequestsFromEverySubscription(NoopSubscriber):
    def on_subscribe(self, subscription: Subscription) -> None:
        subscription.request(1)


def test_spec205_shouldFail_whenRequestingFromSecondSubscription() -> None:
    require_test_failure(CustomBlackboxVerification(_RequestsFromEverySubscription), SPEC205,
                         "illegally called `subscription.request(1)`")


def test_spec205_shouldGetCompletion() -> None:
    require_test_pass(simple(), SPEC205)


def test_spec209_withRequest_shouldFail_forNoopSubscriber() -> None:
    require_test_failure(noop(),
                         "required_spec209_blackbox_mustBePreparedToReceiveAnOnCompleteSignalWithPrecedingRequestCall",
                         "Did not receive expected `request` call within")


def test_spec209_withoutRequest_shouldPass_forNoopSubscriber() -> None:
    require_test_pass(noop(),
                      "required_spec209_blackbox_mustBePreparedToReceiveAnOnCompleteSignalWithoutPrecedingRequestCall")


class _ThrowsFromOnError(OneByOneSubscriber[int]):
    def on_error(self, error: BaseException) -> None:
        raise RuntimeError("subscriber failed handling on_error") from error


def test_spec210_shouldFail_whenOnErrorRaises() -> None:
    for name in ("required_spec210_blackbox_mustBePreparedToReceiveAnOnErrorSignalWithPrecedingRequestCall",
                 "required_spec210_blackbox_mustBePreparedToReceiveAnOnErrorSignalWithoutPrecedingRequestCall"):
        require_test_failure(CustomBlackboxVerification(_ThrowsFromOnError), name, "Test Exception: Boom!")


def test_spec210_shouldPass() -> None:
    for name in ("required_spec210_blackbox_mustBePreparedToReceiveAnOnErrorSignalWithPrecedingRequestCall",
                 "required_spec210_blackbox_mustBePreparedToReceiveAnOnErrorSignalWithoutPrecedingRequestCall"):
        require_test_pass(simple(), name)


def test_spec213_shouldFail_forNoopSubscriber() -> None:
    for signal, call in (("onSubscribe", "on_subscribe(None)"), ("onNext", "on_next(None)"),
                         ("onError", "on_error(None)")):
        name = f"required_spec213_blackbox_{signal}_mustThrowNullPointerExceptionWhenParametersAreNull"
        require_test_failure(noop(), name, f"{call} did not raise TypeError")
