"""Engine streams and the stage that reads them.

An engine stream is a hot subject whose elements are :class:`Envelope` objects ``(seq, value)``: ``seq`` is the
event's sequence number in its stream (0, 1, 2, ...), assigned when it was appended to the durable ingress log.
Queries read a stream with ``Query.stream(uri)``, which binds to a :class:`StreamReader` stage. The stage

* strips the envelope and passes the value on;
* keeps the sequence number of the last event it passed (its **watermark**);
* ignores an event at or below its watermark, which is how a recovered query skips what it had already
  processed when the engine replays the log.

What it saves is cheap to keep unchanged: a reader that has read everything the engine delivered (the usual
case: engine queries always ask for more) saves "caught up", meaning "the watermark of the checkpoint this
state belongs to", and stays clean while it stays caught up. So a differential checkpoint writes a subscription
only when one of its operators changed, not because its input moved on. Only a reader that lags behind (its
query withheld demand) saves its own watermark, and the engine replays from there.

A subscription created while the engine runs starts at the stream's position at that moment (the engine passes
it in the operator context's settings), so recovering it later does not replay the stream from the beginning.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Generic, NamedTuple, TypeVar

from reaqtive.binding import register_operator
from reaqtive.context import OperatorContext
from reaqtive.errors import ReaqtiveError
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.state import StatefulUnaryOperatorBase
from reaqtive.streams import LONG_MAX, Subscriber, add_demand
from reaqtive.subscriptions import NOP_SUBSCRIPTION, SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["START_WATERMARK_SETTING", "Envelope", "StreamNotFoundError", "StreamReader"]

T = TypeVar("T")

START_WATERMARK_SETTING: Final = "reaqtive://engine/settings/start_watermarks"
"""Context setting: a mapping stream URI → the watermark a *new* reader starts from (events after it are read)."""

NO_EVENT: Final = -1
"""The watermark of a reader that has read nothing."""
_NEVER: Final = object()  # the saved mark of a reader never saved nor loaded


class Envelope(NamedTuple):
    """An event of an engine stream: its sequence number in the stream and its value."""

    seq: int
    value: Any


class StreamNotFoundError(ReaqtiveError, LookupError):
    """A query reads a stream the engine does not have."""


@register_operator("stream")
class StreamReader(StatefulUnaryOperatorBase[Envelope, T], Generic[T]):
    """The running stage of ``Query.stream(uri)``: reads the engine stream ``uri``.

    State: ``None`` ("caught up": at the watermark of the checkpoint the state belongs to) or, for a reader
    that lags behind what the engine delivered, its own watermark. An environment that does not say what it
    delivered (no ``delivered_watermark(uri)`` method) gets the watermark always. Demand: passed to the
    stream's subscription (engine streams are hot subjects: a reader without demand buffers up to the stream's
    bound).
    """

    name = "reaqtive:stream"
    version: Version = (1,)

    __slots__ = ("_delivered", "_pending_mark", "_requested", "_saved_mark", "_uri", "_watermark")

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        (uri,) = query.args
        assert isinstance(uri, str)
        self._uri = uri
        self._watermark = NO_EVENT
        self._requested = 0
        self._delivered: Callable[[str], int] | None = None
        self._saved_mark: object = _NEVER
        self._pending_mark: object = _NEVER

    @property
    def uri(self) -> str:
        """The stream read."""
        return self._uri

    @property
    def watermark(self) -> int:
        """The sequence number of the last event passed on (``-1``: none)."""
        return self._watermark

    def subscribe_input(self) -> SubscriptionHandle:
        return NOP_SUBSCRIPTION  # the stream is found through the context, in set_context

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        starts = context.get_setting(START_WATERMARK_SETTING)
        if isinstance(starts, dict) and self._uri in starts:
            self._watermark = int(starts[self._uri])
        environment = context.execution_environment
        self._delivered = getattr(environment, "delivered_watermark", None)
        register = getattr(environment, "register_reader", None)
        if register is not None:  # the engine finds the readers' watermarks without walking every query
            register(self)
        if environment is None:
            raise StreamNotFoundError(f"stream {self._uri!r}: Query.stream needs an engine to resolve it")
        try:
            subject = environment.get_subject(self._uri)
        except LookupError as error:
            raise StreamNotFoundError(f"the engine has no stream {self._uri!r}") from error
        self._inputs = (subject.subscribe(self),)

    def _mark(self) -> int | None:
        """What a save would write now: ``None`` when caught up with the engine, else the watermark."""
        delivered = self._delivered
        if delivered is not None and self._watermark >= delivered(self._uri):
            return None
        return self._watermark

    @property
    def state_changed(self) -> bool:
        return self._state.state_changed or self._mark() != self._saved_mark

    @state_changed.setter
    def state_changed(self, value: bool) -> None:
        self._state.changed = value

    def save_state_core(self, writer: StateWriter) -> None:
        mark = self._mark()
        writer.write(mark)
        self._pending_mark = mark

    def on_state_saved(self) -> None:
        super().on_state_saved()
        self._saved_mark = self._pending_mark

    def load_state_core(self, reader: StateReader) -> None:
        mark = reader.read()
        if mark is None:
            # Caught up at the checkpoint: the engine restored its delivered watermarks before binding. A start
            # watermark from the settings is later when the state was saved at creation, after that checkpoint.
            delivered = self._delivered(self._uri) if self._delivered is not None else NO_EVENT
            self._watermark = max(self._watermark, delivered)
        else:
            self._watermark = int(mark)
        self._saved_mark = self._pending_mark = mark

    def request(self, n: int) -> None:
        if n > 0:
            self._requested = add_demand(self._requested, n)
        super().request(n)

    def on_next(self, value: Envelope) -> None:
        seq = value[0]
        if seq <= self._watermark:
            # Replayed: this reader had processed it before the restart. Like a filter, ask for a replacement.
            if self._requested != LONG_MAX:
                upstream = self._upstream
                if upstream is not None:
                    upstream.request(1)
            return
        self._watermark = seq  # no dirty flag: state_changed compares what a save would write
        self._downstream.on_next(value[1])
