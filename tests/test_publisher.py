"""as_publisher: the plain Reactive Streams view of a query."""

from __future__ import annotations

from typing import Any

from reaqtive import OperatorContext, Query, Subscribable, as_publisher, from_iterable
from reaqtive.core.subscriptions import SubscriptionHandle
from tests.support import Recorder


def test_subscribe_starts_at_once_and_honours_demand() -> None:
    publisher = as_publisher(from_iterable(range(5)).map(lambda x: x + 1))
    recorder = Recorder(initial=2)
    publisher.subscribe(recorder)
    assert recorder.values == [1, 2]
    recorder.request(10)
    assert recorder.values == [1, 2, 3, 4, 5] and recorder.completed == 1


def test_each_subscription_is_independent() -> None:
    publisher = as_publisher(from_iterable(range(3)))
    a, b = Recorder(initial=10), Recorder(initial=1)
    publisher.subscribe(a)
    publisher.subscribe(b)
    assert a.values == [0, 1, 2] and b.values == [0]


def test_binding_failure_is_signalled_not_raised() -> None:
    recorder = Recorder()
    as_publisher(Query("no-such-operator", ())).subscribe(recorder)
    assert recorder.subscribed == 1 and "no-such-operator" in str(recorder.errors[0])


def test_failure_while_subscribing_inputs_is_signalled_after_on_subscribe() -> None:
    class Broken(Subscribable[int]):
        def subscribe_core(self, observer: Any) -> SubscriptionHandle:
            raise OSError("cannot connect")

    recorder = Recorder()
    as_publisher(Query.from_subscribable(Broken()).map(lambda x: x)).subscribe(recorder)
    assert recorder.subscribed == 1 and isinstance(recorder.errors[0], OSError)


def test_contexts_are_derived_per_subscription() -> None:
    seen: list[str] = []
    base = OperatorContext("test://pub")
    from reaqtive.operators.map import Map

    original = Map.set_context

    def spy(self: Map[Any, Any], context: OperatorContext) -> None:
        seen.append(context.instance_id)
        original(self, context)

    Map.set_context = spy  # type: ignore[method-assign]
    try:
        publisher = as_publisher(from_iterable([1]).map(lambda x: x), base)
        publisher.subscribe(Recorder())
        publisher.subscribe(Recorder())
    finally:
        Map.set_context = original  # type: ignore[method-assign]
    assert seen == ["test://pub/publisher/1", "test://pub/publisher/2"]
