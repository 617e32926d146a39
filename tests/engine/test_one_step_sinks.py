"""Sinks attach in one step: ``create_subscription(..., observer=sink)`` defines ``obs://<name>`` the first time, and
``Engine(path, sinks=[sink])`` makes the name known before recovery (reaqtive.engine.named_sinks)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from reaqtive import Query
from reaqtive.connectors import JsonLinesSink, PostgresSink, WebhookSink
from reaqtive.engine import Engine, Output, RecoveryError, RecoveryPolicy
from reaqtive.engine.aio import AsyncEngine
from reaqtive.engine.named_sinks import MissingSinkError, SinkNameError

T0 = datetime(2026, 3, 1, tzinfo=UTC)
RECEIVED: list[Output] = []


def collect(output: Output) -> None:
    """A plain observer function: attached under its own name, ``collect``."""
    RECEIVED.append(output)


class Recorder:
    """A plain observer object: attached under its ``name``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.values: list[Any] = []

    def __call__(self, output: Output) -> None:
        self.values.append(output.value)


def add(total: int, x: int) -> int:
    return total + x


def running_sum() -> Query[int]:
    return Query.stream("numbers").scan(0, add)


def lines(path: Path) -> list[tuple[str, int, Any]]:
    return [(d["subscription"], d["seq"], d["value"]) for d in map(json.loads, path.read_text().splitlines())]


def open_engine(path: Path, *sinks: Any, **options: Any) -> Engine:
    return Engine(path, sinks=sinks, start=T0, synchronous="NORMAL", allow_modules=[__name__], observer_backoff=0,
                  **options)


def test_a_json_lines_sink_attaches_in_one_step_under_its_files_stem(tmp_path: Path) -> None:
    sink = JsonLinesSink(tmp_path / "alerts.jsonl", fsync=False)
    with open_engine(tmp_path / "app.db") as engine:  # a new store: no sinks= needed to attach
        engine.create_stream("numbers")
        engine.create_subscription("sums", running_sum(), observer=sink)
        engine.create_subscription("sums-again", running_sum(), observer=sink)  # the same sink: reused
        info = engine.info("obs://alerts")
        assert info.kind == "observer"
        assert {engine.info(uri).observer for uri in ("sums", "sums-again")} == {"obs://alerts"}
        for i in range(1, 4):
            engine.append("numbers", i, T0 + timedelta(seconds=i))
        engine.process()
    sink.close()
    assert sorted(lines(tmp_path / "alerts.jsonl")) == [
        ("sums", 0, 1), ("sums", 1, 3), ("sums", 2, 6), ("sums-again", 0, 1), ("sums-again", 1, 3),
        ("sums-again", 2, 6)]


def test_a_plain_function_and_a_named_object_attach_in_one_step(tmp_path: Path) -> None:
    RECEIVED.clear()
    recorder = Recorder("recorder")
    with open_engine(tmp_path / "app.db") as engine:
        engine.create_stream("numbers")
        engine.create_subscription("by-function", running_sum(), observer=collect)
        engine.create_subscription("by-object", running_sum(), observer=recorder)
        assert engine.info("by-function").observer == "obs://collect"
        assert engine.info("by-object").observer == "obs://recorder"
        engine.append_many("numbers", [(5, T0), (7, T0)])
        engine.process()
    assert [(o.subscription, o.seq, o.value) for o in RECEIVED] == [("by-function", 0, 5), ("by-function", 1, 12)]
    assert recorder.values == [5, 12]


def test_reopening_with_the_sink_passed_continues_the_outputs_exactly(tmp_path: Path) -> None:
    store, path = tmp_path / "app.db", tmp_path / "sums.jsonl"
    sink = JsonLinesSink(path, fsync=False)
    engine = open_engine(store, sink)
    engine.create_stream("numbers")
    engine.create_subscription("sums", running_sum(), observer=sink)
    for i in range(1, 11):
        engine.append("numbers", i, T0 + timedelta(seconds=i))
    engine.process()
    engine.checkpoint()
    for i in range(11, 16):  # processed and delivered, then lost with the process: replayed after the reopen
        engine.append("numbers", i, T0 + timedelta(seconds=i))
    engine.process()
    engine.close()  # no checkpoint: as a crash leaves it
    sink.close()
    assert len(lines(path)) == 15

    sink = JsonLinesSink(path, fsync=False)  # a new process: the same sink, passed before the store opens
    with open_engine(store, sink) as engine:
        assert engine.info("sums").observer == "obs://sums"
        for i in range(16, 21):
            engine.append("numbers", i, T0 + timedelta(seconds=i))
        engine.process()
    sink.close()
    assert lines(path) == [("sums", seq, sum(range(1, seq + 2))) for seq in range(20)]  # no loss, no repeat
    assert sink.repeats == 5, "the replayed outputs reached the sink again and were dropped there"


def test_reopening_without_the_sink_fails_naming_it_and_how_to_pass_it(tmp_path: Path) -> None:
    store = tmp_path / "app.db"
    with JsonLinesSink(tmp_path / "out.jsonl", name="alerts", fsync=False) as sink, open_engine(store) as engine:
        engine.create_stream("numbers")
        engine.create_subscription("sums", running_sum(), observer=sink)
    with pytest.raises(RecoveryError, match=r"obs://alerts") as raised:
        open_engine(store)
    assert isinstance(raised.value.__cause__, MissingSinkError)
    message = str(raised.value.__cause__)
    assert "the sink 'alerts', which this process did not provide" in message
    assert "Engine(path, sinks=[sink])" in message and "name='alerts'" in message
    with open_engine(store, recovery_policy=RecoveryPolicy.KEEP) as engine:  # kept, and reported
        assert [f.uri for f in engine.recovery.failures] == ["obs://alerts", "sums"]


def test_a_second_sink_under_a_taken_name_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    first = JsonLinesSink(tmp_path / "alerts.jsonl", fsync=False)
    second = JsonLinesSink(tmp_path / "other.jsonl", name="alerts", fsync=False)
    with open_engine(tmp_path / "app.db", first) as engine:
        engine.create_stream("numbers")
        engine.create_subscription("sums", running_sum(), observer=first)
        with pytest.raises(SinkNameError, match=r"sink name 'alerts' is already taken by JsonLinesSink\("):
            engine.create_subscription("other", running_sum(), observer=second)
        assert "other" not in {info.uri for info in engine.artifacts()}
        engine.define_observer("obs://collect", add)  # obs://collect means something else (by import path)
        with pytest.raises(SinkNameError, match=r"'obs://collect': that URI is already the observer of"):
            engine.create_subscription("by-function", running_sum(), observer=collect)
        assert "collect" not in engine.functions.names(), "refused before anything was registered"
    with pytest.raises(SinkNameError, match="two sinks need two names"):
        open_engine(tmp_path / "app.db", first, second)
    first.close()
    second.close()


def test_what_is_no_sink_is_refused_saying_what_is_accepted(tmp_path: Path) -> None:
    with Engine.in_memory(start=T0) as engine:
        engine.create_stream("numbers")
        with pytest.raises(TypeError, match=r"observer must be an observer URI .* a sink carrying its name .* got 42"):
            engine.create_subscription("q", running_sum(), observer=42)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="has no name for the store to keep"):
            engine.create_subscription("q", running_sum(), observer=lambda output: None)
        with pytest.raises(ValueError, match="a sink's name must be"):
            engine.create_subscription("q", running_sum(), observer=Recorder("a:b"))
        assert engine.artifacts()[0].uri == "numbers" and len(engine.artifacts()) == 1


def test_the_connectors_derive_a_name_from_their_configuration(tmp_path: Path) -> None:
    with JsonLinesSink(tmp_path / "alerts.jsonl", fsync=False) as sink:
        assert sink.name == "alerts"
    assert WebhookSink("https://hooks.example.com:8443/alerts/").name == "hooks.example.com/alerts"
    assert WebhookSink("https://hooks.example.com/x", name="hook").name == "hook"
    assert PostgresSink("postgresql://app@db/reports", "totals").name == "totals"
    assert PostgresSink("postgresql://app@db/reports", "totals", schema="out").name == "out.totals"
    with pytest.raises(ValueError, match=r"WebhookSink\('http://\[::1\]/x'\): a sink's name .* \(pass name=\.\.\.\)"):
        WebhookSink("http://[::1]/x")


def test_the_async_engine_attaches_a_sink_in_one_step(tmp_path: Path) -> None:
    recorder = Recorder("recorder")

    async def main() -> None:
        async with await AsyncEngine.open(tmp_path / "app.db", sinks=[recorder], start=T0,
                                          allow_modules=[__name__]) as engine:
            await engine.create_stream("numbers")
            await engine.create_subscription("sums", running_sum(), observer=recorder)
            await engine.append("numbers", 4, T0)
            await engine.process()

    asyncio.run(main())
    assert recorder.values == [4]
