"""Shared test helpers for the core tests."""

from __future__ import annotations

import freezegun
import pytest

from tests.support import Recorder

# freezegun patches every loaded module that holds a datetime function, reading each module's attributes:
# reaqtive.spark's lazy attributes would import pandas and pyspark then (minutes under a frozen clock), and
# those large packages never hold the engine's clock anyway.
freezegun.configure(extend_ignore_list=["reaqtive.spark", "pyspark", "pandas", "pyarrow", "py4j"])


@pytest.fixture
def recorder() -> Recorder:
    """A subscriber that records signals and requests nothing until told to."""
    return Recorder()
