"""The examples in docstrings, the README and examples/ run and say what they claim; the documentation site leaves
no page and no public name out."""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import pkgutil
import re
import runpy
import textwrap
from pathlib import Path
from typing import Any

import griffe
import pytest
import yaml

import reaqtive
import reaqtive.fluent
import reaqtive.operators

ROOT = Path(__file__).resolve().parent.parent

DOCTESTED_MODULES = [
    "reaqtive.core.arguments",
    "reaqtive.fluent.query",
    "reaqtive.core.expression",
    "reaqtive.core.subscribers",
    "reaqtive.core.subjects",
    "reaqtive.publisher",
    "reaqtive.processor",
    # every operator module and fluent family that has examples (found, so new ones are covered without editing
    # this file); an operator's examples live in its builder's docstring
    *(
        info.name
        for package in (reaqtive.operators, reaqtive.fluent)
        for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}.")
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


def python_blocks(text: str) -> list[str]:
    """The ```python blocks of a Markdown text."""
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def section(path: Path, heading: str) -> str:
    """The text of the ``## heading`` section of a Markdown file."""
    text = path.read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def test_readme_quick_start_runs() -> None:
    # The Spark section's example runs in tests/spark/test_docs_examples.py, on the shared Spark session.
    blocks = python_blocks(section(ROOT / "README.md", "Quick start"))
    assert blocks, "the README has a quick start"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})


def test_readme_service_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    (block,) = python_blocks(section(ROOT / "README.md", "In a service"))
    exec(compile(block, "README.md", "exec"), {})
    assert capsys.readouterr().out.split("\n")[0] == "0 {'celsius': 35.5}"


def test_operators_doc_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    (block,) = python_blocks((ROOT / "docs" / "operators.md").read_text())
    exec(compile(block, "docs/operators.md", "exec"), {})
    assert capsys.readouterr().out.split() == ["0", "2", "6"]


def test_examples_run(capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(ROOT / "examples" / "quickstart.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "even squares: [4, 16, 36, 64, 100]" in out
    assert "alerts: ['hot: 31.0', 'hot: 35.2']" in out


# The documentation site (mkdocs.yml; `make docs` builds it strict, and `make test` runs that): these checks read
# its configuration only, so they run without building it.


def site_config() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text())  # type: ignore[no-any-return]


def nav_pages(nav: list[Any]) -> list[str]:
    """The Markdown files a mkdocs nav names, at any depth."""
    pages: list[str] = []
    for entry in nav:
        items = entry.values() if isinstance(entry, dict) else [entry]
        for item in items:
            pages.extend(nav_pages(item) if isinstance(item, list) else [item] if item.endswith(".md") else [])
    return pages


def test_every_docs_page_is_in_the_site_nav() -> None:
    listed = nav_pages(site_config()["nav"])
    on_disk = sorted(str(path.relative_to(ROOT / "docs")) for path in (ROOT / "docs").rglob("*.md"))
    assert sorted(listed) == on_disk, "add the page to mkdocs.yml's nav (or remove the nav entry)"
    assert len(listed) == len(set(listed))


def reference_directives() -> list[tuple[str, dict[str, Any]]]:
    """Each ``::: identifier`` of docs/reference/, with its options."""
    directives = []
    for page in sorted((ROOT / "docs" / "reference").glob("*.md")):
        for match in re.finditer(r"^::: (\S+)\n((?:    .*\n)*)", page.read_text(), flags=re.MULTILINE):
            options = yaml.safe_load(textwrap.dedent(match[2])) if match[2] else None
            directives.append((match[1], (options or {}).get("options", {})))
    return directives


def shown_by(options: dict[str, Any], defaults: dict[str, Any], name: str) -> bool:
    """Whether a directive with these options renders member ``name`` (mkdocstrings' ``members``/``filters``)."""
    members = options.get("members", defaults.get("members"))
    if isinstance(members, list) and name not in members:
        return False
    for rule in options.get("filters", defaults.get("filters", [])):
        exclude = rule.startswith("!")
        if bool(re.search(rule.removeprefix("!"), name)) == exclude:
            return False
    return True


def test_every_public_name_is_in_the_api_reference() -> None:
    (mkdocstrings,) = (plugin for plugin in site_config()["plugins"] if isinstance(plugin, dict))
    defaults = mkdocstrings["mkdocstrings"]["handlers"]["python"]["options"]
    directives = reference_directives()
    assert directives, "docs/reference/ renders the API"
    missing = [
        name
        for name in reaqtive.__all__
        if not any(
            target == f"reaqtive.{name}" or (target == "reaqtive" and shown_by(options, defaults, name))
            for target, options in directives
        )
    ]
    assert not missing, f"not in the API reference (docs/reference/*.md): {missing}"


def test_the_reference_reads_the_public_names_from_the_source() -> None:
    # mkdocstrings reads the sources (Griffe), never imports them: an __all__ or an import it cannot follow
    # statically (built in a loop, say) would leave names out of the reference without a warning
    package = griffe.load("reaqtive", search_paths=[str(ROOT)], resolve_aliases=False)
    assert [str(name) for name in package.exports or []] == reaqtive.__all__
    assert all(name in package.members for name in reaqtive.__all__)
