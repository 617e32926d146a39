"""What the engine's own stages ask of the environment they run in: the contract between the engine and the
stream readers and egress stamps it binds, stated once instead of looked up by attribute name.

A :class:`~reaqtive.engine.readers.StreamReader` or :class:`~reaqtive.engine.egress.EgressStamp` bound outside an
engine (a test host, the checkpoint harness) finds another environment, or none, and falls back to keeping what it
needs itself: its own watermark, its own output counter, and errors raised rather than reported.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from reaqtive.engine.egress import OutputCounter

__all__ = ["EngineEnvironment"]


class EngineEnvironment(ABC):
    """The engine's side of its stages (the engine's execution environment implements it)."""

    __slots__ = ()

    @abstractmethod
    def delivered_watermark(self, uri: str) -> int:
        """The last event of stream ``uri`` the engine delivered (``-1``: none); it never moves back."""

    def start_watermark(self, uri: str) -> int:
        """Where a reader of stream ``uri`` created now starts: after the event the engine is delivering, which is
        the delivered watermark, or, while the engine replays the log for a resumed query, the replayed one."""
        return self.delivered_watermark(uri)

    @abstractmethod
    def appended_watermark(self, uri: str) -> int:
        """The last event ever appended to stream ``uri`` (what a saved watermark can at most be)."""

    @abstractmethod
    def reader_failed(self, instance_id: str, error: Exception) -> None:
        """An error escaped the operators of unit ``instance_id``: stop its query once the event was delivered."""

    @abstractmethod
    def output_counter(self, uri: str) -> OutputCounter:
        """The output counter of subscription ``uri``, kept (and committed) by the engine."""
