"""The engine's public records: its status, recovery policies and failures, artifact and stream information, checkpoint
and recovery metrics, the built-in observers.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from reaqtive.engine.retention import Retention

__all__ = [
    "DURABLE_SINK",
    "DISCARD_SINK",
    "EngineStatus",
    "RecoveryPolicy",
    "RecoveryFailure",
    "ArtifactInfo",
    "StreamStatus",
    "SubscriptionState",
    "SubscriptionStatus",
    "CheckpointMetrics",
    "RecoveryMetrics",
]

DURABLE_SINK: Final = "reaqtive://sinks/durable"
"""The built-in observer that writes outputs to the store's egress table (effectively-once)."""
DISCARD_SINK: Final = "reaqtive://sinks/discard"
"""The built-in observer that drops outputs."""


class EngineStatus(enum.Enum):
    """What the engine is doing."""

    RECOVERING = "recovering"
    RUNNING = "running"
    CHECKPOINTING = "checkpointing"
    DEGRADED = "degraded"
    """Running, but some artifacts failed to recover and are kept in the store without running."""
    CLOSED = "closed"


class SubscriptionState(enum.Enum):
    """Where a subscription stands (see :meth:`~reaqtive.engine.Engine.subscriptions`)."""

    RUNNING = "running"
    PAUSED = "paused"
    """Paused by :meth:`~reaqtive.engine.Engine.pause`: its input waits in the log."""
    CATCHING_UP = "catching_up"
    """Behind the engine, not paused: the processing loop hands it the log it has not read (after a resume, a
    recovery, a restart)."""
    COMPLETED = "completed"
    """Its query completed: it produces nothing more."""
    FAILED = "failed"
    """A user function in its query raised and its error policy said stop: stopped as of its last checkpoint,
    until :meth:`~reaqtive.engine.Engine.restart_subscription`; the engine is DEGRADED."""
    STOPPED = "stopped"
    """Kept in the store without running: it failed to recover, or a fault stopped it (``engine.faults``); it
    recovers at the next open if the cause is gone, or with :meth:`~reaqtive.engine.Engine.restart_subscription`."""


@dataclass(frozen=True)
class SubscriptionStatus:
    """One subscription's state, and for a FAILED or STOPPED one what stopped it: the error's type and message,
    the log position of the event that stopped it (``None`` where unknown), when, and for an error of a user
    function where it was raised (the unit: the subscription or one of its inner units; the operator's persisted
    name; its path in the unit's tree). ``outputs``: the number of its next output. ``on_error``: its error policy
    (``"stop"``, ``"skip"`` or ``"function"``; ``"default"``: the engine's)."""

    uri: str
    state: SubscriptionState
    outputs: int = 0
    on_error: str = "default"
    error_type: str | None = None
    error: str | None = None
    position: int | None = None
    failed_at: datetime | None = None
    unit: str | None = None
    operator: str | None = None
    path: str | None = None


class RecoveryPolicy(enum.Enum):
    """What to do with an artifact that fails to recover."""

    FAIL = "fail"
    """Stop: opening the engine raises :class:`~reaqtive.engine.engine_errors.RecoveryError`; the store is untouched."""
    KEEP = "keep"
    """Keep the artifact (and its state) in the store without running it; the engine runs degraded and reports it."""
    REMOVE = "remove"
    """Delete the artifact and its state from the store."""


@dataclass(frozen=True)
class RecoveryFailure:
    """An artifact that did not recover: its URI, its kind, the error, and what was done about it."""

    uri: str
    kind: str
    error: BaseException
    policy: RecoveryPolicy


@dataclass(frozen=True)
class ArtifactInfo:
    """What the engine knows about one artifact."""

    uri: str
    kind: str
    created: datetime
    expression: dict[str, Any] | None
    observer: str | None
    references: tuple[str, ...]
    state_bytes: int
    running: bool
    schema: str | None = None
    """A stream's validator, by the name it was registered under (``None``: an untyped stream, or not a stream)."""
    status: SubscriptionStatus | None = None
    """A subscription's state (running, paused, catching up, completed, FAILED with what stopped it, stopped);
    ``None`` for other artifacts."""


@dataclass(frozen=True)
class StreamStatus:
    """One durable stream: how far producers and the engine got, and what the ingress log still holds."""

    uri: str
    appended: int
    """Events appended so far (the next event's sequence number)."""
    delivered: int
    """The sequence number of the last event delivered to the queries (-1: none yet)."""
    retained: int
    """Events still in the ingress log (not yet covered by a committed checkpoint)."""
    schema: str | None = None
    """The name of the validator its events must pass (``None``: untyped; see ``docs/engine.md``, "Typed
    streams")."""
    retention: Retention | None = None
    """What the log keeps of it beyond what its readers need (``None``: only that; see ``docs/engine.md``, "Log
    retention")."""
    retained_bytes: int = 0
    """The stored bytes of its retained events (payload and times; see :mod:`reaqtive.engine.retention`)."""
    retained_from: int | None = None
    """The sequence number of its oldest event still in the log (``None``: none retained)."""
    retained_since: datetime | None = None
    """The time of that event (``None``: none retained, or its row is damaged)."""
    retained_positions: tuple[int, int] | None = None
    """The log positions of its oldest and newest retained events (a backfill starts from any position at or
    after the first less one: ``create_subscription(..., start=p)``)."""


@dataclass(frozen=True)
class CheckpointMetrics:
    """One checkpoint: how long the engine paused, how long the commit took, what it wrote."""

    checkpoint_id: int
    full: bool
    pause_seconds: float
    serialize_seconds: float
    commit_seconds: float
    egress_seconds: float
    bytes_written: int
    dirty_subscriptions: int
    ingress_truncated: int
    at: datetime


@dataclass
class RecoveryMetrics:
    """One recovery: the time per phase, what was recovered, what failed."""

    phases: dict[str, float] = field(default_factory=dict)
    streams: int = 0
    definitions: int = 0
    subscriptions: int = 0
    inner_subscriptions: int = 0
    failures: list[RecoveryFailure] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    """Stored states no artifact claimed that the policy REMOVE deleted (at the next checkpoint). Under FAIL and
    KEEP such a state is a failure like any other (see ``failures``)."""
    idle_subscriptions: int = 0
    """Of ``subscriptions``, those left idle, bound when their streams first have an event for them (see
    :mod:`reaqtive.engine.idle`)."""


@dataclass(frozen=True)
class StreamReading:
    """One durable stream: events appended (the next sequence number) and delivered to the queries."""

    appended: int
    delivered: int
    """Events delivered (the last delivered sequence number + 1)."""
    dead_letters: int
    """Its events taken out of delivery (quarantined or missing), kept in the store."""
    lag: int
    """Events appended and still to be delivered: ``appended - delivered``, less the dead letters among them
    (never delivered, they are no backlog)."""
    retained_events: int = 0
    """Events in its ingress log as of the last checkpoint (or the engine's open), retention included."""
    retained_bytes: int = 0
    """The stored bytes of those events (payload and times)."""


@dataclass(frozen=True)
class SubscriptionReading:
    """One running subscription: its observer, the outputs it produced, and how far its consumers got."""

    observer: str
    produced: int
    """Outputs produced (its next output sequence number)."""
    acknowledged: int | None
    """Outputs its consumers acknowledged (durable sink only; ``None`` for other observers)."""
    pending: int | None
    """Outputs waiting in its observer function's outbox (observer functions only; ``None`` otherwise)."""
    failed_attempts: int | None
    """Failed attempts in a row of its observer function on the first waiting output (``None``: no function)."""


@dataclass(frozen=True)
class EngineReadings:
    """What :func:`read_engine` copied from one engine at one moment."""

    status: EngineStatus
    streams: Mapping[str, StreamReading]
    subscriptions: Mapping[str, SubscriptionReading]
    kept_subscriptions: int
    """Artifacts kept in the store without running (failed to recover, or stopped by a fault)."""
    faults: Mapping[RecoveryPolicy, int]
    """Subscriptions stopped while running, by what was done with them."""
    egress_buffered: int
    """Outputs for the durable sink not written to the store yet."""
    recovery: RecoveryMetrics
    last_checkpoint: CheckpointMetrics | None
    failed_elements: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    """Per subscription, the elements a user function raised on that it skipped (error policy ``"skip"``) and
    that the store keeps as dead letters (acknowledged ones too, until a checkpoint trims them); only
    subscriptions that have some."""
    failed: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """The FAILED subscriptions (their error policy stopped them on a user error), with the error's type name."""
    user_errors: Mapping[tuple[str, str, str], int] = field(default_factory=lambda: MappingProxyType({}))
    """User errors since the engine opened, by ``(subscription, error type, action)``, the action ``"skip"`` (the
    element was skipped) or ``"stop"`` (the subscription failed)."""
