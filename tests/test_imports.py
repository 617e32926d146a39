"""``import reaqtive`` loads what queries need and leaves the rest for first use: no asyncio, ssl, HTTP, SQLite,
Spark or PostgreSQL driver until a feature that needs them is used; every public name still resolves, and type
checkers see the lazily loaded ones. (What the import costs is measured by ``bench/import_time.py``, never
asserted here.)"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import reaqtive

ROOT = Path(__file__).resolve().parent.parent

DEFERRED = ("asyncio", "ssl", "http.client", "urllib.request", "sqlite3", "importlib.metadata", "pyspark",
            "psycopg", "prometheus_client")
"""Modules a plain ``import reaqtive`` must not load."""


def fresh(code: str) -> object:
    """Run ``code`` in a fresh interpreter (this checkout first on the path); it prints one JSON value."""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def loaded_after(statement: str) -> list[str]:
    """Which of :data:`DEFERRED` a fresh interpreter has loaded after ``statement``."""
    found = f"sorted(m for m in {DEFERRED!r} if m in sys.modules)"
    code = f"import sys\n{statement}\nprint(__import__('json').dumps({found}))"
    result = fresh(code)
    assert isinstance(result, list)
    return result


def test_import_reaqtive_loads_none_of_the_heavy_modules() -> None:
    assert loaded_after("import reaqtive") == []


def test_building_and_running_a_query_loads_none_of_them_either() -> None:
    statement = ("from reaqtive import Query, from_iterable\n"
                 "out = []\nfrom_iterable(range(5)).map(lambda x: x + 1).filter(lambda x: x % 2).run(out.append)\n"
                 "assert out == [1, 3, 5], out\nQuery.stream('s').scan(0, max)")
    assert loaded_after(statement) == []


def test_the_engine_loads_sqlite_but_not_asyncio_until_the_asyncio_face_is_used() -> None:
    assert loaded_after("from reaqtive import Engine") == ["sqlite3"]
    assert loaded_after("import reaqtive.engine") == ["sqlite3"]
    assert "asyncio" in loaded_after("from reaqtive import AsyncEngine")
    assert "asyncio" in loaded_after("from reaqtive.engine import AsyncEngine")


def test_the_connectors_load_asyncio_and_http_only_when_used() -> None:
    assert loaded_after("import reaqtive.connectors") == ["sqlite3"]  # the engine's errors come with it
    assert loaded_after("from reaqtive.connectors import FileSource, JsonLinesSink, PostgresSink") == ["sqlite3"]
    assert {"http.client", "ssl"} <= set(loaded_after("from reaqtive.connectors import WebhookSink"))


def test_every_public_name_resolves_in_a_fresh_interpreter() -> None:
    code = ("import json, reaqtive\nfrom reaqtive import *\n"
            "missing = [n for n in reaqtive.__all__ if n not in globals()]\n"
            "print(json.dumps({'missing': missing, 'all': len(reaqtive.__all__)}))")
    result = fresh(code)
    assert result == {"missing": [], "all": len(reaqtive.__all__)}


def test_every_public_name_is_its_modules_object_and_listed_by_dir() -> None:
    import reaqtive.engine

    for name in reaqtive.__all__:
        assert getattr(reaqtive, name) is not None, name
    assert set(reaqtive.__all__) <= set(dir(reaqtive))
    for name in ("Engine", "AsyncEngine", "FunctionRegistry", "Output", "DURABLE_SINK", "EngineError"):
        assert getattr(reaqtive, name) is getattr(reaqtive.engine, name), name
    assert len(set(reaqtive.__all__)) == len(reaqtive.__all__)


def test_subpackages_are_reached_as_attributes_and_unknown_names_raise() -> None:
    for name in ("engine", "connectors", "testing", "tck", "cli"):
        assert fresh(f"import json, reaqtive\nprint(json.dumps(reaqtive.{name}.__name__))") == f"reaqtive.{name}"
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        reaqtive.nothing_here  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(ImportError):
        exec("from reaqtive import nothing_here", {})


def test_the_lazy_connectors_resolve() -> None:
    import reaqtive.connectors
    from reaqtive.connectors.webhook import WebhookSink

    assert reaqtive.connectors.WebhookSink is WebhookSink
    for name in reaqtive.connectors.__all__:
        assert getattr(reaqtive.connectors, name) is not None, name
    with pytest.raises(AttributeError):
        reaqtive.connectors.nothing_here  # type: ignore[attr-defined]  # noqa: B018


def test_the_lazy_stores_of_reaqtive_state_resolve() -> None:
    import reaqtive.state
    from reaqtive.state.postgres_store import PostgresCheckpointStore
    from reaqtive.state.sqlite_store import SqliteCheckpointStore

    assert reaqtive.state.SqliteCheckpointStore is SqliteCheckpointStore
    assert reaqtive.state.PostgresCheckpointStore is PostgresCheckpointStore
    for name in reaqtive.state.__all__:
        assert getattr(reaqtive.state, name) is not None, name
    with pytest.raises(AttributeError):
        reaqtive.state.nothing_here  # type: ignore[attr-defined]  # noqa: B018


def type_checking_imports(path: Path) -> set[str]:
    """The names a module imports under ``if TYPE_CHECKING:`` (what type checkers see of its lazy names)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom):
                    names |= {alias.asname or alias.name for alias in statement.names}
    return names


@pytest.mark.parametrize(
    ("module", "lazy"),
    [
        ("reaqtive", "_LAZY_NAMES"),
        ("reaqtive.state", "_LAZY_NAMES"),
        ("reaqtive.connectors", "_LAZY_NAMES"),
    ],
)
def test_type_checkers_see_every_lazily_loaded_name(module: str, lazy: str) -> None:
    """A name served by ``__getattr__`` is invisible to mypy unless also imported under ``TYPE_CHECKING``."""
    imported = importlib.import_module(module)
    assert imported.__file__ is not None
    path = Path(imported.__file__)
    assert type_checking_imports(path) == set(getattr(imported, lazy))
    assert set(getattr(imported, lazy)) <= set(imported.__all__)


def test_type_checkers_see_the_asyncio_face_of_reaqtive_engine() -> None:
    import reaqtive.engine

    assert reaqtive.engine.__file__ is not None
    assert type_checking_imports(Path(reaqtive.engine.__file__)) == {"AsyncEngine", "ProcessingFailedError"}


def test_the_import_time_bench_runs() -> None:
    """bench/import_time.py keeps working (one run; its figures depend on the machine and are not checked)."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "import_time.py"), "--runs", "1",
                           "--module", "reaqtive"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = [line for line in done.stdout.splitlines() if line.startswith("reaqtive ")]
    assert row.endswith("none"), row  # no deferred module loaded


# -- the operator library loads on first use ---------------------------------------------------------------------


def test_import_reaqtive_loads_no_operator_module() -> None:
    """Binding imports an operator's module on first use of its name (``reaqtive.core.binding.BUILTIN_OPERATORS``);
    a plain ``import reaqtive``, and a query over an engine stream, need none of them."""
    code = ("import json, sys, reaqtive\nreaqtive.Query.stream('s')\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('reaqtive.operators'))))")
    assert fresh(code) == ["reaqtive.operators", "reaqtive.operators._seed"]


def test_the_table_of_builtin_operators_names_the_module_that_registers_each() -> None:
    """The table binding loads modules by cannot drift: every operator a module of ``reaqtive.operators`` registers
    is in it, mapped to that module, and it names nothing else; the package lists every module."""
    code = ("import importlib, json, pkgutil, reaqtive.operators as ops\n"
            "from reaqtive.core import binding\n"
            "files = sorted(i.name for i in pkgutil.iter_modules(ops.__path__) if not i.name.startswith('_'))\n"
            "for name in files:\n    importlib.import_module(f'reaqtive.operators.{name}')\n"
            "origins = {op: binding.registering_module(op) for op in binding.registered_operators()}\n"
            "print(json.dumps({'files': files, 'all': ops.__all__, 'origins': origins}))")
    result = fresh(code)
    assert isinstance(result, dict)
    assert result["all"] == result["files"]
    from reaqtive.core.binding import BUILTIN_OPERATORS

    builtin = {op: origin.removeprefix("reaqtive.operators.") for op, origin in result["origins"].items()
               if origin.startswith("reaqtive.operators.")}
    assert builtin == BUILTIN_OPERATORS


def test_every_operator_is_listed_and_documented_in_a_fresh_interpreter() -> None:
    code = ("import json, reaqtive\nfrom reaqtive.core.binding import BUILTIN_OPERATORS\n"
            "ops = reaqtive.registered_operators()\n"
            "missing = sorted(set(BUILTIN_OPERATORS) - set(ops))\n"
            "print(json.dumps({'missing': missing, 'take_doc': bool(reaqtive.Query.take.__doc__)}))")
    assert fresh(code) == {"missing": [], "take_doc": True}


def test_a_stored_query_recovers_in_a_process_that_imported_only_the_engine(tmp_path: Path) -> None:
    """Recovery names operators by name: binding imports their modules in a process that never built a query."""
    db = str(tmp_path / "store.db")
    create = ("import json, operator\nfrom datetime import UTC, datetime, timedelta\nfrom reaqtive import Query\n"
              "from reaqtive.engine import Engine\nT0 = datetime(2026, 1, 1, tzinfo=UTC)\n"
              f"with Engine({db!r}) as engine:\n"
              "    engine.create_stream('s')\n"
              "    engine.create_subscription('q://a', Query.stream('s').map(operator.neg).filter(operator.truth)"
              ".scan(0, operator.add).skip(1).distinct_until_changed().buffer(2))\n"
              "    engine.append_many('s', [(i, T0 + timedelta(seconds=i)) for i in range(4)])\n"
              "    engine.process()\n    engine.checkpoint()\n"
              "    print(json.dumps([o.value for o in engine.outputs('q://a')]))\n")
    assert fresh(create) == [[-3, -6]]  # scan: -1, -3, -6; skip(1) drops -1
    resume = ("import json, sys\nfrom datetime import UTC, datetime, timedelta\nfrom reaqtive.engine import Engine\n"
              "T0 = datetime(2026, 1, 1, tzinfo=UTC)\n"
              "before = sorted(m for m in sys.modules if m.startswith('reaqtive.operators.') and '._' not in m)\n"
              f"with Engine({db!r}) as engine:\n"
              "    engine.append_many('s', [(i, T0 + timedelta(seconds=i)) for i in range(4, 7)])\n"
              "    engine.process()\n"
              "    print(json.dumps({'before': before, 'out': [o.value for o in engine.outputs('q://a')]}))\n")
    result = fresh(resume)
    assert isinstance(result, dict)
    assert result["out"] == [[-3, -6], [-10, -15]]
    used = {"map", "filter", "scan", "skip", "distinct_until_changed", "buffer"}
    assert not used & {name.removeprefix("reaqtive.operators.") for name in result["before"]}, "loaded by binding"


def test_what_a_query_binds_to_does_not_depend_on_the_operators_used_before() -> None:
    """Operator modules load on first use; the tables keyed by operator name that binding consults (keyed steps,
    fusible stages, batch sources) load the module they ask about, so a fresh process binds a query keyed and
    fused exactly as one that used every operator before (a fresh Spark worker once built a per-key query as
    instances instead of its table)."""
    code = """
import json
from reaqtive.operators.keyed_steps import keyed_step_factory
from reaqtive.operators._fusion import _fusible_source
from reaqtive import Query
steps = keyed_step_factory("scan") is not None and keyed_step_factory("map") is not None
fused = _fusible_source(Query.stream("s").map(abs).filter(bool)) is not None
print(json.dumps([steps, fused, keyed_step_factory("no-such-operator") is None]))
"""
    assert fresh(code) == [True, True, True]
