"""Reactive Streams conformance of the take and skip family: each operator as a publisher over a range source
(configured so that it really takes, skips or ends early where it can), and every operator as an identity
processor. The processor classes verify the operators in chains of one kind (count, predicate, other stream,
time), so that the family's 12 operators cost 4 processor runs of the kit instead of 12.

The time-based forms need a scheduler: their classes run the query on a real one (a physical scheduler with two
workers, made for each test), so the source emits from worker threads while the kit requests from its own.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from reaqtive import OperatorContext, Query, SimpleSubject, as_processor, as_publisher, from_iterable
from reaqtive.core.streams import LONG_MAX, Processor, Publisher
from reaqtive.scheduler import LogicalScheduler, PhysicalScheduler
from tests.tck.conformance import (
    OperatorProcessorVerification,
    OperatorPublisherVerification,
    QueryPublisherVerification,
    failing_source,
)

FAR_FUTURE = datetime(9000, 1, 1, tzinfo=UTC)
LONG_AGO = datetime(2000, 1, 1, tzinfo=UTC)


def never() -> Query[Any]:
    """A stream that never signals (a subject nobody pushes into)."""
    return Query.from_subscribable(SimpleSubject[Any]())


def plus(elements: int, extra: int) -> int:
    return min(elements + extra, LONG_MAX)


class _OnScheduler:
    """Mixin: the query runs with a context that has a real scheduler (time-based operators need one)."""

    def setup_method(self, method: object = None) -> None:
        super().setup_method(method)  # type: ignore[misc]
        self.physical = PhysicalScheduler(workers=2, name="tck-take-skip")
        self.context = OperatorContext("test://tck/take-skip", LogicalScheduler(self.physical))

    def teardown_method(self, method: object = None) -> None:
        super().teardown_method(method)  # type: ignore[misc]
        self.physical.dispose()


class _TimedPublisher(_OnScheduler, OperatorPublisherVerification):
    def create_publisher(self, elements: int) -> Publisher[Any]:
        return as_publisher(self.create_query(elements), self.context)

    def create_failed_publisher(self) -> Publisher[Any] | None:
        return as_publisher(self.apply(failing_source()), self.context)


class _TimedProcessor(_OnScheduler, OperatorProcessorVerification):
    def create_identity_processor(self, buffer_size: int) -> Processor[int, int]:
        return as_processor(self.apply, self.context)

    def create_failed_publisher(self) -> Publisher[int] | None:
        processor = as_processor(self.apply, self.context)
        as_publisher(failing_source()).subscribe(processor)
        return processor


# -- take ------------------------------------------------------------------------------------------------------


class TestTakePublisher(QueryPublisherVerification):
    """``take(n)`` over a longer source: exactly n elements, completing with the last one."""

    operators = ("take",)

    def create_query(self, elements: int) -> Query[Any]:
        return from_iterable(range(plus(elements, 10))).take(elements)

    def create_failed_query(self) -> Query[Any] | None:
        return failing_source().take(5)


class TestTakeDurationPublisher(_TimedPublisher):
    operators = ("take_duration",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.take(timedelta(days=1))


# -- skip ------------------------------------------------------------------------------------------------------


class TestSkipPublisher(OperatorPublisherVerification):
    """``skip(3)`` over three more elements: the dropped ones are requested with the first demand."""

    operators = ("skip",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.skip(3)

    def source_elements(self, elements: int) -> int:
        return plus(elements, 3)


class TestSkipDurationPublisher(_TimedPublisher):
    operators = ("skip_duration",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.skip(timedelta(0))


# -- take_while / skip_while -----------------------------------------------------------------------------------


class TestTakeWhilePublisher(QueryPublisherVerification):
    """The predicate turns false right after the n-th element: completion comes from the operator."""

    operators = ("take_while",)

    def create_query(self, elements: int) -> Query[Any]:
        return from_iterable(range(plus(elements, 10))).take_while(lambda x: x < elements)

    def create_failed_query(self) -> Query[Any] | None:
        return failing_source().take_while(lambda x: True)


class TestTakeWhileIndexedPublisher(QueryPublisherVerification):
    operators = ("take_while_indexed",)

    def create_query(self, elements: int) -> Query[Any]:
        return from_iterable(range(plus(elements, 10))).take_while_indexed(lambda x, i: i < elements)

    def create_failed_query(self) -> Query[Any] | None:
        return failing_source().take_while_indexed(lambda x, i: True)


class TestSkipWhilePublisher(OperatorPublisherVerification):
    """Three dropped elements, each replaced by a request upstream."""

    operators = ("skip_while",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.skip_while(lambda x: x < 3)

    def source_elements(self, elements: int) -> int:
        return plus(elements, 3)


class TestSkipWhileIndexedPublisher(OperatorPublisherVerification):
    operators = ("skip_while_indexed",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.skip_while_indexed(lambda x, i: i < 3)

    def source_elements(self, elements: int) -> int:
        return plus(elements, 3)


# -- take_until / skip_until -----------------------------------------------------------------------------------


class TestTakeUntilPublisher(OperatorPublisherVerification):
    """Until a stream that never signals: the lock-guarded path carries every element."""

    operators = ("take_until",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.take_until(never())


class TestTakeUntilTimePublisher(_TimedPublisher):
    operators = ("take_until_time",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.take_until(FAR_FUTURE)


class TestSkipUntilPublisher(OperatorPublisherVerification):
    """Until a stream that signals at once (it starts before the source): every element passes."""

    operators = ("skip_until",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.skip_until(from_iterable([0]))


class TestSkipUntilTimePublisher(_TimedPublisher):
    operators = ("skip_until_time",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.skip_until(LONG_AGO)


# -- identity processors, one chain per kind -------------------------------------------------------------------


class TestTakeSkipCountProcessor(OperatorProcessorVerification):
    operators = ("take", "skip")

    def apply(self, source: Query[int]) -> Query[int]:
        return source.take(10**18).skip(0)


class TestTakeSkipWhileProcessor(OperatorProcessorVerification):
    operators = ("take_while", "take_while_indexed", "skip_while", "skip_while_indexed")

    def apply(self, source: Query[int]) -> Query[int]:
        return (
            source.take_while(lambda x: True)
            .take_while_indexed(lambda x, i: True)
            .skip_while(lambda x: False)
            .skip_while_indexed(lambda x, i: False)
        )


class TestTakeSkipUntilProcessor(OperatorProcessorVerification):
    operators = ("take_until", "skip_until")

    def apply(self, source: Query[int]) -> Query[int]:
        return source.take_until(never()).skip_until(from_iterable([0]))


class TestTakeSkipTimedProcessor(_TimedProcessor):
    operators = ("take_duration", "skip_duration", "take_until_time", "skip_until_time")

    def apply(self, source: Query[int]) -> Query[int]:
        return source.take(timedelta(days=1)).skip(timedelta(0)).take_until(FAR_FUTURE).skip_until(LONG_AGO)
