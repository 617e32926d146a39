"""The operator lifecycle implemented by OperatorBase / UnaryOperatorBase."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from reaqtive import CallbackSubscriber, OperatorContext, SimpleSubject, from_iterable
from reaqtive.core.operator import OperatorBase, UnaryOperatorBase
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.core.visitors import initialize, set_context_all, start_all, subscribe_all, walk
from tests.support import Recorder

CONTEXT = OperatorContext("test://lifecycle")


class Source(OperatorBase[int]):
    """A source operator that records its lifecycle calls."""

    def __init__(self, downstream: Any, log: list[str]) -> None:
        super().__init__(downstream)
        self.log = log

    def subscribe_inputs(self) -> Iterable[SubscriptionHandle]:
        self.log.append("subscribe")
        return ()

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self.log.append("set_context")

    def on_start(self) -> None:
        self.log.append("start")

    def on_dispose(self) -> None:
        self.log.append("dispose")

    def request(self, n: int) -> None:
        self.log.append(f"request({n})")

    def emit(self, value: int) -> None:
        self._downstream.on_next(value)


def test_subscribing_does_not_start_the_flow() -> None:
    recorder = Recorder(initial=10)
    handle = from_iterable([1, 2, 3]).map(lambda x: x + 1).subscribe(recorder)
    assert recorder.subscribed == 0 and recorder.values == []
    subscribe_all(handle)
    set_context_all(handle, CONTEXT)
    assert recorder.subscribed == 0 and recorder.values == [], "subscribe and set_context start nothing"
    start_all(handle)
    assert recorder.values == [2, 3, 4] and recorder.completed == 1


def test_start_runs_once_and_offers_the_subscription_downstream() -> None:
    log: list[str] = []
    recorder = Recorder()
    source = Source(recorder, log)
    initialize(source, CONTEXT)
    source.start()
    source.start()
    assert log == ["subscribe", "set_context", "start"]
    assert recorder.subscribed == 1 and recorder.subscription is source


def test_dispose_is_idempotent_disposes_inputs_and_drops_later_output() -> None:
    recorder = Recorder(initial=100)
    subject = SimpleSubject[int]()
    handle = subject.as_query().map(lambda x: x * 2).filter(lambda x: x > 0).run(recorder)
    subject.on_next(1)
    assert subject.subscriber_count == 1
    handle.dispose()
    handle.dispose()
    assert subject.subscriber_count == 0, "disposing the top operator disposed the chain down to the subject"
    subject.on_next(2)
    assert recorder.values == [2], "nothing is delivered after dispose"
    assert all(node.is_disposed for node in walk(handle))  # type: ignore[attr-defined]


def test_output_after_dispose_is_dropped() -> None:
    log: list[str] = []
    recorder = Recorder()
    source = Source(recorder, log)
    initialize(source, CONTEXT)
    source.emit(1)
    source.dispose()
    source.emit(2)
    assert recorder.values == [1]
    assert log[-1] == "dispose" and log.count("dispose") == 1


def test_a_disposed_operator_does_not_start() -> None:
    log: list[str] = []
    recorder = Recorder()
    source = Source(recorder, log)
    source.subscribe()
    source.dispose()
    source.start()
    assert "start" not in log and recorder.subscribed == 0


def test_cancel_from_downstream_disposes() -> None:
    log: list[str] = []
    recorder = Recorder()
    source = Source(recorder, log)
    initialize(source, CONTEXT)
    recorder.cancel()
    assert source.is_disposed and log[-1] == "dispose"


def test_cancel_inside_on_subscribe_prevents_on_start() -> None:
    log: list[str] = []

    class CancelAtOnce(Recorder):
        def on_subscribe(self, subscription: Any) -> None:
            super().on_subscribe(subscription)
            subscription.cancel()

    source = Source(CancelAtOnce(), log)
    initialize(source, CONTEXT)
    assert "start" not in log and source.is_disposed


def test_unary_operator_accumulates_demand_until_upstream_subscribes() -> None:
    log: list[str] = []
    recorder = Recorder()

    class Pass(UnaryOperatorBase[int, int]):
        def subscribe_input(self) -> SubscriptionHandle:
            return NOP

        def on_next(self, value: int) -> None:
            self._downstream.on_next(value)

    from reaqtive.core.subscriptions import NOP_SUBSCRIPTION as NOP

    stage = Pass(recorder)
    initialize(stage, CONTEXT)
    recorder.request(3)
    recorder.request(4)
    upstream = Source(stage, log)
    stage.on_subscribe(upstream)
    assert log == ["request(7)"], "demand requested before the upstream arrived is handed over in one request"
    recorder.request(5)
    assert log[-1] == "request(5)", "afterwards demand passes straight through"
    second = Source(Recorder(), [])
    stage.on_subscribe(second)
    assert second.is_disposed, "rule 2.5: a second subscription is cancelled"


def test_unary_operator_rejects_non_positive_request_before_upstream_with_on_error() -> None:
    recorder = Recorder()

    class Pass(UnaryOperatorBase[int, int]):
        def subscribe_input(self) -> SubscriptionHandle:
            from reaqtive.core.subscriptions import NOP_SUBSCRIPTION

            return NOP_SUBSCRIPTION

        def on_next(self, value: int) -> None:
            self._downstream.on_next(value)

    stage = Pass(recorder)
    initialize(stage, CONTEXT)
    recorder.request(0)
    assert len(recorder.errors) == 1 and "3.9" in str(recorder.errors[0])
    assert stage.is_disposed


def test_none_signals_raise_type_error() -> None:
    stage = from_iterable([1]).map(lambda x: x).subscribe(Recorder())
    with pytest.raises(TypeError, match=r"2\.13"):
        stage.on_error(None)  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match=r"2\.13"):
        stage.on_subscribe(None)  # type: ignore[attr-defined]
    # on_next(None) is checked where elements enter: sinks, subjects and sources (stages trust their upstream).
    with pytest.raises(TypeError, match=r"2\.13"):
        CallbackSubscriber[int]().on_next(None)  # type: ignore[arg-type]


def test_context_is_required_before_use() -> None:
    source = Source(Recorder(), [])
    with pytest.raises(RuntimeError, match="set_context"):
        _ = source.context
    source.set_context(CONTEXT)
    assert source.context is CONTEXT


def test_subscribe_after_dispose_creates_no_inputs() -> None:
    subject = SimpleSubject[int]()
    handle = subject.as_query().map(lambda x: x).subscribe(Recorder())
    handle.dispose()
    handle.subscribe()  # type: ignore[attr-defined]
    assert subject.subscriber_count == 0 and list(handle.inputs) == []  # type: ignore[attr-defined]
