"""Upgrading a running query in place: which operators of the new definition find their state in the old one.

``Engine.update_subscription(uri, new_query)`` (:mod:`reaqtive.engine.upgrading`) replaces a subscription's
definition at one checkpoint boundary. This module decides, node by node, what the new operator tree starts from:

* **Identity.** A stateful operator under a ``.named(name)`` part (:mod:`reaqtive.operators.named`) is known as
  ``name`` plus its place *below that part* plus its operator name; any other as its path from the root plus its
  operator name. Names come first: a named operator is matched by its name (so moving a named part elsewhere in
  the tree keeps its state), or, when the old definition had no such name, with the unnamed operator at its own
  path (a part named only now); an unnamed one only with an unnamed one at the same path with the same operator.
  A different name is a different part.
* **What moves.** A matched operator whose saved version is its own (``moved``), or one it declares it loads
  (``older_versions``: ``migrated``, through its ``load_older_state_core``), starts from the old state's
  segment. A matched operator whose saved version it does not load, or a new one, starts empty (``reset``) —
  unless the caller required state (``require_state=True``), which refuses the update. Old operators no new one
  matched are ``dropped``.

Inner units (inner subscriptions of ``group_by``/``flat_map``/windows, pages of keyed tables) are stored under the
subscription's URI by ids their owner allocates in tree order; they follow their owner when it moves and the new
tree allocates the same ids (the owner is the first of its kind in tree order, in both). An owner whose inner
units cannot be found again fails to start, and the update is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from reaqtive.core.operator import Operator, StatefulOperator
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.core.visitors import SubscriptionVisitor
from reaqtive.engine.engine_errors import UpdateError
from reaqtive.operators.named import NamedHandle
from reaqtive.state.codec import DEFAULT_CODEC, StateCodec
from reaqtive.state.framing import NodeState, Path, read_blob
from reaqtive.state.state_errors import OperatorStateError, StateError, format_path

__all__ = [
    "Identity",
    "NodeChange",
    "UpdatePlan",
    "identities",
    "migrating_loader",
    "old_states",
    "IncompatibleState",
    "plan_update",
    "recording_loader",
    "planned_states",
    "matched_record",
    "records_by_path",
]

Identity = tuple[str, str, Path, str]
"""``("name", name, place below it, operator)`` or ``("path", "", path, operator)``."""

Action = Literal["moved", "migrated", "reset", "dropped"]

UNMATCHED: Final = ("empty", "backfill")


@dataclass(frozen=True, slots=True)
class NodeChange:
    """What happens to one stateful operator: ``action``, its ``operator`` name, its ``path`` in the new tree
    (the old one's for ``dropped``), its ``name`` (``.named``) if any, the old ``saved`` and its new ``version``,
    and why (``reason``)."""

    action: Action
    operator: str
    path: Path
    name: str | None
    saved: tuple[int, ...] | None
    version: tuple[int, ...] | None
    reason: str

    def describe(self) -> str:
        """One line for people: ``moved reaqtive:scan at 0/0 (named 'counts')``."""
        where = f"{self.operator} at {format_path(self.path)}"
        if self.name is not None:
            where += f" (named {self.name!r})"
        return f"{self.action:<8} {where}: {self.reason}"


@dataclass(frozen=True, slots=True)
class UpdatePlan:
    """What an update does (``update_subscription(..., dry_run=True)`` returns it and changes nothing): each new
    stateful operator's change and each old one dropped, the ``unmatched`` choice, and whether the new
    definition is rebuilt by a ``backfill`` from ``start``."""

    uri: str
    changes: tuple[NodeChange, ...]
    unmatched: str = "empty"
    backfill: object = None
    notes: tuple[str, ...] = field(default=())

    def of(self, action: Action) -> list[NodeChange]:
        """The changes of one kind."""
        return [change for change in self.changes if change.action == action]

    @property
    def matched(self) -> list[NodeChange]:
        """The operators that start from the old state (moved or migrated)."""
        return [change for change in self.changes if change.action in ("moved", "migrated")]

    def describe(self) -> str:
        """The plan as text, one operator a line."""
        head = f"update of {self.uri!r}: {len(self.matched)} matched, {len(self.of('reset'))} reset, " \
               f"{len(self.of('dropped'))} dropped; unmatched operators: {self.unmatched}"
        if self.unmatched == "backfill":
            head += f" (the whole new definition is rebuilt by a backfill from start={self.backfill!r})"
        return "\n".join([head, *(f"  {change.describe()}" for change in self.changes), *self.notes])


class _Collector(SubscriptionVisitor):
    __slots__ = ("found",)

    def __init__(self) -> None:
        self.found: list[Operator] = []

    def visit(self, node: Operator | None) -> None:
        if node is not None:
            self.found.append(node)


def _children(handles: tuple[SubscriptionHandle, ...] | list[SubscriptionHandle],
              label: tuple[str, Path] | None) -> list[tuple[Operator, tuple[str, Path] | None]]:
    """The operators under ``handles`` in order, each with its label: the name of the nearest named part above
    it and its place below it (a named handle starts a label; otherwise a child extends its parent's)."""
    result: list[tuple[Operator, tuple[str, Path] | None]] = []
    for handle in handles:
        collector = _Collector()
        handle.accept(collector)
        if isinstance(handle, NamedHandle):
            result.extend((node, (handle.name, (index,))) for index, node in enumerate(collector.found))
        else:
            result.extend((node, label) for node in collector.found)
    return result


def identities(handle: SubscriptionHandle) -> Iterator[tuple[StatefulOperator, Path, Identity]]:
    """Every stateful operator under ``handle`` with its path and its identity, in the pre-order of the state
    traversals (its inputs are enumerated after the consumer handled it, as a load may rebuild them)."""
    roots = _children((handle,), None)
    stack: list[tuple[Operator, Path, tuple[str, Path] | None]] = [
        (node, (i,), label) for i, (node, label) in reversed(list(enumerate(roots)))]
    while stack:
        node, path, label = stack.pop()
        if isinstance(node, StatefulOperator):
            identity: Identity = ("name", label[0], label[1], node.name) if label is not None \
                else ("path", "", path, node.name)
            yield node, path, identity
        inputs = node.inputs
        if inputs:
            children = _children(list(inputs), label)
            for i in range(len(children) - 1, -1, -1):
                child, child_label = children[i]
                # Below a label, a child's place extends its parent's (its index among the parent's inputs).
                if child_label is label and label is not None:
                    child_label = (label[0], (*label[1], i))
                stack.append((child, (*path, i), child_label))


def _check_unique_names(handle: SubscriptionHandle) -> None:
    """Two operators of one definition with the same identity (a name given to two parts, or one named query
    used twice) would take the same old state: refused."""
    seen: dict[Identity, Path] = {}
    for _, path, identity in identities(handle):
        if identity in seen:
            raise UpdateError(f"the name {identity[1]!r} is given to two parts of the new definition (operator "
                              f"{identity[3]!r} at {format_path(seen[identity])} and at {format_path(path)}): a name "
                              "says which old state a part takes, so each part needs its own")
        seen[identity] = path


def _unambiguous(found: dict[Identity, NodeState], handle: SubscriptionHandle) -> dict[Identity, NodeState]:
    """``found`` without the identities two operators of the old tree share (a name given twice): which of them a
    new operator should take is not known, so neither is taken."""
    counts: dict[Identity, int] = {}
    for _, _, identity in identities(handle):
        counts[identity] = counts.get(identity, 0) + 1
    return {identity: record for identity, record in found.items() if counts.get(identity, 0) < 2}


def old_states(handle: SubscriptionHandle, blob: bytes | None, *, where: str,
               codec: StateCodec = DEFAULT_CODEC) -> dict[Identity, NodeState]:
    """The saved record of each stateful operator of the running tree ``handle`` by identity (the records of
    ``blob``, which was saved from that tree, by path)."""
    if blob is None:
        return {}
    by_path = records_by_path(blob, where=where, codec=codec)
    found: dict[Identity, NodeState] = {}
    for _, path, identity in identities(handle):
        record = by_path.get(path)
        if record is not None and record.name == identity[3]:
            found[identity] = record
    return _unambiguous(found, handle)


def records_by_path(blob: bytes | None, *, where: str, codec: StateCodec = DEFAULT_CODEC) -> dict[Path, NodeState]:
    """The records of ``blob`` by path (none for ``None``)."""
    return {} if blob is None else {record.path: record for record in read_blob(blob, codec, where)}


def planned_states(handle: SubscriptionHandle) -> dict[Identity, NodeState]:
    """What a checkpoint of the running tree ``handle`` would save now, for a plan: each stateful operator's
    identity with its name and current version (no data: a plan loads nothing)."""
    return _unambiguous({identity: NodeState(path, node.name, tuple(node.version), b"")
                         for node, path, identity in identities(handle)}, handle)


def _name_of(identity: Identity) -> str | None:
    return identity[1] if identity[0] == "name" else None


class IncompatibleState(Exception):  # noqa: N818 (a signal between the loader and the engine, not an error)
    """A matched operator refused the old state (its load raised a :class:`StateError`: e.g. a ``combine_latest``
    of another number of sources): the engine binds the new tree again with that operator reset."""

    def __init__(self, identity: Identity, error: StateError) -> None:
        super().__init__(str(error))
        self.identity = identity
        self.error = error


def _decide(
    node: StatefulOperator, path: Path, identity: Identity, old: Mapping[Identity, NodeState],
    fallback: Mapping[Path, NodeState], *, refused: Mapping[Identity, str] | None = None,
) -> tuple[Action, str, NodeState | None]:
    if refused and identity in refused:
        return "reset", f"its old state does not fit it: {refused[identity]}", None
    record = old.get(identity)
    if record is None and identity[0] == "name":  # a part named only now: the unnamed operator at its old place
        record = old.get(("path", "", path, node.name))
    kept = ""
    if record is None:
        record = fallback.get(path)
        if record is None or record.name != node.name:
            return "reset", "new: no operator of the old definition has its identity", None
        kept = " kept at the swap"
    if record.version == node.version:
        return "moved", f"state{kept} moves (version {'.'.join(map(str, node.version))})", record
    if record.version in getattr(node, "older_versions", ()):
        return "migrated", (f"state{kept} migrates from version {'.'.join(map(str, record.version))} to "
                            f"{'.'.join(map(str, node.version))}"), record
    return "reset", (f"its saved version {'.'.join(map(str, record.version))} is not one it loads (it is "
                     f"{'.'.join(map(str, node.version))})"), None


def plan_update(uri: str, new_handle: SubscriptionHandle, old: Mapping[Identity, NodeState], *,
                unmatched: str = "empty", backfill: object = None,
                fallback: Mapping[Path, NodeState] | None = None,
                refused: Mapping[Identity, str] | None = None) -> UpdatePlan:
    """The plan of an update: ``new_handle`` is the new tree, subscribed (its inputs exist), not started.
    ``fallback``: records by path for operators ``old`` has no identity of (a rollback's state kept at the
    swap, saved by the very definition rolled back to). ``refused``: the identities whose operator refused its
    old state, with why (they start empty)."""
    _check_unique_names(new_handle)
    changes: list[NodeChange] = []
    used: set[int] = set()  # the old records taken (by id: a record may be known under two identities)
    refused_records: set[int] = set()
    for node, path, identity in identities(new_handle):
        action, reason, record = _decide(node, path, identity, old, fallback or {}, refused=refused)
        matched = _decide(node, path, identity, old, {})[2]  # what it would have taken, refused or not
        if matched is not None:
            (used if record is not None else refused_records).add(id(matched))
        changes.append(NodeChange(action, node.name, path, _name_of(identity),
                                  None if matched is None else tuple(matched.version), tuple(node.version), reason))
    seen: set[int] = set()
    for identity, record in old.items():
        if id(record) in used or id(record) in seen:
            continue
        seen.add(id(record))
        reason = "its state does not fit the new operator with its identity" if id(record) in refused_records \
            else "no operator of the new definition has its identity"
        changes.append(NodeChange("dropped", record.name, record.path, _name_of(identity),
                                  tuple(record.version), None, reason))
    return UpdatePlan(uri, tuple(changes), unmatched, backfill)


def matched_record(node: StatefulOperator, path: Path, identity: Identity,
                   old: Mapping[Identity, NodeState]) -> NodeState | None:
    """The old record ``node`` takes by its identity (whatever its version), if any."""
    return _decide(node, path, identity, old, {})[2] or old.get(identity) or (
        old.get(("path", "", path, node.name)) if identity[0] == "name" else None)


def migrating_loader(
    old: Mapping[Identity, NodeState], *, where: str, fallback: Mapping[Path, NodeState] | None = None,
    refused: Mapping[Identity, str] | None = None, codec: StateCodec = DEFAULT_CODEC,
) -> Callable[[SubscriptionHandle], None]:
    """A load step for a new tree: each operator whose identity the old state has (or, failing that, whose path
    ``fallback`` has, with its operator), in a version it loads, loads that record; every other one is left as
    new (it starts empty). An operator that refuses its record raises :class:`IncompatibleState` (the tree is
    partly loaded: bind it again with that identity in ``refused``)."""
    kept = fallback or {}

    def load(handle: SubscriptionHandle) -> None:
        for node, path, identity in identities(handle):
            action, _, record = _decide(node, path, identity, old, kept, refused=refused)
            if record is None:
                continue
            try:
                node.load_state(record.reader(codec, where), record.version)
            except StateError as error:
                raise IncompatibleState(identity, error) from error
            except Exception as error:
                raise OperatorStateError(f"{where}: operator {node.name!r} at path {format_path(path)} failed to "
                                         f"load the state of the old definition ({action}): {error!r}") from error

    return load



def recording_loader(old: Mapping[Identity, NodeState], refused: dict[Identity, str], *, where: str,
                     fallback: Mapping[Path, NodeState] | None = None,
                     codec: StateCodec = DEFAULT_CODEC) -> Callable[[SubscriptionHandle], None]:
    """For a plan (a tree thrown away after): load each matched record as :func:`migrating_loader` does, and
    put each operator that refuses its own with a :class:`StateError` in ``refused``, with why, instead of
    raising."""
    kept = fallback or {}

    def load(handle: SubscriptionHandle) -> None:
        for node, path, identity in identities(handle):
            record = _decide(node, path, identity, old, kept)[2]
            if record is None:
                continue
            try:
                node.load_state(record.reader(codec, where), record.version)
            except StateError as error:
                refused[identity] = str(error)

    return load
