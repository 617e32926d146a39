"""The query engine: standing queries by URI, persisted query expressions, checkpoints to SQLite, recovery after
a crash with no loss and no duplicates. See ``docs/engine.md``."""

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
from reaqtive.engine.errors import (
    ArtifactExistsError,
    ArtifactInUseError,
    ArtifactNotFoundError,
    EngineClosedError,
    EngineError,
    RecoveryError,
)
from reaqtive.engine.expressions import (
    ExpressionError,
    FunctionRegistry,
    MalformedExpressionError,
    UnpersistableQueryError,
    decode_query,
    encode_query,
)
from reaqtive.engine.store import EngineStore, UnknownEngineVersionError
from reaqtive.engine.streams import Envelope, StreamNotFoundError, StreamReader

__all__ = [
    "DISCARD_SINK",
    "DURABLE_SINK",
    "ArtifactExistsError",
    "ArtifactInUseError",
    "ArtifactInfo",
    "ArtifactNotFoundError",
    "CheckpointMetrics",
    "EgressStamp",
    "Engine",
    "EngineClosedError",
    "EngineError",
    "EngineStatus",
    "EngineStore",
    "Envelope",
    "ExpressionError",
    "FunctionRegistry",
    "MalformedExpressionError",
    "Output",
    "RecoveryError",
    "RecoveryFailure",
    "RecoveryMetrics",
    "RecoveryPolicy",
    "StreamNotFoundError",
    "StreamReader",
    "StreamStatus",
    "UnknownEngineVersionError",
    "UnpersistableQueryError",
    "decode_query",
    "encode_query",
]
