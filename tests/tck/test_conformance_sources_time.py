"""Reactive Streams conformance of the sources and time operators: return_value, empty, throw, never, timer,
interval, delay_subscription, sample and retry.

Time-based queries run hosted on a real scheduler (worker threads), since they need a clock; the others run
standalone. Sources that can only make a fixed number of elements say so with ``max_elements_from_publisher``
(tests that need more are skipped as capabilities), and make the zero-element stream the verification needs with
``empty`` where they cannot make one themselves.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from reaqtive import OperatorContext, Query, as_processor, as_publisher
from reaqtive.core.streams import LONG_MAX, Processor, Publisher
from reaqtive.scheduler import LogicalScheduler, PhysicalScheduler
from reaqtive.tck import NotVerified
from tests.tck.conformance import (
    OperatorProcessorVerification,
    OperatorPublisherVerification,
    QueryPublisherVerification,
    SourceFailedError,
    failing_source,
)

TICK = timedelta(microseconds=200)


class _Hosted:
    """A real scheduler for each test (created in ``setup_method``, disposed in ``teardown_method``)."""

    physical: PhysicalScheduler
    context: OperatorContext

    def setup_method(self, method: object = None) -> None:
        super().setup_method(method)  # type: ignore[misc]
        self.physical = PhysicalScheduler(workers=2, name="tck")
        self.context = OperatorContext("reaqtive://tck/hosted", LogicalScheduler(self.physical))

    def teardown_method(self, method: object = None) -> None:
        super().teardown_method(method)  # type: ignore[misc]
        self.physical.dispose()

    def create_publisher(self, elements: int) -> Publisher[Any]:
        return as_publisher(self.create_query(elements), self.context)  # type: ignore[attr-defined]

    def create_failed_publisher(self) -> Publisher[Any] | None:
        query = self.create_failed_query()  # type: ignore[attr-defined]
        return None if query is None else as_publisher(query, self.context)


# -- immediate sources -------------------------------------------------------------------------------------------


class TestReturnValuePublisher(QueryPublisherVerification):
    """A stream of exactly one element; the zero-element stream is ``empty``."""

    operators = ("return_value", "empty")

    def create_query(self, elements: int) -> Query[Any]:
        return Query.return_value(7) if elements else Query.empty()

    def max_elements_from_publisher(self) -> int:
        return 1


class TestReturnValueHostedPublisher(_Hosted, TestReturnValuePublisher):
    """The same, emitting on the scheduler's worker threads."""


class TestEmptyPublisher(QueryPublisherVerification):
    operators = ("empty",)

    def create_query(self, elements: int) -> Query[Any]:
        return Query.empty()

    def max_elements_from_publisher(self) -> int:
        return 0


class TestThrowPublisher(QueryPublisherVerification):
    """``throw`` is the failed publisher (rules 1.4, 1.9); the stream of zero elements is ``empty``."""

    operators = ("throw",)

    def create_query(self, elements: int) -> Query[Any]:
        return Query.empty()

    def create_failed_query(self) -> Query[Any] | None:
        return Query.throw(SourceFailedError("throw"))

    def max_elements_from_publisher(self) -> int:
        return 0


class TestNeverPublisher(QueryPublisherVerification):
    """``never`` is an endless stream without elements."""

    operators = ("never",)

    def create_query(self, elements: int) -> Query[Any]:
        return Query.never()

    def max_elements_from_publisher(self) -> int:
        return 0


# -- timers ------------------------------------------------------------------------------------------------------


class TestTimerPublisher(_Hosted, QueryPublisherVerification):
    """A single timer is a stream of exactly one element; the zero-element stream is ``empty``."""

    operators = ("timer",)

    def create_query(self, elements: int) -> Query[Any]:
        return Query.timer(TICK) if elements else Query.empty()

    def max_elements_from_publisher(self) -> int:
        return 1


class TestPeriodicTimerPublisher(_Hosted, QueryPublisherVerification):
    """A periodic timer never completes: an endless publisher (tests that need completion are skipped)."""

    operators = ("timer",)

    def create_query(self, elements: int) -> Query[Any]:
        return Query.timer(timedelta(0), TICK)

    def max_elements_from_publisher(self) -> int:
        return LONG_MAX


class TestIntervalPublisher(_Hosted, QueryPublisherVerification):
    operators = ("interval",)

    def create_query(self, elements: int) -> Query[Any]:
        return Query.interval(TICK)

    def max_elements_from_publisher(self) -> int:
        return LONG_MAX


# -- operators over a range source -------------------------------------------------------------------------------


class TestDelaySubscriptionPublisher(_Hosted, OperatorPublisherVerification):
    operators = ("delay_subscription",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.delay_subscription(TICK)


class TestDelaySubscriptionProcessor(OperatorProcessorVerification):
    operators = ("delay_subscription",)

    def setup_method(self, method: object = None) -> None:
        super().setup_method(method)
        self.physical = PhysicalScheduler(workers=2, name="tck")
        self.context = OperatorContext("reaqtive://tck/processor", LogicalScheduler(self.physical))

    def teardown_method(self, method: object = None) -> None:
        super().teardown_method(method)
        self.physical.dispose()

    def apply(self, source: Query[int]) -> Query[int]:
        return source.delay_subscription(TICK)

    def create_identity_processor(self, buffer_size: int) -> Processor[int, int]:
        return as_processor(self.apply, self.context)

    def create_failed_publisher(self) -> Publisher[int] | None:
        processor = as_processor(self.apply, self.context)
        as_publisher(failing_source()).subscribe(processor)
        return processor


class TestSamplePublisher(OperatorPublisherVerification):
    """Sampling keeps at most the latest element, so it makes at most one here: the source's last element,
    sampled by the sampler's completion (``empty``). The zero-element stream samples an empty source."""

    operators = ("sample",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.sample(Query.empty())

    def max_elements_from_publisher(self) -> int:
        return 1


class TestSamplePeriodPublisher(_Hosted, OperatorPublisherVerification):
    """Sampling by a period, hosted: the last element of the source, at the first period after it ended."""

    operators = ("sample",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.sample(TICK)

    def max_elements_from_publisher(self) -> int:
        return 1


class TestRetryPublisher(OperatorPublisherVerification):
    operators = ("retry",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.retry()

    def create_failed_query(self) -> Query[Any] | None:
        return failing_source().retry(3)  # fails three times at once, then the error goes downstream


class TestRetryCountPublisher(OperatorPublisherVerification):
    operators = ("retry",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.retry(5)


class TestRetryProcessor(OperatorProcessorVerification):
    """With a single attempt retry is an identity processor (the processor's input cannot be subscribed
    again: a retry would re-read the same failed input)."""

    operators = ("retry",)

    def apply(self, source: Query[int]) -> Query[int]:
        return source.retry(1)


__all__ = ["NotVerified"]
