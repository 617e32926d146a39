"""Live bucket state across micro-batches: a cache in each Spark Python worker process.

Between micro-batches a bucket's state lives in Spark's state store as one blob; a batch reads it, decodes the
keys it touches, runs them and writes the blob back. The Python worker that ran the bucket still holds what it
decoded: the keys' table records or, in the instance form, their live query instances. The next batch can start
from those, **if** they are what the store holds. So each entry keeps the exact bytes of the blob it wrote, and
a batch uses the entry only when the blob it reads from the store is those bytes; anything else (a batch that
failed after the worker wrote, its replay, a rollback, another worker having run the bucket since) rebuilds from
the blob, as without a cache. Equal bytes mean equal state: decoding is a function of the bytes.

An entry is taken out of the cache while its bucket runs and put back only when the run succeeded, so a run
that fails half way (its records half changed) never leaves an entry behind. The cache is bounded by the keys
it holds (least recently used buckets go first).

Spark hands a partition to whichever of its Python workers is idle, so a bucket meets its entry only when it
lands on the worker that ran it last: on ``local[2]`` about half the time. :func:`read_stats` sums the
counters the workers write when ``run_stream(stats_dir=...)`` is set (``bench/spark.py`` prints the hit rate).
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

__all__ = ["DEFAULT_CACHE_KEYS", "LiveBucket", "LiveCache", "read_stats", "tally", "worker_cache", "write_stats"]

DEFAULT_CACHE_KEYS: Final = 100_000
"""The default bound of a worker's cache, in table-form keys (about 100 MB; see ``run_stream(cache_keys=...)``);
an instance-form key counts as :data:`INSTANCE_WEIGHT`."""

INSTANCE_WEIGHT: Final = 100
"""How many table-form keys one live query instance counts as in the cache's bound: by default, instance-form
buckets of up to 1,000 keys are kept. A live instance is 10 to 50 KB (measured), and Python's collector walks all
of its objects: kept for a bucket that a later batch does not meet, they cost more than rebuilding saves."""

COUNTERS: Final = ("hits", "misses", "stale", "evicted", "reused", "decoded", "calls", "events", "outputs",
                   "python_us")


@dataclass(slots=True)
class LiveBucket:
    """What a worker keeps of a bucket it ran: the blob it wrote, the decoded bucket state (``BucketState``) and
    per key the bytes its live object was saved as and the object (a table record or a ``KeyRun``)."""

    blob: bytes
    state: Any
    live: dict[Any, tuple[bytes, Any]] = field(default_factory=dict)

    @property
    def weight(self) -> int:
        """Its size in the unit of the cache's bound: a table-form key (about 1 KB live) counts 1, an
        instance-form key (a live query instance: 10 to 50 KB measured) :data:`INSTANCE_WEIGHT`."""
        keys = max(len(self.state.keys), len(self.live), 1)
        return keys if self.state.form == "table" else keys * INSTANCE_WEIGHT


class LiveCache:
    """The buckets a worker process ran last, by ``(query fingerprint, bucket)``, at most ``max_keys`` keys."""

    def __init__(self, max_keys: int = DEFAULT_CACHE_KEYS) -> None:
        self.max_keys = max_keys
        self.counters = dict.fromkeys(COUNTERS, 0)
        self._entries: OrderedDict[tuple[str, int], LiveBucket] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()

    def take(
        self, fingerprint: str, bucket: int, blob: bytes | None, tally: dict[str, int] | None = None
    ) -> tuple[LiveBucket | None, bool]:
        """The bucket's entry (removed from the cache) and whether this worker wrote ``blob`` itself (a hit: its
        decoded bucket state is ``blob``'s). Otherwise (stale) its keys are still checked one by one against
        ``blob``'s. The outcome is counted in :attr:`counters` and in ``tally``."""
        with self._lock:
            entry = self._entries.pop((fingerprint, bucket), None)
            if entry is not None:
                self._weight -= entry.weight
            if entry is None:
                outcome = "misses"
            elif blob is None or entry.blob != blob:
                outcome = "stale"  # the store holds another state: rebuild from it
            else:
                outcome = "hits"
            self.counters[outcome] += 1
            if tally is not None:
                tally[outcome] += 1
            return entry, outcome == "hits"

    def put(self, fingerprint: str, bucket: int, entry: LiveBucket, tally: dict[str, int] | None = None) -> None:
        """Keep ``entry`` (after a successful run), evicting the least recently used buckets beyond the bound."""
        if self.max_keys <= 0:
            return
        with self._lock:
            old = self._entries.pop((fingerprint, bucket), None)
            if old is not None:
                self._weight -= old.weight
            self._entries[(fingerprint, bucket)] = entry
            self._weight += entry.weight
            while self._weight > self.max_keys and self._entries:
                _, evicted = self._entries.popitem(last=False)
                self._weight -= evicted.weight
                self.counters["evicted"] += 1
                if tally is not None:
                    tally["evicted"] += 1

    def clear(self) -> None:
        """Forget every entry (the counters stay)."""
        with self._lock:
            self._entries.clear()
            self._weight = 0

    def __len__(self) -> int:
        return len(self._entries)



_CACHE: Final = LiveCache()  # one per Python worker process


def worker_cache(max_keys: int) -> LiveCache:
    """This process's cache, its bound set to ``max_keys`` (the query's setting)."""
    _CACHE.max_keys = max_keys
    return _CACHE


_TALLIES: dict[str, dict[str, int]] = {}


def tally(directory: str) -> dict[str, int]:
    """This process's counters for the run whose statistics go to ``directory``."""
    counters = _TALLIES.get(directory)
    if counters is None:
        counters = _TALLIES[directory] = dict.fromkeys(COUNTERS, 0)
    return counters


def write_stats(directory: str) -> None:
    """Write this process's counters for ``directory`` to ``directory/<pid>.json`` (replacing its last file)."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    scratch = path / f".{os.getpid()}.json.tmp"
    scratch.write_text(json.dumps(tally(directory)))
    scratch.replace(path / f"{os.getpid()}.json")


def read_stats(directory: str | Path) -> dict[str, int]:
    """The workers' counters written under ``directory``, summed: ``hits`` (a bucket started from its live
    state), ``misses`` (no entry in that worker), ``stale`` (an entry, but the store held another state: rebuilt),
    ``evicted``; per key: ``reused`` (went on from its live object), ``decoded`` (from the store); ``calls``
    (buckets run), ``events`` and ``outputs`` (rows in and out), ``python_us`` (µs spent in reaqtive's code, from
    taking the bucket's rows from Spark to handing its outputs back)."""
    totals = dict.fromkeys(COUNTERS, 0)
    path = Path(directory)
    if not path.is_dir():
        return totals
    for file in path.glob("*.json"):
        counters = json.loads(file.read_text())
        for name in COUNTERS:
            totals[name] += int(counters.get(name, 0))
    return totals
