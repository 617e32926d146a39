"""The connectors' errors: each names the connector's target (URL, file, stream) and, for an output, its
``(subscription, seq)``; a file position is given as ``path:line``."""

from __future__ import annotations

from reaqtive.core.describe import error_text
from reaqtive.engine.engine_errors import EngineError

__all__ = [
    "ConnectorError",
    "MalformedLineError",
    "SinkFileError",
    "SourceConflictError",
    "SourceError",
    "SourceFileChangedError",
    "SourceStateError",
    "UnencodableOutputError",
    "WebhookError",
    "WebhookRejectedError",
    "WebhookUnavailableError",
]


class ConnectorError(EngineError):
    """Base of the errors of the sinks and sources in :mod:`reaqtive.connectors`."""


class UnencodableOutputError(ConnectorError, TypeError):
    """An output whose value JSON cannot represent (a set, a datetime without ``json_default``, NaN...). Nothing
    was sent or written; the outbox retries it and then stops the subscription, keeping its outputs."""

    def __init__(self, subscription: str, seq: int, error: BaseException) -> None:
        super().__init__(f"output {subscription}#{seq}: its value is not JSON ({type(error).__name__}: "
                         f"{error_text(error)}); pass json_default= to convert it")
        self.subscription = subscription
        self.seq = seq


class WebhookError(ConnectorError):
    """Base of the webhook sink's errors; ``url``, ``subscription`` and ``seq`` say what failed where."""

    def __init__(self, message: str, url: str, subscription: str, seq: int) -> None:
        super().__init__(message)
        self.url = url
        self.subscription = subscription
        self.seq = seq


class WebhookRejectedError(WebhookError):
    """The receiver refused the output for good (a 4xx other than 408 and 429, or a redirect): sending it again
    would not help. ``status`` is the HTTP status, ``body`` the start of the response."""

    def __init__(self, url: str, subscription: str, seq: int, *, status: int, reason: str, body: str) -> None:
        super().__init__(f"POST {url}: output {subscription}#{seq} rejected with {status} {reason}"
                         + (f": {body}" if body else ""), url, subscription, seq)
        self.status = status
        self.body = body


class WebhookUnavailableError(WebhookError):
    """The receiver did not accept the output within the sink's retries and time budget (connection errors,
    timeouts, 5xx, 429). The cause is ``__cause__``; ``attempts`` says how many requests were made."""

    def __init__(self, url: str, subscription: str, seq: int, attempts: int, last: str) -> None:
        super().__init__(f"POST {url}: output {subscription}#{seq} not accepted after {attempts} attempt(s); "
                         f"last: {last}", url, subscription, seq)
        self.attempts = attempts


class SinkFileError(ConnectorError, ValueError):
    """A JSON-lines sink cannot use its file: a complete line that is not one of its outputs (the file was edited
    or damaged; ``path:line`` says where), or the file is in use by another sink. Nothing in it was changed."""


class SourceError(ConnectorError):
    """Base of the file source's errors."""


class MalformedLineError(SourceError, ValueError):
    """A record of a source file cannot be read (not JSON, not a CSV row of the header's width, a bad event
    time...). ``path`` and ``line`` (1-based) say where; the source stops before it, nothing after it is
    appended."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason


class SourceFileChangedError(SourceError):
    """A source's file is no longer the one it read: replaced (another inode), shrunk below what was read, or
    rewritten before the source's offset. Nothing is appended; see docs/connectors.md for what to do."""


class SourceStateError(SourceError, ValueError):
    """The position a checkpoint stored for a source cannot be used: damaged, forged, of another file, or the
    stream has fewer events than the position says (another writer, or the stream was recreated)."""


class SourceConflictError(SourceError):
    """The source's stream has events the source did not append: it must be the stream's only writer."""
