"""Reactive Streams conformance of the aggregates.

An aggregate is a publisher of exactly one element (or of an error), whatever its source, so each is verified as
a publisher with ``max_elements_from_publisher() == 1``:

* ``create_publisher(1)`` is the aggregate over ``from_iterable(range(5))`` — five source elements, one result;
  for the early-deciding ones (``first``, ``any``, ``element_at``, ...) the answer comes mid-stream and the
  source is cancelled, so that path is verified too;
* ``create_publisher(0)`` is the same followed by ``filter(lambda _: False)``: no aggregate on its own publishes
  zero elements and completes (the empty-source forms signal an element or an error), so the zero-element
  stream the kit needs for rules 1.9 and 1.5 (empty stream) is the aggregate's result dropped downstream;
* the failed publisher is the aggregate over a source that fails at once.

The kit skips the tests that need 3 or more elements ([capability]). The rules they would check that do not
depend on the element count — 3.9 (non-positive requests), 3.6 (requests after cancel), 3.17 (demand up to
``LONG_MAX``), 1.1 (nothing unrequested) — are checked for every class below, in
``test_rules_that_need_no_more_than_one_element``. No aggregate can be an identity processor, so there are no
processor verifications here.

``aggregate_by_key`` is the exception: one element per key and window, not one in all. Over ``range(n)`` with each
element its own key and one long window, it is a publisher of exactly ``n`` rows, all closed when the source
completes; it runs on a real scheduler (its windows need a clock), like the time buffers.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from reaqtive import OperatorContext, Query, as_publisher, from_iterable
from reaqtive.core.streams import LONG_MAX, Publisher
from reaqtive.operators.keyed_window import Tumbling
from reaqtive.operators.settings import MAX_QUEUE_SIZE
from reaqtive.scheduler import LogicalScheduler, PhysicalScheduler
from tests.support import Recorder
from tests.tck.conformance import OperatorPublisherVerification, failing_source

SOURCE_ELEMENTS = 5


class AggregatePublisherVerification(OperatorPublisherVerification):
    """An aggregate over ``range(5)``: a publisher of one element (zero: its result dropped by a filter)."""

    def max_elements_from_publisher(self) -> int:
        return 1

    def create_query(self, elements: int) -> Query[Any]:
        query = self.apply(from_iterable(range(SOURCE_ELEMENTS)))
        return query if elements else query.filter(lambda _: False)


class TestAggregatePublisher(AggregatePublisherVerification):
    operators = ("aggregate",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.aggregate(lambda acc, x: acc + x)


class TestAggregateSeedPublisher(AggregatePublisherVerification):
    operators = ("aggregate",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.aggregate(lambda acc, x: acc * 10 + x, 7, str)


class TestCountPublisher(AggregatePublisherVerification):
    operators = ("count",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.count(lambda x: x % 2 == 0)


class TestSumPublisher(AggregatePublisherVerification):
    operators = ("sum",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.sum()


class TestAveragePublisher(AggregatePublisherVerification):
    operators = ("average",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.average()


class TestMinPublisher(AggregatePublisherVerification):
    operators = ("min",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.min(key=lambda x: -x)


class TestMaxPublisher(AggregatePublisherVerification):
    operators = ("max",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.max()


class TestToListPublisher(AggregatePublisherVerification):
    operators = ("to_list",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.to_list()


class TestAnyPublisher(AggregatePublisherVerification):
    """Decided by the third element: the source is cancelled mid-stream."""

    operators = ("any",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.any(lambda x: x == 2)


class TestAllPublisher(AggregatePublisherVerification):
    operators = ("all",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.all(lambda x: x < 3)


class TestContainsPublisher(AggregatePublisherVerification):
    operators = ("contains",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.contains(1)


class TestIsEmptyPublisher(AggregatePublisherVerification):
    operators = ("is_empty",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.is_empty()


class TestFirstPublisher(AggregatePublisherVerification):
    operators = ("first",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.first(lambda x: x > 1)


class TestFirstOrDefaultPublisher(AggregatePublisherVerification):
    operators = ("first_or_default",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.first_or_default(-1, lambda x: x > 9)


class TestLastPublisher(AggregatePublisherVerification):
    operators = ("last",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.last()


class TestLastOrDefaultPublisher(AggregatePublisherVerification):
    operators = ("last_or_default",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.last_or_default(-1, lambda x: x > 9)


class TestSinglePublisher(AggregatePublisherVerification):
    operators = ("single",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.single(lambda x: x == 3)


class TestSingleOrDefaultPublisher(AggregatePublisherVerification):
    operators = ("single_or_default",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.single_or_default(-1, lambda x: x > 9)


class TestElementAtPublisher(AggregatePublisherVerification):
    operators = ("element_at",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.element_at(2)


class TestElementAtOrDefaultPublisher(AggregatePublisherVerification):
    operators = ("element_at_or_default",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.element_at_or_default(9, -1)


class TestSequenceEqualPublisher(AggregatePublisherVerification):
    operators = ("sequence_equal",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.sequence_equal(from_iterable(range(SOURCE_ELEMENTS)))


class TestSequenceEqualFailingSecondPublisher(AggregatePublisherVerification):
    """The failed publisher's error comes from the second input; the answer (False) from a length mismatch."""

    operators = ("sequence_equal",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return from_iterable(range(SOURCE_ELEMENTS + 1)).sequence_equal(source)


class TestSequenceEqualWindowedPublisher(AggregatePublisherVerification):
    """With ``MAX_QUEUE_SIZE`` the inputs are asked in windows of 2, topped up as pairs match."""

    operators = ("sequence_equal",)

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.sequence_equal(from_iterable(range(SOURCE_ELEMENTS)))

    def create_publisher(self, elements: int) -> Publisher[Any]:
        return as_publisher(self.create_query(elements), self._context())

    def create_failed_publisher(self) -> Publisher[Any] | None:
        return as_publisher(self.apply(failing_source()), self._context())

    @staticmethod
    def _context() -> OperatorContext:
        return OperatorContext("tck://sequence_equal", settings={MAX_QUEUE_SIZE: 2})


class TestAggregateByKeyPublisher(OperatorPublisherVerification):
    """Each element its own key, in one window of a thousand years: ``n`` rows, in the order the keys came, when
    the source completes (no timer fires during the test)."""

    operators = ("aggregate_by_key",)

    def max_elements_from_publisher(self) -> int:
        return 100  # rows closed at completion wait for demand in a queue of 256

    def setup_method(self, method: object = None) -> None:
        super().setup_method(method)
        self.physical = PhysicalScheduler(workers=2, name="tck-aggregate-by-key")
        self.context = OperatorContext("test://tck/aggregate_by_key", LogicalScheduler(self.physical))

    def teardown_method(self, method: object = None) -> None:
        super().teardown_method(method)
        self.physical.dispose()

    def apply(self, source: Query[int]) -> Query[Any]:
        return source.aggregate_by_key(str, Tumbling(timedelta(days=365_250)), "sum")

    def create_publisher(self, elements: int) -> Publisher[Any]:
        return as_publisher(self.create_query(elements), self.context)

    def create_failed_publisher(self) -> Publisher[Any] | None:
        return as_publisher(self.apply(failing_source()), self.context)


VERIFICATIONS = [
    value
    for name, value in sorted(globals().items())
    if name.startswith("Test") and isinstance(value, type) and issubclass(value, AggregatePublisherVerification)
]


@pytest.mark.parametrize("verification", VERIFICATIONS, ids=lambda cls: cls.__name__)
def test_rules_that_need_no_more_than_one_element(verification: type[AggregatePublisherVerification]) -> None:
    def subscribed() -> Recorder:
        recorder = Recorder()
        verification().create_publisher(1).subscribe(recorder)
        assert recorder.subscribed == 1 and recorder.values == [], "rule 1.1: nothing before a request"
        return recorder

    for n in (0, -1):  # rule 3.9
        recorder = subscribed()
        recorder.request(n)
        assert recorder.values == [] and len(recorder.errors) == 1
        assert isinstance(recorder.errors[0], ValueError) and "3.9" in str(recorder.errors[0])

    recorder = subscribed()  # rule 3.17: demand summing past LONG_MAX is fine; rule 1.1: one element, not more
    recorder.request(LONG_MAX)
    recorder.request(LONG_MAX)
    recorder.request(1)
    assert len(recorder.values) == 1 and recorder.completed == 1 and not recorder.errors
    assert not recorder.violations

    recorder = subscribed()  # rule 3.6: requests after cancel are no-ops
    recorder.cancel()
    recorder.request(1)
    recorder.request(0)
    assert recorder.values == [] and not recorder.terminated
