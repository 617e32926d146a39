"""The examples of docs/engine.md run and say what they claim."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_engine_doc_examples_run() -> None:
    text = (ROOT / "docs" / "engine.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert blocks, "docs/engine.md has an example"
    for block in blocks:
        exec(compile(block, "docs/engine.md", "exec"), {"__name__": "docs_engine_example"})
