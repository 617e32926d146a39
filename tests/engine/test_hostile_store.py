"""A store is data, never code: a store forged to name arbitrary callables runs nothing when an engine, ``reaqtive
checkpoint`` or ``reaqtive inspect`` opens it, and the error names the artifact and the reference.

Each test builds a legitimate store whose query uses a registered placeholder function, then rewrites the stored
JSON in the SQLite file the way an attacker with write access to the file could (:func:`forge`), and checks a
canary: a file the payload would create, a module that must stay unimported. ``reaqtive_canary`` is a module
written for each test; importing it creates ``IMPORTED`` and calling its ``run`` creates ``CALLED``, next to it.

The engine's tests run on both stores: the forger rewrites rows of an SQLite file or of a PostgreSQL database
the same way (the command-line tests stay on files, which is what the commands open).
"""

from __future__ import annotations

import builtins
import json
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from os import system  # an imported name: a stored query must not reach it through this module
from pathlib import Path
from typing import Any

import pytest

from reaqtive import Query, throw
from reaqtive.cli import main
from reaqtive.engine import DURABLE_SINK, Engine, FunctionRegistry, RecoveryError, RecoveryPolicy
from reaqtive.engine.expressions import (
    ForbiddenReferenceError,
    decode_query,
    expression_to_json,
    instantiate,
    template_id,
    templatize,
)
from reaqtive.state.sqlite_store import row_checksum
from tests.engine.store_targets import STORES, StoreSql, store_sql

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CANARY = "reaqtive_canary"
CANARY_SOURCE = '''
from pathlib import Path

Path(__file__).with_name("IMPORTED").touch()


def run(*args):
    Path(__file__).with_name("CALLED").touch()


class Boom(Exception):
    pass
'''


def placeholder(*args: object) -> None:
    """The function the legitimate store names (as ``@placeholder``) before it is forged."""


def functions() -> FunctionRegistry:
    registry = FunctionRegistry()
    registry.register("placeholder", placeholder)
    return registry


# -- forging -------------------------------------------------------------------------------------------------------


def put(db: sqlite3.Connection | StoreSql, category: str, key: str, document: dict[str, Any]) -> None:
    """Write a row as the engine would, with a valid checksum: the checksum is no defence against a forger."""
    value = expression_to_json(document).encode("utf-8")
    if isinstance(db, StoreSql):  # a PostgreSQL database
        db.execute("INSERT INTO reaqtive_blobs (category, key, value, crc) VALUES (?, ?, ?, ?) ON CONFLICT "
                   "(category, key) DO UPDATE SET value = excluded.value, crc = excluded.crc",
                   (category, key, value, row_checksum(category, key, value)))
        return
    db.execute("INSERT OR REPLACE INTO reaqtive_blobs (category, key, value, crc) VALUES (?, ?, ?, ?)",
               (category, key, value, row_checksum(category, key, value)))


def forge(path: Path | str, uri: str, old: str, new: str) -> None:
    """Replace the text ``old`` by ``new`` in the stored expression of artifact ``uri`` (for a subscription: in its
    template and constants, stored again under the template's new content hash). ``path``: a file or a DSN."""
    if isinstance(path, str):
        database = StoreSql(path)
        forge_rows(database, lambda category, key: json.loads(bytes(database.rows(
            "SELECT value FROM reaqtive_blobs WHERE category = ? AND key = ?", (category, key))[0][0])), uri, old, new)
        return
    with closing(sqlite3.connect(path)) as db, db:
        def get(category: str, key: str) -> Any:
            row = db.execute("SELECT value FROM reaqtive_blobs WHERE category = ? AND key = ?", (category, key))
            return json.loads(row.fetchone()[0])

        forge_rows(db, get, uri, old, new)


def forge_rows(db: sqlite3.Connection | StoreSql, get: Callable[[str, str], Any], uri: str, old: str,
               new: str) -> None:
    """:func:`forge` on an open store: ``get`` reads a row's JSON, ``db`` writes."""
    record = get("artifacts", uri)
    if record["kind"] != "subscription":
        forged = json.loads(expression_to_json(record).replace(old, new))
        assert forged != record, f"{old!r} is not in {uri!r}"
        put(db, "artifacts", uri, forged)
        return
    stored = record["template"]
    text = expression_to_json(instantiate(get("templates", stored), record["constants"]))
    assert old in text, f"{old!r} is not in {uri!r}"
    template, constants = templatize(json.loads(text.replace(old, new)))
    record["template"], record["constants"] = template_id(template), constants
    db.execute("DELETE FROM reaqtive_blobs WHERE category = 'templates' AND key = ?", (stored,))
    put(db, "templates", record["template"], template)
    put(db, "artifacts", uri, record)


# -- the canary ----------------------------------------------------------------------------------------------------


@dataclass
class Canary:
    directory: Path

    def imported(self) -> bool:
        return (self.directory / "IMPORTED").exists() or CANARY in sys.modules

    def called(self) -> bool:
        return (self.directory / "CALLED").exists()


@pytest.fixture
def canary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Canary]:
    directory = tmp_path / "lib"
    directory.mkdir()
    (directory / f"{CANARY}.py").write_text(CANARY_SOURCE)
    monkeypatch.syspath_prepend(str(directory))
    sys.modules.pop(CANARY, None)
    yield Canary(directory)
    sys.modules.pop(CANARY, None)


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty directory that tempfile.mkdtemp() would create its directory in."""
    directory = tmp_path / "tmp"
    directory.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    return directory


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreSql:
    return store_sql(request.param, tmp_path, request)


def build(path: Path | str, query: Query[Any], *, events: tuple[object, ...] = (), observer: str = DURABLE_SINK,
          observable: Query[Any] | None = None) -> None:
    """A legitimate store: stream ``s`` holding ``events`` (appended, not yet processed: recovery replays them),
    the subscription ``q://victim`` running ``query``, optionally an observer ``obs://sink`` calling the
    placeholder and an observable ``defs://view``."""
    with Engine(path, functions=functions(), start=T0) as engine:
        engine.create_stream("s")
        if observer != DURABLE_SINK:
            engine.define_observer(observer, placeholder)
        if observable is not None:
            engine.define_observable("defs://view", observable)
        engine.create_subscription("q://victim", query, observer)
        for event in events:
            engine.append("s", event)


def refused_at_open(path: Path | str, *references: str) -> RecoveryError:
    """Opening the store fails (default policy) with the specific error; the store opens under KEEP, without the
    broken artifact, and processing the pending events runs nothing of it."""
    before = set(sys.modules)
    with pytest.raises(RecoveryError) as failure:
        Engine(path)
    refused = failure.value.error
    assert isinstance(refused, ForbiddenReferenceError), refused
    for reference in references:
        assert reference in str(failure.value)
    with Engine(path, recovery_policy=RecoveryPolicy.KEEP) as engine:
        # the artifact, and whatever uses it (a subscription with a refused observer or observable)
        assert failure.value.uri in {f.uri for f in engine.recovery.failures}
        assert all(any(reference in str(f.error) for reference in references) for f in engine.recovery.failures)
        engine.process()
        engine.checkpoint()
    imported = {name for name in set(sys.modules) - before if not name.startswith("reaqtive.")}
    assert not imported, f"opening a hostile store imported {sorted(imported)}"
    return failure.value


# -- one test per payload class ------------------------------------------------------------------------------------


def test_map_os_system_runs_nothing(tmp_path: Path, store: StoreSql) -> None:
    path, marker = store.target, tmp_path / "pwned"
    build(path, Query.stream("s").map(placeholder), events=(f"touch {marker}",))
    forge(path, "q://victim", "@placeholder", "os:system")
    error = refused_at_open(path, "'q://victim'", "'os:system'")
    assert "its module 'os' is not allowed" in str(error)
    assert not marker.exists()


def test_map_builtins_eval_runs_nothing(tmp_path: Path, store: StoreSql) -> None:
    path, marker = store.target, tmp_path / "pwned"
    build(path, Query.stream("s").map(placeholder), events=(f"open({str(marker)!r}, 'w').close()",))
    forge(path, "q://victim", "@placeholder", "builtins:eval")
    error = refused_at_open(path, "'q://victim'", "'builtins:eval'")
    assert "'builtins' can never be allowed" in str(error)
    assert not marker.exists()
    with pytest.raises(ValueError, match="never allowed"):
        Engine(path, allow_modules=["builtins"])


def test_finally_action_tempfile_mkdtemp_via_checkpoint_with_no_events_runs_nothing(
    tmp_path: Path, scratch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.db"
    build(path, Query.stream("s").finally_action(placeholder))
    forge(path, "q://victim", "@placeholder", "tempfile:mkdtemp")
    code = main(["checkpoint", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert "'q://victim'" in err and "'tempfile:mkdtemp'" in err
    assert "--allow-module tempfile" in err and "Nothing the store names was imported or run" in err
    assert main(["checkpoint", "--keep-broken", str(path)]) == 0
    assert "not running (kept in the store): q://victim" in capsys.readouterr().out
    assert list(scratch.iterdir()) == [], "mkdtemp ran"


def test_the_checkpoint_command_runs_a_finally_action_of_an_allowed_module(
    tmp_path: Path, canary: Canary, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control for the test above: the same payload, naming an allowed module, does run (so a canary there
    would have seen it)."""
    path = tmp_path / "s.db"
    build(path, Query.stream("s").finally_action(placeholder))
    forge(path, "q://victim", "@placeholder", f"{CANARY}:run")
    assert main(["checkpoint", str(path)]) == 2
    assert f"--allow-module {CANARY}" in capsys.readouterr().err
    assert not canary.imported() and not canary.called()
    assert main(["checkpoint", "--allow-module", CANARY, str(path)]) == 0
    assert canary.imported() and canary.called()


def test_an_error_tag_naming_any_module_imports_nothing(tmp_path: Path, store: StoreSql, canary: Canary) -> None:
    path = store.target
    build(path, throw(ValueError("placeholder")))
    forge(path, "q://victim", "builtins:ValueError", f"{CANARY}:Boom")
    error = refused_at_open(path, "'q://victim'", f"error type '{CANARY}:Boom'")
    assert isinstance(error.error, ForbiddenReferenceError) and error.error.kind == "error type"
    assert not canary.imported()
    # an allowed module does not make its exception types loadable either: error types are registered
    with pytest.raises(RecoveryError, match="register_error"):
        Engine(path, allow_modules=[CANARY])
    assert not canary.imported()


def test_an_observer_definition_naming_os_system_runs_nothing(tmp_path: Path, store: StoreSql) -> None:
    path, marker = store.target, tmp_path / "pwned"
    build(path, Query.stream("s").map(str), events=(f"touch {marker}",), observer="obs://sink")
    forge(path, "obs://sink", "@placeholder", "os:system")
    error = refused_at_open(path, "'obs://sink'", "'os:system'")
    assert error.uri == "obs://sink"
    assert not marker.exists()


def test_an_observable_definition_with_a_forbidden_reference_runs_nothing(
    tmp_path: Path, store: StoreSql, canary: Canary
) -> None:
    path = store.target
    build(path, Query.stream("defs://view"), events=(1, 2), observable=Query.stream("s").map(placeholder))
    forge(path, "defs://view", "@placeholder", f"{CANARY}:run")
    error = refused_at_open(path, "'defs://view'", f"'{CANARY}:run'")
    assert error.uri == "defs://view"
    assert not canary.imported() and not canary.called()


def test_the_inspect_command_imports_and_resolves_nothing(
    tmp_path: Path, canary: Canary, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.db"
    build(path, Query.stream("defs://view").map(placeholder), observer="obs://sink",
          observable=Query.stream("s").map(placeholder))
    for uri in ("q://victim", "obs://sink", "defs://view"):
        forge(path, uri, "@placeholder", f"{CANARY}:run")

    def never(*args: object, **kwargs: object) -> Any:
        raise AssertionError("inspect resolved a reference")

    monkeypatch.setattr(FunctionRegistry, "resolve_reference", never)
    monkeypatch.setattr(FunctionRegistry, "resolve_error", never)
    before = set(sys.modules)
    assert main(["inspect", str(path)]) == 0
    assert main(["inspect", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.count(f"{CANARY}:run") == 3, "the JSON shows each stored reference as it is"
    assert not canary.imported() and not canary.called()
    assert {name for name in set(sys.modules) - before if not name.startswith("reaqtive.")} == set()


# -- escaping an allowed module ------------------------------------------------------------------------------------


class Decoder(json.JSONDecoder):
    """A class defined here, inheriting methods defined elsewhere."""

    def own(self) -> None:
        """A method defined here."""

    @property
    def spec(self) -> str:
        """A property: not callable, not a function."""
        return "json"


imported_alias: Callable[..., Any] = builtins.print  # a module-level name bound to a function defined elsewhere


@pytest.mark.parametrize(
    ("qualname", "why"),
    [
        ("json.loads", "is the module 'json', not a class defined in"),  # a module this module imported
        ("system", "not defined there"),  # a function imported by name
        ("imported_alias", "not defined there"),
        ("placeholder.__globals__", "special attribute"),
        ("__builtins__", "special attribute"),
        ("Decoder.__init__", "special attribute"),
        ("Decoder.decode", "defines no 'Decoder.decode'"),  # inherited from json.decoder
        ("Decoder.__subclasses__", "special attribute"),
        ("placeholder.x", "not a class defined in"),  # a function's attributes
        ("Decoder.spec", "not a function or a class"),  # a property
        ("nowhere", "defines no 'nowhere'"),
        ("sys.modules", "is the module 'sys'"),
    ],
)
def test_an_allowed_module_cannot_be_escaped(qualname: str, why: str) -> None:
    registry = FunctionRegistry(allow_modules=[__name__])
    reference = f"{__name__}:{qualname}"
    expression = {"op": "map", "args": [{"stream": "s"}, {"fn": reference}]}
    with pytest.raises(ForbiddenReferenceError) as refused:
        decode_query(expression, registry, where="subscription 'q://x'")
    message = str(refused.value)
    assert message.startswith("subscription 'q://x' > map argument 1: ") and repr(reference) in message
    assert why in message


def test_what_an_allowed_module_defines_resolves() -> None:
    registry = FunctionRegistry(allow_modules=[__name__])
    for qualname, expected in (("placeholder", placeholder), ("Decoder", Decoder), ("Decoder.own", Decoder.own)):
        query = decode_query({"op": "map", "args": [{"stream": "s"}, {"fn": f"{__name__}:{qualname}"}]}, registry)
        assert query.args[1] is expected
    assert system is not None  # imported above only to be refused


def test_an_escape_through_a_store_names_the_artifact_and_runs_nothing(tmp_path: Path, store: StoreSql) -> None:
    path, marker = store.target, tmp_path / "pwned"
    build(path, Query.stream("s").map(placeholder), events=(f"touch {marker}",))
    forge(path, "q://victim", "@placeholder", f"{__name__}:system")
    with pytest.raises(RecoveryError) as failure:
        Engine(path, allow_modules=[__name__])
    assert "'q://victim'" in str(failure.value) and f"'{__name__}:system'" in str(failure.value)
    assert "defined as 'posix:system'" in str(failure.value) or "defined as 'nt:system'" in str(failure.value)
    assert not marker.exists()
