"""skip_until(other) and skip_until(start_time): the gate, errors, the Rx completion rule, demand, state."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from reaqtive import MissingSchedulerError, OperatorContext, SimpleSubject, from_iterable
from reaqtive.core.streams import LONG_MAX
from reaqtive.core.visitors import initialize
from reaqtive.testing import DISPOSED, Recorded, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.operators._take_skip_support import at, recover, run, save_at, saved_fields, saved_nodes
from tests.support import Recorder

HOT = [on_next(150, 1), on_next(210, 2), on_next(230, 3), on_next(260, 4), on_next(300, 5), on_completed(400)]
GO = [on_next(150, "early"), on_next(250, "go"), on_next(270, "again")]
FAILURE = RuntimeError("failed")


def until(xs: Any, ys: Any) -> Any:
    return xs.skip_until(ys)


# -- skip_until(other) -------------------------------------------------------------------------------------------


def test_skip_until_drops_until_the_others_first_element_then_unsubscribes_it() -> None:
    result, (xs, ys) = run(until, HOT, GO)
    assert result.messages == [on_next(260, 4), on_next(300, 5), on_completed(400)]
    assert xs.subscriptions == [subscribe(200, 400)] and ys.subscriptions == [subscribe(200, 250)]


def test_skip_until_fails_with_the_others_error_before_it_signalled() -> None:
    result, (xs, ys) = run(until, HOT, [on_error(240, FAILURE)])
    assert result.messages == [on_error(240, FAILURE)]
    assert xs.subscriptions == [subscribe(200, 240)] and ys.subscriptions == [subscribe(200, 240)]


def test_skip_until_ignores_the_other_after_it_signalled() -> None:
    result, _ = run(until, HOT, [on_next(250, "go"), on_error(270, FAILURE)])
    assert result.messages == [on_next(260, 4), on_next(300, 5), on_completed(400)]


def test_skip_until_an_other_that_completes_empty_keeps_the_gate_shut() -> None:
    result, (xs, ys) = run(until, HOT, [on_completed(220)])
    assert result.messages == [], "as in Rx: nothing passes, and the source's completion is dropped too"
    assert ys.subscriptions == [subscribe(200, 220)] and xs.subscriptions == [subscribe(200, 400)]


def test_skip_until_drops_a_source_completion_before_the_gate_but_the_other_may_still_fail() -> None:
    result, (xs, ys) = run(until, HOT, [on_error(450, FAILURE)])
    assert result.messages == [on_error(450, FAILURE)]
    assert xs.subscriptions == [subscribe(200, 400)] and ys.subscriptions == [subscribe(200, 450)]


def test_skip_until_a_silent_other_after_the_source_completed_keeps_listening_until_disposed() -> None:
    result, (_xs, ys) = run(until, HOT, [])
    assert result.messages == []
    assert ys.subscriptions == [subscribe(200, DISPOSED)], "as in Rx.NET: the other could still fail"


def test_skip_until_passes_a_source_error_while_the_gate_is_shut() -> None:
    result, (_xs, ys) = run(until, [on_next(210, 1), on_error(220, FAILURE)], GO)
    assert result.messages == [on_error(220, FAILURE)]
    assert ys.subscriptions == [subscribe(200, 220)]


def test_skip_until_disposed_early_unsubscribes_both() -> None:
    result, (xs, ys) = run(until, HOT, [on_next(220, "go")], disposed=240)
    assert result.messages == [on_next(230, 3)]
    assert xs.subscriptions == [subscribe(200, 240)] and ys.subscriptions == [subscribe(200, 220)]


def test_skip_until_an_other_that_signals_at_once_opens_the_gate_before_the_source_emits() -> None:
    recorder = Recorder(initial=10)
    query = from_iterable([1, 2, 3]).skip_until(from_iterable(["now"]))
    initialize(query.subscribe(recorder), OperatorContext("test://skip_until"))
    assert recorder.values == [1, 2, 3] and recorder.completed == 1, "the other is subscribed and started first"


def test_skip_until_accepts_any_subscribable_as_the_other() -> None:
    source, start = SimpleSubject[int](), SimpleSubject[str]()
    recorder = Recorder(initial=10)
    initialize(source.as_query().skip_until(start).subscribe(recorder), OperatorContext("test://skip_until"))
    source.on_next(1)
    start.on_next("go")
    source.on_next(2)
    assert recorder.values == [2] and start.subscriber_count == 0


@pytest.mark.parametrize(
    ("argument", "error", "message"),
    [
        ("x", TypeError, "skip_until: other must be a query .* or a datetime, got str"),
        (datetime(2030, 1, 1), ValueError, "skip_until: time must be timezone-aware"),
    ],
)
def test_skip_until_arguments_are_validated(argument: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        from_iterable([1]).skip_until(argument)


def test_skip_until_replaces_dropped_elements_and_asks_the_other_for_one() -> None:
    result, (xs, ys) = run(until, HOT, GO, observer_request=1)
    assert result.messages == [on_next(260, 4), on_next(300, 5), on_completed(400)]
    assert xs.requests == [
        Recorded(200, 1),
        Recorded(210, 1),  # replaces the dropped 2
        Recorded(230, 1),  # replaces the dropped 3
        Recorded(260, 1),  # the observer's next request
        Recorded(300, 1),
    ]
    assert ys.requests == [Recorded(200, 1)]


def test_skip_until_with_unbounded_demand_sends_no_replacements() -> None:
    _, (xs, _) = run(until, HOT, GO)
    assert xs.requests == [Recorded(200, LONG_MAX)]


@pytest.mark.parametrize(
    "other",
    [GO, [on_completed(220), on_next(250, "x")], [on_error(240, FAILURE)], [on_next(450, "x"), on_error(500, FAILURE)]],
    ids=["signals", "completes-empty", "fails", "after-the-source"],
)
def test_skip_until_survives_a_checkpoint_anywhere(other: list[Any]) -> None:
    assert_checkpoint_anywhere(until, HOT, other)


def test_skip_until_state_after_the_gate_opened_keeps_the_disposed_other_in_shape() -> None:
    create = lambda xs, ys: xs.skip_until(ys.map(str))  # noqa: E731  (map: a stateful node in the other input)
    blob = save_at(create, [HOT, GO], 255)
    until_node, map_node = saved_nodes(blob)
    assert (until_node.path, until_node.name) == ((0,), "reaqtive:skip_until")
    assert saved_fields(until_node) == [False, True, True, False], "disposed, open, other done, source done"
    assert (map_node.path, map_node.name, saved_fields(map_node)) == ((0, 0), "reaqtive:map", [True])
    result, (_xs, ys) = recover(create, [HOT, GO], blob, restart=256)
    assert result.messages == [on_next(260, 4), on_next(300, 5), on_completed(400)]
    assert ys.subscriptions == [subscribe(256, 256)], "the recovered stage does not listen to the other again"


def test_skip_until_recovered_after_the_source_completed_does_not_listen_to_it_again() -> None:
    blob = save_at(until, [HOT, [on_error(450, FAILURE)]], 420)
    (record,) = saved_nodes(blob)
    assert saved_fields(record) == [False, False, False, True]
    result, (xs, ys) = recover(until, [HOT, [on_error(450, FAILURE)]], blob, restart=430)
    assert result.messages == [on_error(450, FAILURE)]
    assert xs.subscriptions == [subscribe(430, 430)] and ys.subscriptions == [subscribe(430, 450)]


# -- skip_until(start_time) --------------------------------------------------------------------------------------


def test_skip_until_time_drops_the_elements_before_the_time() -> None:
    result, (xs,) = run(lambda xs: xs.skip_until(at(255)), HOT)
    assert result.messages == [on_next(260, 4), on_next(300, 5), on_completed(400)]
    assert xs.subscriptions == [subscribe(200, 400)]


def test_skip_until_time_drops_an_element_at_the_very_time() -> None:
    result, _ = run(lambda xs: xs.skip_until(at(260)), HOT)
    assert result.values == [5]


def test_skip_until_time_in_the_past_drops_nothing() -> None:
    result, _ = run(lambda xs: xs.skip_until(at(0)), HOT)
    assert result.values == [2, 3, 4, 5]


def test_skip_until_time_passes_completion_and_errors_before_the_time() -> None:
    completed, _ = run(lambda xs: xs.skip_until(at(900)), HOT)
    assert completed.messages == [on_completed(400)]
    failed, _ = run(lambda xs: xs.skip_until(at(900)), [on_next(210, 1), on_error(220, FAILURE)])
    assert failed.messages == [on_error(220, FAILURE)]


def test_skip_until_time_disposed_early_unsubscribes() -> None:
    result, (xs,) = run(lambda xs: xs.skip_until(at(220)), HOT, disposed=240)
    assert result.messages == [on_next(230, 3)] and xs.subscriptions == [subscribe(200, 240)]


def test_skip_until_time_replaces_dropped_elements_one_at_a_time() -> None:
    result, (xs,) = run(lambda xs: xs.skip_until(at(255)), HOT, observer_request=1)
    assert result.values == [4, 5]
    assert xs.requests == [Recorded(200, 1), Recorded(210, 1), Recorded(230, 1), Recorded(260, 1), Recorded(300, 1)]


def test_skip_until_time_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.skip_until(at(255)), HOT, ticks=range(200, 320, 5))


def test_skip_until_time_saves_whether_the_gate_is_open() -> None:
    create = lambda xs: xs.skip_until(at(255))  # noqa: E731
    (shut,) = saved_nodes(save_at(create, [HOT], 240))
    (opened,) = saved_nodes(save_at(create, [HOT], 270))
    assert shut.name == "reaqtive:skip_until+time"
    assert saved_fields(shut)[:3] == [False, False, at(200)] and saved_fields(opened)[:3] == [False, True, at(200)]
    assert isinstance(saved_fields(shut)[3], int)  # the timer's place among the timers armed in its tick


def test_skip_until_time_needs_a_scheduler() -> None:
    with pytest.raises(MissingSchedulerError, match=r"skip_until\(start_time\) is time-based"):
        from_iterable([1]).skip_until(at(10)).run(lambda x: None, context=OperatorContext("test://none"))
