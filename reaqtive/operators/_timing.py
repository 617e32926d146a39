"""Due-time arithmetic shared by the time-based sources and operators: absolute due times computed from
``scheduler.now`` that never overflow. A deadline past ``datetime.max`` is :data:`MAX_TIME`
(:data:`reaqtive.core.scheduler_interface.NEVER`): it never comes (see :mod:`reaqtive.core.scheduler_interface`)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final, Protocol

from reaqtive.core.arguments import require_positive_duration, require_positive_int, require_time
from reaqtive.core.context import OperatorContext
from reaqtive.core.scheduler_interface import EARLIEST, NEVER, deadline, earlier, utc
from reaqtive.core.streams import LONG_MAX, add_demand
from reaqtive.state.fields import time_bounds
from reaqtive.state.tracking import StateChangedTracker

__all__ = [
    "MAX_SPAN",
    "MAX_TIME",
    "MIN_TIME",
    "add_safe",
    "count_demand",
    "deadline",
    "due_bounds",
    "due_time",
    "earlier",
    "multiply_safe",
    "require_due",
    "span_arguments",
]

MAX_TIME: Final = NEVER
"""The latest representable due time: a due time clamped here never comes."""
MIN_TIME: Final = EARLIEST
"""The earliest representable due time: always past."""

MAX_SPAN: Final = datetime.max - datetime.min
"""The longest span between two representable times (about 10,000 years). A ``shift`` of ``buffer`` or
``window`` longer than it could never open a second list or window, and is refused at bind."""

add_safe: Final = deadline
"""``time + delta`` clamped to :data:`MIN_TIME` / :data:`MAX_TIME`:
:func:`reaqtive.core.scheduler_interface.deadline`."""


def multiply_safe(period: timedelta, count: int) -> timedelta:
    """``period * count`` (both non-negative), clamped to ``timedelta.max``."""
    try:
        return period * count
    except OverflowError:
        return timedelta.max


def due_time(now: datetime, due: timedelta | datetime) -> datetime:
    """The absolute due time of ``due``: a ``datetime`` as it is, a ``timedelta`` from ``now`` (clamped)."""
    if isinstance(due, datetime):
        return utc(due)
    return deadline(now, due)


def due_bounds(context: OperatorContext, due: timedelta | datetime) -> tuple[datetime | None, datetime | None]:
    """The earliest and latest saved value of :func:`due_time` ``(now, due)`` (to check it on load): exactly
    ``due`` when it is a time, else :func:`~reaqtive.state.fields.time_bounds` ``(context, due)``."""
    if isinstance(due, datetime):
        when = utc(due)
        return when, when
    return time_bounds(context, due)



def require_due(value: object, op: str, name: str) -> timedelta | datetime:
    """A builder's check of a due time: a ``timedelta`` (from the start; negative means at once) or an aware
    ``datetime``; :class:`TypeError` / :class:`ValueError` naming the operator otherwise."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, datetime):
        return require_time(value, op, name)
    raise TypeError(f"{op}: {name} must be a timedelta or a datetime, got {type(value).__name__}")


def span_arguments(op: str, first: object, second: object) -> tuple[str, tuple[object, ...]]:
    """The builders' check of ``buffer`` and ``window``, which share their overloads: ``(op, (count, skip))``,
    ``(op + "_time", (duration, shift))`` or ``(op + "_time_or_count", (duration, count))``; ``second`` is
    ``None`` when not given (then ``skip`` = ``count``, ``shift`` = ``duration``)."""
    if isinstance(first, timedelta):
        duration = require_positive_duration(first, op, "duration")
        if second is None:
            return f"{op}_time", (duration, duration)
        if isinstance(second, timedelta):
            return f"{op}_time", (duration, require_positive_duration(second, op, "shift"))
        return f"{op}_time_or_count", (duration, require_positive_int(second, op, "count"))
    if isinstance(first, int) and not isinstance(first, bool):
        count = require_positive_int(first, op, "count")
        if second is None:
            return op, (count, count)
        if isinstance(second, timedelta):
            raise TypeError(f"{op}: with a count, the second argument is skip (an int), got a timedelta")
        return op, (count, require_positive_int(second, op, "skip"))
    raise TypeError(
        f"{op}: the first argument must be a count (int) or a duration (timedelta), got {type(first).__name__}"
    )


class CountTranslated(Protocol):
    """A duration-or-count stage (``buffer_time_or_count``, ``window_time_or_count``) whose downstream demand
    for lists or windows becomes upstream demand for ``count`` elements each (see :func:`count_demand`)."""

    _count: int
    _credit: int
    _requested: int
    _state: StateChangedTracker


def count_demand(stage: CountTranslated, n: int) -> int:
    """The elements to ask the upstream for when the downstream of ``stage`` asks for ``n`` more lists or
    windows: ``count`` each, capped at ``LONG_MAX``, after the first ``_credit`` ones, which a recovered
    downstream asks for again and were translated before the checkpoint. Kept in ``_requested`` (saved)."""
    credit = stage._credit
    if credit:
        again = min(n, credit)
        stage._credit = credit - again
        n -= again
        if not n:
            return 0
    count = stage._count
    amount = LONG_MAX if n >= LONG_MAX // count else n * count
    stage._requested = add_demand(stage._requested, amount)
    stage._state.changed = True
    return amount
