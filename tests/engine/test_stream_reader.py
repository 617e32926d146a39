"""The stream reader's state: "caught up" (clean while it stays so) or, when it lags, its own watermark."""

from __future__ import annotations

from typing import Any

import pytest

from reaqtive import CallbackSubscriber, OperatorContext, Query, SimpleSubject
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.core.visitors import initialize, walk
from reaqtive.engine import Envelope, StreamReader
from reaqtive.engine.egress import OutputCounter
from reaqtive.engine.environment import EngineEnvironment
from reaqtive.state import InnerEnvironment, has_state_changed, read_blob, save_subscription, state_loader
from reaqtive.state.traversal import confirm_saved


class Environment(InnerEnvironment, EngineEnvironment):
    """An environment that says what it delivered, as the engine's does (positions in the log: here, the event
    numbers themselves)."""

    def __init__(self) -> None:
        super().__init__()
        self.delivered = -1
        self.subject = SimpleSubject[Envelope](name="s")
        self.add_stream("s", self.subject)

    def delivered_position(self, uri: str) -> int:
        return self.delivered

    def start_position(self, instance_id: str) -> int:
        return self.delivered

    def last_position(self) -> int:
        return 1 << 62

    def position_after_seq(self, uri: str, seq: int) -> int:
        return 10 * seq + 5  # a log where stream s's event n is at position 10 n + 1

    def subscribe_reader(self, reader: StreamReader[Any]) -> SubscriptionHandle:
        return self.subject.subscribe(reader)

    def reader_failed(self, instance_id: str, error: Exception) -> None:
        raise error

    def output_counter(self, uri: str) -> OutputCounter:
        return OutputCounter()

    def deliver(self, seq: int) -> None:
        self.subject.on_next(Envelope(seq, seq * 10))
        self.delivered = seq


def reader_of(handle: SubscriptionHandle) -> StreamReader[int]:
    return next(node for node in walk(handle) if isinstance(node, StreamReader))


def start(environment: Environment, received: list[int], blob: bytes | None = None) -> SubscriptionHandle:
    handle = Query.stream("s").subscribe(CallbackSubscriber(received.append))
    context = OperatorContext("q", execution_environment=environment)
    return initialize(handle, context, None if blob is None else state_loader(blob))


def saved_mark(handle: SubscriptionHandle) -> object:
    blob = save_subscription(handle)
    assert blob is not None
    (record,) = [r for r in read_blob(blob) if r.name == StreamReader.name]
    reader = record.reader()
    reader.read()  # the disposed flag
    return reader.read()


def test_a_caught_up_reader_saves_caught_up_and_stays_clean_while_events_flow() -> None:
    environment, received = Environment(), []
    handle = start(environment, received)
    environment.deliver(0)
    assert saved_mark(handle) is None
    confirm_saved(handle)
    for seq in range(1, 5):
        environment.deliver(seq)
    assert received == [0, 10, 20, 30, 40]
    assert not has_state_changed(handle), "reading on while caught up changes nothing to save"


def test_a_lagging_reader_saves_its_own_watermark_and_resumes_after_it() -> None:
    environment, received = Environment(), []
    handle = start(environment, received)
    environment.deliver(0)
    save_subscription(handle)
    confirm_saved(handle)
    assert not has_state_changed(handle)
    # Deliver more than the reader processed: the engine's watermark moves, the reader's does not.
    environment.delivered = 3
    assert has_state_changed(handle), "falling behind is a change: the next checkpoint must say where it is"
    assert saved_mark(handle) == 0

    blob = save_subscription(handle)
    assert blob is not None
    again, replayed = Environment(), []
    again.delivered = 3
    recovered = start(again, replayed, blob=blob)
    assert reader_of(recovered).watermark == 0
    for seq in range(4):
        again.subject.on_next(Envelope(seq, seq * 10))
    assert replayed == [10, 20, 30], "events after its own watermark, not after the engine's"


def test_a_caught_up_state_resumes_at_the_engine_watermark_of_its_checkpoint() -> None:
    environment, received = Environment(), []
    handle = start(environment, received)
    environment.deliver(0)
    blob = save_subscription(handle)
    assert blob is not None
    again, replayed = Environment(), []
    again.delivered = 5  # the checkpoint this state belongs to had delivered up to 5 (the state did not change)
    recovered = start(again, replayed, blob=blob)
    assert reader_of(recovered).watermark == 5
    for seq in range(4, 8):
        again.subject.on_next(Envelope(seq, seq))
    assert replayed == [6, 7]


def test_a_reader_saved_by_version_1_resumes_at_the_log_position_after_its_sequence_number(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Version 1 saved sequence numbers of the stream; they are read back through the engine as the log position
    just before the next event, and the reader saves version 2 at the next checkpoint."""
    environment, received = Environment(), []
    handle = start(environment, received)
    for seq in range(3):
        environment.deliver(seq)
    environment.delivered = 7  # behind: it saves its own watermark, 2 (a sequence number, as version 1 did)
    monkeypatch.setattr(StreamReader, "version", (1,))
    blob = save_subscription(handle)
    monkeypatch.undo()
    assert blob is not None
    (record,) = [r for r in read_blob(blob) if r.name == StreamReader.name]
    assert record.version == (1,)
    again, replayed = Environment(), []
    again.delivered = 70
    recovered = start(again, replayed, blob=blob)
    assert reader_of(recovered).watermark == 25, "just before event #3, at log position 31"
    assert has_state_changed(recovered), "saved again, in version 2"
    (saved,) = [r for r in read_blob(save_subscription(recovered) or b"") if r.name == StreamReader.name]
    assert saved.version == StreamReader.version == (2,)
