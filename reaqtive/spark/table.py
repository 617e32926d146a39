"""The table form of a keyed query on Spark: a bucket's keys are records of one table, not query instances.

A key's query in the *instance form* (:class:`~reaqtive.spark.host.KeyRun`) is re-created for every micro-batch
that touches the key: a scheduler, a subject, the bound operators, their state loaded and saved. When the query
is a chain of operators that all have a *keyed step* (:mod:`reaqtive.operators.keyed_steps`, what the engine's
keyed ``group_by ... flat_map`` runs), optionally with one tumbling ``aggregate_by_key`` in it, the key needs no
instance: its state is a record of plain fields, and a micro-batch runs the key's events through the steps
directly. That is :class:`KeyTable`.

**Same results.** The table form gives the rows the instance form gives, tick for tick, errors included
(``tests/spark/test_table.py`` checks it on random queries and events against :class:`KeyRun`):

* each key keeps its own clock: an event moves it to the event's time (an older event is delivered at the
  clock), a batch's watermark moves it on, and a window closes when the key's clock reaches its end, its rows
  stamped with the end (as the instance's timer fires there);
* a step that ends the chain (``take``) completes the steps after it, and the key's query has completed;
* a failing function ends the key with an error row, after the rows before it.

**The record** of a key (:data:`TABLE_RECORD_FORMAT`) is one value of the operator state codec
(:mod:`reaqtive.state.codec`: msgpack, a closed set of types, never code):
``[3, clock µs, due µs | None, events, outputs, ended, [field per step]]``. The window's field is ``None`` or
``[window start µs from the origin, [[inner key, count, accumulator], ...]]`` (in the order the windows opened).
Loading checks every field (a forged store fails with :class:`~reaqtive.spark.host.BucketStateError` naming the
bucket and key).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from reaqtive.core.context import OperatorContext
from reaqtive.core.describe import error_text
from reaqtive.core.expression import is_expression
from reaqtive.core.scheduler_interface import utc
from reaqtive.core.subscribable import Subscribable
from reaqtive.fluent.query import Query
from reaqtive.operators.keyed_steps import DONE, SKIP, KeyedStep, StepOperatorError, keyed_step_factory
from reaqtive.operators.keyed_window import AggregateByKeyArgs, WindowAggregate
from reaqtive.operators.window_aggregates import add_exact
from reaqtive.scheduler.clock import EPOCH
from reaqtive.state import DEFAULT_CODEC, StateError

__all__ = ["TABLE_RECORD_FORMAT", "KeyTable", "TableOutput", "TableRecordError", "compile_table"]

TABLE_RECORD_FORMAT: Final = 3
_OLDER_FORMATS: Final = frozenset({2})  # 3: a window's sum may be an ExactSum; 2's float sums go on exactly
"""The first field of a table record (an instance-form :class:`~reaqtive.spark.host.KeyRecord` has 1)."""

_US: Final = timedelta(microseconds=1)
# The times a key's clock can hold, in µs since 1970 (datetime's range)
_EARLIEST: Final = (datetime.min.replace(tzinfo=UTC) - EPOCH) // _US
_LATEST: Final = (datetime.max.replace(tzinfo=UTC) - EPOCH) // _US
_BOUNDS_CACHE: Final = 1024
_COMPLETED: Final = "completed"
_AGGREGATE_BY_KEY: Final = "aggregate_by_key"
# record fields
_CLOCK, _DUE, _EVENTS, _OUTPUTS, _ENDED, _FIELDS = range(6)

TableOutput = tuple[int, Any, str | None]
"""One output of a key: ``(time µs, value, error)`` (``error`` set on a failed key's last row)."""


class TableRecordError(StateError):
    """A table record read from a store is not one this query's table can have written."""


# -- compiling a query ----------------------------------------------------------------------------------------------


def compile_table(query: Query[Any], stream: str, settings: dict[str, object] | None = None) -> KeyTable | None:
    """The table form of ``query`` (which reads its key's events as ``Query.stream(stream)``), or ``None`` when
    it has none: an operator without a keyed step (other than one tumbling ``aggregate_by_key``), another
    stream, or arguments the keyed path refuses (a mutable seed)."""
    nodes: list[Any] = []
    node: object = query
    while True:
        if not is_expression(node) or not node.args:
            return None
        if node.op == "stream":
            if node.args != (stream,):
                return None
            break
        if any(isinstance(argument, Subscribable) for argument in node.args[1:]):
            return None  # reads another stream
        nodes.append(node)
        node = node.args[0]
    steps: list[KeyedStep] = []
    windows = 0
    for chain_node in reversed(nodes):
        try:
            step = _step_of(chain_node)
        except Exception:
            return None  # arguments the stage would refuse: the instance form refuses them as it always did
        if step is None:
            return None
        windows += isinstance(step, TumblingWindowStep)
        steps.append(step)
    if windows > 1:
        return None
    context = OperatorContext("key", settings=settings or {})
    for step in steps:
        step.set_context(context)
    return KeyTable(tuple(steps), tuple(chain_node.op for chain_node in reversed(nodes)))


def _step_of(node: Any) -> KeyedStep | None:
    if node.op == _AGGREGATE_BY_KEY:
        args = AggregateByKeyArgs.read(node)
        return TumblingWindowStep(args) if args.kind == "tumbling" else None
    factory = keyed_step_factory(node.op)
    return None if factory is None else factory(node)


# -- the window step ------------------------------------------------------------------------------------------------

# The aggregate's kinds, as in keyed_window (the first four start from the first value, the first two add)
_SUM, _AVERAGE, _MIN, _MAX, _COUNT, _FOLD = range(6)


class TumblingWindowStep(KeyedStep, WindowAggregate):
    """``aggregate_by_key`` over tumbling windows, for one Spark key with its own clock: the rules of
    :class:`~reaqtive.operators.keyed_window.AggregateByKey` (the same calls of the user's functions, in the same
    order, the same rows; the aggregate is the stage's own, :class:`~reaqtive.operators.keyed_window.WindowAggregate`).
    Its field: ``None`` (no window open) or ``[start, {inner key: [count, acc]}]``, the start in µs from the
    origin; the open windows of a key all have the current start (an earlier one closed when the clock reached
    its end)."""

    __slots__ = ("_accumulator", "_bounds", "_key_selector", "_kind", "_origin", "_result_selector", "_seed",
                 "_value_selector", "now", "offset", "span")

    def __init__(self, args: AggregateByKeyArgs) -> None:
        self._key_selector = args.key_selector
        self._value_selector = args.value_selector
        self._origin = utc(args.origin)
        self.offset = (self._origin - EPOCH) // _US  # the origin in µs since 1970 (the keys' clocks)
        self.span: int = args.window[1] // _US
        self._kind, self._seed, self._accumulator, self._result_selector = self.parts(args.aggregate)
        self.now = 0  # the key's clock (µs since 1970), set by the table before each call
        self._bounds: dict[int, tuple[datetime, datetime]] = {}

    def next(self, state: Any, value: Any) -> tuple[Any, Any]:
        key = self._key_selector(value)
        kind = self._kind
        selector = self._value_selector
        if selector is not None and kind is not _COUNT:
            value = selector(value)
        micros = self.now - self.offset
        start = micros - micros % self.span
        if state is None:
            state = [start, {}]
        # (a window of an earlier start closed at its end, before the clock passed it: see KeyTable._advance)
        windows: dict[Any, list[Any]] = state[1]
        record = windows.get(key)  # a key that cannot be hashed raises TypeError here, as the stage's table does
        if record is None:
            windows[key] = [1, value if kind <= _MAX else self._first(value)]  # (the first four: the value)
        else:
            acc = record[1]
            if kind > _AVERAGE:
                record[1] = self._step(acc, value)
            elif type(acc) is int and type(value) is int:
                record[1] = acc + value
            else:
                record[1] = add_exact(acc, value)  # floats exactly, as the stage adds (window_aggregates)
            record[0] += 1
        return state, SKIP

    def due(self, state: Any) -> int | None:
        """When the open windows close (µs since 1970), or ``None``."""
        return None if state is None else state[0] + self.span + self.offset

    def close(self, state: Any) -> tuple[Any, ...]:
        """The rows of the open windows, in the order they opened (a result selector may raise)."""
        if state is None:
            return ()
        start = state[0]
        bounds = self._bounds.get(start)
        if bounds is None:  # the keys of a bucket close the same windows: their bounds are made once
            if len(self._bounds) >= _BOUNDS_CACHE:
                self._bounds.clear()
            bounds = self._bounds[start] = (self._origin + timedelta(microseconds=start),
                                            self._origin + timedelta(microseconds=start + self.span))
        start_at, end_at = bounds
        result = self._result
        return tuple([(key, start_at, end_at, result(count, acc)) for key, (count, acc) in state[1].items()])

    def complete(self, state: Any) -> tuple[Any, ...]:
        return self.close(state)

    def check(self, state: Any) -> bool:
        if state is None:
            return True
        if type(state) is not list or len(state) != 2:
            return False
        start, windows = state
        if type(start) is not int or start % self.span or type(windows) is not dict or not windows:
            return False
        if not _EARLIEST <= start + self.offset <= _LATEST - self.span:
            return False  # a window no clock can reach (its bounds would not be datetimes)
        for record in windows.values():
            if type(record) is not list or len(record) != 2 or type(record[0]) is not int or record[0] < 1:
                return False
            if self._kind is _COUNT and record[1] is not None:
                return False
        return True


# -- the table ------------------------------------------------------------------------------------------------------


class KeyTable:
    """Runs keys of a query in its table form (see the module): per key and batch, :meth:`run` on its record."""

    __slots__ = ("_outputs", "_window", "_window_index", "names", "steps")

    def __init__(self, steps: tuple[KeyedStep, ...], names: tuple[str, ...]) -> None:
        self.steps = steps
        self.names = names
        """The operator names of the chain, in order (a record's fields are theirs)."""
        windows = [index for index, step in enumerate(steps) if isinstance(step, TumblingWindowStep)]
        self._window_index = windows[0] if windows else -1
        self._window: TumblingWindowStep | None = steps[windows[0]] if windows else None  # type: ignore[assignment]
        self._outputs: list[TableOutput] = []

    def new_record(self, clock: int) -> list[Any]:
        """The record of a key whose first event is at ``clock``."""
        return [clock, None, 0, 0, None, [step.initial for step in self.steps]]

    def run(
        self, record: list[Any], events: Sequence[tuple[int, Any]], until: int | None, complete: bool = False
    ) -> list[TableOutput]:
        """Run one key for one batch, changing ``record`` in place: deliver ``events`` (``(time µs, payload)``,
        in order) as the instance form does, move the clock to ``until``, optionally end the key's stream.
        Returns the key's outputs."""
        outputs: list[TableOutput] = []
        self._outputs = outputs
        try:
            self._deliver_all(record, events)
            if until is not None and record[_ENDED] is None:
                self._advance(record, until)
            if complete and record[_ENDED] is None:
                self._guarded(record, self._complete_from, 0)
                if record[_ENDED] is None:
                    self._end(record)
        finally:
            self._outputs = []
        if record[_ENDED] is not None:
            record[_DUE], record[_FIELDS] = None, []
        elif self._window is not None:
            record[_DUE] = self._window.due(record[_FIELDS][self._window_index])
        return outputs

    def _deliver_all(self, record: list[Any], events: Sequence[tuple[int, Any]]) -> None:
        """Each event: the clock moves to its time (closing the windows due by then), then it goes through the
        chain; an event after the key ended is not counted (the per-event path, inlined on purpose)."""
        feed, window, index = self._feed, self._window, self._window_index
        fields = record[_FIELDS]
        due_offset = 0 if window is None else window.span + window.offset
        window_only = window is not None and len(self.steps) == 1
        for when, payload in events:
            if record[_ENDED] is not None:
                return
            if window is not None:
                state = fields[index]
                if state is not None and state[0] + due_offset <= when:
                    self._advance(record, when)  # a window closes first (and may end the key)
                    if record[_ENDED] is not None:
                        record[_EVENTS] += 1  # (delivered to an ended query: counted, as the instance form does)
                        return
            clock = record[_CLOCK]
            if when > clock:
                record[_CLOCK] = clock = when
            if window is not None:
                window.now = clock
            try:
                if window_only:  # (a window never ends the chain nor emits on an element)
                    fields[0] = window.next(fields[0], payload)[0]  # type: ignore[union-attr]
                else:
                    feed(record, 0, payload)
            except StateError:
                raise
            except Exception as error:  # the user's function (or a limit) failed: the key's query fails
                self._fault(record, error)
            record[_EVENTS] += 1

    # -- time ---------------------------------------------------------------------------------------------------

    def _advance(self, record: list[Any], when: int) -> None:
        """Move the key's clock to ``when``, closing the windows that end by then at their end."""
        window = self._window
        if window is not None:
            index = self._window_index
            due = window.due(record[_FIELDS][index])
            if due is not None and due <= when:
                record[_CLOCK] = max(record[_CLOCK], due)
                try:
                    self._fire(record, index)
                except StateError:
                    raise
                except Exception as error:  # a result selector, or a step after the window, failed
                    self._fault(record, error)
        record[_CLOCK] = max(record[_CLOCK], when)

    def _fire(self, record: list[Any], index: int) -> None:
        fields = record[_FIELDS]
        window = self._window
        assert window is not None
        rows = window.close(fields[index])
        fields[index] = None
        if index + 1 == len(self.steps):  # the window is the chain's last step: its rows are the outputs
            when = record[_CLOCK]
            self._outputs.extend((when, row, None) for row in rows)
            record[_OUTPUTS] += len(rows)
            return
        for row in rows:
            if self._feed(record, index + 1, row):
                return

    # -- the chain (as keyed_groups runs it) ---------------------------------------------------------------------

    def _guarded(self, record: list[Any], action: Callable[..., Any], *args: Any) -> None:
        try:
            action(record, *args)
        except StateError:
            raise
        except Exception as error:  # the user's function (or a limit) failed: the key's query fails
            self._fault(record, error)

    def _feed(self, record: list[Any], index: int, value: Any) -> bool:
        """Feed ``value`` into the steps from ``index``; ``True``: a step ended the chain (completing the steps
        after it; the key's query has completed)."""
        steps, fields = self.steps, record[_FIELDS]
        while index < len(steps):
            state, value = steps[index].next(fields[index], value)
            if state is DONE:
                if value is SKIP or not self._feed(record, index + 1, value):
                    self._complete_from(record, index + 1)
                if record[_ENDED] is None:
                    self._end(record)
                return True
            fields[index] = state
            if value is SKIP:
                return False
            index += 1
        self._emit(record, value)
        return False

    def _complete_from(self, record: list[Any], index: int) -> None:
        """Complete the steps from ``index`` in order, each one's final outputs going through the steps after it."""
        steps, fields = self.steps, record[_FIELDS]
        while index < len(steps):
            if index == self._window_index:
                fields[index], finals = None, steps[index].complete(fields[index])
            else:
                finals = steps[index].complete(fields[index])
            for value in finals:
                if self._feed(record, index + 1, value):
                    return
            index += 1

    # -- outputs ----------------------------------------------------------------------------------------------------

    def _emit(self, record: list[Any], value: Any) -> None:
        self._outputs.append((record[_CLOCK], value, None))
        record[_OUTPUTS] += 1

    def _end(self, record: list[Any]) -> None:
        record[_ENDED] = _COMPLETED

    def _fault(self, record: list[Any], error: BaseException) -> None:
        if isinstance(error, StepOperatorError):
            error = error.error  # the operator's own error (a limit, no elements), as the instance form signals it
        if record[_ENDED] is None:
            text = f"{type(error).__name__}: {error_text(error)}"
            record[_ENDED] = "error: " + text
            self._outputs.append((record[_CLOCK], None, text))
            record[_OUTPUTS] += 1

    # -- records in a store ---------------------------------------------------------------------------------------

    def pack(self, record: list[Any]) -> bytes:
        """The record as bytes (one state-codec value)."""
        return DEFAULT_CODEC.encode([TABLE_RECORD_FORMAT, *record])

    def unpack(self, data: bytes, where: str) -> list[Any]:
        """The inverse of :meth:`pack`, every field checked; :class:`TableRecordError` names ``where``."""
        entry = DEFAULT_CODEC.decode_value(data, where)
        if type(entry) is not list or len(entry) != 7:
            raise TableRecordError(f"{where}: not a table record")
        version, clock, due, events, outputs, ended, fields = entry
        if version != TABLE_RECORD_FORMAT and version not in _OLDER_FORMATS:
            raise TableRecordError(f"{where}: table record format {version!r} is not supported")
        for name, number in (("events", events), ("outputs", outputs)):
            if type(number) is not int or number < 0:
                raise TableRecordError(f"{where}: table record field {name!r} is {number!r}, not a count")
        for name, when in (("clock", clock), ("due", due)):
            if (when is not None or name == "clock") and (type(when) is not int or not _EARLIEST <= when <= _LATEST):
                raise TableRecordError(f"{where}: table record field {name!r} is {when!r}, not a time in µs")
        if ended is not None and (type(ended) is not str or not (ended == _COMPLETED or ended.startswith("error: "))):
            raise TableRecordError(f"{where}: table record field 'ended' is {ended!r}")
        if type(fields) is not list:
            raise TableRecordError(f"{where}: table record fields are {type(fields).__name__}, not a list")
        if ended is not None:
            if fields:
                raise TableRecordError(f"{where}: an ended key's record holds fields")
        else:
            if len(fields) != len(self.steps):
                raise TableRecordError(
                    f"{where}: the record has {len(fields)} fields, the chain {', '.join(self.names)} has "
                    f"{len(self.steps)} steps"
                )
            for step, name, field in zip(self.steps, self.names, fields, strict=True):
                if not step.check(field):
                    raise TableRecordError(f"{where}: the field of {name!r} is not one it can have: {field!r:.80}")
            expected = None if self._window is None else self._window.due(fields[self._window_index])
            if due != expected:
                raise TableRecordError(f"{where}: table record field 'due' is {due!r}, its steps say {expected!r}")
        return [clock, due, events, outputs, ended, fields]
