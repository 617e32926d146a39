"""The Spark tests' shared pieces: one local SparkSession for the whole run, the acceptance data set and its
embedded-engine reference, computed once.

Spark needs Java 17+; without it these tests fail (they do not skip: CI has Java, so they must run there) with
a message that says how to install it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from reaqtive.engine import Engine
from reaqtive.engine.expressions import FunctionRegistry
from tests.spark import queries

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parents[2]

TEST_CONF = {
    "spark.sql.session.timeZone": "UTC",
    # Short-lived test JVMs: the C1 compiler only and one GC thread start and warm up about a third faster on
    # 2 cores (measured); long-running jobs want the defaults.
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}

ACCEPTANCE_EVENTS = 50_000
ACCEPTANCE_KEYS = 1_000
ACCEPTANCE_FILES = 5
PARTIAL_FILES = 1
SUBSCRIPTION = "reaqtive://spark/totals"


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local[2] SparkSession (RocksDB state store) shared by every Spark test."""
    try:
        import pyspark  # noqa: F401
    except ImportError as error:
        pytest.fail(f"the Spark tests need the 'spark' extra: pip install -e '.[dev,spark]' ({error})")
    from reaqtive.spark import JavaNotFoundError, check_java, local_session

    try:
        check_java()
    except JavaNotFoundError as error:
        pytest.fail(str(error))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # The workers import the tests' query functions (tests.spark.queries) by name.
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(ROOT) if not path else os.pathsep.join([str(ROOT), path])
    session = local_session("reaqtive-tests", cores=2, conf=TEST_CONF)
    yield session
    session.stop()


class Acceptance:
    """The acceptance data set: 50,000 events over 1,000 keys in 5 Parquet files, and the embedded engine's
    outputs for them (``(key, seq, value)``), and after the first file (the engine's clock at its last event).

    The engine computes its outputs in a thread while the test starts Spark (request this fixture before
    ``spark``): the driver mostly waits for the JVM then, so the two overlap."""

    def __init__(self, root: Path) -> None:
        self.events = queries.events(ACCEPTANCE_EVENTS, ACCEPTANCE_KEYS)
        self.files = root / "in"
        queries.write_files(self.files, self.events, ACCEPTANCE_FILES)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="embedded-reference")
        self._reference = self._executor.submit(self._embedded, root / "engine.db")
        self._executor.shutdown(wait=False)

    @property
    def expected(self) -> list[tuple[Any, int, Any]]:
        """The engine's outputs for every event, its clock at the last one, sorted."""
        return self._reference.result()[1]

    @property
    def partial_expected(self) -> list[tuple[Any, int, Any]]:
        """The engine's outputs after the first file, sorted."""
        return self._reference.result()[0]

    def _embedded(self, store: Path) -> tuple[list[tuple[Any, int, Any]], list[tuple[Any, int, Any]]]:
        from reaqtive.spark import embedded_query, final_watermark, per_key_outputs

        events = self.events
        split = PARTIAL_FILES * -(-len(events) // ACCEPTANCE_FILES)
        functions = FunctionRegistry()
        with Engine(store, functions=functions, start=queries.T0) as engine:
            engine.create_stream(queries.STREAM)
            engine.create_subscription(SUBSCRIPTION, embedded_query(queries.totals_query(), functions))
            engine.append_many(queries.STREAM, [([key, payload], when) for key, when, _, payload in events[:split]])
            engine.process()
            partial = sorted(per_key_outputs(engine.outputs(SUBSCRIPTION)))
            engine.append_many(queries.STREAM, [([key, payload], when) for key, when, _, payload in events[split:]])
            engine.process()
            engine.advance_time(final_watermark(events[-1][1]))  # where Spark's watermark ends
            return partial, sorted(per_key_outputs(engine.outputs(SUBSCRIPTION)))


@pytest.fixture(scope="session")
def acceptance(tmp_path_factory: pytest.TempPathFactory) -> Acceptance:
    """The acceptance data set and its embedded reference (the engine runs once for the whole session)."""
    return Acceptance(tmp_path_factory.mktemp("acceptance"))
