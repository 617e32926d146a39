"""Self-tests of ``PublisherVerification``: each broken publisher must be caught by the test named for the rule
it breaks, with a message that says what went wrong; correct publishers must pass.

A port of the JVM kit's ``PublisherVerificationTest``, plus checks of the JVM defects this kit fixes.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

from reaqtive.core.streams import LONG_MAX, Publisher, Subscriber, add_demand
from reaqtive.tck import PublisherVerification, TestEnvironment, TestException
from reaqtive.tck.outcomes import NO_ERROR_PUBLISHER
from tests.tck.reference import FailedPublisher, SyncRangePublisher
from tests.tck.support import (
    LambdaPublisher,
    LambdaSubscription,
    demand_ignoring_sync_publisher,
    noop_publisher,
    require_test_failure,
    require_test_failure_or_skip,
    require_test_pass,
    require_test_skip,
)


class CustomPublisherVerification(PublisherVerification[int]):
    """Runs the kit against a given publisher (not a pytest class: its name does not start with ``Test``)."""

    def __init__(
        self,
        publisher: Publisher[Any] | Callable[[int], Publisher[Any]],
        failed: Publisher[Any] | None = None,
        max_elements: int = LONG_MAX - 1,
        no_signals_timeout_ms: int | None = None,
    ) -> None:
        self._publisher = publisher
        self._failed = failed
        self._max_elements = max_elements
        self._no_signals_timeout_ms = no_signals_timeout_ms

    def create_environment(self) -> TestEnvironment:
        env = super().create_environment()
        if self._no_signals_timeout_ms is not None:
            env.default_no_signals_timeout_ms = self._no_signals_timeout_ms
        return env

    def create_publisher(self, elements: int) -> Publisher[int]:
        if isinstance(self._publisher, Publisher):  # a fixed publisher, or else a factory of them
            return self._publisher
        return self._publisher(elements)

    def create_failed_publisher(self) -> Publisher[int] | None:
        return self._failed

    def max_elements_from_publisher(self) -> int:
        return self._max_elements


def custom(publisher: Publisher[Any] | Callable[[int], Publisher[Any]], failed: Publisher[Any] | None = None,
           max_elements: int = LONG_MAX - 1) -> CustomPublisherVerification:
    return CustomPublisherVerification(publisher, failed, max_elements)


def sync_range(elements: int) -> Publisher[int]:
    return SyncRangePublisher(0, elements)


def noop_verification() -> CustomPublisherVerification:
    return custom(noop_publisher())


def emit_per_request(complete: bool) -> Publisher[int]:
    """On ``request(n)`` emits the next ``n`` elements synchronously (recursively!), then maybe completes."""

    def subscribe(subscriber: Subscriber[int]) -> None:
        counter = [0]

        def request(n: int) -> None:
            for _ in range(n):
                subscriber.on_next(counter[0])
                counter[0] += 1
            if complete:
                subscriber.on_complete()

        subscriber.on_subscribe(LambdaSubscription(request))

    return LambdaPublisher(subscribe, "emit-per-request publisher")


# -- rules 1.x -------------------------------------------------------------------------------------------------------


def test_spec101_shouldFailBy_ExpectingOnError() -> None:
    require_test_failure(noop_verification(),
                         "required_spec101_subscriptionRequestMustResultInTheCorrectNumberOfProducedElements",
                         "produced no element after first")


def test_spec102_shouldFailBy_notReceivingAnyElement() -> None:
    require_test_failure(noop_verification(), "required_spec102_maySignalLessThanRequestedAndTerminateSubscription",
                         "Did not receive 3 expected elements")


def test_spec102_shouldFailBy_receivingTooManyElements() -> None:
    require_test_failure(custom(demand_ignoring_sync_publisher()),
                         "required_spec102_maySignalLessThanRequestedAndTerminateSubscription",
                         "Expected end-of-stream but got element [3]")


def test_spec103_shouldFailBy_concurrentlyAccessingOnNext() -> None:
    def subscribe(subscriber: Subscriber[int]) -> None:
        emitted = [0]

        def request(n: int) -> None:
            # Each element is signalled from a new thread while the caller (possibly inside on_next) waits for it:
            # two threads are inside the subscriber at once, every time.
            for _ in range(n):
                if emitted[0] >= 10:
                    return
                value = emitted[0]
                emitted[0] += 1
                signaller = threading.Thread(target=subscriber.on_next, args=(value,))
                signaller.start()
                signaller.join()
                if value == 9:
                    subscriber.on_complete()

        subscriber.on_subscribe(LambdaSubscription(request))

    require_test_failure(custom(LambdaPublisher(subscribe)), "stochastic_spec103_mustSignalOnMethodsSequentially",
                         "Illegal concurrent access detected")


def test_spec103_shouldPass_forSynchronousPublisher() -> None:
    require_test_pass(custom(emit_per_request(complete=True)), "stochastic_spec103_mustSignalOnMethodsSequentially")


def test_spec104_shouldFail() -> None:
    def subscribe(subscriber: Subscriber[int]) -> None:
        raise RuntimeError("It is not valid to throw here!")

    require_test_failure(custom(noop_publisher(), failed=LambdaPublisher(subscribe)),
                         "optional_spec104_mustSignalOnErrorWhenFails",
                         "Publisher threw exception (It is not valid to throw here!) instead of signalling error via "
                         "on_error!")


def test_spec104_shouldFail_withItsOwnMessage_whenOnErrorNeverComes() -> None:
    """JVM defect fixed: the JVM kit rewrote every failure of this test into "threw exception"."""
    silent = LambdaPublisher(lambda s: s.on_subscribe(LambdaSubscription()), "silent failed publisher")
    error = require_test_failure(custom(noop_publisher(), failed=silent), "optional_spec104_mustSignalOnErrorWhenFails",
                                 "did not call `on_error` on new Subscriber")
    assert "threw exception" not in str(error)


def test_spec104_shouldBeSkippedWhenNoErrorPublisherGiven() -> None:
    require_test_skip(noop_verification(), "optional_spec104_mustSignalOnErrorWhenFails", NO_ERROR_PUBLISHER)


def test_spec104_shouldPass_forCorrectFailedPublisher() -> None:
    require_test_pass(custom(noop_publisher(), failed=FailedPublisher()), "optional_spec104_mustSignalOnErrorWhenFails")


def test_spec105_shouldFail() -> None:
    require_test_failure(custom(emit_per_request(complete=False)),
                         "required_spec105_mustSignalOnCompleteWhenFiniteStreamTerminates",
                         "Expected end-of-stream but got element [3]")


def test_optional_spec105_shouldNotAllowEagerOnComplete() -> None:
    eager = LambdaPublisher(lambda s: s.on_complete(), "eager-completing publisher")
    require_test_failure_or_skip(custom(eager, max_elements=0),
                                 "optional_spec105_emptyStreamMustTerminateBySignallingOnComplete",
                                 "Subscriber.on_complete() called before Subscriber.on_subscribe")


def test_optional_spec105_shouldPass_whenOnCompleteSynchronouslyInvoked() -> None:
    def subscribe(subscriber: Subscriber[int]) -> None:
        subscriber.on_subscribe(LambdaSubscription())
        subscriber.on_complete()

    require_test_pass(custom(LambdaPublisher(subscribe), max_elements=0),
                      "optional_spec105_emptyStreamMustTerminateBySignallingOnComplete")


def test_optional_spec105_shouldSkip_whenEmptyStreamNeverCompletes() -> None:
    """JVM defect fixed: without a final error check, the JVM kit *passes* an empty publisher that never completes."""
    require_test_skip(custom(noop_publisher(), max_elements=0),
                      "optional_spec105_emptyStreamMustTerminateBySignallingOnComplete",
                      "Did not receive expected stream completion")


def test_spec107_shouldFailForNotCompletingPublisher() -> None:
    require_test_failure(custom(demand_ignoring_sync_publisher()),
                         "required_spec107_mustNotEmitFurtherSignalsOnceOnCompleteHasBeenSignalled",
                         "Expected end-of-stream but got element [")


def test_spec107_shouldFailForPublisherWhichCompletesButKeepsServingData() -> None:
    def subscribe(subscriber: Subscriber[int]) -> None:
        completed = [False]

        def request(n: int) -> None:
            subscriber.on_next(0)
            if not completed[0]:
                completed[0] = True
                subscriber.on_complete()

        subscriber.on_subscribe(LambdaSubscription(request))

    require_test_failure(custom(LambdaPublisher(subscribe)),
                         "required_spec107_mustNotEmitFurtherSignalsOnceOnCompleteHasBeenSignalled",
                         "Unexpected element 0 received after stream completed")


def test_spec109_subscribeThrowNPEOnNullSubscriber_shouldFailIfDoesntThrowNPE() -> None:
    require_test_failure(custom(LambdaPublisher(lambda s: None)), "required_spec109_subscribeThrowNPEOnNullSubscriber",
                         "Publisher did not raise TypeError when given a None Subscriber in subscribe")


def test_spec109_subscribeThrowNPEOnNullSubscriber_shouldPass() -> None:
    require_test_pass(custom(sync_range), "required_spec109_subscribeThrowNPEOnNullSubscriber")


REJECT = ("required_spec109_mayRejectCallsToSubscribeIfPublisherIsUnableOrUnwillingToServeThemRejectionMustTriggerOn"
          "ErrorAfterOnSubscribe")


def test_spec109_mayRejectCallsToSubscribe_actuallyPass() -> None:
    require_test_pass(custom(noop_publisher(), failed=FailedPublisher()), REJECT)


def test_spec109_mayRejectCallsToSubscribe_shouldFail() -> None:
    only_subscribes = LambdaPublisher(lambda s: s.on_subscribe(LambdaSubscription()))
    require_test_failure(custom(noop_publisher(), failed=only_subscribes), REJECT, "Should have received on_error")


def test_spec109_mayRejectCallsToSubscribe_beSkippedForNoGivenErrorPublisher() -> None:
    require_test_skip(noop_verification(), REJECT, NO_ERROR_PUBLISHER)


def _signal_before_on_subscribe(signal: Callable[[Subscriber[int]], None]) -> Publisher[int]:
    def subscribe(subscriber: Subscriber[int]) -> None:
        signal(subscriber)
        subscriber.on_subscribe(LambdaSubscription())

    return LambdaPublisher(subscribe)


def test_spec109_mustIssueOnSubscribeForNonNullSubscriber_mustFailIfOnCompleteHappensFirst() -> None:
    require_test_failure(custom(_signal_before_on_subscribe(lambda s: s.on_complete())),
                         "required_spec109_mustIssueOnSubscribeForNonNullSubscriber",
                         "on_subscribe should be called prior to on_complete always")


def test_spec109_mustIssueOnSubscribeForNonNullSubscriber_mustFailIfOnNextHappensFirst() -> None:
    require_test_failure(custom(_signal_before_on_subscribe(lambda s: s.on_next(1337))),
                         "required_spec109_mustIssueOnSubscribeForNonNullSubscriber",
                         "on_subscribe should be called prior to on_next always")


def test_spec109_mustIssueOnSubscribeForNonNullSubscriber_mustFailIfOnErrorHappensFirst() -> None:
    require_test_failure(custom(_signal_before_on_subscribe(lambda s: s.on_error(TestException()))),
                         "required_spec109_mustIssueOnSubscribeForNonNullSubscriber",
                         "on_subscribe should be called prior to on_error always")


def test_untested_spec110_throwsNotVerified() -> None:
    require_test_skip(noop_verification(),
                      "untested_spec110_rejectASubscriptionRequestIfTheSameSubscriberSubscribesTwice",
                      "Not verified by this TCK.")


def test_spec111_maySupportMultiSubscribe_shouldFailBy_actuallyPass() -> None:
    require_test_pass(noop_verification(), "optional_spec111_maySupportMultiSubscribe")


def test_spec111_registeredSubscribersMustReceiveOnNextOrOnCompleteSignals_beSkippedWhenMultipleSubscribersNotSupported(
) -> None:
    subscribed = [False]

    def subscribe(subscriber: Subscriber[int]) -> None:
        subscriber.on_subscribe(LambdaSubscription())
        if subscribed[0]:
            subscriber.on_error(RuntimeError("Unexpected additional subscriber"))
        subscribed[0] = True

    require_test_skip(custom(LambdaPublisher(subscribe)),
                      "optional_spec111_registeredSubscribersMustReceiveOnNextOrOnCompleteSignals",
                      "Unexpected additional subscriber")


def test_spec111_registeredSubscribersMustReceiveOnNextOrOnCompleteSignals_shouldPass() -> None:
    require_test_pass(custom(sync_range), "optional_spec111_registeredSubscribersMustReceiveOnNextOrOnCompleteSignals")


def test_spec111_multicast_mustProduceTheSameElementsInTheSameSequence_shouldFailBy_expectingOnError() -> None:
    rng = random.Random(7)

    def subscribe(subscriber: Subscriber[int]) -> None:
        def request(n: int) -> None:
            for _ in range(n):
                subscriber.on_next(rng.randint(0, 10**9))

        subscriber.on_subscribe(LambdaSubscription(request))

    require_test_failure_or_skip(
        custom(LambdaPublisher(subscribe)),
        "optional_spec111_multicast_mustProduceTheSameElementsInTheSameSequenceToAllOfItsSubscribersWhenRequesting"
        "ManyUpfront",
        "same sequence to 1st and 2nd subscribers: Lists differ at element ",
    )


def test_spec111_multicast_shouldPass_forColdPublisher() -> None:
    verification = custom(sync_range)
    for name in (
        "optional_spec111_multicast_mustProduceTheSameElementsInTheSameSequenceToAllOfItsSubscribersWhenRequesting"
        "OneByOne",
        "optional_spec111_multicast_mustProduceTheSameElementsInTheSameSequenceToAllOfItsSubscribersWhenRequesting"
        "ManyUpfront",
        "optional_spec111_multicast_mustProduceTheSameElementsInTheSameSequenceToAllOfItsSubscribersWhenRequesting"
        "ManyUpfrontAndCompleteAsExpected",
    ):
        require_test_pass(verification, name)


# -- rules 3.x -------------------------------------------------------------------------------------------------------


def test_spec302_shouldFailBy_reportingAsyncError() -> None:
    def subscribe(subscriber: Subscriber[int]) -> None:
        subscriber.on_subscribe(LambdaSubscription(lambda n: subscriber.on_error(TestException())))

    require_test_failure(custom(LambdaPublisher(subscribe)),
                         "required_spec302_mustAllowSynchronousRequestCallsFromOnNextAndOnSubscribe",
                         "Async error during test execution: Test Exception: Boom!")


def test_spec303_shouldFailBy_informingAboutTooDeepStack() -> None:
    require_test_failure(custom(emit_per_request(complete=False)), "required_spec303_mustNotAllowUnboundedRecursion",
                         "yet expected recursive bound was 1")


def test_spec306_shouldFailBy_unexpectedElement() -> None:
    require_test_failure(custom(demand_ignoring_sync_publisher()),
                         "required_spec306_afterSubscriptionIsCancelledRequestMustBeNops",
                         "Did not expect an element but got element [0]")


def test_spec307_shouldPass() -> None:
    require_test_pass(custom(demand_ignoring_sync_publisher()),
                      "required_spec307_afterSubscriptionIsCancelledAdditionalCancelationsMustBeNops")


def test_spec307_shouldFailBy_unexpectedErrorInCancelling() -> None:
    def subscribe(subscriber: Subscriber[int]) -> None:
        subscriber.on_subscribe(LambdaSubscription(on_cancel=lambda: subscriber.on_error(TestException())))

    require_test_failure(custom(LambdaPublisher(subscribe)),
                         "required_spec307_afterSubscriptionIsCancelledAdditionalCancelationsMustBeNops",
                         "Async error during test execution: Test Exception: Boom!")


def test_spec309_requestZero_shouldFailBy_expectingOnError() -> None:
    require_test_failure(noop_verification(), "required_spec309_requestZeroMustSignalIllegalArgumentException",
                         "Expected onError(ValueError)")


def test_spec309_requestNegative_shouldFailBy_expectingOnError() -> None:
    require_test_failure(noop_verification(),
                         "required_spec309_requestNegativeNumberMustSignalIllegalArgumentException",
                         "Expected onError(ValueError)")


def test_spec309_requestZero_shouldFailBy_raisingFromRequest() -> None:
    def subscribe(subscriber: Subscriber[int]) -> None:
        def request(n: int) -> None:
            raise ValueError("rule 3.9 says signal, not raise")

        subscriber.on_subscribe(LambdaSubscription(request))

    require_test_failure(custom(LambdaPublisher(subscribe)),
                         "required_spec309_requestZeroMustSignalIllegalArgumentException", "signal, not raise")


def _error_on_bad_request(message: str) -> Publisher[int]:
    def subscribe(subscriber: Subscriber[int]) -> None:
        def request(n: int) -> None:
            if n <= 0:
                subscriber.on_error(ValueError(message))

        subscriber.on_subscribe(LambdaSubscription(request))

    return LambdaPublisher(subscribe)


def test_spec309_requestZero_shouldPass() -> None:
    verification = custom(_error_on_bad_request("Illegal request value detected!"))
    require_test_pass(verification, "required_spec309_requestZeroMustSignalIllegalArgumentException")
    require_test_pass(verification, "required_spec309_requestNegativeNumberMustSignalIllegalArgumentException")


def test_spec309_specificMessage_shouldSkipWithoutRuleInMessage_andPassWithIt() -> None:
    name = "optional_spec309_requestNegativeNumberMaySignalIllegalArgumentExceptionWithSpecificMessage"
    require_test_skip(custom(_error_on_bad_request("Illegal request value detected!")), name, "missing message part")
    require_test_pass(custom(_error_on_bad_request("rule 3.9: non-positive subscription request")), name)


def test_spec312_shouldFailBy_havingEmitedMoreThanRequested() -> None:
    def subscribe(subscriber: Subscriber[int]) -> None:
        started = [False]

        def emit_forever() -> None:
            try:
                for value in range(100):
                    subscriber.on_next(value)
            except Exception:
                return  # the kit's subscriber overflowed: it already recorded that

        def request(n: int) -> None:
            if not started[0]:
                started[0] = True
                threading.Thread(target=emit_forever, daemon=True).start()

        subscriber.on_subscribe(LambdaSubscription(request))

    # A generous no-signals window: the emitting thread may be descheduled on a busy machine, and a late element
    # must still be seen. The test ends as soon as too many are counted, so this costs nothing when it works.
    verification = CustomPublisherVerification(LambdaPublisher(subscribe), no_signals_timeout_ms=2000)
    require_test_failure(verification, "required_spec312_cancelMustMakeThePublisherToEventuallyStopSignaling",
                         ", which is more than the signalled demand: ")


def test_spec313_shouldFailBy_keepingTheReferenceLongerThanNeeded() -> None:
    hoarded: list[Subscriber[int]] = []

    def subscribe(subscriber: Subscriber[int]) -> None:
        hoarded.append(subscriber)  # never let go, not even after cancel
        def request(n: int) -> None:
            for value in range(n):
                subscriber.on_next(value)

        subscriber.on_subscribe(LambdaSubscription(request))

    require_test_failure(custom(LambdaPublisher(subscribe)),
                         "required_spec313_cancelMustMakeThePublisherEventuallyDropAllReferencesToTheSubscriber",
                         "did not drop reference to test subscriber after subscription cancellation")


def test_spec313_shouldPass_forReferenceDroppingPublisher() -> None:
    require_test_pass(custom(sync_range),
                      "required_spec313_cancelMustMakeThePublisherEventuallyDropAllReferencesToTheSubscriber")


def test_spec317_shouldFail_onAsynchDemandIgnoringPublisher() -> None:
    def subscribe(subscriber: Subscriber[int]) -> None:
        def emit() -> None:
            for value in range(10):
                subscriber.on_next(value)
            subscriber.on_complete()

        subscriber.on_subscribe(LambdaSubscription(lambda n: threading.Thread(target=emit, daemon=True).start()))

    require_test_failure(custom(LambdaPublisher(subscribe)),
                         "required_spec317_mustSupportAPendingElementCountUpToLongMaxValue",
                         "Expected end-of-stream but got")


def test_spec317_shouldFail_onSynchDemandIgnoringPublisher() -> None:
    require_test_failure(custom(demand_ignoring_sync_publisher()),
                         "required_spec317_mustSupportAPendingElementCountUpToLongMaxValue",
                         "Received more than bufferSize (32) onNext signals. The Publisher probably emited more "
                         "signals than expected!")


class _DemandValidatingPublisher:
    """Emits on demand, but treats the sum of requests going past LONG_MAX (or, with ``error_at_max``, reaching it)
    as an error: both wrong, demand is merely capped at LONG_MAX (rule 3.17)."""

    def __init__(self, error_at_max: bool, elements: int) -> None:
        self._error_at_max = error_at_max
        self._elements = elements

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        state = {"requested": 0, "demand": 0, "emitting": False, "next": 0, "done": False}

        def request(n: int) -> None:
            state["requested"] += n
            if state["requested"] > LONG_MAX or (self._error_at_max and state["requested"] == LONG_MAX):
                message = ("Illegally signalling on_error too soon! Cumulative demand equal to LONG_MAX is legal."
                           if self._error_at_max else "Illegally signalling on_error (violates rule 3.17)")
                subscriber.on_error(RuntimeError(message))
                return
            state["demand"] += n
            if state["emitting"] or state["done"]:
                return
            state["emitting"] = True
            while state["demand"] > 0 and state["next"] < self._elements and not state["done"]:
                state["demand"] -= 1
                subscriber.on_next(state["next"])
                state["next"] += 1
            state["emitting"] = False
            if state["next"] == self._elements and not state["done"]:
                state["done"] = True
                subscriber.on_complete()

        subscriber.on_subscribe(LambdaSubscription(request, lambda: state.update(done=True)))


def test_spec317_mustNotSignalOnErrorWhenPendingAboveLongMaxValue_shouldFail_onSynchOverflowingPublisher() -> None:
    require_test_failure(custom(lambda n: _DemandValidatingPublisher(False, n)),
                         "required_spec317_mustNotSignalOnErrorWhenPendingAboveLongMaxValue",
                         "Async error during test execution: Illegally signalling on_error (violates rule 3.17)")


def test_spec317_mustSupportACumulativePendingElementCount_shouldFailWhenErrorSignalledOnceMaxValueReached() -> None:
    require_test_failure(custom(lambda n: _DemandValidatingPublisher(True, n)),
                         "required_spec317_mustSupportACumulativePendingElementCountUpToLongMaxValue",
                         "Illegally signalling on_error too soon!")


def test_spec317_mustNotSignalOnErrorWhenPendingAboveLongMaxValue_forSynchronousPublisher() -> None:
    sent = [0]

    def subscribe(subscriber: Subscriber[int]) -> None:
        state = {"demand": 0, "emitting": False, "cancelled": False}

        def request(n: int) -> None:
            state["demand"] = add_demand(state["demand"], n)
            if state["emitting"]:
                return
            state["emitting"] = True
            while state["demand"] > 0 and not state["cancelled"]:
                if state["demand"] < LONG_MAX:
                    state["demand"] -= 1
                sent[0] += 1
                subscriber.on_next(sent[0])
            state["emitting"] = False

        subscriber.on_subscribe(LambdaSubscription(request, lambda: state.update(cancelled=True)))

    require_test_pass(custom(LambdaPublisher(subscribe)),
                      "required_spec317_mustNotSignalOnErrorWhenPendingAboveLongMaxValue")
    assert sent[0] == 11  # one for request(1), one per request(LONG_MAX - 1) (ten), then the cancel
