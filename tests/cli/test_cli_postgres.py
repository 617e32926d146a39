"""``reaqtive inspect`` and ``reaqtive checkpoint`` on a PostgreSQL store: the command takes the DSNs the engine
takes, reads the database read-only, and names a database it cannot reach without its password."""

from __future__ import annotations

import json
import operator
import socket
from datetime import UTC, datetime, timedelta

import pytest

from reaqtive import Query
from reaqtive.cli import main
from reaqtive.engine import Engine
from reaqtive.engine.inspection import read_store

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def pg_store(postgres_dsn: str) -> str:
    """A PostgreSQL store: one stream of 20 events, 15 delivered and checkpointed, a running sum."""
    with Engine(postgres_dsn, start=T0) as engine:
        engine.create_stream("s")
        engine.create_subscription("q://sum", Query.stream("s").scan(0, operator.add))
        engine.append_many("s", [(i, T0 + timedelta(seconds=i)) for i in range(15)])
        engine.process()
        engine.checkpoint()
        engine.append_many("s", [(i, T0 + timedelta(seconds=i)) for i in range(15, 20)])  # not processed
    return postgres_dsn


def test_inspect_reads_a_postgres_store(pg_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "inspect", pg_store)
    assert (code, err) == (0, "")
    assert "stream('s').scan(0, add)" in out
    stream = next(line for line in out.splitlines() if line.split()[:1] == ["s"])
    assert stream.split() == ["s", "20", "15", "5"], "events appended, delivered, retained"

    code, out, _ = run(capsys, "inspect", "--json", pg_store)
    data = json.loads(out)
    assert code == 0 and data["position"] == 15 and data["file_bytes"] > 0
    assert {e["subscription"]: (e["rows"], e["last_seq"]) for e in data["egress"]} == {"q://sum": (15, 14)}


def test_inspect_decodes_outputs_and_state_of_a_postgres_store(
    pg_store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "inspect", pg_store, "--outputs", "q://sum")
    assert code == 0
    sums = [int(line.split()[1]) for line in out.splitlines()[1:]]
    assert sums == [sum(range(n + 1)) for n in range(15)]
    code, out, _ = run(capsys, "inspect", pg_store, "--state", "q://sum")
    assert code == 0 and "reaqtive:scan" in out


def test_inspect_never_writes_a_postgres_store(pg_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    before = read_store(pg_store)
    assert run(capsys, "inspect", pg_store)[0] == 0
    assert read_store(pg_store) == before


def test_checkpoint_takes_a_dsn(pg_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    commits = read_store(pg_store).commits
    code, out, err = run(capsys, "checkpoint", pg_store)
    assert (code, err) == (0, "")
    assert "recovered 1 streams, 0 definitions, 1 subscriptions" in out
    assert read_store(pg_store).commits == commits + 1


def test_a_database_that_is_not_a_store_is_one_line(postgres_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("inspect", "checkpoint"):
        code, out, err = run(capsys, command, postgres_dsn)
        assert (code, out) == (2, "")
        assert err.splitlines() == [
            f"reaqtive {command}: {postgres_dsn}: a PostgreSQL database, but not a reaqtive store (no reaqtive_meta "
            "table)"
        ]
    assert run(capsys, "inspect", postgres_dsn)[0] == 2, "checkpoint created nothing"


def test_a_database_that_cannot_be_reached_is_one_line_without_the_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dsn = f"postgresql://app:s3cret@127.0.0.1:{port}/events"
    for command in ("inspect", "checkpoint"):
        code, out, err = run(capsys, command, dsn)
        assert (code, out) == (2, "")
        assert len(err.splitlines()) == 1, err
        assert err.startswith(f"reaqtive {command}: postgresql://app@127.0.0.1:{port}/events: cannot connect")
        assert "s3cret" not in err


def test_memory_is_no_store_to_inspect(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("inspect", "checkpoint"):
        code, _, err = run(capsys, command, ":memory:")
        assert code == 2 and err.startswith(f"reaqtive {command}: ':memory:' is a store inside one engine's process")
