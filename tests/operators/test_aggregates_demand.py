"""The demand policy every aggregate shares: nothing upstream before the downstream asks, then everything once;
exactly one element, never more than requested; a result decided without demand is held (and checkpointed)
until the downstream asks. One table of every single-input aggregate overload drives the tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from reaqtive import OperatorBase, Query, Subscribable
from reaqtive.core.streams import LONG_MAX, Subscriber
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.core.visitors import initialize
from reaqtive.state import CheckpointMode, confirm_saved, save_subscription, state_loader
from reaqtive.testing import (
    Recorded,
    TestScheduler,
    on_completed,
    on_error,
    on_next,
    subscribe,
)
from tests.support import Recorder

# The elements 4, 2, 6, 3 at 210..240, completion at 300 (150 is before the subscription).
SCRIPT = [on_next(150, 9), on_next(210, 4), on_next(220, 2), on_next(230, 6), on_next(240, 3), on_completed(300)]


@dataclass(frozen=True)
class Case:
    """An aggregate overload, its output over SCRIPT (value and tick), and over an empty source."""

    create: Callable[[Query[Any]], Query[Any]]
    value: Any
    at: int
    empty: Any = None  # the result over an empty source; an exception type if that is an error


CASES: dict[str, Case] = {
    "aggregate": Case(lambda xs: xs.aggregate(lambda a, x: a + x), 15, 300, ValueError),
    "aggregate+selector": Case(lambda xs: xs.aggregate(lambda a, x: a + x, result_selector=str), "15", 300, ValueError),
    "aggregate+seed": Case(lambda xs: xs.aggregate(lambda a, x: a * 10 + x, 0), 4263, 300, 0),
    "aggregate+seed+selector": Case(lambda xs: xs.aggregate(lambda a, x: a * 10 + x, 0, str), "4263", 300, "0"),
    "count": Case(lambda xs: xs.count(), 4, 300, 0),
    "count+predicate": Case(lambda xs: xs.count(lambda x: x % 2 == 0), 3, 300, 0),
    "sum": Case(lambda xs: xs.sum(), 15, 300, 0),
    "average": Case(lambda xs: xs.average(), 3.75, 300, ValueError),
    "min": Case(lambda xs: xs.min(), 2, 300, ValueError),
    "min+key": Case(lambda xs: xs.min(key=lambda x: -x), 6, 300, ValueError),
    "max": Case(lambda xs: xs.max(), 6, 300, ValueError),
    "max+key": Case(lambda xs: xs.max(key=lambda x: x % 3), 2, 300, ValueError),
    "to_list": Case(lambda xs: xs.to_list(), [4, 2, 6, 3], 300, []),
    "any": Case(lambda xs: xs.any(), True, 210, False),
    "any+predicate": Case(lambda xs: xs.any(lambda x: x > 5), True, 230, False),
    "all": Case(lambda xs: xs.all(lambda x: x < 5), False, 230, True),
    "contains": Case(lambda xs: xs.contains(6), True, 230, False),
    "is_empty": Case(lambda xs: xs.is_empty(), False, 210, True),
    "first": Case(lambda xs: xs.first(), 4, 210, ValueError),
    "first+predicate": Case(lambda xs: xs.first(lambda x: x > 5), 6, 230, ValueError),
    "first_or_default": Case(lambda xs: xs.first_or_default(0, lambda x: x > 10), 0, 300, 0),
    "last": Case(lambda xs: xs.last(), 3, 300, ValueError),
    "last_or_default": Case(lambda xs: xs.last_or_default(0, lambda x: x % 2 == 0), 6, 300, 0),
    "single+predicate": Case(lambda xs: xs.single(lambda x: x > 5), 6, 300, ValueError),
    "single_or_default": Case(lambda xs: xs.single_or_default(0, lambda x: x > 10), 0, 300, 0),
    "element_at": Case(lambda xs: xs.element_at(2), 6, 230, IndexError),
    "element_at_or_default": Case(lambda xs: xs.element_at_or_default(9, 0), 0, 300, 0),
}

HOLDING = [name for name, case in CASES.items() if not isinstance(case.empty, type)]
FAILING_WHEN_EMPTY = [name for name, case in CASES.items() if isinstance(case.empty, type)]


@pytest.mark.parametrize("name", CASES)
def test_one_at_a_time_subscriber_gets_exactly_the_one_result(name: str) -> None:
    case = CASES[name]
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*SCRIPT)
    observer = scheduler.create_observer(request=1)
    result = scheduler.start(lambda: case.create(xs), observer=observer)
    assert result.messages == [on_next(case.at, case.value), on_completed(case.at)]
    assert xs.requests == [Recorded(200, LONG_MAX)], "everything, once, when the downstream first asked"
    assert xs.subscriptions == [subscribe(200, case.at)]


@pytest.mark.parametrize("name", CASES)
def test_nothing_is_requested_upstream_before_the_downstream_asks(name: str) -> None:
    case = CASES[name]
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*SCRIPT)
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(400, observer.request, 1)
    result = scheduler.start(lambda: case.create(xs), observer=observer)
    # The source held its elements (and its completion behind them) until the request at 400.
    assert result.messages == [on_next(400, case.value), on_completed(400)]
    assert xs.requests == [Recorded(400, LONG_MAX)]
    assert xs.subscriptions == [subscribe(200, 400)]


@pytest.mark.parametrize("name", HOLDING)
def test_a_result_decided_without_demand_is_held_until_requested(name: str) -> None:
    case = CASES[name]
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_completed(300))  # completes without being asked (rule 1.2)
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(400, observer.request, 1)
    scheduler.schedule_absolute(450, observer.request, 5)
    result = scheduler.start(lambda: case.create(xs), observer=observer)
    assert result.messages == [on_next(400, case.empty), on_completed(400)]
    assert xs.requests == [], "the source had completed: nothing to ask it"
    assert xs.subscriptions == [subscribe(200, 300)]


@pytest.mark.parametrize("name", FAILING_WHEN_EMPTY)
def test_an_empty_source_is_an_error_at_once_without_demand(name: str) -> None:
    case = CASES[name]
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_completed(300))
    observer = scheduler.create_observer(request=0)
    result = scheduler.start(lambda: case.create(xs), observer=observer)
    assert result.messages == [on_error(300, case.empty)]
    message = str(result.messages[0].value.error)  # type: ignore[attr-defined]
    assert message.startswith(name.split("+", maxsplit=1)[0]), f"the message names the operator: {message!r}"


@pytest.mark.parametrize("name", HOLDING)
def test_a_held_result_survives_a_checkpoint_and_restart(name: str) -> None:
    case = CASES[name]
    # First life: the source completes at 300 with nobody asking; a checkpoint at 350 saves the held result.
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_completed(300))
    first = scheduler.create_observer(request=0)
    handle = case.create(xs).subscribe(first)
    scheduler.schedule_absolute(200, initialize, handle, scheduler.create_context())
    scheduler.advance_to(350)
    assert first.messages == []
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None
    confirm_saved(handle)

    # Second life, from the blob, on a source that has nothing more to say.
    scheduler = TestScheduler()
    ys = scheduler.create_hot_observable()
    second = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(400, second.request, 1)
    result = scheduler.start(
        lambda: case.create(ys), created=340, subscribed=350, observer=second, load_state=state_loader(blob)
    )
    assert result.messages == [on_next(400, case.empty), on_completed(400)]
    assert ys.subscriptions == [subscribe(350, 350)], "the recovered stage lets go of its finished source at once"
    assert ys.requests == []


@pytest.mark.parametrize("n", [0, -1])
def test_a_non_positive_request_is_an_error_also_while_the_result_is_held(n: int) -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_completed(300))
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(400, observer.request, n)
    result = scheduler.start(xs.count, observer=observer)
    assert result.messages == [on_error(400, lambda e: isinstance(e, ValueError) and "3.9" in str(e))]


@pytest.mark.parametrize("n", [0, -1])
def test_a_non_positive_request_is_an_error_while_the_source_runs(n: int) -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*SCRIPT)
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(215, observer.request, 1)
    scheduler.schedule_absolute(225, observer.request, n)
    result = scheduler.start(xs.count, observer=observer)
    assert result.messages == [on_error(225, lambda e: isinstance(e, ValueError) and "3.9" in str(e))]
    assert xs.subscriptions == [subscribe(200, 225)]


@pytest.mark.parametrize("name", CASES)
def test_standalone_a_subscriber_asking_again_and_again_still_gets_one_element(name: str) -> None:
    """Without a scheduler (the source drains on the caller's thread): more requests change nothing."""
    case = CASES[name]
    from reaqtive import from_iterable

    recorder = Recorder()
    case.create(from_iterable([4, 2, 6, 3])).run(recorder)
    assert recorder.values == [] and not recorder.terminated, "nothing before the first request"
    recorder.request(1)
    recorder.request(3)
    assert recorder.values == [case.value] and recorder.completed == 1
    assert not recorder.violations


def test_cancel_before_the_result_unsubscribes_and_emits_nothing() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*SCRIPT)
    result = scheduler.start(xs.sum, disposed=235)
    assert result.messages == []
    assert xs.subscriptions == [subscribe(200, 235)]


class _Firehose(Subscribable[int]):
    """A non-conforming source: it sends its elements whatever was requested."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.cancelled = False

    def subscribe_core(self, observer: Subscriber[int]) -> SubscriptionHandle:
        return _Hose(self, observer)


class _Hose(OperatorBase[int]):
    def __init__(self, source: _Firehose, downstream: Subscriber[int]) -> None:
        super().__init__(downstream)
        self.source = source

    def request(self, n: int) -> None:
        pass

    def on_start(self) -> None:
        downstream = self._downstream  # kept on purpose: elements keep coming after cancel (rule 2.8)
        for i in range(self.source.count):
            downstream.on_next(i)

    def on_dispose(self) -> None:
        self.source.cancelled = True


@pytest.mark.parametrize(("create", "value"), [(lambda q: q.first(), 0), (lambda q: q.element_at(2), 2)])
def test_an_element_decided_without_demand_is_held_and_later_elements_change_nothing(
    create: Callable[[Query[int]], Query[int]], value: int
) -> None:
    source = _Firehose(10)
    recorder = Recorder()
    create(Query.from_subscribable(source)).run(recorder)
    assert source.cancelled, "the stage lets go of its source once it has its result"
    assert recorder.values == []
    recorder.request(1)
    assert recorder.values == [value] and recorder.completed == 1 and not recorder.violations
