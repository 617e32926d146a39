"""Keyed result selectors and max_concurrent in the engine (issue 32): the form is recorded and kept.

A subscription created now whose ``flat_map`` has a result selector (the stored query's way to put the key into
the output) or ``max_concurrent`` runs keyed and recovers keyed. One created by the previous release ran them on
the general path, and its record says ``keyed`` without a ``keyed_form``: it recovers on the general path (its
stored state is the general path's), twice over, and goes on; the engine says so at INFO. Either way the outputs
equal an uninterrupted run.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from reaqtive import GroupedStream, Query, keyed_execution
from reaqtive.engine import Engine
from reaqtive.state.sqlite_store import row_checksum
from tests.engine.test_engine_higher_order import state_keys

T0 = datetime(2026, 1, 1, tzinfo=UTC)
URI = "tagged"


def key_of(x: int) -> int:
    return x % 50


def increment(count: int, _: object) -> int:
    return count + 1


def running_count(group: GroupedStream[int]) -> Query[Any]:
    return group.scan(0, increment)


def first_three(group: GroupedStream[int]) -> Query[Any]:
    return group.take(3)


def tag(group: Any, count: int) -> tuple[object, int]:
    return (group.key, count)


def tagged_counts(source: Query[int]) -> Query[Any]:
    return source.group_by(key_of).flat_map(running_count, tag)


def bounded_firsts(source: Query[int]) -> Query[Any]:
    return source.group_by(key_of).flat_map(first_three, tag, max_concurrent=5)


def new_engine(path: Path) -> Engine:
    return Engine(path, allow_modules=[__name__], start=T0)


def create(path: Path, form: Any, *, keyed: bool) -> Engine:
    engine = new_engine(path)
    engine.create_stream("raw")
    with keyed_execution(keyed):
        engine.create_subscription(URI, form(Query.stream("raw")))
    return engine


def append(engine: Engine, events: range) -> None:
    engine.append_many("raw", [(x, T0 + timedelta(milliseconds=x)) for x in events])


def uninterrupted(path: Path, form: Any, events: range) -> list[object]:
    engine = create(path, form, keyed=False)
    append(engine, events)
    engine.process()
    values = [output.value for output in engine.outputs(URI)]
    engine.close()
    return values


def record_of_previous_release(path: Path, uri: str) -> None:
    """Make the subscription's record what the release before keyed result selectors wrote: ``keyed`` true (keyed
    execution was on), no ``keyed_form``; its state (created with keyed execution off) is the general path's, as
    that release's was for a query with a result selector."""
    connection = sqlite3.connect(path)
    try:
        (value,) = connection.execute(
            "SELECT value FROM reaqtive_blobs WHERE category = 'artifacts' AND key = ?", (uri,)
        ).fetchone()
        record = json.loads(value)
        assert record["keyed"] is False and "keyed_form" not in record
        record["keyed"] = True
        blob = json.dumps(record).encode("utf-8")
        connection.execute(
            "UPDATE reaqtive_blobs SET value = ?, crc = ? WHERE category = 'artifacts' AND key = ?",
            (blob, row_checksum("artifacts", uri, blob), uri),
        )
        connection.commit()
    finally:
        connection.close()


@pytest.mark.parametrize("form", [tagged_counts, bounded_firsts], ids=["result selector", "max_concurrent"])
def test_a_new_subscription_runs_keyed_and_recovers_keyed_twice(tmp_path: Path, form: Any) -> None:
    events = range(3000)
    expected = uninterrupted(tmp_path / "oracle.db", form, events)
    path = tmp_path / "keyed.db"
    engine = create(path, form, keyed=True)
    append(engine, events)
    engine.process(max_events=1000)
    engine.checkpoint()
    keys = state_keys(path)
    assert any("/keyed" in key for key in keys)
    assert not any("/flat_map" in key for key in keys)  # no unit per group
    engine.process(max_events=500)
    engine.close()  # no checkpoint: those 500 are replayed

    engine = new_engine(path)
    engine.process(max_events=700)
    engine.checkpoint()
    engine.process(max_events=300)
    engine.close()
    engine = new_engine(path)
    engine.process()
    assert [output.value for output in engine.outputs(URI)] == expected
    engine.close()


def test_a_result_selector_subscription_of_the_previous_release_recovers_on_the_general_path(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    events = range(3000)
    expected = uninterrupted(tmp_path / "oracle.db", tagged_counts, events)
    path = tmp_path / "previous-release.db"
    engine = create(path, tagged_counts, keyed=False)  # the previous release's path for it: a group per key ...
    append(engine, events)
    engine.process(max_events=1000)
    engine.checkpoint()
    engine.process(max_events=700)
    engine.close()
    record_of_previous_release(path, URI)  # ... under a record saying keyed execution was on
    assert sum("/flat_map" in key for key in state_keys(path)) == 50

    with caplog.at_level(logging.INFO, logger="reaqtive.engine"):
        engine = new_engine(path)
    messages = [r.getMessage() for r in caplog.records if r.name == "reaqtive.engine" and r.levelno == logging.INFO]
    assert any(URI in m and "general path" in m and "result_selector" in m for m in messages), messages
    engine.process(max_events=600)
    engine.checkpoint()
    engine.close()
    assert sum("/flat_map" in key for key in state_keys(path)) == 50  # still the general path's units
    engine = new_engine(path)  # a second recovery
    engine.process(max_events=300)
    engine.close()
    engine = new_engine(path)
    engine.process()
    assert [output.value for output in engine.outputs(URI)] == expected
    engine.close()


def test_the_engine_says_once_why_a_group_by_binds_general(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    engine = new_engine(tmp_path / "general.db")
    engine.create_stream("raw")
    with caplog.at_level(logging.INFO, logger="reaqtive.engine"):
        engine.create_subscription("windows", Query.stream("raw").group_by(key_of).flat_map(windowed))
        engine.create_subscription(URI, tagged_counts(Query.stream("raw")))
    messages = [r.getMessage() for r in caplog.records if r.name == "reaqtive.engine" and r.levelno == logging.INFO
                and "general path" in r.getMessage()]
    assert len(messages) == 1  # the keyed one says nothing
    assert "'windows'" in messages[0] and "'window'" in messages[0]
    (record,) = [r for r in caplog.records if getattr(r, "reaqtive_event", None) == "general_path"]
    assert record.subscription == "windows" and "'window'" in record.reason  # type: ignore[attr-defined]
    engine.close()


def windowed(group: GroupedStream[int]) -> Query[Any]:
    return group.window(3).merge_all()  # (windows merged without flat_map keep the general path)
