"""``SubscriberBlackboxVerification``: the 26 tests of the JVM kit's SubscriberBlackboxVerification (rules 2.x).

For subscribers that cannot report to a probe: the kit only sees the signals it sends and the ``request`` and
``cancel`` calls it receives::

    class TestMySubscriber(SubscriberBlackboxVerification[int]):
        def create_subscriber(self) -> Subscriber[int]:
            return MySubscriber()

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
from reaqtive.tck.probes import BlackboxSubscriberProxy
from reaqtive.tck.subscribers import ManualSubscriberWithSubscriptionSupport
from reaqtive.tck.support import SecondSubscription, TerminalSignalGuardSubscription, require_null_error
from reaqtive.tck.sync import Latch

__all__ = ["BlackboxTestStage", "SubscriberBlackboxVerification"]

T = TypeVar("T")

MAX_SIGNALS_FOR_DEMAND = 512
"""The rule 2.1 test sends at most this many of the elements the subscriber requested."""


class SubscriberBlackboxVerification(VerificationBase, Generic[T]):
    """Verifies a Subscriber from the outside against rules 2.1-2.13 (26 tests)."""

    # -- hooks ----------------------------------------------------------------------------------------------------

    @abstractmethod
    def create_subscriber(self) -> Subscriber[T]:
        """A fresh subscriber under test."""

    @abstractmethod
    def create_element(self, element: int) -> T:
        """The element with id ``element``: distinct per id, never ``None``, safe to call from any thread."""

    def trigger_request(self, subscriber: Subscriber[T]) -> None:
        """Override when the subscriber needs an outside stimulus before it requests (default: nothing)."""

    def create_helper_publisher(self, elements: int) -> Publisher[T]:
        """The source of the elements the kit sends; exactly ``elements``, infinite above ``INT_MAX``."""
        return create_helper_publisher(self.create_element, elements, self.publisher_executor())

    # -- test templates -------------------------------------------------------------------------------------------

    def blackbox_subscriber_test(self, body: Callable[[BlackboxTestStage[T]], None]) -> None:
        """Run ``body`` with the subscriber under test attached to a kit-driven publisher, then fail on any
        recorded error (the JVM kit leaves this final check out of several tests)."""
        stage = BlackboxTestStage(self.env, self)
        body(stage)
        self.env.verify_no_async_errors_no_delay()

    def _without_setup(self, body: Callable[[], None]) -> None:
        body()
        self.env.verify_no_async_errors_no_delay()

    # -- tests ----------------------------------------------------------------------------------------------------

    def test_required_spec201_blackbox_mustSignalDemandViaSubscriptionRequest(self) -> None:
        def body(stage: BlackboxTestStage[T]) -> None:
            self.trigger_request(stage.sub_proxy.target)
            requested = stage.expect_request()
            # Send what was requested (capped), while the subscriber has not cancelled. The JVM kit's loop has
            # its condition inverted and sends nothing to a subscriber that has not cancelled.
            for _ in range(min(requested, MAX_SIGNALS_FOR_DEMAND)):
                if stage.is_cancelled():
                    break
                stage.signal_next()
            stage.send_completion()

        self.blackbox_subscriber_test(body)

    def test_untested_spec202_blackbox_shouldAsynchronouslyDispatch(self) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_required_spec203_blackbox_mustNotCallMethodsOnSubscriptionOrPublisherInOnComplete(self) -> None:
        env = self.env

        def body() -> None:
            sub = self.create_subscriber()
            sub.on_subscribe(TerminalSignalGuardSubscription(env, "on_complete"))
            with env.signalling("on_complete"):
                sub.on_complete()

        self._without_setup(body)

    def test_required_spec203_blackbox_mustNotCallMethodsOnSubscriptionOrPublisherInOnError(self) -> None:
        env = self.env

        def body() -> None:
            sub = self.create_subscriber()
            sub.on_subscribe(TerminalSignalGuardSubscription(env, "on_error"))
            with env.signalling("on_error"):
                sub.on_error(TestException())

        self._without_setup(body)

    def test_untested_spec204_blackbox_mustConsiderTheSubscriptionAsCancelledInAfterRecievingOnCompleteOrOnError(
        self,
    ) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_required_spec205_blackbox_mustCallSubscriptionCancelIfItAlreadyHasAnSubscriptionAndReceivesAnotherOnSubscribeSignal(  # noqa: E501
        self,
    ) -> None:
        env = self.env

        def body(stage: BlackboxTestStage[T]) -> None:
            second_cancelled = Latch(env)
            sub = stage.sub()
            sub.on_subscribe(SecondSubscription(env, second_cancelled, forbid_request=True, subscriber=repr(sub)))
            second_cancelled.expect_close(
                "Expected SecondSubscription given to subscriber to be cancelled, but `Subscription.cancel()` was "
                "not called"
            )
            env.verify_no_async_errors_no_delay()
            stage.send_completion()  # the subscriber may be waiting for a finite stream to end

        self.blackbox_subscriber_test(body)

    def test_untested_spec206_blackbox_mustCallSubscriptionCancelIfItIsNoLongerValid(self) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_untested_spec207_blackbox_mustEnsureAllCallsOnItsSubscriptionTakePlaceFromTheSameThreadOrTakeCareOfSynchronization(  # noqa: E501
        self,
    ) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_untested_spec208_blackbox_mustBePreparedToReceiveOnNextSignalsAfterHavingCalledSubscriptionCancel(
        self,
    ) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_required_spec209_blackbox_mustBePreparedToReceiveAnOnCompleteSignalWithPrecedingRequestCall(
        self,
    ) -> None:
        def body(stage: BlackboxTestStage[T]) -> None:
            self.trigger_request(stage.sub_proxy.target)
            stage.expect_request()
            stage.sub().on_complete()
            stage.sub_proxy.expect_completion()

        self.blackbox_subscriber_test(body)

    def test_required_spec209_blackbox_mustBePreparedToReceiveAnOnCompleteSignalWithoutPrecedingRequestCall(
        self,
    ) -> None:
        def body(stage: BlackboxTestStage[T]) -> None:
            stage.sub().on_complete()
            stage.sub_proxy.expect_completion()

        self.blackbox_subscriber_test(body)

    def test_required_spec210_blackbox_mustBePreparedToReceiveAnOnErrorSignalWithPrecedingRequestCall(
        self,
    ) -> None:
        def body(stage: BlackboxTestStage[T]) -> None:
            self.trigger_request(stage.sub_proxy.target)
            stage.expect_request()
            stage.sub().on_error(TestException())
            stage.sub_proxy.expect_error(BaseException)

        self.blackbox_subscriber_test(body)

    def test_required_spec210_blackbox_mustBePreparedToReceiveAnOnErrorSignalWithoutPrecedingRequestCall(
        self,
    ) -> None:
        def body(stage: BlackboxTestStage[T]) -> None:
            stage.sub().on_error(TestException())
            stage.sub_proxy.expect_error(BaseException)

        self.blackbox_subscriber_test(body)

    def test_untested_spec211_blackbox_mustMakeSureThatAllCallsOnItsMethodsHappenBeforeTheProcessingOfTheRespectiveEvents(  # noqa: E501
        self,
    ) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_untested_spec212_blackbox_mustNotCallOnSubscribeMoreThanOnceBasedOnObjectEquality(self) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_untested_spec213_blackbox_failingOnSignalInvocation(self) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_required_spec213_blackbox_onSubscribe_mustThrowNullPointerExceptionWhenParametersAreNull(self) -> None:
        def body() -> None:
            sub = self.create_subscriber()
            require_null_error(self, "on_subscribe(None)", lambda: sub.on_subscribe(None))  # type: ignore[arg-type]

        self._without_setup(body)

    def test_required_spec213_blackbox_onNext_mustThrowNullPointerExceptionWhenParametersAreNull(self) -> None:
        def body() -> None:
            sub = self.create_subscriber()
            sub.on_subscribe(_NoopSubscription())
            require_null_error(self, "on_next(None)", lambda: sub.on_next(None))  # type: ignore[arg-type]

        self._without_setup(body)

    def test_required_spec213_blackbox_onError_mustThrowNullPointerExceptionWhenParametersAreNull(self) -> None:
        def body() -> None:
            sub = self.create_subscriber()
            sub.on_subscribe(_NoopSubscription())
            require_null_error(self, "on_error(None)", lambda: sub.on_error(None))  # type: ignore[arg-type]

        self._without_setup(body)

    def test_untested_spec301_blackbox_mustNotBeCalledOutsideSubscriberContext(self) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_untested_spec308_blackbox_requestMustRegisterGivenNumberElementsToBeProduced(self) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_untested_spec310_blackbox_requestMaySynchronouslyCallOnNextOnSubscriber(self) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_untested_spec311_blackbox_requestMaySynchronouslyCallOnCompleteOrOnError(self) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_untested_spec314_blackbox_cancelMayCauseThePublisherToShutdownIfNoOtherSubscriptionExists(self) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_untested_spec315_blackbox_cancelMustNotThrowExceptionAndMustSignalOnError(self) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)

    def test_untested_spec316_blackbox_requestMustNotThrowExceptionAndMustOnErrorTheSubscriber(self) -> None:
        self.not_verified(NOT_VERIFIED_SUBSCRIBER)


class BlackboxTestStage(ManualPublisher[T]):
    """The kit-driven publisher a blackbox subscriber is attached to, through a recording proxy."""

    def __init__(self, env: TestEnvironment, verification: SubscriberBlackboxVerification[T]) -> None:
        super().__init__(env)
        self.tees: ManualSubscriberWithSubscriptionSupport[T] = env.new_manual_subscriber(
            verification.create_helper_publisher(LONG_MAX)
        )
        self.sub_proxy: BlackboxSubscriberProxy[T] = BlackboxSubscriberProxy(env, verification.create_subscriber())
        self.subscribe(self.sub_proxy)

    def sub(self) -> Subscriber[T]:
        """The subscriber under test, seen through the recording proxy."""
        return self.sub_proxy

    def next_t(self) -> T:
        return self.tees.request_next_element()

    def signal_next(self) -> T:
        element = self.next_t()
        self.send_next(element)
        return element


class _NoopSubscription:
    def request(self, n: int) -> None:
        pass

    def cancel(self) -> None:
        pass
