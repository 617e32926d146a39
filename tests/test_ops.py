"""``reaqtive.ops``: a function per chained operator for ``query.pipe(...)``, the same builders the fluent methods
use, so ``q.pipe(ops.x(...))`` is ``q.x(...)``; typed for mypy."""

from __future__ import annotations

import doctest
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from reaqtive import Query, ops
from reaqtive.core.binding import operator_specs

ROOT = Path(__file__).resolve().parent.parent


def fluent_operator_methods() -> set[str]:
    """The operator methods a query chains: those of the fluent mixins (sources are static constructors)."""
    mixins = [cls for cls in Query.__mro__
              if cls.__module__.startswith("reaqtive.fluent.") and cls.__name__.endswith("Mixin")]
    return {name for cls in mixins for name, value in vars(cls).items() if not name.startswith("_") and callable(value)}


def test_every_fluent_operator_method_has_its_builder_in_ops() -> None:
    builders = {spec.method: spec.builder for spec in operator_specs() if spec.method}
    methods = fluent_operator_methods()
    assert len(methods) > 50
    missing = sorted(name for name in methods if getattr(ops, name, None) is not builders[name])
    assert not missing, f"add these fluent methods' builders to reaqtive/ops.py: {missing}"
    assert set(ops.__all__) == methods, "ops holds exactly the chained operators"


def double(x: int) -> int:
    return x * 2


def is_even(x: int) -> bool:
    return x % 2 == 0


def add(total: int, x: int) -> int:
    return total + x


def parity(x: int) -> int:
    return x % 2


CASES: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("map", (double,), {}),
    ("filter", (is_even,), {}),
    ("scan", (0, add), {}),
    ("scan", (add,), {}),
    ("take", (3,), {}),
    ("take", (timedelta(seconds=1),), {}),
    ("skip", (2,), {}),
    ("buffer", (2,), {}),
    ("buffer", (timedelta(seconds=1), 3), {}),
    ("distinct", (), {}),
    ("sum", (), {}),
    ("max", (), {}),
    ("to_list", (), {}),
    ("start_with", (-1, -2), {}),
    ("merge", (Query.from_iterable([7]),), {}),
    ("group_by", (parity,), {}),
    ("default_if_empty", (0,), {}),
]


@pytest.mark.parametrize(("name", "args", "kwargs"), CASES, ids=[case[0] for case in CASES])
def test_pipe_with_ops_builds_the_chained_query(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    source = Query.from_iterable([1, 2, 2, 3, 4, 5])
    assert source.pipe(getattr(ops, name)(*args, **kwargs)) == getattr(source, name)(*args, **kwargs)


def test_a_piped_chain_runs_as_the_fluent_chain() -> None:
    source = Query.from_iterable(range(10))
    piped, chained = [], []
    source.pipe(ops.filter(is_even), ops.map(double), ops.scan(0, add), ops.take(3)).run(piped.append)
    source.filter(is_even).map(double).scan(0, add).take(3).run(chained.append)
    assert piped == chained == [0, 4, 12]
    assert ops.take(2)(source) == source.take(2), "a builder's call applies to a query directly too"


TYPED = """
from reaqtive import Query, ops

def double(x: int) -> int: return x * 2
def text(x: int) -> str: return str(x)
def is_big(x: int) -> bool: return x > 1

q: Query[int] = Query.from_iterable([1, 2, 3])
reveal_type(q.pipe(ops.map(double)))
reveal_type(q.pipe(ops.map(double), ops.map(text)))
reveal_type(q.pipe(ops.filter(is_big), ops.map(double), ops.map(text)))
reveal_type(q.pipe(ops.map(text)).map(len))
"""


def test_mypy_types_piped_queries(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(TYPED)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
         "--no-error-summary", "app.py"],
        check=False, capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={"MYPYPATH": str(ROOT), "PATH": ""},
    )
    revealed = [line.split("Revealed type is ")[1].strip('"') for line in result.stdout.splitlines()
                if line.startswith("app.py") and "Revealed type" in line]
    assert revealed == ["reaqtive.fluent.query.Query[int]", "reaqtive.fluent.query.Query[str]",
                        "reaqtive.fluent.query.Query[str]", "reaqtive.fluent.query.Query[int]"], result.stdout
    assert not [line for line in result.stdout.splitlines() if line.startswith("app.py") and "error" in line]


def test_the_modules_example_runs() -> None:
    result = doctest.testmod(ops, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
