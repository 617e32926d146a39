"""SimpleSubject: fan-out, per-subscriber demand, bounded buffers, overflow policies, terminal replay."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from reaqtive import (
    LONG_MAX,
    BufferOverflowError,
    ObjectDisposedError,
    OverflowPolicy,
    SimpleSubject,
    from_iterable,
    to_typed,
)
from tests.support import Recorder


def test_fans_out_to_every_subscriber_with_unbounded_demand() -> None:
    subject = SimpleSubject[int]()
    a, b = Recorder(initial=LONG_MAX), Recorder(initial=LONG_MAX)
    subject.subscribe(a)
    subject.subscribe(b)
    for value in (1, 2, 3):
        subject.on_next(value)
    subject.on_complete()
    assert a.values == b.values == [1, 2, 3]
    assert a.completed == b.completed == 1


def test_each_subscriber_gets_elements_according_to_its_own_demand() -> None:
    subject = SimpleSubject[int]()
    fast, slow = Recorder(initial=LONG_MAX), Recorder()
    subject.subscribe(fast)
    subject.subscribe(slow)
    for value in range(5):
        subject.on_next(value)
    assert fast.values == [0, 1, 2, 3, 4] and slow.values == []
    slow.request(2)
    assert slow.values == [0, 1]
    subject.on_complete()
    assert slow.completed == 0, "completion waits behind buffered elements"
    slow.request(10)
    assert slow.values == [0, 1, 2, 3, 4] and slow.completed == 1
    assert not slow.violations


def test_overflow_error_policy_signals_buffer_overflow_and_detaches() -> None:
    subject = SimpleSubject[int](buffer_size=2, name="s")
    slow = Recorder()
    subject.subscribe(slow)
    for value in range(3):
        subject.on_next(value)
    assert len(slow.errors) == 1 and isinstance(slow.errors[0], BufferOverflowError)
    assert "'s'" in str(slow.errors[0]) and "2" in str(slow.errors[0])
    assert subject.subscriber_count == 0


def test_overflow_drop_newest_and_drop_oldest() -> None:
    newest = SimpleSubject[int](buffer_size=2, overflow=OverflowPolicy.DROP_NEWEST)
    oldest = SimpleSubject[int](buffer_size=2, overflow=OverflowPolicy.DROP_OLDEST)
    a, b = Recorder(), Recorder()
    newest.subscribe(a)
    oldest.subscribe(b)
    for value in range(5):
        newest.on_next(value)
        oldest.on_next(value)
    a.request(10)
    b.request(10)
    assert a.values == [0, 1] and b.values == [3, 4]
    assert a.errors == b.errors == []


def test_late_subscriber_receives_the_terminal_signal_at_once() -> None:
    subject = SimpleSubject[int]()
    subject.on_error(KeyError("x"))
    late = Recorder()
    subject.subscribe(late)
    assert late.subscribed == 1 and isinstance(late.errors[0], KeyError)
    completed = SimpleSubject[int]()
    completed.on_complete()
    late2 = Recorder()
    completed.subscribe(late2)
    assert late2.completed == 1


def test_elements_after_termination_are_ignored() -> None:
    subject = SimpleSubject[int]()
    recorder = Recorder(initial=LONG_MAX)
    subject.subscribe(recorder)
    subject.on_complete()
    subject.on_next(1)
    subject.on_complete()
    assert recorder.values == [] and recorder.completed == 1 and not recorder.violations


def test_non_positive_request_signals_rule_3_9_error() -> None:
    subject = SimpleSubject[int]()
    recorder = Recorder()
    subject.subscribe(recorder)
    subject.on_next(1)
    recorder.request(0)
    assert isinstance(recorder.errors[0], ValueError) and "3.9" in str(recorder.errors[0])
    assert subject.subscriber_count == 0


def test_cancel_detaches_and_later_requests_are_no_ops() -> None:
    subject = SimpleSubject[int]()
    recorder = Recorder(initial=1)
    handle = subject.subscribe(recorder)
    subject.on_next(1)
    recorder.cancel()
    recorder.cancel()
    recorder.request(3)
    subject.on_next(2)
    handle.dispose()
    assert recorder.values == [1] and subject.subscriber_count == 0


def test_dispose_makes_later_use_raise() -> None:
    subject = SimpleSubject[int](name="gone")
    recorder = Recorder(initial=LONG_MAX)
    subject.subscribe(recorder)
    subject.dispose()
    subject.dispose()
    with pytest.raises(ObjectDisposedError, match="'gone'"):
        subject.on_next(1)
    with pytest.raises(ObjectDisposedError):
        subject.subscribe(Recorder())
    with pytest.raises(ObjectDisposedError):
        subject.create_observer()
    assert recorder.values == [] and recorder.completed == 0


def test_none_is_rejected() -> None:
    subject = SimpleSubject[int]()
    with pytest.raises(TypeError):
        subject.on_next(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        subject.on_error(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        subject.subscribe(None)  # type: ignore[arg-type]


def test_input_observer_subscribed_to_a_publisher_takes_everything() -> None:
    subject = SimpleSubject[int]()
    recorder = Recorder(initial=LONG_MAX)
    subject.subscribe(recorder)
    from_iterable([1, 2, 3]).run(subject.create_observer())
    assert recorder.values == [1, 2, 3] and recorder.completed == 1


def test_input_observer_cancels_a_second_subscription() -> None:
    subject = SimpleSubject[int]()
    observer = subject.create_observer()

    class Sub:
        def __init__(self) -> None:
            self.cancelled = False
            self.requested = 0

        def request(self, n: int) -> None:
            self.requested += n

        def cancel(self) -> None:
            self.cancelled = True

    one, two = Sub(), Sub()
    observer.on_subscribe(one)
    observer.on_subscribe(two)
    assert one.requested == LONG_MAX and not one.cancelled and two.cancelled


def test_typed_view_over_untyped_subject() -> None:
    subject = SimpleSubject[int]()
    typed = to_typed(subject, int, int)
    recorder = Recorder(initial=LONG_MAX)
    typed.subscribe(recorder)
    typed.create_observer().on_next(7)
    assert recorder.values == [7]
    typed.dispose()
    with pytest.raises(ObjectDisposedError):
        subject.on_next(1)


def test_concurrent_push_and_request_deliver_everything_in_order_without_overlap() -> None:
    subject = SimpleSubject[int](buffer_size=100_000)
    in_call = threading.Lock()
    overlaps: list[int] = []

    class Checking(Recorder):
        def on_next(self, value: Any) -> None:
            if not in_call.acquire(blocking=False):
                overlaps.append(value)
                return
            try:
                super().on_next(value)
            finally:
                in_call.release()

    recorder = Checking()
    subject.subscribe(recorder)
    count = 20_000

    def requester() -> None:
        for _ in range(count // 10):
            recorder.request(10)

    thread = threading.Thread(target=requester)
    thread.start()
    for value in range(count):
        subject.on_next(value)
    thread.join()
    assert overlaps == [], "rule 1.3: signals never overlap"
    assert recorder.values == list(range(count))


def test_an_error_cuts_ahead_of_buffered_elements() -> None:
    subject = SimpleSubject[int]()
    slow = Recorder()
    subject.subscribe(slow)
    subject.on_next(1)
    subject.on_error(KeyError("down"))
    assert slow.values == [] and isinstance(slow.errors[0], KeyError), "rule 1.4: failure is signalled at once"


def test_the_subject_as_a_subscriber_cancels_a_second_subscription() -> None:
    subject = SimpleSubject[int]()

    class Sub:
        def __init__(self) -> None:
            self.cancelled = False
            self.requested = 0

        def request(self, n: int) -> None:
            self.requested += n

        def cancel(self) -> None:
            self.cancelled = True

    one, two = Sub(), Sub()
    subject.on_subscribe(one)
    subject.on_subscribe(two)
    assert one.requested == LONG_MAX and not one.cancelled and two.cancelled
