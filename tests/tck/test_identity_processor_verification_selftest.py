"""Self-tests of ``IdentityProcessorVerification`` (a port of the JVM kit's ``IdentityProcessorVerificationTest``),
and of whitebox subscribers that never register with their probe (``SubscriberNoRegisterOnSubscribeTest``)."""

from __future__ import annotations

import pytest

from reaqtive.core.streams import Processor, Publisher, Subscriber, Subscription
from reaqtive.tck import IdentityProcessorVerification, SubscriberWhiteboxVerification, WhiteboxSubscriberProbe
from reaqtive.tck.rules import WHITEBOX_RULES, Kind
from tests.tck.reference import LockstepProcessor
from tests.tck.support import require_test_failure, require_test_pass, require_test_skip

SPEC104 = "required_spec104_mustCallOnErrorOnAllItsSubscribersIfItEncountersANonRecoverableError"
PASS_ON_ERROR = "mustImmediatelyPassOnOnErrorEventsReceivedFromItsUpstreamToItsDownstream"


class CustomProcessorVerification(IdentityProcessorVerification[int]):
    """Runs the kit against processors of the given class (not a pytest class)."""

    def __init__(self, processor_class: type[LockstepProcessor[int]], max_subscribers: int = 2) -> None:
        self._processor_class = processor_class
        self._max_subscribers = max_subscribers

    def create_identity_processor(self, buffer_size: int) -> Processor[int, int]:
        return self._processor_class(buffer_size)

    def create_failed_publisher(self) -> Publisher[int] | None:
        return None

    def create_element(self, element: int) -> int:
        return element

    def max_supported_subscribers(self) -> int:
        return self._max_subscribers

    def does_coordinated_emission(self) -> bool:
        return True


class _SwallowsErrors(LockstepProcessor[int]):
    def on_error(self, error: BaseException) -> None:
        pass


def test_spec104_shouldBeSkipped_whenOnlyOneSubscriberIsSupported() -> None:
    require_test_skip(CustomProcessorVerification(LockstepProcessor, max_subscribers=1), SPEC104,
                      "The Publisher under test only supports 1 subscribers, while this test requires at least 2 to "
                      "run")


def test_spec104_shouldFail_whenErrorIsNotPassedOn() -> None:
    require_test_failure(CustomProcessorVerification(_SwallowsErrors), SPEC104,
                         "Did not receive expected error on downstream within")


def test_mustImmediatelyPassOnOnError_shouldFail_whenErrorIsNotPassedOn() -> None:
    require_test_failure(CustomProcessorVerification(_SwallowsErrors), PASS_ON_ERROR,
                         "Did not receive expected error on downstream within")


def test_processor_tests_pass_for_lockstep_processor() -> None:
    verification = CustomProcessorVerification(LockstepProcessor)
    for name in (SPEC104, PASS_ON_ERROR, "required_mustRequestFromUpstreamForElementsThatHaveBeenRequestedLongAgo"):
        require_test_pass(verification, name)


class _NoRegisterSubscriber:
    """A whitebox subscriber that forgets to call ``probe.register_on_subscribe``."""

    def on_subscribe(self, subscription: Subscription) -> None:
        subscription.request(1)

    def on_next(self, element: int) -> None:
        pass

    def on_error(self, error: BaseException) -> None:
        pass

    def on_complete(self) -> None:
        pass


class NoRegisterVerification(SubscriberWhiteboxVerification[int]):
    def create_subscriber(self, probe: WhiteboxSubscriberProbe[int]) -> Subscriber[int]:
        return _NoRegisterSubscriber()

    def create_element(self, element: int) -> int:
        return element


# Every required whitebox test that attaches the subscriber to the kit's publisher must fail at setup; the two rule
# 2.3 tests attach nothing and pass.
STAGE_FREE = {"required_spec203_mustNotCallMethodsOnSubscriptionOrPublisherInOnComplete",
              "required_spec203_mustNotCallMethodsOnSubscriptionOrPublisherInOnError"}
STAGED = [r.name for r in WHITEBOX_RULES if r.kind is Kind.REQUIRED and r.name not in STAGE_FREE]


def test_twelve_whitebox_tests_need_registration() -> None:
    assert len(STAGED) == 12


@pytest.mark.parametrize("name", STAGED)
def test_whitebox_subscriber_not_registering_fails(name: str) -> None:
    require_test_failure(NoRegisterVerification(), name, "did not `register_on_subscribe` within")


@pytest.mark.parametrize("name", sorted(STAGE_FREE))
def test_whitebox_subscriber_not_registering_passes_stage_free_tests(name: str) -> None:
    require_test_pass(NoRegisterVerification(), name)
