"""The operator registry: binding turns a query expression node into a running operator.

Each operator module registers a *binder* under the operator name used in query expressions (``"map"``,
``"filter"``, ...). A binder is any callable ``(query, subscriber) -> SubscriptionHandle``; an operator class
whose constructor takes ``(query, subscriber)`` is one. The engine re-creates persisted queries through the same
registry, which is why an expression holds names, not classes.

A registration also states how many nested Python frames one stage of the operator adds to the deepest path an
element, a completion or a request takes through a query (``frames``, :data:`DEFAULT_FRAMES` unless given):
:meth:`reaqtive.query.Query.subscribe` adds them up along the query and refuses, with
:class:`~reaqtive.errors.QueryTooDeepError`, a query that could not run within Python's recursion limit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from reaqtive.errors import UnknownOperatorError
from reaqtive.streams import Subscriber
from reaqtive.subscriptions import SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = [
    "DEFAULT_FRAMES",
    "Binder",
    "bind",
    "frames_of",
    "is_registered",
    "register_operator",
    "registered_operators",
]

Binder: TypeAlias = "Callable[[Query[Any], Subscriber[Any]], SubscriptionHandle]"

B = TypeVar("B", bound=Callable[..., SubscriptionHandle])

_BINDERS: dict[str, Callable[..., SubscriptionHandle]] = {}
_FRAMES: dict[str, int] = {}

DEFAULT_FRAMES = 3
"""The frames of a stage that passes an element down in one call and a request up in two (its own ``request``,
then the base's): most one-input stages. Stages that only pass both through (``map``) take 2; stages that hand
elements through a queue, a subject or an inner subscription take more."""


def register_operator(op: str, *, frames: int = DEFAULT_FRAMES) -> Callable[[B], B]:
    """Class or function decorator: register a binder for the expression operator ``op``.

    ``frames``: the nested Python frames one stage adds to the deepest per-element path (measure it: the
    deepest chain of the stage that runs at a given recursion limit). Registering a name twice is a
    programming error and raises :class:`ValueError`.
    """
    if not isinstance(frames, int) or frames < 1:
        raise ValueError(f"operator {op!r}: frames must be an int >= 1, got {frames!r}")

    def decorate(binder: B) -> B:
        existing = _BINDERS.get(op)
        if existing is not None and existing is not binder:
            raise ValueError(f"operator {op!r} is already registered by {existing!r}")
        _BINDERS[op] = binder
        _FRAMES[op] = frames
        return binder

    return decorate


def frames_of(op: str) -> int:
    """The nested Python frames one stage of ``op`` adds to the deepest per-element path (see the module)."""
    return _FRAMES.get(op, DEFAULT_FRAMES)


def bind(query: Query[Any], subscriber: Subscriber[Any]) -> SubscriptionHandle:
    """Create the operator for ``query``'s top node, subscribed by ``subscriber`` (not started)."""
    binder = _BINDERS.get(query.op)
    if binder is None:
        raise UnknownOperatorError(query.op, list(_BINDERS))
    return binder(query, subscriber)


def is_registered(op: str) -> bool:
    """Whether a binder exists for ``op``."""
    return op in _BINDERS


def registered_operators() -> list[str]:
    """All registered expression operator names, sorted."""
    return sorted(_BINDERS)
