"""Reactive Streams interfaces (specification 1.0.4) in Python.

The four interfaces are :class:`typing.Protocol` classes, so any object with the right methods conforms (the
``reaqtive.tck`` kit checks third-party implementations this way); our own classes also inherit from them
explicitly. Method names are snake_case: ``subscribe``, ``on_subscribe``, ``on_next``, ``on_error``,
``on_complete``, ``request`` and ``cancel``.

How Python maps the Java specification's special cases:

* **null** is ``None``. Passing ``None`` where the specification forbids ``null`` raises :class:`TypeError`
  (rules 1.9 and 2.13). So ``None`` is never a stream element.
* **IllegalArgumentException** is :class:`ValueError`. A ``request(n)`` with ``n <= 0`` never raises: the
  publisher signals ``on_error(ValueError(...))`` whose message names rule 3.9 (rules 3.9 and 3.16).
* **long** demand is an unbounded Python ``int``. :data:`LONG_MAX` (``2**63 - 1``) means "effectively unbounded";
  demand that sums past it is capped at it, never reported as an error (rule 3.17).

This module depends on nothing but the standard library; it is the bottom layer of reaqtive.
"""

from __future__ import annotations

from typing import Protocol, TypeVar, runtime_checkable

__all__ = [
    "LONG_MAX",
    "Processor",
    "Publisher",
    "Subscriber",
    "Subscription",
    "add_demand",
    "is_unbounded",
    "non_positive_request_error",
    "require_not_none",
]

LONG_MAX = 2**63 - 1
"""Demand at or above this value is "effectively unbounded" (rule 3.17)."""

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
T_contra = TypeVar("T_contra", contravariant=True)
R_co = TypeVar("R_co", covariant=True)


@runtime_checkable
class Subscription(Protocol):
    """A one-to-one lifecycle between a Subscriber and a Publisher, through which demand flows upstream.

    Rules an implementation must obey:

    * 3.1: only the Subscriber that owns it calls ``request``/``cancel``.
    * 3.2, 3.3: ``request`` may be called synchronously from ``on_next``/``on_subscribe``; the recursion between
      ``request`` and ``on_next`` must be bounded (use a drain loop, not recursion).
    * 3.4, 3.5: ``request`` should respect the caller's responsiveness; ``cancel`` likewise.
    * 3.6, 3.7: after the subscription is cancelled, further ``request``/``cancel`` calls are no-ops.
    * 3.8: ``request(n)`` adds ``n`` to the outstanding demand.
    * 3.9: ``request(n)`` with ``n <= 0`` signals ``on_error(ValueError)`` (never raises).
    * 3.10, 3.11: ``request`` may synchronously call ``on_next``/``on_complete`` (with bounded recursion).
    * 3.12, 3.13: ``cancel`` eventually stops signalling and drops references to the Subscriber.
    * 3.14, 3.15, 3.16: ``cancel`` may terminate the Publisher; ``request``/``cancel`` return normally.
    * 3.17: demand up to ``2**63 - 1`` is supported; at or past it, demand is effectively unbounded.
    """

    __slots__ = ()

    def request(self, n: int) -> None:
        """Ask for ``n`` more elements (rules 3.8, 3.9, 3.17)."""
        ...

    def cancel(self) -> None:
        """Stop the flow and release the Subscriber (rules 3.5, 3.7, 3.12, 3.13)."""
        ...


@runtime_checkable
class Subscriber(Protocol[T_contra]):
    """Receives the signals of one subscription: ``on_subscribe`` once, then ``on_next`` up to the demand it
    signalled, then at most one of ``on_error``/``on_complete``.

    Rules an implementation must obey:

    * 2.1: signal demand through ``Subscription.request`` to receive ``on_next``.
    * 2.2, 2.3: may process asynchronously; must not call the Subscription or Publisher from ``on_complete`` or
      ``on_error``.
    * 2.4: after ``on_complete``/``on_error`` the subscription is cancelled.
    * 2.5: cancel a second ``on_subscribe``'s subscription if one is already active.
    * 2.6, 2.7: cancel when no longer needed; call ``request``/``cancel`` serially.
    * 2.8: be prepared to receive ``on_next`` after cancelling (elements already in flight).
    * 2.9, 2.10: be prepared to receive ``on_complete``/``on_error`` with or without a preceding request.
    * 2.12: ``on_subscribe`` at most once per subscriber identity.
    * 2.13: return normally, except raise :class:`TypeError` when an argument is ``None``.
    """

    __slots__ = ()

    def on_subscribe(self, subscription: Subscription) -> None:
        """Receive the subscription; nothing is delivered until demand is signalled (rules 2.1, 2.5, 2.13)."""
        ...

    def on_next(self, value: T_contra) -> None:
        """Receive one element; ``None`` raises :class:`TypeError` (rule 2.13)."""
        ...

    def on_error(self, error: BaseException) -> None:
        """Receive the terminal failure; ``None`` raises :class:`TypeError` (rules 2.4, 2.13)."""
        ...

    def on_complete(self) -> None:
        """Receive successful termination (rules 2.4, 2.9)."""
        ...


@runtime_checkable
class Publisher(Protocol[T_co]):
    """A provider of a potentially unbounded number of elements, published according to demand.

    Rules an implementation must obey:

    * 1.1: never signal more ``on_next`` than requested.
    * 1.2: may signal fewer and terminate.
    * 1.3: signals to one Subscriber are serial (never concurrent, never re-entrant with each other).
    * 1.4, 1.5: failure is signalled by ``on_error``; a finite stream ends with ``on_complete``.
    * 1.6, 1.7: after a terminal signal the subscription is cancelled and no further signals follow.
    * 1.8: once cancelled, signalling eventually stops.
    * 1.9: ``subscribe`` calls ``on_subscribe`` before any other signal and returns normally, except that a
      ``None`` subscriber raises :class:`TypeError`; any other failure is signalled by ``on_error``.
    * 1.10, 1.11: ``subscribe`` may be called many times with different subscribers; multicast is optional.
    """

    __slots__ = ()

    def subscribe(self, subscriber: Subscriber[T_co]) -> None:
        """Start a subscription for ``subscriber`` (rules 1.9, 1.10, 1.11)."""
        ...


@runtime_checkable
class Processor(Subscriber[T_contra], Publisher[R_co], Protocol[T_contra, R_co]):
    """A processing stage that is both a Subscriber and a Publisher and obeys both contracts (rules 4.1, 4.2)."""

    __slots__ = ()


def add_demand(current: int, n: int) -> int:
    """Return ``current + n`` capped at :data:`LONG_MAX` ("effectively unbounded", rule 3.17).

    Both arguments must be non-negative; validating ``n > 0`` is the caller's job (rule 3.9).
    """
    total = current + n
    return LONG_MAX if total >= LONG_MAX else total


def is_unbounded(demand: int) -> bool:
    """Whether ``demand`` is effectively unbounded (rule 3.17)."""
    return demand >= LONG_MAX


def non_positive_request_error(n: int) -> ValueError:
    """The error a publisher signals through ``on_error`` for ``request(n)`` with ``n <= 0`` (rule 3.9)."""
    return ValueError(f"rule 3.9: non-positive subscription request: request({n}) needs n > 0")


def require_not_none(value: T | None, name: str, rule: str) -> T:
    """Return ``value``, or raise :class:`TypeError` naming the argument and the rule when it is ``None``."""
    if value is None:
        raise TypeError(f"rule {rule}: {name} must not be None")
    return value
