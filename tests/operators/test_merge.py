"""merge: interleaving, completion, errors, disposal, bounded per-input queues, fairness, threads, recovery."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import OperatorContext, Query, SimpleSubject, from_iterable
from reaqtive.core.errors import LimitExceededError
from reaqtive.core.operator import OperatorBase
from reaqtive.core.streams import Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.core.visitors import initialize
from reaqtive.operators.merge import Merge
from reaqtive.operators.settings import MAX_QUEUE_SIZE
from reaqtive.state import CheckpointMode, StateShapeError, save_subscription, state_loader
from reaqtive.testing import Recorded, TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import Demand, assert_checkpoint_anywhere
from tests.operators._versions_support import save_as_version_1
from tests.support import Recorder

CONTEXT = OperatorContext("test://merge")

XS = [on_next(150, 0), on_next(210, 1), on_next(240, 2), on_next(270, 3), on_completed(300)]
YS = [on_next(220, 10), on_next(240, 20), on_next(260, 30), on_completed(350)]
ZS = [on_next(205, 100), on_next(290, 200), on_completed(320)]


def test_merge_interleaves_and_completes_when_every_source_completed() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*XS)
    ys = scheduler.create_hot_observable(*YS)
    result = scheduler.start(lambda: xs.merge(ys))
    assert result.messages == [
        on_next(210, 1),
        on_next(220, 10),
        on_next(240, 2),
        on_next(240, 20),
        on_next(260, 30),
        on_next(270, 3),
        on_completed(350),
    ]
    assert xs.subscriptions == [subscribe(200, 300)]
    assert ys.subscriptions == [subscribe(200, 350)]


def test_merge_n_ary_and_the_static_form() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*XS)
    ys = scheduler.create_hot_observable(*YS)
    zs = scheduler.create_hot_observable(*ZS)
    result = scheduler.start(lambda: Query.merge(xs, ys, zs))
    assert [m.value.value for m in result.messages[:-1]] == [100, 1, 10, 2, 20, 30, 3, 200]  # type: ignore[union-attr]
    assert result.messages[-1] == on_completed(350)
    assert zs.subscriptions == [subscribe(200, 320)]
    assert xs.merge(ys, zs) == Query.merge(xs, ys, zs)


def test_merge_of_a_single_source_passes_it_through() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*XS)
    result = scheduler.start(xs.merge)
    assert result.messages == [on_next(210, 1), on_next(240, 2), on_next(270, 3), on_completed(300)]


def test_merge_accepts_any_subscribable_as_a_source() -> None:
    subject = SimpleSubject[int]()
    recorder = Recorder(initial=100)
    initialize(from_iterable([1, 2]).merge(subject).subscribe(recorder), CONTEXT)
    subject.on_next(3)
    subject.on_complete()
    assert recorder.values == [1, 2, 3] and recorder.completed == 1


def test_merge_forwards_an_error_at_once_and_unsubscribes_every_source() -> None:
    scheduler = TestScheduler()
    boom = RuntimeError("boom")
    xs = scheduler.create_hot_observable(on_next(210, 1), on_error(245, boom))
    ys = scheduler.create_hot_observable(*YS)
    result = scheduler.start(lambda: xs.merge(ys))
    assert result.messages == [on_next(210, 1), on_next(220, 10), on_next(240, 20), on_error(245, boom)]
    assert xs.subscriptions == [subscribe(200, 245)]
    assert ys.subscriptions == [subscribe(200, 245)]


def test_merge_error_overtakes_queued_elements() -> None:
    scheduler = TestScheduler()
    boom = RuntimeError("boom")
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_error(230, boom))
    ys = scheduler.create_hot_observable(on_next(215, 10))
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(300, observer.request, 10)
    result = scheduler.start(lambda: xs.merge(ys), observer=observer)
    assert result.messages == [on_error(230, boom)]
    assert ys.subscriptions == [subscribe(200, 230)]


def test_merge_disposed_early_unsubscribes_every_source() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*XS)
    ys = scheduler.create_hot_observable(*YS)
    result = scheduler.start(lambda: xs.merge(ys), disposed=235)
    assert result.messages == [on_next(210, 1), on_next(220, 10)]
    assert xs.subscriptions == [subscribe(200, 235)]
    assert ys.subscriptions == [subscribe(200, 235)]


def test_merge_completes_only_after_the_queued_elements_went_out() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_completed(220))
    ys = scheduler.create_hot_observable(on_next(215, 2), on_completed(230))
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(300, observer.request, 1)
    scheduler.schedule_absolute(400, observer.request, 1)
    result = scheduler.start(lambda: xs.merge(ys), observer=observer)
    assert result.messages == [on_next(300, 1), on_next(400, 2), on_completed(400)]


def test_merge_drains_the_queues_round_robin() -> None:
    """With no demand the elements queue per source; then they go out one source at a time, in turn."""
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(211, 2), on_next(212, 3), on_next(213, 4))
    ys = scheduler.create_hot_observable(on_next(220, 10), on_next(221, 20))
    zs = scheduler.create_hot_observable(on_next(230, 100))
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(300, observer.request, 100)
    result = scheduler.start(lambda: Query.merge(xs, ys, zs), observer=observer)
    assert result.values == [1, 10, 100, 2, 20, 3, 4]


def test_merge_one_at_a_time_never_delivers_more_than_requested() -> None:
    recorder = Recorder(initial=1, per_item=1)
    initialize(from_iterable(range(500)).merge(from_iterable(range(500, 1000))).subscribe(recorder), CONTEXT)
    assert sorted(recorder.values) == list(range(1000))
    assert recorder.completed == 1 and not recorder.violations


def test_merge_asks_each_source_for_no_more_than_its_queue_holds() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*[on_next(210 + i, i) for i in range(8)])
    ys = scheduler.create_hot_observable(*[on_next(210 + i, 100 + i) for i in range(8)])
    observer = scheduler.create_observer(request=0)
    for tick in (300, 310, 320, 330, 340, 350):
        scheduler.schedule_absolute(tick, observer.request, 2)
    context = scheduler.create_context({MAX_QUEUE_SIZE: 4})
    result = scheduler.start(lambda: xs.merge(ys), observer=observer, context=context)
    assert len(result.values) == 12
    assert xs.requests[0] == Recorded(200, 4) and ys.requests[0] == Recorded(200, 4)
    for source in (xs, ys):
        # asked for 4, then 3 more each time 3 went out: never more than 4 outstanding or queued
        assert [r.value for r in source.requests] == [4, 3, 3][: len(source.requests)]
        delivered = sum(1 for v in result.values if (v >= 100) == (source is ys))
        assert sum(r.value for r in source.requests) <= delivered + 4


class Flood(Subscribable[int]):
    """A broken source that emits three elements whatever was requested (it breaks rule 1.1)."""

    def subscribe_core(self, observer: Subscriber[int]) -> SubscriptionHandle:
        return _FloodStage(observer)


class _FloodStage(OperatorBase[int]):
    def request(self, n: int) -> None:
        pass

    def on_start(self) -> None:
        for value in (1, 2, 3):
            self._downstream.on_next(value)


def test_merge_queue_overflow_from_an_upstream_that_ignores_demand() -> None:
    recorder = Recorder()
    context = OperatorContext("test://merge", settings={MAX_QUEUE_SIZE: 2})
    initialize(Query.from_subscribable(Flood()).merge().subscribe(recorder), context)
    assert recorder.values == []
    assert isinstance(recorder.errors[0], LimitExceededError) and recorder.errors[0].setting == MAX_QUEUE_SIZE


def test_merge_request_zero_signals_rule_3_9() -> None:
    recorder = Recorder()
    initialize(from_iterable([1]).merge(from_iterable([2])).subscribe(recorder), CONTEXT)
    recorder.request(0)
    assert isinstance(recorder.errors[0], ValueError) and "3.9" in str(recorder.errors[0])


def test_merge_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda xs, ys: xs.merge(ys), XS, YS)
    assert_checkpoint_anywhere(Query.merge, XS, YS, ZS)  # the static form


def test_merge_error_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(
        lambda xs, ys: xs.merge(ys), XS, [on_next(230, 5), on_error(280, ValueError("x"))]
    )


def _run_with_demand(query: Query[Any], scheduler: TestScheduler, request: int) -> Any:
    observer = scheduler.create_observer(request=0)
    handle = query.subscribe(observer)
    initialize(handle, scheduler.create_context())
    if request:
        observer.request(request)
    return handle, observer


def test_merge_recovers_its_queued_elements_and_done_flags() -> None:
    scheduler = TestScheduler()
    scheduler.advance_to(200)
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2), on_completed(230))
    ys = scheduler.create_hot_observable(on_next(215, 10))
    handle, observer = _run_with_demand(xs.merge(ys), scheduler, 1)
    scheduler.advance_to(240)
    assert observer.values == [1]
    blob = save_subscription(handle, CheckpointMode.FULL)
    handle.dispose()
    assert blob is not None

    xs2 = scheduler.create_hot_observable(on_next(250, 3))  # a completed source sends nothing more
    ys2 = scheduler.create_hot_observable(on_next(260, 20), on_completed(270))
    recovered = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(245, recovered.request, 10)
    initialize(xs2.merge(ys2).subscribe(recovered), scheduler.create_context(), state_loader(blob))
    scheduler.advance_to(300)
    assert recovered.messages == [on_next(245, 2), on_next(245, 10), on_next(260, 20), on_completed(270)]
    assert xs2.subscriptions == [subscribe(240, 240)], "the input that had completed is not listened to"
    assert ys2.requests == [Recorded(240, 255)], "its queue still holds one element: 255 more fit"


def test_merge_state_of_another_number_of_sources_is_refused() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable()
    handle, _ = _run_with_demand(xs.merge(xs), scheduler, 1)
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None
    with pytest.raises(StateShapeError, match="merge of 2 sources, the query merges 3"):
        initialize(
            xs.merge(xs, xs).subscribe(scheduler.create_observer()), scheduler.create_context(), state_loader(blob)
        )


def test_merge_recovered_between_two_requests_keeps_its_round_robin_turn() -> None:
    # At 230 both queues hold two elements and the subscriber takes one (xs's): ys's queue goes first next. A
    # recovered merge that forgot whose turn it is would start again with xs.
    report = assert_checkpoint_anywhere(
        lambda xs, ys: xs.merge(ys),
        [on_next(210, 1), on_next(220, 2), on_completed(250)],
        [on_next(215, 10), on_next(225, 20), on_completed(250)],
        demand=Demand(requests=((230, 1), (240, 3))),
        ticks=[230, 235],
    )
    assert report.expected == (on_next(230, 1), on_next(240, 10), on_next(240, 2), on_next(240, 20), on_completed(250))


def test_merge_state_of_version_1_loads_with_the_turn_at_the_first_input() -> None:
    scheduler = TestScheduler()
    scheduler.advance_to(200)
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(220, 2))
    ys = scheduler.create_hot_observable(on_next(215, 10))
    handle, observer = _run_with_demand(xs.merge(ys), scheduler, 0)
    scheduler.schedule_absolute(225, observer.request, 1)
    scheduler.advance_to(230)
    assert observer.values == [1]
    blob = save_as_version_1(Merge, 1, handle)  # version 1 had no cursor
    handle.dispose()

    recovered = scheduler.create_observer(request=10)
    query = scheduler.create_hot_observable().merge(scheduler.create_hot_observable())
    initialize(query.subscribe(recovered), scheduler.create_context(), state_loader(blob))
    scheduler.advance_to(240)
    assert recovered.values == [2, 10], "version 1 did not know whose turn it was: the first input's"


class Checking(Recorder):
    """A recorder that also counts overlapping on_next calls (rule 1.3)."""

    def __init__(self, initial: int) -> None:
        super().__init__(initial=initial)
        self.inside = False
        self.overlaps = 0

    def on_next(self, value: Any) -> None:
        if self.inside:
            self.overlaps += 1
        self.inside = True
        super().on_next(value)
        self.inside = False


def run_concurrently(
    build: Any, sources: int, elements: int, *, bounded: bool, capacity: int, value: Any = lambda i, j: j
) -> Checking:
    """``build(*queries)`` over ``sources`` subjects, each fed ``elements`` elements by a thread of its own, while
    (``bounded``) another thread keeps requesting 3 more; with the threads switching as often as possible."""
    subjects = [SimpleSubject[Any](buffer_size=100_000) for _ in range(sources)]
    recorder = Checking(initial=7 if bounded else 2**63 - 1)
    context = OperatorContext("test://concurrent", settings={MAX_QUEUE_SIZE: capacity})
    initialize(build(*(subject.as_query() for subject in subjects)).subscribe(recorder), context)
    stop = threading.Event()

    def produce(index: int) -> None:
        for j in range(elements):
            subjects[index].on_next(value(index, j))
        subjects[index].on_complete()

    def keep_requesting() -> None:
        while not stop.is_set() and not recorder.terminated:
            recorder.request(3)

    producers = [threading.Thread(target=produce, args=(i,)) for i in range(sources)]
    requester = threading.Thread(target=keep_requesting)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, so that their signals really meet
    try:
        for thread in producers:
            thread.start()
        if bounded:
            requester.start()
        for thread in producers:
            thread.join()
        deadline = time.monotonic() + 10
        while not recorder.terminated and time.monotonic() < deadline:
            time.sleep(0.001)
    finally:
        stop.set()
        if bounded:
            requester.join()
        sys.setswitchinterval(interval)
    return recorder


@pytest.mark.parametrize(("bounded", "capacity"), [(False, 256), (False, 2), (True, 1), (True, 5)])
def test_merge_serializes_signals_from_concurrent_threads(bounded: bool, capacity: int) -> None:
    recorder = run_concurrently(
        Query.merge, 3, 1500, bounded=bounded, capacity=capacity, value=lambda i, j: i * 10_000 + j
    )
    assert recorder.errors == [] and recorder.completed == 1
    assert recorder.overlaps == 0 and not recorder.violations
    assert sorted(recorder.values) == sorted(i * 10_000 + j for i in range(3) for j in range(1500))
    for index in range(3):
        mine = [v for v in recorder.values if v // 10_000 == index]
        assert mine == sorted(mine), "each source's order is kept"


@settings(max_examples=40, deadline=None)
@given(
    sources=st.lists(st.lists(st.integers(0, 999), max_size=15), min_size=1, max_size=4),
    requests=st.lists(st.integers(1, 6), min_size=1, max_size=12),
    capacity=st.integers(1, 5),
)
def test_merge_loses_nothing_keeps_each_source_order_and_honours_demand(
    sources: list[list[int]], requests: list[int], capacity: int
) -> None:
    tagged = [[(i, v) for v in values] for i, values in enumerate(sources)]
    recorder = Recorder()
    context = OperatorContext("test://merge", settings={MAX_QUEUE_SIZE: capacity})
    queries = [from_iterable(values) for values in tagged]
    initialize(Query.merge(*queries).subscribe(recorder), context)
    total = sum(len(values) for values in sources)
    requested = 0
    for n in requests:
        recorder.request(n)
        requested += n
        assert len(recorder.values) == min(requested, total)
    assert not recorder.violations
    for i, values in enumerate(tagged):
        mine = [item for item in recorder.values if item[0] == i]
        assert mine == values[: len(mine)], "each source's elements in its own order"
    if requested >= total:
        assert sorted(recorder.values) == sorted(item for values in tagged for item in values)
        assert recorder.completed == 1


@pytest.mark.parametrize(("args", "message"), [((42,), "source 1 must be a query"), (("x",), "source 1")])
def test_arguments_are_validated_when_the_query_is_built(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        from_iterable([1]).merge(*args)
