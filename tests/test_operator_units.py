"""An operator is one unit: the registry, the fluent facade, the argument records and the import graph agree.

* every registered operator users write has a builder, an argument record and a fluent method whose signature is
  the builder's; every fluent method writes a registered operator; the method shows the builder's docstring;
* the argument record reads every valid node of ``tests/operators/test_arguments.py`` back, field for argument;
* no module of reaqtive imports another in a cycle at run time (imports under ``TYPE_CHECKING`` do not run);
* the core (``reaqtive/core/``) imports no other part of reaqtive, and no loop of imports passes through it, even
  counting the imports made for the type checker only;
* no operator module imports a private name from another operator module.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

import reaqtive
import reaqtive.fluent
from reaqtive import Query
from reaqtive.core.binding import OperatorSpec, operator_specs
from reaqtive.core.expression import Expression
from tests.operators.test_arguments import VALID

PACKAGE = Path(reaqtive.__file__).resolve().parent

# Methods of Query that belong to the node itself, not to an operator.
NODE_API = {"args", "depth", "explain", "frames", "op", "pipe", "run", "subscribe", "subscribe_core"}


def user_operators() -> list[OperatorSpec]:
    return [spec for spec in operator_specs() if not spec.internal and not spec.namespace]


def fluent_methods() -> dict[str, Any]:
    """Every public method defined by a fluent mixin: name -> function."""
    methods: dict[str, Any] = {}
    for info in pkgutil.iter_modules(reaqtive.fluent.__path__, "reaqtive.fluent."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__:
                continue
            for name, value in vars(cls).items():
                if not name.startswith("_"):
                    methods[name] = value.__func__ if isinstance(value, staticmethod) else value
    return methods


@pytest.mark.parametrize("spec", user_operators(), ids=lambda spec: spec.op)
def test_every_operator_has_a_builder_a_record_and_a_method(spec: OperatorSpec) -> None:
    assert spec.builder is not None, f"{spec.op}: registered without its builder"
    assert spec.args is not None and dataclasses.is_dataclass(spec.args), f"{spec.op}: no argument record"
    assert spec.builder.__module__ == spec.binder.__module__ or spec.op in {"map", "filter", "do", "scan"} or (
        spec.builder.__module__.startswith("reaqtive.operators.")
    ), f"{spec.op}: its builder lives in {spec.builder.__module__}, not with its stage"
    method = getattr(Query, spec.builder.__name__, None)
    assert method is not None, f"{spec.op}: Query has no method {spec.builder.__name__}"
    method_params = list(inspect.signature(method).parameters.values())
    if method_params and method_params[0].name == "self":
        method_params = method_params[1:]
    builder_params = list(inspect.signature(spec.builder).parameters.values())
    assert [(p.name, p.kind, p.default) for p in method_params] == [
        (p.name, p.kind, p.default) for p in builder_params
    ], f"Query.{spec.builder.__name__} and its builder take different parameters"
    assert method.__doc__ == spec.builder.__doc__ and spec.builder.__doc__, f"{spec.op}: the method lacks the doc"


def test_every_fluent_method_writes_a_registered_operator() -> None:
    builders = {spec.builder.__name__ for spec in operator_specs() if spec.builder is not None}
    # Made by reaqtive for operators it registers as internal: a subject as a source, an engine stream.
    node_sources = {"from_subscribable", "stream"}
    orphans = sorted(set(fluent_methods()) - builders - node_sources - NODE_API)
    assert not orphans, f"fluent methods with no registered operator: {orphans}"


def test_fluent_methods_are_one_line_delegates() -> None:
    for name, function in fluent_methods().items():
        source = inspect.getsource(function)
        body = ast.parse(textwrap.dedent(source)).body[0]
        assert isinstance(body, ast.FunctionDef)
        statements = [node for node in body.body if not isinstance(node, ast.Expr)]  # (a docstring, if any)
        assert len(statements) == 1 and isinstance(statements[0], ast.Return), f"Query.{name} is not one line"


@pytest.mark.parametrize("example", sorted(VALID), ids=str)
def test_argument_records_read_every_valid_node(example: str) -> None:
    query = VALID[example]
    spec = next(spec for spec in operator_specs() if spec.op == query.op)
    if spec.args is None:
        assert spec.internal, f"{spec.op}: no argument record"
        return
    record = spec.args.read(query)  # type: ignore[attr-defined]
    fields: list[object] = []
    for field in dataclasses.fields(record):
        value = getattr(record, field.name)
        # a variadic record gathers the other sources in one tuple field: ``(source, *others)``
        fields.extend(value if field.name == "others" else [value])
    assert len(fields) == len(query.args)
    for field, arg in zip(fields, query.args, strict=True):
        assert field is arg or field == arg or isinstance(arg, Expression)


# -- the import graph ------------------------------------------------------------------------------------------------

def module_names() -> dict[str, Path]:
    names: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def runtime_imports(path: Path, known: dict[str, Path]) -> list[tuple[str, str]]:
    """``(module, name)`` for every import that runs (module level or in a function), not under TYPE_CHECKING."""
    found: list[tuple[str, str]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for statement in child.orelse:
                    visit_one(statement)
                continue
            visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.extend((alias.name, "") for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.append((full, "") if full in known else (node.module, alias.name))
        visit(node)

    visit(ast.parse(path.read_text()))
    return [(module, name) for module, name in found if module in known]


def test_the_runtime_import_graph_has_no_cycle() -> None:
    known = module_names()
    graph = {name: {module for module, _ in runtime_imports(path, known)} - {name} for name, path in known.items()}
    cycles = strongly_connected(graph)
    assert not cycles, f"modules importing each other at run time: {cycles}"


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The components of more than one module (Tarjan's algorithm, with an explicit stack)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def all_imports(path: Path, known: dict[str, Path]) -> set[str]:
    """Every module of reaqtive that ``path`` imports: at run time, in a function, or for the type checker."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in known else node.module)
    return {module for module in found if module in known}


# What the core may import above itself: the real-time scheduler that ``Expression.run`` makes, on first use, for
# queries run standalone (``standalone_scheduler``). The scheduler package imports only the scheduler interfaces.
CORE_REACHES_UP = {"reaqtive.core.expression": {"reaqtive.scheduler"}}


def test_the_core_imports_no_other_part_of_reaqtive() -> None:
    known = module_names()
    offences = []
    for name, path in known.items():
        if not name.startswith("reaqtive.core."):
            continue
        for module in sorted(all_imports(path, known) - CORE_REACHES_UP.get(name, set())):
            if not module.startswith("reaqtive.core."):
                offences.append(f"{name} imports {module}")
    assert not offences, offences


def test_no_loop_of_imports_passes_through_the_core_even_for_the_type_checker() -> None:
    known = module_names()
    graph = {name: all_imports(path, known) - {name} for name, path in known.items()}
    cycles = [cycle for cycle in strongly_connected(graph) if any(m.startswith("reaqtive.core.") for m in cycle)]
    assert not cycles, f"modules importing each other (at run time or for the type checker): {cycles}"


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_no_operator_module_imports_a_private_name_of_another() -> None:
    known = module_names()
    offences = []
    for name, path in known.items():
        if not name.startswith("reaqtive.operators."):
            continue
        for module, imported in runtime_imports(path, known):
            if module.startswith("reaqtive.operators.") and module != name and imported.startswith("_"):
                offences.append(f"{name} imports {module}.{imported}")
    assert not offences, offences
