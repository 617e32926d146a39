"""``reaqtive inspect --plan URI``: a stored subscription's stages and their paths, in the form it was recorded in
(the form it recovers in), with why a general one is general (issue 32, item 3)."""

from __future__ import annotations

import json
import operator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from reaqtive import Query, keyed_execution
from reaqtive.cli import main
from reaqtive.engine import Engine
from reaqtive.operators.plan import GENERAL
from tests.engine.test_engine_keyed_selectors import record_of_previous_release

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def key_of(x: int) -> int:
    return x % 3


def tag(group: Any, n: int) -> tuple[object, int]:
    return (group.key, n)


def windows(group: Query[int]) -> Query[Any]:
    return group.window(2).merge_all()


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "plan.db"
    with Engine(path, start=T0, allow_modules=[__name__]) as engine:
        engine.create_stream("s")
        engine.create_subscription("q://tagged", Query.stream("s").group_by(key_of).flat_map(counts_stored, tag))
        engine.create_subscription("q://windows", Query.stream("s").group_by(key_of).flat_map(windows))
        with keyed_execution(False):
            engine.create_subscription("q://old", Query.stream("s").group_by(key_of).flat_map(counts_stored, tag))
        engine.append_many("s", [(i, T0 + timedelta(seconds=i)) for i in range(10)])
        engine.process()
        engine.checkpoint()
    record_of_previous_release(path, "q://old")
    return path


def counts_stored(group: Query[int]) -> Query[Any]:
    return group.scan(0, add_one)


def add_one(n: int, _: object) -> int:
    return operator.add(n, 1)


def inspect_plan(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["inspect", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_inspect_plan_shows_each_subscriptions_path_in_its_recorded_form(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = inspect_plan(capsys, str(store), "--plan", "q://tagged", "--allow-module", __name__)
    assert code == 0 and err == "", err
    assert out.splitlines()[1].strip().startswith("group_by+flat_map: keyed [one stage, a record per key: g.scan")
    code, out, _ = inspect_plan(capsys, str(store), "--plan", "q://old", "--allow-module", __name__, "--json")
    plan = json.loads(out)
    assert code == 0 and plan["keyed_form"] == 1
    assert plan["stages"][0]["path"] == GENERAL and "result_selector" in plan["stages"][0]["reason"]
    code, out, _ = inspect_plan(capsys, str(store), "--plan", "q://windows", "--allow-module", __name__)
    assert code == 0 and "'window', 'merge_all' have no keyed step" in out


def test_inspect_plan_imports_nothing_it_was_not_allowed(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = inspect_plan(capsys, str(store), "--plan", "q://tagged")
    assert code == 2 and out == ""
    assert "is refused" in err and f"--allow-module {__name__}" in err


def test_inspect_plan_of_a_stream_is_a_usage_error(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = inspect_plan(capsys, str(store), "--plan", "s")
    assert code == 2 and "only a readable subscription has a plan" in err
