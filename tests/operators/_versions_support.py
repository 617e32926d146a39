"""State saved by an older version of a stage, for the tests of its migration."""

from __future__ import annotations

from typing import Any

import pytest

from reaqtive.core.operator import StateWriter
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.state import CheckpointMode, save_subscription


class _Collect:
    """A writer that keeps the values (the stages these tests cover write values only, no child segments)."""

    def __init__(self) -> None:
        self.values: list[Any] = []

    def write(self, value: object) -> None:
        self.values.append(value)

    def create_child(self) -> StateWriter:
        raise NotImplementedError("the stage writes a child segment: write its old layout by hand")


def save_as_version_1(cls: type[Any], dropped: int, handle: SubscriptionHandle) -> bytes:
    """The state of the tree under ``handle``, with the nodes of ``cls`` written as version 1 wrote them: the
    current layout without its last ``dropped`` fields (each version added fields at the end)."""
    return save_as_version(cls, (1,), dropped, handle)


def save_as_version(cls: type[Any], version: tuple[int, ...], dropped: int, handle: SubscriptionHandle) -> bytes:
    """As :func:`save_as_version_1`, for any older ``version``."""
    current = cls.save_state_core

    def save_version_1(self: Any, writer: StateWriter) -> None:
        collect = _Collect()
        current(self, collect)
        for value in collect.values[:-dropped]:
            writer.write(value)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cls, "version", version)
        patch.setattr(cls, "save_state_core", save_version_1)
        blob = save_subscription(handle, CheckpointMode.FULL)
    assert blob is not None
    return blob
