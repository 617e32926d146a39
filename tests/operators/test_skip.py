"""skip(count) and skip(duration): values, completion, errors, disposal, demand, checkpoints."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reaqtive import MissingSchedulerError, OperatorContext, from_iterable
from reaqtive.core.streams import LONG_MAX
from reaqtive.core.visitors import initialize
from reaqtive.testing import Recorded, TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.operators._take_skip_support import recover, run, save_at, saved_fields, saved_nodes
from tests.support import Recorder

HOT = [on_next(150, 1), on_next(210, 2), on_next(230, 3), on_next(260, 4), on_next(300, 5), on_completed(400)]
FAILURE = RuntimeError("source failed")


# -- skip(count) -------------------------------------------------------------------------------------------------


def test_skip_drops_the_first_elements_and_passes_the_rest() -> None:
    result, (xs,) = run(lambda xs: xs.skip(2), HOT)
    assert result.messages == [on_next(260, 4), on_next(300, 5), on_completed(400)]
    assert xs.subscriptions == [subscribe(200, 400)]


def test_skip_more_than_the_source_has_only_completes() -> None:
    result, _ = run(lambda xs: xs.skip(10), HOT)
    assert result.messages == [on_completed(400)]


def test_skip_zero_passes_everything() -> None:
    result, _ = run(lambda xs: xs.skip(0), HOT)
    assert result.values == [2, 3, 4, 5] and result.messages[-1] == on_completed(400)


def test_skip_passes_a_source_error_while_skipping() -> None:
    result, (xs,) = run(lambda xs: xs.skip(5), [on_next(210, 1), on_error(220, FAILURE)])
    assert result.messages == [on_error(220, FAILURE)]
    assert xs.subscriptions == [subscribe(200, 220)]


def test_skip_disposed_early_unsubscribes_at_dispose_time() -> None:
    result, (xs,) = run(lambda xs: xs.skip(1), HOT, disposed=240)
    assert result.messages == [on_next(230, 3)]
    assert xs.subscriptions == [subscribe(200, 240)]


@pytest.mark.parametrize(
    ("argument", "error", "message"),
    [
        (-1, ValueError, "skip: count must be >= 0"),
        (True, TypeError, "skip: count must be an int or a timedelta, got bool"),
        ("3", TypeError, "skip: count must be an int or a timedelta, got str"),
        (timedelta(seconds=-1), ValueError, "skip: duration must be >= 0"),
    ],
)
def test_skip_arguments_are_validated_when_the_query_is_built(argument: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        from_iterable([1]).skip(argument)


def test_skip_asks_for_the_dropped_elements_with_the_first_demand() -> None:
    result, (xs,) = run(lambda xs: xs.skip(2), HOT, observer_request=1)
    assert result.messages == [on_next(260, 4), on_next(300, 5), on_completed(400)]
    assert xs.requests == [Recorded(200, 3), Recorded(260, 1), Recorded(300, 1)], "1 + the 2 to drop, once"


def test_skip_with_unbounded_demand_requests_it_once() -> None:
    _, (xs,) = run(lambda xs: xs.skip(2), HOT)
    assert xs.requests == [Recorded(200, LONG_MAX)]


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(0, 30),
    count=st.integers(0, 10),
    requests=st.lists(st.integers(1, 8), max_size=10),
)
def test_skip_delivers_exactly_what_was_requested(size: int, count: int, requests: list[int]) -> None:
    lines: list[str] = []
    recorder = Recorder()
    query = from_iterable(range(size)).trace("up", emit=lines.append).skip(count)
    initialize(query.subscribe(recorder), OperatorContext("test://skip"))
    expected = list(range(count, size))
    requested = 0
    for n in requests:
        recorder.request(n)
        requested += n
        assert recorder.values == expected[:requested]
    upstream = sum(int(line[len("[up] request(") : -1]) for line in lines if line.startswith("[up] request("))
    assert upstream <= (requested + count if requests else 0), "what was asked, plus the dropped ones once"
    if not recorder.completed:
        assert upstream == (requested + count if requests else 0), "exactly that, while the source runs"
    assert not recorder.violations


@pytest.mark.parametrize("count", [0, 2, 10])
def test_skip_survives_a_checkpoint_anywhere(count: int) -> None:
    assert_checkpoint_anywhere(lambda xs: xs.skip(count), HOT)


def test_skip_saves_how_many_are_still_to_drop() -> None:
    blob = save_at(lambda xs: xs.skip(2), [HOT], 220)
    (record,) = saved_nodes(blob)
    assert record.name == "reaqtive:skip" and saved_fields(record) == [False, 1]
    result, (xs,) = recover(lambda xs: xs.skip(2), [HOT], blob, restart=225)
    assert result.messages == [on_next(260, 4), on_next(300, 5), on_completed(400)]
    assert xs.requests == [Recorded(225, LONG_MAX)]


# -- skip(duration) ----------------------------------------------------------------------------------------------

TIMED = [on_next(210, 1), on_next(240, 2), on_next(250, 3), on_next(270, 4), on_completed(300)]


def test_skip_duration_drops_the_elements_before_the_end() -> None:
    result, (xs,) = run(lambda xs: xs.skip(timedelta(seconds=45)), TIMED)
    assert result.messages == [on_next(250, 3), on_next(270, 4), on_completed(300)]
    assert xs.subscriptions == [subscribe(200, 300)]


def test_skip_duration_drops_an_element_at_the_very_end() -> None:
    result, _ = run(lambda xs: xs.skip(timedelta(seconds=40)), TIMED)
    assert result.values == [3, 4]


def test_skip_zero_duration_drops_nothing() -> None:
    result, _ = run(lambda xs: xs.skip(timedelta(0)), TIMED)
    assert result.values == [1, 2, 3, 4]


def test_skip_duration_passes_a_completion_before_the_end() -> None:
    result, (xs,) = run(lambda xs: xs.skip(timedelta(seconds=100)), [on_next(210, 1), on_completed(220)])
    assert result.messages == [on_completed(220)]
    assert xs.subscriptions == [subscribe(200, 220)]


def test_skip_duration_passes_an_error_before_the_end() -> None:
    result, _ = run(lambda xs: xs.skip(timedelta(seconds=100)), [on_next(210, 1), on_error(220, FAILURE)])
    assert result.messages == [on_error(220, FAILURE)]


def test_skip_duration_disposed_early_unsubscribes() -> None:
    result, (xs,) = run(lambda xs: xs.skip(timedelta(seconds=45)), TIMED, disposed=260)
    assert result.messages == [on_next(250, 3)]
    assert xs.subscriptions == [subscribe(200, 260)]


def test_skip_duration_replaces_dropped_elements_one_at_a_time() -> None:
    result, (xs,) = run(lambda xs: xs.skip(timedelta(seconds=45)), TIMED, observer_request=1)
    assert result.messages == [on_next(250, 3), on_next(270, 4), on_completed(300)]
    assert xs.requests == [
        Recorded(200, 1),
        Recorded(210, 1),  # replaces the dropped 1
        Recorded(240, 1),  # replaces the dropped 2
        Recorded(250, 1),  # the observer's next request
        Recorded(270, 1),
    ]


def test_skip_duration_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.skip(timedelta(seconds=45)), TIMED, ticks=range(200, 310, 5))


def test_skip_duration_recovered_opens_when_the_original_would_have() -> None:
    create = lambda xs: xs.skip(timedelta(seconds=45))  # noqa: E731
    blob = save_at(create, [TIMED], 220)
    (record,) = saved_nodes(blob)
    disposed, end, is_open, number = saved_fields(record)
    assert record.name == "reaqtive:skip+duration" and (disposed, end.timestamp(), is_open) == (False, 245, False)
    assert isinstance(number, int)  # the timer's place among the timers armed in its tick
    result, _ = recover(create, [TIMED], blob, restart=230)
    assert result.messages == [on_next(250, 3), on_next(270, 4), on_completed(300)], "opens at 245, not 275"


def test_skip_duration_needs_a_scheduler() -> None:
    with pytest.raises(MissingSchedulerError, match=r"skip\(duration\) is time-based"):
        from_iterable([1]).skip(timedelta(seconds=1)).run(lambda x: None, context=OperatorContext("test://none"))


def test_skip_duration_under_a_test_scheduler_context_runs() -> None:
    scheduler = TestScheduler()
    seen: list[int] = []
    from_iterable([1, 2]).skip(timedelta(0)).run(seen.append, context=scheduler.create_context())
    scheduler.run()
    assert seen == [1, 2]
