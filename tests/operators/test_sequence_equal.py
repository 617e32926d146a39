"""sequence_equal: two inputs, queues bounded through demand, the comparer, errors, checkpoints."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import OperatorBase, OperatorContext, Query, SimpleSubject, Subscribable, from_iterable
from reaqtive.core.errors import LimitExceededError
from reaqtive.core.streams import LONG_MAX, Subscriber
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.core.visitors import initialize
from reaqtive.operators.settings import MAX_QUEUE_SIZE
from reaqtive.state import CheckpointMode, confirm_saved, save_subscription, state_loader
from reaqtive.testing import Recorded, TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.support import Recorder

LEFT = [on_next(150, 0), on_next(210, 1), on_next(230, 2), on_next(250, 3), on_completed(300)]
RIGHT = [on_next(220, 1), on_next(225, 2), on_next(240, 3), on_completed(320)]


def run(left: list[Any], right: list[Any], create: Any = None, **start: Any) -> tuple[Any, Any, Any]:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*left)
    ys = scheduler.create_hot_observable(*right)
    context = start.pop("settings", None)
    if context is not None:
        start["context"] = scheduler.create_context(context)
    create = create or (lambda a, b: a.sequence_equal(b))
    result = scheduler.start(lambda: create(xs, ys), **start)
    return result.messages, xs, ys


def test_equal_sources_answer_true_when_both_have_completed() -> None:
    messages, xs, ys = run(LEFT, RIGHT)
    assert messages == [on_next(320, True), on_completed(320)]
    assert xs.subscriptions == [subscribe(200, 300)]
    assert ys.subscriptions == [subscribe(200, 320)]
    assert xs.requests == ys.requests == [Recorded(200, LONG_MAX)], "without the setting: everything, once"


def test_a_differing_pair_answers_false_at_once_and_cancels_both() -> None:
    right = [on_next(220, 1), on_next(235, 5), on_completed(320)]
    messages, xs, ys = run(LEFT, right)
    assert messages == [on_next(235, False), on_completed(235)]
    assert xs.subscriptions == [subscribe(200, 235)]
    assert ys.subscriptions == [subscribe(200, 235)]


def test_a_shorter_source_answers_false_when_it_ends_behind_the_other() -> None:
    right = [on_next(220, 1), on_completed(235)]  # left already delivered 2 at 230: it has one more
    messages, xs, _ = run(LEFT, right)
    assert messages == [on_next(235, False), on_completed(235)]
    assert xs.subscriptions == [subscribe(200, 235)]


def test_an_extra_element_after_the_other_ended_answers_false() -> None:
    left = [on_next(210, 1), on_completed(215)]
    right = [on_next(220, 1), on_next(240, 2), on_completed(320)]
    messages, _, ys = run(left, right)
    assert messages == [on_next(240, False), on_completed(240)]
    assert ys.subscriptions == [subscribe(200, 240)]


def test_two_empty_sources_are_equal() -> None:
    messages, _, _ = run([on_completed(210)], [on_completed(250)])
    assert messages == [on_next(250, True), on_completed(250)]


def test_the_comparer_gets_this_sources_element_first() -> None:
    pairs: list[tuple[str, str]] = []

    def same(mine: str, theirs: str) -> bool:
        pairs.append((mine, theirs))
        return mine.lower() == theirs.lower()

    left = [on_next(210, "a"), on_next(240, "B"), on_completed(300)]
    right = [on_next(220, "A"), on_next(230, "b"), on_completed(250)]
    messages, _, _ = run(left, right, lambda a, b: a.sequence_equal(b, same))
    assert messages == [on_next(300, True), on_completed(300)]
    assert pairs == [("a", "A"), ("B", "b")]


def test_comparer_exception_is_an_error_at_the_same_tick_and_cancels_both() -> None:
    # The second pair meets at 230 (right's 2 waited since 225): 1 / (2 - 2).
    messages, xs, ys = run(LEFT, RIGHT, lambda a, b: a.sequence_equal(b, lambda x, y: 1 / (x - 2)))
    assert messages == [on_error(230, ZeroDivisionError)]
    assert xs.subscriptions == [subscribe(200, 230)]
    assert ys.subscriptions == [subscribe(200, 230)]


@pytest.mark.parametrize("side", [0, 1])
def test_an_error_of_either_source_passes_through_and_cancels_the_other(side: int) -> None:
    failure = KeyError("upstream")
    failing = [on_next(210, 1), on_error(227, failure)]
    left, right = (failing, RIGHT) if side == 0 else (LEFT, failing)
    messages, xs, ys = run(left, right)
    assert messages == [on_error(227, failure)]
    assert xs.subscriptions == [subscribe(200, 227)]
    assert ys.subscriptions == [subscribe(200, 227)]


def test_disposal_cancels_both() -> None:
    messages, xs, ys = run(LEFT, RIGHT, disposed=245)
    assert messages == []
    assert xs.subscriptions == ys.subscriptions == [subscribe(200, 245)]


def test_nothing_is_requested_before_the_downstream_asks_and_an_early_answer_is_held() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_completed(210))
    ys = scheduler.create_hot_observable(on_completed(220))
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(400, observer.request, 1)
    result = scheduler.start(lambda: xs.sequence_equal(ys), observer=observer)
    assert result.messages == [on_next(400, True), on_completed(400)]
    assert xs.requests == ys.requests == []


def test_one_at_a_time_subscriber_gets_exactly_one_element() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*LEFT)
    ys = scheduler.create_hot_observable(*RIGHT)
    result = scheduler.start(lambda: xs.sequence_equal(ys), observer=scheduler.create_observer(request=1))
    assert result.messages == [on_next(320, True), on_completed(320)]


@pytest.mark.parametrize("n", [0, -3])
def test_a_non_positive_request_is_an_error(n: int) -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*LEFT)
    ys = scheduler.create_hot_observable(*RIGHT)
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(205, observer.request, 1)
    scheduler.schedule_absolute(235, observer.request, n)
    result = scheduler.start(lambda: xs.sequence_equal(ys), observer=observer)
    assert result.messages == [on_error(235, lambda e: isinstance(e, ValueError) and "3.9" in str(e))]
    assert xs.subscriptions == ys.subscriptions == [subscribe(200, 235)]


# -- MAX_QUEUE_SIZE: queues bounded through demand ----------------------------------------------------------------

FAST = [*(on_next(210 + i, i) for i in range(10)), on_completed(220)]
SLOW = [*(on_next(300 + i, i) for i in range(10)), on_completed(310)]


def test_with_max_queue_size_the_faster_source_is_slowed_to_the_slower_ones_pace() -> None:
    messages, fast, slow = run(FAST, SLOW, settings={MAX_QUEUE_SIZE: 3})
    assert messages == [on_next(310, True), on_completed(310)]
    # 3 at first, then one more for each pair matched: never more than 3 elements ahead of the slow source.
    assert fast.requests == [Recorded(200, 3), *(Recorded(300 + i, 1) for i in range(7))]
    # (the last three were already asked for; its completion came behind them)
    assert slow.requests[0] == Recorded(200, 3)


def test_without_the_setting_the_faster_sources_surplus_waits_in_the_queue() -> None:
    messages, fast, _ = run(FAST, SLOW)
    assert messages == [on_next(310, True), on_completed(310)]
    assert fast.requests == [Recorded(200, LONG_MAX)]


class _Firehose(Subscribable[int]):
    """A non-conforming source: it sends its elements whatever was requested."""

    def __init__(self, count: int) -> None:
        self.count = count

    def subscribe_core(self, observer: Subscriber[int]) -> SubscriptionHandle:
        return _Hose(self.count, observer)


class _Hose(OperatorBase[int]):
    def __init__(self, count: int, downstream: Subscriber[int]) -> None:
        super().__init__(downstream)
        self.count = count

    def request(self, n: int) -> None:
        pass

    def on_start(self) -> None:
        for i in range(self.count):
            self._downstream.on_next(i)


def test_a_source_sending_more_than_asked_overflows_max_queue_size() -> None:
    recorder = Recorder(initial=1)
    query = Query.from_subscribable(_Firehose(10)).sequence_equal(from_iterable([5]))
    query.run(recorder, context=OperatorContext("test://overflow", settings={MAX_QUEUE_SIZE: 3}))
    assert recorder.values == []
    [error] = recorder.errors
    assert isinstance(error, LimitExceededError)
    assert (error.operator, error.setting, error.limit) == ("reaqtive:sequence_equal", MAX_QUEUE_SIZE, 3)


# -- checkpoints ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (LEFT, RIGHT),
        (LEFT, [on_next(220, 1), on_next(235, 5), on_completed(320)]),
        (LEFT, [on_next(220, 1), on_completed(235)]),
        ([on_completed(210)], [on_completed(250)]),
    ],
    ids=["equal", "differ", "shorter", "empty"],
)
def test_sequence_equal_survives_a_checkpoint_anywhere(left: list[Any], right: list[Any]) -> None:
    assert_checkpoint_anywhere(lambda xs, ys: xs.sequence_equal(ys), left, right)


def test_with_max_queue_size_it_survives_a_checkpoint_anywhere() -> None:
    # Scripts where the inputs never get ahead of the window, so nothing waits inside the test sources (which
    # stand for a durable input; the harness replays only what comes after the restart).
    left = [on_next(210, 1), on_next(211, 2), on_next(230, 3), on_next(231, 4), on_completed(300)]
    right = [on_next(220, 1), on_next(221, 2), on_next(240, 3), on_next(241, 4), on_completed(250)]
    assert_checkpoint_anywhere(lambda xs, ys: xs.sequence_equal(ys), left, right, settings={MAX_QUEUE_SIZE: 2})


def test_a_restart_resumes_with_the_queued_elements_and_their_window() -> None:
    settings_ = {MAX_QUEUE_SIZE: 3}
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_next(211, 2))
    ys = scheduler.create_hot_observable()
    observer = scheduler.create_observer()
    handle = xs.sequence_equal(ys).subscribe(observer)
    scheduler.schedule_absolute(200, initialize, handle, scheduler.create_context(settings_))
    scheduler.advance_to(250)
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None
    confirm_saved(handle)

    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(260, 3), on_completed(290))
    ys = scheduler.create_hot_observable(on_next(270, 1), on_next(271, 2), on_next(272, 3), on_completed(280))
    result = scheduler.start(
        lambda: xs.sequence_equal(ys),
        created=240,
        subscribed=250,
        context=scheduler.create_context(settings_),
        load_state=state_loader(blob),
    )
    assert result.messages == [on_next(290, True), on_completed(290)]
    assert xs.requests[0] == Recorded(250, 1), "two of its three places were still taken by queued elements"
    assert ys.requests[0] == Recorded(250, 3)


def test_a_held_answer_survives_a_restart() -> None:
    # Two empty sources: decided (True) at 230 without demand, held, saved at 250, recovered.
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_completed(210))
    ys = scheduler.create_hot_observable(on_completed(230))
    observer = scheduler.create_observer(request=0)
    handle = xs.sequence_equal(ys).subscribe(observer)
    scheduler.schedule_absolute(200, initialize, handle, scheduler.create_context())
    scheduler.advance_to(250)
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None

    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable()
    ys = scheduler.create_hot_observable()
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(400, observer.request, 1)
    result = scheduler.start(
        lambda: xs.sequence_equal(ys), created=240, subscribed=250, observer=observer, load_state=state_loader(blob)
    )
    assert result.messages == [on_next(400, True), on_completed(400)]
    assert xs.subscriptions == ys.subscriptions == [subscribe(250, 250)]


# -- against Python's ==, with arbitrary timing and windows -------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    left=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 5)), max_size=8),
    right=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 5)), max_size=8),
    end_gaps=st.tuples(st.integers(1, 5), st.integers(1, 5)),
    queue=st.sampled_from([None, 1, 2, 3]),
)
def test_matches_list_equality_whatever_the_timing(
    left: list[tuple[int, int]], right: list[tuple[int, int]], end_gaps: tuple[int, int], queue: int | None
) -> None:
    def script(items: list[tuple[int, int]], end_gap: int) -> list[Any]:
        time, messages = 200, []
        for value, gap in items:
            time += gap
            messages.append(on_next(time, value))
        return [*messages, on_completed(time + end_gap)]

    messages, _, _ = run(
        script(left, end_gaps[0]),
        script(right, end_gaps[1]),
        settings=None if queue is None else {MAX_QUEUE_SIZE: queue},
    )
    expected = [value for value, _ in left] == [value for value, _ in right]
    assert len(messages) == 2 and messages[0].value.value is expected  # type: ignore[attr-defined]


def test_arguments_are_validated_when_the_query_is_built() -> None:
    xs = from_iterable([1])
    with pytest.raises(TypeError, match="sequence_equal: other must be a query"):
        xs.sequence_equal([1])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="sequence_equal: comparer must be callable"):
        xs.sequence_equal(xs, 3)  # type: ignore[arg-type]


# -- two inputs on two threads ---------------------------------------------------------------------------------------


def _push(subject: SimpleSubject[int], last: int, start: threading.Barrier) -> None:
    start.wait()
    for i in range(500):
        subject.on_next(i)
    subject.on_next(last)
    subject.on_complete()


@pytest.mark.parametrize("queue", [None, 8])
@pytest.mark.parametrize("second_differs", [False, True])
def test_inputs_pushed_from_two_threads_at_once(queue: int | None, second_differs: bool) -> None:
    left, right = SimpleSubject[int](), SimpleSubject[int]()
    recorder = Recorder(initial=1)
    settings_ = {} if queue is None else {MAX_QUEUE_SIZE: queue}
    left.as_query().sequence_equal(right.as_query()).run(
        recorder, context=OperatorContext("test://threads", settings=settings_)
    )
    start = threading.Barrier(2)
    threads = [
        threading.Thread(target=_push, args=(left, -1, start)),
        threading.Thread(target=_push, args=(right, -2 if second_differs else -1, start)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert recorder.values == [not second_differs] and recorder.completed == 1
    assert not recorder.violations and not recorder.errors
