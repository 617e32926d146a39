"""The pattern for verifying reaqtive's own publishers, processors and subscribers with ``reaqtive.tck``.

Each source, operator or sink adds one small ``Test*`` class in a ``tests/tck/test_conformance_*.py`` module,
built on one of these bases:

* :class:`QueryPublisherVerification`: a query seen through ``as_publisher`` must pass the 38 publisher tests.
  Implement ``create_query(elements)``: a query of exactly ``elements`` elements.
* :class:`OperatorPublisherVerification`: the same for an operator applied to ``from_iterable(range(k))``.
  Implement ``apply(source)``; override ``source_elements(n)`` when the operator changes the count.
* :class:`OperatorProcessorVerification`: an operator that leaves elements unchanged (``map(identity)``,
  ``filter(always)``), seen through ``as_processor``, must pass the 68 identity-processor tests.

Each class names the registered operators it verifies in ``operators``; ``test_conformance_coverage.py`` fails
when a registered operator has no verification class. A new operator's verification is then a few lines::

    class TestTakePublisher(OperatorPublisherVerification):
        operators = ("take",)

        def apply(self, source: Query[int]) -> Query[Any]:
            return source.take(10**18)   # passes all n elements of range(n): a publisher of exactly n
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from typing import Any, ClassVar

from reaqtive import Query, as_processor, as_publisher, from_iterable
from reaqtive.streams import Processor, Publisher
from reaqtive.tck import IdentityProcessorVerification, PublisherVerification


class SourceFailedError(RuntimeError):
    """The error of the failing source used for ``create_failed_publisher``."""


class _Unreadable:
    """An iterable that cannot even be started: a source over it fails right after ``on_subscribe``."""

    def __iter__(self) -> Iterator[int]:
        raise SourceFailedError("the source cannot be read")


def failing_source() -> Query[int]:
    """A query that signals ``on_subscribe`` then ``on_error`` (rules 1.4 and 1.9)."""
    return from_iterable(_Unreadable())


class QueryPublisherVerification(PublisherVerification[Any]):
    """Verifies ``as_publisher(create_query(elements))``."""

    operators: ClassVar[tuple[str, ...]] = ()
    """The registered operator names this class verifies."""

    @abstractmethod
    def create_query(self, elements: int) -> Query[Any]:
        """A query of exactly ``elements`` elements (infinite for ``LONG_MAX``)."""

    def create_failed_query(self) -> Query[Any] | None:
        """A query that fails at once; ``None`` skips the two tests that need one."""
        return None

    def create_publisher(self, elements: int) -> Publisher[Any]:
        return as_publisher(self.create_query(elements))

    def create_failed_publisher(self) -> Publisher[Any] | None:
        query = self.create_failed_query()
        return None if query is None else as_publisher(query)


class OperatorPublisherVerification(QueryPublisherVerification):
    """Verifies an operator applied to ``from_iterable(range(source_elements(n)))``."""

    @abstractmethod
    def apply(self, source: Query[int]) -> Query[Any]:
        """The operator under test, applied to ``source``."""

    def source_elements(self, elements: int) -> int:
        """How many source elements make ``elements`` output elements (the same, by default)."""
        return elements

    def create_query(self, elements: int) -> Query[Any]:
        return self.apply(from_iterable(range(self.source_elements(elements))))

    def create_failed_query(self) -> Query[Any] | None:
        return self.apply(failing_source())


class OperatorProcessorVerification(IdentityProcessorVerification[int]):
    """Verifies ``as_processor(apply)``, where ``apply`` leaves elements unchanged."""

    operators: ClassVar[tuple[str, ...]] = ()
    """The registered operator names this class verifies."""

    @abstractmethod
    def apply(self, source: Query[int]) -> Query[int]:
        """The operator under test, configured to pass every element through unchanged."""

    def create_identity_processor(self, buffer_size: int) -> Processor[int, int]:
        return as_processor(self.apply)

    def create_failed_publisher(self) -> Publisher[int] | None:
        processor = as_processor(self.apply)
        as_publisher(failing_source()).subscribe(processor)  # the processor has failed before anyone subscribes
        return processor

    def create_element(self, element: int) -> int:
        return element

    def max_supported_subscribers(self) -> int:
        return 1  # as_processor serves a single downstream subscriber (others are refused with on_error)
