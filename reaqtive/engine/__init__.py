"""The query engine: standing queries by URI, persisted query expressions, checkpoints to SQLite, recovery after
a crash with no loss and no duplicates. See ``docs/engine.md``.

The asyncio face (:class:`AsyncEngine`, :mod:`reaqtive.engine.aio`) loads when first used, and asyncio with it."""

from typing import TYPE_CHECKING

from reaqtive.engine.database import (
    DeadLetter,
    ElementLetter,
    EngineStore,
    IngressEvent,
    IngressRun,
    UnknownEngineVersionError,
)
from reaqtive.engine.egress import EgressStamp, Output
from reaqtive.engine.engine import (
    DISCARD_SINK,
    DURABLE_SINK,
    ArtifactInfo,
    CheckpointMetrics,
    Engine,
    EngineStatus,
    RecoveryFailure,
    RecoveryMetrics,
    RecoveryPolicy,
    StreamStatus,
)
from reaqtive.engine.engine_errors import (
    AckError,
    ArtifactExistsError,
    ArtifactInUseError,
    ArtifactNotFoundError,
    EngineClosedError,
    EngineError,
    EngineRunningError,
    InnerRecoveryError,
    MalformedRecordError,
    OrphanedDataError,
    OutputDivergenceError,
    ProcessingStoppedError,
    QueryFailedError,
    RecoveryError,
    RetentionError,
    SchemaValidationError,
    StartBeyondLogError,
    StartError,
    StartNotRetainedError,
    UnknownSchemaError,
    UnstorableOutputError,
    UnstorableStateError,
)
from reaqtive.engine.environment import EngineEnvironment
from reaqtive.engine.expressions import (
    ExpressionError,
    ForbiddenReferenceError,
    FunctionRegistry,
    MalformedExpressionError,
    UnpersistableQueryError,
    decode_query,
    encode_query,
)
from reaqtive.engine.failures import RecordedError, SubscriptionFailedError
from reaqtive.engine.ingress import GroupCommit
from reaqtive.engine.metrics import (
    LOG_FIELDS,
    EngineReadings,
    MetricsError,
    MetricsUnavailableError,
    PrometheusMetrics,
    StreamReading,
    SubscriptionReading,
    read_engine,
)
from reaqtive.engine.model import SubscriptionState, SubscriptionStatus
from reaqtive.engine.named_sinks import MissingSinkError, SinkNameError
from reaqtive.engine.outbox import ObserverFailedError
from reaqtive.engine.postgres_database import PostgresEngineStore
from reaqtive.engine.readers import Envelope, StreamNotFoundError, StreamReader
from reaqtive.engine.retention import Retention
from reaqtive.engine.settings import EngineSettings, EnvironmentSettingError
from reaqtive.engine.signals import Signal

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports them on first use
    from reaqtive.engine.aio import AsyncEngine, ProcessingFailedError
else:

    def __getattr__(name: str) -> object:
        """PEP 562: the asyncio face loads on first use."""
        if name in ("AsyncEngine", "ProcessingFailedError"):
            from reaqtive.engine import aio

            return getattr(aio, name)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    # the asyncio face and the wake-up signals
    "AsyncEngine",
    "ProcessingFailedError",
    "Signal",
    "DISCARD_SINK",
    "DURABLE_SINK",
    "AckError",
    "ArtifactExistsError",
    "ArtifactInUseError",
    "ArtifactInfo",
    "ArtifactNotFoundError",
    "CheckpointMetrics",
    "DeadLetter",
    "ElementLetter",
    "EgressStamp",
    "Engine",
    "EngineClosedError",
    "EngineRunningError",
    "ProcessingStoppedError",
    "EngineEnvironment",
    "EngineError",
    "EngineSettings",
    "EngineStatus",
    "EngineStore",
    "Envelope",
    "EnvironmentSettingError",
    "ExpressionError",
    "ForbiddenReferenceError",
    "FunctionRegistry",
    "GroupCommit",
    "IngressEvent",
    "IngressRun",
    "InnerRecoveryError",
    "MalformedExpressionError",
    "MalformedRecordError",
    "MissingSinkError",
    "ObserverFailedError",
    "Output",
    "OrphanedDataError",
    "OutputDivergenceError",
    "PostgresEngineStore",
    "QueryFailedError",
    "RecoveryError",
    "RecoveryFailure",
    "RecoveryMetrics",
    "RecoveryPolicy",
    "Retention",
    "RetentionError",
    "SchemaValidationError",
    "StartBeyondLogError",
    "StartError",
    "StartNotRetainedError",
    "SinkNameError",
    "StreamNotFoundError",
    "StreamReader",
    "StreamStatus",
    "SubscriptionFailedError",
    "SubscriptionState",
    "SubscriptionStatus",
    "RecordedError",
    # metrics (reaqtive.engine.metrics)
    "LOG_FIELDS",
    "EngineReadings",
    "MetricsError",
    "MetricsUnavailableError",
    "PrometheusMetrics",
    "StreamReading",
    "SubscriptionReading",
    "read_engine",
    "UnknownEngineVersionError",
    "UnknownSchemaError",
    "UnpersistableQueryError",
    "UnstorableOutputError",
    "UnstorableStateError",
    "decode_query",
    "encode_query",
]
