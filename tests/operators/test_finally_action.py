"""finally_action: exactly once, after the terminal signal or on dispose; not again after recovery."""

from __future__ import annotations

import logging

import pytest

from reaqtive import OperatorContext, from_iterable
from reaqtive.core.visitors import initialize
from reaqtive.scheduler import UnhandledExceptionArgs
from reaqtive.state import CheckpointMode, save_subscription, state_loader
from reaqtive.testing import MockObserver, Recorded, TestScheduler, on_completed, on_error, on_next, subscribe
from reaqtive.testing.checkpoint import assert_checkpoint_anywhere
from tests.support import Recorder

HOT = [on_next(150, 1), on_next(210, 2), on_next(230, 3), on_completed(300)]


def test_finally_action_runs_once_after_completion_went_downstream() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer: MockObserver[int] = scheduler.create_observer()
    calls: list[tuple[int, int]] = []
    result = scheduler.start(
        lambda: xs.finally_action(lambda: calls.append((scheduler.clock, len(observer.messages)))), observer=observer
    )
    assert result.messages == [on_next(210, 2), on_next(230, 3), on_completed(300)]
    assert calls == [(300, 3)], "once, at the completion's tick, after on_complete reached the observer"
    assert xs.subscriptions == [subscribe(200, 300)]  # the dispose at 1000 does not run it again


def test_finally_action_runs_once_after_an_error() -> None:
    scheduler = TestScheduler()
    failure = KeyError("upstream")
    xs = scheduler.create_hot_observable(on_next(210, 1), on_error(220, failure))
    calls: list[int] = []
    result = scheduler.start(lambda: xs.finally_action(lambda: calls.append(scheduler.clock)))
    assert result.messages == [on_next(210, 1), on_error(220, failure)]
    assert calls == [220]


def test_finally_action_runs_once_on_explicit_dispose() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    calls: list[int] = []
    result = scheduler.start(lambda: xs.finally_action(lambda: calls.append(scheduler.clock)), disposed=250)
    assert result.messages == [on_next(210, 2), on_next(230, 3)]
    assert calls == [250]
    assert xs.subscriptions == [subscribe(200, 250)]


def test_finally_action_runs_once_for_an_empty_source_disposed_again() -> None:
    calls: list[str] = []
    recorder = Recorder(initial=1)
    handle = from_iterable([]).finally_action(lambda: calls.append("done")).run(recorder)
    handle.dispose()
    handle.dispose()
    assert recorder.completed == 1 and calls == ["done"]


def test_finally_action_runs_on_cancel_from_the_subscriber() -> None:
    calls: list[str] = []
    recorder = Recorder(initial=2)
    from_iterable(range(10)).finally_action(lambda: calls.append("done")).run(recorder)
    assert calls == []
    recorder.cancel()
    assert recorder.values == [0, 1] and calls == ["done"]


def test_finally_action_is_not_run_again_by_a_query_recovered_as_finished() -> None:
    calls: list[str] = []
    query_of = lambda xs: xs.finally_action(lambda: calls.append("done"))  # noqa: E731
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(on_next(210, 1), on_completed(220))
    handle = initialize(query_of(xs).subscribe(scheduler.create_observer()), scheduler.create_context())
    scheduler.advance_to(230)
    assert calls == ["done"]
    blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None

    recovered = TestScheduler()
    ys = recovered.create_hot_observable()
    observer = recovered.create_observer()
    handle = initialize(query_of(ys).subscribe(observer), recovered.create_context(), state_loader(blob))
    recovered.advance_to(500)
    handle.dispose()
    assert calls == ["done"], "the action ran before that checkpoint; recovery must not run it again"
    assert observer.messages == []


def test_finally_action_exception_goes_to_the_scheduler_unhandled_exception_chain() -> None:
    scheduler = TestScheduler()
    caught: list[BaseException] = []

    def handler(args: UnhandledExceptionArgs) -> None:
        caught.append(args.exception)
        args.handled = True

    scheduler.unhandled_exception += handler
    xs = scheduler.create_hot_observable(*HOT)
    boom = RuntimeError("boom")

    def fail() -> None:
        raise boom

    result = scheduler.start(lambda: xs.finally_action(fail))
    assert result.messages == [on_next(210, 2), on_next(230, 3), on_completed(300)]
    assert caught == [boom]


def test_finally_action_exception_standalone_is_logged_and_cancel_returns_normally(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def fail() -> None:
        raise RuntimeError("boom")

    recorder = Recorder(initial=1)
    from_iterable(range(5)).finally_action(fail).run(recorder, context=OperatorContext("test://finally"))
    with caplog.at_level(logging.ERROR, logger="reaqtive.operators"):
        recorder.cancel()  # rule 3.15: returns normally
    assert any("finally_action" in record.getMessage() for record in caplog.records)


def test_finally_action_survives_a_checkpoint_anywhere() -> None:
    assert_checkpoint_anywhere(lambda xs: xs.finally_action(lambda: None), HOT)


def test_finally_action_with_one_at_a_time_demand() -> None:
    scheduler = TestScheduler()
    xs = scheduler.create_hot_observable(*HOT)
    observer = scheduler.create_observer(request=0)
    scheduler.schedule_absolute(205, observer.request, 1)
    scheduler.schedule_absolute(250, observer.request, 1)
    result = scheduler.start(lambda: xs.finally_action(lambda: None), observer=observer)
    assert result.messages == [on_next(210, 2), on_next(250, 3), on_completed(300)]
    assert xs.requests == [Recorded(205, 1), Recorded(250, 1)]


def test_finally_action_argument_validation() -> None:
    with pytest.raises(TypeError, match="finally_action: action must be callable"):
        from_iterable([1]).finally_action(None)  # type: ignore[arg-type]
