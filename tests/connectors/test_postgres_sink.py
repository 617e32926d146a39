"""The PostgreSQL results sink against a real server: each output exactly one row, whatever the engine repeats,
whatever happens to the connection; a table it cannot use or a value it cannot store is a clear error."""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from reaqtive import Query
from reaqtive.connectors.errors import UnencodableOutputError
from reaqtive.connectors.postgres_sink import (
    PostgresSink,
    PostgresSinkTableError,
    PostgresSinkUnavailableError,
)
from reaqtive.engine import Engine, FunctionRegistry, ObserverFailedError, Output
from reaqtive.testing.postgres import PostgresCluster

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TABLE = "outputs"


def add(total: int, value: int) -> int:
    return total + value


def at(i: int) -> datetime:
    return T0 + timedelta(seconds=i)


def rows(dsn: str, table: str = TABLE, columns: tuple[str, str, str] = ("subscription", "seq", "value")) -> list[Any]:
    with psycopg.connect(dsn) as connection:
        query = sql.SQL("SELECT {}, {}, {} FROM {} ORDER BY 1, 2").format(
            *(sql.Identifier(column) for column in columns), sql.Identifier(table)
        )
        return [tuple(row) for row in connection.execute(query)]


def execute(dsn: str, statement: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(statement)


def terminate_other_sessions(dsn: str) -> int:
    """End every session on the database (the sink's), as a server restart or a DBA would."""
    server, name = dsn.rsplit("/", 1)
    with psycopg.connect(f"{server}/postgres", autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s", (name,)
        ).fetchone()
    return int(row[0]) if row else 0


def same_json(left: Any, right: Any) -> bool:
    """Equal as JSON documents: jsonb keeps numbers as decimals, so a whole float may come back as an int."""

    def parse(value: Any) -> Any:
        return json.loads(json.dumps(value), parse_float=Decimal, parse_int=Decimal)

    return bool(parse(left) == parse(right))


@pytest.fixture
def sink(postgres_dsn: str) -> Iterator[PostgresSink]:
    with PostgresSink(postgres_dsn, TABLE, create=True).open() as made:
        yield made


# -- one row per output ------------------------------------------------------------------------------------------


def test_create_makes_the_table_and_each_output_becomes_one_row(sink: PostgresSink, postgres_dsn: str) -> None:
    sink(Output("q", 0, {"total": 1}))
    sink(Output("q", 1, [1, "two", None]))
    sink(Output("other", 0, "x"))
    assert rows(postgres_dsn) == [("other", 0, "x"), ("q", 0, {"total": 1}), ("q", 1, [1, "two", None])]


def test_a_repeated_output_adds_no_row_and_keeps_the_first_value(sink: PostgresSink, postgres_dsn: str) -> None:
    sink(Output("q", 0, "first"))
    sink(Output("q", 0, "first"))
    sink(Output("q", 0, "a wall-clock replay's other value"))
    assert rows(postgres_dsn) == [("q", 0, "first")]


def test_each_output_is_committed_when_the_call_returns(sink: PostgresSink, postgres_dsn: str) -> None:
    sink(Output("q", 7, 7))
    assert rows(postgres_dsn) == [("q", 7, 7)], "seen from another session: committed, not pending"


# jsonb holds any JSON but U+0000 in a string (tested below as an error); surrogates are not UTF-8.
json_text = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | json_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(json_text, children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=json_values)
def test_any_json_value_is_stored_as_it_was(sink: PostgresSink, postgres_dsn: str, value: Any) -> None:
    execute(postgres_dsn, f"TRUNCATE {TABLE}")
    sink(Output("q", 0, value))
    [(_, _, stored)] = rows(postgres_dsn)
    assert same_json(stored, value)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 5), st.integers(0, 3), st.booleans()),
        min_size=1,
        max_size=20,
    )
)
def test_any_history_of_repeats_and_killed_connections_leaves_each_output_once(
    sink: PostgresSink, postgres_dsn: str, steps: list[tuple[str, int, int, bool]]
) -> None:
    """The engine re-delivers anything, any number of times; the connection dies between any two calls."""
    execute(postgres_dsn, f"TRUNCATE {TABLE}")
    first: dict[tuple[str, int], int] = {}
    for subscription, seq, value, kill in steps:
        if kill:
            terminate_other_sessions(postgres_dsn)
        sink(Output(subscription, seq, value))
        first.setdefault((subscription, seq), value)
    assert rows(postgres_dsn) == sorted((s, q, v) for (s, q), v in first.items())


# -- the connection ----------------------------------------------------------------------------------------------


def test_a_connection_killed_between_outputs_is_opened_again_within_the_call(
    sink: PostgresSink, postgres_dsn: str
) -> None:
    sink(Output("q", 0, 0))
    assert terminate_other_sessions(postgres_dsn) == 1
    sink(Output("q", 1, 1))  # no error: the sink reconnects and inserts again
    assert rows(postgres_dsn) == [("q", 0, 0), ("q", 1, 1)]


def test_a_database_refusing_connections_is_unavailable_then_recovers(
    sink: PostgresSink, postgres_dsn: str, postgres_server: PostgresCluster
) -> None:
    name = postgres_dsn.rsplit("/", 1)[1]
    sink(Output("q", 0, 0))
    admin = postgres_server.dsn()
    execute(admin, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
    try:
        terminate_other_sessions(postgres_dsn)
        with pytest.raises(
            PostgresSinkUnavailableError, match=rf"{TABLE} in postgresql://postgres@127.0.0.1:\d+/{name}.*q#1"
        ):
            sink(Output("q", 1, 1))
    finally:
        execute(admin, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
    sink(Output("q", 1, 1))
    assert rows(postgres_dsn) == [("q", 0, 0), ("q", 1, 1)]


def test_an_unreachable_server_is_unavailable_and_the_message_has_no_password() -> None:
    with ClosedPort() as port:
        sink = PostgresSink(f"postgresql://app:s3cret-pw@127.0.0.1:{port}/db", TABLE, timeout=2)
        with pytest.raises(PostgresSinkUnavailableError) as raised:
            sink(Output("q", 0, 0))
    assert "s3cret-pw" not in str(raised.value) and f"postgresql://app@127.0.0.1:{port}/db" in str(raised.value)


def test_a_locked_table_times_out_instead_of_hanging(postgres_dsn: str) -> None:
    sink = PostgresSink(postgres_dsn, TABLE, create=True, timeout=0.5)
    sink(Output("q", 0, 0))
    with psycopg.connect(postgres_dsn) as holder:
        holder.execute(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")  # held until this transaction ends
        started = time.monotonic()
        with pytest.raises(PostgresSinkUnavailableError, match=r"canceling statement due to (lock|statement) timeout"):
            sink(Output("q", 1, 1))
        assert time.monotonic() - started < 5
    sink(Output("q", 1, 1))
    sink.close()
    assert rows(postgres_dsn) == [("q", 0, 0), ("q", 1, 1)]


class ClosedPort:
    """A TCP port on the loopback that nothing listens on (held bound, not listening, while in use)."""

    def __enter__(self) -> int:
        import socket

        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        return int(self._socket.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self._socket.close()


# -- the table ---------------------------------------------------------------------------------------------------


def test_a_missing_table_is_an_error_that_says_how_to_make_it_and_creates_nothing(postgres_dsn: str) -> None:
    sink = PostgresSink(postgres_dsn, TABLE)
    with pytest.raises(PostgresSinkTableError, match=r"no such table.*create=True.*primary key \(subscription, seq\)"):
        sink(Output("q", 0, 0))
    with psycopg.connect(postgres_dsn) as connection:
        assert connection.execute("SELECT to_regclass(%s)", (TABLE,)).fetchone() == (None,)


@pytest.mark.parametrize(
    ("ddl", "complaint"),
    [
        ("subscription text, seq bigint, value jsonb, PRIMARY KEY (subscription, seq)", None),
        ("seq bigint, subscription varchar(200), value json, UNIQUE (seq, subscription)", None),
        ("subscription text, seq integer, value jsonb, PRIMARY KEY (subscription, seq)", "'seq'.*type integer"),
        ("subscription text, seq bigint, value text, PRIMARY KEY (subscription, seq)", "'value'.*type text"),
        ("subscription text, seq bigint, PRIMARY KEY (subscription, seq)", "'value'.*missing"),
        ("subscription text, seq bigint, value jsonb", "no primary key or unique constraint"),
        ("subscription text, seq bigint, value jsonb, PRIMARY KEY (subscription, seq, value)", "no primary key"),
        ("subscription text, seq bigint, value jsonb, UNIQUE (seq)", "no primary key"),
        (
            "subscription text, seq bigint, value jsonb, UNIQUE (subscription, seq) DEFERRABLE INITIALLY DEFERRED",
            "no primary key",
        ),
    ],
)
def test_the_table_shape_is_checked_before_any_write(postgres_dsn: str, ddl: str, complaint: str | None) -> None:
    execute(postgres_dsn, f"CREATE TABLE {TABLE} ({ddl})")
    sink = PostgresSink(postgres_dsn, TABLE, create=True)  # create never alters an existing table
    if complaint is None:
        sink(Output("q", 0, 0))
        sink(Output("q", 0, 0))
        assert rows(postgres_dsn) == [("q", 0, 0)]
    else:
        with pytest.raises(PostgresSinkTableError, match=complaint):
            sink(Output("q", 0, 0))
    sink.close()


def test_a_partial_unique_index_does_not_count(postgres_dsn: str) -> None:
    execute(postgres_dsn, f"CREATE TABLE {TABLE} (subscription text, seq bigint, value jsonb)")
    execute(postgres_dsn, f"CREATE UNIQUE INDEX partial ON {TABLE} (subscription, seq) WHERE seq > 10")
    with pytest.raises(PostgresSinkTableError, match="no primary key"):
        PostgresSink(postgres_dsn, TABLE)(Output("q", 0, 0))


def test_columns_and_schema_can_be_named(postgres_dsn: str) -> None:
    execute(postgres_dsn, "CREATE SCHEMA reports")
    columns = {"subscription": "query id", "seq": "n", "value": "payload"}
    with PostgresSink(postgres_dsn, "Totals", schema="reports", create=True, columns=columns) as sink:
        sink(Output("q", 0, 1))
        sink(Output("q", 0, 1))
    with psycopg.connect(postgres_dsn) as connection:
        assert connection.execute('SELECT "query id", n, payload FROM reports."Totals"').fetchall() == [("q", 0, 1)]


@pytest.mark.parametrize(
    "columns", [{"subscription": "a", "seq": "a", "value": "v"}, {"subscription": "s", "sequence": "q"}]
)
def test_a_bad_column_mapping_is_refused_at_once(columns: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="columns must map"):
        PostgresSink("postgresql://nowhere/db", TABLE, columns=columns)


def test_a_table_dropped_under_the_sink_is_a_table_error(sink: PostgresSink, postgres_dsn: str) -> None:
    sink(Output("q", 0, 0))
    execute(postgres_dsn, f"DROP TABLE {TABLE}")
    with pytest.raises(PostgresSinkTableError, match="changed under the sink"):
        sink(Output("q", 1, 1))


# -- values ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", [object(), {1, 2}, math.nan, math.inf, "nul \x00 inside", {"deep": ["\x00"]}, "lone \ud800"]
)
def test_a_value_the_table_cannot_hold_is_a_clear_error_and_writes_nothing(
    sink: PostgresSink, postgres_dsn: str, value: object
) -> None:
    with pytest.raises(UnencodableOutputError, match=r"output q#3: its value is not JSON"):
        sink(Output("q", 3, value))
    sink(Output("q", 4, "the next one"))  # the sink is still usable
    assert rows(postgres_dsn) == [("q", 4, "the next one")]


def test_json_default_converts_values_json_lacks(postgres_dsn: str) -> None:
    with PostgresSink(postgres_dsn, TABLE, create=True, json_default=lambda v: v.isoformat()) as sink:
        sink(Output("q", 0, {"at": T0}))
    assert rows(postgres_dsn) == [("q", 0, {"at": "2026-01-01T00:00:00+00:00"})]


# -- with the engine ---------------------------------------------------------------------------------------------


class Chaos:
    """Wraps the sink as the engine's observer: before given outputs it kills the sink's connection, and after
    others it raises although the row was written (a response lost after the commit)."""

    def __init__(self, sink: PostgresSink, dsn: str, kill_before: set[int], fail_after: set[int]) -> None:
        self.sink, self.dsn = sink, dsn
        self.kill_before, self.fail_after = set(kill_before), set(fail_after)
        self.calls = 0

    def __call__(self, output: Output) -> None:
        self.calls += 1
        if output.seq in self.kill_before:
            self.kill_before.discard(output.seq)
            terminate_other_sessions(self.dsn)
        self.sink(output)
        if output.seq in self.fail_after:
            self.fail_after.discard(output.seq)
            raise ConnectionResetError(f"response to #{output.seq} lost")


def open_engine(path: Path, observer: Callable[[Output], object]) -> Engine:
    functions = FunctionRegistry()
    functions.register("pg", observer)
    functions.register("add", add)
    return Engine(path, functions=functions, start=T0, observer_backoff=0, observer_retries=5)


def start(engine: Engine, observer: Callable[[Output], object]) -> None:
    engine.create_stream("raw")
    engine.define_observer("obs://pg", observer)
    query = Query.stream("raw").scan(0, add)
    engine.create_subscription("durable", query)
    engine.create_subscription("pg", query, observer="obs://pg")


def assert_table_equals_durable_sink(engine: Engine, dsn: str) -> None:
    durable = [(output.seq, output.value) for output in engine.outputs("durable")]
    assert [(seq, value) for _, seq, value in rows(dsn)] == durable
    assert {subscription for subscription, _, _ in rows(dsn)} <= {"pg"}


def test_the_table_equals_the_durable_sink_across_kills_lost_responses_and_restarts(
    tmp_path: Path, postgres_dsn: str
) -> None:
    path = tmp_path / "e.db"
    sink = PostgresSink(postgres_dsn, TABLE, create=True)
    chaos = Chaos(sink, postgres_dsn, kill_before={1, 4, 9}, fail_after={2, 6})
    with open_engine(path, chaos) as engine:
        start(engine, chaos)
        engine.append_many("raw", [(i, at(i)) for i in range(5)])
        engine.process()
        engine.checkpoint()
        engine.append_many("raw", [(i, at(i)) for i in range(5, 8)])
        engine.process()
        # closed without a checkpoint, as after a crash: outputs 5..7 are produced and delivered again
    with open_engine(path, chaos) as engine:
        engine.append_many("raw", [(i, at(i)) for i in range(8, 12)])
        for _ in range(3):  # the outbox retries a failed output on the next round
            engine.process()
        engine.checkpoint()
        assert engine.faults == []
        assert_table_equals_durable_sink(engine, postgres_dsn)
        assert len(engine.outputs("durable")) == 12
    assert chaos.calls > 12 and not chaos.kill_before and not chaos.fail_after, "every fault was hit"
    sink.close()


def test_outputs_wait_in_the_outbox_while_the_database_is_away(
    tmp_path: Path, postgres_dsn: str, postgres_server: PostgresCluster
) -> None:
    name = postgres_dsn.rsplit("/", 1)[1]
    admin = postgres_server.dsn()
    sink = PostgresSink(postgres_dsn, TABLE, create=True, timeout=2)
    with open_engine(tmp_path / "e.db", sink) as engine:
        start(engine, sink)
        engine.append_many("raw", [(i, at(i)) for i in range(3)])
        engine.process()
        execute(admin, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        try:
            terminate_other_sessions(postgres_dsn)
            engine.append_many("raw", [(i, at(i)) for i in range(3, 6)])
            engine.process()
            engine.process()
            engine.checkpoint()  # the undelivered outputs are stored with the checkpoint
        finally:
            execute(admin, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        assert len(rows(postgres_dsn)) == 3
    with open_engine(tmp_path / "e.db", sink) as engine:
        engine.process()
        assert engine.faults == []
        assert_table_equals_durable_sink(engine, postgres_dsn)
        assert len(rows(postgres_dsn)) == 6
    sink.close()


def test_a_value_the_table_cannot_hold_stops_only_its_subscription_keeping_its_outputs(
    tmp_path: Path, postgres_dsn: str
) -> None:
    sink = PostgresSink(postgres_dsn, TABLE, create=True)
    with open_engine(tmp_path / "e.db", sink) as engine:
        engine.create_stream("raw")
        engine.define_observer("obs://pg", sink)
        engine.create_subscription("pg", Query.stream("raw"), observer="obs://pg")
        engine.create_subscription("durable", Query.stream("raw"))
        engine.append_many("raw", [(1, at(1)), ("nul\x00", at(2)), (3, at(3))])
        for _ in range(5):
            engine.process()
        [fault] = engine.faults
        assert fault.uri == "pg" and isinstance(fault.error, ObserverFailedError)
        assert isinstance(fault.error.__cause__, UnencodableOutputError)
        assert [output.value for output in engine.outputs("durable")] == [1, "nul\x00", 3]
    assert rows(postgres_dsn) == [("pg", 0, 1)]
    sink.close()


# -- an engine process killed while it delivers --------------------------------------------------------------------

CRASH_EVENTS = 600
CRASH_CHUNK = 20


def crash_worker(path: str, dsn: str) -> None:
    """The process the next test kills: appends the events ``0..CRASH_EVENTS`` (each its own index) in chunks,
    processes each, checkpoints every third, and resumes wherever the store says it is. Prints ``progress N``."""
    sink = PostgresSink(dsn, TABLE, create=True)
    with open_engine(Path(path), sink) as engine:
        if "raw" not in engine.streams():
            start(engine, sink)
        while (appended := engine.streams()["raw"].appended) < CRASH_EVENTS:
            engine.append_many("raw", [(i, at(i)) for i in range(appended, appended + CRASH_CHUNK)])
            engine.process()
            if appended // CRASH_CHUNK % 3 == 2:
                engine.checkpoint()
            print(f"progress {appended + CRASH_CHUNK}", flush=True)
        engine.process()
        engine.checkpoint()
    print("done", flush=True)


def test_an_engine_killed_at_random_while_it_delivers_leaves_each_output_once(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """SIGKILL of the engine's process at ten random moments (appending, processing, inside the sink's insert,
    checkpointing): after the last run the table equals the durable sink, nothing missing, nothing twice."""
    root = Path(__file__).resolve().parents[2]
    command = [
        sys.executable,
        "-c",
        "import sys; from tests.connectors.test_postgres_sink import crash_worker; "
        "crash_worker(sys.argv[1], sys.argv[2])",
        str(tmp_path / "e.db"),
        postgres_dsn,
    ]
    rng = random.Random(19)
    kills = sorted(rng.sample(range(CRASH_CHUNK, CRASH_EVENTS - CRASH_CHUNK, CRASH_CHUNK), 10))
    killed = 0
    for position in [*kills, None]:
        environment = {**os.environ, "PYTHONPATH": str(root)}
        worker = subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, text=True, env=environment)
        assert worker.stdout is not None
        for line in worker.stdout:
            if position is not None and line.startswith("progress") and int(line.split()[1]) >= position:
                time.sleep(rng.uniform(0, 0.01))  # the random moment: wherever the worker is now
                worker.send_signal(signal.SIGKILL)
                break
        worker.communicate(timeout=60)
        # Near the end a worker may finish within the random moment: that run then was not killed.
        allowed = (0,) if position is None else (0, -signal.SIGKILL)
        assert worker.returncode in allowed, (position, worker.returncode)
        killed += worker.returncode == -signal.SIGKILL
    assert killed >= 7  # most runs were killed mid-way
    sink = PostgresSink(postgres_dsn, TABLE)
    with open_engine(tmp_path / "e.db", sink) as engine:
        assert engine.faults == []
        assert len(engine.outputs("durable")) == CRASH_EVENTS
        assert_table_equals_durable_sink(engine, postgres_dsn)
    sink.close()
