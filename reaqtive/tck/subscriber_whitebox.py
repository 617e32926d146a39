"""``SubscriberWhiteboxVerification``: the 27 tests of the JVM kit's SubscriberWhiteboxVerification (rules 2.x).

The subscriber under test cooperates through a probe: it calls ``probe.register_on_subscribe(puppet)`` in
``on_subscribe`` and ``probe.register_on_next/on_error/on_complete`` for each signal::

    class TestMySubscriber(SubscriberWhiteboxVerification[int]):
        def create_subscriber(self, probe: WhiteboxSubscriberProbe[int]) -> Subscriber[int]:
            return MyProbedSubscriber(probe)

        def create_element(self, element: int) -> int:
            return element
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Generic, TypeVar

from reaqtive.core.streams import LONG_MAX, Publisher, Subscriber
from reaqtive.tck.base import VerificationBase
from reaqtive.tck.env import TestEnvironment
from reaqtive.tck.failures import TestException
from reaqtive.tck.helper_publisher import create_helper_publisher
from reaqtive.tck.manual_publisher import ManualPublisher
from reaqtive.tck.outcomes import NOT_VERIFIED_SUBSCRIBER
from reaqtive.tck.probes import SubscriberPuppet, WhiteboxSubscriberProbe
from reaqtive.tck.subscribers import ManualSubscriberWithSubscriptionSupport
from reaqtive.tck.support import SecondSubscription, TerminalSignalGuardSubscription, require_null_error
from reaqtive.tck.sync import Latch, Promise

__all__ = ["SubscriberWhiteboxVerification", "WhiteboxTestStage"]

T = TypeVar("T")


class SubscriberWhiteboxVerification(VerificationBase, Generic[T]):
    """Verifies a cooperating Subscriber against rules 2.1-2.13 and 3.8 (27 tests)."""

    # -- hooks ----------------------------------------------------------------------------------------------------

    @abstractmethod
    def create_subscriber(self, probe: WhiteboxSubscriberProbe[T]) -> Subscriber[T]:
        """A subscriber that reports to ``probe`` (see the module docstring)."""

    @abstractmethod
    def create_element(self, element: int) -> T:
        """The element with id ``element``: distinct per id, never ``None``, safe to call from any thread."""

    def create_helper_publisher(self, elements: int) -> Publisher[T]:
        """The source of the elements the kit sends; exactly ``elements``, infinite above ``INT_MAX``."""
        return create_helper_publisher(self.create_element, elements, self.publisher_executor())

    # -- test templates -------------------------------------------------------------------------------------------

    def subscriber_test(self, body: Callable[[WhiteboxTestStage[T]], None]) -> None:
        """Run ``body`` with a subscriber under test attached to a kit-driven publisher, then fail on any recorded
        error (the JVM kit leaves this final check out of several tests)."""
        stage = WhiteboxTestStage(self.env, self)
        body(stage)
        self.env.verify_no_async_errors_no_delay()

    def _subscriber_test_without_setup(self, body: Callable[[], None]) -> None:
        body()
        self.env.verify_no_async_errors_no_delay()

    # -- tests ----------------------------------------------------------------------------------------------------

    def test_required_exerciseWhiteboxHappyPath(self) -> None:
        def body(stage: WhiteboxTestStage[T]) -> None:
            stage.puppet().trigger_request(1)
            stage.puppet().trigger_request(1)
            received_requests = stage.expect_request()
            stage.probe.expect_next(stage.signal_next())
            stage.puppet().trigger_request(1)
            if received_requests == 1:
                stage.expect_request()
            stage.probe.expect_next(stage.signal_next())
            stage.puppet().signal_cancel()
            stage.expect_cancelling()
            stage.verify_no_async_errors()

        self.subscriber_test(body)

    def test_required_spec201_mustSignalDemandViaSubscriptionRequest(self) -> None:
        def body(stage: WhiteboxTestStage[T]) -> None:
            stage.puppet().trigger_request(1)
            stage.expect_request()
            stage.signal_next()

        self.subscriber_test(body)

    def test_untested_spec202_shouldAsynchronouslyDispatch(self) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_required_spec203_mustNotCallMethodsOnSubscriptionOrPublisherInOnComplete(self) -> None:
        env = self.env

        def body() -> None:
            sub = self.create_subscriber(_new_probe(env))
            sub.on_subscribe(TerminalSignalGuardSubscription(env, "on_complete"))
            with env.signalling("on_complete"):
                sub.on_complete()

        self._subscriber_test_without_setup(body)

    def test_required_spec203_mustNotCallMethodsOnSubscriptionOrPublisherInOnError(self) -> None:
        env = self.env

        def body() -> None:
            sub = self.create_subscriber(_new_probe(env))
            sub.on_subscribe(TerminalSignalGuardSubscription(env, "on_error"))
            with env.signalling("on_error"):
                sub.on_error(TestException())

        self._subscriber_test_without_setup(body)

    def test_untested_spec204_mustConsiderTheSubscriptionAsCancelledInAfterRecievingOnCompleteOrOnError(
        self,
    ) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_required_spec205_mustCallSubscriptionCancelIfItAlreadyHasAnSubscriptionAndReceivesAnotherOnSubscribeSignal(
        self,
    ) -> None:
        env = self.env

        def body(stage: WhiteboxTestStage[T]) -> None:
            second_cancelled = Latch(env)
            stage.sub().on_subscribe(SecondSubscription(env, second_cancelled, forbid_request=False))
            second_cancelled.expect_close(
                "Expected 2nd Subscription given to subscriber to be cancelled, but `Subscription.cancel()` was not "
                "called"
            )
            env.verify_no_async_errors()

        self.subscriber_test(body)

    def test_untested_spec206_mustCallSubscriptionCancelIfItIsNoLongerValid(self) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_untested_spec207_mustEnsureAllCallsOnItsSubscriptionTakePlaceFromTheSameThreadOrTakeCareOfSynchronization(
        self,
    ) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_required_spec208_mustBePreparedToReceiveOnNextSignalsAfterHavingCalledSubscriptionCancel(self) -> None:
        def body(stage: WhiteboxTestStage[T]) -> None:
            stage.puppet().trigger_request(1)
            stage.expect_request()
            stage.puppet().signal_cancel()
            stage.expect_cancelling()
            stage.signal_next()  # an element already in flight when the subscriber cancelled (rule 2.8)
            stage.puppet().trigger_request(1)
            stage.puppet().trigger_request(1)
            stage.verify_no_async_errors()

        self.subscriber_test(body)

    def test_required_spec209_mustBePreparedToReceiveAnOnCompleteSignalWithPrecedingRequestCall(self) -> None:
        def body(stage: WhiteboxTestStage[T]) -> None:
            stage.puppet().trigger_request(1)
            stage.send_completion()
            stage.probe.expect_completion()
            stage.verify_no_async_errors()

        self.subscriber_test(body)

    def test_required_spec209_mustBePreparedToReceiveAnOnCompleteSignalWithoutPrecedingRequestCall(self) -> None:
        def body(stage: WhiteboxTestStage[T]) -> None:
            stage.send_completion()
            stage.probe.expect_completion()
            stage.verify_no_async_errors()

        self.subscriber_test(body)

    def test_required_spec210_mustBePreparedToReceiveAnOnErrorSignalWithPrecedingRequestCall(self) -> None:
        def body(stage: WhiteboxTestStage[T]) -> None:
            stage.puppet().trigger_request(1)
            stage.puppet().trigger_request(1)
            error = TestException()
            stage.send_error(error)
            stage.probe.expect_error(error)
            self.env.verify_no_async_errors_no_delay()

        self.subscriber_test(body)

    def test_required_spec210_mustBePreparedToReceiveAnOnErrorSignalWithoutPrecedingRequestCall(self) -> None:
        def body(stage: WhiteboxTestStage[T]) -> None:
            error = TestException()
            stage.send_error(error)
            stage.probe.expect_error(error)
            self.env.verify_no_async_errors_no_delay()

        self.subscriber_test(body)

    def test_untested_spec211_mustMakeSureThatAllCallsOnItsMethodsHappenBeforeTheProcessingOfTheRespectiveEvents(
        self,
    ) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_untested_spec212_mustNotCallOnSubscribeMoreThanOnceBasedOnObjectEquality_specViolation(self) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_untested_spec213_failingOnSignalInvocation(self) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_required_spec213_onSubscribe_mustThrowNullPointerExceptionWhenParametersAreNull(self) -> None:
        def body(stage: WhiteboxTestStage[T]) -> None:
            require_null_error(self, "on_subscribe(None)", lambda: stage.sub().on_subscribe(None))  # type: ignore[arg-type]

        self.subscriber_test(body)

    def test_required_spec213_onNext_mustThrowNullPointerExceptionWhenParametersAreNull(self) -> None:
        def body(stage: WhiteboxTestStage[T]) -> None:
            require_null_error(self, "on_next(None)", lambda: stage.sub().on_next(None))  # type: ignore[arg-type]

        self.subscriber_test(body)

    def test_required_spec213_onError_mustThrowNullPointerExceptionWhenParametersAreNull(self) -> None:
        def body(stage: WhiteboxTestStage[T]) -> None:
            require_null_error(self, "on_error(None)", lambda: stage.sub().on_error(None))  # type: ignore[arg-type]

        self.subscriber_test(body)

    def test_untested_spec301_mustNotBeCalledOutsideSubscriberContext(self) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_required_spec308_requestMustRegisterGivenNumberElementsToBeProduced(self) -> None:
        def body(stage: WhiteboxTestStage[T]) -> None:
            stage.puppet().trigger_request(2)
            requested = stage.expect_request()
            stage.probe.expect_next(stage.signal_next())
            if requested < 2:  # a subscriber may request one at a time
                stage.expect_request()
            stage.probe.expect_next(stage.signal_next())
            stage.probe.expect_none()
            stage.puppet().trigger_request(3)
            stage.verify_no_async_errors()

        self.subscriber_test(body)

    def test_untested_spec310_requestMaySynchronouslyCallOnNextOnSubscriber(self) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_untested_spec311_requestMaySynchronouslyCallOnCompleteOrOnError(self) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_untested_spec314_cancelMayCauseThePublisherToShutdownIfNoOtherSubscriptionExists(self) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_untested_spec315_cancelMustNotThrowExceptionAndMustSignalOnError(self) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_untested_spec316_requestMustNotThrowExceptionAndMustOnErrorTheSubscriber(self) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)


class WhiteboxTestStage(ManualPublisher[T]):
    """The kit-driven publisher a whitebox subscriber is attached to, with the subscriber's probe and puppet.

    Elements come from ``tees``, a kit subscriber of the helper publisher (so they are the implementation's own
    ``create_element`` values). Setting up waits for the subscriber to register its puppet.
    """

    def __init__(self, env: TestEnvironment, verification: SubscriberWhiteboxVerification[T]) -> None:
        super().__init__(env)
        self.tees: ManualSubscriberWithSubscriptionSupport[T] = env.new_manual_subscriber(
            verification.create_helper_publisher(LONG_MAX)
        )
        self.probe: WhiteboxSubscriberProbe[T] = WhiteboxSubscriberProbe(env, self.subscriber)
        subscriber = verification.create_subscriber(self.probe)
        self.subscribe(subscriber)
        self.probe.puppet_promise.expect_completion(
            env.default_timeout_ms, f"Subscriber {subscriber!r} did not `register_on_subscribe`"
        )
        env.verify_no_async_errors_no_delay()

    def sub(self) -> Subscriber[T]:
        """The subscriber under test."""
        return self.subscriber.value()

    def puppet(self) -> SubscriberPuppet:
        return self.probe.puppet()

    def next_t(self) -> T:
        return self.tees.request_next_element()

    def signal_next(self) -> T:
        """Send the subscriber the next element (the kit does not check demand: tests expect a request first)."""
        element = self.next_t()
        self.send_next(element)
        return element

    def verify_no_async_errors(self) -> None:
        self.env.verify_no_async_errors()


def _new_probe(env: TestEnvironment) -> WhiteboxSubscriberProbe[T]:
    unset: Promise[Subscriber[T]] = Promise(env)
    return WhiteboxSubscriberProbe(env, unset)
