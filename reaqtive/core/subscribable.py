"""Subscribables: things a subscriber can subscribe to, getting back a handle on a subscription that has not
started yet (DESIGN decision 2). Queries, subjects and test sources are subscribables."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Generic, TypeVar

from reaqtive.core.streams import Subscriber, require_not_none
from reaqtive.core.subscriptions import SubscriptionHandle

__all__ = ["Subscribable"]

T_co = TypeVar("T_co", covariant=True)


class Subscribable(ABC, Generic[T_co]):
    """A source of elements of type ``T_co``.

    ``subscribe(observer)`` is *shallow*: it creates the subscription and returns its handle, but nothing flows
    until the operator lifecycle runs (see :func:`reaqtive.core.visitors.initialize`).
    """

    __slots__ = ()

    def subscribe(self, observer: Subscriber[T_co]) -> SubscriptionHandle:
        """Create a subscription for ``observer`` and return its handle. ``None`` raises :class:`TypeError`."""
        require_not_none(observer, "observer", "1.9")
        return self.subscribe_core(observer)

    @abstractmethod
    def subscribe_core(self, observer: Subscriber[T_co]) -> SubscriptionHandle:
        """Create the subscription (``observer`` is not ``None``)."""
