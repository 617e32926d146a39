"""Where the engine's delivery stands in the durable log, a part that owns it: the log position of the event it
delivers now (the cursor a reader created meanwhile starts after), per stream the last event delivered (its
sequence number and its log position), the next number the log must hold, and a lower bound of how many events
were appended (the head).

Positions only move forward (DESIGN decision 12; ``docs/engine.md``, "Positions follow from the log"): a stream's
delivered marks move when an event is delivered for the first time, the cursor never moves back, and a recovery
restores all of it from the checkpoint's delivery record. Delivery, catch-up, checkpoints, recovery and the
engine's environment (what readers ask) read it here instead of sharing five fields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from reaqtive.engine.database import IngressEvent
from reaqtive.engine.readers import LogCursor

__all__ = ["Positions", "misplaced"]


class Positions:
    """The engine's positions in its log (see the module). ``stream_heads`` reads the store's heads (how many
    events each stream was ever appended), when the lower bound kept here is not enough."""

    __slots__ = ("_stream_heads", "cursor", "delivered", "delivered_at", "expected", "heads")

    def __init__(self, stream_heads: Callable[[], Mapping[str, int]]) -> None:
        self._stream_heads = stream_heads
        self.cursor = LogCursor(0)
        """The log position of the event delivered now (or last); readers created meanwhile start after it."""
        self.delivered: dict[str, int] = {}
        """Per stream, the sequence number of the last event delivered."""
        self.delivered_at: dict[str, int] = {}
        """Per stream, the log position of that event (what a caught-up reader stands at)."""
        self.expected: dict[str, int] = {}
        """Per stream, the next sequence number the log must hold (a hole before it is a lost row)."""
        self.heads: dict[str, int] = {}
        """Per stream, a lower bound of the events appended (appends raise it without the engine's lock)."""

    def note_delivered(self, stream: str, seq: int, pos: int) -> None:
        """Event ``seq`` of ``stream``, at log position ``pos``, is delivered now: the cursor is there (a reader
        created while it is delivered starts after it), and the stream's delivered marks move (never back)."""
        self.cursor.pos = pos
        if seq > self.delivered.get(stream, -1):
            self.delivered[stream] = seq
            self.delivered_at[stream] = pos

    def note_appended(self, stream: str, end: int) -> None:
        """Events of ``stream`` up to ``end - 1`` were appended (a lower bound: a concurrent append may say less)."""
        self.heads[stream] = max(self.heads.get(stream, 0), end)

    def appended(self, stream: str, seq: int) -> bool:
        """Whether event ``seq`` of ``stream`` was appended (asking the store when the bound kept here says no)."""
        if seq < self.heads.get(stream, 0):
            return True
        self.refresh_heads()
        return seq < self.heads.get(stream, 0)

    def refresh_heads(self) -> None:
        """Read every stream's head from the store."""
        self.heads.update(self._stream_heads())

    def was_delivered(self, stream: str, seq: int) -> bool:
        """Whether event ``seq`` of ``stream`` was delivered already (positions never move back)."""
        return seq <= self.delivered.get(stream, -1)

    def restore(self, pos: int, delivered: Mapping[str, int], delivered_at: Mapping[str, int] | None) -> None:
        """Where the checkpoint's delivery record says delivery stood (recovery)."""
        self.cursor.pos = pos
        self.delivered.update(delivered)
        # The log must hold every event after the last one delivered: a hole is a lost row.
        self.expected = {stream: seq + 1 for stream, seq in delivered.items()}
        if delivered_at is not None:
            self.delivered_at.update(delivered_at)


def misplaced(event: IngressEvent, streams: Mapping[str, Any], positions: Positions) -> str | None:
    """Why a sound-looking log row cannot be an event of its stream (its stream or number was altered)."""
    if event.stream not in streams:
        return f"there is no stream {event.stream!r} (deleted, or the row was altered)"
    if not positions.appended(event.stream, event.seq):
        return f"#{event.seq} is beyond what was appended to {event.stream!r} (the row was altered)"
    return None
