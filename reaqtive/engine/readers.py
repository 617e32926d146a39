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

Falling behind, or catching up, changes what a reader would save without any event reaching an operator's state,
so no change reports itself to the engine's dirty registry (:mod:`reaqtive.state.dirty`). A reader therefore
*watches itself* (the registry asks it at every checkpoint) while that can happen: while its demand is bounded,
while what it saved (or would save) is a watermark of its own, and until its first save is confirmed. A reader
with unbounded demand that is caught up and saved "caught up" is not watched: every event the engine delivers
reaches it at once, so it stays caught up and clean. (That is what an environment promises by saying what it
delivered: it moves ``delivered_watermark`` just before it hands the event to the stream, as the engine does.)
The same fact tells the engine which readers can lag: only watched ones (see ``Engine._reader_watermarks``).

A reader starts at the stream's position at the moment it is created: a subscription created while the engine
runs (the engine also passes that position in the operator context's settings, for a recovery from an older
checkpoint), and just as much an inner reader that a ``flat_map`` or ``switch_latest`` creates long after its
query started. So recovering either later does not hand it events from before it existed. The position is the
engine's ``start_watermark``: its delivered watermark of the stream, or, while the engine replays older events
for a lagging or resumed query, where that replay stands (the inner reader a replayed event creates reads what
followed that event, as it did the first time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Generic, NamedTuple, TypeVar

from reaqtive.arguments import arguments
from reaqtive.binding import register_operator
from reaqtive.context import OperatorContext
from reaqtive.engine.environment import EngineEnvironment
from reaqtive.errors import ReaqtiveError
from reaqtive.operator import StateReader, StateWriter, Version
from reaqtive.state import StateFormatError, StatefulUnaryOperatorBase
from reaqtive.streams import LONG_MAX, Subscriber, add_demand
from reaqtive.subscriptions import NOP_SUBSCRIPTION, SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query
    from reaqtive.scheduler.virtual import Timeline
    from reaqtive.subjects import SimpleSubject

__all__ = [
    "PINNED_WATERMARK_SETTING",
    "START_WATERMARK_SETTING",
    "Envelope",
    "StreamNotFoundError",
    "StreamReader",
]

T = TypeVar("T")

START_WATERMARK_SETTING: Final = "reaqtive://engine/settings/start_watermarks"
"""Context setting: a mapping stream URI → the watermark a *new* reader starts from (events after it are read)."""

PINNED_WATERMARK_SETTING: Final = "reaqtive://engine/settings/pinned_watermarks"
"""Context setting: a mapping stream URI → what "caught up" in the loaded state means, for a query whose state is
older than the engine's last checkpoint (it was kept without running meanwhile)."""

NO_EVENT: Final = -1
"""The watermark of a reader that has read nothing."""
_NEVER: Final = object()  # the saved mark of a reader never saved nor loaded


class Envelope(NamedTuple):
    """An event of an engine stream: its sequence number in the stream and its value."""

    seq: int
    value: Any


class StreamNotFoundError(ReaqtiveError, LookupError):
    """A query reads a stream the engine does not have."""


@register_operator("stream", internal=True)
class StreamReader(StatefulUnaryOperatorBase[Envelope, T], Generic[T]):
    """The running stage of ``Query.stream(uri)``: reads the engine stream ``uri``.

    State: ``None`` ("caught up": at the watermark of the checkpoint the state belongs to) or, for a reader
    that lags behind what the engine delivered, its own watermark; ``None`` once disposed (it reads nothing more,
    so what it saves stays the same while its stream moves on). An environment that does not say what it
    delivered (no ``delivered_watermark(uri)`` method) gets the watermark always. Demand: passed to the
    stream's subscription (engine streams are hot subjects: a reader without demand buffers up to the stream's
    bound).
    """

    name = "reaqtive:stream"
    version: Version = (1,)
    watched = False  # it watches itself, only while it may lag (see the module)

    # What it asks of the environment is looked up when needed (never per event), not held as bound methods:
    # those cost 64 bytes each per reader.
    __slots__ = (
        "_faulted",
        "_paused",
        "_pending_mark",
        "_requested",
        "_saved_mark",
        "_uri",
        "_watching",
        "_watermark",
    )

    def __init__(self, query: Query[Any], downstream: Subscriber[T]) -> None:
        super().__init__(downstream)
        self._uri = arguments(query, "uri").text(0, non_empty=True)
        self._watermark = NO_EVENT
        self._requested = 0
        self._saved_mark: object = _NEVER
        self._pending_mark: object = _NEVER
        self._faulted = False  # reported a failure to the environment (once)
        self._paused = False  # its query is paused: events pass it by, the log keeps them (see pause)
        self._watching = False  # the dirty registry asks this reader at every checkpoint

    @property
    def uri(self) -> str:
        """The stream read."""
        return self._uri

    @property
    def watermark(self) -> int:
        """The sequence number of the last event passed on (``-1``: none)."""
        return self._watermark

    @property
    def paused(self) -> bool:
        """Whether its query is paused (see :meth:`pause`)."""
        return self._paused

    def pause(self) -> None:
        """Its query is paused: the engine detached it from its stream, so its watermark stays while the stream
        moves on. It lags, saves its own watermark, and is watched while paused (see the module), so that the
        engine keeps the events after it in the log and replays them after :meth:`resume`."""
        self._paused = True
        self._watch()

    def resume(self) -> None:
        """Read again: the engine replays the events after the watermark to it."""
        self._paused = False

    def subscribe_input(self) -> SubscriptionHandle:
        return NOP_SUBSCRIPTION  # the stream is found through the context, in set_context

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        environment = context.execution_environment
        # A reader starts where the stream is when it is created: an inner reader created long after its query
        # must not be handed the older events still retained in the log. The query's start (from the settings)
        # counts too: a query created after the last checkpoint started later than that checkpoint's record.
        # Loading state overrides both.
        starts = context.get_setting(START_WATERMARK_SETTING)
        if isinstance(starts, Mapping) and self._uri in starts:
            self._watermark = int(starts[self._uri])
        engine = self._environment()
        if engine is not None:
            self._watermark = max(self._watermark, engine.start_watermark(self._uri))
        if environment is None:
            raise StreamNotFoundError(f"stream {self._uri!r}: Query.stream needs an engine to resolve it")
        try:
            subject = environment.get_subject(self._uri)
        except LookupError as error:
            raise StreamNotFoundError(f"the engine has no stream {self._uri!r}") from error
        self._inputs = (subject.subscribe(self),)

    def _environment(self) -> EngineEnvironment | None:
        """The engine, when this reader runs under one (see :class:`EngineEnvironment`)."""
        context = self._context
        environment = None if context is None else context.execution_environment
        return environment if isinstance(environment, EngineEnvironment) else None

    def _delivered(self) -> int | None:
        """The engine's delivered watermark of the stream (``None``: not under an engine)."""
        engine = self._environment()
        return None if engine is None else engine.delivered_watermark(self._uri)

    def _mark(self) -> int | None:
        """What a save would write now: ``None`` when caught up with the engine (or disposed: it reads nothing
        more, and what it saves must not change while its stream moves on), else the watermark."""
        if self.is_disposed:
            return None
        delivered = self._delivered()
        if delivered is not None and self._watermark >= delivered:
            return None
        return self._watermark

    @property
    def state_changed(self) -> bool:
        return self._state.state_changed or self._mark() != self._saved_mark

    @state_changed.setter
    def state_changed(self, value: bool) -> None:
        if value:
            self._state.changed = True
        else:
            self._state.cleared()

    # -- watching itself (see the module) ----------------------------------------------------------------------

    def _watch(self) -> None:
        if not self._watching:
            registry = self.dirty_registry()
            if registry is not None:
                registry.watch(self, self.context.instance_id)
                self._watching = True

    def _may_change_unseen(self) -> bool:
        """Whether what a save would write may change, or differ from what the store holds, without an event
        reaching this reader."""
        return (
            self._paused  # its stream moves on without it
            or self._requested != LONG_MAX  # bounded demand (or none yet): it may fall behind
            or self._saved_mark is not None  # the store holds a watermark of its own (or nothing yet)
            or self._pending_mark is not None  # a save of its own watermark (or of nothing) awaits its commit
            or self._mark() is not None  # behind now (loaded behind, or pinned)
        )

    def keep_watching(self) -> bool:
        keep = not self.is_disposed and self._may_change_unseen()
        self._watching = keep
        return keep

    def on_start(self) -> None:
        # The demand of its query arrived while it started: a reader whose demand is not unbounded by now is
        # watched, and stays so while it is not (``_requested`` only grows), so later requests need no check.
        if self._may_change_unseen():
            self._watch()

    # -- state -------------------------------------------------------------------------------------------------

    def save_state_core(self, writer: StateWriter) -> None:
        mark = self._mark()
        writer.write(mark)
        self._pending_mark = mark

    def on_state_saved(self) -> None:
        super().on_state_saved()
        self._saved_mark = self._pending_mark
        if self._saved_mark is not None:
            self._watch()

    def load_state_core(self, reader: StateReader) -> None:
        mark = reader.read()
        if mark is None:
            pins = self.context.get_setting(PINNED_WATERMARK_SETTING)
            pinned = pins.get(self._uri) if isinstance(pins, Mapping) else None
            if pinned is not None:
                # Caught up at a checkpoint older than the engine's last one: the query was kept without running
                # since (it failed to recover), and the engine pinned where it stood.
                self._watermark = pinned
            else:
                # Caught up at the checkpoint: the engine restored its delivered watermarks before binding. A
                # start watermark from the settings is later when the state was saved at creation, after that
                # checkpoint.
                delivered = self._delivered()
                self._watermark = max(self._watermark, NO_EVENT if delivered is None else delivered)
        elif isinstance(mark, int) and not isinstance(mark, bool) and NO_EVENT <= mark <= self._appended():
            self._watermark = mark
        else:
            raise StateFormatError(f"stream reader of {self._uri!r}: a saved watermark must be None or an int from "
                                   f"-1 to the last appended event #{self._appended()}, got {mark!r:.40}")
        self._saved_mark = self._pending_mark = mark

    def _appended(self) -> int:
        engine = self._environment()
        return engine.appended_watermark(self._uri) if engine is not None else LONG_MAX

    def request(self, n: int) -> None:
        if n > 0:
            self._requested = add_demand(self._requested, n)  # bounded, it keeps the reader watched (see on_start)
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
        try:
            self._downstream.on_next(value[1])
        except Exception as error:
            self._escaped(error)

    def _escaped(self, error: Exception) -> None:
        """Operators turn user errors into on_error; what escapes them is a bug or state that cannot work. Under
        an engine it stops this query alone (after the event reached the others)."""
        engine = None if self._faulted else self._environment()
        if engine is None:
            raise error
        self._faulted = True  # report once
        self._requested = LONG_MAX  # no replacement requests from here on
        engine.reader_failed(self.context.instance_id, error)

    def read_run(  # noqa: PLR0917  (the loop's state, bound once per run)
        self,
        seq0: int,
        values: Sequence[Any],
        ticks: Sequence[int],
        start: int,
        end: int,
        timeline: Timeline,
        delivered: dict[str, int],
        faults: list[Any],
        subject: SimpleSubject[Envelope],
        subscriptions: tuple[object, ...],
        subscription: Any,
    ) -> int:
        """Read events ``start`` to ``end - 1`` of a run of this reader's stream, handed over by the engine while
        this reader is the stream's only subscriber and takes everything (its subscription is on the subject's
        fast path): per event, exactly what the engine's delivery loop and :meth:`on_next` do, in one frame (the
        clock set to the event's tick, the stream's delivered watermark, the watermark, the element downstream).

        Returns the index of the first event not read. It stops *before* an event when a timer is due by then
        (the engine runs it first), and *after* an event when work became due at its instant, a query failed,
        or the stream's subscribers changed (an inner reader subscribed, a demand became bounded): the engine
        takes over from there, as it would have after that event.
        """
        queue = timeline.queue
        uri = self._uri
        on_next = self._downstream.on_next
        watermark = self._watermark
        i = start
        while i < end:
            t = ticks[i]
            if t > timeline.clock:
                if queue.next_due <= t:
                    return i
                timeline.clock = t
            seq = seq0 + i
            delivered[uri] = seq
            i += 1
            if seq > watermark:  # always, on the engine's fast path (it never hands over a replay)
                self._watermark = watermark = seq
                try:
                    on_next(values[i - 1])
                except Exception as error:
                    self._escaped(error)
                    return i
            # The subject's own fields: its subscriber set is replaced, never changed in place.
            if queue.next_due <= t or faults or subject._subscriptions is not subscriptions or not subscription._fast:
                return i
        return i
