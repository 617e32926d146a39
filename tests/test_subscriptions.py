"""The subscription algebra: composites, holders, the no-op handle."""

from __future__ import annotations

import pytest

from reaqtive.core.errors import SubscriptionAssignedError
from reaqtive.core.subscriptions import (
    NOP_SUBSCRIPTION,
    CompositeSubscription,
    SerialSubscription,
    SingleAssignmentSubscription,
    StableCompositeSubscription,
    StaticCompositeSubscription,
    SubscriptionHandle,
)
from reaqtive.core.visitors import SubscriptionVisitor


class Probe(SubscriptionHandle):
    """A leaf handle that counts disposals and visits."""

    def __init__(self, name: str = "") -> None:
        self.name = name
        self.disposals = 0
        self.visits = 0

    def dispose(self) -> None:
        self.disposals += 1

    def accept(self, visitor: SubscriptionVisitor) -> None:
        self.visits += 1


@pytest.mark.parametrize("kind", [CompositeSubscription, StableCompositeSubscription])
def test_dynamic_composite_add_remove_dispose(kind: type[CompositeSubscription]) -> None:
    a, b, c = Probe("a"), Probe("b"), Probe("c")
    composite = kind(a)
    composite.add(b)
    composite.add(c)
    assert list(composite) == [a, b, c] and len(composite) == 3
    assert composite.remove(b) is True
    assert b.disposals == 1, "remove disposes what it removes"
    assert composite.remove(b) is False
    assert list(composite) == [a, c]
    composite.dispose()
    composite.dispose()
    assert (a.disposals, c.disposals) == (1, 1), "dispose is idempotent"
    assert composite.is_disposed and len(composite) == 0
    late = Probe("late")
    composite.add(late)
    assert late.disposals == 1, "adding after dispose disposes at once"


@pytest.mark.parametrize("kind", [CompositeSubscription, StableCompositeSubscription])
def test_dynamic_composite_iteration_is_a_snapshot(kind: type[CompositeSubscription]) -> None:
    a, b = Probe(), Probe()
    composite = kind(a, b)
    seen = []
    for handle in composite:
        seen.append(handle)
        composite.remove(b)  # changing the composite while iterating is safe
    assert seen == [a, b]


def test_stable_composite_add_range_after_dispose_disposes_each() -> None:
    composite = StableCompositeSubscription()
    composite.dispose()
    items = [Probe(), Probe()]
    composite.add_range(items)
    assert [p.disposals for p in items] == [1, 1]


def test_composites_reject_non_handles() -> None:
    with pytest.raises(TypeError):
        CompositeSubscription(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        StableCompositeSubscription().add(object())  # type: ignore[arg-type]


def test_static_composite_is_read_only_and_keeps_members_after_dispose() -> None:
    a, b = Probe(), Probe()
    composite = StaticCompositeSubscription(a, b)
    with pytest.raises(TypeError, match="read-only"):
        composite.add(Probe())
    with pytest.raises(TypeError, match="read-only"):
        composite.remove(a)
    composite.dispose()
    composite.dispose()
    assert (a.disposals, b.disposals) == (1, 1)
    assert list(composite) == [a, b] and len(composite) == 2


def test_single_assignment_assigns_once() -> None:
    holder = SingleAssignmentSubscription()
    assert holder.subscription is None
    a = Probe()
    holder.subscription = a
    assert holder.subscription is a
    with pytest.raises(SubscriptionAssignedError):
        holder.subscription = Probe()
    holder.dispose()
    holder.dispose()
    assert a.disposals == 1 and holder.is_disposed
    assert holder.subscription is None


def test_single_assignment_after_dispose_disposes_the_new_handle_but_still_visits_it() -> None:
    holder = SingleAssignmentSubscription()
    holder.dispose()
    late = Probe()
    holder.subscription = late
    assert late.disposals == 1
    holder.accept(SubscriptionVisitor())
    assert late.visits == 1, "visitors still reach a disposed inner handle (stable state shape)"


def test_serial_replaces_and_disposes_previous() -> None:
    serial = SerialSubscription()
    a, b = Probe(), Probe()
    serial.subscription = a
    serial.subscription = b
    assert a.disposals == 1 and b.disposals == 0 and serial.subscription is b
    serial.accept(SubscriptionVisitor())
    assert (a.visits, b.visits) == (0, 1), "only the current handle is visited"
    serial.dispose()
    assert b.disposals == 1 and serial.subscription is None
    c = Probe()
    serial.subscription = c
    assert c.disposals == 1, "assigning after dispose disposes at once"


def test_nop_subscription_does_nothing() -> None:
    NOP_SUBSCRIPTION.dispose()
    NOP_SUBSCRIPTION.accept(SubscriptionVisitor())
