"""Keeping a checkpointed engine's long-lived objects out of the cyclic garbage collector's full passes.

An engine holds its queries' operators, groups and windows for a long time: hundreds of thousands of objects. The
cyclic collector's full pass walks every one of them, and it runs whenever objects promoted to its oldest
generation reach a quarter of those it already holds. Windows and inner subscriptions that live for seconds or
minutes are promoted and then freed by reference counting, so full passes keep coming, each one longer as the
state grows: measured, they took about half the processing time of a keyed windowed query with 10,000 keys,
while collecting nothing.

After each checkpoint, :class:`GcFreeze` moves every object that exists then into the permanent generation
(:func:`gc.freeze`). The full passes then walk only what was created since. Frozen objects are still freed by
reference counting when their last reference goes. Only *cyclic* garbage among them waits, so every
``full_every`` checkpoints the policy unfreezes, collects everything and freezes again: cyclic garbage waits at
most that many checkpoints. (The policy never asks how many objects are frozen: ``gc.get_freeze_count()`` walks
them all, which took longer than the checkpoint itself with millions of objects.)

The policy is **opt-in** (``Engine(..., gc_freeze=True)``) because :func:`gc.freeze` is process-wide: every
object of the host program that exists at a checkpoint is frozen too, so cyclic garbage the host makes waits for
the next full collection (``full_every`` checkpoints, or the engine's close) instead of the next collector pass,
and ``gc.get_freeze_count()`` and ``gc.collect()`` see a different collector than the host configured. Closing
the engine unfreezes everything (also what the host froze itself). Turn it on in a process that is mostly the
engine (a worker, a benchmark), not in a service that shares the process with other work.
"""

from __future__ import annotations

import gc
from typing import Final

__all__ = ["DEFAULT_FULL_EVERY", "GcFreeze"]

DEFAULT_FULL_EVERY: Final = 100
"""Checkpoints between two full collections of everything (frozen objects included)."""


class GcFreeze:
    """The engine's garbage collector policy: freeze after a checkpoint, collect everything now and then."""

    __slots__ = ("_enabled", "_full_every", "_since_full")

    def __init__(self, enabled: bool = False, full_every: int = DEFAULT_FULL_EVERY) -> None:
        if full_every < 1:
            raise ValueError(f"full_every must be at least 1, got {full_every}")
        self._enabled = enabled
        self._full_every = full_every
        self._since_full = 0

    @property
    def enabled(self) -> bool:
        """Whether the policy acts (``False``: the collector is left as Python configures it)."""
        return self._enabled

    def after_checkpoint(self) -> None:
        """A checkpoint committed: what lives now is likely to live on; freeze it (every ``full_every``-th time,
        collect everything first)."""
        if not self._enabled:
            return
        self._since_full += 1
        if self._since_full >= self._full_every:
            self._since_full = 0
            gc.unfreeze()
            gc.collect()
        gc.freeze()

    def release(self) -> None:
        """The engine closed: hand every frozen object back to the collector."""
        if self._enabled:
            gc.unfreeze()
