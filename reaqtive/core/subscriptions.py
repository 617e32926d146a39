"""Subscription handles: what ``subscribe(observer)`` returns, and the algebra that holds them.

A :class:`SubscriptionHandle` is the Reaqtive view of a subscription: it can be disposed, and it accepts a
visitor that walks the operator tree under it (to start it, save or load its state, unload it, ...). It is not the
Reactive Streams :class:`~reaqtive.core.streams.Subscription` (``request``/``cancel``), although every operator is both.

Holders in this module forward a visitor to what they hold, in insertion order, so a traversal reaches every
operator under a tree of composites (see :mod:`reaqtive.core.visitors` for the order).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from typing import Any, Protocol, final

from reaqtive.core.errors import SubscriptionAssignedError

__all__ = [
    "NOP_SUBSCRIPTION",
    "CompositeSubscription",
    "HandleVisitor",
    "NopSubscription",
    "SerialSubscription",
    "SingleAssignmentSubscription",
    "StableCompositeSubscription",
    "StaticCompositeSubscription",
    "SubscriptionHandle",
]


class HandleVisitor(Protocol):
    """What :meth:`SubscriptionHandle.accept` dispatches to: ``visit`` is called with each operator under the
    handle (``None`` for an empty holder). The visitors in use are :class:`~reaqtive.core.visitors.SubscriptionVisitor`;
    they are named here by their one method, and the operator as ``Any``, because the operators and the visitors
    that walk them are built on this module (naming them would tie it into a loop with them)."""

    def visit(self, node: Any, /) -> None: ...


class SubscriptionHandle(ABC):
    """A handle on a subscription: ``dispose()`` tears it down, ``accept(visitor)`` visits its operators."""

    __slots__ = ()

    @abstractmethod
    def dispose(self) -> None:
        """Tear the subscription down. Idempotent."""

    @abstractmethod
    def accept(self, visitor: HandleVisitor) -> None:
        """Dispatch ``visitor`` to the operators under this handle."""


@final
class NopSubscription(SubscriptionHandle):
    """A handle that holds nothing: disposing and visiting it do nothing."""

    __slots__ = ()

    def dispose(self) -> None:
        pass

    def accept(self, visitor: HandleVisitor) -> None:
        pass

    def __repr__(self) -> str:
        return "NOP_SUBSCRIPTION"


NOP_SUBSCRIPTION = NopSubscription()
"""The shared no-op handle."""


def _dispose_all(handles: Iterable[SubscriptionHandle]) -> None:
    for handle in handles:
        handle.dispose()


class CompositeSubscription(SubscriptionHandle):
    """A dynamic set of handles, for a large or fluctuating number of children (inner subscriptions).

    ``add`` after dispose disposes the added handle at once; ``remove`` disposes what it removes. Iteration and
    visits work on a snapshot, in insertion order. Thread-safe.
    """

    __slots__ = ("_disposed", "_items", "_lock")

    def __init__(self, *handles: SubscriptionHandle) -> None:
        for handle in handles:
            _require_handle(handle)
        self._items: dict[SubscriptionHandle, None] = dict.fromkeys(handles)
        self._disposed = False
        self._lock = threading.Lock()

    @property
    def is_disposed(self) -> bool:
        """Whether :meth:`dispose` has been called."""
        return self._disposed

    def add(self, handle: SubscriptionHandle) -> None:
        """Add ``handle``, or dispose it at once if this composite is already disposed."""
        _require_handle(handle)
        with self._lock:
            if not self._disposed:
                self._items[handle] = None
                return
        handle.dispose()

    def remove(self, handle: SubscriptionHandle) -> bool:
        """Remove and dispose ``handle``; return whether it was present."""
        with self._lock:
            found = self._items.pop(handle, 0) is None
        if found:
            handle.dispose()
        return found

    def dispose(self) -> None:
        with self._lock:
            if self._disposed:
                return
            self._disposed = True
            items = tuple(self._items)
            self._items.clear()
        _dispose_all(items)

    def accept(self, visitor: HandleVisitor) -> None:
        for handle in self._snapshot():
            handle.accept(visitor)

    def _snapshot(self) -> tuple[SubscriptionHandle, ...]:
        with self._lock:
            return tuple(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[SubscriptionHandle]:
        return iter(self._snapshot())


class StableCompositeSubscription(SubscriptionHandle):
    """A small, rarely changing set of handles, stored as an immutable tuple that is replaced on change.

    Same contract as :class:`CompositeSubscription`, plus :meth:`add_range`.
    """

    __slots__ = ("_disposed", "_items", "_lock")

    def __init__(self, *handles: SubscriptionHandle) -> None:
        for handle in handles:
            _require_handle(handle)
        self._items: tuple[SubscriptionHandle, ...] = handles
        self._disposed = False
        self._lock = threading.Lock()

    @property
    def is_disposed(self) -> bool:
        """Whether :meth:`dispose` has been called."""
        return self._disposed

    def add(self, handle: SubscriptionHandle) -> None:
        """Add ``handle``, or dispose it at once if this composite is already disposed."""
        self.add_range((handle,))

    def add_range(self, handles: Iterable[SubscriptionHandle]) -> None:
        """Add several handles at once (each is disposed at once if this composite is already disposed)."""
        new = tuple(handles)
        for handle in new:
            _require_handle(handle)
        with self._lock:
            if not self._disposed:
                self._items = self._items + new
                return
        _dispose_all(new)

    def remove(self, handle: SubscriptionHandle) -> bool:
        """Remove and dispose ``handle``; return whether it was present."""
        with self._lock:
            items = self._items
            if handle not in items:
                return False
            index = items.index(handle)
            self._items = items[:index] + items[index + 1 :]
        handle.dispose()
        return True

    def dispose(self) -> None:
        with self._lock:
            if self._disposed:
                return
            self._disposed = True
            items, self._items = self._items, ()
        _dispose_all(items)

    def accept(self, visitor: HandleVisitor) -> None:
        for handle in self._items:
            handle.accept(visitor)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[SubscriptionHandle]:
        return iter(self._items)


class StaticCompositeSubscription(SubscriptionHandle):
    """A fixed set of handles. Unlike the other composites it keeps its members after dispose, so that
    visitors still reach disposed operators and the saved state keeps its shape."""

    __slots__ = ("_disposed", "_items")

    def __init__(self, *handles: SubscriptionHandle) -> None:
        for handle in handles:
            _require_handle(handle)
        self._items = handles
        self._disposed = False

    @property
    def is_disposed(self) -> bool:
        """Whether :meth:`dispose` has been called."""
        return self._disposed

    def add(self, handle: SubscriptionHandle) -> None:
        """Always raises: the set is fixed."""
        raise TypeError("a StaticCompositeSubscription is read-only: it cannot add handles")

    def remove(self, handle: SubscriptionHandle) -> bool:
        """Always raises: the set is fixed."""
        raise TypeError("a StaticCompositeSubscription is read-only: it cannot remove handles")

    def dispose(self) -> None:
        if self._disposed:
            return
        self._disposed = True
        _dispose_all(self._items)

    def accept(self, visitor: HandleVisitor) -> None:
        for handle in self._items:
            handle.accept(visitor)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[SubscriptionHandle]:
        return iter(self._items)


class SingleAssignmentSubscription(SubscriptionHandle):
    """A holder assigned at most once, later than it is created.

    Assigning after dispose disposes the new handle at once. After dispose, visitors still reach the handle it
    held, so a terminated inner part keeps its place in the saved state.
    """

    __slots__ = ("_current", "_disposed", "_lock")

    def __init__(self) -> None:
        self._current: SubscriptionHandle | None = None
        self._disposed = False
        self._lock = threading.Lock()

    @property
    def is_disposed(self) -> bool:
        """Whether :meth:`dispose` has been called."""
        return self._disposed

    @property
    def subscription(self) -> SubscriptionHandle | None:
        """The assigned handle, or ``None`` when unassigned or disposed."""
        return None if self._disposed else self._current

    @subscription.setter
    def subscription(self, handle: SubscriptionHandle) -> None:
        _require_handle(handle)
        with self._lock:
            if self._current is not None:
                raise SubscriptionAssignedError("this single-assignment subscription is already assigned")
            self._current = handle
            disposed = self._disposed
        if disposed:
            handle.dispose()

    def dispose(self) -> None:
        with self._lock:
            if self._disposed:
                return
            self._disposed = True
            current = self._current
        if current is not None:
            current.dispose()

    def accept(self, visitor: HandleVisitor) -> None:
        # Deliberately also after dispose: the saved state's shape must not depend on what has terminated.
        current = self._current
        if current is not None:
            current.accept(visitor)


class SerialSubscription(SubscriptionHandle):
    """A holder whose handle can be replaced; the previous one is disposed. Visitors reach the current one."""

    __slots__ = ("_current", "_disposed", "_lock")

    def __init__(self) -> None:
        self._current: SubscriptionHandle | None = None
        self._disposed = False
        self._lock = threading.Lock()

    @property
    def is_disposed(self) -> bool:
        """Whether :meth:`dispose` has been called."""
        return self._disposed

    @property
    def subscription(self) -> SubscriptionHandle | None:
        """The current handle, or ``None``."""
        return self._current

    @subscription.setter
    def subscription(self, handle: SubscriptionHandle) -> None:
        _require_handle(handle)
        with self._lock:
            if self._disposed:
                previous: SubscriptionHandle | None = handle
            else:
                previous, self._current = self._current, handle
        if previous is not None:
            previous.dispose()

    def dispose(self) -> None:
        with self._lock:
            if self._disposed:
                return
            self._disposed = True
            current, self._current = self._current, None
        if current is not None:
            current.dispose()

    def accept(self, visitor: HandleVisitor) -> None:
        current = self._current
        if current is not None:
            current.accept(visitor)


def _require_handle(handle: object) -> None:
    if not isinstance(handle, SubscriptionHandle):
        raise TypeError(f"expected a SubscriptionHandle, got {type(handle).__name__}")
