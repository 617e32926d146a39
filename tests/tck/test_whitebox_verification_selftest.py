"""Self-tests of ``SubscriberWhiteboxVerification``: broken whitebox subscribers must be caught by the test named
for the rule they break; correct ones (also slow or one-at-a-time ones) must pass.

A port of the JVM kit's ``SubscriberWhiteboxVerificationTest``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from reaqtive.core.streams import Subscriber, Subscription
from reaqtive.tck import SubscriberWhiteboxVerification, TestEnvironment, WhiteboxSubscriberProbe
from tests.tck.reference import ProbedSubscriber
from tests.tck.support import require_test_failure, require_test_pass


class CustomWhiteboxVerification(SubscriberWhiteboxVerification[int]):
    """Runs the kit against subscribers made by ``factory`` (not a pytest class)."""

    def __init__(self, factory: Callable[[WhiteboxSubscriberProbe[int], TestEnvironment], Subscriber[int]]) -> None:
        self._factory = factory

    def create_subscriber(self, probe: WhiteboxSubscriberProbe[int]) -> Subscriber[int]:
        return self._factory(probe, self.env)

    def create_element(self, element: int) -> int:
        return element


def verification(subscriber_class: type[ProbedSubscriber[int]]) -> CustomWhiteboxVerification:
    return CustomWhiteboxVerification(lambda probe, env: subscriber_class(probe))


def simple() -> CustomWhiteboxVerification:
    return verification(ProbedSubscriber)


# -- rule 2.1 ------------------------------------------------------------------------------------------------------


class _DeafPuppetSubscriber(ProbedSubscriber[int]):
    """Registers a puppet that ignores every request."""

    def on_subscribe(self, subscription: Subscription) -> None:
        self._probe.register_on_subscribe(_Puppet(lambda n: None, lambda: None))


class _Puppet:
    def __init__(self, request: Callable[[int], None], cancel: Callable[[], None]) -> None:
        self._request, self._cancel = request, cancel

    def trigger_request(self, elements: int) -> None:
        self._request(elements)

    def signal_cancel(self) -> None:
        self._cancel()


def test_spec201_shouldFailIfRequestNotCalled() -> None:
    require_test_failure(verification(_DeafPuppetSubscriber), "required_spec201_mustSignalDemandViaSubscriptionRequest",
                         "Did not receive expected `request` call within")


def test_spec201_shouldPass() -> None:
    require_test_pass(simple(), "required_spec201_mustSignalDemandViaSubscriptionRequest")


# -- rule 2.3 ------------------------------------------------------------------------------------------------------

IN_ON_COMPLETE = "required_spec203_mustNotCallMethodsOnSubscriptionOrPublisherInOnComplete"
IN_ON_ERROR = "required_spec203_mustNotCallMethodsOnSubscriptionOrPublisherInOnError"


class _RequestsInOnComplete(ProbedSubscriber[int]):
    def on_complete(self) -> None:
        assert self._subscription is not None
        self._subscription.request(1)


class _CancelsInOnComplete(ProbedSubscriber[int]):
    def on_complete(self) -> None:
        assert self._subscription is not None
        self._subscription.cancel()


class _RequestsInOnError(ProbedSubscriber[int]):
    def on_error(self, error: BaseException) -> None:
        assert self._subscription is not None
        self._subscription.request(1)


class _CancelsInOnError(ProbedSubscriber[int]):
    def on_error(self, error: BaseException) -> None:
        assert self._subscription is not None
        self._subscription.cancel()


def test_spec203_shouldFail_onRequestFromOnComplete() -> None:
    require_test_failure(verification(_RequestsInOnComplete), IN_ON_COMPLETE,
                         "Subscription.request MUST NOT be called from Subscriber.on_complete (Rule 2.3)!")


def test_spec203_shouldFail_onCancelFromOnComplete() -> None:
    require_test_failure(verification(_CancelsInOnComplete), IN_ON_COMPLETE,
                         "Subscription.cancel MUST NOT be called from Subscriber.on_complete (Rule 2.3)!")


def test_spec203_shouldFail_onRequestFromOnError() -> None:
    require_test_failure(verification(_RequestsInOnError), IN_ON_ERROR,
                         "Subscription.request MUST NOT be called from Subscriber.on_error (Rule 2.3)!")


def test_spec203_shouldFail_onCancelFromOnError() -> None:
    require_test_failure(verification(_CancelsInOnError), IN_ON_ERROR,
                         "Subscription.cancel MUST NOT be called from Subscriber.on_error (Rule 2.3)!")


class _Unrelated:
    """An object that merely has methods named like terminal signals."""

    def __init__(self, subscription: Subscription, call: str) -> None:
        self._subscription, self._call = subscription, call

    def on_complete(self) -> None:
        if self._call == "request":
            self._subscription.request(1)
        else:
            self._subscription.cancel()

    def on_error(self) -> None:
        self.on_complete()


def _unrelated(call: str, method: str) -> type[ProbedSubscriber[int]]:
    class UsesUnrelatedOnSubscribe(ProbedSubscriber[int]):
        def on_subscribe(self, subscription: Subscription) -> None:
            super().on_subscribe(subscription)
            getattr(_Unrelated(subscription, call), method)()  # a call from *a* method named on_complete/on_error

    return UsesUnrelatedOnSubscribe


def test_spec203_shouldPass_unrelatedRequestFromMethodNamedOnComplete() -> None:
    require_test_pass(verification(_unrelated("request", "on_complete")), IN_ON_COMPLETE)


def test_spec203_shouldPass_unrelatedCancelFromMethodNamedOnComplete() -> None:
    require_test_pass(verification(_unrelated("cancel", "on_complete")), IN_ON_COMPLETE)


def test_spec203_shouldPass_unrelatedRequestFromMethodNamedOnError() -> None:
    require_test_pass(verification(_unrelated("request", "on_error")), IN_ON_ERROR)


def test_spec203_shouldPass_unrelatedCancelFromMethodNamedOnError() -> None:
    require_test_pass(verification(_unrelated("cancel", "on_error")), IN_ON_ERROR)


# -- rules 2.5 to 2.10 ---------------------------------------------------------------------------------------------


class _KeepsEverySubscription(ProbedSubscriber[int]):
    """Requests on every subscription it is given and never cancels the second one."""

    def on_subscribe(self, subscription: Subscription) -> None:
        subscription.request(1)
        if self._subscription is None:
            self._subscription = subscription
            self._probe.register_on_subscribe(_Puppet(subscription.request, subscription.cancel))


def test_spec205_shouldFail() -> None:
    require_test_failure(
        verification(_KeepsEverySubscription),
        "required_spec205_mustCallSubscriptionCancelIfItAlreadyHasAnSubscriptionAndReceivesAnotherOnSubscribeSignal",
        "Expected 2nd Subscription given to subscriber to be cancelled",
    )


class _ThrowsAfterCancel(ProbedSubscriber[int]):
    def on_subscribe(self, subscription: Subscription) -> None:
        self._subscription = subscription
        self._cancelled = False

        def cancel() -> None:
            self._cancelled = True
            subscription.cancel()

        self._probe.register_on_subscribe(_Puppet(subscription.request, cancel))

    def on_next(self, element: int) -> None:
        if self._cancelled:
            raise RuntimeError("But I thought it's cancelled!")
        super().on_next(element)


def test_spec208_shouldFail() -> None:
    require_test_failure(
        verification(_ThrowsAfterCancel),
        "required_spec208_mustBePreparedToReceiveOnNextSignalsAfterHavingCalledSubscriptionCancel",
        "But I thought it's cancelled!",
    )


def _delayed_puppet_subscriber(probe: WhiteboxSubscriberProbe[int], env: TestEnvironment) -> Subscriber[int]:
    """Requests only a quarter of a timeout after being asked: the kit must wait for demand before it signals."""

    class Delayed(ProbedSubscriber[int]):
        def on_subscribe(self, subscription: Subscription) -> None:
            self._subscription = subscription

            def later(n: int) -> None:
                timer = threading.Timer(env.default_timeout_ms / 4000, subscription.request, (n,))
                timer.daemon = True
                timer.start()

            self._probe.register_on_subscribe(_Puppet(later, subscription.cancel))

    return Delayed(probe)


def test_spec208_shouldWaitForDemandBeforeSignalling() -> None:
    require_test_pass(CustomWhiteboxVerification(_delayed_puppet_subscriber),
                      "required_spec208_mustBePreparedToReceiveOnNextSignalsAfterHavingCalledSubscriptionCancel")


class _ForgetsToRegisterCompletion(ProbedSubscriber[int]):
    def on_complete(self) -> None:
        pass


def test_spec209_shouldFail_whenCompletionIsNotRegistered() -> None:
    require_test_failure(verification(_ForgetsToRegisterCompletion),
                         "required_spec209_mustBePreparedToReceiveAnOnCompleteSignalWithPrecedingRequestCall",
                         "did not call `register_on_complete()`")


class _NeverRegisters(ProbedSubscriber[int]):
    def on_subscribe(self, subscription: Subscription) -> None:
        self._subscription = subscription


def test_spec209_withoutRequest_shouldFail_whenOnSubscribeIsNotRegistered() -> None:
    require_test_failure(verification(_NeverRegisters),
                         "required_spec209_mustBePreparedToReceiveAnOnCompleteSignalWithoutPrecedingRequestCall",
                         "did not `register_on_subscribe`")


class _ThrowsFromOnError(ProbedSubscriber[int]):
    def on_error(self, error: BaseException) -> None:
        raise RuntimeError("subscriber failed handling on_error") from error


def test_spec210_withRequest_shouldFail_whenOnErrorRaises() -> None:
    require_test_failure(verification(_ThrowsFromOnError),
                         "required_spec210_mustBePreparedToReceiveAnOnErrorSignalWithPrecedingRequestCall",
                         "Test Exception: Boom!")


def test_spec210_withoutRequest_shouldFail_whenOnErrorRaises() -> None:
    require_test_failure(verification(_ThrowsFromOnError),
                         "required_spec210_mustBePreparedToReceiveAnOnErrorSignalWithoutPrecedingRequestCall",
                         "Test Exception: Boom!")


# -- rule 2.13 -----------------------------------------------------------------------------------------------------


class _AcceptsNone(ProbedSubscriber[int]):
    def on_subscribe(self, subscription: Subscription) -> None:
        if subscription is not None:
            super().on_subscribe(subscription)

    def on_next(self, element: int) -> None:
        pass

    def on_error(self, error: BaseException) -> None:
        pass


def test_spec213_shouldFail_whenNoneIsAccepted() -> None:
    for signal in ("onSubscribe", "onNext", "onError"):
        python_name = {"onSubscribe": "on_subscribe", "onNext": "on_next", "onError": "on_error"}[signal]
        require_test_failure(verification(_AcceptsNone),
                             f"required_spec213_{signal}_mustThrowNullPointerExceptionWhenParametersAreNull",
                             f"{python_name}(None) did not raise TypeError")


# -- rule 3.8 ------------------------------------------------------------------------------------------------------

SPEC308 = "required_spec308_requestMustRegisterGivenNumberElementsToBeProduced"


def test_spec308_shouldPass_forSimpleSubscriber() -> None:
    require_test_pass(simple(), SPEC308)


def test_spec308_shouldPass_withDelayedRequests() -> None:
    require_test_pass(CustomWhiteboxVerification(_delayed_puppet_subscriber), SPEC308)


class _OneAtATime(ProbedSubscriber[int]):
    """Requests one element at a time, each from a timer thread, however many the kit asks for."""

    def on_subscribe(self, subscription: Subscription) -> None:
        self._subscription = subscription
        self._wanted = 0
        self._lock = threading.Lock()
        self._probe.register_on_subscribe(_Puppet(self._want, subscription.cancel))

    def _want(self, n: int) -> None:
        with self._lock:
            first = self._wanted == 0
            self._wanted += n
        if first:
            self._request_one_later()

    def _request_one_later(self) -> None:
        assert self._subscription is not None
        timer = threading.Timer(0.01, self._subscription.request, (1,))
        timer.daemon = True
        timer.start()

    def on_next(self, element: int) -> None:
        super().on_next(element)
        with self._lock:
            self._wanted -= 1
            more = self._wanted > 0
        if more:
            self._request_one_later()


def test_spec308_shouldPass_forOneAtATimeSubscriber() -> None:
    require_test_pass(verification(_OneAtATime), SPEC308)


def test_happy_path_shouldPass_forOneAtATimeSubscriber() -> None:
    require_test_pass(verification(_OneAtATime), "required_exerciseWhiteboxHappyPath")

