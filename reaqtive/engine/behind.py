"""A query behind the engine: paused, or catching up through the log on a timeline of its own.

The engine delivers the log in position order to every query in step with it. A query falls behind when it is
paused, when it stood behind at the checkpoint a recovery starts from (paused, or catching up), and when one of its
readers lagged at that checkpoint (its query withheld demand). A query behind the engine has its own scheduler
timeline (its clock stopped where it fell behind) and its readers are detached from their streams; its
**catch-up** hands it the log after its position, in order, moving its own clock with the events and running its
timers in between, exactly as the engine's loop would have, until it reaches the engine's position; then it
rejoins (its timeline joins the engine's, its readers their streams). See ``docs/engine.md``, "Positions follow
from the log".
"""

from __future__ import annotations

from typing import Any

from reaqtive.engine.readers import LogCursor, StreamReader
from reaqtive.scheduler import VirtualTimeScheduler

__all__ = ["Lag"]


class Lag:
    """Where a query behind the engine stands: ``pos``, the log position its clock has seen the log up to (what
    "caught up" means for its readers' saved state), ``cursor``, where its catch-up goes on from (before ``pos``
    when a reader of it lagged: it is handed the events after its own watermark again), its scheduler on its own
    timeline, and its readers, detached from their streams, by stream, in the order the streams would hand them
    an event."""

    __slots__ = ("cursor", "expected", "pos", "readers", "scheduler", "uri")

    def __init__(self, uri: str, scheduler: VirtualTimeScheduler, pos: int) -> None:
        self.uri = uri
        self.scheduler = scheduler
        self.pos = pos
        self.cursor = LogCursor(pos)
        self.readers: dict[str, list[tuple[Any, StreamReader[Any]]]] = {}
        self.expected: dict[str, int] = {}  # per stream, the number the catch-up's next event of it must have

    def hold(self, subscription: Any, reader: StreamReader[Any]) -> None:
        """Take ``reader`` off its stream (its subscription keeps its demand): the catch-up hands it its events."""
        subscription.detach()
        reader.fall_behind()
        self.readers.setdefault(reader.uri, []).append((subscription, reader))

    def readers_of(self, stream: str) -> list[tuple[Any, StreamReader[Any]]]:
        """The live readers of ``stream`` (those disposed since are forgotten)."""
        held = self.readers.get(stream)
        if not held:
            return []
        if any(reader.is_disposed for _, reader in held):
            held[:] = [(subscription, reader) for subscription, reader in held if not reader.is_disposed]
        return held

    def rewind_for_lagging(self, delivered: dict[str, int]) -> None:
        """Start the catch-up early enough for a reader that lagged when the query fell behind (its buffered events
        were dropped with its detachment): from the first event it has not read."""
        for stream, held in self.readers.items():
            for _, reader in held:
                if not reader.is_disposed and reader.watermark < delivered.get(stream, -1):
                    self.cursor.pos = min(self.cursor.pos, reader.watermark)

    def all_readers(self) -> list[tuple[Any, StreamReader[Any]]]:
        """Every live reader held, stream by stream."""
        return [entry for stream in list(self.readers) for entry in self.readers_of(stream)]

    def __repr__(self) -> str:
        return f"<Lag {self.uri!r} pos={self.pos} cursor={self.cursor.pos} clock={self.scheduler.clock}>"
