"""The dirty registry: which units have something to save, reported as it happens.

A differential checkpoint must cost what changed, not what exists. Asking every operator of every subscription
``state_changed`` costs a few microseconds per subscription, most of them clean; instead, the operators *report*
to a :class:`DirtyRegistry` owned by the checkpointing side, and the checkpoint visits only the **units** that
reported: a unit is what a host saves as one blob, a subscription or an inner subscription of a higher-order
operator, named by its operators' context (``instance_id``).

How a change reaches the registry (the host puts the registry in its execution environment as ``dirty``; a
stateful operator finds it in ``set_context``):

* **A change.** Operators set ``self._state.changed = True`` on their per-element path. After each save the
  node's tracker waits for the first such store, reports the unit, and turns back into a plain slot: one report
  per unit and checkpoint interval, and a plain attribute store on the hot path (see
  :mod:`reaqtive.state.tracking`).
* **A new node** (never saved, not loaded) reports its unit when it starts.
* **Computed dirtiness.** A node whose ``state_changed`` is computed rather than flagged (it overrides the
  property: a count buffer compares its list with the saved one) is *watched*: the registry asks it at every
  checkpoint. A node may also watch itself only while it needs to: the engine's stream reader, which is clean
  while it is caught up, watches itself while it may lag (bounded demand) or while what it saved is a lagging
  watermark, since falling behind changes its saved form without an event reaching it.
* **A failed checkpoint.** Whatever a checkpoint saved but did not commit goes back into the registry (its nodes
  are "saved but not confirmed", dirty until a commit).

A host may keep small rows of its own outside the units' blobs and also want only the ones that changed: the
registry keeps a second set for them (:meth:`DirtyRegistry.note_moved` / :meth:`DirtyRegistry.take_moved`); the
engine's output counters use it (see :mod:`reaqtive.engine.egress`).

The checkpoint (paused) calls :meth:`DirtyRegistry.take`: the units reported since the last take, plus those of
watched nodes that say they changed; the registry starts afresh, and a change made after the take (while the
commit is in flight) is reported again, since the save re-armed the tracker.

The invariant that makes a differential checkpoint lose nothing: *every unit with a dirty node is in the registry
(or in the checkpoint in flight)*. ``tests/state/test_dirty.py`` and ``tests/engine/test_dirty_checkpoints.py``
check it against a walk of every operator and against the store of a twin checkpointed in full.

::

    environment = InnerEnvironment()      # its registry: environment.dirty
    handle = query.subscribe(observer)
    initialize(handle, OperatorContext("sub://1", scheduler, execution_environment=environment))
    ...                                   # events: the first change after each checkpoint reports "sub://1"
    checkpointer.checkpoint({"sub://1": handle, **environment.inner_subscriptions()}, dirty=environment.dirty)
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Protocol

__all__ = ["DirtyRegistry", "WatchedNode"]


class WatchedNode(Protocol):
    """What a watched node offers the registry (the stateful bases implement it)."""

    @property
    def state_changed(self) -> bool:
        """Whether the node has something to save."""
        ...

    def keep_watching(self) -> bool:
        """Asked after ``state_changed`` at every checkpoint: whether the registry must go on asking."""
        ...


class DirtyRegistry:
    """The units that reported a change since the last checkpoint, and the nodes to ask at every checkpoint.

    Thread-safe: operators report from the scheduler's threads while a commit is in flight.
    """

    __slots__ = ("_lock", "_moved", "_noted", "_watched")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._noted: set[str] = set()
        self._watched: dict[int, tuple[WatchedNode, str]] = {}
        self._moved: set[str] = set()

    def note(self, key: str) -> None:
        """Unit ``key`` has something to save."""
        with self._lock:
            self._noted.add(key)

    def note_all(self, keys: Iterable[str]) -> None:
        """Units ``keys`` have something to save (a checkpoint saved them but did not commit)."""
        with self._lock:
            self._noted.update(keys)

    def watch(self, node: WatchedNode, key: str) -> None:
        """Ask ``node`` (of unit ``key``) at every checkpoint whether it changed, until its ``keep_watching()``
        says no or :meth:`unwatch`."""
        with self._lock:
            self._watched[id(node)] = (node, key)

    def unwatch(self, node: WatchedNode) -> None:
        """Stop asking ``node`` (it was disposed)."""
        with self._lock:
            self._watched.pop(id(node), None)

    def note_moved(self, key: str) -> None:
        """A host row kept outside the units' blobs changed (the engine: subscription ``key``'s output counter)."""
        with self._lock:
            self._moved.add(key)

    def take_moved(self) -> set[str]:
        """The keys of :meth:`note_moved` since the last take (the host re-arms what reports them)."""
        with self._lock:
            moved, self._moved = self._moved, set()
        return moved

    def forget(self, key: str) -> None:
        """Unit ``key`` is gone for good: drop its report (its nodes were disposed, which unwatched them)."""
        with self._lock:
            self._noted.discard(key)
            self._moved.discard(key)

    def take(self) -> set[str]:
        """The units to visit now, while the host's scheduler is paused: those reported since the last take, and
        those of watched nodes that say they changed. Watched nodes that need no more watching are dropped."""
        with self._lock:
            watched = list(self._watched.items())
        found: set[str] = set()
        dropped: list[int] = []
        for ident, (node, key) in watched:
            if node.state_changed:  # may report the unit itself (a computed flag that sets the tracker's)
                found.add(key)
            if not node.keep_watching():
                dropped.append(ident)
        with self._lock:
            for ident in dropped:
                self._watched.pop(ident, None)
            noted, self._noted = self._noted, set()
        noted |= found
        return noted

    @property
    def noted(self) -> frozenset[str]:
        """The units reported since the last :meth:`take` (diagnostics and tests)."""
        with self._lock:
            return frozenset(self._noted)

    def watched(self) -> list[tuple[WatchedNode, str]]:
        """The watched nodes with their units (a snapshot)."""
        with self._lock:
            return list(self._watched.values())

    def __repr__(self) -> str:
        return f"<DirtyRegistry {len(self._noted)} noted, {len(self._watched)} watched>"
