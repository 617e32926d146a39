"""An in-process :class:`~reaqtive.core.context.HigherOrderEnvironment` that can be checkpointed.

Higher-order operators register their inner subscriptions and inner subjects here, under ids derived from their
parent. A host checkpoints every inner subscription as its own unit, next to its top-level subscriptions, with
the same traversals (:func:`~reaqtive.state.save_subscription`): so a differential checkpoint of a ``group_by``
with 10,000 groups of which 10 changed writes those 10 inner subscriptions and nothing else. After a restart the
host gives the saved inner blobs to :meth:`InnerEnvironment.restore` before re-creating the query; each inner
subscription then loads its own blob when its parent re-creates it.

::

    env = InnerEnvironment()
    context = OperatorContext("sub://1", scheduler, execution_environment=env)
    ...
    blobs = {inner_id: save_subscription(handle) for inner_id, handle in env.inner_subscriptions().items()}
    removed = env.removed_inner_ids()     # delete their stored state in the same transaction
    ...                                   # after the commit: env.confirm_removed(removed)

The environment also holds the host's :class:`~reaqtive.state.dirty.DirtyRegistry` (``dirty``): the stateful
operators of every unit under it report their changes there, so a checkpoint that passes it to the
:class:`~reaqtive.state.Checkpointer` visits only the units that changed.

The engine builds its environment on this class; ``reaqtive.testing.checkpoint`` uses it directly.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from reaqtive.core.context import HigherOrderEnvironment, OperatorContext
from reaqtive.core.streams import Subscriber
from reaqtive.core.subjects import MultiSubject, SimpleSubject
from reaqtive.core.subscribable import Subscribable
from reaqtive.core.subscriptions import SubscriptionHandle
from reaqtive.core.visitors import initialize
from reaqtive.state.codec import DEFAULT_CODEC, StateCodec
from reaqtive.state.dirty import DirtyRegistry
from reaqtive.state.state_errors import MissingStateError
from reaqtive.state.traversal import state_loader

__all__ = ["InnerEnvironment"]


class InnerEnvironment(HigherOrderEnvironment):
    """Inner subscriptions and subjects in memory, with what a host needs to checkpoint and restore them.

    ``subjects``: top-level streams the queries may look up with :meth:`get_subject`. ``subject_factory``: makes
    inner subjects (a :class:`~reaqtive.core.subjects.SimpleSubject` named after its id by default). Thread-safe.
    """

    def __init__(
        self,
        *,
        subjects: Mapping[str, MultiSubject[Any, Any]] | None = None,
        subject_factory: Callable[[str], MultiSubject[Any, Any]] | None = None,
        codec: StateCodec = DEFAULT_CODEC,
    ) -> None:
        self._lock = threading.RLock()
        self._streams: dict[str, MultiSubject[Any, Any]] = dict(subjects or {})
        self._inner_subjects: dict[str, MultiSubject[Any, Any]] = {}
        self._inner: dict[str, SubscriptionHandle] = {}
        self._counters: dict[str, int] = {}
        self._saved: dict[str, bytes] = {}
        self._removed: set[str] = set()
        self._load_failures: dict[str, Exception] = {}
        self._subject_factory = subject_factory or (lambda subject_id: SimpleSubject(name=subject_id))
        self._ended_rules: dict[str, Callable[[int], bool]] = {}
        self._codec = codec
        self.dirty = DirtyRegistry()
        """Where the stateful operators of every unit under this environment report their changes."""

    # -- ExecutionEnvironment ----------------------------------------------------------------------------------

    def get_subject(self, uri: str) -> MultiSubject[Any, Any]:
        with self._lock:
            subject = self._streams.get(uri) or self._inner_subjects.get(uri)
        if subject is None:
            raise LookupError(f"no stream or inner subject {uri!r} in this environment")
        return subject

    def get_subscription(self, uri: str) -> SubscriptionHandle:
        with self._lock:
            handle = self._inner.get(uri)
        if handle is None:
            raise LookupError(f"no inner subscription {uri!r} in this environment")
        return handle

    def add_stream(self, uri: str, subject: MultiSubject[Any, Any]) -> None:
        """Make a top-level stream visible to :meth:`get_subject`."""
        with self._lock:
            self._streams[uri] = subject

    # -- HigherOrderEnvironment --------------------------------------------------------------------------------

    def allocate_id(self, owner: str, kind: str) -> str:
        with self._lock:
            number = self._counters.get(owner, 0)
            self._counters[owner] = number + 1
        return f"{owner}/{kind}{number}"

    def subscribe_inner(
        self,
        inner_id: str,
        source: Subscribable[Any],
        observer: Subscriber[Any],
        parent: OperatorContext,
        *,
        restoring: bool = False,
    ) -> SubscriptionHandle:
        handle = source.subscribe(observer)
        with self._lock:
            if inner_id in self._inner:
                raise ValueError(f"inner subscription {inner_id!r} already exists (inner ids must be unique)")
            blob = self._saved.pop(inner_id, None)
            if blob is None and restoring:
                # Its parent's restored state says it was live at the checkpoint, which saved it in the same
                # transaction: starting it empty would silently lose its state.
                error = MissingStateError(
                    f"inner subscription {inner_id!r}: its parent restores it from the checkpoint, but its saved "
                    "state is not in the store"
                )
                self._load_failures.setdefault(inner_id, error)
                raise error
            self._inner[inner_id] = handle
            self._removed.discard(inner_id)
        loader = None if blob is None else self._recording_loader(inner_id, blob)
        try:
            initialize(handle, parent.derive(inner_id), loader)
        except BaseException:
            with self._lock:
                self._inner.pop(inner_id, None)
                if blob is not None:
                    self._saved[inner_id] = blob  # a failed recovery never loses stored state
            raise
        return handle

    def _recording_loader(self, inner_id: str, blob: bytes) -> Callable[[SubscriptionHandle], None]:
        """The load step of an inner subscription, which also notes a failure for the host: the parent turns the
        error into its own ``on_error``, but a host must handle it as a recovery failure of the query."""
        load = state_loader(blob, self._codec, f"inner subscription {inner_id!r}")

        def recording(handle: SubscriptionHandle) -> None:
            try:
                load(handle)
            except Exception as error:
                with self._lock:
                    self._load_failures.setdefault(inner_id, error)
                raise

        return recording

    def take_load_failures(self, owner: str) -> dict[str, Exception]:
        """The inner subscriptions under ``owner/`` whose saved state failed to load (or was missing) since the
        last call, by id; forgets them."""
        prefix = owner + "/"
        with self._lock:
            failed = {key: error for key, error in self._load_failures.items() if key.startswith(prefix)}
            for key in failed:
                del self._load_failures[key]
        return failed

    def release_ids(self, owner: str) -> None:
        """Forget the ids allocated to ``owner`` and to everything under it (``owner/...``): a subscription
        created again under the same id must allocate the same ids as it will after a recovery."""
        with self._lock:
            prefix = owner + "/"
            for key in [key for key in self._counters if key == owner or key.startswith(prefix)]:
                del self._counters[key]

    def delete_inner(self, inner_id: str) -> None:
        with self._lock:
            handle = self._inner.pop(inner_id, None)
            self._saved.pop(inner_id, None)
            self._removed.add(inner_id)
        if handle is not None:
            handle.dispose()
        self.dirty.forget(inner_id)

    def get_or_create_subject(self, subject_id: str) -> MultiSubject[Any, Any]:
        with self._lock:
            subject = self._inner_subjects.get(subject_id)
            if subject is None:
                if self._has_ended(subject_id):
                    return _ended_subject(subject_id)
                subject = self._subject_factory(subject_id)
                self._inner_subjects[subject_id] = subject
        return subject

    def note_ended_subjects(self, prefix: str, is_ended: Callable[[int], bool] | None) -> None:
        with self._lock:
            if is_ended is None:
                self._ended_rules.pop(prefix, None)
                return
            self._ended_rules[prefix] = is_ended
            ended = [key for key in self._inner_subjects if self._has_ended(key)]
            subjects = [self._inner_subjects.pop(key) for key in ended]
        for subject in subjects:  # made before the owner loaded (a consumer restored first): it ended
            input_of_subject(subject).on_complete()
            subject.dispose()

    def _has_ended(self, subject_id: str) -> bool:
        prefix, _, number = subject_id.rpartition("/")
        rule = self._ended_rules.get(prefix)
        return rule is not None and number.isdigit() and rule(int(number))

    def delete_subject(self, subject_id: str) -> None:
        with self._lock:
            subject = self._inner_subjects.pop(subject_id, None)
        if subject is not None:
            subject.dispose()

    # -- for the host's checkpoints ------------------------------------------------------------------------------

    def inner_subscriptions(self) -> dict[str, SubscriptionHandle]:
        """The live inner subscriptions by id (a snapshot): checkpoint each as its own unit."""
        with self._lock:
            return dict(self._inner)

    def inner_subject_ids(self) -> list[str]:
        """The ids of the live inner subjects."""
        with self._lock:
            return list(self._inner_subjects)

    def removed_inner_ids(self) -> list[str]:
        """Inner subscriptions deleted since the last confirmed checkpoint: delete their stored state."""
        with self._lock:
            return sorted(self._removed)

    def confirm_removed(self, inner_ids: Iterable[str]) -> None:
        """The checkpoint that deleted ``inner_ids`` committed."""
        with self._lock:
            self._removed.difference_update(inner_ids)

    def restore(self, blobs: Mapping[str, bytes]) -> None:
        """Saved inner states, each loaded when its parent re-creates that inner subscription (recovery)."""
        with self._lock:
            self._saved.update(blobs)

    def unclaimed_inner_ids(self) -> list[str]:
        """Restored inner states no parent has re-created (yet): after a recovery, orphans to collect."""
        with self._lock:
            return sorted(self._saved)

    def abandon(self, owner: str) -> None:
        """Drop everything in memory under ``owner/`` without deleting any stored state: the host keeps a query
        that failed to recover stored but not running (its inner states stay in the store as they are)."""
        prefix = owner + "/"
        with self._lock:
            handles = [self._inner.pop(key) for key in list(self._inner) if key.startswith(prefix)]
            subjects = [self._inner_subjects.pop(key) for key in list(self._inner_subjects) if key.startswith(prefix)]
            self._removed = {key for key in self._removed if not key.startswith(prefix)}
            for key in [key for key in self._ended_rules if key.startswith(prefix)]:
                del self._ended_rules[key]
        for handle in handles:
            handle.dispose()
        for subject in subjects:
            subject.dispose()
        with self._lock:  # disposing may have marked some removed
            self._removed = {key for key in self._removed if not key.startswith(prefix)}

    def discard_saved(self, inner_ids: Iterable[str], *, delete: bool) -> None:
        """Forget restored inner states, so that no inner subscription created later loads them; with
        ``delete``, also mark them removed (the next checkpoint deletes them), else the store keeps them."""
        with self._lock:
            for inner_id in inner_ids:
                self._saved.pop(inner_id, None)
                if delete:
                    self._removed.add(inner_id)

    def collect_orphans(self, keep: Callable[[str], bool] = lambda inner_id: False) -> list[str]:
        """Forget the restored inner states no parent re-created (except those ``keep`` names) and mark them
        removed, so that the next checkpoint deletes them. Call it once every query was recovered and started:
        parents re-create their inner subscriptions while they load."""
        with self._lock:
            orphans = sorted(inner_id for inner_id in self._saved if not keep(inner_id))
            for inner_id in orphans:
                del self._saved[inner_id]
                self._removed.add(inner_id)
        return orphans

    def dispose(self) -> None:
        """Dispose every inner subscription and inner subject (the owning engine or test is done)."""
        with self._lock:
            handles, self._inner = list(self._inner.values()), {}
            subjects, self._inner_subjects = list(self._inner_subjects.values()), {}
        for handle in handles:
            handle.dispose()
        for subject in subjects:
            subject.dispose()


def _ended_subject(subject_id: str) -> MultiSubject[Any, Any]:
    """A subject that has ended: what a late subscriber of an ended inner stream finds."""
    subject: SimpleSubject[Any] = SimpleSubject(name=subject_id)
    subject.on_complete()
    return subject


def input_of_subject(subject: MultiSubject[Any, Any]) -> Any:
    """The input side of an inner subject (a :class:`SimpleSubject` is its own)."""
    return subject if isinstance(subject, SimpleSubject) else subject.create_observer()
