"""Event times out of bounds: what the engine does with an event dated too far ahead, or too late.

The engine's clock follows event times, and time-based operators do work for every period the clock crosses: one
event dated two centuries ahead would make a one-minute ``buffer`` emit a hundred million empty buffers, and
since the event stays in the durable log, every restart would do it again. So each event's time is checked
against two bounds, and an event outside them is **quarantined**: moved to the dead-letter table with the reason,
never delivered to any query, visible in ``engine.dead_letters()`` and ``reaqtive inspect``.

* **Too far ahead**: later than the reference time plus ``max_event_time_ahead`` (one day by default; ``None``
  turns the check off). The reference is the later of the wall clock and the engine's clock, so a backfill of
  old events and a simulation whose clock runs ahead both pass. It is checked when the event is appended (the
  event then never enters the log) and again when it would be delivered (for events already in a log).
* **Too late**: with ``allowed_lateness`` set and ``clock="event"``, earlier than the engine's clock minus the
  lateness when it would be delivered (off by default: a late event is delivered at the current clock). The
  decision depends only on the events before it, so a replay after a crash decides the same.

A damaged log row (it does not match its checksum, or cannot be decoded) is quarantined the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from reaqtive.core.errors import InvalidSettingError

__all__ = ["DEFAULT_MAX_EVENT_TIME_AHEAD", "EventTimeBounds"]

DEFAULT_MAX_EVENT_TIME_AHEAD: Final = timedelta(days=1)


@dataclass(frozen=True)
class EventTimeBounds:
    """The two bounds (see the module). ``None`` turns a bound off."""

    max_ahead: timedelta | None = DEFAULT_MAX_EVENT_TIME_AHEAD
    allowed_lateness: timedelta | None = None

    def __post_init__(self) -> None:
        for name, value in (("max_event_time_ahead", self.max_ahead), ("allowed_lateness", self.allowed_lateness)):
            if value is not None and (type(value) is not timedelta or value < timedelta(0)):
                raise InvalidSettingError(f"{name} must be a timedelta >= 0 or None, got {value!r}")

    def ahead(self, time: datetime, reference: datetime) -> str | None:
        """Why ``time`` is too far ahead of ``reference``, or ``None``."""
        limit = self.max_ahead
        if limit is None:
            return None
        try:
            bound = reference + limit
        except OverflowError:
            return None  # the bound lies past datetime.max: nothing is beyond it
        if time > bound:
            return (f"event time {time.isoformat()} is more than max_event_time_ahead ({limit}) after "
                    f"{reference.isoformat()}")
        return None

    def late(self, time: datetime, clock: datetime) -> str | None:
        """Why ``time`` is later than allowed behind the engine's ``clock``, or ``None``."""
        lateness = self.allowed_lateness
        if lateness is None:
            return None
        try:
            bound = clock - lateness
        except OverflowError:
            return None
        if time < bound:
            return (f"event time {time.isoformat()} is more than allowed_lateness ({lateness}) before the "
                    f"engine's clock {clock.isoformat()}")
        return None
