"""Visitors: pre-order traversal through composites and holders, typed builders, initialization."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence

from reaqtive import OperatorContext, UnloadableOperator, from_iterable
from reaqtive.core.operator import Operator, OperatorBase
from reaqtive.core.subscribers import NOP_SUBSCRIBER
from reaqtive.core.subscriptions import (
    CompositeSubscription,
    SerialSubscription,
    SingleAssignmentSubscription,
    StableCompositeSubscription,
    StaticCompositeSubscription,
    SubscriptionHandle,
)
from reaqtive.core.visitors import SubscriptionVisitor, initialize, set_context_all, start_all, subscribe_all, walk
from reaqtive.fluent.query import RESERVED_FRAMES


class Node(OperatorBase[int]):
    """An operator node with fixed inputs, for building trees by hand."""

    def __init__(self, name: str, *inputs: SubscriptionHandle) -> None:
        super().__init__(NOP_SUBSCRIBER)
        self.name = name
        self._given = inputs
        self._inputs = inputs

    def subscribe_inputs(self) -> Iterable[SubscriptionHandle]:
        return self._given

    def request(self, n: int) -> None:
        pass

    def __repr__(self) -> str:
        return self.name


class Unloadable(Node, UnloadableOperator):
    def __init__(self, name: str, *inputs: SubscriptionHandle) -> None:
        super().__init__(name, *inputs)
        self.unloaded = 0

    def unload(self) -> None:
        self.unloaded += 1


def names(nodes: Sequence[Operator]) -> list[str]:
    return [node.name for node in nodes]  # type: ignore[attr-defined]


def build_tree() -> Node:
    r"""p -> [c1 -> [g1], composite(c2, stable(c3, single(c4 -> [g2])), serial(c5)), static(c6)]"""
    single = SingleAssignmentSubscription()
    single.subscription = Node("c4", Node("g2"))
    serial = SerialSubscription()
    serial.subscription = Node("c5")
    return Node(
        "p",
        Node("c1", Node("g1")),
        CompositeSubscription(Node("c2"), StableCompositeSubscription(Node("c3"), single), serial),
        StaticCompositeSubscription(Node("c6")),
    )


def test_visitor_reaches_every_node_in_pre_order_through_composites_and_holders() -> None:
    assert names(walk(build_tree())) == ["p", "c1", "g1", "c2", "c3", "c4", "g2", "c5", "c6"]


def test_visit_order_matches_reaqtive_reference_example() -> None:
    # The original's order test: parent, first child, its child, then the other children.
    tree = Node("p", Node("c1", Node("g1")), Node("c2"), Node("c3"))
    assert names(walk(tree)) == ["p", "c1", "g1", "c2", "c3"]


def test_visitor_still_reaches_disposed_single_assignment_content() -> None:
    single = SingleAssignmentSubscription()
    single.subscription = Node("inner")
    single.dispose()
    assert names(walk(Node("p", single))) == ["p", "inner"]


def test_visit_none_is_a_no_op() -> None:
    SubscriptionVisitor().visit(None)


def test_deep_chains_do_not_hit_the_recursion_limit() -> None:
    query = from_iterable(range(3))
    for _ in range(3000):
        query = query.map(lambda x: x)
    # Subscribing refuses a query deeper than its elements could run (QueryTooDeepError): raise the limit for it.
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(query.frames + RESERVED_FRAMES)
    try:
        handle = query.subscribe(NOP_SUBSCRIBER)
        subscribe_all(handle)
    finally:
        sys.setrecursionlimit(previous)
    # The traversals keep their own stack: the default limit does not matter to them.
    set_context_all(handle, OperatorContext("test://deep"))
    start_all(handle)
    assert len(walk(handle)) == 3001
    handle.dispose()


def test_builder_applies_typed_actions_in_order() -> None:
    leaf = Unloadable("leaf")
    tree = Node("root", Unloadable("mid", leaf))
    calls: list[str] = []
    (
        SubscriptionVisitor.do(UnloadableOperator, lambda op: op.unload())
        .do(Node, lambda node: calls.append(node.name))
        .do(Unloadable, lambda node: calls.append(f"{node.name}!"))
        .apply(tree)
    )
    assert [node.unloaded for node in (leaf,)] == [1]
    assert calls == ["root", "mid", "mid!", "leaf", "leaf!"]


def test_custom_visitor_subclass() -> None:
    class Counter(SubscriptionVisitor):
        def __init__(self) -> None:
            super().__init__()
            self.count = 0

        def visit_node(self, node: Operator) -> None:
            self.count += 1

    counter = Counter()
    counter.apply(build_tree())
    assert counter.count == 9


def test_initialize_runs_each_phase_over_the_whole_tree_before_the_next() -> None:
    events: list[str] = []

    class Logged(Node):
        def subscribe_inputs(self) -> Iterable[SubscriptionHandle]:
            events.append(f"subscribe {self.name}")
            return super().subscribe_inputs()

        def set_context(self, context: OperatorContext) -> None:
            events.append(f"context {self.name}")
            super().set_context(context)

        def on_start(self) -> None:
            events.append(f"start {self.name}")

    tree = Logged("a", Logged("b"))
    initialize(tree, OperatorContext("test://init"), load_state=lambda handle: events.append("load"))
    assert events == ["subscribe a", "subscribe b", "context a", "context b", "load", "start a", "start b"]


def test_initialize_disposes_what_it_subscribed_when_a_phase_fails() -> None:
    from reaqtive import SimpleSubject

    subject = SimpleSubject[int]()

    class FailingContext(Node):
        def set_context(self, context: OperatorContext) -> None:
            raise LookupError("no such setting")

    handle = subject.as_query().map(lambda x: x).subscribe(NOP_SUBSCRIBER)
    tree = FailingContext("top", handle)
    import pytest

    with pytest.raises(LookupError):
        initialize(tree, OperatorContext("test://fail"))
    assert subject.subscriber_count == 0, "the subscription made before the failure was released"
