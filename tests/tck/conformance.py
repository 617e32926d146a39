"""The pattern for verifying reaqtive's own publishers, processors and subscribers with ``reaqtive.tck``.

The bases are public, in :mod:`reaqtive.testing.conformance` (any package verifies its operators with them);
they are re-exported here for the suite's ``test_conformance_*.py`` modules. Each source, operator or sink of
reaqtive adds one small ``Test*`` class in one of those modules, built on one of the bases:

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

from reaqtive.testing.conformance import (
    OperatorProcessorVerification,
    OperatorPublisherVerification,
    QueryPublisherVerification,
    SourceFailedError,
    failing_source,
)

__all__ = [
    "OperatorProcessorVerification",
    "OperatorPublisherVerification",
    "QueryPublisherVerification",
    "SourceFailedError",
    "failing_source",
]
