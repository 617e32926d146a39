"""take_until(other) and take_until(end_time): values, completion, errors, disposal, demand, state, threads."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from reaqtive import MissingSchedulerError, OperatorContext, SimpleSubject, from_iterable
from reaqtive.core.streams import LONG_MAX
from reaqtive.core.visitors import initialize
from reaqtive.testing import Recorded, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.operators._take_skip_support import at, recover, run, save_at, saved_fields, saved_nodes
from tests.support import Recorder

HOT = [on_next(150, 1), on_next(210, 2), on_next(230, 3), on_next(260, 4), on_next(300, 5), on_completed(400)]
STOP = [on_next(150, "early"), on_next(250, "stop"), on_next(270, "again")]
FAILURE = RuntimeError("failed")


def until(xs: Any, ys: Any) -> Any:
    return xs.take_until(ys)


# -- take_until(other) -------------------------------------------------------------------------------------------


def test_take_until_completes_at_the_others_first_element_and_unsubscribes_both() -> None:
    result, (xs, ys) = run(until, HOT, STOP)
    assert result.messages == [on_next(210, 2), on_next(230, 3), on_completed(250)]
    assert xs.subscriptions == [subscribe(200, 250)] and ys.subscriptions == [subscribe(200, 250)]


def test_take_until_fails_with_the_others_error() -> None:
    result, (xs, ys) = run(until, HOT, [on_error(240, FAILURE)])
    assert result.messages == [on_next(210, 2), on_next(230, 3), on_error(240, FAILURE)]
    assert xs.subscriptions == [subscribe(200, 240)] and ys.subscriptions == [subscribe(200, 240)]


def test_take_until_an_other_that_completes_empty_lets_everything_pass() -> None:
    result, (xs, ys) = run(until, HOT, [on_completed(220)])
    assert result.values == [2, 3, 4, 5] and result.messages[-1] == on_completed(400)
    assert ys.subscriptions == [subscribe(200, 220)] and xs.subscriptions == [subscribe(200, 400)]


def test_take_until_completes_with_the_source_and_unsubscribes_the_other() -> None:
    result, (_xs, ys) = run(until, HOT, [on_next(500, "late")])
    assert result.messages[-1] == on_completed(400)
    assert ys.subscriptions == [subscribe(200, 400)]


def test_take_until_passes_a_source_error_and_unsubscribes_the_other() -> None:
    result, (_xs, ys) = run(until, [on_next(210, 1), on_error(220, FAILURE)], STOP)
    assert result.messages == [on_next(210, 1), on_error(220, FAILURE)]
    assert ys.subscriptions == [subscribe(200, 220)]


def test_take_until_disposed_early_unsubscribes_both() -> None:
    result, (xs, ys) = run(until, HOT, STOP, disposed=240)
    assert result.values == [2, 3]
    assert xs.subscriptions == [subscribe(200, 240)] and ys.subscriptions == [subscribe(200, 240)]


def test_take_until_an_other_that_signals_at_once_ends_it_before_the_source_emits() -> None:
    recorder = Recorder(initial=10)
    query = from_iterable([1, 2, 3]).take_until(from_iterable(["now"]))
    initialize(query.subscribe(recorder), OperatorContext("test://take_until"))
    assert recorder.values == [] and recorder.completed == 1, "the other is subscribed and started first"


def test_take_until_accepts_any_subscribable_as_the_other() -> None:
    source, stop = SimpleSubject[int](), SimpleSubject[str]()
    recorder = Recorder(initial=10)
    initialize(source.as_query().take_until(stop).subscribe(recorder), OperatorContext("test://take_until"))
    source.on_next(1)
    stop.on_next("stop")
    source.on_next(2)
    assert recorder.values == [1] and recorder.completed == 1
    assert source.subscriber_count == 0 and stop.subscriber_count == 0


@pytest.mark.parametrize(
    ("argument", "error", "message"),
    [
        (3, TypeError, "take_until: other must be a query .* or a datetime, got int"),
        (datetime(2030, 1, 1), ValueError, "take_until: time must be timezone-aware"),
    ],
)
def test_take_until_arguments_are_validated(argument: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        from_iterable([1]).take_until(argument)


def test_take_until_passes_demand_through_and_asks_the_other_for_one() -> None:
    result, (xs, ys) = run(until, HOT, STOP, observer_request=1)
    assert result.messages == [on_next(210, 2), on_next(230, 3), on_completed(250)]
    assert xs.requests == [Recorded(200, 1), Recorded(210, 1), Recorded(230, 1)]
    assert ys.requests == [Recorded(200, 1)]


@pytest.mark.parametrize(
    "other",
    [STOP, [on_completed(220), on_next(250, "x")], [on_error(280, FAILURE)], [on_next(450, "after")]],
    ids=["signals", "completes-empty", "fails", "after-the-source"],
)
def test_take_until_survives_a_checkpoint_anywhere(other: list[Any]) -> None:
    assert_checkpoint_anywhere(until, HOT, other)


def test_take_until_saves_that_the_other_ended_and_keeps_the_shape_of_its_inputs() -> None:
    create = lambda xs, ys: xs.take_until(ys.map(str))  # noqa: E731  (map: a stateful node in the other input)
    other = [on_completed(220), on_next(250, "x")]
    blob = save_at(create, [HOT, other], 230)
    until_node, map_node = saved_nodes(blob)
    assert (until_node.path, until_node.name) == ((0,), "reaqtive:take_until")
    assert saved_fields(until_node) == [False, True], "not disposed; the other completed empty"
    assert (map_node.path, map_node.name) == ((0, 0), "reaqtive:map"), "the other is input 0, still visited"
    assert saved_fields(map_node) == [True], "the other's stage ended, and says so"
    # Recovered, the stage does not listen to the other again (its 'x' at 250 must not end the result).
    result, (_xs, ys) = recover(create, [HOT, other], blob, restart=235)
    assert result.messages == [on_next(260, 4), on_next(300, 5), on_completed(400)]
    assert ys.subscriptions == [subscribe(235, 235)]


def test_take_until_never_overlaps_the_others_completion_with_an_element_on_real_threads() -> None:
    class Watcher(Recorder):
        def __init__(self) -> None:
            super().__init__(initial=LONG_MAX)
            self.inside = False
            self.overlaps = 0

        def on_next(self, value: Any) -> None:
            if self.inside:
                self.overlaps += 1
            self.inside = True
            time.sleep(0)
            super().on_next(value)
            self.inside = False

        def on_complete(self) -> None:
            if self.inside:
                self.overlaps += 1
            super().on_complete()

    source, stop = SimpleSubject[int](), SimpleSubject[str]()
    watcher = Watcher()
    initialize(source.as_query().take_until(stop.as_query()).subscribe(watcher), OperatorContext("test://t"))

    def produce() -> None:
        for i in range(20_000):
            if watcher.completed:
                break
            source.on_next(i)

    producer = threading.Thread(target=produce)
    producer.start()
    time.sleep(0.005)
    stop.on_next("stop")
    producer.join()
    assert watcher.completed == 1 and watcher.overlaps == 0 and not watcher.violations


# -- take_until(end_time) ----------------------------------------------------------------------------------------


def test_take_until_time_completes_at_the_time_and_unsubscribes() -> None:
    result, (xs,) = run(lambda xs: xs.take_until(at(255)), HOT)
    assert result.messages == [on_next(210, 2), on_next(230, 3), on_completed(255)]
    assert xs.subscriptions == [subscribe(200, 255)]


def test_take_until_time_rounds_a_time_between_ticks_up() -> None:
    result, _ = run(lambda xs: xs.take_until(at(255) + timedelta(milliseconds=500)), HOT)
    assert result.messages[-1] == on_completed(256)


def test_take_until_time_in_the_past_completes_at_once() -> None:
    result, (xs,) = run(lambda xs: xs.take_until(at(100)), HOT)
    assert result.messages == [on_completed(200)] and xs.subscriptions == [subscribe(200, 200)]


def test_take_until_time_accepts_any_time_zone() -> None:
    plus_two = timezone(timedelta(hours=2))
    result, _ = run(lambda xs: xs.take_until(at(255).astimezone(plus_two)), HOT)
    assert result.messages[-1] == on_completed(255)


def test_take_until_time_completes_with_an_earlier_source() -> None:
    result, (xs,) = run(lambda xs: xs.take_until(at(900)), HOT)
    assert result.messages[-1] == on_completed(400) and xs.subscriptions == [subscribe(200, 400)]


def test_take_until_time_passes_a_source_error() -> None:
    result, _ = run(lambda xs: xs.take_until(at(900)), [on_error(220, FAILURE)])
    assert result.messages == [on_error(220, FAILURE)]


def test_take_until_time_disposed_early_emits_nothing_more() -> None:
    result, (xs,) = run(lambda xs: xs.take_until(at(255)), HOT, disposed=220)
    assert result.messages == [on_next(210, 2)] and xs.subscriptions == [subscribe(200, 220)]


def test_take_until_time_passes_demand_through() -> None:
    result, (xs,) = run(lambda xs: xs.take_until(at(255)), HOT, observer_request=1)
    assert result.messages == [on_next(210, 2), on_next(230, 3), on_completed(255)]
    assert xs.requests == [Recorded(200, 1), Recorded(210, 1), Recorded(230, 1)]


def test_take_until_time_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.take_until(at(255)), HOT, ticks=range(200, 320, 5))


def test_take_until_time_recovered_after_the_time_completes_at_once() -> None:
    create = lambda xs: xs.take_until(at(255))  # noqa: E731
    blob = save_at(create, [HOT], 240)
    (record,) = saved_nodes(blob)
    assert record.name == "reaqtive:take_until+time" and saved_fields(record)[:2] == [False, at(200)]  # subscribed
    assert isinstance(saved_fields(record)[2], int)  # the timer's place among the timers armed in its tick
    result, _ = recover(create, [HOT], blob, restart=280)
    assert result.messages == [on_completed(280)]


def test_take_until_time_needs_a_scheduler() -> None:
    with pytest.raises(MissingSchedulerError, match=r"take_until\(end_time\) is time-based"):
        from_iterable([1]).take_until(at(10)).run(lambda x: None, context=OperatorContext("test://none"))
