"""What the engine's own stages ask of the environment they run in: the contract between the engine and the
stream readers and egress stamps it binds, stated once instead of looked up by attribute name.

A :class:`~reaqtive.engine.readers.StreamReader` or :class:`~reaqtive.engine.egress.EgressStamp` bound outside an
engine (a test host, the checkpoint harness) finds another environment, or none, and falls back to keeping what it
needs itself: its own watermark, its own output counter, and errors raised rather than reported.

Positions are **log positions**: every event of the engine's durable log has one (``pos``, across all streams,
never reused), and a reader's watermark is the position of the last event it passed on (see
:mod:`reaqtive.engine.readers`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Protocol

from reaqtive.core.streams import Subscriber

if TYPE_CHECKING:
    from reaqtive.core.context import OperatorContext
    from reaqtive.core.subscriptions import SubscriptionHandle
    from reaqtive.engine.counters import OutputCounter

__all__ = ["EngineEnvironment", "LogReader"]


class LogReader(Subscriber[Any], Protocol):
    """What the environment knows of a stream reader it subscribes (:class:`~reaqtive.engine.readers.StreamReader`
    is the one): its stream, its unit, and where it stands in the log."""

    @property
    def uri(self) -> str: ...

    @property
    def context(self) -> OperatorContext: ...

    @property
    def watermark(self) -> int: ...


class EngineEnvironment(ABC):
    """The engine's side of its stages (the engine's execution environment implements it)."""

    __slots__ = ()

    @abstractmethod
    def delivered_position(self, uri: str) -> int:
        """The log position of the last event of stream ``uri`` the engine delivered (``-1``: none); it never
        moves back. A reader at or past it is caught up."""

    @abstractmethod
    def start_position(self, instance_id: str) -> int:
        """Where a reader that unit ``instance_id`` creates now starts: right after the log position of the event
        being delivered to its query (or the last one delivered), so a first run, any replay and any catch-up
        after a pause hand it the same events."""

    @abstractmethod
    def last_position(self) -> int:
        """The last log position ever given to an event (what a saved watermark can at most be)."""

    def is_given_position(self, pos: int) -> bool:
        """Whether log position ``pos`` was given to an event already."""
        return pos <= self.last_position()

    @abstractmethod
    def position_after_seq(self, uri: str, seq: int) -> int:
        """The log position just before the event after sequence number ``seq`` of stream ``uri`` (a reader there
        has read up to ``seq``): how state saved with sequence numbers (version 1 of the reader) is read back."""

    @abstractmethod
    def subscribe_reader(self, reader: LogReader) -> SubscriptionHandle:
        """Subscribe ``reader`` to its stream (raising :class:`~reaqtive.engine.readers.StreamNotFoundError` if
        there is none); the reader of a query behind the engine is handed its events by the query's catch-up."""

    @abstractmethod
    def reader_failed(self, instance_id: str, error: Exception) -> None:
        """An error escaped the operators of unit ``instance_id``: stop its query once the event was delivered."""

    @abstractmethod
    def output_counter(self, uri: str) -> OutputCounter:
        """The output counter of subscription ``uri``, kept (and committed) by the engine."""
