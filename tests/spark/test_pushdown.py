"""Projection pushdown: a query whose functions on the payload are field getters gets only those columns from
Spark, with the rows it gives on the whole payload."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from operator import add, itemgetter
from typing import TYPE_CHECKING, Any

import pytest

from reaqtive import Query, Tumbling
from reaqtive.spark.host import KeyedQuery
from reaqtive.spark.pushdown import field_names, payload_fields

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

OK, KIND, AMOUNT, PAIR = itemgetter("ok"), itemgetter("kind"), itemgetter("amount"), itemgetter("kind", "amount")
MINUTE = Tumbling(timedelta(minutes=1))


def reads(query: Query[Any]) -> frozenset[str] | None:
    keyed = KeyedQuery.of(query, {"ok": OK, "kind": KIND, "amount": AMOUNT, "pair": PAIR, "add": add, "repr": repr})
    return payload_fields(keyed.decoded(), keyed.stream)


def test_field_getters_name_their_fields_and_nothing_else_does() -> None:
    assert field_names(PAIR) == {"kind", "amount"}
    assert field_names(itemgetter(0)) is None
    assert field_names(repr) is None
    assert field_names(lambda event: event["kind"]) == {"kind"}  # its code is a field getter's (the README's form)
    assert field_names(lambda event: event.get("kind")) is None
    assert field_names(lambda event: event["kind"][0]) is None


@pytest.mark.parametrize(("query", "expected"), [
    (Query.stream("s").map(AMOUNT).scan(0, add), {"amount"}),
    (Query.stream("s").filter(OK).filter(KIND).map(AMOUNT), {"ok", "kind", "amount"}),
    (Query.stream("s").aggregate_by_key(KIND, MINUTE, "sum", AMOUNT), {"kind", "amount"}),
    (Query.stream("s").filter(OK).aggregate_by_key(PAIR, MINUTE, "count"), {"ok", "kind", "amount"}),
    (Query.stream("s").count(), set()),
    (Query.stream("s").count(OK), {"ok"}),
])
def test_what_a_query_reads_of_its_payload(query: Query[Any], expected: set[str]) -> None:
    assert reads(query) == expected


@pytest.mark.parametrize("query", [
    Query.stream("s").map(repr),  # an opaque function
    Query.stream("s").filter(OK),  # the payload itself reaches the outputs
    Query.stream("s").filter(OK).scan(0, add),  # an opaque accumulator gets the payload
    Query.stream("s").aggregate_by_key(KIND, MINUTE, "max"),  # aggregates the payload itself
    Query.stream("s").aggregate_by_key(KIND, MINUTE, "sum", repr),
    Query.stream("s").take(3).map(AMOUNT),  # take passes the payload on (not followed)
])
def test_what_keeps_the_whole_payload(query: Query[Any]) -> None:
    assert reads(query) is None


def test_run_batch_ships_only_the_fields_read_and_gives_the_same_rows(spark: SparkSession) -> None:
    from reaqtive.spark import run_batch
    from reaqtive.spark._columns import prepare

    start = datetime(2026, 3, 1, tzinfo=UTC)
    rows = [(f"k{i % 3}", start + timedelta(seconds=7 * i), i, "abc"[i % 3], i % 11, "x" * 50)
            for i in range(60)]
    events = spark.createDataFrame(rows, "key string, at timestamp, seq bigint, kind string, amount bigint, "
                                         "wide string")
    query = Query.stream("s").aggregate_by_key(KIND, MINUTE, "sum", AMOUNT)
    options: dict[str, Any] = {"key": "key", "time": "at", "sequence": "seq", "until": start + timedelta(hours=1),
                               "functions": {"kind": KIND, "amount": AMOUNT}}
    prepared = prepare(events, key="key", time="at", value=None, sequence="seq", buckets=None,
                       reads=reads(query))
    assert prepared.schema["v"].dataType.simpleString() == "struct<kind:string,amount:bigint>"
    pushed = run_batch(events, query, **options)
    whole = run_batch(events, query, value=["kind", "amount", "wide"], **options)
    assert sorted(map(tuple, pushed.collect())) == sorted(map(tuple, whole.collect()))
    assert pushed.count() > 10
