"""The errors a user of the ``reaqtive`` command meets: one line on stderr, never a log record's traceback, and
the exit code the command's docstring gives (1: a recovery failed; 2: anything else)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reaqtive import Query
from reaqtive.engine import Engine

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 1, 1, tzinfo=UTC)

# A module of its own, so that the store names a function of a module the command does not allow.
SERVICE = '''
import logging

from reaqtive.engine import FunctionRegistry


def double(x):
    return x * 2


def make_functions():
    try:
        raise ValueError("the cause")
    except ValueError as error:
        logging.getLogger("reaqtive.engine").warning("a warning\\nover two lines", exc_info=error)
    return FunctionRegistry()
'''


def command(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m reaqtive.cli ARGV`` in a process of its own: logging as a user's shell meets it (no handler
    configured), the source tree of this checkout first on the path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(cwd)])}
    return subprocess.run([sys.executable, "-m", "reaqtive.cli", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.fixture
def service(tmp_path: Path) -> tuple[Path, str]:
    """A store whose query uses ``<module>.double``, and that module, importable from ``tmp_path``."""
    module = f"cli_service_{os.getpid()}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(SERVICE))
    sys.path.insert(0, str(tmp_path))
    try:
        functions = __import__(module)
        path = tmp_path / "store.db"
        with Engine(path, start=T0, allow_modules=[module]) as engine:
            engine.create_stream("s")
            engine.create_subscription("q://doubled", Query.stream("s").map(functions.double))
            engine.checkpoint()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(module, None)
    return path, module


def test_a_recovery_failure_is_one_line_with_exit_code_2(service: tuple[Path, str]) -> None:
    """The engine logs the failed recovery with its traceback; the command says it once, in its own line."""
    path, module = service
    result = command("checkpoint", str(path), cwd=path.parent)
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"reaqtive checkpoint: {path}: recovering 'q://doubled' failed")
    assert f"--allow-module {module}" in result.stderr and "Traceback" not in result.stderr


def test_a_library_warning_of_a_command_that_succeeds_is_one_line_without_its_traceback(
    service: tuple[Path, str],
) -> None:
    path, module = service
    result = command("checkpoint", "--allow-module", module, "--functions", f"{module}:make_functions", str(path),
                     cwd=path.parent)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "reaqtive checkpoint: warning: a warning over two lines\n"
    assert "checkpoint" in result.stdout


def test_traceback_shows_the_recovery_failure_in_full(service: tuple[Path, str]) -> None:
    path, _ = service
    result = command("--traceback", "checkpoint", str(path), cwd=path.parent)
    assert result.returncode == 2
    assert "recovering 'q://doubled' failed" in result.stderr and "Traceback" in result.stderr
    assert "RecoveryError" in result.stderr


def test_a_missing_store_is_one_line_with_exit_code_2(tmp_path: Path) -> None:
    for name in ("inspect", "checkpoint"):
        result = command(name, str(tmp_path / "missing.db"), cwd=tmp_path)
        assert (result.returncode, result.stdout) == (2, "")
        assert result.stderr == f"reaqtive {name}: {tmp_path / 'missing.db'}: no such file\n"
