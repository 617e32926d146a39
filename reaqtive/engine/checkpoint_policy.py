"""When the engine takes a checkpoint on its own: a part that owns the periodic policy and what it counts.

``checkpoint_every_events=N``: after N delivered events; ``checkpoint_every_seconds=T``: once T seconds passed
since the last checkpoint and an event was delivered since (also when the processing loop finds nothing more to
deliver, so that a quiet engine does not keep its last events uncovered). Delivery reports the events it
delivered (:meth:`CheckpointPolicy.delivered`) and asks how far it may go before one is due
(:meth:`CheckpointPolicy.events_left`); a checkpoint that committed resets the count
(:meth:`CheckpointPolicy.committed`); an idle processing loop asks how long it may sleep
(:meth:`CheckpointPolicy.seconds_left`).
"""

from __future__ import annotations

import time

__all__ = ["CheckpointPolicy"]


class CheckpointPolicy:
    """The engine's periodic checkpoint policy (see the module); either bound may be ``None`` (none)."""

    __slots__ = ("_last", "_since", "every_events", "every_seconds")

    def __init__(self, every_events: int | None, every_seconds: float | None) -> None:
        self.every_events = every_events
        self.every_seconds = every_seconds
        self._since = 0  # events delivered since the last checkpoint
        self._last = time.monotonic()  # when the last checkpoint committed (or the engine opened)

    def delivered(self, events: int) -> None:
        """``events`` more were delivered."""
        self._since += events

    @property
    def since(self) -> int:
        """Events delivered since the last checkpoint."""
        return self._since

    def events_left(self) -> int | None:
        """How many events may be delivered before a checkpoint is due by count (at least 1; ``None``: no bound)."""
        if self.every_events is None:
            return None
        return max(self.every_events - self._since, 1)

    def due(self) -> bool:
        """Whether a checkpoint is due now (never without an event delivered since the last one)."""
        if not self._since:
            return False
        if self.every_events is not None and self._since >= self.every_events:
            return True
        return self.every_seconds is not None and time.monotonic() - self._last >= self.every_seconds

    def seconds_left(self) -> float | None:
        """Seconds until a checkpoint is due by time (``None``: no time bound)."""
        if self.every_seconds is None:
            return None
        return self.every_seconds - (time.monotonic() - self._last)

    def committed(self) -> None:
        """A checkpoint committed: count afresh."""
        self._since = 0
        self._last = time.monotonic()
