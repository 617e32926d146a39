"""Read an engine's store without opening an engine: what ``reaqtive inspect STORE`` prints. STORE is an SQLite
file, or a PostgreSQL database (a ``postgresql://`` DSN, read in a ``READ ONLY`` transaction, as the file is
read below).

Opening an :class:`~reaqtive.engine.Engine` recovers: it binds every query, which needs the functions the queries
use, and it writes to the file. An inspector must do neither. :func:`read_store` opens the file with SQLite's
read-only mode (``file:...?mode=ro``), reads every table in one read transaction (a consistent view, also while an
engine is running on the file), verifies each blob's checksum, and decodes only JSON records, never operator
state. It never creates a missing file and never writes to an existing one. It never resolves what the queries
name either: a function reference or an error type is shown as the text the store holds, nothing is imported or
called (a store is data, see ``docs/engine.md``, "Threat model: store files"). (For a database in WAL mode, which an
engine's store is, SQLite may create the empty ``-wal``/``-shm`` companion files a reader needs; the database
file itself is not written.)

A file that is not an engine store is refused with a specific :class:`~reaqtive.state.StoreError` before anything
else is read: :class:`~reaqtive.state.NotAStoreError` for an empty file, a file that is not SQLite, a foreign
SQLite database or a bare checkpoint store; :class:`~reaqtive.state.UnknownStoreVersionError` and
:class:`~reaqtive.engine.UnknownEngineVersionError` for a store written by another layout version.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from datetime import timedelta
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from reaqtive.engine.database import (
    ENGINE_MIGRATES,
    ENGINE_SCHEMA_VERSION,
    UnknownEngineVersionError,
    dead_letter_ack_checksum,
    dead_letter_checksum,
    dead_letter_id_checksum,
    failed_element_checksum,
    from_micros,
)
from reaqtive.engine.engine_errors import EngineError
from reaqtive.engine.expressions import MalformedExpressionError, expression_from_json, instantiate
from reaqtive.operators.keyed_steps import recorded_keyed_form
from reaqtive.state import SCHEMA_VERSION, STATE_CATEGORY, NotAStoreError, StoreError, UnknownStoreVersionError
from reaqtive.state import checksum as blob_checksum
from reaqtive.state.postgres_store import is_postgres_dsn
from reaqtive.state.sqlite_store import MIGRATES, row_checksum, verifies

__all__ = [
    "ArtifactSummary",
    "DeadLetterSummary",
    "EgressSummary",
    "StoreSource",
    "StoreSummary",
    "StreamSummary",
    "describe_expression",
    "format_summary",
    "open_read_only",
    "read_only",
    "read_store",
    "summary_to_json",
]

_SQLITE_HEADER: Final = b"SQLite format 3\x00"
_STORE_FORMAT: Final = "reaqtive-checkpoint-store"  # what SqliteCheckpointStore writes in reaqtive_meta
_ENGINE_TABLES: Final = ("reaqtive_ingress", "reaqtive_stream_heads", "reaqtive_egress")
_BUILTIN_OBSERVERS: Final = {"reaqtive://sinks/durable": "durable sink", "reaqtive://sinks/discard": "discard"}


@dataclass(frozen=True)
class ArtifactSummary:
    """One artifact as stored."""

    uri: str
    kind: str
    created: str
    expression: dict[str, Any] | None
    """The encoded expression (subscriptions: the template with its constants filled in)."""
    summary: str
    """The expression as one line of fluent-style text."""
    observer: str | None
    references: list[str]
    state_bytes: int
    """Bytes of state: the subscription's own blob and those of its inner subscriptions."""
    inner_subscriptions: int
    problem: str | None = None
    """Why the record could not be read completely (a damaged blob, a missing template), if it could not."""
    schema: str | None = None
    """A typed stream's validator, by its registered name."""
    retain: dict[str, Any] | None = None
    """A stream's retention as its record stores it (``age`` in microseconds, ``events``, ``bytes``)."""
    backfill: dict[str, Any] | None = None
    """A backfilled subscription's start (``pos``, ``clock``, and ``joined`` once a checkpoint saw it caught up)."""
    failed: dict[str, Any] | None = None
    """A FAILED subscription's failure (its error policy stopped it on a user error): ``error_type``, ``message``,
    ``pos`` (the log position of the event that stopped it), ``at``, and where (``unit``, ``operator``,
    ``path``, ``traceback``); ``None`` for any other artifact."""
    on_error: str | None = None
    """A subscription's own error policy (``"stop"``, ``"skip"``, ``"function"``; ``None``: the engine's)."""
    keyed_form: int | None = None
    """The keyed form a subscription was recorded in and recovers in (:mod:`reaqtive.operators.keyed_steps`)."""


@dataclass(frozen=True)
class StreamSummary:
    """One durable stream, in events: ``appended`` so far, ``delivered`` to the queries as of the last checkpoint
    (the last delivered sequence number + 1; 0: none), and ``retained`` in the ingress log. ``appended`` and
    ``delivered`` count as the ``stream_appended_events`` and ``stream_delivered_events`` metrics do."""

    uri: str
    appended: int
    delivered: int
    retained: int
    schema: str | None = None
    """The name of the validator its events must pass (``None``: untyped)."""
    retention: str | None = None
    """What its log keeps beyond what its readers need (``None``: only that), as text."""
    retained_bytes: int = 0
    """The stored bytes of its retained events (payload and times)."""
    retained_from: int | None = None
    """The sequence number of its oldest retained event (``None``: none)."""


@dataclass(frozen=True)
class EgressSummary:
    """The durable sink's outputs of one subscription (``rows``: how many outputs it holds)."""

    subscription: str
    rows: int
    last_seq: int


@dataclass(frozen=True)
class DeadLetterSummary:
    """One dead letter. A quarantined event (``kind`` ``"event"``): its stream and sequence number, its log
    position (``None``: never logged), its time (ISO 8601; ``None`` if unusable), why it was quarantined and when.
    A failed element (``kind`` ``"element"``, store layout 5): ``stream`` is ``""`` and ``seq`` -1; the
    subscription, the unit and the operator's path and name, the log position of the event that carried it
    (``None``: none), the error (``reason`` is ``"<error_type>: <message>"``), the element's ``repr`` and when it
    was recorded. ``id``: its number (``None`` before layout 5); ``damaged``: the row does not match its
    checksum. Nothing is decoded."""

    stream: str
    seq: int
    time: str | None
    reason: str
    at: str | None
    id: int | None = None
    kind: str = "event"
    pos: int | None = None
    subscription: str | None = None
    unit: str | None = None
    path: str | None = None
    operator: str | None = None
    error_type: str | None = None
    message: str | None = None
    element: str | None = None
    damaged: bool = False


@dataclass(frozen=True)
class StoreSummary:
    """Everything :func:`read_store` found."""

    path: str
    file_bytes: int
    commits: int
    """Commits to the state tables so far: checkpoints and artifact creations and deletions."""
    clock: str | None
    """The engine's clock as of the last checkpoint (ISO 8601; ``None`` before the first checkpoint)."""
    position: int
    """The ingress position the last checkpoint covers (all streams, in delivery order)."""
    artifacts: list[ArtifactSummary]
    streams: list[StreamSummary]
    egress: list[EgressSummary]
    templates: int
    damaged: list[str] = field(default_factory=list)
    """``category/key`` of blobs whose checksum does not match (their bytes are in the file, unread)."""
    dead_letters: list[DeadLetterSummary] = field(default_factory=list)
    dead_letters_acknowledged: int | None = None
    """The number of the last dead letter the consumers acknowledged (0: none; ``None``: store layout before 5,
    whose dead letters have no numbers)."""
    """Events the engine quarantined instead of delivering them (store layout 2 and later)."""


# -- reading -------------------------------------------------------------------------------------------------------


def read_store(path: str | os.PathLike[str]) -> StoreSummary:
    """Summarize the engine store ``path`` names without changing it (see the module docstring): an SQLite file,
    or a PostgreSQL database for a ``postgresql://`` / ``postgres://`` URL or a libpq ``key=value`` DSN (as
    :class:`~reaqtive.engine.Engine` takes them).

    Raises :class:`FileNotFoundError` for a missing file, :class:`IsADirectoryError` for a directory,
    :class:`~reaqtive.state.StoreConnectionError` for a database that cannot be reached (named without its
    password), and the store errors above for anything that is not an engine store this version can read.
    """
    with open_read_only(path) as source:
        return _summarize(source)


def _summarize(db: StoreSource) -> StoreSummary:
    where = db.where
    version, engine_version = _check_layout(db, where)
    meta = dict(db.all("SELECT key, value FROM reaqtive_meta"))
    blobs: dict[str, dict[str, bytes]] = {}
    damaged: list[str] = []
    for category, key, value, crc in db.all("SELECT category, key, value, crc FROM reaqtive_blobs"):
        sound = type(value) is bytes and (  # schema 1: a checksum of the value; 2: of the whole row
            blob_checksum(value) == crc if version == 1 else verifies(crc, row_checksum, category, key, value))
        if not sound:
            damaged.append(f"{category}/{key}")
        else:
            blobs.setdefault(category, {})[key] = value
    dead_letters, acknowledged = _dead_letters(db, engine_version)
    heads = dict(db.all("SELECT stream, next_seq FROM reaqtive_stream_heads"))
    events = "SUM(count)" if engine_version >= 3 else "COUNT(*)"  # layout 3: a row per run of events
    size = "length(payload) + length(times)" if engine_version >= 3 else "length(payload)"
    extents = {stream: (count, stored, first) for stream, count, stored, first in db.all(
        f"SELECT stream, {events}, SUM({size}), MIN(seq) FROM reaqtive_ingress GROUP BY stream")}
    retained = {stream: extent[0] for stream, extent in extents.items()}
    egress = [
        EgressSummary(subscription, int(rows), int(last))  # PostgreSQL's SUM is a numeric: int() it
        for subscription, rows, last in db.all(
            f"SELECT subscription, {events}, MAX(seq) FROM reaqtive_egress GROUP BY subscription ORDER BY 1"
        )
    ]
    delivery = _json(blobs.get("engine", {}).get("delivery"), "the delivery record") or {}
    delivered = {str(k): int(v) for k, v in delivery.get("delivered", {}).items()}
    artifacts = _artifacts(blobs, damaged)
    stream_uris = sorted({a.uri for a in artifacts if a.kind == "stream"} | set(heads) | set(retained))
    schemas = {a.uri: a.schema for a in artifacts if a.kind == "stream"}
    retentions = {a.uri: _retention_text(a.retain) for a in artifacts if a.kind == "stream"}
    return StoreSummary(
        path=where,
        file_bytes=db.size,
        commits=int(meta.get("checkpoint_id", 0)),
        clock=from_micros(int(delivery["now"])).isoformat() if "now" in delivery else None,
        position=int(delivery.get("pos", 0)),
        artifacts=artifacts,
        streams=[StreamSummary(uri, int(heads.get(uri, 0)), delivered.get(uri, -1) + 1, int(retained.get(uri, 0)),
                               schemas.get(uri), retentions.get(uri), int(extents.get(uri, (0, 0, 0))[1] or 0),
                               int(extents[uri][2]) if uri in extents else None)
                 for uri in stream_uris],
        egress=egress,
        templates=len(blobs.get("templates", {})),
        damaged=sorted(damaged),
        dead_letters=dead_letters,
        dead_letters_acknowledged=acknowledged,
    )


def _dead_letters(db: StoreSource, engine_version: int) -> tuple[list[DeadLetterSummary], int | None]:
    """The dead letters (by number from layout 5 on, both kinds; before, the quarantined events by stream and
    sequence number), each verified against its checksum, and the acknowledgement (``None`` before layout 5)."""
    if engine_version < 2:
        return [], None
    if engine_version < 5:
        rows = db.all("SELECT stream, seq, pos, time, payload, reason, at, crc FROM reaqtive_dead_letters "
                      "ORDER BY stream, seq")
        return [_event_summary(None, stream, seq, pos, db.stored_time(time), payload, reason, at, crc, None)
                for stream, seq, pos, time, payload, reason, at, crc in rows], None
    letters = [
        _event_summary(letter_id, stream, seq, pos, db.stored_time(time), payload, reason, at, crc, id_crc)
        for letter_id, stream, seq, pos, time, payload, reason, at, crc, id_crc in db.all(
            "SELECT id, stream, seq, pos, time, payload, reason, at, crc, id_crc FROM reaqtive_dead_letters "
            "ORDER BY id")
    ]
    for row in db.all(
        "SELECT id, subscription, unit, path, pos, ordinal, operator, error_type, message, traceback, element, at, "
        "payload, crc FROM reaqtive_failed_elements ORDER BY id"
    ):
        letter_id, subscription, unit, path, pos, _, operator, error_type, message, _, element, at, _, crc = row
        letters.append(DeadLetterSummary(
            stream="", seq=-1, time=None, reason=f"{error_type}: {message}", at=_iso(at),
            id=letter_id if type(letter_id) is int else None, kind="element",
            pos=pos if type(pos) is int and pos >= 0 else None, subscription=str(subscription), unit=str(unit),
            path=str(path), operator=str(operator), error_type=str(error_type), message=str(message),
            element=None if element is None else str(element),
            damaged=not verifies(crc, failed_element_checksum, *row[:-1]),
        ))
    letters.sort(key=lambda letter: letter.id if letter.id is not None else -1)
    acknowledged = 0
    for name, letter_id, crc in db.all("SELECT name, id, crc FROM reaqtive_dead_letter_acks"):
        if name == "all" and type(letter_id) is int and verifies(crc, dead_letter_ack_checksum, name, letter_id):
            acknowledged = letter_id
    return letters, acknowledged


def _event_summary(  # noqa: PLR0917  (a row's columns)
    letter_id: object, stream: object, seq: object, pos: object, micros: object, payload: object, reason: object,
    at: object, crc: object, id_crc: object,
) -> DeadLetterSummary:
    sound = verifies(crc, dead_letter_checksum, stream, seq, pos, micros, payload, reason, at) and (
        letter_id is None or verifies(id_crc, dead_letter_id_checksum, letter_id, stream, seq))
    return DeadLetterSummary(
        str(stream), seq if type(seq) is int else -1, _iso(micros), str(reason), _iso(at),
        id=letter_id if type(letter_id) is int else None, pos=pos if type(pos) is int else None, damaged=not sound,
    )


def _iso(micros: object) -> str | None:
    if type(micros) is not int:
        return None
    try:
        return from_micros(micros).isoformat()
    except OverflowError:
        return None


def _check_file(path: Path) -> int:
    """Refuse what SQLite must not be asked to open: a missing file (it would create it), a directory, an empty
    file (a store would be created in it) or a file that is not SQLite. Returns the file's size."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if path.is_dir():
        raise IsADirectoryError(f"{path}: is a directory, not a store file")
    try:
        with path.open("rb") as file:
            header = file.read(len(_SQLITE_HEADER))
    except OSError as error:
        raise StoreError(f"{path}: cannot read the file: {error.strerror or error}") from error
    if not header:
        raise NotAStoreError(f"{path}: an empty file, not a reaqtive store")
    if header != _SQLITE_HEADER:
        raise NotAStoreError(f"{path}: not a reaqtive store (not an SQLite database)")
    return path.stat().st_size


class StoreSource:
    """One store, open for reading inside one read transaction: an SQLite file or a PostgreSQL database.
    :meth:`all` runs a statement in SQLite's dialect (``?`` parameters) on either."""

    def __init__(self, db: Any, where: str, size: int, *, postgres: bool) -> None:
        self.db = db
        self.where = where
        """The file's path, or the database's URL without its password."""
        self.size = size
        """Bytes: the file's, or the database's ``reaqtive_`` tables' (with their indexes)."""
        self.postgres = postgres

    def all(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        """The rows of ``sql``."""
        if self.postgres:
            from reaqtive.engine.postgres_database import postgres_sql

            sql = postgres_sql(sql)
        rows: list[Any] = self.db.execute(sql, params).fetchall()
        return rows

    def tables(self) -> set[str]:
        """The names of the tables (of the connection's current schema, in PostgreSQL)."""
        if self.postgres:
            sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        else:
            sql = "SELECT name FROM sqlite_master WHERE type = 'table'"
        return {str(row[0]) for row in self.db.execute(sql).fetchall()}

    def columns(self, table: str) -> set[str]:
        """The column names of ``table``."""
        if self.postgres:
            rows = self.db.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = "
                                   "current_schema() AND table_name = %s", (table,)).fetchall()
            return {str(row[0]) for row in rows}
        return {str(row[1]) for row in self.db.execute(f"PRAGMA table_info({table})").fetchall()}

    def stored_time(self, column: object) -> object:
        """A dead letter's time as the SQLite store keeps it: PostgreSQL keeps its msgpack (a column has one type)."""
        if not self.postgres:
            return column
        from reaqtive.engine.postgres_database import stored_time

        return stored_time(column)


@contextmanager
def open_read_only(target: str | os.PathLike[str]) -> Iterator[StoreSource]:
    """The store ``target`` names (a file path or a PostgreSQL DSN), open read-only in one read transaction:
    a file is checked first (:func:`read_store` says how it is refused); a database is read in a ``READ ONLY``
    transaction, so nothing can be written."""
    if is_postgres_dsn(target):
        with _postgres_read_only(str(target)) as source:
            yield source
        return
    if str(target) == ":memory:":
        raise NotAStoreError("':memory:' is an engine's store in its own process: there is nothing to read from "
                             "outside it")
    path = Path(target)
    size = _check_file(path)
    with read_only(path) as db:
        yield StoreSource(db, str(path), size, postgres=False)


@contextmanager
def _postgres_read_only(dsn: str) -> Iterator[StoreSource]:
    from reaqtive.state.postgres_store import (
        application_name,
        connect,
        describe_dsn,
        postgres_error,
        psycopg_module,
    )

    where = describe_dsn(dsn)
    db = connect(dsn, where, application=application_name("inspect"))
    psycopg = psycopg_module()
    try:
        db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")  # one consistent view, and no writes
        size = db.execute("SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                          "WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace "
                          "AND c.relname LIKE 'reaqtive\\_%'").fetchone()[0]
        yield StoreSource(db, where, int(size), postgres=True)
        db.execute("COMMIT")
    except psycopg.Error as error:
        raise postgres_error(error, where, "reading the store") from error
    finally:
        db.close()


@contextmanager
def read_only(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the store at ``path`` inside one read transaction (a consistent view while an
    engine writes); :class:`~reaqtive.state.StoreError` if it cannot be opened or read."""
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    try:
        db = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=5.0)
    except sqlite3.Error as error:
        raise StoreError(f"{path}: cannot open the store read-only: {error}") from error
    db.text_factory = _lenient_text  # a damaged row's text that is not UTF-8 shows escaped instead of failing
    try:
        db.execute("BEGIN")
        yield db
        db.execute("COMMIT")
    except sqlite3.DatabaseError as error:
        raise StoreError(f"{path}: cannot read the store: {error}") from error
    finally:
        db.close()


def _lenient_text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _check_layout(db: StoreSource, path: str) -> tuple[int, int]:
    """The checkpoint store's schema version and the engine's layout version (each the current one or one an
    engine would migrate when it opens the file; this reader reads them all)."""
    kind = "a PostgreSQL database" if db.postgres else "an SQLite database"
    try:
        tables = db.tables()
    except sqlite3.DatabaseError as error:
        raise NotAStoreError(f"{path}: not a reaqtive store (a damaged or unreadable SQLite file: {error})") from error
    if "reaqtive_meta" not in tables:
        raise NotAStoreError(f"{path}: {kind}, but not a reaqtive store (no reaqtive_meta table)")
    meta = dict(db.all("SELECT key, value FROM reaqtive_meta"))
    if meta.get("format") != _STORE_FORMAT:
        raise NotAStoreError(f"{path}: {kind}, but not a reaqtive store (reaqtive_meta has no format)")
    if meta.get("schema_version") != SCHEMA_VERSION and meta.get("schema_version") not in MIGRATES:
        raise UnknownStoreVersionError(path, meta.get("schema_version"), SCHEMA_VERSION, migrates=MIGRATES)
    if "engine_schema_version" not in meta or not set(_ENGINE_TABLES) <= tables:
        raise NotAStoreError(f"{path}: a reaqtive checkpoint store without the engine's tables (not written by an "
                             "Engine)")
    if meta["engine_schema_version"] != ENGINE_SCHEMA_VERSION and meta["engine_schema_version"] not in ENGINE_MIGRATES:
        raise UnknownEngineVersionError(
            f"{path}: written by an engine with store layout version {meta['engine_schema_version']!r}; this "
            f"version of reaqtive reads version {ENGINE_SCHEMA_VERSION}"
        )
    if "reaqtive_blobs" not in tables:
        raise NotAStoreError(f"{path}: the reaqtive_blobs table is missing")
    if meta["engine_schema_version"] >= 2 and "reaqtive_dead_letters" not in tables:
        raise NotAStoreError(f"{path}: the reaqtive_dead_letters table is missing")
    for table in ("reaqtive_failed_elements", "reaqtive_dead_letter_acks"):
        if meta["engine_schema_version"] >= 5 and table not in tables:
            raise NotAStoreError(f"{path}: the {table} table is missing")
    return int(meta["schema_version"]), int(meta["engine_schema_version"])


def _json(blob: bytes | None, what: str) -> dict[str, Any] | None:
    if blob is None:
        return None
    try:
        return expression_from_json(blob)
    except (MalformedExpressionError, ValueError, UnicodeDecodeError) as error:
        raise StoreError(f"{what} is not valid JSON: {error}") from error


def _retention_text(stored: dict[str, Any] | None) -> str | None:
    """A stored retention as text (an unreadable one says so; the engine refuses it at open)."""
    if stored is None:
        return None
    from reaqtive.engine.retention import retention_from_record

    try:
        retention = retention_from_record("?", {"retain": stored})
    except EngineError as error:
        return f"unreadable ({error})"
    return None if retention is None else retention.describe()


def _artifacts(blobs: Mapping[str, Mapping[str, bytes]], damaged: Sequence[str]) -> list[ArtifactSummary]:
    templates = blobs.get("templates", {})
    state = blobs.get(STATE_CATEGORY, {})
    result = []
    uris = set(blobs.get("artifacts", {})) | {d.partition("/")[2] for d in damaged if d.startswith("artifacts/")}
    for uri in sorted(uris):
        own = [key for key in state if key == uri]
        inner = [key for key in state if key.startswith(uri + "/")]
        state_bytes = sum(len(state[key]) for key in own + inner)
        blob = blobs.get("artifacts", {}).get(uri)
        mine = (f"artifacts/{uri}", f"{STATE_CATEGORY}/{uri}")
        problems = [d for d in damaged if d in mine or d.startswith(f"{STATE_CATEGORY}/{uri}/")]
        try:
            record = _json(blob, f"artifact {uri!r}") if blob is not None else None
        except StoreError as error:
            problems.append(str(error))
            record = None
        if record is None:
            result.append(ArtifactSummary(uri, "?", "", None, "", None, [], state_bytes, len(inner),
                                          "; ".join(problems) or "unreadable record"))
            continue
        kind = str(record.get("kind", "?"))
        expression: dict[str, Any] | None = record.get("expression")
        if kind == "subscription":
            template = _template(templates.get(str(record.get("template"))), record)
            if template is None:
                problems.append(f"its template {record.get('template')!r} is missing or damaged")
            else:
                expression = template
        elif kind == "observer":
            expression = {"op": "observer", "args": [record.get("function")]}
        observer = record.get("observer")
        schema = record.get("schema") if kind == "stream" else None
        failed = record.get("failed") if kind == "subscription" else None
        on_error = record.get("on_error") if kind == "subscription" else None
        keyed_form: int | None = None
        if kind == "subscription":
            try:
                keyed_form = recorded_keyed_form(record)
            except ValueError as error:
                problems.append(str(error))
        result.append(ArtifactSummary(
            uri=uri,
            kind=kind,
            created=str(record.get("created", "")),
            expression=expression,
            summary=describe_expression(expression) if expression is not None else "",
            observer=str(observer) if observer is not None else None,
            references=[str(ref) for ref in record.get("refs", [])],
            state_bytes=state_bytes,
            inner_subscriptions=len(inner),
            problem="; ".join(problems) or None,
            schema=str(schema) if schema is not None else None,
            retain=dict(record["retain"]) if kind == "stream" and isinstance(record.get("retain"), dict) else None,
            backfill=dict(record["backfill"]) if kind == "subscription" and isinstance(record.get("backfill"), dict)
            else None,
            failed=dict(failed) if isinstance(failed, dict) else None,
            on_error=None if on_error is None else on_error if isinstance(on_error, str) else "function",
            keyed_form=keyed_form,
        ))
    return result


def _template(blob: bytes | None, record: Mapping[str, Any]) -> dict[str, Any] | None:
    if blob is None:
        return None
    try:
        template = _json(blob, "template")
        return instantiate(template, list(record.get("constants", []))) if template is not None else None
    except (StoreError, MalformedExpressionError, ValueError, IndexError, KeyError, TypeError):
        return None


# -- rendering -------------------------------------------------------------------------------------------------


_CHAIN_SHOWN: Final = 12  # stages of a longer chain shown at each end


def describe_expression(expression: Any) -> str:
    """An encoded expression as one line of fluent-style text, e.g.
    ``stream('iot://readings').filter(is_hot).map(alert)`` (functions by their short name). A chain of stages
    is followed with a loop (a query thousands of stages deep describes fine); a chain longer than 24 stages shows
    its first and last 12."""
    stages: list[str] = []  # from the outermost operator to the innermost source
    node = expression
    while isinstance(node, dict) and "op" in node:
        op = str(node["op"])
        args = list(node.get("args", []))
        while args and args[-1] is None:  # optional arguments left out
            args.pop()
        if args and isinstance(args[0], dict) and len(args[0]) == 1 and ("q" in args[0] or "stream" in args[0]):
            stages.append(f".{op}({', '.join(_describe_arg(a) for a in args[1:])})")
            node = args[0].get("q", args[0])
            continue
        stages.append(f"{op}({', '.join(_describe_arg(a) for a in args)})")
        node = None
        break
    if node is not None:
        stages.append(_describe_arg(node))
    stages.reverse()
    if len(stages) > 2 * _CHAIN_SHOWN + 1:
        hidden = len(stages) - 2 * _CHAIN_SHOWN
        stages = [*stages[:_CHAIN_SHOWN], f"...({hidden:,} more stages)...", *stages[-_CHAIN_SHOWN:]]
    return "".join(stages)


def _describe_arg(arg: Any) -> str:
    if isinstance(arg, dict) and len(arg) == 1:
        (tag, value), = arg.items()
        if tag == "q":
            return describe_expression(value)
        if tag == "stream":
            return f"stream({value!r})"
        if tag == "fn":
            name = str(value)
            return name.rpartition(":")[2] if ":" in name else name
        if tag == "td" and isinstance(value, list) and len(value) == 3:
            return _duration(timedelta(days=value[0], seconds=value[1], microseconds=value[2]))
        if tag == "dt":
            return str(value)
        if tag in ("list", "tuple", "set"):
            inner = ", ".join(_describe_arg(a) for a in value)
            return f"[{inner}]" if tag == "list" else f"({inner})" if tag == "tuple" else f"{{{inner}}}"
        if tag == "dict":
            return "{" + ", ".join(f"{_describe_arg(k)}: {_describe_arg(v)}" for k, v in value) + "}"
        if tag == "range":
            return f"range({', '.join(map(str, value))})"
        if tag == "p":
            return f"${value}"
        if tag in ("int", "float", "bytes"):
            return str(value)
        if tag == "error":
            return f"{str(value[0]).rpartition(':')[2]}(...)"
    if isinstance(arg, dict) and "op" in arg:
        return describe_expression(arg)
    return repr(arg)


def _duration(value: timedelta) -> str:
    total = value.total_seconds()
    for unit, seconds in (("h", 3600), ("min", 60), ("s", 1)):
        if total >= seconds and total % seconds == 0:
            return f"{int(total // seconds)}{unit}"
    return f"{total:g}s"


def summary_to_json(summary: StoreSummary) -> dict[str, Any]:
    """The summary as JSON-compatible data (what ``reaqtive inspect --json`` prints). The expressions are the
    stored ones, not copies (``asdict`` would copy them recursively, which a deep query does not survive)."""
    data = {f.name: getattr(summary, f.name) for f in fields(summary)}
    data["artifacts"] = [{f.name: getattr(a, f.name) for f in fields(a)} for a in summary.artifacts]
    data["streams"] = [asdict(stream) for stream in summary.streams]
    data["egress"] = [asdict(egress) for egress in summary.egress]
    data["dead_letters"] = [asdict(letter) for letter in summary.dead_letters]
    return data


def format_summary(summary: StoreSummary) -> str:
    """The summary as text: a header, then tables of artifacts, expressions, streams and egress."""
    lines = [
        f"store        {summary.path} ({summary.file_bytes:,} bytes)",
        f"commits      {summary.commits} (checkpoints, creations and deletions)",
        "checkpoint   " + (f"engine clock {summary.clock}, ingress position {summary.position:,}"
                            if summary.clock is not None else "none yet"),
        "",
        f"artifacts ({len(summary.artifacts)}; {summary.templates} stored query templates)",
    ]
    rows = [("KIND", "URI", "CREATED", "STATE", "OUTPUTS TO")]
    for artifact in summary.artifacts:
        state = _bytes(artifact.state_bytes) if artifact.kind == "subscription" else "-"
        if artifact.inner_subscriptions:
            state += f" ({artifact.inner_subscriptions} inner)"
        observer = "" if artifact.observer is None else _BUILTIN_OBSERVERS.get(artifact.observer, artifact.observer)
        kind = artifact.kind + (" FAILED" if artifact.failed is not None else "")
        rows.append((kind, artifact.uri, artifact.created[:19].replace("T", " "), state, observer))
    lines += _table(rows[:1], right={3}, rows=rows[1:]) if summary.artifacts else ["  (none)"]
    failed = [a for a in summary.artifacts if a.failed is not None]
    if failed:
        lines += ["", f"FAILED subscriptions ({len(failed)}: a user function raised and their error policy stopped "
                      "them; restart_subscription runs them again)"]
        for artifact in failed:
            detail = artifact.failed or {}
            where = "" if detail.get("unit") is None else \
                f" in {detail.get('operator')} at {detail.get('unit')}#{detail.get('path')}"
            lines.append(f"  {artifact.uri}: {detail.get('error_type')}: {detail.get('message')}{where}, event at "
                         f"log position {detail.get('pos')}, since {str(detail.get('at', ''))[:19].replace('T', ' ')}")
    described = [a for a in summary.artifacts if a.summary or a.problem]
    if described:
        lines += ["", "expressions"]
        uri_width = max(len(a.uri) for a in described)
        for artifact in described:
            text = artifact.summary + (f"  [DAMAGED: {artifact.problem}]" if artifact.problem else "")
            lines.append(f"  {artifact.uri.ljust(uri_width)}  {text}")
    lines += ["", "ingress (durable streams; events appended, delivered to the queries as of the last checkpoint, "
                  "retained in the log)"]
    if summary.streams:
        typed = any(s.schema is not None for s in summary.streams)  # the SCHEMA column only when a stream has one
        lines += _table([("STREAM", "APPENDED", "DELIVERED", "RETAINED", "SCHEMA")[:5 if typed else 4]],
                        right={1, 2, 3}, rows=[
            (s.uri, f"{s.appended:,}", f"{s.delivered:,}", f"{s.retained:,}",
             s.schema or "-")[:5 if typed else 4]
            for s in summary.streams
        ])
        if any(s.retention is not None for s in summary.streams):  # only when a stream keeps more than it needs
            lines += ["", "retention (what each stream's log keeps for backfills; the oldest retained event)"]
            lines += _table([("STREAM", "RETENTION", "RETAINED BYTES", "FROM #")], right={2, 3}, rows=[
                (s.uri, s.retention or "readers' need", f"{s.retained_bytes:,}",
                 "-" if s.retained_from is None else f"{s.retained_from:,}")
                for s in summary.streams
            ])
    else:
        lines.append("  (none)")
    lines += ["", "egress (the durable sink)"]
    if summary.egress:
        lines += _table([("SUBSCRIPTION", "ROWS", "LAST SEQ")], right={1, 2}, rows=[
            (e.subscription, f"{e.rows:,}", f"{e.last_seq:,}") for e in summary.egress
        ])
    else:
        lines.append("  (no outputs)")
    if summary.dead_letters:
        lines += ["", _dead_letters_heading(summary)]
        lines += _table([("ID", "KIND", "STREAM / SUBSCRIPTION", "SEQ", "POS", "TIME", "RECORDED", "REASON")],
                        right={0, 3, 4}, rows=[_dead_letter_row(letter) for letter in summary.dead_letters])
    if summary.damaged:
        lines += ["", f"damaged blobs ({len(summary.damaged)}; their bytes stay in the file)"]
        lines += [f"  {key}" for key in summary.damaged]
    return "\n".join(lines)


def _dead_letters_heading(summary: StoreSummary) -> str:
    events = sum(letter.kind == "event" for letter in summary.dead_letters)
    elements = len(summary.dead_letters) - events
    acknowledged = summary.dead_letters_acknowledged
    return (f"dead letters ({events} quarantined events, not delivered; {elements} failed elements, skipped"
            + ("" if acknowledged is None else f"; acknowledged up to #{acknowledged}") + ")")


def _dead_letter_row(letter: DeadLetterSummary) -> tuple[str, ...]:
    reason = letter.reason
    if letter.kind == "element":
        reason += f" (in {letter.operator} at {letter.unit}#{letter.path}"
        reason += f"; element {letter.element})" if letter.element is not None else ")"
    if letter.damaged:
        reason += "  [DAMAGED: the row does not match its checksum]"
    return (
        "-" if letter.id is None else f"{letter.id:,}",
        letter.kind,
        letter.stream if letter.kind == "event" else str(letter.subscription),
        f"{letter.seq:,}" if letter.kind == "event" else "-",
        "-" if letter.pos is None else f"{letter.pos:,}",
        (letter.time or ("unusable" if letter.kind == "event" else "-"))[:19].replace("T", " "),
        (letter.at or "?")[:19].replace("T", " "),
        reason,
    )


def _table(
    header: Sequence[Sequence[str]], *, right: set[int], rows: Sequence[Sequence[str]] = ()
) -> list[str]:
    """Aligned columns (those in ``right`` right-aligned), two spaces of indent."""
    everything = [*header, *rows]
    widths = [max(len(row[i]) for row in everything) for i in range(len(everything[0]))]
    out = []
    for row in everything:
        cells = [cell.rjust(w) if i in right else cell.ljust(w)
                 for i, (cell, w) in enumerate(zip(row, widths, strict=True))]
        out.append("  " + "  ".join(cells).rstrip())
    return out


def _bytes(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    if count < 1024 * 1024:
        return f"{count / 1024:.1f} KiB"
    return f"{count / 1024 / 1024:.1f} MiB"

