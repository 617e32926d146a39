"""The operator registry: binding turns a query expression node into a running operator.

Each operator module registers a *binder* under the operator name used in query expressions (``"map"``,
``"filter"``, ...). A binder is any callable ``(query, subscriber) -> SubscriptionHandle``; an operator class
whose constructor takes ``(query, subscriber)`` is one. The engine re-creates persisted queries through the same
registry, which is why an expression holds names, not classes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from reaqtive.errors import UnknownOperatorError
from reaqtive.streams import Subscriber
from reaqtive.subscriptions import SubscriptionHandle

if TYPE_CHECKING:
    from reaqtive.query import Query

__all__ = ["Binder", "bind", "is_registered", "register_operator", "registered_operators"]

Binder: TypeAlias = "Callable[[Query[Any], Subscriber[Any]], SubscriptionHandle]"

B = TypeVar("B", bound=Callable[..., SubscriptionHandle])

_BINDERS: dict[str, Callable[..., SubscriptionHandle]] = {}


def register_operator(op: str) -> Callable[[B], B]:
    """Class or function decorator: register a binder for the expression operator ``op``.

    Registering a name twice is a programming error and raises :class:`ValueError`.
    """

    def decorate(binder: B) -> B:
        existing = _BINDERS.get(op)
        if existing is not None and existing is not binder:
            raise ValueError(f"operator {op!r} is already registered by {existing!r}")
        _BINDERS[op] = binder
        return binder

    return decorate


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
