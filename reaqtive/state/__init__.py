"""Operator state: versioned framing, dirty tracking, checkpoint traversals, checkpoint stores and the
checkpoint protocol.

The pieces, bottom to top (``docs/state-format.md`` tells the whole story, with a worked example):

* **values** — :class:`StateCodec` / :func:`register_state_type`: msgpack with a closed set of extension types;
  never pickle, so loading cannot run code from the store;
* **framing** — :class:`SegmentWriter` / :class:`SegmentReader`: one length-prefixed segment per node (and
  nested child segments), so a reader never reads past its node; :func:`read_blob`: a subscription's blob,
  checksummed, one record per stateful node with its path, name and version;
* **operators** — :class:`StatefulOperatorBase` / :class:`StatefulUnaryOperatorBase`: the disposed flag,
  ``save_state_core``/``load_state_core``, versions and migrations, three-state dirty tracking
  (:class:`StateChangedTracker`), reported to a host's :class:`DirtyRegistry` so that a differential checkpoint
  visits only the units that changed;
* **traversals** — :func:`save_subscription` (full or differential), :func:`load_subscription` /
  :func:`state_loader` (checks the tree's shape), :func:`confirm_saved`;
* **stores** — :class:`CheckpointStore` with atomic transactions: :class:`InMemoryCheckpointStore` (with fault
  injection), :class:`SqliteCheckpointStore` and :class:`PostgresCheckpointStore`;
* **protocol** — :class:`Checkpointer`: pause, serialize, resume, commit, confirm.

The SQLite and PostgreSQL stores load on first use (``from reaqtive.state import SqliteCheckpointStore``), and
sqlite3 with them.
"""

from typing import TYPE_CHECKING

from reaqtive.state.bases import StatefulOperatorBase, StatefulUnaryOperatorBase
from reaqtive.state.checkpoint import STATE_CATEGORY, Checkpointer, CheckpointResult, Subscriptions
from reaqtive.state.codec import DEFAULT_CODEC, StateCodec, register_state_type
from reaqtive.state.dirty import DirtyRegistry
from reaqtive.state.environment import InnerEnvironment
from reaqtive.state.framing import (
    BLOB_FORMAT_VERSION,
    BlobWriter,
    NodeState,
    Path,
    SegmentReader,
    SegmentWriter,
    checksum,
    read_blob,
)
from reaqtive.state.memory_store import InMemoryCheckpointStore
from reaqtive.state.state_errors import (
    CheckpointError,
    CheckpointInProgressError,
    DamagedRowError,
    InjectedFaultError,
    MissingStateError,
    NotAStoreError,
    OperatorStateError,
    StateChecksumError,
    StateEncodeError,
    StateError,
    StateFormatError,
    StateShapeError,
    StateVersionError,
    StoreCorruptError,
    StoreError,
    StoreLayoutError,
    StoreLockedError,
    StoreOpenError,
    UnknownStoreVersionError,
)
from reaqtive.state.store import CheckpointSnapshot, CheckpointStore, CheckpointTransaction, StoreChanges
from reaqtive.state.tracking import DirtyState, StateChangedTracker
from reaqtive.state.traversal import (
    CheckpointMode,
    confirm_saved,
    has_state_changed,
    iter_nodes,
    load_subscription,
    save_subscription,
    state_loader,
    stateful_nodes,
)

_LAZY_NAMES = {
    "InvalidDsnError": "postgres_store",
    "PostgresCheckpointStore": "postgres_store",
    "StoreConnectionError": "postgres_store",
    "SCHEMA_VERSION": "sqlite_store",
    "SqliteCheckpointStore": "sqlite_store",
}
"""The names whose module loads on first use (each to its module): the stores, and sqlite3 with them."""

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports them on first use
    from reaqtive.state.postgres_store import InvalidDsnError, PostgresCheckpointStore, StoreConnectionError
    from reaqtive.state.sqlite_store import SCHEMA_VERSION, SqliteCheckpointStore
else:

    def __getattr__(name: str) -> object:
        """PEP 562: the SQLite and PostgreSQL stores load on first use."""
        module = _LAZY_NAMES.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "InnerEnvironment",
    # values
    "DEFAULT_CODEC",
    "StateCodec",
    "register_state_type",
    # framing
    "BLOB_FORMAT_VERSION",
    "BlobWriter",
    "NodeState",
    "Path",
    "SegmentReader",
    "SegmentWriter",
    "checksum",
    "read_blob",
    # operators and dirty tracking
    "DirtyRegistry",
    "DirtyState",
    "StateChangedTracker",
    "StatefulOperatorBase",
    "StatefulUnaryOperatorBase",
    # traversals
    "CheckpointMode",
    "confirm_saved",
    "has_state_changed",
    "iter_nodes",
    "load_subscription",
    "save_subscription",
    "state_loader",
    "stateful_nodes",
    # stores
    "CheckpointSnapshot",
    "CheckpointStore",
    "CheckpointTransaction",
    "InMemoryCheckpointStore",
    "PostgresCheckpointStore",
    "SCHEMA_VERSION",
    "SqliteCheckpointStore",
    "StoreChanges",
    # protocol
    "STATE_CATEGORY",
    "CheckpointResult",
    "Checkpointer",
    "Subscriptions",
    # errors
    "CheckpointError",
    "CheckpointInProgressError",
    "DamagedRowError",
    "InjectedFaultError",
    "InvalidDsnError",
    "NotAStoreError",
    "MissingStateError",
    "OperatorStateError",
    "StateChecksumError",
    "StateEncodeError",
    "StateError",
    "StateFormatError",
    "StateShapeError",
    "StateVersionError",
    "StoreConnectionError",
    "StoreCorruptError",
    "StoreLayoutError",
    "StoreError",
    "StoreLockedError",
    "StoreOpenError",
    "UnknownStoreVersionError",
]
