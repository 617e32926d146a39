"""The queries the engine keeps stored without running, and where each stands in the log: a part of the engine that
owns this state (the engine, recovery and checkpoints ask it; nothing else writes it).

A subscription stops running when it fails to recover under ``RecoveryPolicy.KEEP``, when its error policy stops it
(FAILED), or when its state cannot be saved; a stored state of no artifact may be kept too (an orphan). Each keeps
its stored state, and a **pin**: where it stood when it stopped (a :class:`~reaqtive.engine.records.Behind`), which
goes into every delivery record while it is kept, holds the ingress log back for it, and tells its readers where to
resume once it runs again. Where a pin comes from: the last checkpoint's position and clock (``committed``), or,
for a query behind the engine at that checkpoint, where it stood then (``stood_behind``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from reaqtive.engine.backfill import behind_of as backfill_behind
from reaqtive.engine.failures import SubscriptionFailedError
from reaqtive.engine.records import Behind

__all__ = ["StoppedQueries"]


class StoppedQueries:
    """See the module docstring. ``kept``: the artifacts kept stored without running; ``orphans``: the stored
    states of no artifact kept by the recovery policy; ``failed``: the FAILED subscriptions (kept too);
    ``schemas_missing``: typed streams kept open whose validator is not registered; ``pins``: where each kept one
    stands; ``committed``: the last checkpoint's position and clock; ``stood_behind``: the queries behind the
    engine at the last checkpoint."""

    __slots__ = ("committed", "failed", "kept", "orphans", "pins", "schemas_missing", "stood_behind")

    def __init__(self) -> None:
        self.kept: set[str] = set()
        self.orphans: set[str] = set()
        self.failed: dict[str, SubscriptionFailedError] = {}
        self.schemas_missing: set[str] = set()
        self.pins: dict[str, Behind] = {}
        self.committed: Behind = Behind(0, None, 0)
        self.stood_behind: dict[str, Behind] = {}

    @property
    def degraded(self) -> bool:
        """Whether something is kept without running, or a typed stream waits for its validator."""
        return bool(self.kept or self.orphans or self.schemas_missing)

    @property
    def kept_subscriptions(self) -> int:
        """How many artifacts are kept without running, the FAILED subscriptions left out."""
        return len(self.kept) - len(self.failed)

    def is_kept(self, uri: str) -> bool:
        return uri in self.kept or uri in self.orphans

    def stood(self, uri: str) -> Behind | None:
        """Where ``uri`` stood at the last checkpoint if it was behind the engine then, or where it was pinned."""
        return self.stood_behind.get(uri) or self.pins.get(uri)

    def pin_for(self, uri: str, record: Mapping[str, Any], floor: int) -> Behind:
        """Where an artifact about to be kept without running stands, as of its stored state: where it stood
        behind the engine at the last checkpoint, or else the last checkpoint's position and clock (or its
        creation's, if later); and ``floor``, the floor of the log as it is now, which holds everything its
        readers still need (a lagging one included: the last truncation respected it)."""
        stood = self.stood_behind.get(uri) or backfill_behind(record)
        if stood is not None:
            return Behind(stood.pos, stood.clock, min(stood.floor, floor), stood.legacy)
        committed = self.committed
        clocks = [clock for clock in (committed.clock, record.get("clock")) if clock is not None]
        return Behind(max(committed.pos, record.get("start_pos", -1)), max(clocks) if clocks else None,
                      min(committed.pos, floor))

    def pinned(self) -> dict[str, Behind]:
        """The pins a delivery record stores: those of the artifacts still kept."""
        return {uri: pin for uri, pin in self.pins.items() if self.is_kept(uri)}

    def floor(self, below: int) -> int:
        """``below``, or the lowest floor of a pin under it (the log keeps what a kept artifact needs)."""
        for pin in self.pins.values():
            below = min(below, pin.floor)
        return below

    def keep(self, uri: str, pin: Behind) -> None:
        """Keep ``uri`` stored without running, pinned at ``pin`` unless it is pinned already."""
        self.kept.add(uri)
        self.pins.setdefault(uri, pin)

    def release(self, uri: str) -> None:
        """``uri`` runs again (its pin stays until a checkpoint records where it stands)."""
        self.kept.discard(uri)
        self.failed.pop(uri, None)

    def forget(self, uri: str) -> None:
        """Subscription ``uri`` is deleted: it is kept no more, nor pinned."""
        self.release(uri)
        self.pins.pop(uri, None)

    def checkpointed(self, committed: Behind, behind: Mapping[str, Behind], unsaved: Iterable[str]) -> None:
        """A checkpoint committed at ``committed`` with the queries ``behind`` the engine; ``unsaved``: those it
        stopped because their state could not be saved (pinned by it). The pins of the artifacts that run again
        go: this checkpoint's record says where their state stands."""
        unsaved = set(unsaved)
        for uri in [uri for uri in self.pins if not self.is_kept(uri) and uri not in unsaved]:
            del self.pins[uri]
        self.committed = committed
        self.stood_behind = {uri: entry for uri, entry in behind.items() if uri not in unsaved}
