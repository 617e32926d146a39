"""Errors a user meets for what they passed in: a store where none can be opened, a time given as text, the Spark
part without its extra. Each names what was wrong, where, and what to do."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reaqtive import Query
from reaqtive.engine import Engine
from reaqtive.state import StoreError, StoreOpenError

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0  # root ignores file permissions


# -- a store where none can be opened -------------------------------------------------------------------------------


def test_a_store_under_a_missing_directory_names_the_directory(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "deeper" / "store.db"
    with pytest.raises(StoreOpenError) as raised:
        Engine(path)
    assert isinstance(raised.value, StoreError), "caught as any store error"
    assert raised.value.cause == "directory missing" and raised.value.path == str(path)
    assert str(raised.value) == (f"{path}: cannot open the store: its directory {path.parent} does not exist; "
                                 "create it first (the engine creates the file, not its directories)")
    assert not (tmp_path / "missing").exists(), "nothing was created"


@pytest.mark.skipif(AS_ROOT, reason="root writes into a read-only directory anyway")
def test_a_store_in_a_read_only_directory_says_so(tmp_path: Path) -> None:
    directory = tmp_path / "ro"
    directory.mkdir()
    directory.chmod(0o555)
    try:
        with pytest.raises(StoreOpenError, match=r"its directory .* is not writable by this user") as raised:
            Engine(directory / "store.db")
        assert raised.value.cause == "directory not writable"
    finally:
        directory.chmod(0o755)


@pytest.mark.skipif(AS_ROOT, reason="root writes a read-only file anyway")
def test_a_read_only_store_file_is_refused_at_open_not_at_the_first_write(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with Engine(path) as engine:
        engine.create_stream("s")
    path.chmod(0o444)
    try:
        with pytest.raises(StoreOpenError, match=r"the file is not writable by this user.*reaqtive inspect") as raised:
            Engine(path)
        assert raised.value.cause == "file not writable"
    finally:
        path.chmod(0o644)


def test_a_writable_store_opens(tmp_path: Path) -> None:
    """The other side: the checks refuse nothing that can be opened (a new file, an existing one)."""
    for _ in range(2):
        with Engine(tmp_path / "store.db") as engine:
            assert engine.status.value == "running"


# -- a time given as text ---------------------------------------------------------------------------------------------


def engine_with_stream() -> Engine:
    engine = Engine.in_memory(start=T0)
    engine.create_stream("s")
    engine.create_subscription("q://s", Query.stream("s"))
    return engine


TEXT_TIMES: dict[str, tuple[Callable[[Engine], object], str]] = {
    "advance_time": (lambda e: e.advance_time("2026-01-02"), "advance_time(to)"),  # type: ignore[arg-type]
    "append": (lambda e: e.append("s", 1, "2026-01-02"), "the time of event #0"),  # type: ignore[arg-type]
    "append_many": (lambda e: e.append_many("s", [(1, T0), (2, "2026-01-02")]),  # type: ignore[list-item]
                    "the time of event #1"),
    "extend": (lambda e: e.extend("s", iter([(1, "2026-01-02")])), "the time of event #0"),  # type: ignore[list-item]
}


@pytest.mark.parametrize(("call", "argument"), TEXT_TIMES.values(), ids=TEXT_TIMES.keys())
def test_a_time_given_as_text_names_the_argument_and_the_type_it_needs(
    call: Callable[[Engine], object], argument: str
) -> None:
    with engine_with_stream() as engine:
        with pytest.raises(TypeError) as raised:
            call(engine)
        message = str(raised.value)
        assert message.startswith(argument)
        assert "must be a timezone-aware datetime, got str '2026-01-02'" in message
        assert "datetime.fromisoformat('2026-01-02').replace(tzinfo=UTC)" in message
        assert engine.streams()["s"].appended == 0, "nothing was appended"


def test_an_engine_start_given_as_text_names_the_argument() -> None:
    with pytest.raises(TypeError, match=r"^Engine\(start=\.\.\.\) must be a timezone-aware datetime, got str"):
        Engine.in_memory(start="2026-01-01")  # type: ignore[arg-type]


def test_a_naive_time_is_still_a_value_error() -> None:
    with engine_with_stream() as engine, pytest.raises(ValueError, match=r"advance_time.*must be timezone-aware"):
        engine.advance_time(datetime(2026, 1, 2))  # the naive time under test


# -- the Spark part without its extra --------------------------------------------------------------------------------


SPARK_MISSING = """
import sys
sys.modules["pyspark"] = None  # as if pyspark were not installed: importing it raises ModuleNotFoundError
import reaqtive.spark  # the package itself imports without Spark (its host part needs none)
try:
    from reaqtive.spark import run_stream
except ModuleNotFoundError as error:
    print(type(error).__name__, isinstance(error, ImportError), error.name)
    print(error)
"""


def test_the_spark_part_without_pyspark_says_what_to_install() -> None:
    result = subprocess.run([sys.executable, "-c", SPARK_MISSING], cwd=ROOT, capture_output=True, text=True,
                            timeout=120, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    kind, message = result.stdout.splitlines()
    assert kind.split()[:2] == ["SparkExtraMissingError", "True"] and kind.split()[2].startswith("pyspark")
    assert "reaqtive.spark.run_stream needs the 'spark' extra" in message
    assert "pip install 'reaqtive[spark]'" in message and "Java 17+" in message
