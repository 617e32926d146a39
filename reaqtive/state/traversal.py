"""Traversals that save, load and confirm the state of a subscription's operator tree.

They walk the tree exactly like :mod:`reaqtive.core.visitors` (depth-first pre-order, inputs left to right), and also
track each node's **path**: the input indices from the subscription's root, e.g. ``(0, 1)`` is the second input
of the first root. Every stateful node's record carries its path and name, so loading checks, node by node,
that the live tree has the shape of the saved one — a changed query definition is a clear
:class:`StateShapeError`, never one operator reading another's state.

Children are enumerated *after* a node was visited, so a node that rebuilds inner subscriptions in its
``load_state`` gets them loaded in the same pass.

Typical use::

    blob = save_subscription(handle)                        # full: every node
    blob = save_subscription(handle, CheckpointMode.DIFFERENTIAL)  # None when no node is dirty
    ...                                                     # commit blob to a store, then:
    confirm_saved(handle)                                   # on_state_saved on every node

    handle = query.subscribe(observer)                      # after a restart
    initialize(handle, context, load_state=state_loader(blob))
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from reaqtive.core.operator import Operator, StatefulOperator
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.core.visitors import SubscriptionVisitor
from reaqtive.state.codec import DEFAULT_CODEC, StateCodec
from reaqtive.state.framing import BlobWriter, NodeState, Path, read_blob
from reaqtive.state.state_errors import (
    OperatorStateError,
    StateError,
    StateShapeError,
    StateVersionError,
    format_path,
)

__all__ = [
    "CheckpointMode",
    "confirm_saved",
    "has_state_changed",
    "iter_nodes",
    "load_subscription",
    "save_subscription",
    "state_loader",
    "stateful_nodes",
]


N = TypeVar("N", bound=Operator)


class CheckpointMode(enum.Enum):
    """Which subscriptions a checkpoint writes."""

    FULL = "full"
    """Every subscription, whether or not it changed."""
    DIFFERENTIAL = "differential"
    """Only subscriptions with at least one dirty node (the whole subscription is rewritten)."""


class _Collector(SubscriptionVisitor):
    """Collects the operators directly under some handles (through composites), without descending."""

    __slots__ = ("found",)

    def __init__(self) -> None:
        self.found: list[Operator] = []

    def visit(self, node: Operator | None) -> None:
        if node is not None:
            self.found.append(node)


def _operators_under(handles: Iterable[SubscriptionHandle]) -> list[Operator]:
    collector = _Collector()
    for handle in handles:
        handle.accept(collector)
    return collector.found


def iter_nodes(handle: SubscriptionHandle) -> Iterator[tuple[Operator, Path]]:
    """Every operator under ``handle`` with its path, in pre-order.

    A node's inputs are enumerated when the iteration resumes after it, so whatever the consumer did to the
    node (load state that rebuilds inner subscriptions) is reflected in what comes next.
    """
    return _walk(handle, Operator)  # type: ignore[type-abstract]


def stateful_nodes(handle: SubscriptionHandle) -> Iterator[tuple[StatefulOperator, Path]]:
    """The stateful operators under ``handle`` with their paths, in pre-order (see :func:`iter_nodes`)."""
    return _walk(handle, StatefulOperator)  # type: ignore[type-abstract]


def _walk(handle: SubscriptionHandle, kind: type[N]) -> Iterator[tuple[N, Path]]:
    roots = _operators_under((handle,))
    stack: list[tuple[Operator, Path]] = [(roots[i], (i,)) for i in range(len(roots) - 1, -1, -1)]
    while stack:
        node, path = stack.pop()
        if isinstance(node, kind):
            yield node, path
        inputs = node.inputs  # read after the consumer handled the node: a load may have rebuilt them
        if inputs:
            children = _operators_under(inputs)
            stack.extend((children[i], (*path, i)) for i in range(len(children) - 1, -1, -1))


_STATEFUL_TYPES: dict[type, bool] = {}


def _is_stateful(kind: type) -> bool:
    stateful = _STATEFUL_TYPES.get(kind)
    if stateful is None:
        stateful = _STATEFUL_TYPES[kind] = issubclass(kind, StatefulOperator)
    return stateful


def _stateful_list(handle: SubscriptionHandle) -> list[tuple[StatefulOperator, Path]]:
    """:func:`stateful_nodes` as a list, for saving (nothing changes the tree meanwhile): the same order and
    paths, in about half the time (one collector, stateful types cached)."""
    collector = _Collector()
    handle.accept(collector)
    found = collector.found
    stack: list[tuple[Operator, Path]] = [(found[i], (i,)) for i in range(len(found) - 1, -1, -1)]
    nodes: list[tuple[StatefulOperator, Path]] = []
    known = _STATEFUL_TYPES
    while stack:
        node, path = stack.pop()
        kind = type(node)
        stateful = known.get(kind)
        if stateful is None:
            stateful = _is_stateful(kind)
        if stateful:
            nodes.append((node, path))  # type: ignore[arg-type]
        inputs = node.inputs
        if inputs:
            found = collector.found = []
            for child in inputs:
                child.accept(collector)
            for i in range(len(found) - 1, -1, -1):
                stack.append((found[i], (*path, i)))
    return nodes


def has_state_changed(handle: SubscriptionHandle) -> bool:
    """Whether any stateful node under ``handle`` is dirty (stops at the first one).

    A differential checkpoint asks this of every subscription, so it skips what :func:`stateful_nodes` does for
    saving (paths, pre-order): one list serves as the collector and the stack, and stateful types are cached.
    """
    collector = _Collector()
    handle.accept(collector)
    stack = collector.found
    known = _STATEFUL_TYPES
    while stack:
        node = stack.pop()
        kind = type(node)
        stateful = known.get(kind)
        if stateful is None:
            stateful = _is_stateful(kind)
        if stateful and node.state_changed:  # type: ignore[attr-defined]
            return True
        for child in node.inputs:
            child.accept(collector)  # appends the operators under it to the stack
    return False


def save_subscription(
    handle: SubscriptionHandle,
    mode: CheckpointMode = CheckpointMode.FULL,
    codec: StateCodec = DEFAULT_CODEC,
) -> bytes | None:
    """The state of every stateful node under ``handle`` as one blob; in differential mode ``None`` when no node
    is dirty. Every saved node stays dirty until :func:`confirm_saved` (call it once the blob is committed).

    An operator's failure is raised as :class:`OperatorStateError` naming it and its path; an unsupported value
    as :class:`StateEncodeError`.
    """
    if mode is CheckpointMode.DIFFERENTIAL and not has_state_changed(handle):
        return None
    writer = BlobWriter(codec)
    write = writer.write_node
    for node, path in _stateful_list(handle):
        name, version = node.name, node.version
        try:
            write(path, name, version, node.save_state)
        except StateError:
            raise
        except Exception as error:
            raise OperatorStateError(
                f"operator {name!r} at path {format_path(path)} failed to save its state: {error!r}"
            ) from error
    return writer.finish()


def load_subscription(
    handle: SubscriptionHandle,
    blob: bytes,
    codec: StateCodec = DEFAULT_CODEC,
    where: str = "state blob",
) -> None:
    """Load ``blob`` into the tree under ``handle`` (after ``set_context``, before ``start``).

    The blob is verified first (checksum, framing); then each stateful node, in pre-order, must match the next
    saved record by path and name (:class:`StateShapeError`), and the saved version must be the node's own or
    one it declares it loads (:class:`StateVersionError`). ``where`` (e.g. the store key) starts every message.
    If loading fails, the tree is partly loaded and must be discarded; nothing is written anywhere.
    """
    saved = read_blob(blob, codec, where)
    count = 0
    for node, path in stateful_nodes(handle):
        if count == len(saved):
            raise StateShapeError(
                f"{where}: the live tree has operator {node.name!r} at path {format_path(path)}, which the saved "
                f"state does not have (it holds {len(saved)} nodes); the query's shape changed"
            )
        record = saved[count]
        count += 1
        _check_node(node, path, record, where)
        try:
            node.load_state(record.reader(codec, where), record.version)
        except StateError:
            raise
        except Exception as error:
            raise OperatorStateError(
                f"{where}: operator {node.name!r} at path {format_path(path)} failed to load its state: {error!r}"
            ) from error
    if count < len(saved):
        extra = saved[count]
        raise StateShapeError(
            f"{where}: the saved state has operator {extra.name!r} at path {format_path(extra.path)}, which the "
            f"live tree does not have (it has {count} stateful nodes); the query's shape changed"
        )


def _check_node(node: StatefulOperator, path: Path, record: NodeState, where: str) -> None:
    if record.path != path or record.name != node.name:
        raise StateShapeError(
            f"{where}: the saved state has operator {record.name!r} at path {format_path(record.path)} where the "
            f"live tree has operator {node.name!r} at path {format_path(path)}; the query's shape changed"
        )
    if record.version != node.version and record.version not in getattr(node, "older_versions", ()):
        raise StateVersionError(node.name, path, record.version, node.version)


def state_loader(
    blob: bytes,
    codec: StateCodec = DEFAULT_CODEC,
    where: str = "state blob",
) -> Callable[[SubscriptionHandle], None]:
    """A load step for :func:`reaqtive.core.visitors.initialize`: ``initialize(h, ctx, load_state=state_loader(b))``."""

    def load(handle: SubscriptionHandle) -> None:
        load_subscription(handle, blob, codec, where)

    return load


def confirm_saved(handle: SubscriptionHandle) -> None:
    """Tell every stateful node under ``handle`` that its last save was committed (``on_state_saved``).

    Call it only for subscriptions whose blob was in the committed checkpoint; changes made after the save
    keep their nodes dirty.
    """
    for node, _ in stateful_nodes(handle):
        node.on_state_saved()
