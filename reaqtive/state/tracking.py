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

**Reporting to a dirty registry.** Under a host that checkpoints differentially (its execution environment has a
:class:`~reaqtive.state.dirty.DirtyRegistry`), a tracker is *bound* to its node's unit (the operator context of
the subscription or inner subscription the node belongs to) and the first ``changed = True`` after each save
reports that unit to the registry, so the checkpoint visits only the units that reported. The operators' per-
element path stays a plain slot store (``self._state.changed = True``, ~13 ns): a bound tracker waits for its
first change as a :class:`_ReportingTracker`, whose ``changed`` is a property that reports, then turns the object
back into a plain :class:`StateChangedTracker` (``__class__`` assignment, same layout); :meth:`saved` turns it
into a reporting one again. So a unit is reported once per checkpoint interval, not once per event.

``changed`` is only ever set to ``True`` by its owner; it is cleared by :meth:`saved` (the state-changed setter
of the stateful bases clears it through :meth:`cleared`, which waits for the next change again).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from reaqtive.core.context import OperatorContext

__all__ = ["DirtyState", "StateChangedTracker"]


class DirtyState(enum.Enum):
    """Why a node has something to save (or :attr:`CLEAN`)."""

    NEVER_SAVED = "never saved"
    CHANGED = "changed since save"
    UNCONFIRMED = "saved but not yet confirmed"
    CLEAN = "clean"


# The phases of the saved copy (one slot instead of two flags: 8 bytes less per stateful node).
_NEVER_SAVED: Final = 0
_UNCONFIRMED: Final = 1
_SAVED: Final = 2


class StateChangedTracker:
    """The dirty flags of one stateful object (an operator, a subject, an observer)."""

    __slots__ = ("_phase", "_unit", "changed")

    def __init__(self) -> None:
        self._phase = _NEVER_SAVED
        self._unit: OperatorContext | None = None
        self.changed = False
        """Set (to ``True``) by the owner when its persisted fields change."""

    @property
    def state_changed(self) -> bool:
        """Whether there is anything to save: never saved, changed since the save, or save not confirmed."""
        return self.changed or self._phase != _SAVED

    @property
    def status(self) -> DirtyState:
        """The reason for :attr:`state_changed` (the first that applies), for diagnostics and tests."""
        if self._phase == _NEVER_SAVED:
            return DirtyState.NEVER_SAVED
        if self.changed:
            return DirtyState.CHANGED
        if self._phase == _UNCONFIRMED:
            return DirtyState.UNCONFIRMED
        return DirtyState.CLEAN

    @property
    def unit(self) -> OperatorContext | None:
        """The context of the unit this tracker reports to (see :meth:`bind`), or ``None``."""
        return self._unit

    @property
    def reporting(self) -> bool:
        """Whether the next ``changed = True`` reports the unit (bound, and no change since the last save)."""
        return type(self) is _ReportingTracker

    def bind(self, unit: OperatorContext) -> None:
        """Report the first change after each save to ``unit``'s dirty registry (its execution environment's
        ``dirty``). A change made before binding is reported now."""
        self._unit = unit
        if self.changed:
            _report(unit)
        else:
            self.__class__ = _ReportingTracker

    def saved(self) -> None:
        """The state was written (to memory); it stays dirty until :meth:`confirmed`."""
        self._phase = _UNCONFIRMED
        self.cleared()

    def cleared(self) -> None:
        """No change is pending any more (the state was saved, or its owner says so): a bound tracker reports
        the next change again."""
        _CHANGED.__set__(self, False)
        if self._unit is not None:
            self.__class__ = _ReportingTracker

    def confirmed(self) -> None:
        """The store committed the last save. Changes made since that save keep the state dirty."""
        if self._phase == _UNCONFIRMED:
            self._phase = _SAVED

    def loaded(self) -> None:
        """The state was loaded from a checkpoint: it equals what is stored."""
        if self._phase == _NEVER_SAVED:
            self._phase = _SAVED

    def __repr__(self) -> str:
        return f"<StateChangedTracker {self.status.value}>"


_CHANGED: Final = StateChangedTracker.__dict__["changed"]  # the slot itself, under the reporting property


def _report(unit: OperatorContext) -> None:
    registry = getattr(unit.execution_environment, "dirty", None)
    if registry is not None:
        registry.note(unit.instance_id)


class _ReportingTracker(StateChangedTracker):
    """A bound tracker waiting for the first change since its last save: setting ``changed`` to ``True``
    reports the unit, then the object becomes a plain :class:`StateChangedTracker` again (no new slots, so the
    ``__class__`` assignment is allowed and the layout is the same)."""

    __slots__ = ()

    def _get_changed(self) -> bool:
        return bool(_CHANGED.__get__(self, StateChangedTracker))

    def _set_changed(self, value: bool) -> None:
        _CHANGED.__set__(self, value)
        if value:
            self.__class__ = StateChangedTracker  # type: ignore[assignment]  # later changes: plain slot stores
            unit = self._unit
            assert unit is not None  # only bound trackers report
            _report(unit)

    changed = property(_get_changed, _set_changed)
