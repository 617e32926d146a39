"""Reactive Streams conformance of an operator: the bases that run the kit of :mod:`reaqtive.tck` over a query.

An operator (reaqtive's or another package's) proves that it keeps the Reactive Streams rules by a few lines in
a pytest module: a ``Test*`` class on one of these bases, which implements one hook. Every inherited
``test_<rule>`` of the kit then runs against it:

* :class:`OperatorPublisherVerification`: the operator applied to ``from_iterable(range(k))``, seen through
  :func:`~reaqtive.as_publisher`, must pass the publisher tests (38). Implement ``apply(source)``; override
  ``source_elements(n)`` when the operator changes the number of elements (how many source elements make ``n``
  output elements).
* :class:`OperatorProcessorVerification`: an operator configured to leave elements unchanged, seen through
  :func:`~reaqtive.as_processor`, must pass the identity-processor tests (68, the publisher's among them).
  Implement ``apply(source)``.
* :class:`QueryPublisherVerification`: any query of exactly ``n`` elements (a source operator). Implement
  ``create_query(elements)``.

::

    from reaqtive.testing.conformance import OperatorProcessorVerification, OperatorPublisherVerification
    from reaqtive_signals import clamp

    class TestClampPublisher(OperatorPublisherVerification):
        operators = ("signals:clamp",)

        def apply(self, source):
            return source.pipe(clamp(0, 10))

    class TestClampProcessor(OperatorProcessorVerification):
        operators = ("signals:clamp",)

        def apply(self, source):
            return source.pipe(clamp(-(2**63), 2**63))   # wide enough to leave every element as it is

``operators`` names the registered operators a class verifies (reaqtive's own suite checks that every operator
of reaqtive has one). ``docs/tck.md`` explains outcomes and timeouts. The bases need ``pytest``, as the kit does.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from typing import Any, ClassVar

from reaqtive.core.streams import Processor, Publisher
from reaqtive.fluent.query import Query, from_iterable
from reaqtive.processor import as_processor
from reaqtive.publisher import as_publisher
from reaqtive.tck import IdentityProcessorVerification, PublisherVerification

__all__ = [
    "OperatorProcessorVerification",
    "OperatorPublisherVerification",
    "QueryPublisherVerification",
    "SourceFailedError",
    "failing_source",
]


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
