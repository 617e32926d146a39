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

A differential checkpoint writes only the counters that moved since the last one, and finds them without looking
at every counter: under a host with a dirty registry (:mod:`reaqtive.state.dirty`) the stamp *arms* its counter,
so that the first output after each checkpoint reports the subscription (``registry.note_moved(uri)``) and later
ones are plain stores, as with a stateful operator's dirty flag.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from reaqtive.core.arguments import arguments
from reaqtive.core.binding import register_operator
from reaqtive.core.context import OperatorContext
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.streams import Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.engine.counters import OutputCounter
from reaqtive.engine.engine_errors import UnstorableOutputError
from reaqtive.engine.environment import EngineEnvironment
from reaqtive.state import StatefulUnaryOperatorBase

if TYPE_CHECKING:
    from reaqtive.fluent.query import Query

__all__ = ["EgressStamp", "Output", "OutputCounter", "OutputTaker", "OutputWriter"]

T = TypeVar("T")


class Output(NamedTuple):
    """One output of a standing query: which subscription, its sequence number there (0, 1, 2, ...), the value."""

    subscription: str
    seq: int
    value: Any


OutputWriter = Callable[[int, Any], None]
"""Where a subscription's outputs go: ``write(seq, value)`` (the engine's durable sink, or an outbox)."""


class OutputTaker(ABC):
    """The end of a subscription that takes outputs as ``(seq, value)``: the stamp then hands them over without
    making an :class:`Output` per output (the engine's subscriptions end in one)."""

    __slots__ = ()

    @abstractmethod
    def write_output(self, seq: int, value: Any) -> None:
        """Output ``seq`` of the subscription, ``value``."""

    def writer(self) -> OutputWriter:
        """What the stamp may call with ``(seq, value)`` instead of :meth:`write_output` (one frame less per
        output), calling :meth:`unstorable` when it raises :class:`UnstorableOutputError`."""
        return self.write_output

    def unstorable(self, error: UnstorableOutputError) -> None:
        """An output the writer could not keep (see :meth:`writer`): the subscription stops."""
        raise error

    def write_outputs(self, first: int, values: list[Any]) -> int:
        """Outputs ``first``, ``first + 1``, ... of the subscription, ``values`` (a run's, in one call). Returns
        how many it took: fewer when one of them stopped the subscription (that one counted, as
        :meth:`write_output` would have been called with it)."""
        for offset, value in enumerate(values):
            self.write_output(first + offset, value)
        return len(values)


def _drop(seq: int, value: Any) -> None:
    """The writer of a stamp whose subscription stopped at an output it could not keep."""


@register_operator("egress", internal=True)
class EgressStamp(StatefulUnaryOperatorBase[T, Output], Generic[T]):
    """Stamps each output with the subscription URI and the next sequence number. Demand passes straight through.

    State: nothing when the execution environment keeps the counter (``output_counter(uri)``: the engine
    does); otherwise the counter itself.
    """

    name = "reaqtive:egress"
    version: Version = (1,)
    state_fields = ("next_seq",)

    __slots__ = ("_counter", "_local", "_run", "_source", "_take", "_taker", "_uri")

    def __init__(self, query: Query[Any], downstream: Subscriber[Output]) -> None:
        super().__init__(downstream)
        args = arguments(query, "source", "uri")
        self._source: Subscribable[T] = args.source(0)
        self._uri = args.text(1)
        self._counter = OutputCounter()
        self._local = True
        # An engine's subscription ends in a taker: outputs go to it as (seq, value), with no Output made.
        self._taker = downstream if isinstance(downstream, OutputTaker) else None
        self._take: OutputWriter | None = None if self._taker is None else self._taker.writer()
        self._run: list[Any] | None = None  # the outputs of a run being read (see begin_run)

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        engine: object = context.execution_environment
        if isinstance(engine, EngineEnvironment):
            self._counter = engine.output_counter(self._uri)
            self._local = False
            if self.dirty_registry() is not None:
                self._counter.arm(self)

    @property
    def takes_outputs(self) -> bool:
        """Whether its outputs go to an :class:`OutputTaker` as ``(seq, value)`` (the engine's subscriptions)."""
        return self._take is not None

    def counter_moved(self) -> None:
        """The engine's counter moved since the last checkpoint took it: report it."""
        registry = self.dirty_registry()
        if registry is not None:
            registry.note_moved(self._uri)

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(self._counter.next if self._local else None)

    def load_state_core(self, reader: StateReader) -> None:
        saved = reader.read()
        if saved is not None and (self._local or self._counter.committed is None):
            self._counter.next = int(saved)

    def begin_run(self) -> list[Any]:
        """The list a fused run appends its outputs to while it reads a run of events (see
        :meth:`reaqtive.engine.readers.StreamReader.read_run`): they are stamped and written in one call at
        :meth:`end_run`, or before a completion or an error reaches this stage, so their order stays."""
        run: list[Any] = []
        self._run = run
        return run

    def end_run(self) -> None:
        """Stamp and write the outputs of the run (see :meth:`begin_run`)."""
        outputs, self._run = self._run, None
        if outputs:
            counter = self._counter
            first = counter.next
            assert self._taker is not None  # a run is read only into a taker (see takes_outputs)
            counter.next = first + self._taker.write_outputs(first, outputs)

    def on_error(self, error: BaseException) -> None:
        if self._run is not None:
            self.end_run()
        super().on_error(error)

    def on_complete(self) -> None:
        if self._run is not None:
            self.end_run()
        super().on_complete()

    def on_next(self, value: T) -> None:
        run = self._run
        if run is not None:  # a run being read: stamped and written at its end
            run.append(value)
            return
        counter = self._counter
        seq = counter.next
        counter.next = seq + 1
        take = self._take
        if take is not None:
            try:
                take(seq, value)
            except UnstorableOutputError as error:
                self._take = _drop  # the subscription stops at this output: nothing after it is written
                assert self._taker is not None
                self._taker.unstorable(error)
            return
        if self._local:
            self._state.changed = True
        self._downstream.on_next(Output(self._uri, seq, value))
