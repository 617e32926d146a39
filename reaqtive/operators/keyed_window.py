"""``aggregate_by_key``: one aggregate per key and time window (tumbling, hopping or session windows aligned to a
fixed origin), its per-key state in a keyed state table, its windows closed by one shared timer per window end."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, Final, Generic, Literal, TypeVar

from reaqtive.core.arguments import arguments, require_callable, require_positive_duration, require_time
from reaqtive.core.binding import register_operator
from reaqtive.core.context import OperatorContext
from reaqtive.core.error_policy import NO_ELEMENT
from reaqtive.core.expression import Expression, OperatorCall
from reaqtive.core.operator import StateReader, StateWriter, Version
from reaqtive.core.scheduler_interface import EARLIEST, NEVER, Scheduler, YieldToken, utc
from reaqtive.core.streams import Subscriber
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.operators._emitter import PullingEmitterBase
from reaqtive.operators._places import number_of, read_number
from reaqtive.operators.window_aggregates import (
    AVERAGE,
    COUNT,
    FOLD,
    KINDS,
    MAX,
    MIN,
    SUM,
    WindowAggregate,
    add_exact,
)
from reaqtive.scheduler import YieldableActionTask
from reaqtive.scheduler.clock import EPOCH  # the default origin of window boundaries (as in Spark, Flink, Bytewax)
from reaqtive.state.fields import RecordReader, time_bounds
from reaqtive.state.keyed import KeyedPage, KeyedStateTable

__all__ = [
    "AGGREGATES",
    "EPOCH",
    "MAX_HOPS",
    "AggregateByKey",
    "AggregateByKeyArgs",
    "AggregateByKeyHopping",
    "AggregateByKeySession",
    "AggregateName",
    "Fold",
    "Hopping",
    "Session",
    "Tumbling",
    "WindowAggregate",
    "WindowRow",
    "aggregate_by_key",
    "bind_aggregate_by_key",
]

T = TypeVar("T")

CLOSE_SLICE: Final = 4096
"""The most windows a timer closes before it may give way to the host (see ``_on_timer``)."""

MAX_HOPS: Final = 1000
"""The most hopping windows one element may fall in (``ceil(size / slide)``): each is a record and a fold step."""

AggregateName = Literal["count", "sum", "average", "min", "max"]
AGGREGATES: Final[tuple[AggregateName, ...]] = ("count", "sum", "average", "min", "max")
"""The built-in aggregates, by name."""

WindowRow = tuple[Any, datetime, datetime, Any]
"""What a closed window emits: ``(key, window_start, window_end, value)``."""

_US: Final = timedelta(microseconds=1)
_OP: Final = "aggregate_by_key"
_PAGE: Final = KeyedPage.name  # named in the errors about a record, which a page unit holds

# The aggregate, as a small int the per-element path compares (window_aggregates: the first four start from the
# first value, the first two add, exactly)
_SUM, _AVERAGE, _MIN, _MAX, _COUNT, _FOLD = SUM, AVERAGE, MIN, MAX, COUNT, FOLD
_KINDS: Final = KINDS


# -- the window and aggregate specifications ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tumbling:
    """Windows of ``size``, one after the other: ``[origin + k*size, origin + (k+1)*size)``."""

    size: timedelta

    def __post_init__(self) -> None:
        require_positive_duration(self.size, "Tumbling", "size")


@dataclass(frozen=True, slots=True)
class Hopping:
    """Windows of ``size`` opening every ``slide``: ``[origin + k*slide, origin + k*slide + size)``. They overlap
    when ``slide < size`` (an element counts in each window it falls in) and leave gaps when ``slide > size``
    (elements in a gap are in no window). An element may fall in at most :data:`MAX_HOPS` windows."""

    size: timedelta
    slide: timedelta

    def __post_init__(self) -> None:
        require_positive_duration(self.size, "Hopping", "size")
        require_positive_duration(self.slide, "Hopping", "slide")
        if _hops(self.size, self.slide) > MAX_HOPS:
            raise ValueError(
                f"Hopping: an element would fall in {_hops(self.size, self.slide)} windows (size / slide), "
                f"more than {MAX_HOPS}"
            )


@dataclass(frozen=True, slots=True)
class Session:
    """Per key, a window that lasts while its elements come less than ``gap`` apart: it opens at an element and
    closes ``gap`` after the last one (not aligned to the origin: its bounds are its elements' times)."""

    gap: timedelta

    def __post_init__(self) -> None:
        require_positive_duration(self.gap, "Session", "gap")


@dataclass(frozen=True, slots=True)
class Fold:
    """A custom aggregate: each window starts from ``seed``, folds each value in with ``accumulator(acc,
    value)``, and emits ``result_selector(acc)`` (``acc`` without one). ``seed`` is shared by every window, so
    ``accumulator`` returns a new value rather than changing ``acc`` (plain values: the state codec saves them)."""

    seed: Any
    accumulator: Callable[[Any, Any], Any]
    result_selector: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        require_callable(self.accumulator, "Fold", "accumulator")
        if self.result_selector is not None:
            require_callable(self.result_selector, "Fold", "result_selector")


def _hops(size: timedelta, slide: timedelta) -> int:
    return -(-size // slide)


# -- the builder -----------------------------------------------------------------------------------------------


def aggregate_by_key(
    key_selector: Callable[[Any], Any],
    window: Tumbling | Hopping | Session,
    aggregate: AggregateName | Fold = "count",
    value_selector: Callable[[Any], Any] | None = None,
    *,
    origin: datetime = EPOCH,
) -> OperatorCall[WindowRow]:
    """One row per key and closed time window: ``(key, window_start, window_end, value)``, ``value`` the
    ``aggregate`` of ``value_selector(element)`` (the element itself without one) over the key's elements of
    that window: ``"count"``, ``"sum"``, ``"average"``, ``"min"``, ``"max"`` or a :class:`Fold`.

    >>> from datetime import timedelta
    >>> from reaqtive.operators.keyed_window import Tumbling
    >>> from reaqtive.testing import TestScheduler, on_completed, on_next
    >>> scheduler = TestScheduler()  # one tick is one second, tick 200 is 00:03:20
    >>> xs = scheduler.create_hot_observable(on_next(201, ("a", 1)), on_next(203, ("b", 5)),
    ...                                      on_next(207, ("a", 3)), on_next(232, ("a", 4)), on_completed(235))
    >>> def show(row):
    ...     key, start, end, value = row
    ...     return f"{key} {start:%M:%S}-{end:%M:%S} {value}"
    >>> scheduler.start(lambda: xs.aggregate_by_key(lambda e: e[0], Tumbling(timedelta(seconds=10)), "sum",
    ...                                             lambda e: e[1]).map(show)).messages
    [OnNext('a 03:20-03:30 4')@210, OnNext('b 03:20-03:30 5')@210, OnNext('a 03:50-04:00 4')@235, OnCompleted()@235]

    **Windows.** ``Tumbling(size)``, ``Hopping(size, slide)`` and ``Session(gap)``. Tumbling and hopping windows
    are aligned to ``origin`` (an aware ``datetime``, the Unix epoch by default), the same for every key, as in
    Spark, Flink and Bytewax: ``[origin + k*slide, origin + k*slide + size)``. A session window is a key's run of
    elements less than ``gap`` apart; it closes ``gap`` after the last one. Time is the scheduler's clock when an
    element arrives (under the engine with ``clock="event"``, the event's time).

    **Rows.** A window opens when its key's first element of it arrives, and closes at its end: one timer per
    window end serves every key whose window ends then, and an element at or after an end closes the windows
    ending there first. The rows of one end come in the order their windows opened (a session's: the order it
    last moved its end), ends in time order. An empty window produces no row (so ``average`` never divides by
    zero), and a key without elements costs nothing. The source's completion closes every open window (in end
    order), then completes; its error goes downstream at once. An error of a selector, of the aggregate (``"a"
    + 1``, ``min`` of values that do not compare) or of a key that cannot be hashed fails the query; under a skip
    policy it skips the element instead (no window counts it: an element of several hopping windows counts in all
    or none). An error of the result (a ``Fold``'s result selector, ``average``'s division) fails the query, or,
    skipped, closes that window without a row.

    ``"count"`` counts elements (``value_selector`` is not called); ``"sum"`` adds the values from the first (so
    timedeltas sum too), ints and floats exactly: a float sum is the exact sum rounded once, in any order
    (:mod:`~reaqtive.operators.window_aggregates`); ``"average"`` is that sum divided by the count; ``"min"`` and
    ``"max"`` keep the first of equal values. This is the keyed form of ``group_by(k).flat_map(lambda g:
    g.window(d).flat_map(...))``, whose windows open at each group's creation and whose idle groups emit empty
    windows (``docs/higher-order.md``, "Keyed windowed aggregation").

    **State.** One record per open window in a keyed state table (paged: a checkpoint writes only the pages of
    keys that changed; a closed window's key leaves the table), the rows waiting for demand, whether the source
    completed and whether it was asked for everything. The index of window ends is rebuilt from the records.

    **Demand.** Everything from the source once the downstream asks; rows wait for demand in a queue of
    ``MAX_QUEUE_SIZE`` rows beyond the demand (a slower downstream is a ``LimitExceededError``).

    Persisted as ``reaqtive:aggregate_by_key`` (``+hopping``, ``+session``).
    """
    require_callable(key_selector, _OP, "key_selector")
    if value_selector is not None:
        require_callable(value_selector, _OP, "value_selector")
    require_time(origin, _OP, "origin")
    return OperatorCall(_OP, (key_selector, _window_argument(window), _aggregate_argument(aggregate),
                              value_selector, origin))


def _window_argument(window: object) -> tuple[Any, ...]:
    """A window specification as the node holds it (plain data, which a store persists)."""
    if type(window) is Tumbling:
        return ("tumbling", window.size)
    if type(window) is Hopping:
        return ("hopping", window.size, window.slide)
    if type(window) is Session:
        return ("session", window.gap)
    raise TypeError(f"{_OP}: window must be Tumbling, Hopping or Session, got {type(window).__name__}")


def _aggregate_argument(aggregate: object) -> str | tuple[Any, ...]:
    """An aggregate as the node holds it: its name, or ``("fold", seed, accumulator, result_selector)``."""
    if type(aggregate) is Fold:
        return ("fold", aggregate.seed, aggregate.accumulator, aggregate.result_selector)
    if isinstance(aggregate, str):
        if aggregate not in _KINDS:
            raise ValueError(f"{_OP}: aggregate must be one of {', '.join(AGGREGATES)} or a Fold, got {aggregate!r}")
        return aggregate
    raise TypeError(
        f"{_OP}: aggregate must be one of {', '.join(AGGREGATES)} or a Fold, got {type(aggregate).__name__}"
    )


_WINDOW_EXPECTED: Final = (
    f"('tumbling', size), ('hopping', size, slide) or ('session', gap), with positive timedeltas and at most "
    f"{MAX_HOPS} hops"
)
_AGGREGATE_EXPECTED: Final = "'count', 'sum', 'average', 'min', 'max' or ('fold', seed, accumulator, result_selector)"


def _positive(value: object) -> bool:
    return type(value) is timedelta and value > timedelta(0)


def _valid_window(value: object) -> bool:
    if type(value) is not tuple or not value or type(value[0]) is not str:
        return False
    kind, spans = value[0], value[1:]
    if kind in ("tumbling", "session"):
        return len(spans) == 1 and _positive(spans[0])
    return (
        kind == "hopping" and len(spans) == 2 and _positive(spans[0]) and _positive(spans[1])
        and _hops(spans[0], spans[1]) <= MAX_HOPS
    )


def _valid_aggregate(value: object) -> bool:
    if type(value) is str:
        return value in _KINDS
    return (
        type(value) is tuple and len(value) == 4 and value[0] == "fold" and callable(value[2])
        and (value[3] is None or callable(value[3]))
    )


@dataclass(frozen=True, slots=True)
class AggregateByKeyArgs:
    """The arguments of an ``aggregate_by_key`` node: ``(source, key_selector, window, aggregate,
    value_selector, origin)``, the window and the aggregate as plain data (see :func:`aggregate_by_key`)."""

    source: Subscribable[Any]
    key_selector: Callable[[Any], Any]
    window: tuple[Any, ...]
    aggregate: str | tuple[Any, ...]
    value_selector: Callable[[Any], Any] | None
    origin: datetime

    @classmethod
    def read(cls, query: Expression[Any]) -> AggregateByKeyArgs:
        """The checked arguments of ``query`` (:class:`~reaqtive.core.errors.OperatorArgumentError` if they do not
        fit)."""
        args = arguments(query, "source", "key_selector", "window", "aggregate", "value_selector", "origin")
        window, aggregate = args.value(2), args.value(3)
        if not _valid_window(window):
            args.fail(2, _WINDOW_EXPECTED)
        if not _valid_aggregate(aggregate):
            args.fail(3, _AGGREGATE_EXPECTED)
        return cls(
            args.source(0),
            args.function(1),
            window,  # type: ignore[arg-type]  # checked above
            aggregate,  # type: ignore[arg-type]
            args.optional_function(4),
            args.time(5),
        )

    @property
    def kind(self) -> str:
        """``"tumbling"``, ``"hopping"`` or ``"session"``."""
        kind: str = self.window[0]
        return kind


@register_operator(_OP, frames=4, builder=aggregate_by_key, args=AggregateByKeyArgs)
def bind_aggregate_by_key(query: Expression[Any], subscriber: Subscriber[Any]) -> SubscriptionHandle:
    """The binder of :func:`aggregate_by_key`: one stage per kind of window (each saves its own records)."""
    args = AggregateByKeyArgs.read(query)
    if args.kind == "tumbling":
        return AggregateByKey(args, subscriber)
    if args.kind == "hopping":
        return AggregateByKeyHopping(args, subscriber)
    return AggregateByKeySession(args, subscriber)


# -- the stages ------------------------------------------------------------------------------------------------


class _KeyedWindows(PullingEmitterBase[T, WindowRow], WindowAggregate, Generic[T]):
    """What the three stages share: the table, the index of window ends, the shared timer, the rows waiting for
    demand, completion and state. Subclasses implement ``on_next`` and the record layout.

    **Times** are integer microseconds from the origin inside (exact, and cheap to compare); rows carry
    datetimes. **The index** maps each pending window end to the table keys of the windows ending then, in the
    order they opened; ends only ever grow (the clock does not go back, and a new window ends after every
    window already open, or together with one), so a deque keeps them in order. It is not saved: it is rebuilt
    from the records (grouped by end, in the table's first-put order, which is the order windows opened: a
    closed window's key leaves the table; sessions sort by a sequence number). **One timer** is
    outstanding, at the earliest end; when it runs it closes what is due and arms the next. An element at or
    after the earliest end closes what is due before it counts, so the rows do not depend on whether the timer
    or an element of the same instant runs first (nor on a restart in between).

    A lock (the emitter's) serializes elements, the timer and demand: they may run on different threads.
    """

    version: Version = (3,)
    # 3: the outstanding timer (due, armed, number); 2: a sum may hold an ExactSum; 1's float sums are exact values
    # to go on from. 1 and 2 have no timer: it is re-armed at the restart's tick
    older_versions = frozenset({(1,), (2,)})
    record_fields: ClassVar[int]
    """The number of fields of a record."""

    __slots__ = (
        "_accumulator",
        "_armed",
        "_closing",
        "_ends",
        "_key_selector",
        "_kind",
        "_origin",
        "_recovered",
        "_result_selector",
        "_scheduler",
        "_seed",
        "_source",
        "_span",
        "_table",
        "_timer",
        "_timer_due",
        "_value_selector",
    )

    def __init__(self, args: AggregateByKeyArgs, downstream: Subscriber[WindowRow]) -> None:
        super().__init__(downstream)
        self._source: Subscribable[T] = args.source
        self._key_selector = args.key_selector
        self._value_selector = args.value_selector
        self._origin = utc(args.origin)
        self._span = args.window[1] // _US  # size (tumbling, hopping) or gap (session), in microseconds
        self._kind, self._seed, self._accumulator, self._result_selector = self.parts(args.aggregate)
        # state
        self._table: KeyedStateTable[Any] = KeyedStateTable()
        # not state
        self._ends: deque[int] = deque()  # pending window ends, earliest first
        self._closing: dict[int, list[Any]] = {}  # end -> table keys of the windows ending then
        self._timer_due: int | None = None  # the end the outstanding timer is for
        # state: the outstanding timer's task (its number in its armed tick: read at a checkpoint, never per
        # element) and when it was armed, microseconds from the origin: its place in line, which a recovered one keeps
        self._timer: YieldableActionTask | None = None
        self._armed = 0
        self._recovered: tuple[int, int, int | None] | None = None  # the loaded timer, until on_start arms it
        self._scheduler: Scheduler | None = None

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self._scheduler = context.scheduler  # MissingSchedulerError without one: windows need a clock
        self._table.attach(self, context)

    def subscribe_input(self) -> SubscriptionHandle:
        return self._source.subscribe(self)

    # -- time ------------------------------------------------------------------------------------------------

    def _micros(self, when: datetime) -> int:
        """``when`` in microseconds from the origin."""
        return (when - self._origin) // _US

    def _at(self, micros: int) -> datetime:
        """The time ``micros`` microseconds from the origin (clamped to the representable times)."""
        try:
            return self._origin + timedelta(microseconds=micros)
        except OverflowError:
            return NEVER if micros > 0 else EARLIEST

    # -- records (subclasses) --------------------------------------------------------------------------------

    def _end_of(self, table_key: Any, record: tuple[Any, ...]) -> int:
        """When the window of ``record`` ends (microseconds from the origin): a span after its start, the
        record's first field (tumbling and hopping windows)."""
        end: int = record[0] + self._span
        return end

    def _check_record(self, table_key: Any, reader: RecordReader, bounds: tuple[int | None, int | None]) -> None:
        """Check a loaded record's own fields (``bounds``: the earliest and latest time the host allows)."""
        raise NotImplementedError

    # -- the index and the timer (lock held) ------------------------------------------------------------------

    def _add_to_index(self, table_key: Any, end: int) -> datetime | None:
        """The window of ``table_key`` now ends at ``end``: index it; the due time of a timer to schedule."""
        keys = self._closing.get(end)
        if keys is not None:
            keys.append(table_key)
            return None
        self._closing[end] = [table_key]
        self._ends.append(end)
        return self._arm()

    def _arm(self) -> datetime | None:
        """The due time of the timer the earliest end needs, if the outstanding one does not serve it."""
        ends = self._ends
        if self._extends:
            self._drop_stale()
        if not ends:
            return None
        first = ends[0]
        due = self._timer_due
        if due is not None and due <= first:
            return None  # it runs first, then arms the next
        self._timer_due = first
        when = self._at(first)
        if when is NEVER:
            self._timer = None  # a window ending past datetime.max closes at completion only
            return None
        return when

    def _close_until(self, now: int | None) -> bool:
        """Close every window ending at or before ``now`` (all of them: ``None``), ends in order; ``False``: the
        stage failed doing it."""
        ends, closing = self._ends, self._closing
        while ends and (now is None or ends[0] <= now):
            end = ends.popleft()
            if not self._close_keys(end, closing.pop(end)):
                return False
        self._closed()
        return True

    def _close_keys(self, end: int, table_keys: list[Any]) -> bool:
        """Close the windows of ``table_keys`` ending at ``end`` and queue their rows; ``False``: the stage failed."""
        try:
            rows = self._close_end(end, table_keys)
        except Exception as error:  # the user's aggregate or result selector, not skipped (see _row_failed)
            self._set_error(error)
            return False
        return self._queue(rows)

    def _row_failed(self, error: Exception) -> None:
        """The result of a closing window raised (lock held): the query's error policy skips the row (the window
        closes without one: return) or stops the query (raise)."""
        if not self._skips(error, NO_ELEMENT):
            raise error

    def _close_end(self, end: int, table_keys: list[Any]) -> list[WindowRow]:
        """Close the windows of ``table_keys``, which end at ``end``, and return their rows (the user's result
        selector may raise). Aligned windows that end together also start together: one pair of datetimes serves
        every row."""
        pop = self._table.pop
        start_at, end_at = self._at(end - self._span), self._at(end)
        paired, kind, result = self._paired, self._kind, self._result
        rows: list[WindowRow] = []
        append = rows.append
        for table_key in table_keys:
            record: tuple[Any, ...] = pop(table_key)  # type: ignore[assignment]  # indexed: it is there
            count, acc = record[1], record[2]
            try:
                value = count if kind is _COUNT else result(count, acc)
            except Exception as error:
                self._row_failed(error)
                continue
            append((table_key[0] if paired else table_key, start_at, end_at, value))
        return rows

    def _close_slice(self, now: int) -> bool:
        """Close windows ending at or before ``now``, ends in order, at most :data:`CLOSE_SLICE` keys; whether due
        ones remain (``False`` also when the stage failed). A window not closed yet stays in the table and the
        index, in its order, so a checkpoint between two slices saves a state a restart goes on from: the
        closed ones' rows are in the emitter's queue or downstream, the others close after it, in the same order."""
        ends, closing = self._ends, self._closing
        budget = CLOSE_SLICE
        while ends and ends[0] <= now and budget > 0:
            end = ends[0]
            keys = closing[end]
            if len(keys) > budget:
                chunk = keys[:budget]
                del keys[:budget]
            else:
                chunk = closing.pop(end)
                ends.popleft()
            budget -= len(chunk)
            if not self._close_keys(end, chunk):
                return False
        self._closed()
        return bool(ends) and ends[0] <= now

    def _drop_stale(self) -> None:
        """Forget the earliest ends whose every window moved its end since (sessions): they need no timer."""

    _extends: ClassVar[bool] = False
    """Whether a window's end moves (a session): an index entry may then be stale."""

    _paired: ClassVar[bool] = False
    """Whether a table key is ``(key, window start)`` (hopping: a key has several windows open)."""

    def _closed(self) -> None:
        """Windows were closed (a hook for the tumbling stage's cached window)."""

    def _schedule(self, due: datetime, armed: int | None = None, number: int | None = None) -> None:
        """Schedule the timer at ``due`` (once per window end, never per element); ``armed`` and ``number``: when a
        recovered timer was armed and its number in that tick (else now, and a new number)."""
        scheduler = self._scheduler
        assert scheduler is not None
        if armed is None:
            self._armed = self._micros(scheduler.now)
            task = YieldableActionTask(self._on_timer)
        else:
            self._armed = armed
            task = YieldableActionTask(self._on_timer, armed=self._at(armed), arrival=number)
        self._timer = task
        scheduler.schedule(task, due=due)

    def _on_timer(self, token: YieldToken = YieldToken.NONE) -> bool:
        """Close the windows due, a slice of :data:`CLOSE_SLICE` keys at a time, each slice's rows emitted before
        the next; between slices it gives way when the host asks (``False``: run again at the same tick), so a
        window end closing 100,000 keys does not hold a checkpoint for the whole of it."""
        if self._disposed:
            return True  # a disposed operator's timer may still run
        scheduler = self._scheduler
        assert scheduler is not None
        now = self._micros(scheduler.now)
        while True:
            with self._lock:
                if self._source_done or self._error is not None:
                    self._timer_due = self._timer = None
                    return True
                more = self._close_slice(now)
                due = None
                if not more:  # while more are due, _timer_due stays set: this task is the timer
                    self._timer_due = self._timer = None
                    due = self._arm() if self._error is None else None
            if due is not None:
                self._schedule(due)
            self._drain()
            if not more:
                return True
            if token.is_yield_requested:
                self._armed = now  # it goes back in line now, with a new number
                self._state.changed = True
                return False

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def on_start(self) -> None:
        if self._source_done:  # recovered while emitting the last rows: no source, no timer
            upstream = self._upstream
            self._upstream_terminated()
            if upstream is not None:
                upstream.cancel()
        else:
            armed: int | None = None
            number: int | None = None
            with self._lock:
                self._timer_due = None
                due = self._arm()
                earliest = self._ends[0] if self._ends else None  # (what _arm armed for)
                recovered, self._recovered = self._recovered, None
                if recovered is not None and (earliest is None or recovered[0] <= earliest):
                    # the timer as it stood (also one that only arms the next end, as it would have), in line
                    # where it was armed
                    self._timer_due, armed, number = recovered
                    when = self._at(recovered[0])
                    due = None if when is NEVER else when
            self._ask_again()  # the source had been asked for everything
            if due is not None:
                self._schedule(due, armed, number)
        self._running = True
        self._drain()

    def on_dispose(self) -> None:
        self._table.dispose()

    def on_complete(self) -> None:
        self._upstream_terminated()
        with self._lock:
            if self._error is None and not self._source_done:
                self._close_until(None)
                self._source_done = True
                self._state.changed = True
        self._drain()


    def on_next(self, value: T) -> None:
        """An element (hopping and session windows; the tumbling stage inlines its own path): its key and value
        selected, the windows due by now closed, then :meth:`_add` under the lock; the timers it asks for are
        scheduled once the lock is let go."""
        scheduler = self._scheduler
        assert scheduler is not None
        now = self._micros(scheduler.now)
        try:
            key = self._key_selector(value)
            selector = self._value_selector
            item = value if selector is None or self._kind is _COUNT else selector(value)
        except Exception as error:
            self._user_error(error, value)
            return
        lock = self._lock
        lock.acquire()
        try:
            if self._error is not None or self._source_done:
                return
            ends = self._ends
            if ends and ends[0] <= now and not self._close_until(now):
                return
            dues = self._add(key, item, now, value)
        finally:
            lock.release()
            if self._pending or self._error is not None:
                self._drain()
        for due in dues:
            self._schedule(due)

    def _add(self, key: Any, value: Any, now: int, element: object) -> list[datetime]:
        """``element`` (its key and selected value) into its windows at ``now`` (lock held): the times the
        timer must be scheduled at for the windows it opened."""
        raise NotImplementedError

    def _failed(self, error: Exception, element: object) -> None:
        """A user function or a key failed on ``element`` (lock held, nothing of the element in the table yet):
        the query's error policy skips the element or stops the query."""
        if not self._skips(error, element):
            self._set_error(error)

    # -- state -------------------------------------------------------------------------------------------------

    def save_state_core(self, writer: StateWriter) -> None:
        self._table.save(writer)
        writer.write(list(self._pending))
        writer.write(self._source_done)
        writer.write(self._pulled)
        # (once the source completed, a pending timer only finds nothing to do)
        timer = self._timer if self._timer_due is not None and not self._source_done else None
        writer.write(None if timer is None else self._timer_due)
        writer.write(None if timer is None else self._armed)
        writer.write(number_of(timer))  # (read here, never per element)

    def load_state_core(self, reader: StateReader, *, timer: bool = True) -> None:
        self._table.load(reader)  # hosted, the pages are back when it returns
        bounds = self._bounds()
        pending = reader.read_list("pending")
        for index, row in enumerate(pending):
            self._check_row(reader, f"pending[{index}]", row, bounds)
        self._pending = deque(pending)
        self._source_done = reader.read_bool("source done")
        self._load_pulled(reader.read_bool("pulled"))
        if self._source_done and len(self._table):
            raise reader.invalid("source done", "False while windows are open", True)
        self._recovered = self._read_timer(reader, bounds) if timer else None
        self._rebuild(reader, bounds)

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        # versions 1 and 2: the same fields without the timer (re-armed at the restart's tick); a left fold's float
        # sum of version 1 goes on, exactly
        self.load_state_core(reader, timer=False)

    def _read_timer(
        self, reader: StateReader, bounds: tuple[int | None, int | None]
    ) -> tuple[int, int, int | None] | None:
        """The saved timer: ``(due, armed, number)`` (microseconds from the origin; its number in the armed tick or
        ``None``), or ``None``. It was armed within the clock's bounds, for a window end at most a span later."""
        earliest, latest = bounds
        due = reader.read_optional_int("timer due", -(2**62), 2**62)
        armed = reader.read_optional_int(
            "timer armed", -(2**62) if earliest is None else earliest - self._span, 2**62 if latest is None else latest
        )
        number = read_number(reader)
        if due is None and armed is None and number is None:
            return None
        if due is None or armed is None or due > armed + self._span or self._source_done:
            raise reader.invalid(
                "timer", "due, armed and number of a window end at most a span after it was armed, or none of "
                "them (and none once the source completed)", [due, armed, number]
            )
        return due, armed, number

    def _bounds(self) -> tuple[int | None, int | None]:
        """The earliest and latest clock the host says this state can hold, in microseconds."""
        earliest, latest = time_bounds(self.context)
        return (
            None if earliest is None else self._micros(earliest),
            None if latest is None else self._micros(latest),
        )

    def _check_row(self, reader: StateReader, field: str, row: object, bounds: tuple[int | None, int | None]) -> None:
        """A loaded row: ``(key, start, end, value)``, with window bounds this stage can have made."""
        if type(row) is not tuple or len(row) != 4:
            raise reader.invalid(field, "a row (key, window start, window end, value)", row)
        start, end = row[1], row[2]
        for name, when in (("start", start), ("end", end)):
            if type(when) is not datetime or when.utcoffset() is None:
                raise reader.invalid(f"{field} {name}", "an aware datetime", when)
        earliest, latest = bounds
        micros = self._micros(start)
        if (earliest is not None and micros + self._span <= earliest) or (latest is not None and micros > latest):
            raise reader.invalid(f"{field} start", "a window start within the host's clock bounds", start)
        if not self._valid_bounds(micros, self._micros(end) if end != NEVER else None):
            raise reader.invalid(f"{field} end", "the end of a window of this query", end)

    def _valid_bounds(self, start: int, end: int | None) -> bool:
        """Whether a window of this stage can span ``start`` to ``end`` (``None``: past datetime.max)."""
        raise NotImplementedError

    def _rebuild(self, reader: StateReader, bounds: tuple[int | None, int | None]) -> None:
        """Check every loaded record and rebuild the index of ends from them (in the table's order)."""
        where = getattr(reader, "where", f"operator {self.name!r}")
        groups: dict[int, list[Any]] = {}
        fields = self.record_fields
        for table_key, record in self._table.items():
            context = f"{where}: the record of key {table_key!r:.60} (a {_PAGE!r} unit)"
            if len(record) != fields:
                raise RecordReader(record, context).invalid("record", f"a record of {fields} fields", record)
            self._check_record(table_key, RecordReader(record, context), bounds)
            groups.setdefault(self._end_of(table_key, record), []).append(table_key)
        self._ends = deque(sorted(groups))
        self._closing = groups

    def _check_window_record(self, reader: RecordReader, bounds: tuple[int | None, int | None], slide: int) -> int:
        """Check ``(start, count, acc)`` of an aligned window; return its start."""
        earliest, latest = bounds
        start = reader.read_int("window start", minimum=-(2**62), maximum=2**62)
        if start % slide:
            raise reader.invalid("window start", f"aligned to the origin (a multiple of {slide} us)", start)
        if (earliest is not None and start + self._span <= earliest) or (latest is not None and start > latest):
            raise reader.invalid("window start", "within the host's clock bounds", start)
        self._check_count_and_acc(reader)
        return start

    def _check_count_and_acc(self, reader: RecordReader) -> None:
        reader.read_int("count", minimum=1)
        acc = reader.read()  # the user's value, but for count, which has none
        if self._kind is _COUNT and acc is not None:
            raise reader.invalid("accumulator", "None (count has none)", acc)


class AggregateByKey(_KeyedWindows[T], Generic[T]):
    """The running stage of :func:`aggregate_by_key` over tumbling windows. Record: ``(window start, count,
    accumulator)`` under the key.

    The element path caches the current window (its bounds as datetimes, and the index list of its end), so an
    element of the current window costs two comparisons of times, not a conversion to microseconds; a
    tumbling window's end is also the earliest pending end, so the cache check is the check for windows due.
    """

    name = "reaqtive:aggregate_by_key"
    record_fields = 3

    __slots__ = ("_current", "_high", "_low", "_start")

    def __init__(self, args: AggregateByKeyArgs, downstream: Subscriber[WindowRow]) -> None:
        super().__init__(args, downstream)
        self._low = NEVER  # the current window, empty until the first element
        self._high = EARLIEST
        self._start = 0
        self._current: list[Any] | None = None  # the index list of the current window's end, once one opened

    def _closed(self) -> None:
        self._low, self._high, self._current = NEVER, EARLIEST, None

    def _roll(self, now: datetime) -> bool:
        """Close what is due by ``now`` and make its window the current one (lock held); ``False``: the stage
        failed closing."""
        micros = self._micros(now)
        if not self._close_until(micros):
            return False
        span = self._span
        start = micros - micros % span
        self._start = start
        self._low, self._high = self._at(start), self._at(start + span)
        self._current = self._closing.get(start + span)
        return True

    def on_next(self, value: T) -> None:
        scheduler = self._scheduler
        assert scheduler is not None
        now = scheduler.now
        due = None
        element = value
        try:
            key = self._key_selector(value)
            selector = self._value_selector
            if selector is not None and self._kind is not _COUNT:
                value = selector(value)
        except Exception as error:
            self._user_error(error, element)
            return
        lock = self._lock
        lock.acquire()  # acquire/release: a third of the cost of ``with`` on CPython 3.11
        try:
            if self._error is not None or self._source_done:
                return
            if not self._low <= now < self._high and not self._roll(now):
                return
            table = self._table
            try:
                record = table.get(key)
                kind = self._kind
                if record is None:
                    table.put(key, (self._start, 1, value if kind <= _MAX else self._first(value)))
                    current = self._current
                    if current is None:
                        end = self._start + self._span
                        due = self._add_to_index(key, end)
                        self._current = self._closing[end]
                    else:
                        current.append(key)
                else:
                    acc = record[2]
                    if kind > _AVERAGE:
                        acc = self._step(acc, value)
                    elif type(acc) is int and type(value) is int:
                        acc = acc + value  # type: ignore[operator]  # (mypy does not narrow T by type(value))
                    else:
                        acc = add_exact(acc, value)  # floats exactly (window_aggregates)
                    table.put(key, (record[0], record[1] + 1, acc))
            except Exception as error:  # the aggregate, or a key that cannot be hashed
                self._failed(error, element)
        finally:
            lock.release()
            if self._pending or self._error is not None:
                self._drain()
        if due is not None:
            self._schedule(due)

    def _check_record(self, table_key: Any, reader: RecordReader, bounds: tuple[int | None, int | None]) -> None:
        self._check_window_record(reader, bounds, self._span)

    def _valid_bounds(self, start: int, end: int | None) -> bool:
        return start % self._span == 0 and end in (start + self._span, None)


class AggregateByKeyHopping(_KeyedWindows[T], Generic[T]):
    """The running stage of :func:`aggregate_by_key` over hopping windows. Each open window of a key is a record
    of its own, ``(window start, count, accumulator)`` under ``(key, window start)``: a window that closes
    leaves the table alone, and the table's first-put order is the order windows opened."""

    name = "reaqtive:aggregate_by_key+hopping"
    record_fields = 3
    _paired = True

    __slots__ = ("_slide",)

    def __init__(self, args: AggregateByKeyArgs, downstream: Subscriber[WindowRow]) -> None:
        super().__init__(args, downstream)
        self._slide = args.window[2] // _US

    def _add(self, key: Any, value: Any, now: int, element: object) -> list[datetime]:
        size, slide, table = self._span, self._slide, self._table
        # The element's record in each window holding ``now`` (start <= now < start + size, starts on multiples
        # of slide), all computed before any is put: an aggregate failing in one window leaves every window as
        # it was (the element is skipped or the query stops).
        updates: list[tuple[tuple[Any, int], tuple[Any, ...], bool]] = []
        try:
            for start in range(((now - size) // slide + 1) * slide, now + 1, slide):
                table_key = (key, start)
                record = table.get(table_key)
                if record is None:
                    updates.append((table_key, (start, 1, self._first(value)), True))
                else:
                    updates.append((table_key, (start, record[1] + 1, self._step(record[2], value)), False))
        except Exception as error:
            self._failed(error, element)
            updates = []
        dues: list[datetime] = []
        for table_key, record, opened in updates:
            table.put(table_key, record)
            if opened:
                due = self._add_to_index(table_key, table_key[1] + size)
                if due is not None:
                    dues.append(due)
        return dues

    def _check_record(self, table_key: Any, reader: RecordReader, bounds: tuple[int | None, int | None]) -> None:
        start = self._check_window_record(reader, bounds, self._slide)
        if type(table_key) is not tuple or len(table_key) != 2 or table_key[1] != start:
            raise reader.invalid("key", f"(the user's key, {start}): the window's start", table_key)

    def _valid_bounds(self, start: int, end: int | None) -> bool:
        return start % self._slide == 0 and end in (start + self._span, None)


class AggregateByKeySession(_KeyedWindows[T], Generic[T]):
    """The running stage of :func:`aggregate_by_key` over session windows. Record: ``(first element's time, last
    element's time, sequence number, count, accumulator)`` under the key; the window ends ``gap`` after the last
    element.

    A session whose end moves is indexed at its new end (the entry at the old one is stale, skipped when that end
    comes) and takes the next sequence number: the windows of one end are indexed in sequence order, and a restart
    sorts them by it (putting the key into the table again instead would move it from page to page). The next
    number is one more than the largest in the records, so it needs no field of its own.
    """

    name = "reaqtive:aggregate_by_key+session"
    record_fields = 5
    _extends = True

    __slots__ = ("_seq",)

    def __init__(self, args: AggregateByKeyArgs, downstream: Subscriber[WindowRow]) -> None:
        super().__init__(args, downstream)
        self._seq = 0  # the next sequence number

    def _add(self, key: Any, value: Any, now: int, element: object) -> list[datetime]:
        table = self._table
        due = None
        try:
            record = table.get(key)
            if record is None:
                seq = self._seq
                table.put(key, (now, now, seq, 1, self._first(value)))
                self._seq = seq + 1
                due = self._add_to_index(key, now + self._span)
            elif record[1] == now:  # the end does not move
                table.put(key, (record[0], now, record[2], record[3] + 1, self._step(record[4], value)))
            else:
                seq = self._seq
                table.put(key, (record[0], now, seq, record[3] + 1, self._step(record[4], value)))
                self._seq = seq + 1
                due = self._add_to_index(key, now + self._span)
        except Exception as error:
            self._failed(error, element)
        return [] if due is None else [due]

    def _end_of(self, table_key: Any, record: tuple[Any, ...]) -> int:
        end: int = record[1] + self._span
        return end

    def _drop_stale(self) -> None:
        ends, closing, get, gap = self._ends, self._closing, self._table.get, self._span
        while ends:
            end = ends[0]
            for key in closing[end]:
                record = get(key)
                if record is not None and record[1] + gap == end:
                    return
            ends.popleft()
            del closing[end]

    def _close_end(self, end: int, table_keys: list[Any]) -> list[WindowRow]:
        get, pop = self._table.get, self._table.pop
        end_at, gap, result = self._at(end), self._span, self._result
        rows: list[WindowRow] = []
        for key in table_keys:
            record = get(key)
            if record is None or record[1] + gap != end:
                continue  # a session that moved its end: it is indexed there too
            pop(key)
            try:
                value = result(record[3], record[4])
            except Exception as error:
                self._row_failed(error)
                continue
            rows.append((key, self._at(record[0]), end_at, value))
        return rows

    def _check_record(self, table_key: Any, reader: RecordReader, bounds: tuple[int | None, int | None]) -> None:
        earliest, latest = bounds
        start = reader.read_int("first element", minimum=-(2**62), maximum=2**62)
        if earliest is not None and start < earliest:
            raise reader.invalid("first element", "within the host's clock bounds", start)
        last = reader.read_int("last element", minimum=start, maximum=2**62 if latest is None else max(start, latest))
        if latest is not None and last > latest:
            raise reader.invalid("last element", "within the host's clock bounds", last)
        reader.read_int("sequence number")
        self._check_count_and_acc(reader)

    def _rebuild(self, reader: StateReader, bounds: tuple[int | None, int | None]) -> None:
        super()._rebuild(reader, bounds)
        table = self._table

        def seq(table_key: Any) -> int:
            record = table.get(table_key)
            assert record is not None
            number: int = record[2]
            return number

        for keys in self._closing.values():
            keys.sort(key=seq)
        self._seq = max((record[2] for _, record in table.items()), default=-1) + 1

    def _valid_bounds(self, start: int, end: int | None) -> bool:
        return end is None or end - start >= self._span
