"""Reactive Streams conformance of the operators: as publishers over ``from_iterable`` (with functions that change
or drop elements), and as identity processors through ``as_processor``.

Each new operator adds its classes here (or in a ``test_conformance_<family>.py`` module); see
``tests/tck/conformance.py`` for the bases.
"""

from __future__ import annotations

from typing import Any

from reaqtive import Query
from tests.tck.conformance import OperatorProcessorVerification, OperatorPublisherVerification


class TestMapPublisher(OperatorPublisherVerification):
    operators = ("map",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.map(lambda x: x * 2)


class TestMapProcessor(OperatorProcessorVerification):
    operators = ("map",)

    def apply(self, source: Query[int]) -> Query[int]:
        return source.map(lambda x: x)


class TestFilterPublisher(OperatorPublisherVerification):
    """Every other element is dropped, which exercises filter's demand replenishment."""

    operators = ("filter",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.filter(lambda x: x % 2 == 0)

    def source_elements(self, elements: int) -> int:
        return min(2 * elements, 2**63 - 1)


class TestFilterProcessor(OperatorProcessorVerification):
    operators = ("filter",)

    def apply(self, source: Query[int]) -> Query[int]:
        return source.filter(lambda x: True)


class TestMapFilterChainProcessor(OperatorProcessorVerification):
    """A chain of stages behaves as one processor."""

    operators = ("map", "filter")

    def apply(self, source: Query[int]) -> Query[int]:
        return source.map(lambda x: x + 1).filter(lambda x: x > 0).map(lambda x: x - 1)


class TestTraceProcessor(OperatorProcessorVerification):
    operators = ("trace",)

    def apply(self, source: Query[int]) -> Query[int]:
        return source.trace("tck", emit=lambda line: None)
