"""Scripted workloads for the differential engine tests (batch delivery, whole runs read into fused stages): a
script of appends, bounded processing, checkpoints and crashes, played on two engines that must not differ."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from reaqtive import Query
from reaqtive.engine import Engine

T0 = datetime(2026, 1, 1, tzinfo=UTC)
GAPS = (0, 0, 1, 250, 999, 1000, 1500, 4000)
"""Milliseconds between two events: the same instant, just after, around the windows' and timers' lengths."""


@dataclass(frozen=True)
class Step:
    kind: str  # "append" a batch; "process" up to n (0: all); "checkpoint"; "crash"
    stream: str = "a"
    gaps: tuple[int, ...] = ()  # per event, milliseconds after the previous event (0: the same time)
    n: int = 0


def scripts(streams: Iterable[str], *, batch: int, process: int, length: int) -> st.SearchStrategy[list[Step]]:
    """Scripts of up to ``length`` steps: appends of up to ``batch`` events to one of ``streams`` (twice as likely
    as the other steps), processing of up to ``process`` events (0: all), checkpoints and crashes."""
    appends = st.builds(Step, st.just("append"), st.sampled_from(list(streams)),
                        st.lists(st.sampled_from(GAPS), min_size=1, max_size=batch).map(tuple))
    return st.lists(
        st.one_of(appends, appends, st.builds(Step, st.just("process"), n=st.integers(0, process)),
                  st.builds(Step, st.just("checkpoint")), st.builds(Step, st.just("crash"))),
        min_size=1, max_size=length,
    )


def state_rows(path: Path) -> dict[str, bytes]:
    """The state blobs of the SQLite store at ``path``, by key."""
    with sqlite3.connect(path) as db:
        return {key: bytes(blob) for key, blob in
                db.execute("SELECT key, value FROM reaqtive_blobs WHERE category = 'state'")}


def play(path: Path, script: list[Step], open_engine: Callable[[], Engine], create: Callable[[Engine], None],
         observe: Callable[[Engine], dict[str, Any]]) -> dict[str, Any]:
    """Play ``script`` on the store at ``path`` (``create`` makes the streams and subscriptions of a new engine;
    a crash closes the engine and opens it again), then process everything, move the clock 10 s past the last
    event and checkpoint. Returns the clock after each processing, the state rows after each checkpoint and what
    ``observe`` sees at the end."""
    engine = open_engine()
    create(engine)
    clock, value = T0, 0
    seen: dict[str, Any] = {"clocks": [], "states": []}
    try:
        for step in script:
            if step.kind == "append":
                events = []
                for gap in step.gaps:
                    clock += timedelta(milliseconds=gap)
                    value += 1
                    events.append((value, clock))
                engine.append_many(step.stream, events)
            elif step.kind == "process":
                engine.process(max_events=step.n or None)
                seen["clocks"].append(engine.now)
            elif step.kind == "checkpoint":
                engine.checkpoint()
                seen["states"].append(state_rows(path))
            else:
                engine.close()
                engine = open_engine()
        engine.process()
        engine.advance_time(clock + timedelta(seconds=10))
        seen["clocks"].append(engine.now)
        engine.checkpoint()
        seen["states"].append(state_rows(path))
        seen.update(observe(engine))
        return seen
    finally:
        engine.close()


def create_queries(engine: Engine, streams: Iterable[str], queries: dict[str, tuple[Query[Any], str | None]],
                   chosen: Iterable[str]) -> None:
    """Create ``streams``, then the ``chosen`` subscriptions of ``queries`` (uri: query and error policy)."""
    for stream in streams:
        engine.create_stream(stream)
    for uri in chosen:
        query, on_error = queries[uri]
        engine.create_subscription(uri, query, on_error=on_error)  # type: ignore[arg-type]
