"""Structured logging: every log call of the engine carries ``extra=`` fields, their names are documented in
``LOG_FIELDS`` and cannot clash with a LogRecord's own attributes (a clash raises KeyError inside logging), and the
main lines (checkpoint, recovery, recovery failure, fault, observer failure, quarantine, a query's error) carry
the figures and names the engine acted on."""

from __future__ import annotations

import ast
import logging
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import reaqtive.engine
import reaqtive.state
from reaqtive import Query
from reaqtive.engine import LOG_FIELDS, Engine, FunctionRegistry, Output, RecoveryPolicy
from reaqtive.state.sqlite_store import row_checksum

T0 = datetime(2026, 1, 1, tzinfo=UTC)
_LEVELS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "log"})
_RECORD_ATTRIBUTES = frozenset(logging.LogRecord("n", logging.INFO, "p", 1, "m", None, None).__dict__) | {
    "message", "asctime", "taskName"}


def at(i: int) -> datetime:
    return T0 + timedelta(seconds=i)


def add(total: int, value: int) -> int:
    return total + value


def fail_on_three(x: int) -> int:
    if x == 3:
        raise ValueError("three is not allowed")
    return x


def always_refuse(output: Output) -> None:
    raise ConnectionError(f"the consumer is down (output #{output.seq})")


def functions() -> FunctionRegistry:
    registry = FunctionRegistry()
    for function in (add, fail_on_three, always_refuse):
        registry.register(function.__name__, function)
    return registry


# -- the source: every call has extra=, every field is documented -------------------------------------------------


def _log_calls() -> Iterator[tuple[str, ast.Call]]:
    """Every call of a logging method in the engine's and the state layer's modules."""
    for package in (reaqtive.engine, reaqtive.state):
        for path in sorted(Path(package.__path__[0]).glob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for node in ast.walk(tree):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in _LEVELS and "log" in ast.unparse(node.func.value).lower()):
                    yield f"{path.name}:{node.lineno}", node


def test_every_engine_log_call_has_documented_extra_fields() -> None:
    calls = list(_log_calls())
    assert len(calls) >= 9, "the walk finds the engine's log calls"
    for where, call in calls:
        extra = next((keyword.value for keyword in call.keywords if keyword.arg == "extra"), None)
        assert extra is not None, f"{where}: a log call without extra= fields"
        assert isinstance(extra, ast.Dict), f"{where}: extra= must be a dict literal (the test reads its keys)"
        keys = [key.value for key in extra.keys if isinstance(key, ast.Constant) and isinstance(key.value, str)]
        assert len(keys) == len(extra.keys), f"{where}: extra= keys must be string literals"
        assert "reaqtive_event" in keys, f"{where}: extra= must name the line (reaqtive_event)"
        undocumented = set(keys) - set(LOG_FIELDS)
        assert not undocumented, f"{where}: fields {sorted(undocumented)} are not in LOG_FIELDS"


def test_no_documented_field_clashes_with_a_log_record_attribute() -> None:
    assert not set(LOG_FIELDS) & _RECORD_ATTRIBUTES


# -- the lines themselves -----------------------------------------------------------------------------------------


class Capture(logging.Handler):
    """Keeps the records, and checks each one's extra fields against LOG_FIELDS as it arrives."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def events(self, name: str) -> list[logging.LogRecord]:
        return [record for record in self.records if getattr(record, "reaqtive_event", None) == name]

    def one(self, name: str) -> dict[str, object]:
        found = self.events(name)
        assert len(found) == 1, [r.getMessage() for r in self.records]
        fields = {key: item for key, item in vars(found[0]).items() if key not in _RECORD_ATTRIBUTES}
        assert set(fields) <= set(LOG_FIELDS), f"undocumented fields {sorted(set(fields) - set(LOG_FIELDS))}"
        return fields


@pytest.fixture
def capture() -> Iterator[Capture]:
    handler = Capture()
    logger = logging.getLogger("reaqtive.engine")
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def test_the_checkpoint_line_carries_the_checkpoints_figures(capture: Capture) -> None:
    with Engine.in_memory(start=T0, functions=functions()) as engine:
        engine.create_stream("s")
        engine.create_subscription("q", Query.stream("s").scan(0, add))
        engine.append_many("s", [(i, at(i)) for i in range(5)])
        engine.process()
        metrics = engine.checkpoint(full=True)
    assert capture.one("checkpoint") == {
        "reaqtive_event": "checkpoint", "checkpoint_id": metrics.checkpoint_id, "full": True,
        "pause_seconds": metrics.pause_seconds, "serialize_seconds": metrics.serialize_seconds,
        "commit_seconds": metrics.commit_seconds, "egress_seconds": metrics.egress_seconds,
        "bytes_written": metrics.bytes_written, "dirty_subscriptions": metrics.dirty_subscriptions,
        "ingress_truncated": metrics.ingress_truncated,
    }


def test_a_custom_logger_gets_the_same_fields(capture: Capture) -> None:
    own = logging.getLogger("tests.engine.own_logger")
    handler = Capture()
    own.addHandler(handler)
    own.setLevel(logging.DEBUG)
    own.propagate = False
    try:
        with Engine.in_memory(start=T0, logger=own) as engine:
            engine.checkpoint()
    finally:
        own.removeHandler(handler)
    assert handler.one("checkpoint")["full"] is False
    assert capture.events("checkpoint") == [], "the engine's default logger heard nothing"


def put_state(path: Path, key: str, blob: bytes) -> None:
    with sqlite3.connect(path) as db:
        db.execute("INSERT OR REPLACE INTO reaqtive_blobs (category, key, value, crc) VALUES (?, ?, ?, ?)",
                   ("state", key, blob, row_checksum("state", key, blob)))


def test_the_recovery_lines_name_the_failed_artifact_and_count_everything(tmp_path: Path, capture: Capture) -> None:
    path = tmp_path / "s.db"
    with Engine(path, start=T0, functions=functions()) as engine:
        engine.create_stream("s")
        engine.create_subscription("broken", Query.stream("s").scan(0, add))
        engine.create_subscription("healthy", Query.stream("s").scan(0, add))
        engine.append("s", 1, at(1))
        engine.process()
        engine.checkpoint()
    put_state(path, "broken", b"RQ\x01 not a state blob")
    capture.records.clear()
    with Engine(path, functions=functions(), recovery_policy=RecoveryPolicy.KEEP) as engine:
        recovery = engine.recovery
        failed = capture.one("recovery_failed")
        assert failed == {"reaqtive_event": "recovery_failed", "artifact": "broken", "kind": "subscription",
                          "policy": "keep", "error_type": type(recovery.failures[0].error).__name__}
        assert capture.one("recovery") == {
            "reaqtive_event": "recovery", "streams": 1, "definitions": 0, "subscriptions": 1,
            "inner_subscriptions": 0, "failures": 1, "orphans": 0, "duration_seconds": recovery.phases["total"],
        }


def test_the_fault_line_of_an_observer_that_gave_up_names_it_and_the_output(capture: Capture) -> None:
    with Engine.in_memory(start=T0, functions=functions(), observer_retries=1, observer_backoff=0) as engine:
        engine.define_observer("down", always_refuse)
        engine.create_stream("s")
        engine.create_subscription("q", Query.stream("s").scan(0, add), "down")
        engine.append_many("s", [(i, at(i)) for i in range(3)])
        engine.process()
    fault = capture.one("fault")
    assert fault == {"reaqtive_event": "fault", "subscription": "q", "policy": "keep",
                     "error_type": "ObserverFailedError", "observer": "down", "seq": 0}
    assert capture.events("fault")[0].levelno == logging.ERROR


def test_a_query_that_raises_logs_its_error_and_its_subscription(capture: Capture) -> None:
    with Engine.in_memory(start=T0, functions=functions()) as engine:
        engine.create_stream("s")
        engine.create_subscription("q", Query.stream("s").map(fail_on_three))
        engine.append_many("s", [(i, at(i)) for i in range(5)])
        engine.process()
    assert capture.one("subscription_failed") == {"reaqtive_event": "subscription_failed", "subscription": "q",
                                                  "error_type": "ValueError", "pos": 4, "unit": "q",
                                                  "operator": "reaqtive:map", "path": "0/0"}
    assert capture.events("subscription_failed")[0].levelno == logging.ERROR


def test_the_quarantine_line_names_the_event_and_why(capture: Capture) -> None:
    with Engine.in_memory(start=T0, functions=functions(), allowed_lateness=timedelta(seconds=1)) as engine:
        engine.create_stream("s")
        engine.create_subscription("q", Query.stream("s").scan(0, add))
        engine.append_many("s", [(1, at(10)), (2, at(2))])  # the second is 8 s late
        engine.process()
        reason = engine.dead_letters("s")[0].reason
    line = capture.one("quarantine")
    assert line == {"reaqtive_event": "quarantine", "stream": "s", "seq": 1, "reason": reason}
    assert capture.events("quarantine")[0].levelno == logging.WARNING
