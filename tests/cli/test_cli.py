"""The reaqtive command: ``inspect`` reads a store without changing it, ``checkpoint`` recovers and checkpoints,
and both refuse a missing or foreign file with one clear line and exit code 2."""

from __future__ import annotations

import hashlib
import json
import operator
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from reaqtive import Query
from reaqtive.cli import main
from reaqtive.engine import Engine
from reaqtive.engine.inspection import describe_expression, read_store
from reaqtive.state import SqliteCheckpointStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def halve(x: int) -> float:
    return x / 2


def events(start: int, stop: int) -> list[tuple[int, datetime]]:
    return [(i, T0 + timedelta(seconds=i)) for i in range(start, stop)]


def build_store(path: Path, *, registered: bool = False) -> None:
    """Two streams, three subscriptions (one with inner subscriptions), a checkpoint, then more input that was
    appended but not processed. ``registered``: one query uses a function known only by a registered name."""
    with Engine(path, allow_modules=[__name__]) as engine:
        engine.advance_time(T0)
        engine.create_stream("sensors://a")
        engine.create_stream("sensors://b")
        engine.define_observable("defs://big-a", Query.stream("sensors://a").filter(operator.truth))
        engine.create_subscription("q://sum", Query.stream("sensors://a").scan(0, operator.add))
        engine.create_subscription("q://windows", Query.stream("sensors://b").buffer(timedelta(seconds=10)))
        if registered:
            engine.register_function("double", lambda x: x * 2)
            engine.create_subscription("q://doubled", Query.stream("sensors://b").map(engine.functions.resolve("double")))
        else:
            engine.create_subscription("q://halves", Query.stream("sensors://b").map(halve))
        engine.append_many("sensors://a", events(0, 30))
        engine.append_many("sensors://b", events(30, 60))
        engine.process()
        engine.checkpoint()
        engine.append_many("sensors://a", events(60, 65))  # appended, not processed


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store.db"
    build_store(path)
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- inspect -------------------------------------------------------------------------------------------------------


def test_inspect_lists_artifacts_expressions_watermarks_and_egress(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "inspect", str(store))
    assert code == 0 and err == ""
    for uri in ("sensors://a", "sensors://b", "defs://big-a", "q://sum", "q://windows", "q://halves"):
        assert uri in out
    assert "stream('sensors://a').scan(0, add)" in out
    assert "stream('sensors://b').buffer_time(10s, 10s)" in out
    assert "stream('sensors://a').filter(truth)" in out, "observable definitions show their expression"
    assert "durable sink" in out
    stream_a = next(line for line in out.splitlines() if line.split()[:1] == ["sensors://a"])
    assert stream_a.split() == ["sensors://a", "35", "30", "5"], (
        "events appended, delivered (30: seq 0-29), retained (the checkpoint truncated what it covered)"
    )


def test_inspect_json_matches_what_the_engine_says(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "inspect", "--json", str(store))
    assert code == 0
    data = json.loads(out)
    with Engine(store, allow_modules=[__name__]) as engine:
        streams = engine.streams()
        readings = engine.snapshot().streams
        infos = {info.uri: info for info in engine.artifacts()}
        outputs = {uri: len(engine.outputs(uri)) for uri in ("q://sum", "q://windows", "q://halves")}
    assert {s["uri"]: (s["appended"], s["delivered"], s["retained"]) for s in data["streams"]} == {
        uri: (s.appended, s.delivered + 1, s.retained) for uri, s in streams.items()
    }
    assert {s["uri"]: (s["appended"], s["delivered"]) for s in data["streams"]} == {
        uri: (r.appended, r.delivered) for uri, r in readings.items()
    }, "counted as the stream_appended_events and stream_delivered_events metrics count"
    artifacts = {a["uri"]: a for a in data["artifacts"]}
    assert set(artifacts) == set(infos)
    for uri, info in infos.items():
        assert artifacts[uri]["kind"] == info.kind
        assert artifacts[uri]["state_bytes"] == info.state_bytes
        assert artifacts[uri]["created"] == info.created.isoformat()
        if info.kind == "subscription":
            assert artifacts[uri]["expression"] == info.expression
    assert artifacts["q://sum"]["state_bytes"] > 0
    assert {e["subscription"]: e["rows"] for e in data["egress"]} == outputs
    assert data["position"] == 60 and data["clock"] == (T0 + timedelta(seconds=59)).isoformat()
    assert data["commits"] >= 1 and data["damaged"] == []


def test_inspect_never_writes_the_store(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = digest(store)
    assert run(capsys, "inspect", str(store))[0] == 0
    assert run(capsys, "inspect", "--json", str(store))[0] == 0
    assert digest(store) == before


def test_inspect_needs_no_query_functions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A query that uses a registered function cannot be recovered without it; inspect does not recover."""
    path = tmp_path / "registered.db"
    build_store(path, registered=True)
    code, out, _ = run(capsys, "inspect", str(path))
    assert code == 0
    assert "stream('sensors://b').map(@double)" in out


def test_inspect_reads_a_store_an_engine_has_open(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "live.db"
    build_store(path)
    with Engine(path, allow_modules=[__name__]) as engine:
        engine.process()
        engine.checkpoint()
        code, out, _ = run(capsys, "inspect", "--json", str(path))
        assert code == 0
        streams = {s["uri"]: s for s in json.loads(out)["streams"]}
        assert streams["sensors://a"]["delivered"] == 35 and streams["sensors://a"]["retained"] == 0


def test_inspect_reports_a_damaged_state_blob(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with sqlite3.connect(store) as db:
        db.execute("UPDATE reaqtive_blobs SET value = X'00' WHERE category = 'state' AND key = 'q://sum'")
    db.close()
    code, out, _ = run(capsys, "inspect", str(store))
    assert code == 0
    assert "state/q://sum" in out and "DAMAGED" in out


# -- refusing what is not a store ----------------------------------------------------------------------------------


def garbage(path: Path) -> None:
    path.write_bytes(b"this is not a database\n" * 10)


def foreign(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE readings (sensor TEXT, value REAL)")
        db.execute("INSERT INTO readings VALUES ('s1', 21.5)")
    db.close()


def empty(path: Path) -> None:
    path.write_bytes(b"")


def bare_checkpoint_store(path: Path) -> None:
    SqliteCheckpointStore(path).close()


BAD_FILES = {
    "garbage": (garbage, "not an SQLite database"),
    "foreign": (foreign, "an SQLite database, but not a reaqtive store"),
    "empty": (empty, "an empty file"),
    "bare checkpoint store": (bare_checkpoint_store, "without the engine's tables"),
}


@pytest.fixture(params=["inspect", "checkpoint"])
def command(request: pytest.FixtureRequest) -> Iterator[str]:
    yield request.param


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_a_file_that_is_not_a_store_is_refused_and_left_unchanged(
    command: str, kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, message = BAD_FILES[kind]
    path = tmp_path / "file.db"
    make(path)
    before, files = digest(path), sorted(tmp_path.iterdir())
    code, out, err = run(capsys, command, str(path))
    assert code == 2 and out == ""
    assert err.startswith(f"reaqtive {command}: {path}: ") and message in err
    assert len(err.strip().splitlines()) == 1, "one clear line, no traceback"
    assert digest(path) == before
    created = {p.name for p in tmp_path.iterdir()} - {p.name for p in files}
    # SQLite's readers of a WAL database (a checkpoint store is one) need its -wal/-shm companions; nothing else
    assert created <= {"file.db-wal", "file.db-shm"}
    if kind != "bare checkpoint store":
        assert not created, "no companion files for a file that is no WAL database"


def test_a_missing_file_is_refused_and_not_created(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "missing.db"
    code, _, err = run(capsys, command, str(path))
    assert code == 2
    assert err.strip() == f"reaqtive {command}: {path}: no such file"
    assert not path.exists() and list(tmp_path.iterdir()) == []


def test_a_directory_is_refused(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, command, str(tmp_path))
    assert code == 2 and "is a directory" in err


@pytest.mark.parametrize(("key", "words"), [("engine_schema_version", "store layout version 99"),
                                            ("schema_version", "schema version 99")])
def test_a_store_of_an_unknown_version_is_refused(
    command: str, key: str, words: str, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with sqlite3.connect(store) as db:
        db.execute("UPDATE reaqtive_meta SET value = 99 WHERE key = ?", (key,))
    db.close()
    before = digest(store)
    code, _, err = run(capsys, command, str(store))
    assert code == 2 and words in err
    assert digest(store) == before


# -- checkpoint ----------------------------------------------------------------------------------------------------


def test_checkpoint_recovers_checkpoints_and_prints_metrics(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    commits = read_store(store).commits
    code, out, _ = run(capsys, "checkpoint", "--full", "--allow-module", __name__, str(store))
    assert code == 0
    assert "recovered 2 streams, 1 definitions, 3 subscriptions" in out
    assert "(full)" in out
    for label in ("pause", "commit", "bytes written", "dirty subscriptions", "ingress truncated"):
        assert label in out
    dirty = next(line for line in out.splitlines() if "dirty subscriptions" in line)
    assert dirty.split()[-1] == "3", "a full checkpoint writes every subscription"
    assert read_store(store).commits == commits + 1

    code, out, _ = run(capsys, "checkpoint", "--allow-module", __name__, str(store))
    assert code == 0 and "(differential)" in out
    assert next(line for line in out.splitlines() if "dirty subscriptions" in line).split()[-1] == "0"


def test_checkpoint_stops_when_a_query_cannot_be_recovered(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "registered.db"
    build_store(path, registered=True)
    commits = read_store(path).commits
    code, _, err = run(capsys, "checkpoint", str(path))
    assert code == 2
    assert "q://doubled" in err and "@double" in err and "Nothing was changed" in err
    assert read_store(path).commits == commits

    code, out, _ = run(capsys, "checkpoint", "--keep-broken", str(path))
    assert code == 0
    assert "not running (kept in the store): q://doubled" in out
    assert "q://doubled" in {a.uri for a in read_store(path).artifacts}


def test_checkpoint_refuses_functions_of_a_module_not_allowed_and_says_what_to_pass(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    commits = read_store(store).commits
    code, _, err = run(capsys, "checkpoint", str(store))
    assert code == 2
    assert "q://halves" in err and f"'{__name__}:halve'" in err and "ForbiddenReferenceError" in err
    assert f"--allow-module {__name__}" in err and "Nothing was changed" in err
    assert read_store(store).commits == commits
    code, out, _ = run(capsys, "checkpoint", "--keep-broken", str(store))
    assert code == 0 and "not running (kept in the store): q://halves" in out
    assert f"--allow-module {__name__}" in out
    code, _, _ = run(capsys, "checkpoint", "--allow-module", "tests.*", str(store))
    assert code == 0


@pytest.mark.parametrize("module", ["builtins", "__main__", "os:system", ""])
def test_checkpoint_refuses_an_allow_module_that_can_never_be_allowed(
    module: str, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = digest(store)
    code, _, err = run(capsys, "checkpoint", "--allow-module", module, str(store))
    assert code == 2 and "--allow-module" in err and repr(module) in err
    assert digest(store) == before


def test_inspect_describes_a_query_thousands_of_stages_deep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "deep.db"
    query = Query.stream("s")
    for _ in range(2_000):
        query = query.map(abs)
    with Engine(path, start=T0) as engine:
        engine.create_stream("s")
        engine.define_observable("defs://deep", query)
    code, out, err = run(capsys, "inspect", str(path))
    assert code == 0 and err == ""
    line = next(line for line in out.splitlines() if line.strip().startswith("defs://deep"))
    assert "stream('s').map(abs)" in line and "...(1,977 more stages)..." in line and len(line) < 400
    code, out, err = run(capsys, "inspect", "--json", str(path))
    assert code == 0 and err == "" and out.count('"op":"map"') == 2_000


def test_checkpoint_functions_option_needs_a_registry(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "checkpoint", "--functions", "operator:add", str(store))
    assert code == 2 and "not a FunctionRegistry" in err
    code, _, err = run(capsys, "checkpoint", "--functions", "no_such_module_here:x", str(store))
    assert code == 2 and "no_such_module_here" in err


# -- the rest ------------------------------------------------------------------------------------------------------


def test_expressions_are_described_in_fluent_style() -> None:
    expression = {"op": "map", "args": [
        {"q": {"op": "combine_latest", "args": [{"stream": "a"}, {"stream": "b"}, {"fn": "builtins:max"}]}},
        {"fn": "@label"},
    ]}
    assert describe_expression(expression) == "stream('a').combine_latest(stream('b'), max).map(@label)"
    assert describe_expression({"op": "take", "args": [{"stream": "s"}, 3, None]}) == "stream('s').take(3)"


def test_unknown_command_exits_with_usage() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fly"])
    assert exit_info.value.code == 2
