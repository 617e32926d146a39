"""The engine's errors: each names the artifact and what was wrong."""

from __future__ import annotations

from reaqtive.errors import ReaqtiveError

__all__ = [
    "ArtifactExistsError",
    "ArtifactInUseError",
    "ArtifactNotFoundError",
    "EngineClosedError",
    "EngineError",
    "RecoveryError",
]


class EngineError(ReaqtiveError):
    """Base of the engine's errors."""


class ArtifactExistsError(EngineError, ValueError):
    """An artifact with this URI already exists (each kind of artifact has one namespace of URIs)."""


class ArtifactNotFoundError(EngineError, LookupError):
    """No artifact with this URI exists."""


class ArtifactInUseError(EngineError, RuntimeError):
    """The artifact cannot be removed while other artifacts use it; the message lists them."""


class EngineClosedError(EngineError, RuntimeError):
    """The engine was closed."""


class RecoveryError(EngineError):
    """Recovery stopped at an artifact the failure policy said must not fail; nothing in the store was changed."""

    def __init__(self, uri: str, error: BaseException) -> None:
        super().__init__(f"recovering {uri!r} failed: {type(error).__name__}: {error}")
        self.uri = uri
        self.error = error
