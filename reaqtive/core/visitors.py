"""Visitors that walk the operator tree under a subscription handle.

**Order.** A traversal is depth-first **pre-order**: an operator is visited before its inputs, and inputs are
visited left to right, in the order the operator lists them (composites forward in insertion order). For a
query ``source.map(f).filter(p)`` the visit order is ``filter, map, source``: from the subscriber towards the
sources. Because an operator is visited before its inputs are enumerated, the subscribe traversal can call
``node.subscribe()`` and then descend into the inputs it just created, and a load traversal can rebuild an inner
subtree inside ``load_state`` and load it in the same pass.

The traversal keeps its own stack, so very deep trees do not hit Python's recursion limit.

**Initialization** (:func:`initialize`) runs separate full traversals: ``subscribe`` on every node, then
``set_context``, then optionally a state load, then ``start``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from reaqtive.core.context import OperatorContext
from reaqtive.core.operator import Operator
from reaqtive.core.subscriptions import SubscriptionHandle

__all__ = [
    "SubscriptionVisitor",
    "SubscriptionVisitorBuilder",
    "dispose",
    "initialize",
    "set_context_all",
    "start_all",
    "subscribe_all",
    "walk",
]

N = TypeVar("N")


class SubscriptionVisitor:
    """Walks every operator under a handle in pre-order, calling :meth:`visit_node` on each.

    Subclass and override :meth:`visit_node`, or build one from typed actions with :meth:`do`::

        SubscriptionVisitor.do(UnloadableOperator, lambda op: op.unload()).apply(handle)
    """

    __slots__ = ()

    def apply(self, handle: SubscriptionHandle) -> None:
        """Visit every operator under ``handle``."""
        handle.accept(self)

    def visit(self, node: Operator | None) -> None:
        """Entry point called by :meth:`SubscriptionHandle.accept`. Visits ``node`` and everything under it."""
        if node is None:
            return
        stack = [node]
        while stack:
            current = stack.pop()
            self.visit_node(current)
            stack.extend(reversed(_children(current)))

    def visit_node(self, node: Operator) -> None:
        """Called once per operator, before its inputs are enumerated. Does nothing by default."""

    @staticmethod
    def do(node_type: type[N], action: Callable[[N], object]) -> SubscriptionVisitorBuilder:
        """Start building a visitor that calls ``action`` on every node that is an instance of ``node_type``."""
        return SubscriptionVisitorBuilder(((node_type, action),))


class SubscriptionVisitorBuilder:
    """An immutable list of ``(type, action)`` pairs; :meth:`apply` runs them over a tree.

    When a node matches several types, the actions run in the order they were added.
    """

    __slots__ = ("_actions",)

    def __init__(self, actions: tuple[tuple[type[Any], Callable[[Any], object]], ...]) -> None:
        self._actions = actions

    def do(self, node_type: type[N], action: Callable[[N], object]) -> SubscriptionVisitorBuilder:
        """Add another typed action."""
        return SubscriptionVisitorBuilder((*self._actions, (node_type, action)))

    def build(self) -> SubscriptionVisitor:
        """The visitor."""
        return _TypedVisitor(self._actions)

    def apply(self, handle: SubscriptionHandle) -> None:
        """Build the visitor and visit every operator under ``handle``."""
        self.build().apply(handle)


class _Collector(SubscriptionVisitor):
    """Collects the operators directly under a set of handles (through composites and holders), without
    descending further: the traversal above keeps its own stack."""

    __slots__ = ("found",)

    def __init__(self) -> None:
        self.found: list[Operator] = []

    def visit(self, node: Operator | None) -> None:
        if node is not None:
            self.found.append(node)


def _children(node: Operator) -> list[Operator]:
    collector = _Collector()
    for handle in node.inputs:
        handle.accept(collector)
    return collector.found


class _TypedVisitor(SubscriptionVisitor, Generic[N]):
    __slots__ = ("_actions",)

    def __init__(self, actions: tuple[tuple[type[Any], Callable[[Any], object]], ...]) -> None:
        super().__init__()
        self._actions = actions

    def visit_node(self, node: Operator) -> None:
        for node_type, action in self._actions:
            if isinstance(node, node_type):
                action(node)


class _ActionVisitor(SubscriptionVisitor):
    __slots__ = ("_action",)

    def __init__(self, action: Callable[[Operator], object]) -> None:
        super().__init__()
        self._action = action

    def visit_node(self, node: Operator) -> None:
        self._action(node)


def walk(handle: SubscriptionHandle) -> list[Operator]:
    """Every operator under ``handle``, in visit (pre-)order."""
    found: list[Operator] = []
    _ActionVisitor(found.append).apply(handle)
    return found


def subscribe_all(handle: SubscriptionHandle) -> None:
    """Call ``subscribe()`` on every node, creating the inputs it then descends into."""
    _ActionVisitor(lambda node: node.subscribe()).apply(handle)


def set_context_all(handle: SubscriptionHandle, context: OperatorContext) -> None:
    """Call ``set_context(context)`` on every node."""
    _ActionVisitor(lambda node: node.set_context(context)).apply(handle)


def start_all(handle: SubscriptionHandle) -> None:
    """Call ``start()`` on every node (subscriber side first, sources last)."""
    _ActionVisitor(lambda node: node.start()).apply(handle)


def initialize(
    handle: SubscriptionHandle,
    context: OperatorContext,
    load_state: Callable[[SubscriptionHandle], object] | None = None,
) -> SubscriptionHandle:
    """Bring a freshly subscribed handle to life: subscribe, set the context, optionally load state, start.

    ``load_state`` receives the handle after ``set_context`` and before ``start`` (the state layer passes its
    load traversal here). If any phase before ``start`` fails, the handle is disposed (releasing the inputs
    subscribed so far) and the error propagates. Returns ``handle``.
    """
    try:
        subscribe_all(handle)
        set_context_all(handle, context)
        if load_state is not None:
            load_state(handle)
    except BaseException:
        handle.dispose()  # inputs subscribed so far must not linger (they would hold on to their sources)
        raise
    start_all(handle)
    return handle


def dispose(handle: SubscriptionHandle) -> None:
    """Dispose the subscription (the handle disposes its whole tree)."""
    handle.dispose()
