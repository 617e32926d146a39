"""The engine's errors: each names the artifact and what was wrong."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from reaqtive.core.describe import error_text, shown
from reaqtive.core.errors import ReaqtiveError

__all__ = [
    "AckError",
    "ArtifactExistsError",
    "ArtifactInUseError",
    "ArtifactNotFoundError",
    "EngineClosedError",
    "EngineError",
    "InnerRecoveryError",
    "MalformedRecordError",
    "OrphanedDataError",
    "OutputDivergenceError",
    "QueryFailedError",
    "RecoveryError",
    "RetentionError",
    "SchemaValidationError",
    "StartBeyondLogError",
    "StartError",
    "StartNotRetainedError",
    "UnknownSchemaError",
    "UnstorableOutputError",
    "UnstorableStateError",
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


class EngineRunningError(EngineError, RuntimeError):
    """``engine.start()`` while its processing thread already runs."""


class ProcessingStoppedError(EngineError, RuntimeError):
    """The processing thread of ``engine.start()`` stopped on an error (its cause); ``engine.stop()`` raises it."""


class AckError(EngineError, ValueError):
    """An acknowledgement the engine refuses: of an output the subscription has not produced yet, or of a
    subscription whose outputs do not go to the durable sink. Nothing was recorded."""


class RecoveryError(EngineError):
    """Recovery stopped at an artifact the failure policy said must not fail; nothing in the store was changed."""

    def __init__(self, uri: str, error: BaseException) -> None:
        super().__init__(f"recovering {uri!r} failed: {type(error).__name__}: {error_text(error)}")
        self.uri = uri
        self.error = error


class MalformedRecordError(EngineError, ValueError):
    """One of the engine's own rows in the store (an artifact record, a query template, the delivery record, an
    output counter) cannot be read: damaged, forged, or written by an incompatible version. The message names
    the row and the field."""


class OrphanedDataError(EngineError):
    """Stored data that belongs to no subscription (an orphan): a state, an output counter, an observer cursor,
    outputs in the durable sink or an acknowledgement under a key no subscription owns, and no recovered query
    re-created. A sign of damage (a record lost, or rewritten as another kind) or of a deletion that did not
    complete; recovery hands it to the recovery policy. ``key`` names it and ``found`` lists what is stored."""

    def __init__(self, key: str, found: Sequence[str]) -> None:
        super().__init__(
            f"the store holds {', '.join(found)} under {key!r}, which belongs to no subscription (no record claims "
            "it and no recovered query re-created it): a record was lost or rewritten, or a deletion did not complete"
        )
        self.key = key
        self.found = tuple(found)


class InnerRecoveryError(EngineError):
    """An inner subscription of a query (a group's query, a ``flat_map`` inner) failed to recover: its state is
    missing, damaged or of a version the code does not load. The query fails to recover as a whole, under the
    recovery policy; ``inner_id`` names the inner unit and ``error`` is the cause."""

    def __init__(self, inner_id: str, error: BaseException) -> None:
        super().__init__(f"inner subscription {inner_id!r}: {type(error).__name__}: {error_text(error)}")
        self.inner_id = inner_id
        self.error = error


class UnstorableOutputError(EngineError, TypeError):
    """A query produced an output its sink cannot keep (a value the state codec cannot encode). Only that
    subscription stops; the message names it and the output's sequence number."""

    def __init__(self, subscription: str, seq: int, error: BaseException) -> None:
        super().__init__(f"subscription {subscription!r}: output #{seq} cannot be stored: {error_text(error)}")
        self.subscription = subscription
        self.seq = seq


class UnstorableStateError(EngineError, TypeError):
    """A query's state (or one of its inner units') cannot be saved, so a checkpoint could not include it. Only
    that subscription stops, with its last saved state kept; the message names it and the unit."""

    def __init__(self, subscription: str, unit: str, error: BaseException) -> None:
        where = "" if unit == subscription else f" (inner subscription {unit!r})"
        super().__init__(f"subscription {subscription!r}{where}: its state cannot be saved: {error_text(error)}")
        self.subscription = subscription
        self.unit = unit


class OutputDivergenceError(EngineError):
    """A replay after a restart produced, under an id the durable sink already holds, another output than the
    one stored: the query is not deterministic, or its stored output counter was damaged (new outputs would
    vanish as duplicates). The subscription stops rather than losing either; the message names both values."""

    def __init__(self, subscription: str, seq: int, stored: object, produced: object) -> None:
        super().__init__(
            f"subscription {subscription!r}: the replay produced output #{seq} = {shown(produced)[:60]}, but the "
            f"durable sink holds #{seq} = {shown(stored)[:60]}"
        )
        self.subscription = subscription
        self.seq = seq


class QueryFailedError(EngineError):
    """An exception escaped a query's operators while the engine delivered an event to it (an operator did not
    turn it into ``on_error``: a bug, or state that loaded but cannot work). Only that query stops; the cause is
    ``__cause__``."""

    def __init__(self, subscription: str, unit: str, error: BaseException) -> None:
        where = "" if unit == subscription else f" (inner subscription {unit!r})"
        super().__init__(f"subscription {subscription!r}{where} failed: {type(error).__name__}: {error_text(error)}")
        self.subscription = subscription
        self.unit = unit
        self.__cause__ = error


class UnknownSchemaError(EngineError, LookupError):
    """A stream's validator (its schema, registered by name: ``engine.register_schema``) is not registered in this
    process: ``create_stream(uri, schema=name)`` with a name never registered, an append to a typed stream whose
    validator the host did not register again (kept by recovery under ``RecoveryPolicy.KEEP``: appends to it are
    refused until the host registers it), or recovery of such a stream (under the recovery policy). ``stream``
    and ``schema`` name both."""

    def __init__(self, message: str, *, stream: str, schema: object) -> None:
        super().__init__(message)
        self.stream = stream
        self.schema = schema


class RetentionError(EngineError, ValueError):
    """A stream's retention (``create_stream(uri, retain=...)``) is not one the engine knows: a negative or zero
    amount, an unknown form, or one that differs from the retention the stream was created with."""


class StartError(EngineError, ValueError):
    """Where a new subscription starts (``create_subscription(..., start=...)``) is not one it can start from: the
    message names the argument and what the log holds. The subclasses say which bound was crossed."""


class StartNotRetainedError(StartError):
    """A backfill's start is before the earliest event the log still retains for a stream the query reads:
    ``stream`` names it, ``earliest`` is the earliest position the query can start from (``"earliest"`` resolves
    to it)."""

    def __init__(self, message: str, *, stream: str, earliest: int) -> None:
        super().__init__(message)
        self.stream = stream
        self.earliest = earliest


class StartBeyondLogError(StartError):
    """A backfill's start is past what the engine delivered (a log position beyond it, a time after its clock):
    there is no history there to process."""


_PROBLEMS_SHOWN: Final = 5  # field problems of one event written into the message (all are in ``problems``)


class SchemaValidationError(EngineError, ValueError):
    """An event appended to a typed stream does not pass the stream's validator: nothing of the call was appended
    (for ``extend``: nothing of the chunk holding it, nor after it; ``appended`` events of earlier chunks were).

    ``stream`` and ``schema`` name the stream and its validator; ``index`` is the event's index in the call (in
    ``extend``, counted from the first event of the call); ``problems`` lists ``(field, message)`` pairs, ``field``
    the dotted path of the field (``"celsius"``, ``"readings.0.celsius"``) or ``None`` when the validator named
    none (the event as a whole); ``fields`` the paths alone. The cause (``__cause__``) is the validator's error.
    """

    def __init__(
        self,
        stream: str,
        schema: str,
        index: int,
        problems: Sequence[tuple[str | None, str]],
        *,
        appended: int = 0,
    ) -> None:
        self.stream = stream
        self.schema = schema
        self.index = index
        self.problems = tuple(problems)
        self.appended = appended
        shown = "; ".join(
            (f"field {field!r}: {message}" if field is not None else f"the event: {message}")
            for field, message in self.problems[:_PROBLEMS_SHOWN]
        ) or "refused"
        if len(self.problems) > _PROBLEMS_SHOWN:
            shown += f"; and {len(self.problems) - _PROBLEMS_SHOWN} more"
        outcome = (f"nothing of its chunk was appended (the {appended:,} events before it were)" if appended
                   else "nothing of the call was appended")
        super().__init__(
            f"stream {stream!r} (schema {schema!r}): event #{index} of the call does not validate: {shown}; "
            f"{outcome}"
        )

    @property
    def fields(self) -> tuple[str, ...]:
        """The fields the validator named (dotted paths), in its order."""
        return tuple(field for field, _ in self.problems if field is not None)

    def after(self, appended: int) -> SchemaValidationError:
        """The same refusal seen from a call that appended ``appended`` events before this one's batch (its
        index shifted by that many): what ``extend`` raises for a chunk after the first."""
        return SchemaValidationError(self.stream, self.schema, self.index + appended, self.problems,
                                     appended=self.appended + appended)


class UpdateError(EngineError, ValueError):
    """``update_subscription`` or ``rollback_subscription`` refused: the subscription cannot be updated as asked
    (it does not run, it is behind the engine, a state the caller required cannot move, the new definition fails
    to start, there is nothing to roll back to). Nothing changed."""
