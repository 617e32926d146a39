"""as_processor: a query stage seen as a Reactive Streams Processor."""

from __future__ import annotations

import pytest

from reaqtive import SimpleSubject, as_processor, as_publisher, from_iterable
from tests.support import Recorder


def test_demand_passes_through_the_processor_to_the_upstream() -> None:
    processor = as_processor(lambda q: q.map(lambda x: x * 10))
    as_publisher(from_iterable(range(5))).subscribe(processor)
    recorder = Recorder(initial=2)
    processor.subscribe(recorder)
    assert recorder.values == [0, 10]
    recorder.request(10)
    assert recorder.values == [0, 10, 20, 30, 40] and recorder.completed == 1


def test_downstream_may_subscribe_before_the_upstream_arrives() -> None:
    processor = as_processor(lambda q: q.filter(lambda x: x % 2 == 0))
    recorder = Recorder(initial=10)
    processor.subscribe(recorder)
    as_publisher(from_iterable(range(6))).subscribe(processor)
    assert recorder.values == [0, 2, 4] and recorder.completed == 1


def test_terminal_signal_before_any_subscriber_is_delivered_after_on_subscribe() -> None:
    processor = as_processor(lambda q: q)
    subject = SimpleSubject[int]()
    subject.subscribe(processor)
    subject.on_error(KeyError("early"))
    recorder = Recorder()
    processor.subscribe(recorder)
    assert recorder.subscribed == 1 and isinstance(recorder.errors[0], KeyError)


def test_second_subscriber_is_refused_with_on_error() -> None:
    processor = as_processor(lambda q: q)
    processor.subscribe(Recorder())
    second = Recorder()
    processor.subscribe(second)
    assert second.subscribed == 1 and "single subscriber" in str(second.errors[0])


def test_cancel_from_downstream_cancels_the_upstream() -> None:
    processor = as_processor(lambda q: q)
    subject = SimpleSubject[int]()
    subject.subscribe(processor)
    recorder = Recorder(initial=5)
    processor.subscribe(recorder)
    subject.on_next(1)
    recorder.cancel()
    assert subject.subscriber_count == 0 and recorder.values == [1]


def test_none_arguments_raise_at_the_boundary() -> None:
    processor = as_processor(lambda q: q)
    with pytest.raises(TypeError):
        processor.on_next(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        processor.on_subscribe(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        processor.subscribe(None)  # type: ignore[arg-type]
