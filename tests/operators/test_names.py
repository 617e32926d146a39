"""Every operator stage has a persisted name of its own and a version (they never change once released)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import reaqtive.operators
from reaqtive.core.operator import Operator, StatefulOperator, Versioned


def operator_classes() -> list[type[Operator]]:
    found: dict[str, type[Operator]] = {}
    for info in pkgutil.iter_modules(reaqtive.operators.__path__, "reaqtive.operators."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, Operator) and cls.__module__ == module.__name__ and not inspect.isabstract(cls):
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return list(found.values())


def test_every_operator_stage_is_stateful_and_versioned() -> None:
    classes = operator_classes()
    assert len(classes) >= 4
    for cls in classes:
        assert issubclass(cls, StatefulOperator), f"{cls.__qualname__} must be stateful (checkpointable)"
        assert isinstance(cls.name, str), f"{cls.__qualname__} has no persisted name"
        assert re.fullmatch(r"reaqtive:[a-z_]+([+/][A-Za-z0-9_+/]+)?", cls.name), cls.name
        version = cls.version
        assert isinstance(version, tuple) and version >= (1,), f"{cls.name}: version {version!r}"


def test_persisted_names_are_unique() -> None:
    names: dict[str, str] = {}
    for cls in operator_classes():
        assert issubclass(cls, Versioned)
        name = cls.name
        assert isinstance(name, str)
        assert name not in names, f"{name!r} is used by {names.get(name)} and {cls.__qualname__}"
        names[name] = cls.__qualname__
