"""The same per-key semantics in the embedded engine: one subscription, one group per key.

Spark runs a keyed query as one instance per key, created at the key's first event and fed the key's events. In
the embedded engine the idiomatic form of that is ``group_by`` on the key with the query applied to each group::

    Query.stream(uri).group_by(event_key, event_payload).flat_map(<the query, reading the group>, tag_with_key)

over an engine stream whose events are ``[key, payload]`` pairs. Each group is created when its key's first event
arrives, at that event's time, like Spark's key instance; it receives the key's payloads, in append order; its
query's time-based operators see the engine's event-time clock. The outputs are ``[key, value]``; numbering them
per key, in order, gives Spark's ``(key, seq, value)`` rows (:func:`per_key_outputs`).

The inner subscription ``flat_map`` makes for a group is the very tree the Spark host builds for the key (the
per-key query over the group's subject), so its checkpointed state can move to Spark as it is
(:mod:`reaqtive.spark.migration`).

The two runs agree row for row when every key's events arrive in time order (the engine's clock, shared by all
keys, then never runs ahead of a key's next event), no key's query fails (in the engine a failing group fails the
whole subscription; on Spark only its key), and the embedded run ends at the time Spark's watermark reaches last,
:func:`final_watermark` (see docs/spark.md, "Equivalence with the embedded engine").
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, Final

from reaqtive.engine.egress import Output
from reaqtive.engine.expressions import FunctionRegistry
from reaqtive.fluent.query import Query
from reaqtive.spark.host import KeyedQuery, substitute_stream

__all__ = [
    "PER_KEY_FUNCTION",
    "embedded_query",
    "event_key",
    "event_payload",
    "final_watermark",
    "per_key_function_name",
    "per_key_outputs",
    "tag_with_key",
]

PER_KEY_FUNCTION: Final = "reaqtive.spark/per-key"
"""The prefix of the name under which :func:`embedded_query` registers the per-group selector."""


def event_key(event: list[Any]) -> Any:
    """The key of an embedded ``[key, payload]`` event."""
    return event[0]


def event_payload(event: list[Any]) -> Any:
    """The payload of an embedded ``[key, payload]`` event."""
    return event[1]


def tag_with_key(group: Any, value: Any) -> list[Any]:
    """An output of the group's query, as ``[key, value]``."""
    return [group.key, value]


def final_watermark(last_event_time: datetime, lateness: timedelta = timedelta(0)) -> datetime:
    """Where Spark's event-time watermark ends after events up to ``last_event_time``: that time truncated to the
    millisecond (Spark keeps watermarks in whole milliseconds), less ``lateness``. An embedded run ends where the
    Spark run does with ``engine.advance_time(final_watermark(...))``, provided the engine's clock is not already
    past it: the engine's clock reaches the last event's time, so the last event must fall on a whole
    millisecond when ``lateness`` is 0."""
    truncated = last_event_time.replace(microsecond=last_event_time.microsecond // 1000 * 1000)
    return truncated - lateness


def per_key_function_name(query: KeyedQuery) -> str:
    """The registry name of ``query``'s per-group selector: ``reaqtive.spark/per-key/<fingerprint>``."""
    return f"{PER_KEY_FUNCTION}/{query.fingerprint}"


def embedded_query(query: KeyedQuery | Query[Any], functions: FunctionRegistry) -> Query[Any]:
    """The embedded subscription that runs ``query`` once per key (see the module docstring).

    Registers the per-group selector (:func:`per_key_function_name`) and ``query``'s own named functions in
    ``functions``, the engine's registry, and allows this module there: call it again, with the same registry,
    before re-opening the engine after a restart.

    >>> from reaqtive.engine.expressions import FunctionRegistry
    >>> embedded_query(Query.stream("events").count(), FunctionRegistry()).op
    'flat_map'
    """
    keyed = KeyedQuery.of(query, functions)
    functions.allow_module(__name__)  # event_key, event_payload, tag_with_key: the engine stores them by import path
    for function_name, function in keyed.functions.items():
        functions.register(function_name, function)
    name = per_key_function_name(keyed)
    per_key = functions.resolve(name) if name in functions.names() else _PerKey(keyed)
    functions.register(name, per_key)
    return Query.stream(keyed.stream).group_by(event_key, event_payload).flat_map(per_key, tag_with_key)


class _PerKey:
    """The per-group selector: the keyed query over the group."""

    __slots__ = ("_query",)

    def __init__(self, query: KeyedQuery) -> None:
        self._query = query

    def __call__(self, group: Query[Any]) -> Query[Any]:
        query = self._query
        return substitute_stream(query.decoded(), query.stream, group)


def per_key_outputs(outputs: Iterable[Output]) -> list[tuple[Any, int, Any]]:
    """The outputs of an :func:`embedded_query` subscription as Spark numbers them: ``(key, seq, value)``, seq
    counting each key's outputs from 0, in the engine's order."""
    counters: dict[Any, int] = {}
    rows = []
    for output in outputs:
        key, value = output.value
        seq = counters.get(key, 0)
        counters[key] = seq + 1
        rows.append((key, seq, value))
    return rows
