"""Sinks and sources a service needs around the engine: a webhook sink, a JSON-lines file sink and a JSON-lines /
CSV file source, each idempotent by ``(subscription, seq)`` (sinks) or by its position in the checkpoint (the
source), standard library only. See ``docs/connectors.md``.

Each connector's module loads when the connector is first used (``from reaqtive.connectors import WebhookSink``
loads http.client and ssl; :class:`FileSource` loads asyncio only when :meth:`FileSource.run` is awaited)."""

from typing import TYPE_CHECKING

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

_LAZY_NAMES = {
    "FileSource": "file_source",
    "JsonLinesSink": "json_lines_sink",
    "PostgresSink": "postgres_sink",
    "PostgresSinkError": "postgres_sink",
    "PostgresSinkTableError": "postgres_sink",
    "PostgresSinkUnavailableError": "postgres_sink",
    "IDEMPOTENCY_HEADER": "webhook",
    "WebhookSink": "webhook",
}
"""The connectors, each loaded on first use (name to module)."""

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports them on first use
    from reaqtive.connectors.file_source import FileSource
    from reaqtive.connectors.json_lines_sink import JsonLinesSink
    from reaqtive.connectors.postgres_sink import (
        PostgresSink,
        PostgresSinkError,
        PostgresSinkTableError,
        PostgresSinkUnavailableError,
    )
    from reaqtive.connectors.webhook import IDEMPOTENCY_HEADER, WebhookSink
else:

    def __getattr__(name: str) -> object:
        """PEP 562: a connector's module loads on first use."""
        module = _LAZY_NAMES.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{module}"), name)


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
