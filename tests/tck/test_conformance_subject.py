"""Reactive Streams conformance of the hot ``SimpleSubject`` as a publisher.

A hot subject emits what its producers push, whether anyone asked or not; each subscriber gets its own bounded
buffer, and demand decides when buffered elements are delivered. ``create_publisher(n)`` therefore gives every
subscriber a fresh subject whose producer pushes ``n`` elements and completes right after the subscription is
made: the elements wait in the subscriber's buffer until requested.

The stream can be at most one buffer long (``max_elements_from_publisher``), so the rule 3.17 test that needs
``2**31 - 1`` elements is skipped by the kit; the test at the end of this module checks that rule directly.
"""

from __future__ import annotations

from reaqtive import SimpleSubject
from reaqtive.core.streams import LONG_MAX, Publisher, Subscriber
from reaqtive.tck import PublisherVerification, TestEnvironment
from reaqtive.tck.subscribers import ManualSubscriberWithSubscriptionSupport

BUFFER = 1024


class PushOnSubscribe:
    """A publisher view of a hot subject: each subscriber gets a new subject fed ``elements`` elements (then
    completion, or an error) by a producer that pushes as soon as the subscriber is attached."""

    def __init__(self, elements: int, error: BaseException | None = None) -> None:
        self._elements = elements
        self._error = error

    def __repr__(self) -> str:
        return f"PushOnSubscribe({self._elements})"

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        subject: SimpleSubject[int] = SimpleSubject(buffer_size=BUFFER)
        subject.subscribe(subscriber)  # a None subscriber raises TypeError here (rule 1.9)
        producer = subject.create_observer()
        for value in range(self._elements):
            producer.on_next(value)
        if self._error is not None:
            producer.on_error(self._error)
        else:
            producer.on_complete()


class TestSimpleSubjectPublisher(PublisherVerification[int]):
    def create_publisher(self, elements: int) -> Publisher[int]:
        return PushOnSubscribe(elements)

    def create_failed_publisher(self) -> Publisher[int] | None:
        return PushOnSubscribe(0, RuntimeError("the producer failed"))

    def max_elements_from_publisher(self) -> int:
        return BUFFER  # a hot stream longer than the buffer overflows a subscriber that has not requested yet


def test_subject_demand_summing_past_long_max_is_not_an_error() -> None:
    """Rule 3.17 for the subject, which the kit's own test cannot reach (it needs 2**31 - 1 elements)."""
    env = TestEnvironment()
    subject: SimpleSubject[int] = SimpleSubject(buffer_size=BUFFER)
    subscriber: ManualSubscriberWithSubscriptionSupport[int] = ManualSubscriberWithSubscriptionSupport(env)
    env.subscribe(subject, subscriber)  # type: ignore[arg-type]  # a Subscribable: subscribe returns a handle
    for _ in range(10):
        subscriber.request(LONG_MAX - 1)
    producer = subject.create_observer()
    for value in range(30):  # the kit's subscriber holds at most 32 unconsumed elements
        producer.on_next(value)
    assert subscriber.next_elements(30) == list(range(30))
    subscriber.cancel()
    env.verify_no_async_errors()
