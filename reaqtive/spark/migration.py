"""Moving a keyed query's state from an embedded engine to Spark.

An embedded engine runs a keyed query as one subscription in the form of :func:`reaqtive.spark.embedded_query`
(``group_by`` on the key, the query per group). The inner subscription ``flat_map`` makes for a key's group is the
very tree the Spark host builds for the key, so its state moves as it is:

1. :func:`export_engine_state` reads the engine's store (the engine must be stopped, after a checkpoint), checks
   that the subscription runs this query in that form, re-creates it in memory to find which inner subscription
   belongs to which key, and makes one :class:`~reaqtive.spark.host.KeyRecord` per key: the key's blobs as stored,
   the engine's clock, its next timer, and the number of outputs it already produced (counted in the engine's
   durable sink, so Spark's ``seq`` continues the engine's numbering);
2. :func:`initial_state_from_engine` hashes the keys into buckets with Spark's own hash (the one
   :func:`~reaqtive.spark.run_stream` uses) and packs each bucket's blob: a ``bucket, blob`` DataFrame to pass as
   ``run_stream(..., initial_state=...)`` on a new checkpoint location.

The Spark query must then read the events the engine had not processed at its checkpoint:
:attr:`EngineExport.delivered` says up to which sequence number of its stream the engine's state covers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from reaqtive.core.context import OperatorContext
from reaqtive.core.errors import ReaqtiveError
from reaqtive.core.streams import LONG_MAX, Subscriber, Subscription
from reaqtive.core.subjects import SimpleSubject
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.engine.database import EngineStore, from_micros
from reaqtive.engine.engine import DURABLE_SINK
from reaqtive.engine.expressions import (
    FunctionRegistry,
    encode_query,
    expression_from_json,
    expression_to_json,
    instantiate,
)
from reaqtive.fluent.query import GroupedStream, Query
from reaqtive.operators.keyed_steps import recorded_keyed_form
from reaqtive.scheduler import VirtualTimeScheduler
from reaqtive.spark.embedded import embedded_query
from reaqtive.spark.host import BucketState, KeyedQuery, KeyRecord, KeyRun
from reaqtive.state import STATE_CATEGORY, InnerEnvironment, read_blob
from reaqtive.state.host import QueryHost, QueryState

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["EngineExport", "MigrationError", "export_engine_state", "initial_state_from_engine", "pack_buckets"]

# The engine store's layout (reaqtive.engine.engine): categories of the checkpoint store.
_ARTIFACTS: Final = "artifacts"
_TEMPLATES: Final = "templates"
_ENGINE: Final = "engine"
_DELIVERY: Final = "delivery"
_GROUP_BY: Final = "reaqtive:group_by"


class MigrationError(ReaqtiveError, ValueError):
    """An engine checkpoint cannot seed this Spark query (another query, another form, a missing artifact)."""


@dataclass(frozen=True)
class EngineExport:
    """A keyed query's state as found in an engine checkpoint: one record per key, in Spark's layout."""

    query: KeyedQuery
    subscription: str
    clock: datetime
    """The engine's clock at the checkpoint (every key's clock starts there)."""
    delivered: int
    """The sequence number of the last event of the query's stream the state covers (-1: none)."""
    records: dict[Any, KeyRecord] = field(default_factory=dict)


def export_engine_state(
    store: str | os.PathLike[str],
    subscription: str,
    query: Query[Any] | Mapping[str, Any] | KeyedQuery,
    *,
    functions: FunctionRegistry | Mapping[str, Callable[..., Any]] | None = None,
    settings: Mapping[str, object] | None = None,
) -> EngineExport:
    """The per-key state of ``subscription`` in the engine store at ``store`` (see the module docstring).

    ``query``: the keyed query (what :func:`~reaqtive.spark.run_stream` gets); the subscription must be
    ``embedded_query(query)``. :class:`MigrationError` otherwise, or when the store holds no such subscription.
    """
    if not os.path.isfile(store):
        raise FileNotFoundError(f"no engine store at {os.fspath(store)!r}")
    keyed = KeyedQuery.of(query, functions, settings)
    registry = FunctionRegistry()
    embedded = embedded_query(keyed, registry)
    expected = encode_query(embedded, registry)
    engine_store = EngineStore(store)
    try:
        snapshot = engine_store.checkpoints.read()
        record_blob = snapshot.get(_ARTIFACTS, subscription)
        if record_blob is None:
            raise MigrationError(f"the engine store {os.fspath(store)!r} has no subscription {subscription!r}")
        record = expression_from_json(record_blob)
        template_blob = snapshot.get(_TEMPLATES, str(record.get("template")))
        if record.get("kind") != "subscription" or template_blob is None:
            raise MigrationError(f"{subscription!r} in {os.fspath(store)!r} is not a subscription with a stored query")
        found = instantiate(expression_from_json(template_blob), record["constants"])
        if expression_to_json(found) != expression_to_json(expected):
            raise MigrationError(
                f"subscription {subscription!r} does not run this keyed query in the embedded form "
                "(reaqtive.spark.embedded_query(query)); its query is another one"
            )
        states = {key: blob for key, blob in snapshot.items(STATE_CATEGORY)
                  if key == subscription or key.startswith(subscription + "/")}
        delivery_blob = snapshot.get(_ENGINE, _DELIVERY)
        delivery = expression_from_json(delivery_blob) if delivery_blob is not None else {}
        outputs = engine_store.read_outputs(subscription) if record.get("observer") == DURABLE_SINK else []
        acked = engine_store.acked(subscription)
        if (outputs and outputs[0][1] != 0) or (not outputs and acked >= 0):
            # Each key's output count is counted from the sink: trimmed outputs cannot be told apart by key
            raise MigrationError(
                f"the durable sink of {subscription!r} in {os.fspath(store)!r} was trimmed after acknowledgement "
                f"(outputs up to {acked} are gone), so each key's output numbering cannot be counted; export "
                "before trimming (acknowledged outputs stay until a checkpoint or engine.trim())"
            )
    finally:
        engine_store.close()
    if subscription not in states:
        raise MigrationError(f"subscription {subscription!r} has no checkpointed state in {os.fspath(store)!r}")
    clock = int(delivery.get("now", 0))
    delivered = int(delivery.get("delivered", {}).get(keyed.stream, -1))
    counts: dict[Any, int] = {}
    for _, _, value in outputs:
        counts[value[0]] = counts.get(value[0], 0) + 1
    groups = _key_instances(embedded, subscription, states, clock, keyed)
    export = EngineExport(keyed, subscription, from_micros(clock), delivered)
    for key in _group_keys(states[subscription], subscription):
        instance = groups.get(key)
        if instance is None:  # the key's query completed: its group stays open, later events go nowhere
            export.records[key] = KeyRecord(clock=clock, outputs=counts.get(key, 0), ended="completed")
            continue
        key_record = KeyRecord(
            clock=clock,
            outputs=counts.get(key, 0),
            form=recorded_keyed_form(record),  # the key's instance was bound in its engine subscription's form
            instance=instance,
            subscription=states[instance],
            inner={inner_id: blob for inner_id, blob in states.items() if inner_id.startswith(instance + "/")},
        )
        run = KeyRun(keyed, key, key_record, where=f"engine state of {instance!r} (key {key!r})")
        export.records[key], _ = run.finish()  # loads it as Spark will, and finds its next timer
    return export


class _Recorder(InnerEnvironment):
    """An environment that notes which inner subscription was made for which group."""

    def __init__(self, stream: str) -> None:
        super().__init__(subjects={stream: SimpleSubject(name=stream)})
        self.groups: dict[Any, str] = {}

    def subscribe_inner(
        self,
        inner_id: str,
        source: Subscribable[Any],
        observer: Subscriber[Any],
        parent: OperatorContext,
        *,
        restoring: bool = False,
    ) -> SubscriptionHandle:
        group = _group_in(source)
        if group is not None:
            self.groups[group.key] = inner_id
        return super().subscribe_inner(inner_id, source, observer, parent, restoring=restoring)


class _Sink(Subscriber[Any]):
    def on_subscribe(self, subscription: Subscription) -> None:
        subscription.request(LONG_MAX)

    def on_next(self, value: Any) -> None:
        pass

    def on_error(self, error: BaseException) -> None:
        raise MigrationError(f"the engine's subscription fails when re-created: {error}") from error

    def on_complete(self) -> None:
        pass


def _key_instances(
    embedded: Query[Any], subscription: str, states: Mapping[str, bytes], clock: int, keyed: KeyedQuery
) -> dict[Any, str]:
    """Re-create the subscription as the engine does (its state loaded) and note each group's inner id."""
    environment = _Recorder(keyed.stream)
    host = QueryHost(
        VirtualTimeScheduler(timedelta(microseconds=1), name="migration"),
        environment=environment,
        settings=keyed.settings,
    )
    host.advance(clock)
    query = host.bind(subscription, Query("egress", (embedded, subscription)), _Sink())
    inner = {key: blob for key, blob in states.items() if key != subscription}
    query.start(QueryState(states[subscription], inner), where=f"state of {subscription!r}")
    query.handle.dispose()
    return environment.groups


def _group_in(source: object) -> GroupedStream[Any] | None:
    """The group a per-key query reads, found in its expression."""
    stack = [source]
    while stack:
        node = stack.pop()
        if isinstance(node, GroupedStream):
            return node
        if isinstance(node, Query):
            stack.extend(node.args)
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
    return None


def _group_keys(blob: bytes, subscription: str) -> list[Any]:
    """The keys of the open groups of the subscription's ``group_by`` (its saved records, format 1)."""
    nodes = [node for node in read_blob(blob, where=f"state of {subscription!r}") if node.name == _GROUP_BY]
    if len(nodes) != 1 or nodes[0].version != (1,):
        raise MigrationError(f"state of {subscription!r}: expected one {_GROUP_BY} v1 node")
    reader = nodes[0].reader()
    for _ in range(4):  # disposed flag, group counter, whether the source completed, whether all was asked for
        reader.read()
    keys = []
    for number, key, held, closed in reader.read():
        if held is not None:
            raise MigrationError(f"state of {subscription!r}: group {number} ({key!r}) still waits for demand")
        if not closed:
            keys.append(key)
    return keys


def pack_buckets(query: KeyedQuery, buckets: int, keys: list[Any], records: list[bytes]) -> bytes:
    """One bucket's blob from its keys' packed records."""
    state = BucketState(buckets, query.fingerprint)
    for key, packed in zip(keys, records, strict=True):
        state.put(key, KeyRecord.unpack(packed, f"record of key {key!r}"))
    return state.encode()


def _bucket_packer(query: KeyedQuery, buckets: int) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """The ``applyInPandas`` function of :func:`initial_state_from_engine`: one bucket's records in, its blob out
    (a plain function: Spark reads the arguments a grouped-map function takes from its signature)."""

    def pack(frame: pd.DataFrame) -> pd.DataFrame:
        import pandas as pd

        blob = pack_buckets(query, buckets, frame["key"].tolist(), [bytes(record) for record in frame["record"]])
        return pd.DataFrame({"bucket": [int(frame["bucket"].iloc[0])], "blob": [blob]})

    return pack


def initial_state_from_engine(
    spark: SparkSession,
    store: str | os.PathLike[str],
    subscription: str,
    query: Query[Any] | Mapping[str, Any] | KeyedQuery,
    *,
    key_type: str = "string",
    buckets: int | None = None,
    functions: FunctionRegistry | Mapping[str, Callable[..., Any]] | None = None,
    settings: Mapping[str, object] | None = None,
) -> DataFrame:
    """The ``bucket, blob`` DataFrame that seeds ``run_stream(..., initial_state=...)`` with the state of
    ``subscription`` in an engine store (see the module docstring). ``key_type``: the Spark type of the stream's
    key column; ``buckets``: the bucket count the stream will use (the same default)."""
    from pyspark.sql import functions as F  # noqa: N812

    from reaqtive.spark._columns import BUCKET, KEY_TYPES, bucket_count, bucket_of

    if key_type not in KEY_TYPES:
        raise ValueError(f"key_type must be one of {', '.join(sorted(KEY_TYPES))}, got {key_type!r}")
    export = export_engine_state(store, subscription, query, functions=functions, settings=settings)
    count = bucket_count(spark, buckets)
    rows = [(key, record.pack()) for key, record in export.records.items()]
    frame = spark.createDataFrame(rows, f"key {key_type}, record binary")
    frame = frame.withColumn(BUCKET, bucket_of(F.col("key"), count))
    return frame.groupBy(BUCKET).applyInPandas(_bucket_packer(export.query, count), "bucket int, blob binary")
