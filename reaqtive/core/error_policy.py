"""What a query does when a user function inside one of its operators raises: stop, or skip the element.

By the Reactive Streams contract an error ends a stream: an exception from a ``map`` selector becomes ``on_error``
downstream and the query is over. A host may instead give a query an **error policy** (the operator context's
setting :data:`ERROR_POLICY_SETTING`, inherited by its inner units): every operator that calls a user function
hands the exception to :meth:`OperatorBase._user_error <reaqtive.core.operator.OperatorBase._user_error>`, which asks
the policy. ``skip`` drops the element at that operator (it never reaches what follows; a stage that passes one
element on per element asks its upstream for another in its place) and the query goes on; ``stop`` is the
contract's ``on_error``. A policy that skips is told so it can keep the element as a dead letter (the engine does:
``docs/engine.md``, "When a user function raises").

The decision must depend only on the error and the element (and where it happened), never on time or chance: a
replay after a crash then skips the same elements, and the outputs stay exactly-once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, runtime_checkable

__all__ = ["ERROR_POLICY_SETTING", "NO_ELEMENT", "ErrorContext", "ErrorDecision", "ErrorPolicy"]

ERROR_POLICY_SETTING: Final = "reaqtive://settings/error_policy"
"""Context setting: the query's :class:`ErrorPolicy` (absent: every user error stops the query)."""


class _NoElement:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_ELEMENT"


NO_ELEMENT: Final = _NoElement()
"""The element of a user error raised outside an element's processing (a ``finally_action``, an iterator)."""

ErrorDecision = Literal["skip", "stop"]


@dataclass(frozen=True)
class ErrorContext:
    """Where a user function raised, as a decision function ``(error, context) -> "skip" | "stop"`` sees it: the
    element it was called on (:data:`NO_ELEMENT` when none), the operator's persisted name (``"reaqtive:map"``),
    the unit it runs in (the subscription, or one of its inner units: ``"<subscription>/..."``), and, under an
    engine, the subscription, the operator's path in the unit's tree (``"0/1"``: input indices from the unit's
    root) and the log position of the event the element came from (``None`` where unknown)."""

    element: object
    operator: str
    unit: str
    subscription: str | None = None
    path: str | None = None
    position: int | None = None


@runtime_checkable
class ErrorPolicy(Protocol):
    """Decides, per user error, whether the element is skipped (``True``) or the query stops (``False``)."""

    def skips(self, operator: Any, error: Exception, element: object) -> bool:
        """Whether ``element`` is dropped at ``operator`` (and the query goes on) after its user function raised
        ``error``. Called on the query's scheduler, inside the operator.

        ``operator`` is the :class:`~reaqtive.core.operator.OperatorBase` asking; it is typed ``Any`` because the
        operator base is built on this module (a policy may declare ``OperatorBase[Any]``)."""
        ...
