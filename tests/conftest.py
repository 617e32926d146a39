"""Shared test helpers for the core tests."""

from __future__ import annotations

from collections.abc import Iterator

import freezegun
import pytest

from reaqtive import set_keyed_execution
from tests.support import Recorder

# freezegun patches every loaded module that holds a datetime function, reading each module's attributes:
# reaqtive.spark's lazy attributes would import pandas and pyspark then (minutes under a frozen clock), and
# those large packages never hold the engine's clock anyway.
freezegun.configure(extend_ignore_list=["reaqtive.spark", "pyspark", "pandas", "pyarrow", "py4j"])


@pytest.fixture
def recorder() -> Recorder:
    """A subscriber that records signals and requests nothing until told to."""
    return Recorder()


@pytest.fixture
def general_path() -> Iterator[None]:
    """Bind keyed chains on the general path (a group per key) in this test: it tests that path's own form."""
    previous = set_keyed_execution(False)
    try:
        yield
    finally:
        set_keyed_execution(previous)
