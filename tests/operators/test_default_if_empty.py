"""default_if_empty: elements pass; an empty source gives the default, when demand allows."""

from __future__ import annotations

import pytest

from reaqtive import from_iterable
from reaqtive.core.visitors import initialize
from reaqtive.state import CheckpointMode, save_subscription, state_loader
from reaqtive.testing import Recorded, TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.support import Recorder

HOT = [on_next(150, 1), on_next(210, 2), on_next(230, 3), on_completed(300)]
EMPTY = [on_next(150, 1), on_completed(300)]


def test_default_if_empty_passes_a_non_empty_source_unchanged() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    result = scheduler.start(lambda: xs.default_if_empty(-1))
    assert result.messages == [on_next(210, 2), on_next(230, 3), on_completed(300)]
    assert xs.subscriptions == [subscribe(200, 300)]


def test_default_if_empty_emits_the_default_when_the_source_completes_empty() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*EMPTY)
    result = scheduler.start(lambda: xs.default_if_empty(-1))
    assert result.messages == [on_next(300, -1), on_completed(300)]
    assert xs.subscriptions == [subscribe(200, 300)]


def test_default_if_empty_passes_an_error_without_the_default() -> None:
    scheduler = TestScheduler()
    failure = KeyError("upstream")
    xs = scheduler.create_hot_observable(on_error(220, failure))
    result = scheduler.start(lambda: xs.default_if_empty(-1))
    assert result.messages == [on_error(220, failure)]
    assert xs.subscriptions == [subscribe(200, 220)]


def test_default_if_empty_disposed_early_emits_nothing() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*EMPTY)
    result = scheduler.start(lambda: xs.default_if_empty(-1), disposed=250)
    assert result.messages == []
    assert xs.subscriptions == [subscribe(200, 250)]


def test_default_if_empty_holds_the_default_until_the_first_request() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*EMPTY)
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(400, observer.request, 1)
    result = scheduler.start(lambda: xs.default_if_empty(-1), observer=observer)
    assert result.messages == [on_next(400, -1), on_completed(400)]
    assert xs.subscriptions == [subscribe(200, 300)]


def test_default_if_empty_with_one_at_a_time_demand() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(205, observer.request, 1)
    scheduler.schedule_absolute(250, observer.request, 1)
    result = scheduler.start(lambda: xs.default_if_empty(-1), observer=observer)
    assert result.messages == [on_next(210, 2), on_next(250, 3), on_completed(300)]
    assert xs.requests == [Recorded(205, 1), Recorded(250, 1)], "demand passes through; nothing held"


def test_default_if_empty_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.default_if_empty(-1), HOT)
    assert_checkpoint_anywhere(lambda xs: xs.default_if_empty(-1), EMPTY)


def test_default_if_empty_recovered_while_the_default_waits_for_demand() -> None:
    """Checkpointed after the source completed empty but before any request: the recovered query emits the
    default on the first request, without its (completed) source."""
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*EMPTY)
    scheduler.advance_to(200)
    handle = initialize(
        xs.default_if_empty(-1).subscribe(scheduler.create_observer(request=0)), scheduler.create_context()
    )
    scheduler.advance_to(320)
    assert xs.subscriptions == [subscribe(200, 300)]
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None

    recovered = TestScheduler()
    recovered.advance_to(320)
    ys = recovered.create_hot_observable(on_next(350, 7), on_completed(360))  # would confuse a live upstream
    observer = recovered.create_observer(request=0)
    initialize(ys.default_if_empty(-1).subscribe(observer), recovered.create_context(), state_loader(blob))
    recovered.schedule_absolute(400, observer.request, 1)
    recovered.advance_to(500)
    assert observer.messages == [on_next(400, -1), on_completed(400)]
    assert ys.subscriptions == [subscribe(320, 320)], "the upstream is not needed any more"


def test_default_if_empty_non_positive_request_while_the_default_waits() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*EMPTY)
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(400, observer.request, -1)
    result = scheduler.start(lambda: xs.default_if_empty(-1), observer=observer)
    assert result.messages == [on_error(400, ValueError)]


def test_default_if_empty_standalone() -> None:
    recorder = Recorder()
    from_iterable([]).default_if_empty("none").run(recorder)
    assert recorder.values == [] and recorder.completed == 0, "no demand yet: the default waits"
    recorder.request(5)
    assert recorder.values == ["none"] and recorder.completed == 1 and not recorder.violations
    recorder = Recorder(initial=1, per_item=1)
    from_iterable(range(3)).default_if_empty(-1).run(recorder)
    assert recorder.values == [0, 1, 2] and recorder.completed == 1


def test_default_if_empty_argument_validation() -> None:
    with pytest.raises(TypeError, match="default_if_empty: default_value must not be None"):
        from_iterable([1]).default_if_empty(None)  # type: ignore[arg-type]
