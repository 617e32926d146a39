"""Egress: every output of a standing query carries a deterministic ``(subscription URI, sequence number)``.

The engine binds every subscription as ``query`` followed by an :class:`EgressStamp` stage. Its counter is kept
by the engine (an :class:`OutputCounter` per subscription, committed in the checkpoint's transaction as a small
row of its own, only when it moved), so that producing an output does not make the subscription's whole state
blob dirty. After a crash the engine recovers the counters with the state and replays the input after the
checkpoint; deterministic processing then produces the same outputs with the same sequence numbers, so a sink
can drop what it has already seen:

* the built-in durable sink (a SQLite table keyed by ``(subscription, seq)``) keeps the first copy: its content
  is **effectively-once**;
* any other observer receives :class:`Output` objects **at least once**, and can deduplicate by ``seq``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.context import OperatorContext
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive.streams import Subscriber
from reaqtive.subscribable import Subscribable
from reaqtive.subscriptions import SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["EgressStamp", "Output", "OutputCounter"]

T = TypeVar("T")


class Output(NamedTuple):
    """One output of a standing query: which subscription, its sequence number there (0, 1, 2, ...), the value."""

    subscription: str
    seq: int
    value: Any


class OutputCounter:
    """The next output sequence number of one subscription, and the value the store holds."""

    __slots__ = ("committed", "next", "pending")

    def __init__(self, next_seq: int = 0, committed: int | None = None) -> None:
        self.next = next_seq
        self.committed = committed
        """The value in the store (``None``: not stored yet)."""
        self.pending = next_seq
        """The value a checkpoint in flight writes."""


@register_operator("egress")
class EgressStamp(StatefulUnaryOperatorBase[T, Output], Generic[T]):
    """Stamps each output with the subscription URI and the next sequence number. Demand passes straight through.

    State: nothing when the execution environment keeps the counter (``output_counter(uri)``: the engine
    does); otherwise the counter itself.
    """

    name = "reaqtive:egress"
    version: Version = (1,)

    __slots__ = ("_counter", "_local", "_source", "_uri")

    def __init__(self, query: Query[Any], downstream: Subscriber[Output]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "uri")
        self._source: Subscribable[T] = args.source(0)
        self._uri = args.text(1)
        self._counter = OutputCounter()
        self._local = True

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        counter_for: Callable[[str], OutputCounter] | None = getattr(
            context.execution_environment, "output_counter", None
        )
        if counter_for is not None:
            self._counter = counter_for(self._uri)
            self._local = False

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._counter.next if self._local else None)

    def load_state_core(self, reader: StateReader) -> None:
        saved = reader.read()
        if saved is not None and (self._local or self._counter.committed is None):
            self._counter.next = int(saved)

    def on_next(self, value: T) -> None:
        counter = self._counter
        seq = counter.next
        counter.next = seq + 1
        if self._local:
            self._state.changed = True
        self._downstream.on_next(Output(self._uri, seq, value))
