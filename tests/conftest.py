"""Shared test helpers for the core tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import freezegun
import pytest

from reaqtive import set_keyed_execution
from reaqtive.testing.postgres import PostgresCluster, PostgresNotFoundError
from tests.support import Recorder

# freezegun patches every loaded module that holds a datetime function, reading each module's attributes:
# reaqtive.spark's lazy attributes would import pandas and pyspark then (minutes under a frozen clock), and
# those large packages never hold the engine's clock anyway.
freezegun.configure(extend_ignore_list=["reaqtive.spark", "pyspark", "pandas", "pyarrow", "py4j"])

ROOT = Path(__file__).resolve().parents[1]

# The fast tier (`make check` runs `pytest -m "not slow"`) is every test but the slow ones: those marked
# `@pytest.mark.slow` where they are defined, every test that starts a server (the Spark session, the PostgreSQL
# server), and the tests of these modules, which run subprocesses, kill processes or run a benchmark (each takes
# seconds; measured with --durations). `make test` runs them all.
SLOW_FIXTURES = frozenset({"spark", "acceptance", "postgres_server"})
SLOW_MODULES = frozenset({
    "tests/engine/test_corruption_fuzz.py",
    "tests/engine/test_crash.py",
    "tests/engine/test_crash_higher_order.py",
    "tests/engine/test_double_crash.py",
    "tests/engine/test_poison_events.py",
    "tests/engine/test_running_crash.py",
    "tests/state/test_sqlite_crash.py",
})
SLOW_DIRECTORIES = ("tests/spark/", "tests/examples/test_bench_")

# Under pytest-xdist (`make test`, `make check`) the tests of tests/spark run in one worker, one after another:
# one JVM starts for the Spark session, not one per worker. (xdist's own `--dist loadgroup` cannot do it with pytest
# 9.2: it renames items through an attribute pytest no longer reads.)
SPARK_TESTS = "tests/spark/"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """xdist's ``load`` distribution, test by test, except that the Spark tests are one unit of work."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SparkTogether(LoadScopeScheduling):
        """Each test its own unit, the Spark tests one unit (the largest, so it is handed out first)."""

        def _split_scope(self, nodeid: str) -> str:
            return SPARK_TESTS if nodeid.startswith(SPARK_TESTS) else nodeid

    return SparkTogether(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the slow tests. Under xdist, start them first: a worker that starts a two-minute test last would
    finish alone, minutes after the others."""
    for item in items:
        if " at 0x" in item.nodeid:
            raise pytest.UsageError(f"{item.nodeid}: a test id with a memory address differs in every process (and "
                                    f"pytest-xdist refuses to run): parametrize with ids=tests.support.stable_id")
        fixtures = set(getattr(item, "fixturenames", ()))
        where = item.path.relative_to(ROOT).as_posix() if item.path.is_relative_to(ROOT) else ""
        if fixtures & SLOW_FIXTURES or where in SLOW_MODULES or where.startswith(SLOW_DIRECTORIES):
            item.add_marker(pytest.mark.slow)
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the same order in every worker, as xdist requires
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: otherwise unchanged


@pytest.fixture
def recorder() -> Recorder:
    """A subscriber that records signals and requests nothing until told to."""
    return Recorder()


@pytest.fixture
def general_path() -> Iterator[None]:
    """Bind keyed chains on the general path (a group per key) in this test: it tests that path's own form."""
    previous = set_keyed_execution(False)
    try:
        yield
    finally:
        set_keyed_execution(previous)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresCluster]:
    """A throwaway PostgreSQL server for the whole session, started only when a test asks for it. Without the
    server binaries the test fails with the instruction to install them: PostgreSQL is part of the suite, not
    optional."""
    cluster = PostgresCluster()
    try:
        cluster.start()
    except PostgresNotFoundError as error:
        pytest.fail(str(error), pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_dsn(postgres_server: PostgresCluster) -> Iterator[str]:
    """The DSN of a fresh, empty database for this test, dropped after it (with any session left open)."""
    dsn = postgres_server.create_database()
    try:
        yield dsn
    finally:
        postgres_server.drop_database(dsn.rsplit("/", 1)[1])
