"""``reaqtive update`` / ``reaqtive rollback`` (with ``--dry-run``) and ``reaqtive inspect --history``."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from reaqtive.cli import main
from reaqtive.engine import Engine
from tests.cli import upgrade_queries

T0 = datetime(2026, 1, 1, tzinfo=UTC)
FUNCTIONS = "tests.cli.upgrade_queries:functions"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store.db"
    with Engine(path, functions=upgrade_queries.functions(), start=T0) as engine:
        engine.create_stream("a")
        engine.create_subscription("q", upgrade_queries.count())
        for i in range(4):
            engine.append("a", i, T0 + timedelta(seconds=i))
        engine.process()
        engine.checkpoint()
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_dry_run_prints_the_plan_and_changes_nothing(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = digest(store)
    code, out, err = run(capsys, "update", str(store), "q", "--query", "tests.cli.upgrade_queries:count_and_sum",
                         "--functions", FUNCTIONS, "--dry-run")
    assert (code, err) == (0, "")
    assert out.startswith("would do (dry run, nothing changed): update of 'q': 3 matched, 3 reset, 0 dropped")
    assert "moved    reaqtive:scan+seed at 0/0/0 (named 'count')" in out
    assert digest(store) == before


def test_update_then_history_then_rollback(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "update", str(store), "q", "--query", "tests.cli.upgrade_queries:count_and_sum",
                       "--functions", FUNCTIONS)
    assert code == 0 and out.startswith("done: update of 'q'")
    code, out, _ = run(capsys, "inspect", str(store), "--history", "q")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "definitions of q (2, oldest first)"
    assert "until now" not in lines[1] and "(log position 4)" in lines[1]
    assert lines[2].strip() == "stream('a').scan(0, @count_one).named('count')"
    assert lines[3].endswith("until now")
    assert ".combine_latest(stream('a').scan(0, @add).named('sum'), @pair)" in lines[4]
    code, out, _ = run(capsys, "inspect", str(store))
    assert "updated subscriptions (their definitions: reaqtive inspect STORE --history URI)\n  q: definition 2" in out
    code, out, _ = run(capsys, "inspect", str(store), "--history", "q", "--json")
    assert [json.loads(line)["until"] is None for line in out.splitlines()] == [False, True]
    code, out, _ = run(capsys, "rollback", str(store), "q", "--functions", FUNCTIONS)
    assert code == 0 and "3 matched, 0 reset, 3 dropped" in out
    with Engine(store, functions=upgrade_queries.functions()) as engine:
        assert engine.subscription_history("q")[-1]["expression"]["op"] == "named"


def test_a_refused_update_exits_1_naming_why_and_changes_nothing(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = digest(store)
    code, _, err = run(capsys, "update", str(store), "q", "--query", "tests.cli.upgrade_queries:count_and_sum",
                       "--functions", FUNCTIONS, "--require-state", "--dry-run")
    assert code == 1 and err.startswith("reaqtive update: refused: update_subscription('q', require_state=True)")
    code, _, err = run(capsys, "rollback", str(store), "q", "--functions", FUNCTIONS)
    assert code == 1 and "no previous definition" in err
    assert digest(store) == before


@pytest.mark.parametrize(("spec", "message"), [
    ("tests.cli.upgrade_queries", "--query needs MODULE:ATTRIBUTE"),
    ("tests.cli.upgrade_queries:NOT_A_QUERY", "a int, not a Query"),
    ("tests.cli.no_such_module:q", "No module named"),
])
def test_a_query_option_that_names_no_query_is_a_usage_error(
    store: Path, capsys: pytest.CaptureFixture[str], spec: str, message: str
) -> None:
    code, _, err = run(capsys, "update", str(store), "q", "--query", spec, "--functions", FUNCTIONS)
    assert code == 2 and message in err


def test_inspect_history_of_a_subscription_never_updated_shows_one_definition(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "inspect", str(store), "--history", "q")
    assert code == 0 and out.splitlines()[0] == "definitions of q (1, oldest first)"
    code, _, err = run(capsys, "inspect", str(store), "--history", "a")
    assert code == 2 and "only subscriptions have history" in err
