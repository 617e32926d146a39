"""Exception types of reaqtive.

Every failure the library detects has its own type, so callers can tell bad input from bugs. Each type also
derives from the closest built-in exception (``LookupError``, ``RuntimeError``, ...), so generic handlers still
catch them. The Reactive Streams cases keep the specification's Python mapping: ``None`` arguments raise
:class:`TypeError` and non-positive requests signal :class:`ValueError` (see :mod:`reaqtive.streams`).
"""

from __future__ import annotations

__all__ = [
    "BufferOverflowError",
    "InvalidSettingError",
    "LimitExceededError",
    "MissingSchedulerError",
    "ObjectDisposedError",
    "ReaqtiveError",
    "SubscriptionAssignedError",
    "UnknownOperatorError",
]


class ReaqtiveError(Exception):
    """Base class of every error raised or signalled by reaqtive itself."""


class UnknownOperatorError(ReaqtiveError, LookupError):
    """A query names an operator that no module has registered."""

    def __init__(self, op: str, known: list[str] | None = None) -> None:
        hint = f"; known operators: {', '.join(sorted(known))}" if known else ""
        super().__init__(f"unknown operator {op!r}{hint}")
        self.op = op


class ObjectDisposedError(ReaqtiveError, RuntimeError):
    """An object (a subject, a scheduler, ...) was used after it was disposed."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} has been disposed")
        self.what = what


class BufferOverflowError(ReaqtiveError):
    """A source whose rate cannot be slowed (a hot subject, a timer) outran its subscriber's demand and its
    bounded buffer filled up. The message names the source and the bound."""


class SubscriptionAssignedError(ReaqtiveError, RuntimeError):
    """A single-assignment subscription holder was assigned twice."""


class MissingSchedulerError(ReaqtiveError, RuntimeError):
    """An operator needed a scheduler, but its operator context has none."""


class LimitExceededError(ReaqtiveError):
    """An operator's state outgrew a limit set by the host (max list size, max distinct elements, ...). The
    operator signals it through ``on_error``; the message names the operator, the setting and the limit."""

    def __init__(self, operator: str, setting: str, limit: int) -> None:
        super().__init__(f"{operator}: more than {limit} elements held, the limit set by {setting!r}")
        self.operator = operator
        self.setting = setting
        self.limit = limit


class InvalidSettingError(ReaqtiveError, ValueError):
    """A host setting has a value of the wrong type or range; the message names the setting and the value."""
