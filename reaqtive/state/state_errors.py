"""Exception types of the state layer.

Every failure of saving, loading, storing or checkpointing state has its own type under :class:`StateError`, and
each message names *what* went wrong and *where* (the operator, its path in the tree, the store key). Loading bad
input never loses stored data: these errors are raised before anything is written back.

::

    ReaqtiveError
    └── StateError
        ├── StateFormatError          malformed bytes: truncated, read past a segment, wrong entry kind
        │   └── StateChecksumError    a stored blob does not match its checksum
        ├── StateEncodeError          a value of a type the state encoding does not support
        ├── StateVersionError         saved with a version the live operator does not load
        ├── StateShapeError           the saved tree and the live tree differ
        ├── OperatorStateError        an operator's own save/load code raised
        ├── StoreError                the checkpoint store failed (names the file and the operation)
        │   ├── NotAStoreError        the file is not a reaqtive checkpoint store
        │   ├── UnknownStoreVersionError
        │   ├── StoreCorruptError     SQLite reports the file itself damaged (malformed pages, not a database)
        │   ├── StoreLockedError      another engine holds the store (one writer per store)
        │   ├── DamagedRowError       a row does not match its checksum (also a StateChecksumError)
        │   └── InjectedFaultError    a fault injected by a test store
        └── CheckpointError           a checkpoint failed (it was rolled back; state stays dirty)
            └── CheckpointInProgressError
"""

from __future__ import annotations

import os

from reaqtive.core.errors import ReaqtiveError

__all__ = [
    "CheckpointError",
    "CheckpointInProgressError",
    "DamagedRowError",
    "InjectedFaultError",
    "MissingStateError",
    "NotAStoreError",
    "OperatorStateError",
    "StateChecksumError",
    "StateEncodeError",
    "StateError",
    "StateFormatError",
    "StateShapeError",
    "StateVersionError",
    "StoreCorruptError",
    "StoreError",
    "StoreLayoutError",
    "StoreLockedError",
    "UnknownStoreVersionError",
    "format_path",
]


def format_path(path: tuple[int, ...] | None) -> str:
    """A node path for messages: ``"0/2/1"`` (input indices from the subscription's root), or ``"?"``."""
    if path is None:
        return "?"
    return "/".join(map(str, path)) or "(root)"


class StateError(ReaqtiveError):
    """Base class of every error of the state layer."""


class StateFormatError(StateError, ValueError):
    """State bytes are malformed: truncated, damaged, not a state blob, or read beyond what was written."""


class StateChecksumError(StateFormatError):
    """A stored blob does not match its checksum: it was damaged after it was written."""


class StateEncodeError(StateError, TypeError):
    """A value cannot be written as state (an unsupported type, a naive use of a registered type, ...)."""


class StateVersionError(StateError):
    """State saved in a version the live operator does not load.

    ``operator``: the persisted name; ``path``: where in the tree; ``saved`` and ``current``: the versions.
    """

    def __init__(
        self,
        operator: str,
        path: tuple[int, ...] | None,
        saved: tuple[int, ...],
        current: tuple[int, ...],
        detail: str = "",
    ) -> None:
        hint = detail or (
            "declare the old version in `older_versions` and read it in `load_older_state_core` to migrate"
        )
        super().__init__(
            f"operator {operator!r} at path {format_path(path)}: state has version {_v(saved)}, "
            f"the operator is version {_v(current)} and does not load {_v(saved)} ({hint})"
        )
        self.operator = operator
        self.path = path
        self.saved = saved
        self.current = current


class StateShapeError(StateError):
    """The saved tree and the live tree differ: a node is missing, extra, moved or of another operator.

    This is what a changed query definition looks like on load; loading stops rather than feed one operator's
    state to another (the original Reaqtive matched state by position only).
    """


class MissingStateError(StateError, LookupError):
    """State that must be in the store is not there (a row deleted or lost): the message names what is missing.
    A host must not start the query from empty state instead."""


class OperatorStateError(StateError):
    """An operator's own ``save_state``/``load_state`` raised; the message names the operator and its path and
    the original exception is the ``__cause__``."""


class StoreError(StateError):
    """A store failed to open, read or commit; the message names the file and the operation. Every SQLite error
    of the stores arrives as one of these (never a bare ``sqlite3.Error``)."""


class NotAStoreError(StoreError):
    """The file exists but is not a reaqtive checkpoint store (it is left untouched)."""


class UnknownStoreVersionError(StoreError):
    """The store was written by another version of reaqtive with a schema this version does not know."""

    def __init__(self, where: str, found: object, supported: int, *, migrates: tuple[int, ...] = ()) -> None:
        older = f" and migrates version {', '.join(map(str, migrates))}" if migrates else ""
        super().__init__(
            f"{where}: checkpoint store schema version {found!r} is not supported by this version of reaqtive "
            f"(it reads version {supported}{older}); the store was left untouched"
        )
        self.where = where
        self.found = found
        self.supported = supported
        self.migrates = migrates


class StoreCorruptError(StoreError):
    """SQLite reports the store file itself damaged ("database disk image is malformed", "file is not a
    database"): a torn or overwritten page, a truncated file. The message names the file and the operation; nothing
    was written. Restore the file from a backup (``reaqtive inspect`` reads what is still readable)."""


class StoreOpenError(StoreError):
    """A store file could not be opened or created where it is: its directory is missing, or it or its directory
    is not writable by this process. The message names the path, the cause and the fix; ``path`` and ``cause``
    (``"directory missing"``, ``"not a directory"``, ``"directory not writable"``, ``"file not writable"``)
    say it to a program."""

    def __init__(self, message: str, *, path: str, cause: str) -> None:
        super().__init__(message)
        self.path = path
        self.cause = cause


class StoreLockedError(StoreError):
    """The store is open by another engine, in this process or another one: a store has one writer.

    ``path``: the store; ``pid``: the process holding it, as it wrote into the lock file (``None`` if unknown);
    ``inspectable``: whether ``reaqtive inspect`` can read the store meanwhile (a file: yes; PostgreSQL: no).
    The lock is the operating system's, so a holder that dies, even by ``SIGKILL``, releases it.
    """

    def __init__(self, path: str, pid: int | None, *, inspectable: bool = True) -> None:
        if pid is None:
            holder = "another engine"
        elif pid == os.getpid():
            holder = f"another engine of this process (pid {pid})"
        else:
            holder = f"another engine (pid {pid})"
        meanwhile = " (the read-only `reaqtive inspect` works meanwhile)" if inspectable else ""
        super().__init__(f"{path}: the store is open by {holder}; a store has one writer. Close that engine first"
                         f"{meanwhile}")
        self.path = path
        self.pid = pid


class DamagedRowError(StoreError, StateChecksumError):
    """A stored row does not match its checksum: its content was damaged, or it was moved to another row's place
    (the checksum covers the row's identifying columns too). ``table`` names the table and ``row`` the row
    (``category/key``, ``subscription#seq``, ...); the damaged bytes stay in the file."""

    def __init__(self, message: str, table: str, row: str) -> None:
        super().__init__(message)
        self.table = table
        self.row = row


class InjectedFaultError(StoreError):
    """A failure injected on purpose by :class:`~reaqtive.state.InMemoryCheckpointStore` (for tests)."""


class CheckpointError(StateError):
    """A checkpoint failed. ``phase`` says where (``"pause"``, ``"serialize"``, ``"commit"`` or ``"confirm"``).

    Unless ``committed`` is true the store transaction was rolled back and every node is still dirty, so the
    next checkpoint saves it again. ``committed`` is true only for a ``"confirm"`` failure: the checkpoint is
    durable but an ``on_state_saved`` callback raised.
    """

    def __init__(self, message: str, phase: str, *, committed: bool = False, result: object = None) -> None:
        super().__init__(message)
        self.phase = phase
        self.committed = committed
        self.result = result
        """For a ``"confirm"`` failure: the :class:`~reaqtive.state.CheckpointResult` of the committed checkpoint."""


class CheckpointInProgressError(CheckpointError, RuntimeError):
    """A checkpoint was started while another one of the same checkpointer was still running."""

    def __init__(self) -> None:
        super().__init__("a checkpoint is already in progress; checkpoints of one host never overlap", "pause")


def _v(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version)) or "()"


class StoreLayoutError(StoreCorruptError):
    """A store whose layout metadata (a schema or layout version in ``reaqtive_meta``) does not match its
    tables: a version over the tables of another, a table or a column missing or extra. The metadata or the
    tables were damaged or changed by hand; the message names the claimed layout and what differs. The file
    (or database) is left untouched."""
