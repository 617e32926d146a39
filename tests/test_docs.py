"""The examples in docstrings, the README and examples/ run and say what they claim."""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import pkgutil
import re
import runpy
from pathlib import Path

import pytest

import reaqtive
import reaqtive.fluent

ROOT = Path(__file__).resolve().parent.parent

DOCTESTED_MODULES = [
    "reaqtive.query",
    "reaqtive.subscribers",
    "reaqtive.subjects",
    "reaqtive.publisher",
    "reaqtive.processor",
    # every fluent family that has examples (found, so new families are covered without editing this file)
    *(
        info.name
        for info in pkgutil.iter_modules(reaqtive.fluent.__path__, "reaqtive.fluent.")
        if ">>>" in (importlib.util.find_spec(info.name).loader.get_source(info.name) or "")  # type: ignore[union-attr]
    ),
]


@pytest.mark.parametrize("name", DOCTESTED_MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    public = {key: getattr(reaqtive, key) for key in reaqtive.__all__}  # examples use the public API
    result = doctest.testmod(module, extraglobs=public, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} lost its examples"
    assert result.failed == 0


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.DOTALL)


def test_readme_quick_start_runs() -> None:
    blocks = python_blocks(ROOT / "README.md")
    assert blocks, "the README has a quick start"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})


def test_operators_doc_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    (block,) = python_blocks(ROOT / "docs" / "operators.md")
    exec(compile(block, "docs/operators.md", "exec"), {})
    assert capsys.readouterr().out.split() == ["0", "2", "6"]


def test_examples_run(capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(ROOT / "examples" / "quickstart.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "even squares: [4, 16, 36, 64, 100]" in out
    assert "alerts: ['hot: 31.0', 'hot: 35.2']" in out
