"""Due-time arithmetic shared by the time-based sources and operators (``timer``, ``interval``,
``delay_subscription``): absolute due times computed from ``scheduler.now`` that never overflow."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

__all__ = ["MAX_TIME", "MIN_TIME", "add_safe", "due_time", "multiply_safe"]

MAX_TIME: Final = datetime.max.replace(tzinfo=UTC)
"""The latest representable due time: a due time clamped here never comes."""
MIN_TIME: Final = datetime.min.replace(tzinfo=UTC)
"""The earliest representable due time: always past."""

_ZERO: Final = timedelta(0)


def add_safe(time: datetime, delta: timedelta) -> datetime:
    """``time + delta``, clamped to :data:`MIN_TIME` / :data:`MAX_TIME` instead of raising ``OverflowError``."""
    try:
        return time + delta
    except OverflowError:
        return MAX_TIME if delta > _ZERO else MIN_TIME


def multiply_safe(period: timedelta, count: int) -> timedelta:
    """``period * count`` (both non-negative), clamped to ``timedelta.max``."""
    try:
        return period * count
    except OverflowError:
        return timedelta.max


def due_time(now: datetime, due: timedelta | datetime) -> datetime:
    """The absolute due time of ``due``: a ``datetime`` as it is, a ``timedelta`` from ``now`` (clamped)."""
    if isinstance(due, datetime):
        return due
    return add_safe(now, due)
