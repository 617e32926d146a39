"""The package as pip and PyPI see it: an MIT licence file, PEP 639 licence metadata (an SPDX expression and the
file, no licence classifier beside them), the project's links, and ``python -m reaqtive`` running the command.

The wheel itself is built by hand (``python -m build --wheel``, README "Install"): a build fetches setuptools into
an isolated environment, which a test run must not depend on. What it must produce follows from the pyproject
checked here: setuptools >= 77 writes ``License-Expression: MIT`` and ``License-File: LICENSE`` and warns about
nothing."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import reaqtive

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def pyproject() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


def project(pyproject: dict[str, object]) -> dict[str, object]:
    table = pyproject["project"]
    assert isinstance(table, dict)
    return table


def test_the_license_file_is_mit_and_names_the_authors() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n")
    assert "Copyright (c) 2026 the reaqtive authors" in text
    assert "THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND" in text


def test_the_license_is_a_pep_639_expression_with_its_file(pyproject: dict[str, object]) -> None:
    meta = project(pyproject)
    assert meta["license"] == "MIT"  # an SPDX expression, not the deprecated {text = ...} table
    assert meta["license-files"] == ["LICENSE"]
    classifiers = meta["classifiers"]
    assert isinstance(classifiers, list)
    # PEP 639: with a licence expression, a licence classifier is an error for setuptools and PyPI
    assert not [c for c in classifiers if c.startswith("License ::")]
    build = pyproject["build-system"]
    assert isinstance(build, dict)
    (setuptools,) = [req for req in build["requires"] if req.startswith("setuptools")]
    minimum = setuptools.removeprefix("setuptools>=")
    assert int(minimum.split(".")[0]) >= 77, setuptools  # the first setuptools that reads licence expressions, files


def test_the_metadata_describes_the_project(pyproject: dict[str, object]) -> None:
    meta = project(pyproject)
    assert meta["version"] == reaqtive.__version__
    assert meta["requires-python"] == ">=3.11"
    classifiers = meta["classifiers"]
    assert isinstance(classifiers, list)
    assert "Typing :: Typed" in classifiers  # reaqtive/py.typed ships in the wheel
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert meta["keywords"]
    urls = meta["urls"]
    assert isinstance(urls, dict)
    assert set(urls) == {"Homepage", "Documentation", "Source", "Issues"}
    assert all(url.startswith("https://") for url in urls.values())
    extras = meta["optional-dependencies"]
    assert isinstance(extras, dict)
    assert set(extras) >= {"dev", "spark", "postgres", "prometheus", "service"}
    assert meta["scripts"] == {"reaqtive": "reaqtive.cli:main"}


def test_the_readme_says_how_to_install_with_each_extra() -> None:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("\n## Install\n")
    assert readme.index("\n## The two commands\n") < start  # the two commands come first
    section = readme[start : readme.index("\n## ", start + 1)]
    for text in ("pip install .", "pip install -e '.[dev]'", "python -m build --wheel", "pip install dist/reaqtive-",
                 "spark", "postgres", "prometheus", "service"):
        assert text in section, text


def run_module(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reaqtive", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)


def test_python_m_reaqtive_runs_the_command() -> None:
    done = run_module("--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: reaqtive ")  # the command's name, not __main__.py
    for command in ("demo", "inspect", "checkpoint"):
        assert command in done.stdout
    version = run_module("--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip().startswith("reaqtive ")


def test_python_m_reaqtive_demo_runs_and_errors_exit_with_2() -> None:
    done = run_module("demo", "--backpressure")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "BufferOverflowError" in done.stdout
    wrong = run_module("no-such-command")
    assert wrong.returncode == 2
    assert "invalid choice" in wrong.stderr
