"""Shared test helpers for the core tests."""

from __future__ import annotations

import pytest

from tests.support import Recorder


@pytest.fixture
def recorder() -> Recorder:
    """A subscriber that records signals and requests nothing until told to."""
    return Recorder()
