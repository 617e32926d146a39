"""Checkpoint stores: where checkpoints go, atomically.

A store holds blobs under ``(category, key)`` — e.g. ``("state", "sub://alerts/7")`` — and changes them only
through a :class:`CheckpointTransaction`: any number of ``put``/``delete``/``clear`` calls, then ``commit()``,
which applies all of them or none. Nothing a transaction does is visible before its commit, and a crash at any
moment leaves the store at the previous or the next checkpoint, never between. :meth:`CheckpointStore.read`
returns the latest committed checkpoint as an immutable :class:`CheckpointSnapshot`.

Implementations: :class:`~reaqtive.state.InMemoryCheckpointStore` (tests; with fault injection) and
:class:`~reaqtive.state.SqliteCheckpointStore` (the default durable store).

A store on a database (SQLite, PostgreSQL) can also carry, in the same commit, changes to other tables of that
database (:meth:`CheckpointTransaction.run_in_commit`): a host's own rows change atomically with its blobs.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ClassVar, Final

from reaqtive.state.state_errors import StoreError

__all__ = [
    "CheckpointSnapshot",
    "CheckpointStore",
    "CheckpointTransaction",
    "CommitHook",
    "StoreChanges",
]

CommitHook = Callable[[Any], None]
"""Called with the store's database connection inside a commit's transaction (see
:meth:`CheckpointTransaction.run_in_commit`)."""

_EMPTY: Final[Mapping[str, bytes]] = {}


@dataclass
class StoreChanges:
    """The changes one transaction collected: categories to clear first, then puts (bytes) and deletes (None),
    then the hooks that change other tables of the store's database (:meth:`CheckpointTransaction.run_in_commit`)."""

    clears: set[str] = field(default_factory=set)
    writes: dict[tuple[str, str], bytes | None] = field(default_factory=dict)
    hooks: list[CommitHook] = field(default_factory=list)

    @property
    def bytes_written(self) -> int:
        """The total size of the blobs put."""
        return sum(len(value) for value in self.writes.values() if value is not None)


class CheckpointTransaction(ABC):
    """One checkpoint's changes to a store, applied atomically by :meth:`commit`.

    Changes are buffered in memory until the commit, so a transaction can be filled at leisure and rolled
    back for free. Use it as a context manager: leaving the block without a commit rolls back.
    """

    def __init__(self) -> None:
        self._changes = StoreChanges()
        self._finished = False
        self._lock = threading.Lock()

    # -- collecting changes ------------------------------------------------------------------------------------

    def put(self, category: str, key: str, blob: bytes | bytearray | memoryview) -> None:
        """Store ``blob`` under ``(category, key)``, replacing what is there (at commit)."""
        _check_name(category, key)
        data = bytes(blob)
        with self._lock:
            self._check_open()
            self._before_put(category, key, data)
            self._changes.writes[(category, key)] = data

    def delete(self, category: str, key: str) -> None:
        """Remove ``(category, key)`` at commit; not an error if it does not exist."""
        _check_name(category, key)
        with self._lock:
            self._check_open()
            self._changes.writes[(category, key)] = None

    def clear(self, category: str) -> None:
        """Remove every key of ``category`` at commit (puts made after this call are kept)."""
        _check_name(category, "")
        with self._lock:
            self._check_open()
            writes = self._changes.writes
            for pending in [k for k in writes if k[0] == category]:
                del writes[pending]
            self._changes.clears.add(category)

    def run_in_commit(self, hook: CommitHook) -> None:
        """Call ``hook(connection)`` inside the commit's database transaction, after the blobs are written, with
        the store's own connection (an ``sqlite3.Connection``, or a psycopg one): the hook's changes to other
        tables of the same database commit with the blobs or not at all (if it raises, nothing is committed).
        Only a store on a database can do this; any other raises :class:`StoreError` here, at once."""
        with self._lock:
            self._check_open()
            if not self._runs_hooks:
                raise StoreError(f"{type(self).__name__}: this store cannot change other tables in its commits "
                                 "(only a store on a database, SQLite or PostgreSQL, can)")
            self._changes.hooks.append(hook)

    _runs_hooks: ClassVar[bool] = False
    """Whether the store's ``_apply`` calls the hooks of :meth:`run_in_commit` (set by stores on a database)."""

    @property
    def changes(self) -> StoreChanges:
        """What the transaction holds so far (read-only use)."""
        return self._changes

    # -- finishing ---------------------------------------------------------------------------------------------

    def commit(self) -> int:
        """Apply every change atomically; return the store's new checkpoint id. On failure nothing was applied,
        the transaction is rolled back and a :class:`StoreError` is raised."""
        with self._lock:
            self._check_open()
            self._finished = True
            changes = self._changes
        return self._apply(changes)

    def rollback(self) -> None:
        """Drop the changes. A no-op once committed or rolled back (it never undoes a commit)."""
        with self._lock:
            self._finished = True
            self._changes = StoreChanges()

    @property
    def is_finished(self) -> bool:
        """Whether the transaction was committed (or tried to) or rolled back."""
        return self._finished

    def __enter__(self) -> CheckpointTransaction:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if not self._finished:
            self.rollback()

    # -- for implementations -----------------------------------------------------------------------------------

    def _before_put(self, category: str, key: str, data: bytes) -> None:  # noqa: B027  (a hook, not abstract)
        """Called for each put (fault injection hooks in here)."""

    @abstractmethod
    def _apply(self, changes: StoreChanges) -> int:
        """Apply ``changes`` atomically and return the new checkpoint id, or raise :class:`StoreError`."""

    def _check_open(self) -> None:
        if self._finished:
            raise StoreError("the checkpoint transaction is already committed or rolled back")


class CheckpointSnapshot:
    """The latest committed checkpoint of a store, frozen at the moment it was read.

    ``checkpoint_id`` counts the store's commits (0: nothing was ever committed).
    """

    __slots__ = ("_data", "checkpoint_id", "damaged")

    def __init__(
        self,
        checkpoint_id: int,
        data: Mapping[str, Mapping[str, bytes]],
        damaged: Mapping[tuple[str, str], Exception] | None = None,
    ) -> None:
        self.checkpoint_id = checkpoint_id
        self._data = data
        self.damaged: Mapping[tuple[str, str], Exception] = dict(damaged or {})
        """Blobs left out because they failed verification (a non-strict read): ``(category, key)`` → error."""

    def categories(self) -> list[str]:
        """The categories that hold at least one key, sorted."""
        return sorted(category for category, items in self._data.items() if items)

    def keys(self, category: str) -> list[str]:
        """The keys of ``category``, sorted (empty if there are none)."""
        return sorted(self._data.get(category, _EMPTY))

    def get(self, category: str, key: str) -> bytes | None:
        """The blob under ``(category, key)``, or ``None``."""
        return self._data.get(category, _EMPTY).get(key)

    def items(self, category: str) -> Iterator[tuple[str, bytes]]:
        """``(key, blob)`` pairs of ``category``, sorted by key."""
        items = self._data.get(category, _EMPTY)
        for key in sorted(items):
            yield key, items[key]

    def as_dict(self) -> dict[str, dict[str, bytes]]:
        """Everything, as plain dictionaries (non-empty categories only)."""
        return {category: dict(items) for category, items in self._data.items() if items}

    def __repr__(self) -> str:
        sizes = ", ".join(f"{category}: {len(self._data[category])}" for category in self.categories())
        return f"<CheckpointSnapshot #{self.checkpoint_id} {{{sizes}}}>"


class CheckpointStore(ABC):
    """Where checkpoints are committed. Thread-safe; usable as a context manager (closes on exit)."""

    @abstractmethod
    def begin(self) -> CheckpointTransaction:
        """Start a transaction (one per checkpoint)."""

    @abstractmethod
    def read(self, *, strict: bool = True) -> CheckpointSnapshot:
        """The latest committed checkpoint. ``strict``: raise on a damaged blob; otherwise leave it out and list
        it in ``snapshot.damaged``."""

    def close(self) -> None:  # noqa: B027  (nothing to release by default)
        """Release the store's resources; committed data stays."""

    def __enter__(self) -> CheckpointStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _check_name(category: str, key: str) -> None:
    if not isinstance(category, str) or not category:
        raise TypeError(f"category must be a non-empty str, got {category!r}")
    if not isinstance(key, str):
        raise TypeError(f"key must be a str, got {key!r}")
