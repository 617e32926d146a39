"""Keyed execution in the engine: a subscription keeps the form it was created in (issue 17, item 1).

A subscription created now runs its keyed chains keyed (pages of keys as state units, no unit per group) and
records that form; one created before keyed execution existed (its record has no ``keyed`` field, its state is
the general path's) recovers on the general path and goes on; either way the outputs equal an uninterrupted run.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from reaqtive import GroupedStream, Query, keyed_execution
from reaqtive.engine import Engine
from reaqtive.state.sqlite_store import row_checksum
from tests.engine.test_engine_higher_order import state_keys

T0 = datetime(2026, 1, 1, tzinfo=UTC)
URI = "counts"


def key_of(x: int) -> int:
    return x % 50


def increment(count: int, _: object) -> int:
    return count + 1


def running_count(group: GroupedStream[int]) -> Query[Any]:
    return group.filter(is_even_or_small).scan(0, increment).map(with_key(group))


def is_even_or_small(x: int) -> bool:
    return x % 2 == 0 or x < 100


class with_key:  # noqa: N801 (a function with the group inside: named like one)
    def __init__(self, group: GroupedStream[int]) -> None:
        self.group = group

    def __call__(self, count: int) -> tuple[object, int]:
        return (self.group.key, count)


def new_engine(path: Path) -> Engine:
    return Engine(path, allow_modules=[__name__], start=T0)


def create(path: Path, *, keyed: bool) -> Engine:
    engine = new_engine(path)
    engine.create_stream("raw")
    with keyed_execution(keyed):
        engine.create_subscription(URI, Query.stream("raw").group_by(key_of).flat_map(running_count))
    return engine


def append(engine: Engine, events: range) -> None:
    engine.append_many("raw", [(x, T0 + timedelta(milliseconds=x)) for x in events])


def uninterrupted(path: Path, events: range, *, keyed: bool) -> list[object]:
    engine = create(path, keyed=keyed)
    append(engine, events)
    engine.process()
    values = [output.value for output in engine.outputs(URI)]
    engine.close()
    return values


def drop_keyed_field(path: Path, uri: str) -> None:
    """Make the subscription's record what the release before keyed execution wrote: no ``keyed`` field."""
    connection = sqlite3.connect(path)
    try:
        (value,) = connection.execute(
            "SELECT value FROM reaqtive_blobs WHERE category = 'artifacts' AND key = ?", (uri,)
        ).fetchone()
        record = json.loads(value)
        assert record.pop("keyed") is False
        blob = json.dumps(record).encode("utf-8")
        connection.execute(
            "UPDATE reaqtive_blobs SET value = ?, crc = ? WHERE category = 'artifacts' AND key = ?",
            (blob, row_checksum("artifacts", uri, blob), uri),
        )
        connection.commit()
    finally:
        connection.close()


def test_a_new_subscription_runs_keyed_its_keys_in_pages_and_recovers_keyed(tmp_path: Path) -> None:
    events = range(3000)
    expected = uninterrupted(tmp_path / "oracle.db", events, keyed=False)
    path = tmp_path / "keyed.db"
    engine = create(path, keyed=True)
    append(engine, events)
    engine.process(max_events=1500)
    engine.checkpoint()
    keys = state_keys(path)
    assert any("/keyed" in key for key in keys)  # the page of the 50 keys
    assert not any("/flat_map" in key for key in keys)  # no unit per group
    assert len(keys) <= 3
    engine.process(max_events=500)
    engine.close()  # no checkpoint: those 500 are replayed

    engine = new_engine(path)
    engine.process()
    assert [output.value for output in engine.outputs(URI)] == expected
    engine.close()


def test_a_store_written_before_keyed_execution_recovers_on_the_general_path_and_goes_on(tmp_path: Path) -> None:
    events = range(3000)
    expected = uninterrupted(tmp_path / "oracle.db", events, keyed=True)
    path = tmp_path / "previous-release.db"
    engine = create(path, keyed=False)  # the previous release's form: a group per key ...
    append(engine, events)
    engine.process(max_events=1000)
    engine.checkpoint()
    engine.process(max_events=700)
    engine.close()
    drop_keyed_field(path, URI)  # ... and its record, which had no "keyed" field
    assert sum("/flat_map" in key for key in state_keys(path)) == 50

    engine = new_engine(path)  # keyed execution is on by default now
    engine.process(max_events=600)
    engine.checkpoint()
    engine.close()
    assert sum("/flat_map" in key for key in state_keys(path)) == 50  # still the general path's units
    engine = new_engine(path)
    engine.process()
    assert [output.value for output in engine.outputs(URI)] == expected
    engine.close()


def test_the_form_is_recorded_per_subscription(tmp_path: Path) -> None:
    path = tmp_path / "both.db"
    engine = create(path, keyed=True)
    with keyed_execution(False):
        engine.create_subscription("general", Query.stream("raw").group_by(key_of).flat_map(running_count))
    append(engine, range(400))
    engine.process()
    engine.checkpoint()
    engine.close()
    keys = state_keys(path)
    assert any(key.startswith("general/flat_map") for key in keys)
    assert not any(key.startswith(f"{URI}/flat_map") for key in keys)

    engine = new_engine(path)  # each recovers in its own form, whatever the default
    append(engine, range(400, 800))
    engine.process()
    assert [o.value for o in engine.outputs(URI)] == [o.value for o in engine.outputs("general")]
    engine.close()
