"""A subscription's error policy under the engine: what happens when a user function inside its query raises.

``create_subscription(uri, query, on_error=...)`` (or the engine's default, ``Engine(path, on_error=...)``):

* ``"stop"`` (the default): the query stops with the error. The engine stops it as of its last checkpoint (its
  stored state, its position and its clock stay, as for a fault) and marks it **FAILED**, with the error and the
  log position of the event that stopped it, in its record: every place a person or a monitor looks shows it, also
  after a restart, until :meth:`~reaqtive.engine.Engine.restart_subscription` runs it again;
* ``"skip"``: the element is dropped at that operator, the query goes on, and the element is kept as a **dead
  letter** (the subscription, the unit and the operator's path, the log position of the event that carried it,
  the error's type, message and a short traceback, the element itself when the codec can keep it). Recorded once:
  a replay after a crash skips the same element and finds its dead letter there;
* a function ``(error, context) -> "skip" | "stop"`` (an :class:`~reaqtive.core.error_policy.ErrorContext`), persisted
  by reference like the functions of queries: it must decide from the error and the element alone.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from reaqtive.core.describe import error_text as describe_error
from reaqtive.core.error_policy import NO_ELEMENT, ErrorContext
from reaqtive.core.operator import OperatorBase
from reaqtive.engine.engine_errors import EngineError

__all__ = [
    "ON_ERROR_MODES",
    "ElementFailure",
    "PolicyHost",
    "RecordedError",
    "SubscriptionFailedError",
    "SubscriptionPolicy",
    "check_on_error",
    "element_repr",
    "error_name",
    "error_text",
]

ON_ERROR_MODES: Final = ("stop", "skip")
_TRACEBACK_FRAMES: Final = 4
_REPR_CHARS: Final = 200

OnError = str | Callable[[Exception, ErrorContext], object]


def check_on_error(value: object, where: str = "on_error") -> OnError:
    """An error policy as given by a caller: ``"stop"``, ``"skip"`` or a function of ``(error, context)``."""
    if isinstance(value, str) and value in ON_ERROR_MODES:
        return value
    if callable(value) and not isinstance(value, (str, type)):
        return value
    raise ValueError(f"{where} must be 'stop', 'skip' or a function (error, context) -> 'skip' | 'stop', "
                     f"got {value!r:.60}")


@dataclass(frozen=True)
class ElementFailure:
    """A user error inside a subscription, where it happened: what a dead letter keeps, and what a FAILED
    subscription says stopped it."""

    subscription: str
    unit: str
    operator: str
    path: str
    position: int
    error_type: str
    message: str
    traceback: str
    element: object = NO_ELEMENT

    def describe(self) -> str:
        return (f"{self.error_type}: {self.message} (in {self.operator} at {self.unit}#{self.path}, "
                f"event at log position {self.position})")


class RecordedError(Exception):
    """A user error as a FAILED subscription's record keeps it (after a restart the original exception object is
    gone): its type's name and its message."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message


def error_name(error: BaseException) -> str:
    """The type name of a user's error (as recorded, for one read back from a FAILED record)."""
    return error.type_name if isinstance(error, RecordedError) else type(error).__name__


def error_text(error: BaseException) -> str:
    """The message of a user's error (as recorded, for one read back from a FAILED record)."""
    return error.message if isinstance(error, RecordedError) else describe_error(error)


class SubscriptionFailedError(EngineError):
    """A subscription stopped because a user function in its query raised (its error policy said stop, or the
    error was none it could skip). ``__cause__`` is the user's error; ``failure`` where it happened (``None``
    when the error did not come from a user function: a source that failed, ``Query.throw``)."""

    def __init__(self, uri: str, error: BaseException, failure: ElementFailure | None, position: int) -> None:
        where = failure.describe() if failure is not None else (f"{error_name(error)}: {error_text(error)} (event "
                                                                 f"at log position {position})")
        super().__init__(f"subscription {uri!r} failed: {where}")
        self.uri = uri
        self.error = error
        self.failure = failure
        self.position = position


class SubscriptionPolicy:
    """The :class:`~reaqtive.core.error_policy.ErrorPolicy` the engine gives one subscription's operators (a context
    setting, inherited by its inner units). The engine supplies where things are: the position of the event being
    handed to a unit, an operator's path in its unit, and where skipped elements and failures go."""

    __slots__ = ("_decide", "_engine", "_skipping", "last_failure", "uri")

    def __init__(
        self, uri: str, decide: OnError, engine: PolicyHost, skipping: frozenset[tuple[str, str, int]] = frozenset()
    ) -> None:
        self.uri = uri
        self._decide = decide
        self._engine = engine
        # (unit, path, position) of the elements restart_subscription(skip_failed=True) skips: stored with the
        # subscription, so that any replay of them skips them again
        self._skipping = skipping
        self.last_failure: ElementFailure | None = None  # the user error that stopped it, for the FAILED record

    def skips(self, operator: OperatorBase[Any], error: Exception, element: object) -> bool:
        context = operator.context
        unit = context.instance_id
        engine = self._engine
        position = engine.position_of(unit)
        path = engine.path_of(unit, operator)
        name = str(getattr(operator, "name", type(operator).__name__))
        failure = ElementFailure(self.uri, unit, name, path, position, type(error).__name__,
                                 describe_error(error)[:1000], _short_traceback(error), element)
        skip = self._decision(error, failure)
        if skip:
            engine.element_skipped(failure)
        else:
            self.last_failure = failure
        return skip

    def _decision(self, error: Exception, failure: ElementFailure) -> bool:
        if self._skipping and (failure.unit, failure.path, failure.position) in self._skipping:
            return True
        decide = self._decide
        if decide == "skip":
            return True
        if decide == "stop" or isinstance(decide, str):
            return False
        context = ErrorContext(failure.element, failure.operator, failure.unit, self.uri, failure.path,
                               failure.position)
        answer = decide(error, context)  # a decision function that raises stops the query, with its error chained
        if answer not in ON_ERROR_MODES:
            raise ValueError(f"the on_error function of {self.uri!r} returned {answer!r:.40}; it must return 'skip' "
                             "or 'stop'")
        return answer == "skip"


class PolicyHost(Protocol):
    """What a :class:`SubscriptionPolicy` asks of the engine."""

    def position_of(self, unit: str) -> int:
        """The log position of the event being handed to ``unit``'s query (or the last one handed to it)."""
        ...

    def path_of(self, unit: str, operator: OperatorBase[Any]) -> str:
        """``operator``'s path in the tree of ``unit`` (``"?"`` when it is not found there)."""
        ...

    def element_skipped(self, failure: ElementFailure) -> None:
        """Keep a skipped element as a dead letter."""
        ...


def _short_traceback(error: BaseException) -> str:
    """The last few frames of ``error``'s traceback, and the error: enough to find the failing line."""
    frames = traceback.extract_tb(error.__traceback__)[-_TRACEBACK_FRAMES:]
    lines = traceback.format_list(frames) + traceback.format_exception_only(type(error), error)
    return "".join(lines)[-4000:]


def element_repr(element: object) -> str:
    """A short ``repr`` of an element, for a dead letter whose element the codec cannot keep."""
    try:
        text = repr(element)
    except Exception as error:  # a user type's repr may raise too
        text = f"<{type(element).__name__}: repr raised {type(error).__name__}>"
    return text if len(text) <= _REPR_CHARS else text[: _REPR_CHARS - 1] + "…"
