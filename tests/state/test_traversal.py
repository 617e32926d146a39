"""Save, load and confirm traversals: paths, the shape check, differential saves, dynamic subtrees."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

import pytest

from reaqtive.core.context import OperatorContext
from reaqtive.core.operator import StateReader, StateWriter
from reaqtive.core.subscribers import NOP_SUBSCRIBER
from reaqtive.core.subscriptions import CompositeSubscription, StableCompositeSubscription, SubscriptionHandle
from reaqtive.core.visitors import initialize, set_context_all, subscribe_all, walk
from reaqtive.state import (
    CheckpointMode,
    DirtyState,
    OperatorStateError,
    StateFormatError,
    StatefulOperatorBase,
    StateShapeError,
    confirm_saved,
    has_state_changed,
    iter_nodes,
    load_subscription,
    read_blob,
    save_subscription,
    state_loader,
    stateful_nodes,
)
from tests.state.support import Box, Plain
from tests.state.trees import CONTEXT, Tree

H = TypeVar("H", bound=SubscriptionHandle)


def built(handle: H) -> H:
    """The tree after ``subscribe()`` ran on every node (inputs exist only from then on)."""
    subscribe_all(handle)
    return handle


def saved(handle: SubscriptionHandle, mode: CheckpointMode = CheckpointMode.FULL) -> bytes:
    blob = save_subscription(built(handle), mode)
    assert blob is not None
    return blob


def test_paths_follow_the_visit_order_of_the_visitors() -> None:
    tree = Tree()
    nodes = list(iter_nodes(tree.a))
    assert [node for node, _ in nodes] == walk(tree.a)
    assert [path for _, path in nodes] == [(0,), (0, 0), (0, 1), (0, 1, 0), (0, 2)]
    assert [(node.name, path) for node, path in stateful_nodes(tree.a)] == [
        ("test:a", (0,)),
        ("test:b", (0, 0)),
        ("test:c", (0, 1, 0)),
        ("test:d", (0, 2)),
    ]


def test_each_record_carries_its_path_and_name() -> None:
    records = read_blob(saved(Tree().a))
    assert [(r.path, r.name, r.version) for r in records] == [
        ((0,), "test:a", (1,)),
        ((0, 0), "test:b", (1,)),
        ((0, 1, 0), "test:c", (1,)),
        ((0, 2), "test:d", (1,)),
    ]


def test_several_roots_under_one_handle_are_numbered() -> None:
    first, second = Box("test:x", fields=[1]), Box("test:y", fields=[2])
    handle = StableCompositeSubscription(first, second)
    subscribe_all(handle)
    assert [(r.path, r.name) for r in read_blob(saved(handle))] == [((0,), "test:x"), ((1,), "test:y")]
    target_x, target_y = Box("test:x"), Box("test:y")
    load_subscription(StableCompositeSubscription(target_x, target_y), saved(handle))
    assert (target_x.fields, target_y.fields) == ([1], [2])


def test_a_tree_without_stateful_nodes_saves_an_empty_record_list() -> None:
    handle = Plain([Plain()])
    assert read_blob(saved(handle)) == []
    load_subscription(built(Plain([Plain()])), saved(handle))
    assert save_subscription(handle, CheckpointMode.DIFFERENTIAL) is None, "nothing can be dirty"


# -- the shape check ------------------------------------------------------------------------------------------


def test_an_extra_live_node_is_a_shape_error() -> None:
    blob = saved(Box("test:a", [Box("test:b")]))
    with pytest.raises(StateShapeError, match=r"live tree has operator 'test:c' at path 0/1, which the saved state"):
        load_subscription(built(Box("test:a", [Box("test:b"), Box("test:c")])), blob, where="state/sub://q")


def test_a_missing_live_node_is_a_shape_error() -> None:
    blob = saved(Box("test:a", [Box("test:b"), Box("test:c")]))
    with pytest.raises(StateShapeError, match=r"saved state has operator 'test:c' at path 0/1, which the live tree"):
        load_subscription(built(Box("test:a", [Box("test:b")])), blob)


def test_another_operator_at_the_same_place_is_a_shape_error() -> None:
    blob = saved(Box("test:a", [Box("test:b")]))
    with pytest.raises(StateShapeError, match=r"'test:b' at path 0/0 where the live tree has operator 'test:z'"):
        load_subscription(built(Box("test:a", [Box("test:z")])), blob)


def test_a_node_moved_in_the_tree_is_a_shape_error_even_if_the_order_is_unchanged() -> None:
    # Same pre-order sequence of stateful operators (a, b), but b moved under a stateless node: by position
    # alone (the original's rule) this would load silently.
    blob = saved(Box("test:a", [Box("test:b")]))
    with pytest.raises(
        StateShapeError, match=r"'test:b' at path 0/0 where the live tree has operator 'test:b' at path 0/0/0"
    ):
        load_subscription(built(Box("test:a", [Plain([Box("test:b")])])), blob)


def test_the_store_key_starts_every_message() -> None:
    with pytest.raises(StateShapeError, match=r"^state/sub://q: "):
        load_subscription(built(Box("test:z")), saved(Box("test:a")), where="state/sub://q")


# -- loading --------------------------------------------------------------------------------------------------


class Sloppy(Box):
    """Reads less than it wrote: the rest of its segment must be skipped, not fed to the next node."""

    def load_state_core(self, reader: StateReader) -> None:
        self.fields = ["read nothing"]


def test_unread_bytes_of_a_node_are_skipped() -> None:
    blob = saved(Box("test:a", [Box("test:b", fields=[1, 2, 3]), Box("test:c", fields=["c"])]))
    c = Box("test:c")
    load_subscription(built(Box("test:a", [Sloppy("test:b"), c])), blob)
    assert c.fields == ["c"]


class Greedy(Box):
    def load_state_core(self, reader: StateReader) -> None:
        super().load_state_core(reader)
        reader.read()  # one more than was written


def test_reading_past_a_node_is_a_format_error_naming_it() -> None:
    blob = saved(Box("test:a", [Box("test:b", fields=[1]), Box("test:c", fields=["c"])]))
    with pytest.raises(StateFormatError, match=r"'test:b' at path 0/0: read past the end of its state"):
        load_subscription(built(Box("test:a", [Greedy("test:b"), Box("test:c")])), blob)


class Lifecycle(Box):
    def __init__(self, log: list[str]) -> None:
        super().__init__("test:lifecycle")
        self.log = log

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        self.log.append("set_context")

    def load_state_core(self, reader: StateReader) -> None:
        super().load_state_core(reader)
        self.log.append("load")

    def on_start(self) -> None:
        self.log.append("start")


def test_state_loader_plugs_into_initialize_between_set_context_and_start() -> None:
    blob = saved(Box("test:lifecycle", fields=[7]))
    log: list[str] = []
    node = Lifecycle(log)
    initialize(node, CONTEXT, load_state=state_loader(blob))
    assert log == ["set_context", "load", "start"]
    assert node.fields == [7] and node.state_status is DirtyState.CLEAN


class Exploding(Box):
    def save_state_core(self, writer: StateWriter) -> None:
        raise RuntimeError("boom on save")

    def load_state_core(self, reader: StateReader) -> None:
        raise KeyError("boom on load")


def test_an_operator_failing_to_save_or_load_is_named_with_its_path() -> None:
    with pytest.raises(OperatorStateError, match=r"'test:b' at path 0/0 failed to save its state: RuntimeError"):
        save_subscription(built(Box("test:a", [Exploding("test:b")])))
    blob = saved(Box("test:a", [Box("test:b")]))
    with pytest.raises(OperatorStateError, match=r"'test:b' at path 0/0 failed to load its state: KeyError") as raised:
        load_subscription(built(Box("test:a", [Exploding("test:b")])), blob)
    assert isinstance(raised.value.__cause__, KeyError)


class Dynamic(StatefulOperatorBase[Any]):
    """Holds inner subscriptions created at run time; on load it rebuilds them from its state, and the same
    traversal then loads them (the pattern higher-order operators use)."""

    name = "test:dynamic"
    version = (1,)

    def __init__(self) -> None:
        super().__init__(NOP_SUBSCRIBER)
        self.inner = CompositeSubscription()

    def subscribe_inputs(self) -> Iterable[SubscriptionHandle]:
        return (self.inner,)

    def add_inner(self, fields: list[Any]) -> Box:
        box = Box("test:inner", fields=fields)
        self.inner.add(box)
        self.state_changed = True
        return box

    def save_state_core(self, writer: StateWriter) -> None:
        writer.write(len(self.inner))

    def load_state_core(self, reader: StateReader) -> None:
        for _ in range(reader.read()):
            self.add_inner([])

    def request(self, n: int) -> None:
        pass


def test_inner_subscriptions_rebuilt_during_load_are_loaded_in_the_same_pass() -> None:
    source = Dynamic()
    source.add_inner(["first"])
    source.add_inner(["second", 2])
    blob = saved(source)
    assert [r.path for r in read_blob(blob)] == [(0,), (0, 0), (0, 1)]

    target = Dynamic()
    initialize(target, CONTEXT, load_state=state_loader(blob))
    assert [box.fields for box in target.inner] == [["first"], ["second", 2]]  # type: ignore[attr-defined]


# -- differential saves and confirmation ----------------------------------------------------------------------


def test_differential_saves_skip_clean_subscriptions_and_rewrite_dirty_ones_whole() -> None:
    tree = Tree([[1], [2], [3], [4]])
    assert has_state_changed(tree.a), "never saved"
    full = saved(tree.a, CheckpointMode.DIFFERENTIAL)
    confirm_saved(tree.a)
    assert not has_state_changed(tree.a)
    assert save_subscription(tree.a, CheckpointMode.DIFFERENTIAL) is None
    assert saved(tree.a, CheckpointMode.FULL) == full, "full mode writes clean subscriptions too"
    confirm_saved(tree.a)

    tree.c.touch("changed")
    assert has_state_changed(tree.a)
    blob = saved(tree.a, CheckpointMode.DIFFERENTIAL)
    assert len(read_blob(blob)) == 4, "a subscription with a dirty node is written whole"
    assert [box.state_status for box in tree.boxes] == [DirtyState.UNCONFIRMED] * 4
    confirm_saved(tree.a)
    assert [box.state_status for box in tree.boxes] == [DirtyState.CLEAN] * 4


def test_load_then_differential_save_writes_nothing() -> None:
    blob = saved(Tree([[1], [2], [3], [4]]).a)
    target = Tree()
    load_subscription(target.a, blob)
    assert save_subscription(target.a, CheckpointMode.DIFFERENTIAL) is None


def test_set_context_all_is_not_needed_for_saving() -> None:
    tree = Box("test:a", [Box("test:b", fields=[1])])
    subscribe_all(tree)
    set_context_all(tree, CONTEXT)
    assert len(read_blob(saved(tree))) == 2
