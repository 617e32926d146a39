"""retry: forever and counted, cold and hot sources, synchronous failures without recursion, demand, recovery."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from reaqtive import LONG_MAX, OperatorContext, Query, Subscribable, Subscriber, SubscriptionHandle
from reaqtive.core.visitors import initialize
from reaqtive.testing import Recorded, TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.support import Recorder

BOOM = RuntimeError("boom")
COLD = [on_next(5, 1), on_next(10, 2), on_next(15, 3), on_error(20, BOOM)]


def test_retry_count_resubscribes_a_cold_source_in_the_same_tick_until_the_attempts_are_used_up() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_cold_observable(*COLD)
    result = scheduler.start(lambda: xs.retry(3))
    assert result.messages == [
        on_next(205, 1), on_next(210, 2), on_next(215, 3),
        on_next(225, 1), on_next(230, 2), on_next(235, 3),
        on_next(245, 1), on_next(250, 2), on_next(255, 3),
        on_error(260, BOOM),
    ]  # fmt: skip
    assert xs.subscriptions == [subscribe(200, 220), subscribe(220, 240), subscribe(240, 260)]


def test_retry_forever_resubscribes_until_disposed() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_cold_observable(*COLD)
    result = scheduler.start(xs.retry, disposed=290)
    assert [m.value.value for m in result.messages] == [1, 2, 3] * 4 + [1]  # type: ignore[union-attr]
    assert xs.subscriptions == [subscribe(200 + 20 * i, 220 + 20 * i) for i in range(4)] + [subscribe(280, 290)]


def test_retry_passes_elements_and_completion_through() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_cold_observable(on_next(5, 1), on_completed(10))
    result = scheduler.start(xs.retry)
    assert result.messages == [on_next(205, 1), on_completed(210)]
    assert xs.subscriptions == [subscribe(200, 210)]


def test_retry_of_one_attempt_does_not_retry() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_cold_observable(*COLD)
    result = scheduler.start(lambda: xs.retry(1))
    assert result.messages == [on_next(205, 1), on_next(210, 2), on_next(215, 3), on_error(220, BOOM)]
    assert xs.subscriptions == [subscribe(200, 220)]


def test_retry_resubscribes_a_hot_source_which_then_gives_only_later_elements() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(
        on_next(210, 1), on_error(220, BOOM), on_next(230, 2), on_error(240, BOOM), on_next(250, 3), on_completed(260)
    )
    result = scheduler.start(xs.retry)
    assert result.messages == [on_next(210, 1), on_next(230, 2), on_next(250, 3), on_completed(260)]
    assert xs.subscriptions == [subscribe(200, 220), subscribe(220, 240), subscribe(240, 260)]


def test_a_user_function_error_inside_the_retried_query_is_retried() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_cold_observable(on_next(5, 1), on_next(10, 2), on_next(15, 3))

    def selector(x: int) -> int:
        if x == 2:
            raise BOOM
        return x * 10

    result = scheduler.start(lambda: xs.map(selector).retry(2))
    assert result.messages == [on_next(205, 10), on_next(215, 10), on_error(220, BOOM)]
    assert xs.subscriptions == [subscribe(200, 210), subscribe(210, 220)]


def test_disposal_unsubscribes_the_current_attempt() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_cold_observable(*COLD)
    result = scheduler.start(lambda: xs.retry(5), disposed=230)
    assert result.messages[-1] == on_next(225, 1)
    assert xs.subscriptions == [subscribe(200, 220), subscribe(220, 230)]


# -- synchronous failures: no unbounded recursion ----------------------------------------------------------------


class Failing:
    """An iterable whose iteration fails ``failures`` times (at once, inside the source's start), then works."""

    def __init__(self, failures: int | None) -> None:
        self.failures = failures
        self.attempts = 0

    def __iter__(self) -> Iterator[int]:
        self.attempts += 1
        if self.failures is None or self.attempts <= self.failures:
            # Raising one exception object again and again grows its __traceback__ by every raise, keeping each
            # attempt's frames (and its operators) alive for the rest of the test session: start it afresh.
            raise BOOM.with_traceback(None)
        return iter([1, 2])


def test_standalone_synchronous_failures_are_retried_by_a_loop_not_recursion() -> None:
    iterable = Failing(failures=3 * sys.getrecursionlimit())
    recorder = Recorder(initial=LONG_MAX)
    initialize(Query.from_iterable(iterable).retry().subscribe(recorder), OperatorContext("test://retry"))
    assert recorder.values == [1, 2] and recorder.completed == 1
    assert iterable.attempts == 3 * sys.getrecursionlimit() + 1


def test_standalone_synchronous_failures_use_up_a_count() -> None:
    iterable = Failing(failures=None)
    recorder = Recorder(initial=LONG_MAX)
    initialize(Query.from_iterable(iterable).retry(5000).subscribe(recorder), OperatorContext("test://retry"))
    assert recorder.errors == [BOOM] and iterable.attempts == 5000


def test_hosted_synchronous_failures_forever_go_through_the_scheduler_and_never_block_it() -> None:
    iterable = Failing(failures=None)
    scheduler = TestScheduler()
    result = scheduler.start(lambda: Query.from_iterable(iterable).retry(), disposed=210)
    assert result.messages == []
    # two attempts in the starting tick (the second failed while starting), then one per tick until disposal
    assert iterable.attempts == 2 + 9


# -- failures to subscribe ---------------------------------------------------------------------------------------


class SubscribableOnce(Subscribable[int]):
    """Subscribes once to ``inner``; a second subscription fails."""

    def __init__(self, inner: Subscribable[int]) -> None:
        self.inner = inner
        self.count = 0

    def subscribe_core(self, observer: Subscriber[int]) -> SubscriptionHandle:
        self.count += 1
        if self.count > 1:
            raise LookupError("cannot subscribe again")
        return self.inner.subscribe(observer)


def test_a_failure_to_resubscribe_is_not_retried_and_goes_downstream() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_cold_observable(on_next(5, 1), on_error(10, BOOM))
    result = scheduler.start(lambda: Query.from_subscribable(SubscribableOnce(xs)).retry())
    assert result.messages == [on_next(205, 1), on_error(210, LookupError("cannot subscribe again"))]


# -- demand ------------------------------------------------------------------------------------------------------


def test_outstanding_demand_is_requested_from_each_new_attempt() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_cold_observable(on_next(5, 1), on_error(10, BOOM))
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(201, lambda: observer.request(3))
    result = scheduler.start(lambda: xs.retry(3), observer=observer)
    assert xs.requests == [Recorded(201, 3), Recorded(210, 2), Recorded(220, 1)]
    assert result.messages == [on_next(205, 1), on_next(215, 1), on_next(225, 1), on_error(230, BOOM)]


def test_one_at_a_time_demand_passes_through_and_nothing_is_buffered() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_cold_observable(*COLD)
    observer = scheduler.create_observer(request=1)
    result = scheduler.start(lambda: xs.retry(2), observer=observer)
    assert [m.time for m in result.messages] == [205, 210, 215, 225, 230, 235, 240]
    assert xs.requests == [Recorded(t, 1) for t in (200, 205, 210, 215, 220, 225, 230, 235)], (
        "one request per element; the one outstanding at the error (215) is re-issued to the new attempt (220)"
    )


def test_non_positive_request_is_a_rule_3_9_error() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_cold_observable(*COLD)
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(207, lambda: observer.request(0))
    result = scheduler.start(xs.retry, observer=observer)
    assert result.messages == [on_error(207, lambda e: isinstance(e, ValueError) and "3.9" in str(e))]
    assert xs.subscriptions == [subscribe(200, 207)], "the upstream's rule 3.9 error is not retried"


# -- checkpoint anywhere and arguments ---------------------------------------------------------------------------

HOT = [
    on_next(210, 1), on_error(220, ValueError("a")), on_next(230, 2), on_error(240, ValueError("b")),
    on_next(250, 3), on_error(260, ValueError("c")), on_next(270, 4), on_completed(280),
]  # fmt: skip


def test_retry_count_survives_a_checkpoint_anywhere() -> None:
    report = assert_checkpoint_anywhere(lambda xs: xs.retry(3), HOT)
    assert report.expected[-1] == on_error(260, ValueError("c")), "the count is state: 3 attempts, not more"


def test_retry_forever_survives_a_checkpoint_anywhere() -> None:
    report = assert_checkpoint_anywhere(lambda xs: xs.map(lambda x: x * 2).retry(), HOT)
    assert report.expected[-1] == on_completed(280)


@pytest.mark.parametrize(
    ("count", "error", "message"),
    [
        (0, ValueError, "retry: count must be > 0"),
        (-1, ValueError, "retry: count must be > 0"),
        (True, TypeError, "retry: count must be an int"),
        ("3", TypeError, "retry: count must be an int"),
        (1.5, TypeError, "retry: count must be an int"),
    ],
)
def test_arguments_are_validated(count: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        Query.never().retry(count)
