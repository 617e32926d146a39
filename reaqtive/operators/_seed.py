"""The "no seed given" default of ``scan`` and ``aggregate``: in a module of its own, so that the fluent methods
can name the very default of the builders without importing their operator modules."""

from __future__ import annotations

from typing import Any, Final

__all__ = ["NO_SEED"]


class _NoSeed:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<no seed>"


NO_SEED: Final[Any] = _NoSeed()
"""No seed was given (``scan`` refuses ``None`` as a seed; ``aggregate`` takes any value, ``None`` too)."""
