"""Every registered operator has a Reactive Streams conformance class (the pattern of ``conformance.py``)."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import reaqtive.engine  # noqa: F401  (registers the engine's stages, so the registry is complete)
from reaqtive import registered_operators

EXEMPT = {
    "subscribable": "the adapter that makes any subscribable a query source; every processor verification runs "
    "through it (as_processor feeds the query's input with it)",
    "stream": "the engine's stream reader only runs inside an engine; tests/engine verify it end to end",
    "egress": "the engine's output stamp only runs inside an engine; tests/engine verify it end to end",
    "named": "adds no stage: it binds the query it names, whose stages are verified themselves",
}
"""Registered operators verified some other way, with the reason."""


def covered_operators() -> set[str]:
    covered: set[str] = set()
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if info.name.startswith("test_conformance_"):
            module = importlib.import_module(f"tests.tck.{info.name}")
            for value in vars(module).values():
                if isinstance(value, type) and value.__name__.startswith("Test"):
                    covered.update(getattr(value, "operators", ()))
    return covered


def test_every_registered_operator_has_a_conformance_class() -> None:
    missing = sorted({op for op in registered_operators() if ":" not in op} - covered_operators() - set(EXEMPT))
    assert not missing, (
        f"operators without a Reactive Streams conformance class: {missing}. Add a Test* class naming them in "
        "`operators` to tests/tck/test_conformance_operators.py (bases in tests/tck/conformance.py, see "
        "docs/tck.md), or list them in EXEMPT here with the reason"
    )


def test_exemptions_are_still_registered() -> None:
    assert set(EXEMPT) <= {op for op in registered_operators() if ":" not in op}
