"""Shared test helpers for the core tests."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import freezegun
import hypothesis
import pytest

from reaqtive import set_keyed_execution
from reaqtive.testing.postgres import PostgresCluster, PostgresNotFoundError
from tests.support import Recorder

# freezegun patches every loaded module that holds a datetime function, reading each module's attributes:
# reaqtive.spark's lazy attributes would import pandas and pyspark then (minutes under a frozen clock), and
# those large packages never hold the engine's clock anyway.
freezegun.configure(extend_ignore_list=["reaqtive.spark", "pyspark", "pandas", "pyarrow", "py4j"])

ROOT = Path(__file__).resolve().parents[1]

# Tests check behaviour, never speed: hypothesis's per-example deadline and its too-slow health check time the test,
# and on four workers sharing two cores an example can take a second (a property test failed that way). A test's
# own @settings keep every other choice (its number of examples).
hypothesis.settings.register_profile(
    "reaqtive", deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow])
hypothesis.settings.load_profile("reaqtive")

# The fast tier (`make check` runs `pytest -m "not slow"`) is every test but the slow ones: those marked
# `@pytest.mark.slow` where they are defined, and those these rules mark: every test that starts a server (the
# Spark session, the PostgreSQL server, also as a `postgres` or `postgresql` parameter), every test whose name
# says it kills or crashes processes, the modules below (crash runs, benchmarks, server clusters, checkpoint-anywhere
# sweeps), and the tests below, which took seconds each (measured with --durations on 2 cores). `make test` runs
# them all.
SLOW_FIXTURES = frozenset({"spark", "acceptance", "postgres_server"})
SLOW_NAME = re.compile(r"kill|crash")
SLOW_MODULES = frozenset({
    "tests/cli/test_iot_demo.py",
    "tests/engine/test_corruption_fuzz.py",
    "tests/engine/test_double_crash.py",
    "tests/engine/test_poison_events.py",
    "tests/operators/test_checkpoint_bounded_demand.py",
    "tests/operators/test_error_policy.py",
    "tests/operators/test_keyed_groups.py",
    "tests/testing/test_postgres_cluster.py",
})
SLOW_DIRECTORIES = ("tests/spark/", "tests/examples/test_bench_")

# Tests that bound wall-clock latency (a timer fired within 100 ms) are marked `wall_clock`: on 2 cores, other
# workers' tests beside them make a timer late (measured: 113-190 ms under -n 4, a pass under -n 1), so make test
# runs them alone, after the parallel run.
WALL_CLOCK_TESTS = frozenset({
    "tests/engine/test_running_crash.py::"
    "test_kills_at_random_moments_in_running_mode_lose_nothing_and_keep_the_wall_clock_bound",
})
SLOW_TESTS = frozenset({
    "tests/cli/test_cli_usage.py::test_demo_keeps_its_stores_and_prints_inspect_commands_that_work",
    "tests/cli/test_cli_usage.py::test_demo_without_store_keeps_a_new_directory_and_says_where",
    "tests/connectors/test_webhook.py::test_every_output_reaches_the_receiver_once_in_order_through_faults_and_restarts",
    "tests/engine/test_batch_delivery.py::test_a_long_run_with_timers_due_inside_it_matches_event_at_a_time",
    "tests/engine/test_batch_delivery.py::test_a_stream_with_one_reader_is_handed_whole_runs_with_the_same_results",
    "tests/engine/test_batch_delivery.py::"
    "test_batch_delivery_gives_the_outputs_clock_and_checkpoints_of_event_at_a_time_delivery",
    "tests/engine/test_dirty_checkpoints.py::"
    "test_differential_checkpoints_write_exactly_the_dirty_units_and_the_store_equals_a_full_checkpoints",
    "tests/engine/test_engine_recovery.py::test_a_differential_checkpoint_writes_only_what_changed",
    "tests/engine/test_expressions.py::test_a_deep_chain_encodes_decodes_and_round_trips_through_templates_and_json",
    "tests/engine/test_handover.py::"
    "test_a_window_closing_many_keys_gives_way_to_a_checkpoint_and_a_restart_goes_on_from_there",
    "tests/engine/test_pause_twins.py::test_with_the_event_clock_a_paused_query_computes_what_its_twin_computes",
    "tests/engine/test_run_reading.py::test_reading_whole_runs_into_a_fused_run_matches_event_at_a_time",
    "tests/engine/test_query_schedulers.py::test_pausing_and_resuming_change_nothing_a_query_computes",
    "tests/engine/test_store_integrity.py::test_a_damaged_file_raises_store_errors_only",
    "tests/engine/test_store_integrity.py::test_any_single_byte_changed_in_any_column_of_an_ingress_row_is_detected",
    "tests/examples/test_signals_engine.py::"
    "test_a_store_naming_a_package_that_is_not_installed_fails_clearly_and_stays_intact",
    "tests/operators/test_forged_state.py::test_a_forged_field_is_refused_naming_the_operator_or_changes_nothing",
    "tests/operators/test_from_iterable.py::"
    "test_request_one_inside_on_next_over_a_million_elements_has_bounded_stack_depth",
    "tests/operators/test_higher_order_state.py::"
    "test_a_differential_checkpoint_of_10000_groups_writes_only_the_10_that_changed",
    # a sweep of 1,224 forms (a third of the fast tier's time): make check keeps the hypothesis forms of the file
    "tests/operators/test_keyed_selectors.py::"
    "test_every_keyed_form_with_a_selector_survives_a_checkpoint_anywhere_under_bounded_demand",
    "tests/operators/test_higher_order_state.py::"
    "test_a_running_count_per_key_over_10000_keys_survives_a_checkpoint_anywhere",
    "tests/state/test_codec.py::test_decode_value_reads_one_encoded_value_with_its_exact_type",
    "tests/state/test_codec.py::test_every_supported_value_round_trips_with_its_exact_type",
    "tests/state/test_codec.py::test_nested_tuples_and_datetimes_encode_to_the_same_bytes_as_the_plain_construction",
    "tests/state/test_framing.py::test_any_damage_is_a_format_or_checksum_error_never_a_wrong_value",
    "tests/state/test_framing.py::test_malformed_bodies_with_valid_checksums_raise_only_state_errors",
    "tests/state/test_framing.py::test_nested_child_segments_round_trip",
    "tests/state/test_sqlite_store_integrity.py::test_any_single_byte_changed_in_any_column_of_a_blob_row_is_detected",
    "tests/test_deep_queries.py::"
    "test_a_deep_query_created_under_a_raised_limit_saves_loads_and_disposes_under_the_default_limit",
    "tests/test_hosting.py::test_a_query_saved_anywhere_and_loaded_into_a_fresh_host_continues_as_if_uninterrupted",
    "tests/test_operator_units.py::test_the_runtime_import_graph_has_no_cycle",
})


def _is_slow(item: pytest.Item, where: str) -> bool:
    params = getattr(getattr(item, "callspec", None), "params", {})
    return (
        item.get_closest_marker("slow") is not None
        or bool(SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())))
        or any(isinstance(value, str) and value in ("postgres", "postgresql") for value in params.values())
        or SLOW_NAME.search(item.name.split("[")[0]) is not None
        or where in SLOW_MODULES
        or where.startswith(SLOW_DIRECTORIES)
        or item.nodeid.split("[")[0] in SLOW_TESTS
    )


# Under pytest-xdist (`make test`, `make check`) the tests that use the shared SparkSession (the `spark` fixture)
# run in one worker, one after another: one JVM starts for the session, not one per worker. The Spark tests that
# start their own processes (a standalone cluster, a driver script) are units of their own, so that they run beside
# the session's tests instead of after them: they were the suite's critical path. (xdist's own `--dist loadgroup`
# cannot do it with pytest 9.2: it renames items through an attribute pytest no longer reads.)
SPARK_TESTS = "tests/spark/"
SPARK_SESSION_UNIT = "tests/spark/ (the shared session)"
# Files whose tests share a fixture of their own (the cluster: one per file) and tests that need no session.
SPARK_APART_FILES = frozenset({"tests/spark/test_cluster.py"})
SPARK_APART_TESTS = frozenset({"tests/spark/test_docs_examples.py::test_the_example_script_runs_as_a_user_runs_it"})
# Files none of whose tests uses the session: each test its own unit.
SPARK_SESSIONLESS_FILES = frozenset({
    "tests/spark/test_host.py", "tests/spark/test_live.py", "tests/spark/test_processor.py",
    "tests/spark/test_session.py", "tests/spark/test_table.py", "tests/spark/test_values.py",
})


def scheduling_unit(nodeid: str) -> str:
    """The unit of work a test belongs to under xdist: itself, unless it shares the Spark session or a cluster."""
    if not nodeid.startswith(SPARK_TESTS):
        return nodeid
    path = nodeid.split("::", maxsplit=1)[0]
    if path in SPARK_APART_FILES:
        return path
    if nodeid.split("[", maxsplit=1)[0] in SPARK_APART_TESTS or path in SPARK_SESSIONLESS_FILES:
        return nodeid
    return SPARK_SESSION_UNIT


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """xdist's ``load`` distribution, test by test, except for the units of ``scheduling_unit``."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SparkTogether(LoadScopeScheduling):
        """Each test its own unit, the Spark session's tests one unit (the largest, so it is handed out first)."""

        def _split_scope(self, nodeid: str) -> str:
            return scheduling_unit(nodeid)

    return SparkTogether(config, log)


def _check_spark_unit(item: pytest.Item) -> None:
    """A test using the shared session outside the session's unit would start a second JVM in another worker."""
    if "spark" in getattr(item, "fixturenames", ()) and scheduling_unit(item.nodeid) != SPARK_SESSION_UNIT:
        raise pytest.UsageError(f"{item.nodeid} uses the shared SparkSession but is scheduled apart from it: "
                                "take it out of SPARK_APART_* / SPARK_SESSIONLESS_FILES in tests/conftest.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the slow tests. Under xdist, start them first (a worker that starts a two-minute test last would
    finish alone, minutes after the others)."""
    for item in items:
        if " at 0x" in item.nodeid:
            raise pytest.UsageError(f"{item.nodeid}: a test id with a memory address differs in every process (and "
                                    f"pytest-xdist refuses to run): parametrize with ids=tests.support.stable_id")
        where = item.path.relative_to(ROOT).as_posix() if item.path.is_relative_to(ROOT) else ""
        if _is_slow(item, where):
            item.add_marker(pytest.mark.slow)
        _check_spark_unit(item)
        if item.nodeid in WALL_CLOCK_TESTS:
            item.add_marker(pytest.mark.wall_clock)
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
