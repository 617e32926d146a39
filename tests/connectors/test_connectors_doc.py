"""The example of docs/connectors.md runs and prints what its last comment says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "connectors.md"


def test_the_example_runs_and_prints_the_line_it_shows(capsys: pytest.CaptureFixture[str]) -> None:
    [block] = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    exec(compile(block, str(DOC), "exec"), {"__name__": "connectors_doc"})
    shown = block.rstrip().splitlines()[-1].removeprefix("# ")
    assert capsys.readouterr().out == shown + "\n"
