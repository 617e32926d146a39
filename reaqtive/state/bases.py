"""Stateful operator bases: the operator lifecycle plus versioned save/load and dirty tracking.

An operator subclasses :class:`StatefulOperatorBase` (sources, multi-input stages) or
:class:`StatefulUnaryOperatorBase` (one input), names itself, states its version, and writes its fields in
``save_state_core`` and reads them back, in the same order, in ``load_state_core``::

    class RunningSum(StatefulUnaryOperatorBase[int, int]):
        name = "example:running_sum"
        version = (1,)

        def __init__(self, source, downstream):
            super().__init__(downstream)
            self._source = source
            self._sum = 0

        def save_state_core(self, writer):
            writer.write(self._sum)

        def load_state_core(self, reader):
            self._sum = reader.read()

        def subscribe_input(self):
            return self._source.subscribe(self)

        def on_next(self, value):
            self._sum += value
            self.state_changed = True          # persisted field changed: save it at the next checkpoint
            self._downstream.on_next(self._sum)

What the base does around those hooks:

* ``save_state`` writes ``is_disposed`` first, then calls ``save_state_core``; ``load_state`` reads it back.
  A node restored as disposed reports ``is_disposed`` at once, and ``start()`` disposes it (tearing down its
  inputs) instead of starting it, so a finished query stays finished after recovery.
* Disposing a node (for real) marks it changed, so the fact that it terminated is checkpointed.
* Under a host with a dirty registry (``context.execution_environment.dirty``, see :mod:`reaqtive.state.dirty`)
  ``set_context`` binds the node's tracker to its unit, so the first change after each save reports the unit; a
  new node reports it when it starts; a class that overrides ``state_changed`` (its dirtiness is computed) is
  watched: the registry asks it at every checkpoint (set ``watched`` to say otherwise).
* A saved version different from ``version`` is loaded only if it is listed in ``older_versions``; then
  ``load_older_state_core(reader, saved_version)`` reads the old layout (a migration). Otherwise loading
  raises :class:`~reaqtive.state.StateVersionError` naming the operator, its path and both versions.
"""

from __future__ import annotations

from typing import ClassVar, Generic, TypeVar

from reaqtive.core.context import OperatorContext
from reaqtive.core.operator import (
    OperatorBase,
    StatefulOperator,
    StateReader,
    StateWriter,
    UnaryOperatorBase,
    Version,
)
from reaqtive.core.streams import Subscriber
from reaqtive.state.dirty import DirtyRegistry
from reaqtive.state.state_errors import StateFormatError, StateVersionError
from reaqtive.state.tracking import DirtyState, StateChangedTracker

__all__ = ["StatefulOperatorBase", "StatefulUnaryOperatorBase"]

R = TypeVar("R")
S = TypeVar("S")


class _StatefulCore(OperatorBase[R], StatefulOperator, Generic[R]):
    """The shared implementation (no slots of its own, so it combines with either lifecycle base)."""

    __slots__ = ()

    _state: StateChangedTracker
    _disposed_from_state: bool

    older_versions: ClassVar[frozenset[Version]] = frozenset()
    """Older state versions this operator still loads, through :meth:`load_older_state_core`."""

    watched: ClassVar[bool] = False
    """Whether a dirty registry asks this node ``state_changed`` at every checkpoint, for as long as it lives:
    ``True`` for a class that overrides ``state_changed`` (its dirtiness is computed, so no change reports
    itself), unless the class says otherwise."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "state_changed" in cls.__dict__ and "watched" not in cls.__dict__:
            cls.watched = True

    # The two slots are declared by the concrete bases below (a slotted mixin could not combine with both
    # lifecycle bases), hence the ignores on the assignments.
    def _init_state(self) -> None:
        self._state = StateChangedTracker()  # type: ignore[misc]
        self._disposed_from_state = False  # type: ignore[misc]

    # -- dirty tracking ----------------------------------------------------------------------------------------

    @property
    def state_changed(self) -> bool:
        """Whether the next checkpoint must save this node. Set it to ``True`` when persisted fields change."""
        return self._state.state_changed

    @state_changed.setter
    def state_changed(self, value: bool) -> None:
        # On a per-element path operators write ``self._state.changed = True`` directly: the same flag without
        # the property call (about 13 ns instead of 50).
        if value:
            self._state.changed = True
        else:
            self._state.cleared()

    @property
    def state_status(self) -> DirtyState:
        """Which of the three dirty states the node is in (or clean)."""
        return self._state.status

    def on_state_saved(self) -> None:
        self._state.confirmed()

    # -- reporting to the host's dirty registry ----------------------------------------------------------------

    def set_context(self, context: OperatorContext) -> None:
        super().set_context(context)
        registry = getattr(context.execution_environment, "dirty", None)
        if isinstance(registry, DirtyRegistry):
            self._state.bind(context)
            if self.watched:
                registry.watch(self, context.instance_id)

    def start(self) -> None:
        if not self._started:
            registry = self.dirty_registry()
            if registry is not None and self.state_changed:  # new (never saved nor loaded), or changed loading
                registry.note(self.context.instance_id)
        super().start()

    def dirty_registry(self) -> DirtyRegistry | None:
        """The dirty registry this node reports to (``None``: not bound to one)."""
        unit = self._state.unit
        if unit is None:
            return None
        registry: DirtyRegistry = getattr(unit.execution_environment, "dirty")  # noqa: B009  # bound: it has one
        return registry

    def keep_watching(self) -> bool:
        """Whether a dirty registry that watches this node must go on asking it (see ``watched``)."""
        return not self.is_disposed

    # -- disposal ----------------------------------------------------------------------------------------------

    @property
    def is_disposed(self) -> bool:
        """Disposed, or restored from a checkpoint in which it was disposed."""
        return self._disposed or self._disposed_from_state

    def dispose(self) -> None:
        if self._disposed:
            return
        if not self._disposed_from_state:
            self._state.changed = True  # termination is state: checkpoint it
        registry = self.dirty_registry()
        if registry is not None:
            registry.unwatch(self)
        super().dispose()

    # -- save and load -----------------------------------------------------------------------------------------

    def save_state(self, writer: StateWriter, version: Version) -> None:
        if version != self.version:
            raise StateVersionError(
                self.name, _path_of(writer), version, self.version, "state is always saved in the current version"
            )
        writer.write(self.is_disposed)
        self.save_state_core(writer)
        self._state.saved()

    def load_state(self, reader: StateReader, version: Version) -> None:
        if version != self.version and version not in self.older_versions:
            raise StateVersionError(self.name, _path_of(reader), version, self.version)
        disposed = reader.read()
        if type(disposed) is not bool:
            raise StateFormatError(
                f"operator {self.name!r}: the disposed flag must be a bool, found {type(disposed).__name__} "
                "(not state of this operator, or written without the stateful base)"
            )
        self._disposed_from_state = disposed  # type: ignore[misc]
        if version == self.version:
            self.load_state_core(reader)
        else:
            self.load_older_state_core(reader, version)
        self._state.loaded()

    def save_state_core(self, writer: StateWriter) -> None:
        """Write this operator's fields (nothing by default). Keep it symmetric with :meth:`load_state_core`."""

    def load_state_core(self, reader: StateReader) -> None:
        """Read this operator's fields, in the order :meth:`save_state_core` wrote them (nothing by default).

        Runs after ``set_context`` and before ``start``; an operator with inner subscriptions rebuilds them
        here, and the load traversal then descends into them."""

    def load_older_state_core(self, reader: StateReader, version: Version) -> None:
        """Read state saved by an older ``version`` listed in :attr:`older_versions` (a migration)."""
        raise StateVersionError(
            self.name,
            _path_of(reader),
            version,
            self.version,
            "older_versions lists it but load_older_state_core is not implemented",
        )

    def __repr__(self) -> str:
        base = super().__repr__()
        return f"{base[:-1]} {self._state.status.value}>"


class StatefulOperatorBase(_StatefulCore[R], Generic[R]):
    """:class:`~reaqtive.core.operator.OperatorBase` with versioned state and three-state dirty tracking.

    For sources and stages with several inputs. Subclasses set ``name`` and ``version`` (class attributes)
    and override ``save_state_core``/``load_state_core``.
    """

    __slots__ = ("_disposed_from_state", "_state")

    def __init__(self, downstream: Subscriber[R]) -> None:
        super().__init__(downstream)
        self._init_state()


class StatefulUnaryOperatorBase(_StatefulCore[R], UnaryOperatorBase[S, R], Generic[S, R]):
    """:class:`~reaqtive.core.operator.UnaryOperatorBase` with versioned state and three-state dirty tracking.

    Subclasses set ``name`` and ``version`` (class attributes), implement ``subscribe_input`` and ``on_next``,
    and override ``save_state_core``/``load_state_core``.
    """

    __slots__ = ("_disposed_from_state", "_state")

    def __init__(self, downstream: Subscriber[R]) -> None:
        super().__init__(downstream)
        self._init_state()


def _path_of(stream: object) -> tuple[int, ...] | None:
    path = getattr(stream, "path", None)
    return path if isinstance(path, tuple) else None
