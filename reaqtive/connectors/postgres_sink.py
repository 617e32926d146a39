"""Outputs into a PostgreSQL table, once each: an observer function that upserts by ``(subscription, seq)``.

>>> sink = PostgresSink("postgresql://app@db/reports", "totals", create=True)   # doctest: +SKIP
>>> engine = Engine("app.db", sinks=[sink])          # named "totals"; in every process  # doctest: +SKIP
>>> engine.create_subscription("q", query, observer=sink)   # defines obs://totals once   # doctest: +SKIP

The engine hands an observer each output at least once, in order, and again after a restart (see
:mod:`reaqtive.engine.outbox`). The sink makes that effectively-once: each output is one
``INSERT ... ON CONFLICT (subscription, seq) DO NOTHING``, committed before the call returns, so a repeat finds
its row and adds nothing — the first version of an output is kept, as in the engine's durable sink.

The table has three columns (names configurable): ``subscription text``, ``seq bigint``, ``value jsonb`` (or
``json``), with a primary key or unique constraint on exactly ``(subscription, seq)``. ``create=True`` creates
it if missing; otherwise a missing or ill-shaped table is a :class:`PostgresSinkTableError` on the first call.

The sink has its own connection (opened on first use, so constructing it never touches the network). A dropped
connection is opened again and the insert repeated once within the call — safe, since the insert is idempotent;
if that fails too the call raises :class:`PostgresSinkUnavailableError` and the engine's outbox retries with its
backoff, stopping the subscription (its outputs kept) after its retries. Every wait is bounded by ``timeout``
(connecting, each statement, and unacknowledged TCP data), so the sink never hangs ``process()``.

psycopg (``pip install 'reaqtive[postgres]'``) is imported on first use only.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Sequence
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any

from reaqtive.connectors.errors import ConnectorError, UnencodableOutputError
from reaqtive.engine.egress import Output
from reaqtive.engine.named_sinks import check_sink_name
from reaqtive.state.postgres_store import describe_dsn
from reaqtive.state.state_errors import StoreError

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql

    from reaqtive.connectors._json import JsonDefault

__all__ = ["PostgresSink", "PostgresSinkError", "PostgresSinkTableError", "PostgresSinkUnavailableError"]

_TEXT_TYPES = frozenset({"text", "character varying"})
_SEQ_TYPES = frozenset({"bigint"})
_VALUE_TYPES = frozenset({"jsonb", "json"})


class PostgresSinkError(ConnectorError):
    """Base of the PostgreSQL sink's errors; the message names the table and the database (never a password)."""


class PostgresSinkTableError(PostgresSinkError, ValueError):
    """The sink's table is missing (and ``create`` is false) or has the wrong shape: a column missing or of the
    wrong type, or no primary key / unique constraint on exactly ``(subscription, seq)``. Nothing was changed."""


class PostgresSinkUnavailableError(PostgresSinkError):
    """The database did not take the output (connection refused or dropped twice, a timeout...): the outbox
    retries later. The cause is ``__cause__``."""


def _import_psycopg() -> ModuleType:
    try:
        import psycopg
    except ImportError as error:  # pragma: no cover - the extra is installed wherever this is tested
        raise PostgresSinkError("PostgresSink needs psycopg: pip install 'reaqtive[postgres]'") from error
    return psycopg


def _untranslatable(rows: list[tuple[str, int, str]]) -> tuple[str, int]:
    """The first row whose value jsonb cannot hold (a NUL escaped in a string), else the first row."""
    for subscription, seq, value in rows:
        if "\\u0000" in value:
            return subscription, seq
    return rows[0][0], rows[0][1]


def _describe(dsn: str) -> str:
    """The database for messages, never the password."""
    try:
        return describe_dsn(dsn)
    except StoreError:  # unparsable: the connect fails with psycopg's own (password-free) message
        return "<unparsable DSN>"


class PostgresSink:
    """An observer function writing each output to ``table`` once (see the module).

    ``schema`` defaults to the connection's ``search_path``; ``columns`` renames the three columns (keys
    ``"subscription"``, ``"seq"``, ``"value"``); ``json_default`` converts values JSON cannot represent
    (``json.dumps``'s ``default``); ``timeout`` bounds each wait in seconds. ``name``: the name the engine's
    store keeps for the sink (its observer is ``obs://<name>``; default: the table, with its schema if given).
    """

    def __init__(
        self,
        dsn: str,
        table: str,
        *,
        schema: str | None = None,
        create: bool = False,
        columns: dict[str, str] | None = None,
        json_default: JsonDefault | None = None,
        timeout: float = 10.0,
        name: str | None = None,
    ) -> None:
        if not isinstance(table, str) or not table:
            raise ValueError(f"PostgresSink: table must be a non-empty name, got {table!r}")
        names = {"subscription": "subscription", "seq": "seq", "value": "value", **(columns or {})}
        if set(names) != {"subscription", "seq", "value"} or len(set(names.values())) != 3:
            raise ValueError(
                f"PostgresSink: columns must map 'subscription', 'seq', 'value' to three distinct names, "
                f"got {columns!r}"
            )
        if not timeout > 0:
            raise ValueError(f"PostgresSink: timeout must be > 0 seconds, got {timeout!r}")
        self.name = check_sink_name((table if schema is None else f"{schema}.{table}") if name is None else name,
                                    f"PostgresSink(table={table!r})")
        """The name the engine's store keeps for this sink (see :mod:`reaqtive.engine.named_sinks`)."""
        self.dsn = dsn
        self.table = table
        self.schema = schema
        self.create = create
        self.columns = names
        self.timeout = timeout
        self._json_default = json_default
        self._where = f"table {table if schema is None else schema + '.' + table} in {_describe(dsn)}"
        self._connection: psycopg.Connection[Any] | None = None
        self._insert: sql.Composed | None = None
        self._lock = threading.Lock()  # the engine delivers from one thread at a time; an async host may switch

    # -- the observer ------------------------------------------------------------------------------------------

    def __call__(self, output: Output) -> None:
        """Write ``output`` unless its ``(subscription, seq)`` is in the table already; committed on return."""
        self.write_batch((output,))

    def write_batch(self, outputs: Sequence[Output]) -> None:
        """Write the outputs not in the table yet, in one transaction (the outbox hands over a batch this way):
        all of them are committed when this returns, or none."""
        rows = [(output.subscription, output.seq, self._json(output)) for output in outputs]
        if rows:
            with self._lock:
                self._write(rows)

    def _json(self, output: Output) -> str:
        try:
            value = json.dumps(output.value, default=self._json_default, allow_nan=False, ensure_ascii=False)
            value.encode("utf-8")  # a lone surrogate passes dumps with ensure_ascii=False, not the server
        except Exception as error:  # TypeError, ValueError (NaN), UnicodeEncodeError, RecursionError, default's
            raise UnencodableOutputError(output.subscription, output.seq, error) from error
        return value

    def _write(self, rows: list[tuple[str, int, str]]) -> None:
        psycopg = _import_psycopg()
        first = f"{rows[0][0]}#{rows[0][1]}" + ("" if len(rows) == 1 else f" (and {len(rows) - 1} more)")
        for attempt in (1, 2):
            try:
                connection, insert = self._connected()
                if len(rows) == 1:
                    connection.execute(insert, rows[0])
                else:
                    with connection.transaction(), connection.cursor() as cursor:
                        cursor.executemany(insert, rows)
                return
            except psycopg.errors.UntranslatableCharacter as error:
                # jsonb holds no U+0000 in strings: a property of the value, so retrying cannot help.
                subscription, seq = _untranslatable(rows)
                raise UnencodableOutputError(subscription, seq, error) from error
            except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn) as error:
                raise PostgresSinkTableError(f"{self._where}: changed under the sink ({error})") from error
            except psycopg.OperationalError as error:
                # The connection is gone or unusable (server restart, terminated backend, network): the insert
                # is idempotent, so one more try on a fresh connection cannot write an output twice.
                self._drop_connection()
                if attempt == 2:
                    raise PostgresSinkUnavailableError(
                        f"{self._where}: output {first} not written: {error}"
                    ) from error
            except psycopg.Error as error:
                self._drop_connection()
                raise PostgresSinkUnavailableError(f"{self._where}: output {first} not written: {error}") from error

    # -- the connection ----------------------------------------------------------------------------------------

    def _connected(self) -> tuple[psycopg.Connection[Any], sql.Composed]:
        if self._connection is not None and not self._connection.closed and self._insert is not None:
            return self._connection, self._insert
        psycopg = _import_psycopg()
        milliseconds = int(self.timeout * 1000)
        connection = psycopg.connect(
            self.dsn,
            autocommit=True,  # each insert its own transaction, durable when execute returns
            connect_timeout=max(1, round(self.timeout)),
            options=f"-c statement_timeout={milliseconds} -c lock_timeout={milliseconds}",
            tcp_user_timeout=milliseconds,  # a silent peer: the kernel gives up on unacknowledged data
            keepalives=1,
            keepalives_idle=max(1, round(self.timeout)),
        )
        try:
            self._insert = self._prepare_table(connection)
        except BaseException:
            connection.close()
            raise
        self._connection = connection
        return connection, self._insert

    def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):  # already broken: nothing more to release
                connection.close()

    def open(self) -> PostgresSink:
        """Connect and check (or create) the table now rather than on the first output: a service can fail at
        start-up on a wrong DSN or table. Raises as a call would."""
        psycopg = _import_psycopg()
        with self._lock:
            try:
                self._connected()
            except psycopg.Error as error:
                self._drop_connection()
                raise PostgresSinkUnavailableError(f"{self._where}: cannot connect: {error}") from error
        return self

    def close(self) -> None:
        """Close the connection (a later call opens a new one)."""
        with self._lock:
            self._drop_connection()

    def __enter__(self) -> PostgresSink:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- the table ---------------------------------------------------------------------------------------------

    def _prepare_table(self, connection: psycopg.Connection[Any]) -> sql.Composed:
        """Create the table if asked and missing, check its shape, and return the insert statement."""
        from psycopg import sql

        schema = self.schema
        if schema is None:
            row = connection.execute("SELECT current_schema()").fetchone()
            schema = row[0] if row else None
            if schema is None:
                raise PostgresSinkTableError(f"{self._where}: the connection's search_path names no schema")
        name = sql.Identifier(schema, self.table)
        subscription, seq, value = (sql.Identifier(self.columns[key]) for key in ("subscription", "seq", "value"))
        if self.create:
            connection.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} ({} text NOT NULL, {} bigint NOT NULL, {} jsonb NOT NULL, "
                    "PRIMARY KEY ({}, {}))"
                ).format(name, subscription, seq, value, subscription, seq)
            )
        self._check_shape(connection, schema)
        return sql.SQL("INSERT INTO {} ({}, {}, {}) VALUES (%s, %s, %s::jsonb) ON CONFLICT ({}, {}) DO NOTHING").format(
            name, subscription, seq, value, subscription, seq
        )

    def _check_shape(self, connection: psycopg.Connection[Any], schema: str) -> None:
        found = connection.execute(
            "SELECT a.attname, format_type(a.atttypid, NULL) FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p') AND a.attnum > 0 "
            "AND NOT a.attisdropped",
            (schema, self.table),
        ).fetchall()
        if not found:
            raise PostgresSinkTableError(
                f"{self._where}: no such table (create it, or pass create=True): columns "
                f"{self.columns['subscription']} text, {self.columns['seq']} bigint, {self.columns['value']} jsonb, "
                f"primary key ({self.columns['subscription']}, {self.columns['seq']})"
            )
        types = dict(found)
        for role, allowed in (("subscription", _TEXT_TYPES), ("seq", _SEQ_TYPES), ("value", _VALUE_TYPES)):
            column = self.columns[role]
            if types.get(column) not in allowed:
                actual = "missing" if column not in types else f"of type {types[column]}"
                raise PostgresSinkTableError(
                    f"{self._where}: column {column!r} (the {role}) is {actual}; it must be one of "
                    f"{', '.join(sorted(allowed))}"
                )
        # ON CONFLICT needs a unique index on exactly these two key columns (in either order), neither partial
        # nor deferrable.
        unique = connection.execute(
            "SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s AND i.indisunique AND i.indpred IS NULL "
            "AND i.indimmediate AND i.indexprs IS NULL AND i.indnkeyatts = 2 "
            'AND (SELECT array_agg(a.attname::text ORDER BY a.attname::text COLLATE "C") FROM pg_attribute a '
            "     WHERE a.attrelid = c.oid AND a.attnum IN (i.indkey[0], i.indkey[1])) = %s",
            (schema, self.table, sorted([self.columns["subscription"], self.columns["seq"]])),
        ).fetchone()
        if unique is None:
            raise PostgresSinkTableError(
                f"{self._where}: no primary key or unique constraint on exactly "
                f"({self.columns['subscription']}, {self.columns['seq']}): repeats could not be recognized"
            )
