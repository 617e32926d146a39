"""The registry of verification tests: for each JVM test name, the rule it checks, its kind and what it does.

The verification classes define one ``test_<JVM name>`` method per entry; ``tests/tck`` checks the two agree and
that the counts per class match the JVM kit 1.0.4 (38 / 27 / 26 / 68).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = [
    "BLACKBOX_RULES",
    "IDENTITY_PROCESSOR_RULES",
    "JVM_TEST_COUNTS",
    "Kind",
    "PROCESSOR_ONLY_RULES",
    "PUBLISHER_RULES",
    "Rule",
    "WHITEBOX_RULES",
    "rule_for",
]


class Kind(Enum):
    """How a test reports: required fails on violation; optional skips when the feature is absent; stochastic
    can give false greens; untested is always reported as not verified."""

    REQUIRED = "required"
    OPTIONAL = "optional"
    STOCHASTIC = "stochastic"
    UNTESTED = "untested"


@dataclass(frozen=True)
class Rule:
    """One verification test: its JVM name, the specification rule it covers, its kind and a summary."""

    name: str
    rule: str
    kind: Kind
    summary: str

    @property
    def test_name(self) -> str:
        """The pytest method name: ``test_`` + the JVM name."""
        return "test_" + self.name


REQ, OPT, STO, UNT = Kind.REQUIRED, Kind.OPTIONAL, Kind.STOCHASTIC, Kind.UNTESTED


def _rules(*rows: tuple[str, str, Kind, str]) -> tuple[Rule, ...]:
    return tuple(Rule(name, rule, kind, summary) for name, rule, kind, summary in rows)


PUBLISHER_RULES = _rules(
    ("required_createPublisher1MustProduceAStreamOfExactly1Element", "1.1/1.5", REQ,
     "create_publisher(1) emits exactly one element, then completes"),
    ("required_createPublisher3MustProduceAStreamOfExactly3Elements", "1.1/1.5", REQ,
     "create_publisher(3) emits exactly three elements, one per request(1), then completes"),
    ("required_validate_maxElementsFromPublisher", "config", REQ, "max_elements_from_publisher() >= 0"),
    ("required_validate_boundedDepthOfOnNextAndRequestRecursion", "config", REQ,
     "bounded_depth_of_on_next_and_request_recursion() >= 1"),
    ("required_spec101_subscriptionRequestMustResultInTheCorrectNumberOfProducedElements", "1.1", REQ,
     "nothing before the first request; exactly the requested number after requests of 1, 1 and 2"),
    ("required_spec102_maySignalLessThanRequestedAndTerminateSubscription", "1.2", REQ,
     "request(10) on a 3-element stream gives 3 elements and on_complete"),
    ("stochastic_spec103_mustSignalOnMethodsSequentially", "1.3", STO,
     "signals to one subscriber never overlap (100 runs, a concurrency detector on every signal)"),
    ("optional_spec104_mustSignalOnErrorWhenFails", "1.4", OPT,
     "the failed publisher signals on_subscribe then on_error, and raises nothing from subscribe"),
    ("required_spec105_mustSignalOnCompleteWhenFiniteStreamTerminates", "1.5", REQ,
     "a finite stream ends with on_complete, and nothing follows"),
    ("optional_spec105_emptyStreamMustTerminateBySignallingOnComplete", "1.5", OPT,
     "an empty stream completes"),
    ("untested_spec106_mustConsiderSubscriptionCancelledAfterOnErrorOrOnCompleteHasBeenCalled", "1.6", UNT,
     "not checkable from outside the publisher"),
    ("required_spec107_mustNotEmitFurtherSignalsOnceOnCompleteHasBeenSignalled", "1.7", REQ,
     "no signal after on_complete, even when more is requested"),
    ("untested_spec107_mustNotEmitFurtherSignalsOnceOnErrorHasBeenSignalled", "1.7", UNT,
     "not verified by the JVM kit"),
    ("untested_spec108_possiblyCanceledSubscriptionShouldNotReceiveOnErrorOrOnCompleteSignals", "1.8", UNT,
     "no agreement on how to check 'eventually'"),
    ("required_spec109_mustIssueOnSubscribeForNonNullSubscriber", "1.9", REQ,
     "on_subscribe comes first, exactly once"),
    ("untested_spec109_subscribeShouldNotThrowNonFatalThrowable", "1.9", UNT,
     "not checkable from outside the publisher"),
    ("required_spec109_subscribeThrowNPEOnNullSubscriber", "1.9", REQ,
     "subscribe(None) raises TypeError"),
    ("required_spec109_mayRejectCallsToSubscribeIfPublisherIsUnableOrUnwillingToServeThemRejectionMustTriggerOnErrorAfterOnSubscribe",
     "1.9", REQ, "the failed publisher signals on_error after on_subscribe, without demand"),
    ("untested_spec110_rejectASubscriptionRequestIfTheSameSubscriberSubscribesTwice", "1.10", UNT,
     "would need unlimited retention of subscribers"),
    ("optional_spec111_maySupportMultiSubscribe", "1.11", OPT, "two subscribers can subscribe"),
    ("optional_spec111_registeredSubscribersMustReceiveOnNextOrOnCompleteSignals", "1.11", OPT,
     "two subscribers each receive an element or on_complete"),
    ("optional_spec111_multicast_mustProduceTheSameElementsInTheSameSequenceToAllOfItsSubscribersWhenRequestingOneByOne",
     "1.11", OPT, "three subscribers requesting differently see the same sequence"),
    ("optional_spec111_multicast_mustProduceTheSameElementsInTheSameSequenceToAllOfItsSubscribersWhenRequestingManyUpfront",
     "1.11", OPT, "three subscribers requesting 4 upfront see the same 3 elements"),
    ("optional_spec111_multicast_mustProduceTheSameElementsInTheSameSequenceToAllOfItsSubscribersWhenRequestingManyUpfrontAndCompleteAsExpected",
     "1.11", OPT, "as above, and all three complete"),
    ("required_spec302_mustAllowSynchronousRequestCallsFromOnNextAndOnSubscribe", "3.2", REQ,
     "request may be called from on_subscribe and on_next"),
    ("required_spec303_mustNotAllowUnboundedRecursion", "3.3", REQ,
     "request inside on_next does not recurse deeper than the declared bound"),
    ("untested_spec304_requestShouldNotPerformHeavyComputations", "3.4", UNT, "no reliable way to detect"),
    ("untested_spec305_cancelMustNotSynchronouslyPerformHeavyComputation", "3.5", UNT, "no reliable way to detect"),
    ("required_spec306_afterSubscriptionIsCancelledRequestMustBeNops", "3.6", REQ,
     "request after cancel signals nothing"),
    ("required_spec307_afterSubscriptionIsCancelledAdditionalCancelationsMustBeNops", "3.7", REQ,
     "cancel after cancel is a no-op"),
    ("required_spec309_requestZeroMustSignalIllegalArgumentException", "3.9", REQ,
     "request(0) signals on_error(ValueError)"),
    ("required_spec309_requestNegativeNumberMustSignalIllegalArgumentException", "3.9", REQ,
     "request(-n) signals on_error(ValueError)"),
    ("optional_spec309_requestNegativeNumberMaySignalIllegalArgumentExceptionWithSpecificMessage", "3.9", OPT,
     "the rule 3.9 error message names the rule"),
    ("required_spec312_cancelMustMakeThePublisherToEventuallyStopSignaling", "3.12", REQ,
     "after cancel, signalling stops within the demand already given"),
    ("required_spec313_cancelMustMakeThePublisherEventuallyDropAllReferencesToTheSubscriber", "3.13", REQ,
     "after cancel, the publisher drops its reference to the subscriber"),
    ("required_spec317_mustSupportAPendingElementCountUpToLongMaxValue", "3.17", REQ,
     "request(2**63-1) is served"),
    ("required_spec317_mustSupportACumulativePendingElementCountUpToLongMaxValue", "3.17", REQ,
     "requests summing to 2**63-1 are served"),
    ("required_spec317_mustNotSignalOnErrorWhenPendingAboveLongMaxValue", "3.17", REQ,
     "demand summing past 2**63-1 is not an error"),
)

WHITEBOX_RULES = _rules(
    ("required_exerciseWhiteboxHappyPath", "setup", REQ, "request, receive two elements, cancel"),
    ("required_spec201_mustSignalDemandViaSubscriptionRequest", "2.1", REQ, "the subscriber requests"),
    ("untested_spec202_shouldAsynchronouslyDispatch", "2.2", UNT, "no agreed way to detect"),
    ("required_spec203_mustNotCallMethodsOnSubscriptionOrPublisherInOnComplete", "2.3", REQ,
     "no request/cancel from inside on_complete"),
    ("required_spec203_mustNotCallMethodsOnSubscriptionOrPublisherInOnError", "2.3", REQ,
     "no request/cancel from inside on_error"),
    ("untested_spec204_mustConsiderTheSubscriptionAsCancelledInAfterRecievingOnCompleteOrOnError", "2.4", UNT,
     "not observable"),
    ("required_spec205_mustCallSubscriptionCancelIfItAlreadyHasAnSubscriptionAndReceivesAnotherOnSubscribeSignal",
     "2.5", REQ, "a second subscription is cancelled"),
    ("untested_spec206_mustCallSubscriptionCancelIfItIsNoLongerValid", "2.6", UNT, "needs an external condition"),
    ("untested_spec207_mustEnsureAllCallsOnItsSubscriptionTakePlaceFromTheSameThreadOrTakeCareOfSynchronization",
     "2.7", UNT, "not observable"),
    ("required_spec208_mustBePreparedToReceiveOnNextSignalsAfterHavingCalledSubscriptionCancel", "2.8", REQ,
     "on_next after cancel is accepted"),
    ("required_spec209_mustBePreparedToReceiveAnOnCompleteSignalWithPrecedingRequestCall", "2.9", REQ,
     "on_complete after a request is accepted"),
    ("required_spec209_mustBePreparedToReceiveAnOnCompleteSignalWithoutPrecedingRequestCall", "2.9", REQ,
     "on_complete without a request is accepted"),
    ("required_spec210_mustBePreparedToReceiveAnOnErrorSignalWithPrecedingRequestCall", "2.10", REQ,
     "on_error after a request is accepted"),
    ("required_spec210_mustBePreparedToReceiveAnOnErrorSignalWithoutPrecedingRequestCall", "2.10", REQ,
     "on_error without a request is accepted"),
    ("untested_spec211_mustMakeSureThatAllCallsOnItsMethodsHappenBeforeTheProcessingOfTheRespectiveEvents",
     "2.11", UNT, "not observable"),
    ("untested_spec212_mustNotCallOnSubscribeMoreThanOnceBasedOnObjectEquality_specViolation", "2.12", UNT,
     "covered by rule 2.5"),
    ("untested_spec213_failingOnSignalInvocation", "2.13", UNT, "needs control over the subscriber's failure"),
    ("required_spec213_onSubscribe_mustThrowNullPointerExceptionWhenParametersAreNull", "2.13", REQ,
     "on_subscribe(None) raises TypeError"),
    ("required_spec213_onNext_mustThrowNullPointerExceptionWhenParametersAreNull", "2.13", REQ,
     "on_next(None) raises TypeError"),
    ("required_spec213_onError_mustThrowNullPointerExceptionWhenParametersAreNull", "2.13", REQ,
     "on_error(None) raises TypeError"),
    ("untested_spec301_mustNotBeCalledOutsideSubscriberContext", "3.1", UNT, "not observable"),
    ("required_spec308_requestMustRegisterGivenNumberElementsToBeProduced", "3.8", REQ,
     "request(2) receives two elements and no more"),
    ("untested_spec310_requestMaySynchronouslyCallOnNextOnSubscriber", "3.10", UNT, "a permission, not a duty"),
    ("untested_spec311_requestMaySynchronouslyCallOnCompleteOrOnError", "3.11", UNT, "a permission, not a duty"),
    ("untested_spec314_cancelMayCauseThePublisherToShutdownIfNoOtherSubscriptionExists", "3.14", UNT,
     "a permission, not a duty"),
    ("untested_spec315_cancelMustNotThrowExceptionAndMustSignalOnError", "3.15", UNT, "not observable"),
    ("untested_spec316_requestMustNotThrowExceptionAndMustOnErrorTheSubscriber", "3.16", UNT, "not observable"),
)

BLACKBOX_RULES = _rules(
    ("required_spec201_blackbox_mustSignalDemandViaSubscriptionRequest", "2.1", REQ,
     "the subscriber requests, and receives what it requested"),
    ("untested_spec202_blackbox_shouldAsynchronouslyDispatch", "2.2", UNT, "no agreed way to detect"),
    ("required_spec203_blackbox_mustNotCallMethodsOnSubscriptionOrPublisherInOnComplete", "2.3", REQ,
     "no request/cancel from inside on_complete"),
    ("required_spec203_blackbox_mustNotCallMethodsOnSubscriptionOrPublisherInOnError", "2.3", REQ,
     "no request/cancel from inside on_error"),
    ("untested_spec204_blackbox_mustConsiderTheSubscriptionAsCancelledInAfterRecievingOnCompleteOrOnError",
     "2.4", UNT, "not observable"),
    ("required_spec205_blackbox_mustCallSubscriptionCancelIfItAlreadyHasAnSubscriptionAndReceivesAnotherOnSubscribeSignal",
     "2.5", REQ, "a second subscription is cancelled, and never requested from"),
    ("untested_spec206_blackbox_mustCallSubscriptionCancelIfItIsNoLongerValid", "2.6", UNT,
     "needs an external condition"),
    ("untested_spec207_blackbox_mustEnsureAllCallsOnItsSubscriptionTakePlaceFromTheSameThreadOrTakeCareOfSynchronization",
     "2.7", UNT, "not observable"),
    ("untested_spec208_blackbox_mustBePreparedToReceiveOnNextSignalsAfterHavingCalledSubscriptionCancel",
     "2.8", UNT, "cannot make a blackbox subscriber cancel"),
    ("required_spec209_blackbox_mustBePreparedToReceiveAnOnCompleteSignalWithPrecedingRequestCall", "2.9", REQ,
     "on_complete after a request is accepted"),
    ("required_spec209_blackbox_mustBePreparedToReceiveAnOnCompleteSignalWithoutPrecedingRequestCall", "2.9", REQ,
     "on_complete without a request is accepted"),
    ("required_spec210_blackbox_mustBePreparedToReceiveAnOnErrorSignalWithPrecedingRequestCall", "2.10", REQ,
     "on_error after a request is accepted"),
    ("required_spec210_blackbox_mustBePreparedToReceiveAnOnErrorSignalWithoutPrecedingRequestCall", "2.10", REQ,
     "on_error without a request is accepted"),
    ("untested_spec211_blackbox_mustMakeSureThatAllCallsOnItsMethodsHappenBeforeTheProcessingOfTheRespectiveEvents",
     "2.11", UNT, "not observable"),
    ("untested_spec212_blackbox_mustNotCallOnSubscribeMoreThanOnceBasedOnObjectEquality", "2.12", UNT,
     "covered by rule 2.5"),
    ("untested_spec213_blackbox_failingOnSignalInvocation", "2.13", UNT,
     "needs control over the subscriber's failure"),
    ("required_spec213_blackbox_onSubscribe_mustThrowNullPointerExceptionWhenParametersAreNull", "2.13", REQ,
     "on_subscribe(None) raises TypeError"),
    ("required_spec213_blackbox_onNext_mustThrowNullPointerExceptionWhenParametersAreNull", "2.13", REQ,
     "on_next(None) raises TypeError"),
    ("required_spec213_blackbox_onError_mustThrowNullPointerExceptionWhenParametersAreNull", "2.13", REQ,
     "on_error(None) raises TypeError"),
    ("untested_spec301_blackbox_mustNotBeCalledOutsideSubscriberContext", "3.1", UNT, "not observable"),
    ("untested_spec308_blackbox_requestMustRegisterGivenNumberElementsToBeProduced", "3.8", UNT,
     "cannot drive a blackbox subscriber's demand"),
    ("untested_spec310_blackbox_requestMaySynchronouslyCallOnNextOnSubscriber", "3.10", UNT,
     "a permission, not a duty"),
    ("untested_spec311_blackbox_requestMaySynchronouslyCallOnCompleteOrOnError", "3.11", UNT,
     "a permission, not a duty"),
    ("untested_spec314_blackbox_cancelMayCauseThePublisherToShutdownIfNoOtherSubscriptionExists", "3.14", UNT,
     "a permission, not a duty"),
    ("untested_spec315_blackbox_cancelMustNotThrowExceptionAndMustSignalOnError", "3.15", UNT, "not observable"),
    ("untested_spec316_blackbox_requestMustNotThrowExceptionAndMustOnErrorTheSubscriber", "3.16", UNT,
     "not observable"),
)

PROCESSOR_ONLY_RULES = _rules(
    ("required_spec104_mustCallOnErrorOnAllItsSubscribersIfItEncountersANonRecoverableError", "1.4", REQ,
     "an upstream error reaches every subscriber, with or without demand"),
    ("mustImmediatelyPassOnOnErrorEventsReceivedFromItsUpstreamToItsDownstream", "4.2", REQ,
     "an upstream error reaches the subscriber without a request (no prefix in the JVM kit; required)"),
    ("required_mustRequestFromUpstreamForElementsThatHaveBeenRequestedLongAgo", "2.1/4.1", REQ,
     "demand from an earlier subscriber keeps flowing upstream; a late subscriber gets no old elements"),
)

IDENTITY_PROCESSOR_RULES = PUBLISHER_RULES + WHITEBOX_RULES + PROCESSOR_ONLY_RULES

JVM_TEST_COUNTS = {
    "PublisherVerification": 38,
    "SubscriberWhiteboxVerification": 27,
    "SubscriberBlackboxVerification": 26,
    "IdentityProcessorVerification": 68,
}
"""The number of verification tests per class in the JVM kit 1.0.4 (159 in all)."""

_BY_NAME = {rule.name: rule for rule in IDENTITY_PROCESSOR_RULES + BLACKBOX_RULES}


def rule_for(name: str) -> Rule:
    """The registry entry for a JVM test name, with or without the ``test_`` prefix."""
    return _BY_NAME[name.removeprefix("test_")]
