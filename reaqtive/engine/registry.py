"""Artifacts by URI: streams, definitions and subscriptions, created and deleted in the store at once; their records
and the checks on them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from reaqtive.core.subjects import OverflowPolicy, SimpleSubject
from reaqtive.engine._room import (
    _ARTIFACTS,
    _BUILTIN_OBSERVERS,
    _OBSERVED,
    _OUTPUTS,
    _STREAM_BUFFER,
    _TEMPLATES,
    EngineRoom,
    _counter_bytes,
    _full_state,
    _now_text,
    _references,
    _to_bytes,
)
from reaqtive.engine.backfill import BackfillStart, check_start, resolve_start
from reaqtive.engine.backfill import behind_of as backfill_behind
from reaqtive.engine.database import from_micros, to_micros
from reaqtive.engine.egress import Output
from reaqtive.engine.engine_errors import (
    ArtifactExistsError,
    ArtifactInUseError,
    ArtifactNotFoundError,
    MalformedRecordError,
    RetentionError,
    UnknownSchemaError,
)
from reaqtive.engine.expressions import (
    decode_query,
    encode_query,
    instantiate,
    template_id,
    templatize,
)
from reaqtive.engine.failures import OnError, check_on_error
from reaqtive.engine.model import (
    DURABLE_SINK,
    ArtifactInfo,
    StreamStatus,
)
from reaqtive.engine.retention import Retention, check_retention, retention_from_record, time_of
from reaqtive.engine.scheduling import check_priority
from reaqtive.engine.upgrading import PREVIOUS_STATES
from reaqtive.fluent.query import Query
from reaqtive.operators.keyed_steps import keyed_form_record
from reaqtive.state import (
    STATE_CATEGORY,
    confirm_saved,
)
from reaqtive.state.host import HostedQuery


def _describe(retention: Retention | None) -> str:
    return "None (what its readers need)" if retention is None else retention.describe()


class ArtifactRegistry(EngineRoom):
    """See the module docstring."""

    def register_function(self, name: str, function: Callable[..., Any]) -> None:
        """Make ``function`` usable in persisted queries as ``@name`` (register it again before recovery)."""
        self.functions.register(name, function)

    def register_source(self, name: str, state: Callable[[], bytes]) -> None:
        """Store ``state()`` under ``name`` with every checkpoint, in its transaction (an input source's position:
        see :mod:`reaqtive.connectors.file_source`); read it back after a restart with :meth:`source_state`.
        ``state`` is called under the engine's lock: it must be quick and must not call the engine."""
        with self._lock:
            self._check_open()
            self._sources.register(name, state)

    def unregister_source(self, name: str) -> None:
        """Stop storing source ``name``'s state (its last stored state stays; unknown: a no-op)."""
        with self._lock:
            self._sources.unregister(name)

    def source_state(self, name: str) -> bytes | None:
        """The state of source ``name`` in the last checkpoint (``None``: none stored). Data, never code: the
        source decodes it with checks. A damaged row raises :class:`MalformedRecordError`."""
        with self._lock:
            self._check_open()
            stored = self._sources.stored(name)
        if isinstance(stored, Exception):
            raise MalformedRecordError(f"the stored state of source {name!r} is damaged: {stored}") from stored
        return stored

    def create_stream(
        self, uri: str, schema: str | None = None, *, retain: Retention | timedelta | None = None
    ) -> None:
        """Create the durable stream ``uri``.

        ``schema``: the name of a validator registered with :meth:`register_schema` (or ``Engine(schemas=...)``):
        every event appended to the stream must pass it, and is stored in its validated form (see
        ``docs/engine.md``, "Typed streams"). The record stores the name; every process that opens the store
        must register it again. ``retain``: how much of its log to keep beyond what its readers need, so that a
        new subscription can backfill over it (``create_subscription(..., start=...)``): a
        :class:`~reaqtive.engine.retention.Retention` by age, events or bytes, or a ``timedelta`` (an age);
        ``None``: only what its readers need (see ``docs/engine.md``, "Log retention"); change it with
        :meth:`set_retention`. Refused (changing nothing): a name not registered (:class:`UnknownSchemaError`),
        a retention not valid (:class:`~reaqtive.engine.RetentionError`), a URI that exists
        (:class:`ArtifactExistsError`; a stream's schema is fixed when it is created).
        """
        if schema is not None and (not isinstance(schema, str) or not schema):
            raise TypeError(f"create_stream({uri!r}): schema must be the name of a registered validator (a "
                            f"non-empty str) or None, got {schema!r}")
        retention = check_retention(retain, f"create_stream({uri!r})")
        with self._lock:
            existing = self._records.get(uri) if isinstance(uri, str) else None
            if existing is not None and existing["kind"] == "stream" and (
                    retention_from_record(uri, existing) != retention):
                self._check_open()
                raise RetentionError(f"stream {uri!r} already exists, with retention "
                                     f"{_describe(retention_from_record(uri, existing))}: create_stream(retain="
                                     f"{_describe(retention)}) cannot change it (engine.set_retention can)")
            if existing is not None and existing["kind"] == "stream" and existing.get("schema") != schema:
                self._check_open()
                has = f"schema {existing['schema']!r}" if existing.get("schema") is not None else "no schema"
                raise ArtifactExistsError(f"stream {uri!r} already exists, with {has}: create_stream(schema="
                                          f"{schema!r}) cannot change it (a stream's schema is fixed when it is "
                                          "created)")
            self._check_new(uri)
            record: dict[str, Any] = {"kind": "stream", "created": _now_text()}
            if schema is not None:
                if self.functions.schema(schema) is None:
                    raise UnknownSchemaError(
                        f"create_stream({uri!r}): schema {schema!r} is not registered (register its validator "
                        f"first: engine.register_schema({schema!r}, validator))", stream=uri, schema=schema)
                record["schema"] = schema  # absent: an untyped stream (the records of older stores stay valid)
            if retention is not None:  # absent: what its readers need (the records of older stores stay valid)
                record["retain"] = retention.to_record()
            self._commit_record(uri, record)
            self._open_stream(uri)

    def set_retention(self, uri: str, retain: Retention | timedelta | None) -> None:
        """Change how much of stream ``uri``'s log is kept (see :meth:`create_stream`); committed when this
        returns, applied from the next checkpoint on. Lowering it lets the next checkpoint truncate what the new
        retention and the readers do not need (history dropped cannot be backfilled over any more)."""
        retention = check_retention(retain, f"set_retention({uri!r})")
        with self._lock:
            self._check_open()
            record = self._check_kind(uri, "stream")
            if retention_from_record(uri, record) == retention:
                return
            changed = {key: value for key, value in record.items() if key != "retain"}
            if retention is not None:
                changed["retain"] = retention.to_record()
            self._commit_record(uri, changed)

    def delete_stream(self, uri: str) -> None:
        """Delete the stream ``uri``; refused while a query reads it."""
        with self._lock:
            self._check_kind(uri, "stream")
            self._check_unused(uri)
            self._commit_changes(deletes=[(_ARTIFACTS, uri)])
            del self._records[uri]
            subject = self._streams.pop(uri)
            subject.dispose()

    def streams(self) -> dict[str, StreamStatus]:
        """Every stream with its ingress watermarks, its retention and what its log retains (events, bytes, the
        oldest event's number and time, the log positions of the oldest and newest)."""
        with self._lock:
            self._check_open()
            heads, extents = self._store.stream_heads(), self._store.ingress_extents()
            self._retained = {stream: (extent[0], extent[1]) for stream, extent in extents.items()}
            statuses = {}
            for uri in sorted(self._streams):
                record = self._records.get(uri, {})
                extent = extents.get(uri)
                since = None if extent is None else time_of(self._store, uri, extent[2])
                statuses[uri] = StreamStatus(
                    uri, heads.get(uri, 0), self._positions.delivered.get(uri, -1),
                    0 if extent is None else extent[0], record.get("schema"), retention_from_record(uri, record),
                    0 if extent is None else extent[1], None if extent is None else extent[2],
                    None if since is None else from_micros(since),
                    None if extent is None else (extent[3], extent[4]))
            return statuses

    def define_observable(self, uri: str, query: Query[Any]) -> None:
        """Name a query: other queries read it with ``Query.stream(uri)`` (it is expanded where it is used)."""
        with self._lock:
            self._check_new(uri)
            expression = encode_query(query, self.functions)
            references = sorted(_references(expression))
            self._check_references(uri, references)
            record = {"kind": "observable", "created": _now_text(), "expression": expression, "refs": references}
            self._commit_record(uri, record)

    def define_observer(self, uri: str, function: Callable[[Output], object]) -> None:
        """Name a function that receives the outputs of subscriptions (at least once, with their ids). It is
        persisted by reference: a module-level function, or one registered with :meth:`register_function`."""
        with self._lock:
            self._check_new(uri)
            encoded = encode_query(Query("observer", (function,)), self.functions)
            record = {"kind": "observer", "created": _now_text(), "function": encoded["args"][0]}
            self._commit_record(uri, record)

    def undefine(self, uri: str) -> None:
        """Remove an observable or observer definition; refused while an artifact uses it."""
        with self._lock:
            record = self._require(uri)
            if record["kind"] not in ("observable", "observer"):
                raise ArtifactNotFoundError(f"{uri!r} is a {record['kind']}, not a definition")
            self._check_unused(uri)
            self._commit_changes(deletes=[(_ARTIFACTS, uri)])
            del self._records[uri]

    def create_subscription(
        self,
        uri: str,
        query: Query[Any],
        observer: str = DURABLE_SINK,
        *,
        priority: int = 0,
        on_error: OnError | None = None,
        start: int | datetime | str | None = None,
    ) -> None:
        """Start the standing query ``query`` as ``uri``, its outputs going to the observer ``observer``.

        ``priority``: where its work goes among other queries' work due at the same instant, lower first (see
        :meth:`set_priority`). ``on_error``: what happens when a user function in the query raises (``"stop"``:
        the query stops, FAILED; ``"skip"``: the element is dropped there and kept as a dead letter; or a function
        ``(error, context) -> "skip" | "stop"``, persisted by reference like the query's functions); ``None``: the
        engine's default (see :mod:`reaqtive.engine.failures`). ``start``: ``None``, the events appended from
        now on; or a **backfill** over the retained log: ``"earliest"`` (the oldest event retained for the
        streams it reads), a log position (as if created when the engine stood there: :attr:`log_position`) or
        an aware ``datetime`` (as if created then): it processes that history behind the engine, in slices, then
        joins live input with no gap and no duplicate (see :mod:`reaqtive.engine.backfill`). Fails (changing
        nothing) if the query cannot be persisted (the message names the argument), reads an unknown stream or
        definition, the URI exists, or ``start`` is not retained (:class:`~reaqtive.engine.StartNotRetainedError`),
        is past the log (:class:`~reaqtive.engine.StartBeyondLogError`) or not a start
        (:class:`~reaqtive.engine.StartError`).
        """
        check_priority(priority)
        if on_error is not None:
            check_on_error(on_error)
        with self._lock:
            self._check_open()
            self._check_new(uri)
            self._check_not_nested(uri)
            if not self._delivery.clock_started:
                # A fresh store's clock is at the epoch: a query's timers would fire for every period since 1970.
                self._delivery.start_clock(datetime.now(UTC))
            self._delivery.follow_wall_clock()  # its timers count from now, not from where an idle clock stood
            expression = encode_query(query, self.functions)
            references = sorted(_references(expression) | {observer} - _BUILTIN_OBSERVERS)
            self._check_references(uri, references)
            backfill = self._resolve_start(uri, start, references)
            template, constants = templatize(expression)
            tid = template_id(template)
            record = self._subscription_record(tid, constants, observer, references, priority, on_error, backfill)
            puts = [(_ARTIFACTS, uri, _to_bytes(record))]
            if tid not in self._records.templates:
                puts.append((_TEMPLATES, tid, _to_bytes(template)))
            if uri in self._stopped.orphans:
                # What recovery kept under this URI is replaced: gone before it binds, or an observer's outbox would
                # take those outputs for its own. (Then as for any URI, its creation's transaction forgets them.)
                self._store.commit_with_outputs(deletes=[(_OUTPUTS, uri), (_OBSERVED, uri)], forget=[uri])
            # Bind first: a query that cannot run is not stored. A backfill is bound behind the engine, at its start.
            handle = self._running.bind(uri, record, template, None, behind=backfill_behind(record))
            try:
                # Its state at creation is committed with its record, so a recovery before the next checkpoint
                # re-creates it as it was then (windows aligned on its creation time, not on the recovery's).
                units = handle.units()
                puts += [(STATE_CATEGORY, key, _full_state(unit)) for key, unit in units.items()]
                counter = self._environment.output_counter(uri)
                puts.append((_OUTPUTS, uri, _counter_bytes(counter.next)))
                # The outputs it produced on start are written in the same transaction, after whatever the store
                # holds under its URI (rows recovery kept as orphans) is deleted: a crash leaves all of it or none.
                own = self._outputs.take_own(uri)
                self._outputs.flush()  # the others' outputs, as before any commit
                self._store.commit_with_outputs(puts, [(_OBSERVED, uri)], forget=[uri], outputs=own, encoded=True)
            except BaseException:
                self._scheduling.drop_behind(uri)
                self._discard(uri, handle)
                raise
            for unit in units.values():
                confirm_saved(unit)
            self._stored_state_keys.update(units)
            counter.committed = counter.next
            self._records.templates.setdefault(tid, template)
            self._records[uri] = record
            self._subscriptions[uri] = handle
            if backfill is not None:
                self._backfilling.add(uri)
            if uri in self._stopped.orphans:  # what recovery kept under its URI was replaced
                self._stopped.orphans.discard(uri)
                self._settle_status()
            if counter.next:
                self.produced.fire()  # it produced outputs on start
            self.appended.fire()  # a processing loop looks again: the new query may have timers due sooner

    def _subscription_record(  # noqa: PLR0917 (the fields of the record)
        self, tid: str, constants: list[Any], observer: str, references: list[str], priority: int,
        on_error: OnError | None, backfill: BackfillStart | None,
    ) -> dict[str, Any]:
        """The record of a new subscription."""
        record: dict[str, Any] = {
            "kind": "subscription",
            "created": _now_text(),
            "template": tid,
            "constants": constants,
            "observer": observer,
            "refs": references,
            # Its readers read the events after the position delivered up to now (see docs/engine.md,
            # "Positions follow from the log"), in any run: a recovery, a catch-up; a backfill's, after its start.
            "start_pos": self._positions.cursor.pos if backfill is None else backfill.pos,
            "clock": to_micros(self._scheduler.now),
            # The form its keyed chains run in (see reaqtive.operators.keyed_steps): recovered in the same
            # form; a record without "keyed" was written before keyed execution existed (the general path),
            # one without "keyed_form" before result selectors ran keyed (form 1).
            **keyed_form_record(),
        }
        if priority:  # absent means 0: the records of stores from before priorities stay as they were
            record["priority"] = priority
        if on_error is not None:  # absent: the engine's default, whatever it is when the query runs
            record["on_error"] = on_error if isinstance(on_error, str) else {
                "function": encode_query(Query("observer", (on_error,)), self.functions)["args"][0]}
        if backfill is not None:  # absent: it started where the engine stood (the records of older stores)
            record["backfill"] = backfill.to_record()
        return record

    def _resolve_start(self, uri: str, start: object, references: list[str]) -> BackfillStart | None:
        """Where a new subscription's backfill starts (``None``: it starts now), checked against what the log
        retains of the streams it reads (directly or through definitions)."""
        check_start(start, f"create_subscription({uri!r})")
        if start is None:
            return None
        self._positions.refresh_heads()
        return resolve_start(
            start, where=f"create_subscription({uri!r})", store=self._store,
            streams=self._records.streams_read(references),
            heads=self._positions.heads, delivered_at=self._positions.delivered_at,
            cursor=self._positions.cursor.pos, now_micros=to_micros(self._scheduler.now))

    def delete_subscription(self, uri: str) -> None:
        """Stop and delete the subscription ``uri`` with its state (and its template when no one else uses it)."""
        with self._lock:
            record = self._check_kind(uri, "subscription")
            # Every state row it may have: also those of inner units that ended since the last checkpoint, and
            # those of a query kept without running (not live, so not in the environment).
            state_rows = self._stored_state_of(uri)
            # (With the state its previous definition had when it was last updated, kept for a rollback.)
            deletes = [(_ARTIFACTS, uri), (_OUTPUTS, uri), (_OBSERVED, uri), (PREVIOUS_STATES, uri), *state_rows]
            inner = [key for _, key in state_rows if key != uri]
            tid = record["template"]
            if not self._records.template_used_besides(tid, uri):
                deletes.append((_TEMPLATES, tid))
            # One transaction for all of it, its outputs and acknowledgement in the durable sink included: in two,
            # a crash between them would leave the outputs of a deleted subscription in the sink for good.
            self._store.commit_with_outputs(deletes=deletes, forget=[uri])
            del self._records[uri]
            handle = self._subscriptions.pop(uri)
            if handle is not None:
                self._discard(uri, handle)
            else:  # kept without running (failed to recover, or stopped by a fault), or idle (never bound)
                self._environment.release_ids(uri)
                self._outputs.forget(uri)
            self._environment.confirm_removed(inner)
            if (_TEMPLATES, tid) in deletes:
                self._records.templates.pop(tid, None)
            self._running.forget_ended(uri)
            self._stopped.forget(uri)
            self._running.drop_policy(uri)
            self._scheduling.forget(uri)
            self._backfilling.discard(uri)
            self._stored_state_keys.difference_update(key for _, key in state_rows)
            self._settle_status()
        self.produced.fire()  # its consumers wake up and find it gone

    def _stored_state_of(self, uri: str) -> list[tuple[str, str]]:
        """The state rows of ``uri`` and of its inner units that may be in the store: those there at recovery,
        those of the live inner units, and those of inner units removed since the last checkpoint."""
        prefix = uri + "/"
        keys = {key for key in self._stored_state_keys if key.startswith(prefix)}
        keys |= {key for key in self._environment.inner_subscriptions() if key.startswith(prefix)}
        keys |= {key for key in self._environment.removed_inner_ids() if key.startswith(prefix)}
        return [(STATE_CATEGORY, uri)] + [(STATE_CATEGORY, key) for key in sorted(keys)]

    def _discard(self, uri: str, hosted: HostedQuery) -> None:
        """Stop a subscription and forget its inner subscriptions and its pending outputs (its rows in the store
        are deleted, or were never written, by the transaction of its deletion or creation)."""
        hosted.delete()
        self._outputs.forget(uri)

    def artifacts(self) -> list[ArtifactInfo]:
        """Every artifact, by URI."""
        with self._lock:
            snapshot = self._store.checkpoints.read(strict=False)
            sizes = {key: len(blob) for key, blob in snapshot.items(STATE_CATEGORY)}
            return [self._info(uri, record, sizes) for uri, record in sorted(self._records.items())]

    def created_at(self, uri: str) -> datetime | None:
        """When the artifact ``uri`` was created (``None``: there is none); cheap, from memory. A URI deleted and
        created again has a new time: a consumer can tell it from the one it was reading."""
        with self._lock:
            record = self._records.get(uri)
            return None if record is None else datetime.fromisoformat(record["created"])

    def info(self, uri: str) -> ArtifactInfo:
        """What the engine knows about ``uri``."""
        with self._lock:
            record = self._require(uri)
            snapshot = self._store.checkpoints.read(strict=False)
            sizes = {key: len(blob) for key, blob in snapshot.items(STATE_CATEGORY)}
            return self._info(uri, record, sizes)

    def _info(self, uri: str, record: dict[str, Any], sizes: dict[str, int]) -> ArtifactInfo:
        kind = record["kind"]
        expression: dict[str, Any] | None = record.get("expression")
        if kind == "subscription":
            expression = instantiate(self._records.templates.get(record["template"], {"op": "?", "args": []}),
                                     record["constants"]) if record["template"] in self._records.templates else None
        state = sizes.get(uri, 0) + sum(size for key, size in sizes.items() if key.startswith(uri + "/"))
        return ArtifactInfo(
            uri=uri,
            kind=kind,
            created=datetime.fromisoformat(record["created"]),
            expression=expression,
            observer=record.get("observer"),
            references=tuple(record.get("refs", ())),
            state_bytes=state,
            running=uri in self._subscriptions or kind != "subscription",
            schema=record.get("schema") if kind == "stream" else None,
            status=self._running.status_of(uri, record) if kind == "subscription" else None,
        )

    def _expand(self, root: Query[Any]) -> Query[Any]:
        """Replace references to observable definitions by the queries they name. Iterative: a stored query
        may be thousands of operators deep."""
        built: list[Query[Any]] = []  # each visited node leaves exactly one query here
        tasks: list[tuple[Query[Any], frozenset[str], int]] = [(root, frozenset(), -1)]  # -1: visit; n: build
        while tasks:
            query, seen, children = tasks.pop()
            if children >= 0:
                rebuilt = iter(built[len(built) - children:])
                del built[len(built) - children:]
                built.append(Query(query.op, tuple(next(rebuilt) if isinstance(arg, Query) else arg
                                                   for arg in query.args)))
                continue
            if query.op == "stream":
                uri = query.args[0]
                record = self._records.get(uri) if isinstance(uri, str) else None
                if record is not None and isinstance(uri, str) and record["kind"] == "observable":
                    if uri in seen:
                        raise MalformedRecordError(f"observable definition {uri!r} refers to itself")
                    tasks.append((decode_query(record["expression"], self.functions), seen | {uri}, -1))
                else:
                    built.append(query)
                continue
            sources = [arg for arg in query.args if isinstance(arg, Query)]
            tasks.append((query, seen, len(sources)))
            tasks.extend((source, seen, -1) for source in reversed(sources))
        return built[0]

    def _open_stream(self, uri: str) -> None:
        self._streams[uri] = SimpleSubject(buffer_size=_STREAM_BUFFER, overflow=OverflowPolicy.ERROR, name=uri)
        self._environment.add_stream(uri, self._streams[uri])

    def _check_new(self, uri: str) -> None:
        self._check_open()
        if not isinstance(uri, str) or not uri:
            raise TypeError(f"an artifact URI must be a non-empty str, got {uri!r}")
        if uri in self._records or uri in _BUILTIN_OBSERVERS:
            kind = self._records[uri]["kind"] if uri in self._records else "built-in observer"
            raise ArtifactExistsError(f"{uri!r} already exists (a {kind})")

    def _check_not_nested(self, uri: str) -> None:
        """A subscription's inner states are stored under ``uri/...``: a subscription URI may neither start with
        another's ``uri/`` nor be the ``uri/`` of another, or deleting one would take the other's state."""
        nested = self._records.subscription_nested_with(uri)
        if nested is not None:
            raise ArtifactExistsError(
                f"subscription {uri!r} would nest with subscription {nested!r}: the inner state of a subscription "
                f"is stored under its URI followed by '/', so one subscription URI must not start with another "
                f"followed by '/'"
            )

    def _check_references(self, uri: str, references: Iterable[str]) -> None:
        missing = [ref for ref in references if ref not in self._records]
        if missing:
            what = (f"{missing[0]!r}, which does not exist" if len(missing) == 1
                    else f"{', '.join(map(repr, missing))}, which do not exist")
            raise ArtifactNotFoundError(
                f"{uri!r} refers to {what} (create streams with engine.create_stream(uri), observers with "
                "engine.define_observer(uri, function), or pass a sink object as observer=)")

    def _check_unused(self, uri: str) -> None:
        users = self._records.users_of(uri)
        if users:
            raise ArtifactInUseError(f"{uri!r} is used by {', '.join(map(repr, users))}; delete those first")

    def _commit_record(self, uri: str, record: dict[str, Any]) -> None:
        self._commit_changes(puts=[(_ARTIFACTS, uri, _to_bytes(record))])
        self._records[uri] = record

    def register_schema(self, name: str, validator: object) -> None:
        """Register ``validator`` as the schema ``name`` of typed streams (``create_stream(uri, schema=name)``):
        a pydantic model class, a pydantic ``TypeAdapter``, a msgspec ``Struct`` type, or a callable
        ``event -> value`` that raises on a bad event (see :mod:`reaqtive.engine.schemas`). Register it again
        in every process that opens the store, before it opens (``Engine(schemas=...)``), as the functions of
        stored queries: recovery fails a stream whose validator is missing, under the recovery policy. A stream
        kept by ``RecoveryPolicy.KEEP`` without its validator accepts appends again once it is registered (and the
        engine is no longer DEGRADED for it)."""
        self.functions.register_schema(name, validator)
        with self._lock:
            self._stopped.schemas_missing = {uri for uri in self._stopped.schemas_missing
                                     if self.functions.schema(self._records[uri]["schema"]) is None}
            self._settle_status()
