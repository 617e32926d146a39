"""Three-state dirty tracking: what is left to save when a checkpoint may fail, or succeed late.

A plain "dirty" boolean is wrong twice over: cleared at save time, it loses the state when the commit then
fails; cleared at commit time, it loses the changes made while the commit was in flight (the scheduler resumes
before the commit). :class:`StateChangedTracker` keeps three facts instead:

* **never saved** — a new node is dirty until its first confirmed save (or a load);
* **changed since save** — set by the operator whenever persisted fields change;
* **saved but not yet confirmed** — set by a save, cleared only by :meth:`~StateChangedTracker.confirmed`.

``state_changed`` is ``never_saved or changed or unconfirmed``. The truth table:

=================================================  ================
sequence                                           ``state_changed``
=================================================  ================
new                                                True
loaded                                             False
saved (commit pending)                             True
saved, confirmed                                   False
saved, changed, confirmed                          True
saved, commit failed (never confirmed)             True
saved, confirmed, saved again                      True
=================================================  ================
"""

from __future__ import annotations

import enum

__all__ = ["DirtyState", "StateChangedTracker"]


class DirtyState(enum.Enum):
    """Why a node has something to save (or :attr:`CLEAN`)."""

    NEVER_SAVED = "never saved"
    CHANGED = "changed since save"
    UNCONFIRMED = "saved but not yet confirmed"
    CLEAN = "clean"


class StateChangedTracker:
    """The dirty flags of one stateful object (an operator, a subject, an observer)."""

    __slots__ = ("_saved_once", "_unconfirmed", "changed")

    def __init__(self) -> None:
        self._saved_once = False
        self._unconfirmed = False
        self.changed = False
        """Set by the owner when its persisted fields change."""

    @property
    def state_changed(self) -> bool:
        """Whether there is anything to save: never saved, changed since the save, or save not confirmed."""
        return not self._saved_once or self.changed or self._unconfirmed

    @property
    def status(self) -> DirtyState:
        """The reason for :attr:`state_changed` (the first that applies), for diagnostics and tests."""
        if not self._saved_once:
            return DirtyState.NEVER_SAVED
        if self.changed:
            return DirtyState.CHANGED
        if self._unconfirmed:
            return DirtyState.UNCONFIRMED
        return DirtyState.CLEAN

    def saved(self) -> None:
        """The state was written (to memory); it stays dirty until :meth:`confirmed`."""
        self._saved_once = True
        self._unconfirmed = True
        self.changed = False

    def confirmed(self) -> None:
        """The store committed the last save. Changes made since that save keep the state dirty."""
        self._unconfirmed = False

    def loaded(self) -> None:
        """The state was loaded from a checkpoint: it equals what is stored."""
        self._saved_once = True

    def __repr__(self) -> str:
        return f"<StateChangedTracker {self.status.value}>"
