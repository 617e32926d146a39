"""Reactive Streams conformance of the ``from_iterable`` source, through ``as_publisher``."""

from __future__ import annotations

from typing import Any

from reaqtive import Query, from_iterable
from tests.tck.conformance import QueryPublisherVerification, failing_source


class TestFromIterablePublisher(QueryPublisherVerification):
    operators = ("from_iterable",)

    def create_query(self, elements: int) -> Query[Any]:
        return from_iterable(range(elements))

    def create_failed_query(self) -> Query[Any] | None:
        return failing_source()
