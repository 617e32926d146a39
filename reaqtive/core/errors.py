"""Exception types of reaqtive.

Every failure the library detects has its own type, so callers can tell bad input from bugs. Each type also
derives from the closest built-in exception (``LookupError``, ``RuntimeError``, ...), so generic handlers still
catch them. The Reactive Streams cases keep the specification's Python mapping: ``None`` arguments raise
:class:`TypeError` and non-positive requests signal :class:`ValueError` (see :mod:`reaqtive.core.streams`).
"""

from __future__ import annotations

__all__ = [
    "BufferOverflowError",
    "InvalidSettingError",
    "LimitExceededError",
    "MissingSchedulerError",
    "ObjectDisposedError",
    "OperatorArgumentError",
    "QueryTooDeepError",
    "ReaqtiveError",
    "SubscriptionAssignedError",
    "OperatorPluginError",
    "UnknownOperatorError",
]


class ReaqtiveError(Exception):
    """Base class of every error raised or signalled by reaqtive itself."""


class UnknownOperatorError(ReaqtiveError, LookupError):
    """A query names an operator that no module has registered."""

    def __init__(self, op: str, known: list[str] | None = None, *, hint: str = "") -> None:
        if not hint and known:
            hint = f"; known operators: {', '.join(sorted(known))}"
        super().__init__(f"unknown operator {op!r}{hint}")
        self.op = op


class OperatorPluginError(ReaqtiveError, ImportError):
    """A module declared in the ``reaqtive.operators`` entry point group failed to import."""

    def __init__(self, name: str, target: str, cause: BaseException) -> None:
        super().__init__(f"the operator package entry point {name!r} ({target}) failed to load: "
                         f"{type(cause).__name__}: {cause}")
        self.entry_point = name
        self.target = target


class OperatorArgumentError(ReaqtiveError, TypeError, ValueError):
    """A query node's arguments do not fit its operator: the wrong number of them, a value of the wrong type (a
    string where a ``timedelta`` belongs, a non-callable where a function belongs), or out of range (a negative
    count, a duration that must be positive).

    The fluent builders refuse such arguments where the query is written; this error is the same check when the
    query is **bound** (``query.subscribe``, an engine re-creating a stored query), for expressions that did not
    come through the builders: decoded from a store, or built with ``Query(op, args)``. The message names the
    operator, the argument (its index in ``query.args`` and its name), what was expected and what was found.
    It derives from both :class:`TypeError` and :class:`ValueError`, the two errors the builders raise.

    ``index`` is ``None`` when the number of arguments is wrong.
    """

    def __init__(self, op: str, index: int | None, name: str, expected: str, found: str) -> None:
        if index is None:
            message = f"operator {op!r} takes {expected}, got {found}"
        else:
            message = f"operator {op!r}: args[{index}] ({name}) must be {expected}, got {found}"
        super().__init__(message)
        self.op = op
        self.index = index
        self.name = name
        self.expected = expected
        self.found = found


class QueryTooDeepError(ReaqtiveError, RecursionError):
    """A query is nested deeper than its stages can run within Python's recursion limit.

    Each element, completion and request passes through every stage as a nested call: a chain of ``map`` stages
    takes two Python frames per stage, other operators more (:func:`reaqtive.core.binding.frames_of`). A query may
    take :func:`reaqtive.fluent.query.frame_budget` frames, the recursion limit less a reserve: 850 at the default
    limit of 1,000, a source and 423 ``map`` stages. Raised when the query is subscribed, before anything runs,
    never halfway through processing. Raise the limit (``sys.setrecursionlimit(needed)``) to run the query, or
    split it. ``depth`` is its number of stages on the longest path, ``frames`` what its stages need,
    ``budget`` what the current limit allows, ``needed`` the recursion limit that would do.
    """

    def __init__(self, depth: int, frames: int, budget: int, needed: int) -> None:
        super().__init__(
            f"the query is {depth} operators deep and its stages need {frames} nested Python frames per element, "
            f"more than the {budget} that Python's recursion limit leaves for them; raise the limit with "
            f"sys.setrecursionlimit({needed}) or more, or split the query"
        )
        self.depth = depth
        self.frames = frames
        self.budget = budget
        self.needed = needed


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
