"""Live bucket state across batches (``reaqtive.spark.live``) without Spark: a batch that starts from a worker's
live state gives what a batch rebuilt from the stored blob gives, and a worker whose live state is not what the
store holds (a failed batch's replay, another worker ran the bucket since) rebuilds from the store."""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import timedelta
from operator import add
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reaqtive import Query
from reaqtive.spark.host import BucketHost, KeyedQuery, OutputRow
from reaqtive.spark.live import LiveCache, read_stats, tally, write_stats
from tests.spark import queries
from tests.spark.test_table import SPAN, Batch, batches, chains, keyed, rows_of, window_of

CACHE_ID = "query/1"


def run_plain(query: KeyedQuery, script: Sequence[Batch], table: bool) -> list[OutputRow]:
    blob: bytes | None = None
    rows: list[OutputRow] = []
    for order, (events, watermark) in enumerate(script):
        host = BucketHost(query, 1, 0, blob, table=table)
        rows += host.process(per_key(order, events), watermark)
        blob = host.encode()
    return rows


def run_cached(
    query: KeyedQuery, script: Sequence[Batch], table: bool, seed: int, workers: list[LiveCache]
) -> list[OutputRow]:
    """The batches on workers picked at random; some batches fail once (after their worker wrote its state, or
    half way through) and are replayed from the committed blob, as Spark does."""
    rng = random.Random(seed)
    committed: bytes | None = None
    rows: list[OutputRow] = []
    for order, (events, watermark) in enumerate(script):
        failures = rng.choice([0, 0, 1, 2])
        for attempt in range(failures + 1):
            cache = rng.choice(workers)
            live, exact = cache.take(CACHE_ID, 0, committed)
            host = BucketHost(query, 1, 0, committed, table=table, live=live, live_exact=exact, live_bound=None)
            keys = per_key(order, events)
            if attempt < failures and rng.random() < 0.5:
                # the task dies half way: the entry it took never comes back
                for key in sorted(keys)[: len(keys) // 2]:
                    host.run_key(key, [(when, payload) for when, _, payload in keys[key]], watermark)
                continue
            out = list(host.process(keys, watermark))
            blob = host.encode()
            cache.put(CACHE_ID, 0, host.live_entry(blob))
            if attempt == failures:  # the attempt Spark commits
                committed = blob
                rows += out
    return rows


def per_key(order: int, events: Sequence[tuple[str, int, int]]) -> dict[str, list[tuple[int, Any, Any]]]:
    keys: dict[str, list[tuple[int, Any, Any]]] = {}
    for number, (key, when, value) in enumerate(events):
        keys.setdefault(key, []).append((when, (order, number), value))
    return keys


def as_payload(x: int) -> dict[str, Any]:
    return {"kind": "abc"[x % 3], "amount": x}


def kind_totals(group: Query[dict[str, Any]]) -> Query[int]:
    return group.map(queries.amount_of).window(timedelta(microseconds=SPAN)).flat_map(queries.window_sum).scan(0, add)


INSTANCE_QUERIES = {
    "window count": lambda: keyed(window_of(Query.stream("s"))),
    "group, window, scan": lambda: keyed(Query.stream("s").map(as_payload).group_by(queries.kind_of)
                                         .flat_map(kind_totals, queries.tag_with_group)),
}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=chains, script=batches(), seed=st.integers(0, 2**16), table=st.booleans())
def test_live_state_gives_the_rows_of_state_rebuilt_from_the_store(
    chain: Any, script: list[Batch], seed: int, table: bool
) -> None:
    query = keyed(chain.query())
    workers = [LiveCache(), LiveCache()]
    assert rows_of(run_cached(query, script, table, seed, workers)) == rows_of(run_plain(query, script, table))


@pytest.mark.parametrize("name", sorted(INSTANCE_QUERIES))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=batches(), seed=st.integers(0, 2**16))
def test_live_query_instances_give_the_rows_of_instances_rebuilt_from_the_store(
    name: str, script: list[Batch], seed: int
) -> None:
    query = INSTANCE_QUERIES[name]()
    workers = [LiveCache(), LiveCache()]
    assert rows_of(run_cached(query, script, False, seed, workers)) == rows_of(run_plain(query, script, False))


def test_a_worker_goes_on_from_a_live_key_only_when_the_store_holds_the_bytes_it_saved() -> None:
    query = keyed(Query.stream("s").scan(0, lambda acc, x: acc + x))
    mine, other = LiveCache(), LiveCache()
    first = BucketHost(query, 1, 0, None, live_bound=None)
    assert [row.value for row in first.process({"a": [(1, 0, 5)], "b": [(1, 1, 7)]}, None)] == [5, 7]
    written = first.encode()
    mine.put(CACHE_ID, 0, first.live_entry(written))

    live, exact = mine.take(CACHE_ID, 0, bytes(written))  # equal bytes (a copy, as Spark hands them back): a hit
    assert live is not None and exact
    again = BucketHost(query, 1, 0, written, live=live, live_exact=exact, live_bound=None)
    assert [row.value for row in again.process({"a": [(2, 0, 1)]}, None)] == [6]
    assert (again.reused, again.decoded) == (1, 0)
    mine.put(CACHE_ID, 0, again.live_entry(again.encode()))

    # Another worker ran the bucket since: key b changed there, key a did not.
    elsewhere = BucketHost(query, 1, 0, again.encode(), live_bound=None)
    assert [row.value for row in elsewhere.process({"b": [(3, 0, 1)]}, None)] == [8]
    other.put(CACHE_ID, 0, elsewhere.live_entry(elsewhere.encode()))
    live, exact = mine.take(CACHE_ID, 0, elsewhere.encode())
    assert live is not None and not exact  # stale: checked key by key
    back = BucketHost(query, 1, 0, elsewhere.encode(), live=live, live_exact=exact, live_bound=None)
    assert [row.value for row in back.process({"a": [(4, 0, 1)], "b": [(4, 1, 1)]}, None)] == [7, 9]
    assert (back.reused, back.decoded) == (1, 1)  # a went on live; b's live record was stale: decoded
    assert (mine.counters["hits"], mine.counters["stale"], mine.counters["misses"]) == (1, 1, 0)
    assert mine.take(CACHE_ID, 0, written) == (None, False) and mine.counters["misses"] == 1


def test_the_cache_keeps_at_most_its_bound_of_keys_dropping_the_least_recently_used() -> None:
    query = keyed(Query.stream("s").count(lambda x: True))
    cache = LiveCache(max_keys=5)
    for bucket in range(3):
        host = BucketHost(query, 3, bucket, None, live_bound=None)
        list(host.process({f"k{i}": [(1, 0, i)] for i in range(2)}, None))
        cache.put(CACHE_ID, bucket, host.live_entry(host.encode()))
    assert len(cache) == 2 and cache.counters["evicted"] == 1
    assert cache.take(CACHE_ID, 0, b"") == (None, False) and cache.counters["misses"] == 1  # bucket 0 went first
    instances = BucketHost(query, 3, 0, None, table=False, live_bound=None)
    list(instances.process({"k": [(1, 0, 1)]}, None))
    cache.put(CACHE_ID, 0, instances.live_entry(instances.encode()))  # one live instance outweighs the bound
    assert len(cache) == 0 and cache.counters["evicted"] == 4


def test_read_stats_sums_the_counters_the_workers_wrote(tmp_path: Any) -> None:
    tally(str(tmp_path)).update(hits=2, stale=1)
    write_stats(str(tmp_path))
    (tmp_path / "999999999.json").write_text('{"hits": 3, "misses": 4}')  # another worker's
    totals = read_stats(tmp_path)
    assert (totals["hits"], totals["misses"], totals["stale"], totals["evicted"]) == (5, 4, 1, 0)
    assert set(read_stats(tmp_path / "missing").values()) == {0}
