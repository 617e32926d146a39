"""reaqtive logs like a library: a ``NullHandler`` on the ``reaqtive`` logger (nothing reaches stderr through
Python's last-resort handler unless the application configures logging), and an error is raised or logged, not
both: the caller of a failing call gets one exception, the log does not repeat it with a second traceback. What
the engine handles itself (an artifact kept or removed by the recovery policy) is logged, since nobody else hears
of it."""

from __future__ import annotations

import ast
import logging
import subprocess
import sys
from pathlib import Path

import pytest

import reaqtive
from reaqtive import Engine, FunctionRegistry, Query, RecoveryPolicy
from reaqtive.engine import RecoveryError

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(reaqtive.__file__).resolve().parent
_LEVELS = frozenset({"warning", "error", "exception", "critical"})


def is_hot(reading: int) -> bool:
    return reading > 3


def store_with_a_query_using(tmp_path: Path) -> Path:
    """A store whose subscription filters with the registered function ``is_hot``, checkpointed."""
    path = tmp_path / "store.db"
    functions = FunctionRegistry()
    functions.register("is_hot", is_hot)
    with Engine(path, functions=functions) as engine:
        engine.create_stream("readings")
        engine.create_subscription("hot", Query.stream("readings").filter(is_hot))
        engine.append_many("readings", [(1, None), (5, None)])
        engine.process()
        engine.checkpoint()
    return path


def test_the_reaqtive_logger_has_a_null_handler() -> None:
    handlers = logging.getLogger("reaqtive").handlers
    assert any(isinstance(handler, logging.NullHandler) for handler in handlers)
    assert not [handler for handler in handlers if not isinstance(handler, logging.NullHandler)]


def test_reopening_without_a_registered_function_raises_once_and_logs_no_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = store_with_a_query_using(tmp_path)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="reaqtive"), pytest.raises(RecoveryError) as raised:
        Engine(path)  # no FunctionRegistry: is_hot is unknown, and the default policy (FAIL) refuses to open
    assert "'@is_hot', which is not registered" in str(raised.value)
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert errors == [], [record.getMessage() for record in errors]
    assert not [record for record in caplog.records if record.exc_info]


def test_a_failure_the_recovery_policy_handles_is_logged_once_with_its_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = store_with_a_query_using(tmp_path)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="reaqtive"), Engine(path, recovery_policy=RecoveryPolicy.KEEP) as engine:
        assert [failure.uri for failure in engine.recovery.failures] == ["hot"]
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert getattr(errors[0], "reaqtive_event", None) == "recovery_failed"
    assert errors[0].exc_info is not None


def test_an_application_without_logging_configured_sees_one_traceback(tmp_path: Path) -> None:
    """What a user sees: the exception's own traceback (with its cause) and nothing printed by the library."""
    path = store_with_a_query_using(tmp_path)
    done = subprocess.run([sys.executable, "-c", f"from reaqtive import Engine\nEngine({str(path)!r})"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert done.stderr.startswith("Traceback (most recent call last):")  # no log line before it
    assert done.stderr.count("Traceback (most recent call last):") == 2  # the RecoveryError and its cause
    assert "RecoveryError: recovering 'hot' failed" in done.stderr.splitlines()[-1]


def _logs_then_raises(block: list[ast.stmt]) -> list[int]:
    """The lines of warning-or-worse log calls in ``block`` that a ``raise`` (direct, or under an ``if``) follows."""
    found = []
    for index, statement in enumerate(block):
        call = statement.value if isinstance(statement, ast.Expr) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in _LEVELS
                and "log" in ast.unparse(call.func.value).lower()):
            continue
        for later in block[index + 1:]:
            branches = [later] if isinstance(later, ast.Raise) else [
                *getattr(later, "body", []), *getattr(later, "orelse", [])] if isinstance(later, ast.If) else []
            if any(isinstance(branch, ast.Raise) for branch in branches):
                found.append(statement.lineno)
                break
    return found


def test_no_library_code_logs_an_error_and_then_raises_it() -> None:
    """Raise or log, not both: a log call at warning level or above followed, in the same block, by a raise."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            for field in ("body", "orelse", "finalbody"):
                block = getattr(node, field, None)
                if isinstance(block, list):
                    offenders += [f"{path.relative_to(PACKAGE.parent)}:{line}" for line in _logs_then_raises(block)]
    assert offenders == []
