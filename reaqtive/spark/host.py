"""The in-memory host that runs one instance of a query per key: the part of ``reaqtive.spark`` that needs no Spark.

A Spark task hands a :class:`BucketHost` the state of one **bucket** (the keys whose hash falls into it) and the
bucket's events of one micro-batch. For every key that has events, or a timer due by the batch's watermark, the
host

1. re-creates the key's query instance in a :class:`~reaqtive.state.host.QueryHost` of its own (the piece the
   engine and the test harness run queries with): a :class:`~reaqtive.scheduler.VirtualTimeScheduler` at the
   key's clock, and the query with its stream ``Query.stream(uri)`` replaced by the key's events (a subject, as a
   ``group_by`` group is), started from the key's saved state and inner states;
2. feeds the key's events in (event time, order) order exactly as the engine delivers events: advance the clock
   to the event's time (firing the timers due until then), push the event, run the work due at that instant;
3. advances the clock to the batch's watermark (``until``), firing the timers due by then;
4. saves what changed (differential: unchanged inner subscriptions keep their saved bytes) and drops the
   instance. Unloading is not disposing: no ``finally`` action runs.

Each key has its own clock, so what a key's query sees (the times of its events and of its timers) does not depend
on the other keys, on the number of buckets or on how the input was cut into micro-batches. Times are integer
microseconds since 1970-01-01 UTC (the scheduler's tick is one microsecond).

**The same tree as the embedded engine.** A key's query instance is exactly the inner subscription that the
embedded form ``Query.stream(uri).group_by(key).flat_map(per_key_query)`` (:mod:`reaqtive.spark.embedded`) makes
for the key's group: the per-key query over the group's subject. Its saved state therefore has the same shape in
both places, which is what lets :mod:`reaqtive.spark.migration` move a key from an engine checkpoint to Spark with
its state as it is (the key keeps its engine inner id as its instance id, so the ids of its own inner
subscriptions stay valid).

The bucket's state is one blob (:class:`BucketState`): a small header (bucket count, the query's fingerprint, the
Spark timer) and, per key, the key's record (:class:`KeyRecord`) as opaque bytes, decoded only when the key is
touched, plus an index of the keys' next due times so that a timer wakes only the keys that are due.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property
from operator import itemgetter
from typing import Any, Final, NamedTuple

import msgpack

from reaqtive.core.describe import error_text
from reaqtive.core.errors import ReaqtiveError
from reaqtive.core.streams import LONG_MAX, Subscription
from reaqtive.core.subjects import OverflowPolicy, SimpleSubject
from reaqtive.engine.expressions import (
    FunctionRegistry,
    decode_query,
    encode_query,
    expression_to_json,
    referenced_modules,
)
from reaqtive.fluent.query import GroupedStream, Query
from reaqtive.operators.keyed_steps import FORM_BEFORE_SELECTORS, KEYED_FORM, in_keyed_form, keyed_form
from reaqtive.scheduler import VirtualTimeScheduler
from reaqtive.spark.live import INSTANCE_WEIGHT, LiveBucket
from reaqtive.spark.table import KeyTable, compile_table
from reaqtive.state import InnerEnvironment, StateError
from reaqtive.state.host import HostedQuery, QueryHost, QueryState

__all__ = [
    "FORM_INSTANCES",
    "FORM_TABLE",
    "KEY_INSTANCE",
    "BucketHost",
    "BucketState",
    "BucketStateError",
    "KeyRecord",
    "KeyStatus",
    "KeyedQuery",
    "OutputRow",
    "QueryMismatchError",
    "stream_of",
    "substitute_stream",
]

KEY_INSTANCE: Final = "key"
"""The instance id of a key's query when it starts on Spark (a key migrated from an engine keeps its engine id).
Each key has an environment of its own, so all keys can share it: inner subscriptions are ``key/...``."""

_TICK: Final = timedelta(microseconds=1)
_RECORD_FORMAT: Final = 2
"""Format 2 adds the keyed form the key's query was bound in; a format-1 record (the release before issue 32) was
bound in form 1 (``keyed_steps.FORM_BEFORE_SELECTORS``), the default then."""
_BUCKET_MAGIC: Final = b"RQSB"
_BUCKET_FORMAT: Final = 1
_BUCKET_FORMAT_FORMS: Final = 2

FORM_INSTANCES: Final = "instances"
"""A bucket whose keys are query instances, re-created per batch from their saved operator state (any query)."""
FORM_TABLE: Final = "table"
"""A bucket whose keys are records of the query's table form (:mod:`reaqtive.spark.table`)."""
_EVENT_BUFFER: Final = 1 << 20
_COMPLETED: Final = "completed"


class BucketStateError(ReaqtiveError, ValueError):
    """A bucket's stored state is damaged, of an unknown format, or does not belong to this query's layout."""


class QueryMismatchError(BucketStateError):
    """The checkpoint was created for another query or another bucket count than the one now running."""


# -- the query ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyedQuery:
    """A query to run once per key, in the engine's persisted form: what Spark ships to its Python workers.

    ``expression``: the encoded query (:func:`~reaqtive.engine.expressions.encode_query`); it reads the key's
    events with ``Query.stream(stream)``. ``functions``: functions the expression names as ``@name`` (closures
    are fine: Spark ships them with cloudpickle). ``settings``: operator settings (limits) for every key's query.

    >>> from reaqtive import Query
    >>> keyed = KeyedQuery.of(Query.stream("events").count())
    >>> keyed.stream
    'events'
    """

    expression: dict[str, Any]
    stream: str
    functions: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    settings: Mapping[str, object] = field(default_factory=dict)

    @staticmethod
    def of(
        query: Query[Any] | Mapping[str, Any] | KeyedQuery,
        functions: FunctionRegistry | Mapping[str, Callable[..., Any]] | None = None,
        settings: Mapping[str, object] | None = None,
    ) -> KeyedQuery:
        """From a :class:`~reaqtive.fluent.query.Query` (encoded here: a query that cannot be persisted is refused now)
        or an already encoded expression. The query must read exactly one stream: the key's events."""
        if isinstance(query, KeyedQuery):
            return query
        named: dict[str, Callable[..., Any]]
        if isinstance(functions, FunctionRegistry):
            named = {name: functions.resolve(name) for name in functions.names()}
        else:
            named = dict(functions or {})
        registry = _registry(named)
        expression = encode_query(query, registry, check_references=False) if isinstance(query, Query) else dict(query)
        decode_query(expression, _registry(named, expression))  # a malformed expression fails here, not in a task
        return KeyedQuery(expression, stream_of(expression), named, dict(settings or {}))

    @cached_property
    def fingerprint(self) -> str:
        """A short hash of the expression, kept in every bucket's state to refuse another query's checkpoint
        (computed once per query object: every key of every batch asks for it)."""
        return hashlib.sha256(expression_to_json(self.expression).encode("utf-8")).hexdigest()[:16]

    @cached_property
    def _decoded(self) -> Query[Any]:
        return decode_query(self.expression, _registry(self.functions, self.expression))

    def decoded(self) -> Query[Any]:
        """The query, decoded once per query object (a Spark task unpickles its own; per-object, because two
        queries may have the same expression and function names but different functions: closures)."""
        return self._decoded

    @cached_property
    def _table(self) -> KeyTable | None:
        return compile_table(self.decoded(), self.stream, dict(self.settings))

    def table(self) -> KeyTable | None:
        """The query's table form (:mod:`reaqtive.spark.table`), compiled once per query object; ``None`` when
        the query has none (its keys then run as instances)."""
        return self._table

    def __getstate__(self) -> dict[str, Any]:
        # What a worker needs; the decoded query and the table are made again there (they hold bound steps)
        state = dict(self.__dict__)
        state.pop("_decoded", None)
        state.pop("_table", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def for_key(self, key: Any, events: SimpleSubject[Any]) -> Query[Any]:
        """The key's query instance: the query with its stream replaced by the key's events (a group)."""
        return substitute_stream(self.decoded(), self.stream, GroupedStream(events, None, key))




def stream_of(expression: Mapping[str, Any]) -> str:
    """The one stream URI an encoded query reads; :class:`ValueError` unless there is exactly one."""
    found: set[str] = set()
    stack: list[Any] = [expression]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if len(node) == 1 and "stream" in node:
                found.add(str(node["stream"]))
            elif node.get("op") == "stream" and isinstance(node.get("args"), list) and len(node["args"]) == 1:
                found.add(str(node["args"][0]))  # the query that is only its stream
            else:
                stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    if len(found) != 1:
        raise ValueError(
            "a keyed query must read its key's events with Query.stream(uri), exactly one stream; this one reads "
            f"{sorted(found) or 'none'}"
        )
    return found.pop()


def substitute_stream(query: Query[Any], stream: str, source: Query[Any]) -> Query[Any]:
    """``query`` with every ``Query.stream(stream)`` replaced by ``source``."""
    if query.op == "stream" and query.args == (stream,):
        return source
    return Query(query.op, tuple(_substitute_arg(arg, stream, source) for arg in query.args))


def _substitute_arg(arg: object, stream: str, source: Query[Any]) -> object:
    if isinstance(arg, Query):
        return substitute_stream(arg, stream, source)
    if isinstance(arg, (list, tuple)):
        items = [_substitute_arg(item, stream, source) for item in arg]
        return items if isinstance(arg, list) else tuple(items)
    return arg


def _registry(functions: Mapping[str, Callable[..., Any]], expression: Any = None) -> FunctionRegistry:
    # A keyed query is the program's own (encoded from its live query, or handed over encoded by it; shipped to the
    # workers with cloudpickle, never read from a store): the modules its expression names are trusted.
    registry = FunctionRegistry(allow_modules=referenced_modules(expression) if expression is not None else ())
    for name, function in functions.items():
        registry.register(name, function)
    return registry


# -- per-key records ----------------------------------------------------------------------------------------------


@dataclass(slots=True)
class KeyRecord:
    """What the host keeps for one key between micro-batches.

    ``clock``: the key's time (µs); ``due``: its earliest pending timer (µs) or ``None``; ``events``: events fed
    by this host; ``outputs``: outputs so far (the next output's ``seq``); ``ended``: ``None`` while the query
    runs, ``"completed"``, or ``"error: ..."``; ``instance``: the instance id of the key's query;
    ``subscription``: its state blob; ``inner``: the blobs of its inner subscriptions by id; ``form``: the keyed
    form its query is bound in (:func:`~reaqtive.operators.keyed_steps.keyed_form`): a key keeps the form its
    state was written in, whatever a later release runs keyed.
    """

    clock: int
    due: int | None = None
    events: int = 0
    outputs: int = 0
    ended: str | None = None
    instance: str = KEY_INSTANCE
    subscription: bytes | None = None
    inner: dict[str, bytes] = field(default_factory=dict)
    form: int = field(default_factory=keyed_form)

    def pack(self) -> bytes:
        """The record as msgpack bytes (format 2)."""
        return msgpack.packb(  # type: ignore[no-any-return]
            [_RECORD_FORMAT, self.clock, self.due, self.events, self.outputs, self.ended, self.instance,
             self.subscription, self.inner, self.form],
            use_bin_type=True,
        )

    @staticmethod
    def unpack(data: bytes, where: str = "key record") -> KeyRecord:
        """The inverse of :meth:`pack`; :class:`BucketStateError` names ``where`` if the bytes are not a record."""
        try:
            fields = msgpack.unpackb(data, raw=False, strict_map_key=False)
            version = fields[0]
        except Exception as error:
            raise BucketStateError(f"{where}: not a key record ({error})") from error
        if version not in (1, _RECORD_FORMAT):
            raise BucketStateError(f"{where}: key record format {version!r} is not supported (reads 1 and "
                                   f"{_RECORD_FORMAT})")
        try:
            if version == 1:
                _, clock, due, events, outputs, ended, instance, subscription, inner = fields
                form = FORM_BEFORE_SELECTORS
            else:
                _, clock, due, events, outputs, ended, instance, subscription, inner, form = fields
        except ValueError as error:
            raise BucketStateError(f"{where}: malformed key record ({error})") from error
        if type(form) is not int or not 0 <= form <= KEYED_FORM:
            raise BucketStateError(f"{where}: key record keyed form {form!r} is not one of 0 to {KEYED_FORM}")
        return KeyRecord(clock, due, events, outputs, ended, instance, subscription, dict(inner), form)


@dataclass(slots=True)
class BucketState:
    """The state of one bucket: one opaque blob in Spark's state store.

    ``keys``: each key's packed record (a :class:`KeyRecord` in the instance form, a table record in the table
    form); ``due``: each key's next due time (µs), for keys with one; ``timer``: the Spark timer registered for
    the bucket (ms) or ``None``; ``form``: :data:`FORM_INSTANCES` or :data:`FORM_TABLE`. The instance form is
    written in format 1 (as before the table form existed); the table form in format 2, which adds the form.
    """

    buckets: int
    fingerprint: str
    timer: int | None = None
    keys: dict[Any, bytes] = field(default_factory=dict)
    due: dict[Any, int] = field(default_factory=dict)
    form: str = FORM_INSTANCES
    chain: list[str] = field(default_factory=list)
    """The table form's operators, in order (a record's fields are theirs); empty in the instance form."""

    def encode(self) -> bytes:
        """``RQSB``, format byte, msgpack body, CRC-32 of the body (big-endian)."""
        fields: list[Any] = [self.buckets, self.fingerprint, self.timer, self.keys, self.due]
        if self.form == FORM_INSTANCES:
            version = _BUCKET_FORMAT
        else:
            version = _BUCKET_FORMAT_FORMS
            fields += [self.form, self.chain]
        body: bytes = msgpack.packb(fields, use_bin_type=True)
        return _BUCKET_MAGIC + bytes([version]) + body + zlib.crc32(body).to_bytes(4, "big")

    @staticmethod
    def decode(blob: bytes, where: str = "bucket state") -> BucketState:
        """The inverse of :meth:`encode`; :class:`BucketStateError` for anything else."""
        blob = bytes(blob)
        if blob[:4] != _BUCKET_MAGIC or len(blob) < 9:
            raise BucketStateError(f"{where}: not a reaqtive bucket state ({len(blob)} bytes)")
        version = blob[4]
        if version not in (_BUCKET_FORMAT, _BUCKET_FORMAT_FORMS):
            raise BucketStateError(
                f"{where}: bucket state format {version} is not supported (reads {_BUCKET_FORMAT} and "
                f"{_BUCKET_FORMAT_FORMS})"
            )
        body, crc = blob[5:-4], int.from_bytes(blob[-4:], "big")
        if zlib.crc32(body) != crc:
            raise BucketStateError(f"{where}: bucket state is damaged (checksum mismatch)")
        try:
            fields = msgpack.unpackb(body, raw=False, strict_map_key=False)
            form, chain = (FORM_INSTANCES, []) if version == _BUCKET_FORMAT else fields[5:]
            buckets, fingerprint, timer, keys, due = fields[:5]
        except Exception as error:
            raise BucketStateError(f"{where}: malformed bucket state ({error})") from error
        if form not in (FORM_INSTANCES, FORM_TABLE):
            raise BucketStateError(f"{where}: unknown bucket form {form!r:.40}")
        if type(keys) is not dict or type(due) is not dict:
            raise BucketStateError(f"{where}: malformed bucket state (keys and due times must be maps of records)")
        if type(chain) is not list or not all(type(name) is str for name in chain):
            raise BucketStateError(f"{where}: malformed bucket state (the chain must be operator names)")
        return BucketState(buckets, fingerprint, timer, keys, due, form, chain)

    def check(self, query: KeyedQuery, buckets: int, where: str) -> None:
        """Refuse a checkpoint made with another bucket count (keys would land in the wrong bucket) or query."""
        if self.buckets != buckets:
            raise QueryMismatchError(
                f"{where}: the checkpoint was created with {self.buckets} buckets, this run asks for {buckets}; the "
                "bucket count is fixed per checkpoint (migrate the state to change it, see docs/spark.md)"
            )
        if self.fingerprint != query.fingerprint:
            raise QueryMismatchError(
                f"{where}: the checkpoint holds the state of another query (fingerprint {self.fingerprint}, this "
                f"query's is {query.fingerprint}); use a new checkpoint location for a changed query"
            )

    def record(self, key: Any, where: str) -> KeyRecord | None:
        """The key's record (instance form), or ``None`` for a key never seen."""
        data = self.keys.get(key)
        return None if data is None else KeyRecord.unpack(data, f"{where}, key {key!r}")

    def put(self, key: Any, record: KeyRecord) -> None:
        """Store the key's record and index its due time."""
        self.keys[key] = record.pack()
        if record.due is None:
            self.due.pop(key, None)
        else:
            self.due[key] = record.due

    def next_due(self) -> int | None:
        """The earliest due time of any key (µs), or ``None``."""
        return min(self.due.values()) if self.due else None


# -- running one key ------------------------------------------------------------------------------------------------


class KeyStatus(NamedTuple):
    """A key's bookkeeping, the same in both forms: its clock and next due time (µs), the events it was fed and
    the outputs it gave, and how it ended (``None``, ``"completed"`` or ``"error: ..."``)."""

    clock: int
    due: int | None
    events: int
    outputs: int
    ended: str | None


class OutputRow(NamedTuple):
    """One output of one key's query: the key, its number among the key's outputs, when (µs), the value; for a
    query that failed, one last row with ``value`` ``None`` and ``error`` set."""

    key: Any
    seq: int
    time: int
    value: Any
    error: str | None


class KeyRun:
    """One key's query instance for the duration of one micro-batch (also the observer of its outputs): a
    :class:`~reaqtive.state.host.QueryHost` of its own, at the key's clock, hosting the key's query.

    The record's state (``subscription`` and ``inner``) is what the store holds: a save writes the units that
    changed against it (a differential save) and the units it does not hold whole.
    """

    __slots__ = ("_clock", "_events", "_host", "_key", "_outputs", "_query", "_record", "_stored")

    def __init__(self, query: KeyedQuery, key: Any, record: KeyRecord, *, where: str) -> None:
        self._key = key
        self._record = record
        self._stored = QueryState(record.subscription, record.inner)
        self._outputs: list[OutputRow] = []
        self._clock = clock = VirtualTimeScheduler(_TICK, name="key")
        clock.advance_to(record.clock)
        self._host = host = QueryHost(clock, environment=InnerEnvironment(), settings=query.settings)
        self._events: SimpleSubject[Any] = SimpleSubject(
            buffer_size=_EVENT_BUFFER, overflow=OverflowPolicy.ERROR, name=f"{query.stream} [{key!r}]"
        )
        with in_keyed_form(record.form):  # the form its state was written in
            self._query: HostedQuery = host.bind(record.instance, query.for_key(key, self._events), self)
        try:
            self._query.start(self._stored, where=where)
        except StateError:
            raise
        except Exception as error:  # a selector or a start action of the user's query failed
            self._fault(error)

    # -- the observer of the key's outputs --

    def on_subscribe(self, subscription: Subscription) -> None:
        subscription.request(LONG_MAX)

    def on_next(self, value: Any) -> None:
        record = self._record
        self._outputs.append(OutputRow(self._key, record.outputs, self._clock.clock, value, None))
        record.outputs += 1

    def on_error(self, error: BaseException) -> None:
        self._fault(error)

    def on_complete(self) -> None:
        if self._record.ended is None:
            self._record.ended = _COMPLETED

    def _fault(self, error: BaseException) -> None:
        record = self._record
        if record.ended is None:
            text = f"{type(error).__name__}: {error_text(error)}"
            record.ended = "error: " + text
            self._outputs.append(OutputRow(self._key, record.outputs, self._clock.clock, None, text))
            record.outputs += 1

    # -- driving it --

    def feed(self, events: Iterable[tuple[int, Any]]) -> None:
        """Deliver the key's events ``(time µs, payload)``, in order, as the engine does: the clock moves to
        the event's time first (an event older than the key's clock is delivered at the clock)."""
        record, host, subject = self._record, self._host, self._events
        try:
            for when, payload in events:
                if record.ended is not None:
                    return
                host.advance(when)
                subject.on_next(payload)
                record.events += 1
                host.settle()  # the work this delivery triggered at this instant
        except StateError:
            raise
        except Exception as error:  # an unhandled error of a scheduled task faults this key's query only
            self._fault(error)

    def advance(self, until: int | None) -> None:
        """Fire the timers due by ``until`` (µs) and move the key's clock there."""
        if until is None or self._record.ended is not None:
            return
        try:
            self._host.advance(until)
        except StateError:
            raise
        except Exception as error:
            self._fault(error)

    def complete(self) -> None:
        """End the key's stream (a bounded replay): operators that wait for the end emit now."""
        if self._record.ended is not None:
            return
        try:
            self._events.on_complete()
            self._host.settle()
        except StateError:
            raise
        except Exception as error:
            self._fault(error)

    def finish(self) -> tuple[KeyRecord, list[OutputRow]]:
        """Save what changed into the record; return it with the outputs. The key's query is unloaded, not
        disposed (no ``finally`` action runs): the host is simply dropped, or kept live for the next batch
        (:mod:`reaqtive.spark.live`)."""
        record, clock = self._record, self._clock
        outputs, self._outputs = self._outputs, []
        record.clock = clock.clock
        if record.ended is not None:
            record.due, record.subscription, record.inner = None, None, {}
            return record, outputs
        saved = self._query.save(self._stored)
        saved.confirm()  # the instance may live on (reaqtive.spark.live): its next save is against this one
        state = self._stored = saved.state
        record.subscription, record.inner = state.main, dict(state.inner)
        record.due = clock.next_due
        return record, outputs


def run_key(
    query: KeyedQuery,
    key: Any,
    record: KeyRecord | None,
    events: Sequence[tuple[int, Any]],
    until: int | None,
    *,
    where: str,
    complete: bool = False,
) -> tuple[KeyRecord | None, list[OutputRow]]:
    """Run one key for one batch: load ``record`` (``None``: a new key, started at its first event), feed
    ``events`` (``(time µs, payload)``, in order), advance to ``until``, optionally complete its stream, save.
    Returns the new record (``None`` for a new key without events) and the outputs."""
    if record is not None and record.ended is not None:
        return record, []  # the key's query completed or failed: later events are ignored (docs/spark.md)
    if record is None:
        if not events:
            return None, []
        record = KeyRecord(clock=events[0][0])
    run = KeyRun(query, key, record, where=where)
    run.feed(events)
    run.advance(until)
    if complete:
        run.complete()
    return run.finish()


def run_table_record(
    table: KeyTable, key: Any, record: list[Any], events: Sequence[tuple[int, Any]], until: int | None,
    *, complete: bool = False,
) -> list[OutputRow]:
    """Run one key of a table-form query for one batch (``record`` changes in place); its output rows."""
    first = record[3]
    return [OutputRow(key, first + number, when, value, error)
            for number, (when, value, error) in enumerate(table.run(record, events, until, complete))]


def unpack_table_record(table: KeyTable, data: bytes, where: str) -> list[Any]:
    """A key's table record from its bytes; :class:`BucketStateError` if they are not one this table wrote."""
    try:
        return table.unpack(data, where)
    except StateError as error:
        raise BucketStateError(str(error)) from error


# -- a bucket -------------------------------------------------------------------------------------------------------


class BucketHost:
    """Runs the keys of one bucket for one micro-batch (see the module docstring).

    ``blob``: the bucket's saved state (``None`` for a bucket never seen). ``buckets``: the bucket count of this
    run, checked against the saved one. ``table``: whether a new bucket uses the query's table form when it has
    one (a saved bucket keeps the form it was created in). ``live``: the bucket as this worker left it after its
    last run (:mod:`reaqtive.spark.live`): a key goes on from its live object (table record or query instance)
    when the store holds exactly the bytes the object was saved as, else from the store. With ``live_exact``
    the worker wrote ``blob`` itself: its decoded bucket state is used as it is. ``live_bound``: keep the keys'
    live objects for the next run only if the bucket fits a cache of that many keys (an instance counts
    :data:`~reaqtive.spark.live.INSTANCE_WEIGHT`); 0 (the default): never; ``None``: always. Live objects a
    cache would not hold only cost: Python's collector walks them (measured: keeping a bucket's query instances
    for nothing made its run 1.75x slower).
    """

    def __init__(
        self, query: KeyedQuery, buckets: int, bucket: int, blob: bytes | None, *, table: bool = True,
        live: LiveBucket | None = None, live_exact: bool = False, live_bound: int | None = 0,
    ) -> None:
        self.query = query
        self.bucket = bucket
        self.where = f"bucket {bucket} of {buckets}"
        # Per key, the bytes a live object (table record or query instance) was saved as, and the object
        self._live: dict[Any, tuple[bytes, Any]] = {} if live is None else live.live
        self.reused = 0
        """Keys that went on from their live object in this run."""
        self.decoded = 0
        """Keys decoded from the store in this run."""
        if live is not None and live_exact:  # the state ``blob`` is, still decoded (the bytes were compared)
            self.state: BucketState = live.state
        elif blob is None:
            compiled = query.table() if table else None
            if compiled is None:
                self.state = BucketState(buckets, query.fingerprint)
            else:
                self.state = BucketState(buckets, query.fingerprint, form=FORM_TABLE, chain=list(compiled.names))
        else:
            self.state = BucketState.decode(blob, self.where)
            self.state.check(query, buckets, self.where)
        self.table: KeyTable | None = None
        if self.state.form == FORM_TABLE:
            self.table = query.table()
            if self.table is None or list(self.table.names) != self.state.chain:
                raise QueryMismatchError(
                    f"{self.where}: the checkpoint runs this query in its table form as the chain "
                    f"{' -> '.join(self.state.chain)}, which this release does not compile it to; run it with the "
                    "release that created the checkpoint"
                )
        self.changed = False
        self._live_bound = live_bound
        self._keep_live = self._fits(len(self.state.keys))

    def _fits(self, keys: int) -> bool:
        """Whether a bucket of ``keys`` keys fits the live bound."""
        if self._live_bound is None:
            return True
        return keys * (1 if self.state.form == FORM_TABLE else INSTANCE_WEIGHT) <= self._live_bound

    def due_keys(self, until: int | None) -> list[Any]:
        """The keys with a timer due by ``until`` (µs)."""
        if until is None:
            return []
        return [key for key, due in self.state.due.items() if due <= until]

    def process(
        self, events: Mapping[Any, Sequence[tuple[int, Any, Any]]], until: int | None
    ) -> Iterator[OutputRow]:
        """Run every key with events or with a timer due by ``until``; yields the outputs, key by key (keys in
        sorted order, each key's outputs in order). ``events``: per key, ``(time µs, order, payload)`` tuples,
        sorted here by ``(time, order)``."""
        keys = set(events)
        keys.update(self.due_keys(until))
        self._keep_live = self._fits(len(self.state.keys) + len(events))
        if not self._keep_live:
            self._live = {}
        for key in sorted(keys, key=_sort_key):
            key_events = events.get(key, ())
            if len(key_events) > 1:
                key_events = sorted(key_events, key=_event_order)
            ordered = [(when, payload) for when, _, payload in key_events]
            yield from self.run_key(key, ordered, until)

    def run_key(self, key: Any, events: Sequence[tuple[int, Any]], until: int | None) -> list[OutputRow]:
        """Run one key: load, feed ``events`` (``(time µs, payload)``, already in order), advance, save."""
        if self.table is not None:
            return self._run_table_key(self.table, key, events, until)
        state = self.state
        run: KeyRun | None = self._live_object(key, state.keys.get(key))
        if run is None:
            record = state.record(key, self.where)
            if record is None:
                if not events:
                    return []
                record = KeyRecord(clock=events[0][0])
            elif record.ended is not None:
                return []  # the key's query completed or failed: later events are ignored (docs/spark.md)
            else:
                self.decoded += 1
            run = KeyRun(self.query, key, record, where=f"state of {self.where}, key {key!r}")
        run.feed(events)
        run.advance(until)
        new_record, outputs = run.finish()
        state.put(key, new_record)
        self.changed = True
        if new_record.ended is None and self._keep_live:
            self._live[key] = (state.keys[key], run)
        else:
            self._live.pop(key, None)
        return outputs

    def _live_object(self, key: Any, data: bytes | None) -> Any:
        """The key's live object if it was saved as exactly ``data`` (the key's bytes in the store), else
        ``None``. Equal bytes are equal state: the object is what decoding them would give."""
        cached = self._live.get(key)
        if cached is None or data is None:
            return None
        saved, live = cached
        if saved is not data and saved != data:
            return None  # another run (another worker, or an attempt that was not committed) changed the key
        self.reused += 1
        return live

    def live_entry(self, blob: bytes) -> LiveBucket:
        """What a worker keeps of this bucket once ``blob`` (its state after this run) is written."""
        return LiveBucket(blob, self.state, self._live)

    def _run_table_key(
        self, table: KeyTable, key: Any, events: Sequence[tuple[int, Any]], until: int | None
    ) -> list[OutputRow]:
        state = self.state
        data = state.keys.get(key)
        record = self._live_object(key, data)
        if record is None:
            if data is None:
                if not events:
                    return []
                record = table.new_record(events[0][0])
            else:
                record = unpack_table_record(table, data, f"state of {self.where}, key {key!r}")
                self.decoded += 1
        if record[4] is not None:
            return []  # the key's query completed or failed: later events are ignored
        outputs = run_table_record(table, key, record, events, until)
        state.keys[key] = packed = table.pack(record)
        if self._keep_live:
            self._live[key] = (packed, record)
        due = record[1]
        if due is None:
            state.due.pop(key, None)
        else:
            state.due[key] = due
        self.changed = True
        return outputs

    def status(self, key: Any) -> KeyStatus | None:
        """The key's bookkeeping in either form, or ``None`` for a key never seen."""
        data = self.state.keys.get(key)
        if data is None:
            return None
        where = f"state of {self.where}, key {key!r}"
        if self.table is not None:
            return KeyStatus(*unpack_table_record(self.table, data, where)[:5])
        record = KeyRecord.unpack(data, where)
        return KeyStatus(record.clock, record.due, record.events, record.outputs, record.ended)

    def next_due(self) -> int | None:
        """The earliest due time of any key in the bucket (µs)."""
        return self.state.next_due()

    def encode(self) -> bytes:
        """The bucket's state blob."""
        return self.state.encode()


_event_order: Final = itemgetter(0, 1)  # (time, order): never the payload, which may not compare


def _sort_key(key: Any) -> tuple[bool, Any]:
    return key is None, key
