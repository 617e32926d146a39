"""The Spark stateful processor that hosts one :class:`~reaqtive.spark.host.BucketHost` per bucket.

It lives in the installed package because Spark's Python workers import it by name. Per bucket (the grouping key of
``transformWithStateInPandas``) it keeps one ``ValueState`` (``reaqtive``, one ``binary`` blob: the
:class:`~reaqtive.spark.host.BucketState`) and at most one timer, at the earliest due time of the bucket's keys.

* ``handleInputRows``: the bucket's rows of this micro-batch. Runs the keys with rows and the keys due by the
  watermark (event time) or the batch's processing time, saves the blob, moves the timer.
* ``handleExpiredTimer``: the bucket's timer fired (the watermark passed it): runs the keys that are due.
* ``handleInitialState``: the first batch of a query seeded with ``initialState`` (an embedded engine's state,
  :mod:`reaqtive.spark.migration`): stores the bucket's blob as it is and registers its timer.

Spark calls ``handleInputRows`` for every bucket with rows before it looks for expired timers, so a bucket that had
rows has already run its due keys and moved its timer; it is never woken twice for the same work. Any exception
other than a user error inside a key's query (a damaged state, a bucket count or query that does not match the
checkpoint) fails the task, so the micro-batch fails and Spark replays it from the last committed state.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from reaqtive.spark.host import BucketHost, BucketState, KeyedQuery, OutputRow
from reaqtive.spark.live import DEFAULT_CACHE_KEYS, tally, worker_cache, write_stats
from reaqtive.spark.values import canonical_json, encode_values, plain

__all__ = [
    "MODE_EVENT",
    "MODE_NONE",
    "MODE_PROCESSING",
    "OUTPUT_COLUMNS",
    "STATE_VARIABLE",
    "BucketProcessor",
    "ProcessorConfig",
    "collect_events",
    "output_frame",
]

STATE_VARIABLE: Final = "reaqtive"
"""The name of the bucket's ``ValueState`` (read it back with ``spark.read.format("statestore")``)."""
STATE_SCHEMA: Final = "blob binary"
OUTPUT_COLUMNS: Final = ("key", "seq", "time_us", "value", "error")

MODE_EVENT: Final = "EventTime"
MODE_PROCESSING: Final = "ProcessingTime"
MODE_NONE: Final = "None"


@dataclass(frozen=True)
class ProcessorConfig:
    """What the processor needs besides the query: the bucket count, Spark's time mode, whether the input has a
    sequence column, how output values are written, whether new buckets take the query's table form, the bound
    of each worker's live cache in keys (0: none), where workers write the cache's counters (if anywhere), and a
    token of the ``run_stream`` call (live state is never shared between two calls)."""

    buckets: int
    time_mode: str
    has_sequence: bool
    value_format: str
    table: bool = True
    cache_keys: int = DEFAULT_CACHE_KEYS
    stats_dir: str | None = None
    run_id: str = ""


class BucketProcessor(StatefulProcessor):
    """``transformWithStateInPandas`` processor: one reaqtive host per bucket (see the module docstring)."""

    def __init__(self, query: KeyedQuery, config: ProcessorConfig) -> None:
        self._query = query
        self._config = config

    def init(self, handle: StatefulProcessorHandle) -> None:
        self._handle = handle
        self._state = handle.getValueState(STATE_VARIABLE, STATE_SCHEMA)

    def handleInputRows(  # noqa: N802  (Spark's name)
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues  # noqa: N803
    ) -> Iterator[pd.DataFrame]:
        started = time.perf_counter()
        events = collect_events(rows, self._config.has_sequence)
        return self._run(int(key[0]), events, timerValues, expired=None, started=started)

    def handleExpiredTimer(  # noqa: N802
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo  # noqa: N803
    ) -> Iterator[pd.DataFrame]:
        return self._run(int(key[0]), {}, timerValues, expired=expiredTimerInfo.getExpiryTimeInMs(),
                         started=time.perf_counter())

    def handleInitialState(  # noqa: N802
        self, key: Any, initialState: pd.DataFrame, timerValues: TimerValues  # noqa: N803
    ) -> None:
        bucket = int(key[0])
        where = f"initial state of bucket {bucket}"
        for blob in initialState["blob"].tolist():
            state = BucketState.decode(blob, where)
            state.check(self._query, self._config.buckets, where)
            self._save(state, registered=None)

    def close(self) -> None:
        pass

    # -- the work ------------------------------------------------------------------------------------------------

    def _run(
        self, bucket: int, events: dict[Any, list[tuple[int, Any, Any]]], timer_values: TimerValues,
        expired: int | None, started: float,
    ) -> Iterator[pd.DataFrame]:
        config = self._config
        stored = self._state.get()
        blob = None if stored is None else bytes(stored[0])
        cache = worker_cache(config.cache_keys) if config.cache_keys > 0 else None
        # The run's token keeps apart two queries with one expression but other functions (closures)
        cache_id = f"{config.run_id}/{self._query.fingerprint}/{config.buckets}"
        counts = None if config.stats_dir is None else tally(config.stats_dir)
        live, exact = (None, False) if cache is None else cache.take(cache_id, bucket, blob, counts)
        host = BucketHost(self._query, config.buckets, bucket, blob, table=config.table, live=live, live_exact=exact,
                          live_bound=0 if cache is None else cache.max_keys)
        registered = host.state.timer
        if expired is not None and registered == expired:
            registered = None  # Spark deletes the timer that fired once this handler returns
        rows = list(host.process(events, until(config.time_mode, timer_values)))
        written = blob
        if host.changed or registered != host.state.timer:
            written = self._save(host.state, registered)
        if cache is not None and written is not None:
            cache.put(cache_id, bucket, host.live_entry(written), counts)  # only after the whole run succeeded
        frame = output_frame(rows, config.value_format) if rows else None
        if config.stats_dir is not None and counts is not None:
            counts["python_us"] += int((time.perf_counter() - started) * 1e6)
            counts["calls"] += 1
            counts["events"] += sum(map(len, events.values()))
            counts["outputs"] += len(rows)
            counts["reused"] += host.reused
            counts["decoded"] += host.decoded
            write_stats(config.stats_dir)
        if frame is not None:
            yield frame

    def _save(self, state: BucketState, registered: int | None) -> bytes:
        """Store the bucket's blob with its timer at the earliest due time (ms, rounded up: never early)."""
        due = state.next_due()
        wanted = None if due is None or self._config.time_mode == MODE_NONE else -(-due // 1000)
        if registered is not None and registered != wanted:
            self._handle.deleteTimer(registered)
        if wanted is not None and wanted != registered:
            self._handle.registerTimer(wanted)
        state.timer = wanted
        blob = state.encode()
        self._state.update((blob,))
        return blob


def until(time_mode: str, timer_values: TimerValues) -> int | None:
    """How far the keys' clocks move in this batch (µs): the watermark, or the batch's processing time."""
    if time_mode == MODE_EVENT:
        watermark = timer_values.getCurrentWatermarkInMs()
        return watermark * 1000 if watermark > 0 else None
    if time_mode == MODE_PROCESSING:
        now = timer_values.getCurrentProcessingTimeInMs()
        return now * 1000 if now > 0 else None
    return None


def collect_events(frames: Iterator[pd.DataFrame], has_sequence: bool) -> dict[Any, list[tuple[int, Any, Any]]]:
    """Rows ``(key, t, [s,] v)`` as per-key lists of ``(time µs, order, payload)``. Without a sequence column the
    order among equal times is the payload's canonical text, so a replay sorts the same way."""
    events: dict[Any, list[tuple[int, Any, Any]]] = {}
    get = events.get
    for frame in frames:
        keys = frame["key"].tolist()
        times = frame["t"].tolist()
        values = [plain(value) for value in frame["v"].tolist()]
        orders = frame["s"].tolist() if has_sequence else [canonical_json(value) for value in values]
        for key, event in zip(keys, zip(times, orders, values, strict=True), strict=True):  # (tuples made in C)
            key_events = get(key)
            if key_events is None:
                events[key] = [event]
            else:
                key_events.append(event)
    return events


def output_frame(rows: list[OutputRow], value_format: str) -> pd.DataFrame:
    """Output rows as the frame Spark expects (``OUTPUT_COLUMNS``)."""
    return pd.DataFrame(
        {
            "key": [row.key for row in rows],
            "seq": pd.array([row.seq for row in rows], dtype="int64"),
            "time_us": pd.array([row.time for row in rows], dtype="int64"),
            "value": encode_values([row.value for row in rows], value_format),
            "error": [row.error for row in rows],
        }
    )
