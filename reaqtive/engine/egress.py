"""Egress: every output of a standing query carries a deterministic ``(subscription URI, sequence number)``.

The engine binds every subscription as ``query`` followed by an :class:`EgressStamp` stage, whose counter is part
of the subscription's checkpointed state. After a crash the engine recovers the counter with the rest of the
state and replays the input after the checkpoint; deterministic processing then produces the same outputs with
the same sequence numbers, so a sink can drop what it has already seen:

* the built-in durable sink (a SQLite table keyed by ``(subscription, seq)``) keeps the first copy: its content
  is **effectively-once**;
* any other observer receives :class:`Output` objects **at least once**, and can deduplicate by ``seq``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from reaqtive.binding import register_operator
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive.streams import Subscriber
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["EgressStamp", "Output"]

T = TypeVar("T")


class Output(NamedTuple):
    """One output of a standing query: which subscription, its sequence number there (0, 1, 2, ...), the value."""

    subscription: str
    seq: int
    value: Any


@register_operator("egress")
class EgressStamp(StatefulUnaryOperatorBase[T, Output], Generic[T]):
    """Stamps each output with the subscription URI and the next sequence number (the state). Demand passes
    straight through."""

    name = "reaqtive:egress"
    version: Version = (1,)

    __slots__ = ("_next", "_source", "_uri")

    def __init__(self, query: Query[Any], downstream: Subscriber[Output]) -> None:
        super().__init__(downstream)
        source, uri = query.args
        assert isinstance(source, Subscribable) and isinstance(uri, str)
        self._source: Subscribable[T] = source
        self._uri = uri
        self._next = 0

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._next)

    def load_state_core(self, reader: StateReader) -> None:
        self._next = reader.read()

    def on_next(self, value: T) -> None:
        seq = self._next
        self._next = seq + 1
        self._state.changed = True
        self._downstream.on_next(Output(self._uri, seq, value))
