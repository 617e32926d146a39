"""``IdentityProcessorVerification``: the 68 tests of the JVM kit's IdentityProcessorVerification (rules 1-4).

A processor is verified as a Publisher (the 38 publisher tests, fed by the kit's helper publisher), as a
whitebox Subscriber (the 27 subscriber tests, observed through a kit subscriber attached downstream) and by three
tests of its own (rules 1.4 and 4.2 across subscribers, and demand that keeps flowing upstream)::

    class TestMyIdentityProcessor(IdentityProcessorVerification[int]):
        def create_identity_processor(self, buffer_size: int) -> Processor[int, int]:
            return MyProcessor(buffer_size)

        def create_failed_publisher(self) -> Publisher[int] | None:
            return None

        def create_element(self, element: int) -> int:
            return element

Python has multiple inheritance, so the rule sets are inherited rather than delegated as in the JVM kit.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import ClassVar, Generic, TypeVar

from reaqtive.core.streams import LONG_MAX, Processor, Publisher, Subscriber, Subscription
from reaqtive.tck.env import TestEnvironment
from reaqtive.tck.manual_publisher import ManualPublisher
from reaqtive.tck.outcomes import CapabilitySkip
from reaqtive.tck.probes import WhiteboxSubscriberProbe
from reaqtive.tck.publisher_verification import PublisherVerification
from reaqtive.tck.subscriber_whitebox import SubscriberWhiteboxVerification
from reaqtive.tck.subscribers import (
    ManualSubscriber,
    ManualSubscriberWithErrorCollection,
    ManualSubscriberWithSubscriptionSupport,
    TestSubscriber,
)

__all__ = ["IdentityProcessorVerification", "ProcessorTestSetup"]

T = TypeVar("T")

COORDINATION_HINT = (
    "If the Processor coordinates requests/emissions when having multiple Subscribers at once, please override "
    "does_coordinated_emission() to return True"
)


class IdentityProcessorVerification(PublisherVerification[T], SubscriberWhiteboxVerification[T], Generic[T]):
    """Verifies a Processor that passes its elements through unchanged (68 tests)."""

    processor_buffer_size: ClassVar[int] = 16
    """The ``buffer_size`` passed to ``create_identity_processor`` (the JVM kit's ``TEST_BUFFER_SIZE``)."""

    # -- hooks ----------------------------------------------------------------------------------------------------

    @abstractmethod
    def create_identity_processor(self, buffer_size: int) -> Processor[T, T]:
        """A fresh processor that forwards elements unchanged and can buffer ``buffer_size`` of them."""

    def max_supported_subscribers(self) -> int:
        """How many subscribers the processor serves at once; below 2 skips the multi-subscriber tests."""
        return LONG_MAX

    def does_coordinated_emission(self) -> bool:
        """Return ``True`` if the processor emits only when *all* its subscribers have demand."""
        return False

    # -- the processor as a Publisher and as a Subscriber ---------------------------------------------------------

    def create_publisher(self, elements: int) -> Publisher[T]:
        """The processor under test, fed by a helper publisher of exactly ``elements`` elements."""
        processor = self.create_identity_processor(self.processor_buffer_size)
        self.create_helper_publisher(elements).subscribe(processor)
        return processor

    def create_subscriber(self, probe: WhiteboxSubscriberProbe[T]) -> Subscriber[T]:
        """The processor under test, with a kit subscriber downstream that reports to ``probe`` (rule 4.1)."""
        processor = self.create_identity_processor(self.processor_buffer_size)
        processor.subscribe(_ProbeForwardingSubscriber(self.env, probe))
        return processor

    def optional_multiple_subscribers_test(self, required: int, body: Callable[[], None]) -> None:
        supported = self.max_supported_subscribers()
        if required > supported:
            raise CapabilitySkip(
                f"The Publisher under test only supports {supported} subscribers, while this test requires at least "
                f"{required} to run."
            )
        body()

    # -- the processor's own tests --------------------------------------------------------------------------------

    def test_required_spec104_mustCallOnErrorOnAllItsSubscribersIfItEncountersANonRecoverableError(self) -> None:
        env = self.env

        def body() -> None:
            setup = ProcessorTestSetup(env, self)
            sub1: ManualSubscriberWithErrorCollection[T] = ManualSubscriberWithErrorCollection(env)
            env.subscribe(setup.processor, sub1)
            sub2: ManualSubscriberWithErrorCollection[T] = ManualSubscriberWithErrorCollection(env)
            env.subscribe(setup.processor, sub2)
            error = RuntimeError("Test exception")
            if self.does_coordinated_emission():
                sub1.request(1)
                sub2.request(1)
                setup.expect_request()
                x = setup.send_next_t_from_upstream()
                setup.expect_next_element(sub1, x)
                setup.expect_next_element(sub2, x)
                sub1.request(1)
                sub2.request(1)
            else:
                sub1.request(1)
                setup.expect_request(hint=COORDINATION_HINT)
                x = setup.send_next_t_from_upstream()
                setup.expect_next_element(sub1, x)
                sub1.request(1)
                # sub1 has received one element and has one more requested; sub2 has requested nothing.
            setup.send_error(error)
            sub1.expect_error_instance(error)
            sub2.expect_error_instance(error)
            env.verify_no_async_errors_no_delay()

        self.optional_multiple_subscribers_test(2, body)

    def test_mustImmediatelyPassOnOnErrorEventsReceivedFromItsUpstreamToItsDownstream(self) -> None:
        env = self.env
        setup = ProcessorTestSetup(env, self)
        sub: ManualSubscriberWithErrorCollection[T] = ManualSubscriberWithErrorCollection(env)
        env.subscribe(setup.processor, sub)
        error = RuntimeError("Test exception")
        setup.send_error(error)
        sub.expect_error_instance(error)  # "immediately": without any request
        env.verify_no_async_errors_no_delay()

    def test_required_mustRequestFromUpstreamForElementsThatHaveBeenRequestedLongAgo(self) -> None:
        env = self.env

        def body() -> None:
            setup = ProcessorTestSetup(env, self)
            sub1 = setup.new_subscriber()
            sub1.request(20)
            total_requests = setup.expect_request()
            x = setup.send_next_t_from_upstream()
            setup.expect_next_element(sub1, x)
            if total_requests == 1:
                total_requests += setup.expect_request()
            y = setup.send_next_t_from_upstream()
            setup.expect_next_element(sub1, y)
            if total_requests == 2:
                total_requests += setup.expect_request()

            sub2 = setup.new_subscriber()  # sub1 has 18 pending, sub2 has 0
            if self.does_coordinated_emission():
                sub2.expect_none()
                sub2.request(1)
                z = setup.send_next_t_from_upstream()
                setup.expect_next_element(sub1, z)
                setup.expect_next_element(sub2, z)
            else:
                z = setup.send_next_t_from_upstream()
                setup.expect_next_element(sub1, z, COORDINATION_HINT)
                sub2.expect_none()  # sub2 has not requested anything yet
                sub2.request(1)
                setup.expect_next_element(sub2, z)
            if total_requests == 3:
                setup.expect_request()

            setup.send_completion()  # end cleanly
            sub1.expect_completion(env.default_timeout_ms)
            sub2.expect_completion(env.default_timeout_ms)
            env.verify_no_async_errors_no_delay()

        self.optional_multiple_subscribers_test(2, body)


class ProcessorTestSetup(ManualPublisher[T]):
    """A processor under test between a kit-driven upstream (this object) and kit subscribers downstream."""

    def __init__(self, env: TestEnvironment, verification: IdentityProcessorVerification[T]) -> None:
        super().__init__(env)
        # tees gives the test an endless supply of the implementation's own elements.
        self.tees: ManualSubscriberWithSubscriptionSupport[T] = env.new_manual_subscriber(
            verification.create_helper_publisher(LONG_MAX)
        )
        self._seen: list[T] = []
        self.processor = verification.create_identity_processor(verification.processor_buffer_size)
        self.subscribe(self.processor)

    def new_subscriber(self) -> ManualSubscriberWithSubscriptionSupport[T]:
        return self.env.new_manual_subscriber(self.processor)

    def next_t(self) -> T:
        element = self.tees.request_next_element()
        if element in self._seen:
            self.env.flop(f"Helper publisher illegally produced the same element {element!r} twice")
        self._seen.append(element)
        return element

    def send_next_t_from_upstream(self) -> T:
        element = self.next_t()
        self.send_next(element)
        return element

    def expect_next_element(self, sub: ManualSubscriber[T], expected: T, hint: str = "") -> None:
        message = f"timeout while awaiting {expected!r}" + (f" ({hint})" if hint else "")
        element = sub.next_element(message=message)
        if element != expected:
            self.env.flop(f"Received `on_next({element!r})` on downstream but expected `on_next({expected!r})`")


class _ProbeForwardingSubscriber(TestSubscriber[T]):
    """The kit's subscriber downstream of a processor under whitebox test: it reports to the probe and gives the
    probe a puppet that requests and cancels on the processor's subscription."""

    def __init__(self, env: TestEnvironment, probe: WhiteboxSubscriberProbe[T]) -> None:
        super().__init__(env)
        self._probe = probe

    def on_subscribe(self, subscription: Subscription) -> None:
        self.env.debug(f"whitebox downstream on_subscribe({subscription!r})")
        if self.subscription.is_completed():
            subscription.cancel()  # rule 2.5: the kit's own subscriber obeys the rules too
            return
        self.subscription.complete(subscription)
        self._probe.register_on_subscribe(_SubscriptionPuppet(subscription))

    def on_next(self, element: T) -> None:
        self._probe.register_on_next(element)

    def on_complete(self) -> None:
        self.terminated = True
        self._probe.register_on_complete()

    def on_error(self, cause: BaseException) -> None:
        self.terminated = True
        self._probe.register_on_error(cause)


class _SubscriptionPuppet:
    def __init__(self, subscription: Subscription) -> None:
        self._subscription = subscription

    def trigger_request(self, elements: int) -> None:
        self._subscription.request(elements)

    def signal_cancel(self) -> None:
        self._subscription.cancel()
