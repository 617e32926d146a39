"""The query engine: standing queries by URI, persisted query expressions, checkpoints to SQLite, recovery after
a crash with no loss and no duplicates. See ``docs/engine.md``."""

from reaqtive.engine.aio import AsyncEngine, ProcessingFailedError
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
    SchemaValidationError,
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
from reaqtive.engine.settings import EngineSettings, EnvironmentSettingError
from reaqtive.engine.signals import Signal

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
    "SchemaValidationError",
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
