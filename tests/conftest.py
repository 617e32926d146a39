"""Shared test helpers for the core tests."""

from __future__ import annotations

from collections.abc import Iterator

import freezegun
import pytest

from reaqtive import set_keyed_execution
from reaqtive.testing.postgres import PostgresCluster, PostgresNotFoundError
from tests.support import Recorder

# freezegun patches every loaded module that holds a datetime function, reading each module's attributes:
# reaqtive.spark's lazy attributes would import pandas and pyspark then (minutes under a frozen clock), and
# those large packages never hold the engine's clock anyway.
freezegun.configure(extend_ignore_list=["reaqtive.spark", "pyspark", "pandas", "pyarrow", "py4j"])


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
