"""An in-memory checkpoint store that is truly transactional, with fault injection for tests.

Unlike the original's test store (which wrote each item when its stream closed, before the commit), nothing a
transaction does is visible before its commit, a failed commit applies nothing, and snapshots taken earlier
never change. Faults can be injected on a commit (before or after it applied) and on a put, so tests can
prove that a failed checkpoint leaves state dirty and the store at the previous checkpoint.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from reaqtive.state.state_errors import InjectedFaultError
from reaqtive.state.store import CheckpointSnapshot, CheckpointStore, CheckpointTransaction, StoreChanges

__all__ = ["InMemoryCheckpointStore"]


@dataclass
class _PutFault:
    category: str | None
    key: str | None
    remaining: int

    def matches(self, category: str, key: str) -> bool:
        return (self.category is None or self.category == category) and (self.key is None or self.key == key)


class InMemoryCheckpointStore(CheckpointStore):
    """A transactional store in a dictionary. ``commits`` counts successful commits, ``last_changes`` holds
    what the last one applied (e.g. to check that a differential checkpoint wrote only what changed)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[str, dict[str, bytes]] = {}
        self._checkpoint_id = 0
        self._commit_faults: list[bool] = []  # one entry per failing commit: True = fail after applying
        self._put_faults: list[_PutFault] = []
        self.commits = 0
        """How many commits succeeded."""
        self.last_changes: StoreChanges | None = None
        """The changes of the last successful commit."""

    # -- fault injection ---------------------------------------------------------------------------------------

    def fail_commits(self, count: int = 1, *, after_apply: bool = False) -> None:
        """Make the next ``count`` commits raise :class:`InjectedFaultError`.

        ``after_apply=False``: the commit applies nothing (a clean failure). ``after_apply=True``: the changes
        are applied, then the commit raises anyway — the ambiguous outcome of a lost acknowledgement.
        """
        with self._lock:
            self._commit_faults.extend([after_apply] * count)

    def fail_puts(self, category: str | None = None, key: str | None = None, count: int = 1) -> None:
        """Make the next ``count`` puts matching ``category``/``key`` (``None``: any) raise
        :class:`InjectedFaultError` from ``put`` itself."""
        with self._lock:
            self._put_faults.append(_PutFault(category, key, count))

    # -- store -------------------------------------------------------------------------------------------------

    def begin(self) -> CheckpointTransaction:
        return _Transaction(self)

    def read(self, *, strict: bool = True) -> CheckpointSnapshot:
        with self._lock:  # memory cannot be damaged: strict or not, everything is returned
            return CheckpointSnapshot(self._checkpoint_id, self._data)

    def _check_put(self, category: str, key: str) -> None:
        with self._lock:
            for fault in self._put_faults:
                if fault.remaining > 0 and fault.matches(category, key):
                    fault.remaining -= 1
                    raise InjectedFaultError(f"injected failure putting {category}/{key}")

    def _apply(self, changes: StoreChanges) -> int:
        with self._lock:
            fault = self._commit_faults.pop(0) if self._commit_faults else None
            if fault is False:
                raise InjectedFaultError("injected commit failure (nothing was applied)")
            # Copy on write: snapshots handed out earlier keep seeing their own dictionaries.
            data = dict(self._data)
            copied: set[str] = set()
            for category in changes.clears:
                data[category] = {}
                copied.add(category)
            for (category, key), value in changes.writes.items():
                if category not in copied:
                    data[category] = dict(data.get(category, {}))
                    copied.add(category)
                if value is None:
                    data[category].pop(key, None)
                else:
                    data[category][key] = value
            self._data = data
            self._checkpoint_id += 1
            if fault is True:
                raise InjectedFaultError("injected commit failure (after the changes were applied)")
            self.commits += 1
            self.last_changes = changes
            return self._checkpoint_id


class _Transaction(CheckpointTransaction):
    def __init__(self, store: InMemoryCheckpointStore) -> None:
        super().__init__()
        self._store = store

    def _before_put(self, category: str, key: str, data: bytes) -> None:
        self._store._check_put(category, key)

    def _apply(self, changes: StoreChanges) -> int:
        return self._store._apply(changes)
