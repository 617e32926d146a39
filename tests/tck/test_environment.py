"""Unit tests of the kit's environment and synchronisation primitives."""

from __future__ import annotations

import threading
import time
import unittest

import pytest

from reaqtive.tck import (
    CapabilitySkip,
    NotVerified,
    OptionalNotImplemented,
    StochasticSkipped,
    SubscriberBufferOverflowError,
    TestEnvironment,
)
from reaqtive.tck.asyncio_support import LoopThread
from reaqtive.tck.subscribers import ManualSubscriberWithSubscriptionSupport
from reaqtive.tck.sync import END_OF_STREAM, Promise, Receptacle
from tests.tck.reference import SyncRangePublisher


def test_timeouts_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEFAULT_TIMEOUT_MILLIS", "1234")
    monkeypatch.setenv("DEFAULT_NO_SIGNALS_TIMEOUT_MILLIS", "56")
    monkeypatch.setenv("PUBLISHER_REFERENCE_GC_TIMEOUT_MILLIS", "789")
    env = TestEnvironment.from_env()
    assert (env.default_timeout_ms, env.default_no_signals_timeout_ms, env.publisher_reference_gc_timeout_ms) == (
        1234, 56, 789)


def test_defaults_without_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    names = ("DEFAULT_TIMEOUT_MILLIS", "DEFAULT_NO_SIGNALS_TIMEOUT_MILLIS", "PUBLISHER_REFERENCE_GC_TIMEOUT_MILLIS")
    for name in names:
        monkeypatch.delenv(name, raising=False)
    env = TestEnvironment.from_env()
    assert (env.default_timeout_ms, env.default_no_signals_timeout_ms, env.publisher_reference_gc_timeout_ms) == (
        500, 50, 300)


def test_a_malformed_timeout_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEFAULT_TIMEOUT_MILLIS", "fast")
    with pytest.raises(ValueError, match="DEFAULT_TIMEOUT_MILLIS='fast' must be a whole number of milliseconds"):
        TestEnvironment.from_env()


def test_flop_is_reported_at_the_next_verify() -> None:
    env = TestEnvironment(100, 10)
    env.flop("first problem")
    env.flop("second problem")
    with pytest.raises(AssertionError, match="first problem"):
        env.verify_no_async_errors_no_delay()


def test_a_recorded_non_assertion_error_is_wrapped() -> None:
    env = TestEnvironment(100, 10)
    cause = RuntimeError("boom")
    env.flop_error(cause)
    with pytest.raises(AssertionError, match="Async error during test execution: boom") as raised:
        env.verify_no_async_errors_no_delay()
    assert raised.value.__cause__ is cause


def test_flop_and_fail_names_the_earlier_error_as_cause() -> None:
    env = TestEnvironment(100, 10)
    earlier = RuntimeError("the real reason")
    env.flop_error(earlier)
    with pytest.raises(AssertionError, match="timed out") as raised:
        env.flop_and_fail("timed out")
    assert raised.value.__cause__ is earlier


def test_expect_error_wakes_when_the_error_arrives() -> None:
    env = TestEnvironment(5000, 10)
    threading.Timer(0.05, env.flop_error, (ValueError("late"),)).start()
    started = time.monotonic()
    error = env.expect_error(ValueError)
    assert str(error) == "late"
    assert time.monotonic() - started < 2.0  # woken by the error, not by the 5 s timeout


def test_expect_error_rejects_the_wrong_type() -> None:
    env = TestEnvironment(100, 10)
    env.flop_error(KeyError("x"))
    with pytest.raises(AssertionError, match=r"Got KeyError\('x'\) but expected ValueError"):
        env.expect_error(ValueError)


def test_verify_with_delay_catches_a_late_error() -> None:
    env = TestEnvironment(100, 5000)  # the watch ends as soon as the error arrives
    threading.Timer(0.02, env.flop, ("late flop",)).start()
    with pytest.raises(AssertionError, match="late flop"):
        env.verify_no_async_errors()


def test_promise_value_before_completion_fails_the_test() -> None:
    env = TestEnvironment(100, 10)
    promise: Promise[int] = Promise(env)
    with pytest.raises(AssertionError, match="before completion"):
        promise.value()


def test_promise_completed_twice_is_recorded() -> None:
    env = TestEnvironment(100, 10)
    promise: Promise[int] = Promise(env)
    promise.complete(1)
    promise.complete(2)
    assert promise.value() == 1
    with pytest.raises(AssertionError, match="Cannot complete a promise more than once"):
        env.verify_no_async_errors_no_delay()


def test_receptacle_overflow_is_recorded_as_well_as_raised() -> None:
    """JVM defect fixed: an overflow raised on an executor thread would be lost; it is recorded too."""
    env = TestEnvironment(100, 10)
    receptacle: Receptacle[int] = Receptacle(env, capacity=2)
    receptacle.add(1)
    receptacle.add(2)
    with pytest.raises(SubscriberBufferOverflowError):
        receptacle.add(3)
    with pytest.raises(AssertionError, match="Received more than bufferSize \\(2\\) onNext signals"):
        env.verify_no_async_errors_no_delay()


def test_receptacle_delivers_elements_then_end_of_stream() -> None:
    env = TestEnvironment(100, 10)
    receptacle: Receptacle[int] = Receptacle(env)
    receptacle.add(1)
    receptacle.complete()
    assert receptacle.next(100, "element") == 1
    assert receptacle.next_or_end_of_stream(100, "end") is END_OF_STREAM
    env.verify_no_async_errors_no_delay()


def test_close_cancels_what_the_test_left_open() -> None:
    env = TestEnvironment(100, 10)
    subscriber = env.new_manual_subscriber(SyncRangePublisher(0, 10))
    assert isinstance(subscriber, ManualSubscriberWithSubscriptionSupport)
    env.close()
    subscriber.request(5)  # cancelled: nothing arrives
    subscriber.expect_none()
    env.verify_no_async_errors_no_delay()


@pytest.mark.parametrize(("outcome", "kind"), [
    (NotVerified, "untested"), (StochasticSkipped, "stochastic"), (OptionalNotImplemented, "optional"),
    (CapabilitySkip, "capability"),
])
def test_outcomes_are_skips_with_their_kind_in_the_reason(outcome: type[unittest.SkipTest], kind: str) -> None:
    error = outcome("why")
    assert isinstance(error, unittest.SkipTest)
    assert str(error) == f"[{kind}] why"


def test_loop_thread_runs_calls_on_the_loop() -> None:
    with LoopThread() as loop_thread:
        assert not loop_thread.in_loop_thread()
        assert loop_thread.call_and_wait(loop_thread.in_loop_thread) is True
        with pytest.raises(ZeroDivisionError):
            loop_thread.call_and_wait(lambda: 1 // 0)
        done = threading.Event()
        loop_thread.call(done.set)
        assert done.wait(5)
        loop_thread.call(lambda: 1 // 0)  # posted: the error is kept for raise_errors()
        loop_thread.call_and_wait(lambda: None)  # runs after the failing call
        with pytest.raises(AssertionError, match="ZeroDivisionError"):
            loop_thread.raise_errors()
