"""``PublisherVerification``: the 38 tests of the JVM kit's PublisherVerification, rules 1.x and 3.x.

Subclass it in a ``Test*`` class and implement ``create_publisher(elements)`` and ``create_failed_publisher()``::

    class TestRangePublisher(PublisherVerification[int]):
        def create_publisher(self, elements: int) -> Publisher[int]:
            return RangePublisher(0, elements)

        def create_failed_publisher(self) -> Publisher[int] | None:
            return None  # skips the two tests that need a publisher in an error state
"""

from __future__ import annotations

import gc
import random
import threading
import time
import unittest
import weakref
from abc import abstractmethod
from collections.abc import Callable
from typing import ClassVar, Generic, TypeVar

from reaqtive.core.streams import LONG_MAX, Publisher, Subscription
from reaqtive.tck.base import VerificationBase
from reaqtive.tck.env import TestEnvironment
from reaqtive.tck.helper_publisher import INT_MAX
from reaqtive.tck.outcomes import (
    NO_ERROR_PUBLISHER,
    CapabilitySkip,
    OptionalNotImplemented,
    StochasticSkipped,
)
from reaqtive.tck.subscribers import (
    BlackholeSubscriberWithSubscriptionSupport,
    ManualSubscriber,
    ManualSubscriberWithSubscriptionSupport,
    TestSubscriber,
)
from reaqtive.tck.sync import EndOfStream, Latch, deadline_after, remaining_ms

__all__ = ["PublisherVerification"]

T = TypeVar("T")

RULE_39_MESSAGE_PARTS = ["3.9", "non-positive subscription request", "negative subscription request"]


class PublisherVerification(VerificationBase, Generic[T]):
    """Verifies a Publisher against rules 1.1-1.11 and 3.2-3.17 (38 tests)."""

    stochastic_iterations: ClassVar[int] = 100
    """How many times the stochastic rule 1.3 test repeats."""

    # -- hooks: must implement ------------------------------------------------------------------------------------

    @abstractmethod
    def create_publisher(self, elements: int) -> Publisher[T]:
        """A publisher of exactly ``elements`` elements, then ``on_complete``; infinite when ``elements`` is
        ``LONG_MAX``. Must support ``elements == 0``."""

    @abstractmethod
    def create_failed_publisher(self) -> Publisher[T] | None:
        """A publisher that signals ``on_subscribe`` then ``on_error``; ``None`` skips the tests that need one."""

    # -- hooks: may override --------------------------------------------------------------------------------------

    def max_elements_from_publisher(self) -> int:
        """The largest stream ``create_publisher`` can make; tests needing more are skipped. ``LONG_MAX`` means
        "never completes" and skips every test that needs ``on_complete``."""
        return LONG_MAX - 1

    def bounded_depth_of_on_next_and_request_recursion(self) -> int:
        """How deep ``request`` -> ``on_next`` -> ``request`` may nest on one stack (rule 3.3)."""
        return 1

    def skip_stochastic_tests(self) -> bool:
        """Return ``True`` to skip the stochastic rule 1.3 test."""
        return False

    # -- test templates -------------------------------------------------------------------------------------------

    def _require_elements(self, elements: int, completion_required: bool) -> None:
        maximum = self.max_elements_from_publisher()
        if elements > maximum:
            raise CapabilitySkip(
                f"Unable to run this test, as required elements nr: {elements} is higher than supported by given "
                f"producer: {maximum}"
            )
        if completion_required and maximum == LONG_MAX:
            raise CapabilitySkip(
                "Unable to run this test, as it requires an on_complete signal, which this Publisher is unable to "
                "provide (as signalled by returning LONG_MAX from `max_elements_from_publisher()`)"
            )

    def active_publisher_test(
        self, elements: int, completion_required: bool, body: Callable[[Publisher[T]], None]
    ) -> None:
        """Run ``body`` on ``create_publisher(elements)``, then fail on any recorded error."""
        self._require_elements(elements, completion_required)
        publisher = self.create_publisher(elements)
        body(publisher)
        self.env.verify_no_async_errors_no_delay()

    def optional_active_publisher_test(
        self, elements: int, completion_required: bool, body: Callable[[Publisher[T]], None]
    ) -> None:
        """As ``active_publisher_test``, but a failure means "optional feature absent" and becomes a skip.

        The final error check runs *inside* the optional scope: the JVM kit leaves it out, so a recorded
        failure (for example a missing ``on_complete``) passed silently there.
        """
        self._require_elements(elements, completion_required)
        publisher = self.create_publisher(elements)
        try:
            body(publisher)
            self.env.verify_no_async_errors_no_delay()
        except unittest.SkipTest:
            raise
        except Exception as error:
            raise OptionalNotImplemented(
                "Skipped because tested publisher does NOT implement this OPTIONAL requirement. "
                f"Reason for skipping was: {error}"
            ) from error

    def when_has_error_publisher_test(self, body: Callable[[Publisher[T]], None]) -> None:
        """Run ``body`` on ``create_failed_publisher()``, or skip when there is none."""
        publisher = self.create_failed_publisher()
        if publisher is None:
            raise CapabilitySkip(NO_ERROR_PUBLISHER)
        body(publisher)

    # -- sanity and configuration ---------------------------------------------------------------------------------

    def test_required_createPublisher1MustProduceAStreamOfExactly1Element(self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self.env.new_manual_subscriber(pub)
            _assert(_is_element(sub.request_next_element_or_end_of_stream(
                f"Timeout while waiting for next element from Publisher {pub}")),
                f"Publisher {pub} produced no elements")
            sub.request_end_of_stream()

        self.active_publisher_test(1, True, body)

    def test_required_createPublisher3MustProduceAStreamOfExactly3Elements(self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self.env.new_manual_subscriber(pub)
            for produced, problem in enumerate(["no elements", "only 1 element", "only 2 elements"]):
                _assert(_is_element(sub.request_next_element_or_end_of_stream(
                    f"Timeout while waiting for element {produced + 1} from Publisher {pub}")),
                    f"Publisher {pub} produced {problem}")
            sub.request_end_of_stream()

        self.active_publisher_test(3, True, body)

    def test_required_validate_maxElementsFromPublisher(self) -> None:
        _assert(self.max_elements_from_publisher() >= 0, "max_elements_from_publisher MUST return a number >= 0")

    def test_required_validate_boundedDepthOfOnNextAndRequestRecursion(self) -> None:
        _assert(self.bounded_depth_of_on_next_and_request_recursion() >= 1,
                "bounded_depth_of_on_next_and_request_recursion must return a number >= 1")

    # -- rules 1.x ------------------------------------------------------------------------------------------------

    def test_required_spec101_subscriptionRequestMustResultInTheCorrectNumberOfProducedElements(self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self.env.new_manual_subscriber(pub)
            try:
                sub.expect_none(message=f"Publisher {pub} produced value before the first `request`: ")
                sub.request(1)
                sub.next_element(message=f"Publisher {pub} produced no element after first `request`")
                sub.expect_none(message=f"Publisher {pub} produced unrequested: ")
                sub.request(1)
                sub.request(2)
                sub.next_elements(3, message=f"Publisher {pub} produced less than 3 elements after two respective "
                                             "`request` calls")
                sub.expect_none(message=f"Publisher {pub} produced unrequested ")
            finally:
                sub.cancel()

        self.active_publisher_test(5, False, body)

    def test_required_spec102_maySignalLessThanRequestedAndTerminateSubscription(self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self.env.new_manual_subscriber(pub)
            sub.request(10)
            sub.next_elements(3)
            sub.expect_completion(message=f"Publisher {pub} did not complete after its 3 elements")

        self.active_publisher_test(3, True, body)

    def test_stochastic_spec103_mustSignalOnMethodsSequentially(self) -> None:
        if self.skip_stochastic_tests():
            raise StochasticSkipped("Skipping @Stochastic test because `skip_stochastic_tests()` returned `True`!")
        iterations = self.stochastic_iterations
        elements = 10
        env = self.env
        for iteration in range(iterations):
            def body(pub: Publisher[T], iteration: int = iteration) -> None:
                done = Latch(env)
                sub: _SequentialAccessSubscriber[T] = _SequentialAccessSubscriber(env, done, elements)
                pub.subscribe(sub)
                done.expect_close(
                    f"Failed in iteration {iteration} of {iterations}. Expected completion signal after signalling "
                    f"{elements} elements (signalled {sub.received}), yet did not receive it",
                    env.default_timeout_ms * elements,
                )

            self.active_publisher_test(elements, True, body)

    def test_optional_spec104_mustSignalOnErrorWhenFails(self) -> None:
        env = self.env

        def body(pub: Publisher[T]) -> None:
            on_subscribe, on_error = Latch(env), Latch(env)
            sub: TestSubscriber[T] = _ErrorExpectingSubscriber(env, on_subscribe, on_error, pub)
            try:
                pub.subscribe(sub)
            except Exception as error:
                # Only what subscribe itself raises is "threw instead of signalling": the JVM kit also rewrote
                # its own assertion failures into this message, hiding what actually went wrong.
                raise AssertionError(
                    f"Publisher threw exception ({error}) instead of signalling error via on_error!"
                ) from error
            on_subscribe.expect_close("Should have received on_subscribe")
            on_error.expect_close(f"Error-state Publisher {pub} did not call `on_error` on new Subscriber")
            env.verify_no_async_errors()

        self.when_has_error_publisher_test(body)

    def test_required_spec105_mustSignalOnCompleteWhenFiniteStreamTerminates(self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self.env.new_manual_subscriber(pub)
            sub.request_next_element()
            sub.request_next_element()
            sub.request_next_element()
            sub.request_end_of_stream()
            sub.expect_none()

        self.active_publisher_test(3, True, body)

    def test_optional_spec105_emptyStreamMustTerminateBySignallingOnComplete(self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self.env.new_manual_subscriber(pub)
            sub.request(1)
            sub.expect_completion()
            sub.expect_none()

        self.optional_active_publisher_test(0, True, body)

    def test_untested_spec106_mustConsiderSubscriptionCancelledAfterOnErrorOrOnCompleteHasBeenCalled(self) -> None:
        self.not_verified()

    def test_required_spec107_mustNotEmitFurtherSignalsOnceOnCompleteHasBeenSignalled(self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self.env.new_manual_subscriber(pub)
            sub.request(10)
            sub.next_element()
            sub.expect_completion()
            sub.request(10)
            sub.expect_none()

        self.active_publisher_test(1, True, body)

    def test_untested_spec107_mustNotEmitFurtherSignalsOnceOnErrorHasBeenSignalled(self) -> None:
        self.not_verified()

    def test_untested_spec108_possiblyCanceledSubscriptionShouldNotReceiveOnErrorOrOnCompleteSignals(self) -> None:
        self.not_verified()

    def test_untested_spec109_subscribeShouldNotThrowNonFatalThrowable(self) -> None:
        self.not_verified()

    def test_required_spec109_subscribeThrowNPEOnNullSubscriber(self) -> None:
        def body(pub: Publisher[T]) -> None:
            try:
                pub.subscribe(None)  # type: ignore[arg-type]
            except self.null_error_types:
                pass
            else:
                self.env.flop(
                    f"Publisher did not raise {_names(self.null_error_types)} when given a None Subscriber in "
                    "subscribe (rule 1.9)"
                )
            self.env.verify_no_async_errors_no_delay()

        self.active_publisher_test(0, False, body)

    def test_required_spec109_mustIssueOnSubscribeForNonNullSubscriber(self) -> None:
        env = self.env

        def body(pub: Publisher[T]) -> None:
            on_subscribe = Latch(env)
            sub: _OrderCheckingSubscriber[T] = _OrderCheckingSubscriber(env, on_subscribe)
            try:
                pub.subscribe(sub)
                on_subscribe.expect_close("Should have received on_subscribe")
                env.verify_no_async_errors_no_delay()
            finally:
                if sub.subscription.is_completed():
                    sub.subscription.value().cancel()

        self.active_publisher_test(0, False, body)

    def test_required_spec109_mayRejectCallsToSubscribeIfPublisherIsUnableOrUnwillingToServeThemRejectionMustTriggerOnErrorAfterOnSubscribe(  # noqa: E501
        self,
    ) -> None:
        env = self.env

        def body(pub: Publisher[T]) -> None:
            on_subscribe, on_error = Latch(env), Latch(env)
            sub: _RejectionExpectingSubscriber[T] = _RejectionExpectingSubscriber(env, on_subscribe, on_error)
            pub.subscribe(sub)
            on_subscribe.expect_close("Should have received on_subscribe")
            on_error.expect_close("Should have received on_error")
            env.verify_no_async_errors_no_delay()

        self.when_has_error_publisher_test(body)

    def test_untested_spec110_rejectASubscriptionRequestIfTheSameSubscriberSubscribesTwice(self) -> None:
        self.not_verified()

    def test_optional_spec111_maySupportMultiSubscribe(self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub1 = self.env.new_manual_subscriber(pub)
            sub2 = self.env.new_manual_subscriber(pub)
            try:
                self.env.verify_no_async_errors()
            finally:
                _cancel_all(sub1, sub2)

        self.optional_active_publisher_test(1, False, body)

    def test_optional_spec111_registeredSubscribersMustReceiveOnNextOrOnCompleteSignals(self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub1 = self.env.new_manual_subscriber(pub)
            sub2 = self.env.new_manual_subscriber(pub)
            try:
                sub1.request_next_element_or_end_of_stream("Did not receive on_next or on_complete")
                sub2.request_next_element_or_end_of_stream("Did not receive on_next or on_complete")
                self.env.verify_no_async_errors()
            finally:
                _cancel_all(sub1, sub2)

        self.optional_active_publisher_test(1, False, body)

    def test_optional_spec111_multicast_mustProduceTheSameElementsInTheSameSequenceToAllOfItsSubscribersWhenRequestingOneByOne(  # noqa: E501
        self,
    ) -> None:
        def body(pub: Publisher[T]) -> None:
            sub1 = self.env.new_manual_subscriber(pub)
            sub2 = self.env.new_manual_subscriber(pub)
            sub3 = self.env.new_manual_subscriber(pub)
            received1: list[T] = []
            received2: list[T] = []
            received3: list[T] = []
            # Each subscriber requests its 5 elements in its own rhythm: 1,1,2,1 / 2,3 / 3,1,1.
            received1.append(sub1.request_next_element())
            received2.extend(sub2.request_next_elements(2))
            received1.append(sub1.request_next_element())
            received3.extend(sub3.request_next_elements(3))
            received3.append(sub3.request_next_element())
            received3.append(sub3.request_next_element())
            sub3.request_end_of_stream()
            received2.extend(sub2.request_next_elements(3))
            sub2.request_end_of_stream()
            received1.extend(sub1.request_next_elements(2))
            received1.append(sub1.request_next_element())
            sub1.request_end_of_stream()
            _assert_same_sequence(received1, received2, "Expected elements to be signaled in the same sequence to "
                                  "1st and 2nd subscribers")
            _assert_same_sequence(received1, received3, "Expected elements to be signaled in the same sequence to "
                                  "1st and 3rd subscribers")

        self.optional_active_publisher_test(5, True, body)

    def test_optional_spec111_multicast_mustProduceTheSameElementsInTheSameSequenceToAllOfItsSubscribersWhenRequestingManyUpfront(  # noqa: E501
        self,
    ) -> None:
        def body(pub: Publisher[T]) -> None:
            subs = [self.env.new_manual_subscriber(pub) for _ in range(3)]
            for sub in subs:
                sub.request(4)
            received = [sub.next_elements(3) for sub in subs]
            _assert_same_sequence(received[0], received[1], "Expected elements to be signaled in the same sequence to "
                                  "1st and 2nd subscribers")
            _assert_same_sequence(received[0], received[2], "Expected elements to be signaled in the same sequence to "
                                  "1st and 3rd subscribers")

        self.optional_active_publisher_test(3, False, body)

    def test_optional_spec111_multicast_mustProduceTheSameElementsInTheSameSequenceToAllOfItsSubscribersWhenRequestingManyUpfrontAndCompleteAsExpected(  # noqa: E501
        self,
    ) -> None:
        def body(pub: Publisher[T]) -> None:
            subs = [self.env.new_manual_subscriber(pub) for _ in range(3)]
            for sub in subs:
                sub.request(4)
            received = [sub.next_elements(3) for sub in subs]
            for sub in subs:
                sub.expect_completion()
            _assert_same_sequence(received[0], received[1], "Expected elements to be signaled in the same sequence to "
                                  "1st and 2nd subscribers")
            _assert_same_sequence(received[0], received[2], "Expected elements to be signaled in the same sequence to "
                                  "1st and 3rd subscribers")

        self.optional_active_publisher_test(3, True, body)

    # -- rules 3.x ------------------------------------------------------------------------------------------------

    def test_required_spec302_mustAllowSynchronousRequestCallsFromOnNextAndOnSubscribe(self) -> None:
        elements = 6

        def body(pub: Publisher[T]) -> None:
            sub: _SynchronousRequester[T] = _SynchronousRequester(self.env, elements)
            self.env.subscribe(pub, sub)
            self.env.verify_no_async_errors()

        self.active_publisher_test(elements, False, body)

    def test_required_spec303_mustNotAllowUnboundedRecursion(self) -> None:
        bound = self.bounded_depth_of_on_next_and_request_recursion()
        env = self.env

        def body(pub: Publisher[T]) -> None:
            sub: _RecursionDepthSubscriber[T] = _RecursionDepthSubscriber(env, bound)
            try:
                env.subscribe(pub, sub)
                sub.request(1)  # kicks off the request -> on_next -> request chain
                sub.done.expect_close(
                    f"Unable to validate call stack depth safety, awaited at-most {bound + 1} signals "
                    "(`bounded_depth_of_on_next_and_request_recursion() + 1`) or completion"
                )
                env.verify_no_async_errors_no_delay()
            finally:
                sub.cancel()

        self.active_publisher_test(bound + 1, False, body)

    def test_untested_spec304_requestShouldNotPerformHeavyComputations(self) -> None:
        self.not_verified()

    def test_untested_spec305_cancelMustNotSynchronouslyPerformHeavyComputation(self) -> None:
        self.not_verified()

    def test_required_spec306_afterSubscriptionIsCancelledRequestMustBeNops(self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self.env.new_manual_subscriber(pub)
            sub.cancel()
            sub.request(1)
            sub.request(1)
            sub.request(1)
            sub.expect_none()
            self.env.verify_no_async_errors_no_delay()

        self.active_publisher_test(3, False, body)

    def test_required_spec307_afterSubscriptionIsCancelledAdditionalCancelationsMustBeNops(self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self.env.new_manual_subscriber(pub)
            subscription = sub.subscription.value()
            subscription.cancel()
            subscription.cancel()
            subscription.cancel()
            sub.expect_none()
            self.env.verify_no_async_errors_no_delay()

        self.active_publisher_test(1, False, body)

    def test_required_spec309_requestZeroMustSignalIllegalArgumentException(self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self.env.new_manual_subscriber(pub)
            sub.request(0)
            sub.expect_error(self.illegal_argument_error_types)

        self.active_publisher_test(10, False, body)

    def test_required_spec309_requestNegativeNumberMustSignalIllegalArgumentException(self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self.env.new_manual_subscriber(pub)
            sub.request(-random.randint(1, INT_MAX))
            sub.expect_error(self.illegal_argument_error_types)

        self.active_publisher_test(10, False, body)

    def test_optional_spec309_requestNegativeNumberMaySignalIllegalArgumentExceptionWithSpecificMessage(
        self,
    ) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self.env.new_manual_subscriber(pub)
            sub.request(-random.randint(1, INT_MAX))
            sub.expect_error_with_message(self.illegal_argument_error_types, RULE_39_MESSAGE_PARTS)

        self.optional_active_publisher_test(10, False, body)

    def test_required_spec312_cancelMustMakeThePublisherToEventuallyStopSignaling(self) -> None:
        env = self.env

        def body(pub: Publisher[T]) -> None:
            sub = env.new_manual_subscriber(pub)
            sub.request(10)
            sub.request(5)
            total_demand = 10 + 5
            sub.next_element()  # emission has started
            sub.cancel()
            signalled = 1
            # Elements in flight may still arrive (rule 2.8), but never more than were requested.
            while True:
                sub.expect_none()  # a late element is recorded as an error...
                if env.drop_async_error() is None:  # ...and counted here
                    break
                signalled += 1
                _assert(signalled <= total_demand,
                        f"Publisher signalled [{signalled}] elements, which is more than the signalled demand: "
                        f"{total_demand}")
            env.verify_no_async_errors_no_delay()

        self.active_publisher_test(20, False, body)

    def test_required_spec313_cancelMustMakeThePublisherEventuallyDropAllReferencesToTheSubscriber(self) -> None:
        env = self.env

        def subscribe_consume_cancel(pub: Publisher[T], collected: threading.Event) -> weakref.ref[object]:
            # In its own frame, so no local of the test keeps the subscriber alive.
            sub = env.new_manual_subscriber(pub)
            ref: weakref.ref[object] = weakref.ref(sub, lambda _: collected.set())
            sub.request(1)
            sub.next_element()
            sub.cancel()
            return ref

        def body(pub: Publisher[T]) -> None:
            collected = threading.Event()
            ref = subscribe_consume_cancel(pub, collected)
            deadline = deadline_after(env.publisher_reference_gc_timeout_ms)
            while ref() is not None:
                gc.collect()  # reference cycles need the collector; plain drops are seen by the callback at once
                if collected.wait(min(remaining_ms(deadline), 20) / 1000) or remaining_ms(deadline) <= 0:
                    break
            if ref() is not None:
                env.flop(f"Publisher {pub} did not drop reference to test subscriber after subscription cancellation")
            env.verify_no_async_errors_no_delay()

        self.active_publisher_test(3, False, body)

    def test_required_spec317_mustSupportAPendingElementCountUpToLongMaxValue(self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self.env.new_manual_subscriber(pub)
            sub.request(LONG_MAX)
            sub.next_elements(3)
            sub.expect_completion()
            self.env.verify_no_async_errors_no_delay()

        self.active_publisher_test(3, True, body)

    def test_required_spec317_mustSupportACumulativePendingElementCountUpToLongMaxValue(self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub = self.env.new_manual_subscriber(pub)
            try:
                sub.request(LONG_MAX // 2)
                sub.request(LONG_MAX // 2)
                sub.request(1)  # exactly LONG_MAX in total
                sub.next_elements(3)
                sub.expect_completion()
                self.env.verify_no_async_errors_no_delay()
            finally:
                sub.cancel()

        self.active_publisher_test(3, True, body)

    def test_required_spec317_mustNotSignalOnErrorWhenPendingAboveLongMaxValue(self) -> None:
        def body(pub: Publisher[T]) -> None:
            sub: _OverflowingRequester[T] = _OverflowingRequester(self.env)
            self.env.subscribe(pub, sub)
            sub.request(1)  # each on_next then requests LONG_MAX - 1 more, ten times: far past LONG_MAX
            try:
                self.env.verify_no_async_errors()  # no on_error allowed
            finally:
                sub.cancel()

        self.active_publisher_test(INT_MAX, False, body)


# -- the tests' own subscribers ----------------------------------------------------------------------------------


class _ConcurrentAccessBarrier:
    """Detects two threads inside one subscriber's signal methods at once (rule 1.3).

    A nested signal on the same thread (``on_subscribe`` -> ``request`` -> ``on_next``) is allowed. Inside the
    critical section the thread yields the interpreter (``sleep(0)``), so a concurrent signaller gets a chance to
    run and be caught; with the GIL, races would otherwise almost never interleave.
    """

    def __init__(self, env: TestEnvironment) -> None:
        self._env = env
        self._lock = threading.Lock()
        self._owner: int | None = None
        self._owner_signal = ""
        self._depth = 0

    def enter(self, signal: str) -> None:
        me = threading.get_ident()
        with self._lock:
            if self._owner is None or self._owner == me:
                self._owner, self._owner_signal = me, signal
                self._depth += 1
                entered = True
            else:
                entered = False
                other, other_signal = self._owner, self._owner_signal
        if not entered:
            self._env.flop(
                "Illegal concurrent access detected (entering critical section)! "
                f"Thread {me} emitted {signal} signal, before thread {other} finished its {other_signal} signal."
            )
            return
        time.sleep(0)  # widen the window in which a concurrent signal is detected

    def leave(self) -> None:
        me = threading.get_ident()
        with self._lock:
            if self._owner == me:
                self._depth -= 1
                if self._depth == 0:
                    self._owner = None


class _SequentialAccessSubscriber(TestSubscriber[T]):
    """Requests one at a time (11 requests for 10 elements: some publishers need the extra one to complete)."""

    def __init__(self, env: TestEnvironment, done: Latch, elements: int) -> None:
        super().__init__(env)
        self._barrier = _ConcurrentAccessBarrier(env)
        self._done = done
        self._elements = elements
        self.received = 0

    def on_subscribe(self, subscription: Subscription) -> None:
        self._barrier.enter("on_subscribe")
        try:
            self.subscription.complete(subscription)
            subscription.request(1)
        finally:
            self._barrier.leave()

    def on_next(self, element: T) -> None:
        self._barrier.enter(f"on_next({element!r})")
        try:
            self.received += 1
            if self.received <= self._elements:
                self.subscription.value().request(1)
        finally:
            self._barrier.leave()

    def on_error(self, cause: BaseException) -> None:
        self._barrier.enter(f"on_error({cause!r})")
        try:
            super().on_error(cause)
        finally:
            self._barrier.leave()

    def on_complete(self) -> None:
        self._barrier.enter("on_complete")
        try:
            self.terminated = True
            self._done.close()
        finally:
            self._barrier.leave()


class _ErrorExpectingSubscriber(TestSubscriber[T]):
    """Expects exactly ``on_subscribe`` then ``on_error`` (rule 1.4)."""

    def __init__(self, env: TestEnvironment, on_subscribe: Latch, on_error: Latch, pub: Publisher[T]) -> None:
        super().__init__(env)
        self._on_subscribe_latch, self._on_error_latch, self._pub = on_subscribe, on_error, pub

    def on_subscribe(self, subscription: Subscription) -> None:
        self._on_subscribe_latch.assert_open("Only one on_subscribe call expected")
        self._on_subscribe_latch.close()

    def on_error(self, cause: BaseException) -> None:
        self.terminated = True
        self._on_subscribe_latch.assert_closed("on_subscribe should be called prior to on_error always")
        self._on_error_latch.assert_open(f"Error-state Publisher {self._pub} called `on_error` twice on new Subscriber")
        self._on_error_latch.close()


class _OrderCheckingSubscriber(TestSubscriber[T]):
    """Checks that ``on_subscribe`` comes first and once (rule 1.9); requests nothing."""

    def __init__(self, env: TestEnvironment, on_subscribe: Latch) -> None:
        super().__init__(env)
        self._latch = on_subscribe

    def on_subscribe(self, subscription: Subscription) -> None:
        self._latch.assert_open("Only one on_subscribe call expected")
        self._latch.close()
        if not self.subscription.is_completed():
            self.subscription.complete(subscription)

    def on_next(self, element: T) -> None:
        self._latch.assert_closed("on_subscribe should be called prior to on_next always")

    def on_error(self, cause: BaseException) -> None:
        self.terminated = True
        self._latch.assert_closed("on_subscribe should be called prior to on_error always")

    def on_complete(self) -> None:
        self.terminated = True
        self._latch.assert_closed("on_subscribe should be called prior to on_complete always")


class _RejectionExpectingSubscriber(ManualSubscriberWithSubscriptionSupport[T]):
    """Expects ``on_subscribe`` then ``on_error``, without having requested anything (rule 1.9)."""

    def __init__(self, env: TestEnvironment, on_subscribe: Latch, on_error: Latch) -> None:
        super().__init__(env)
        self._on_subscribe_latch, self._on_error_latch = on_subscribe, on_error

    def on_subscribe(self, subscription: Subscription | None) -> None:
        self._on_subscribe_latch.assert_open("Only one on_subscribe call expected")
        self._on_subscribe_latch.close()

    def on_error(self, cause: BaseException) -> None:
        self.terminated = True
        self._on_subscribe_latch.assert_closed("on_subscribe should be called prior to on_error always")
        self._on_error_latch.assert_open("Only one on_error call expected")
        self._on_error_latch.close()


class _SynchronousRequester(ManualSubscriber[T]):
    """Requests three times inside ``on_subscribe`` and once inside each ``on_next`` (rule 3.2).

    It stops re-requesting after ``elements`` elements: the JVM kit's subscriber re-requests forever, which never
    ends against a synchronous publisher that cannot complete (``max_elements_from_publisher() == LONG_MAX``).
    """

    def __init__(self, env: TestEnvironment, elements: int) -> None:
        super().__init__(env)
        self._elements = elements
        self._received = 0

    def on_subscribe(self, subscription: Subscription) -> None:
        self.subscription.complete(subscription)
        subscription.request(1)
        subscription.request(1)
        subscription.request(1)

    def on_next(self, element: T) -> None:
        self._received += 1
        if self._received <= self._elements:
            self.subscription.value().request(1)


class _RecursionDepthSubscriber(ManualSubscriberWithSubscriptionSupport[T]):
    """Requests one more inside each ``on_next`` and measures how deep ``on_next`` nests on one thread (3.3)."""

    def __init__(self, env: TestEnvironment, bound: int) -> None:
        super().__init__(env)
        self._bound = bound
        self._depth = threading.local()
        self.done = Latch(env)
        self.signals = 0

    def on_next(self, element: T) -> None:
        self.signals += 1
        depth = getattr(self._depth, "value", 0) + 1
        self._depth.value = depth
        try:
            if depth > self._bound:
                self.env.flop(
                    f"Got {depth} on_next calls within thread: {threading.current_thread().name}, yet expected "
                    f"recursive bound was {self._bound}"
                )
                self.done.close()  # stop; the stack is already too deep
            elif self.signals >= self._bound + 1:
                self.done.close()  # enough signals without exceeding the bound
            else:
                self.subscription.value().request(1)
        finally:
            self._depth.value = depth - 1

    def on_complete(self) -> None:
        super().on_complete()
        self.done.close()

    def on_error(self, cause: BaseException) -> None:
        super().on_error(cause)
        self.done.close()


class _OverflowingRequester(BlackholeSubscriberWithSubscriptionSupport[T]):
    """Requests ``LONG_MAX - 1`` on each of its first ten ``on_next`` calls, then cancels (rule 3.17)."""

    def __init__(self, env: TestEnvironment) -> None:
        super().__init__(env)
        self._calls_left = 10

    def on_next(self, element: T) -> None:
        super().on_next(element)
        if self._calls_left > 0:
            self._calls_left -= 1
            self.subscription.value().request(LONG_MAX - 1)
        else:
            self.subscription.value().cancel()


# -- small helpers -----------------------------------------------------------------------------------------------


def _assert(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def _is_element(signal: object) -> bool:
    return signal is not None and not isinstance(signal, EndOfStream)


def _names(types: tuple[type[BaseException], ...]) -> str:
    return " or ".join(t.__name__ for t in types)


def _assert_same_sequence(first: list[T], second: list[T], message: str) -> None:
    if first == second:
        return
    for index, (a, b) in enumerate(zip(first, second, strict=False)):
        if a != b:
            raise AssertionError(f"{message}: Lists differ at element [{index}]: {a!r} != {b!r}")
    raise AssertionError(f"{message}: Lists differ in length: {len(first)} != {len(second)}")


def _cancel_all(*subscribers: ManualSubscriber[T]) -> None:
    for sub in subscribers:
        if sub.subscription.is_completed():
            sub.cancel()
