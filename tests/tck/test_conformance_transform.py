"""Reactive Streams conformance of the transform-and-filter family: each operator as a publisher over
``from_iterable(range(k))``, and as an identity processor through ``as_processor`` where it can pass every
element unchanged (bases in ``tests/tck/conformance.py``; the ``map``/``filter``/``trace`` classes live in
``test_conformance_operators.py``).

The stages whose identity configuration is a plain pass-through are verified as processors in two chains (one
class each rather than one per operator, to keep the suite fast): the one-to-one stages, and the dropping
stages configured to keep everything. Their dropping paths are exercised by their publisher classes.
``start_with`` and ``default_if_empty``, which have demand logic of their own even as identities, have their
own processor classes."""

from __future__ import annotations

import operator
from typing import Any

from reaqtive import Query, from_iterable
from reaqtive.core.streams import LONG_MAX
from reaqtive.tck import NotVerified
from tests.tck.conformance import (
    OperatorProcessorVerification,
    OperatorPublisherVerification,
    QueryPublisherVerification,
    failing_source,
)


def _nothing(*args: object) -> None:
    pass


def _twice(elements: int) -> int:
    return min(2 * elements, LONG_MAX)


# -- map_indexed, filter_indexed ------------------------------------------------------------------------------


class TestMapIndexedPublisher(OperatorPublisherVerification):
    operators = ("map_indexed",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.map_indexed(lambda x, i: x + i)


class TestFilterIndexedPublisher(OperatorPublisherVerification):
    """Every other element is dropped (by index), which exercises the replacement requests."""

    operators = ("filter_indexed",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.filter_indexed(lambda x, i: i % 2 == 1)

    def source_elements(self, elements: int) -> int:
        return _twice(elements)


# -- scan -----------------------------------------------------------------------------------------------------


class TestScanPublisher(OperatorPublisherVerification):
    operators = ("scan",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.scan(operator.add)


class TestScanSeedPublisher(OperatorPublisherVerification):
    operators = ("scan",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.scan(1, operator.add)


# -- do, finally_action ---------------------------------------------------------------------------------------


class TestDoPublisher(OperatorPublisherVerification):
    operators = ("do",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.do(_nothing, _nothing, _nothing)


class TestFinallyActionPublisher(OperatorPublisherVerification):
    operators = ("finally_action",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.finally_action(_nothing)


# -- ignore_elements, default_if_empty, start_with ------------------------------------------------------------


class TestIgnoreElementsPublisher(QueryPublisherVerification):
    """``ignore_elements`` never emits, so the ``n`` elements the kit asks for come from ``start_with`` in front
    of it: the stage is then subscribed, requests everything from its source, drops it and completes (or is
    cancelled while it runs). The values are a tuple, so streams are bounded (tests needing more are skipped)."""

    operators = ("ignore_elements",)

    def max_elements_from_publisher(self) -> int:
        return 1024

    def create_query(self, elements: int) -> Query[Any]:
        return from_iterable(range(100)).ignore_elements().start_with(*range(elements))

    def create_failed_query(self) -> Query[Any] | None:
        return failing_source().ignore_elements()


class TestDefaultIfEmptyPublisher(OperatorPublisherVerification):
    """Over ``range(n)``; for ``n == 0`` the default (-1) is emitted and the ``filter`` behind drops it, so the
    publisher has exactly ``n`` elements and the empty case still exercises the default's demand path."""

    operators = ("default_if_empty",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.default_if_empty(-1).filter(lambda x: x >= 0)


class TestDefaultIfEmptyProcessor(OperatorProcessorVerification):
    """Elements pass unchanged; the default an empty upstream produces is stripped by the ``filter``."""

    operators = ("default_if_empty",)

    def apply(self, source: Query[int]) -> Query[int]:
        return source.default_if_empty(-1).filter(lambda x: x != -1)

    def test_required_spec209_mustBePreparedToReceiveAnOnCompleteSignalWithoutPrecedingRequestCall(self) -> None:
        raise NotVerified(
            "default_if_empty is not an identity for an empty upstream: it must emit the default before "
            "on_complete, and without a request it holds both (it is prepared for the signal; it does not forward "
            "it at once). Completion without demand is covered by its behaviour tests."
        )


class TestStartWithPublisher(QueryPublisherVerification):
    """Up to three values first, the rest from ``range``: exactly ``n`` elements (emitted standalone, from the
    stage's drain loop, then by the source once subscribed)."""

    operators = ("start_with",)

    def create_query(self, elements: int) -> Query[Any]:
        head = min(elements, 3)
        return from_iterable(range(head, elements)).start_with(*range(head))

    def create_failed_query(self) -> Query[Any] | None:
        return failing_source().start_with()


class TestStartWithProcessor(OperatorProcessorVerification):
    """With no values, start_with is the identity (it subscribes to its upstream in its first step)."""

    operators = ("start_with",)

    def apply(self, source: Query[int]) -> Query[int]:
        return source.start_with()


# -- distinct, distinct_until_changed -------------------------------------------------------------------------


class TestDistinctPublisher(OperatorPublisherVerification):
    """Keys ``x // 2`` over ``range(2n)``: every other element is a repeat and is dropped."""

    operators = ("distinct",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.distinct(lambda x: x // 2)

    def source_elements(self, elements: int) -> int:
        return _twice(elements)


class TestDistinctComparerPublisher(OperatorPublisherVerification):
    operators = ("distinct",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.distinct(lambda x: x // 2, comparer=operator.eq)

    def source_elements(self, elements: int) -> int:
        return _twice(elements)


class TestDistinctUntilChangedPublisher(OperatorPublisherVerification):
    operators = ("distinct_until_changed",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.distinct_until_changed(lambda x: x // 2)

    def source_elements(self, elements: int) -> int:
        return _twice(elements)


# -- identity processors in chains ----------------------------------------------------------------------------


class TestOneToOneChainProcessor(OperatorProcessorVerification):
    operators = ("map_indexed", "scan", "do", "finally_action")

    def apply(self, source: Query[int]) -> Query[int]:
        return (
            source.map_indexed(lambda x, i: x)
            .scan(lambda acc, x: x)  # without a seed, keeping the latest element is the identity
            .do(_nothing, _nothing, _nothing)
            .finally_action(_nothing)
        )


class TestKeepEverythingChainProcessor(OperatorProcessorVerification):
    """The kit's elements are distinct, so ``distinct`` and ``distinct_until_changed`` pass them all."""

    operators = ("filter_indexed", "distinct", "distinct_until_changed")

    def apply(self, source: Query[int]) -> Query[int]:
        return source.filter_indexed(lambda x, i: True).distinct().distinct_until_changed()
