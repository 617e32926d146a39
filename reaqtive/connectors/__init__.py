"""Sinks and sources a service needs around the engine: a webhook sink, a JSON-lines file sink and a JSON-lines /
CSV file source, each idempotent by ``(subscription, seq)`` (sinks) or by its position in the checkpoint (the
source), standard library only. See ``docs/connectors.md``."""

from reaqtive.connectors.errors import (
    ConnectorError,
    MalformedLineError,
    SinkFileError,
    SourceConflictError,
    SourceError,
    SourceFileChangedError,
    SourceStateError,
    UnencodableOutputError,
    WebhookError,
    WebhookRejectedError,
    WebhookUnavailableError,
)
from reaqtive.connectors.file_source import FileSource
from reaqtive.connectors.json_lines_sink import JsonLinesSink
from reaqtive.connectors.postgres_sink import (
    PostgresSink,
    PostgresSinkError,
    PostgresSinkTableError,
    PostgresSinkUnavailableError,
)
from reaqtive.connectors.webhook import IDEMPOTENCY_HEADER, WebhookSink

__all__ = [
    "IDEMPOTENCY_HEADER",
    "ConnectorError",
    "FileSource",
    "JsonLinesSink",
    "MalformedLineError",
    "PostgresSink",
    "PostgresSinkError",
    "PostgresSinkTableError",
    "PostgresSinkUnavailableError",
    "SinkFileError",
    "SourceConflictError",
    "SourceError",
    "SourceFileChangedError",
    "SourceStateError",
    "UnencodableOutputError",
    "WebhookError",
    "WebhookRejectedError",
    "WebhookSink",
    "WebhookUnavailableError",
]
