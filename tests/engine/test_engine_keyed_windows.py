"""Windows inside groups in the engine (issue 32): the Rx form of a per-key window average runs keyed in a new
subscription and recovers keyed; a subscription stored before windows ran keyed (its record says keyed form 2,
its state is the general path's: a unit per group) recovers on the general path and goes on; either way the
outputs equal an uninterrupted run.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from reaqtive import GroupedStream, InnerStream, Query
from reaqtive.engine import Engine
from reaqtive.operators.keyed_steps import FORM_BEFORE_WINDOWS, KEYED_FORM, in_keyed_form
from tests.engine.test_engine_higher_order import state_keys

T0 = datetime(2026, 1, 1, tzinfo=UTC)
URI = "averages"
WINDOW = timedelta(seconds=10)


def key_of(x: int) -> int:
    return x % 7


def add_to_tally(tally: tuple[int, int], x: int) -> tuple[int, int]:
    return tally[0] + 1, tally[1] + x


def nonempty(tally: tuple[int, int]) -> bool:
    return tally[0] > 0


def tally(window: InnerStream[int]) -> Query[tuple[int, int]]:
    return window.aggregate(add_to_tally, (0, 0))


class with_key:  # noqa: N801 (a function with the group inside: named like one)
    def __init__(self, group: GroupedStream[int]) -> None:
        self.group = group

    def __call__(self, tally: tuple[int, int]) -> tuple[object, float]:
        return (self.group.key, tally[1] / tally[0])


def averages(group: GroupedStream[int]) -> Query[Any]:
    """Per key, the average of each 10 s window (aligned on the key's first element, Rx's way), empty ones
    dropped."""
    return group.window(WINDOW).flat_map(tally).filter(nonempty).map(with_key(group))


def new_engine(path: Path) -> Engine:
    return Engine(path, allow_modules=[__name__], start=T0)


def create(path: Path, form: int) -> Engine:
    engine = new_engine(path)
    engine.create_stream("raw")
    with in_keyed_form(form):
        engine.create_subscription(URI, Query.stream("raw").group_by(key_of).flat_map(averages))
    return engine


def append(engine: Engine, events: range) -> None:
    # key x % 7 comes every 7 events, 300 ms apart: about 5 elements per key and window, and gaps
    engine.append_many("raw", [(x, T0 + timedelta(milliseconds=300 * x + (x // 40) * 9000)) for x in events])


def finish(engine: Engine, events: range) -> list[object]:
    engine.process()
    engine.advance_time(T0 + timedelta(milliseconds=300 * events[-1] + (events[-1] // 40) * 9000) + 3 * WINDOW)
    engine.checkpoint()
    values = [output.value for output in engine.outputs(URI)]
    engine.close()
    return values


def recorded_form(path: Path, uri: str) -> object:
    """The keyed form the subscription's record holds."""
    connection = sqlite3.connect(path)
    try:
        (blob,) = connection.execute(
            "SELECT value FROM reaqtive_blobs WHERE category = 'artifacts' AND key = ?", (uri,)
        ).fetchone()
    finally:
        connection.close()
    return json.loads(blob).get("keyed_form")


EVENTS = range(400)


def test_the_rx_form_runs_keyed_in_a_new_subscription_and_recovers_keyed(tmp_path: Path) -> None:
    oracle = create(tmp_path / "oracle.db", 0)
    append(oracle, EVENTS)
    expected = finish(oracle, EVENTS)
    assert len(expected) > 50

    path = tmp_path / "keyed.db"
    engine = create(path, KEYED_FORM)
    append(engine, EVENTS)
    engine.process(max_events=150)
    engine.checkpoint()
    keys = state_keys(path)
    assert any("/keyed" in key for key in keys)  # one page of the 7 keys
    assert not any("/flat_map" in key for key in keys)  # no unit per group, none per window
    engine.process(max_events=100)
    engine.close()  # no checkpoint: those 100 are replayed

    engine = new_engine(path)
    engine.process(max_events=60)
    engine.checkpoint()
    engine.close()
    engine = new_engine(path)  # a second recovery
    assert finish(engine, EVENTS) == expected
    assert recorded_form(path, URI) == KEYED_FORM  # the form it was bound in


def test_a_store_written_before_windows_ran_keyed_recovers_them_on_the_general_path(tmp_path: Path) -> None:
    oracle = create(tmp_path / "oracle.db", KEYED_FORM)
    append(oracle, EVENTS)
    expected = finish(oracle, EVENTS)

    path = tmp_path / "previous-release.db"
    engine = create(path, FORM_BEFORE_WINDOWS)  # the previous release: windows on the general path
    append(engine, EVENTS)
    engine.process(max_events=150)
    engine.checkpoint()
    engine.process(max_events=90)
    engine.close()
    assert recorded_form(path, URI) == FORM_BEFORE_WINDOWS  # what the previous release wrote
    groups = sum("/flat_map" in key and key.count("/") == 2 for key in state_keys(path))
    assert groups == 7  # a unit per group

    engine = new_engine(path)  # windows run keyed by default now; this subscription keeps its form
    engine.process(max_events=70)
    engine.checkpoint()
    engine.close()
    assert not any("/keyed" in key for key in state_keys(path))
    engine = new_engine(path)
    assert finish(engine, EVENTS) == expected
