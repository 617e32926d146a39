"""Reactive Streams conformance of both operators: each as a publisher over a range source, and as an identity
processor where its arguments leave every element as it is (the bases of ``reaqtive.testing.conformance``)."""

from __future__ import annotations

from typing import Any

from reaqtive_signals import clamp, ewma

from reaqtive import LONG_MAX, Query
from reaqtive.testing import OperatorProcessorVerification, OperatorPublisherVerification

WIDE = 2**63  # beyond every element the kit sends: clamp(-WIDE, WIDE) changes none


class TestClampPublisher(OperatorPublisherVerification):
    operators = ("signals:clamp",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.pipe(clamp(0, 10))


class TestClampProcessor(OperatorProcessorVerification):
    operators = ("signals:clamp",)

    def apply(self, source: Query[int]) -> Query[int]:
        return source.pipe(clamp(-WIDE, WIDE))


class TestEwmaPublisher(OperatorPublisherVerification):
    operators = ("signals:ewma",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.pipe(ewma(0.5, warmup=3))

    def source_elements(self, elements: int) -> int:
        return min(elements + 2, LONG_MAX) if elements else 0  # the warm-up swallows two


class TestEwmaProcessor(OperatorProcessorVerification):
    operators = ("signals:ewma",)

    def apply(self, source: Query[int]) -> Query[int]:
        return source.pipe(ewma(1))  # alpha 1: each average is the element (a float equal to it)
