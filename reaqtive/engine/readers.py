"""Engine streams and the stage that reads them.

An engine stream is a hot subject whose elements are :class:`Envelope` objects ``(pos, value)``: ``pos`` is the
event's **log position**, given when it was appended to the durable ingress log (one counter across all streams,
never reused; a stream's events have increasing positions). Queries read a stream with ``Query.stream(uri)``,
which binds to a :class:`StreamReader` stage. The stage

* strips the envelope and passes the value on;
* keeps the position of the last event it passed (its **watermark**);
* ignores an event at or below its watermark, which is how a query skips what it had already processed when the
  engine hands it older events again (a catch-up after a pause, or after a recovery).

**Where a reader starts follows from the log alone** (``docs/engine.md``, "Positions follow from the log"): a reader
starts right after the log position of the event its query was handed when the reader was created (the engine's
``start_position``), and that position is its first watermark. A subscription's readers start at the position the
engine had delivered up to when it was created (its record keeps it), an inner reader that an event creates
right after that event, whether the event came the first time, in a catch-up after a pause, or in a catch-up
after a crash. So every run hands a reader the same events.

What it saves is cheap to keep unchanged: a reader that has read everything the engine delivered of its stream
(the usual case: engine queries always ask for more) saves "caught up", meaning "the position the engine had
delivered up to at the checkpoint this state belongs to" (or, for a query that stood behind the engine then,
where it stood), and stays clean while it stays caught up. So a differential checkpoint writes a subscription
only when one of its operators changed, not because its input moved on. A reader that lags behind (its query
withheld demand, or is paused or catching up) saves its own watermark.

Falling behind, or catching up, changes what a reader would save without any event reaching an operator's state,
so no change reports itself to the engine's dirty registry (:mod:`reaqtive.state.dirty`). A reader therefore
*watches itself* (the registry asks it at every checkpoint) while that can happen: while its demand is bounded,
while its query is behind, while what it saved (or would save) is a watermark of its own, and until its first
save is confirmed. A reader with unbounded demand that is caught up and saved "caught up" is not watched: every
event the engine delivers reaches it at once, so it stays caught up and clean. The same fact tells the engine which
readers can lag: only watched ones (see ``Checkpointing._lagging_readers``).

State version 1 (before log positions) saved sequence numbers of the stream; it is read back through the engine
(:meth:`~reaqtive.engine.environment.EngineEnvironment.position_after_seq`) and saved as version 2 at the next
checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, NamedTuple, Protocol, TypeVar, runtime_checkable

from reaqtive.core.arguments import arguments
from reaqtive.core.binding import register_operator
from reaqtive.core.context import OperatorContext
from reaqtive.core.errors import ReaqtiveError
from reaqtive.core.operator import OperatorBase, StateReader, StateWriter, Version
from reaqtive.core.streams import LONG_MAX, Subscriber, add_demand
from reaqtive.core.subscriptions import NOP_SUBSCRIPTION, SubscriptionHandle
from reaqtive.engine.egress import EgressStamp
from reaqtive.engine.environment import EngineEnvironment
from reaqtive.operators._fusion import FusedEntry, run_one_by_one
from reaqtive.state import StateFormatError, StatefulUnaryOperatorBase

if TYPE_CHECKING:
    from reaqtive.fluent.query import Query
    from reaqtive.scheduler.virtual import Timeline

__all__ = [
    "CAUGHT_UP_SETTING",
    "LEGACY_CAUGHT_UP_SETTING",
    "START_POSITION_SETTING",
    "Envelope",
    "LogCursor",
    "LogRun",
    "RunReader",
    "StreamNotFoundError",
    "StreamReader",
]

T = TypeVar("T")

START_POSITION_SETTING: Final = "reaqtive://engine/settings/start_position"
"""Context setting: the log position a query started at (its readers read the events after it)."""

CAUGHT_UP_SETTING: Final = "reaqtive://engine/settings/caught_up_position"
"""Context setting: the log position a reader saved as "caught up" stands at (the engine's delivered position at
the checkpoint the state belongs to, or where the query stood if it was behind the engine then)."""

LEGACY_CAUGHT_UP_SETTING: Final = "reaqtive://engine/settings/legacy_caught_up"
"""Context setting: for state of version 1 (sequence numbers), a mapping stream URI → the sequence number "caught
up" meant for this query."""

NO_EVENT: Final = -1
"""The watermark of a reader that has read nothing."""
_NEVER: Final = object()  # the saved mark of a reader never saved nor loaded


class Envelope(NamedTuple):
    """An event of an engine stream: its position in the engine's log and its value."""

    pos: int
    value: Any


class LogCursor:
    """Where a delivery loop stands in the log: the position of the event it hands to readers now (or of the last
    one it handed). Shared between the loop, which sets it per event, and the readers created meanwhile, which
    start right after it."""

    __slots__ = ("pos",)

    def __init__(self, pos: int = 0) -> None:
        self.pos = pos

    def __repr__(self) -> str:
        return f"<LogCursor {self.pos}>"


class StreamNotFoundError(ReaqtiveError, LookupError):
    """A query reads a stream the engine does not have."""


@register_operator("stream", internal=True)
class StreamReader(StatefulUnaryOperatorBase[Envelope, T], Generic[T]):
    """The running stage of ``Query.stream(uri)``: reads the engine stream ``uri``.

    State: ``None`` ("caught up": at the position of the checkpoint the state belongs to) or, for a reader that
    lags behind what the engine delivered, its own watermark (a log position); ``None`` once disposed (it reads
    nothing more, so what it saves stays the same while its stream moves on). An environment that does not say
    what it delivered gets the watermark always. Demand: passed to the stream's subscription (engine streams are
    hot subjects: a reader without demand buffers up to the stream's bound).
    """

    name = "reaqtive:stream"
    version: Version = (2,)
    state_fields = ("watermark",)
    older_versions = frozenset({(1,)})  # sequence numbers of the stream instead of log positions
    watched = False  # it watches itself, only while it may lag (see the module)

    # What it asks of the environment is looked up when needed (never per event), not held as bound methods:
    # those cost 64 bytes each per reader.
    __slots__ = (
        "_behind",
        "_faulted",
        "_pending_mark",
        "_requested",
        "_run_egress",
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
        self._behind = False  # its query is behind the engine: its events come from the query's catch-up
        self._watching = False  # the dirty registry asks this reader at every checkpoint
        self._run_egress: EgressStamp[Any] | Literal[False] | None = None  # see read_run (None: not looked at yet)

    @property
    def uri(self) -> str:
        """The stream read."""
        return self._uri

    @property
    def watermark(self) -> int:
        """The log position of the last event passed on (or where it started; ``-1``: the log's start)."""
        return self._watermark

    @property
    def behind(self) -> bool:
        """Whether its query is behind the engine (see :meth:`fall_behind`)."""
        return self._behind

    def fall_behind(self) -> None:
        """Its query fell behind the engine (paused, or catching up): the engine detached this reader from its
        stream and hands it the events again in the query's catch-up. It lags meanwhile, saves its own
        watermark, and is watched (see the module), so that the log keeps what it has not read."""
        self._behind = True
        self._watch()

    def rejoin(self) -> None:
        """Its query caught up with the engine: the stream hands it events again."""
        self._behind = False

    def subscribe_input(self) -> SubscriptionHandle:
        return NOP_SUBSCRIPTION  # the stream is found through the context, in set_context

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        # A reader starts where its query stands when it is created (the event being handed to it), and never
        # before its query's own start: an inner reader created long after its query must not be handed the older
        # events still retained in the log. Loading state overrides both.
        start = context.get_setting(START_POSITION_SETTING)
        if isinstance(start, int):
            self._watermark = start
        engine = self._environment()
        if engine is not None:
            self._watermark = max(self._watermark, engine.start_position(context.instance_id))
            self._inputs = (engine.subscribe_reader(self),)
            return
        environment = context.execution_environment
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
        """The engine's delivered position of the stream (``None``: not under an engine)."""
        engine = self._environment()
        return None if engine is None else engine.delivered_position(self._uri)

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
            self._behind  # its stream moves on without it
            or self._requested != LONG_MAX  # bounded demand (or none yet): it may fall behind
            or self._saved_mark is not None  # the store holds a watermark of its own (or nothing yet)
            or self._pending_mark is not None  # a save of its own watermark (or of nothing) awaits its commit
            or self._mark() is not None  # behind now (loaded behind)
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
            self._load_caught_up()
        elif self._is_position(mark):
            self._watermark = mark
        else:
            raise StateFormatError(f"stream reader of {self._uri!r}: a saved watermark must be None or a log position "
                                   f"from -1 to the last one given, {self._last_position()}, got {mark!r:.40}")
        self._saved_mark = self._pending_mark = mark

    def _load_caught_up(self) -> None:
        """Caught up at the checkpoint the state belongs to (or where its query stood behind the engine then). A
        start from the settings is later when the state was saved at creation, after that checkpoint."""
        caught_up = self.context.get_setting(CAUGHT_UP_SETTING)
        if not isinstance(caught_up, int):
            delivered = self._delivered()
            caught_up = NO_EVENT if delivered is None else delivered
        self._watermark = max(self._watermark, caught_up)

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        """Version 1 saved the sequence number of the last event read (``None``: caught up, which the engine's
        legacy setting says in sequence numbers); it is read back as the log position just before the next event
        of the stream, and saved in version 2 at the next checkpoint."""
        mark = reader.read()
        legacy = self.context.get_setting(LEGACY_CAUGHT_UP_SETTING)
        seq = legacy.get(self._uri) if mark is None and isinstance(legacy, Mapping) else mark
        engine = self._environment()
        if seq is None:
            self._load_caught_up()
        elif isinstance(seq, int) and not isinstance(seq, bool) and seq >= NO_EVENT:
            position = engine.position_after_seq(self._uri, seq) if engine is not None else seq
            # Its own watermark stands; "caught up" never moves a reader before its query's start.
            self._watermark = position if mark is not None else max(self._watermark, position)
        else:
            raise StateFormatError(f"stream reader of {self._uri!r} (version 1): a saved watermark must be None or a "
                                   f"sequence number >= -1, got {mark!r:.40}")
        self._saved_mark = self._pending_mark = _NEVER  # saved again, as version 2, at the next checkpoint

    def _is_position(self, mark: object) -> bool:
        if not isinstance(mark, int) or isinstance(mark, bool) or mark < NO_EVENT:
            return False
        engine = self._environment()
        return engine is None or engine.is_given_position(mark)

    def _last_position(self) -> int:
        engine = self._environment()
        return engine.last_position() if engine is not None else LONG_MAX

    def request(self, n: int) -> None:
        if n > 0:
            self._requested = add_demand(self._requested, n)  # bounded, it keeps the reader watched (see on_start)
        super().request(n)

    def on_next(self, value: Envelope) -> None:
        pos = value[0]
        if pos <= self._watermark:
            # Handed again: this reader had processed it. Like a filter, ask for a replacement.
            if self._requested != LONG_MAX:
                upstream = self._upstream
                if upstream is not None:
                    upstream.request(1)
            return
        self._watermark = pos  # no dirty flag: state_changed compares what a save would write
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

    def read_run(self, run: LogRun, start: int) -> int:
        """Take events ``start`` to ``run.end - 1`` of ``run`` (a run of this reader's stream) in one call, when
        every stage below this reader down to the engine's egress is timeless (a fused run, a count-based
        buffer, group_by's per-key steps: see :attr:`~reaqtive.core.operator.OperatorBase.timeless`). The
        engine hands it a run while this reader is its stream's only subscriber and takes everything (its
        subscription is on the subject's fast path).

        Nothing below reads the clock or schedules work, so the events up to the next timer due go down in one
        loop (one call for a stage that takes runs: :class:`RunReader`), the cursor standing at each element in
        turn (a failure is recorded at its event's position), the clock moved once, to where the engine's
        per-event loop would have left it, and the outputs are stamped and written in one call.

        Returns the index of the first event not taken: ``start`` when the stages below are not timeless (the
        engine's loop hands the events one by one) or a timer is due by the first event, less than
        ``run.end`` when a timer is due by a later one or the query stopped.
        """
        egress = self._run_egress
        if egress is None:
            egress = self._run_egress = _timeless_chain(self._downstream)
        if egress is False:
            return start
        return self._read_through(egress, run, start)

    def _read_through(self, egress: EgressStamp[Any], run: LogRun, start: int) -> int:
        """Below this reader, every stage down to the egress is timeless: hand it the events up to the next timer
        due in one loop (one call for a fused run), with the clock moved once, to where the per-event loop would
        have left it, and the outputs stamped and written in one call."""
        timeline = run.timeline
        ticks = run.ticks
        due = timeline.queue.next_due
        stop = run.end
        ordered = run.ordered
        if due <= (ticks[stop - 1] if ordered else max(ticks[start:stop])):
            # A timer is due before one of them: the events up to it go first.
            stop = start + next(k for k, tick in enumerate(ticks[start:stop]) if tick >= due)
            if stop == start:
                return start
        pos0 = run.pos0
        if pos0 + start <= self._watermark:
            return start  # handed again (not on the engine's fast path): the engine's loop, one by one
        outputs = egress.begin_run()
        cursor = run.cursor
        try:
            reached = self._hand_run(run.values, start, stop, cursor, pos0, egress, outputs)
        except Exception as error:
            reached = cursor.pos - pos0 + 1  # the element in hand was taken
            egress.end_run()  # what came out before it, as one by one
            self._escaped(error)
        else:
            egress.end_run()
        if reached > start:
            self._watermark = pos0 + reached - 1
            latest = ticks[reached - 1] if ordered else max(ticks[start:reached])
            timeline.clock = max(timeline.clock, latest)
        return reached

    def _hand_run(  # noqa: PLR0917  (the loop's state)
        self, values: Sequence[Any], start: int, stop: int, cursor: LogCursor, pos0: int, egress: EgressStamp[Any],
        outputs: list[Any],
    ) -> int:
        """Values ``start`` to ``stop - 1`` downstream, each with the cursor at its position; returns the index of
        the first not handed (``stop``, or less once this reader was disposed)."""
        downstream = self._downstream
        if isinstance(downstream, FusedEntry):
            tail = downstream.tail
            if tail is egress:  # into the egress's list: the cursor is set only where something looks at it
                return downstream.collect_run(values, start, stop, cursor, pos0, self, outputs.append)
            return downstream.on_next_run(values, start, stop, cursor, pos0, self, tail.on_next)
        # A stage that takes runs (a count buffer, group_by's per-key steps): what it hands on goes to the egress's
        # list, or to the timeless stage below it, as its on_next would hand it. (Looked up, not isinstance: a
        # protocol's check costs tens of microseconds.)
        on_next_run = getattr(downstream, "on_next_run", None)
        if on_next_run is not None:
            below = getattr(downstream, "_downstream", None)
            if below is not None:
                emit = outputs.append if below is egress else below.on_next
                return on_next_run(values, start, stop, cursor, pos0, self, emit)  # type: ignore[no-any-return]
        return run_one_by_one(values, start, stop, cursor, pos0, self, downstream.on_next)

class LogRun:
    """A run of one stream's logged events as the engine's delivery loop hands it to the stream's only reader
    (:meth:`StreamReader.read_run`): the values, their ticks, the log position of the first, where the run ends,
    the timeline whose clock they move and the loop's cursor. ``ordered``: the ticks are in order (the latest
    of a slice is its last)."""

    __slots__ = ("cursor", "end", "ordered", "pos0", "ticks", "timeline", "values")

    def __init__(  # noqa: PLR0917  (made once per slice of a run)
        self, values: Sequence[Any], ticks: Sequence[int], pos0: int, end: int, timeline: Timeline,
        cursor: LogCursor, *, ordered: bool = False,
    ) -> None:
        self.ordered = ordered
        self.values = values
        self.ticks = ticks
        self.pos0 = pos0
        self.end = end
        self.timeline = timeline
        self.cursor = cursor


@runtime_checkable
class RunReader(Protocol):
    """A stage that takes a run of elements in one call (a fused run's entry, group_by's per-key steps): see
    :meth:`~reaqtive.operators._fusion.FusedEntry.on_next_run` for the contract."""

    def on_next_run(  # noqa: PLR0917
        self, values: Sequence[Any], start: int, end: int, cursor: Any, pos0: int, source: OperatorBase[Any],
        emit: Callable[[Any], object],
    ) -> int: ...


_CHAIN_LIMIT: Final = 64  # how far down a chain of stages is followed to the egress


def _timeless_chain(downstream: object) -> EgressStamp[Any] | Literal[False]:
    """The engine's egress below ``downstream`` when every stage between is timeless (see
    :attr:`~reaqtive.core.operator.OperatorBase.timeless`; a fused run's stages are) and the egress takes its
    outputs as ``(seq, value)``: handing a run of elements down then needs no clock per element. Otherwise
    ``False``."""
    node = downstream
    for _ in range(_CHAIN_LIMIT):
        if isinstance(node, FusedEntry):
            node = node.tail
        elif isinstance(node, EgressStamp):
            return node if node.takes_outputs else False
        elif isinstance(node, OperatorBase) and node.timeless:
            node = node._downstream
        else:
            return False
    return False
