"""Reactive Streams conformance of ``flat_map``, ``merge_all``, ``switch_latest`` and ``debounce``.

* ``flat_map`` (with and without a result selector, with a bound on live inners), ``merge_all`` and
  ``switch_latest`` (both forms) over ``from_iterable(range(n))``, each element selecting ``return_value``: a
  publisher of exactly ``n`` elements, standalone (everything runs synchronously on the caller's thread) and, for
  ``flat_map``, hosted on a real scheduler with an :class:`~reaqtive.state.InnerEnvironment` (inner
  subscriptions are artifacts of the environment; signals come from worker threads). The same queries are
  identity processors.
* ``debounce`` keeps only the last element of a burst: over a synchronous range it makes exactly one, the
  last, flushed by the source's completion (``max_elements_from_publisher`` is 1). By a duration it runs hosted
  (it needs a clock); by a duration selector (``never``: no element ends the wait early) standalone. It is no
  identity processor: without downstream demand a newer debounced element replaces the one waiting.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from reaqtive import OperatorContext, Query, as_publisher, never, return_value
from reaqtive.core.streams import Publisher
from reaqtive.scheduler import LogicalScheduler, PhysicalScheduler
from reaqtive.state import InnerEnvironment
from tests.tck.conformance import (
    OperatorProcessorVerification,
    OperatorPublisherVerification,
    failing_source,
)


def second(_: object, value: int) -> int:
    return value


# -- flat_map ----------------------------------------------------------------------------------------------------


class TestFlatMapPublisher(OperatorPublisherVerification):
    operators = ("flat_map",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.flat_map(return_value)


class TestFlatMapResultSelectorPublisher(OperatorPublisherVerification):
    operators = ("flat_map",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.flat_map(return_value, second, max_concurrent=2)


class TestFlatMapHostedPublisher(OperatorPublisherVerification):
    """Hosted: a real scheduler and an environment that hosts the inner subscriptions."""

    operators = ("flat_map",)

    def setup_method(self, method: object = None) -> None:
        super().setup_method(method)
        self.physical = PhysicalScheduler(workers=2, name="tck")
        self.context = OperatorContext(
            "reaqtive://tck/hosted", LogicalScheduler(self.physical), execution_environment=InnerEnvironment()
        )

    def teardown_method(self, method: object = None) -> None:
        super().teardown_method(method)
        self.physical.dispose()

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.flat_map(return_value)

    def create_publisher(self, elements: int) -> Publisher[Any]:
        return as_publisher(self.create_query(elements), self.context)

    def create_failed_publisher(self) -> Publisher[Any] | None:
        query = self.create_failed_query()
        return None if query is None else as_publisher(query, self.context)


class TestFlatMapProcessor(OperatorProcessorVerification):
    operators = ("flat_map",)

    def apply(self, source: Query[int]) -> Query[int]:
        return source.flat_map(return_value)


# -- merge_all ---------------------------------------------------------------------------------------------------


class TestMergeAllPublisher(OperatorPublisherVerification):
    operators = ("merge_all",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.map(return_value).merge_all()


class TestMergeAllProcessor(OperatorProcessorVerification):
    operators = ("merge_all",)

    def apply(self, source: Query[int]) -> Query[int]:
        return source.map(return_value).merge_all(max_concurrent=1)


# -- switch_latest -----------------------------------------------------------------------------------------------


class TestSwitchLatestPublisher(OperatorPublisherVerification):
    operators = ("switch_latest",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.map(return_value).switch_latest()


class TestSwitchLatestSelectorPublisher(OperatorPublisherVerification):
    operators = ("switch_latest",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.switch_latest(return_value)


class TestSwitchLatestProcessor(OperatorProcessorVerification):
    operators = ("switch_latest",)

    def apply(self, source: Query[int]) -> Query[int]:
        return source.switch_latest(return_value)


# -- debounce ----------------------------------------------------------------------------------------------------


class TestDebounceSelectorPublisher(OperatorPublisherVerification):
    """The last element of the range, flushed by its completion (``never`` ends no wait early)."""

    operators = ("debounce",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.debounce(lambda _: never())

    def max_elements_from_publisher(self) -> int:
        return 1


class TestDebounceDurationPublisher(OperatorPublisherVerification):
    """Hosted (a duration needs a clock): the last element of the range, flushed by its completion."""

    operators = ("debounce",)

    def setup_method(self, method: object = None) -> None:
        super().setup_method(method)
        self.physical = PhysicalScheduler(workers=2, name="tck")
        self.context = OperatorContext("reaqtive://tck/hosted", LogicalScheduler(self.physical))

    def teardown_method(self, method: object = None) -> None:
        super().teardown_method(method)
        self.physical.dispose()

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.debounce(timedelta(hours=1))

    def max_elements_from_publisher(self) -> int:
        return 1

    def create_publisher(self, elements: int) -> Publisher[Any]:
        return as_publisher(self.create_query(elements), self.context)

    def create_failed_publisher(self) -> Publisher[Any] | None:
        return as_publisher(self.apply(failing_source()), self.context)
