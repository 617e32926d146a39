"""The examples in docs/scheduler.md and in the docstrings of reaqtive.scheduler and reaqtive.testing run."""

from __future__ import annotations

import doctest
import importlib
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "scheduler.md"

MODULES = [
    "reaqtive.scheduler.physical",
    "reaqtive.scheduler.logical",
    "reaqtive.scheduler.tasks",
    "reaqtive.scheduler.timers",
    "reaqtive.testing",
    "reaqtive.testing.notifications",
    "reaqtive.testing.scheduler",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} lost its examples"
    assert result.failed == 0


@pytest.mark.parametrize("index", range(len(re.findall(r"```python\n", DOC.read_text()))))
def test_scheduler_doc_examples_run(index: int) -> None:
    block = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)[index]
    exec(compile(block, f"{DOC.name} example {index + 1}", "exec"), {})
