"""The positions of input sources, stored with every checkpoint: a part that owns the registered sources and what
the store holds of each (see :meth:`~reaqtive.engine.Engine.register_source` and
:mod:`reaqtive.connectors.file_source`).

A source registers ``state() -> bytes`` under a name; each checkpoint calls it while the engine is paused and
writes the bytes in its transaction, so that a source's position is always consistent with the events it
appended. After a restart, :meth:`Sources.stored` gives back what the last checkpoint wrote (or why it cannot be
read: a damaged row is kept as its error and raised by the reader, never guessed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

__all__ = ["Sources"]


class Sources:
    """The registered sources and their committed states (see the module)."""

    __slots__ = ("_committed", "_registered")

    def __init__(self) -> None:
        self._registered: dict[str, Callable[[], bytes]] = {}
        self._committed: dict[str, bytes | Exception] = {}

    def register(self, name: str, state: Callable[[], bytes]) -> None:
        """Store ``state()`` under ``name`` with every checkpoint; a name in use or empty raises ``ValueError``."""
        if not isinstance(name, str) or not name or name in self._registered:
            raise ValueError(f"register_source: {name!r} is not a new non-empty name")
        self._registered[name] = state

    def unregister(self, name: str) -> None:
        """Stop storing ``name``'s state (its last stored state stays; unknown: a no-op)."""
        self._registered.pop(name, None)

    def stored(self, name: str) -> bytes | Exception | None:
        """What the last checkpoint stored for ``name`` (an error: the row is damaged; ``None``: nothing)."""
        return self._committed.get(name)

    def read_now(self) -> dict[str, bytes]:
        """Each registered source's state now (a checkpoint calls this while the engine is paused)."""
        states: dict[str, bytes] = {}
        for name, state in self._registered.items():
            blob = states[name] = state()
            if not isinstance(blob, bytes):
                raise TypeError(f"source {name!r}: its state is a {type(blob).__name__}, not bytes")
        return states

    def committed(self, states: Mapping[str, bytes | Exception]) -> None:
        """``states`` are in the store now (a checkpoint committed them, or recovery read them back)."""
        self._committed.update(states)
